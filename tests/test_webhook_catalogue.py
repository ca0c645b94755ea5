"""The event-type catalogue, OUTBOX["WEBHOOKS"]["EVENT_TYPES"]: its system checks, the
declared types as the portal lists them, unknown event types, endpoint filters, and payloads
checked against their schema (VALIDATE_PAYLOADS, or settings.DEBUG)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from django.conf import settings
from django.core import checks
from django.core.exceptions import ValidationError
from django.test import override_settings

from django_outbox import webhooks
from django_outbox.compat import task_backends
from django_outbox.models import Delivery, Endpoint, Job, Message

pytestmark = pytest.mark.django_db(transaction=True)

INVOICE_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "amount": {"type": "string", "pattern": r"^\d+\.\d{2}$"},
        "paid_on": {"type": "string", "format": "date"},
    },
    "required": ["id", "amount"],
    "additionalProperties": False,
}
CATALOGUE: dict[str, Any] = {
    "invoice.paid": {
        "description": "An invoice was paid in full.",
        "example": {"id": 7, "amount": "12.00"},
        "schema": INVOICE_SCHEMA,
    },
    "invoice.created": {"description": "A new invoice.", "example": {"id": 7}},
    "user.deleted": {"description": "A user closed their account.", "example": {"id": "u_1"}},
}


def outbox(**webhook_settings: Any) -> override_settings:
    """The tests' OUTBOX, with these OUTBOX["WEBHOOKS"] settings on top."""
    current = settings.OUTBOX
    return override_settings(
        OUTBOX={**current, "WEBHOOKS": {**current["WEBHOOKS"], **webhook_settings}}
    )


def rows() -> dict[str, list[dict[str, Any]]]:
    return {
        m.__name__: list(m.objects.order_by("pk").values())
        for m in (Endpoint, Message, Delivery, Job)
    }


@pytest.fixture
def stored() -> Any:
    """An endpoint and a message sent to it; the returned check is true while every row is
    exactly as it was."""
    with outbox(EVENT_TYPES=CATALOGUE):
        webhooks.create_endpoint("https://hooks.example.com/in", event_types=["invoice.*"])
        webhooks.send("invoice.paid", {"id": 1, "amount": "1.00"})
    before = rows()
    return lambda: rows() == before


def check_errors(**webhook_settings: Any) -> list[checks.CheckMessage]:
    # The task backends are built once, and one built while OUTBOX is invalid never serves
    # the webhooks queue: build them now, with the tests' valid settings.
    task_backends.all()
    with outbox(**webhook_settings):
        found = checks.run_checks(databases=["default"])
    return [e for e in found if e.id.startswith("django_outbox.E")]


# -- the setting ---------------------------------------------------------------------------

W = "OUTBOX['WEBHOOKS']['EVENT_TYPES']"
BAD_CATALOGUES: list[tuple[str, Any, str]] = [
    ("a list", ["invoice.paid"], f"{W} must be a dict of event-type names to their description, "
     "example and optional schema, not list."),
    ("a name with a space", {"invoice paid": CATALOGUE["invoice.created"]},
     f"{W}['invoice paid']: 'invoice paid' is not an event type name: use 1 to 255 letters"),
    ("an entry that is a string", {"invoice.paid": "paid"},
     f"{W}['invoice.paid'] must be a dict: "),
    ("an unknown key", {"invoice.paid": {"description": "x", "example": {}, "shema": {}}},
     f"{W}['invoice.paid']['shema'] is not a known key (known: description, example, schema)."),
    ("no description", {"invoice.paid": {"example": {}}},
     f"{W}['invoice.paid']['description'] must be a non-empty string, not None."),
    ("no example", {"invoice.paid": {"description": "Paid."}},
     f"{W}['invoice.paid'] needs an 'example': a payload as send() would be given it."),
    ("an example JSON cannot hold", {"invoice.paid": {"description": "x", "example": {1, 2}}},
     f"{W}['invoice.paid']['example'] must be a JSON value (Object of type set is not JSON "
     "serializable)."),
    ("a schema that is a string", {"invoice.paid": {"description": "x", "example": {},
     "schema": "object"}},
     f"{W}['invoice.paid']['schema'] must be a JSON Schema (a dict), not str."),
    ("a schema that is no JSON Schema", {"invoice.paid": {"description": "x", "example": {},
     "schema": {"type": "objet"}}},
     f"{W}['invoice.paid']['schema']['type'] is not a valid JSON Schema: 'objet' is not valid"),
    ("an example its schema refuses", {"invoice.paid": {"description": "x",
     "example": {"id": "7", "amount": "1.00"}, "schema": INVOICE_SCHEMA}},
     f"{W}['invoice.paid']['example'] does not match its own schema: at $.id, '7' is not of "
     "type 'integer'."),
    ("an example with a bad date", {"invoice.paid": {"description": "x",
     "example": {"id": 7, "amount": "1.00", "paid_on": "yesterday"}, "schema": INVOICE_SCHEMA}},
     f"{W}['invoice.paid']['example'] does not match its own schema: at $.paid_on, 'yesterday' "
     "is not a 'date'."),
]  # fmt: skip


