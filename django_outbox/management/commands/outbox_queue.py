"""``python manage.py outbox_queue pause|resume NAME [NAME ...]``, ``outbox_queue list``:
pause and resume queues (docs/queues.md), and see which are paused."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_outbox import conf, health, queues
from django_outbox.backend import OutboxBackend
from django_outbox.compat import InvalidTaskBackend, task_backends
from django_outbox.db.routing import jobs_of
from django_outbox.lib import text
from django_outbox.migrated import require_migrated
from django_outbox.models import QueueState, Worker

ACTIONS = ("pause", "resume", "list")


class Command(BaseCommand):
    help = (
        "Pause or resume queues: workers claim no job of a paused queue (from within a "
        "second; running jobs finish) until it is resumed; enqueueing goes on. "
        "`list` shows every queue known (configured, paused once, or served by a live "
        "worker) and whether it is paused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=ACTIONS, help="pause, resume or list.")
        parser.add_argument("names", nargs="*", metavar="NAME", help="The queues (not for list).")
        parser.add_argument(
            "--backend",
            default="default",
            help="The TASKS alias whose database holds the queues (default: default).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action, names, backend = options["action"], options["names"], options["backend"]
        aliases = getattr(settings, "TASKS", {})
        if backend not in aliases:
            raise CommandError(
                f"No TASKS alias {backend!r}; the aliases are: {', '.join(map(repr, aliases))}."
            )
        with jobs_of(backend):
            require_migrated("python manage.py outbox_queue")
        if action == "list":
            if names:
                raise CommandError("outbox_queue list takes no queue names.")
            self._list(backend)
            return
        if not names:
            raise CommandError(f"Name the queues to {action}: outbox_queue {action} NAME ...")
        for name in names:
            try:
                queues.check_name(name)
            except ValueError as exc:
                raise CommandError(f"{exc} (given: {name!r})") from None
        change = queues.pause if action == "pause" else queues.resume
        for name in dict.fromkeys(names):
            if change(name, backend=backend):
                done = (
                    "paused: workers claim none of its jobs from within a second"
                    if action == "pause"
                    else "resumed: its due jobs run now"
                )
                self.stdout.write(f"{name}: {done}")
            else:
                self.stdout.write(
                    f"{name}: {'paused already' if action == 'pause' else 'was not paused'}"
                )

    def _list(self, backend: str) -> None:
        """Each queue known, cheaply: those the settings name, those with a state row,
        those a live worker serves (no scan of the jobs)."""
        now = timezone.now()
        with jobs_of(backend):
            states = dict(QueueState.objects.values_list("name", "paused_at"))
            serving: dict[str, int] = {}
            for worker in Worker.objects.filter(stopped_at=None):
                if health.live(worker, now):
                    for queue in worker.queues:
                        serving[queue] = serving.get(queue, 0) + 1
        names = sorted(set(states) | set(serving) | configured(backend))
        if not names:
            self.stdout.write("No queue is configured, paused or served by a live worker.")
            return
        width = max(len(name) for name in names)
        for name in names:
            paused_at = states.get(name)
            state = (
                f"paused since {timezone.localtime(paused_at):%Y-%m-%d %H:%M:%S} "
                f"({text.duration((now - paused_at).total_seconds())} ago)"
                if paused_at
                else "running"
            )
            workers = text.count(serving.get(name, 0), "live worker")
            self.stdout.write(f"{name:<{width}}  {state}; {workers}")


def configured(backend: str) -> set[str]:
    """The queues the settings name: ``OUTBOX["QUEUES"]`` and ``TASKS[backend]["QUEUES"]``."""
    names = set(conf.get().QUEUES)
    try:
        found = task_backends[backend]
    except InvalidTaskBackend:
        return names
    if isinstance(found, OutboxBackend):
        names.update(found.queues)
    return names
