"""Claims of pooled transactional ids (barrier_sink.attempt_claims): an attempt that reaches
its first transaction after the driver sealed its batch stops; an id a loser claimed before the
seal stays out of the pool for the quarantine; two attempts of a batch never both use one id;
replays in a new run still write. No broker: a local-disk checkpoint storage."""

from __future__ import annotations

import pytest

from barrier_sink import attempt_claims
from barrier_sink.attempt_claims import (LateAttemptError, claim, quarantined, run_tag,
                                         seal_and_collect)
from barrier_sink.options import KafkaSinkOptions, is_pooled_transactional_id
from state_backends.filesystem import FilesystemStateBackend

RUN, NEXT_RUN = "run-a", "run-b"
QUARANTINE_MS = int(attempt_claims.QUARANTINE_S * 1000)


@pytest.fixture
def backend(tmp_path):
    return FilesystemStateBackend(str(tmp_path / "storage"))


def test_a_late_attempt_stops_and_a_claim_before_the_seal_is_quarantined(backend):
    assert claim(backend, 4, "x-p0-a1-s0", RUN, 41)  # task 0's winner
    assert claim(backend, 4, "x-p1-a0-s0", RUN, 42)  # task 1's loser, before the seal
    assert claim(backend, 4, "x-p1-a1-s0", RUN, 43)  # task 1's winner
    losers = seal_and_collect(backend, 4, RUN, {"41", "43"}, now_ms=1_000)
    assert losers == ["x-p1-a0-s0"]
    with pytest.raises(LateAttemptError, match="x-p0-a0-s0: batch 4 was already committed"):
        claim(backend, 4, "x-p0-a0-s0", RUN, 40)  # task 0's loser, after the seal
    assert quarantined(backend, now_ms=2_000) == {"x-p1-a0-s0"}
    assert quarantined(backend, now_ms=1_000 + QUARANTINE_MS) == set()  # the bound passed
    # the winners' claims are done with (their ids are in the batch record)
    assert not any(p.endswith(("@41", "@43")) for p in backend.list("sink-claims/"))


def test_two_attempts_claiming_one_id_never_both_keep_it(backend):
    assert claim(backend, 2, "x-p0-a0-s0", RUN, 7)
    assert not claim(backend, 2, "x-p0-a0-s0", RUN, 9)  # a re-run stage's attempt 0
    assert claim(backend, 2, "x-p0-a0-s1", RUN, 9)


def test_a_replay_in_a_new_run_writes_and_a_task_outside_spark_is_not_checked(backend):
    seal_and_collect(backend, 9, RUN, {"1"}, now_ms=1_000)
    assert claim(backend, 9, "x-rb-p0-a0-s0", NEXT_RUN, 1)  # replayed after a restart
    assert claim(backend, 9, "x-p0-a0-s0", None, None)  # no task context: no run to compare
    with pytest.raises(LateAttemptError):
        claim(backend, 9, "x-ra-p0-a0-s0", RUN, 5)


def test_quarantine_keeps_unexpired_ids_and_drops_expired_ones(backend):
    claim(backend, 1, "x-p0-a0-s0", RUN, 1)
    seal_and_collect(backend, 1, RUN, {"2"}, now_ms=1_000)
    later = 1_000 + QUARANTINE_MS + 1
    claim(backend, 2, "x-p0-a1-s0", RUN, 3)
    seal_and_collect(backend, 2, RUN, {"4"}, now_ms=later)
    assert quarantined(backend, now_ms=later) == {"x-p0-a1-s0"}
    assert "x-p0-a0-s0" not in backend.get("sink-claims/_quarantine.json").decode()


def test_old_folders_are_deleted_once_their_quarantine_passed(backend, monkeypatch):
    monkeypatch.setattr(attempt_claims, "CLEANUP_EVERY", 4)
    for b in range(5):
        claim(backend, b, "x-p0-a0-s0", RUN, 10 + b)
        seal_and_collect(backend, b, RUN, {"1"}, now_ms=1_000 + b)
    assert {p.split("/")[1] for p in backend.list("sink-claims/")} >= {"000000000000"}
    late = 1_004 + QUARANTINE_MS + 10
    seal_and_collect(backend, 8, RUN, {"1"}, now_ms=late)
    folders = {p.split("/")[1] for p in backend.list("sink-claims/")}
    assert not folders & {f"{b:012d}" for b in range(5)}, folders
    with pytest.raises(LateAttemptError):  # batch 8's own seal is kept
        claim(backend, 8, "x-p0-a0-s0", RUN, 99)


def test_each_run_has_its_own_pooled_ids():
    opts = KafkaSinkOptions.from_options({"kafka.bootstrap.servers": "b:9092", "topic": "t",
                                          "transactionalIdPrefix": "orders",
                                          "checkpointLocation": "/tmp/c"})
    first, second = (opts.pooled_transactional_id(3, 0, 1, run_tag(r)) for r in (RUN, NEXT_RUN))
    assert first != second and first.startswith("orders-r") and first.endswith("-p3-a0-s1")
    assert is_pooled_transactional_id("orders", first)
    assert not is_pooled_transactional_id("orders-eu", first)
    assert opts.pooled_transactional_id(3, 0, 1) == "orders-p3-a0-s1"  # outside a task


class _Context:
    def __init__(self, group, description):
        self._props = {"spark.jobGroup.id": group, "spark.job.description": description}

    def getLocalProperty(self, key):
        return self._props.get(key)

    def taskAttemptId(self):
        return 17


@pytest.mark.parametrize("group,description,run", [
    ("2f6c", "\nid = 9a\nrunId = 2f6c\nbatch = 3", "2f6c"),   # a streaming micro-batch task
    ("cell-12", "\nid = 9a\nrunId = 2f6c\nbatch = 3", None),  # a platform's own job group
    ("2f6c", None, None),
    (None, "\nid = 9a\nrunId = 2f6c\nbatch = 3", None),
])
def test_the_run_is_the_job_group_only_where_the_job_description_names_it(
        monkeypatch, group, description, run):
    import pyspark

    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(
        lambda cls: _Context(group, description)))
    assert attempt_claims.current_attempt() == (run, 17)
