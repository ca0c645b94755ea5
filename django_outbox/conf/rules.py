"""How a setting is declared, and what follows from its declaration: the sentences that say
what is wrong with a value (each under its group's system check id) and the value turned
into its declared type.

A group of settings is a frozen dataclass: each field made with ``setting()`` (a default, a
rule, a one-line doc), and a ``check_id`` class attribute, the id of the system check that
reports the group's problems. A group may define ``conflicts()``: sentences about values
that are valid each on its own but not together, asked once every value of the group
(nested groups included) is valid, and given ``where`` the group's dict is.

One module over 400 lines: the rules of every kind of value and the sentences they write
share their wording and their coercions; split, two kinds would start to say the same
thing differently.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar, cast

from django_outbox.lib import text

T = TypeVar("T")
G = TypeVar("G")


@dataclass(frozen=True, slots=True)
class Problem:
    """One sentence about a settings value, and the id of the system check that says it."""

    check_id: str
    message: str


class Rule:
    """What a value must be: ``errors`` says what is wrong with one, as sentences that name
    it by ``where``; ``coerce`` turns a valid one into the declared type."""

    __slots__ = ()

    def errors(self, value: Any, where: str) -> list[str]:
        raise NotImplementedError

    def problems(self, value: Any, where: str, check_id: str) -> list[Problem]:
        return [Problem(check_id, message) for message in self.errors(value, where)]

    def coerce(self, value: Any) -> Any:
        return value


@dataclass(frozen=True, slots=True)
class Setting:
    """A setting's declaration, kept in its dataclass field's metadata."""

    rule: Rule
    doc: str
    #: Its problems are reported under this id rather than its group's.
    check_id: str | None = None


def setting(default: T, rule: Rule, doc: str, *, check_id: str | None = None) -> T:
    """Declare a group's setting: its default, its rule, a one-line doc."""
    metadata = {"setting": Setting(rule, doc, check_id)}
    if isinstance(default, dict):
        return cast(T, field(default_factory=default.copy, metadata=metadata))
    return field(default=default, metadata=metadata)


def declared(group: type) -> dict[str, Setting]:
    """A group's settings by name, in the order they are declared."""
    return {f.name: f.metadata["setting"] for f in fields(group) if "setting" in f.metadata}


def group_id(group: type) -> str:
    """The id of the system check that reports ``group``'s problems."""
    return cast(str, group.check_id)  # type: ignore[attr-defined]


def group_problems(group: type, raw: Any, where: str) -> list[Problem]:
    """Every problem with ``raw`` as ``group``'s dict, the dict found at ``where``."""
    check_id = group_id(group)
    if not isinstance(raw, dict):
        return [Problem(check_id, f"{where} must be a dict, not {type(raw).__name__}.")]
    settings = declared(group)
    known = ", ".join(settings)
    found = [
        Problem(check_id, f"{where}[{key!r}] is not a known setting (known: {known}).")
        for key in sorted(raw.keys() - settings.keys(), key=str)
    ]
    for name, declaration in settings.items():
        if name in raw:
            at = f"{where}[{name!r}]"
            found += declaration.rule.problems(raw[name], at, declaration.check_id or check_id)
    if not found and hasattr(group, "conflicts"):
        conflicts: list[str] = build(group, raw).conflicts(where)
        found += [Problem(check_id, message) for message in conflicts]
    return found


def build(group: type[G], raw: dict[str, Any]) -> G:
    """``group`` from a valid ``raw`` dict: each value given coerced, the rest defaults."""
    settings = declared(group)
    return group(
        **{
            name: settings[name].rule.coerce(value)
            for name, value in raw.items()
            if name in settings
        }
    )


def check_ids(group: type, where: str) -> dict[str, str]:
    """The check id of ``group`` and of each group below it, by where they are found."""
    ids = {where: group_id(group)}
    for name, declaration in declared(group).items():
        at = f"{where}[{name!r}]"
        if isinstance(declaration.rule, Group | ByName):
            ids |= check_ids(declaration.rule.group, at)
        elif declaration.check_id:
            ids[at] = declaration.check_id
    return ids


