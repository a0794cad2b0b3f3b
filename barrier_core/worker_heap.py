"""The cyclic garbage collector in a PySpark Python worker (executor).

PySpark's daemon runs ``gc.collect()``, a full collection, after every task of a reused Python
worker, and by then the worker holds a large long-lived heap: pandas, pyarrow, kafka-python and
PySpark's own objects. Every full collection walks all of it again. In ``bench_pipeline.py``
(997 keys, 10,000-record batches) each of the four workers spent about 8 s of a 35 s run in 63
full collections, about 125 ms each, on a 2-core machine where the source, the operator and the
sink need that CPU. :func:`freeze_long_lived_objects` moves what the worker holds into the
collector's permanent generation (``gc.freeze()``), so later collections walk only what was
allocated since: the same workers then spent 0.3-0.5 s in them.

The keyed operator calls it when its first key group runs in a worker, after PySpark has loaded
pandas and pyarrow for ``applyInPandasWithState``. (Calling it from the source's and the sink's
first task too, which come first in many workers, froze those workers before pandas was loaded,
and measured slower.)

Guarantees:

* once per process: what is frozen is the worker's heap when it is first called, a fixed
  amount, so the footprint stays flat however long the worker runs;
* nothing that is garbage at that moment is frozen: a full collection runs first;
* reference counting still frees every frozen object that stops being used; only the cycle
  collector ignores them, and it still collects everything allocated later.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_frozen = False


def freeze_long_lived_objects() -> bool:
    """Collect, then freeze everything the collector tracks, the first time this process calls
    it; True when this call froze them (executor)."""
    global _frozen
    if _frozen:
        return False
    with _lock:
        if _frozen:
            return False
        gc.collect()
        gc.freeze()
        _frozen = True
    logger.debug("froze %d long-lived objects of this worker", gc.get_freeze_count())
    return True


def in_python_worker() -> bool:
    """Whether this process is a PySpark Python worker (forked by ``pyspark.daemon``, or
    ``pyspark.worker`` run on its own), not a user's driver process or a test."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) in ("pyspark.daemon", "pyspark.worker")


def freeze_in_python_worker() -> bool:
    """:func:`freeze_long_lived_objects` in a PySpark Python worker only; False elsewhere
    (driver-side callbacks that may also run in a user's own process)."""
    return in_python_worker() and freeze_long_lived_objects()
