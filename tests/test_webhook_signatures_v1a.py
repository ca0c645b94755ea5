"""Standard Webhooks' v1a scheme (ed25519): endpoints that sign with a whsk_ private key,
receivers that verify with the whpk_ public key, rotations within a scheme and into the
other one, and the admin's endpoint page.

The signatures cryptography makes are checked by an independent ed25519 implementation,
libsodium (through PyNaCl), and the key format against RFC 8032's test vectors; the v1
signatures are still checked by the official standardwebhooks library (which knows v1 only).
"""

from __future__ import annotations

import base64
import json
import sys
import time
from datetime import timedelta
from typing import Any

import nacl.exceptions
import nacl.signing
import pytest
from django.core.exceptions import ValidationError
from standardwebhooks import Webhook

from django_outbox import webhooks
from django_outbox.models import Attempt, Delivery, DeliveryStatus, Endpoint, Job, Message
from django_outbox.webhooks import signing
from tests.test_webhooks_delivery import settled

pytestmark = pytest.mark.django_db(transaction=True)

#: RFC 8032, section 7.1, TEST 1: a seed (the private key) and its public key.
RFC_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def sodium_verifies(public_key: str, signature_header: str, headers: dict[str, str], body: bytes):
    """The v1a signatures of ``signature_header`` that libsodium finds valid for the
    ``whpk_`` key: the Standard Webhooks signed content, checked with no code of ours."""
    key = nacl.signing.VerifyKey(base64.b64decode(public_key.removeprefix("whpk_")))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    valid = []
    for entry in signature_header.split():
        version, _, value = entry.partition(",")
        if version != "v1a":
            continue
        try:
            key.verify(signed, base64.b64decode(value))
        except nacl.exceptions.BadSignatureError:
            continue
        valid.append(entry)
    return valid


def rows() -> dict[str, list[dict[str, Any]]]:
    return {
        m.__name__: list(m.objects.order_by("pk").values())
        for m in (Endpoint, Message, Delivery, Job)
    }


# -- keys ----------------------------------------------------------------------------------


def test_a_v1a_key_pair_follows_rfc_8032():
    private = "whsk_" + b64(RFC_SEED)
    assert signing.public_key(private) == "whpk_" + b64(RFC_PUBLIC)
    generated = signing.generate_signing_key()
    assert generated.startswith("whsk_") and len(base64.b64decode(generated[5:])) == 32
    # libsodium derives the same public key from the seed.
    seed = base64.b64decode(generated[5:])
    sodium = nacl.signing.SigningKey(seed).verify_key.encode()
    assert signing.public_key(generated) == "whpk_" + b64(sodium)


def test_v1a_signatures_are_valid_ed25519_signatures_by_libsodium():
    private = "whsk_" + b64(RFC_SEED)
    body = b'{"type":"invoice.paid","data":{"id":1}}'
    headers = signing.headers([private], "msg_1", 1_700_000_000, body)
    assert headers["webhook-signature"].startswith("v1a,")
    public = "whpk_" + b64(RFC_PUBLIC)
    assert sodium_verifies(public, headers["webhook-signature"], headers, body) == [
        headers["webhook-signature"]
    ]
    # Ed25519 is deterministic: libsodium signing the same content gives the same signature.
    sodium = nacl.signing.SigningKey(RFC_SEED).sign(b"msg_1.1700000000." + body).signature
    assert headers["webhook-signature"] == "v1a," + b64(sodium)
    # One changed byte, and it is no longer valid.
    assert sodium_verifies(public, headers["webhook-signature"], headers, body + b" ") == []


