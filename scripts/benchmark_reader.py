"""Reader benchmark: our make_dataset vs the seeds' pipelines and the machine's ceilings.

On the same shards, in one run, measures examples/s for
  (a) naive      the seeds' starting point: sequential read, per-record parse and
                 decode, no parallelism, no prefetch;
  (b) tuned      the seeds' production checklist by hand: parallel interleave,
                 parallel per-record map, shuffle, batch, prefetch;
  (c) reader     reader.make_dataset with its defaults (shuffle on for train);
  (d) read-only  ceiling: GZIP TFRecord records/s through a parallel interleave, no parse;
  (e) decode     ceiling: JPEG decode of in-memory bytes, parallel map on all cores;
and the combined ceiling 1 / (1/d + 1/e) (both share the same cores). It also feeds
the reader to a simulated training loop (sleep of --step_ms per batch) and reports the
fraction of step time spent waiting for input.

The data: --num_images real-photo crops (random windows of scikit-learn's two sample
photos, mixed sizes, written as JPEG) turned into 224 px JPEG records in --num_shards
shards by the image job itself. Results go to a table on stdout, JSON and a PNG chart.

Usage: python scripts/benchmark_reader.py [--out docs/benchmarks/reader] [--work_dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE


def write_photo_crops(root: str, count: int, seed: int = 0) -> None:
    """Random crops (140-420 px, random aspect and flip) of the sample photos."""
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images  # two 427x640 RGB photos
    rng = np.random.default_rng(seed)
    for i in range(count):
        photo = photos[i % len(photos)]
        h = int(rng.integers(140, 421))
        w = int(np.clip(h * rng.uniform(0.75, 1.33), 140, photo.shape[1]))
        h = min(h, photo.shape[0])
        top = int(rng.integers(0, photo.shape[0] - h + 1))
        left = int(rng.integers(0, photo.shape[1] - w + 1))
        crop = photo[top:top + h, left:left + w]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        label_dir = os.path.join(root, f"class{i % 10}")
        os.makedirs(label_dir, exist_ok=True)
        tf.io.write_file(os.path.join(label_dir, f"{i:05d}.jpg"),
                         tf.io.encode_jpeg(np.ascontiguousarray(crop), quality=90))


def build_dataset(work_dir: str, num_images: int, num_shards: int) -> str:
    """Runs the image job once (cached in work_dir) and returns its output dir."""
    from pipelines import images

    out = os.path.join(work_dir, "dataset")
    if os.path.exists(os.path.join(out, "manifest.json")):
        return out
    raw = os.path.join(work_dir, "raw")
    if not os.path.isdir(raw):
        write_photo_crops(raw, num_images)
    images.run([f"--input={raw}", f"--output_dir={out}", "--split_fractions=1,0,0",
                f"--num_shards={num_shards}", "--overwrite"])
    return out


def _decode_single(feature_spec: dict) -> Callable:
    def parse_and_decode(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        features = tf.io.parse_single_example(serialized, feature_spec)
        image = tf.io.decode_jpeg(features["image"], channels=3)
        return tf.cast(image, tf.float32) / 255.0, features["label"]

    return parse_and_decode


def naive_pipeline(files: list[str], spec: dict, batch_size: int) -> tf.data.Dataset:
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.map_parallelization = False
    return (tf.data.TFRecordDataset(files, compression_type="GZIP")
            .map(_decode_single(spec))
            .batch(batch_size)
            .with_options(options))


def tuned_pipeline(files: list[str], spec: dict, batch_size: int) -> tf.data.Dataset:
    return (tf.data.Dataset.from_tensor_slices(files)
            .shuffle(len(files))
            .interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                        cycle_length=8, num_parallel_calls=AUTOTUNE, deterministic=False)
            .map(_decode_single(spec), num_parallel_calls=AUTOTUNE, deterministic=False)
            .shuffle(10_000)
            .batch(batch_size)
            .prefetch(AUTOTUNE))


def read_only_pipeline(files: list[str], batch_size: int) -> tf.data.Dataset:
    return (tf.data.Dataset.from_tensor_slices(files)
            .interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                        cycle_length=8, num_parallel_calls=AUTOTUNE, deterministic=False)
            .batch(batch_size)
            .prefetch(AUTOTUNE))


def decode_only_pipeline(jpegs: list[bytes], batch_size: int) -> tf.data.Dataset:
    return (tf.data.Dataset.from_tensor_slices(jpegs)
            .map(lambda b: tf.cast(tf.io.decode_jpeg(b, channels=3), tf.float32) / 255.0,
                 num_parallel_calls=AUTOTUNE, deterministic=False)
            .batch(batch_size)
            .prefetch(AUTOTUNE))


def one_pass(dataset: tf.data.Dataset) -> tuple[float, float]:
    """(examples/s, CPU ms per example) of one full pass over ``dataset``."""
    count = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for batch in dataset:
        first = batch[0] if isinstance(batch, tuple) else batch
        count += int(tf.shape(first)[0])
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return count / wall, 1000.0 * cpu / count


def measure(pipelines: dict[str, Callable[[], tf.data.Dataset]], rounds: int
            ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(examples/s, CPU ms/example) of every pipeline in ``rounds`` interleaved rounds.

    Pipelines take turns (rotating the order each round) so that slow spells of a
    shared machine hit all of them alike; one warm-up pass each is discarded.
    """
    names = list(pipelines)
    for name in names:
        one_pass(pipelines[name]())  # Warm-up: thread pools, tracing, page cache.
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            rate, cpu_ms = one_pass(pipelines[name]())
            rates[name].append(rate)
            cpu[name].append(cpu_ms)
    return rates, cpu


