"""``outbox_bench … --plot DIR``: a PNG chart of a workload's figures (matplotlib, from the
``bench`` extra).

Each chart is drawn from the same dictionary ``--json`` writes, so a chart never shows a
figure the table did not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(results: dict[str, Any], directory: Path) -> Path:
    """Draw ``results`` (one workload's) to ``directory/<workload>.png``; returns the path."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    workload, figures = results["workload"], results["figures"]
    draw = _DRAWERS[workload]
    panels = draw(figures)
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for axis, (title, kind, labels, series, unit) in zip(axes[0], panels, strict=True):
        if kind == "bars":
            width = 0.8 / max(1, len(series))
            for position, (name, values) in enumerate(series.items()):
                offsets = [i + position * width for i in range(len(labels))]
                axis.bar(offsets, values, width, label=name)
            axis.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(labels))])
            many = len(labels) > 3  # peers' names overlap when level
            axis.set_xticklabels(
                labels, rotation=25 if many else 0, ha="right" if many else "center"
            )
        else:
            for name, values in series.items():
                axis.plot(labels, values, marker="o", label=name)
            axis.set_xscale("log")
            axis.set_yscale("log")
        axis.set_title(title)
        axis.set_ylabel(unit)
        if len(series) > 1:
            axis.legend()
    fig.suptitle(f"outbox_bench {workload} ({results['database']})")
    fig.tight_layout()
    path = directory / f"{workload}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


Panel = tuple[str, str, list[Any], dict[str, list[float]], str]


def _drain(f: dict[str, Any]) -> list[Panel]:
    labels = ["django_outbox"]
    rates = [f["drain"]["drain_per_s"]]
    if "ceiling" in f:
        labels.append("raw-SQL ceiling")
        rates.append(f["ceiling"]["per_s"])
    for peer in _measured(f):
        labels.append(peer["peer"])
        rates.append(peer["per_s"])
    return [("drain", "bars", labels, {"jobs/s": rates}, "jobs/s")]


def _measured(f: dict[str, Any]) -> list[dict[str, Any]]:
    """The peers that ran (the others have a reason or an error instead of figures)."""
    return [peer for peer in f.get("peers", []) if "missing" not in peer and "failed" not in peer]


def _latency(f: dict[str, Any]) -> list[Panel]:
    rows = f.get("modes", []) + _measured(f)
    series = {p: [r[f"{p}_ms"] for r in rows] for p in ("p50", "p95", "p99")}
    labels = [r.get("mode") or r["peer"] for r in rows]
    return [("pickup latency", "bars", labels, series, "ms")]


def _idle(f: dict[str, Any]) -> list[Panel]:
    modes = f.get("modes", [])
    labels = [m["mode"] for m in modes]
    # What the server counted: PostgreSQL's commits (or the worker's statements where the
    # database keeps no count), or Redis's commands for a Redis peer.
    values = [
        m["statements_per_worker_s"]
        if m["commits_per_worker_s"] is None
        else m["commits_per_worker_s"]
        for m in modes
    ]
    for peer in _measured(f):
        labels.append(peer["peer"] if peer["unit"] == "transactions" else f"{peer['peer']} (Redis)")
        values.append(peer["per_worker_s"])
    series = {"per idle worker": values}
    return [("idle cost per worker", "bars", labels, series, "transactions or commands/s")]


def _sends(rows: list[dict[str, Any]]) -> Panel:
    series = {"statements": [r["statements_per_send"] for r in rows]}
    if all(r["wal_bytes_per_send"] is not None for r in rows):  # PostgreSQL only
        series["WAL bytes"] = [r["wal_bytes_per_send"] for r in rows]
    return ("one send to E endpoints", "lines", [r["endpoints"] for r in rows], series, "per send")


def _webhooks(f: dict[str, Any]) -> list[Panel]:
    panels: list[Panel] = []
    if "throughput" in f:
        rate = {"deliveries/s": [f["throughput"]["per_s"]]}
        panels.append(("throughput", "bars", ["deliveries"], rate, "deliveries/s"))
    if "fanout" in f:
        panels.append(_sends(f["fanout"]))
    return panels


def _fanout(f: dict[str, Any]) -> list[Panel]:
    jobs = f["jobs"]
    series = {"statements": [r["statements_per_call"] for r in jobs]}
    spread = ("N jobs over K queues", "lines", [r["queues"] for r in jobs], series, "per call")
    return [_sends(f["webhooks"]), spread]


def _storm(f: dict[str, Any]) -> list[Panel]:
    rows = f["backoffs"]
    series = {"median": [r["median_s"] for r in rows], "slowest": [r["max_s"] for r in rows]}
    return [("time to finish", "bars", [r["backoff"] for r in rows], series, "seconds")]


def _dashboard(f: dict[str, Any]) -> list[Panel]:
    pages = f["pages"]
    series = {"median": [p["median_ms"] for p in pages], "max": [p["max_ms"] for p in pages]}
    return [("render time", "bars", [p["page"] for p in pages], series, "ms")]


def _depth(f: dict[str, Any]) -> list[Panel]:
    rows = f["depth"]
    sizes = [row["jobs"] for row in rows]
    drains = {"django_outbox": [row["drain_per_s"] for row in rows]}
    if all(row["ceiling_per_s"] for row in rows):
        drains["raw-SQL ceiling"] = [row["ceiling_per_s"] for row in rows]
    enqueues = {
        "enqueue_many": [row["enqueue_per_s"] for row in rows],
        rows[0]["plain_insert"]: [row["plain_insert_per_s"] for row in rows],
    }
    return [
        ("drain against depth", "lines", sizes, drains, "jobs/s"),
        ("enqueue against depth", "lines", sizes, enqueues, "jobs/s"),
    ]


def _bulk(f: dict[str, Any]) -> list[Panel]:
    rows = f["bulk"]
    labels = [rows[0]["plain_insert"], *(row["writer"] for row in rows)]
    rates = {"jobs/s": [rows[0]["plain_per_s"], *(row["per_s"] for row in rows)]}
    return [(f"bulk writes of {rows[0]['jobs']:,} jobs", "bars", labels, rates, "jobs/s")]


_DRAWERS = {
    "bulk": _bulk,
    "depth": _depth,
    "drain": _drain,
    "latency": _latency,
    "idle": _idle,
    "webhooks": _webhooks,
    "fanout": _fanout,
    "retry-storm": _storm,
    "dashboard": _dashboard,
}
