"""Random-access reads with decode: reader.records.ShardedRecords against make_dataset.

On the same 224 px JPEG records (written with ``--compression=none``, so each shard
has a record index), in one run, interleaving the modes over --rounds rounds,
measures images/s of one full pass over the train split for
  records_1p      ``ShardedRecords(data_dir, "train")`` in one process: a shuffled
                  permutation of the indices (seed --seed), cut into --batch_size
                  batches, each read record by record (ranged read, CRCs, protobuf
                  parse, Pillow decode to uint8 [224, 224, 3]) and stacked, as
                  PyTorch's ``DataLoader(num_workers=0)`` does;
  records_Np      the same batches read by a pool of --workers processes (default
                  2), the dataset pickled to each worker (its initializer unpickles
                  it, reopening the files), the batches dealt to the workers as they
                  free up, each stacked by its worker straight into a shared-memory
                  file that the parent maps (no copy), as ``DataLoader(num_workers=N)``
                  does with torch's shared memory (it deals batches round-robin);
                  --transfer=pipe pickles them through the pool's pipe instead;
  tf_data         ``reader.make_dataset(data_dir, "train", --batch_size,
                  shuffle=True, seed=--seed)`` with its defaults (AUTOTUNE): tf.data
                  reads, parses and decodes, and also scales to float32 in [0, 1];
  tf_data_fixed   the same dataset with tf.data's autotuner off (a diagnostic: on a
                  2-core VM the autotuner sometimes settles into using one core at a
                  time; see scripts/benchmarks/reader_throughput.py).

Each mode runs in its own fresh interpreter (this file with --child_mode), the only
child of a fresh wrapper (scripts/benchmarks/memory.py's: a process exec'd straight from
this one would start from its ru_maxrss), so that its peak memory is its own:
``ru_maxrss`` of that process (``self``) and, for the
pool, of its waited-for workers (``workers``: the largest worker's peak, not their
sum; a forked worker's RSS counts the pages it shares with its parent). The records
modes never import TensorFlow. Startup is timed apart from the pass and excluded
from images/s: opening the dataset (``ShardedRecords``: the manifest and record
indexes, each index checked against its sha256; tf.data: building the pipeline)
and, for the pool, ``pool_start_s``: from its creation until every worker has
unpickled the dataset. ``images_per_second_with_startup`` counts it; imports
(``import_s``) count in neither. CPU per image is the CPU of the mode's process and
its workers during the pass.

One untimed run of every mode (--warmup) comes first; before every sample the shard
files are read once (page cache). Every sample records the CPU used by other
processes meanwhile ("foreign" cores, harness.quiet_sample); one taken while
they used more than --max_foreign cores is retried (up to --retries times).
Medians and best rounds are both reported.

The data: --num_images photo-sized JPEGs from scripts/benchmarks/sample_photos.py (320-1280 px,
~65 KB) turned into 224 px JPEG records in --num_shards uncompressed shards, all in
train, by the image job itself (``python -m pipelines.images ... --image_size=224
--compression=none``, run once and kept in --work_dir).

Usage: python -m scripts.benchmarks random_access \\
           --work_dir /work/bench_data [--num_images 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import mmap
import multiprocessing
import os
import pickle
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import psutil

from scripts.benchmarks import harness

BENCHMARK = harness.Benchmark(
    name="random_access",
    measures="ShardedRecords' random access without TensorFlow against make_dataset",
    quick=("--work_dir", "{quick_dir}/random_access", "--num_images", "200", "--rounds", "1",
           "--out", "{quick_dir}/random_access.json"),
)


MODES = ("records_1p", "records_Np", "tf_data", "tf_data_fixed")
NAMES = {
    "records_1p": "ShardedRecords, 1 process",
    "records_Np": "ShardedRecords, pool of {workers} processes",
    "tf_data": "make_dataset, defaults (AUTOTUNE)",
    "tf_data_fixed": "make_dataset, autotuner off (diagnostic)",
}
# ru_maxrss: kibibytes on Linux, bytes on macOS.
_RSS_UNIT = 1 if sys.platform == "darwin" else 1024


# --- the data --------------------------------------------------------------------------

def shard_paths(data_dir: str) -> list[str]:
    return [os.path.join(data_dir, s["path"])
            for s in harness.read_manifest(data_dir)["splits"]["train"]["shards"]]


def read_into_page_cache(paths: Sequence[str]) -> None:
    for path in paths:
        with open(path, "rb") as f:
            while f.read(16 * harness.MIB):
                pass


# --- one mode, in its own process ------------------------------------------------------

def _tree_cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds of ``process`` and its live descendants."""
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def _batches(n: int, batch_size: int, seed: int) -> list[list[int]]:
    # (batch of shuffled global indices)
    order = np.random.default_rng(seed).permutation(n).tolist()
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def _read_batch(records: Any, indices: Sequence[int], out: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """A batch as a DataLoader's default collate gives it: stacked images (into
    ``out`` if given), labels."""
    items = [records[i] for i in indices]
    return (np.stack([item["image"] for item in items], out=out),
            np.array([item["label"] for item in items]))


# Batches a worker hands back, one file each (the pool's parent's pid in the name):
# what DataLoader does with torch's shared memory. Through the pool's pipe instead
# (--transfer=pipe), a 64-image batch (9.6 MB) is pickled, copied through the pipe
# in 64 KiB writes and unpickled, which on 2 cores costs more than the decode.
_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_SHM_PREFIX = "benchmark_random_access_"
_worker_records: Any = None
_worker_batches = 0


def _init_worker(pickled_records: bytes, ready: Any) -> None:
    global _worker_records
    _worker_records = pickle.loads(pickled_records)
    ready.put(os.getpid())


def _worker_read_batch(indices: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return _read_batch(_worker_records, indices)


def _worker_read_batch_shm(indices: list[int]
                           ) -> tuple[str, tuple[int, ...], np.ndarray]:
    """Reads a batch straight into a new shared-memory file; its path, shape, labels."""
    global _worker_batches
    _worker_batches += 1
    size = int(_worker_records.manifest["preprocessing"]["image_size"])
    shape = (len(indices), size, size, 3)
    nbytes = int(np.prod(shape))
    path = os.path.join(_SHM_DIR, f"{_SHM_PREFIX}{os.getppid()}_{os.getpid()}_"
                                  f"{_worker_batches}")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, nbytes)
        block = mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)
    images = np.frombuffer(block, np.uint8).reshape(shape)
    labels = _read_batch(_worker_records, indices, out=images)[1]
    del images  # The last view of the block: it closes.
    block.close()
    return path, shape, labels


