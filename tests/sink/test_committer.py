"""The sink committer's replay, recovery, abort and sweep paths over a memory backend and a fake
transaction store with Kafka's rules (a commit of an aborted transaction fails; ending a
finished transaction the same way again is a no-op). The real-broker versions of these paths
are in integration_tests/test_sink_faults.py."""

from __future__ import annotations

import uuid

import pytest

from barrier_sink.committer import SinkCommitter
from barrier_sink.messages import SinkCommitMessage
from barrier_coordinator import CheckpointCoordinator, CoordinatorConfig, ManualClock
from state_backends.memory import MemoryStateBackend, clear_memory_backend


class CommitTimeout(RuntimeError):
    pass


class FakeTransactions:
    """Transaction outcomes by name: open, committed or aborted."""

    def __init__(self) -> None:
        self.state = {}
        self.fail_commit_of = set()  # names whose next commit raises CommitTimeout

    def open(self, name: str) -> None:
        self.state[name] = "open"

    def commit(self, name: str) -> None:
        if name in self.fail_commit_of:
            self.fail_commit_of.discard(name)
            raise CommitTimeout(f"commit of {name} timed out")
        if self.state[name] == "aborted":
            raise RuntimeError(f"INVALID_TXN_STATE: {name} was aborted, it cannot commit")
        self.state[name] = "committed"

    def abort(self, name: str) -> None:
        if self.state.get(name) == "open":
            self.state[name] = "aborted"


class FakeCommitter(SinkCommitter):
    def __init__(self, backend, factory, txns: FakeTransactions) -> None:
        super().__init__(backend, factory)
        self.txns = txns

    def transaction_name(self, handle: dict) -> str:
        return handle["name"]

    def commit_handle(self, handle: dict) -> None:
        self.txns.commit(handle["name"])

    def abort_handle(self, handle: dict) -> None:
        self.txns.abort(handle["name"])

    def abort_unrecorded(self, batch_id):
        cache: dict = {}
        aborted = 0
        for name, state in list(self.txns.state.items()):
            b = int(name.split("-")[0][1:])
            if state == "open" and (batch_id is None or b <= batch_id) \
                    and name not in self._pending_names(b, cache):
                self.txns.abort(name)
                aborted += 1
        return aborted


@pytest.fixture
def env():
    name = "committer-" + uuid.uuid4().hex
    backend = MemoryStateBackend(name)
    clock = ManualClock()
    txns = FakeTransactions()
    config = CoordinatorConfig(checkpoint_timeout_ms=60_000, num_retained=2)

    def committer():  # what each short-lived commit worker builds
        return FakeCommitter(backend, lambda: CheckpointCoordinator(backend, config, clock),
                             txns)

    yield committer, txns, clock
    clear_memory_backend(name)


def handle(txns, batch, task, epoch, attempt=0):
    name = f"b{batch}-p{task}-a{attempt}-e{epoch}"
    txns.open(name)
    return {"name": name, "batch_id": batch, "partition_id": task, "checkpoint_id": epoch}


def message(batch, task, handles, barrier_of=None, clock=None):
    m = SinkCommitMessage(batch, task, handles=handles, records=10 * len(handles))
    if barrier_of is not None:
        m.barriers.append({"checkpoint_id": barrier_of, "channel": f"t:{task}",
                           "offset": 100 * barrier_of, "channels": ["t:0", "t:1"],
                           "timestamp": clock.now_ms()})
    return m


def batch_sealing(txns, clock, batch, epoch, attempt=0):
    """Batch ``batch``: two tasks, each with one transaction of ``epoch`` and the barrier of
    checkpoint ``epoch`` after it (the batch completes checkpoint ``epoch``)."""
    return [message(batch, t, [handle(txns, batch, t, epoch, attempt)], epoch, clock)
            for t in (0, 1)]


def test_completed_checkpoint_is_committed_normally(env):
    committer, txns, clock = env
    committer().on_batch_committed(0, batch_sealing(txns, clock, 0, 1))
    assert set(txns.state.values()) == {"committed"}


