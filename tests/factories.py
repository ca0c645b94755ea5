"""factory-boy factories for django_outbox's models."""

from __future__ import annotations

import factory
from django.utils import timezone

from django_outbox.models import Job, JobStatus, Worker


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    task_path = "tests.tasks.noop"
    queue = "default"
    status = JobStatus.QUEUED
    args = factory.LazyFunction(list)
    kwargs = factory.LazyFunction(dict)
    run_at = factory.LazyFunction(timezone.now)
    max_attempts = 3

    class Params:
        running = factory.Trait(
            status=JobStatus.RUNNING,
            attempts=1,
            worker_id="test-worker",
            worker_ids=factory.LazyFunction(lambda: ["test-worker"]),
            lease_until=factory.LazyFunction(
                lambda: timezone.now() + timezone.timedelta(seconds=30)
            ),
        )


class WorkerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Worker

    id = factory.Sequence(lambda n: f"host:{1000 + n}:test")
    hostname = "host"
    pid = factory.Sequence(lambda n: 1000 + n)
    concurrency = 4
    queues = factory.LazyFunction(lambda: ["default"])
