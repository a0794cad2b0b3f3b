"""``barrier_ops.batch_runtimes``: key groups' runtimes between micro-batches in the state backend
(``keyed_process(..., runtime_store="backend")``), on a real local-disk backend."""

from __future__ import annotations

import pytest

from barrier_ops.batch_runtimes import BatchRuntimes, batch_identity, layout_name
from barrier_ops.exceptions import InvalidOptionError
from barrier_ops.options import OperatorOptions
from state_backends.filesystem import FilesystemStateBackend
from state_backends.memory import MemoryStateBackend


def _runtimes(tmp_path, layout="kg", query="q1"):
    return BatchRuntimes(FilesystemStateBackend(str(tmp_path)), "op", query, layout)


def test_a_batch_reads_the_newest_runtime_of_an_earlier_batch_never_its_own(tmp_path):
    rt = _runtimes(tmp_path)
    assert rt.load_before(3, 0) == (None, [])
    rt.save(3, 0, b"after-0", [])
    rt.save(3, 2, b"after-2", [])          # the group had no rows in batch 1
    assert rt.load_before(3, 2)[0] == b"after-0"   # a retry of batch 2 ignores its own write
    assert rt.load_before(3, 3)[0] == b"after-2"
    assert rt.load_before(3, 7)[0] == b"after-2"
    assert rt.load_before(4, 7) == (None, [])      # another group has its own runtimes


def test_a_later_attempt_replaces_an_earlier_attempts_runtime(tmp_path):
    rt = _runtimes(tmp_path)
    rt.save(0, 5, b"first attempt", [])
    rt.save(0, 5, b"retry", [])
    assert rt.load_before(0, 6)[0] == b"retry"


def test_a_group_keeps_at_most_two_runtimes_and_the_one_a_retry_reads(tmp_path):
    rt = _runtimes(tmp_path)
    backend = FilesystemStateBackend(str(tmp_path))
    for batch in range(6):
        blob, stale = rt.load_before(1, batch)
        assert blob == (None if batch == 0 else f"after-{batch - 1}".encode())
        rt.save(1, batch, f"after-{batch}".encode(), stale)
        kept = backend.list("runtime/op-op/q1/kg/1")
        assert len(kept) <= 2
    assert backend.list("runtime/op-op/q1/kg/1") == ["runtime/op-op/q1/kg/1/4",
                                                     "runtime/op-op/q1/kg/1/5"]
    # a retry of batch 5 still finds what batch 4 left
    assert rt.load_before(1, 5)[0] == b"after-4"


def test_another_query_starts_empty(tmp_path):
    _runtimes(tmp_path, query="q1").save(0, 0, b"q1", [])
    assert _runtimes(tmp_path, query="q2").load_before(0, 0) == (None, [])


def test_a_query_cannot_change_its_layout(tmp_path):
    _runtimes(tmp_path, layout=layout_name(2)).save(0, 0, b"range 0", [])
    with pytest.raises(InvalidOptionError, match="written with parallelism=2 and the operator "
                                                 "now runs with parallelism=None"):
        _runtimes(tmp_path, layout=layout_name(None)).load_before(0, 1)
    with pytest.raises(InvalidOptionError, match="parallelism=2 and the operator now runs with "
                                                 "parallelism=4"):
        _runtimes(tmp_path, layout=layout_name(4)).load_before(0, 1)


def test_outside_a_streaming_query_there_is_no_batch_id():
    with pytest.raises(InvalidOptionError, match="runs only inside a streaming query"):
        batch_identity()


def test_runtime_store_is_spark_or_a_backend_every_executor_reaches(tmp_path):
    assert OperatorOptions("op", f"file://{tmp_path}").runtime_store == "spark"
    assert OperatorOptions("op", f"file://{tmp_path}", runtime_store="backend")
    with pytest.raises(InvalidOptionError, match="runtime_store must be 'spark'"):
        OperatorOptions("op", f"file://{tmp_path}", runtime_store="rocksdb")
    for memory in ("memory://m", MemoryStateBackend("m")):
        with pytest.raises(InvalidOptionError, match="a memory:// backend lives in one Python "
                                                     "process"):
            OperatorOptions("op", memory, runtime_store="backend")
    assert OperatorOptions("op", "memory://m").runtime_store == "spark"


def test_a_batch_after_the_first_finding_no_state_at_all_starts_empty_and_warns(tmp_path,
                                                                              caplog):
    """No runtime at all in batch 3: right when no earlier batch brought the operator a row,
    state lost when the runtimes were deleted; the executor's log says which."""
    with caplog.at_level("WARNING", logger="barrier_ops.batch_runtimes"):
        assert _runtimes(tmp_path).load_before(0, 3) == (None, [])
    assert "micro-batch 3 of this query finds no state of its earlier batches" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="barrier_ops.batch_runtimes"):
        assert _runtimes(tmp_path).load_before(0, 0) == (None, [])   # a new query's first batch
        _runtimes(tmp_path, query="q2").save(5, 0, b"g5", [])
        assert _runtimes(tmp_path, query="q2").load_before(0, 1) == (None, [])  # a group new in 1
    assert caplog.text == ""


def test_the_operator_runtime_fault_fires_after_the_runtime_is_stored(tmp_path, monkeypatch):
    """``operator_runtime`` (the exactly-once suite kills there): armed, a call fails with its
    runtime for the batch stored and the older ones not yet deleted; a retry of the batch
    still reads what the batch before left."""
    from barrier_core import faults

    rt = _runtimes(tmp_path)
    for batch in range(2):
        rt.save(0, batch, f"after-{batch}".encode(), rt.load_before(0, batch)[1])
    env = faults.fault_env(str(tmp_path / "faults"),
                           fail_at=f"{faults.FaultPoint.OPERATOR_RUNTIME.value}:1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    blob, stale = rt.load_before(0, 2)
    assert (blob, stale) == (b"after-1", [0])
    with pytest.raises(faults.InjectedFailure):
        rt.save(0, 2, b"after-2", stale)
    assert FilesystemStateBackend(str(tmp_path)).list("runtime/op-op/q1/kg/0") == [
        "runtime/op-op/q1/kg/0/0", "runtime/op-op/q1/kg/0/1", "runtime/op-op/q1/kg/0/2"]
    assert rt.load_before(0, 2)[0] == b"after-1"


def test_the_operator_spreads_its_groups_over_a_counted_shuffle_only():
    """``runtime_store="backend"`` repartitions by the shuffle partitions when they are a count;
    Databricks' ``spark.sql.shuffle.partitions=auto`` is left to the platform."""
    from barrier_ops.operator import shuffle_partition_count

    assert shuffle_partition_count("2") == 2
    assert shuffle_partition_count(" 200 ") == 200
    assert shuffle_partition_count("auto") is None
    assert shuffle_partition_count("0") is None
