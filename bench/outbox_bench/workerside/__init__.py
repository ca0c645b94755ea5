"""What ``outbox_bench latency`` and ``limited`` put on their ``runworker`` processes' path.

The modules here are imported by their own names (``outbox_bench_settings``,
``outbox_bench_tasks``), with this directory on ``PYTHONPATH``, so that a worker started from
another checkout of the project (``--worker-dir``, whose ``django_outbox`` may predate them)
finds them too. They use nothing of ``django_outbox`` but ``compat.task``.
"""

from pathlib import Path

#: The directory the workers (and the benchmark's own process) import these modules from.
DIRECTORY = Path(__file__).resolve().parent
