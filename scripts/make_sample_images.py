"""Writes the demo's sample: scikit-learn's handwritten digits as an ImageFolder tree.

1,797 real 8x8 grayscale scans of the digits 0-9 (shipped inside scikit-learn, no
download), written as PNG files to ``<out>/<digit>/digit-NNNN.png``.

Usage: python scripts/make_sample_images.py <out_dir> [--limit N]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from sklearn.datasets import load_digits

from pipelines.quiet_start import import_tensorflow_quietly


def write_digits(out_dir: str, limit: int | None = None) -> int:
    """Writes the digits (optionally the first ``limit``) and returns how many."""
    import_tensorflow_quietly()  # The demo prints no TensorFlow start-up lines.
    import tensorflow as tf

    digits = load_digits()
    images = digits.images[:limit] if limit else digits.images
    for i, (pixels, target) in enumerate(zip(images, digits.target, strict=False)):
        # Values are 0..16 (ink level); scale to 0..255 and invert to dark-on-light.
        gray = (255 - np.round(pixels * 255.0 / 16.0)).astype(np.uint8)[..., None]
        class_dir = os.path.join(out_dir, str(int(target)))
        os.makedirs(class_dir, exist_ok=True)
        tf.io.write_file(os.path.join(class_dir, f"digit-{i:04d}.png"),
                         tf.io.encode_png(gray))
    return len(images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    count = write_digits(args.out_dir, args.limit)
    print(f"Wrote {count} digit images under {args.out_dir}")


if __name__ == "__main__":
    main()
