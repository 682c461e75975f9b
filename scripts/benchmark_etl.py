"""ETL benchmark: the image job against the preprocessing ceiling and the seeds' loop.

On the same generated input (--num_images real-photo JPEGs of mixed sizes: random
crops, 140-420 px, of scikit-learn's two sample photos, as in benchmark_reader.py),
measures in one run, interleaving the variants over --rounds rounds, images/s for
  (a) ceiling   the job's per-image ops (etl.image_codec.preprocess: decode, resize,
                crop, encode) in a parallel tf.data map over in-memory bytes, on all
                cores (num_parallel_calls = cores, tf.data's autotuner off: see
                below), no Beam, nothing read or written;
  (a') ceiling_autotune  the same map with AUTOTUNE and the autotuner on, as a
                diagnostic: on this 2-core VM it settles, in about half of the
                passes, into a state that runs the map on one core at a time (583
                vs ~1,100 images/s, both cores half idle), which made earlier runs
                report half the true ceiling;
  (b) seeds     the seeds' approach: a hand-written single-process loop that reads
                each file, preprocesses it (the same ops, one tf.function call per
                image), serializes a tf.train.Example and writes it with
                tf.io.TFRecordWriter (GZIP); no validation, no split, no sharding;
  (c) job       python -m pipelines.images on the default runner (FnApiRunner,
                in_memory), as a subprocess;
  (d) job_mp2   the same job with --direct_running_mode=multi_processing
                --direct_num_workers=2;
  (e) job_gzip0 (c) with --gzip_level=0: the GZIP container with the (already
                compressed) JPEG records stored, not deflated;
and, for (c), (d) and (e), the fixed overhead (the same job's wall time on --tiny_images
images) and the steady-state rate N / (T_N - T_tiny).

Job times are the wall time of ``pipelines.images.run(...)`` inside the subprocess
(interpreter start and imports excluded; they are in ``process_s``). CPU time is the
whole process tree's. This VM has 2 cores that other work sometimes shares: every
sample records the CPU used by other processes meanwhile ("foreign" cores), a sample
taken while they used more than --max_foreign cores is retried (up to --retries
times), and medians and best rounds are both reported. The input files are read once
before each sample so that every variant starts from the page cache.

--baseline_dir adds (c) and its tiny run for another checkout of the code (e.g. the
commit before a change), interleaved with the rest, for before/after comparisons.

Usage: python scripts/benchmark_etl.py [--num_images 3000] [--rounds 5]
       [--out docs/benchmarks/etl] [--work_dir /tmp/benchmark_etl] [--baseline_dir DIR]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import psutil

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
from benchmark_reader import write_photo_crops  # noqa: E402  (the same photo crops)

from etl import image_codec  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE

# Runs the image job in a fresh interpreter and prints its timings as one JSON line.
_JOB_DRIVER = r"""
import json, sys, time
started = time.perf_counter()
from pipelines import images
imported = time.perf_counter()
images.run(json.loads(sys.argv[1]))
print("BENCHMARK_RESULT " + json.dumps({"import_s": imported - started,
                                        "job_s": time.perf_counter() - imported}))
