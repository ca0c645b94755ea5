"""Peers for ``outbox_bench drain|latency|idle --peers``: other Python job queues, measured
on this machine in the same invocation as django_outbox, each with its documented defaults
and a job that does nothing.

Each peer runs in processes of its own (with Django settings of its own, or none), in a
PostgreSQL schema of its own that is dropped after the run; Celery uses a Redis queue and
keys of its own, deleted after the run. A peer that is not installed (the ``bench-peers``
extra) or cannot run here is listed with the reason, not measured.
"""

from __future__ import annotations

from outbox_bench.peers.base import Peer, PeerDrain, PeerError, PeerIdle, PeerLatency

__all__ = ["Peer", "PeerDrain", "PeerError", "PeerIdle", "PeerLatency", "all_peers"]


def all_peers() -> list[Peer]:
    from outbox_bench.peers import celery_peer, pgqueuer_peer, procrastinate_peer, tasks_db

    return [
        tasks_db.TasksDb(),
        procrastinate_peer.Procrastinate(),
        pgqueuer_peer.PgQueuerPeer(),
        celery_peer.Celery(),
    ]
