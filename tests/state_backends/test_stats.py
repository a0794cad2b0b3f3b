"""Checkpoint statistics: persistence, table, plot, CLI and (one Spark test) the DataFrame."""

from __future__ import annotations

import pytest

from state_backends.filesystem import FilesystemStateBackend
from state_backends.stats import (COMPLETED, FAILED, CheckpointStats, format_stats_table,
                                  load_all_stats, plot_stats, read_stats, stats_dataframe,
                                  write_stats)


def sample(n: int, failed: bool = False) -> CheckpointStats:
    return CheckpointStats(
        checkpoint_id=n, status=FAILED if failed else COMPLETED,
        trigger_timestamp_ms=10_000 * n, end_timestamp_ms=10_000 * n + 40 * n,
        end_to_end_duration_ms=40 * n, alignment_duration_ms=None if failed else 3 * n,
        sync_duration_ms=n, async_duration_ms=2 * n,
        state_size_bytes={"agg": 1024 * n, "join": 3 * 1024 * n},
        committed_offsets={} if failed else {"t": {"0": 100 * n}},
        failure_reason="CHECKPOINT_EXPIRED: Checkpoint expired before completing." if failed
        else None, num_acknowledged=3 if failed else 4, num_expected=4)


@pytest.fixture
def fs_backend(tmp_path):
    backend = FilesystemStateBackend(str(tmp_path / "chk"))
    for n in (1, 2, 3):
        write_stats(backend, sample(n, failed=(n == 2)))
    return backend


def test_stats_roundtrip(fs_backend):
    assert read_stats(fs_backend, 2) == sample(2, failed=True)
    assert read_stats(fs_backend, 9) is None
    assert [s.checkpoint_id for s in load_all_stats(fs_backend)] == [1, 2, 3]
    assert sample(3).total_state_size_bytes == 4 * 3 * 1024


def test_unreadable_stats_are_skipped(fs_backend):
    fs_backend.put("chk-4/_stats.json", b"{not json")
    assert [s.checkpoint_id for s in load_all_stats(fs_backend)] == [1, 2, 3]


def test_table_has_a_line_per_checkpoint(fs_backend):
    table = format_stats_table(fs_backend)
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["id", "status", "e2e", "ms"]
    assert len(lines) == 2 + 3
    assert lines[3].split()[:2] == ["2", FAILED] and "CHECKPOINT_EXPIRED" in lines[3]
    assert "12.0 KiB" in lines[4] and "4/4" in lines[4]
    assert "(no checkpoint statistics)" in format_stats_table([])


def test_plot_writes_a_png(fs_backend, tmp_path):
    out = plot_stats(fs_backend, str(tmp_path / "stats.png"))
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_gives_install_hint(fs_backend, tmp_path, monkeypatch):
    import builtins

    from state_backends.exceptions import StateBackendError

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(StateBackendError, match=r"pip install barrier-kafka\[plot\]"):
        plot_stats(fs_backend, str(tmp_path / "x.png"))


def test_cli_prints_table_and_plots(fs_backend, tmp_path, capsys):
    from state_backends.__main__ import main

    png = tmp_path / "cli.png"
    assert main(["stats", fs_backend.describe(), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("id") and f"plot written to {png}" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["list", fs_backend.describe()]) == 0
    assert "completed checkpoints: -" in capsys.readouterr().out
    assert main(["stats", "hdfs://x"]) == 1
    assert "unsupported state backend URI scheme" in capsys.readouterr().err


def test_cli_as_a_module(fs_backend):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "state_backends", "stats", fs_backend.describe()],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 5


def test_stats_dataframe(spark, fs_backend):
    df = stats_dataframe(spark, fs_backend)
    rows = {r["checkpoint_id"]: r for r in df.collect()}
    assert sorted(rows) == [1, 2, 3]
    assert rows[2]["status"] == FAILED and rows[2]["failure_reason"].startswith("CHECKPOINT_EXP")
    assert rows[3]["state_size_bytes"] == 4 * 3 * 1024
    assert rows[3]["state_size_per_operator"] == {"agg": 3 * 1024, "join": 9 * 1024}
    assert rows[1]["committed_offsets"] == '{"t": {"0": 100}}'
    assert df.schema["end_to_end_duration_ms"].dataType.typeName() == "long"