def most(ceiling: float, seconds: bool) -> str:
    """``31,622,400 (366 days)`` for a ceiling in seconds of an hour or more, else the number."""
    shown = text.number(ceiling)
    return f"{shown} ({text.duration(ceiling)})" if seconds and ceiling >= 3600 else shown


@dataclass(frozen=True, slots=True)
class Number(Rule):
    """A number above ``floor`` (or from it, with ``floor_allowed``) and at most ``ceiling``
    (which keeps out infinity and NaN); ``whole``: an ``int``; never a bool. ``seconds``
    shows a ceiling of an hour or more as a duration too; ``terse`` names only what is
    wrong, the type or the bounds."""

    ceiling: float
    floor: float = 0
    floor_allowed: bool = False
    whole: bool = False
    seconds: bool = False
    terse: bool = False

    def fits(self, value: Any) -> bool:
        return self._is_kind(value) and self._in_bounds(value)

    def errors(self, value: Any, where: str) -> list[str]:
        if self.fits(value):
            return []
        kind = "a whole number" if self.whole else "a number"
        low, high = text.number(self.floor), most(self.ceiling, self.seconds)
        if self.floor_allowed:
            bounds = f"from {low} to {high}"
        else:
            bounds = f"greater than {low} and at most {high}"
        wanted = f"{kind} {bounds}"
        if self.terse:  # the type or the bounds, whichever is wrong
            wanted = bounds if self._is_kind(value) else kind
        return [f"{where} must be {wanted}, not {value!r}."]

    def coerce(self, value: Any) -> Any:
        return int(value) if self.whole else float(value)

    def _is_kind(self, value: Any) -> bool:
        allowed = (int,) if self.whole else (int, float)
        return isinstance(value, allowed) and not isinstance(value, bool)

    def _in_bounds(self, value: float) -> bool:
        above = self.floor <= value if self.floor_allowed else self.floor < value
        return above and value <= self.ceiling


@dataclass(frozen=True, slots=True)
class Text(Rule):
    """A string with more than spaces in it; ``says`` what it must be."""

    says: str = "a non-empty string"

    def errors(self, value: Any, where: str) -> list[str]:
        if isinstance(value, str) and value.strip():
            return []
        return [f"{where} must be {self.says}, not {value!r}."]


@dataclass(frozen=True, slots=True)
class Secret(Rule):
    """A string, empty or at least ``min_length`` long; a message never repeats it."""

    min_length: int

    def errors(self, value: Any, where: str) -> list[str]:
        if not isinstance(value, str):
            return [f"{where} must be a string, not {type(value).__name__}."]
        if value and len(value) < self.min_length:
            return [f"{where} must be at least {self.min_length} characters long (or empty)."]
        return []


@dataclass(frozen=True, slots=True)
class Choice(Rule):
    """One of ``choices``."""

    choices: tuple[str, ...]

    def errors(self, value: Any, where: str) -> list[str]:
        if value in self.choices:
            return []
        return [f"{where} must be one of {', '.join(self.choices)}, not {value!r}."]


@dataclass(frozen=True, slots=True)
class Flag(Rule):
    """True or False (not 1, not "yes"); with ``none_says``, None too, which means that."""

    none_says: str = ""

    def errors(self, value: Any, where: str) -> list[str]:
        if isinstance(value, bool) or (self.none_says and value is None):
            return []
        if self.none_says:
            return [f"{where} must be True, False or None ({self.none_says}), not {value!r}."]
        return [f"{where} must be True or False, not {value!r}."]


