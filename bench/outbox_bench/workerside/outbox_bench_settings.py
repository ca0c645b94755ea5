"""Settings of the benchmarks' ``runworker`` processes: the project's own, and a few changes.

``DJANGO_SETTINGS_MODULE=outbox_bench_settings`` with ``OUTBOX_BENCH_BASE_SETTINGS`` naming
the project's settings module (what the benchmark itself runs with). Everything is taken
from that module; then:

- ``OUTBOX_BENCH_WAKE``: ``OUTBOX["WAKE"]``, when set;
- ``OUTBOX_BENCH_QUEUES``: JSON merged into ``OUTBOX["QUEUES"]`` (a queue's limits), when set;
- ``OUTBOX_BENCH_LOOPBACK_WEBHOOKS``: webhooks may go over plain HTTP to 127.0.0.1, the
  benchmark's own receiver, when set;
- ``OUTBOX_BENCH_DATABASE``: JSON ``[alias, name]``: the database the benchmark uses, so a
  worker started from another checkout (or from a test run) works on the same one;
- ``DEBUG`` is False, as in production (with it on, Django logs every statement).

Nothing else: the stalled check, polling, leases and batches are the project's.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
from typing import Any

_base = importlib.import_module(os.environ["OUTBOX_BENCH_BASE_SETTINGS"])
globals().update({name: value for name, value in vars(_base).items() if name.isupper()})

DEBUG = False

OUTBOX: dict[str, Any] = copy.deepcopy(getattr(_base, "OUTBOX", {}))
if os.environ.get("OUTBOX_BENCH_WAKE"):
    OUTBOX["WAKE"] = os.environ["OUTBOX_BENCH_WAKE"]
if os.environ.get("OUTBOX_BENCH_QUEUES"):
    OUTBOX["QUEUES"] = {**OUTBOX.get("QUEUES", {}), **json.loads(os.environ["OUTBOX_BENCH_QUEUES"])}

if os.environ.get("OUTBOX_BENCH_LOOPBACK_WEBHOOKS"):
    _hooks = OUTBOX.setdefault("WEBHOOKS", {})
    _hooks["ALLOW_HTTP"] = True
    _hooks["ALLOWED_NETWORKS"] = [*_hooks.get("ALLOWED_NETWORKS", []), "127.0.0.1/32"]

DATABASES: dict[str, Any] = copy.deepcopy(getattr(_base, "DATABASES", {}))
if os.environ.get("OUTBOX_BENCH_DATABASE"):
    _alias, _name = json.loads(os.environ["OUTBOX_BENCH_DATABASE"])
    DATABASES[_alias]["NAME"] = _name
