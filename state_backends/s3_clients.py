"""One boto3 S3 client per process and connection settings.

Creating a boto3 client costs 70-190 ms of CPU (it loads and parses botocore's service model),
and the callers open storage often: the keyed operator opens its state backend from the URI for
every key group and micro-batch (executor), the commit worker opens the checkpoint storage for
every batch (driver commit worker), and the S3 file sink made a client for every request. So every
:class:`~state_backends.s3.S3StateBackend` and S3 file store with the same settings shares one
client in a process. boto3 clients are thread-safe; sessions are not, and none is kept.

The cache is keyed by the process id (a client is never used across ``fork``) and the caller's
settings, secrets included; the keys stay in this module and are never logged or printed. It
holds at most :data:`MAX_CLIENTS` clients, the least recently used one dropped first, so rotating
credentials (a new session token every hour) cannot grow it.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Callable, Hashable

#: Clients kept per process (distinct connection settings in use at once).
MAX_CLIENTS = 16

_lock = threading.Lock()
_clients: "OrderedDict[tuple, object]" = OrderedDict()


def shared_client(settings: Hashable, make: Callable[[], object]):
    """The client for ``settings`` in this process, made by ``make()`` the first time (runs
    wherever storage is opened: driver, driver commit worker, executor)."""
    key = (os.getpid(), settings)
    with _lock:
        client = _clients.get(key)
        if client is not None:
            _clients.move_to_end(key)
            return client
    client = make()   # outside the lock: slow, and two threads making one each is harmless
    with _lock:
        client = _clients.setdefault(key, client)
        _clients.move_to_end(key)
        while len(_clients) > MAX_CLIENTS:
            _clients.popitem(last=False)
    return client
