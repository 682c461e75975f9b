"""The image job's duplicate report and --cross_split_duplicates=drop, end to end, on
photo content: scikit-learn's two sample photos cut into 24 distinct tiles, each the
base of a family of planted copies in other splits.

Families (base in train unless said): 0-3 a byte copy in test; 4-7 a PNG re-saved
with another compression level and a text chunk in test; 8-15 JPEG re-encodes (q70,
85, 95) and resizes (50, 70, 90 %) in test; 16-19 a horizontal flip in test; 20-23
alone, in validation. Expected values come from the planting, and for ``drop`` from
hashes recomputed here with hashlib, xxhash, NumPy and imagehash.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re

import imagehash
import numpy as np
import pytest
import xxhash
from PIL import Image, PngImagePlugin

from etl.images.duplicates.groups import DEFAULT_NEAR_DISTANCE
from reader.format import contract
from tests.job_runs import output_digests, read_split, run_images_job

IMAGE_SIZE = 64
FLAGS = (f"--image_size={IMAGE_SIZE}", "--image_format=png")
BYTE_COPIES, PNG_RESAVES, VARIANTS, FLIPS, ALONE = (range(0, 4), range(4, 8), range(8, 16),
                                                     range(16, 20), range(20, 24))
REENCODES = (70, 85, 95)
RESIZES = (50, 70, 90)


def _tiles() -> list[np.ndarray]:
    from sklearn.datasets import load_sample_images

    tiles = []
    for photo in load_sample_images().images:
        for row in range(3):
            for column in range(4):
                tiles.append(np.ascontiguousarray(
                    photo[row * 142:(row + 1) * 142, column * 160:(column + 1) * 160]))
    return tiles


def _jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def _png(pixels: np.ndarray, level: int, text: str | None = None) -> bytes:
    buffer = io.BytesIO()
    info = PngImagePlugin.PngInfo()
    if text:
        info.add_text("Comment", text)
    Image.fromarray(pixels).save(buffer, "PNG", compress_level=level, pnginfo=info)
    return buffer.getvalue()


def _planted(tiles: list[np.ndarray]) -> dict[str, bytes]:
    """split/label/file → bytes; files are named ``<family>_<variant>``."""
    files: dict[str, bytes] = {}

    def put(split: str, family: int, variant: str, data: bytes, ext: str) -> None:
        files[f"{split}/c{family % 3}/{family:02d}_{variant}.{ext}"] = data

    for family, tile in enumerate(tiles):
        base_split = "validation" if family in ALONE else "train"
        if family in PNG_RESAVES:
            put(base_split, family, "base", _png(tile, 9), "png")
            put("test", family, "resaved", _png(tile, 1, "re-saved"), "png")
            continue
        base = _jpeg(tile)
        put(base_split, family, "base", base, "jpg")
        if family in BYTE_COPIES:
            put("test", family, "copy", base, "jpg")
        elif family in VARIANTS:
            decoded = np.asarray(Image.open(io.BytesIO(base)).convert("RGB"))
            for quality in REENCODES:
                put("test", family, f"q{quality}", _jpeg(decoded, quality), "jpg")
            for percent in RESIZES:
                size = (round(160 * percent / 100), round(142 * percent / 100))
                smaller = np.asarray(Image.fromarray(decoded).resize(
                    size, Image.Resampling.BICUBIC))
                put("test", family, f"r{percent}", _jpeg(smaller), "jpg")
        elif family in FLIPS:
            put("test", family, "flip", _jpeg(np.ascontiguousarray(tile[:, ::-1])), "jpg")
    return files


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("planted")
    for relpath, data in _planted(_tiles()).items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return str(root)


@pytest.fixture(scope="module")
def dropped(planted, tmp_path_factory) -> dict[str, str]:
    """``--cross_split_duplicates=drop`` on one worker and on two: name → output dir."""
    outs = {}
    for name, workers in (("one", ()), ("two", ("--direct_num_workers=2",
                                                "--direct_running_mode=multi_threading"))):
        outs[name] = str(tmp_path_factory.mktemp(f"dropped_{name}"))
        run_images_job(planted, outs[name], *FLAGS, "--cross_split_duplicates=drop",
                       *workers)
    return outs


def _lines(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _family(key: str) -> tuple[int, str]:
    match = re.search(r"/(\d\d)_(\w+)\.", key)
    assert match, key
    return int(match.group(1)), match.group(2)


def test_planted_duplicates_are_found_by_kind_with_no_false_pair(dropped):
    pairs = _lines(os.path.join(dropped["one"], contract.DUPLICATE_PAIRS_RELPATH))
    by_kind: dict[str, list[dict]] = {}
    for pair in pairs:
        by_kind.setdefault(pair["kind"], []).append(pair)
        # Every pair joins one family, and never a flip to its original.
        (family_a, variant_a), (family_b, variant_b) = map(_family, (pair["key_a"],
                                                                      pair["key_b"]))
        assert family_a == family_b, pair
        assert "flip" not in (variant_a, variant_b), pair
    # k byte copies across splits: exactly k byte pairs, train-test.
    assert sorted(_family(p["key_a"])[0] for p in by_kind["bytes"]) == list(BYTE_COPIES)
    assert {(p["split_a"], p["split_b"]) for p in by_kind["bytes"]} == {("test", "train")}
    # PNG re-saves: pixel pairs, and no byte pair.
    assert sorted(_family(p["key_a"])[0] for p in by_kind["pixels"]) == list(PNG_RESAVES)
    # Re-encodes and resizes: each variant paired with its base (recall), near.
    wanted = {(family, f"q{q}") for family in VARIANTS for q in REENCODES} | {
        (family, f"r{r}") for family in VARIANTS for r in RESIZES}
    found = {_family(p["key_a"]) for p in by_kind["near"] if _family(p["key_b"])[1] == "base"}
    recall = len(found & wanted) / len(wanted)
    print(f"near-duplicate recall {recall:.3f} ({len(found & wanted)} of {len(wanted)}), "
          f"false pairs 0 of {len(pairs)} pairs")
    assert recall >= 0.95
    assert all(p["distance"] <= DEFAULT_NEAR_DISTANCE for p in by_kind["near"])
    with open(os.path.join(dropped["one"], contract.DUPLICATES_SUMMARY_RELPATH)) as f:
        summary = json.load(f)
    assert summary["pairs"]["bytes"]["train-test"] == len(BYTE_COPIES)
    assert summary["cross_split_pairs"] == sum(p["split_a"] != p["split_b"] for p in pairs)


def test_drop_leaves_no_pair_across_published_splits(planted, dropped):
    out = dropped["one"]
    manifest = json.load(open(os.path.join(out, contract.MANIFEST_FILENAME)))
    records = []
    for split in contract.SPLITS:
        for key, features in read_split(out, manifest, split).items():
            data = open(os.path.join(planted, key), "rb").read()
            pixels = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            stored = np.asarray(Image.open(io.BytesIO(features["image"])).convert("RGB"))
            cells = stored.astype(np.float64).reshape(32, 2, 32, 2, 3).mean((1, 3))
            thumbnail = np.clip(np.round(cells @ [0.299, 0.587, 0.114]), 0, 255)
            records.append((split, hashlib.sha256(data).hexdigest(),
                            xxhash.xxh3_128(pixels.tobytes()).hexdigest(),
                            imagehash.phash(Image.fromarray(thumbnail.astype(np.uint8)))))
    assert len(records) == sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)
    for i, (split, data, pixels, phash) in enumerate(records):
        for other_split, other_data, other_pixels, other_phash in records[i + 1:]:
            if split != other_split:
                assert data != other_data and pixels != other_pixels
                assert phash - other_phash > DEFAULT_NEAR_DISTANCE


def test_every_removed_image_is_a_dead_letter_naming_its_kept_partner(planted, dropped):
    out = dropped["one"]
    manifest = json.load(open(os.path.join(out, contract.MANIFEST_FILENAME)))
    removed = [r for r in _lines(os.path.join(out, contract.ERRORS_DIRNAME,
                                              contract.REJECTED_FILENAME))
               if r["reason"] == "cross_split_duplicate"]
    # The train base of every family with a copy in test, and nothing else.
    assert sorted(_family(r["key"])[0] for r in removed) == [
        *BYTE_COPIES, *PNG_RESAVES, *VARIANTS]
    published = {key for split in contract.SPLITS
                 for key in read_split(out, manifest, split)}
    for rejection in removed:
        assert rejection["split"] == "train" and rejection["key"] not in published
        assert rejection["duplicate_of"] in published
        assert rejection["duplicate_of"].startswith("test/")
        assert _family(rejection["duplicate_of"])[0] == _family(rejection["key"])[0]
        assert rejection["message"].startswith(f"duplicate_of:{rejection['duplicate_of']} ")
    # Counts reconcile, and the removals are not errors.
    written = sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)
    assert written + manifest["rejected"]["count"] == manifest["inputs"]
    assert manifest["duplicates"]["removed"]["train"] == len(removed)
    assert manifest["label_counts"]["train"] == {
        label: sum(1 for key in published if key.startswith(f"train/{label}/"))
        for label in ("c0", "c1", "c2")
        if any(key.startswith(f"train/{label}/") for key in published)}


def test_drop_output_is_byte_identical_on_two_workers(dropped):
    one, two = output_digests(dropped["one"]), output_digests(dropped["two"])
    assert one == two
    assert {"duplicates/pairs.jsonl", "duplicates/summary.json",
            "keys/hashes-v00001.jsonl"} <= set(one)


# --- The demo's digits --------------------------------------------------------------

@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> tuple[str, str, dict]:
    """The demo's 1,797 digit scans (scripts/make_sample_images.py), through the job
    with the default --cross_split_duplicates=report: (input, output, manifest)."""
    from scripts.make_sample_images import write_digits

    root = str(tmp_path_factory.mktemp("digits"))
    assert write_digits(root) == 1797
    out = str(tmp_path_factory.mktemp("digits_out"))
    return root, out, run_images_job(root, out, "--cross_split_duplicates=report")


def test_demo_digits_exact_duplicate_counts_match_numpy(digits):
    root, out, manifest = digits
    split_of = {key: split for split in contract.SPLITS
                for key in read_split(out, manifest, split)}
    assert len(split_of) == 1797
    # Independently: group the scans by their decoded pixels (Pillow, NumPy), keep the
    # test, else validation, else train copy with the smallest key, and pair the rest.
    groups: dict[bytes, list[tuple[str, str]]] = {}
    for key in split_of:
        with open(os.path.join(root, key), "rb") as f:
            data = f.read()
        pixels = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        groups.setdefault(pixels.tobytes() + str(pixels.shape).encode(), []).append(
            (key, hashlib.sha256(data).hexdigest()))
    rank = {"test": 0, "validation": 1, "train": 2}
    expected = {"bytes": {}, "pixels": {}}
    for members in groups.values():
        kept, *others = sorted(members, key=lambda m: (rank[split_of[m[0]]], m[0]))
        for key, data in others:
            kind = "bytes" if data == kept[1] else "pixels"
            pair = "-".join(sorted((split_of[kept[0]], split_of[key]),
                                   key=contract.SPLITS.index))
            expected[kind][pair] = expected[kind].get(pair, 0) + 1
    found = manifest["duplicates"]["pairs"]
    for kind in ("bytes", "pixels"):
        assert {pair: n for pair, n in found[kind].items() if n} == expected[kind], kind
    summary = manifest["duplicates"]
    assert summary["images"] == 1797
    assert summary["exact_groups"]["groups"] == sum(len(m) > 1 for m in groups.values())
    # No two of the 1,797 scans are equal (so both counts are 0); at 16 px many are
    # alike enough to be near pairs, which are reported, not checked here.
    print(f"digits: {summary['pairs']}")
