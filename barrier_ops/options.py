"""Configuration of a keyed operator, parsed and validated once on the driver."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from barrier_ops.exceptions import InvalidOptionError
from barrier_ops.keygroups import DEFAULT_MAX_PARALLELISM

EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"
MODES = (EXACTLY_ONCE, AT_LEAST_ONCE)
#: ``records_format``: each key's records as a pandas DataFrame, or as a pyarrow RecordBatch.
RECORDS_PANDAS = "pandas"
RECORDS_ARROW = "arrow"
RECORDS_FORMATS = (RECORDS_PANDAS, RECORDS_ARROW)
#: ``runtime_store``: each key group's runtime between micro-batches in Spark's state store
#: (``applyInPandasWithState``) or in the operator's state backend
#: (:mod:`barrier_ops.batch_runtimes`).
RUNTIME_SPARK = "spark"
RUNTIME_BACKEND = "backend"
RUNTIME_STORES = (RUNTIME_SPARK, RUNTIME_BACKEND)
_OPERATOR_ID = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


@dataclass(frozen=True)
class OperatorOptions:
    """Validated options of :func:`barrier_ops.keyed_process` (picklable; travels to executors).

    ``state_backend`` is a URI (resolved lazily on executors with
    ``state_backends.registry.backend_from_uri``) or a picklable ``StateBackend`` instance.
    ``restore_from``: a checkpoint id (``chk-<n>``) or a savepoint path inside the backend.
    """

    operator_id: str
    state_backend: Any
    max_parallelism: int = DEFAULT_MAX_PARALLELISM
    mode: str = EXACTLY_ONCE
    restore_from: Optional[Union[int, str]] = None
    restore_requires_complete: bool = True
    watermark_delay_ms: int = 0
    state_backend_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    incremental_checkpoints: bool = False
    records_format: str = RECORDS_PANDAS
    parallelism: Optional[int] = None
    runtime_store: str = RUNTIME_SPARK

    def __post_init__(self) -> None:
        if not isinstance(self.operator_id, str) or not _OPERATOR_ID.match(self.operator_id):
            raise InvalidOptionError(
                f"operator_id {self.operator_id!r} must be 1-100 characters of [A-Za-z0-9._-]; "
                "it names the operator's snapshots and must stay the same across restarts")
        if self.state_backend is None:
            raise InvalidOptionError("state_backend is required (a URI such as "
                                     "'file:///tmp/chk' or a StateBackend instance)")
        if not isinstance(self.max_parallelism, int) or not 1 <= self.max_parallelism <= 32768:
            raise InvalidOptionError(f"max_parallelism must be an int in [1, 32768], got "
                                     f"{self.max_parallelism!r}")
        if self.mode not in MODES:
            raise InvalidOptionError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.restore_from is not None and not isinstance(self.restore_from, (int, str)):
            raise InvalidOptionError("restore_from must be a checkpoint id or a savepoint path")
        if isinstance(self.restore_from, int) and self.restore_from < 1:
            raise InvalidOptionError("restore_from checkpoint ids start at 1")
        if self.watermark_delay_ms < 0:
            raise InvalidOptionError("watermark_delay_ms must be >= 0")
        if not isinstance(self.incremental_checkpoints, bool):
            raise InvalidOptionError(f"incremental_checkpoints must be True or False, got "
                                     f"{self.incremental_checkpoints!r}")
        if self.parallelism is not None and (
                isinstance(self.parallelism, bool) or not isinstance(self.parallelism, int)
                or not 1 <= self.parallelism <= self.max_parallelism):
            raise InvalidOptionError(
                f"parallelism must be None (one Spark group per key group) or an int in [1, "
                f"max_parallelism={self.max_parallelism}], got {self.parallelism!r}; set it to "
                "spark.sql.shuffle.partitions")
        if self.records_format not in RECORDS_FORMATS:
            raise InvalidOptionError(
                f"records_format must be 'pandas' (each key's records as a pandas DataFrame) or "
                f"'arrow' (as a pyarrow RecordBatch), got {self.records_format!r}")
        if self.runtime_store not in RUNTIME_STORES:
            raise InvalidOptionError(
                f"runtime_store must be 'spark' (each key group's state between batches in "
                f"Spark's state store) or 'backend' (in state_backend), got "
                f"{self.runtime_store!r}")
        if self.runtime_store == RUNTIME_BACKEND and _process_local(self.state_backend):
            raise InvalidOptionError(
                "runtime_store='backend' keeps each key group's state between batches in "
                "state_backend, which every executor must reach; a memory:// backend lives in "
                "one Python process. Use a file:// backend on a shared disk or an s3:// one, or "
                "runtime_store='spark'.")

    @property
    def restore_prefix(self) -> Optional[str]:
        """Folder in the backend holding ``op-<id>/kg-<k>`` snapshots to restore from."""
        if self.restore_from is None:
            return None
        if isinstance(self.restore_from, int) or str(self.restore_from).isdigit():
            return f"chk-{int(self.restore_from)}"
        return str(self.restore_from).rstrip("/")

    def open_backend(self):
        """The state backend (executor); URIs are resolved here, never on import."""
        if not isinstance(self.state_backend, str):
            return self.state_backend
        try:
            from state_backends.registry import backend_from_uri
        except ImportError as exc:  # pragma: no cover - until the registry lands
            raise InvalidOptionError("state backend URIs need state_backends.registry; pass a "
                                     "StateBackend instance instead") from exc
        return backend_from_uri(self.state_backend, dict(self.state_backend_options))


def _process_local(backend: Any) -> bool:
    """True for a backend whose objects live in one Python process (``memory://``)."""
    if isinstance(backend, str):
        return backend.strip().lower().startswith("memory:")
    return bool(getattr(backend, "inline_snapshots", False))


def option_meanings() -> dict:
    """Meanings of the :func:`barrier_ops.keyed_process` options its docstring does not describe
    (read by the docs generator, ``python -m barrier_demo.gen_docs``)."""
    return {
        "restore_requires_complete": "With restore_from=n: refuse to restore unless chk-n has "
                                     "its _metadata (a completed checkpoint). False restores "
                                     "from an incomplete checkpoint's snapshots anyway.",
        "state_backend_options": "Options of a state_backend URI, e.g. the s3.* options of an "
                                 "s3:// backend (see s3-options.md).",
    }
