"""Workflows: jobs that wait for other jobs (chains, groups, chords, DAGs).

A step is a job row (``Job.workflow_id`` set) plus a ``WorkflowStep`` row that counts the
parents it still waits for; ``WorkflowEdge`` rows say who waits for whom. A step waits in
the job status ``waiting``, which no claim reads; when its count reaches 0 it is queued.
The counter is what makes a chord's callback start exactly once and cheaply: each finished
parent takes one off under the step's row lock, and the statement that takes the last one
off is the one that queues it, without looking at the siblings.

The links to jobs carry no database constraint: retention deletes finished jobs in chunks
of its own, and a workflow's rows go with its workflow.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class WorkflowStatus(models.TextChoices):
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Receives(models.IntegerChoices):
    """What a step gets from its parents as its first argument."""

    NOTHING = 0, "nothing"
    ONE = 1, "its parent's result"
    LIST = 2, "its parents' results, in order"


class Workflow(models.Model):
    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200, blank=True)
    status = models.CharField(
        max_length=10, choices=WorkflowStatus.choices, default=WorkflowStatus.RUNNING
    )
    created_at = models.DateTimeField(default=timezone.now)
    #: When the last of its steps ended (NULL while any can still run).
    finished_at = models.DateTimeField(null=True, blank=True)
    steps_total = models.PositiveIntegerField(default=0)
    #: Steps that have not ended yet; the workflow is finished at 0.
    steps_left = models.IntegerField(default=0)
    #: The positions of the steps whose results make the workflow's result.
    result_positions = models.JSONField(default=list)
    #: The result is a list of those steps' results (a group), not the one step's result.
    result_is_list = models.BooleanField(default=False)
    #: A batch (workflows.batch): jobs may be added to it while it runs.
    is_batch = models.BooleanField(default=False)
    #: A batch's callbacks (on_success, on_complete): the positions of the steps that wait
    #: for every member, those added later included.
    batch_callbacks = models.JSONField(default=list)

    class Meta:
        db_table = "django_outbox_workflow"
        indexes = [models.Index(fields=["status", "created_at"], name="outbox_workflow_status")]

    def __str__(self) -> str:
        return f"workflow #{self.pk}" + (f" {self.name}" if self.name else "")


class WorkflowStep(models.Model):
    job = models.OneToOneField(
        "django_outbox.Job",
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="step",
    )
    # No index of its own: the unique (workflow, position) below serves every lookup by
    # workflow, and a workflow's write updates one index fewer a step.
    workflow = models.ForeignKey(
        Workflow,
        on_delete=models.CASCADE,
        db_constraint=False,
        related_name="steps",
        db_index=False,
    )
    #: The step's place in its workflow, in the order it was built.
    position = models.PositiveIntegerField()
    #: Parents that have not ended yet; at 0 the step is queued (or stays not run).
    waiting_on = models.IntegerField(default=0)
    #: Runs once its parents have ended, whether they succeeded or not (clean-up steps).
    always = models.BooleanField(default=False)

    class Meta:
        db_table = "django_outbox_workflow_step"
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "position"], name="outbox_workflow_step_position"
            )
        ]

    def __str__(self) -> str:
        return f"step {self.position} of workflow #{self.workflow_id}"


class WorkflowEdge(models.Model):
    """``child`` waits for ``parent``; ``position`` orders a child's parents (the order
    their results reach it)."""

    id = models.BigAutoField(primary_key=True)
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, db_constraint=False, related_name="+"
    )
    parent = models.ForeignKey(
        "django_outbox.Job", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    child = models.ForeignKey(
        "django_outbox.Job",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
        db_index=False,
    )
    position = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "django_outbox_workflow_edge"
        indexes = [
            # A child's parents in order: its results, and the count the release takes off.
            models.Index(fields=["child", "position"], name="outbox_workflow_edge_child"),
        ]

    def __str__(self) -> str:
        return f"#{self.child_id} after #{self.parent_id}"
