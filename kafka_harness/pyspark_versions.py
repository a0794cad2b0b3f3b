"""Python environments with an older PySpark, for the compatibility suite (test harness only).

Each environment is a virtualenv under ``~/.cache/barrier-kafka/pyspark-<version>`` that sees this
interpreter's site-packages (kafka-python, pyarrow, pandas, boto3, pytest, moto and this project,
installed once) and adds only the PySpark release, from PyPI. A finished environment carries a
marker file, so a half-built one (interrupted download) is rebuilt, never used.

``python -m kafka_harness.pyspark_versions 4.0.5`` builds one and prints its interpreter.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
from typing import Tuple

from kafka_harness.jars import cache_root

logger = logging.getLogger(__name__)

# The newest patch release of each older minor version CI checks (the newest minor runs the
# whole suite from the project's own install). 4.0.0-4.0.4 crash in applyInPandasWithState on
# pandas 2.x (a float start offset, fixed in 4.0.5), so 4.0.5 is the oldest release supported.
COMPAT_VERSIONS: Tuple[str, ...] = ("4.0.5", "4.1.4", "4.2.1")
INSTALL_TIMEOUT_S = 900


class EnvironmentBuildError(RuntimeError):
    """pip could not build the environment; the message has pip's output."""


def environment_python(version: str) -> str:
    """The interpreter of an environment with PySpark ``version``, built on first use."""
    home = cache_root() / f"pyspark-{version}"
    python = home / "bin" / "python"
    marker = home / ".complete"
    if marker.exists():
        return str(python)
    if home.exists():
        shutil.rmtree(home)
    logger.info("building a PySpark %s environment in %s", version, home)
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(home)], version)
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", f"pyspark=={version}"], version)
    installed = subprocess.run([str(python), "-c", "import pyspark; print(pyspark.__version__)"],
                               capture_output=True, text=True, timeout=120)
    if installed.stdout.strip() != version:
        raise EnvironmentBuildError(f"the PySpark {version} environment in {home} imports "
                                    f"PySpark {installed.stdout.strip() or '?'}: "
                                    f"{installed.stderr[-2000:]}")
    marker.write_text(version)
    return str(python)


def _run(cmd, version: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        raise EnvironmentBuildError(f"building the PySpark {version} environment failed "
                                    f"({' '.join(cmd)}): {(done.stdout + done.stderr)[-3000:]}")


_SUMMARY = re.compile(r"\b\d+ (passed|failed|errors?)\b.* in [\d.]+s\b")


def pytest_summary(output: str) -> str:
    """The last pytest summary line (``870 passed, 1 skipped in 286.67s``) of a child run's
    output, or ``(no summary)``. Spark's JVM threads can print after pytest's last line (a state
    store maintenance warning with its stack trace at shutdown), so it is not the last line."""
    for line in reversed(output.splitlines()):
        if _SUMMARY.search(line):
            return line.strip().strip("=").strip()
    return "(no summary)"


if __name__ == "__main__":
    for v in sys.argv[1:] or COMPAT_VERSIONS:
        print(v, environment_python(v))
