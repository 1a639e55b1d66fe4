"""One typed configuration: YAML file, then `ROCESCOPE_...` environment overrides, validated at load.

Environment variables override any key with `__` between levels, e.g.
`ROCESCOPE_STORE__PASSWORD`, `ROCESCOPE_KAFKA__SASL_PASSWORD`; a list takes JSON (`["a:9092"]`) or, as
every Kafka tool writes it, commas (`a:9092,b:9092`). Secrets are `SecretStr` so they never print:
`rocescope config --dump` shows them as `**********`. A bad value, from the file or the environment, is
one ConfigError line naming the key (and the variable) and the reason.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from rocescope.errors import ConfigError

ENV_PREFIX = "ROCESCOPE_"
DEFAULT_CONFIG_ENV = "ROCESCOPE_CONFIG"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StoreConfig(_Section):
    """Where the data lands: embedded chdb at a directory (default) or a ClickHouse server."""

    backend: Literal["chdb", "clickhouse"] = "chdb"
    path: Path = Path("./rocescope-data")
    url: str = "http://127.0.0.1:8123"
    user: str = "default"
    password: SecretStr = SecretStr("")
    database: str = "rocescope"
    verify_tls: bool = True
    ca_cert: Path | None = None
    ttl_days: int = Field(30, ge=0, description="Raw data retention; 0 keeps data forever.")
    rollup_ttl_days: int = Field(
        400,
        ge=0,
        description="1-minute rollup retention (0: forever); never shorter than `ttl_days` and forever when it is 0 "
        "(raised to it at load): analysis reads roles, reporting devices and ports from the rollup, so a rollup that "
        "expired before its raw rows would change an old capture's findings with this setting.",
    )

    max_threads: int = Field(
        0,
        ge=0,
        description="Threads per query of the embedded engine (chdb); 0: the engine's default, one per core. Where "
        "the store shares the cores with other busy processes (collectors on the same host, one test worker per "
        "core), 1 keeps the engines from fighting over them.",
    )

    @model_validator(mode="after")
    def _rollups_outlive_raw_rows(self) -> StoreConfig:
        if self.ttl_days == 0 or self.rollup_ttl_days == 0:
            self.rollup_ttl_days = 0
        else:
            self.rollup_ttl_days = max(self.rollup_ttl_days, self.ttl_days)
        return self

    @field_validator("database")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value.replace("_", "").isalnum():
            raise ValueError("must be letters, digits and underscores")
        return value


class KafkaConfig(_Section):
    """Kafka transport; used when `transport.kind` is `kafka`."""

    bootstrap_servers: list[str] = ["127.0.0.1:9092"]
    topic_prefix: str = "rocescope"
    partitions: int = Field(6, ge=1)
    replication_factor: int = Field(1, ge=1)
    compression: Literal["zstd", "lz4", "gzip", "none"] = "zstd"
    linger_ms: int = Field(20, ge=0)
    batch_size: int = Field(1_048_576, ge=1024)
    max_request_size: int = Field(16_777_216, ge=1024)
    idempotence: bool = Field(
        True,
        description="Kafka's idempotent producer. The sink drops a message logged twice by its id either way; turn "
        "this off for a broker whose idempotence loses data (Tansu 0.6.0 drops acknowledged batches on restart).",
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    session_timeout_ms: int = Field(10_000, ge=1000)
    dead_letter_topic: str = "rocescope.deadletter.v1"

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_ports(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("name at least one broker, host:port")
        for server in value:
            host, _, port = server.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{server!r} is not host:port")
        return value


class TransportConfig(_Section):
    kind: Literal["inprocess", "kafka"] = "inprocess"
    sink_in_process: bool = Field(
        False,
        description="With kind kafka, also run a sink on a thread of the publishing process and wait until "
        "everything published has landed (small setups, `rocescope demo --kafka`); the in-process transport "
        "always does.",
    )


class SinkConfig(_Section):
    """How the sink buffers before it inserts, and where it shows its own metrics."""

    group_id: str = "rocescope-sink"
    max_rows: int = Field(500_000, ge=1)
    max_seconds: float = Field(2.0, gt=0)
    poll_timeout_ms: int = Field(200, ge=1)
    retry_backoff_s: float = Field(0.5, gt=0)
    retry_backoff_max_s: float = Field(30.0, gt=0)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(0, ge=0, le=65535, description="0 disables the Prometheus endpoint.")
    coverage_every_s: float = Field(
        60.0,
        ge=0,
        description="Period of `rocescope_coverage` on the metrics endpoint: what the last analysis window "
        "(analysis.window_minutes) of landed telemetry could judge; 0 turns it off.",
    )
    dedup_messages: int = Field(
        100_000,
        ge=0,
        description="Message ids remembered per partition, to drop a message the broker logged twice "
        "(a producer's retry); 0 turns that off.",
    )


class AnalysisConfig(_Section):
    """Analysis windows and per-detector thresholds (each detector validates its own section)."""

    window_minutes: float = Field(15.0, gt=0, description="Default window of `rocescope analyze`.")
    follow_every_s: float = Field(30.0, gt=0, description="Period of `rocescope analyze --follow`.")
    detectors: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="detector name -> threshold overrides, e.g. pfc_storm: {min_seconds: 0.5}"
    )
    disabled: list[str] = Field(default_factory=list, description="Detectors not to run.")
    metrics_host: str = Field("127.0.0.1", description="Where `analyze --follow` serves its Prometheus metrics.")
    metrics_port: int = Field(0, ge=0, le=65535, description="0 disables `analyze --follow`'s metrics endpoint.")


class Settings(BaseSettings):
    """The whole configuration of one rocescope process."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

    store: StoreConfig = StoreConfig()
    transport: TransportConfig = TransportConfig()
    kafka: KafkaConfig = KafkaConfig()
    sink: SinkConfig = SinkConfig()
    analysis: AnalysisConfig = AnalysisConfig()
    collectors: dict[str, Any] = Field(
        default_factory=dict, description="Per-collector sections, validated by rocescope.collectors.config."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the file: secrets live in the environment, not in YAML.
        return (_Environment(settings_cls), _Sections(settings_cls, init_settings))


class _Sections(PydanticBaseSettingsSource):
    """The values given to `Settings(...)`, sections given as models (`store=StoreConfig(path=...)`) as their
    fields: the environment's `ROCESCOPE_STORE__X` then merges into the section given, where a model would be
    replaced whole by the environment's one key (and the store's path with it: a run meant for a scratch store
    would land in the default one)."""

    def __init__(self, settings_cls: type[BaseSettings], given: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self._given = given

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._given.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in self._given().items()}


class _Environment(EnvSettingsSource):
    """`ROCESCOPE_...` variables; a list also as comma-separated values, and a value that is neither
    says which variable it came from."""

    def decode_complex_value(self, field_name: str, field: FieldInfo | None, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)  # type: ignore[arg-type]
        except ValueError as exc:
            if isinstance(value, str) and field is not None and _is_scalar_list(field.annotation):
                return [item.strip() for item in value.split(",") if item.strip()]
            names = [k for k, v in self.env_vars.items() if v == value and k.rsplit("__", 1)[-1] == field_name.lower()]
            variable = names[0].upper() if names else f"{ENV_PREFIX}...{field_name.upper()}"
            raise ValueError(f"{variable}: not a JSON value ({exc})") from exc


def _is_scalar_list(annotation: Any) -> bool:
    """`list[str]` and the like: what a comma-separated value can stand for."""
    if get_origin(annotation) not in (list, tuple, set, frozenset):
        return False
    return all(arg in (str, int, float, Path, Ellipsis) for arg in get_args(annotation))


def load(path: Path | str | None = None) -> Settings:
    """Load and validate the configuration; a bad one raises ConfigError naming key and reason."""
    if path is None and os.environ.get(DEFAULT_CONFIG_ENV):
        path = os.environ[DEFAULT_CONFIG_ENV]
    data: dict[str, Any] = {}
    where = "environment"
    if path is not None:
        where = str(path)
        try:
            raw = read_yaml(Path(path).read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path} does not exist") from exc
        except (yaml.YAMLError, RecursionError, UnicodeDecodeError) as exc:  # PyYAML nests recursively
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        except OSError as exc:
            raise ConfigError(f"config file {path} cannot be read: {exc}") from exc
        if raw is not None and not isinstance(raw, dict):
            raise ConfigError(f"config file {path}: the top level must be a mapping, not {type(raw).__name__}")
        data = raw or {}
        if any(not isinstance(key, str) for key in data):
            raise ConfigError(f"config file {path}: top-level keys must be names, not {sorted(map(repr, data))}")
    try:
        return Settings(**data)
    except SettingsError as exc:  # a variable the environment source could not decode
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        raise ConfigError(f"invalid environment variable {cause}") from None
    except ValidationError as exc:
        raise ConfigError(f"invalid config ({where}): {describe_errors(exc, env=os.environ)}") from None


def describe_errors(exc: ValidationError, prefix: str = "", env: Mapping[str, str] | None = None) -> str:
    """One line per problem: `store.backend: Input should be 'chdb' or 'clickhouse'`; with `env`, a key
    set from the environment names its variable: `kafka.partitions (ROCESCOPE_KAFKA__PARTITIONS): ...`."""
    problems = []
    for err in exc.errors():
        loc = [str(p) for p in (prefix, *err["loc"]) if p != ""]
        key = ".".join(loc) or "(top level)"
        reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        variable = _variable_of(loc, env) if env is not None else None
        problems.append(f"{key} ({variable}): {reason}" if variable else f"{key}: {reason}")
    return "; ".join(problems)


def _variable_of(loc: list[str], env: Mapping[str, str]) -> str | None:
    """The `ROCESCOPE_...` variable that set `loc` or a key above it (a list item's, its list's)."""
    names = {name.upper() for name in env}
    for end in range(len(loc), 0, -1):
        name = ENV_PREFIX + "__".join(loc[:end]).upper()
        if name in names:
            return name
    return None


def dump(settings: Settings, collectors: BaseModel | None = None) -> str:
    """The effective configuration as YAML, secrets redacted. The `collectors` section is printed only as
    validated by its owners (`collectors`), whose models know which values are secrets."""
    doc = settings.model_dump(mode="json", exclude={"collectors"})
    if collectors is not None:
        doc["collectors"] = collectors.model_dump(mode="json")
    return yaml.safe_dump(doc, sort_keys=False)


def read_yaml(text: str) -> Any:
    """Safe YAML through libyaml where PyYAML was built with it (an order of magnitude faster than the
    pure-Python loader), the pure-Python safe loader otherwise."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