def test_abort_after_a_failed_commit_never_aborts_a_completed_checkpoint(env):
    """Hole 1: commit(N) wrote chk-n/_metadata, then one handle's commit timed out; Spark calls
    abort(N). The completed checkpoint's transactions must be committed forward, and the next
    start must not fail."""
    committer, txns, clock = env
    messages = batch_sealing(txns, clock, 0, 1)
    txns.fail_commit_of.add("b0-p1-a0-e1")
    with pytest.raises(CommitTimeout):
        committer().on_batch_committed(0, messages)
    committer().on_batch_aborted(0, messages)
    assert "aborted" not in txns.state.values()
    committer().recover()  # the next query start
    assert txns.state == {"b0-p0-a0-e1": "committed", "b0-p1-a0-e1": "committed"}


def test_abort_keeps_completed_work_even_if_the_forward_commit_fails_again(env):
    committer, txns, clock = env
    messages = batch_sealing(txns, clock, 0, 1)
    txns.fail_commit_of.add("b0-p1-a0-e1")
    with pytest.raises(CommitTimeout):
        committer().on_batch_committed(0, messages)
    txns.fail_commit_of.add("b0-p1-a0-e1")  # the broker is still slow during abort(N)
    committer().on_batch_aborted(0, messages)
    assert txns.state["b0-p1-a0-e1"] == "open"
    committer().recover()
    assert set(txns.state.values()) == {"committed"}


def test_failure_before_completion_aborts_and_forgets_the_batch(env):
    """Spark aborts a batch whose checkpoint never completed: its transactions are aborted and
    dropped from the batch record, so no later checkpoint tries to commit them."""
    committer, txns, clock = env
    committer().on_batch_committed(0, batch_sealing(txns, clock, 0, 1))
    # Batch 1 holds epoch-2 records; only task 0's barrier of checkpoint 2 arrived.
    m1 = [message(1, 0, [handle(txns, 1, 0, 2)], 2, clock), message(1, 1, [handle(txns, 1, 1, 2)])]
    committer().on_batch_committed(1, m1)
    committer().on_batch_aborted(1, m1)
    assert txns.state["b1-p0-a0-e2"] == txns.state["b1-p1-a0-e2"] == "aborted"
    assert committer().load_batch(1)["handles"] == []
    # The replay of batch 1 (new transactions, same slots) and batch 2 seal checkpoint 2.
    replay = [message(1, 0, [handle(txns, 1, 0, 2, attempt=1)], 2, clock),
              message(1, 1, [handle(txns, 1, 1, 2, attempt=1)], 2, clock)]
    committer().on_batch_committed(1, replay)
    committer().recover()
    assert txns.state["b1-p0-a1-e2"] == txns.state["b1-p1-a1-e2"] == "committed"


def test_replay_of_a_committed_batch_aborts_its_duplicates(env):
    """A crash after the commit but before Spark logged the batch: the replay's transactions
    (another attempt, other names) are duplicates of committed slots and are aborted."""
    committer, txns, clock = env
    committer().on_batch_committed(0, batch_sealing(txns, clock, 0, 1))
    committer().on_batch_committed(0, batch_sealing(txns, clock, 0, 1, attempt=2))
    assert txns.state == {"b0-p0-a0-e1": "committed", "b0-p1-a0-e1": "committed",
                          "b0-p0-a2-e1": "aborted", "b0-p1-a2-e1": "aborted"}


def test_replay_before_completion_replaces_the_earlier_attempt(env):
    committer, txns, clock = env
    first = [message(0, t, [handle(txns, 0, t, 1)]) for t in (0, 1)]
    committer().on_batch_committed(0, first)  # no barrier: nothing completes
    committer().on_batch_committed(0, batch_sealing(txns, clock, 0, 1, attempt=1))
    assert txns.state == {"b0-p0-a0-e1": "aborted", "b0-p1-a0-e1": "aborted",
                          "b0-p0-a1-e1": "committed", "b0-p1-a1-e1": "committed"}


