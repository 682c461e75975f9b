"""Reader benchmark: make_dataset against the seeds' pipelines and the machine's ceilings.

On the same shards, in one run, interleaving the variants over --rounds rounds,
measures examples/s for
  (a) naive      the seeds' starting point: sequential read, per-record parse and
                 decode, no parallelism, no prefetch;
  (b) tuned      the seeds' production checklist by hand: parallel interleave,
                 parallel per-record map, shuffle, batch, prefetch (AUTOTUNE, as the
                 seeds write it);
  (c) reader     reader.make_dataset with its defaults (shuffle on for train);
  (d) read-only  ceiling: GZIP TFRecord records/s through a parallel interleave, no
                 parse, nothing else;
  (e) decode     ceiling: the reader's per-image work on in-memory bytes (JPEG decode,
                 scale to float32 in [0, 1]), nothing read or parsed;
and the combined ceiling 1 / (1/d + 1/e): both share the same cores, so a pipeline
that reads and decodes every record can at best spend the time of (d) plus that of
(e). The ceilings run one call per core with tf.data's autotuner off: on this 2-core
VM the autotuner sometimes settles into a state that uses one core at a time and
halves the throughput (docs/RUNNING_AT_SCALE.md; image_job.py's ceiling_pass).
(e') keeps the decode ceiling with AUTOTUNE as a diagnostic.

Every sample records the CPU used by other processes meanwhile ("foreign" cores); a
sample taken while they used more than --max_foreign cores is retried (up to
--retries times). Medians and best rounds are both reported, with the CPU time per
example. The run ends with a simulated training loop (the batch is pulled inside a
``tf.function``, like Keras; the accelerator's step is a --step_ms sleep) reporting
the fraction of step time spent waiting for input.

The data: --num_images photo-sized JPEGs from scripts/benchmarks/sample_photos.py (320-1280 px,
~65 KB) turned into 224 px JPEG records (quality 95) in --num_shards shards by the
image job itself (python -m pipelines.images, run once and kept in --work_dir).

Usage: python -m scripts.benchmarks reader_throughput --work_dir /work/bench_data \\
           [--num_images 4000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf

import reader
from reader.format import contract
from scripts.benchmarks import harness
from scripts.benchmarks.sample_photos import describe, ensure_photos

BENCHMARK = harness.Benchmark(
    name="reader_throughput",
    measures="make_dataset's throughput against the read + decode ceiling",
    quick=("--work_dir", "{quick_dir}/reader", "--num_images", "200", "--rounds", "1", "--out",
           "{quick_dir}/reader_throughput.json"),
)


AUTOTUNE = tf.data.AUTOTUNE
CORES = os.cpu_count() or 1

NAMES = {
    "a_naive": "(a) naive: sequential, per record (seeds' start)",
    "b_tuned": "(b) hand-tuned: the seeds' checklist, AUTOTUNE",
    "c_reader": "(c) reader.make_dataset, defaults",
    "d_read_only": "(d) read-only ceiling: GZIP records, no parse",
    "e_decode_only": "(e) decode-only ceiling: in-memory decode+scale",
    "e2_decode_autotune": "(e') the same with AUTOTUNE (diagnostic)",
}


def _parse_and_decode(feature_spec: dict) -> Callable:
    def parse_and_decode(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        features = tf.io.parse_single_example(serialized, feature_spec)
        image = tf.io.decode_jpeg(features["image"], channels=3,
                                  dct_method=contract.STORED_JPEG_DCT_METHOD)
        return tf.cast(image, tf.float32) / 255.0, features["label"]

    return parse_and_decode


def _fixed_parallelism() -> tf.data.Options:
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def naive_pipeline(files: list[str], spec: dict, batch_size: int) -> tf.data.Dataset:
    options = _fixed_parallelism()
    options.experimental_optimization.map_parallelization = False
    return (tf.data.TFRecordDataset(files, compression_type="GZIP")
            .map(_parse_and_decode(spec))
            .batch(batch_size)
            .with_options(options))


def tuned_pipeline(files: list[str], spec: dict, batch_size: int) -> tf.data.Dataset:
    return (tf.data.Dataset.from_tensor_slices(files)
            .shuffle(len(files))
            .interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                        cycle_length=8, num_parallel_calls=AUTOTUNE, deterministic=False)
            .map(_parse_and_decode(spec), num_parallel_calls=AUTOTUNE,
                 deterministic=False)
            .shuffle(10_000)
            .batch(batch_size)
            .prefetch(AUTOTUNE))


def read_only_pipeline(files: list[str], batch_size: int) -> tf.data.Dataset:
    """(d): one interleave call per core, autotuner off."""
    return (tf.data.Dataset.from_tensor_slices(files)
            .interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                        cycle_length=len(files), num_parallel_calls=CORES,
                        deterministic=False)
            .batch(batch_size)
            .prefetch(2)
            .with_options(_fixed_parallelism()))


def decode_only_pipeline(jpegs: tf.Tensor, batch_size: int, autotune: bool = False
                         ) -> tf.data.Dataset:
    """(e): one map call per core with the autotuner off; (e') AUTOTUNE, autotuner on."""
    options = tf.data.Options()
    options.autotune.enabled = autotune
    return (tf.data.Dataset.from_tensor_slices(jpegs)
            .map(lambda b: tf.cast(tf.io.decode_jpeg(
                b, channels=3, dct_method=contract.STORED_JPEG_DCT_METHOD), tf.float32) / 255.0,
                 num_parallel_calls=AUTOTUNE if autotune else CORES, deterministic=False)
            .batch(batch_size)
            .prefetch(AUTOTUNE if autotune else 2)
            .with_options(options))


def one_pass(dataset: tf.data.Dataset) -> dict:
    """Examples in one full pass over ``dataset`` (timed by ``Sample``)."""
    count = 0
    for batch in dataset:
        first = batch[0] if isinstance(batch, tuple) else batch
        count += int(tf.shape(first)[0])
    return {"examples": count}


def measure(pipelines: dict[str, Callable[[], tf.data.Dataset]], rounds: int,
            max_foreign: float, retries: int) -> dict[str, list[dict]]:
    """Samples of every pipeline over ``rounds`` interleaved rounds.

    Pipelines take turns (rotating the order each round) so that slow spells of a
    shared machine hit all of them alike; one warm-up pass each is discarded.
    """
    names = list(pipelines)
    for name in names:
        one_pass(pipelines[name]())  # Warm-up: thread pools, tracing, page cache.
    samples: dict[str, list[dict]] = {name: [] for name in names}
    for r, name in harness.interleaved(names, rounds):
        sample, attempts = harness.quiet_sample(lambda name=name: one_pass(pipelines[name]()),
                                                max_foreign, retries)
        n = sample.extra["examples"]
        samples[name].append({
            "examples_per_second": n / sample.wall, "wall_s": sample.wall,
            "cpu_ms_per_example": 1000 * sample.own_cpu / n,
            "foreign_cores": sample.foreign_cores, "attempts_foreign": attempts})
        print(f"round {r + 1}/{rounds} {name:<20} {n / sample.wall:8.0f} ex/s  "
              f"(other processes: {sample.foreign_cores:.2f} cores)", flush=True)
    return samples


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


def summarize(samples: dict[str, list[dict]]) -> dict:
    rates = {name: [s["examples_per_second"] for s in values]
             for name, values in samples.items()}
    summary = {name: {**harness.spread(r, higher_is_better=True),
                      "cpu_ms_per_example_median": statistics.median(
                          s["cpu_ms_per_example"] for s in samples[name])}
               for name, r in rates.items()}

    def combined(stat: str) -> float:
        return 1.0 / (1.0 / summary["d_read_only"][stat]
                      + 1.0 / summary["e_decode_only"][stat])

    ceiling = {stat: combined(stat) for stat in ("median", "best", "worst")}
    ratios = {name: {stat: summary[name][stat] / ceiling[stat]
                     for stat in ("median", "best")}
              for name in ("a_naive", "b_tuned", "c_reader")}
    return {"examples_per_second": summary, "combined_ceiling": ceiling,
            "vs_combined_ceiling": ratios,
            "reader_vs_tuned": {stat: summary["c_reader"][stat] / summary["b_tuned"][stat]
                                for stat in ("median", "best")},
            "rounds_reader_above_combined_ceiling": sum(
                c > 1.0 / (1.0 / d + 1.0 / e) for c, d, e in zip(
                    rates["c_reader"], rates["d_read_only"], rates["e_decode_only"],
                    strict=True))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_image_dataset_flags(parser, work_dir="/tmp/reader_throughput",
                                    num_images=4000, batch_size=64)
    harness.add_result_flags(parser, "reader_throughput", "images_<num_images>")
    harness.add_sampling_flags(parser, rounds=9)
    parser.add_argument("--step_ms", type=float, default=10.0)
    parser.add_argument("--step_batch_sizes", default="16,32,64",
                        help="Batch sizes for the simulated-step measurement.")
    args = parser.parse_args()

    data_dir = harness.image_dataset(args.work_dir, args.num_images, args.num_shards,
                                     "reader_dataset")
    info = reader.open_dataset(data_dir)
    files = info.shard_paths("train")
    spec = info.feature_spec
    jpegs = tf.constant([
        tf.io.parse_single_example(r, {"image": spec["image"]})["image"].numpy()
        for r in tf.data.TFRecordDataset(files, compression_type="GZIP")])
    b = args.batch_size
    samples = measure({
        "a_naive": lambda: naive_pipeline(files, spec, b),
        "b_tuned": lambda: tuned_pipeline(files, spec, b),
        "c_reader": lambda: reader.make_dataset(data_dir, "train", b),
        "d_read_only": lambda: read_only_pipeline(files, b),
        "e_decode_only": lambda: decode_only_pipeline(jpegs, b),
        "e2_decode_autotune": lambda: decode_only_pipeline(jpegs, b, autotune=True),
    }, args.rounds, args.max_foreign, args.retries)
    summary = summarize(samples)
    waits = {}
    for step_batch in (int(x) for x in args.step_batch_sizes.split(",")):
        # Long training runs read an endless stream (steps_per_epoch in model.fit).
        dataset = reader.make_dataset(data_dir, "train", step_batch, num_epochs=None)
        waits[str(step_batch)] = input_wait(dataset, args.step_ms, steps=600)

    commit = harness.code_commit()
    foreign = [s["foreign_cores"] for values in samples.values() for s in values]
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": harness.machine(),
        "code_commit": commit,
        "data": {"records": info.num_records("train"), "shards": len(files),
                 "image_size": info.preprocessing["image_size"],
                 "image_format": info.preprocessing["image_format"],
                 "jpeg_quality": info.preprocessing["jpeg_quality"],
                 "mean_record_bytes": info.manifest["splits"]["train"]["num_bytes"]
                 // max(1, info.num_records("train")),
                 "photos": describe(ensure_photos(args.work_dir, args.num_images))},
        "batch_size": b,
        "rounds": args.rounds,
        "max_foreign_cores": args.max_foreign,
        "foreign_cores": {"median": statistics.median(foreign), "max": max(foreign)},
        **summary,
        "samples": samples,
        "simulated_step_ms": args.step_ms,
        "input_wait_fraction_by_batch_size": waits,
        "definitions": {
            "ceilings": "d and e run one call per core with tf.data's autotuner off; "
                        "combined ceiling = 1 / (1/d + 1/e) per statistic",
            "cpu_ms_per_example": "CPU time of this process during the pass / examples",
            "foreign_cores": "CPU used by other processes during a sample, in cores",
        },
    }
    print_table(result)
    harness.write_result(args.out, args.setting or f"images_{args.num_images}", result,
                         CHART)
    print(f"wrote {args.out} and its chart")


def print_table(result: dict) -> None:
    rates = result["examples_per_second"]
    data = result["data"]
    print(f"\n{data['records']} records of {data['mean_record_bytes']} B "
          f"({data['image_size']} px {data['image_format']}), batch "
          f"{result['batch_size']}, {result['rounds']} rounds; other processes used "
          f"{result['foreign_cores']['median']:.2f} cores (median), "
          f"{result['foreign_cores']['max']:.2f} at most")
    print(f"{'examples/s':<52}{'median':>8}{'best':>8}{'worst':>8}{'CPU ms/ex':>11}")
    for name, value in rates.items():
        print(f"{NAMES[name]:<52}{value['median']:>8.0f}{value['best']:>8.0f}"
              f"{value['worst']:>8.0f}{value['cpu_ms_per_example_median']:>11.3f}")
    ceiling = result["combined_ceiling"]
    print(f"{'combined ceiling 1/(1/d + 1/e)':<52}{ceiling['median']:>8.0f}"
          f"{ceiling['best']:>8.0f}{ceiling['worst']:>8.0f}")
    for stat in ("median", "best"):
        print(f"{stat:>6}: reader / combined ceiling = "
              f"{result['vs_combined_ceiling']['c_reader'][stat]:.2f}; reader / tuned = "
              f"{result['reader_vs_tuned'][stat]:.2f}")
    print(f"rounds in which the reader beat that round's combined ceiling: "
          f"{result['rounds_reader_above_combined_ceiling']} of {result['rounds']}")
    for step_batch, wait in result["input_wait_fraction_by_batch_size"].items():
        demand = int(step_batch) * 1000 / result["simulated_step_ms"]
        print(f"{result['simulated_step_ms']:g} ms step, batch {step_batch} ({demand:.0f} "
              f"img/s): input wait {100 * wait['net']:.1f}% net (raw "
              f"{100 * wait['raw']:.1f}% - in-memory "
              f"{100 * wait['in_memory_baseline']:.1f}%)")


def panel(setting: str, result: dict) -> harness.Panel:
    """The chart panel of one setting's result: each pass's rate, and the ceiling."""
    rates = result["examples_per_second"]
    ceiling = result["combined_ceiling"]
    data = result["data"]
    return harness.Panel(f"{setting}: {data['records']} x {data['image_size']} px "
                         f"{data['image_format']} records from photos, {data['shards']} shards, "
                         f"{result['machine']['cpu_cores']} cores, batch {result['batch_size']}, "
                         f"{result['date']}",
                         [NAMES[k] for k in rates] + ["combined ceiling 1/(1/d + 1/e)"],
                         [v["median"] for v in rates.values()] + [ceiling["median"]],
                         [v["best"] for v in rates.values()] + [ceiling["best"]])


CHART = harness.Chart(panel=panel, unit="examples / s", value_format=",.0f")


if __name__ == "__main__":
    main()