def _from_shm(results: Iterator[tuple[str, tuple[int, ...], np.ndarray]]
              ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Maps each batch file (unlinked at once: the mapping outlives the name)."""
    for path, shape, labels in results:
        fd = os.open(path, os.O_RDONLY)
        try:
            block = mmap.mmap(fd, int(np.prod(shape)), prot=mmap.PROT_READ)
        finally:
            os.close(fd)
            os.unlink(path)
        yield np.frombuffer(block, np.uint8).reshape(shape), labels


def _run_records(data_dir: str, batch_size: int, seed: int, workers: int,
                 start_method: str, transfer: str, timing: dict[str, float]
                 ) -> dict[str, Any]:
    t = time.perf_counter()
    from reader.records import ShardedRecords
    timing["import_s"] = time.perf_counter() - t

    me = psutil.Process()
    t0 = time.perf_counter()
    records = ShardedRecords(data_dir, "train", features=["image", "label"])
    timing["open_s"] = time.perf_counter() - t0
    batches = _batches(len(records), batch_size, seed)
    pool = None
    if workers > 1:
        context = multiprocessing.get_context(start_method)
        ready = context.SimpleQueue()
        t = time.perf_counter()
        pool = context.Pool(workers, initializer=_init_worker,
                            initargs=(pickle.dumps(records), ready))
        for _ in range(workers):
            ready.get()
        timing["pool_start_s"] = time.perf_counter() - t
        if transfer == "shm":
            batch_stream = _from_shm(pool.imap(_worker_read_batch_shm, batches,
                                               chunksize=1))
        else:
            batch_stream = pool.imap(_worker_read_batch, batches, chunksize=1)
    else:
        batch_stream = (_read_batch(records, b) for b in batches)
    timing["startup_s"] = time.perf_counter() - t0
    try:
        cpu0, t1 = _tree_cpu_seconds(me), time.perf_counter()
        count, image_spec = 0, ""
        for images, _ in batch_stream:
            count += len(images)
            image_spec = image_spec or f"{images.dtype} {list(images.shape[1:])}"
        timing["pass_s"] = time.perf_counter() - t1
        timing["cpu_s"] = _tree_cpu_seconds(me) - cpu0
    finally:
        if pool is not None:
            pool.close()
            pool.join()
            for name in os.listdir(_SHM_DIR):  # Left by a failed run.
                if name.startswith(f"{_SHM_PREFIX}{os.getpid()}_"):
                    os.unlink(os.path.join(_SHM_DIR, name))
    return {"images": count, "expected": len(records), "image": image_spec}


def _run_tf_data(data_dir: str, batch_size: int, seed: int, autotune: bool,
                 timing: dict[str, float]) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    t = time.perf_counter()
    import tensorflow as tf

    from reader import make_dataset
    from reader.records import load_manifest
    timing["import_s"] = time.perf_counter() - t

    me = psutil.Process()
    t0 = time.perf_counter()
    dataset = make_dataset(data_dir, "train", batch_size, shuffle=True, seed=seed)
    if not autotune:
        options = tf.data.Options()
        options.autotune.enabled = False
        dataset = dataset.with_options(options)
    batch_stream = iter(dataset)
    timing["open_s"] = timing["startup_s"] = time.perf_counter() - t0
    cpu0, t1 = _tree_cpu_seconds(me), time.perf_counter()
    count, image_spec = 0, ""
    for images, _ in batch_stream:
        count += int(images.shape[0])
        image_spec = image_spec or f"{images.dtype.name} {images.shape[1:].as_list()}"
    timing["pass_s"] = time.perf_counter() - t1
    timing["cpu_s"] = _tree_cpu_seconds(me) - cpu0
    expected = load_manifest(data_dir)["splits"]["train"]["num_records"]
    return {"images": count, "expected": expected, "image": image_spec}


def run_child(mode: str, data_dir: str, batch_size: int, seed: int, workers: int,
              start_method: str, transfer: str, result_path: str) -> None:
    """Runs ``mode`` once and writes its timings and peak RSS to ``result_path``."""
    timing: dict[str, float] = {}
    if mode.startswith("records"):
        out = _run_records(data_dir, batch_size, seed,
                           workers if mode == "records_Np" else 1, start_method,
                           transfer, timing)
    else:
        out = _run_tf_data(data_dir, batch_size, seed, mode == "tf_data", timing)
    if out["images"] != out["expected"]:
        raise RuntimeError(f"{mode} read {out['images']} images, the split holds "
                           f"{out['expected']}.")
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _RSS_UNIT
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * _RSS_UNIT
    with open(result_path, "w") as f:
        json.dump({**timing, **out, "tensorflow_imported": "tensorflow" in sys.modules,
                   "peak_rss_self_mib": round(own / harness.MIB, 1),
                   # TensorFlow's import runs a short-lived child process too.
                   "peak_rss_children_mib": round(children / harness.MIB, 1),
                   "peak_rss_workers_mib": (round(children / harness.MIB, 1)
                                            if mode == "records_Np" else None)}, f)


def run_mode(mode: str, args: argparse.Namespace, data_dir: str) -> dict[str, Any]:
    """``mode`` run once in a fresh interpreter, the only child of a fresh wrapper
    (``harness.measure``: a process exec'd from a big one would start with
    its ru_maxrss); its result."""
    from scripts.benchmarks.harness import measure  # Not in the modes' own processes.

    with tempfile.TemporaryDirectory() as tmp:
        result_path, log_path = os.path.join(tmp, "result.json"), os.path.join(tmp, "log")
        command = [sys.executable, os.path.abspath(__file__), f"--child_mode={mode}",
                   f"--data_dir={data_dir}", f"--batch_size={args.batch_size}",
                   f"--seed={args.seed}", f"--workers={args.workers}",
                   f"--start_method={args.start_method}", f"--transfer={args.transfer}",
                   f"--child_result={result_path}"]
        wrapped = measure(command, log_path)
        if wrapped["rc"]:
            with open(log_path, errors="replace") as f:
                raise RuntimeError(f"{mode} failed (exit {wrapped['rc']}):\n"
                                   f"{f.read()[-3000:]}")
        return harness.read_json(result_path)


# --- rounds and results ----------------------------------------------------------------

def measure_rounds(args: argparse.Namespace, data_dir: str) -> dict[str, list[dict]]:
    paths = shard_paths(data_dir)
    for _ in range(args.warmup):
        for mode in args.modes:
            run_mode(mode, args, data_dir)  # Libraries and shards into the page cache.
    samples: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    for r, mode in harness.interleaved(args.modes, args.rounds):
        sample, attempts = harness.quiet_sample(lambda mode=mode: run_mode(mode, args, data_dir),
                                                args.max_foreign, args.retries,
                                                before=lambda: read_into_page_cache(paths))
        s = sample.extra
        n = s["images"]
        samples[mode].append({
            **s, "images_per_second": n / s["pass_s"],
            "images_per_second_with_startup": n / (s["startup_s"] + s["pass_s"]),
            "cpu_ms_per_image": 1000 * s["cpu_s"] / n,
            "foreign_cores": sample.foreign_cores, "attempts_foreign": attempts})
        workers = s["peak_rss_workers_mib"]
        print(f"round {r + 1}/{args.rounds} {mode:<14} {n / s['pass_s']:7.0f} img/s  "
              f"startup {s['startup_s']:.2f} s  peak RSS {s['peak_rss_self_mib']:.0f} MiB"
              f"{'' if workers is None else f' (workers {workers:.0f})'}  other "
              f"processes: {sample.foreign_cores:.2f} cores", flush=True)
    return samples


def summarize(samples: dict[str, list[dict]]) -> dict[str, dict]:
    def stats(values: list[float]) -> dict[str, float]:
        return harness.spread(values, higher_is_better=True)

    summary = {}
    for mode, rounds in samples.items():
        entry = {
            "images_per_second": stats([s["images_per_second"] for s in rounds]),
            "images_per_second_with_startup": stats(
                [s["images_per_second_with_startup"] for s in rounds]),
            "startup_s_median": statistics.median(s["startup_s"] for s in rounds),
            "cpu_ms_per_image_median": statistics.median(
                s["cpu_ms_per_image"] for s in rounds),
            "peak_rss_self_mib_max": max(s["peak_rss_self_mib"] for s in rounds),
            "peak_rss_workers_mib_max": max(
                (s["peak_rss_workers_mib"] for s in rounds
                 if s["peak_rss_workers_mib"] is not None), default=None),
            "tensorflow_imported": any(s["tensorflow_imported"] for s in rounds)}
        if "pool_start_s" in rounds[0]:
            entry["pool_start_s_median"] = statistics.median(
                s["pool_start_s"] for s in rounds)
        summary[mode] = entry
    return summary


def print_table(result: dict) -> None:
    data, summary = result["data"], result["modes"]
    print(f"\n{data['records']} records of {data['mean_record_bytes']} B "
          f"({data['image_size']} px {data['image_format']}, {data['shards']} "
          f"uncompressed shards), batch {result['batch_size']}, {result['rounds']} "
          f"rounds, {result['machine']['cpu_cores']} cores; other processes used "
          f"{result['foreign_cores']['median']:.2f} cores (median), "
          f"{result['foreign_cores']['max']:.2f} at most")
    print(f"{'images/s (startup excluded)':<44}{'median':>8}{'best':>8}{'startup s':>11}"
          f"{'CPU ms/img':>12}{'RSS MiB':>9}{'workers':>9}")
    for mode, s in summary.items():
        rates = s["images_per_second"]
        workers = s["peak_rss_workers_mib_max"]
        print(f"{NAMES[mode].format(workers=result['workers']):<44}{rates['median']:>8.0f}"
              f"{rates['best']:>8.0f}{s['startup_s_median']:>11.2f}"
              f"{s['cpu_ms_per_image_median']:>12.2f}{s['peak_rss_self_mib_max']:>9.0f}"
              f"{(f'{workers:.0f}' if workers else '-'):>9}")
    if "records_Np" in summary:
        print(f"pool start (creation to every worker holding the dataset): "
              f"{summary['records_Np']['pool_start_s_median']:.2f} s (median)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_image_dataset_flags(parser, work_dir="/tmp/random_access", num_images=2000,
                                    batch_size=64)
    harness.add_result_flags(parser, "random_access", "images_<num_images>")
    parser.add_argument("--seed", type=int, default=0,
                        help="Seed of the records modes' permutation and make_dataset's.")
    parser.add_argument("--workers", type=int, default=2,
                        help="Processes of the records_Np mode.")
    parser.add_argument("--start_method", default="fork",
                        choices=("fork", "spawn"),
                        help="How the pool starts its workers (PyTorch's default on "
                             "Linux: fork; forkserver's workers would not be this "
                             "process's children, so their memory not measured).")
    parser.add_argument("--transfer", default="shm", choices=("shm", "pipe"),
                        help="How pool workers hand batches back: shm, a shared-memory "
                             "file per batch (as DataLoader does); pipe, pickled "
                             "through the pool's pipe.")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"Comma-separated, of {', '.join(MODES)}.")
    parser.add_argument("--warmup", type=int, default=1,
                        help="Untimed runs of every mode before the rounds.")
    harness.add_sampling_flags(parser, rounds=3)
    parser.add_argument("--child_mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--data_dir", help=argparse.SUPPRESS)
    parser.add_argument("--child_result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child_mode:
        run_child(args.child_mode, args.data_dir, args.batch_size, args.seed,
                  args.workers, args.start_method, args.transfer, args.child_result)
        return
    args.modes = args.modes.split(",")
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown:
        parser.error(f"unknown --modes {unknown}: choose from {', '.join(MODES)}")

    from scripts.benchmarks.sample_photos import describe, ensure_photos

    data_dir = harness.image_dataset(args.work_dir, args.num_images, args.num_shards,
                                     "random_access", "--compression=none")
    manifest = harness.read_manifest(data_dir)
    train = manifest["splits"]["train"]
    samples = measure_rounds(args, data_dir)
    foreign = [s["foreign_cores"] for rounds in samples.values() for s in rounds]
    import PIL
    from PIL import features

    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": harness.machine(numpy=np.__version__, pillow=PIL.__version__,
                                   pillow_libjpeg_turbo=features.check_feature("libjpeg_turbo"),
                                   multiprocessing_start_method=args.start_method),
        "code": harness.code_version(),
        "data": {"dir": data_dir, "records": train["num_records"],
                 "shards": len(train["shards"]),
                 "image_size": manifest["preprocessing"]["image_size"],
                 "image_format": manifest["preprocessing"]["image_format"],
                 "jpeg_quality": manifest["preprocessing"].get("jpeg_quality"),
                 "mean_record_bytes": train["num_bytes"] // max(1, train["num_records"]),
                 "photos": describe(ensure_photos(args.work_dir, args.num_images))},
        "batch_size": args.batch_size,
        "seed": args.seed,
        "workers": args.workers,
        "transfer": args.transfer,
        "rounds": args.rounds,
        "warmup_runs": args.warmup,
        "max_foreign_cores": args.max_foreign,
        "foreign_cores": {"median": statistics.median(foreign), "max": max(foreign)},
        "modes": summarize(samples),
        "samples": samples,
        "definitions": {
            "images_per_second": "records in the split / the pass's wall time, from "
                                 "the first batch requested to the last received; "
                                 "startup excluded",
            "startup_s": "opening the dataset (records: manifest + sha256-checked "
                         "indexes; tf.data: make_dataset + iter) and, for the pool, "
                         "pool_start_s; imports excluded",
            "pool_start_s": "from Pool() (dataset pickled) until every worker has "
                            "unpickled it",
            "cpu_ms_per_image": "CPU of the mode's process and its live workers "
                                "during the pass / images",
            "peak_rss_self_mib": "ru_maxrss (RUSAGE_SELF) of the mode's own fresh "
                                 "process",
            "peak_rss_workers_mib": "ru_maxrss (RUSAGE_CHILDREN) after the pool is "
                                    "joined: the largest worker's peak, not the sum",
            "peak_rss_children_mib": "RUSAGE_CHILDREN's ru_maxrss in every mode (the "
                                     "tf modes': a short-lived process TensorFlow's "
                                     "import starts)",
            "transfer": "how pool workers hand batches back (shm: a shared-memory file "
                        "per batch, mapped by the parent; pipe: pickled)",
            "foreign_cores": "CPU used by other processes during a sample (whole "
                             "subprocess, imports included), in cores",
        },
    }
    print_table(result)
    harness.write_result(args.out, args.setting or f"images_{args.num_images}", result,
                         CHART)
    print(f"wrote {args.out}")


CHART = harness.Chart("reading by mode", lambda result: {
    mode: entry["images_per_second"] for mode, entry in result["modes"].items()},
    unit="images / s", value_format=",.0f")


if __name__ == "__main__":
    main()