def test_verify_takes_a_public_key_for_v1a_and_a_secret_for_v1():
    private, secret = signing.generate_signing_key(), signing.generate_secret()
    public = signing.public_key(private)
    body = b'{"data":{"id":2}}'
    now = int(time.time())
    both = signing.headers([private, secret], "msg_2", now, body)
    assert [s.split(",")[0] for s in both["webhook-signature"].split()] == ["v1a", "v1"]
    assert webhooks.verify(both, body, public) == {"data": {"id": 2}}
    assert webhooks.verify(both, body, secret) == {"data": {"id": 2}}
    assert webhooks.verify(both, body, [signing.generate_secret(), public]) == {"data": {"id": 2}}
    # The official library verifies the v1 signature, and skips the v1a one it does not know.
    assert Webhook(secret).verify(body, both) == {"data": {"id": 2}}
    other = signing.public_key(signing.generate_signing_key())
    with pytest.raises(webhooks.VerificationError, match="no signature matches"):
        webhooks.verify(both, body, other)
    forged = dict(both, **{"webhook-signature": "v1," + both["webhook-signature"][4:]})
    with pytest.raises(webhooks.VerificationError, match="no signature matches"):
        webhooks.verify(forged, body, public)  # a v1a signature relabelled v1 is no v1 match
    with pytest.raises(webhooks.VerificationError, match="no signature matches"):
        webhooks.verify(both, body + b" ", public)


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("whsk_" + b64(RFC_SEED), "verify() takes the whpk_ public key of a v1a endpoint, not "
         "its whsk_ private key (which stays with the sender)."),
        ("whpk_" + b64(b"x" * 16), 'A v1a key must be "whsk_" (the private key) or "whpk_" (the '
         "public key) followed by base64 of 32 bytes (it holds 16 bytes)."),
        ("whpk_!!!", "its base64 does not decode"),
    ],
    ids=["a private key", "a short public key", "a public key that is not base64"],
)  # fmt: skip
def test_verify_refuses_a_key_a_receiver_should_not_hold(key, says):
    headers = signing.headers([signing.generate_secret()], "msg_3", int(time.time()), b"{}")
    with pytest.raises(signing.InvalidSecret) as caught:
        webhooks.verify(headers, b"{}", key)
    assert says in str(caught.value)
    assert key.removeprefix("whsk_") not in str(caught.value)  # a private key is never echoed


# -- endpoints -----------------------------------------------------------------------------


def test_a_v1a_endpoint_signs_its_deliveries_with_ed25519(receiver, webhook_worker):
    endpoint = webhooks.create_endpoint(receiver.url(), signature_scheme="v1a")
    assert endpoint.signature_scheme == "v1a" and endpoint.secret.startswith("whsk_")
    public = webhooks.public_key(endpoint)
    assert public == webhooks.verification_key(endpoint) == signing.public_key(endpoint.secret)
    assert public.startswith("whpk_")
    message = webhooks.send("invoice.paid", {"id": 7})
    webhook_worker()
    (delivery,) = settled(message)

    assert delivery.status == DeliveryStatus.SUCCEEDED
    (request,) = receiver.at("/hook")
    signature = request.headers["webhook-signature"]
    assert signature.startswith("v1a,") and " " not in signature
    assert sodium_verifies(public, signature, request.headers, request.body) == [signature]
    assert webhooks.verify(request.headers, request.body, public)["data"] == {"id": 7}


def test_a_v1_endpoint_is_still_verified_by_the_official_library(receiver, webhook_worker):
    endpoint = webhooks.create_endpoint(receiver.url())
    assert endpoint.signature_scheme == "v1" and webhooks.public_key(endpoint) is None
    assert webhooks.verification_key(endpoint) == endpoint.secret
    message = webhooks.send("invoice.paid", {"id": 8})
    webhook_worker()
    settled(message)
    (request,) = receiver.at("/hook")
    assert request.headers["webhook-signature"].startswith("v1,")
    assert Webhook(endpoint.secret).verify(request.body, request.headers)["data"] == {"id": 8}


