"""``benchmarks.visibility``: the moment a run's output became readable, from a log of the
topic's last stable offsets."""

from __future__ import annotations

from benchmarks.visibility import first_time_past

LOG = [(10.0, {0: 0, 1: 0}), (10.5, {0: 4, 1: 0}), (11.0, {0: 4, 1: 7}), (12.0, {0: 9, 1: 7})]


def test_visible_once_every_partition_passed_its_last_offset():
    assert first_time_past(LOG, {0: 3, 1: 6}) == 11.0
    assert first_time_past(LOG, {0: 8, 1: 6}) == 12.0


def test_an_offset_equal_to_the_stable_offset_is_not_yet_readable():
    assert first_time_past(LOG, {0: 4}) == 12.0  # the stable offset is the first unreadable one


def test_never_visible_while_polled():
    assert first_time_past(LOG, {0: 9}) is None
    assert first_time_past([], {0: 0}) is None


def test_a_partition_never_logged_counts_as_empty():
    assert first_time_past(LOG, {2: 0}) is None
