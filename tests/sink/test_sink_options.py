"""Sink option parsing and the transaction-timeout guard (no Kafka, no Spark)."""

import pytest

from barrier_sink.exceptions import InvalidOptionError, TransactionTimeoutTooShortError
from barrier_sink.options import KafkaSinkOptions, redact

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "checkpointLocation": "/tmp/chk-x"}


def test_defaults_and_derived_prefix_are_stable():
    a = KafkaSinkOptions.from_options(BASE)
    b = KafkaSinkOptions.from_options(dict(BASE))
    assert a.transactional_id_prefix == b.transactional_id_prefix
    assert a.transactional_id_prefix.startswith("barrier-kafka-")
    other = KafkaSinkOptions.from_options({**BASE, "checkpointLocation": "/tmp/chk-y"})
    assert other.transactional_id_prefix != a.transactional_id_prefix
    assert a.checkpoint.storage_uri == "/tmp/chk-x/barrier-checkpoints"
    assert a.transactional_id(7, 3, 2) == f"{a.transactional_id_prefix}-b7-p3-a0-e2"
    assert a.transactional_id(7, 3, 2, attempt=1) == f"{a.transactional_id_prefix}-b7-p3-a1-e2"


def test_one_checkpoint_location_spelled_three_ways_gives_one_prefix_and_storage():
    """Hole 5 of issue 12: the default prefix hashed the raw string, while storage ownership
    normalised it; a restart with ``/x/`` or ``file:///x`` used new transactional ids on the
    same storage, and recovery committed old and replayed ids alike (duplicates)."""
    spellings = ["/tmp/chk-x", "/tmp/chk-x/", "file:///tmp/chk-x", "file:/tmp/chk-x/"]
    parsed = [KafkaSinkOptions.from_options({**BASE, "checkpointLocation": s})
              for s in spellings]
    assert len({o.transactional_id_prefix for o in parsed}) == 1
    assert {o.checkpoint.storage_uri for o in parsed} == {"/tmp/chk-x/barrier-checkpoints"}


def test_unknown_option_names_the_closest_valid_one():
    with pytest.raises(InvalidOptionError, match="'transactionalIdPrefx'.*'transactionalIdPrefix'"):
        KafkaSinkOptions.from_options({**BASE, "transactionalIdPrefx": "p"})


def test_bootstrap_is_required():
    with pytest.raises(InvalidOptionError, match="kafka.bootstrap.servers"):
        KafkaSinkOptions.from_options({"checkpointLocation": "/tmp/c"})


def test_transaction_timeout_shorter_than_checkpoint_budget_is_refused():
    opts = {**BASE, "kafka.transaction.timeout.ms": "120000",
            "execution.checkpointing.interval": "30000",
            "execution.checkpointing.timeout": "60000", "restart.budget.ms": "60000"}
    with pytest.raises(TransactionTimeoutTooShortError) as err:
        KafkaSinkOptions.from_options(opts)
    assert "150000" in str(err.value) and "kafka.transaction.timeout.ms" in str(err.value)
    ok = KafkaSinkOptions.from_options({**opts, "kafka.transaction.timeout.ms": "150000"})
    assert ok.transaction_timeout_ms == 150000


def test_timeout_above_broker_maximum_is_refused():
    opts = KafkaSinkOptions.from_options(BASE)
    with pytest.raises(TransactionTimeoutTooShortError, match="transaction.max.timeout.ms = 60000"):
        opts.check_transaction_timeout(broker_max_ms=60000)


def test_non_integer_option_is_named():
    with pytest.raises(InvalidOptionError, match="'execution.checkpointing.timeout'.*'soon'"):
        KafkaSinkOptions.from_options({**BASE, "execution.checkpointing.timeout": "soon"})


def test_secrets_never_in_repr():
    opts = KafkaSinkOptions.from_options({**BASE, "kafka.sasl.plain.password": "hunter2",
                                          "s3.secret.key": "s3cr3t"})
    assert "hunter2" not in repr(opts) and "s3cr3t" not in repr(opts)
    assert "hunter2" not in str(redact({"kafka.sasl.plain.password": "hunter2"}))


def test_group_or_transactional_id_options_are_refused():
    with pytest.raises(InvalidOptionError, match="transactionalIdPrefix"):
        KafkaSinkOptions.from_options({**BASE, "kafka.transactional.id": "x"})