@pytest.mark.parametrize(
    ("catalogue", "says"), [c[1:] for c in BAD_CATALOGUES], ids=[c[0] for c in BAD_CATALOGUES]
)
def test_a_bad_catalogue_is_a_system_check_error(catalogue, says):
    errors = check_errors(EVENT_TYPES=catalogue)
    assert [e.id for e in errors] == ["django_outbox.E005"], errors
    assert errors[0].msg.startswith(says), errors[0].msg


def test_validate_payloads_takes_true_false_or_none():
    for value in (True, False, None):
        assert check_errors(VALIDATE_PAYLOADS=value) == []
    (error,) = check_errors(VALIDATE_PAYLOADS="yes")
    assert error.id == "django_outbox.E005"
    assert error.msg == (
        "OUTBOX['WEBHOOKS']['VALIDATE_PAYLOADS'] must be True, False or None (None: validate "
        "when settings.DEBUG is on), not 'yes'."
    )


def test_a_catalogue_with_schemas_needs_jsonschema_installed(monkeypatch):
    assert check_errors(EVENT_TYPES=CATALOGUE) == []
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # as if it were not installed
    (error,) = check_errors(EVENT_TYPES=CATALOGUE)
    assert error.id == "django_outbox.E005"
    assert error.msg == (
        f"{W}['invoice.paid']['schema'] needs the jsonschema package to be checked and used: "
        "pip install 'django-outbox-tasks[schemas]'."
    )
    # A catalogue without schemas needs nothing more.
    without = {name: entry for name, entry in CATALOGUE.items() if "schema" not in entry}
    assert check_errors(EVENT_TYPES=without) == []


# -- what the portal lists -----------------------------------------------------------------


def test_event_types_lists_the_declared_types_by_name():
    with outbox(EVENT_TYPES=CATALOGUE):
        listed = webhooks.event_types()
    assert [t.name for t in listed] == ["invoice.created", "invoice.paid", "user.deleted"]
    paid = listed[1]
    assert paid.as_dict() == {
        "name": "invoice.paid",
        "description": "An invoice was paid in full.",
        "example": {"id": 7, "amount": "12.00"},
        "schema": INVOICE_SCHEMA,
    }
    assert listed[0].schema is None
    assert webhooks.event_types() == []  # no catalogue declared


# -- unknown event types -------------------------------------------------------------------


def test_an_undeclared_event_type_is_refused_and_sends_nothing(stored):
    with outbox(EVENT_TYPES=CATALOGUE), pytest.raises(ValidationError) as caught:
        webhooks.send("invoice.payed", {"id": 1})
    assert caught.value.messages == [
        "'invoice.payed' is not a declared event type: OUTBOX['WEBHOOKS']['EVENT_TYPES'] "
        "declares invoice.created, invoice.paid, user.deleted. Did you mean 'invoice.paid'? "
        "Declare it there first."
    ]
    assert stored()


def test_without_a_catalogue_any_event_type_goes():
    webhooks.create_endpoint("https://hooks.example.com/in", event_types=["anything.*"])
    message = webhooks.send("anything.at_all", {"id": 1})
    assert Delivery.objects.filter(message=message).count() == 1


def test_a_declared_event_type_is_sent_to_the_endpoints_whose_filter_matches():
    with outbox(EVENT_TYPES=CATALOGUE):
        invoices = webhooks.create_endpoint("https://a.example.com/in", event_types=["invoice.*"])
        users = webhooks.create_endpoint("https://b.example.com/in", event_types=["user.deleted"])
        message = webhooks.send("user.deleted", {"id": "u_2"})
    assert list(Delivery.objects.filter(message=message).values_list("endpoint", flat=True)) == [
        users.pk
    ]
    assert invoices.event_types == ["invoice.*"]


