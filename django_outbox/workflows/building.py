"""Building workflows in memory: steps, chains, groups, chords and DAGs. No I/O here.

Every building block places its steps in a ``Plan`` (a list of steps, each with the steps
it waits for) and says which of its steps end it (its exits) and how their results reach
what comes next: a step's or a chain's as one value, a group's as a list in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django_outbox.compat import Task
from django_outbox.jobs.enqueue import json_arguments
from django_outbox.models import Receives
from django_outbox.workflows.plan import Plan, PlannedStep
from django_outbox.workflows.runs import Run
from django_outbox.workflows.writing import write


class Element(Protocol):
    def place(
        self, plan: Plan, after: list[int], passing: Receives
    ) -> tuple[list[int], Receives]: ...


@dataclass(frozen=True, slots=True)
class Step(PlannedStep):
    """One task call in a workflow, with its task's options (queue, priority, retries,
    timeout, limits). Made by ``step()``; ``.always()`` and ``.immutable()`` return a
    changed copy."""

    def enqueue(self, name: str = "") -> Run:
        """Enqueue this one step as a workflow of its own."""
        return chain(self).enqueue(name)


def step(task: Task, *args: Any, **kwargs: Any) -> Step:
    """A step: ``task`` called with these arguments, once the steps before it allow.

    Building does no I/O; the arguments are checked here, as ``enqueue()`` would check
    them (JSON only), so a mistake shows where it was made."""
    if not isinstance(task, Task):
        raise TypeError(
            f"workflows.step() takes a task (a function decorated with @task), not {task!r}"
        )
    if getattr(task, "concurrency_key", None) or getattr(task, "sequence_key", None):
        raise ValueError(
            f"{task.module_path} has a concurrency_key or a sequence_key: a workflow's steps "
            "cannot take them yet: enqueue the task on its own"
        )
    json_arguments(task, args, kwargs)
    return Step(task, args, dict(kwargs))


class Composite:
    """What chains, groups and chords share: enqueueing one as a workflow of its own."""

    def place(self, plan: Plan, after: list[int], passing: Receives) -> tuple[list[int], Receives]:
        raise NotImplementedError

    def enqueue(self, name: str = "") -> Run:
        """Write this workflow in the current transaction (a rollback leaves nothing) and
        return its run (``.id``, ``.status``)."""
        plan = Plan()
        exits, shape = self.place(plan, [], Receives.NOTHING)
        return write(plan, exits, shape == Receives.LIST, name)


class Chain(Composite):
    """Its elements one after another; each step gets the previous result first."""

    def __init__(self, elements: Sequence[Element]) -> None:
        self.elements = checked_elements("chain", elements)

    def place(self, plan: Plan, after: list[int], passing: Receives) -> tuple[list[int], Receives]:
        for element in self.elements:
            after, passing = element.place(plan, after, passing)
        return after, passing


class Group(Composite):
    """Its members side by side; what follows gets their results as a list, in order."""

    def __init__(self, members: Sequence[Element]) -> None:
        self.members = checked_elements("group", members)

    def place(self, plan: Plan, after: list[int], passing: Receives) -> tuple[list[int], Receives]:
        exits: list[int] = []
        for member in self.members:
            member_exits, _ = member.place(plan, after, passing)
            exits += member_exits
        return exits, Receives.LIST


class Chord(Composite):
    """A group, then a callback that runs once every member has ended, with their results
    in order as its first argument."""

    def __init__(self, header: Sequence[Element] | Group, callback: Element) -> None:
        self.header: Group
        if isinstance(header, Group):
            self.header = header
        elif isinstance(header, Iterable) and not isinstance(header, str | bytes):
            self.header = Group(list(header))
        else:
            raise TypeError(f"a chord's first argument is a list of steps, not {header!r}")
        self.callback = checked_elements("chord", [callback])[0]

    def place(self, plan: Plan, after: list[int], passing: Receives) -> tuple[list[int], Receives]:
        exits, shape = self.header.place(plan, after, passing)
        return self.callback.place(plan, exits, shape)


def chain(*elements: Element) -> Chain:
    return Chain(elements)


def group(*members: Element) -> Group:
    return Group(members)


def chord(header: Sequence[Element] | Group, callback: Element) -> Chord:
    return Chord(header, callback)


def checked_elements(kind: str, given: Sequence[Any]) -> list[Element]:
    """``given`` as building blocks, or a clear error."""
    found = list(given)
    if not found:
        raise ValueError(f"{_article(kind)} needs at least one step")
    for element in found:
        if not isinstance(element, Step | Composite):
            raise TypeError(
                f"{_article(kind)} takes steps (workflows.step(task, ...)), chains, groups "
                f"and chords, not {element!r}"
            )
    return found


def _article(kind: str) -> str:
    """'a chain'; a name that has its own article or is a call stays as it is."""
    return kind if kind.startswith("a ") or kind.endswith(")") else f"a {kind}"


@dataclass(frozen=True, slots=True)
class Handle:
    """What ``Workflow.add()`` returns: name it in ``after=`` of the steps that wait for it."""

    workflow: Workflow
    exits: tuple[int, ...]


class Workflow:
    """A DAG: each step added names the steps it waits for.

    ``a = wf.add(s1); b = wf.add(s2, after=[a])``. A step that waits for several starts
    when all have ended; its upstream results are in ``context.upstream_results``.
    """

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._plan = Plan()

    def add(
        self, element: Step | Composite, after: Iterable[Handle] = (), always: bool = False
    ) -> Handle:
        """Add ``element`` (a step, or a chain, group or chord), waiting for ``after``;
        ``always``: it runs even if those failed (a step only)."""
        checked_elements("workflow", [element])
        if always:
            if not isinstance(element, Step):
                raise TypeError("always=True is for a step; mark the steps inside with .always()")
            element = element.always()
        parents: list[int] = []
        for handle in after:
            if not isinstance(handle, Handle) or handle.workflow is not self:
                raise ValueError(
                    f"after= takes what this workflow's add() returned, not {handle!r}"
                )
            parents += [p for p in handle.exits if p not in parents]
        exits, _ = element.place(self._plan, parents, Receives.NOTHING)
        return Handle(self, tuple(exits))

    def enqueue(self, name: str = "") -> Run:
        """Write the workflow in the current transaction; its result is its last step's
        (the one no other step waits for), or a list of them in order if several."""
        if not self._plan.nodes:
            raise ValueError("this workflow has no steps: add() some first")
        waited_for = {p for node in self._plan.nodes for p in node.parents}
        ends = [i for i in range(len(self._plan.nodes)) if i not in waited_for]
        return write(self._plan, ends, len(ends) > 1, name or self.name)
