"""Benchmark JPEGs from real sample photos in 10 class folders: web-size or camera-size.

Two kinds of tree, drawn from the same source photos: scikit-learn's two sample
photos (``load_sample_images``, 427x640) and, when scikit-image is installed, its
bundled photos (``skimage.data``). File ``i`` of a tree is
``class{i % 10}/{i:06d}.jpg``, drawn from its own generator seeded with
``(seed, i)``, so the first N files of any tree of a kind are the same N files: a
tree of N photos is ``<work_dir>/<kind>_<N>``, and files that a sibling tree of the
same kind already holds are hard-linked from it, not rendered again.

``web`` (``photos_<N>``, :func:`ensure_photos`): a random window (aspect ratio
log-uniform in 1:2 .. 2:1, 25-90 % of the largest such window) of a source photo,
resized (bicubic) so that its longer side is log-uniform in 320-1280 px, mirrored
half of the time, saved by Pillow as JPEG quality 90. With seed 0 and
scikit-learn's photos only, the 200,000-photo tree measured: mean 65.0 KB, median
50.6 KB, 3.1-337 KB per file (KB = 1000 bytes), 0.41 megapixels on average, 13.0 GB
in all (its first 2,000 / 20,000 files: mean 65.0 / 64.5 KB). Generation: about
150-185 files/s on 2 cores, so 200,000 in about 20 minutes.

``camera12`` / ``camera24`` (``camera12_<N>``, ``camera24_<N>``,
:func:`ensure_camera_photos`): what a phone or camera writes, 12 MP (4032x3024) or
24 MP (6000x4000): a random window of a source photo at the output's aspect (50-100 %
of the largest one), upscaled (bicubic), mirrored half of the time, plus sensor-like
noise (Gaussian, drawn at half resolution with sigma 6 levels shared by the
channels plus 3 per channel, then upscaled bilinearly, as demosaicing and noise
reduction leave it: about 4 levels per pixel and channel), saved by Pillow as JPEG
quality 92 with an EXIF block (Make, Model, Orientation). Without the noise the
upscaled content is smooth and a 12 MP file is 0.6-0.9 MB; with it (seed 0,
scikit-learn's photos) a 12 MP file is about 2.2-2.5 MB and a 24 MP one about
4.3-4.8 MB. Photo ``i`` is stored portrait (3024x4032) when ``i % 5 == 1``, and
when ``i % 4 == 3`` carries EXIF orientation 6 (its pixels are the upright scene
turned 90 degrees counter-clockwise, as a phone held upright stores it); the others
carry orientation 1. Generation: about 0.5 s per 12 MP photo and 1 s per 24 MP one
on one core.

The stats of every tree are printed and saved in ``<tree>.json``. Generation runs
on a process pool, skips files that exist and can be stopped and resumed at any
point (each file is written under a temporary name and renamed into place).

Usage: nice -n 19 python scripts/benchmarks/sample_photos.py --work_dir /work/bench_data \\
           --count 200000 [--photos web|camera12|camera24]
       (then --count 20000 and --count 2000 link their files from that tree)

From another script::

    from scripts.benchmarks.sample_photos import ensure_camera_photos, ensure_photos, ensure_tree
    root = ensure_photos("/work/bench_data", 2000)  # -> /work/bench_data/photos_2000
    root = ensure_camera_photos("/work/bench_data", 120, 12)  # -> .../camera12_120
    root = ensure_tree("/work/bench_data", 120, "camera24")  # -> .../camera24_120
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
from typing import ClassVar

import numpy as np
from PIL import Image, ImageChops

NUM_CLASSES = 10
# scikit-image photos read from the package itself (none needs a download).
_SKIMAGE_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket")
# The kinds of tree, by the name the command-line flags use.
KINDS = ("web", "camera12", "camera24")
# Camera sizes by megapixels: (width, height) stored landscape.
CAMERA_SIZES = {12: (4032, 3024), 24: (6000, 4000)}
EXIF_ORIENTATION = 0x0112


@dataclasses.dataclass(frozen=True)
class PhotoSpec:
    """Everything that decides a web-size tree's bytes (recorded beside it)."""

    # Below this many missing files, rendering in this process beats starting a
    # pool; files per pool task.
    pool_threshold: ClassVar[int] = 200
    chunk: ClassVar[int] = 50

    seed: int = 0
    min_long_side: int = 320
    max_long_side: int = 1280
    min_window: float = 0.25
    max_window: float = 0.9
    max_aspect: float = 2.0
    jpeg_quality: int = 90
    sources: tuple[str, ...] = ()

    @property
    def tree_prefix(self) -> str:
        return "photos_"


