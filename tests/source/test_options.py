"""Option parsing of the barrier-kafka source (no Spark, no broker)."""

import pytest

from barrier_core.exceptions import InvalidOptionError
from barrier_core.option_spec import options_markdown, redact
from barrier_source.options import SOURCE_OPTIONS, SourceOptions

BASE = {"kafka.bootstrap.servers": "h:9092", "subscribe": "a,b"}


def parse(**extra):
    opts = dict(BASE)
    opts.update(extra)
    return SourceOptions.from_options(opts)


def test_defaults_match_spark_and_flink():
    o = parse()
    assert o.subscribe == ("a", "b")
    assert o.starting.kind == "latest"
    assert o.fail_on_data_loss and not o.include_headers
    assert o.max_offsets_per_trigger is None and o.max_trigger_delay_ms == 15 * 60_000
    assert o.checkpoint_interval_batches == 1 and o.checkpoint_interval_ms == 0
    assert o.max_concurrent_checkpoints == 1 and o.barrier_placement == "end"
    assert o.group_id.startswith("barrier-kafka-") and o.is_group_id_derived


def test_options_are_case_insensitive_like_spark():
    o = SourceOptions.from_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBE": "t",
                                    "maxoffsetspertrigger": "10"})
    assert o.max_offsets_per_trigger == 10


def test_unknown_option_names_the_closest_valid_one():
    with pytest.raises(InvalidOptionError, match="(?i)'maxOffsetPerTrigger'.*Did you mean "
                                                 "'maxOffsetsPerTrigger'"):
        SourceOptions.from_options(dict(BASE, maxOffsetPerTrigger="3"))


@pytest.mark.parametrize("extra, match", [
    ({"assign": '{"a":[0]}'}, "Exactly one of the options 'subscribe', 'subscribePattern'"),
    ({"startingOffsets": "{bad"}, "'startingOffsets' is not valid JSON"),
    ({"startingOffsets": "sometimes"}, "'startingOffsets' must be"),
    ({"startingOffsets": '{"zzz":{"0":1}}'}, "'startingOffsets' names topics \\['zzz'\\]"),
    ({"startingOffsets": '{"a":{"0":-7}}'}, "offset -7 is invalid"),
    ({"maxOffsetsPerTrigger": "0"}, "'maxOffsetsPerTrigger' must be >= 1"),
    ({"maxOffsetsPerTrigger": "ten"}, "'maxOffsetsPerTrigger' must be an integer"),
    ({"minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "10"}, "must not exceed"),
    ({"maxTriggerDelay": "soon"}, "'maxTriggerDelay' must be a duration"),
    ({"failOnDataLoss": "maybe"}, "'failOnDataLoss' must be 'true' or 'false'"),
    ({"execution.checkpointing.barrier-placement": "middle"}, "'end' or 'timestamp'"),
    ({"execution.checkpointing.max-concurrent-checkpoints": "0"}, "must be >= 1"),
    ({"startingOffsetsByTimestampStrategy": "earliest"}, "'error' or 'latest'"),
    ({"groupOffsetsFallback": "random"}, "'groupOffsetsFallback'"),
    ({"endingOffsets": "latest"}, "not valid for a stream"),
    ({"kafka.auto.offset.reset": "earliest"}, "use startingOffsets instead"),
    ({"kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit"),
    ({"kafka.ssl.truststore.location": "/x/trust.jks"}, "needs PEM files"),
])
def test_bad_options_fail_naming_the_option(extra, match):
    with pytest.raises(InvalidOptionError, match=match):
        parse(**extra)


def test_missing_bootstrap_and_subscription():
    with pytest.raises(InvalidOptionError, match="'kafka.bootstrap.servers' is required"):
        SourceOptions.from_options({"subscribe": "a"})
    with pytest.raises(InvalidOptionError, match="got none"):
        SourceOptions.from_options({"kafka.bootstrap.servers": "h:1"})


def test_assign_and_pattern():
    o = SourceOptions.from_options({"kafka.bootstrap.servers": "h:1", "assign": '{"t":[2,0]}',
                                    "startingOffsets": '{"t":{"0":-2,"2":5}}'})
    assert o.assign == {"t": (0, 2)} and o.starting.offsets == {"t": {0: -2, 2: 5}}
    with pytest.raises(InvalidOptionError, match="names partitions of 't' that 'assign' does not"):
        SourceOptions.from_options({"kafka.bootstrap.servers": "h:1", "assign": '{"t":[0]}',
                                    "startingOffsets": '{"t":{"1":3}}'})
    with pytest.raises(InvalidOptionError, match="'assign' must be JSON"):
        SourceOptions.from_options({"kafka.bootstrap.servers": "h:1", "assign": '{"t":0}'})
    p = SourceOptions.from_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "t.*"})
    assert p.subscribe_pattern == "t.*"
    with pytest.raises(InvalidOptionError, match="not a valid regex"):
        SourceOptions.from_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "(("})


