from __future__ import annotations

from pathlib import Path

import pytest

from rocescope import config
from rocescope.errors import ConfigError


def test_defaults_are_the_embedded_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCESCOPE_CONFIG", raising=False)
    settings = config.load()
    assert settings.store.backend == "chdb"
    assert settings.transport.kind == "inprocess"
    assert str(settings.store.path) == "rocescope-data"


def test_env_overrides_file_and_secrets_are_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("store:\n  backend: clickhouse\n  password: from-file\nkafka:\n  partitions: 12\n")
    monkeypatch.setenv("ROCESCOPE_STORE__PASSWORD", "from-env-s3cret")
    settings = config.load(path)
    assert settings.store.backend == "clickhouse"
    assert settings.kafka.partitions == 12
    assert settings.store.password.get_secret_value() == "from-env-s3cret"
    dumped = config.dump(settings)
    assert "from-env-s3cret" not in dumped and "from-file" not in dumped
    assert "**********" in dumped


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("store:\n  backend: postgres\n", "store.backend: Input should be 'chdb' or 'clickhouse'"),
        ("store:\n  pasword: x\n", "store.pasword: unknown key"),
        ("sink:\n  max_rows: -5\n", "sink.max_rows: Input should be greater than or equal to 1"),
        ("kafka: [1, 2\n", "not valid YAML"),
        ("- a\n- b\n", "top level must be a mapping"),
        ('store:\n  database: "x; DROP"\n', "store.database: Value error, must be letters"),
    ],
)
def test_bad_config_names_key_and_reason(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("kafka-1:9092,kafka-2:9092", ["kafka-1:9092", "kafka-2:9092"]),  # the form every Kafka tool takes
        (" kafka-1:9092 , kafka-2:9092 ", ["kafka-1:9092", "kafka-2:9092"]),
        ('["kafka-1:9092", "kafka-2:9092"]', ["kafka-1:9092", "kafka-2:9092"]),
        ("kafka-1:9092", ["kafka-1:9092"]),
    ],
)
def test_a_list_from_the_environment_takes_commas_or_json(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: list[str]
) -> None:
    monkeypatch.delenv("ROCESCOPE_CONFIG", raising=False)
    monkeypatch.setenv("ROCESCOPE_KAFKA__BOOTSTRAP_SERVERS", value)
    monkeypatch.setenv("ROCESCOPE_ANALYSIS__DISABLED", "incast,microburst")
    settings = config.load()
    assert settings.kafka.bootstrap_servers == expected
    assert settings.analysis.disabled == ["incast", "microburst"]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "ROCESCOPE_KAFKA__BOOTSTRAP_SERVERS",
            "kafka-1",
            "kafka.bootstrap_servers (ROCESCOPE_KAFKA__BOOTSTRAP_SERVERS)",
        ),
        ("ROCESCOPE_KAFKA__PARTITIONS", "six", "kafka.partitions (ROCESCOPE_KAFKA__PARTITIONS): Input should be"),
        ("ROCESCOPE_STORE__BACKEND", "postgres", "store.backend (ROCESCOPE_STORE__BACKEND): Input should be"),
        ("ROCESCOPE_ANALYSIS__DETECTORS", "{pfc_storm", "ROCESCOPE_ANALYSIS__DETECTORS: not a JSON value"),
    ],
)
def test_a_bad_variable_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    monkeypatch.delenv("ROCESCOPE_CONFIG", raising=False)
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        config.load()
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_the_environment_merges_into_a_section_given_as_a_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A scratch store given in code (`rocescope eval`'s runs, the simulator's) keeps its path and database when the
    environment sets another of the store's keys: replaced whole, the run would land in the default store."""
    monkeypatch.setenv("ROCESCOPE_STORE__MAX_THREADS", "1")
    s = config.Settings(store=config.StoreConfig(path=tmp_path / "scratch", database="run7", ttl_days=0))
    assert (s.store.path, s.store.database, s.store.ttl_days, s.store.max_threads) == (
        tmp_path / "scratch",
        "run7",
        0,
        1,
    )
