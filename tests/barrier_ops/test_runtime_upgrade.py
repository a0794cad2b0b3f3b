"""A key group's runtime pickled in ``GroupState`` by a release where the aligners lived in
``barrier_source.alignment`` still loads after they moved to ``barrier_ops.alignment``."""

import pickle

from barrier_ops.alignment import Barrier
from barrier_ops.key_group_state import load_runtime


def test_runtime_pickled_with_the_old_module_path_loads():
    barrier = Barrier(3, "t:0", 17, channels=("t:0", "t:1"))
    old = pickle.dumps(barrier, protocol=0).replace(b"barrier_ops.alignment",
                                                    b"barrier_source.alignment")
    assert b"barrier_source.alignment" in old
    assert load_runtime(old) == barrier
