"""The portal's URLs: ``path("webhooks/", include("django_outbox.portal.urls"))``.

The pages are at the root (``""``, ``endpoints/…``, ``deliveries/…``), the API under
``api/v1/``; ``open/<token>/`` opens a ``webhooks.portal_url()`` link.
Ids in paths are matched as text and read by the API's wrapper, so a malformed one is a
404 problem like any id the tenant does not have, not the site's HTML 404 page."""

from __future__ import annotations

from django.urls import include, path

from django_outbox.portal import pages, views
from django_outbox.portal.api import deliveries, endpoints, event_types, messages
from django_outbox.portal.api.base import route
from django_outbox.webhooks.access import NAMESPACE

app_name = NAMESPACE

endpoint = "endpoints/<str:endpoint_id>/"
delivery = "deliveries/<str:delivery_id>/"

api = [
    path("openapi.json", views.openapi_document, name="openapi"),
    path("endpoints/", route(GET=endpoints.listed, POST=endpoints.create), name="endpoints"),
    path(
        endpoint,
        route(GET=endpoints.read, PATCH=endpoints.update, DELETE=endpoints.delete),
        name="endpoint",
    ),
    path(f"{endpoint}enable/", route(POST=endpoints.enable), name="endpoint-enable"),
    path(f"{endpoint}disable/", route(POST=endpoints.disable), name="endpoint-disable"),
    path(f"{endpoint}rotate-secret/", route(POST=endpoints.rotate_secret), name="endpoint-rotate"),
    path(f"{endpoint}test/", route(POST=endpoints.send_test), name="endpoint-test"),
    path(f"{endpoint}recover/", route(POST=endpoints.recover), name="endpoint-recover"),
    path("event-types/", route(GET=event_types.listed), name="event-types"),
    path("messages/", route(GET=messages.listed), name="messages"),
    path("messages/<str:message_id>/", route(GET=messages.read), name="message"),
    path("deliveries/", route(GET=deliveries.listed), name="deliveries"),
    path(delivery, route(GET=deliveries.read), name="delivery"),
    path(f"{delivery}resend/", route(POST=deliveries.resend), name="delivery-resend"),
    path(f"{delivery}attempts/", route(GET=deliveries.delivery_attempts), name="delivery-attempts"),
    path("attempts/", route(GET=deliveries.attempts), name="attempts"),
    path("attempts/<str:attempt_id>/", route(GET=deliveries.attempt), name="attempt"),
]

pages_ = [
    path("", pages.home, name="home"),
    path("endpoints/new/", pages.endpoint_new, name="page-endpoint-new"),
    path(endpoint, pages.endpoint, name="page-endpoint"),
    path(f"{endpoint}enable/", pages.enable, name="page-endpoint-enable"),
    path(f"{endpoint}disable/", pages.disable, name="page-endpoint-disable"),
    path(f"{endpoint}rotate-secret/", pages.rotate_secret, name="page-endpoint-rotate"),
    path(f"{endpoint}test/", pages.send_test, name="page-endpoint-test"),
    path(f"{endpoint}recover/", pages.recover, name="page-endpoint-recover"),
    path(f"{endpoint}delete/", pages.delete, name="page-endpoint-delete"),
    path(delivery, pages.delivery, name="page-delivery"),
    path("messages/", pages.messages, name="page-messages"),
    path("messages/<str:message_id>/", pages.message, name="page-message"),
    path("event-types/", pages.event_types, name="page-event-types"),
]

urlpatterns = [
    *pages_,
    path("open/<str:token>/", views.open_link, name="open"),
    path("api/v1/", include(api)),
]
