"""Consumer-group offsets equal the last completed checkpoint's offsets (kafka-python admin and
Kafka's own kafka-consumer-groups tool), also after the stream went idle; coordinator mode
commits what ``<checkpoint.storage>/_completed_offsets.json`` says."""

from __future__ import annotations

import uuid

from kafka import TopicPartition

from barrier_core.completed_offsets import CompletedOffsets, write_completed_offsets
from barrier_source.group_commit import commit_group_offsets
from state_backends.registry import backend_from_uri
from integration_tests.source_helpers import barriers, produce, run_to_memory, wait_for
from kafka_harness.tools import group_offsets as group_offsets_tool


def group_offsets(admin, group, topic, partitions):
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    got = admin.list_group_offsets({group: tps})[group]
    return {p: got[TopicPartition(topic, p)].offset for p in range(partitions)}


def tool_offsets(bootstrap, group):
    """CURRENT-OFFSET per partition from Kafka's ConsumerGroupCommand (kafka-tools jar)."""
    rows = group_offsets_tool(bootstrap, group)
    assert len(rows) <= 1, rows
    return next(iter(rows.values()), {})


def test_group_offsets_follow_the_last_completed_checkpoint(spark, bootstrap, kafka_admin,
                                                            topic_factory, tmp_path):
    topic = topic_factory(2)
    group = "g-" + uuid.uuid4().hex[:8]
    produce(bootstrap, topic, {0: 30, 1: 20})
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
            "startingOffsets": "earliest", "maxOffsetsPerTrigger": "20",
            "kafka.group.id": group}
    rows = run_to_memory(spark, opts, str(tmp_path / "chk"))
    last = barriers(rows)[max(barriers(rows))]
    assert last == {f"{topic}:0": 30, f"{topic}:1": 20}
    # The last batch's checkpoint is committed although no batch follows it (idle stream):
    # latestOffset(start) commits it on the next trigger, which processAllAvailable waited for
    # or which happens right after; poll with a deadline.
    wait_for(lambda: group_offsets(kafka_admin, group, topic, 2) == {0: 30, 1: 20})
    assert tool_offsets(bootstrap, group) == {0: 30, 1: 20}
    meta = kafka_admin.list_group_offsets({group: [TopicPartition(topic, 0)]})[group]
    assert '"checkpoint_id": %d' % max(barriers(rows)) in meta[TopicPartition(topic, 0)].metadata

    # restart from the group's offsets in a new query: reads only what is new
    produce(bootstrap, topic, {0: 5}, start_index=30)
    again = run_to_memory(spark, dict(opts, startingOffsets="group"), str(tmp_path / "chk2"))
    assert sorted(r.offset for r in again if r.kind == "record") == list(range(30, 35))


def test_commit_is_idempotent_and_never_moves_backwards(bootstrap, kafka_admin, topic_factory):
    topic = topic_factory(1)
    produce(bootstrap, topic, {0: 10})
    group = "g-" + uuid.uuid4().hex[:8]
    opts = {"kafka.bootstrap.servers": bootstrap}
    assert commit_group_offsets(opts, group, {topic: {0: 7}}, checkpoint_id=3)
    assert not commit_group_offsets(opts, group, {topic: {0: 7}}, checkpoint_id=3)
    assert not commit_group_offsets(opts, group, {topic: {0: 4}}, checkpoint_id=2)
    assert group_offsets(kafka_admin, group, topic, 1) == {0: 7}
    assert commit_group_offsets({"bootstrap_servers": bootstrap}, group, {topic: {"0": 9}}, 4)
    assert group_offsets(kafka_admin, group, topic, 1) == {0: 9}


def test_coordinator_mode_commits_the_completed_offsets_file(spark, bootstrap, kafka_admin,
                                                             topic_factory, tmp_path):
    topic = topic_factory(1)
    group = "g-" + uuid.uuid4().hex[:8]
    storage = str(tmp_path / "storage")
    produce(bootstrap, topic, {0: 20})
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
            "startingOffsets": "earliest", "maxOffsetsPerTrigger": "10",
            "kafka.group.id": group, "checkpoint.storage": storage,
            "execution.checkpointing.max-concurrent-checkpoints": "5"}
    # a coordinator completed checkpoint 1 at offset 6 (say, the sink acked only that far)
    write_completed_offsets(backend_from_uri(storage), CompletedOffsets.of(1, 123, {topic: {0: 6}}))
    rows = run_to_memory(spark, opts, str(tmp_path / "chk"))
    assert len(barriers(rows)) == 2  # triggers are not blocked: 2 pending < 5
    wait_for(lambda: group_offsets(kafka_admin, group, topic, 1) == {0: 6})


