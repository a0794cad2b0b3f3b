"""Run a piece of Python in a fresh interpreter, as a PySpark worker process starts (tests)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str) -> str:
    """``code`` (dedented) run by this interpreter in a new process; its stdout, stripped.
    Fails the test with the child's stderr when it exits non-zero."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
