"""The event-type catalogue, ``OUTBOX["WEBHOOKS"]["EVENT_TYPES"]``: the event types an app
sends, each with a description, an example and an optional JSON Schema.

With no catalogue declared any event type goes, as before. Once one is declared it is the
list of what exists: ``send()`` refuses an event type it does not name, endpoints may only
subscribe with filters that match one of its types, and ``send()`` checks each payload
against its type's schema when ``VALIDATE_PAYLOADS`` says so (None, the default: under
``settings.DEBUG``, so development and the tests catch a payload that drifted from its
documented shape, and production does not pay for the check on every send).

The settings check (system check ``django_outbox.E005``) has made sure each schema is a
valid JSON Schema and each example matches its schema, so nothing here re-reads them.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError

from django_outbox import conf
from django_outbox.conf.rules import SCHEMAS_INSTALL

SETTING = "OUTBOX['WEBHOOKS']['EVENT_TYPES']"
#: The most schema errors one message lists.
MAX_ERRORS_SHOWN = 5


@dataclass(frozen=True, slots=True)
class EventType:
    """One declared event type, as the portal and the docs show it."""

    name: str
    description: str
    example: Any
    schema: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "example": self.example,
            "schema": self.schema,
        }


def declared() -> bool:
    """Whether a catalogue is declared: then only its event types may be sent."""
    return bool(conf.get().WEBHOOKS.EVENT_TYPES)


def event_types() -> list[EventType]:
    """Every declared event type, by name."""
    catalogue = conf.get().WEBHOOKS.EVENT_TYPES
    return [
        EventType(name, entry["description"], entry.get("example"), entry.get("schema"))
        for name, entry in sorted(catalogue.items())
    ]


def get(name: str) -> EventType | None:
    """The declared event type ``name``, or None."""
    entry = conf.get().WEBHOOKS.EVENT_TYPES.get(name)
    if entry is None:
        return None
    return EventType(name, entry["description"], entry.get("example"), entry.get("schema"))


def check_event_type(name: str) -> None:
    """ValidationError when a catalogue is declared and does not name ``name``."""
    catalogue = conf.get().WEBHOOKS.EVENT_TYPES
    if not catalogue or name in catalogue:
        return
    close = difflib.get_close_matches(name, list(catalogue), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValidationError(
        f"{name!r} is not a declared event type: {SETTING} declares {_listed(catalogue)}."
        f"{hint} Declare it there first."
    )


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """An endpoint's filter as a regular expression: ``*`` any run of characters, the rest
    literal, case-sensitive (as the fan-out matches it in SQL)."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def matching(pattern: str) -> list[str]:
    """The declared event types ``pattern`` matches."""
    regex = pattern_regex(pattern)
    return [name for name in sorted(conf.get().WEBHOOKS.EVENT_TYPES) if regex.fullmatch(name)]


def check_patterns(patterns: list[str]) -> None:
    """ValidationError for the first filter that matches no declared event type, when a
    catalogue is declared: such an endpoint would never receive anything."""
    catalogue = conf.get().WEBHOOKS.EVENT_TYPES
    if not catalogue:
        return
    for pattern in patterns:
        if not matching(pattern):
            raise ValidationError(
                f"The event type filter {pattern!r} matches no declared event type: {SETTING} "
                f"declares {_listed(catalogue)}."
            )


def validating() -> bool:
    """Whether ``send()`` checks payloads against their schemas now."""
    validate = conf.get().WEBHOOKS.VALIDATE_PAYLOADS
    return bool(settings.DEBUG) if validate is None else validate


def validate_payload(event_type: str, payload: Any) -> None:
    """ValidationError saying where and how ``payload`` does not match the schema of
    ``event_type`` (which must be declared with one to be checked).

    ``payload`` is the data as it is sent: JSON values (a tuple given to ``send()`` is a
    list by now)."""
    declared_type = get(event_type)
    if declared_type is None or declared_type.schema is None:
        return
    validator = _validator(json.dumps(declared_type.schema, sort_keys=True))
    errors = sorted(validator.iter_errors(payload), key=lambda e: (list(e.path), e.message))
    if not errors:
        return
    shown = "; ".join(f"at {e.json_path}: {e.message}" for e in errors[:MAX_ERRORS_SHOWN])
    more = len(errors) - MAX_ERRORS_SHOWN
    if more > 0:
        shown += f"; and {more} more"
    raise ValidationError(
        f"The payload of {event_type!r} does not match its schema in {SETTING}: {shown}. "
        "Nothing was sent."
    )


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    """A validator of one schema, built once (keyed by the schema's text, so a changed
    setting builds a new one), checking formats it knows ("date-time", "email" …)."""
    try:
        import jsonschema
    except ImportError:
        raise ImproperlyConfigured(
            f"{SETTING} declares JSON Schemas: validating payloads against them needs the "
            f"jsonschema package: {SCHEMAS_INSTALL}."
        ) from None
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _listed(catalogue: dict[str, Any], most: int = 10) -> str:
    names = sorted(catalogue)
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
