"""Seeded randomized alignment test (like Flink's AlignedCheckpointsMassiveRandomTest).

Each case builds a per-channel stream of records and barriers (channels may join or leave the
channel set between checkpoints, barriers may be duplicated, several barriers may share an
offset), interleaves the channels randomly (each channel's order kept), splits the result into
random micro-batches and pickles the handler between batches as GroupState does. A keyed sum is
applied to released records; every snapshot of the aligner must equal the sum over exactly the
records before the cut, the tracker's must contain them (at-least-once) and a per-channel prefix.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest

from barrier_ops.alignment import (Barrier, BarrierAligner, BarrierTracker, CheckpointAborted,
                                   CheckpointTriggered, EndOfPartition, Records, Released)
from tests.alignment.validators import roundtrip

SEEDS = list(range(60))


def build_case(rng: random.Random):
    """Return (per-channel event lists, records by channel, cuts[n][channel], channel sets)."""
    n_channels = rng.randint(1, 4)
    channels = [f"t:{i}" for i in range(n_channels)]
    n_ckpt = rng.randint(1, 6)
    # live range [join, leave] of checkpoints per channel; channel 0 lives throughout
    live = {}
    for i, ch in enumerate(channels):
        join = 1 if i == 0 else rng.randint(1, n_ckpt)
        leave = n_ckpt if i == 0 else rng.randint(join, n_ckpt)
        live[ch] = (join, leave)
    sets = {n: tuple(sorted(ch for ch in channels if live[ch][0] <= n <= live[ch][1]))
            for n in range(1, n_ckpt + 1)}
    events, records, cuts = {}, {}, defaultdict(dict)
    for ch in channels:
        join, leave = live[ch]
        evs, recs, offset = [], [], 0
        for n in range(join, leave + 2):
            # a channel that left the channel set has nothing after its last barrier
            size = rng.choice([0, 0, 1, 2, 5, 9]) if n <= leave or leave == n_ckpt else 0
            chunk = []
            for _ in range(size):
                rec = (ch, offset, rng.choice("abcdefg"), rng.randint(1, 9))
                chunk.append(rec)
                recs.append((rec, n))
                offset += 1
            while chunk:  # split the records into random chunks
                k = rng.randint(1, len(chunk))
                # the source always sets the epoch; on the always-live channel 0 leave it out
                # sometimes so the barrier-only path is exercised too
                epoch = None if ch == channels[0] and rng.random() < 0.3 else n
                evs.append(Records(ch, chunk[:k], epoch))
                chunk = chunk[k:]
            if n <= leave:
                bar = Barrier(n, ch, offset, 1000 + n, sets[n])
                cuts[n][ch] = offset
                evs.append(bar)
                if rng.random() < 0.15:
                    evs.append(bar)  # duplicate barrier
        if leave < n_ckpt and rng.random() < 0.5:
            evs.append(EndOfPartition(ch))  # else: it just leaves the channel set
        events[ch], records[ch] = evs, recs
    return events, records, cuts, n_ckpt


def interleave(rng, events):
    queues = {ch: list(evs) for ch, evs in events.items()}
    out = []
    while any(queues.values()):
        ch = rng.choice([c for c, q in queues.items() if q])
        out.append(queues[ch].pop(0))
    return out


def run(handler, rng, stream):
    """Feed ``stream`` in random batches; return snapshots, aborts, released records."""
    handler.start_after(0)  # a fresh job: checkpoint ids start at 1
    state, snapshots, aborted, released = Counter(), {}, [], []
    i = 0
    while i < len(stream):
        k = rng.randint(1, 7)
        for out in handler.process(stream[i:i + k]):
            if isinstance(out, Released):
                for rec in out.payload:
                    state[rec[2]] += rec[3]
                    released.append(rec)
            elif isinstance(out, CheckpointTriggered):
                assert out.checkpoint_id not in snapshots
                snapshots[out.checkpoint_id] = (Counter(state), list(released), out)
            elif isinstance(out, CheckpointAborted):
                aborted.append(out.checkpoint_id)
        handler = roundtrip(handler)
        i += k
    return handler, snapshots, aborted, released, state


def keyed_sum(recs):
    c = Counter()
    for rec in recs:
        c[rec[2]] += rec[3]
    return c


@pytest.mark.parametrize("seed", SEEDS)
def test_aligner_snapshots_equal_state_before_the_cut(seed):
    rng = random.Random(seed)
    events, records, cuts, n_ckpt = build_case(rng)
    stream = interleave(rng, events)
    handler, snapshots, aborted, released, state = run(BarrierAligner(f"seed{seed}"), rng, stream)
    assert aborted == []
    assert sorted(snapshots) == list(range(1, n_ckpt + 1))
    for n, (snap, _, trig) in snapshots.items():
        before = [rec for ch in records for rec, epoch in records[ch] if epoch <= n]
        assert snap == keyed_sum(before), f"checkpoint {n}"
        assert trig.offsets == cuts[n]
    all_recs = [rec for ch in records for rec, _ in records[ch]]
    assert sorted(released) == sorted(all_recs)  # nothing lost, nothing twice
    for ch in records:
        assert [r for r in released if r[0] == ch] == [r for r, _ in records[ch]]
    assert handler.held_back_records == 0 and not handler.is_aligning()


@pytest.mark.parametrize("seed", SEEDS)
def test_tracker_snapshots_contain_state_before_the_cut(seed):
    rng = random.Random(seed)
    events, records, cuts, n_ckpt = build_case(rng)
    stream = interleave(rng, events)
    handler, snapshots, aborted, released, state = run(BarrierTracker(f"seed{seed}"), rng, stream)
    # the tracker never blocks: when a channel leaves, a newer checkpoint can complete before an
    # older one and subsume it (Flink semantics); nothing else may be lost
    assert sorted(list(snapshots) + aborted) == list(range(1, n_ckpt + 1))
    assert all(a < max(snapshots) for a in aborted) and n_ckpt in snapshots
    for n, (snap, rel, trig) in snapshots.items():
        before = {rec for ch in records for rec, epoch in records[ch] if epoch <= n}
        assert before <= set(rel), f"checkpoint {n} misses records before its cut"
        for ch in records:  # what reached the snapshot is a prefix of each channel
            got = [r for r in rel if r[0] == ch]
            assert got == [r for r, _ in records[ch]][:len(got)]
        assert snap == keyed_sum(rel)
        assert trig.offsets == cuts[n]
    assert sorted(released) == sorted(rec for ch in records for rec, _ in records[ch])
    assert handler.held_back_records == 0


def test_random_cases_exercise_the_interesting_paths():
    """Guard against a generator that silently stops producing hard cases."""
    held, joins, dups = 0, 0, 0
    for seed in SEEDS:
        rng = random.Random(seed)
        events, records, cuts, n_ckpt = build_case(rng)
        joins += any(min(c) > 1 for c in [[n for n in cuts if ch in cuts[n]] for ch in events])
        dups += any(a == b for evs in events.values() for a, b in zip(evs, evs[1:])
                    if isinstance(a, Barrier))
        _, snapshots, _, _, _ = run(BarrierAligner(), rng, interleave(rng, events))
        held += sum(1 for _, _, t in snapshots.values() if t.held_back_records)
    assert held > 20 and joins > 5 and dups > 5