"""

NAMES = {
    "a_ceiling": "(a) ceiling: tf.data map of the ops, all cores",
    "a2_ceiling_autotune": "(a') the same map, AUTOTUNE (diagnostic)",
    "b_seeds": "(b) seeds: single-process loop + TFRecordWriter",
    "c_job": "(c) image job, default runner",
    "d_job_mp2": "(d) image job, multi_processing x2",
    "e_job_gzip0": "(e) image job, default runner, --gzip_level=0",
    "c_job_baseline": "(c') image job, baseline code",
}


def input_files(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(root, "*", "*.jpg")))


def ensure_input(root: str, count: int) -> list[str]:
    files = input_files(root)
    if len(files) != count:
        write_photo_crops(root, count)
        files = input_files(root)
    return files


def warm_page_cache(files: list[str]) -> None:
    for path in files:
        with open(path, "rb") as f:
            f.read()


def _busy_cpu_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


class Sample:
    """Wall time, own CPU and other processes' CPU while ``fn`` runs."""

    def __init__(self, fn: Callable[[], dict]) -> None:
        busy0, own0 = _busy_cpu_seconds(), self._own_cpu()
        start = time.perf_counter()
        self.extra = fn()
        self.wall = time.perf_counter() - start
        self.own_cpu = self._own_cpu() - own0
        busy = _busy_cpu_seconds() - busy0
        self.foreign_cores = max(0.0, busy - self.own_cpu) / self.wall

    @staticmethod
    def _own_cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def ceiling_pass(data: tf.Tensor, image_size: int, quality: int,
                 autotune: bool = False) -> dict:
    """(a): every image through the ops once, parallel map on all cores.

    With ``autotune=False`` the map runs ``os.cpu_count()`` calls at a time and
    tf.data's autotuner is off; with ``autotune=True`` (a'), tf.data picks.
    """
    parallel = AUTOTUNE if autotune else os.cpu_count()
    options = tf.data.Options()
    options.autotune.enabled = autotune
    dataset = (tf.data.Dataset.from_tensor_slices(data)
               .map(lambda b: image_codec.preprocess(b, image_size, image_codec.JPEG,
                                                     quality),
                    num_parallel_calls=parallel, deterministic=False)
               .batch(64)
               .prefetch(AUTOTUNE if autotune else 2)
               .with_options(options))
    count = 0
    for batch in dataset:
        count += int(batch.shape[0])
    return {"images": count}


def make_seeds_loop(image_size: int, quality: int) -> Callable[[list[str], str, str], dict]:
    """(b): the straightforward single-process script the seeds start from."""
    preprocess = tf.function(
        lambda b: image_codec.preprocess(b, image_size, image_codec.JPEG, quality),
        input_signature=[tf.TensorSpec([], tf.string)])

    def run(files: list[str], root: str, out_path: str) -> dict:
        labels = sorted({os.path.basename(os.path.dirname(p)) for p in files})
        label_ids = {label: i for i, label in enumerate(labels)}
        options = tf.io.TFRecordOptions(compression_type="GZIP")
        with tf.io.TFRecordWriter(out_path, options) as writer:
            for path in files:
                with open(path, "rb") as f:
                    data = f.read()
                image = preprocess(data).numpy()
                label = os.path.basename(os.path.dirname(path))
                key = os.path.relpath(path, root)

                def ints(v: int) -> tf.train.Feature:
                    return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

                def strings(v: bytes) -> tf.train.Feature:
                    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

                example = tf.train.Example(features=tf.train.Features(feature={
                    "image": strings(image), "height": ints(image_size),
                    "width": ints(image_size), "channels": ints(3),
                    "label": ints(label_ids[label]), "label_name": strings(label.encode()),
                    "key": strings(key.encode())}))
                writer.write(example.SerializeToString())
        return {"images": len(files)}

    preprocess(tf.io.encode_jpeg(tf.zeros([8, 8, 3], tf.uint8)))  # Trace once, untimed.
    return run