def test_sweep_aborts_unrecorded_attempts_and_keeps_recorded_ones(env):
    """A losing speculative attempt's pre-committed transaction is named by no batch record:
    the commit of its batch aborts it; recorded, still uncommitted work is left alone."""
    committer, txns, clock = env
    winner = [message(0, t, [handle(txns, 0, t, 1)]) for t in (0, 1)]
    loser = handle(txns, 0, 1, 1, attempt=1)  # speculative copy of task 1, result discarded
    committer().on_batch_committed(0, winner)
    assert txns.state[loser["name"]] == "aborted"
    assert txns.state["b0-p0-a0-e1"] == txns.state["b0-p1-a0-e1"] == "open"
    committer().on_batch_committed(1, batch_sealing(txns, clock, 1, 1))
    assert [n for n, s in txns.state.items() if s == "committed"] == [
        "b0-p0-a0-e1", "b0-p1-a0-e1", "b1-p0-a0-e1", "b1-p1-a0-e1"]


def test_many_transactions_commit_concurrently_and_one_failure_blocks_no_other(env):
    """A checkpoint with 24 transactions: the committer sends them concurrently; one that
    fails is reported after the others were committed and recorded, and the next start
    commits it."""
    committer, txns, clock = env
    tasks = range(24)
    messages = [message(0, t, [handle(txns, 0, t, 1)], 1, clock) for t in tasks]
    for m in messages:
        m.barriers[0]["channels"] = [f"t:{t}" for t in tasks]
    txns.fail_commit_of.add("b0-p7-a0-e1")
    with pytest.raises(CommitTimeout):
        committer().on_batch_committed(0, messages)
    assert sorted(n for n, s in txns.state.items() if s != "committed") == ["b0-p7-a0-e1"]
    assert len(committer().load_batch(0)["committed"]) == 23
    committer().recover()
    assert set(txns.state.values()) == {"committed"}


def test_sink_tasks_report_where_their_time_went_and_the_batch_record_keeps_the_slowest():
    """Issue 15's per-batch attribution: each task's write reports input wait, transaction
    opening, writing and pre-commit (opening counted once though it happens while writing);
    the batch record keeps the slowest task's."""
    import time as _time

    from barrier_sink.messages import slowest_task
    from barrier_sink.two_phase_commit import _Stopwatch

    clock = _Stopwatch()

    def slow_input():
        for _ in range(2):
            _time.sleep(0.02)
            yield 1

    for _ in clock.timed_iter(slow_input(), "input_wait_ms"):
        with clock.measure("write_ms"):
            _time.sleep(0.01)
            with clock.measure("open_ms"):
                _time.sleep(0.03)
    t = clock.result(100.0)
    assert t["task_ms"] == 100.0
    assert 38 <= t["input_wait_ms"] < 80 and 55 <= t["open_ms"] < 100
    assert 18 <= t["write_ms"] < 50  # without the nested opening
    a = SinkCommitMessage(0, 0, timings={"task_ms": 5.0, "write_ms": 1.0})
    b = SinkCommitMessage(0, 1, timings={"task_ms": 9.0, "write_ms": 2.0})
    assert slowest_task([a, b, SinkCommitMessage(0, 2)]) == {"task_ms": 9.0, "write_ms": 2.0,
                                                             "tasks": 2}
    assert slowest_task([SinkCommitMessage(0, 0)]) == {}