def test_max_concurrent_blocks_triggers_until_the_coordinator_completes(spark, bootstrap,
                                                                        topic_factory,
                                                                        tmp_path):
    topic = topic_factory(1)
    produce(bootstrap, topic, {0: 30})
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
            "startingOffsets": "earliest", "maxOffsetsPerTrigger": "10",
            "checkpoint.storage": str(tmp_path / "storage")}
    rows = run_to_memory(spark, opts, str(tmp_path / "chk"))
    assert list(barriers(rows)) == [1]  # nobody completes 1, so 2 is never triggered


def test_group_follows_a_restore_from_an_older_savepoint(bootstrap, kafka_admin, topic_factory):
    """Issue 12: the old query committed checkpoint 9; a new query restored from savepoint 4
    commits its checkpoints 5, 6 ... : the group must show the restored query's position, not
    stay at the old query's newer one. Within one lineage commits still never go backwards."""
    topic = topic_factory(1)
    produce(bootstrap, topic, {0: 50})
    group = "g-" + uuid.uuid4().hex[:8]
    opts = {"kafka.bootstrap.servers": bootstrap}
    assert commit_group_offsets(opts, group, {topic: {0: 45}}, checkpoint_id=9)
    assert commit_group_offsets(opts, group, {topic: {0: 21}}, checkpoint_id=5, restored_from=4)
    assert group_offsets(kafka_admin, group, topic, 1) == {0: 21}
    assert not commit_group_offsets(opts, group, {topic: {0: 20}}, checkpoint_id=5,
                                    restored_from=4)  # a replay of 5: idempotent
    assert commit_group_offsets(opts, group, {topic: {0: 30}}, checkpoint_id=6, restored_from=4)
    assert group_offsets(kafka_admin, group, topic, 1) == {0: 30}


def test_stop_commits_the_checkpoint_the_sink_completed_after_the_last_commit(
        bootstrap, kafka_admin, topic_factory, tmp_path):
    """Issue 14: on a cluster the sink completes the last checkpoint after the source's last
    ``commit``, so a stopped query left its group one checkpoint behind. The reader's ``stop``
    (Spark calls it when the query stops) commits what the coordinator completed."""
    from barrier_core.schema import source_schema
    from barrier_source.reader import BarrierKafkaStreamReader

    topic = topic_factory(1)
    group = "g-" + uuid.uuid4().hex[:8]
    produce(bootstrap, topic, {0: 20})
    storage = str(tmp_path / "storage")
    reader = BarrierKafkaStreamReader(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "kafka.group.id": group,
         "startingOffsets": "earliest", "checkpoint.storage": storage}, source_schema())
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    write_completed_offsets(backend_from_uri(storage), CompletedOffsets.of(1, 1, {topic: {0: 8}}))
    reader.commit(end)  # Spark's last commit: checkpoint 1 is committed to the group
    wait_for(lambda: group_offsets(kafka_admin, group, topic, 1) == {0: 8})  # in the background
    # the sink's commit worker completes checkpoint 2 after that, then the query stops
    write_completed_offsets(backend_from_uri(storage),
                            CompletedOffsets.of(2, 2, {topic: {0: 20}}))
    reader.stop()
    assert group_offsets(kafka_admin, group, topic, 1) == {0: 20}
    assert tool_offsets(bootstrap, group) == {0: 20}


def test_lag_reads_zero_on_a_transactional_topic_once_caught_up(spark, bootstrap, topic_factory,
                                                                tmp_path):
    """Issue 14: a topic written with transactions (here by the exactly-once Kafka sink) ends
    with commit markers, which take offsets but are never delivered. Once the source is idle
    and caught up, the group must sit after the last marker, so Kafka's kafka-consumer-groups
    shows lag 0 (Flink keeps a phantom lag of 1 per partition there, FLINK-33484)."""
    from barrier_ops.testing import ScriptDataSource, write_script
    from integration_tests.sink_support import end_offsets, run_script_to_sink, sealed_script
    from kafka_harness.tools import run_tool

    spark.dataSource.register(ScriptDataSource)
    upstream = topic_factory(2)
    script = sealed_script(seed=5, partitions=2, records=40, checkpoints=3, batches=4)
    path = write_script(script, str(tmp_path / "script.json"))
    run_script_to_sink(spark, path, "barrier-kafka", str(tmp_path / "upstream-chk"),
                       **{"kafka.bootstrap.servers": bootstrap, "topic": upstream,
                          "transactionalIdPrefix": "lag-" + uuid.uuid4().hex[:6]})
    ends = end_offsets(bootstrap, upstream)
    group = "lag-" + uuid.uuid4().hex[:8]
    rows = run_to_memory(spark, {"kafka.bootstrap.servers": bootstrap, "subscribe": upstream,
                                 "startingOffsets": "earliest", "kafka.group.id": group,
                                 "kafka.isolation.level": "read_committed",
                                 "maxOffsetsPerTrigger": "30"}, str(tmp_path / "chk"))
    records = [r for r in rows if r["kind"] == "record"]
    assert len(records) == len(script["records"])
    assert sum(ends.values()) > len(records)  # the markers take offsets of their own
    wait_for(lambda: tool_offsets(bootstrap, group) == ends)
    described = run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                         "--bootstrap-server", bootstrap, "--describe", "--group", group)
    lags = [line.split()[5] for line in described.splitlines()
            if line.split()[:1] == [group] and line.split()[1] == upstream]
    assert lags == ["0", "0"], described


