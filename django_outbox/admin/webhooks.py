"""The admin for webhooks: endpoints, messages, deliveries and the attempt log, linked to
each other, with the operations of ``django_outbox.webhooks`` as actions.

One module over 400 lines: the four model admins link to one another (an endpoint's
deliveries, a delivery's attempts, a message's deliveries) and share their actions'
reporting; split, each would import the others.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_outbox import conf, webhooks
from django_outbox.admin import display, lists, rounds
from django_outbox.admin.jobs import ReadOnlyAdmin
from django_outbox.lib.text import count, duration
from django_outbox.models import (
    Attempt,
    Delivery,
    DeliveryStatus,
    Endpoint,
    Message,
    SignatureScheme,
)
from django_outbox.webhooks import headers as endpoint_headers
from django_outbox.webhooks import signing


def link(obj: Any, text: Any = None) -> SafeString:
    """A link to ``obj``'s page in the admin."""
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, text if text is not None else obj)


def list_link(model: Any, text: str, **filters: Any) -> SafeString:
    """A link to ``model``'s list, filtered."""
    meta = model._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
    query = "&".join(f"{name}={value}" for name, value in filters.items())
    return format_html('<a href="{}?{}">{}</a>', url, query, text)


def resend_all(
    admin_: admin.ModelAdmin, request: HttpRequest, deliveries: QuerySet[Delivery]
) -> None:
    """Resend each delivery (a new round), and say how many went and how many were busy."""
    queued = busy = 0
    for delivery in deliveries:
        if webhooks.resend(delivery):
            queued += 1
        else:
            busy += 1
    text = f"Deliveries queued again: {queued:,}."
    if busy:
        were, they = ("was", "it was") if busy == 1 else ("were", "they were")
        text += (
            f" {count(busy, 'delivery', 'deliveries')} already being delivered {were} left"
            f" as {they}."
        )
    admin_.message_user(request, text, messages.SUCCESS if queued else messages.WARNING)


def _skipped(disabled: int) -> str:
    return f"{count(disabled, 'disabled endpoint')} {'was' if disabled == 1 else 'were'} skipped."


def _new_key_message(endpoint: Endpoint, grace: float | None = None) -> str:
    """What a rotation gave the receiver to verify with, and how long the old key signs."""
    if grace is None:
        grace = conf.get().WEBHOOKS.ROTATION_GRACE_SECONDS
    expires = endpoint.previous_secret_expires_at
    previous = (
        f"the previous one also signs for {duration(grace)}, "
        f"until {timezone.localtime(expires):%Y-%m-%d %H:%M}"
        if grace and expires is not None
        else "the previous one signs no more"
    )
    key = webhooks.verification_key(endpoint)
    if endpoint.signature_scheme == SignatureScheme.V1A:
        return f"New public key of {endpoint.url} ({endpoint.signature_scheme}; {previous}): {key}"
    return f"New secret of {endpoint.url} (shown once; {previous}): {key}"


class RecoverForm(forms.Form):
    since = forms.DateTimeField(
        label="Resend the failed deliveries created since",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"],
    )


class EndpointForm(forms.ModelForm):
    """What the endpoint's page edits: its own headers and its signature scheme, checked as
    ``webhooks.update_endpoint()`` checks them (the rest changes through the actions)."""

    class Meta:
        model = Endpoint
        fields = ["signature_scheme", "headers"]
        help_texts = {
            "headers": 'Sent with every request, as a JSON object: {"X-Api-Key": "…"}. '
            "Standard Webhooks' webhook-* headers and the request's own (content-type, "
            "host …) are reserved.",
            "signature_scheme": "A change is a rotation: a new key of the new scheme signs "
            "from now on, the old one too for OUTBOX['WEBHOOKS']['ROTATION_GRACE_SECONDS'].",
        }

    def clean_headers(self) -> dict[str, str]:
        return endpoint_headers.clean(self.cleaned_data.get("headers"))

    def clean_signature_scheme(self) -> str:
        scheme: str = self.cleaned_data["signature_scheme"]
        if scheme not in webhooks.signature_schemes():
            raise ValidationError(
                f"The signature scheme {scheme!r} needs the cryptography package, which is "
                f"not installed here: {signing.ED25519_INSTALL}."
            )
        return scheme


