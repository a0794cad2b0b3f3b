"""State backends: where checkpoint snapshots and checkpoint metadata are stored.

``backend_from_uri("file:///tmp/chk")``, ``"s3://bucket/prefix"`` or ``"memory://"`` gives a
backend; every backend passes the same contract test suite (``tests/state_backends``).
"""