class _HeldCommit:
    """A source reader whose consumer-group commits wait for ``release`` (``entered`` is set
    when one starts), after one planned batch over 8 of ``records`` records and checkpoint 1
    completed at offset 8; ``plan_next()`` runs the next ``latestOffset`` in a thread."""

    def __init__(self, bootstrap, topic_factory, tmp_path, monkeypatch, records, **options):
        import threading

        from barrier_core.schema import source_schema
        from barrier_source import group_commit
        from barrier_source.reader import BarrierKafkaStreamReader

        self.topic, self.group = topic_factory(1), "g-" + uuid.uuid4().hex[:8]
        produce(bootstrap, self.topic, {0: records})
        storage = str(tmp_path / "storage")
        self.release, self.entered = threading.Event(), threading.Event()
        real_commit = group_commit.commit_group_offsets

        def held_commit(*args, **kwargs):
            self.entered.set()
            self.release.wait()
            return real_commit(*args, **kwargs)

        monkeypatch.setattr(group_commit, "commit_group_offsets", held_commit)
        self.reader = BarrierKafkaStreamReader(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": self.topic,
             "kafka.group.id": self.group, "startingOffsets": "earliest",
             "checkpoint.storage": storage, "maxOffsetsPerTrigger": "8", **options},
            source_schema())
        self.end = self.reader.latestOffset(self.reader.initialOffset(),
                                            self.reader.getDefaultReadLimit())
        write_completed_offsets(backend_from_uri(storage),
                                CompletedOffsets.of(1, 1, {self.topic: {0: 8}}))
        self.planned = []
        self.planner = threading.Thread(target=lambda: self.planned.append(
            self.reader.latestOffset(self.end, self.reader.getDefaultReadLimit())), daemon=True)


def test_planning_does_not_wait_for_the_group_commit(bootstrap, kafka_admin, topic_factory,
                                                     tmp_path, monkeypatch):
    """Stop 42: ``latestOffset`` committed the newest completed checkpoint to the consumer group
    before it planned the batch (two broker round trips, about 14 ms of every batch). The commit
    now runs in the background: planning returns while a commit hangs, and ``stop`` waits for it
    and leaves the group at the last completed checkpoint."""
    held = _HeldCommit(bootstrap, topic_factory, tmp_path, monkeypatch, records=20)
    topic, group = held.topic, held.group
    try:
        held.planner.start()
        held.planner.join(timeout=30)
        assert not held.planner.is_alive(), "latestOffset waited for the consumer-group commit"
        assert held.planned and held.planned[0] != held.end
        assert held.entered.wait(timeout=30), "checkpoint 1 was never committed"
        before = kafka_admin.list_group_offsets({group: [TopicPartition(topic, 0)]})[group]
        assert before.get(TopicPartition(topic, 0)) is None or \
            before[TopicPartition(topic, 0)].offset == -1, before  # still held by the commit
    finally:
        held.release.set()
    held.reader.stop()
    assert group_offsets(kafka_admin, group, topic, 1) == {0: 8}


def test_planning_no_batch_waits_for_the_group_commit(bootstrap, kafka_admin, topic_factory,
                                                      tmp_path, monkeypatch):
    """CI on stop 42's head: notebook 02 through Spark Connect found the consumer group one
    checkpoint behind after its ``Trigger.AvailableNow`` run ended. The run's last
    ``latestOffset`` (the one that finds nothing more to read) submitted the checkpoint the last
    batch completed to the background committer and returned; Spark then ended the query without
    waiting for the planner worker's ``stop()`` (PySpark calls it when the worker's socket
    closes), so the commit could land after the query had terminated, or never. A planning that
    starts no batch now returns only once the group holds the newest completed checkpoint."""
    held = _HeldCommit(bootstrap, topic_factory, tmp_path, monkeypatch, records=8)
    try:
        held.planner.start()
        assert held.entered.wait(timeout=30), "checkpoint 1 was never committed"
        held.planner.join(timeout=2)
        assert held.planner.is_alive(), \
            "latestOffset planned no batch and returned before the group commit finished"
        held.release.set()
        held.planner.join(timeout=30)
        assert not held.planner.is_alive()
        assert held.planned == [held.end], "the caught-up source planned a batch"
        # No waiting here: the group is at checkpoint 1 when latestOffset returns.
        assert group_offsets(kafka_admin, held.group, held.topic, 1) == {0: 8}
    finally:
        held.release.set()
        held.reader.stop()