@dataclass(frozen=True, slots=True)
class Names(Rule):
    """A list of non-empty strings, kept as a tuple; ``says`` what it must be."""

    says: str

    def errors(self, value: Any, where: str) -> list[str]:
        if isinstance(value, list | tuple) and all(isinstance(v, str) and v for v in value):
            return []
        return [f"{where} must be {self.says}, not {value!r}."]

    def coerce(self, value: Any) -> Any:
        return tuple(value)


#: A web origin as browsers send it: scheme, host and an optional port, nothing after.
ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?")


@dataclass(frozen=True, slots=True)
class Origins(Rule):
    """A list of web origins ('https://app.example.com', 'http://localhost:3000'): no
    path, no trailing slash, no wildcard; kept as a tuple."""

    def errors(self, value: Any, where: str) -> list[str]:
        if not isinstance(value, list | tuple):
            return [
                f"{where} must be a list of origins ('https://app.example.com'), not {value!r}."
            ]
        return [
            f"{where} lists {origin!r}, which is not an origin: write a scheme (http or "
            "https), a host and, if any, a port, with nothing after: 'https://app.example.com'."
            for origin in value
            if not isinstance(origin, str) or not ORIGIN.fullmatch(origin)
        ]

    def coerce(self, value: Any) -> Any:
        return tuple(value)


@dataclass(frozen=True, slots=True)
class Delays(Rule):
    """A non-empty list of seconds, each from 0 to ``ceiling``, kept as a tuple."""

    ceiling: float

    def errors(self, value: Any, where: str) -> list[str]:
        each = Number(self.ceiling, floor_allowed=True, seconds=True)
        if isinstance(value, list | tuple) and value and all(each.fits(v) for v in value):
            return []
        return [
            f"{where} must be a non-empty list of seconds (numbers from 0 to "
            f"{most(self.ceiling, seconds=True)}), not {value!r}."
        ]

    def coerce(self, value: Any) -> Any:
        return tuple(value)


@dataclass(frozen=True, slots=True)
class Networks(Rule):
    """A list of IP networks in CIDR notation (``10.0.0.0/8``), kept as a tuple."""

    def errors(self, value: Any, where: str) -> list[str]:
        if not isinstance(value, list | tuple):
            return [f"{where} must be a list, not {value!r}."]
        found = []
        for network in value:
            try:
                ipaddress.ip_network(network)
            except (TypeError, ValueError) as exc:
                found.append(f"{where}: {network!r} is not a network ({exc}).")
        return found

    def coerce(self, value: Any) -> Any:
        return tuple(value)


@dataclass(frozen=True, slots=True)
class Parsed(Rule):
    """A value ``parse`` accepts (its ValueError says why not); with ``listed``, a list,
    kept as a tuple."""

    parse: Callable[[Any], object]
    listed: bool = False

    def errors(self, value: Any, where: str) -> list[str]:
        if self.listed and not isinstance(value, list | tuple):
            return [f"{where} must be a list, not {value!r}."]
        try:
            self.parse(value)
        except ValueError as exc:
            return [f"{where}: {exc}"]
        return []

    def coerce(self, value: Any) -> Any:
        return tuple(value) if self.listed else value


@dataclass(frozen=True, slots=True)
class Keyed(Rule):
    """A dict, checked elsewhere key by key; ``says`` what it must be."""

    says: str

    def errors(self, value: Any, where: str) -> list[str]:
        if isinstance(value, dict):
            return []
        return [f"{where} must be {self.says}, not {type(value).__name__}."]


@dataclass(frozen=True, slots=True)
class Group(Rule):
    """A nested group of settings, as a dict; with ``optional``, None too. Its problems
    carry the group's own check id."""

    group: type
    optional: bool = False

    def problems(self, value: Any, where: str, check_id: str) -> list[Problem]:
        if self.optional and value is None:
            return []
        return group_problems(self.group, value, where)

    def coerce(self, value: Any) -> Any:
        return None if value is None else build(self.group, value)