def input_wait_fraction(dataset: tf.data.Dataset, step_ms: float, steps: int) -> float:
    """Fraction of a simulated training loop's time spent inside the input step.

    Like Keras, each step pulls its batch inside a ``tf.function``; the accelerator's
    work is a sleep of ``step_ms`` (the CPU is free meanwhile, as with a GPU step).
    """
    iterator = iter(dataset)

    @tf.function
    def train_step(it: tf.data.Iterator) -> tf.Tensor:
        _, labels = next(it)
        return tf.reduce_sum(labels)

    train_step(iterator)  # Trace, and let the pipeline fill its buffers.
    waited = 0.0
    start = time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        train_step(iterator)
        waited += time.perf_counter() - t
        time.sleep(step_ms / 1000.0)
    return waited / (time.perf_counter() - start)


def input_wait(dataset: tf.data.Dataset, step_ms: float, steps: int) -> dict[str, float]:
    """Raw wait fraction, the same for an in-memory batch, and their difference.

    The in-memory baseline (one materialised batch, repeated) is the cost of handing
    a batch to the step that any input pipeline pays on this machine; ``net`` is the
    waiting caused by the pipeline itself.
    """
    batch = next(iter(dataset))
    in_memory = tf.data.Dataset.from_tensors(batch).repeat().prefetch(AUTOTUNE)
    raw = input_wait_fraction(dataset, step_ms, steps)
    baseline = input_wait_fraction(in_memory, step_ms, steps)
    return {"raw": raw, "in_memory_baseline": baseline, "net": max(0.0, raw - baseline)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/benchmark_reader")
    parser.add_argument("--out", default="docs/benchmarks/reader",
                        help="Path prefix for <out>.json and <out>.png.")
    parser.add_argument("--num_images", type=int, default=3000)
    parser.add_argument("--num_shards", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=9,
                        help="Interleaved measurement rounds (median and best reported).")
    parser.add_argument("--step_ms", type=float, default=10.0)
    parser.add_argument("--step_batch_sizes", default="16,32,64",
                        help="Batch sizes for the simulated-step measurement.")
    args = parser.parse_args()

    import reader

    data_dir = build_dataset(args.work_dir, args.num_images, args.num_shards)
    info = reader.open_dataset(data_dir)
    files = info.shard_paths("train")
    spec = info.feature_spec
    jpegs = [tf.io.parse_single_example(r, {"image": spec["image"]})["image"].numpy()
             for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    b = args.batch_size
    samples, cpu_samples = measure({
        "a_naive": lambda: naive_pipeline(files, spec, b),
        "b_tuned": lambda: tuned_pipeline(files, spec, b),
        "c_reader": lambda: reader.make_dataset(data_dir, "train", b),
        "d_read_only": lambda: read_only_pipeline(files, b),
        "e_decode_only": lambda: decode_only_pipeline(jpegs, b),
    }, args.rounds)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    best = {name: max(values) for name, values in samples.items()}
    cpu_ms = {name: statistics.median(values) for name, values in cpu_samples.items()}

    def combined(rates: dict[str, float]) -> float:
        return 1.0 / (1.0 / rates["d_read_only"] + 1.0 / rates["e_decode_only"])
    waits = {}
    for step_batch in (int(x) for x in args.step_batch_sizes.split(",")):
        # Long training runs read an endless stream (steps_per_epoch in model.fit).
        dataset = reader.make_dataset(data_dir, "train", step_batch, num_epochs=None)
        waits[str(step_batch)] = input_wait(dataset, args.step_ms, steps=600)

    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpu_cores": os.cpu_count(), "processor": platform.processor()
                    or platform.machine(), "tensorflow": tf.__version__},
        "data": {"records": info.num_records("train"), "shards": len(files),
                 "image_size": info.preprocessing["image_size"],
                 "image_format": info.preprocessing["image_format"],
                 "mean_record_bytes": info.manifest["splits"]["train"]["num_bytes"]
                 // max(1, info.num_records("train"))},
        "batch_size": b,
        "rounds": args.rounds,
        "examples_per_second_median": medians,
        "examples_per_second_best": best,
        "examples_per_second_samples": samples,
        "cpu_ms_per_example_median": cpu_ms,
        "combined_ceiling_median": combined(medians),
        "combined_ceiling_best": combined(best),
        "reader_vs_tuned": {"median": medians["c_reader"] / medians["b_tuned"],
                            "best": best["c_reader"] / best["b_tuned"]},
        "reader_vs_combined_ceiling": {
            "median": medians["c_reader"] / combined(medians),
            "best": best["c_reader"] / combined(best)},
        "simulated_step_ms": args.step_ms,
        "input_wait_fraction_by_batch_size": waits,
    }
    names = {"a_naive": "(a) naive (seeds' baseline)", "b_tuned": "(b) hand-tuned checklist",
             "c_reader": "(c) reader.make_dataset", "d_read_only": "(d) read-only ceiling",
             "e_decode_only": "(e) decode-only ceiling"}
    print(f"{'examples/s over ' + str(args.rounds) + ' rounds':<32}{'median':>9}{'best':>9}"
          f"{'worst':>9}{'CPU ms/ex':>11}")
    for key in medians:
        print(f"{names[key]:<32}{medians[key]:>9.0f}{best[key]:>9.0f}"
              f"{min(samples[key]):>9.0f}{cpu_ms[key]:>11.3f}")
    print(f"{'combined ceiling 1/(1/d+1/e)':<32}{combined(medians):>9.0f}"
          f"{combined(best):>9.0f}")
    for stat in ("median", "best"):
        print(f"{stat:>6}: reader / tuned = {result['reader_vs_tuned'][stat]:.2f}; reader / "
              f"combined ceiling = {result['reader_vs_combined_ceiling'][stat]:.2f}")
    for step_batch, wait in waits.items():
        demand = int(step_batch) * 1000 / args.step_ms
        print(f"{args.step_ms:g} ms step, batch {step_batch} ({demand:.0f} img/s): input wait "
              f"{100 * wait['net']:.1f}% net (raw {100 * wait['raw']:.1f}% - in-memory "
              f"{100 * wait['in_memory_baseline']:.1f}%)")

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
    _plot(medians, best, combined(medians), combined(best), names, args.out + ".png",
          result)
    print(f"wrote {args.out}.json and {args.out}.png")


def _plot(medians: dict, best: dict, combined_median: float, combined_best: float,
          names: dict, path: str, result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [names[k] for k in medians] + ["combined ceiling"]
    med = [*medians.values(), combined_median]
    top = [*best.values(), combined_best]
    y = np.arange(len(labels))[::-1]
    fig, ax = plt.subplots(figsize=(8.5, 4))
    ax.barh(y + 0.2, top, height=0.4, color="#cc6633", label="best round")
    ax.barh(y - 0.2, med, height=0.4, color="#6699cc", label="median round")
    for yy, m, t in zip(y, med, top, strict=True):
        ax.text(t, yy + 0.2, f" {t:.0f}", va="center", fontsize=8)
        ax.text(m, yy - 0.2, f" {m:.0f}", va="center", fontsize=8)
    ax.set_yticks(y, labels)
    ax.set_xlabel("examples / s")
    ax.legend(loc="lower right", fontsize=8)
    data = result["data"]
    ax.set_title(f"{data['records']} x {data['image_size']} px {data['image_format']} records, "
                 f"{data['shards']} shards, {result['machine']['cpu_cores']} cores, "
                 f"batch {result['batch_size']}, {result['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
