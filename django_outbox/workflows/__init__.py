"""Workflows: chains, groups, chords and DAGs of tasks, enqueued in the caller's transaction.

    from django_outbox import workflows
    s = workflows.step(task, *args, **kwargs)              # a step; builds nothing in the database
    workflows.chain(s1, s2, s3).enqueue()                  # returns a run with .id
    workflows.group(s1, s2, s3).enqueue()
    workflows.chord([s1, s2, s3], callback_step).enqueue()
    wf = workflows.Workflow(); a = wf.add(s1); b = wf.add(s2, after=[a]); run = wf.enqueue()
    run = workflows.get(run.id)   # .status, .result, .steps
    b = workflows.batch(s1, s2, on_success=s3, on_complete=s4).enqueue()
    workflows.add_to_batch(context, s5)                    # from one of the batch's jobs

See docs/workflows.md.
"""

from django_outbox.workflows.batches import (
    Batch,
    BatchClosed,
    BatchNotStarted,
    add_to_batch,
    batch,
)
from django_outbox.workflows.building import (
    Chain,
    Chord,
    Group,
    Handle,
    Step,
    Workflow,
    chain,
    chord,
    group,
    step,
)
from django_outbox.workflows.runs import (
    UPSTREAM_FAILED,
    Run,
    StepState,
    WorkflowDoesNotExist,
    WorkflowNotRetryable,
    cancel,
    get,
    retry,
)
from django_outbox.workflows.writing import UniqueKeyHeld

__all__ = [
    "UPSTREAM_FAILED",
    "Batch",
    "BatchClosed",
    "BatchNotStarted",
    "Chain",
    "Chord",
    "Group",
    "Handle",
    "Run",
    "Step",
    "StepState",
    "UniqueKeyHeld",
    "Workflow",
    "WorkflowDoesNotExist",
    "WorkflowNotRetryable",
    "add_to_batch",
    "batch",
    "cancel",
    "chain",
    "chord",
    "get",
    "group",
    "retry",
    "step",
]
