"""Kafka metadata look-ups of the barrier-kafka source: the subscription's partitions and their
earliest, latest or by-timestamp offsets, through one admin client with Spark's retry options
(``fetchOffset.numRetries``, ``fetchOffset.retryIntervalMs``).

Runs on the driver, in the planner worker that hosts the stream reader; the client is opened on
first use and never pickled.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Dict, List

from barrier_core.exceptions import BarrierKafkaError, MissingTopicError
from barrier_core.kafka_config import client_config
from barrier_source.offsets import PartitionOffsets
from barrier_source.options import SourceOptions

logger = logging.getLogger(__name__)


class KafkaMetadata:
    """Topic and offset look-ups for one source's options (driver planner worker)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._admin = None

    def __getstate__(self):
        return {"opts": self.opts, "_admin": None}

    def admin(self):
        """The admin client, opened on first use (driver planner worker)."""
        if self._admin is None:
            from kafka.admin import KafkaAdminClient

            from barrier_core.kafka_clients import kafka_client

            self._admin = kafka_client(KafkaAdminClient,
                                       client_config(self.opts.kafka_config, "admin"), "source")
        return self._admin

    def _retry(self, call, what: str):
        attempts = self.opts.fetch_offset_num_retries + 1
        for attempt in range(attempts):
            try:
                return call()
            except BarrierKafkaError:
                raise
            except Exception as exc:  # noqa: BLE001 - kafka-python raises many types
                if attempt + 1 == attempts:
                    raise BarrierKafkaError(f"{what} failed after {attempts} attempts: "
                                            f"{type(exc).__name__}: {exc}") from exc
                logger.warning("barrier-kafka: %s failed (%s); retrying", what, exc)
                time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000)

    def topic_partitions(self, strict: bool) -> Dict[str, List[int]]:
        """Current partitions of the subscription. ``strict``: a missing topic is an error.
        Runs in the driver planner worker."""
        admin = self.admin()
        o = self.opts
        if o.subscribe_pattern is not None:
            pattern = re.compile(o.subscribe_pattern)
            topics = [t for t in self._retry(admin.list_topics, "Listing topics")
                      if pattern.fullmatch(t) and not t.startswith("__")]
            option = "subscribePattern"
        elif o.subscribe is not None:
            topics, option = list(o.subscribe), "subscribe"
        else:
            topics, option = list(o.assign), "assign"
        if not topics:
            return {}
        described = self._retry(lambda: admin.describe_topics(sorted(topics)), "Describing topics")
        out: Dict[str, List[int]] = {}
        for d in described:
            name = d["name"]
            if d["error_code"] == 3 or not d["partitions"]:
                if strict or o.fail_on_data_loss:
                    raise MissingTopicError(f"Topic '{name}' named by option '{option}' does not "
                                            "exist.")
                logger.warning("barrier-kafka: topic %s does not exist (failOnDataLoss=false)",
                               name)
                continue
            if d["error_code"] != 0:
                raise BarrierKafkaError(f"Describing topic '{name}' failed with Kafka error code "
                                        f"{d['error_code']}.")
            parts = sorted(p["partition_index"] for p in d["partitions"])
            if o.assign is not None:
                missing = sorted(set(o.assign[name]) - set(parts))
                if missing:
                    raise MissingTopicError(f"Option 'assign' names partitions {missing} of "
                                            f"'{name}', which has only {len(parts)}.")
                parts = list(o.assign[name])
            out[name] = parts
        return out

    def list_offsets(self, parts: Dict[str, List[int]], spec) -> PartitionOffsets:
        """spec: 'earliest' | 'latest' | {(topic, partition): timestamp_ms}.
        Runs in the driver planner worker."""
        from kafka import TopicPartition
        from kafka.admin import OffsetSpec
        from kafka.protocol.consumer import IsolationLevel

        if spec == "earliest":
            req = {TopicPartition(t, p): OffsetSpec.EARLIEST for t in parts for p in parts[t]}
        elif spec == "latest":
            req = {TopicPartition(t, p): OffsetSpec.LATEST for t in parts for p in parts[t]}
        else:
            req = {TopicPartition(t, p): int(spec[(t, p)]) for t in parts for p in parts[t]}
        if not req:
            return {}
        level = IsolationLevel.READ_COMMITTED if str(self.opts.kafka_config.get(
            "isolation_level", "")).lower() == "read_committed" else IsolationLevel.READ_UNCOMMITTED
        res = self._retry(lambda: self.admin().list_partition_offsets(
            req, isolation_level=level), "Listing offsets")
        out: PartitionOffsets = {}
        for tp, ot in res.items():
            out.setdefault(tp.topic, {})[tp.partition] = int(ot.offset)
        return out

    def group_offsets(self, group: str, parts: Dict[str, List[int]]) -> PartitionOffsets:
        """Offsets ``group`` committed for ``parts``; partitions without one are left out.
        Runs in the driver planner worker."""
        from kafka import TopicPartition

        tps = [TopicPartition(t, p) for t in parts for p in parts[t]]
        committed = self._retry(lambda: self.admin().list_group_offsets({group: tps}),
                                f"Reading offsets of consumer group '{group}'").get(group, {})
        out: PartitionOffsets = {}
        for tp, meta in committed.items():
            if meta is not None and int(meta.offset) >= 0:
                out.setdefault(tp.topic, {})[tp.partition] = int(meta.offset)
        return out

    def close(self) -> None:
        """Close the admin client if open (driver planner worker)."""
        if self._admin is not None:
            try:
                self._admin.close()
            finally:
                self._admin = None
