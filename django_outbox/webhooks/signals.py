"""Signals about webhook deliveries and endpoints, sent by the worker after it recorded them.

Each receives ``sender`` (the Delivery or Endpoint class) and the instance; the delivery
signals also get ``attempt`` (the Attempt just recorded, None when nothing was sent).
"""

from __future__ import annotations

from django.dispatch import Signal

#: An attempt failed; the delivery will be tried again (``next_attempt_at``).
webhook_delivery_failed = Signal()
#: The last attempt failed (or the failure was final): the delivery has failed.
webhook_delivery_exhausted = Signal()
#: A delivery succeeded after at least one failed attempt.
webhook_delivery_recovered = Signal()
#: An endpoint was disabled: it answered 410 Gone, or failed for too long (``reason``).
webhook_endpoint_disabled = Signal()
