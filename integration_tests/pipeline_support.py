"""Helpers of the exactly-once tests: input production, the pipeline as a killable child
process group, and the read_committed checks."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient

from barrier_demo.verify import verify, verify_files
from barrier_core import faults
from kafka_harness.processes import kill_process_tree
from kafka_harness.topics import create_topic

PIPELINE_TIMEOUT_S = 900
#: ``barrier_demo.pipeline`` arguments: the keyed operator with the settings docs/operations.md
#: recommends (one call a batch for each of 2 ranges of key groups, the shuffle partitions;
#: each key's records as Arrow). A checkpointLocation keeps the parallelism it started with.
RECOMMENDED_OPERATOR = ("--parallelism", "2", "--records-format", "arrow")
#: ``barrier_demo.pipeline`` arguments: each key group's state between batches in the workdir's
#: storage instead of Spark's state store (keyed_process runtime_store="backend").
RUNTIMES_IN_BACKEND = ("--runtime-store", "backend")
#: The source packing its records per key group of the pipeline's operator (its
#: max_parallelism is 16); a checkpointLocation may switch it on and off between runs.
PACKED_SOURCE = ("--source-option", "packedKeyGroups=16")
#: A session that runs stateless streams adaptively (Spark 4.1+'s default, which
#: ``barrier_kafka.recommended_spark_conf`` turns off; a setting unknown to 4.0, which ignores it).
STATELESS_STREAMS_ADAPTIVE = ("--spark-conf",
                              "spark.sql.adaptive.streaming.stateless.enabled=true")


def produce_input(admin, bootstrap: str, records: int, keys: int, partitions: int = 4) -> str:
    """A new topic holding ``records`` records with keys ``k0 .. k<keys-1>``."""
    name = "eo_in_" + uuid.uuid4().hex[:8]
    create_topic(admin, name, partitions)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=512 * 1024,
                             acks=1)
    for i in range(records):
        producer.send(name, key=b"k%d" % (i % keys), value=b"v%07d" % i)
    producer.flush(timeout=120)
    producer.close()
    return name


def start_pipeline_process(bootstrap, input_topic, output, workdir, group, prefix,
                           env_extra=None, max_offsets_per_trigger=40_000, output_path=None,
                           checkpoint_location=None, extra_args=()):
    """The pipeline as a child process in its own session (``barrier_demo.pipeline``)."""
    env = faults.without_faults(os.environ)
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "barrier_demo.pipeline", "--bootstrap", bootstrap,
           "--input", input_topic, "--output", output, "--workdir", workdir, "--group", group,
           "--prefix", prefix, "--max-offsets-per-trigger", str(max_offsets_per_trigger),
           "--timeout", str(PIPELINE_TIMEOUT_S)]
    if output_path:
        cmd += ["--output-path", output_path]
    if checkpoint_location:
        cmd += ["--checkpoint-location", checkpoint_location]
    cmd += list(extra_args)
    with open(os.path.join(workdir, "run.log"), "ab") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def run_pipeline(bootstrap, input_topic, output, workdir, group, prefix, env_extra=None,
                 max_offsets_per_trigger=40_000, output_path=None, checkpoint_location=None,
                 extra_args=()):
    proc = start_pipeline_process(bootstrap, input_topic, output, workdir, group, prefix,
                                  env_extra, max_offsets_per_trigger, output_path,
                                  checkpoint_location, extra_args)
    try:
        return proc.wait(timeout=PIPELINE_TIMEOUT_S + 60)
    except subprocess.TimeoutExpired:
        kill_process_tree(proc.pid)
        raise


def kill_at_random_times(rng, kills: int, start, bootstrap: str, output: str,
                         low: float = 0.5, high: float = 14.0) -> list:
    """``kills`` times: start the pipeline (``start()`` returns its Popen), SIGKILL its whole
    process tree after a delay drawn uniformly from ``[low, high]`` seconds, and check the
    ``read_committed`` output is a duplicate-free prefix. A run that ends by itself before its
    kill fails the check (the input must outlast every kill). Returns how many output records
    were visible after each kill (never fewer than before)."""
    visible = []
    for _ in range(kills):
        proc = start()
        try:
            rc = proc.wait(timeout=rng.uniform(low, high))
            raise AssertionError(f"pipeline ended by itself (exit {rc}) before its kill: make "
                                 "the input larger, or see run.log")
        except subprocess.TimeoutExpired:
            kill_process_tree(proc.pid)
            proc.wait(timeout=60)
        visible.append(assert_prefix_exactly_once(bootstrap, output))
    assert visible == sorted(visible), f"committed output shrank between kills: {visible}"
    return visible


def group_offsets(bootstrap, group, topic):
    from kafka import TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        got = admin.list_group_offsets({group: tps})[group]
    finally:
        admin.close()
    return {str(tp.partition): om.offset for tp, om in got.items()}


def assert_exactly_once(bootstrap, input_topic, output, workdir, group, prefix, records,
                        storage=None):
    """Every expected output exactly once, no open transaction, group offsets = last
    completed checkpoint = the whole input (``storage``: the checkpoint storage's backend,
    when it is not ``<workdir>/storage``)."""
    assert_verdict(verify(bootstrap, input_topic, output), records)
    assert_no_open_transactions(bootstrap, prefix)
    assert_offsets_committed(bootstrap, input_topic, workdir, group, records, storage)


def assert_no_open_transactions(bootstrap, prefix):
    """Kafka's own ``kafka-transactions list`` shows no unfinished transaction of the sink."""
    from barrier_sink.options import is_sink_transactional_id
    from kafka_harness.tools import open_transactions

    mine = [t for t in open_transactions(bootstrap)
            if is_sink_transactional_id(prefix, t["TransactionalId"])]
    assert mine == [], f"transactions left open: {mine[:5]}"