@dataclasses.dataclass(frozen=True)
class CameraSpec:
    """Everything that decides a camera-size tree's bytes (recorded beside it)."""

    pool_threshold: ClassVar[int] = 2
    chunk: ClassVar[int] = 1

    seed: int = 0
    megapixels: int = 12
    width: int = 4032  # Stored landscape; portrait photos swap the two.
    height: int = 3024
    min_window: float = 0.5
    max_window: float = 1.0
    portrait_every: int = 5  # Photo i is stored portrait when i % 5 == 1.
    rotated_every: int = 4  # Photo i carries EXIF orientation 6 when i % 4 == 3.
    luma_noise: float = 6.0  # Gaussian sigma in levels, shared by the 3 channels.
    chroma_noise: float = 3.0  # Gaussian sigma in levels, per channel.
    noise_scale: int = 2  # Noise is drawn at 1/noise_scale of each side, upscaled.
    jpeg_quality: int = 92
    make: str = "sample_photos"
    model: str = "camera"
    sources: tuple[str, ...] = ()

    @property
    def tree_prefix(self) -> str:
        return f"camera{self.megapixels}_"


Spec = PhotoSpec | CameraSpec


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


def default_spec(seed: int = 0, kind: str = "web") -> Spec:
    """The spec of a ``kind`` tree (one of :data:`KINDS`) over the sources found here."""
    sources = tuple(sorted(load_sources()))
    if kind == "web":
        return PhotoSpec(seed=seed, sources=sources)
    megapixels = int(kind.removeprefix("camera")) if kind.startswith("camera") else None
    if megapixels not in CAMERA_SIZES:
        raise ValueError(f"Unknown kind of photos {kind!r}; use one of {KINDS}.")
    width, height = CAMERA_SIZES[megapixels]
    return CameraSpec(seed=seed, megapixels=megapixels, width=width, height=height,
                      sources=sources)


def relpath(index: int) -> str:
    """Path of photo ``index`` inside a tree."""
    return f"class{index % NUM_CLASSES}/{index:06d}.jpg"


def tree_path(work_dir: str, count: int, spec: Spec) -> str:
    suffix = f"_seed{spec.seed}" if spec.seed else ""
    return os.path.join(work_dir, f"{spec.tree_prefix}{count}{suffix}")


def render(sources: Sequence[np.ndarray], spec: Spec, index: int) -> bytes:
    """The JPEG bytes of photo ``index``: deterministic in ``(spec, index)``."""
    if isinstance(spec, CameraSpec):
        return _render_camera(sources, spec, index)
    return _render_web(sources, spec, index)


def _window(rng: np.random.Generator, source: np.ndarray, aspect: float,
            min_window: float, max_window: float) -> np.ndarray:
    """A random window of ``source`` with width / height ``aspect``, its sides
    ``min_window``-``max_window`` of the largest such window's (at least 16 px)."""
    height, width = source.shape[:2]
    window_w = min(width, height * aspect)  # The largest window of that aspect.
    scale = rng.uniform(min_window, max_window)
    w = max(16, round(window_w * scale))
    h = max(16, round(window_w / aspect * scale))
    left = int(rng.integers(0, width - w + 1))
    top = int(rng.integers(0, height - h + 1))
    return source[top:top + h, left:left + w]


def _render_web(sources: Sequence[np.ndarray], spec: PhotoSpec, index: int) -> bytes:
    rng = np.random.default_rng([spec.seed, index])
    source = sources[int(rng.integers(len(sources)))]
    aspect = float(np.exp(rng.uniform(-np.log(spec.max_aspect), np.log(spec.max_aspect))))
    window = _window(rng, source, aspect, spec.min_window, spec.max_window)
    h, w = window.shape[:2]
    long_side = round(float(np.exp(rng.uniform(np.log(spec.min_long_side),
                                               np.log(spec.max_long_side)))))
    size = ((long_side, max(1, round(long_side * h / w))) if w >= h
            else (max(1, round(long_side * w / h)), long_side))
    image = Image.fromarray(window).resize(size, Image.Resampling.BICUBIC)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=spec.jpeg_quality)
    return buffer.getvalue()


