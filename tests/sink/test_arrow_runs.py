"""The 2PC writer cuts an Arrow batch into runs of record rows of one epoch, in order, and turns
the rows between them into barriers and acks (barrier_sink.two_phase_commit._write_arrow)."""

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
    runs = []
    for row in rows:
        if row["kind"] != KIND_RECORD:
            runs.append(None)
        elif runs and runs[-1] is not None and runs[-1][0] == row["checkpoint_id"]:
            runs[-1][1].append(row["value"])
        else:
            runs.append((row["checkpoint_id"], [row["value"]]))
    return [r for r in runs if r is not None]


@pytest.mark.parametrize("seed", range(5))
def test_records_go_to_their_epochs_transactions_in_runs_and_in_order(seed):
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