def test_kafka_settings_are_translated_like_the_source_and_secrets_stay_hidden():
    from barrier_sink.options import KafkaSinkOptions

    opts = KafkaSinkOptions.from_options({
        "kafka.bootstrap.servers": "a:1,b:2", "checkpointLocation": "/tmp/chk",
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                  'required username="svc" password="hunter2-secret";',
        "kafka.linger.ms": "20"})
    assert opts.kafka["bootstrap_servers"] == ["a:1", "b:2"]
    assert opts.kafka["security_protocol"] == "SASL_SSL"
    assert (opts.kafka["sasl_plain_username"], opts.kafka["sasl_plain_password"]) == \
        ("svc", "hunter2-secret")
    assert opts.kafka["linger_ms"] == 20
    assert "hunter2-secret" not in repr(opts)


def test_sink_reads_the_sources_checkpoint_settings_and_refuses_a_contradiction(tmp_path):
    """Issue 12, hole 3: the guard used the sink's own interval option (default 0), a second
    copy of the source's that nothing checked. Now the source records its settings in
    checkpoint.storage and the sink sizes the guard by them."""
    from barrier_core.checkpoint_settings import (CheckpointSettings, read_settings,
                                                  record_settings)
    from state_backends.registry import backend_from_uri

    storage = str(tmp_path / "storage")
    record_settings(backend_from_uri(storage), CheckpointSettings(
        interval_ms=60_000, interval_batches=0, idle_seal_ms=60_000, min_pause_ms=0,
        max_concurrent=1))
    settings = read_settings(backend_from_uri(storage))
    opts = KafkaSinkOptions.from_options({**BASE, "checkpoint.storage": storage})
    bound = opts.check_against_source(settings)
    assert bound == 60_000
    opts.check_transaction_timeout(900_000, seal_bound_ms=bound)  # 60 + 600 + 240 s fits
    with pytest.raises(TransactionTimeoutTooShortError, match="longest wait for a barrier"):
        KafkaSinkOptions.from_options({**BASE, "checkpoint.storage": storage,
                                       "restart.budget.ms": "300000"}
                                      ).check_transaction_timeout(900_000, seal_bound_ms=bound)
    contradicting = KafkaSinkOptions.from_options(
        {**BASE, "checkpoint.storage": storage, "execution.checkpointing.interval": "30000"})
    with pytest.raises(InvalidOptionError, match="contradicts the source's 60000"):
        contradicting.check_against_source(settings)


def test_sink_producers_default_to_a_short_retry_backoff_the_user_can_override():
    """kafka-python waits a full retry backoff around its first coordinator lookup: with its
    100 ms default every transaction start and every driver commit took ~210 ms (issue 15)."""
    from barrier_sink.transaction import producer_config

    conf = producer_config(KafkaSinkOptions.from_options(BASE).kafka, "t", 60_000)
    assert conf["retry_backoff_ms"] == 10
    mine = KafkaSinkOptions.from_options({**BASE, "kafka.retry.backoff.ms": "250"}).kafka
    assert producer_config(mine, "t", 60_000)["retry_backoff_ms"] == 250


TWO_PC = "kafka.transaction.two.phase.commit.enable"


def test_kip939_option_is_a_boolean_kept_out_of_the_producer_settings():
    assert KafkaSinkOptions.from_options(BASE).two_phase_commit is False
    on = KafkaSinkOptions.from_options({**BASE, TWO_PC: "TRUE"})
    assert on.two_phase_commit is True
    assert not any("two" in k for k in on.kafka), on.kafka  # not a kafka-python setting
    assert on.two_phase_check_id == f"{on.transactional_id_prefix}-2pc-check"
    with pytest.raises(InvalidOptionError, match=f"'{TWO_PC}' must be 'true' or 'false'"):
        KafkaSinkOptions.from_options({**BASE, TWO_PC: "yes"})


def test_kip939_transactions_need_no_timeout_budget_but_respect_the_broker_maximum():
    """KIP-939 transactions never time out, so a timeout shorter than interval + checkpoint
    timeout + restart budget loses nothing and is accepted; the brokers' maximum still holds."""
    short = {**BASE, "kafka.transaction.timeout.ms": "10000", "restart.budget.ms": "600000"}
    with pytest.raises(TransactionTimeoutTooShortError):
        KafkaSinkOptions.from_options(short)
    opts = KafkaSinkOptions.from_options({**short, TWO_PC: "true"})
    opts.check_transaction_timeout(broker_max_ms=10000, seal_bound_ms=3_600_000)
    with pytest.raises(TransactionTimeoutTooShortError, match="transaction.max.timeout.ms"):
        opts.check_transaction_timeout(broker_max_ms=5000)
