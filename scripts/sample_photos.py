"""Photo-sized benchmark JPEGs: random crops of real sample photos in 10 class folders.

File ``i`` of a tree is ``class{i % 10}/{i:06d}.jpg``: a random window (aspect ratio
log-uniform in 1:2 .. 2:1, 25-90 % of the largest such window) of one of the source
photos, resized (bicubic) so that its longer side is log-uniform in 320-1280 px,
mirrored half of the time, and saved by Pillow as JPEG quality 90. The sources are
scikit-learn's two sample photos (``load_sample_images``, 427x640) and, when
scikit-image is installed, its bundled photos (``skimage.data``). Every file is drawn
from its own generator seeded with ``(seed, i)``, so the first N files of any tree
are the same N files: a tree of N photos is ``<work_dir>/photos_<N>``, and files that
a sibling tree already holds are hard-linked from it, not rendered again.

With seed 0 and scikit-learn's photos only, the 200,000-photo tree measured: mean
65.0 KB, median 50.6 KB, 3.1-337 KB per file (KB = 1000 bytes), 0.41 megapixels
on average, 13.0 GB in all (its first 2,000 / 20,000 files: mean 65.0 / 64.5 KB).
The stats of every tree are printed and saved in ``<work_dir>/photos_<N>.json``.
Generation runs on a process pool (about 150-185 files/s on 2 cores, so 200,000 in
about 20 minutes), skips files that exist and can be stopped and resumed at any
point (each file is written under a temporary name and renamed into place).

Usage: nice -n 19 python scripts/sample_photos.py --work_dir /work/bench_data \\
           --count 200000
       (then --count 20000 and --count 2000 link their files from that tree)

From another script::

    from sample_photos import ensure_photos
    root = ensure_photos("/work/bench_data", 2000)  # -> /work/bench_data/photos_2000
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence

import numpy as np
from PIL import Image

NUM_CLASSES = 10
# scikit-image photos read from the package itself (none needs a download).
_SKIMAGE_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket")
# Below this many missing files, rendering in this process beats starting a pool.
_POOL_THRESHOLD = 200
_CHUNK = 50


@dataclasses.dataclass(frozen=True)
class PhotoSpec:
    """Everything that decides a tree's bytes (recorded beside it)."""

    seed: int = 0
    min_long_side: int = 320
    max_long_side: int = 1280
    min_window: float = 0.25
    max_window: float = 0.9
    max_aspect: float = 2.0
    jpeg_quality: int = 90
    sources: tuple[str, ...] = ()


def load_sources() -> dict[str, np.ndarray]:
    """The source photos by name: scikit-learn's two, plus scikit-image's if installed."""
    from sklearn.datasets import load_sample_images

    sample = load_sample_images()
    photos = {os.path.splitext(os.path.basename(name))[0]: image
              for name, image in zip(sample.filenames, sample.images, strict=True)}
    try:
        from skimage import data
    except ImportError:
        return photos
    for name in _SKIMAGE_PHOTOS:
        try:
            image = getattr(data, name)()
        except (OSError, ValueError, AttributeError):  # Absent from this version.
            continue
        if image.ndim == 3 and image.shape[2] >= 3:
            photos[f"skimage.{name}"] = np.ascontiguousarray(image[:, :, :3])
    return photos


def default_spec(seed: int = 0) -> PhotoSpec:
    return PhotoSpec(seed=seed, sources=tuple(sorted(load_sources())))


def relpath(index: int) -> str:
    """Path of photo ``index`` inside a tree."""
    return f"class{index % NUM_CLASSES}/{index:06d}.jpg"


def tree_path(work_dir: str, count: int, seed: int = 0) -> str:
    return os.path.join(work_dir, f"photos_{count}" + (f"_seed{seed}" if seed else ""))


