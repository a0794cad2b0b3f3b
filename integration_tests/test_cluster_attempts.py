"""Task retries and speculative attempts on a real Spark standalone cluster (a master and two
workers started from the PySpark install), not ``local[2]``: the behaviour depends on separate
executors.

The exactly-once pipeline runs with ``spark.speculation`` on; one sink task's first attempt is
made slow (a test-only delay at ``task_write``), so Spark launches a speculative copy on the other
executor, and another task's first attempt raises once, so Spark retries it. Afterwards: every
expected output exactly once in ``read_committed`` output, no transaction of the sink left open
(the losers' were aborted by the driver), group offsets at the last completed checkpoint, and the
batch records show that in both tasks a later attempt's transactions were the ones committed.

The faults fire in first attempts only (``first_attempts``): with eager speculation Spark also
copies healthy tasks, and a fault counted in such a copy (or in the retry) would slow or fail an
attempt that does not decide its task.

An executor is also lost in the middle of a batch: its JVM, Python daemon and Python workers
are SIGKILLed together while one of its sink tasks holds an open transaction, and the query runs
on, without a restart, on the other executor and the replacement the master launches.
"""

from __future__ import annotations

import glob
import json
import os
import time
import uuid

import pytest

from barrier_core.faults import fault_env, fired
from integration_tests.pipeline_support import (PACKED_SOURCE, PIPELINE_TIMEOUT_S,
                                                RECOMMENDED_OPERATOR, RUNTIMES_IN_BACKEND,
                                                assert_exactly_once, produce_input,
                                                run_notebook_process, run_pipeline,
                                                start_pipeline_process)
from integration_tests.test_notebooks import CHECKS, NOTEBOOK_DIR
from kafka_harness.processes import kill_process_tree
from kafka_harness.spark_cluster import StandaloneCluster, executor_process

RECORDS = 30_000
KEYS = 211


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with StandaloneCluster(workers=2, cores=1, memory="1g",
                           work_dir=str(tmp_path_factory.mktemp("spark-cluster"))) as c:
        yield c


def _winning_ids(workdir: str) -> dict:
    """``{(batch, task): transactional id}`` of the attempt each task committed."""
    out = {}
    for path in glob.glob(os.path.join(workdir, "storage", "sink", "batch-*.json")):
        with open(path) as f:
            for h in json.load(f)["handles"]:
                out[(h["batch_id"], h["partition_id"])] = h["transactional_id"]
    return out


def _winning_attempts(workdir: str) -> dict:
    """``{(batch, task): attempt}``: the attempt whose transactions each task committed."""
    return {task: int(tid.rsplit("-a", 1)[1].split("-")[0])
            for task, tid in _winning_ids(workdir).items()}


def _claimed_by(workdir: str, batch: int, task_attempt_id: int) -> list:
    """The pooled ids a task attempt claimed in ``batch`` (``barrier_sink.attempt_claims``:
    a losing attempt's claim stays until its quarantine ends)."""
    folder = os.path.join(workdir, "storage", "sink-claims", f"{batch:012d}")
    return [name.rpartition("@")[0] for name in os.listdir(folder)
            if name.endswith(f"@{task_attempt_id}")]


def _task_of(crash_dir: str, marker: str) -> tuple:
    task = fired(crash_dir, marker)["task"]
    assert task is not None and task["attempt"] == 0, task
    return task["batch"], task["partition"]


#: The operator's layouts the attempts run in: ``keyed_process``'s defaults (one call a key
#: group, pandas records), and the settings docs/operations.md recommends (a call a range of key
#: groups, Arrow records, the source's packed rows), where a retried or speculative attempt
#: runs a whole range again and writes its key groups' snapshots beside the other attempt's;
#: and those settings with each range's state between batches in the state backend
#: (``keyed_process(..., runtime_store="backend")``), where both attempts of a batch read the
#: runtime the batch before left and write the batch's own over each other.
LAYOUTS = {"defaults": [], "recommended": [*RECOMMENDED_OPERATOR, *PACKED_SOURCE],
           "recommended, runtimes in the backend": [*RECOMMENDED_OPERATOR, *PACKED_SOURCE,
                                                    *RUNTIMES_IN_BACKEND]}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_retried_and_speculative_attempts_on_a_standalone_cluster(cluster, bootstrap,
                                                                  kafka_admin, topic_factory,
                                                                  tmp_path, layout):
    topic = produce_input(kafka_admin, bootstrap, RECORDS, KEYS)
    output = topic_factory(2, prefix="eo_cluster")
    workdir = str(tmp_path)
    group, prefix = f"eo-cl-{uuid.uuid4().hex[:6]}", f"eo-cl-{uuid.uuid4().hex[:6]}"
    crash_dir = os.path.join(workdir, "faults")
    env = fault_env(crash_dir, fail_at="task_write:3", delay_at="task_write:7:30",
                    first_attempts=True)
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix, env,
                      max_offsets_per_trigger=3_000,
                      extra_args=["--master", cluster.url, "--speculation"] + LAYOUTS[layout])
    assert rc == 0, f"pipeline on the cluster failed (exit {rc}); see {workdir}/run.log"
    assert os.path.exists(os.path.join(crash_dir, "failed-task_write")), "no task failed"
    assert os.path.exists(os.path.join(crash_dir, "delayed-task_write")), "no task was slow"
    failed, slow = _task_of(crash_dir, "failed-task_write"), _task_of(crash_dir,
                                                                     "delayed-task_write")
    winners = _winning_attempts(workdir)
    # Only a retry or a speculative copy has an attempt number above 0.
    assert winners[failed] > 0, f"the failed task {failed} committed attempt 0: {winners}"
    assert winners[slow] > 0, f"the slow task {slow}'s speculative copy lost: {winners}"
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, RECORDS)


