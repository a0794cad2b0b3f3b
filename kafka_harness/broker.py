"""A single-node Apache Kafka broker (KRaft, combined broker+controller) on loopback.

Runs in the test / demo driver process, which owns the broker's JVM as a child process.
Guarantees: every wait is bounded; a broker that fails to start is killed and the error names the
cause (missing JDK, port clash, log tail); ``stop()`` sends SIGTERM, then SIGKILL after a bound.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Optional, Tuple

from kafka_harness.jars import KAFKA_VERSION, fetch_broker_jars, require_java

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRefs = file
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""
# Kafka 3.x logs through reload4j (log4j 1.x): the same file, in that format.
_LOG4J1 = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
"""


class BrokerStartError(RuntimeError):
    """The broker could not start; the message names the cause and the fix."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class KafkaBroker:
    """Owns one KRaft broker JVM.

    Parameters
    ----------
    port, controller_port : int, optional
        Loopback ports; free ones are picked when omitted. A port already in use raises
        :class:`BrokerStartError` naming it.
    data_dir : str, optional
        Folder for logs and KRaft storage; a temporary one (removed on ``stop``) by default.
    extra_properties : dict, optional
        Additional ``server.properties`` entries (e.g. ``transaction.max.timeout.ms``).
    secured : bool
        Also open a SASL_PLAINTEXT listener (SCRAM-SHA-512, user :data:`SCRAM_USER`) and an SSL
        listener (a self-signed certificate made with the JDK's keytool, trusted through
        :attr:`ca_pem`); ``sasl_bootstrap`` / ``ssl_bootstrap`` name them. Inter-broker traffic
        and the tests' own checks stay on the PLAINTEXT listener.
    """

    def __init__(self, port: Optional[int] = None, controller_port: Optional[int] = None,
                 data_dir: Optional[str] = None, version: str = KAFKA_VERSION,
                 extra_properties: Optional[dict] = None, heap: str = "512m",
                 secured: bool = False) -> None:
        self.version = version
        self.secured = secured
        self.sasl_port = free_port() if secured else None
        self.ssl_port = free_port() if secured else None
        self._requested_ports = (port, controller_port)
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="barrier-kafka-broker-"))
        self.extra_properties = dict(extra_properties or {})
        self.heap = heap
        self.proc: Optional[subprocess.Popen] = None
        self.start_seconds: Optional[float] = None
        self._formatted = False

    # ------------------------------------------------------------------ paths
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_PLAINTEXT (SCRAM-SHA-512) listener of a ``secured`` broker."""
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def ssl_bootstrap(self) -> str:
        """The SSL listener of a ``secured`` broker."""
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def ca_pem(self) -> Path:
        """PEM of the SSL listener's self-signed certificate (clients' truststore)."""
        return self.data_dir / "tls" / "broker-cert.pem"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    def _write_config(self) -> Path:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir / "kraft-logs"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "transaction.max.timeout.ms": "900000",
            "log.flush.interval.messages": "9223372036854775807",
        }
        if self.secured:
            props.update(self._secured_properties())
        props.update({k: str(v) for k, v in self.extra_properties.items()})
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2.format(log=self.log_file))
        (self.data_dir / "log4j.properties").write_text(_LOG4J1.format(log=self.log_file))
        return path

    def _secured_properties(self) -> dict:
        """SASL_PLAINTEXT (SCRAM) and SSL listeners next to PLAINTEXT (test harness only)."""
        keystore = make_tls_keystore(self.data_dir / "tls")
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
                         f"SSL://127.0.0.1:{self.ssl_port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                                    f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
                                    f"SSL://127.0.0.1:{self.ssl_port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                                              "SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.location": str(keystore),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": TLS_STORE_PASSWORD,
            "ssl.key.password": TLS_STORE_PASSWORD,
        }

    def _java_cmd(self, libs: Path, *args: str) -> list:
        return [require_java(), "-Xms256m", f"-Xmx{self.heap}", "-XX:+UseG1GC",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}",
                "-cp", f"{libs}/*", *args]

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = START_TIMEOUT_S) -> "KafkaBroker":
        """Format storage (first start only), launch the JVM and wait until it serves.

        Raises
        ------
        BrokerStartError
            Port clash, JVM exit, or not ready within ``timeout_s``; the broker is killed.
        """
        for name, port in (("port", self.port), ("controller_port", self.controller_port)):
            if not port_is_free(port):
                raise BrokerStartError(
                    f"Kafka broker {name} 127.0.0.1:{port} is already in use by another "
                    "process; choose another port or omit it to pick a free one.")
        libs = fetch_broker_jars(self.version)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        t0 = time.monotonic()
        if not self._formatted and not (self.data_dir / "kraft-logs" / "meta.properties").exists():
            fmt = subprocess.run(
                self._java_cmd(libs, "kafka.tools.StorageTool", "format",
                               f"--cluster-id={_kafka_uuid()}", "-c", str(config),
                               *(["--add-scram", f"SCRAM-SHA-512=[name={SCRAM_USER},"
                                                 f"password={SCRAM_PASSWORD}]"]
                                 if self.secured else [])),
                capture_output=True, text=True, timeout=120)
            if fmt.returncode != 0:
                raise BrokerStartError(
                    f"Formatting KRaft storage failed (exit {fmt.returncode}):\n"
                    f"{(fmt.stdout + fmt.stderr)[-3000:]}")
        self._formatted = True
        out = open(self.data_dir / "stdout.log", "ab")
        self.proc = subprocess.Popen(
            self._java_cmd(libs, "kafka.Kafka", str(config)),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self._log_tail()
                self.proc = None
                hint = ""
                if "Address already in use" in tail:
                    hint = (f" A port ({self.port} or {self.controller_port}) is in use; "
                            "omit ports to pick free ones.")
                raise BrokerStartError(f"Kafka broker exited during start.{hint}\n{tail}")
            if self._started_in_log() and _port_accepts(self.port):
                self.start_seconds = time.monotonic() - t0
                logger.info("Kafka broker %s up on %s in %.1fs", self.version, self.bootstrap,
                            self.start_seconds)
                return self
            time.sleep(0.2)
        self.kill()
        raise BrokerStartError(
            f"Kafka broker did not start within {timeout_s:.0f}s.\n{self._log_tail()}")

    def _started_in_log(self) -> bool:
        for f in (self.log_file, self.data_dir / "stdout.log"):
            try:
                if "Kafka Server started" in f.read_text(errors="replace"):
                    return True
            except FileNotFoundError:
                pass
        return False

    def _log_tail(self, lines: int = 30) -> str:
        text = ""
        for f in (self.data_dir / "stdout.log", self.log_file):
            if f.exists():
                text += "\n".join(f.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    def peak_rss_bytes(self) -> Optional[int]:
        """Peak resident memory (VmHWM) of the broker JVM, from /proc; None if not running."""
        if self.proc is None:
            return None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except FileNotFoundError:
            return None
        return None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S, remove_data: bool = True) -> None:
        """SIGTERM (controlled shutdown), SIGKILL after ``timeout_s``; optionally delete data."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning("Kafka broker did not stop in %.0fs; killing it", timeout_s)
                self.kill()
        self.proc = None
        if remove_data and self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the broker JVM (crash simulation); data is kept for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None

    def restart(self, timeout_s: float = START_TIMEOUT_S, hard: bool = False) -> "KafkaBroker":
        """Stop (keeping data) and start again on the same ports and log directory. ``hard``:
        SIGKILL instead of a controlled shutdown (a crashed broker: log recovery at start)."""
        if hard:
            self.kill()
        else:
            self.stop(remove_data=False)
        return self.start(timeout_s)

    def __enter__(self) -> "KafkaBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


#: The SCRAM user a ``secured`` test broker knows (test credentials, not a real secret).
SCRAM_USER = "barrier-test"
SCRAM_PASSWORD = "scram-test-pw-5f1c"
TLS_STORE_PASSWORD = "tls-test-store-pw"


def make_tls_keystore(folder: Path) -> Path:
    """A PKCS12 keystore with a self-signed certificate for 127.0.0.1/localhost, and its PEM
    (``broker-cert.pem``) for clients, made with the JDK's keytool (test harness)."""
    folder.mkdir(parents=True, exist_ok=True)
    keystore, pem = folder / "broker.p12", folder / "broker-cert.pem"
    if keystore.exists() and pem.exists():
        return keystore
    keytool = str(Path(require_java()).with_name("keytool"))
    subprocess.run([keytool, "-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize",
                    "2048", "-validity", "30", "-dname", "CN=localhost",
                    "-ext", "SAN=IP:127.0.0.1,DNS:localhost", "-keystore", str(keystore),
                    "-storetype", "PKCS12", "-storepass", TLS_STORE_PASSWORD,
                    "-keypass", TLS_STORE_PASSWORD], check=True, capture_output=True,
                   timeout=120)
    subprocess.run([keytool, "-exportcert", "-rfc", "-alias", "broker", "-keystore",
                    str(keystore), "-storetype", "PKCS12", "-storepass", TLS_STORE_PASSWORD,
                    "-file", str(pem)], check=True, capture_output=True, timeout=120)
    return keystore


def _kafka_uuid() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (22 chars).

    Like Kafka's ``Uuid.randomUuid()``, an id that starts with ``-`` is drawn again: the
    storage tool's argument parser would read it as an option.
    """
    import base64
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def env_or_own_broker(data_prefix: str = "bench-broker-") -> Tuple[str, Optional["KafkaBroker"]]:
    """``($BARRIER_KAFKA_BOOTSTRAP, None)`` when that variable names a running broker, else the
    bootstrap of a broker started here and the broker, for the caller to stop (benchmarks)."""
    bootstrap = os.environ.get("BARRIER_KAFKA_BOOTSTRAP")
    if bootstrap:
        return bootstrap, None
    broker = KafkaBroker(data_dir=tempfile.mkdtemp(prefix=data_prefix)).start()
    return broker.bootstrap, broker
