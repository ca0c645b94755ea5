"""Standard Webhooks signatures, checked against the official ``standardwebhooks`` library."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from django_outbox.webhooks import signing

BODY = json.dumps({"type": "invoice.paid", "data": {"id": 7, "note": "é"}}).encode()


def test_secrets_are_whsec_and_base64_of_24_to_64_random_bytes():
    secret = signing.generate_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret[6:])) == 32
    assert secret != signing.generate_secret()
    assert len(signing.secret_key(signing.generate_secret(64))) == 64
    for size in (23, 65):
        with pytest.raises(signing.InvalidSecret, match="24 to 64"):
            signing.generate_secret(size)


@pytest.mark.parametrize(
    "bad",
    ["", "sk_live_abc", "whsec_not base64!", "whsec_" + base64.b64encode(b"short").decode(), None],
)
def test_a_malformed_secret_is_refused_without_echoing_it(bad):
    # The detail sits inside the sentence: "... bytes (it holds 5 bytes)."
    with pytest.raises(signing.InvalidSecret, match="whsec_") as caught:
        signing.secret_key(bad)
    if bad and len(bad) > 6:
        assert bad[6:] not in str(caught.value)
    said = str(caught.value)
    assert said.startswith(
        'A webhook secret must be "whsec_" followed by base64 of 24 to 64 bytes ('
    )
    assert said.endswith(").") and ". (" not in said


def test_the_official_library_verifies_our_signature():
    secret = signing.generate_secret()
    now = int(time.time())
    headers = signing.headers([secret], "msg_1", now, BODY)
    assert Webhook(secret).verify(BODY, headers) == json.loads(BODY)
    # And our signature is exactly the library's own.
    theirs = Webhook(secret).sign("msg_1", datetime.fromtimestamp(now, UTC), BODY.decode())
    assert headers["webhook-signature"] == theirs


def test_during_a_rotation_each_secret_verifies_alone():
    old, new = signing.generate_secret(), signing.generate_secret()
    headers = signing.headers([new, old], "msg_2", int(time.time()), BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert Webhook(old).verify(BODY, headers)
    assert Webhook(new).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(signing.generate_secret()).verify(BODY, headers)


def test_verify_accepts_the_librarys_signatures_and_returns_the_payload():
    secret = signing.generate_secret()
    now = datetime.now(UTC)
    headers = {
        "Webhook-Id": "msg_3",
        "Webhook-Timestamp": str(int(now.timestamp())),
        "Webhook-Signature": Webhook(secret).sign("msg_3", now, BODY.decode()),
    }
    assert signing.verify(headers, BODY, secret) == json.loads(BODY)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"webhook-signature": "v1,AAAA"}, "no signature matches"),
        ({"webhook-signature": "v2,abc"}, "no signature matches"),
        ({"webhook-timestamp": "soon"}, "not a whole number"),
        # Seconds from now, filled in below.
        (
            {"webhook-timestamp": -400},
            r"^webhook-timestamp is 6 min 40 s old, more than the "
            r"5 min allowed \(a replayed request, or a clock that is off\)$",
        ),
        (
            {"webhook-timestamp": +400},
            r"^webhook-timestamp is 6 min 40 s in the future, more "
            r"than the 5 min allowed",
        ),
        ({"webhook-id": ""}, r"^missing header: webhook-id$"),
        (
            {"webhook-id": "", "webhook-signature": ""},
            r"^missing headers: webhook-id, webhook-signature$",
        ),
    ],
)
def test_verify_refuses_what_does_not_check_out(change, message):
    secret = signing.generate_secret()
    now = int(time.time())
    if isinstance(change.get("webhook-timestamp"), int):
        change = {"webhook-timestamp": str(now + change["webhook-timestamp"])}
    headers = signing.headers([secret], "msg_4", now, BODY) | change
    with pytest.raises(signing.VerificationError, match=message):
        signing.verify(headers, BODY, secret, now=now)  # the same second: 400 s, not 401


def test_verify_refuses_a_changed_body_and_an_old_replay():
    secret = signing.generate_secret()
    then = int(time.time()) - 3600
    headers = signing.headers([secret], "msg_5", then, BODY)
    with pytest.raises(signing.VerificationError, match="is 1 h old, more than the 5 min"):
        signing.verify(headers, BODY, secret)
    assert signing.verify(headers, BODY, secret, now=then + 10)  # within tolerance then
    with pytest.raises(signing.VerificationError, match="no signature"):
        signing.verify(headers, BODY + b" ", secret, now=then)


def test_the_signing_module_needs_no_django():
    import subprocess
    import sys

    # Import the module file alone, outside the package (whose __init__ may use Django).
    from pathlib import Path

    path = Path(signing.__file__)
    code = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('signing', {str(path)!r}); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
        "assert not any(n == 'django' or n.startswith('django.') for n in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
