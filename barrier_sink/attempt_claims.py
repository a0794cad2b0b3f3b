"""Pooled transactional ids claimed by task attempts, so that an attempt which outlives its
batch never fences another attempt's transaction (executor and driver commit worker).

The hole this closes
--------------------
Spark hands the driver only each task's winning attempt. A losing attempt (the slower of a
speculative pair, or an attempt still running when its stage finished) is killed, but its
Python worker runs on until ``spark.python.task.killTimeout`` (2 s by default), and it can still
initialise a producer on its pooled id ``<prefix>-r<run>-p<task>-a<attempt>-s<slot>``. In the
driver's eyes that id is free, because no batch record names it. So a later batch's attempt
with the same number takes the id and pre-commits, and the late ``init_transactions`` then
fences that transaction. If its checkpoint completed, its records were lost and every restart
stopped at the same commit. This was seen on a standalone cluster with ``spark.speculation``: a
losing attempt of batch 6 fenced batch 7's transaction.

The protocol
------------
* Executor, before each ``init_transactions`` on a pooled id (:func:`claim`): store the claim
  ``sink-claims/<batch>/<id>@<task attempt id>``, then list the batch's folder.

  - If the driver has sealed the batch in this query run (``_sealed.<ms>.<run id>``), the
    attempt is late: it raises :class:`LateAttemptError` and initialises nothing. It checks
    again once its producer is initialised, before its first record
    (:func:`refuse_if_sealed`), and then aborts its empty transaction.
  - If another attempt of the batch claimed the same id, the attempt takes its next slot. Two
    attempts of one batch share an id only when Spark re-runs a stage, which numbers its task
    attempts from 0 again; both may move on, and neither initialises an id the other uses.
* Driver commit worker, in ``commit(N)`` once N's record is durable (:func:`seal_and_collect`):
  store the seal, then list the folder. Every id claimed by an attempt that is not a task's
  winner belongs to a loser that may still initialise it. The id is quarantined for
  :data:`QUARANTINE_S` in ``sink-claims/_quarantine.json`` and counts as in use for every later
  batch until then (:func:`quarantined`, read when the writer is pickled for the next batch).
  The driver also fences each such id at once, so a loser that initialised it before the seal
  cannot leave a transaction open after the batch's sweep (the query may have no next batch to
  sweep it): either the fence comes after the loser's initialisation and aborts its
  transaction, or it comes before, and the loser's check after its initialisation sees the
  seal, which was stored before the fence.

Why it holds: an attempt stores its claim before it lists; the driver stores its seal before
it lists. Whichever listing comes second sees the other's write (a local disk and S3 are both
consistent for reads and lists after a write). So either the late attempt sees the seal and
stops, or the driver sees the claim and keeps the id from later batches; and of two attempts
claiming one id, at least one sees the other. The one assumption is a time bound: a loser that
passed its check initialises within :data:`QUARANTINE_S` of the seal. Spark kills losers when
the stage finishes, and their Python workers at most killTimeout later. A batch's folder is
deleted only after that bound.

Runs: the pooled ids of a query run carry its tag (:func:`run_tag` of Spark's ``runId``, the
job group of every task of a streaming query). An attempt of an earlier run that still runs
after a restart (a task of a query stopped mid-batch can open its transaction seconds later)
therefore never shares an id with the new run, and the seal it checks is its own run's. Each
run adds at most tasks x attempts x slots ids on the brokers, which expire after
``transactional.id.expiration.ms`` of disuse.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Dict, Iterable, List, Optional, Set, Tuple

from barrier_sink.exceptions import SinkError

logger = logging.getLogger(__name__)

CLAIMS = "sink-claims/"
QUARANTINE_FILE = f"{CLAIMS}_quarantine.json"
SEAL_MARK = "_sealed."

#: How long a loser's claimed id stays out of the pool after its batch was sealed (seconds):
#: far above Spark's ``spark.python.task.killTimeout`` (2 s), after which a killed attempt's
#: Python worker is gone.
QUARANTINE_S = 120.0

#: The driver deletes old batches' folders once every this many batches (one listing).
CLEANUP_EVERY = 32


class LateAttemptError(SinkError):
    """A task attempt reached its first transaction after the driver committed its batch."""


def current_attempt() -> Tuple[Optional[str], Optional[int]]:
    """``(run id, task attempt id)`` of the running task (executor). Spark sets the streaming
    query's run id as the job group of every task of a micro-batch, and names it in the job
    description (``runId = ...``); the task attempt id is unique in the application. The run is
    None outside a task, or where the two disagree: a job group that is not the run id (a
    platform's own) could repeat across runs, and then the seal of an earlier run would stop
    the replay of its batch."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None, None
    group = ctx.getLocalProperty("spark.jobGroup.id")
    described = ctx.getLocalProperty("spark.job.description") or ""
    run = group if group and f"runId = {group}" in described else None
    return run, ctx.taskAttemptId()


def run_tag(run: Optional[str]) -> Optional[str]:
    """Eight hex characters naming query run ``run`` in its pooled ids; None without a run."""
    return None if run is None else hashlib.sha1(run.encode()).hexdigest()[:8]


def claimant(task_attempt: Optional[int]) -> str:
    """How a claim names its task attempt (``-`` outside a task)."""
    return "-" if task_attempt is None else str(task_attempt)


def _folder(batch_id: int) -> str:
    return f"{CLAIMS}{batch_id:012d}/"


def _sealed_by(names: Iterable[str]) -> Dict[str, int]:
    """Run id -> seal time (ms) of the seals among a folder's object names."""
    out = {}
    for name in names:
        base = name.rsplit("/", 1)[-1]
        if base.startswith(SEAL_MARK):
            ms, _, run = base[len(SEAL_MARK):].partition(".")
            out[run] = int(ms)
    return out


def claim(backend, batch_id: int, transactional_id: str, run: Optional[str],
          task_attempt: Optional[int]) -> bool:
    """Record that this attempt is about to initialise ``transactional_id`` (executor; one put
    and one listing of the batch's folder). Returns False when another attempt of the batch
    claimed the same id: take the next slot. Raises :class:`LateAttemptError` when the driver
    already sealed ``batch_id`` in this run."""
    mine = f"{transactional_id}@{claimant(task_attempt)}"
    backend.put(_folder(batch_id) + mine, b"")
    names = [p.rsplit("/", 1)[-1] for p in backend.list(_folder(batch_id))]
    refuse_if_sealed(backend, batch_id, transactional_id, run, names)
    shared = [n for n in names if n != mine and n.rpartition("@")[0] == transactional_id]
    if shared:
        logger.warning("%s: another attempt of batch %d claimed it too (%s; a re-run stage "
                       "numbers its task attempts from 0 again): taking the next slot",
                       transactional_id, batch_id, ", ".join(shared))
    return not shared


def refuse_if_sealed(backend, batch_id: int, transactional_id: str, run: Optional[str],
                     names: Optional[List[str]] = None) -> None:
    """Raise :class:`LateAttemptError` if the driver sealed ``batch_id`` in run ``run``
    (executor: when claiming an id, and again once its producer is initialised, before the
    first record; ``names``: the folder's listing when the caller has it)."""
    if run is None:  # not in a Spark task (a tool or a test): no run to compare with
        return
    if names is None:
        names = backend.list(_folder(batch_id))
    if run in _sealed_by(names):
        raise LateAttemptError(
            f"{transactional_id}: batch {batch_id} was already committed by the driver, so this "
            "task attempt lost (a speculative copy, or an attempt still running when its stage "
            "finished). It stops before writing anything, so it can neither fence a later "
            "batch's transaction nor leave one open. Nothing to do: Spark discards this "
            "attempt.")


def seal_and_collect(backend, batch_id: int, run: Optional[str], winners: Iterable[str],
                     now_ms: Optional[int] = None) -> List[str]:
    """Seal ``batch_id`` and quarantine the ids that losing attempts claimed in it (driver
    commit worker, after the batch's record is durable). ``winners``: :func:`claimant` of each
    task attempt whose message Spark handed over. Returns the quarantined ids."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    winners = set(winners)
    folder = _folder(batch_id)
    if run is not None:
        backend.put(f"{folder}{SEAL_MARK}{now_ms}.{run}", b"")
    losers, winners_claims, winners_ids = set(), [], set()
    for path in backend.list(folder):
        tid, at, who = path.rsplit("/", 1)[-1].rpartition("@")
        if not at:
            continue  # the seal
        if who in winners:
            winners_claims.append(path)
            winners_ids.add(tid)
        else:
            losers.add(tid)
    losers -= winners_ids  # a loser that moved on from a winner's id
    if losers:
        _quarantine(backend, losers, now_ms)
        logger.warning("batch %d: %d transactional id(s) claimed by losing task attempts kept "
                       "out of the pool for %.0f s: %s", batch_id, len(losers), QUARANTINE_S,
                       ", ".join(sorted(losers)))
    if winners_claims:  # the winners' ids are in the batch record: their claims are done
        backend.delete(winners_claims)
    if batch_id % CLEANUP_EVERY == 0:
        _delete_old_folders(backend, batch_id, now_ms)
    return sorted(losers)


def _quarantine(backend, ids: Iterable[str], now_ms: int) -> None:
    until = now_ms + int(QUARANTINE_S * 1000)
    kept = {tid: t for tid, t in _read_quarantine(backend).items() if t > now_ms}
    kept.update({tid: until for tid in ids})
    backend.put(QUARANTINE_FILE, json.dumps(kept, sort_keys=True).encode())


def _read_quarantine(backend) -> Dict[str, int]:
    data = backend.get_if_exists(QUARANTINE_FILE)
    return {} if data is None else {k: int(v) for k, v in json.loads(data).items()}


def quarantined(backend, now_ms: Optional[int] = None) -> Set[str]:
    """Ids still kept out of the pool (driver, when the writer is pickled for a batch's tasks;
    one read of a file that exists only after a loser claimed an id)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return {tid for tid, until in _read_quarantine(backend).items() if until > now_ms}


def _delete_old_folders(backend, batch_id: int, now_ms: int) -> None:
    """Delete the folders of batches sealed more than :data:`QUARANTINE_S` ago, and of older
    batches never sealed (batches of an earlier run, which nothing of this run reads)."""
    names: Dict[int, List[str]] = {}
    for path in backend.list(CLAIMS):
        head = path[len(CLAIMS):].split("/", 1)[0]
        if head.isdigit() and int(head) < batch_id:
            names.setdefault(int(head), []).append(path)
    for b, paths in names.items():
        seals = _sealed_by(paths)
        expired = (max(seals.values()) + QUARANTINE_S * 1000 < now_ms if seals
                   else b < batch_id - CLEANUP_EVERY)
        if expired:
            backend.delete_prefix(_folder(b).rstrip("/"))