def assert_files_exactly_once(bootstrap, input_topic, path, workdir, group, records):
    """The file sink's published files hold every expected output exactly once, nothing is
    left staged, and group offsets = last completed checkpoint = the whole input."""
    from barrier_sink.file_store import file_store_from_path

    assert_verdict(verify_files(bootstrap, input_topic, path), records)
    assert file_store_from_path(path, {}).list("_staging/") == [], "staged files left behind"
    assert_offsets_committed(bootstrap, input_topic, workdir, group, records)


def assert_verdict(verdict, records):
    assert verdict.input_records == records
    assert (verdict.duplicates, verdict.lost, verdict.unexpected) == (0, 0, 0), verdict
    assert verdict.output_records == records


def assert_offsets_committed(bootstrap, input_topic, workdir, group, records, storage=None):
    from barrier_core.completed_offsets import read_completed_offsets
    from state_backends.registry import backend_from_uri

    done = read_completed_offsets(storage or backend_from_uri(os.path.join(workdir, "storage")))
    completed = {str(p): o for p, o in done.offsets[input_topic].items()}
    assert sum(completed.values()) == records
    # The source commits the last checkpoint's offsets to the group (also when idle); Kafka's
    # own kafka-consumer-groups tool is the witness.
    from kafka_harness.tools import group_offsets as tool_group_offsets

    got = {str(p): o for p, o in tool_group_offsets(bootstrap, group).get(input_topic,
                                                                          {}).items()}
    assert got == completed


def assert_prefix_exactly_once(bootstrap, output):
    """Mid-run check: what read_committed shows has no duplicate and, per key, is a prefix
    k:1..k:m of the expected output (nothing after a gap)."""
    from collections import Counter

    from barrier_demo.verify import read_topic

    return assert_prefix(Counter(read_topic(bootstrap, output)))


def assert_files_prefix_exactly_once(path):
    """Mid-run check of the file sink: the published files hold no duplicate and, per key, a
    prefix k:1..k:m of the expected output."""
    from collections import Counter

    from barrier_demo.verify import read_published_files

    return assert_prefix(Counter(read_published_files(path)))


def assert_prefix(got):
    from collections import defaultdict

    dups = {v: n for v, n in got.items() if n > 1}
    assert not dups, f"duplicates visible to read_committed: {list(dups.items())[:5]}"
    per_key = defaultdict(set)
    for v in got:
        key, _, i = v.decode().rpartition(":")
        per_key[key].add(int(i))
    gaps = {k: sorted(ix)[:3] for k, ix in per_key.items() if ix != set(range(1, len(ix) + 1))}
    assert not gaps, f"keys whose committed output has a gap: {list(gaps.items())[:5]}"
    return sum(got.values())


def kill_chain(workdir: str, points) -> list:
    """:func:`run_fault_chain`'s faults: a SIGKILL at the second arrival at each of ``points``
    (:class:`~barrier_core.faults.FaultPoint`), one run after the other."""
    chain = []
    for point in points:
        crash_dir = os.path.join(workdir, f"crash-{point.value}")
        chain.append((point.value, faults.fault_env(crash_dir, crash_at=f"{point.value}:2"),
                      os.path.join(crash_dir, "crashed"), lambda rc: rc == -9))
    return chain