#: The endpoint page's fields, in order; all but the form's are read-only.
_ENDPOINT_FIELDS: list[str] = [
    "url",
    "tenant",
    "description",
    "event_types",
    "signature_scheme",
    "verifies_with",
    "masked_secret",
    "masked_previous_secret",
    "previous_secret_expires_at",
    "headers",
    "active",
    "disabled_reason",
    "disabled_at",
    "timeout",
    "rate_limit",
    "failing_since",
    "consecutive_failures",
    "created_at",
    "deliveries",
]


@admin.register(Endpoint)
class EndpointAdmin(ReadOnlyAdmin):
    list_display = ["address", "tenant_name", "state", "event_type_patterns", "failures"]
    list_filter = ["active", "tenant", "created_at"]
    search_fields = ["url", "tenant", "description"]
    ordering = ["-id"]
    form = EndpointForm
    # Django 6's default; said outright so Django 5.2 does not warn that it changes.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    # The secrets are shown once, when created or rotated: here only masked. A v1a
    # endpoint's public key is no secret: it is shown.
    fields = tuple(_ENDPOINT_FIELDS)
    readonly_fields = [f for f in _ENDPOINT_FIELDS if f not in EndpointForm.Meta.fields]
    actions = ["enable", "disable", "rotate_secret", "send_test_event", "recover"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Its headers and signature scheme are edited on its page (the rest is read-only)."""
        return self.has_act_permission(request)

    def save_model(self, request: HttpRequest, obj: Endpoint, form: Any, change: bool) -> None:
        current = Endpoint.objects.get(pk=obj.pk)
        scheme = form.cleaned_data["signature_scheme"]
        rotated = scheme != current.signature_scheme
        webhooks.update_endpoint(
            current, headers=form.cleaned_data["headers"], signature_scheme=scheme
        )
        obj.__dict__.update(current.__dict__)
        if rotated:
            self.message_user(request, _new_key_message(current), messages.SUCCESS)

    @admin.display(description="receivers verify with")
    def verifies_with(self, endpoint: Endpoint) -> SafeString | str:
        public = webhooks.public_key(endpoint) if signing.ed25519_available() else None
        if public is not None:
            return format_html("<code>{}</code> (the public key: no secret)", public)
        if endpoint.signature_scheme == SignatureScheme.V1A:
            return f"a whpk_ public key (install cryptography to see it: {signing.ED25519_INSTALL})"
        return "the secret, shown once when it was created or rotated"

    @admin.display(description="URL", ordering="url")
    def address(self, endpoint: Endpoint) -> SafeString | str:
        return display.cut(endpoint.url)

    @admin.display(description="tenant", ordering="tenant")
    def tenant_name(self, endpoint: Endpoint) -> SafeString | str:
        return display.cut(endpoint.tenant, 10)

    @admin.display(description="state", ordering="active")
    def state(self, endpoint: Endpoint) -> SafeString:
        if endpoint.active:
            return display.status_badge("succeeded", "active")
        return display.status_badge("failed", "disabled", title=endpoint.disabled_reason)

    @admin.display(description="event types")
    def event_type_patterns(self, endpoint: Endpoint) -> SafeString | str:
        return display.cut(", ".join(endpoint.event_types) or "all", 12)

    @admin.display(description="failures", ordering="consecutive_failures")
    def failures(self, endpoint: Endpoint) -> SafeString:
        since = endpoint.failing_since
        title = f"in a row, since {timezone.localtime(since):%Y-%m-%d %H:%M:%S}" if since else ""
        return format_html('<span title="{}">{}</span>', title, endpoint.consecutive_failures)

    @admin.display(description="secret")
    def masked_secret(self, endpoint: Endpoint) -> str:
        return display.masked(endpoint.secret)

    @admin.display(description="previous secret")
    def masked_previous_secret(self, endpoint: Endpoint) -> str:
        return display.masked(endpoint.previous_secret)

    @admin.display(description="deliveries")
    def deliveries(self, endpoint: Endpoint) -> SafeString:
        return list_link(Delivery, "this endpoint's deliveries", endpoint__id__exact=endpoint.pk)

    @admin.action(description="Enable", permissions=["act"])
    def enable(self, request: HttpRequest, queryset: QuerySet[Endpoint]) -> None:
        endpoints = list(queryset)
        for endpoint in endpoints:
            webhooks.enable(endpoint)
        self.message_user(request, f"Endpoints enabled: {len(endpoints):,}.", messages.SUCCESS)

    @admin.action(description="Disable", permissions=["act"])
    def disable(self, request: HttpRequest, queryset: QuerySet[Endpoint]) -> None:
        endpoints = list(queryset)
        reason = f"in the admin by {request.user}"  # reads "disabled: in the admin by …"
        for endpoint in endpoints:
            webhooks.disable(endpoint, reason)
        self.message_user(request, f"Endpoints disabled: {len(endpoints):,}.", messages.SUCCESS)

    @admin.action(description="Rotate the signing secret", permissions=["act"])
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[Endpoint]) -> None:
        grace = conf.get().WEBHOOKS.ROTATION_GRACE_SECONDS
        for endpoint in queryset:
            try:
                webhooks.rotate_secret(endpoint)
            except ValidationError as exc:  # a v1a endpoint where cryptography is missing
                self.message_user(request, f"{endpoint.url}: {exc.messages[0]}", messages.ERROR)
                continue
            self.message_user(request, _new_key_message(endpoint, grace), messages.SUCCESS)

    @admin.action(description="Send a test event", permissions=["act"])
    def send_test_event(self, request: HttpRequest, queryset: QuerySet[Endpoint]) -> None:
        sent = refused = 0
        for endpoint in queryset:
            try:
                webhooks.send_test(endpoint)
                sent += 1
            except ValidationError:
                refused += 1  # disabled
        text = f"Test events queued: {sent:,}."
        if refused:
            text += f" {_skipped(refused)}"
        self.message_user(request, text, messages.SUCCESS if sent else messages.WARNING)

    @admin.action(description="Resend failed deliveries since a time…", permissions=["act"])
    def recover(self, request: HttpRequest, queryset: QuerySet[Endpoint]) -> HttpResponse | None:
        form = RecoverForm(request.POST if "since" in request.POST else None)
        if form.is_valid():
            since = form.cleaned_data["since"]
            queued = skipped = 0
            for endpoint in queryset:
                try:
                    queued += webhooks.recover(endpoint, since)
                except ValidationError:
                    skipped += 1
            text = f"Failed deliveries queued again: {queued:,}."
            if skipped:
                text += f" {_skipped(skipped)}"
            self.message_user(request, text, messages.SUCCESS if queued else messages.WARNING)
            return None
        if "since" not in request.POST:
            form = RecoverForm(initial={"since": timezone.localtime() - timedelta(days=1)})
        return TemplateResponse(
            request,
            "admin/django_outbox/recover.html",
            {
                **self.admin_site.each_context(request),
                "title": "Resend failed deliveries",
                "opts": self.model._meta,
                "endpoints": queryset,
                "form": form,
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
            },
        )


class DeliveryInline(admin.TabularInline):
    model = Delivery
    readonly_fields = [
        "delivery",
        "endpoint",
        "status",
        "attempts",
        "next_attempt_at",
        "last_attempt_at",
    ]
    fields = tuple(readonly_fields)
    extra = 0
    can_delete = False
    show_change_link = False

    @admin.display(description="delivery")
    def delivery(self, delivery: Delivery) -> SafeString:
        return link(delivery, f"#{delivery.pk}")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ["id", "event", "tenant_name", "key", "created", "sent"]
    list_filter = [lists.EventTypeFilter, lists.TenantFilter]
    date_hierarchy = "created_at"
    search_fields = ["=uid", "=event_type", "=idempotency_key", "=tenant"]
    ordering = ["-id"]
    exclude = ["body"]
    readonly_fields = ["signed_body", "payload"]
    inlines = [DeliveryInline]
    actions = ["replay"]

    @admin.display(description="event type", ordering="event_type")
    def event(self, message: Message) -> SafeString | str:
        return display.cut(message.event_type, 16)

    @admin.display(description="tenant", ordering="tenant")
    def tenant_name(self, message: Message) -> SafeString | str:
        return display.cut(message.tenant, 10)

    @admin.display(description="idempotency key")
    def key(self, message: Message) -> SafeString | str:
        return display.cut(message.idempotency_key or "")

    @admin.display(description="created", ordering="created_at")
    def created(self, message: Message) -> SafeString | str:
        return display.ago(message.created_at, "created")

    @admin.display(description="deliveries")
    def sent(self, message: Message) -> SafeString:
        return list_link(Delivery, "deliveries", message__id__exact=message.pk)

    @admin.display(description="body (as sent and signed, byte for byte)")
    def signed_body(self, message: Message) -> SafeString:
        """The text the signature covers, to recompute it with the endpoint's secret."""
        return display.preformatted(message.body)

    @admin.display(description="body, indented")
    def payload(self, message: Message) -> SafeString:
        return display.pretty_json(message.body)

    @admin.action(description="Replay to all its endpoints", permissions=["act"])
    def replay(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        deliveries = Delivery.objects.filter(message__in=queryset).select_related("endpoint")
        resend_all(self, request, deliveries)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["id", "event", "endpoint_link", "coloured_status", "attempts", "when"]
    list_filter = [
        "status",
        ("endpoint", admin.RelatedOnlyFieldListFilter),
        lists.DeliveryTenantFilter,
    ]
    date_hierarchy = "created_at"
    # A page's messages and endpoints come in one query each (get_queryset), not joined:
    # with the join, MariaDB's planner starts from the messages and sorts every delivery
    # to show the newest hundred.
    list_select_related = ()
    search_fields = ["=message__uid", "message__event_type", "=message__idempotency_key"]
    ordering = ["-id"]
    readonly_fields = ["message_link", "endpoint_link", "attempts_this_round"]
    fields = [
        "message_link",
        "endpoint_link",
        "status",
        "attempts_this_round",
        "next_attempt_at",
        "last_attempt_at",
        "resent_at",
        "created_at",
    ]
    actions = ["resend"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).prefetch_related("message", "endpoint")

    @admin.display(description="message", ordering="message")
    def message_link(self, delivery: Delivery) -> SafeString:
        return link(delivery.message, f"{delivery.message.event_type} ({delivery.message.uid})")

    @admin.display(description="message", ordering="message")
    def event(self, delivery: Delivery) -> SafeString:
        return link(delivery.message, display.cut(delivery.message.event_type, 14))

    @admin.display(description="endpoint", ordering="endpoint")
    def endpoint_link(self, delivery: Delivery) -> SafeString:
        return link(delivery.endpoint, display.cut(delivery.endpoint.url))

    @admin.display(description="attempts in its current round")
    def attempts_this_round(self, delivery: Delivery) -> int:
        return delivery.attempts

    @admin.display(description="when")
    def when(self, delivery: Delivery) -> SafeString | str:
        """Pending: when it is next tried; otherwise when it was last tried."""
        if delivery.status == DeliveryStatus.PENDING and delivery.next_attempt_at is not None:
            due = delivery.next_attempt_at - timezone.now()
            text = f"next in {display.duration(due)}" if due.total_seconds() > 0 else "due now"
            return display.dated(text, delivery.next_attempt_at, "next attempt")
        if delivery.last_attempt_at is not None:
            return display.ago(delivery.last_attempt_at, "last attempt")
        return display.ago(delivery.created_at, "created")

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Delivery | None = None,
    ) -> HttpResponse:
        """The page lists every attempt, labelled by its round: a resend numbers its
        attempts from 1 again (see rounds.py)."""
        if obj is not None:
            attempts = list(obj.attempt_log.order_by("started_at", "id"))
            found = rounds.rounds([(a.pk, a.number) for a in attempts])
            context["attempt_rows"] = [
                {
                    "attempt": attempt,
                    "label": rounds.label(attempt, found[attempt.pk]),
                    "took": display.duration(attempt.duration),
                    "outcome": outcome(attempt),
                    "error": display.cut(display.first_line(attempt.error_message, limit=1000)),
                }
                for attempt in attempts
            ]
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="status", ordering="status")
    def coloured_status(self, delivery: Delivery) -> SafeString:
        return display.status_badge(delivery.status)

    @admin.action(description="Resend now (a new round of attempts)", permissions=["act"])
    def resend(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        resend_all(self, request, queryset)


def outcome(attempt: Attempt) -> SafeString:
    """The status code, or the error's class for a request that got no answer."""
    if attempt.status_code:
        label, title = str(attempt.status_code), ""
    else:
        label, title = attempt.error_class.rsplit(".", 1)[-1], attempt.error_class
    return display.status_badge("succeeded" if attempt.succeeded else "failed", label, title)


class AttemptChangeList(ChangeList):
    """Finds each listed attempt's round: one query over the listed deliveries' attempts."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        found = rounds.rounds_of(attempt.delivery_id for attempt in self.result_list)
        for attempt in self.result_list:
            attempt.round = found.get(attempt.pk)  # read by AttemptAdmin.attempt


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ["attempt", "delivery_link", "started", "took", "outcome", "error"]
    list_filter = ["succeeded", lists.AnswerFilter]
    date_hierarchy = "started_at"
    list_select_related = ["delivery"]
    ordering = ["-id"]
    # The duration as people read it ("70 ms"), not the stored float of seconds.
    exclude = ["delivery", "duration", "response_headers", "response_body"]
    readonly_fields = ["delivery_link", "took", "headers", "body"]
    actions: list[str] = []

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return AttemptChangeList

    @admin.display(description="attempt", ordering="id")
    def attempt(self, attempt: Attempt) -> str:
        return rounds.label(attempt, getattr(attempt, "round", None))

    @admin.display(description="delivery", ordering="delivery")
    def delivery_link(self, attempt: Attempt) -> SafeString:
        return link(attempt.delivery, f"#{attempt.delivery_id}")

    @admin.display(description="started", ordering="started_at")
    def started(self, attempt: Attempt) -> SafeString | str:
        return display.ago(attempt.started_at, "started")

    @admin.display(description="took", ordering="duration")
    def took(self, attempt: Attempt) -> str:
        return display.duration(attempt.duration)

    @admin.display(description="outcome", ordering="status_code")
    def outcome(self, attempt: Attempt) -> SafeString:
        return outcome(attempt)

    @admin.display(description="error")
    def error(self, attempt: Attempt) -> SafeString | str:
        return display.cut(display.first_line(attempt.error_message, limit=1000))

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Attempt | None = None,
    ) -> HttpResponse:
        """Titled by its round and number ('Round 2, attempt 1 of delivery #7'): the
        number alone repeats after a resend."""
        if obj is not None:
            found = rounds.rounds_of([obj.delivery_id])
            name = f"{rounds.label(obj, found.get(obj.pk))} of delivery #{obj.delivery_id}"
            context["subtitle"] = context["attempt_label"] = name[:1].upper() + name[1:]
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="response headers")
    def headers(self, attempt: Attempt) -> SafeString:
        return display.pretty_json(attempt.response_headers)

    @admin.display(description="response body (first 4 KiB)")
    def body(self, attempt: Attempt) -> SafeString:
        return display.preformatted(attempt.response_body)
