"""Each key group's runtime between micro-batches kept in the operator's state backend instead of
Spark's state store: ``keyed_process(..., runtime_store="backend")`` (executor).

With the default ``runtime_store="spark"`` the operator runs on ``applyInPandasWithState`` and
each group's :class:`~barrier_ops.runtime.KeyGroupRuntime` (keyed state, alignment, held-back
records, timers) is its ``GroupState``. PySpark's stateful API costs a batch more than the
grouped map it is built on (benchmarks/bench_state_api.py: at 10,000-record batches
``applyInPandasWithState`` runs at about 0.8x Spark's ``groupBy().count()``, stateless
``applyInPandas`` keeping the same state with this module at about 1.05-1.25x). With ``"backend"`` the
operator runs on stateless ``applyInPandas`` and this module keeps the runtimes, as Spark's
state store would, versioned by micro-batch:

* a group's runtime after batch ``b`` is the object
  ``runtime/op-<operator_id>/<query id>/<layout>/<group>/<b>``, where the query id is the one
  Spark keeps in the query's checkpoint (a restart of the same query finds its runtimes, a new
  ``checkpointLocation`` starts empty) and ``layout`` is ``kg`` (one group a key group) or
  ``ranges-<parallelism>``;
* batch ``b`` reads the newest runtime written by a batch before ``b`` (:meth:`load_before`),
  never one of ``b``'s own: a retried task, a speculative copy, a batch Spark runs again after
  a restart, or a zombie attempt of a lost executor all start from the same runtime as the
  first attempt did, and a later attempt's write replaces an earlier one's (the backend's
  ``put`` is atomic). Spark runs batches one after another, so the newest runtime before ``b``
  is the one batch ``b - 1`` (or the last batch that had rows for the group) left;
* the runtime is durable (the backend's ``put``) before the call returns its output, so no
  output of batch ``b`` reaches the sink without the state it was computed with; output and
  acknowledgements (checkpoint snapshots) are those of ``"spark"``, unchanged;
* writing batch ``b``'s runtime deletes the group's runtimes older than the newest one before
  ``b`` (:meth:`save`): a group keeps at most two, and the one any attempt of ``b`` reads
  survives every write of ``b``.

Spark gives each task of a streaming batch the batch id and the query id as local properties
(:func:`batch_identity`); a call outside a streaming query (a batch DataFrame) raises
``InvalidOptionError``. Like Spark's own state, a running query keeps the layout it started
with: a group that finds no runtime of its layout but runtimes of another raises the error
``"spark"`` raises for a changed ``parallelism``.
"""

from __future__ import annotations

import logging
from typing import List, Optional, Tuple

from barrier_core.faults import FaultPoint, fault_point
from barrier_ops.exceptions import InvalidOptionError
from barrier_ops.key_group_state import LAYOUT_CHANGED

logger = logging.getLogger(__name__)

#: Local properties Spark sets on every task of a micro-batch (StreamExecution).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
ROOT = "runtime"

_NOT_STREAMING = (
    "keyed_process(..., runtime_store='backend') keeps each key group's state per micro-batch "
    "and runs only inside a streaming query (Spark gives its tasks no batch id here). Use "
    "runtime_store='spark' for a batch DataFrame.")


def batch_identity() -> Tuple[str, int]:
    """The streaming query's id and this task's micro-batch id (executor); raises
    ``InvalidOptionError`` outside a streaming query."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
    query = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
    if batch is None or query is None:
        raise InvalidOptionError(_NOT_STREAMING)
    return query, int(batch)


def layout_name(parallelism: Optional[int]) -> str:
    """The runtimes' layout: ``kg`` (one runtime a key group) or ``ranges-<parallelism>``."""
    return "kg" if parallelism is None else f"ranges-{int(parallelism)}"


def _as_option(layout: str) -> str:
    """A layout as the ``parallelism`` that makes it: ``parallelism=None`` or ``=<n>``."""
    return "parallelism=None" if layout == "kg" else layout.replace("ranges-", "parallelism=")


class BatchRuntimes:
    """The runtimes of one operator in one streaming query, in ``backend`` (executor)."""

    def __init__(self, backend, operator_id: str, query_id: str, layout: str) -> None:
        self._backend = backend
        self._query = f"{ROOT}/op-{operator_id}/{query_id}"
        self._layout = layout
        self._prefix = f"{self._query}/{layout}"

    def _folder(self, group: int) -> str:
        return f"{self._prefix}/{int(group)}"

    def _versions(self, group: int) -> List[int]:
        folder = self._folder(group)
        found = []
        for path in self._backend.list(folder):
            name = path[len(folder) + 1:]
            if name.isdigit():
                found.append(int(name))
        return sorted(found)

    def load_before(self, group: int, batch: int) -> Tuple[Optional[bytes], List[int]]:
        """The newest runtime of ``group`` written by a batch before ``batch`` (None: none yet)
        and the versions older than it, for :meth:`save` to delete."""
        older = [v for v in self._versions(group) if v < batch]
        if not older:
            self._check_layout(batch)
            return None, []
        return self._backend.get(f"{self._folder(group)}/{older[-1]}"), older[:-1]

    def save(self, group: int, batch: int, blob: bytes, stale: List[int]) -> None:
        """Store ``group``'s runtime after ``batch`` (atomic and durable when this returns),
        then delete ``stale`` (:meth:`load_before`'s second value)."""
        self._backend.put(f"{self._folder(group)}/{int(batch)}", blob)
        fault_point(FaultPoint.OPERATOR_RUNTIME)
        if stale:
            self._backend.delete([f"{self._folder(group)}/{v}" for v in stale])

    def _check_layout(self, batch: int) -> None:
        """Raise ``InvalidOptionError`` when the query's runtimes have another layout. One
        listing of the query's runtimes, made only by a call that finds none of its group's (a
        group's first batch with rows in the query). A batch after the first that finds no
        runtime at all logs a warning: the group starts empty, which is right when no earlier
        batch had rows for any group (a filter before the operator dropped them all) and loses
        state when the runtimes were deleted. (A query that ran with ``runtime_store="spark"``
        is refused by Spark itself: its stateful operator is gone from the plan.)"""
        stored = self._backend.list(self._query)
        others = sorted({p[len(self._query) + 1:].split("/", 1)[0] for p in stored}
                        - {self._layout})
        if others:
            raise InvalidOptionError(LAYOUT_CHANGED.format(then=_as_option(others[0]),
                                                           now=_as_option(self._layout)))
        if not stored and batch > 0:
            logger.warning(_NO_RUNTIMES.format(batch=batch,
                                               where=self._backend.location(self._query)))


_NO_RUNTIMES = (
    "keyed_process(..., runtime_store='backend'): micro-batch {batch} of this query finds no "
    "state of its earlier batches at {where}; its key groups start empty. That is right when no "
    "earlier batch brought the operator a row. If the runtimes there were deleted, their state "
    "is lost: stop the query and start a new checkpointLocation with "
    "keyed_process(..., restore_from=<checkpoint id or savepoint>).")
