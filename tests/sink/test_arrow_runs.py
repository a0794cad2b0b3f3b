"""The 2PC writer hands each epoch's record rows of an Arrow batch to that epoch's transaction in
one call, in batch order, and turns the other rows into barriers and acks
(barrier_sink.two_phase_commit._write_arrow)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from barrier_core.schema import KIND_ACK, KIND_BARRIER, KIND_RECORD
from barrier_sink.messages import SinkCommitMessage
from barrier_sink.two_phase_commit import TwoPhaseCommitWriter


class _Recorder(TwoPhaseCommitWriter):
    """Records what each transaction (named by its epoch) receives."""

    def __init__(self):
        super().__init__({})
        self.runs = []

    def invoke_batch(self, txn, batch):
        self.runs.append((txn, batch.column("value").to_pylist()))

    begin_transaction = invoke = pre_commit = abort_open = committer = None
    storage_uri = checkpoint_location = None


def _rows(seed):
    rng = random.Random(seed)
    rows = []
    for i in range(300):
        kind = rng.choice([KIND_RECORD] * 8 + [KIND_BARRIER, KIND_ACK])
        rows.append({"kind": kind, "checkpoint_id": rng.choice([None, 1, 2, 2, 3]),
                     "value": f"v{i}", "topic": "in", "partition": rng.randrange(2),
                     "offset": i, "barrier_channels": ["in-0", "in-1"],
                     "checkpoint_timestamp": 1000 + i, "ack": f"ack{i}"})
        if kind == KIND_BARRIER and rows[-1]["checkpoint_id"] is None:
            rows[-1]["checkpoint_id"] = 1
    return rows


def _expected_runs(rows):
    """One run per epoch, epochs in order of their first record, records in batch order."""
    runs = {}
    for row in rows:
        if row["kind"] == KIND_RECORD:
            runs.setdefault(row["checkpoint_id"], []).append(row["value"])
    return list(runs.items())


@pytest.mark.parametrize("seed", range(5))
def test_each_epochs_records_go_to_its_transaction_at_once_and_in_order(seed):
    rows = _rows(seed)
    writer, message = _Recorder(), SinkCommitMessage(0, 0)
    writer._write_arrow(pa.RecordBatch.from_pylist(rows), lambda epoch: epoch, message)
    assert writer.runs == _expected_runs(rows)
    assert message.records == sum(r["kind"] == KIND_RECORD for r in rows)
    assert message.acks == [r["ack"] for r in rows if r["kind"] == KIND_ACK]
    assert len(message.barriers) == sum(r["kind"] == KIND_BARRIER for r in rows)


def test_an_unknown_row_kind_is_refused():
    rows = [{"kind": KIND_RECORD, "checkpoint_id": 1, "value": "a"},
            {"kind": None, "checkpoint_id": 1, "value": "b"}]
    with pytest.raises(ValueError, match="is not one of record, barrier, ack"):
        _Recorder()._write_arrow(pa.RecordBatch.from_pylist(rows), lambda e: e,
                                 SinkCommitMessage(0, 0))


def test_a_contiguous_run_is_a_view_and_a_lone_epoch_the_batch_itself():
    """No copy where none is needed: one epoch's records between control rows are a slice."""
    rows = ([{"kind": KIND_ACK, "checkpoint_id": 1, "value": None, "ack": "a"}]
            + [{"kind": KIND_RECORD, "checkpoint_id": 2, "value": f"v{i}"} for i in range(5)]
            + [{"kind": KIND_ACK, "checkpoint_id": 1, "value": None, "ack": "b"}])
    seen = []

    class Views(_Recorder):
        def invoke_batch(self, txn, batch):
            seen.append(batch)

    batch = pa.RecordBatch.from_pylist(rows)
    message = SinkCommitMessage(0, 0)
    Views()._write_arrow(batch, lambda e: e, message)
    assert [b.column("value").to_pylist() for b in seen] == [[f"v{i}" for i in range(5)]]
    assert seen[0].column("value").buffers()[2].address == \
        batch.column("value").buffers()[2].address  # the same bytes, not a copy
    assert message.acks == ["a", "b"] and message.records == 5
    only = pa.RecordBatch.from_pylist(rows[1:6])
    seen.clear()
    Views()._write_arrow(only, lambda e: e, SinkCommitMessage(0, 0))
    assert len(seen) == 1 and seen[0] is only