def test_a_commit_reads_a_bounded_number_of_batch_records_however_long_the_job_ran():
    """Issue 13 (S3 requests per checkpoint): a checkpoint's commit read every kept batch
    record (up to 20 reads of finished records per commit, each an S3 GET and a HEAD before
    it). Finished records never change, so a commit reads only the newest ones, and the
    per-process memory of finished records is forgotten as they are pruned."""
    from barrier_sink import committer as committer_module

    class CountingBackend(MemoryStateBackend):
        reads = 0

        def get(self, path):
            if path.startswith("sink/batch-"):
                CountingBackend.reads += 1
            return super().get(path)

    name = "committer-" + uuid.uuid4().hex
    backend, clock, txns = CountingBackend(name), ManualClock(), FakeTransactions()
    config = CoordinatorConfig(checkpoint_timeout_ms=60_000, num_retained=2)
    reads = []
    try:
        for b in range(60):
            before = CountingBackend.reads
            FakeCommitter(backend, lambda: CheckpointCoordinator(backend, config, clock),
                          txns).on_batch_committed(b, batch_sealing(txns, clock, b, b + 1))
            reads.append(CountingBackend.reads - before)
        assert set(txns.state.values()) == {"committed"}
        assert max(reads[25:]) <= 3, reads
        _run, settled = committer_module._SETTLED[backend.location(committer_module.BATCH_PREFIX)]
        assert len(settled) <= 20 and len(backend.list("sink/")) == 20
    finally:
        clear_memory_backend(name)


def test_a_query_on_a_wiped_storage_is_not_misled_by_what_this_process_remembers(env):
    """The memory of settled batch records belongs to one query run. A query started again on
    a wiped storage (batch ids from 0 again) in the same Spark application, whose Python
    workers outlive queries, must read its own records: here its batch 0 holds transactions
    that batch 1's checkpoint commits, while the old run's batch 0 was settled with none."""
    from barrier_core.query_run import record_run_start

    committer, txns, clock = env
    backend = committer().backend
    record_run_start(backend, 1_000)
    committer().on_batch_committed(0, [message(0, t, []) for t in (0, 1)])  # no output
    committer().on_batch_committed(1, batch_sealing(txns, clock, 1, 1))
    committer().on_batch_committed(2, batch_sealing(txns, clock, 2, 2))
    for path in backend.list(""):  # the storage is wiped; a new query starts on it
        backend.delete([path])
    record_run_start(backend, 2_000)
    first = [message(0, t, [handle(txns, 0, t, 1, attempt=5)]) for t in (0, 1)]
    committer().on_batch_committed(0, first)
    committer().on_batch_committed(1, batch_sealing(txns, clock, 1, 1, attempt=5))
    assert txns.state["b0-p0-a5-e1"] == txns.state["b0-p1-a5-e1"] == "committed"


class LateOpeningCommitter(FakeCommitter):
    """A task Spark is cancelling opens its transaction right after the abort's first sweep."""

    def __init__(self, backend, factory, txns, late_name) -> None:
        super().__init__(backend, factory, txns)
        self.late_name, self.sweeps = late_name, 0
        self.cancelled_task_grace_s = 0.6

    def abort_unrecorded(self, batch_id):
        aborted = super().abort_unrecorded(batch_id)
        self.sweeps += 1
        if self.sweeps == 1:
            self.txns.open(self.late_name)
        return aborted


@pytest.mark.parametrize("all_returned", [False, True])
def test_an_abort_with_a_task_missing_keeps_sweeping_for_the_grace(env, all_returned, caplog):
    """A task sent no message (Spark is cancelling it): the abort sweeps again during
    ``cancelled_task_grace_s``, so a transaction the task opens after the first sweep is aborted
    before the abort returns. When every task returned, one sweep (no task can still write)."""
    committer, txns, clock = env
    committer().on_batch_committed(0, batch_sealing(txns, clock, 0, 1))
    c = committer()
    late = LateOpeningCommitter(c.backend, c._coordinator_factory, txns, "b1-p1-a0-e2")
    m0 = [message(1, 0, [handle(txns, 1, 0, 2)])]
    late.on_batch_aborted(1, m0, all_tasks_returned=all_returned)
    assert txns.state["b1-p0-a0-e2"] == "aborted"
    if all_returned:
        assert late.sweeps == 1 and txns.state["b1-p1-a0-e2"] == "open"
    else:
        assert late.sweeps > 1 and txns.state["b1-p1-a0-e2"] == "aborted"
        assert "1 output(s) of tasks being cancelled appeared after the abort's first " \
               "sweep" in caplog.text
