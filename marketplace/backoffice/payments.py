"""Payment transitions made outside the API, and the accesses that follow them.

The transitions, and no other (a refused one writes nothing):

| Action | From | To | Access |
|---|---|---|---|
| confirm | pending, unpaid | paid | the buyer's access to the resource, created or reactivated as a purchase |
| fail | pending | unpaid | |
| refund | paid | refunded | the access it paid for is revoked (leaves the access lists and `purchases`) |
| dispute | paid | disputed | revoked as well: `paid` is the only status that grants access |
| win | disputed | paid | the access backed again, as confirm grants it: a purchase backed by this payment |
| lose | disputed | refunded | stays revoked |
| cancel | pending, unpaid | cancelled | |
| prune-checkouts | pending, older than a duration | cancelled | |

`cancelled` is final. An invoice (a payment without a resource) changes status only. A buyer who
paid twice for one resource keeps the access while one of the payments is `paid`: the access
stays backed by the first, and a refund of the payment backing it moves it to the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.backoffice import events
from marketplace.backoffice.accesses import access_fields
from marketplace.backoffice.actions import Change, Refused, timestamp, write_as_read
from marketplace.catalogue.payments import is_ulid
from marketplace.models import Access, AccessSource, Payment, PaymentStatus, utcnow

PENDING = PaymentStatus.PENDING.value
PAID = PaymentStatus.PAID.value
UNPAID = PaymentStatus.UNPAID.value


class Transition:
    """One named payment transition: the statuses it leaves and the one it reaches."""

    def __init__(
        self,
        verb: str,
        event: str,
        sources: tuple[PaymentStatus, ...],
        target: PaymentStatus,
        *,
        meaning: str | None = None,
    ) -> None:
        self.verb = verb
        self.event = event
        self.sources = tuple(status.value for status in sources)
        self.target = target.value
        # What the move means, where the two statuses do not say it ("dispute won").
        self.meaning = meaning


CONFIRM = Transition(
    "confirm", events.PAYMENT_CONFIRMED, (PaymentStatus.PENDING, PaymentStatus.UNPAID), PaymentStatus.PAID
)
FAIL = Transition("fail", events.PAYMENT_FAILED, (PaymentStatus.PENDING,), PaymentStatus.UNPAID)
REFUND = Transition("refund", events.PAYMENT_REFUNDED, (PaymentStatus.PAID,), PaymentStatus.REFUNDED)
DISPUTE = Transition("dispute", events.PAYMENT_DISPUTED, (PaymentStatus.PAID,), PaymentStatus.DISPUTED)
# A dispute settles: won, the payment stands again; lost, the money went back to the buyer.
WIN = Transition(
    "win", events.PAYMENT_DISPUTE_WON, (PaymentStatus.DISPUTED,), PaymentStatus.PAID, meaning="dispute won"
)
LOSE = Transition(
    "lose",
    events.PAYMENT_DISPUTE_LOST,
    (PaymentStatus.DISPUTED,),
    PaymentStatus.REFUNDED,
    meaning="dispute lost",
)
CANCEL = Transition(
    "cancel", events.PAYMENT_CANCELLED, (PaymentStatus.PENDING, PaymentStatus.UNPAID), PaymentStatus.CANCELLED
)
TRANSITIONS = {
    transition.verb: transition for transition in (CONFIRM, FAIL, REFUND, DISPUTE, WIN, LOSE, CANCEL)
}
# The transitions that make a payment `paid`, the only status that grants access, and those that
# leave `paid` or settle a dispute without it.
_GRANTING = (CONFIRM, WIN)
_REVOKING = (REFUND, DISPUTE, LOSE)


async def change_payment(session: AsyncSession, uid: str, transition: Transition) -> list[Change]:
    """Move the payment `uid` through `transition`, with its access; refused from any other status."""
    payment = await _locked_payment(session, uid)
    if payment.status not in transition.sources:
        raise Refused(
            f"cannot {transition.verb} payment {payment.uid}: it is {payment.status}"
            f" ({transition.verb} applies to {' or '.join(transition.sources)} payments)"
        )
    before = payment.status
    await write_as_read(
        session,
        update(Payment)
        .where(Payment.id == payment.id, Payment.status == before)
        .values(status=transition.target, updated_at=utcnow()),
        f"payment {payment.uid}",
    )
    effects: list[Mapping[str, Any]] = []
    access_id: int | None = None
    if transition in _GRANTING:
        access_id, effect = await _grant_purchase(session, payment)
        effects += [effect] if effect else []
    elif transition in _REVOKING:
        access_id, effect = await _revoke_purchase(session, payment)
        effects += [effect] if effect else []
    summary = f"payment {payment.uid}: {before} -> {transition.target}"
    if transition.meaning is not None:
        summary += f" ({transition.meaning})"
    for effect in effects:
        summary += f"; access {effect['access']} {effect['change']}"
    return [
        Change(
            event=transition.event,
            summary=summary,
            subject={"payment": payment.uid},
            before={"status": before},
            after={"status": transition.target},
            user_id=payment.buyer_id,
            resource_id=payment.resource_id,
            access_id=access_id,
            effects=effects,
        )
    ]


async def prune_checkouts(session: AsyncSession, older_than: timedelta) -> list[Change]:
    """Cancel every `pending` payment created more than `older_than` ago (abandoned checkouts)."""
    cutoff = utcnow() - older_than
    abandoned = (
        await session.scalars(
            select(Payment)
            .where(Payment.status == PENDING, Payment.created_at < cutoff)
            .order_by(Payment.id)
            .with_for_update(key_share=True)
        )
    ).all()
    changes = []
    for payment in abandoned:
        # Conditional: on SQLite the rows were read unlocked, and a checkout paid meanwhile stays paid.
        moved = await session.execute(
            update(Payment)
            .where(Payment.id == payment.id, Payment.status == PENDING)
            .values(status=CANCEL.target, updated_at=utcnow())
        )
        if moved.rowcount != 1:  # type: ignore[attr-defined]
            continue
        changes.append(
            Change(
                event=CANCEL.event,
                summary=f"payment {payment.uid}: pending -> cancelled (checkout of {timestamp(payment.created_at)})",
                subject={"payment": payment.uid},
                before={"status": PENDING},
                after={"status": CANCEL.target},
                user_id=payment.buyer_id,
                resource_id=payment.resource_id,
            )
        )
    return changes


async def _locked_payment(session: AsyncSession, uid: str) -> Payment:
    reference = uid.strip().upper()
    payment = None
    if is_ulid(reference):
        payment = await session.scalar(
            select(Payment).where(Payment.uid == reference).with_for_update(key_share=True)
        )
    if payment is None:
        raise Refused(f"no payment {uid!r}")
    return payment


async def _grant_purchase(
    session: AsyncSession, payment: Payment
) -> tuple[int | None, Mapping[str, Any] | None]:
    """The buyer's access to the paid resource, as a purchase backed by this payment."""
    if payment.resource_id is None or payment.buyer_id is None:
        return None, None
    access = await session.scalar(
        select(Access)
        .where(Access.user_id == payment.buyer_id, Access.resource_id == payment.resource_id)
        .with_for_update(key_share=True)
    )
    now = utcnow()
    after = {"source": AccessSource.PURCHASE.value, "payment_id": payment.id, "revoked": False}
    if access is None:
        access = Access(
            user_id=payment.buyer_id,
            resource_id=payment.resource_id,
            created_at=now,
            updated_at=now,
            **after,
        )
        try:
            async with session.begin_nested():
                session.add(access)
        except IntegrityError:
            # Another payment of the same buyer and resource, confirmed at the same moment.
            raise Refused(
                f"the access of user {payment.buyer_id} to resource {payment.resource_id} was created"
                " meanwhile; run the command again"
            ) from None
        return access.id, {"access": access.id, "change": "granted", "before": None, "after": after}
    before = access_fields(access)
    if not access.revoked and access.payment_id is not None and access.payment_id != payment.id:
        backer = await session.scalar(
            select(Payment.uid).where(Payment.id == access.payment_id, Payment.status == PAID)
        )
        if backer is not None:
            # Bought twice: the access stays the first payment's, so that refunding either one
            # leaves the buyer the access the other paid for.
            kept = f"kept (paid by payment {backer})"
            return access.id, {"access": access.id, "change": kept, "before": before, "after": before}
    # Read before the UPDATE, which refreshes the loaded row.
    change = "reactivated" if access.revoked else "now backed by this payment"
    await session.execute(update(Access).where(Access.id == access.id).values(updated_at=now, **after))
    return access.id, {"access": access.id, "change": change, "before": before, "after": after}


