"""Which IDCT the reader decodes stored JPEGs with: fast vs accurate, cost and fidelity.

Builds --num_records stored records the way the image job writes them: random square
crops of scikit-learn's two sample photos (427 × 640), resized to --size px (bilinear
with antialiasing, as the job resizes) and encoded with
``tf.io.encode_jpeg(format="rgb", quality=--jpeg_quality)`` (4:2:0 chroma). Then, for
each ``dct_method`` of ``tf.io.decode_jpeg`` ("" is libjpeg's default):

  (a) throughput: the reader's decode (a batch of --batch_size strings decoded image by
      image with ``tf.map_fn``, as ``reader.decoding.decode_images_fn`` does) in a
      tf.data map with one call per core and the autotuner off, over --rounds rounds
      interleaving the methods; median and best images/s and the process's CPU µs
      per image; and CPU µs per image on one core (the same decode, unbatched,
      one image at a time on one thread);
  (b) fidelity: PSNR of each decode against the pixels before encoding (mean and
      minimum over records), and how far the decodes are from each other.

``reader.contract.STORED_JPEG_DCT_METHOD`` is recorded beside the figures.

Usage: python scripts/measure_reader_idct.py [--num_records 300] [--rounds 5] \\
           [--out docs/benchmarks/reader_idct.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf
from bench_common import code_commit, interleaved, machine, write_json
from sklearn.datasets import load_sample_images

from reader import contract

CORES = os.cpu_count() or 1
FAST = "INTEGER_FAST"
ACCURATE = "INTEGER_ACCURATE"
DEFAULT = ""  # libjpeg's default, what tf.io.decode_image uses.
DCT_METHODS: tuple[str, ...] = (FAST, ACCURATE, DEFAULT)


def label(dct_method: str) -> str:
    """The name a method goes by in the results ("" is libjpeg's default)."""
    return dct_method or "default"


def stored_records(num_records: int, size: int, quality: int, seed: int
                   ) -> tuple[list[np.ndarray], list[bytes]]:
    """(pixels before encoding, stored JPEG bytes) of ``num_records`` photo crops.

    Each crop is a random square of side in ``[size, shorter side]`` at a random place
    in one of the sample photos, so the stored image is a downscale, as a photo's is.
    """
    rng = np.random.default_rng(seed)
    photos = load_sample_images().images
    pixels, jpegs = [], []
    for _ in range(num_records):
        photo = photos[rng.integers(len(photos))]
        height, width = photo.shape[:2]
        side = int(rng.integers(size, min(height, width) + 1))
        top = int(rng.integers(height - side + 1))
        left = int(rng.integers(width - side + 1))
        crop = tf.constant(photo[top:top + side, left:left + side])
        resized = tf.image.resize(crop, [size, size], method="bilinear", antialias=True)
        image = tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)
        pixels.append(image.numpy())
        jpegs.append(tf.io.encode_jpeg(image, format="rgb", quality=quality).numpy())
    return pixels, jpegs


def decode_all(jpegs: list[bytes], dct_method: str) -> np.ndarray:
    """``uint8 [n, size, size, 3]``: every record decoded with ``dct_method``."""
    return np.stack([tf.io.decode_jpeg(data, channels=3, dct_method=dct_method).numpy()
                     for data in jpegs])


def psnr(decoded: np.ndarray, original: np.ndarray) -> np.ndarray:
    """PSNR in dB of each image in ``decoded`` against ``original`` (``[n, h, w, 3]``)."""
    diff = decoded.astype(np.float64) - original.astype(np.float64)
    mse = np.mean(diff * diff, axis=(1, 2, 3))
    return 10.0 * np.log10(255.0 ** 2 / np.maximum(mse, 1e-12))


def decode_pipeline(jpegs: tf.Tensor, dct_method: str, size: int, batch_size: int
                    ) -> tf.data.Dataset:
    """The reader's JPEG decode of batches of ``jpegs``, one map call per core."""
    def decode(batch: tf.Tensor) -> tf.Tensor:
        return tf.map_fn(
            lambda x: tf.io.decode_jpeg(x, channels=3, dct_method=dct_method), batch,
            fn_output_signature=tf.TensorSpec([size, size, 3], tf.uint8),
            parallel_iterations=16)

    options = tf.data.Options()
    options.autotune.enabled = False
    return (tf.data.Dataset.from_tensor_slices(jpegs)
            .batch(batch_size)
            .map(decode, num_parallel_calls=CORES, deterministic=False)
            .prefetch(2)
            .with_options(options))


