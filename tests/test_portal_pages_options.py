"""The portal's pages with the event-type catalogue, an endpoint's own headers and the v1a
(ed25519) signature scheme, with Django's test client: what a tenant sees and picks, and
that a refused form changes nothing. tests/test_portal_browser.py drives them in Chromium."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from django_outbox import webhooks
from django_outbox.models import Endpoint
from tests.test_portal_pages import URL, browser, followed, post  # noqa: F401 (a fixture)
from tests.test_webhook_catalogue import CATALOGUE, outbox

pytestmark = pytest.mark.django_db(transaction=True)

NEW = "/webhooks/endpoints/new/"


def rows() -> list[dict[str, Any]]:
    return list(Endpoint.objects.order_by("pk").values())


def text(answer: Any) -> str:
    """The page's HTML, its entities read (``&quot;`` as ``"``)."""
    return html.unescape(answer.content.decode())


def error_of(page: str, field: str) -> str:
    """The error shown next to ``field`` (its ``<p id="…-error">``), or ""."""
    found = re.search(rf'<p class="error" id="{field}-error">(.*?)</p>', page, re.DOTALL)
    return found[1] if found else ""


def checkboxes(page: str) -> dict[str, bool]:
    """The event types' checkboxes of a form: value -> checked."""
    return {
        value: " checked" in attributes
        for attributes, value in (
            (m[0], m[1])
            for m in re.findall(r'(<input type="checkbox"[^>]*value="([^"]+)"[^>]*>)', page)
        )
    }


# -- The event types ---------------------------------------------------------------------


def test_the_event_types_page_lists_the_catalogue_with_examples_and_schemas(browser):  # noqa: F811
    with outbox(EVENT_TYPES=CATALOGUE):
        answer = browser.get("/webhooks/event-types/")
    assert answer.status_code == 200
    page = text(answer)
    names = re.findall(r'<h2 class="mono" id="[^"]+">([^<]+)</h2>', page)
    assert names == sorted(CATALOGUE)
    assert "An invoice was paid in full." in page and "A user closed their account." in page
    assert '"amount": "12.00"' in page  # the example, as indented JSON
    assert '"id": "u_1"' in page
    schema = re.search(r"<details><summary>JSON Schema</summary><pre>(.*?)</pre>", page, re.S)
    assert schema is not None and '"pattern": "^\\\\d+\\\\.\\\\d{2}$"' in schema[1]
    assert page.count("<details>") == 1  # only invoice.paid declares a schema
    assert page.count("No JSON Schema declared") == 2
    # Every page links to it.
    assert 'href="/webhooks/event-types/">Event types</a>' in text(browser.get("/webhooks/"))


def test_without_a_catalogue_the_event_types_page_says_so(browser):  # noqa: F811
    page = text(browser.get("/webhooks/event-types/"))
    assert "This application declares no list of event types" in page
    assert "<section" not in page


def test_the_event_types_page_needs_a_tenant():
    from django.test import Client

    with outbox(EVENT_TYPES=CATALOGUE):
        answer = Client().get("/webhooks/event-types/")
    assert answer.status_code == 401 and b"invoice.paid" not in answer.content


# -- Picking event types -----------------------------------------------------------------


def test_with_a_catalogue_the_form_offers_checkboxes_and_stores_those_picked(browser):  # noqa: F811
    with outbox(EVENT_TYPES=CATALOGUE):
        form = text(browser.get(NEW))
        assert checkboxes(form) == {name: False for name in sorted(CATALOGUE)}
        assert 'type="text" id="id_event_types"' not in form  # no field to type in
        # Each checkbox has its label, with the type's description.
        for number, name in enumerate(sorted(CATALOGUE), start=1):
            label = re.search(rf'<label for="id_event_types_{number}">(.*?)</label>', form, re.S)
            assert label is not None and name in label[1]
            assert CATALOGUE[name]["description"] in label[1]
        made = post(browser, NEW, {"url": URL, "event_types": ["invoice.paid", "user.deleted"]})
        assert made.status_code == 303, made.content[:2000]
        endpoint = Endpoint.objects.get()
        assert endpoint.event_types == ["invoice.paid", "user.deleted"]
        shown = checkboxes(text(browser.get(f"/webhooks/endpoints/{endpoint.pk}/")))
    assert shown == {"invoice.created": False, "invoice.paid": True, "user.deleted": True}


