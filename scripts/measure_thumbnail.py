"""What the perceptual hash's 32 x 32 thumbnail costs per photo in the image job, and
what the well-kept alternatives to TensorFlow's area resize would cost instead.

Photos are read, decoded and finished as the job does (``etl.images.batches``:
``load_record``, ``decode_batch``, ``FinishImages``), in batches of 32, TensorFlow
on one thread per op as in the job. Timed per photo, each method alternating with
the others batch by batch and round by round (medians over the rounds):

* ``in_finish_graph``: ``FinishImages`` with thumbnails less ``FinishImages``
  without them (zeros): the thumbnail as the job pays for it, inside the finish
  graph's map (``codec.hash_thumbnail``: ``ResizeArea``, then luma);
* ``pixels_out_of_map``: what a ``tf.map_fn`` over a batch pays to return each
  224 px image, which every method outside the graph needs first;
* outside the graph, on the stored 224 px images (decoded back from the job's
  output, the same shape and content): ``tf_resize_area`` (``hash_thumbnail`` on
  the batch), ``opencv_area`` (``cv2.resize(..., INTER_AREA)``, then luma),
  ``opencv_gray_then_area`` (``cv2.cvtColor`` to gray, then ``INTER_AREA``),
  ``pillow_reduce`` (``Image.reduce(7)``, then luma) and ``numpy_cells`` (integer
  sums of 7 x 7 cells). OpenCV's are left out when ``cv2`` is not importable (it is
  not a dependency: ``pip install opencv-python-headless`` to include them).

Each method's thumbnails are compared with an independent float64 reference (each
cell's mean, then ITU-R 601 luma, rounded): the largest difference in levels.

Usage:
    python scripts/measure_thumbnail.py --input /work/bench_data/photos_20000 \\
        --max_photos 640 --rounds 7 --out docs/benchmarks/thumbnail.json
"""

from __future__ import annotations

import argparse
import datetime
import io
import statistics
import time
from collections.abc import Callable

import numpy as np
from bench_common import add_photo_folder_flags, code_commit, machine, photo_files, write_json
from PIL import Image

from etl.images import batches, codec, loading
from etl.images.preprocessing import ImagePreprocessing
from etl.images.sources import ImageRecord

BATCH = 32
LUMA = np.array([0.299, 0.587, 0.114])


def reference(pixels: np.ndarray) -> np.ndarray:
    """The thumbnail by its definition, in float64: each cell's mean, then luma."""
    cell = pixels.shape[0] // codec.HASH_THUMBNAIL_SIZE
    side = codec.HASH_THUMBNAIL_SIZE
    means = pixels.astype(np.float64).reshape(side, cell, side, cell, 3).mean((1, 3))
    return np.clip(np.round(means @ LUMA), 0, 255).astype(np.uint8)


def _luma(small: np.ndarray) -> np.ndarray:
    return np.clip(np.round(small @ LUMA), 0, 255).astype(np.uint8)


def outside_methods() -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """``[n, s, s, 3]`` stored images → ``[n, 32, 32]`` thumbnails, per method."""
    import tensorflow as tf

    side = codec.HASH_THUMBNAIL_SIZE
    area = tf.function(codec.hash_thumbnail, autograph=False)

    def numpy_cells(images: np.ndarray) -> np.ndarray:
        n, size = len(images), images.shape[1]
        cell = size // side
        rows = images.reshape(n, side, cell, size * 3).sum(2, dtype=np.uint32)
        cells = rows.reshape(n, side, side, cell, 3).sum(3)
        return _luma(cells / (cell * cell))

    def pillow_reduce(images: np.ndarray) -> np.ndarray:
        cell = images.shape[1] // side
        return np.stack([_luma(np.asarray(Image.fromarray(image).reduce(cell)))
                         for image in images])

    methods = {"tf_resize_area": lambda images: area(tf.constant(images)).numpy(),
               "pillow_reduce": pillow_reduce, "numpy_cells": numpy_cells}
    try:
        import cv2
    except ImportError:
        return methods
    cv2.setNumThreads(1)
    methods["opencv_area"] = lambda images: np.stack([
        _luma(cv2.resize(image, (side, side), interpolation=cv2.INTER_AREA))
        for image in images])
    methods["opencv_gray_then_area"] = lambda images: np.stack([
        cv2.resize(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY), (side, side),
                   interpolation=cv2.INTER_AREA) for image in images])
    return methods


