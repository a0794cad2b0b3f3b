"""Kill the query (SIGKILL, in a subprocess) in the middle of a batch and restart it from the
same checkpointLocation: the replayed batch yields identical records and barriers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from integration_tests.source_helpers import produce, wait_for

CHILD = textwrap.dedent("""
    import json, os, sys, time, uuid
    sys.path.insert(0, {root!r})
    from kafka_harness.spark import build_spark
    bootstrap, topic, chk, out, block_batch = sys.argv[1:6]
    spark = build_spark("replay-child")
    df = (spark.readStream.format("barrier-kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "25").load())

    def sink(batch, batch_id):
        rows = [[r.kind, r.partition, r.offset, r.checkpoint_id, r.value and r.value.decode()]
                for r in batch.collect()]
        path = os.path.join(out, "batch-%d-%s.json" % (batch_id, uuid.uuid4().hex))
        with open(path + ".tmp", "w") as f:
            json.dump(sorted(rows, key=str), f)
        os.rename(path + ".tmp", path)
        if batch_id == int(block_batch):
            while True:          # the parent SIGKILLs us here, mid-batch
                time.sleep(1)

    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", chk)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    print("DONE", flush=True)
""")


def attempts(out, batch_id):
    files = sorted(f for f in os.listdir(out) if f.startswith(f"batch-{batch_id}-")
                   and f.endswith(".json"))
    return [json.load(open(os.path.join(out, f))) for f in files]


@pytest.mark.slow
def test_replay_after_sigkill_injects_identical_barriers(bootstrap, topic_factory, tmp_path):
    topic = topic_factory(2)
    produce(bootstrap, topic, {0: 40, 1: 30})
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=root))
    chk, out = str(tmp_path / "chk"), str(tmp_path / "out")
    os.makedirs(out)
    env = dict(os.environ, PYTHONPATH=root)
    child = subprocess.Popen([sys.executable, str(script), bootstrap, topic, chk, out, "1"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        wait_for(lambda: attempts(out, 1), timeout_s=240)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(60)
    restart = subprocess.run([sys.executable, str(script), bootstrap, topic, chk, out, "-1"],
                             env=env, capture_output=True, text=True, timeout=400)
    assert "DONE" in restart.stdout, restart.stdout[-3000:] + restart.stderr[-3000:]
    first, replayed = attempts(out, 1)
    assert first == replayed
    assert any(row[0] == "barrier" for row in replayed)
    # every record exactly once over the committed batches (batch 1 counted once)
    seen = []
    batch_ids = sorted({int(f.split("-")[1]) for f in os.listdir(out) if f.endswith(".json")})
    for b in batch_ids:
        seen += [(r[1], r[2]) for r in attempts(out, b)[-1] if r[0] == "record"]
    assert sorted(seen) == sorted([(0, i) for i in range(40)] + [(1, i) for i in range(30)])
