"""The cluster test finds the executor a held task runs in by walking up from the task's Python
worker to the JVM whose command line runs Spark's executor backend
(:func:`kafka_harness.spark_cluster.executor_process`). Real processes stand in for the JVM
and the worker here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from kafka_harness.spark_cluster import EXECUTOR_BACKEND, executor_process

# A stand-in "executor" (its command line names the backend) that starts a "worker" child,
# prints the child's pid and waits.
_EXECUTOR = ("import subprocess, sys, time\n"
             "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
             "print(child.pid, flush=True)\n"
             "time.sleep(60)\n")


def test_a_worker_is_traced_to_its_executor_and_the_driver_to_none():
    executor = subprocess.Popen([sys.executable, "-c", _EXECUTOR, EXECUTOR_BACKEND],
                                stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        worker = int(executor.stdout.readline())
        assert executor_process(worker) == executor.pid
        assert executor_process(executor.pid) == executor.pid
        assert executor_process(os.getpid()) is None   # the test runs under no executor
    finally:
        executor.kill()
        executor.wait(timeout=30)
        if worker is not None:
            os.kill(worker, signal.SIGKILL)


def test_a_process_that_exited_has_no_executor():
    gone = subprocess.Popen([sys.executable, "-c", "pass", EXECUTOR_BACKEND])
    gone.wait(timeout=30)   # reaped: its /proc entry is gone
    assert executor_process(gone.pid) is None
