"""Seeded random interleavings of triggers, acks (duplicate, unknown, late), declines, clock
advances (expiry), completions (subsumption) and process restarts, checking invariants after
every step (in the spirit of Flink's ``AlignedCheckpointsMassiveRandomTest``)."""

from __future__ import annotations

import random

import pytest

from barrier_coordinator import (AcknowledgeResult, CheckpointCoordinator,
                                 CheckpointFailureReason, CoordinatorConfig, ManualClock,
                                 TaskAcknowledgement)
from state_backends.base import STATS_FILE
from tests.coordinator.helpers import Observed
from state_backends.filesystem import FilesystemStateBackend
from state_backends.stats import COMPLETED, FAILED, read_stats

TIMEOUT_MS = 1_000
RETAINED = 2
HISTORY = 4  # web.checkpoints.history: small, so ids leave it during the run


class Model:
    """What the test knows independently of the coordinator."""

    def __init__(self):
        self.expected = {}       # id -> set of tasks
        self.acked = {}          # id -> set of tasks acked with SUCCESS
        self.completed = []      # notification order
        self.aborted = {}        # id -> reason
        self.savepoints = set()
        self.in_flight = None    # (id, task) of the ack being delivered right now

    # listener
    def notify_checkpoint_complete(self, n, completed):
        assert n not in self.completed, f"checkpoint {n} completed twice"
        assert n not in self.aborted, f"checkpoint {n} completed after abort"
        assert not self.completed or n > self.completed[-1], \
            f"completion of {n} after {self.completed[-1]}"
        acked = set(self.acked.get(n, set()))
        if self.in_flight and self.in_flight[0] == n:
            acked.add(self.in_flight[1])
        assert acked == self.expected[n], \
            f"checkpoint {n} completed without acks from {self.expected[n] - acked}"
        assert completed.checkpoint_id == n
        self.completed.append(n)

    def notify_checkpoint_aborted(self, n, reason):
        assert n not in self.completed and n not in self.aborted
        if reason is CheckpointFailureReason.CHECKPOINT_SUBSUMED:
            assert self.completed and n < self.completed[-1] and n not in self.savepoints
        self.aborted[n] = reason


def build(backend, clock, model):
    return Observed(CheckpointCoordinator(
        backend, CoordinatorConfig(checkpoint_timeout_ms=TIMEOUT_MS,
                                   tolerable_failed_checkpoints=None, num_retained=RETAINED,
                                   stats_history=HISTORY),
        clock), [model])


def check_invariants(c, backend, clock, model):
    last = model.completed[-1] if model.completed else 0
    assert c.last_completed_id == last
    for n, p in c.pending_checkpoints().items():
        assert n not in model.completed and n not in model.aborted
        assert n > last or p.is_savepoint, f"pending {n} not subsumed by {last}"
        assert not p.is_expired(clock.now_ms(), TIMEOUT_MS)
        assert set(p.acks) == model.acked.get(n, set())
    on_storage = c.store.completed_ids()
    assert set(on_storage) <= set(model.completed)
    if model.completed:
        assert on_storage[-1] == last
    regular = [n for n in on_storage if n not in model.savepoints]
    assert len(regular) <= RETAINED
    assert set(model.completed[-RETAINED:]) - model.savepoints <= set(on_storage)
    for n in on_storage:
        meta = c.store.load(n)  # verifies every chunk exists
        assert meta.is_savepoint == (n in model.savepoints)
    pruned_below = c.state.history_pruned_below
    for n in model.aborted:
        leftovers = [p for p in backend.list(f"chk-{n}") if not p.endswith(STATS_FILE)]
        # Snapshots of an aborted checkpoint newer than the last completed one stay (an
        # incremental snapshot in flight may chain on them) until a newer one completes.
        assert leftovers == [] or n > last, f"aborted checkpoint {n} left {leftovers}"
        if n >= pruned_below:
            assert read_stats(backend, n).status == FAILED
    # Ids that left the stats history (web.checkpoints.history) leave nothing behind, unless
    # they are retained completed checkpoints; the history keeps the newest ids.
    ids_on_storage = {int(p.split("/")[0][4:]) for p in backend.list("") if p.startswith("chk-")}
    assert {n for n in ids_on_storage if last > n < pruned_below} <= set(on_storage)
    assert pruned_below <= max([1] + model.completed + list(model.aborted)) - HISTORY + 1 \
        or pruned_below == 1
    for n in model.completed[-RETAINED:]:
        assert read_stats(backend, n).status == COMPLETED