def render(sources: Sequence[np.ndarray], spec: PhotoSpec, index: int) -> bytes:
    """The JPEG bytes of photo ``index``: deterministic in ``(spec, index)``."""
    rng = np.random.default_rng([spec.seed, index])
    source = sources[int(rng.integers(len(sources)))]
    height, width = source.shape[:2]
    aspect = float(np.exp(rng.uniform(-np.log(spec.max_aspect), np.log(spec.max_aspect))))
    window_w = min(width, height * aspect)  # The largest window of that aspect.
    scale = rng.uniform(spec.min_window, spec.max_window)
    w = max(16, round(window_w * scale))
    h = max(16, round(window_w / aspect * scale))
    left = int(rng.integers(0, width - w + 1))
    top = int(rng.integers(0, height - h + 1))
    long_side = round(float(np.exp(rng.uniform(np.log(spec.min_long_side),
                                               np.log(spec.max_long_side)))))
    size = ((long_side, max(1, round(long_side * h / w))) if w >= h
            else (max(1, round(long_side * w / h)), long_side))
    image = Image.fromarray(source[top:top + h, left:left + w]).resize(
        size, Image.Resampling.BICUBIC)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=spec.jpeg_quality)
    return buffer.getvalue()


# Per-worker state of the generation pool (set by _init_worker).
_worker: dict = {}


def _init_worker(spec: PhotoSpec, root: str, tmp_dir: str) -> None:
    photos = load_sources()
    missing = set(spec.sources) - set(photos)
    if missing:
        raise RuntimeError(f"Source photos {sorted(missing)} are not available here.")
    _worker.update(sources=[photos[name] for name in spec.sources], spec=spec, root=root,
                   tmp_dir=tmp_dir)


def _write_chunk(indices: Sequence[int]) -> tuple[int, int]:
    """Renders and writes ``indices``; returns (files, bytes)."""
    written = 0
    for index in indices:
        data = render(_worker["sources"], _worker["spec"], index)
        tmp = os.path.join(_worker["tmp_dir"], f"{os.getpid()}-{index}.jpg")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(_worker["root"], relpath(index)))
        written += len(data)
    return len(indices), written


def _stamp_path(root: str) -> str:
    return root + ".json"


def _read_stamp(root: str) -> dict | None:
    try:
        with open(_stamp_path(root)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _write_stamp(root: str, stamp: dict) -> None:
    with open(_stamp_path(root) + ".tmp", "w") as f:
        json.dump(stamp, f, indent=2, sort_keys=True)
    os.replace(_stamp_path(root) + ".tmp", _stamp_path(root))


def _existing(root: str) -> set[str]:
    names = set()
    for entry in os.scandir(root):
        if entry.is_dir() and entry.name.startswith("class"):
            names.update(f"{entry.name}/{f.name}" for f in os.scandir(entry.path)
                         if f.name.endswith(".jpg"))
    return names


def _siblings(work_dir: str, root: str, spec: PhotoSpec) -> list[str]:
    """Other trees under ``work_dir`` drawn from ``spec``: files to link from."""
    suffix = f"_seed{spec.seed}" if spec.seed else ""
    found = []
    for entry in os.scandir(work_dir):
        name = entry.name
        if (entry.is_dir() and entry.path != root and name.startswith("photos_")
                and name.endswith(suffix) and name[len("photos_"):len(name) - len(suffix)]
                .isdigit()):
            stamp = _read_stamp(entry.path)
            if stamp and stamp["spec"] == _spec_json(spec):
                found.append(entry.path)
    return found


def _spec_json(spec: PhotoSpec) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(spec)))


