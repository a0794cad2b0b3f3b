"""``bench_decode``: the buffers it times hold what it says, and every path it times decodes all
of their records (a path that lost records would raise, not print a faster figure)."""

from __future__ import annotations

import pytest

from barrier_source import record_decode
from benchmarks.bench_decode import (best_seconds, decode_by_batch, decode_plain, fetch_buffer,
                                     kafka_python)


@pytest.mark.parametrize("per_batch", [1, 10, 250])
def test_every_path_decodes_every_record_of_the_buffer(per_batch):
    buf = fetch_buffer(500, per_batch)
    table = record_decode.batch_table(buf)
    assert len(table) == 500 // per_batch
    assert table.record_counts.tolist() == [per_batch] * len(table)
    assert table.base_offsets.tolist() == list(range(0, 500, per_batch))
    for path in (decode_plain, kafka_python, lambda b: decode_by_batch(record_decode, b)):
        assert path(buf) == 500


def test_a_path_that_loses_records_fails_the_run():
    buf = fetch_buffer(100, 10)
    with pytest.raises(RuntimeError, match="decoded 90 of 100"):
        best_seconds(lambda b: 90, buf, 100, 1)
