"""Bytecode for the library's own packages, as a pip install of the wheel has it (test and
benchmark drivers).

pip compiles every module of a wheel it installs. An editable install (this repository) relies
on Python writing ``__pycache__`` on a module's first import, which ``PYTHONDONTWRITEBYTECODE=1``
turns off (it is set on this project's development machine, and may be on a CI runner): then
every Python worker process Spark starts compiled the library's modules again from source,
about 0.2 s of CPU for the sink's and the source's, and a query starts several such processes.
:func:`compile_library` writes their bytecode once, whatever that variable says; unchanged
modules are skipped. It never changes which code runs: Python checks each ``.pyc`` against its
source's time and size before using it.
"""

from __future__ import annotations

import compileall
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

#: The packages a pipeline's Python workers import (README's layout, the library part).
LIBRARY = ("barrier_core", "state_backends", "barrier_coordinator", "barrier_source",
           "barrier_ops", "barrier_sink", "barrier_kafka")


def compile_library() -> bool:
    """Write the missing or stale bytecode of :data:`LIBRARY`'s modules; False (and a log line)
    when some could not be written, e.g. a read-only install. Workers then compile those."""
    root = Path(__file__).resolve().parent.parent
    ok = True
    for package in LIBRARY:
        ok = compileall.compile_dir(root / package, quiet=2) and ok
    if not ok:
        logger.warning("some of the library's bytecode could not be written under %s", root)
    return ok
