"""The structure docs/architecture.md describes (the import contracts are import-linter's,
in ``make lint``)."""

from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize

import pytest

import django_outbox

ROOT = pathlib.Path(django_outbox.__file__).parent

#: SQL that only some databases speak: casts, arrays, JSON functions, upserts, row locks,
#: advisory locks, the server's clock, the planner's catalogue.
VENDOR_SQL = re.compile(
    r"[\w)\]]::[a-z]|\bunnest\(|\bANY\(|\bjsonb|\bjson_(insert|remove|array|each|extract)\b"
    r"|ON CONFLICT|ON DUPLICATE|\bGREATEST\(|\bLEAST\(|FOR UPDATE|SKIP LOCKED|\bpg_[a-z_]+\("
    r"|statement_timestamp|reltuples|\bGLOB\b|julianday"
)

#: The PostgreSQL wake-up channel is itself PostgreSQL's (LISTEN, pg_notify), chosen by
#: ``Dialect.listen_notify``.
VENDOR_CHANNELS = {"wake/postgres.py"}


def _product_modules() -> list[pathlib.Path]:
    skipped = {"db", "migrations"}
    return [path for path in ROOT.rglob("*.py") if not skipped & set(path.relative_to(ROOT).parts)]


def test_only_the_database_seam_asks_which_database_it_runs_on():
    asking = [
        str(path.relative_to(ROOT))
        for path in _product_modules()
        # A connection's vendor or features; a dialect's own name, dialect(…).vendor, is fine.
        if re.search(r"(?<!\))\.vendor\b|features\.has_", path.read_text())
    ]
    assert asking == [], "ask django_outbox.db.dialect() instead"


def test_statements_only_some_databases_speak_are_written_in_the_seam():
    """Vendor SQL lives in django_outbox/db, by name; elsewhere statements are written in
    what every supported database accepts, or built by the dialect."""
    offenders = {
        f"{path.relative_to(ROOT)}: {found.group(0)}"
        for path in _product_modules()
        if str(path.relative_to(ROOT)) not in VENDOR_CHANNELS
        for found in VENDOR_SQL.finditer(_code(path))
    }
    assert offenders == set()


def test_the_vendor_sql_check_finds_what_it_looks_for():
    for sql in (
        "UPDATE t SET x = %s::jsonb",
        "SELECT * FROM unnest(%s)",
        "INSERT … ON CONFLICT DO NOTHING",
        "SELECT id … FOR UPDATE SKIP LOCKED",
        "SELECT pg_advisory_xact_lock(1, 2)",
        "json_insert(worker_ids, '$[#]', %s)",
        "(%s::timestamptz[])[array_position(%s::bigint[], id)]",
    ):
        assert VENDOR_SQL.search(sql), sql
    assert not VENDOR_SQL.search("UPDATE t SET status = %s WHERE id IN (%s, %s)")
    assert not VENDOR_SQL.search('f"::ffff:{address.ipv4_mapped}"')  # an IPv6 address


def _code(path: pathlib.Path) -> str:
    """The module without its comments and docstrings, which may name vendor SQL."""
    source = path.read_text()
    docstrings = {
        node.body[0].value.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }
    kept = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type != tokenize.COMMENT
        and not (token.type == tokenize.STRING and token.start[0] in docstrings)
    ]
    return " ".join(kept)


def test_no_job_row_is_written_outside_the_engines_enqueue_path():
    """Every job row goes through django_outbox/jobs/enqueue.py: no other product module
    inserts into the job table, creates Job rows or bulk-creates them."""
    writes = re.compile(
        r"Job\.objects(\.using\([^)]*\))?\.(create|bulk_create|get_or_create)\b"
        r"|INSERT INTO \{(job_table|quote\(Job\._meta\.db_table\))\}"
        r"|\bJob\(\s*(backend|queue|task_path)="
    )
    offenders = [
        str(path.relative_to(ROOT))
        for path in _product_modules()
        if path.name != "enqueue.py" and writes.search(path.read_text())
    ]
    assert offenders == []


def test_a_database_without_a_dialect_is_refused_by_name(settings):
    from django.db import NotSupportedError, connections

    from django_outbox.db import dialect

    connection = connections["default"]
    vendor = connection.vendor
    try:
        connection.vendor = "oracle"
        with pytest.raises(NotSupportedError, match="the database 'default' is oracle"):
            dialect("default")
    finally:
        connection.vendor = vendor
    assert dialect("default").vendor == vendor


def _cycles(graph) -> list[list[str]]:
    """The import cycles among the modules of ``graph`` (its strongly connected
    components of more than one module), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_the_product_has_no_import_cycle_not_even_a_deferred_or_type_only_one():
    grimp = pytest.importorskip("grimp")  # import-linter's, in the dev extra
    # Every import counts: inside functions and under TYPE_CHECKING as well.
    graph = grimp.build_graph("django_outbox", exclude_type_checking_imports=False)
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle():
    grimp = pytest.importorskip("grimp")
    graph = grimp.ImportGraph()
    for name in ("a", "a.b", "a.c", "a.d"):
        graph.add_module(name)
    graph.add_import(importer="a.b", imported="a.c")
    graph.add_import(importer="a.c", imported="a.b")
    graph.add_import(importer="a.d", imported="a.b")
    assert _cycles(graph) == [["a.b", "a.c"]]


def test_a_module_over_400_lines_says_at_its_top_why_it_is_one():
    long = {
        path.relative_to(ROOT).as_posix(): ast.get_docstring(ast.parse(path.read_text())) or ""
        for path in ROOT.rglob("*.py")
        if "migrations" not in path.parts and len(path.read_text().splitlines()) > 400
    }
    unsaid = [name for name, docstring in long.items() if "over 400 lines" not in docstring]
    assert unsaid == [], f"say why each is one module, at its top: {unsaid}"
