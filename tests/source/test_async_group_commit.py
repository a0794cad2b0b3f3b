"""AsyncGroupCommits: the consumer-group commits of the source's planner worker run in one
background thread, in checkpoint order, newest first when several wait; refusals are retried by
the next submit, other failures surface on the planning thread; flush waits for them."""

from __future__ import annotations

import threading

import pytest

from barrier_core.exceptions import BarrierKafkaError
from barrier_source.async_group_commit import AsyncGroupCommits


class Recorder:
    """A commit function that records its calls; ``hold`` blocks each call until released."""

    def __init__(self, hold: bool = False, fail=None) -> None:
        self.calls = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.fail = fail or {}

    def __call__(self, checkpoint_id, offsets, restored_from):
        self.calls.append((checkpoint_id, offsets, restored_from))
        self.entered.set()
        assert self.release.wait(timeout=30)
        error = self.fail.pop(checkpoint_id, None)
        if error is not None:
            raise error


def test_a_newer_checkpoint_replaces_the_waiting_one_and_commits_stay_in_order():
    commit = Recorder(hold=True)
    commits = AsyncGroupCommits(commit)
    commits.submit(1, {"t": {0: 10}})
    assert commit.entered.wait(timeout=30)          # checkpoint 1 is running, held
    commits.submit(2, {"t": {0: 20}})
    commits.submit(3, {"t": {0: 30}}, restored_from=7)  # replaces 2, which never ran
    commits.submit(3, {"t": {0: 31}})                # not newer than what waits: ignored
    commits.submit(1, {"t": {0: 11}})                # older than what runs: ignored
    assert commits.flush(timeout_s=0.05) is False     # 1 still held
    commit.release.set()
    assert commits.flush(timeout_s=30)
    assert commit.calls == [(1, {"t": {0: 10}}, 0), (3, {"t": {0: 30}}, 7)]
    assert commits.committed_id == 3
    commits.submit(2, {"t": {0: 20}})                # older than what is committed: ignored
    assert commits.flush(timeout_s=30) and len(commit.calls) == 2
    commits.close()


def test_a_refused_commit_is_retried_by_the_next_submit():
    commit = Recorder(fail={4: BarrierKafkaError("group has active members")})
    commits = AsyncGroupCommits(commit)
    commits.submit(4, {"t": {0: 40}})
    assert commits.flush(timeout_s=30)               # logged, not raised
    assert commits.committed_id == 0
    commits.submit(4, {"t": {0: 40}})                # the next batch asks again
    assert commits.flush(timeout_s=30)
    assert [c[0] for c in commit.calls] == [4, 4] and commits.committed_id == 4
    commits.close()


def test_another_failure_is_raised_on_the_planning_thread_once():
    commit = Recorder(fail={5: RuntimeError("injected")})
    commits = AsyncGroupCommits(commit)
    commits.submit(5, {"t": {0: 50}})
    with pytest.raises(RuntimeError, match="injected"):
        commits.flush(timeout_s=30)
    commits.submit(5, {"t": {0: 50}})                # raised once; the retry commits
    assert commits.flush(timeout_s=30) and commits.committed_id == 5
    commits.close()


def test_a_failure_is_raised_by_the_next_submit():
    commit = Recorder(fail={6: RuntimeError("injected")})
    commits = AsyncGroupCommits(commit)
    commits.submit(6, {"t": {0: 60}})
    commits.close()                                  # the commit ran and failed; not raised here
    with pytest.raises(RuntimeError, match="injected"):
        commits.submit(7, {"t": {0: 70}})
    assert [c[0] for c in commit.calls] == [6]


def test_close_runs_the_waiting_commit_then_ends_the_thread():
    commit = Recorder(hold=True)
    closed = []   # the commits made when on_close ran
    commits = AsyncGroupCommits(commit, on_close=lambda: closed.append(len(commit.calls)))
    commits.submit(1, {"t": {0: 1}})
    assert commit.entered.wait(timeout=30)
    commits.submit(2, {"t": {0: 2}})
    closer = threading.Thread(target=commits.close)
    closer.start()
    commit.release.set()
    closer.join(timeout=30)
    assert not closer.is_alive()
    assert [c[0] for c in commit.calls] == [1, 2]
    assert closed == [2]   # once, after both commits
    assert not any(t.name == "barrier-kafka-group-commit" and t.is_alive()
                   for t in threading.enumerate())
