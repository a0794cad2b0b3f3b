"""How a bootstrap failure is named from kafka-python's connection log records (no broker)."""

from barrier_core.kafka_clients import diagnose

AUTH_FAILED = ("Connection failed: SaslAuthenticationFailedError: SaslAuthenticationFailedError: "
               "Authentication failed during authentication due to invalid credentials")
CLOSED = ("Bootstrap connection to bootstrap-0 failed: KafkaConnectionError: socket "
          "disconnected (backoff 0.06 secs)")


def test_a_rejected_password_is_named():
    assert "rejected the SASL credentials" in diagnose([AUTH_FAILED], "SASL_PLAINTEXT")


def test_a_sasl_client_whose_connections_are_only_closed_hears_of_its_credentials():
    """Seen in CI: the broker closes right after the failed authentication and kafka-python
    reports only the close. For a SASL client the credentials are the likely cause."""
    cause = diagnose([CLOSED] * 7, "SASL_PLAINTEXT")
    assert "rejected the SASL credentials" in cause and "not a SASL listener" in cause


def test_a_plaintext_client_whose_connections_are_closed_hears_of_sasl_or_tls():
    assert "requires SASL or TLS" in diagnose([CLOSED], "PLAINTEXT")
    assert "requires SASL or TLS" in diagnose([CLOSED], None)


def test_other_clients_of_the_process_do_not_name_the_cause():
    """Seen in CI: a producer parked by an earlier test kept logging 'ECONNREFUSED' for a broker
    that had been stopped, and a PLAINTEXT client on a SASL port was told 'nothing listens
    there'. Only the building thread and threads it started (the new client's I/O thread) count."""
    import logging
    import threading

    from barrier_core.kafka_clients import _ConnectionFailures

    log = logging.getLogger("kafka.net.connection")
    other_client_ready, go, done = threading.Event(), threading.Event(), threading.Event()

    def other_client():  # started before the new client: another client's I/O thread
        other_client_ready.set()
        go.wait(10)
        log.warning("Connection lost: KafkaConnectionError: 111 ECONNREFUSED")
        done.set()

    older = threading.Thread(target=other_client)
    older.start()
    other_client_ready.wait(10)
    failures = _ConnectionFailures()
    log.addHandler(failures)
    try:
        go.set()
        done.wait(10)
        newer = threading.Thread(target=lambda: log.warning(CLOSED))  # the new client's thread
        newer.start()
        newer.join(10)
        log.warning("Bootstrap failed: KafkaTimeoutError")  # the building thread
    finally:
        log.removeHandler(failures)
        older.join(10)
    assert failures.messages == [CLOSED, "Bootstrap failed: KafkaTimeoutError"]
    assert "requires SASL or TLS" in diagnose(failures.messages, "PLAINTEXT")