def test_a_type_the_catalogue_does_not_declare_is_refused_and_nothing_changes(browser):  # noqa: F811
    with outbox(EVENT_TYPES=CATALOGUE):
        refused = post(browser, NEW, {"url": URL, "event_types": ["invoice.paid", "order.made"]})
        assert refused.status_code == 422 and not Endpoint.objects.exists()
        page = text(refused)
        assert "'order.made' matches no declared event type" in error_of(page, "event-types")
        # What was picked is picked again, the unknown filter with it, for the tenant to drop.
        assert checkboxes(page)["invoice.paid"] and checkboxes(page)["order.made"]
        endpoint = webhooks.create_endpoint(URL, tenant="acme", event_types=["invoice.paid"])
        before = rows()
        path = f"/webhooks/endpoints/{endpoint.pk}/"
        changed = post(browser, path, {"url": URL, "event_types": "user.created"})
        assert changed.status_code == 422 and "Nothing was saved" in text(changed)
    assert rows() == before


def test_a_filter_of_the_endpoint_stays_a_checked_choice_and_is_kept_by_saving(browser):  # noqa: F811
    with outbox(EVENT_TYPES=CATALOGUE):
        endpoint = webhooks.create_endpoint(URL, tenant="acme", event_types=["invoice.*"])
        path = f"/webhooks/endpoints/{endpoint.pk}/"
        page = text(browser.get(path))
        assert checkboxes(page)["invoice.*"] is True
        assert "a filter: matches invoice.created, invoice.paid" in page
        saved = post(browser, path, {"url": URL, "event_types": ["invoice.*"], "description": "b"})
    assert saved.status_code == 302
    endpoint.refresh_from_db()
    assert (endpoint.event_types, endpoint.description) == (["invoice.*"], "b")


def test_without_a_catalogue_the_form_keeps_its_text_field(browser):  # noqa: F811
    form = text(browser.get(NEW))
    assert 'type="text" id="id_event_types" name="event_types"' in form
    assert not checkboxes(form)


# -- Headers -----------------------------------------------------------------------------


def test_headers_are_written_one_a_line_stored_and_shown(browser):  # noqa: F811
    made = post(
        browser,
        NEW,
        {"url": URL, "headers": "X-Api-Key: k-123\r\n\r\n  x-tenant :acme  \r\nX-Empty:\r\n"},
    )
    assert made.status_code == 303
    endpoint = Endpoint.objects.get()
    assert endpoint.headers == {"X-Api-Key": "k-123", "x-tenant": "acme", "X-Empty": ""}
    page = text(browser.get(f"/webhooks/endpoints/{endpoint.pk}/"))
    assert '<code class="header">X-Api-Key: k-123</code>' in page
    textarea = re.search(r'<textarea id="id_headers"[^>]*>(.*?)</textarea>', page, re.S)
    assert textarea is not None
    assert textarea[1] == "X-Api-Key: k-123\nX-Empty: \nx-tenant: acme\n"
    # Emptied: no headers of its own.
    emptied = post(browser, f"/webhooks/endpoints/{endpoint.pk}/", {"url": URL, "headers": ""})
    assert emptied.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.headers == {}


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("webhook-signature: x", "The header 'webhook-signature' is reserved"),
        ("Content-Type: text/plain", "The header 'Content-Type' is reserved"),
        ("X-Ok: 1\nthe key is s3cr3t-value", "Line 2 is not a header"),
        (": no name", "Line 1 is not a header"),
        ("X-Twice: 1\nx-twice: 2", "Line 2 sets 'x-twice' again (line 1 sets it)"),
        ("bad name: 1", "'bad name' is not a valid header name"),
        ("X-Bell: ring\x07", "holds a control character"),
    ],
)
def test_a_bad_header_line_is_a_422_shown_by_the_field_and_nothing_changes(
    browser,  # noqa: F811
    given,
    says,
):
    refused = post(browser, NEW, {"url": URL, "headers": given})
    assert refused.status_code == 422 and not Endpoint.objects.exists()
    page = text(refused)
    assert says in error_of(page, "headers") and "Nothing was saved" in page
    assert 'id="id_headers" name="headers"' in page and 'aria-describedby="headers-error"' in page
    assert "s3cr3t" not in error_of(page, "headers")  # a line's text is not repeated
    endpoint = webhooks.create_endpoint(URL, tenant="acme", headers={"X-Api-Key": "k-1"})
    before = rows()
    changed = post(browser, f"/webhooks/endpoints/{endpoint.pk}/", {"url": URL, "headers": given})
    assert changed.status_code == 422 and says in error_of(text(changed), "headers")
    assert rows() == before


def test_a_form_without_the_headers_field_keeps_them(browser):  # noqa: F811
    endpoint = webhooks.create_endpoint(URL, tenant="acme", headers={"X-Api-Key": "k-1"})
    saved = post(browser, f"/webhooks/endpoints/{endpoint.pk}/", {"url": URL, "description": "b"})
    assert saved.status_code == 302
    endpoint.refresh_from_db()
    assert (endpoint.headers, endpoint.description) == ({"X-Api-Key": "k-1"}, "b")