async def _revoke_purchase(
    session: AsyncSession, payment: Payment
) -> tuple[int | None, Mapping[str, Any] | None]:
    """Revoke the access this payment paid for (or, for imported rows, the buyer's unlinked purchase)."""
    if payment.resource_id is None:
        return None, None
    backed_by_it = Access.payment_id == payment.id
    unlinked_purchase = (
        (Access.user_id == payment.buyer_id)
        & (Access.resource_id == payment.resource_id)
        & (Access.source == AccessSource.PURCHASE.value)
        & Access.payment_id.is_(None)
    )
    access = await session.scalar(
        select(Access)
        .where(or_(backed_by_it, unlinked_purchase), Access.revoked.is_(False))
        .order_by(Access.payment_id.is_(None), Access.id)
        .limit(1)
        .with_for_update(key_share=True)
    )
    if access is None:
        return None, None
    before = access_fields(access)
    other_payment = await session.scalar(
        select(Payment)
        .where(
            Payment.buyer_id == payment.buyer_id,
            Payment.resource_id == payment.resource_id,
            Payment.status == PAID,
            Payment.id != payment.id,
        )
        .order_by(Payment.id)
        .limit(1)
    )
    if other_payment is not None:
        # Another paid payment of the same buyer and resource still pays for the access.
        after = {**before, "payment_id": other_payment.id}
        await session.execute(
            update(Access)
            .where(Access.id == access.id)
            .values(payment_id=other_payment.id, updated_at=utcnow())
        )
        change = f"kept (paid by payment {other_payment.uid})"
        return access.id, {"access": access.id, "change": change, "before": before, "after": after}
    await session.execute(
        update(Access).where(Access.id == access.id).values(revoked=True, updated_at=utcnow())
    )
    return access.id, {
        "access": access.id,
        "change": "revoked",
        "before": before,
        "after": {**before, "revoked": True},
    }
