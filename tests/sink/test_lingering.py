"""Which transactions count as lingering (issue 15): only an ``Ongoing`` one waits for a client to
end it. One whose EndTxn returned is decided (``PrepareCommit`` / ``PrepareAbort`` /
``PrepareEpochFence`` until the coordinator wrote its markers) and ends on its own; the driver's
sweep, which runs right after a checkpoint's commits, fenced such transactions as losing
attempts. No broker here: an admin client stand-in answers as brokers do, so every state and
the race between the listing and the description can be set up; the race with a real broker is
in ``integration_tests/test_sink_transactions.py``."""

from __future__ import annotations

from types import SimpleNamespace

from barrier_sink import lingering

PREFIX = "job"


class _Admin:
    """Answers ListTransactions and DescribeTransactions from ``listed`` / ``described``
    (transactional.id -> state), applying a state filter as brokers do unless
    ``ignores_filter``."""

    def __init__(self, listed, described=None, ignores_filter=False):
        self.listed, self.described = listed, described or listed
        self.ignores_filter = ignores_filter
        self.filters = []

    def list_transactions(self, state_filters=None):
        self.filters.append(state_filters)
        rows = [SimpleNamespace(transactional_id=t, state=s) for t, s in self.listed.items()
                if self.ignores_filter or not state_filters or s in state_filters]
        return {1: rows}

    def describe_transactions(self, ids):
        return {t: SimpleNamespace(state=self.described[t], producer_id=7, producer_epoch=3,
                                   transaction_start_time_ms=-1, topic_partitions=[])
                for t in ids}


def _ids(found):
    return [t.transactional_id for t in found]


def test_only_ongoing_transactions_are_lingering():
    admin = _Admin({"job-p0-a0-s0": "Ongoing", "job-p0-a0-s1": "PrepareCommit",
                    "job-p1-a0-s0": "PrepareAbort", "job-p1-a0-s1": "PrepareEpochFence",
                    "job-p2-a0-s0": "CompleteCommit", "job-p2-a0-s1": "Empty",
                    "other-p0-a0-s0": "Ongoing"})
    assert _ids(lingering._list(admin, PREFIX)) == ["job-p0-a0-s0"]
    assert admin.filters == [["Ongoing"]]  # the brokers leave the rest out of the answer


def test_a_broker_answering_every_state_still_lists_only_ongoing_ones():
    admin = _Admin({"job-p0-a0-s0": "PrepareCommit", "job-p0-a0-s1": "Ongoing"},
                   ignores_filter=True)
    assert _ids(lingering._list(admin, PREFIX)) == ["job-p0-a0-s1"]


def test_a_transaction_decided_between_listing_and_description_is_left_out():
    admin = _Admin({"job-p0-a0-s0": "Ongoing", "job-p0-a0-s1": "Ongoing"},
                   described={"job-p0-a0-s0": "PrepareCommit", "job-p0-a0-s1": "Ongoing"})
    found = lingering._list(admin, PREFIX)
    assert _ids(found) == ["job-p0-a0-s1"]
    assert found[0].state == "Ongoing" and found[0].age_ms is None
