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