def one_core_pipeline(jpegs: tf.Tensor, dct_method: str) -> tf.data.Dataset:
    """The same decode image by image on one thread: its CPU time is one core's."""
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.map_parallelization = False
    options.threading.private_threadpool_size = 1
    return (tf.data.Dataset.from_tensor_slices(jpegs)
            .map(lambda x: tf.io.decode_jpeg(x, channels=3, dct_method=dct_method))
            .batch(1)
            .with_options(options))


def timed_pass(dataset: tf.data.Dataset) -> tuple[int, float, float]:
    """(images, wall seconds, process CPU seconds) of one full pass over ``dataset``."""
    images = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for batch in dataset:
        images += int(batch.shape[0])
    return images, time.perf_counter() - wall, time.process_time() - cpu


def throughput(jpegs: list[bytes], size: int, batch_size: int, rounds: int,
               passes: int) -> dict[str, Any]:
    """Images/s (median, best) and CPU µs per image of each method's decode."""
    tensor = tf.constant(jpegs)
    datasets = {method: decode_pipeline(tensor, method, size, batch_size)
                for method in DCT_METHODS}
    one_core = {method: one_core_pipeline(tensor, method) for method in DCT_METHODS}
    for dataset in [*datasets.values(), *one_core.values()]:  # Warm-up.
        timed_pass(dataset)
    rates: dict[str, list[float]] = {method: [] for method in DCT_METHODS}
    cpu_us: dict[str, list[float]] = {method: [] for method in DCT_METHODS}
    one_core_us: dict[str, list[float]] = {method: [] for method in DCT_METHODS}
    for _, method in interleaved(DCT_METHODS, rounds):
        images, wall, cpu, one_cpu = 0, 0.0, 0.0, 0.0
        for _ in range(passes):
            n, w, c = timed_pass(datasets[method])
            images, wall, cpu = images + n, wall + w, cpu + c
            one_cpu += timed_pass(one_core[method])[2]
        rates[method].append(images / wall)
        cpu_us[method].append(1e6 * cpu / images)
        one_core_us[method].append(1e6 * one_cpu / images)
    by_method = {label(method): {
        "images_per_second_median": round(statistics.median(rates[method]), 1),
        "images_per_second_best": round(max(rates[method]), 1),
        "cpu_us_per_image_median": round(statistics.median(cpu_us[method]), 1),
        "one_core_us_per_image_median": round(statistics.median(one_core_us[method]), 1),
        "one_core_us_per_image_best": round(min(one_core_us[method]), 1),
        "images_per_second_rounds": [round(r, 1) for r in rates[method]],
    } for method in DCT_METHODS}
    # Paired within a round, so slow drifts in other load cancel out.
    ratios = [a / f for a, f in zip(one_core_us[ACCURATE], one_core_us[FAST], strict=True)]
    return {"by_method": by_method,
            "accurate_over_fast_one_core_us_median": round(statistics.median(ratios), 3)}


