"""What a workflow is before it is written: its steps, each with the steps it waits for
and how their results reach it. The builders (``building``) make plans and the writer
(``writing``) writes them; both import this module, neither imports the other's way back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Self

from django_outbox.compat import Task
from django_outbox.models import Receives


@dataclass(slots=True)
class Node:
    step: PlannedStep
    #: Positions of the steps it waits for, in the order their results reach it.
    parents: list[int]
    receives: Receives


@dataclass(slots=True)
class Plan:
    nodes: list[Node] = field(default_factory=list)
    #: The positions of the members a batch in it was built with (one batch a workflow),
    #: or None.
    batch: list[int] | None = None

    def add(self, step: PlannedStep, parents: list[int], receives: Receives) -> int:
        self.nodes.append(Node(step, parents, receives))
        return len(self.nodes) - 1

    def mark_batch(self, members: list[int]) -> None:
        if self.batch is not None:
            raise ValueError(
                "a workflow holds one batch at most: add_to_batch() would not know which "
                "of them a job joins"
            )
        self.batch = members

    def batch_waiters(self) -> list[int] | None:
        """The steps that wait for every member of its batch (its callbacks, or in a chain
        what follows the batch), in order; None without a batch."""
        if self.batch is None:
            return None
        members = set(self.batch)
        return [i for i, node in enumerate(self.nodes) if members <= set(node.parents)]


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """One task call in a workflow, with its task's options (queue, priority, retries,
    timeout, limits): what the writer reads of a ``building.Step``."""

    task: Task
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: Runs once the steps it waits for have ended, whether they succeeded or not.
    run_always: bool = False
    #: Takes the previous step's result as its first argument, in a chain or chord.
    takes_result: bool = True

    def always(self) -> Self:
        """This step runs once the steps it waits for have ended, even if they failed
        (a clean-up step)."""
        return replace(self, run_always=True)

    def immutable(self) -> Self:
        """This step takes no result from the step before it in a chain or chord: it gets
        its own arguments only."""
        return replace(self, takes_result=False)

    def place(self, plan: Plan, after: list[int], passing: Receives) -> tuple[list[int], Receives]:
        receives = passing if after and self.takes_result else Receives.NOTHING
        return [plan.add(self, after, receives)], Receives.ONE

    def __str__(self) -> str:
        return self.task.name
