"""Delivery health per endpoint, as the portal shows it: the success rate of the last day
(from the hourly counts the recorder keeps, a few rows per endpoint, never the attempt
log), failures in a row and since when, and the latest failed attempts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Sum
from django.utils import timezone

from django_outbox.models import Attempt, Endpoint
from django_outbox.portal.scoping import Scope

WINDOW = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class Health:
    attempts: int
    succeeded: int

    @property
    def rate(self) -> float | None:
        """Succeeded attempts out of all in the window, 0 to 1; None: no attempt."""
        return self.succeeded / self.attempts if self.attempts else None

    @property
    def percent(self) -> str:
        return "no attempts" if self.rate is None else f"{self.rate:.0%}"


def of(scope: Scope, endpoints: list[Endpoint]) -> dict[int, Health]:
    """Each endpoint's health over the last day, in one query."""
    since = timezone.now() - WINDOW
    counts = (
        scope.endpoint_hours()
        .filter(endpoint__in=[e.pk for e in endpoints], hour__gte=since)
        .values("endpoint_id")
        .annotate(attempts=Sum("attempts"), succeeded=Sum("succeeded"))
    )
    found = {row["endpoint_id"]: Health(row["attempts"], row["succeeded"]) for row in counts}
    return {e.pk: found.get(e.pk, Health(0, 0)) for e in endpoints}


def last_failures(scope: Scope, endpoint: Endpoint, count: int = 5) -> list[Attempt]:
    found = scope.attempts().filter(delivery__endpoint=endpoint, succeeded=False)
    return list(found.select_related("delivery__message").order_by("-pk")[:count])
