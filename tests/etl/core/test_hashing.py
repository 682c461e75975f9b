"""Unit tests of etl/core/hashing.py: stable, salted 64-bit hashes of example keys."""

from __future__ import annotations

import hashlib

from etl.core import hashing

# int.from_bytes(hashlib.sha256(b"split\x00cat/1.png").digest()[:8], "big"), computed
# once by hand and frozen here: a change to it would move every example to a new split.
EXPECTED_SPLIT_HASH = 100229238022306626


def test_stable_hash64_matches_frozen_value():
    assert hashing.stable_hash64("cat/1.png", "split") == EXPECTED_SPLIT_HASH


def test_stable_hash64_is_first_eight_bytes_of_salted_sha256():
    digest = hashlib.sha256(b"shard\x00dog/\xc3\xa9t\xc3\xa9.jpg").digest()
    assert hashing.stable_hash64("dog/été.jpg", "shard") == int.from_bytes(digest[:8], "big")


def test_stable_hash64_differs_across_salts():
    values = {hashing.stable_hash64("cat/1.png", salt)
              for salt in (hashing.SPLIT_SALT, hashing.SHARD_SALT, hashing.ORDER_SALT)}
    assert len(values) == 3


def test_stable_hash64_separates_salt_and_key():
    # The NUL separator keeps ("ab", "c") and ("a", "bc") apart.
    assert hashing.stable_hash64("c", "ab") != hashing.stable_hash64("bc", "a")


def test_stable_hash64_fits_in_unsigned_64_bits():
    values = [hashing.stable_hash64(f"key-{i}", "split") for i in range(1000)]
    assert all(0 <= v < 1 << 64 for v in values)
    assert max(values) >= 1 << 63  # The top bit is used: values are not signed.


def test_unit_interval_is_top_53_bits_of_hash():
    assert hashing.unit_interval("cat/1.png", "split") == (EXPECTED_SPLIT_HASH >> 11) / 2.0**53


def test_unit_interval_stays_in_half_open_range():
    values = [hashing.unit_interval(f"img/{i}.png", "split") for i in range(10_000)]
    assert all(0.0 <= v < 1.0 for v in values)


def test_unit_interval_is_below_one_for_the_largest_hash(monkeypatch):
    # Documented range is [0, 1). Hashes within 1024 of 2**64 round to 2.0**64 when
    # converted to float, so a plain hash / 2.0**64 returns exactly 1.0 for them.
    monkeypatch.setattr(hashing, "stable_hash64", lambda key, salt: (1 << 64) - 1)
    assert hashing.unit_interval("any", "split") < 1.0


def test_unit_interval_is_roughly_uniform_over_10k_keys():
    values = [hashing.unit_interval(f"img/{i}.png", "split") for i in range(10_000)]
    counts = [0] * 10
    for v in values:
        counts[int(v * 10)] += 1
    # Binomial(10000, 0.1) has sd 30: ±150 is five standard deviations.
    assert all(850 <= c <= 1150 for c in counts), counts
    assert abs(sum(values) / len(values) - 0.5) < 0.015
