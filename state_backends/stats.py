"""Checkpoint statistics, persisted beside the metadata as ``chk-<n>/_stats.json`` (driver).

The coordinator writes one :class:`CheckpointStats` per completed or failed checkpoint (failed
ones keep their stats when their blobs are discarded). Read them back with
:func:`load_all_stats`, as a Spark DataFrame with :func:`stats_dataframe`, as text with
:func:`format_stats_table`, or as a PNG with :func:`plot_stats` (needs matplotlib:
``pip install barrier-kafka[plot]``). Command line::

    python -m state_backends stats <uri> [--plot out.png] [--option s3.endpoint=...]
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Union

from state_backends.base import STATS_FILE, StateBackend, stats_path
from state_backends.exceptions import SnapshotNotFoundError, StateBackendError

logger = logging.getLogger(__name__)

COMPLETED = "COMPLETED"
FAILED = "FAILED"
_STATS_RE = re.compile(r"^chk-(\d+)/" + re.escape(STATS_FILE) + "$")


@dataclass(frozen=True)
class CheckpointStats:
    """Statistics of one checkpoint (Flink's checkpoint history entry).

    Durations are milliseconds; ``alignment_duration_ms``, ``sync_duration_ms`` and
    ``async_duration_ms`` are the maximum over the acknowledging tasks (the critical path).
    """

    checkpoint_id: int
    status: str
    trigger_timestamp_ms: int
    end_timestamp_ms: Optional[int] = None
    end_to_end_duration_ms: Optional[int] = None
    alignment_duration_ms: Optional[int] = None
    sync_duration_ms: Optional[int] = None
    async_duration_ms: Optional[int] = None
    state_size_bytes: Dict[str, int] = field(default_factory=dict)
    committed_offsets: Dict[str, Dict[str, int]] = field(default_factory=dict)
    failure_reason: Optional[str] = None
    num_acknowledged: int = 0
    num_expected: int = 0
    is_savepoint: bool = False

    @property
    def total_state_size_bytes(self) -> int:
        return sum(self.state_size_bytes.values())

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, location: str = "<stats>") -> "CheckpointStats":
        try:
            doc = json.loads(data)
            return cls(**doc)
        except (ValueError, TypeError) as exc:
            raise StateBackendError(f"checkpoint stats at {location} are unreadable: {exc}") \
                from None


def write_stats(backend: StateBackend, stats: CheckpointStats) -> None:
    """Store ``stats`` at ``chk-<n>/_stats.json`` (atomic put; overwrites)."""
    backend.put(stats_path(stats.checkpoint_id), stats.to_bytes())


def read_stats(backend: StateBackend, checkpoint_id: int) -> Optional[CheckpointStats]:
    path = stats_path(checkpoint_id)
    try:
        data = backend.get(path)
    except SnapshotNotFoundError:
        return None
    return CheckpointStats.from_bytes(data, backend.location(path))


def load_all_stats(backend: StateBackend) -> List[CheckpointStats]:
    """Every checkpoint's stats, ascending by id. Unreadable files are skipped with a WARNING."""
    out = []
    for p in backend.list(""):
        m = _STATS_RE.match(p)
        if not m:
            continue
        try:
            s = read_stats(backend, int(m.group(1)))
        except StateBackendError as exc:
            logger.warning("checkpoint %s: skipping stats: %s", m.group(1), exc)
            continue
        if s is not None:
            out.append(s)
    return sorted(out, key=lambda s: s.checkpoint_id)


def _as_list(stats: Union[StateBackend, Iterable[CheckpointStats]]) -> List[CheckpointStats]:
    if isinstance(stats, StateBackend):
        return load_all_stats(stats)
    return sorted(stats, key=lambda s: s.checkpoint_id)


def stats_rows(stats: Union[StateBackend, Iterable[CheckpointStats]]) -> List[dict]:
    """Flat rows (one per checkpoint) used by the DataFrame, the table and the plot."""
    rows = []
    for s in _as_list(stats):
        rows.append({
            "checkpoint_id": s.checkpoint_id, "status": s.status, "is_savepoint": s.is_savepoint,
            "trigger_timestamp_ms": s.trigger_timestamp_ms,
            "end_to_end_duration_ms": s.end_to_end_duration_ms,
            "alignment_duration_ms": s.alignment_duration_ms,
            "sync_duration_ms": s.sync_duration_ms, "async_duration_ms": s.async_duration_ms,
            "state_size_bytes": s.total_state_size_bytes,
            "state_size_per_operator": dict(s.state_size_bytes),
            "committed_offsets": json.dumps(s.committed_offsets, sort_keys=True),
            "num_acknowledged": s.num_acknowledged, "num_expected": s.num_expected,
            "failure_reason": s.failure_reason,
        })
    return rows


STATS_SCHEMA = (
    "checkpoint_id LONG, status STRING, is_savepoint BOOLEAN, trigger_timestamp_ms LONG, "
    "end_to_end_duration_ms LONG, alignment_duration_ms LONG, sync_duration_ms LONG, "
    "async_duration_ms LONG, state_size_bytes LONG, "
    "state_size_per_operator MAP<STRING, LONG>, committed_offsets STRING, "
    "num_acknowledged INT, num_expected INT, failure_reason STRING")


def stats_dataframe(spark, backend: StateBackend):
    """Checkpoint stats of ``backend`` as a Spark DataFrame (driver), one row per checkpoint.

    ``committed_offsets`` is a JSON string ``{topic: {partition: offset}}``.
    """
    return spark.createDataFrame(stats_rows(backend), STATS_SCHEMA)


def _fmt_bytes(n: Optional[int]) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def format_stats_table(stats: Union[StateBackend, Iterable[CheckpointStats]]) -> str:
    """A fixed-width text table of the checkpoint history (one line per checkpoint)."""
    headers = ["id", "status", "e2e ms", "align ms", "sync ms", "async ms", "state",
               "acks", "reason"]
    lines = []
    for r in stats_rows(stats):
        def ms(v):
            return "-" if v is None else str(v)

        lines.append([str(r["checkpoint_id"]) + (" (SP)" if r["is_savepoint"] else ""),
                      r["status"], ms(r["end_to_end_duration_ms"]),
                      ms(r["alignment_duration_ms"]), ms(r["sync_duration_ms"]),
                      ms(r["async_duration_ms"]), _fmt_bytes(r["state_size_bytes"]),
                      f"{r['num_acknowledged']}/{r['num_expected']}",
                      r["failure_reason"] or ""])
    widths = [max(len(h), *(len(row[i]) for row in lines)) if lines else len(h)
              for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines]
    if not lines:
        out.append("(no checkpoint statistics)")
    return "\n".join(out)


def plot_stats(stats: Union[StateBackend, Sequence[CheckpointStats]], png_path: str) -> str:
    """Render end-to-end/alignment duration and state size per checkpoint to ``png_path``.

    Raises ``StateBackendError`` with an install hint if matplotlib is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise StateBackendError("plotting checkpoint stats needs matplotlib: "
                                "pip install barrier-kafka[plot]") from exc
    rows = stats_rows(stats)
    ids = [r["checkpoint_id"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    try:
        for key, label in (("end_to_end_duration_ms", "end-to-end"),
                           ("alignment_duration_ms", "alignment"),
                           ("async_duration_ms", "async snapshot")):
            ax1.plot(ids, [r[key] if r[key] is not None else float("nan") for r in rows],
                     marker="o", label=label)
        failed = [r["checkpoint_id"] for r in rows if r["status"] != COMPLETED]
        for cid in failed:
            ax1.axvline(cid, color="red", alpha=0.3)
        ax1.set_ylabel("duration (ms)")
        ax1.legend(loc="upper left")
        ax1.set_title("checkpoint durations" + (" (red: failed)" if failed else ""))
        ax2.bar(ids, [r["state_size_bytes"] / 2**20 for r in rows])
        ax2.set_ylabel("state size (MiB)")
        ax2.set_xlabel("checkpoint id")
        fig.tight_layout()
        fig.savefig(png_path, format="png")
    finally:
        plt.close(fig)
    return png_path