def fidelity(pixels: list[np.ndarray], jpegs: list[bytes]) -> dict[str, Any]:
    """PSNR of each method against the pre-encode pixels, and the methods' differences."""
    original = np.stack(pixels)
    decoded = {method: decode_all(jpegs, method) for method in DCT_METHODS}
    per_method = {}
    for method in DCT_METHODS:
        values = psnr(decoded[method], original)
        per_method[label(method)] = {"psnr_db_mean": round(float(values.mean()), 3),
                              "psnr_db_min": round(float(values.min()), 3)}
    fast = decoded[FAST].astype(np.int16)
    accurate = decoded[ACCURATE].astype(np.int16)
    gain = psnr(decoded[ACCURATE], original) - psnr(decoded[FAST], original)
    stored_decode = np.stack([
        contract.decode_stored_image(tf.constant(data), contract.JPEG, original.shape[1])
        .numpy() for data in jpegs])
    return {
        "by_method": per_method,
        "accurate_minus_fast_psnr_db": {
            "mean": round(float(gain.mean()), 3), "min": round(float(gain.min()), 3),
            "records_where_accurate_is_closer": int((gain > 0).sum())},
        "fast_vs_accurate": {
            "max_abs_diff": int(np.abs(fast - accurate).max()),
            "mean_abs_diff": round(float(np.abs(fast - accurate).mean()), 4),
            "fraction_of_values_differing": round(float((fast != accurate).mean()), 4)},
        "default_equals_fast_bit_for_bit": bool(np.array_equal(decoded[DEFAULT],
                                                               decoded[FAST])),
        "decode_stored_image_equals": [method for method in (FAST, ACCURATE)
                                       if np.array_equal(stored_decode, decoded[method])],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_records", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=4,
                        help="passes over the records per timed sample")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--jpeg_quality", type=int, default=95)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="docs/benchmarks/reader_idct.json")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    pixels, jpegs = stored_records(args.num_records, args.size, args.jpeg_quality,
                                   args.seed)
    quality = fidelity(pixels, jpegs)
    speed = throughput(jpegs, args.size, args.batch_size, args.rounds, args.passes)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "code_commit": code_commit(),
        "data": {"records": args.num_records, "image_size": args.size,
                 "jpeg_quality": args.jpeg_quality, "chroma": "4:2:0",
                 "mean_record_bytes": round(sum(map(len, jpegs)) / len(jpegs)),
                 "source": "random square crops (side in [size, 427]) of scikit-learn's "
                           "load_sample_images() photos, resized bilinear+antialias",
                 "seed": args.seed},
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "passes_per_round": args.passes,
        "load_average_before_after": [load_before, os.getloadavg()[0]],
        "throughput": speed,
        "fidelity": quality,
        "reader_choice": contract.STORED_JPEG_DCT_METHOD,
        "definitions": {
            "images_per_second": f"tf.data map over batches, {CORES} parallel calls, "
                                 "autotuner off; wall clock of --passes passes per round",
            "cpu_us_per_image": "CPU time of this process during a round / images "
                                "(includes tf.data's threads)",
            "one_core_us_per_image": "CPU time per image of the decode run unbatched on "
                                     "one thread, --passes passes per round (CPU, not "
                                     "wall clock: other processes share the cores)",
            "psnr_db": "10 log10(255^2 / MSE) of a decode against the pixels encoded",
        },
    }
    print_table(result)
    write_json(args.out, result)
    print(f"wrote {args.out}")


def print_table(result: dict[str, Any]) -> None:
    data, speed, quality = result["data"], result["throughput"], result["fidelity"]
    print(f"\n{data['records']} records, {data['image_size']} px JPEG q"
          f"{data['jpeg_quality']} ({data['mean_record_bytes']} B), "
          f"{result['machine']['cpu_cores']} cores, {result['rounds']} rounds")
    print(f"{'dct_method':<18}{'img/s med':>10}{'img/s best':>11}{'CPU µs/img':>11}"
          f"{'1-core µs':>10}{'PSNR mean':>10}{'PSNR min':>9}")
    for method in DCT_METHODS:
        s, q = speed["by_method"][label(method)], quality["by_method"][label(method)]
        print(f"{label(method):<18}{s['images_per_second_median']:>10.0f}"
              f"{s['images_per_second_best']:>11.0f}{s['cpu_us_per_image_median']:>11.0f}"
              f"{s['one_core_us_per_image_median']:>10.0f}"
              f"{q['psnr_db_mean']:>10.2f}{q['psnr_db_min']:>9.2f}")
    print(f"accurate / fast one-core µs (median of rounds): "
          f"{speed['accurate_over_fast_one_core_us_median']}")
    print(f"fast vs accurate: {quality['fast_vs_accurate']}; accurate - fast PSNR: "
          f"{quality['accurate_minus_fast_psnr_db']}; default == fast: "
          f"{quality['default_equals_fast_bit_for_bit']}; decode_stored_image equals: "
          f"{quality['decode_stored_image_equals']}")


if __name__ == "__main__":
    main()
