"""A middleware of the test settings: with ``TEST_STRICT_CSP = True`` (override_settings,
read on each request, so that the live server sees it too), every response carries
STRICT, the policy of a site that allows no inline script or style."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

STRICT = "default-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'self'"


def strict_csp(get_response: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def middleware(request: Any) -> Any:
        response = get_response(request)
        if getattr(settings, "TEST_STRICT_CSP", False):
            response["Content-Security-Policy"] = STRICT
        return response

    return middleware
