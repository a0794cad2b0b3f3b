"""Ready-made keyed operators built on :func:`barrier_ops.keyed_process`."""
