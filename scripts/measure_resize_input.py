"""What the image job's resize costs from the decoded uint8 pixels, against the same
resize from a float32 copy of them (what ``tf.image.resize`` makes first), per photo.

Each JPEG is decoded as the job decodes it (``etl.images.codec.decode_rgb``, at the
DCT scale for ``--image_size``); then the job's ops after the decode
(``codec.finish_pixels``: resize, EXIF turn, centre crop) run on the uint8 pixels,
as the job does, and on a float32 copy of them, as it did before ``ScaleAndTranslate``
was given the pixels themselves. Reported: whether the two are equal bit for bit on
every photo, and one core's CPU time per photo for each (median and best of
``--rounds`` rounds, each timing the two back to back on every photo; the decode is
outside the timed calls).

Usage:
    python scripts/measure_resize_input.py --input /work/bench_data/photos_20000 \\
        --max_photos 1000 --out docs/benchmarks/resize_input.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from bench_common import add_photo_folder_flags, code_commit, machine, photo_files, write_json

from etl.images import codec
from pipelines.images import run_ops_on_one_thread_each

VARIANTS = ("uint8", "float32_copy")


def make_finish(size: int, variant: str) -> tf.types.experimental.ConcreteFunction:
    """The job's ops after the decode, on the pixels (``uint8``) or on a float32 copy."""
    def finish(image: tf.Tensor, data: tf.Tensor, source: tf.Tensor, ratio: tf.Tensor
               ) -> tf.Tensor:
        pixels = image if variant == "uint8" else tf.cast(image, tf.float32)
        return codec.finish_pixels(pixels, data, size, source_shape=source, ratio=ratio)[0]
    return tf.function(finish, autograph=False).get_concrete_function(
        tf.TensorSpec([None, None, 3], tf.uint8), tf.TensorSpec([], tf.string),
        tf.TensorSpec([2], tf.int32), tf.TensorSpec([], tf.int32))


def main() -> None:
    run_ops_on_one_thread_each()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_photo_folder_flags(parser, max_photos=1000, rounds=5)
    args = parser.parse_args()

    photos = []
    for path in photo_files(parser, args):
        with open(path, "rb") as f:
            data = tf.constant(f.read())
        image = codec.decode_rgb(data, image_size=args.image_size)
        source, ratio = codec.source_geometry(data, image, args.image_size)
        photos.append((image, data, source, ratio))
    finish = {v: make_finish(args.image_size, v) for v in VARIANTS}

    identical = all(np.array_equal(*(finish[v](*photo).numpy() for v in VARIANTS))
                    for photo in photos)
    # Photo by photo, the two variants back to back (the first one alternating), so
    # that a shared VM's slow spells, which last seconds, hit both alike.
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        spent = dict.fromkeys(VARIANTS, 0.0)
        for i, photo in enumerate(photos):
            for variant in VARIANTS[i % 2:] + VARIANTS[:i % 2]:
                start = time.process_time()
                finish[variant](*photo).numpy()
                spent[variant] += time.process_time() - start
        for variant in VARIANTS:
            cpu[variant].append(1000 * spent[variant] / len(photos))

    pixels = statistics.fmean(int(np.prod(photo[0].shape)) for photo in photos)
    result = {v: {"median_ms": statistics.median(cpu[v]), "best_ms": min(cpu[v]),
                  "rounds_ms": cpu[v]} for v in VARIANTS}
    saved = 1 - result["uint8"]["median_ms"] / result["float32_copy"]["median_ms"]
    print(f"{len(photos)} photos from {args.input}, decoded to {pixels / 1e6:.2f} MB of "
          f"pixels on average; image_size {args.image_size}; bit-identical: {identical}")
    for variant in VARIANTS:
        print(f"  {variant:<13} {result[variant]['median_ms']:.3f} ms per photo "
              f"(best {result[variant]['best_ms']:.3f})")
    print(f"  uint8 saves {100 * saved:.1f} % of the finish ops' CPU time")
    if args.out:
        write_json(args.out, {
            "date": time.strftime("%Y-%m-%d"), "commit": code_commit(),
            "machine": machine(), "input": args.input, "photos": len(photos),
            "mean_decoded_bytes": pixels, "image_size": args.image_size,
            "rounds": args.rounds, "bit_identical": identical, "cpu_ms_per_photo": result,
            "saved_fraction": saved})
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
