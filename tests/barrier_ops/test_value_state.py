"""``ValueState`` reads and writes the store's dict itself (executor): it must keep the store
exactly as ``KeyedStateStore.get``/``put``/``delete`` would, or snapshots and restores differ."""

import pickle
import random

from barrier_ops.snapshots import encode_full
from barrier_ops.state import KeyedContext, KeyedStateStore


def _through_store(store, ops):
    for key, name, value in ops:
        if value is None:
            store.delete(key, name)
        else:
            store.put(key, name, value)


def _through_value_state(store, ops):
    for key, name, value in ops:
        KeyedContext(store, key, 0, 1, 0).value_state(name).update(value)


def test_value_state_keeps_the_store_as_put_and_delete_do():
    for seed in range(20):
        rng = random.Random(seed)
        ops = [(rng.choice([b"a", b"b", "c", 7]), rng.choice(["n", "m"]),
                rng.choice([None, 0, 1, "x", [1, 2]])) for _ in range(60)]
        by_store, by_state = KeyedStateStore(), KeyedStateStore()
        _through_store(by_store, ops)
        _through_value_state(by_state, ops)
        assert by_state.data == by_store.data, seed
        assert list(by_state.data) == list(by_store.data), seed   # insertion order: snapshots
        assert encode_full({}, by_state) == encode_full({}, by_store), seed
        for key in (b"a", b"b", "c", 7, "never"):
            for name in ("n", "m"):
                state = KeyedContext(by_state, key, 0, 1, 0).value_state(name, "dflt")
                assert state.value() == by_store.get(key, name, "dflt")


def test_value_state_default_update_and_clear():
    store = KeyedStateStore()
    count = KeyedContext(store, b"k", 0, 1, 0).value_state("count", 0)
    assert count.value() == 0 and store.data == {}        # reading makes no slot
    count.update(3)
    other = KeyedContext(store, b"k", 0, 1, 0).value_state("other")
    assert other.value() is None
    other.update("x")
    assert store.data == {b"k": {"count": 3, "other": "x"}}
    count.update(None)                                    # None clears, as Flink's update(null)
    assert count.value() == 0 and store.data == {b"k": {"other": "x"}}
    other.clear()
    assert store.data == {}                               # an empty slot is dropped
    assert pickle.loads(pickle.dumps(store)).data == {}
