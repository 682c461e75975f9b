"""Stable, salted 64-bit hashes of example keys (never Python's process-salted hash())."""

from __future__ import annotations

import hashlib

_UINT64_RANGE = float(1 << 64)

# Salts keep the split, shard and in-shard-order decisions statistically independent.
SPLIT_SALT = "split"
SHARD_SALT = "shard"
ORDER_SALT = "order"


def stable_hash64(key: str, salt: str) -> int:
    """Unsigned 64-bit integer from SHA-256 of ``salt`` and ``key``.

    The same ``(key, salt)`` gives the same value on every machine, process and
    Python version, which is what makes splits and shard files reproducible.
    """
    digest = hashlib.sha256(f"{salt}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def unit_interval(key: str, salt: str) -> float:
    """Maps ``key`` to a uniform float in ``[0, 1)``."""
    return stable_hash64(key, salt) / _UINT64_RANGE