def test_a_v1a_rotation_signs_with_both_keys_during_its_grace(receiver, webhook_worker):
    endpoint = webhooks.create_endpoint(receiver.url(), signature_scheme="v1a")
    old_public = webhooks.public_key(endpoint)
    new_public = webhooks.rotate_secret(endpoint, grace=timedelta(hours=1))
    assert new_public.startswith("whpk_") and new_public != old_public
    assert new_public == webhooks.public_key(endpoint)
    webhook_worker()
    settled(webhooks.send("invoice.paid", {"id": 1}))
    webhooks.rotate_secret(endpoint, grace=timedelta(0))  # the previous key stops at once
    settled(webhooks.send("invoice.paid", {"id": 2}))

    during, after = receiver.at("/hook")
    signatures = during.headers["webhook-signature"].split()
    assert [s[:4] for s in signatures] == ["v1a,", "v1a,"]
    for public in (old_public, new_public):
        assert len(sodium_verifies(public, " ".join(signatures), during.headers, during.body)) == 1
        assert webhooks.verify(during.headers, during.body, public)["data"] == {"id": 1}
    assert len(after.headers["webhook-signature"].split()) == 1
    with pytest.raises(webhooks.VerificationError, match="no signature matches"):
        webhooks.verify(after.headers, after.body, new_public)  # rotated away from too
    assert webhooks.verify(after.headers, after.body, webhooks.public_key(endpoint))


def test_changing_the_scheme_is_a_rotation_into_it(receiver, webhook_worker):
    endpoint = webhooks.create_endpoint(receiver.url())
    old_secret = endpoint.secret
    webhooks.update_endpoint(endpoint, signature_scheme="v1a", grace=timedelta(hours=1))
    endpoint.refresh_from_db()
    assert endpoint.signature_scheme == "v1a" and endpoint.secret.startswith("whsk_")
    assert endpoint.previous_secret == old_secret
    public = webhooks.public_key(endpoint)
    webhook_worker()
    settled(webhooks.send("invoice.paid", {"id": 3}))

    (request,) = receiver.at("/hook")
    assert [s[:3] for s in request.headers["webhook-signature"].split()] == ["v1a", "v1,"]
    # The receiver that still holds the old secret goes on verifying, with either library,
    # while it switches to the public key.
    assert Webhook(old_secret).verify(request.body, request.headers)["data"] == {"id": 3}
    assert webhooks.verify(request.headers, request.body, public)["data"] == {"id": 3}
    assert sodium_verifies(public, request.headers["webhook-signature"], request.headers,
                           request.body)  # fmt: skip

    # And back: a new whsec_ secret, the v1a key signing for the grace period.
    webhooks.update_endpoint(endpoint, signature_scheme="v1")
    assert endpoint.signature_scheme == "v1" and endpoint.secret.startswith("whsec_")
    assert webhooks.verification_key(endpoint) == endpoint.secret
    settled(webhooks.send("invoice.paid", {"id": 4}))
    second = receiver.at("/hook")[1]
    assert Webhook(endpoint.secret).verify(second.body, second.headers)["data"] == {"id": 4}
    assert webhooks.verify(second.headers, second.body, public)["data"] == {"id": 4}


def test_the_same_scheme_again_changes_no_key():
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in", signature_scheme="v1a")
    key = endpoint.secret
    webhooks.update_endpoint(endpoint, signature_scheme="v1a")
    endpoint.refresh_from_db()
    assert endpoint.secret == key and endpoint.previous_secret == ""


def test_a_v1a_key_of_ones_own_is_taken():
    private = "whsk_" + b64(RFC_SEED)
    endpoint = webhooks.create_endpoint(
        "https://hooks.example.com/in", signature_scheme="v1a", secret=private
    )
    assert webhooks.public_key(endpoint) == "whpk_" + b64(RFC_PUBLIC)


# -- bad inputs ----------------------------------------------------------------------------