# -- endpoint filters ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filters", "bad"),
    [(["invoce.*"], "invoce.*"), (["invoice.paid", "invoice.refunded"], "invoice.refunded"),
     (["*.created.*"], "*.created.*"), (["Invoice.paid"], "Invoice.paid")],
    ids=["a misspelt prefix", "one of two", "a pattern that matches nothing", "another case"],
)  # fmt: skip
def test_a_filter_that_matches_no_declared_type_is_refused(stored, filters, bad):
    says = (
        f"The event type filter {bad!r} matches no declared event type: "
        "OUTBOX['WEBHOOKS']['EVENT_TYPES'] declares invoice.created, invoice.paid, user.deleted."
    )
    endpoint = Endpoint.objects.get()
    with outbox(EVENT_TYPES=CATALOGUE):
        with pytest.raises(ValidationError) as caught:
            webhooks.create_endpoint("https://c.example.com/in", event_types=filters)
        assert caught.value.messages == [says]
        with pytest.raises(ValidationError) as caught:
            webhooks.update_endpoint(endpoint, event_types=filters, description="changed")
        assert caught.value.messages == [says]
    assert stored()


def test_filters_that_match_declared_types_are_taken():
    with outbox(EVENT_TYPES=CATALOGUE):
        endpoint = webhooks.create_endpoint(
            "https://c.example.com/in", event_types=["*.deleted", "invoice.paid"]
        )
        webhooks.update_endpoint(endpoint, event_types=["invoice.*"])
    endpoint.refresh_from_db()
    assert endpoint.event_types == ["invoice.*"]


# -- payloads against their schema ---------------------------------------------------------


BAD_PAYLOADS: list[tuple[str, Any, str]] = [
    ("a field of the wrong type", {"id": "7", "amount": "12.00"},
     "at $.id: '7' is not of type 'integer'"),
    ("a required field missing", {"id": 7}, "at $: 'amount' is a required property"),
    ("a field the schema does not allow", {"id": 7, "amount": "12.00", "note": "x"},
     "at $: Additional properties are not allowed ('note' was unexpected)"),
    ("a pattern not matched", {"id": 7, "amount": "12"},
     "at $.amount: '12' does not match '^\\\\d+\\\\.\\\\d{2}$'"),
    ("a format not matched", {"id": 7, "amount": "1.00", "paid_on": "soon"},
     "at $.paid_on: 'soon' is not a 'date'"),
    ("not an object", [7], "at $: [7] is not of type 'object'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("payload", "says"), [c[1:] for c in BAD_PAYLOADS], ids=[c[0] for c in BAD_PAYLOADS]
)
def test_a_payload_its_schema_refuses_is_a_clear_error_and_sends_nothing(stored, payload, says):
    with (
        outbox(EVENT_TYPES=CATALOGUE, VALIDATE_PAYLOADS=True),
        pytest.raises(ValidationError) as caught,
    ):
        webhooks.send("invoice.paid", payload)
    assert caught.value.messages == [
        "The payload of 'invoice.paid' does not match its schema in "
        f"OUTBOX['WEBHOOKS']['EVENT_TYPES']: {says}. Nothing was sent."
    ]
    assert stored()


def test_every_problem_is_named_at_once():
    with (
        outbox(EVENT_TYPES=CATALOGUE, VALIDATE_PAYLOADS=True),
        pytest.raises(ValidationError) as caught,
    ):
        webhooks.send("invoice.paid", {"id": "7", "amount": 12})
    assert caught.value.messages[0].endswith(
        "at $.amount: 12 is not of type 'string'; at $.id: '7' is not of type 'integer'. "
        "Nothing was sent."
    )


def test_a_payload_is_checked_as_it_is_sent():
    """A tuple is sent as a JSON array: the schema sees the array."""
    catalogue = {"list.sent": {"description": "x", "example": [1], "schema": {"type": "array"}}}
    with outbox(EVENT_TYPES=catalogue, VALIDATE_PAYLOADS=True):
        message = webhooks.send("list.sent", (1, 2))
    assert message.body.endswith('"data":[1,2]}')


@pytest.mark.parametrize(
    ("validate", "debug", "checked"),
    [(None, True, True), (None, False, False), (True, False, True), (False, True, False)],
    ids=["None under DEBUG", "None without DEBUG", "True", "False under DEBUG"],
)
def test_validate_payloads_follows_debug_unless_set(validate, debug, checked):
    bad = {"id": "not a number", "amount": "12.00"}
    with outbox(EVENT_TYPES=CATALOGUE, VALIDATE_PAYLOADS=validate), override_settings(DEBUG=debug):
        if checked:
            with pytest.raises(ValidationError, match=r"at \$\.id: 'not a number' is not of"):
                webhooks.send("invoice.paid", bad)
            assert not Message.objects.exists()
        else:
            webhooks.send("invoice.paid", bad)
            assert Message.objects.get().event_type == "invoice.paid"


def test_a_type_without_a_schema_takes_any_payload():
    with outbox(EVENT_TYPES=CATALOGUE, VALIDATE_PAYLOADS=True):
        webhooks.send("invoice.created", {"anything": ["at", "all"]})
    assert Message.objects.count() == 1
