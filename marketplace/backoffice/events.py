"""The events the activity log holds: every change the back office makes, and the API's grant.

Each writer names its event from here, and `marketplace activity --action` accepts these and no
other (an unknown event is a typing error, not an empty log). The importer and the fixture loader
write no entry.
"""

from __future__ import annotations

from marketplace.catalogue.access_grants import GRANTED_EVENT
from marketplace.webhooks.events import (
    DELIVERY_REDELIVERED,
    SECRET_ROTATED,
    SUBSCRIPTION_ADDED,
    SUBSCRIPTION_DISABLED,
    SUBSCRIPTION_ENABLED,
    SUBSCRIPTION_REMOVED,
    SUBSCRIPTION_TESTED,
)

PAYMENT_CONFIRMED = "payment.confirmed"
PAYMENT_FAILED = "payment.failed"
PAYMENT_REFUNDED = "payment.refunded"
PAYMENT_DISPUTED = "payment.disputed"
PAYMENT_DISPUTE_WON = "payment.dispute_won"
PAYMENT_DISPUTE_LOST = "payment.dispute_lost"
PAYMENT_CANCELLED = "payment.cancelled"
# Written by the back office and by the API's grant (`marketplace/catalogue/access_grants.py`).
ACCESS_GRANTED = GRANTED_EVENT
ACCESS_REVOKED = "access.revoked"
RESOURCE_STATUS_CHANGED = "resource.status_changed"
RESOURCE_DELETED = "resource.deleted"
RESOURCE_RESTORED = "resource.restored"
RESOURCE_VERSION_RELEASED = "resource.version_released"
RESOURCE_VERSION_PROMOTED = "resource.version_promoted"
RESOURCE_STATS_ID_CHANGED = "resource.stats_id_changed"
GIFT_CREATED = "gift.created"
GIFT_ENABLED = "gift.enabled"
GIFT_DISABLED = "gift.disabled"
USER_BANNED = "user.banned"
USER_UNBANNED = "user.unbanned"
USER_CLOSED = "user.closed"
USER_REOPENED = "user.reopened"
USER_DELETED = "user.deleted"
USER_RESTORED = "user.restored"
CHAT_ACCOUNT_LINKED = "chat_account.linked"
CHAT_ACCOUNT_UNLINKED = "chat_account.unlinked"

EVENTS = (
    PAYMENT_CONFIRMED,
    PAYMENT_FAILED,
    PAYMENT_REFUNDED,
    PAYMENT_DISPUTED,
    PAYMENT_DISPUTE_WON,
    PAYMENT_DISPUTE_LOST,
    PAYMENT_CANCELLED,
    ACCESS_GRANTED,
    ACCESS_REVOKED,
    RESOURCE_STATUS_CHANGED,
    RESOURCE_DELETED,
    RESOURCE_RESTORED,
    RESOURCE_VERSION_RELEASED,
    RESOURCE_VERSION_PROMOTED,
    RESOURCE_STATS_ID_CHANGED,
    GIFT_CREATED,
    GIFT_ENABLED,
    GIFT_DISABLED,
    USER_BANNED,
    USER_UNBANNED,
    USER_CLOSED,
    USER_REOPENED,
    USER_DELETED,
    USER_RESTORED,
    CHAT_ACCOUNT_LINKED,
    CHAT_ACCOUNT_UNLINKED,
    # Webhook subscriptions (`marketplace/backoffice/webhooks.py`); `webhook.disabled` is also
    # written by delivery itself, by the system user `marketplace`.
    SUBSCRIPTION_ADDED,
    SUBSCRIPTION_ENABLED,
    SUBSCRIPTION_DISABLED,
    SUBSCRIPTION_REMOVED,
    SUBSCRIPTION_TESTED,
    SECRET_ROTATED,
    DELIVERY_REDELIVERED,
)
