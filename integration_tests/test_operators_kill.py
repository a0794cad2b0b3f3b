"""Kill a keyed_process query (SIGKILL, subprocess) in the middle of an alignment that spans
micro-batches, restart it, and check it writes the same snapshots.

Checkpoint 2's barrier reaches channel t:0 in batch 1 and channel t:1 in batch 2, so at the end of
batch 1 every key group holds t:0's records 20-24 back in Spark's GroupState. The job is killed in
batch 2 after some key groups already wrote snapshot 2 and before Spark committed the batch; the
restarted job replays batch 2 from the held-back state.

With ``parallelism`` 2 Spark runs the four key groups as two ranges (issue 15): a range's key
groups run one after another in one call, and the kill lands inside such a call. A local disk's
snapshot uploads start when a call's key groups are done, so the snapshots 2 written before the
kill are the other range's (its call ends beside the paused one), or with one call per key
group those of the key groups that ran before the paused one.

Run as a script, this file is the job:
``python test_operators_kill.py <workdir> [pause] [parallelism=<n>]``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

MAXP = 4
OP = "kill-count"


def channel_rows(p: int, offsets, epoch_of, key_of):
    return [{"kind": "record", "topic": "t", "partition": p, "offset": o, "key": key_of(o),
             "value": f"t:{p}@{o}", "checkpoint_id": epoch_of(o)} for o in offsets]


def barrier(p: int, offset: int, n: int):
    return {"kind": "barrier", "topic": "t", "partition": p, "offset": offset,
            "checkpoint_id": n, "channels": ["t:0", "t:1"]}


def build_script() -> dict:
    """Cuts: checkpoint n at offset 10 * n on both channels (records 0-29 per channel)."""
    epoch = lambda o: o // 10 + 1  # noqa: E731
    key = lambda o: "abcdefg"[(o * 7) % 7 if o % 3 else (o // 3) % 7]  # noqa: E731
    b0 = (channel_rows(0, range(0, 10), epoch, key) + [barrier(0, 10, 1)]
          + channel_rows(1, range(0, 10), epoch, key) + [barrier(1, 10, 1)])
    b1 = (channel_rows(0, range(10, 20), epoch, key) + [barrier(0, 20, 2)]
          + channel_rows(0, range(20, 25), epoch, key) + channel_rows(1, range(10, 15), epoch, key))
    b2 = (channel_rows(0, range(25, 30), epoch, key) + [barrier(0, 30, 3)]
          + channel_rows(1, range(15, 20), epoch, key) + [barrier(1, 20, 2)]
          + channel_rows(1, range(20, 30), epoch, key) + [barrier(1, 30, 3)])
    records = [r for b in (b0, b1, b2) for r in b if r["kind"] == "record"]
    return {"batches": [b0, b1, b2], "records": records}


# ---------------------------------------------------------------------- the job (subprocess)
def job(workdir: str, pause: bool, parallelism=None) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from kafka_harness.spark import build_spark

    from barrier_ops import keyed_process
    from barrier_ops.testing import ScriptDataSource

    pause_marker = os.path.join(workdir, "paused") if pause else None

    def count(key, records, state):
        c = state.value_state("count", 0)
        c.update(c.value() + len(records))
        if pause_marker and (records["value"] == b"t:0@22").any():
            # t:0@22 was held back at the end of batch 1; it is released only after this key
            # group snapshotted checkpoint 2 in batch 2: hang here until the test kills us
            open(pause_marker, "w").close()
            while True:
                time.sleep(0.2)
        return [(key.decode(), c.value())]

    spark = build_spark("operators-kill", shuffle_partitions=2)
    spark.dataSource.register(ScriptDataSource)
    df = (spark.readStream.format("barrier-ops-script")
          .option("path", os.path.join(workdir, "script.json"))
          .option("release_path", os.path.join(workdir, "release")).load())
    out = keyed_process(df, "key", count, "word string, count long", operator_id=OP,
                        state_backend=f"file://{workdir}/state", max_parallelism=MAXP,
                        parallelism=parallelism)
    q = (out.writeStream.format("parquet").option("path", os.path.join(workdir, "out"))
         .option("checkpointLocation", os.path.join(workdir, "chk")).outputMode("append")
         .trigger(processingTime="200 milliseconds").start())
    while True:  # until every released batch is committed (or we are killed)
        q.processAllAvailable()
        released = int(open(os.path.join(workdir, "release")).read())
        if os.path.exists(os.path.join(workdir, "chk", "commits", str(released - 1))) \
                and released == 3:
            break
    q.stop()
    spark.stop()


# ---------------------------------------------------------------------- the test
def _await(cond, what: str, proc=None, timeout_s: float = 240.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"job exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _release(workdir, batches: int) -> None:
    """Let the scripted source serve ``batches`` batches (atomic: the job reads it anytime)."""
    tmp = os.path.join(workdir, "release.tmp")
    with open(tmp, "w") as f:
        f.write(str(batches))
    os.replace(tmp, os.path.join(workdir, "release"))


def _start(workdir, pause: bool, parallelism=None):
    args = [sys.executable, os.path.abspath(__file__), str(workdir)] + (["pause"] if pause else [])
    args += [f"parallelism={parallelism}"] if parallelism else []
    log = open(os.path.join(workdir, f"job-{'pause' if pause else 'resume'}.log"), "w")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _snapshots(workdir):
    out = {}
    root = os.path.join(workdir, "state")
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.startswith("kg-"):
                p = os.path.join(dirpath, f)
                out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


def _committed_output(path):
    """Rows of the files the parquet sink committed (``_spark_metadata``), not the partial
    files the killed attempt left behind."""
    import pandas as pd
    from urllib.parse import urlparse

    files = []
    meta = os.path.join(path, "_spark_metadata")
    logs = [n for n in os.listdir(meta) if n.split(".")[0].isdigit() and not n.endswith(".crc")]
    for name in sorted(logs, key=lambda n: int(n.split(".")[0])):
        with open(os.path.join(meta, name)) as f:
            lines = f.read().splitlines()[1:]  # first line: version
        files += [urlparse(json.loads(line)["path"]).path for line in lines if line.strip()]
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)


@pytest.mark.parametrize("parallelism", [None, 2])
def test_kill_mid_alignment_and_restart_gives_same_snapshots(tmp_path, parallelism):
    from barrier_ops.testing import snapshot_values, write_script
    from state_backends.filesystem import FilesystemStateBackend

    script = build_script()
    write_script(script, str(tmp_path / "script.json"))
    _release(tmp_path, 2)
    proc = _start(tmp_path, pause=True, parallelism=parallelism)
    try:
        _await(lambda: (tmp_path / "chk" / "commits" / "1").exists(), "batch 1 committed", proc)
        _release(tmp_path, 3)
        _await(lambda: (tmp_path / "paused").exists(), "the pause in batch 2", proc)
        # key groups that ran before the paused one, or beside it, write snapshot 2: a local
        # disk's uploads start when their call ends (the paused call's own never start)
        _await(lambda: any(p.startswith("chk-2/") for p in _snapshots(tmp_path)),
               "a snapshot 2 written before the kill", proc)
        assert not (tmp_path / "chk" / "commits" / "2").exists()
        before = _snapshots(tmp_path)
        # (other key groups may already have written snapshot 3: they do not pause)
        assert sum(p.startswith("chk-3/") for p in before) < MAXP
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    (tmp_path / "paused").unlink()

    proc = _start(tmp_path, pause=False, parallelism=parallelism)
    try:
        assert proc.wait(timeout=300) == 0, (tmp_path / "job-resume.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    after = _snapshots(tmp_path)
    for path, blob in before.items():
        assert after[path] == blob, f"{path} differs after the restart"
    backend = FilesystemStateBackend(str(tmp_path / "state"))
    for n in (1, 2, 3):
        ref = {}
        for r in script["records"]:
            if r["checkpoint_id"] <= n:
                ref[r["key"]] = ref.get(r["key"], 0) + 1
        assert dict(snapshot_values(backend, n, OP, MAXP)) == ref, n
    out = _committed_output(tmp_path / "out")
    acks = [json.loads(a) for a in out[out.kind == "ack"].ack]
    assert sorted((a["checkpoint_id"], a["key_group"]) for a in acks) == \
        sorted((n, kg) for n in (1, 2, 3) for kg in range(MAXP))
    # the records held back across the crash were counted in checkpoint 2's alignment
    assert any(a["metrics"]["held_back_records"] > 0 for a in acks if a["checkpoint_id"] == 2)
    recs = out[out.kind == "record"]
    total = {}
    for r in script["records"]:
        total[r["key"]] = total.get(r["key"], 0) + 1
    assert recs.groupby("word")["count"].max().to_dict() == total


if __name__ == "__main__":
    flags = sys.argv[2:]
    ranges = [int(f.split("=", 1)[1]) for f in flags if f.startswith("parallelism=")]
    job(sys.argv[1], "pause" in flags, ranges[0] if ranges else None)
