"""What a run will produce, as a fingerprint a rerun compares with its own.

The fingerprint holds the job (kind, name, every option that shapes the bytes,
what the job adds about its input), the code (package version, a digest of its
source, the libraries' versions), a digest of the units the run was handed and
its shard plan. Two runs with the same fingerprint write the same shards.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
from collections.abc import Iterable, Mapping
from typing import Any

import apache_beam as beam

_MODULO = 1 << 256


def unit_identity(unit: Any) -> str:
    """What of a unit (an image record, a window run) shapes its examples, as text:
    its ``identity()`` if it has one, else its ``repr`` (dataclasses of plain values)."""
    identity = getattr(unit, "identity", None)
    return identity() if identity is not None else repr(unit)


def _unit_hash(identity: str) -> int:
    return int.from_bytes(hashlib.sha256(identity.encode()).digest(), "big")


class DigestUnits(beam.CombineFn):
    """Units → ``{"count", "sha256"}``, a digest of the multiset of their identities.

    The sum of the identities' SHA-256 values modulo 2**256 does not depend on the
    order units arrive in or how workers combine them, and the accumulator is two
    integers however many units there are.
    """

    def create_accumulator(self) -> tuple[int, int]:
        return 0, 0

    def add_input(self, accumulator: tuple[int, int], unit: Any) -> tuple[int, int]:
        count, total = accumulator
        return count + 1, (total + _unit_hash(unit_identity(unit))) % _MODULO

    def merge_accumulators(self, accumulators: Iterable[tuple[int, int]]
                           ) -> tuple[int, int]:
        count = total = 0
        for more, subtotal in accumulators:
            count, total = count + more, (total + subtotal) % _MODULO
        return count, total

    def extract_output(self, accumulator: tuple[int, int]) -> dict[str, Any]:
        count, total = accumulator
        return {"count": count, "sha256": f"{total:064x}"}


def shard_inputs_digest(identities: Iterable[str]) -> str:
    """SHA-256 of a shard's input identities, sorted: one value per shard."""
    digest = hashlib.sha256()
    for identity in sorted(identities):
        digest.update(identity.encode())
        digest.update(b"\x00")
    return digest.hexdigest()


@functools.cache
def code_digest() -> str:
    """SHA-256 of the source of the packages that write datasets (``etl``,
    ``pipelines``, ``reader``): an edited checkout is other code, whatever its
    version says."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    digest = hashlib.sha256()
    for package in ("etl", "pipelines", "reader"):
        for folder, dirs, names in os.walk(os.path.join(root, package)):
            dirs.sort()
            for name in sorted(n for n in names if n.endswith(".py")):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode() + b"\x00")
                with open(path, "rb") as f:
                    digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose behaviour shapes the output bytes."""
    import isal
    import tensorflow as tf
    import tensorflow_transform as tft

    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "tensorflow_transform": tft.__version__,
        "apache_beam": beam.__version__,
        "isal": isal.__version__,  # the deflate of GZIP shards (shards/files.py)
    }


def _package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("tfrecord-etl")
    except metadata.PackageNotFoundError:
        return "not installed"


def run_identity(job: Mapping[str, Any]) -> dict[str, Any]:
    """The fingerprint's parts known before the pipeline runs: ``job`` (kind, name,
    every option that shapes the bytes, anything the job adds) and the code."""
    return {"job": json.loads(json.dumps(job, sort_keys=True)),
            "code": {"package": _package_version(), "source_sha256": code_digest(),
                     **library_versions()}}


def fingerprint(identity: Mapping[str, Any], units: Mapping[str, Any],
                num_shards: Iterable[tuple[str, int]]) -> dict[str, Any]:
    """The whole fingerprint: ``run_identity``, the units' digest, the shard plan."""
    return {**identity, "units": dict(units),
            "plan": {split: count for split, count in sorted(num_shards)}}


def _first_difference(old: Any, new: Any, path: str = "") -> str | None:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for name in sorted(set(old) | set(new)):
            found = _first_difference(old.get(name), new.get(name),
                                      f"{path}.{name}" if path else name)
            if found:
                return found
        return None
    if old == new:
        return None
    return f"{path} was {json.dumps(old)}, now {json.dumps(new)}"


def difference(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> str | None:
    """Why ``new`` does not resume ``old``, in words; None when it does."""
    if old is None:
        return "the earlier run left no readable fingerprint"
    if old.get("units") != new.get("units"):
        return (f"the input changed ({old.get('units', {}).get('count')} units listed "
                f"then, {new['units']['count']} now, or the same number with other "
                f"keys, labels or splits)")
    return _first_difference(old, new)
