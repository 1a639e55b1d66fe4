"""What every collector's config section shares: strict entries, `env:NAME` values, targets files.

Targets are written inline in the config with the same entry shapes as the `--targets` files. A string
value `env:NAME` stays a reference in the loaded settings and is read from the environment only when
that collector builds its targets, so pods that never poll switches (sink, analysis) need no switch
credentials. Secrets are `SecretStr` and print redacted in `rocescope config --dump`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from rocescope.config import read_yaml
from rocescope.errors import ConfigError

__all__ = ["Entry", "Strict", "build_entries", "load_entries", "resolve_env"]

T = TypeVar("T")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def resolve_env(value: str, where: str) -> str:
    """`env:NAME` -> the variable's value; anything else unchanged. Raises ConfigError naming `where`."""
    if not value.startswith("env:"):
        return value
    name = value[4:]
    if name not in os.environ:
        raise ConfigError(f"{where} names unset variable {name}")
    return os.environ[name]


class Entry(Strict):
    """One target; `mapping()` is the entry as the collector's own `from_mapping` takes it."""

    name: str = Field(min_length=1)

    def mapping(self, where: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.model_dump(exclude_unset=True, exclude_none=True).items():
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            out[key] = resolve_env(value, f"{where}.{key}") if isinstance(value, str) else value
        return out


def build_entries(entries: Sequence[Entry], section: str, build: Callable[[dict[str, Any]], T]) -> list[T]:
    """Each entry built by the collector's `build` (ValueError on a bad one): errors name entry and key."""
    built: list[T] = []
    for i, entry in enumerate(entries):
        where = f"{section}[{i}] ({entry.name})"
        try:
            built.append(build(entry.mapping(where)))
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConfigError(f"{section}: names must be unique")
    return built


def load_entries(path: Path, what: str, key: str, build: Callable[[dict[str, Any]], T]) -> list[T]:
    """The entries of a collector's targets file (`key: [{...}, ...]`), each built by `build` (which
    raises ValueError on a bad one); a value `env:NAME` is read from the environment, so passwords and
    communities stay out of the file. Raises ConfigError naming the file, the entry and the key."""
    try:
        raw = read_yaml(path.read_text())
    except (OSError, yaml.YAMLError, RecursionError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {path}: {exc}") from exc
    entries = raw.get(key) if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{what} {path}: want `{key}:` with a list of mappings")
    built: list[T] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigError(f"{what} {path}: {key}[{i}] must be a mapping")
        spec = dict(entry)
        for name, value in spec.items():
            if isinstance(value, str):
                spec[name] = resolve_env(value, f"{what} {path}: {key}[{i}].{name}")
        try:
            built.append(build(spec))
        except ValueError as exc:
            raise ConfigError(f"{what} {path}: {key}[{i}]: {exc}") from None
    return built