def test_starting_precedence_follows_spark():
    o = parse(startingOffsets="earliest", startingOffsetsByTimestamp='{"a":{"0":5}}',
              startingTimestamp="7")
    assert o.starting.kind == "timestamp" and o.starting.timestamp_ms == 7
    o = parse(startingOffsets="earliest", startingOffsetsByTimestamp='{"a":{"0":5}}')
    assert o.starting.timestamps == {"a": {0: 5}}
    assert parse(startingOffsets="group").starting.kind == "group"


def test_checkpoint_options_and_durations():
    o = parse(**{"execution.checkpointing.interval": "10s",
                 "execution.checkpointing.min-pause": "500",
                 "execution.checkpointing.barrier-placement": "timestamp"})
    assert o.checkpoint_interval_ms == 10_000 and o.checkpoint_interval_batches == 0
    assert o.checkpoint_min_pause_ms == 500 and o.barrier_placement == "timestamp"
    off = parse(**{"execution.checkpointing.interval-batches": "0"})
    assert not off.are_checkpoints_enabled


def test_group_id_explicit_or_stable_derived():
    assert parse(**{"kafka.group.id": "g1"}).group_id == "g1"
    assert parse().group_id == parse().group_id
    assert parse(groupIdPrefix="team").group_id.startswith("team-")
    assert parse().group_id != SourceOptions.from_options(dict(BASE, subscribe="c")).group_id


def test_kafka_options_translate_and_secrets_stay_hidden():
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="alice" password="s3cr3t";')
    o = parse(**{"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
                 "kafka.sasl.jaas.config": jaas, "kafka.ssl.key.password": "keypass-9",
                 "kafka.request.timeout.ms": "4000",
                 "kafka.ssl.endpoint.identification.algorithm": ""})
    cfg = o.kafka_config
    assert cfg["security_protocol"] == "SASL_SSL" and cfg["sasl_plain_username"] == "alice"
    assert cfg["sasl_plain_password"] == "s3cr3t" and cfg["ssl_password"] == "keypass-9"
    assert cfg["request_timeout_ms"] == 4000 and cfg["ssl_check_hostname"] is False
    assert "s3cr3t" not in repr(o) and "keypass-9" not in repr(o)
    assert redact({"kafka.sasl.jaas.config": jaas})["kafka.sasl.jaas.config"] == "***"
    with pytest.raises(InvalidOptionError) as err:
        parse(**{"kafka.sasl.jaas.config": "garbage-secret"})
    assert "garbage-secret" not in str(err.value)


def test_every_option_is_documented():
    table = options_markdown(SOURCE_OPTIONS)
    for spec in SOURCE_OPTIONS:
        assert spec.name in table and spec.meaning


def test_every_typed_default_parses_with_its_own_parser():
    """Defaults are written once, in the specs the docs are generated from; the parser reads
    them from there (issue 11), so a default that does not parse is caught here."""
    from barrier_core.option_spec import read_option
    from barrier_source.options import SOURCE_OPTIONS, SourceOptions

    typed = [s for s in SOURCE_OPTIONS if s.kind != "str"]
    assert len(typed) >= 10
    for spec in typed:
        read_option(SOURCE_OPTIONS, {}, spec.name)
    parsed = SourceOptions.from_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})
    assert (parsed.max_trigger_delay_ms, parsed.poll_timeout_ms, parsed.fail_on_data_loss,
            parsed.barrier_placement, parsed.group_offsets_fallback) == \
        (15 * 60_000, 120_000, True, "end", "earliest")
