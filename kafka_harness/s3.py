"""An S3-compatible HTTP server for tests: moto's server mode, as a child process.

Runs in the test driver process. Clients use boto3 exactly as against AWS, with
``endpoint_url`` pointing at this server. Every wait is bounded.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Optional

from kafka_harness.broker import free_port, port_is_free

logger = logging.getLogger(__name__)


class S3Server:
    """moto_server on 127.0.0.1:<port>; ``endpoint_url`` is what boto3 needs."""

    access_key = "testing"
    secret_key = "testing"
    region = "us-east-1"

    def __init__(self, port: Optional[int] = None) -> None:
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.log_path: Optional[str] = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client_kwargs(self) -> dict:
        return {"endpoint_url": self.endpoint_url, "aws_access_key_id": self.access_key,
                "aws_secret_access_key": self.secret_key, "region_name": self.region}

    def start(self, timeout_s: float = 30.0) -> "S3Server":
        if not port_is_free(self.port):
            raise RuntimeError(f"S3 server port 127.0.0.1:{self.port} is already in use; "
                               "omit the port to pick a free one.")
        # The server logs every request: into a file, never a pipe nobody drains (a full pipe
        # blocks the server mid-request and every client then times out).
        fd, self.log_path = tempfile.mkstemp(prefix="barrier-kafka-s3-", suffix=".log")
        with os.fdopen(fd, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with open(self.log_path, errors="replace") as f:
                    err = f.read()[-2000:]
                raise RuntimeError(f"moto S3 server exited during start "
                                   f"(is `moto[server]` installed?):\n{err}")
            try:
                with urllib.request.urlopen(self.endpoint_url + "/moto-api/", timeout=1):
                    logger.info("S3 server up at %s", self.endpoint_url)
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto S3 server did not answer within {timeout_s:.0f}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc = None
        if self.log_path:
            try:
                os.remove(self.log_path)
            except FileNotFoundError:
                pass
            self.log_path = None

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
