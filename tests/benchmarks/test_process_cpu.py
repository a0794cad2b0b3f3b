import os
import sys
import time

import pytest

from benchmarks.process_cpu import (ZOMBIE, Usage, _jit_threads, jit_spent, kind_of, spent,
                                    take)


def test_kinds_from_command_lines():
    assert kind_of("java -cp x org.apache.spark.deploy.SparkSubmit pyspark-shell", 5, 1) == \
        "spark jvm"
    assert kind_of("python3 -m pyspark.daemon pyspark.worker", 5, 1) == "python tasks"
    assert kind_of("python3 -m pyspark.daemon pyspark.sql.worker.python_streaming_sink_runner",
                   5, 1) == "python driver"
    assert kind_of("python3 -m pyspark.sql.streaming.python_streaming_source_runner", 5, 1) == \
        "python driver"
    assert kind_of("java -Xmx512m kafka.Kafka server.properties", 5, 1) == "kafka broker"
    assert kind_of("python bench.py", 1, 1) == "benchmark"
    assert kind_of("bash", 5, 1) is None


def test_an_ended_child_counts_once_through_its_parent():
    before = {10: Usage("python tasks", 1.0, 0.0), 11: Usage("python tasks", 0.5, 0.0, 10)}
    # 11 ran 0.25 s more, ended, and its parent 10 waited for it (0.75 s of children time)
    after = {10: Usage("python tasks", 1.5, 0.75), 12: Usage("spark jvm", 2.0, 0.0)}
    got = spent(before, after)
    assert got["python tasks"] == pytest.approx(0.5 + 0.25)
    assert got["spark jvm"] == pytest.approx(2.0)  # started after the first snapshot


def test_an_ended_child_of_another_kind_makes_no_kind_negative():
    # a source planner (python driver) the JVM waited for: 0.5 s before the run, 0.25 s in it
    before = {20: Usage("spark jvm", 5.0, 0.0), 21: Usage("python driver", 0.5, 0.0, 20),
              22: Usage("python tasks", 0.25, 0.0, 1)}   # its parent is of no interest
    after = {20: Usage("spark jvm", 6.0, 0.75)}
    got = spent(before, after)
    assert got["python driver"] == 0.0 and got["python tasks"] == 0.0
    assert got["spark jvm"] == pytest.approx(1.0 + 0.25)   # the child's run-time part lands here
    assert sum(got.values()) == pytest.approx(1.0 + 0.25)


def test_a_child_that_ended_with_its_parent_comes_off_the_nearest_live_ancestor():
    # a driver-side daemon (python driver) and its forked worker both ended in the run; the
    # daemon had waited for the worker, the JVM for the daemon: all of it is in the JVM's
    # children time now
    before = {30: Usage("spark jvm", 5.0, 0.0), 31: Usage("python driver", 0.5, 0.0, 30),
              32: Usage("python driver", 0.25, 0.0, 31)}
    after = {30: Usage("spark jvm", 6.0, 0.5 + 0.25 + 0.125 + 0.125)}   # each ran 0.125 s more
    got = spent(before, after)
    assert got["python driver"] == 0.0
    assert got["spark jvm"] == pytest.approx(1.0 + 0.125 + 0.125)


def test_a_child_not_yet_waited_for_takes_nothing_off_its_parent():
    # the worker ended but its daemon has not reaped it: a zombie, its time not yet in the
    # daemon's children time
    before = {40: Usage("python driver", 1.0, 0.0), 41: Usage("python driver", 0.5, 0.0, 40)}
    after = {40: Usage("python driver", 1.25, 0.0), 41: Usage(ZOMBIE, 0.75, 0.0, 40)}
    got = spent(before, after)
    assert got["python driver"] == pytest.approx(0.25)


def test_a_zombie_waited_for_during_the_run_comes_off_its_parent():
    # ended before the run, waited for in it: its time lands in the daemon's children time
    before = {50: Usage("python driver", 1.0, 0.0), 51: Usage(ZOMBIE, 0.5, 0.0, 50)}
    after = {50: Usage("python driver", 1.25, 0.5)}
    assert spent(before, after)["python driver"] == pytest.approx(0.25)


def test_a_reused_pid_is_a_new_process():
    got = spent({7: Usage("python driver", 3.0, 0.0)}, {7: Usage("kafka broker", 0.25, 0.0)})
    assert got["kafka broker"] == pytest.approx(0.25)


@pytest.mark.skipif(not os.path.isdir("/proc") or sys.platform != "linux", reason="Linux /proc")
def test_this_process_cpu_is_counted_as_the_benchmark():
    before = take()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    got = spent(before, take())
    assert got["benchmark"] >= 0.2


def test_jit_time_is_reported_apart_from_the_kinds():
    before = {60: Usage("spark jvm", 5.0, 0.0, 1, {601: 1.0, 602: 0.5})}
    # 601 ran 0.75 s more, 602 ended (HotSpot stops idle compiler threads), 603 is new
    after = {60: Usage("spark jvm", 7.0, 0.0, 1, {601: 1.75, 603: 0.25})}
    assert jit_spent(before, after) == pytest.approx(0.75 + 0.25)
    assert spent(before, after)["spark jvm"] == pytest.approx(2.0)   # the JIT is a part of it


def test_a_thread_id_reused_by_a_new_compiler_thread_counts_the_new_thread():
    before = {70: Usage("spark jvm", 5.0, 0.0, 1, {701: 3.0})}
    after = {70: Usage("spark jvm", 6.0, 0.0, 1, {701: 0.5})}
    assert jit_spent(before, after) == pytest.approx(0.5)


def test_a_jvm_started_during_the_run_counts_all_its_jit_time():
    after = {80: Usage("spark jvm", 3.0, 0.0, 1, {801: 1.25})}
    assert jit_spent({}, after) == pytest.approx(1.25)


@pytest.mark.skipif(not os.path.isdir("/proc") or sys.platform != "linux", reason="Linux /proc")
def test_a_real_jvm_lists_its_compiler_threads(tmp_path):
    import shutil
    import subprocess

    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    # a JVM that runs until its stdin closes, compiling as it goes
    source = tmp_path / "Spin.java"
    source.write_text("public class Spin { public static void main(String[] a) throws Exception"
                      " { long x = 0; while (System.in.available() == 0) { x += x * 31 + 7; }"
                      " System.out.println(x); } }")
    proc = subprocess.Popen([java, "-XX:CICompilerCount=2", str(source)], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        threads = {}
        while time.monotonic() < deadline and not threads:
            threads = _jit_threads(proc.pid, os.sysconf("SC_CLK_TCK"))
            time.sleep(0.1)
        assert threads, "no C1/C2 compiler thread listed for a running JVM"
        assert all(s >= 0 for s in threads.values())
        assert proc.pid not in threads   # the JVM's own main thread is not a compiler thread
    finally:
        proc.stdin.write(b"x")
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_reused_pid_counts_its_new_jvm_s_jit_time_whole():
    before = {90: Usage("python driver", 3.0, 0.0)}
    after = {90: Usage("spark jvm", 1.0, 0.0, 1, {901: 0.5})}
    assert jit_spent(before, after) == pytest.approx(0.5)
