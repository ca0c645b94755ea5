"""The sending side's channels: which senders a commit on a database signals through
(``OUTBOX["WAKE"]``), built once per database by ``notify``."""

from __future__ import annotations

import logging

from django.conf import settings

from django_outbox import conf
from django_outbox.db import dialect
from django_outbox.wake.base import Sender

logger = logging.getLogger("django_outbox.wake")


def redis_configured(alias: str) -> bool:
    backend = str(getattr(settings, "CACHES", {}).get(alias, {}).get("BACKEND", ""))
    return backend.startswith("django_redis.")


class _Both(Sender):
    name = "postgres+redis"

    def __init__(self, senders: list[Sender]) -> None:
        self.senders = senders

    def send(self, queues: dict[str, float]) -> None:
        for sender in self.senders:
            try:
                sender.send(queues)
            except Exception as exc:
                logger.warning("wake-up through %s failed (%s)", sender.name, exc)


def build_sender(using: str) -> Sender | None:
    """The sender for commits on database ``using``, or None when nobody listens."""
    options = conf.get()
    senders: list[Sender] = []
    if options.WAKE in ("postgres", "auto") and dialect(using).listen_notify:
        # Imported only here: psycopg is an optional dependency.
        from django_outbox.wake.postgres import PostgresSender

        senders.append(PostgresSender(using))
    if options.WAKE == "redis" or (
        options.WAKE == "auto" and redis_configured(options.REDIS_ALIAS)
    ):
        from django_outbox.wake.redis import RedisSender

        senders.append(RedisSender(options.REDIS_ALIAS, using))
    if not senders:
        return None
    return senders[0] if len(senders) == 1 else _Both(senders)
