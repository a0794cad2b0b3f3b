"""The test and benchmark drivers write the library's bytecode (kafka_harness.bytecode), so a
worker process imports the library's modules without compiling them, even where
PYTHONDONTWRITEBYTECODE=1 keeps Python from writing bytecode itself."""

from __future__ import annotations

import os
import subprocess
import sys

from kafka_harness.bytecode import compile_library

_COUNT_COMPILED = """
import importlib._bootstrap_external as external
compiled = []
original = external.SourceLoader.source_to_code
def source_to_code(self, data, path, *, _optimize=-1):
    compiled.append(path)
    return original(self, data, path, _optimize=_optimize)
external.SourceLoader.source_to_code = source_to_code
import barrier_kafka.datasource, barrier_sink.kafka_sink, barrier_source.reader, barrier_ops.operator
print("\\n".join(p for p in compiled if "/barrier_" in p or "/state_backends/" in p))
"""


def test_after_compile_library_a_worker_compiles_none_of_the_library():
    assert compile_library()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-c", _COUNT_COMPILED], capture_output=True,
                          text=True, env=env, timeout=120, check=True)
    assert done.stdout.strip() == ""