def run_fault_chain(bootstrap, input_topic, output, workdir, group, prefix, records, faults_env,
                    batch, output_path=None, extra_args=(), storage=None):
    """One pipeline hit by a series of faults, then run to the end.

    ``faults_env`` is a list of ``(name, env, marker, expect_rc)``: each run gets ``env``, must
    leave the file ``marker`` (the fault fired) and exit with ``expect_rc(rc)`` true. After every
    fault the committed output (read_committed, or the published files) must be a
    duplicate-free prefix; it must grow over the chain; the final run must finish and be
    exactly-once (no open transaction, group offsets = last completed checkpoint).
    ``extra_args`` go to every run of the pipeline (``barrier_demo.pipeline``); ``storage`` is
    the checkpoint storage's backend when they move it from ``<workdir>/storage``."""

    def committed_prefix():
        if output_path:
            return assert_files_prefix_exactly_once(output_path)
        return assert_prefix_exactly_once(bootstrap, output)

    visible = []
    for name, env, marker, expect_rc in faults_env:
        rc = run_pipeline(bootstrap, input_topic, output, workdir, group, prefix, env,
                          max_offsets_per_trigger=batch, output_path=output_path,
                          extra_args=extra_args)
        assert os.path.exists(marker), \
            f"the pipeline never reached {name} (exit {rc}); see {workdir}/run.log"
        assert expect_rc(rc), f"unexpected exit {rc} at {name}; see {workdir}/run.log"
        visible.append(committed_prefix())
    assert visible == sorted(visible) and visible[-1] < records  # progress, not yet done
    rc = run_pipeline(bootstrap, input_topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=batch, output_path=output_path,
                      extra_args=extra_args)
    assert rc == 0, f"final run failed (exit {rc}); see {workdir}/run.log"
    if output_path:
        assert_files_exactly_once(bootstrap, input_topic, output_path, workdir, group, records)
    else:
        assert_exactly_once(bootstrap, input_topic, output, workdir, group, prefix, records,
                            storage)


def assert_killed_mid_commit_then_exactly_once(bootstrap, workdir, tag, records=10_000, keys=53):
    """The compact kill check of the version matrices (Kafka and PySpark versions): the pipeline
    over ``records`` fresh records is SIGKILLed in the middle of its second driver commit (some
    transactions committed, some not), its committed output is a duplicate-free prefix, and the
    restart ends exactly-once with nothing open and the group at the last checkpoint."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        topic = produce_input(admin, bootstrap, records, keys)
        output = create_topic(admin, f"{tag}_out_" + uuid.uuid4().hex[:6], 2)
    finally:
        admin.close()
    group, prefix = f"{tag}-{uuid.uuid4().hex[:6]}", f"{tag}-{uuid.uuid4().hex[:6]}"
    crash_dir = os.path.join(workdir, "crash")
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      faults.fault_env(crash_dir, crash_at=(
                          f"{faults.FaultPoint.COMMIT_MID_TRANSACTIONS.value}:2")),
                      max_offsets_per_trigger=records // 4)
    assert os.path.exists(os.path.join(crash_dir, "crashed")), \
        f"the pipeline never reached the crash point (exit {rc}); see {workdir}/run.log"
    assert 0 < assert_prefix_exactly_once(bootstrap, output) < records
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=records // 4)
    assert rc == 0, f"restart failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, records)


def run_notebook_process(notebook, master, bootstrap, workdir, timeout_s=PIPELINE_TIMEOUT_S):
    """Run one notebook through ``barrier_demo.notebook_runner`` in a child process whose
    SparkSession is on ``master`` (a ``spark://`` standalone cluster or an ``sc://`` Spark
    Connect server); returns the notebook's ``result``."""
    import json

    os.makedirs(workdir, exist_ok=True)
    result = os.path.join(workdir, "result.json")
    log = os.path.join(workdir, "notebook.log")
    cmd = [sys.executable, "-m", "barrier_demo.notebook_runner", str(notebook),
           "--master", master, "--result-json", result,
           "--widget", f"bootstrap_servers={bootstrap}",
           "--widget", f"work_dir={os.path.join(workdir, 'work')}"]
    with open(log, "ab") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s,
                            env=faults.without_faults(os.environ)).returncode
    assert rc == 0, f"{notebook} on {master} failed (exit {rc}); see {log}"
    with open(result) as f:
        return json.load(f)[0]
