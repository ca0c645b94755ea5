"""The raw-SQL ceiling of ``outbox_bench latency``: a minimal worker process, for pickup.

``python -m outbox_bench.pickup_ceiling``, started by the benchmark (``latency.py``),
which writes one JSON line to its stdin: the psycopg connection parameters, the number of
threads, the table, and the claim and completion statements (the raw-SQL ceiling's, from
``ceiling.py``). Each thread LISTENs on its own connection, claims with one ``UPDATE …
SKIP LOCKED … RETURNING``, "runs" each job (a no-op: it notes the time), and marks the
batch done with one UPDATE that records those times; an idle thread waits for a
notification, or claims anyway every POLL_SECONDS. It prints ``ready`` once every thread
listens, and stops when its stdin closes.

No Django here: plain psycopg, nothing else in the way.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

#: An idle thread's safety-net claim (the raw-SQL ceiling's, and Procrastinate's).
POLL_SECONDS = 5.0


def main() -> None:
    import psycopg

    config = json.loads(sys.stdin.readline())
    params: dict[str, Any] = config["params"]
    stop = threading.Event()
    ready = threading.Barrier(config["threads"] + 1)

    def work() -> None:
        with psycopg.connect(**params, autocommit=True) as db:
            db.execute(f"LISTEN {config['channel']}")
            ready.wait(30)
            while not stop.is_set():
                claimed = db.execute(config["claim"]).fetchall()
                if claimed:
                    ids, ran = [], []
                    for row in claimed:
                        ran.append(time.time())  # the job: nothing but the time it ran
                        ids.append(row[0])
                    db.execute(config["complete"], [ids, ran])
                    continue
                for _ in db.notifies(timeout=POLL_SECONDS, stop_after=1):
                    pass

    threads = [threading.Thread(target=work, daemon=True) for _ in range(config["threads"])]
    for thread in threads:
        thread.start()
    ready.wait(30)
    print("ready", flush=True)
    sys.stdin.read()  # until the benchmark closes it
    stop.set()
    with psycopg.connect(**params, autocommit=True) as db:
        db.execute(f"NOTIFY {config['channel']}")  # wake them to see the stop
    for thread in threads:
        thread.join(POLL_SECONDS + 5)


if __name__ == "__main__":
    main()