def run_job(code_dir: str, argv: list[str]) -> dict:
    """(c), (d): the image job as a subprocess; its own timings."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join([code_dir, os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _JOB_DRIVER, json.dumps(argv)],
                          cwd=code_dir, env=env, capture_output=True, text=True)
    process_s = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"job failed ({code_dir}, {argv}):\n{proc.stderr[-3000:]}")
    line = next(line for line in proc.stdout.splitlines()
                if line.startswith("BENCHMARK_RESULT "))
    return {**json.loads(line.split(" ", 1)[1]), "process_s": process_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default="/tmp/benchmark_etl")
    parser.add_argument("--out", default="docs/benchmarks/etl",
                        help="Path prefix for <out>.json and <out>.png.")
    parser.add_argument("--num_images", type=int, default=3000)
    parser.add_argument("--tiny_images", type=int, default=20,
                        help="Input size of the fixed-overhead runs.")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--jpeg_quality", type=int, default=95)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max_foreign", type=float, default=0.15,
                        help="Retry a sample taken while other processes used more "
                             "than this many cores.")
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--skip", default="",
                        help="Comma-separated variants to leave out, e.g. d_job_mp2.")
    parser.add_argument("--baseline_dir", default=None,
                        help="Another checkout of this project: adds (c') for it.")
    parser.add_argument("--baseline_label", default="",
                        help="What --baseline_dir is, recorded in the JSON.")
    args = parser.parse_args()

    big_root = os.path.join(args.work_dir, f"raw{args.num_images}")
    tiny_root = os.path.join(args.work_dir, f"raw{args.tiny_images}")
    big_files = ensure_input(big_root, args.num_images)
    tiny_files = ensure_input(tiny_root, args.tiny_images)
    payloads = []
    for path in big_files:
        with open(path, "rb") as f:
            payloads.append(f.read())
    data = tf.constant(payloads)
    seeds_loop = make_seeds_loop(args.image_size, args.jpeg_quality)
    out = os.path.join(args.work_dir, "out")

    def job(code_dir: str, name: str, root: str, *flags: str) -> Callable[[], dict]:
        return lambda: run_job(code_dir, [
            f"--input={root}", f"--output_dir={os.path.join(out, name)}", "--overwrite",
            f"--image_size={args.image_size}", f"--jpeg_quality={args.jpeg_quality}",
            *flags])

    mp2 = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
    variants: dict[str, tuple[Callable[[], dict], list[str]]] = {
        "a_ceiling": (lambda: ceiling_pass(data, args.image_size, args.jpeg_quality), []),
        "a2_ceiling_autotune": (lambda: ceiling_pass(data, args.image_size,
                                                     args.jpeg_quality, autotune=True), []),
        "b_seeds": (lambda: seeds_loop(big_files, big_root,
                                       os.path.join(args.work_dir, "seeds.tfrecord.gz")),
                    big_files),
        "c_job": (job(REPO_ROOT, "c", big_root), big_files),
        "c_job_tiny": (job(REPO_ROOT, "c_tiny", tiny_root), tiny_files),
        "d_job_mp2": (job(REPO_ROOT, "d", big_root, *mp2), big_files),
        "d_job_mp2_tiny": (job(REPO_ROOT, "d_tiny", tiny_root, *mp2), tiny_files),
        "e_job_gzip0": (job(REPO_ROOT, "e", big_root, "--gzip_level=0"), big_files),
        "e_job_gzip0_tiny": (job(REPO_ROOT, "e_tiny", tiny_root, "--gzip_level=0"),
                             tiny_files),
    }
    if args.baseline_dir:
        baseline = os.path.abspath(args.baseline_dir)
        variants["c_job_baseline"] = (job(baseline, "c_base", big_root), big_files)
        variants["c_job_baseline_tiny"] = (job(baseline, "c_base_tiny", tiny_root),
                                           tiny_files)
    for name in filter(None, args.skip.split(",")):
        variants.pop(name, None)
        variants.pop(name + "_tiny", None)

    ceiling_pass(data, args.image_size, args.jpeg_quality)  # Warm-up: pools, tracing.
    samples: dict[str, list[dict]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, files = variants[name]
            attempts = []
            for _ in range(args.retries + 1):
                warm_page_cache(files)
                sample = Sample(fn)
                attempts.append(round(sample.foreign_cores, 3))
                if sample.foreign_cores <= args.max_foreign:
                    break
                time.sleep(10)
            record = {"wall_s": sample.wall, "cpu_s": sample.own_cpu,
                      "foreign_cores": sample.foreign_cores, "attempts_foreign": attempts,
                      **sample.extra}
            samples[name].append(record)
            print(f"round {r + 1}/{args.rounds} {name:<20} {_seconds(name, record):7.2f} s"
                  f"  (other processes: {sample.foreign_cores:.2f} cores)", flush=True)

    result = summarize(samples, args, len(big_files))
    print_table(result)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
    plot(result, args.out + ".png")
    print(f"wrote {args.out}.json and {args.out}.png")


def _seconds(name: str, record: dict) -> float:
    """The time that counts: the job's own wall time, or the whole sample's."""
    return record["job_s"] if "job_s" in record else record["wall_s"]


def summarize(samples: dict[str, list[dict]], args: argparse.Namespace, n: int) -> dict:
    times = {name: [_seconds(name, s) for s in recs] for name, recs in samples.items()}
    rates: dict[str, dict[str, float]] = {}
    for name in (k for k in times if not k.endswith("_tiny")):
        rates[name] = {"median": n / statistics.median(times[name]),
                       "best": n / min(times[name]),
                       "worst": n / max(times[name])}
    cpu_ms = {name: 1000 * statistics.median(s["cpu_s"] for s in samples[name]) / n
              for name in rates}
    fixed, steady = {}, {}
    for name in rates:
        if name + "_tiny" not in times:
            continue
        tiny = times[name + "_tiny"]
        fixed[name] = {"median_s": statistics.median(tiny), "best_s": min(tiny)}
        per_round = [n / (t - t0) for t, t0 in zip(times[name], tiny, strict=True)]
        steady[name] = {
            "median": n / (statistics.median(times[name]) - statistics.median(tiny)),
            "best": n / (min(times[name]) - min(tiny)),
            "per_round": per_round,
        }
    ceiling = rates["a_ceiling"]
    ratios = {name: {stat: value[stat] / ceiling[stat] for stat in ("median", "best")}
              for name, value in steady.items()}
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpu_cores": os.cpu_count(), "processor": platform.processor()
                    or platform.machine(), "memory_gib": round(
                        psutil.virtual_memory().total / 2**30, 1),
                    "python": platform.python_version(), "tensorflow": tf.__version__},
        "input": {"images": n, "tiny_images": args.tiny_images,
                  "generator": "random 140-420 px crops of sklearn's sample photos, "
                               "JPEG quality 90",
                  "image_size": args.image_size, "image_format": "jpeg",
                  "jpeg_quality": args.jpeg_quality},
        "rounds": args.rounds,
        "max_foreign_cores": args.max_foreign,
        "baseline": {"dir": args.baseline_dir, "label": args.baseline_label}
        if args.baseline_dir else None,
        "images_per_second": rates,
        "cpu_ms_per_image_median": cpu_ms,
        "fixed_overhead": fixed,
        "steady_state_images_per_second": steady,
        "steady_state_vs_ceiling": ratios,
        "samples": samples,
        "definitions": {
            "job time": "wall time of pipelines.images.run() in a fresh subprocess "
                        "(imports excluded; see process_s)",
            "fixed_overhead": "job time on the tiny input",
            "steady_state": "N / (job time on N images - job time on the tiny input), "
                            "from medians and from best rounds",
            "cpu_ms_per_image": "CPU of this process or the job's process tree / N",
        },
    }


def print_table(result: dict) -> None:
    rates = result["images_per_second"]
    cpu = result["cpu_ms_per_image_median"]
    print(f"\n{result['input']['images']} images, {result['rounds']} rounds")
    print(f"{'images/s (overall)':<50}{'median':>8}{'best':>8}{'worst':>8}"
          f"{'CPU ms/img':>12}")
    for name, value in rates.items():
        print(f"{NAMES.get(name, name):<50}{value['median']:>8.0f}{value['best']:>8.0f}"
              f"{value['worst']:>8.0f}{cpu[name]:>12.2f}")
    for name, value in result["steady_state_images_per_second"].items():
        fixed = result["fixed_overhead"][name]
        ratio = result["steady_state_vs_ceiling"][name]
        print(f"{NAMES.get(name, name)}: fixed overhead {fixed['median_s']:.1f} s "
              f"(best {fixed['best_s']:.1f}); steady state {value['median']:.0f} img/s "
              f"(best {value['best']:.0f}) = {ratio['median']:.2f} x ceiling "
              f"(best rounds {ratio['best']:.2f})")


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, med, top = [], [], []
    for name, value in result["images_per_second"].items():
        labels.append(NAMES.get(name, name) + " - overall")
        med.append(value["median"])
        top.append(value["best"])
        if name in result["steady_state_images_per_second"]:
            steady = result["steady_state_images_per_second"][name]
            labels.append(NAMES.get(name, name) + " - steady state")
            med.append(steady["median"])
            top.append(steady["best"])
    y = np.arange(len(labels))[::-1]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(labels) + 1.5))
    ax.barh(y + 0.2, top, height=0.4, color="#cc6633", label="best round")
    ax.barh(y - 0.2, med, height=0.4, color="#6699cc", label="median")
    for yy, m, t in zip(y, med, top, strict=True):
        ax.text(t, yy + 0.2, f" {t:.0f}", va="center", fontsize=8)
        ax.text(m, yy - 0.2, f" {m:.0f}", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("images / s")
    ax.legend(loc="lower right", fontsize=8)
    data = result["input"]
    ax.set_title(f"{data['images']} photo crops -> {data['image_size']} px JPEG, "
                 f"{result['machine']['cpu_cores']} cores, {result['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
