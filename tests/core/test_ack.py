"""The acknowledgement row's JSON (``Acknowledgement.to_json``), built without
``dataclasses.asdict``: the same text, every field, and a round trip."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, fields

import pytest

from barrier_core.ack import Acknowledgement, AckMetrics


def _random_ack(rng: random.Random) -> Acknowledgement:
    def maybe(value):
        return value if rng.random() < 0.7 else None

    snapshot = maybe({"path": f"op/kg-{rng.randrange(128)}/chk-{rng.randrange(99)}",
                      "bytes": rng.randrange(1 << 20), "kind": rng.choice(["full", "delta"]),
                      "parts": [rng.randrange(9) for _ in range(rng.randrange(3))]})
    offsets = {f"t{t}": {str(p): maybe(rng.randrange(1 << 40)) for p in range(rng.randrange(4))}
               for t in range(rng.randrange(3))}
    metrics = AckMetrics(maybe(rng.random() * 50), maybe(rng.randrange(1000)),
                         maybe(rng.random()), maybe(rng.random() * 9), maybe(rng.randrange(1 << 30)))
    return Acknowledgement(rng.choice(["op", "ünïcode \"op\""]), rng.randrange(128), 128,
                           rng.randrange(1, 1 << 31), snapshot, offsets, metrics,
                           maybe(rng.randrange(1 << 41)), maybe("file:///tmp/state"))


@pytest.mark.parametrize("seed", range(20))
def test_to_json_is_the_compact_json_of_every_field(seed):
    ack = _random_ack(random.Random(seed))
    assert ack.to_json() == json.dumps(asdict(ack), separators=(",", ":"))
    assert Acknowledgement.from_json(ack.to_json()) == ack


def test_to_json_names_every_field_of_both_dataclasses():
    """A field added to either dataclass must be added to ``to_json`` too."""
    decoded = json.loads(_random_ack(random.Random(1)).to_json())
    assert list(decoded) == [f.name for f in fields(Acknowledgement)]
    assert list(decoded["metrics"]) == [f.name for f in fields(AckMetrics)]
