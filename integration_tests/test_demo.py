"""The README's main job, ``python -m barrier_demo``, run as a user runs it (a child process, on
the test broker): it exits 0, its report says nothing was lost or duplicated, and it writes the
checkpoint plot."""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_reports_exactly_once_after_a_kill(bootstrap, tmp_path):
    out_dir = tmp_path / "demo-output"
    env = dict(os.environ, BARRIER_KAFKA_BOOTSTRAP=bootstrap)
    proc = subprocess.run(
        [sys.executable, "-m", "barrier_demo", "--records", "20000", "--batch", "5000",
         "--output-dir", str(out_dir), "--timeout", "600"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    report = proc.stdout
    assert proc.returncode == 0, f"demo failed (exit {proc.returncode}):\n{report[-3000:]}" \
                                 f"\n{proc.stderr[-3000:]}"

    def field(name: str) -> str:
        match = re.search(rf"^{re.escape(name)}:\s+(.+)$", report, re.M)
        assert match, f"report has no '{name}' line:\n{report}"
        return match.group(1).strip()

    assert field("records in") == "20000"
    assert field("records out (committed)") == "20000"
    assert field("duplicates found") == "0"
    assert field("lost") == "0"
    assert field("open transactions left") == "0"
    assert field("crash injected").endswith("(killed)"), "the demo must really kill the pipeline"
    assert int(field("checkpoints completed")) >= 2
    assert "RESULT: exactly-once holds" in report
    plot = field("checkpoint plot")
    assert os.path.getsize(plot) > 1000 and open(plot, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