# -- Signature schemes -------------------------------------------------------------------


def test_the_form_offers_each_scheme_with_a_line_saying_what_it_is(browser):  # noqa: F811
    form = text(browser.get(NEW))
    options = re.findall(r'<option value="(v1a?)"( selected)?>([^<]+)</option>', form)
    assert [(value, selected) for value, selected, _ in options] == [
        ("v1", " selected"),
        ("v1a", ""),
    ]
    assert "HMAC-SHA256, a shared whsec_ secret" in options[0][2]
    assert "ed25519" in options[1][2] and "public key" in options[1][2]


def test_a_v1a_endpoint_shows_its_public_key_and_never_its_private_key(browser):  # noqa: F811
    made = followed(browser, post(browser, NEW, {"url": URL, "signature_scheme": "v1a"}))
    endpoint = Endpoint.objects.get()
    assert endpoint.signature_scheme == "v1a" and endpoint.secret.startswith("whsk_")
    public = webhooks.public_key(endpoint)
    path = f"/webhooks/endpoints/{endpoint.pk}/"
    for answer in (made, browser.get(path)):
        page = answer.content.decode()
        assert f'<code id="public-key" tabindex="0">{public}</code>' in page
        assert endpoint.secret not in page and "whsk_" not in page
        assert 'id="secret"' not in page  # no "copy it now" panel: nothing secret to show
        assert 'id="signature-scheme">v1a: ed25519' in page
    rotated = followed(browser, post(browser, path + "rotate-secret/", {"grace_seconds": "3600"}))
    endpoint.refresh_from_db()
    new_public = webhooks.public_key(endpoint)
    assert new_public != public
    page = rotated.content.decode()
    assert "A new key pair signs from now on" in page and new_public in page
    assert endpoint.secret not in page and endpoint.previous_secret not in page
    assert "whsk_" not in page


def test_changing_the_scheme_rotates_into_it_and_shows_what_the_receiver_needs(browser):  # noqa: F811
    made = followed(browser, post(browser, NEW, {"url": URL}))
    endpoint = Endpoint.objects.get()
    v1_secret = endpoint.secret
    assert endpoint.signature_scheme == "v1" and v1_secret.encode() in made.content
    path = f"/webhooks/endpoints/{endpoint.pk}/"
    to_v1a = followed(browser, post(browser, path, {"url": URL, "signature_scheme": "v1a"}))
    endpoint.refresh_from_db()
    assert to_v1a.status_code == 200 and endpoint.signature_scheme == "v1a"
    page = to_v1a.content.decode()
    assert "The signature scheme changed" in page and "A new key pair signs from now on" in page
    assert webhooks.public_key(endpoint) in page
    assert endpoint.secret not in page and v1_secret not in page
    # Saving again with the same scheme is no rotation.
    kept = endpoint.secret
    assert post(browser, path, {"url": URL, "signature_scheme": "v1a"}).status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.secret == kept
    # Back to v1: the new secret is shown on the page the redirect leads to, once.
    to_v1 = followed(browser, post(browser, path, {"url": URL, "signature_scheme": "v1"}))
    endpoint.refresh_from_db()
    assert endpoint.signature_scheme == "v1" and endpoint.secret.startswith("whsec_")
    assert f'<pre id="secret" tabindex="0">{endpoint.secret}</pre>' in to_v1.content.decode()
    assert kept not in to_v1.content.decode()
    assert endpoint.secret.encode() not in browser.get(path).content


def test_an_unknown_scheme_is_a_422_by_its_field_and_nothing_changes(browser):  # noqa: F811
    refused = post(browser, NEW, {"url": URL, "signature_scheme": "v2"})
    assert refused.status_code == 422 and not Endpoint.objects.exists()
    assert "signature_scheme must be one of v1, v1a, not 'v2'" in error_of(
        text(refused), "signature-scheme"
    )
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    before = rows()
    changed = post(browser, f"/webhooks/endpoints/{endpoint.pk}/", {"signature_scheme": "v2"})
    assert changed.status_code == 422 and rows() == before


def test_a_refused_form_is_shown_again_as_sent_and_a_v1a_endpoint_stays_v1a(browser):  # noqa: F811
    endpoint = webhooks.create_endpoint(URL, tenant="acme", signature_scheme="v1a")
    before = rows()
    path = f"/webhooks/endpoints/{endpoint.pk}/"
    refused = post(browser, path, {"url": "https://10.0.0.1/in", "headers": "X-Api-Key: k-2"})
    assert refused.status_code == 422 and rows() == before
    page = text(refused)
    assert "private address" in error_of(page, "url")
    assert 'value="https://10.0.0.1/in"' in page and ">X-Api-Key: k-2</textarea>" in page
    assert '<option value="v1a" selected>' in page
    assert endpoint.secret not in page
