"""Outgoing webhooks: subscriptions, the outbox of events, signed deliveries.

How an event travels, and why nothing is lost:

1. A change is made (the API's grant, the back office, `load`, the importer, any SQL): triggers
   write an event row in `webhook_events` in the same transaction (migration 0009), so the event
   exists if and only if the change was committed.
2. A serving worker dispatches it (`outbox.py`): in one transaction it marks the event dispatched
   and writes one delivery per subscription that wants it, with the body to send. Workers on every
   host do this at once without meeting: each claims events with `FOR UPDATE SKIP LOCKED` on
   PostgreSQL; SQLite has one writer at a time.
3. A serving worker sends each due delivery (`delivery.py`): it claims it first (the same way),
   which moves its due time a lease ahead, then POSTs the signed body (`sending.py`, to
   destinations `destinations.py` allows), then records the outcome under its claim. A worker that
   dies between sending and recording leaves the claim to lapse: the delivery is sent again (a
   receiver may see it twice, with the same delivery id) but never lost. A failed attempt is
   retried with exponential backoff and jitter for a day.
"""