def map_returning_pixels() -> Callable[[np.ndarray, bool], np.ndarray]:
    """A ``tf.map_fn`` over a batch that returns each image, or a zero thumbnail."""
    import tensorflow as tf

    side = codec.HASH_THUMBNAIL_SIZE

    def make(keep: bool) -> Callable:
        def one(image: tf.Tensor) -> tf.Tensor:
            return tf.identity(image) if keep else tf.zeros([side, side], tf.uint8)

        def run(images: tf.Tensor) -> tf.Tensor:
            spec = (tf.TensorSpec(images.shape[1:], tf.uint8) if keep
                    else tf.TensorSpec([side, side], tf.uint8))
            return tf.map_fn(one, images, fn_output_signature=spec)

        return tf.function(run, autograph=False)

    graphs = {True: make(True), False: make(False)}
    return lambda images, keep: graphs[keep](tf.constant(images)).numpy()


def _opencv_version() -> str | None:
    try:
        import cv2
    except ImportError:
        return None
    return cv2.__version__


def timed(fn: Callable[..., object], *args: object) -> float:
    """CPU seconds of ``fn(*args)``."""
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_photo_folder_flags(parser, max_photos=640, rounds=7)
    args = parser.parse_args()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    limits = loading.InputLimits()
    loaded = [batches.load_record(ImageRecord(key=path, uri=path, label=""), limits,
                                  args.image_size) for path in photo_files(parser, args)]
    photos = [item for item in loaded if isinstance(item, batches.Loaded) and item.jpeg]
    groups = [batches.decode_batch(photos[i:i + BATCH], True)
              for i in range(0, len(photos), BATCH)]
    groups = [[item for item in group if isinstance(item, batches.Loaded) and item.pixels]
              for group in groups]
    config = ImagePreprocessing(image_size=args.image_size)
    finish = {True: batches.FinishImages(config, thumbnails=True),
              False: batches.FinishImages(config, thumbnails=False)}
    inputs = [([item.pixels for item in group], [item.data for item in group])
              for group in groups]
    stored = [np.stack([np.asarray(Image.open(io.BytesIO(done.stored)).convert("RGB"))
                        for done in finish[False](*batch)]) for batch in inputs]
    methods = outside_methods()
    pixels_out = map_returning_pixels()
    samples: dict[str, list[float]] = {}

    def sample(name: str, seconds: float, images: int) -> None:
        if r >= 0:  # round -1 warms every graph up for every batch shape
            samples.setdefault(name, []).append(seconds)
            samples.setdefault(f"{name}:photos", []).append(images)

    for r in range(-1, args.rounds):
        for b, (batch, images) in enumerate(zip(inputs, stored, strict=True)):
            n = len(images)
            order = (True, False) if (b + r) % 2 == 0 else (False, True)
            spent = {keep: timed(finish[keep], *batch) for keep in order}
            sample("finish_with_thumbnails", spent[True], n)
            sample("finish_without", spent[False], n)
            sample("map_returning_pixels", timed(pixels_out, images, True), n)
            sample("map_returning_zeros", timed(pixels_out, images, False), n)
            order = list(methods)
            for name in order[r % len(order):] + order[:r % len(order)]:
                sample(name, timed(methods[name], images), n)

    def per_photo_rounds(name: str) -> list[float]:
        """ms per photo of each round (the batches of a round summed)."""
        per_round = len(inputs)
        seconds, photos_n = samples[name], samples[f"{name}:photos"]
        return [1000 * sum(seconds[i:i + per_round]) / sum(photos_n[i:i + per_round])
                for i in range(0, len(seconds), per_round)]

    rounds = {name: per_photo_rounds(name) for name in samples if ":" not in name}
    diff = {name: [a - b for a, b in zip(rounds[x], rounds[y], strict=True)]
            for name, (x, y) in {
                "in_finish_graph": ("finish_with_thumbnails", "finish_without"),
                "pixels_out_of_map": ("map_returning_pixels", "map_returning_zeros")}.items()}
    costs = {name: {"median_ms": statistics.median(values), "rounds_ms": values}
             for name, values in {**diff, **{m: rounds[m] for m in methods}}.items()}
    agreement = {name: int(max(np.abs(fn(images).astype(int) - np.stack(
        [reference(image) for image in images]).astype(int)).max() for images in stored))
        for name, fn in methods.items()}
    for name, cost in costs.items():
        extra = f"  max diff from reference {agreement[name]}" if name in agreement else ""
        print(f"{name:24s} {cost['median_ms']:.4f} ms per photo{extra}")
    if args.out:
        write_json(args.out, {"what": __doc__.splitlines()[0],
                              "date": datetime.date.today().isoformat(),
                              "machine": machine(), "code": code_commit(),
                              "input": args.input, "image_size": args.image_size,
                              "photos": sum(len(images) for images in stored),
                              "rounds": args.rounds, "cost_per_photo": costs,
                              "max_level_difference_from_reference": agreement,
                              "opencv": _opencv_version()})


if __name__ == "__main__":
    main()
