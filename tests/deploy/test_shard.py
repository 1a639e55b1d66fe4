"""`--shard i/n`: every target is owned by exactly one shard, shares are even, and adding a shard moves
only what the new shard takes."""

from __future__ import annotations

import pytest

from rocescope.collectors.common.sharding import owner, owns, parse_shard, shard_targets
from rocescope.errors import ConfigError

TARGETS = [f"leaf-r{r}-{i:02d}" for r in range(8) for i in range(32)] + [f"spine-{i:02d}" for i in range(64)]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16])
def test_every_target_owned_exactly_once(n: int) -> None:
    for t in TARGETS:
        assert sum(owns(t, i, n) for i in range(n)) == 1
    shares = [sum(owns(t, i, n) for t in TARGETS) for i in range(n)]
    assert sum(shares) == len(TARGETS)
    mean = len(TARGETS) / n
    assert all(abs(s - mean) < 0.35 * mean + 5 for s in shares), shares


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_adding_a_shard_moves_few_targets(n: int) -> None:
    moved = [t for t in TARGETS if owner(t, n) != owner(t, n + 1)]
    # only targets the new shard wins move, none between the old shards
    assert all(owner(t, n + 1) == n for t in moved)
    assert len(moved) <= 1.5 * len(TARGETS) / (n + 1)


def test_parse_shard() -> None:
    assert parse_shard("2/4") == (2, 4)
    assert parse_shard("auto", hostname="rocescope-switch-3", environ={"ROCESCOPE_SHARDS": "4"}) == (3, 4)
    assert parse_shard("auto/5", hostname="sw-collector-0.ns.svc", environ={}) == (0, 5)
    for bad in ("4/4", "x", "1/0", "-1/2"):
        with pytest.raises(ConfigError):
            parse_shard(bad, environ={})
    with pytest.raises(ConfigError):
        parse_shard("auto", hostname="laptop", environ={"ROCESCOPE_SHARDS": "2"})
    with pytest.raises(ConfigError):
        parse_shard("auto", hostname="sw-1", environ={})


def test_shard_targets_filters() -> None:
    assert shard_targets(TARGETS, str, None) == TARGETS
    parts = [shard_targets(TARGETS, str, f"{i}/3") for i in range(3)]
    assert sorted(t for p in parts for t in p) == sorted(TARGETS)
