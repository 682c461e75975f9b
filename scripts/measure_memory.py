"""Peak memory of the image job at 1x and 10x input: is it flat in data size?

Writes N and 10N small real-photo crops (random windows of scikit-learn's two sample
photos, 48-96 px, as JPEG) and runs ``python -m pipelines.images`` on each as a
subprocess, sampling the resident set size of the job and all its child processes
every 50 ms. Prints a table and writes JSON.

Usage: python scripts/measure_memory.py [--base 2000] [--out docs/benchmarks/memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil


def write_crops(root: str, count: int, seed: int = 0) -> None:
    """``count`` JPEG crops, 48-96 px, in 10 class folders."""
    import tensorflow as tf
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    rng = np.random.default_rng(seed)
    for i in range(count):
        photo = photos[i % len(photos)]
        h, w = (int(x) for x in rng.integers(48, 97, 2))
        top = int(rng.integers(0, photo.shape[0] - h))
        left = int(rng.integers(0, photo.shape[1] - w))
        folder = os.path.join(root, f"class{i % 10}")
        os.makedirs(folder, exist_ok=True)
        tf.io.write_file(os.path.join(folder, f"{i:06d}.jpg"), tf.io.encode_jpeg(
            np.ascontiguousarray(photo[top:top + h, left:left + w]), quality=90))


def peak_rss(command: list[str]) -> tuple[int, float]:
    """(peak total RSS in bytes over the process tree, wall seconds) of ``command``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    start = time.monotonic()
    process = psutil.Popen(command, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        total = 0
        try:
            for p in [process, *process.children(recursive=True)]:
                total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
        peak = max(peak, total)
        time.sleep(0.05)
    if process.returncode != 0:
        raise RuntimeError(f"{command} failed: {process.stderr.read().decode()[-2000:]}")
    return peak, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=2000, help="Images at 1x.")
    parser.add_argument("--factor", type=int, default=10)
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--out", default="docs/benchmarks/memory.json")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as work:
        for count in (args.base, args.base * args.factor):
            root = os.path.join(work, f"in{count}")
            write_crops(root, count)
            command = [sys.executable, "-m", "pipelines.images", f"--input={root}",
                       f"--output_dir={os.path.join(work, f'out{count}')}",
                       f"--image_size={args.image_size}"]
            peak, wall = peak_rss(command)
            results.append({"images": count, "peak_rss_mib": round(peak / 2**20, 1),
                            "wall_s": round(wall, 1)})
            print(f"{count:>7} images: peak RSS {peak / 2**20:8.1f} MiB, {wall:6.1f} s")
    growth = results[1]["peak_rss_mib"] / results[0]["peak_rss_mib"]
    print(f"peak RSS ratio {args.factor}x input: {growth:.2f}")
    report = {"date": time.strftime("%Y-%m-%d"), "cpu_cores": os.cpu_count(),
              "machine": platform.machine(), "image_size": args.image_size,
              "runner": "default (FnApiRunner, in_memory)", "runs": results,
              "peak_rss_ratio": round(growth, 3)}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
