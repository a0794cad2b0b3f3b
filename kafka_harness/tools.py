"""Kafka's own command-line tools, run from the harness's broker jars (tests and benchmarks).

``VerifiableProducer`` writes the input of the fault tests (values are sequence numbers, keys
repeat ``0 .. K-1`` in order); ``TransactionsCommand`` and ``ConsumerGroupCommand`` are the
independent witnesses for "no transaction left open" and "group offsets equal the last
completed checkpoint". Every call is bounded by a timeout and fails with the tool's output.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Dict, List

from kafka_harness.jars import fetch_broker_jars, require_java
from kafka_harness.jvm_startup import CDS_QUIET, archive_file, staging_path


def run_tool(main_class: str, *args: str, timeout_s: float = 300.0) -> str:
    """Run one Kafka tool class; its standard output, or an error naming the tool's output.

    The suite runs the witness tools after every fault test, each in a new JVM. The JVM maps a
    class archive of the tools (a JDK 13+ dynamic archive, written by the first call that finds
    none: to a staging name, renamed into place once that JVM exited cleanly), which halves its
    start. A stale or unusable archive only costs speed (``-Xshare:auto``); the tool's output
    is the same."""
    java, jars = require_java(), fetch_broker_jars()
    archive = archive_file("kafka-tools", java, Path(jars))
    staging = None if archive.is_file() else staging_path(archive)
    share = (f"-XX:SharedArchiveFile={archive}" if staging is None
             else f"-XX:ArchiveClassesAtExit={staging}")
    try:
        out = subprocess.run([java, "-Xmx256m", "-XX:TieredStopAtLevel=1", share,
                              *CDS_QUIET.split(), "-cp", f"{jars}/*", main_class, *args],
                             capture_output=True, text=True, timeout=timeout_s)
        if staging is not None and out.returncode == 0 and os.path.isfile(staging):
            os.replace(staging, archive)
    finally:
        if staging is not None and os.path.exists(staging):
            os.unlink(staging)
    if out.returncode != 0:
        raise RuntimeError(f"{main_class} {' '.join(args)} exited {out.returncode}:\n"
                           f"{(out.stdout + out.stderr)[-3000:]}")
    return out.stdout


def verifiable_produce(bootstrap: str, topic: str, messages: int, repeating_keys: int) -> int:
    """Write ``messages`` records with Kafka's VerifiableProducer: value ``str(i)``, key
    ``str(i % repeating_keys)``, acks=all. Returns how many it acknowledged (all, or it raises)."""
    stdout = run_tool("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server",
                      bootstrap, "--topic", topic, "--max-messages", str(messages),
                      "--repeating-keys", str(repeating_keys), "--acks", "-1",
                      "--throughput", "-1")
    acked = None
    for line in stdout.splitlines():
        if '"tool_data"' in line:
            acked = int(json.loads(line)["acked"])
    if acked != messages:
        raise RuntimeError(f"VerifiableProducer acknowledged {acked} of {messages} records")
    return acked


def open_transactions(bootstrap: str) -> List[Dict[str, str]]:
    """Transactions the brokers list as not completed (``kafka-transactions list``): rows with
    TransactionalId, Coordinator, ProducerId, TransactionState."""
    stdout = run_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server",
                      bootstrap, "list")
    lines = [ln.split() for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        return []
    header = lines[0]
    rows = [dict(zip(header, cols)) for cols in lines[1:] if len(cols) == len(header)]
    return [r for r in rows if r.get("TransactionState") not in ("CompleteCommit",
                                                                  "CompleteAbort", "Empty")]


def group_offsets(bootstrap: str, group: str) -> Dict[str, Dict[int, int]]:
    """CURRENT-OFFSET per topic and partition (``kafka-consumer-groups --describe``)."""
    stdout = run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                      "--bootstrap-server", bootstrap, "--describe", "--group", group,
                      timeout_s=120)
    rows: Dict[str, Dict[int, int]] = {}
    for line in stdout.splitlines():
        cols = line.split()
        if len(cols) >= 5 and cols[0] == group and cols[3].isdigit():
            rows.setdefault(cols[1], {})[int(cols[2])] = int(cols[3])
    return rows
