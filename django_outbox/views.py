"""The health URL: ``outbox_health``'s figures as JSON, for a staff user or a bearer token.

Include it where you like::

    path("outbox/", include("django_outbox.urls"))   # GET /outbox/health/
"""

from __future__ import annotations

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.crypto import constant_time_compare
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from django_outbox import conf, health


def _allowed(request: HttpRequest) -> bool:
    token = conf.get().HEALTH.TOKEN
    given = request.headers.get("Authorization", "")
    if token and given.startswith("Bearer "):
        return constant_time_compare(given.removeprefix("Bearer ").strip(), token)
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


@never_cache
@require_GET
def health_view(request: HttpRequest) -> HttpResponse:
    """200 with the figures when healthy, 503 when not; 403 without staff or the token.

    ``?queues=a,b`` names queues that must have a live worker."""
    if not _allowed(request):
        reason = (
            "forbidden: sign in as a staff user, or send "
            "Authorization: Bearer <OUTBOX['HEALTH']['TOKEN']>"
            if conf.get().HEALTH.TOKEN
            else "forbidden: staff only (OUTBOX['HEALTH']['TOKEN'] is not set)"
        )
        return JsonResponse({"ok": False, "reason": reason}, status=403)
    queues = request.GET.get("queues")
    try:
        found = health.check(
            [q.strip() for q in queues.split(",") if q.strip()] if queues else None
        )
    except DatabaseError as exc:
        reason = f"unhealthy: the database cannot be read ({type(exc).__name__})"
        return JsonResponse({"ok": False, "reason": reason}, status=503)
    return JsonResponse(found.as_dict(), status=200 if found.ok else 503)