def _await_marker(crash_dir: str, marker: str, proc, timeout_s: float = 240.0) -> dict:
    """The marker's record once a fault wrote it; fails if the pipeline exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return fired(crash_dir, marker)
        except (OSError, ValueError):  # not there yet, or being written
            pass
        assert proc.poll() is None, f"the pipeline exited ({proc.returncode}) before {marker}"
        time.sleep(0.1)
    raise AssertionError(f"no {marker} within {timeout_s:.0f}s")


@pytest.mark.parametrize("layout", ["defaults", "recommended, runtimes in the backend"])
def test_an_executor_lost_in_the_middle_of_a_batch(cluster, bootstrap, kafka_admin,
                                                   topic_factory, tmp_path, layout):
    """A sink task's first attempt is held after writing its rows, its transaction open (a
    test-only delay at ``task_write``), and its executor is lost: the executor's JVM, Python
    daemon and workers are SIGKILLed at once, as a machine loss or the kernel's OOM killer
    would. Spark runs the lost tasks again on the other executor, with the map output the lost
    one held, and the master launches a replacement; the query finishes without a restart.
    Afterwards another attempt's transaction was committed for the held task (when Spark
    re-runs a stage its attempts number from 0 again: the id the lost attempt claimed tells
    them apart), a new executor was launched, and the output is exactly-once: every record once
    in ``read_committed``, no transaction of the sink open (the lost attempt's was aborted),
    the group at the last completed checkpoint. With Spark's state store (the defaults) the
    lost executor's state partitions load again from Spark's checkpoint; with runtimes in the
    backend every call reads the runtime the batch before left."""
    records = RECORDS // 2   # 5 batches: the loss lands in the second
    topic = produce_input(kafka_admin, bootstrap, records, KEYS)
    output = topic_factory(2, prefix="eo_lost")
    workdir = str(tmp_path)
    group, prefix = f"eo-lost-{uuid.uuid4().hex[:6]}", f"eo-lost-{uuid.uuid4().hex[:6]}"
    crash_dir = os.path.join(workdir, "faults")
    executors_before = len(cluster.executor_dirs())
    # The hold outlasts the kill by far; only the first attempt of the 4th task to write waits.
    env = fault_env(crash_dir, delay_at="task_write:4:120", first_attempts=True)
    proc = start_pipeline_process(bootstrap, topic, output, workdir, group, prefix, env,
                                  max_offsets_per_trigger=3_000,
                                  extra_args=["--master", cluster.url] + LAYOUTS[layout])
    try:
        held = _await_marker(crash_dir, "delayed-task_write", proc)
        executor = executor_process(held["pid"])
        assert executor is not None, f"the held task runs in no executor: {held}"
        kill_process_tree(executor)
        rc = proc.wait(timeout=PIPELINE_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            kill_process_tree(proc.pid)
    assert rc == 0, f"the query did not survive the lost executor (exit {rc}); see " \
                    f"{workdir}/run.log"
    task = (held["task"]["batch"], held["task"]["partition"])
    lost_ids = _claimed_by(workdir, task[0], held["task"]["task_attempt_id"])
    assert len(lost_ids) == 1, f"the lost attempt claimed {lost_ids}"
    winner = _winning_ids(workdir)[task]
    assert winner != lost_ids[0], f"the lost attempt's {winner} of task {task} was committed"
    assert len(cluster.executor_dirs()) >= executors_before + 3, \
        f"no replacement executor was launched: {cluster.executor_dirs()}"
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, records)


def test_exactly_once_notebook_on_a_standalone_cluster(cluster, bootstrap, tmp_path):
    """The exactly-once Kafka notebook (a run, a restart, its own checks) with its SparkSession
    on the cluster: the source's planner and the sink's commits on the driver, the reads,
    operators and writes on the two executors."""
    notebook = NOTEBOOK_DIR / "02_exactly_once_kafka.py"
    result = run_notebook_process(notebook, cluster.url, bootstrap, str(tmp_path))
    CHECKS[notebook.stem](result)
