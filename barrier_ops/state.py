"""Flink-like keyed state: ``ValueState``, ``ListState``, ``MapState`` and timers.

Runs inside ``applyInPandasWithState`` on executors. One :class:`KeyedStateStore` holds the
state of every key of one key group; it is pickled into Spark's ``GroupState`` after each batch
and, at each aligned checkpoint, into the state backend (that pickle is the snapshot).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Set, Tuple

_MISSING = object()


class KeyedStateStore:
    """State of one key group: ``{key: {state name: value}}`` plus timers and the watermark.

    Notes
    -----
    Must be picklable. Insertion order is deterministic (processing order), so the same input
    yields byte-identical snapshots after a replay.
    """

    def __init__(self) -> None:
        self.data: Dict[Any, Dict[str, Any]] = {}
        self.event_timers: Dict[Any, Set[int]] = {}
        self.processing_timers: Dict[Any, Set[int]] = {}
        self.watermark_ms: Optional[int] = None

    # ------------------------------------------------------------------ raw access
    def get(self, key, name, default=None):
        return self.data.get(key, {}).get(name, default)

    def put(self, key, name, value) -> None:
        self.data.setdefault(key, {})[name] = value

    def delete(self, key, name) -> None:
        slot = self.data.get(key)
        if slot is not None:
            slot.pop(name, None)
            if not slot:
                del self.data[key]

    def keys(self) -> List[Any]:
        return list(self.data)

    # ------------------------------------------------------------------ timers
    def due_timers(self, timers: Dict[Any, Set[int]], up_to_ms: int) -> List[Tuple[int, Any]]:
        """Remove and return ``(timestamp, key)`` of every timer <= ``up_to_ms``, in order."""
        due = []
        for key in list(timers):
            ts = timers[key]
            fire = sorted(t for t in ts if t <= up_to_ms)
            if fire:
                ts.difference_update(fire)
                due.extend((t, key) for t in fire)
                if not ts:
                    del timers[key]
        due.sort(key=lambda tk: (tk[0], repr(tk[1])))
        return due

    def to_snapshot(self) -> dict:
        return {"keyed": self.data, "event_timers": self.event_timers,
                "processing_timers": self.processing_timers, "watermark_ms": self.watermark_ms}

    def changes(self, keys: Iterable[Any]) -> Dict[Any, Tuple[Any, Any, Any]]:
        """``{key: (state slots, event timers, processing timers)}`` of ``keys`` (None where
        the key has none): what an incremental snapshot records for them."""
        return {k: (self.data.get(k), self.event_timers.get(k), self.processing_timers.get(k))
                for k in keys}

    def apply_changes(self, changes: Dict[Any, Tuple[Any, Any, Any]]) -> None:
        """Bring the keys of ``changes`` (from :meth:`changes`) to the recorded state."""
        for key, (slots, event, processing) in changes.items():
            for table, value in ((self.data, slots), (self.event_timers, event),
                                 (self.processing_timers, processing)):
                if value:
                    table[key] = value
                else:
                    table.pop(key, None)

    @classmethod
    def from_snapshot(cls, snap: dict) -> "KeyedStateStore":
        store = cls()
        store.data = snap["keyed"]
        store.event_timers = snap["event_timers"]
        store.processing_timers = snap["processing_timers"]
        store.watermark_ms = snap["watermark_ms"]
        return store


class ValueState:
    """One value per key (Flink ``ValueState``): ``value()``, ``update(v)``, ``clear()``.

    ``value`` and ``update`` read and write the store's dict themselves (what
    :meth:`KeyedStateStore.get` and :meth:`~KeyedStateStore.put` do): most functions make one
    of these a key and batch and call both, so the calls they save are paid once a key."""

    __slots__ = ("_store", "_key", "_name", "_default")

    def __init__(self, store: KeyedStateStore, key, name: str, default=None) -> None:
        self._store, self._key, self._name, self._default = store, key, name, default

    def value(self):
        slot = self._store.data.get(self._key)
        return self._default if slot is None else slot.get(self._name, self._default)

    def update(self, value) -> None:
        if value is None:
            self.clear()
            return
        data = self._store.data
        slot = data.get(self._key)
        if slot is None:
            data[self._key] = {self._name: value}
        else:
            slot[self._name] = value

    def clear(self) -> None:
        self._store.delete(self._key, self._name)


class ListState:
    """A list per key (Flink ``ListState``): ``get()``, ``add``, ``add_all``, ``update``."""

    def __init__(self, store: KeyedStateStore, key, name: str) -> None:
        self._store, self._key, self._name = store, key, name

    def get(self) -> List[Any]:
        return list(self._store.get(self._key, self._name, []))

    def add(self, value) -> None:
        self._list().append(value)

    def add_all(self, values: Iterable) -> None:
        self._list().extend(values)

    def update(self, values: Iterable) -> None:
        values = list(values)
        if values:
            self._store.put(self._key, self._name, values)
        else:
            self.clear()

    def clear(self) -> None:
        self._store.delete(self._key, self._name)

    def _list(self) -> list:
        current = self._store.get(self._key, self._name, _MISSING)
        if current is _MISSING:
            current = []
            self._store.put(self._key, self._name, current)
        return current


class MapState:
    """A dict per key (Flink ``MapState``): ``get``, ``put``, ``contains``, ``remove``, ``items``."""

    def __init__(self, store: KeyedStateStore, key, name: str) -> None:
        self._store, self._key, self._name = store, key, name

    def _map(self, create: bool = False) -> dict:
        current = self._store.get(self._key, self._name, _MISSING)
        if current is _MISSING:
            current = {}
            if create:
                self._store.put(self._key, self._name, current)
        return current

    def get(self, k, default=None):
        return self._map().get(k, default)

    def put(self, k, v) -> None:
        self._map(create=True)[k] = v

    def put_all(self, mapping: dict) -> None:
        self._map(create=True).update(mapping)

    def contains(self, k) -> bool:
        return k in self._map()

    def remove(self, k) -> None:
        m = self._map()
        m.pop(k, None)
        if not m:
            self.clear()

    def items(self) -> Iterator[Tuple[Any, Any]]:
        return iter(list(self._map().items()))

    def keys(self) -> List[Any]:
        return list(self._map())

    def values(self) -> List[Any]:
        return list(self._map().values())

    def is_empty(self) -> bool:
        return not self._map()

    def clear(self) -> None:
        self._store.delete(self._key, self._name)


class TimerService:
    """Timers of the current key (Flink ``TimerService``).

    Event-time timers fire once the key group's watermark (max record ``timestamp`` seen minus
    ``watermark_delay_ms``) passes them; processing-time timers fire at the first micro-batch of
    the key group whose batch time passes them (Spark's batch timestamp, stable across replays;
    barrier rows reach every key group, so with barriers every batch this is every batch).
    """

    def __init__(self, store: KeyedStateStore, key, processing_time_ms: int) -> None:
        self._store, self._key, self._now = store, key, processing_time_ms

    def current_processing_time(self) -> int:
        return self._now

    def current_watermark(self) -> Optional[int]:
        return self._store.watermark_ms

    def register_event_time_timer(self, timestamp_ms: int) -> None:
        self._store.event_timers.setdefault(self._key, set()).add(int(timestamp_ms))

    def delete_event_time_timer(self, timestamp_ms: int) -> None:
        self._store.event_timers.get(self._key, set()).discard(int(timestamp_ms))

    def register_processing_time_timer(self, timestamp_ms: int) -> None:
        self._store.processing_timers.setdefault(self._key, set()).add(int(timestamp_ms))

    def delete_processing_time_timer(self, timestamp_ms: int) -> None:
        self._store.processing_timers.get(self._key, set()).discard(int(timestamp_ms))


class KeyedContext:
    """What the user function gets as ``state``: keyed state and timers of ``key``.

    Runs on executors, valid only during the call it is passed to.

    Attributes
    ----------
    key : Any
        The current key (bytes for a binary key column).
    checkpoint_id : int
        The epoch the output of this call belongs to (last aligned checkpoint + 1).
    key_group : int
        The key group of ``key``.
    """

    __slots__ = ("_store", "key", "key_group", "checkpoint_id", "_now", "_timers")

    def __init__(self, store: KeyedStateStore, key, key_group: int, checkpoint_id: int,
                 processing_time_ms: int) -> None:
        self._store = store
        self.key = key
        self.key_group = key_group
        self.checkpoint_id = checkpoint_id
        self._now = processing_time_ms
        self._timers: Optional[TimerService] = None

    @property
    def timer_service(self) -> TimerService:
        """The current key's timers (made on first use: most calls touch no timer)."""
        if self._timers is None:
            self._timers = TimerService(self._store, self.key, self._now)
        return self._timers

    def value_state(self, name: str, default=None) -> ValueState:
        return ValueState(self._store, self.key, name, default)

    def list_state(self, name: str) -> ListState:
        return ListState(self._store, self.key, name)

    def map_state(self, name: str) -> MapState:
        return MapState(self._store, self.key, name)

    def clear_all(self) -> None:
        """Drop every state value and timer of the current key."""
        self._store.data.pop(self.key, None)
        self._store.event_timers.pop(self.key, None)
        self._store.processing_timers.pop(self.key, None)
