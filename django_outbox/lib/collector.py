"""Pausing Python's cyclic garbage collector while a bulk write builds its objects.

The collector runs after every so many container objects made and not yet freed. A bulk
enqueue keeps a few per job (its TaskResult, the lists and dicts in it) until it returns,
so 100,000 jobs set off hundreds of collections, and every few a full one that walks every
object of the process (a Django project holds hundreds of thousands): measured, a sixth of
the enqueue's time. Nothing made here is garbage until the call returns, so collecting
meanwhile finds nothing; the collector resumes when the block ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off, unless someone turned it off already
    (they turn it back on, not this). Other threads' objects wait for it too: keep the
    block to one bulk write."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