def _render_camera(sources: Sequence[np.ndarray], spec: CameraSpec, index: int) -> bytes:
    rng = np.random.default_rng([spec.seed, index])
    source = sources[int(rng.integers(len(sources)))]
    portrait = index % spec.portrait_every == 1
    rotated = index % spec.rotated_every == spec.rotated_every - 1
    stored = (spec.height, spec.width) if portrait else (spec.width, spec.height)
    upright = stored[::-1] if rotated else stored  # (width, height) as displayed.
    window = _window(rng, source, upright[0] / upright[1], spec.min_window,
                     spec.max_window)
    image = Image.fromarray(window).resize(upright, Image.Resampling.BICUBIC)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    if rotated:
        # Orientation 6 means "turn 90 degrees clockwise to display".
        image = image.transpose(Image.Transpose.ROTATE_90)
    image = ImageChops.add(image, _sensor_noise(rng, spec, stored), 1.0, -128)
    exif = Image.Exif()
    exif[0x010F] = spec.make
    exif[0x0110] = spec.model
    exif[EXIF_ORIENTATION] = 6 if rotated else 1
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=spec.jpeg_quality, exif=exif)
    return buffer.getvalue()


def _sensor_noise(rng: np.random.Generator, spec: CameraSpec, size: tuple[int, int]
                  ) -> Image.Image:
    """RGB noise around 128 of ``size`` (width, height): luminance noise shared by
    the channels plus chroma noise per channel, drawn at 1/``noise_scale`` of each
    side and upscaled bilinearly (grain a few pixels wide, not per-pixel)."""
    small = (-(-size[1] // spec.noise_scale), -(-size[0] // spec.noise_scale))
    # + 0.5: the uint8 cast below truncates.
    luma = rng.standard_normal(small, dtype=np.float32) * spec.luma_noise + 128.5
    bands = []
    for _ in range(3):
        band = luma + rng.standard_normal(small, dtype=np.float32) * spec.chroma_noise
        bands.append(Image.fromarray(np.clip(band, 0, 255).astype(np.uint8)).resize(
            size, Image.Resampling.BILINEAR))
    return Image.merge("RGB", bands)


# Per-worker state of the generation pool (set by _init_worker).
_worker: dict = {}


def _init_worker(spec: Spec, root: str, tmp_dir: str) -> None:
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


def _siblings(work_dir: str, root: str, spec: Spec) -> list[str]:
    """Other trees under ``work_dir`` drawn from ``spec``: files to link from."""
    prefix, suffix = spec.tree_prefix, f"_seed{spec.seed}" if spec.seed else ""
    found = []
    for entry in os.scandir(work_dir):
        name = entry.name
        if (entry.is_dir() and entry.path != root and name.startswith(prefix)
                and name.endswith(suffix) and name[len(prefix):len(name) - len(suffix)]
                .isdigit()):
            stamp = _read_stamp(entry.path)
            if stamp and stamp["spec"] == _spec_json(spec):
                found.append(entry.path)
    return found


def _spec_json(spec: Spec) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(spec)))


