"""execution.savepoint.path: parsing, the storage it needs, and the restored id in the offset."""

import pytest

from barrier_core.exceptions import InvalidOptionError
from barrier_source.offsets import SourceOffset
from barrier_source.options import SourceOptions, parse_restore_spec
from barrier_source.trigger import CheckpointTrigger, TriggerDecision, TriggerState

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}


@pytest.mark.parametrize("spec,expected", [("7", (7, None)), ("chk-12", (12, None)),
                                           ("savepoints/before-v2", (None, "before-v2")),
                                           ("/savepoints/x/", (None, "x"))])
def test_restore_specs(spec, expected):
    assert parse_restore_spec(spec) == expected


@pytest.mark.parametrize("spec", ["0", "chk-", "savepoints/", "savepoints/a/b", "latest"])
def test_malformed_restore_spec_names_the_option(spec):
    with pytest.raises(InvalidOptionError, match="execution.savepoint.path"):
        SourceOptions.from_options({**BASE, "checkpoint.storage": "/tmp/x",
                                    "execution.savepoint.path": spec})


def test_restore_needs_checkpoint_storage():
    with pytest.raises(InvalidOptionError, match="needs 'checkpoint.storage'"):
        SourceOptions.from_options({**BASE, "execution.savepoint.path": "chk-3"})
    opts = SourceOptions.from_options({**BASE, "checkpoint.storage": "/tmp/x",
                                       "execution.savepoint.path": "chk-3"})
    assert opts.restore_from == "chk-3"


def test_restored_id_survives_the_offset_log_and_counts_as_completed():
    restored = SourceOffset({"t": {0: 5}}, next_checkpoint_id=7, restored_id=6)
    again = SourceOffset.from_json(restored.to_json())
    assert again.restored_id == 6 and again.next_checkpoint_id == 7
    assert "restored_id" not in SourceOffset({"t": {0: 5}}).to_json()["checkpoint"]
    # With max-concurrent 1, checkpoint 7 may trigger: 1..6 count as completed.
    trigger = CheckpointTrigger(max_concurrent=1)
    state = TriggerState(next_checkpoint_id=7)
    assert trigger.decide(state, 0, completed_id=max(0, again.restored_id)) \
        is TriggerDecision.TRIGGER
    assert trigger.decide(state, 0, completed_id=0) is TriggerDecision.MAX_CONCURRENT