BAD_ENDPOINTS: list[tuple[str, dict[str, Any], str]] = [
    ("an unknown scheme", {"signature_scheme": "v2"},
     "signature_scheme must be one of v1, v1a, not 'v2'."),
    ("a whsec_ secret for v1a", {"signature_scheme": "v1a", "secret": signing.generate_secret()},
     'A v1a key must be "whsk_" (the private key) or "whpk_" (the public key) followed by base64 '
     "of 32 bytes (a whsec_ secret signs v1, not v1a)."),
    ("a whsk_ key for v1", {"secret": "whsk_" + b64(RFC_SEED)},
     'A webhook secret must be "whsec_" followed by base64 of 24 to 64 bytes (a whsk_ key signs '
     "v1a: choose that signature scheme)."),
    ("a public key to sign with", {"signature_scheme": "v1a", "secret": "whpk_" + b64(RFC_PUBLIC)},
     "(expected 'whsk_', got a string of 49 characters without the 'whsk_' prefix)."),
    ("a 16-byte v1a key", {"signature_scheme": "v1a", "secret": "whsk_" + b64(b"k" * 16)},
     "followed by base64 of 32 bytes (it holds 16 bytes)."),
    ("a v1a key that is not base64", {"signature_scheme": "v1a", "secret": "whsk_$$$$"},
     "(its base64 does not decode)."),
]  # fmt: skip


@pytest.mark.parametrize(
    ("options", "says"), [c[1:] for c in BAD_ENDPOINTS], ids=[c[0] for c in BAD_ENDPOINTS]
)
def test_a_bad_scheme_or_key_is_refused_and_stores_nothing(options, says):
    webhooks.create_endpoint("https://hooks.example.com/in")
    before = rows()
    with pytest.raises(ValidationError) as caught:
        webhooks.create_endpoint("https://other.example.com/in", **options)
    assert caught.value.messages[0].endswith(says) or caught.value.messages[0] == says
    secret = options.get("secret", "")
    assert not secret or secret[5:] not in caught.value.messages[0]  # keys are never echoed
    if "secret" not in options:
        with pytest.raises(ValidationError, match="signature_scheme must be one of v1, v1a"):
            webhooks.update_endpoint(Endpoint.objects.get(), **options, description="changed")
    assert rows() == before


def test_a_bad_grace_on_a_scheme_change_changes_nothing():
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    before = rows()
    with pytest.raises(ValidationError, match=r"grace must be a timedelta from 0 to 366 days"):
        webhooks.update_endpoint(endpoint, signature_scheme="v1a", grace=timedelta(days=-1))
    assert rows() == before


@pytest.fixture
def without_cryptography(monkeypatch):
    """As if the cryptography package were not installed."""
    from cryptography.hazmat.primitives import asymmetric

    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.asymmetric.ed25519", None)
    monkeypatch.delattr(asymmetric, "ed25519")


INSTALL = (
    "The signature scheme 'v1a' (ed25519) needs the cryptography package, which is not "
    "installed here: pip install 'django-outbox-tasks[ed25519]'."
)


def test_without_cryptography_v1a_is_refused_with_how_to_install_it(without_cryptography):
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    before = rows()
    assert webhooks.signature_schemes() == ["v1"]
    for attempt in (
        lambda: webhooks.create_endpoint("https://b.example.com/in", signature_scheme="v1a"),
        lambda: webhooks.update_endpoint(endpoint, signature_scheme="v1a"),
    ):
        with pytest.raises(ValidationError) as caught:
            attempt()
        assert caught.value.messages == [INSTALL]
    assert rows() == before