def _chunks(items: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def ensure_photos(work_dir: str, count: int, seed: int = 0, workers: int | None = None,
                  verbose: bool = False) -> str:
    """Makes the web-size tree ``<work_dir>/photos_<count>`` complete (see
    :func:`ensure_tree`) and returns its path."""
    return ensure_tree(work_dir, count, "web", seed, workers, verbose)


def ensure_camera_photos(work_dir: str, count: int, megapixels: int = 12, seed: int = 0,
                         workers: int | None = None, verbose: bool = False) -> str:
    """Makes the camera-size tree ``<work_dir>/camera<megapixels>_<count>`` complete
    (see :func:`ensure_tree`; ``megapixels`` is 12 or 24) and returns its path."""
    return ensure_tree(work_dir, count, f"camera{megapixels}", seed, workers, verbose)


def ensure_tree(work_dir: str, count: int, kind: str = "web", seed: int = 0,
                workers: int | None = None, verbose: bool = False) -> str:
    """Makes the ``kind`` tree of ``count`` photos under ``work_dir`` complete and
    returns its path (``photos_<count>``, ``camera12_<count>``, ...).

    Files already there are kept; missing ones are hard-linked from a sibling tree of
    the same spec that has them, else rendered on ``workers`` processes (default: one
    per core). Writes ``<tree>.json``: the spec and the tree's file-size stats.

    Raises:
        ValueError: for a ``kind`` not in :data:`KINDS`; if the tree was begun with
            another spec (other source photos, e.g. scikit-image installed or not),
            or holds files it should not.
    """
    spec = default_spec(seed, kind)
    root = tree_path(work_dir, count, spec)
    stamp = _read_stamp(root)
    if stamp is not None and stamp["spec"] != _spec_json(spec):
        raise ValueError(
            f"{root!r} was generated with {stamp['spec']}, but this run would draw "
            f"from {_spec_json(spec)} (different source photos or settings?): use another "
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


def _render_all(spec: Spec, root: str, indices: list[int], workers: int | None,
                verbose: bool) -> None:
    tmp_dir = root + ".tmp"
    os.makedirs(tmp_dir, exist_ok=True)
    start = last_report = time.monotonic()
    done = 0
    if len(indices) < spec.pool_threshold:
        _init_worker(spec, root, tmp_dir)
        _write_chunk(indices)
        done = len(indices)
    else:
        # Spawned, not forked: callers may have TensorFlow's threads running.
        context = multiprocessing.get_context("spawn")
        with context.Pool(workers or os.cpu_count(), _init_worker,
                          (spec, root, tmp_dir)) as pool:
            for files, _ in pool.imap_unordered(_write_chunk, _chunks(indices, spec.chunk)):
                done += files
                now = time.monotonic()
                if verbose and (now - last_report > 30 or done == len(indices)):
                    rate = done / (now - start)
                    print(f"  {done}/{len(indices)} rendered, {rate:.1f} files/s, "
                          f"{(len(indices) - done) / rate / 60:.1f} min left", flush=True)
                    last_report = now
    os.rmdir(tmp_dir)
    if verbose:
        elapsed = time.monotonic() - start
        print(f"rendered {done} files in {elapsed:.1f} s ({done / elapsed:.2f} files/s)",
              flush=True)


def tree_stats(root: str, max_headers: int = 2000) -> dict:
    """File sizes of every photo under ``root``; pixel sizes and EXIF orientations
    of the first ``max_headers``."""
    names = sorted(_existing(root))
    sizes = [os.path.getsize(os.path.join(root, name)) for name in names]
    longer, pixels, portrait = [], [], 0
    orientations: dict[str, int] = {}
    for name in names[:max_headers]:
        with Image.open(os.path.join(root, name)) as image:  # Reads the header only.
            longer.append(max(image.size))
            pixels.append(image.size[0] * image.size[1])
            portrait += image.size[1] > image.size[0]
            orientation = image.getexif().get(EXIF_ORIENTATION)
            if orientation is not None:
                orientations[str(orientation)] = orientations.get(str(orientation), 0) + 1
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
        "stored_portrait_files": portrait,
        "exif_orientation_files": orientations,
        "pixel_stats_over_files": len(pixels),
        "kb": "1000 bytes",
    }


def describe(root: str) -> dict:
    """The spec and stats saved beside a complete tree (for benchmark reports)."""
    stamp = _read_stamp(root)
    if not stamp or not stamp.get("complete"):
        raise ValueError(f"No complete photo tree at {root!r}: run ensure_photos first.")
    return {"tree": root, "generator": "scripts/benchmarks/sample_photos.py", **stamp}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--photos", choices=KINDS, default="web",
                        help="web: 320-1280 px, ~65 KB; camera12 / camera24: 12 / 24 "
                             "megapixels, ~2.3 / ~4.5 MB, 1 in 4 with EXIF orientation 6.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None,
                        help="Generation processes (default: one per core).")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    root = ensure_tree(args.work_dir, args.count, args.photos, args.seed, args.workers,
                       verbose=True)
    json.dump(describe(root), sys.stdout, indent=2, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
