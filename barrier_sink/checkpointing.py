"""Builds the checkpoint coordinator a sink's driver-side commit talks to (driver).

The coordinator is rebuilt from the state backend at every ``writer.commit`` (PySpark runs it in
a short-lived worker); its settings come from the sink's options.
"""

from __future__ import annotations

from typing import Callable

from barrier_sink.options import CheckpointSinkOptions
from barrier_coordinator import CheckpointCoordinator, CoordinatorConfig


def coordinator_factory(backend, opts: CheckpointSinkOptions) -> Callable[[], CheckpointCoordinator]:
    config = CoordinatorConfig(checkpoint_timeout_ms=opts.checkpoint_timeout_ms,
                               tolerable_failed_checkpoints=opts.tolerable_failures,
                               num_retained=max(1, opts.num_retained),
                               stats_history=opts.stats_history)

    def make() -> CheckpointCoordinator:
        return CheckpointCoordinator(backend, config)

    return make