def test_without_cryptography_a_v1a_delivery_is_retried_saying_why(
    receiver, webhook_worker, request
):
    endpoint = webhooks.create_endpoint(receiver.url(), signature_scheme="v1a")
    message = webhooks.send("invoice.paid", {"id": 1})
    request.getfixturevalue("without_cryptography")
    webhook_worker()
    (delivery,) = settled(message)

    assert delivery.status == DeliveryStatus.FAILED
    attempts = list(Attempt.objects.filter(delivery=delivery).order_by("number"))
    assert len(attempts) == 4  # the tests' whole retry schedule: it was not failed at once
    assert {(a.error_class, a.error_message) for a in attempts} == {
        ("SchemeUnavailable", "v1a signatures (ed25519) need the cryptography package: "
         "pip install 'django-outbox-tasks[ed25519]'.")
    }  # fmt: skip
    assert receiver.at("/hook") == []  # nothing unsigned was sent
    with pytest.raises(ValidationError) as caught:
        webhooks.rotate_secret(endpoint)
    assert caught.value.messages == [INSTALL]


# -- the admin -----------------------------------------------------------------------------


def change_page(client, endpoint: Endpoint) -> str:
    response = client.get(f"/admin/django_outbox/endpoint/{endpoint.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def save(client, endpoint: Endpoint, **form: str):
    return client.post(f"/admin/django_outbox/endpoint/{endpoint.pk}/change/", form, follow=True)


def test_the_admin_shows_a_v1a_endpoints_public_key_never_its_private_key(admin_client):
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in", signature_scheme="v1a")
    page = change_page(admin_client, endpoint)
    assert webhooks.public_key(endpoint) in page
    assert endpoint.secret not in page and endpoint.secret[5:20] not in page
    v1 = webhooks.create_endpoint("https://hooks.example.com/v1")
    page = change_page(admin_client, v1)
    assert v1.secret not in page
    assert "the secret, shown once when it was created or rotated" in page


def test_the_admin_edits_headers_and_the_scheme(admin_client):
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    old_secret = endpoint.secret
    response = save(
        admin_client,
        endpoint,
        signature_scheme="v1a",
        headers=json.dumps({"X-Api-Key": "k1"}),
    )
    endpoint.refresh_from_db()
    assert endpoint.headers == {"X-Api-Key": "k1"}
    assert endpoint.signature_scheme == "v1a" and endpoint.previous_secret == old_secret
    shown = [str(m) for m in response.context["messages"]]
    assert any(
        m.startswith(
            f"New public key of {endpoint.url} (v1a; the previous one also signs for 1 day"
        )
        and m.endswith(webhooks.public_key(endpoint))
        for m in shown
    ), shown
    # Nothing else on the page is editable: a URL posted with the form changes nothing.
    save(admin_client, endpoint, signature_scheme="v1a", headers="{}", url="https://evil.example")
    endpoint.refresh_from_db()
    assert endpoint.url == "https://hooks.example.com/in" and endpoint.headers == {}


@pytest.mark.parametrize(
    ("headers", "says"),
    [('{"Content-Type": "text/plain"}', "The header &#x27;Content-Type&#x27; is reserved"),
     ('{"X-A": "1\\r\\nX-B: 2"}', "holds a line break (CR or LF)"),
     ('["X-A"]', "headers must be a dict of header names to values, not list.")],
    ids=["a reserved header", "a line break", "a list"],
)  # fmt: skip
def test_the_admin_refuses_bad_headers_and_changes_nothing(admin_client, headers, says):
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in", headers={"X-A": "1"})
    before = rows()
    response = save(admin_client, endpoint, signature_scheme="v1a", headers=headers)
    assert response.status_code == 200
    assert says in response.content.decode()
    assert rows() == before


def test_the_rotate_action_shows_a_v1a_endpoints_new_public_key(admin_client):
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in", signature_scheme="v1a")
    response = admin_client.post(
        "/admin/django_outbox/endpoint/",
        {"action": "rotate_secret", "_selected_action": [str(endpoint.pk)]},
        follow=True,
    )
    endpoint.refresh_from_db()
    (shown,) = [str(m) for m in response.context["messages"]]
    assert shown.startswith(f"New public key of {endpoint.url} (v1a; the previous one also signs")
    assert shown.endswith(webhooks.public_key(endpoint))
    assert endpoint.secret not in shown
