"""Pooled transactional ids of the Kafka sink (``transaction.naming.strategy`` POOLING).

Every transactional.id the broker has seen is kept by its transaction coordinator until
``transactional.id.expiration.ms`` (7 days by default) and allocates a producer id. One new id per
batch, task and epoch grows that without bound (Flink's FLINK-34554: brokers out of memory), so
each task attempt draws its ids from a small pool, ``<prefix>-r<run>-p<task>-a<attempt>-s<slot>``
(``<run>``: the query run's tag, :func:`barrier_sink.attempt_claims.run_tag`), and takes the
lowest slot that is free.

Where code runs and what it guarantees
--------------------------------------
* Driver, once per batch before its tasks (when Spark pickles the writer): the set of ids still
  *in use* = every id of a recorded handle that is not yet committed or aborted
  (:meth:`~barrier_sink.committer.SinkCommitter.recorded_open_names`), plus the ids that losing
  attempts of earlier batches claimed and may still initialise
  (:func:`barrier_sink.attempt_claims.quarantined`). Spark runs a stream's batches one after
  another and the writer of batch N+1 is created after ``commit(N)`` returned, so the set is
  exact at that point; recovery (``recover_once``) runs before it.
* Executor: :class:`TransactionalIdPool` gives each epoch of a task attempt a slot outside that
  set and outside the slots this attempt already took in the batch; the attempt then claims it
  (:func:`barrier_sink.attempt_claims.claim`) before initialising a producer on it.

So an id is reused only after the transaction recorded under it ended and no losing attempt can
still initialise it: ``init_transactions`` of the new user can never abort a pre-committed
transaction that a checkpoint still has to commit, a loser's late ``init_transactions`` never
aborts the new user's, and a recovered handle is never fenced by reuse (the FLINK-40626 trap).
An open transaction under a free id is debris (an attempt whose batch never recorded it: a
losing speculative copy, a failed attempt, a crashed run); the reuse fences and aborts it, as
does the driver's sweep. Distinct ids stay within tasks x attempts x (epochs awaiting commit +
1), plus the few ids losers claimed in the last two minutes.
"""

from __future__ import annotations

from typing import AbstractSet, Dict, Set, Tuple


class TransactionalIdPool:
    """Hands out pooled transactional ids on an executor (see the module docstring).

    Parameters
    ----------
    make_id : callable ``(partition_id, attempt, slot) -> str``
    in_use : set of str
        Ids of recorded transactions not yet ended, as the driver saw them before the batch.
    """

    def __init__(self, make_id, in_use: AbstractSet[str]) -> None:
        self._make_id = make_id
        self._in_use = frozenset(in_use)
        self._taken: Dict[Tuple[int, int, int], Set[str]] = {}

    def acquire(self, batch_id: int, partition_id: int, attempt: int) -> str:
        """The lowest free id of this task attempt's pool for one more transaction of the
        batch (executor)."""
        taken = self._taken.setdefault((batch_id, partition_id, attempt), set())
        slot = 0
        while True:
            tid = self._make_id(partition_id, attempt, slot)
            if tid not in self._in_use and tid not in taken:
                taken.add(tid)
                return tid
            slot += 1
