"""Secrets: passwords and keys come from the environment (or `env:NAME` references, or files), and never
show in `rocescope config --dump`, in error messages, or in logs.

TLS end to end: the gNMI path (grpc TLS with a test-made CA, username/password metadata) is tested in
tests/collectors/gnmi/test_collector.py::test_tls_and_credentials; the ClickHouse path (clickhouse-connect over
https to the embedded store's HTTP facade, certificates made here) is tested below.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import generate_latest
from pydantic import SecretStr
from typer.testing import CliRunner

from rocescope import config
from rocescope.cli import app
from rocescope.collectors.gnmi.collector import GnmiCollector
from rocescope.collectors.gnmi.targets import GnmiTarget, load_targets
from rocescope.config import StoreConfig
from rocescope.errors import ConfigError, StoreError
from rocescope.pipeline.store import ChdbStore, ClickHouseStore
from rocescope.sim.facades.gnmi import GnmiFacade
from rocescope.testbed.chdb_http import ChdbHttpServer

from certs import make_pki

STORE_PW = "store-pw-Zq81"
SASL_PW = "sasl-pw-Kx29"
GNMI_PW = "gnmi-pw-Vb47"
COMMUNITY = "community-Lm03"
AUTH_KEY = "authkey-Rt55"
SECRETS = (STORE_PW, SASL_PW, GNMI_PW, COMMUNITY, AUTH_KEY)


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCESCOPE_CONFIG", raising=False)
    monkeypatch.setenv("ROCESCOPE_STORE__PASSWORD", STORE_PW)
    monkeypatch.setenv("ROCESCOPE_KAFKA__SASL_PASSWORD", SASL_PW)
    monkeypatch.setenv("GNMI_PASSWORD", GNMI_PW)


def test_config_dump_redacts_every_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_env(monkeypatch)
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(
        f"""
kafka: {{security_protocol: SASL_SSL, sasl_mechanism: SCRAM-SHA-512, sasl_username: rocescope}}
collectors:
  gnmi:
    targets: [{{name: leaf-1, address: "127.0.0.1:9339", username: admin, password: "{GNMI_PW}"}}]
  snmp:
    devices:
      - {{name: leaf-2, host: 127.0.0.1, community: "{COMMUNITY}"}}
      - {{name: leaf-3, host: 127.0.0.1, version: 3, user: u, auth_protocol: SHA, auth_key: "{AUTH_KEY}"}}
"""
    )
    with caplog_all() as records:
        out = CliRunner().invoke(app, ["-c", str(cfg), "--log-level", "DEBUG", "config", "--dump"])
    assert out.exit_code == 0, out.output
    assert out.output.count("**********") >= 5, out.output
    for secret in SECRETS:
        assert secret not in out.output
        assert all(secret not in r.getMessage() for r in records)
    settings = config.load(cfg)
    assert settings.store.password.get_secret_value() == STORE_PW, "the password itself comes from the environment"


def test_validation_errors_do_not_echo_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret typed into the wrong place (a misspelt key, a number field, a list) must not be echoed."""
    _clean_env(monkeypatch)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"""
store: {{password: ["{STORE_PW}"], passwrod: "{STORE_PW}", ttl_days: "{STORE_PW}", backend: "{STORE_PW}"}}
kafka: {{sasl_password: {{nested: "{SASL_PW}"}}, sasl_mechanism: "{SASL_PW}"}}
"""
    )
    with pytest.raises(ConfigError) as err:
        config.load(bad)
    message = str(err.value)
    assert "store.ttl_days" in message and "store.passwrod: unknown key" in message
    for secret in SECRETS:
        assert secret not in message
    out = CliRunner().invoke(app, ["-c", str(bad), "config"])
    assert out.exit_code == 1 and "invalid config" in out.output
    assert all(secret not in out.output for secret in SECRETS)

    monkeypatch.setenv("ROCESCOPE_STORE__TTL_DAYS", STORE_PW)  # a secret pasted into the wrong variable
    with pytest.raises(ConfigError) as err:
        config.load(None)
    assert STORE_PW not in str(err.value)


