"""Stable, salted 64-bit hashes of example keys (never Python's process-salted hash())."""

from __future__ import annotations

import hashlib

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
    """Maps ``key`` to a uniform float in ``[0, 1)``.

    Uses the top 53 bits (a double's precision): dividing the full 64-bit value
    would round hashes near 2**64 up to exactly 1.0.
    """
    return (stable_hash64(key, salt) >> 11) * 2.0**-53
