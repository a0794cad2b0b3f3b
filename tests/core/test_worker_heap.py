"""barrier_core.worker_heap: the worker's heap is frozen once, after garbage is collected, and
the cycle collector still frees what is allocated later. Each case runs in a fresh interpreter,
as a Python worker would (freezing is once per process)."""

from __future__ import annotations

from tests.core.fresh_interpreter import run_python


def test_freezes_once_after_collecting_the_garbage_there_is():
    out = run_python("""
        import gc, weakref
        from barrier_core.worker_heap import freeze_long_lived_objects

        class Node:
            pass

        gc.disable()                          # the cycle below stays until a collection
        garbage = Node(); garbage.me = garbage
        dead = weakref.ref(garbage); del garbage
        live = Node(); kept = weakref.ref(live)
        assert dead() is not None
        first = freeze_long_lived_objects()
        frozen = gc.get_freeze_count()
        second = freeze_long_lived_objects()
        print(first, second, dead() is None, kept() is live, frozen > 1000,
              gc.get_freeze_count() == frozen)
    """)
    assert out == "True False True True True True"


def test_cycles_made_after_the_freeze_are_still_collected():
    out = run_python("""
        import gc, weakref
        from barrier_core.worker_heap import freeze_long_lived_objects

        class Node:
            pass

        freeze_long_lived_objects()
        later = Node(); later.me = later
        ref = weakref.ref(later); del later
        gc.collect()
        print(ref() is None)
    """)
    assert out == "True"


def test_outside_a_python_worker_nothing_is_frozen():
    out = run_python("""
        import gc
        from barrier_core.worker_heap import freeze_in_python_worker, in_python_worker
        print(in_python_worker(), freeze_in_python_worker(), gc.get_freeze_count())
    """)
    assert out == "False False 0"
