"""The demo command end to end, small: enqueue through the views, drain, summarise."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from django_outbox.models import Attempt, Delivery, DeliveryStatus, Job, JobStatus
from testproject.shop.models import Customer, Order


@pytest.mark.django_db(transaction=True)
def test_demo_enqueues_through_the_views_and_finishes_every_job() -> None:
    out = StringIO()
    call_command("demo", "--no-serve", "--customers", "20", "--orders", "10", stdout=out)
    text = out.getvalue()

    assert Customer.objects.count() == 20
    assert Order.objects.count() == 10
    # 20 welcomes, 10 invoices, and 10 order.placed webhooks to each of 2 endpoints.
    assert Job.objects.count() == 50
    assert Delivery.objects.filter(status=DeliveryStatus.SUCCEEDED).count() == 20
    assert Attempt.objects.count() == 60  # the receiver fails the first two of each
    assert not Job.objects.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).exists()
    # One order in 25, at least one, is over 900: its invoice fails all 3 attempts.
    failed = Job.objects.filter(status=JobStatus.FAILED, task_path__endswith="render_invoice")
    assert failed.count() == 1
    assert failed.get().attempts == 3
    assert (
        Customer.objects.filter(welcomed_at__isnull=True).count()
        == Job.objects.filter(task_path__endswith="send_welcome", status=JobStatus.FAILED).count()
    )

    assert text.count("(nothing enqueued)") == 2
    assert "cannot render an invoice over 900" in text
    assert "50 jobs finished" in text
    assert "20 deliveries (20 succeeded, 0 failed) in 60 attempts" in text
    assert get_user_model().objects.get(username="admin").is_superuser


@pytest.mark.django_db(transaction=True)
def test_a_second_demo_counts_what_it_cleared_by_kind() -> None:
    call_command("demo", "--no-serve", "--customers", "4", "--orders", "3", stdout=StringIO())
    out = StringIO()
    call_command("demo", "--no-serve", "--customers", "4", "--orders", "3", stdout=out)
    cleared = next(line for line in out.getvalue().splitlines() if "Clean slate" in line)
    # 3 order.placed messages, each to 2 endpoints, each delivery in 3 attempts: counted
    # as what they are, not all as "webhook messages".
    assert "3 webhook messages" in cleared
    assert "6 deliveries" in cleared and "18 delivery attempts" in cleared
    assert "4 customers" in cleared and "3 orders" in cleared


def test_the_progress_line_says_why_it_stands_still_during_a_backoff() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from testproject.shop.management.commands.demo import Progress

    soon = timezone.now() + timedelta(seconds=4)
    waiting = Progress(total=10, queued=2, retrying=2, succeeded=8, next_retry=soon)
    assert re.search(r"waiting to retry 2 \(backoff: next in [34]\.\d s\)", waiting.line(1.0))
    busy = Progress(total=10, queued=2, retrying=2, running=1, succeeded=7, next_retry=soon)
    assert "backoff" not in busy.line(1.0)  # something runs: the bar moves