@pytest.mark.parametrize("seed", [1, 7, 42, 2024, 31337])
def test_random_interleavings(seed, tmp_path):
    rng = random.Random(seed)
    backend = FilesystemStateBackend(str(tmp_path / "chk"), fsync=False)
    clock = ManualClock()
    model = Model()
    c = build(backend, clock, model)
    next_id = 1
    counts = {r: 0 for r in AcknowledgeResult}
    for _step in range(250):
        op = rng.random()
        if op < 0.15:  # trigger
            n = next_id
            next_id += 1
            tasks = {f"op:a:kg:{k}" for k in range(rng.randint(1, 3))} | {"sink"}
            savepoint = rng.random() < 0.05
            model.expected[n] = tasks
            model.acked[n] = set()
            if savepoint:
                model.savepoints.add(n)
            assert c.trigger(n, clock.now_ms(), tasks, is_savepoint=savepoint) is not None
        elif op < 0.75 and next_id > 1:  # ack (possibly duplicate, unknown, late)
            pending = sorted(c.pending_checkpoints())
            if pending and rng.random() < 0.7:  # mostly useful acks, sometimes anything
                n = rng.choice(pending)
                task = rng.choice(sorted(model.expected[n]))
            else:
                n = rng.randint(1, next_id + 1)
                task = rng.choice(sorted(model.expected.get(n, {"sink"})) + ["op:x:kg:9"])
            ack = None
            if task.startswith("op:a") and n in model.expected:
                ack = TaskAcknowledgement((backend.write_snapshot(
                    n, "a", int(task[-1]), rng.randbytes(rng.randint(1, 64))),))
            was_pending = n in c.pending_checkpoints()
            already = task in model.acked.get(n, set())
            model.in_flight = (n, task)
            result = c.receive_acknowledge(n, task, ack)
            model.in_flight = None
            counts[result] += 1
            if result is AcknowledgeResult.SUCCESS:
                assert was_pending and not already and task in model.expected[n]
                model.acked[n].add(task)
            elif n not in model.expected:
                assert result is AcknowledgeResult.UNKNOWN
            elif n in model.aborted:
                assert result is AcknowledgeResult.DISCARDED
            elif n in model.completed and n < c.state.history_pruned_below \
                    and n not in c.store.completed_ids():
                # completed, retained away and out of the stats history: nothing tells it
                # from a discarded one any more, so its late state is deleted (harmless)
                assert result in (AcknowledgeResult.DUPLICATE, AcknowledgeResult.DISCARDED,
                                  AcknowledgeResult.UNKNOWN)
            elif already:
                assert result is AcknowledgeResult.DUPLICATE
            elif task not in model.expected[n]:
                assert result in (AcknowledgeResult.UNKNOWN, AcknowledgeResult.DUPLICATE)
        elif op < 0.85:  # time passes (expiry)
            clock.advance(rng.choice([10, 50, 200, 200, TIMEOUT_MS]))
            c.abort_expired_checkpoints()
        elif op < 0.88 and c.pending_checkpoints():
            n = rng.choice(sorted(c.pending_checkpoints()))
            assert c.decline(n, "op:a:kg:0", "random decline")
        else:  # the short-lived commit worker exits; the next one reloads
            c = build(backend, clock, model)
        check_invariants(c, backend, clock, model)
    # The run exercised every kind of outcome.
    assert model.completed and model.aborted
    assert c.state.history_pruned_below > 1  # ids left the stats history and were pruned
    assert all(counts[r] > 0 for r in AcknowledgeResult), counts
    reasons = set(model.aborted.values())
    assert CheckpointFailureReason.CHECKPOINT_EXPIRED in reasons
