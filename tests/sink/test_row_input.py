"""What the 2PC writer's tasks get from PySpark's write worker.

Arrow record batches on every supported PySpark: on 4.0, which has no
``DataSourceStreamArrowWriter``, the worker (``pyspark.sql.worker.write_into_data_source``) gives
them to any ``DataSourceArrowWriter`` and converts them into one Row per record for every other
writer, streaming or not. Rows still work: the writer tells them apart without asking a Row for
an attribute it lacks. ``hasattr(row, ...)`` on a PySpark Row raises inside ``Row.__getattr__``
and formats an error message per row, which was 19% of the sink's Python time in a py-spy profile
of bench_pipeline on PySpark 4.0.5 (barrier_sink.two_phase_commit.TwoPhaseCommitWriter.write)."""

from __future__ import annotations

from pyspark.sql import Row, datasource
from pyspark.sql import types as spark_types

from barrier_core.schema import KIND_ACK, KIND_BARRIER, KIND_RECORD
from barrier_sink import two_phase_commit
from barrier_sink.two_phase_commit import TwoPhaseCommitWriter

_FIELDS = ("kind", "checkpoint_id", "value", "topic", "partition", "offset",
           "barrier_channels", "checkpoint_timestamp", "ack")


class _Recorder(TwoPhaseCommitWriter):
    """Records each record row its transaction (named by its epoch) receives."""

    def __init__(self):
        super().__init__({})
        self.sent = []

    def begin_transaction(self, batch_id, partition_id, attempt, epoch):
        return epoch

    def invoke(self, txn, row):
        self.sent.append((txn, row["value"]))

    def pre_commit(self, txn):
        return None

    invoke_batch = abort_open = committer = None
    storage_uri = checkpoint_location = None


def _rows():
    out = []
    for i in range(40):
        kind = KIND_BARRIER if i % 10 == 9 else KIND_ACK if i % 10 == 4 else KIND_RECORD
        out.append(Row(**dict(zip(_FIELDS, (kind, 1 + i // 10, f"v{i}", "in", i % 2, i,
                                            ["in:0", "in:1"], 1000 + i, f"ack{i}")))))
    return out


def test_rows_reach_their_epochs_without_a_missing_attribute_lookup_per_row(monkeypatch):
    monkeypatch.setattr(two_phase_commit, "current_task", lambda: (3, 0, 0))
    looked_up = []
    original = spark_types.Row.__getattr__

    def counted(self, name):
        looked_up.append(name)
        return original(self, name)

    monkeypatch.setattr(spark_types.Row, "__getattr__", counted)
    rows = _rows()
    writer = _Recorder()
    message = writer.write(iter(rows))
    assert looked_up == []
    assert writer.sent == [(r["checkpoint_id"], r["value"]) for r in rows
                           if r["kind"] == KIND_RECORD]
    assert message.records == len(writer.sent)
    assert message.acks == [r["ack"] for r in rows if r["kind"] == KIND_ACK]
    assert len(message.barriers) == sum(r["kind"] == KIND_BARRIER for r in rows)


def test_pyspark_hands_the_writer_arrow_batches_not_rows():
    """PySpark's write worker passes its Arrow batches through to a writer of these classes
    (4.0: ``DataSourceArrowWriter`` only; 4.1+: either) and builds a Row per record for any
    other. On PySpark 4.0.5 the writer was a plain ``DataSourceStreamWriter``: 190-1,217 ms a
    batch went to Rows in bench_pipeline (stop 39's note)."""
    arrow_writers = tuple(getattr(datasource, name)
                          for name in ("DataSourceArrowWriter", "DataSourceStreamArrowWriter")
                          if hasattr(datasource, name))
    writer = _Recorder()
    assert isinstance(writer, arrow_writers)
    assert isinstance(writer, getattr(datasource, "DataSourceStreamArrowWriter",
                                      datasource.DataSourceStreamWriter))
