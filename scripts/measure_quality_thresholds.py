"""The measurements behind the image-quality flags' thresholds (etl.images.quality).

Clean photos: --sample_crops crops of scikit-learn's sample photos
(``etl.testing.sample_photo``, sides 300-600 px, JPEG quality 90) and the first
--web_photos files of a web-size photo tree (scripts/sample_photos.py, e.g.
/work/bench_data/photos_2000: longer side 320-1280 px). Planted images, --planted of
each kind, made from photos of both kinds (alternately) the way each problem looks:

* ``dark``: every channel scaled by f = 0.05-0.2 (2.3-4.3 stops under-exposed);
* ``light``: washed out towards white, ``255 - f (255 - v)`` with f = 0.01-0.04;
* ``blurry``: Pillow ``GaussianBlur`` of radius 3-8 px at the source size;
* ``blank``: one flat colour plus Gaussian noise of sigma 1-4 levels, 300-600 px;
* ``tiny``: a 16-32 px sample-photo crop;
* ``panoramic``: a 4:1 sample-photo crop, 150-250 px high;
* ``grayscale_L``: a photo stored as a mode-L JPEG; ``grayscale_rgb``: the same grey
  pixels stored as an RGB JPEG (equal channels before the encode).

A sweep plants --planted more of the first four kinds, milder (dark f = 0.2-0.45,
light f = 0.04-0.2, blank sigma 4-12) or more blurred (radius 8-24 px), and reports
recall by strength: where each rule stops finding them.

Every file is measured as the job measures it, with Pillow standing in for the job's
TensorFlow ops (an approximation): ``ImageOps.exif_transpose``, RGB, the shorter side
resized to 224 (``BILINEAR``, ``reducing_gap=2``; the job: antialiased bilinear), the
centre 224 x 224 (the stored image), then 32 x 32 (``BOX``; the job: ``ResizeArea``)
→ ``quality.measure_quality``. ``odd_size``
uses :func:`quality.size_bounds` over every file measured, as the job does over every
written image. Printed: each measure's spread per group, each flag's count per group
(recall on the planted kind it targets, false positives on the clean ones) at
``FlagThresholds()``, recall by strength, and the sharpness of the clean photos that
the blur rule applies to (contrast >= its minimum).

Usage: python scripts/measure_quality_thresholds.py \\
           --web_input /work/bench_data/photos_2000 [--out quality_thresholds.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import io
import itertools
import json
import os
from collections.abc import Iterator

import numpy as np
from PIL import Image, ImageFilter, ImageOps

from etl.images import quality
from etl.testing import encode_image, sample_photo

THUMBNAIL_INPUT_SIZE = 224
PLANTED_FLAG = {"dark": "dark", "light": "light", "blurry": "blurry",
                "blank": "low_information", "tiny": "odd_size",
                "panoramic": "odd_aspect_ratio", "grayscale_L": "grayscale",
                "grayscale_rgb": "grayscale"}
# Planted strengths (each drawn uniformly): every image planted is a clear case of its
# problem; the sweep plants milder (dark, light, blank) or stronger (blur) ones, to show
# where each rule stops finding them.
PLANTED = {"dark": (0.05, 0.2), "light": (0.01, 0.04), "blurry": (3, 8), "blank": (1, 4)}
SWEEP = {"dark": (0.2, 0.45), "light": (0.04, 0.2), "blurry": (8, 32), "blank": (4, 12)}
STRENGTH_BINS = {"dark": (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.45),
                 "light": (0.01, 0.02, 0.03, 0.04, 0.06, 0.1, 0.2),
                 "blurry": (0, 0.25, 0.5, 0.75, 1, 1.5, 2, 3),
                 "blank": (1, 2, 3, 4, 6, 8, 12)}
STRENGTH_NAMES = {"dark": "pixels x f", "light": "255 - f (255 - v)",
                  "blurry": "Gaussian radius in thumbnail px", "blank": "noise sigma"}


def quality_thumbnail(data: bytes) -> tuple[np.ndarray, dict[str, object]]:
    """A file's 32 x 32 quality thumbnail as the job makes it (Pillow standing in for
    its TensorFlow resizes), and its upright width, height and Pillow mode."""
    with Image.open(io.BytesIO(data)) as image:
        mode = image.mode
        upright = ImageOps.exif_transpose(image).convert("RGB")
    width, height = upright.size
    short = min(width, height)
    size = (max(1, round(width * THUMBNAIL_INPUT_SIZE / short)),
            max(1, round(height * THUMBNAIL_INPUT_SIZE / short)))
    resized = upright.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)
    left, top = ((s - THUMBNAIL_INPUT_SIZE) // 2 for s in size)
    stored = resized.crop((left, top, left + THUMBNAIL_INPUT_SIZE, top + THUMBNAIL_INPUT_SIZE))
    side = quality.QUALITY_THUMBNAIL_SIZE
    thumbnail = np.asarray(stored.resize((side, side), Image.Resampling.BOX))
    return thumbnail, {"width": width, "height": height, "mode": mode}


def jpeg(pixels: np.ndarray) -> bytes:
    return encode_image(np.ascontiguousarray(pixels), "jpeg")


def grey_jpeg(pixels: np.ndarray, mode: str) -> bytes:
    """``pixels`` as grey levels (Pillow's luma), stored as a mode ``mode`` JPEG."""
    buf = io.BytesIO()
    Image.fromarray(pixels).convert("L").convert(mode).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def clean_photos(args: argparse.Namespace) -> dict[str, list[tuple[bytes, None]]]:
    rng = np.random.default_rng([args.seed, 1])
    crops = [(jpeg(sample_photo(i, tuple(int(s) for s in rng.integers(300, 601, 2)), seed=1)),
              None) for i in range(args.sample_crops)]
    files = sorted(glob.glob(os.path.join(args.web_input, "**", "*.jpg"), recursive=True))
    web = []
    for path in files[:args.web_photos]:
        with open(path, "rb") as f:
            web.append((f.read(), None))
    return {"clean_sample": crops, "clean_web": web}


def base_photos(args: argparse.Namespace, web: list[bytes], seed: int
                ) -> Iterator[np.ndarray]:
    """Photos to plant problems in: sample crops (300-600 px) and web photos (from the
    end of the list measured as clean), alternately."""
    rng = np.random.default_rng([args.seed, seed])
    for i in range(args.planted):
        if i % 2 or not web:
            yield sample_photo(1000 + i, tuple(int(s) for s in rng.integers(300, 601, 2)),
                               seed=seed)
        else:
            with Image.open(io.BytesIO(web[-1 - i // 2])) as image:
                yield np.asarray(image.convert("RGB"))


def planted_images(args: argparse.Namespace, web: list[bytes], ranges: dict[str, tuple],
                   seed: int) -> dict[str, list[tuple[bytes, float]]]:
    """``args.planted`` files of each kind, each with its strength: dark / light ``f``,
    the blur radius in thumbnail pixels (radius x 32 / shorter side), the blank's noise
    sigma, the tiny image's side, 4 (panoramic), 0 (grey)."""
    rng = np.random.default_rng([args.seed, seed, 1])
    groups: dict[str, list[tuple[bytes, float]]] = {kind: [] for kind in PLANTED_FLAG}
    for i, photo in enumerate(base_photos(args, web, seed)):
        pixels = photo.astype(np.float64)
        dim, lift = rng.uniform(*ranges["dark"]), rng.uniform(*ranges["light"])
        groups["dark"].append((jpeg(np.round(pixels * dim).astype(np.uint8)), dim))
        groups["light"].append(
            (jpeg(np.round(255 - lift * (255 - pixels)).astype(np.uint8)), lift))
        radius = rng.uniform(*ranges["blurry"])
        blurred = np.asarray(Image.fromarray(photo).filter(ImageFilter.GaussianBlur(radius)))
        groups["blurry"].append((jpeg(blurred), radius * quality.QUALITY_THUMBNAIL_SIZE
                                 / min(photo.shape[:2])))
        height, width = (int(s) for s in rng.integers(300, 601, 2))
        sigma = rng.uniform(*ranges["blank"])
        flat = rng.integers(0, 256, 3) + rng.normal(0, sigma, (height, width, 3))
        groups["blank"].append((jpeg(np.clip(np.round(flat), 0, 255).astype(np.uint8)), sigma))
        side = int(rng.integers(16, 33))
        groups["tiny"].append((jpeg(sample_photo(2000 + i, side, seed=seed)), side))
        high = int(rng.integers(150, 251))
        groups["panoramic"].append((jpeg(sample_photo(3000 + i, (high, 4 * high), seed=seed)), 4))
        groups["grayscale_L"].append((grey_jpeg(photo, "L"), 0))
        groups["grayscale_rgb"].append((grey_jpeg(photo, "RGB"), 0))
    return groups


def measure(groups: dict[str, list[tuple[bytes, float | None]]]
            ) -> tuple[dict[str, list[dict]], np.ndarray]:
    """Each group's facts (dimensions, mode, quality measures, and the planted
    ``strength``), and every thumbnail."""
    facts: dict[str, list[dict]] = {}
    thumbnails = []
    for name, files in groups.items():
        made = [quality_thumbnail(data) for data, _ in files]
        thumbnails += [thumbnail for thumbnail, _ in made]
        measured = quality.measure_quality(np.stack([thumbnail for thumbnail, _ in made]))
        facts[name] = [{**info, **q.to_dict(), "strength": strength}
                       for (_, info), q, (_, strength) in zip(made, measured, files,
                                                              strict=True)]
    return facts, np.stack(thumbnails)


def spreads(facts: dict[str, list[dict]]) -> dict[str, dict[str, list[float]]]:
    """Per measure and group: min, 1st, 50th and 99th percentile, max."""
    return {measure: {group: np.round(np.percentile(
        [f[measure] for f in rows], [0, 1, 50, 99, 100]), 4).tolist()
        for group, rows in facts.items()} for measure in quality.QUALITY_FACTS}


def flag_counts(facts: dict[str, list[dict]], bounds: tuple[float, float],
                thresholds: quality.FlagThresholds) -> dict[str, dict[str, int]]:
    counts = {}
    for group, rows in facts.items():
        flags = [quality.image_flags(row, bounds, thresholds) for row in rows]
        counts[group] = {"images": len(rows), **{
            name: sum(name in f for f in flags) for name in quality.FLAG_NAMES}}
    return counts


def recall_by_strength(facts: dict[str, list[dict]], bounds: tuple[float, float],
                       thresholds: quality.FlagThresholds) -> dict[str, list[list]]:
    """Per kind with a strength: [bin low, bin high, flagged, images] per bin."""
    table = {}
    for kind, edges in STRENGTH_BINS.items():
        rows = facts[kind] + facts["sweep_" + kind]
        hits = [(row["strength"], PLANTED_FLAG[kind] in quality.image_flags(
            row, bounds, thresholds)) for row in rows]
        table[kind] = [[low, high, sum(hit for s, hit in hits if low <= s < high),
                        sum(low <= s < high for s, _ in hits)]
                       for low, high in itertools.pairwise(edges)]
    return table


def clean_sharpness(facts: dict[str, list[dict]], thresholds: quality.FlagThresholds
                    ) -> dict[str, float]:
    """The sharpness of the clean photos the blur rule applies to: lowest, 0.5th, 1st
    and 5th percentile, and how many there are."""
    values = [row["sharpness"] for group in ("clean_sample", "clean_web")
              for row in facts[group] if row["contrast"] >= thresholds.blurry_min_contrast]
    low = np.percentile(values, [0, 0.5, 1, 5]).round(2).tolist()
    return {"images": len(values), "min": low[0], "p0.5": low[1], "p1": low[2], "p5": low[3]}


def print_report(result: dict) -> None:
    print("Spread per measure (min, p1, median, p99, max):")
    for measure, groups in result["spreads"].items():
        print(f"  {measure}")
        for group, values in groups.items():
            print(f"    {group:14s} {values}")
    print(f"odd_size bounds on sqrt(w*h): {result['size_bounds']}")
    print(f"Flags at {result['thresholds']}:")
    names = quality.FLAG_NAMES
    print(f"  {'group':14s} {'n':>4s} " + " ".join(f"{n[:10]:>10s}" for n in names))
    for group, counts in result["flag_counts"].items():
        print(f"  {group:14s} {counts['images']:4d} "
              + " ".join(f"{counts[n]:10d}" for n in names))
    print("Recall (planted kind → its flag):")
    for kind, flag in PLANTED_FLAG.items():
        counts = result["flag_counts"][kind]
        print(f"  {kind:14s} {flag:16s} {counts[flag]}/{counts['images']}")
    print("Recall by strength (planted and sweep): [low, high) flagged/images")
    for kind, bins in result["recall_by_strength"].items():
        print(f"  {kind:8s} ({STRENGTH_NAMES[kind]}): " + ", ".join(
            f"[{low:g}, {high:g}) {hit}/{n}" for low, high, hit, n in bins))
    print(f"Sharpness of the clean photos with contrast >= the blur rule's minimum: "
          f"{result['clean_sharpness']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--web_input", required=True, help="A web-size photo tree.")
    parser.add_argument("--web_photos", type=int, default=300)
    parser.add_argument("--sample_crops", type=int, default=200)
    parser.add_argument("--planted", type=int, default=40, help="Images of each kind.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="Also write the results to this JSON.")
    args = parser.parse_args()
    clean = clean_photos(args)
    web = [data for data, _ in clean["clean_web"]]
    facts, _ = measure({**clean, **planted_images(args, web, PLANTED, seed=2)})
    sizes = [quality.image_size(f["width"], f["height"]) for rows in facts.values()
             for f in rows]
    thresholds = quality.FlagThresholds()
    bounds = quality.size_bounds(sizes, thresholds.odd_size_iqr_factor)
    sweep, _ = measure({"sweep_" + kind: files for kind, files in planted_images(
        args, web, SWEEP, seed=3).items() if kind in STRENGTH_BINS})
    result = {"spreads": spreads(facts), "size_bounds": [round(b, 2) for b in bounds],
              "thresholds": dataclasses.asdict(thresholds),
              "flag_counts": flag_counts(facts, bounds, thresholds),
              "recall_by_strength": recall_by_strength({**facts, **sweep}, bounds, thresholds),
              "clean_sharpness": clean_sharpness(facts, thresholds)}
    print_report(result)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