@dataclass(frozen=True, slots=True)
class ByName(Rule):
    """A dict of nested groups by name (a queue's limits by queue name); ``says`` what it
    must be. Its problems carry the group's own check id."""

    group: type
    says: str

    def problems(self, value: Any, where: str, check_id: str) -> list[Problem]:
        if not isinstance(value, dict):
            message = f"{where} must be {self.says}, not {value!r}."
            return [Problem(group_id(self.group), message)]
        found = []
        for name, options in value.items():
            found += group_problems(self.group, options, f"{where}[{name!r}]")
        return found

    def coerce(self, value: Any) -> Any:
        return {name: build(self.group, options) for name, options in value.items()}


#: An event type's name (``webhooks.send()`` takes the same).
EVENT_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,255}")
#: What an event type's declaration may hold, and which of it it must.
EVENT_TYPE_KEYS = ("description", "example", "schema")
SCHEMAS_INSTALL = "pip install 'django-outbox-tasks[schemas]'"


@dataclass(frozen=True, slots=True)
class EventTypes(Rule):
    """The event-type catalogue: a dict of event-type names to ``{"description": str,
    "example": a JSON value, "schema": a JSON Schema (optional)}``. A schema must be a valid
    JSON Schema, and the example must match it: the jsonschema package checks both, so a
    catalogue with schemas needs it installed."""

    def errors(self, value: Any, where: str) -> list[str]:
        if not isinstance(value, dict):
            return [
                f"{where} must be a dict of event-type names to their description, example and "
                f"optional schema, not {type(value).__name__}."
            ]
        found: list[str] = []
        for name, declared in value.items():
            found += self._entry_errors(name, declared, f"{where}[{name!r}]")
        return found

    def _entry_errors(self, name: Any, declared: Any, at: str) -> list[str]:
        if not isinstance(name, str) or not EVENT_TYPE.fullmatch(name):
            return [
                f"{at}: {name!r} is not an event type name: use 1 to 255 letters, digits and "
                "'_ . : -', e.g. 'invoice.paid'."
            ]
        if not isinstance(declared, dict):
            return [
                f'{at} must be a dict: {{"description": "…", "example": {{…}}, "schema": '
                f"{{…}} (optional)}}, not {type(declared).__name__}."
            ]
        found = [
            f"{at}[{key!r}] is not a known key (known: {', '.join(EVENT_TYPE_KEYS)})."
            for key in sorted(declared.keys() - set(EVENT_TYPE_KEYS), key=str)
        ]
        description = declared.get("description")
        if not isinstance(description, str) or not description.strip():
            found.append(f"{at}['description'] must be a non-empty string, not {description!r}.")
        if "example" not in declared:
            found.append(f"{at} needs an 'example': a payload as send() would be given it.")
        else:
            try:
                json.dumps(declared["example"], allow_nan=False)
            except (TypeError, ValueError) as exc:
                found.append(f"{at}['example'] must be a JSON value ({exc}).")
                return found
        if declared.get("schema") is not None and not found:
            found += _schema_errors(declared["schema"], declared["example"], at)
        return found


def _schema_errors(schema: Any, example: Any, at: str) -> list[str]:
    """What is wrong with an event type's schema, or with its example by the schema."""
    if not isinstance(schema, dict | bool):
        return [f"{at}['schema'] must be a JSON Schema (a dict), not {type(schema).__name__}."]
    try:
        import jsonschema
    except ImportError:
        return [
            f"{at}['schema'] needs the jsonschema package to be checked and used: "
            f"{SCHEMAS_INSTALL}."
        ]
    validator = jsonschema.validators.validator_for(schema)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "".join(f"[{part!r}]" for part in exc.path)
        return [f"{at}['schema']{where} is not a valid JSON Schema: {exc.message}."]
    checker = validator(schema, format_checker=validator.FORMAT_CHECKER)
    problem = jsonschema.exceptions.best_match(checker.iter_errors(example))
    if problem is not None:
        return [
            f"{at}['example'] does not match its own schema: at {problem.json_path}, "
            f"{problem.message}."
        ]
    return []