def _chunks(items: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def ensure_photos(work_dir: str, count: int, seed: int = 0, workers: int | None = None,
                  verbose: bool = False) -> str:
    """Makes ``<work_dir>/photos_<count>`` complete and returns its path.

    Files already there are kept; missing ones are hard-linked from a sibling tree of
    the same spec that has them, else rendered on ``workers`` processes (default: one
    per core). Writes ``<tree>.json``: the spec and the tree's file-size stats.

    Raises:
        ValueError: if the tree was begun with another spec (other source photos,
            e.g. scikit-image installed or not), or holds files it should not.
    """
    spec = default_spec(seed)
    root = tree_path(work_dir, count, seed)
    stamp = _read_stamp(root)
    if stamp is not None and stamp["spec"] != _spec_json(spec):
        raise ValueError(
            f"{root!r} was generated with {stamp['spec']}, but this run would draw "
            f"from {_spec_json(spec)} (different source photos?): use another "
            f"--work_dir or delete that tree.")
    if stamp and stamp.get("complete") and stamp["stats"]["files"] == count:
        return root
    _write_stamp(root, {"spec": _spec_json(spec), "complete": False})
    for label in range(NUM_CLASSES):
        os.makedirs(os.path.join(root, f"class{label}"), exist_ok=True)
    existing = _existing(root)
    missing = [i for i in range(count) if relpath(i) not in existing]
    siblings = _siblings(work_dir, root, spec)
    to_render = []
    for index in missing:
        path = relpath(index)
        source = next((s for s in siblings if os.path.exists(os.path.join(s, path))), None)
        if source is None:
            to_render.append(index)
        else:
            os.link(os.path.join(source, path), os.path.join(root, path))
    if verbose:
        print(f"{root}: {len(existing)} present, {len(missing) - len(to_render)} linked, "
              f"{len(to_render)} to render", flush=True)
    if to_render:
        _render_all(spec, root, to_render, workers, verbose)
    present = _existing(root)
    if len(present) != count:
        raise ValueError(f"{root!r} holds {len(present)} .jpg files, expected {count}: "
                         f"delete the files that are not photo 0..{count - 1}.")
    _write_stamp(root, {"spec": _spec_json(spec), "complete": True,
                        "stats": tree_stats(root)})
    return root


def _render_all(spec: PhotoSpec, root: str, indices: list[int], workers: int | None,
                verbose: bool) -> None:
    tmp_dir = root + ".tmp"
    os.makedirs(tmp_dir, exist_ok=True)
    start = last_report = time.monotonic()
    done = 0
    if len(indices) < _POOL_THRESHOLD:
        _init_worker(spec, root, tmp_dir)
        _write_chunk(indices)
        done = len(indices)
    else:
        # Spawned, not forked: callers may have TensorFlow's threads running.
        context = multiprocessing.get_context("spawn")
        with context.Pool(workers or os.cpu_count(), _init_worker,
                          (spec, root, tmp_dir)) as pool:
            for files, _ in pool.imap_unordered(_write_chunk, _chunks(indices, _CHUNK)):
                done += files
                now = time.monotonic()
                if verbose and (now - last_report > 30 or done == len(indices)):
                    rate = done / (now - start)
                    print(f"  {done}/{len(indices)} rendered, {rate:.0f} files/s, "
                          f"{(len(indices) - done) / rate / 60:.1f} min left", flush=True)
                    last_report = now
    os.rmdir(tmp_dir)
    if verbose:
        elapsed = time.monotonic() - start
        print(f"rendered {done} files in {elapsed:.0f} s ({done / elapsed:.0f} files/s)",
              flush=True)


def tree_stats(root: str, max_headers: int = 2000) -> dict:
    """File sizes of every photo under ``root``; pixel sizes of the first ``max_headers``."""
    names = sorted(_existing(root))
    sizes = [os.path.getsize(os.path.join(root, name)) for name in names]
    longer, pixels = [], []
    for name in names[:max_headers]:
        with Image.open(os.path.join(root, name)) as image:  # Reads the header only.
            longer.append(max(image.size))
            pixels.append(image.size[0] * image.size[1])
    kb = [s / 1000 for s in sizes]
    return {
        "files": len(sizes),
        "total_gb": round(sum(sizes) / 1e9, 3),
        "mean_kb": round(statistics.fmean(kb), 1) if kb else None,
        "median_kb": round(statistics.median(kb), 1) if kb else None,
        "min_kb": round(min(kb), 1) if kb else None,
        "max_kb": round(max(kb), 1) if kb else None,
        "mean_megapixels": round(statistics.fmean(pixels) / 1e6, 3) if pixels else None,
        "longer_side_px_min_max": [min(longer), max(longer)] if longer else None,
        "pixel_stats_over_files": len(pixels),
        "kb": "1000 bytes",
    }


def describe(root: str) -> dict:
    """The spec and stats saved beside a complete tree (for benchmark reports)."""
    stamp = _read_stamp(root)
    if not stamp or not stamp.get("complete"):
        raise ValueError(f"No complete photo tree at {root!r}: run ensure_photos first.")
    return {"tree": root, "generator": "scripts/sample_photos.py", **stamp}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None,
                        help="Generation processes (default: one per core).")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    root = ensure_photos(args.work_dir, args.count, args.seed, args.workers, verbose=True)
    json.dump(describe(root), sys.stdout, indent=2, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