def test_targets_file_errors_do_not_echo_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_env(monkeypatch)
    targets = tmp_path / "targets.yaml"
    targets.write_text("targets:\n  - {name: leaf-1, address: nope, username: admin, password: env:GNMI_PASSWORD}\n")
    with pytest.raises(ConfigError) as err:
        load_targets(targets)
    assert GNMI_PW not in str(err.value)
    targets.write_text(f"targets:\n  - {{name: leaf-1, address: '127.0.0.1:1', password: '{GNMI_PW}'}}\n")
    with pytest.raises(ConfigError) as err:  # a password without a username
        load_targets(targets)
    assert GNMI_PW not in str(err.value) and "username" in str(err.value)
    assert GNMI_PW not in repr(GnmiTarget("x", "127.0.0.1:1", username="u", password=GNMI_PW))


def test_failed_gnmi_auth_logs_no_password() -> None:
    """A collector refused by its target (wrong password): the failure is logged and counted, the password
    appears in no log record, health error or metric."""
    empty = pa.table({"device": pa.array([], pa.string())})
    with caplog_all() as records, GnmiFacade(lambda: empty, username="admin", password=GNMI_PW) as facade:
        target = GnmiTarget("leaf-1", facade.address, vendor="sonic", username="admin", password=STORE_PW, timeout_s=2)
        collector = GnmiCollector([target])
        collector.collect_once(timeout_s=5)
        health = collector.health()["leaf-1"]
    assert facade.rejected >= 1 and "UNAUTHENTICATED" in (health.last_error or "")
    texts = [r.getMessage() for r in records] + [
        health.last_error or "",
        generate_latest(collector.metrics.registry).decode(),
    ]
    assert any("leaf-1" in t for t in texts[:-2]), "the failure was logged"
    for secret in (GNMI_PW, STORE_PW):
        assert all(secret not in t for t in texts)


def test_clickhouse_client_over_tls(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """clickhouse-connect over https to the embedded store's HTTP facade, with a CA made here: it reads and
    writes when it trusts the CA, refuses the server otherwise, and says so without the password."""
    pki = make_pki(tmp_path / "pki")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(pki.cert, pki.key)
    with (
        ChdbStore(tmp_path / "chdb") as engine,
        ChdbHttpServer(engine.session, ssl_context=server_ctx, password=STORE_PW) as http,  # checks the password
    ):
        assert http.url.startswith("https://127.0.0.1:")
        pw = SecretStr(STORE_PW)
        with ClickHouseStore(StoreConfig(backend="clickhouse", url=http.url, ca_cert=pki.ca, password=pw)) as client:
            client.command("CREATE TABLE IF NOT EXISTS t (x String) ENGINE = MergeTree ORDER BY x")
            client.command("INSERT INTO t VALUES ({v:String})", {"v": "over tls"})
            assert client.query_arrow("SELECT x FROM t").column("x").to_pylist() == ["over tls"]
        caplog.set_level(logging.DEBUG)
        with pytest.raises(StoreError) as err:  # the system roots do not know the test CA
            ClickHouseStore(StoreConfig(backend="clickhouse", url=http.url, password=pw))
        assert "certificate" in str(err.value).lower() or "ssl" in str(err.value).lower(), err.value
        assert STORE_PW not in str(err.value) and STORE_PW not in caplog.text


class caplog_all:  # used like a function
    """Every log record of every logger while the block runs, at DEBUG (pytest's caplog misses records
    of loggers the CLI reconfigures)."""

    def __enter__(self) -> list[logging.LogRecord]:
        self.records: list[logging.LogRecord] = []
        self.handler = logging.Handler(logging.DEBUG)
        self.handler.emit = self.records.append  # type: ignore[method-assign]
        root = logging.getLogger()
        self.level = root.level
        root.addHandler(self.handler)
        root.setLevel(logging.DEBUG)
        return self.records

    def __exit__(self, *exc: object) -> None:
        root = logging.getLogger()
        root.removeHandler(self.handler)
        root.setLevel(self.level)
