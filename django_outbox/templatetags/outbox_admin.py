"""Template tags of the admin pages.

``outbox_date_hierarchy``: a date hierarchy for large tables, the same drill-down as
Django's (year → month → day), with choices worked out from the calendar instead of read
from the table. Django's own tag runs MIN and MAX over the list, then SELECT DISTINCT of its
years, months or days: full scans of a table of millions of rows on every page. This one
offers the years, months and days from the date of the table's first row by primary key
(one row read through the primary key: the dates in question are set when a row is
written, so the first row is the oldest) to today; a period with no rows simply lists
nothing. Filtering by the chosen period is Django's own.

``outbox_breadcrumbs``: the breadcrumbs of a page of ours, marked up as the installed
Django's admin marks up its own, so that its stylesheet dresses them.
"""

from __future__ import annotations

import calendar
import datetime
from typing import Any

import django
from django import template
from django.contrib.admin.utils import get_fields_from_path
from django.utils import formats, timezone
from django.utils.text import capfirst
from django.utils.translation import gettext as _

register = template.Library()

#: Django 6.1's admin writes its breadcrumbs as a list (``<ol class="breadcrumbs">`` of
#: ``<li>``) and its stylesheet styles only that; 5.2 and 6.0 write and style
#: ``<div class="breadcrumbs">`` with ``&rsaquo;`` between the links. Either markup under the
#: other's stylesheet shows bare links at the page's left edge.
BREADCRUMBS_AS_LIST = django.VERSION >= (6, 1)


@register.inclusion_tag("admin/django_outbox/breadcrumbs.html")
def outbox_breadcrumbs(opts: Any, here: str, model_list: bool = True) -> dict[str, Any]:
    """Home, the app, the model's list (unless ``model_list`` is false), ``here``."""
    return {
        "opts": opts,
        "here": here,
        "model_list": model_list,
        "as_list": BREADCRUMBS_AS_LIST,
    }


@register.inclusion_tag("admin/date_hierarchy.html")
def outbox_date_hierarchy(cl: Any) -> dict[str, Any]:
    field_name = cl.date_hierarchy
    field = get_fields_from_path(cl.model, field_name)[-1]
    params = {part: cl.params.get(f"{field_name}__{part}") for part in ("year", "month", "day")}
    year, month, day = (_number(params[part]) for part in ("year", "month", "day"))
    today = timezone.localdate()
    first = _first_date(cl, field_name)

    def link(**lookups: int) -> str:
        query = {f"{field_name}__{part}": value for part, value in lookups.items()}
        return str(cl.get_query_string(query, [f"{field_name}__"]))

    context: dict[str, Any] = {"show": True, "field_name": field.verbose_name}
    if first is None:  # an empty table: no period to offer
        context["back"], context["choices"] = None, []
    elif year and month and day:
        date = datetime.date(year, month, day)
        context["back"] = {
            "link": link(year=year, month=month),
            "title": capfirst(formats.date_format(date, "YEAR_MONTH_FORMAT")),
        }
        context["choices"] = [{"title": capfirst(formats.date_format(date, "MONTH_DAY_FORMAT"))}]
    elif year and month:
        last = calendar.monthrange(year, month)[1]
        days = [datetime.date(year, month, d) for d in range(1, last + 1)]
        context["back"] = {"link": link(year=year), "title": str(year)}
        context["choices"] = [
            {
                "link": link(year=year, month=month, day=d.day),
                "title": capfirst(formats.date_format(d, "MONTH_DAY_FORMAT")),
            }
            for d in days
            if first <= d <= today
        ]
    elif year:
        months = [datetime.date(year, m, 1) for m in range(1, 13)]
        context["back"] = {"link": link(), "title": _("All dates")}
        context["choices"] = [
            {
                "link": link(year=year, month=m.month),
                "title": capfirst(formats.date_format(m, "YEAR_MONTH_FORMAT")),
            }
            for m in months
            if first.replace(day=1) <= m <= today
        ]
    else:
        context["back"] = None
        context["choices"] = [
            {"link": link(year=y), "title": str(y)} for y in range(first.year, today.year + 1)
        ]
    return context


def _first_date(cl: Any, field_name: str) -> datetime.date | None:
    """The date of the first row by primary key (None: an empty table), in the current
    time zone as the admin's filtering reads it."""
    model = cl.model
    found = (
        model._default_manager.using(cl.root_queryset.db)
        .order_by("pk")
        .values_list(field_name, flat=True)
        .first()
    )
    if found is None:
        return None
    if isinstance(found, datetime.datetime):
        return timezone.localtime(found).date() if timezone.is_aware(found) else found.date()
    return found


def _number(value: Any) -> int | None:
    if isinstance(value, list):
        value = value[-1] if value else None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
