"""The relational schema: one module per table."""

from marketplace.models.access import Access, AccessSource
from marketplace.models.activity import Activity
from marketplace.models.base import Base, utcnow
from marketplace.models.category import Category
from marketplace.models.chat_account import ChatAccount
from marketplace.models.gift import Gift
from marketplace.models.payment import Payment, PaymentStatus
from marketplace.models.resource import PUBLIC_STATUSES, Resource, ResourceStatus
from marketplace.models.resource_counts import ResourceCounts, rating_average
from marketplace.models.review import Review
from marketplace.models.user import User
from marketplace.models.version import Version
from marketplace.models.webhook import (
    DeliveryState,
    SubscriptionFormat,
    WebhookDelivery,
    WebhookEvent,
    WebhookSubscription,
)

__all__ = [
    "PUBLIC_STATUSES",
    "Access",
    "AccessSource",
    "Activity",
    "Base",
    "Category",
    "ChatAccount",
    "DeliveryState",
    "Gift",
    "Payment",
    "PaymentStatus",
    "Resource",
    "ResourceCounts",
    "ResourceStatus",
    "Review",
    "SubscriptionFormat",
    "User",
    "Version",
    "WebhookDelivery",
    "WebhookEvent",
    "WebhookSubscription",
    "rating_average",
    "utcnow",
]
