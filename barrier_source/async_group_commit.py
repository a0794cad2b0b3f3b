"""The consumer-group commit of completed checkpoints, off the planning path (driver planner
worker).

Spark calls the source's ``latestOffset`` before every batch and waits for it, and that call is
the first to see the checkpoint the previous batch completed. Committing the checkpoint's offsets
to the consumer group takes two broker round trips (read the group's offsets, then alter them;
about 14 ms a batch on a 2-core machine, ``docs/operations.md``), which every batch used to wait
for. Flink's Kafka source commits them asynchronously as well. :class:`AsyncGroupCommits` runs the
commits in one background thread of the planner worker.

Guarantees:

* commits happen one at a time, in increasing checkpoint order: a checkpoint submitted while an
  older one still waits replaces it (the newer offsets cover the older ones), and one no newer
  than what was committed, queued or running is ignored;
* a commit the broker refuses (``BarrierKafkaError``) is logged and forgotten: the next submit of
  that checkpoint or a newer one tries again, as the synchronous commit did on the next batch;
* any other failure (a bug, an injected test fault) is raised by the next :meth:`submit` or
  :meth:`flush` on the planning thread, so it fails the query as the synchronous commit did;
* :meth:`flush` returns once nothing is queued or running. The source flushes when a planning
  starts no batch (the last planning of an ``AvailableNow`` run, a caught-up query): Spark ends
  a query without waiting for the planner worker's ``stop()``, so the commit of the checkpoint
  the last batch completed is done before the query terminates. ``stop()`` submits the last
  completed checkpoint, then flushes too (on a cluster the sink may complete it after the last
  planning).

The group offsets are advisory (lag monitoring, ``startingOffsets=group``): a restart reads its
position from the checkpoint, never from the group, so committing them later changes no record
the pipeline reads or writes.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Mapping, Optional, Tuple

from barrier_core.exceptions import BarrierKafkaError

logger = logging.getLogger(__name__)

#: ``commit(checkpoint_id, offsets, restored_from)``: commits one checkpoint's offsets, raising
#: ``BarrierKafkaError`` when the broker refuses.
CommitFn = Callable[[int, Mapping[str, Mapping[Any, int]], int], None]


class AsyncGroupCommits:
    """One background thread committing completed checkpoints to the consumer group (driver
    planner worker). See the module docstring for what it guarantees."""

    def __init__(self, commit: CommitFn, name: str = "barrier-kafka-group-commit",
                 on_close: Optional[Callable[[], None]] = None) -> None:
        self._commit = commit
        self._on_close = on_close   # releases what ``commit`` holds (its admin client)
        self._name = name
        self._cond = threading.Condition()
        self._queued: Optional[Tuple[int, Mapping, int]] = None
        self._running: Optional[int] = None
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        #: The newest checkpoint committed to the group (or found already committed).
        self.committed_id = 0

    def submit(self, checkpoint_id: int, offsets: Mapping[str, Mapping[Any, int]],
               restored_from: int = 0) -> None:
        """Commit checkpoint ``checkpoint_id``'s ``offsets`` in the background (planning thread).
        Raises what an earlier commit raised other than ``BarrierKafkaError``."""
        with self._cond:
            self._raise_failure()
            newest = max(self.committed_id, self._running or 0,
                         self._queued[0] if self._queued else 0)
            if checkpoint_id <= newest:
                return
            self._queued = (checkpoint_id, offsets, restored_from)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout_s: Optional[float] = None) -> bool:
        """Wait until no commit is queued or running (planning thread); False if ``timeout_s``
        passed first. Raises what a commit raised other than ``BarrierKafkaError``."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._queued is None and self._running is None,
                                       timeout_s)
            self._raise_failure()
            return done

    def close(self) -> None:
        """Stop the thread once the queued commit, if any, has run, then call ``on_close``
        (planning thread)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        if self._on_close is not None:
            self._on_close()

    def _raise_failure(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queued is not None or self._closed)
                if self._queued is None:
                    return
                checkpoint_id, offsets, restored_from = self._queued
                self._queued, self._running = None, checkpoint_id
            committed = False
            try:
                self._commit(checkpoint_id, offsets, restored_from)
                committed = True
            except BarrierKafkaError as exc:
                logger.warning("barrier-kafka: committing checkpoint %d to the consumer group "
                               "failed; retrying with the next completed checkpoint: %s",
                               checkpoint_id, exc)
            except BaseException as exc:  # noqa: BLE001 - raised on the planning thread
                with self._cond:
                    self._error = exc
            finally:
                with self._cond:
                    if committed:
                        self.committed_id = max(self.committed_id, checkpoint_id)
                    self._running = None
                    self._cond.notify_all()
