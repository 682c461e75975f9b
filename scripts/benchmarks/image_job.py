"""ETL benchmark: the image job against what a user would run instead, and a fused loop.

On the same generated input (--num_images JPEGs from scripts/benchmarks/sample_photos.py,
--photos: "web", random crops of real photos, longer side 320-1280 px, about 65 KB
each; or "camera12" / "camera24", camera-size photos made from the same sources,
12 MP at about 2.3 MB or 24 MP at about 4.5 MB, 1 in 5 stored portrait, 1 in 4 with
EXIF orientation 6), measures in one run, interleaving the variants over --rounds
rounds, images/s for
  (a) ceiling   TF ops (scaled decode) in a tf.data map: the job's per-image ops
                (etl.images.codec.preprocess: a JPEG decoded at the libjpeg DCT scale
                that keeps its shorter side >= 2 x --image_size, resize, EXIF turn,
                crop, encode) in a parallel tf.data map over in-memory bytes, on all
                cores (num_parallel_calls = cores, tf.data's autotuner off: see
                below; one thread per op, as in the job: TF_NUM_INTRAOP_THREADS
                below), no Beam, nothing read or written;
  (p) Pillow    what a user writes instead: a 20-line Pillow script on a process
                pool with one process per core (fork, started inside the timed call,
                its start recorded as pool_start_s), imap over the files in order
                (chunks of about files / (8 x cores), at most 16): per file, read
                the bytes, Image.open, draft("RGB", (2 x size, 2 x size)) (libjpeg's
                DCT scaling, the same rule as the job's up to rounding),
                ImageOps.exif_transpose, convert("RGB"), shorter side resized to
                --image_size (bilinear, reducing_gap=2.0; longer side round(long x
                size / short), as the job), centre crop, JPEG --jpeg_quality; the
                parent builds the same tf.train.Example as (f) and writes one GZIP
                TFRecord file at the job's default level for these records;
  (a') ceiling_autotune  the same map with AUTOTUNE and the autotuner on, as a
                diagnostic: on a 2-core VM the autotuner can settle into running
                the map on one core at a time, half the true ceiling, which is why
                (a) fixes the parallelism (not run by default);
  (f) fused loop  the practical limit: a plain Beam-free loop that reads each file
                and applies the same ops in a tf.data map (one call per core,
                autotuner off), serializes a tf.train.Example with the features the
                job stores (image, height, width, channels, label id, label_name,
                key) and hands it to a writer thread that writes one GZIP TFRecord
                file at the job's default level for these records (0: stored); no
                validation, no split, no sharding;
  (k) shard loop  the job's own shard loop (etl.images.shards.process_shard: read
                ahead, checks, the one decode, the finish graph, facts and hashes,
                Examples) over the files as one train shard, in this process, with
                the job's pools and a transform_fn from one untimed job run; no
                Beam, nothing written (not run by default; reported as a ratio to
                (a): what the job adds to the ops, before its runner and writes);
  (l) shard loop, no facts  (k) without the facts the job sells beside the stored
                image (duplicate signatures, quality measures and their thumbnails):
                what the job could reach if they were free (not run by default);
  (b) seeds     the seeds' approach: the same, single-threaded: one tf.function call
                per image and the write on the same thread;
  (c) job       python -m pipelines.images on the default runner (FnApiRunner,
                in_memory), as a subprocess;
  (d) job_mp2   the same job with --direct_running_mode=multi_processing
                --direct_num_workers=2 (not run by default);
  (e) job_gzip6 (c) with --gzip_level=6: the (already compressed) JPEG records
                deflated instead of stored;
  (g) job_lenient  (c) with --lenient_decoding: libjpeg-turbo's warnings are not
                errors; a JPEG is still decoded once on the reader threads (the
                strict check is that decode, so (c) and (g) should run alike);
  (h) job_no_exif  (c) with --ignore_exif_orientation: without the EXIF parse in
                the graph (web photos carry no EXIF, so it finds none and turns
                nothing: the cost every untagged image pays; camera photos carry
                orientation 1, or 6 for 1 in 4, which (h) leaves unturned);
and, for (c), (d), (e), (g) and (h), the fixed overhead and the steady-state rate
N / (T_N - T_tiny), where T_tiny is the same job's time on --tiny_images photos of
the same kind. The job's steady state is reported as a ratio to the better
reference, the one of (a) and (p) with more images/s overall (taken separately for
the medians and for the best rounds), against the goal of at least --goal (0.9) x
that reference (PASS/FAIL on the medians), and as ratios to the ceiling alone and to
the fused loop. The cost of each input check is reported two ways: the job's
steady-state loss, 1 - (c) / (g) for the strict check and 1 - (c) / (h) for the EXIF
orientation, against the --max_check_cost (0.10) budget (the JPEG strict check is the
job's one decode, so its loss should be noise), and, for the orientation, its own CPU
per image, measured in this process: the preprocessing ops with and without it on
the photos as they are and on copies carrying an EXIF block with orientation 6
(rotated: the parse and the turn; camera photos already carry an EXIF block, 1 in 4
with orientation 6, so "as they are" is not untagged for them). Each job run records
how many photos it rejected (none of these valid photos may be).

Job times are the wall time of ``pipelines.images.run(...)`` inside the subprocess
(interpreter start and imports excluded; they are in ``process_s``). The fixed
overhead is reported both ways: the job only (that time on the tiny input) and the
whole command (c_job_command_tiny: the wall time of ``python -m pipelines.images``
on the tiny input, run as a subprocess, interpreter start and imports included).
CPU time is the whole process tree's. Every sample records the CPU used by other
processes meanwhile ("foreign" cores); a sample taken while they used more than
--max_foreign cores is retried (up to --retries times), and medians and best rounds
are both reported. The input files are read once before each sample so that every
variant starts from the page cache.

--variants picks what runs (default: a_ceiling, p_pillow, f_fused_loop, b_seeds,
c_job, e_job_gzip6, g_job_lenient, h_job_no_exif; "all" adds a2_ceiling_autotune and
d_job_mp2). Each job variant adds a job run and its tiny run to every round; the
check costs are measured after the rounds. --baseline_dir adds (c) and
its tiny run for another checkout of the code (e.g. the commit before a change),
interleaved with the rest, for before/after comparisons.

Usage (the full measurement; photos are generated into --work_dir once and reused;
--num_images and --tiny_images default to 2,000 and 20 for web photos, 120 and 6 for
camera photos):

    python -m scripts.benchmarks image_job --work_dir /work/bench_data --num_images 2000 \\
        --rounds 3 [--baseline_dir DIR]
    python -m scripts.benchmarks image_job --work_dir /work/bench_data --photos camera12 \\
        --num_images 120 --tiny_images 6 --rounds 3
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import glob
import io
import multiprocessing
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf
from PIL import Image, ImageOps

from etl.core.transform.examples import serialize_example
from etl.images import codec
from etl.images.shards import default_gzip_level
from pipelines.worker_start import INTRA_OP_THREADS_ENV, run_ops_on_one_thread_each
from reader.format import contract
from scripts.benchmarks import harness
from scripts.benchmarks.sample_photos import KINDS, describe, ensure_tree

BENCHMARK = harness.Benchmark(
    name="image_job",
    measures="the image job's steady state against TF ops alone and a Pillow process pool",
    quick=("--work_dir", "{quick_dir}/photos", "--num_images", "40", "--tiny_images", "4",
           "--rounds", "1", "--variants", "a_ceiling,p_pillow,c_job", "--out",
           "{quick_dir}/image_job.json"),
)


AUTOTUNE = tf.data.AUTOTUNE

NAMES = {
    "a_ceiling": "(a) TF ops (scaled decode) in a tf.data map, all cores",
    "p_pillow": "(p) Pillow script on a process pool, all cores",
    "a2_ceiling_autotune": "(a') the same map, AUTOTUNE (diagnostic)",
    "f_fused_loop": "(f) fused loop: read+ops map, writer thread",
    "b_seeds": "(b) seeds: single-process loop + TFRecordWriter",
    "c_job": "(c) image job, default runner",
    "d_job_mp2": "(d) image job, multi_processing x2",
    "e_job_gzip6": "(e) image job, default runner, --gzip_level=6",
    "g_job_lenient": "(g) image job, --lenient_decoding (no strict check)",
    "h_job_no_exif": "(h) image job, --ignore_exif_orientation",
    "i_job_no_statistics": "(i) image job, --statistics=off (no statistics, flags, report)",
    "c_job_baseline": "(c') image job, baseline code",
    "k_shard_loop": "(k) the job's shard loop in this process, no Beam, no write",
    "l_shard_loop_no_facts": "(l) (k) without signatures and quality measures",
}
DEFAULT_VARIANTS = ("a_ceiling,p_pillow,f_fused_loop,b_seeds,c_job,e_job_gzip6,"
                    "g_job_lenient,h_job_no_exif")
ALL_VARIANTS = ("a_ceiling", "a2_ceiling_autotune", "p_pillow", "f_fused_loop", "b_seeds",
                "c_job", "d_job_mp2", "e_job_gzip6", "g_job_lenient", "h_job_no_exif",
                "i_job_no_statistics", "k_shard_loop", "l_shard_loop_no_facts")
# What a user would run instead of the job; the better of them is the reference.
REFERENCES = ("a_ceiling", "p_pillow")
# Each input check (strict JPEG check, EXIF orientation) may cost at most this fraction
# of the job's throughput.
MAX_CHECK_COST = 0.10
# The job's steady state must reach this fraction of the better reference.
GOAL_VS_REFERENCE = 0.9
# Input sizes by kind of photos when --num_images / --tiny_images are not given.
DEFAULT_COUNTS = {"web": (2000, 20), "camera": (120, 6)}


def input_files(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(root, "*", "*.jpg")))


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
               .map(lambda b: codec.preprocess(b, image_size, codec.JPEG,
                                                     quality),
                    num_parallel_calls=parallel, deterministic=False)
               .batch(64)
               .prefetch(AUTOTUNE if autotune else 2)
               .with_options(options))
    count = 0
    for batch in dataset:
        count += int(batch.shape[0])
    return {"images": count}


def make_shard_loop(files: list[str], root: str, transform_fn_dir: str,
                    image_size: int, facts: bool = True) -> Callable[[], dict]:
    """(k): the job's own shard loop (``etl.images.shards.process_shard``: read ahead,
    checks, the one decode, the finish graph, facts and hashes, Examples) over the
    files as one train shard, in this process, on the job's pools: no Beam, nothing
    written. What separates it from (a) is what the job adds to the ops; what
    separates (c) from it is the runner, the writes and the other stages. Without
    ``facts`` (l), neither signatures nor quality measures are taken."""
    from etl.images import loading, shards
    from etl.images.labels import ONE_CLASS
    from etl.images.preprocessing import ImagePreprocessing
    from etl.images.sources import ImageRecord

    records = [ImageRecord(key=os.path.relpath(path, root), uri=path,
                           label=os.path.basename(os.path.dirname(path)), split="train",
                           listed=(os.path.getsize(path), os.path.getmtime(path)))
               for path in files]
    transform = shards.ImageTransform(transform_fn_dir, ImagePreprocessing(image_size),
                                      ONE_CLASS, hash_images=facts, statistics=facts)
    threads = shards.default_transform_threads()
    read_pool = concurrent.futures.ThreadPoolExecutor(shards.default_read_threads())
    transform_pool = concurrent.futures.ThreadPoolExecutor(threads)

    def run() -> dict:
        written = sum(1 for outcome in shards.process_shard(
            records, transform, loading.InputLimits(), read_pool, transform_pool,
            transform_threads=threads, image_size=image_size)
            if isinstance(outcome, tuple))
        return {"images": written}

    return run


def _label_ids(files: list[str]) -> dict[str, int]:
    labels = sorted({os.path.basename(os.path.dirname(p)) for p in files})
    return {label: i for i, label in enumerate(labels)}


def stored_example(image: bytes, image_size: int, label_id: int, label_name: str,
                   key: str) -> bytes:
    """The serialized Example the job stores for one image (docs/FORMAT.md)."""
    return serialize_example({
        contract.IMAGE_KEY: image, contract.HEIGHT_KEY: image_size,
        contract.WIDTH_KEY: image_size, contract.CHANNELS_KEY: 3,
        contract.LABEL_KEY: label_id, contract.LABEL_NAME_KEY: label_name.encode(),
        contract.SOURCE_KEY: key.encode()})


def serialize(image: bytes, image_size: int, path: str, root: str,
              label_ids: dict[str, int]) -> bytes:
    """:func:`stored_example` of the photo at ``path``, labelled by its folder."""
    label = os.path.basename(os.path.dirname(path))
    return stored_example(image, image_size, label_ids[label], label,
                          os.path.relpath(path, root))


def make_seeds_loop(image_size: int, quality: int) -> Callable[[list[str], str, str], dict]:
    """(b): the straightforward single-process script the seeds start from."""
    preprocess = tf.function(
        lambda b: codec.preprocess(b, image_size, codec.JPEG, quality),
        input_signature=[tf.TensorSpec([], tf.string)])

    def run(files: list[str], root: str, out_path: str) -> dict:
        label_ids = _label_ids(files)
        options = tf.io.TFRecordOptions(compression_type="GZIP")
        with tf.io.TFRecordWriter(out_path, options) as writer:
            for path in files:
                with open(path, "rb") as f:
                    data = f.read()
                image = preprocess(data).numpy()
                writer.write(serialize(image, image_size, path, root, label_ids))
        return {"images": len(files)}

    preprocess(tf.io.encode_jpeg(tf.zeros([8, 8, 3], tf.uint8)))  # Trace once, untimed.
    return run


def fused_loop(files: list[str], root: str, out_path: str, image_size: int,
               quality: int, gzip_level: int | None = None) -> dict:
    """(f): read + ops in a tf.data map, serialize here, write on a third thread.

    The map runs one call per core with tf.data's autotuner off (as the ceiling
    does); this thread builds the Examples; a writer thread deflates and writes them,
    fed through a bounded queue.
    """
    if gzip_level is None:
        gzip_level = default_gzip_level(codec.JPEG, image_size)
    label_ids = _label_ids(files)
    options = tf.data.Options()
    options.autotune.enabled = False
    dataset = (tf.data.Dataset.from_tensor_slices(files)
               .map(lambda path: (path, codec.preprocess(
                   tf.io.read_file(path), image_size, codec.JPEG, quality)),
                    num_parallel_calls=os.cpu_count(), deterministic=True)
               .with_options(options))
    records: queue.Queue[bytes | None] = queue.Queue(maxsize=256)
    failure: list[Exception] = []

    def write() -> None:
        drained = False
        try:
            with tf.io.TFRecordWriter(out_path, tf.io.TFRecordOptions(
                    compression_type="GZIP", compression_level=gzip_level)) as writer:
                while (record := records.get()) is not None:
                    writer.write(record)
                drained = True
        except (tf.errors.OpError, OSError) as error:  # Re-raised by the caller.
            failure.append(error)
            while not drained and records.get() is not None:  # Unblock the producer.
                pass

    writer = threading.Thread(target=write, name="fused-loop-writer")
    writer.start()
    try:
        for path, image in dataset.as_numpy_iterator():
            records.put(serialize(image, image_size, path.decode(), root, label_ids))
    finally:
        records.put(None)
        writer.join()
    if failure:
        raise failure[0]
    return {"images": len(files)}


def pillow_preprocess(path: str, image_size: int, quality: int) -> bytes:
    """(p), per file: what a user's Pillow script does (runs in a pool worker)."""
    with open(path, "rb") as f:
        data = f.read()
    with Image.open(io.BytesIO(data)) as image:
        # JPEG only: libjpeg decodes at the largest DCT scale (1/2, 1/4, 1/8) whose
        # sides stay >= the requested size.
        image.draft("RGB", (2 * image_size, 2 * image_size))
        upright = ImageOps.exif_transpose(image).convert("RGB")
    width, height = upright.size
    shorter = min(width, height)
    # The job's rounding: the longer side becomes round(long * size / short).
    size = (max(image_size, (width * image_size + shorter // 2) // shorter),
            max(image_size, (height * image_size + shorter // 2) // shorter))
    resized = upright.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)
    left, top = (size[0] - image_size) // 2, (size[1] - image_size) // 2
    cropped = resized.crop((left, top, left + image_size, top + image_size))
    out = io.BytesIO()
    cropped.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def pillow_pool(files: list[str], root: str, out_path: str, image_size: int,
                quality: int, gzip_level: int | None = None) -> dict:
    """(p): :func:`pillow_preprocess` on a pool of one process per core, started
    here (timed), ordered imap in chunks; this process serializes and writes.

    The pool forks: a spawned worker would import this module, TensorFlow included,
    which a user's Pillow script does not pay for. Its workers are reaped before
    returning, so their CPU is in this process's RUSAGE_CHILDREN (``Sample``).
    """
    if gzip_level is None:
        gzip_level = default_gzip_level(codec.JPEG, image_size)
    label_ids = _label_ids(files)
    workers = os.cpu_count() or 1
    chunksize = max(1, min(16, len(files) // (8 * workers)))
    work = functools.partial(pillow_preprocess, image_size=image_size, quality=quality)
    options = tf.io.TFRecordOptions(compression_type="GZIP", compression_level=gzip_level)
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool_start_s = time.perf_counter() - start
        with tf.io.TFRecordWriter(out_path, options) as writer:
            # (path, stored JPEG bytes), in file order
            for path, image in zip(files, pool.imap(work, files, chunksize), strict=True):
                writer.write(serialize(image, image_size, path, root, label_ids))
        pool.close()
        pool.join()
    return {"images": len(files), "pool_start_s": pool_start_s, "chunksize": chunksize}


def with_exif_orientation(jpeg: bytes, orientation: int) -> bytes:
    """``jpeg`` with an EXIF APP1 segment (written by Pillow) right after its SOI."""
    from PIL import Image

    exif = Image.Exif()
    exif[0x010F] = "Benchmark"  # Make, so the orientation is not the only entry.
    exif[0x0112] = orientation
    payload = exif.tobytes()
    return jpeg[:2] + b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload + jpeg[2:]


def make_ops_pass(image_size: int, quality: int, orientation: bool
                  ) -> Callable[[tf.Tensor], dict]:
    """The preprocessing ops over a batch of photos in one graph call (tf.map_fn,
    as transform_fn runs them), with or without the EXIF orientation."""
    ops = tf.function(lambda batch: tf.map_fn(
        lambda b: codec.preprocess(b, image_size, codec.JPEG, quality,
                                         apply_exif_orientation=orientation),
        batch, fn_output_signature=tf.TensorSpec([], tf.string)))

    def run(batch: tf.Tensor) -> dict:
        ops(batch)
        return {"images": int(batch.shape[0])}

    return run


def check_costs(payloads: list[bytes], image_size: int, quality: int, rounds: int,
                max_foreign: float, retries: int) -> dict:
    """CPU ms per image of each input check, measured in this process (best of
    ``rounds``, each sample retried under foreign load like the variants')."""
    sample = payloads[:500]
    plain = tf.constant(sample)
    rotated = tf.constant([with_exif_orientation(data, 6) for data in sample])
    without, with_exif = (make_ops_pass(image_size, quality, orientation)
                          for orientation in (False, True))
    passes = {
        "ops_no_exif": lambda: without(plain),
        "ops_exif_untagged": lambda: with_exif(plain),
        "ops_exif_rotated": lambda: with_exif(rotated),
    }
    for run in passes.values():  # Trace the graphs and warm the caches, untimed.
        run()
    results: dict[str, dict] = {}
    for name, fn in passes.items():
        samples = []
        for _ in range(rounds):
            measured, _ = harness.quiet_sample(fn, max_foreign, retries)
            samples.append({"cpu_ms_per_image": 1000 * measured.own_cpu
                            / measured.extra["images"],
                            "foreign_cores": measured.foreign_cores, **measured.extra})
        results[name] = {"best_cpu_ms_per_image": min(s["cpu_ms_per_image"]
                                                      for s in samples),
                         "samples": samples}
        print(f"check cost {name:<20} {results[name]['best_cpu_ms_per_image']:.3f} ms CPU "
              f"per image (other processes: "
              f"{max(s['foreign_cores'] for s in samples):.2f} cores at most)", flush=True)
    best = {name: value["best_cpu_ms_per_image"] for name, value in results.items()}
    return {
        "per_pass": results,
        "exif_untagged_cpu_ms_per_image": best["ops_exif_untagged"] - best["ops_no_exif"],
        "exif_rotated_cpu_ms_per_image": best["ops_exif_rotated"] - best["ops_no_exif"],
        "ops_cpu_ms_per_image": best["ops_no_exif"],
    }


def _run(command: list[str], code_dir: str) -> None:
    proc = subprocess.run(command, cwd=code_dir, env=harness.job_env(code_dir),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"job failed ({code_dir}, {command[-1]}):\n"
                           f"{proc.stderr[-3000:]}")


def run_command(code_dir: str, argv: list[str]) -> dict:
    """The whole command, ``python -m pipelines.images ARGV``, as a user runs it."""
    _run([sys.executable, "-m", "pipelines.images", *argv], code_dir)
    return {}


def run_job(code_dir: str, argv: list[str], output_dir: str) -> dict:
    """(c), (d), (e), (g), (h): the image job in a fresh interpreter; its own timings
    and the photos it rejected."""
    with tempfile.TemporaryDirectory() as tmp:
        timings = os.path.join(tmp, "timings.json")
        start = time.perf_counter()
        _run(harness.timed_job_command("pipelines.images", argv, timings), code_dir)
        process_s = time.perf_counter() - start
        result = harness.read_json(timings)
    return {**result, "rejected": harness.read_manifest(output_dir)["rejected"]["count"],
            "process_s": process_s}


def main() -> None:
    # Before TensorFlow's first op (in main, so that importing this module changes no
    # setting): the ceiling, the fused loop and the check costs run each op on one
    # thread, by the job's own rule (run_ops_on_one_thread_each says why), and the job
    # subprocesses inherit it. TF_NUM_INTRAOP_THREADS=0 measures
    # everything with TensorFlow's default (one thread per core) instead; the value
    # is in the results.
    run_ops_on_one_thread_each()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "bench_photos"),
                        help="Generated photos are kept (and reused) here.")
    harness.add_result_flags(parser, "image_job", "<photos>_<num_images>, e.g. web_20000")
    parser.add_argument("--photos", choices=KINDS, default="web",
                        help="The input's kind (scripts/benchmarks/sample_photos.py): web-size "
                             "(~65 KB) or camera-size, 12 or 24 megapixels.")
    parser.add_argument("--num_images", type=int, default=None,
                        help="Default: 2000 web photos, 120 camera photos.")
    parser.add_argument("--tiny_images", type=int, default=None,
                        help="Input size of the fixed-overhead runs (photos of the "
                             "same kind). Default: 20 web photos, 6 camera photos.")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--jpeg_quality", type=int, default=95)
    harness.add_sampling_flags(parser, rounds=3)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS,
                        help=f"Comma-separated, or 'all': {', '.join(ALL_VARIANTS)}.")
    parser.add_argument("--goal", type=float, default=GOAL_VS_REFERENCE,
                        help="Job steady state / better reference (a_ceiling or "
                             "p_pillow, whichever is faster) needed to PASS.")
    parser.add_argument("--max_check_cost", type=float, default=MAX_CHECK_COST,
                        help="Budget of each input check, as a fraction of the job's "
                             "throughput (strict check) or of its CPU per image.")
    parser.add_argument("--baseline_dir", default=None,
                        help="Another checkout of this project: adds (c') for it.")
    parser.add_argument("--baseline_label", default="",
                        help="What --baseline_dir is, recorded in the JSON.")
    args = parser.parse_args()
    counts = DEFAULT_COUNTS["web" if args.photos == "web" else "camera"]
    args.num_images = args.num_images or counts[0]
    args.tiny_images = args.tiny_images or counts[1]
    chosen = ALL_VARIANTS if args.variants == "all" else args.variants.split(",")
    unknown = set(chosen) - set(ALL_VARIANTS)
    if unknown or "a_ceiling" not in chosen:
        parser.error(f"--variants must include a_ceiling and name only {ALL_VARIANTS}; "
                     f"got {args.variants!r}.")

    os.makedirs(args.work_dir, exist_ok=True)
    big_root = ensure_tree(args.work_dir, args.num_images, args.photos, verbose=True)
    tiny_root = ensure_tree(args.work_dir, args.tiny_images, args.photos)
    big_files, tiny_files = input_files(big_root), input_files(tiny_root)
    payloads = []
    for path in big_files:
        with open(path, "rb") as f:
            payloads.append(f.read())
    data = tf.constant(payloads)
    seeds_loop = make_seeds_loop(args.image_size, args.jpeg_quality)
    out = os.path.join(args.work_dir, "etl_out")
    os.makedirs(out, exist_ok=True)

    def job_argv(name: str, root: str, *flags: str) -> list[str]:
        return [f"--input={root}", f"--output_dir={os.path.join(out, name)}",
                "--overwrite", f"--image_size={args.image_size}",
                f"--jpeg_quality={args.jpeg_quality}", *flags]

    def job(code_dir: str, name: str, root: str, *flags: str) -> Callable[[], dict]:
        return lambda: run_job(code_dir, job_argv(name, root, *flags),
                               os.path.join(out, name))

    mp2 = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
    variants: dict[str, tuple[Callable[[], dict], list[str]]] = {
        "a_ceiling": (lambda: ceiling_pass(data, args.image_size, args.jpeg_quality), []),
        "a2_ceiling_autotune": (lambda: ceiling_pass(data, args.image_size,
                                                     args.jpeg_quality, autotune=True), []),
        "p_pillow": (lambda: pillow_pool(big_files, big_root,
                                         os.path.join(out, "pillow.tfrecord.gz"),
                                         args.image_size, args.jpeg_quality),
                     big_files),
        "f_fused_loop": (lambda: fused_loop(big_files, big_root,
                                            os.path.join(out, "fused.tfrecord.gz"),
                                            args.image_size, args.jpeg_quality),
                         big_files),
        "b_seeds": (lambda: seeds_loop(big_files, big_root,
                                       os.path.join(out, "seeds.tfrecord.gz")),
                    big_files),
        "c_job": (job(harness.REPO_ROOT, "c", big_root), big_files),
        "c_job_tiny": (job(harness.REPO_ROOT, "c_tiny", tiny_root), tiny_files),
        "c_job_command_tiny": (lambda: run_command(harness.REPO_ROOT, job_argv("c_cmd", tiny_root)),
                               tiny_files),
        "d_job_mp2": (job(harness.REPO_ROOT, "d", big_root, *mp2), big_files),
        "d_job_mp2_tiny": (job(harness.REPO_ROOT, "d_tiny", tiny_root, *mp2), tiny_files),
        "e_job_gzip6": (job(harness.REPO_ROOT, "e", big_root, "--gzip_level=6"), big_files),
        "e_job_gzip6_tiny": (job(harness.REPO_ROOT, "e_tiny", tiny_root, "--gzip_level=6"),
                             tiny_files),
        "g_job_lenient": (job(harness.REPO_ROOT, "g", big_root, "--lenient_decoding"), big_files),
        "g_job_lenient_tiny": (job(harness.REPO_ROOT, "g_tiny", tiny_root, "--lenient_decoding"),
                               tiny_files),
        "h_job_no_exif": (job(harness.REPO_ROOT, "h", big_root, "--ignore_exif_orientation"),
                          big_files),
        "h_job_no_exif_tiny": (job(harness.REPO_ROOT, "h_tiny", tiny_root,
                                   "--ignore_exif_orientation"), tiny_files),
        "i_job_no_statistics": (job(harness.REPO_ROOT, "i", big_root, "--statistics=off"),
                                big_files),
        "i_job_no_statistics_tiny": (job(harness.REPO_ROOT, "i_tiny", tiny_root,
                                         "--statistics=off"), tiny_files),
    }
    loops = {"k_shard_loop": True, "l_shard_loop_no_facts": False}
    if set(loops) & set(chosen):
        # The loop needs a transform_fn of these labels: the job's own, made once.
        run_job(harness.REPO_ROOT, job_argv("k_prep", big_root), os.path.join(out, "k_prep"))
        for name, facts in loops.items():
            if name in chosen:
                variants[name] = (make_shard_loop(
                    big_files, big_root, os.path.join(out, "k_prep", "transform_fn"),
                    args.image_size, facts), big_files)
    if args.baseline_dir:
        baseline = os.path.abspath(args.baseline_dir)
        variants["c_job_baseline"] = (job(baseline, "c_base", big_root), big_files)
        variants["c_job_baseline_tiny"] = (job(baseline, "c_base_tiny", tiny_root),
                                           tiny_files)
        chosen = [*chosen, "c_job_baseline"]
    # A variant brings its fixed-overhead runs: <name>_tiny (and for c, the command).
    variants = {name: value for name, value in variants.items()
                if name in chosen or name.removesuffix("_tiny") in chosen
                or (name == "c_job_command_tiny" and "c_job" in chosen)}

    ceiling_pass(data, args.image_size, args.jpeg_quality)  # Warm-up: pools, tracing.
    samples: dict[str, list[dict]] = {name: [] for name in variants}
    for r, name in harness.interleaved(list(variants), args.rounds):
        fn, files = variants[name]
        sample, attempts = harness.quiet_sample(
            fn, args.max_foreign, args.retries,
            before=functools.partial(harness.warm_page_cache, files))
        record = {"wall_s": sample.wall, "cpu_s": sample.own_cpu,
                  "foreign_cores": sample.foreign_cores, "attempts_foreign": attempts,
                  **sample.extra}
        samples[name].append(record)
        print(f"round {r + 1}/{args.rounds} {name:<20} {_seconds(name, record):7.2f} s"
              f"  (other processes: {sample.foreign_cores:.2f} cores)", flush=True)

    costs = check_costs(payloads, args.image_size, args.jpeg_quality, args.rounds,
                        args.max_foreign, args.retries)
    result = summarize(samples, args, len(big_files), describe(big_root),
                       describe(tiny_root), costs)
    print_table(result)
    harness.write_result(args.out, args.setting or f"{args.photos}_{args.num_images}",
                         result, CHART)
    print(f"wrote {args.out} and its chart")


def _seconds(name: str, record: dict) -> float:
    """The time that counts: the job's own wall time, or the whole sample's."""
    return record["job_s"] if "job_s" in record else record["wall_s"]


def _steady(n: int, total_s: float, tiny_s: float) -> float | None:
    """N / (T_N - T_tiny); None when the difference is not positive (N too small)."""
    return n / (total_s - tiny_s) if total_s > tiny_s else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def better_reference(rates: dict[str, dict[str, float]], stat: str) -> str:
    """The reference (:data:`REFERENCES`) with the most images/s overall by ``stat``."""
    return max((name for name in REFERENCES if name in rates),
               key=lambda name: rates[name][stat])


def summarize(samples: dict[str, list[dict]], args: argparse.Namespace, n: int,
              photos: dict, tiny_photos: dict, costs: dict) -> dict:
    times = {name: [_seconds(name, s) for s in recs] for name, recs in samples.items()}
    rates: dict[str, dict[str, float]] = {}
    for name in (k for k in times if not k.endswith("_tiny")):
        rates[name] = {key: n / seconds for key, seconds in harness.spread(
            times[name], higher_is_better=False).items()}
    cpu_ms = {name: 1000 * statistics.median(s["cpu_s"] for s in samples[name]) / n
              for name in rates}
    fixed, steady = {}, {}
    for name in rates:
        if name + "_tiny" not in times:
            continue
        tiny = times[name + "_tiny"]
        fixed[name] = {"median_s": statistics.median(tiny), "best_s": min(tiny)}
        steady[name] = {
            "median": _steady(n, statistics.median(times[name]), statistics.median(tiny)),
            "best": _steady(n, min(times[name]), min(tiny)),
            "per_round": [_steady(n, t, t0) for t, t0 in zip(times[name], tiny,
                                                             strict=True)],
        }
    if "c_job_command_tiny" in times:
        command = times["c_job_command_tiny"]
        fixed["c_job"].update(whole_command_median_s=statistics.median(command),
                              whole_command_best_s=min(command))
    ceiling = rates["a_ceiling"]
    fused = rates.get("f_fused_loop")
    stats = ("median", "best")
    vs_ceiling = {name: {stat: _ratio(value[stat], ceiling[stat]) for stat in stats}
                  for name, value in steady.items()}
    vs_fused = {name: {stat: _ratio(value[stat], fused[stat]) for stat in stats}
                for name, value in steady.items()} if fused else {}
    reference = {stat: {"variant": (best := better_reference(rates, stat)),
                        "images_per_second": rates[best][stat]} for stat in stats}
    vs_reference = {name: {stat: _ratio(value[stat], reference[stat]["images_per_second"])
                           for stat in stats}
                    for name, value in steady.items()}
    goal = None
    if "c_job" in vs_reference:
        reached = vs_reference["c_job"]["median"]
        goal = {"variant": "c_job", "min_steady_state_vs_better_reference": args.goal,
                "better_reference": reference["median"]["variant"],
                "steady_state_vs_better_reference_median": reached,
                "steady_state_vs_better_reference_best": vs_reference["c_job"]["best"],
                "steady_state_vs_ceiling_median": vs_ceiling["c_job"]["median"],
                "pass": reached is not None and reached >= args.goal}
    checks = dict(costs, max_check_cost=args.max_check_cost)
    if "c_job" in cpu_ms:
        checks["job_cpu_ms_per_image"] = cpu_ms["c_job"]
        checks["exif_untagged_share_of_job_cpu"] = (
            costs["exif_untagged_cpu_ms_per_image"] / cpu_ms["c_job"])
        checks["exif_rotated_share_of_job_cpu"] = (
            costs["exif_rotated_cpu_ms_per_image"] / cpu_ms["c_job"])
    for name, key in (("g_job_lenient", "strict_check"), ("h_job_no_exif", "exif"),
                      ("i_job_no_statistics", "statistics")):
        if name in steady and "c_job" in steady:
            loss = {stat: None if not steady[name][stat] or steady["c_job"][stat] is None
                    else 1 - steady["c_job"][stat] / steady[name][stat]
                    for stat in stats}
            checks[f"{key}_steady_state_loss"] = loss
            checks[f"{key}_pass"] = (loss["median"] is not None
                                     and loss["median"] <= args.max_check_cost)
    rejected = {name: sorted({s.get("rejected") for s in recs})
                for name, recs in samples.items() if recs and "rejected" in recs[0]}
    commit = harness.code_commit()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": harness.machine(tf_num_intraop_threads=os.environ[INTRA_OP_THREADS_ENV]),
        "code_commit": commit,
        "input": {"kind": args.photos, "images": n, "tiny_images": args.tiny_images,
                  "photos": photos, "tiny_photos": tiny_photos,
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
        "better_reference": reference,
        "steady_state_vs_better_reference": vs_reference,
        "steady_state_vs_ceiling": vs_ceiling,
        "steady_state_vs_fused_loop": vs_fused,
        "shard_loop_vs_ceiling": {stat: _ratio(rates["k_shard_loop"][stat], ceiling[stat])
                                  for stat in stats} if "k_shard_loop" in rates else None,
        "shard_loop_no_facts_vs_ceiling": {
            stat: _ratio(rates["l_shard_loop_no_facts"][stat], ceiling[stat])
            for stat in stats} if "l_shard_loop_no_facts" in rates else None,
        "goal": goal,
        "checks": checks,
        "rejected_by_job_run": rejected,
        "samples": samples,
        "definitions": {
            "job time": "wall time of pipelines.images.run() in a fresh subprocess "
                        "(imports excluded; see process_s)",
            "fixed_overhead": "median_s / best_s: job time on the tiny input (the job "
                              "only); whole_command_*: wall time of python -m "
                              "pipelines.images on the tiny input as a subprocess "
                              "(interpreter start and imports included)",
            "steady_state": "N / (job time on N images - job time on the tiny input), "
                            "from medians and from best rounds",
            "ceiling": "a_ceiling: TF ops (scaled decode) in a tf.data map: "
                       "etl.images.codec.preprocess (a JPEG decoded at the DCT scale "
                       "that keeps its shorter side >= 2 x image_size) over in-memory "
                       "bytes, one call per core, autotuner off",
            "pillow": "p_pillow: a Pillow script on a fork pool of one process per "
                      "core (pool start timed, also in pool_start_s), ordered imap "
                      "in chunks: read, Image.open, draft('RGB', (2 x size, 2 x "
                      "size)), ImageOps.exif_transpose, convert('RGB'), bilinear "
                      "resize (reducing_gap=2.0) of the shorter side to size, centre "
                      "crop, JPEG at jpeg_quality; this process serializes the same "
                      "Examples as f_fused_loop and writes one GZIP TFRecord file at "
                      "the job's default level",
            "better_reference": "of a_ceiling and p_pillow, the one with more images/s "
                                "overall, for the medians and for the best rounds "
                                "separately",
            "fused_loop": "f_fused_loop: the practical limit, read + ops in a tf.data "
                          "map (one call per core, autotuner off), Example "
                          "serialization, GZIP write (the job's default level for "
                          "JPEG records) on a writer thread",
            "goal": "c_job steady state (medians) >= "
                    "min_steady_state_vs_better_reference x the better reference "
                    "(medians)",
            "cpu_ms_per_image": "CPU of this process or the job's process tree / N",
            "checks": "strict_check_steady_state_loss = 1 - c_job / g_job_lenient, "
                      "statistics_steady_state_loss = 1 - c_job / i_job_no_statistics "
                      "and exif_steady_state_loss = 1 - c_job / h_job_no_exif (steady "
                      "states; the strict check is the job's one JPEG decode, so the "
                      "first should be noise); exif_*_cpu_ms_per_image: best-of-rounds "
                      "CPU per image in this process, the ops with orientation minus "
                      "without, on 500 "
                      "photos as they are ('untagged': web photos carry no EXIF, "
                      "camera photos 1 in 4 orientation 6) and with an EXIF "
                      "orientation 6 block inserted in front (rotated)",
        },
    }


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _describe_input(data: dict) -> str:
    """E.g. '120 camera12 photos (12.2 MP, mean 2.36 MB)'."""
    stats = data["photos"]["stats"]
    size = (f"mean {stats['mean_kb'] / 1000:.2f} MB" if stats["mean_kb"] >= 1000
            else f"mean {stats['mean_kb']} KB")
    return (f"{data['images']} {data['kind']} photos ({stats['mean_megapixels']:.1f} MP, "
            f"{size})")


def print_table(result: dict) -> None:
    rates = result["images_per_second"]
    cpu = result["cpu_ms_per_image_median"]
    print(f"\n{_describe_input(result['input'])}, {result['rounds']} rounds")
    print(f"{'images/s (overall)':<58}{'median':>8}{'best':>8}{'worst':>8}"
          f"{'CPU ms/img':>12}")
    for name, value in rates.items():
        print(f"{NAMES.get(name, name):<58}{value['median']:>8.1f}{value['best']:>8.1f}"
              f"{value['worst']:>8.1f}{cpu[name]:>12.2f}")
    reference = result["better_reference"]
    print(f"better reference: {reference['median']['variant']} by medians "
          f"({reference['median']['images_per_second']:.1f} img/s), "
          f"{reference['best']['variant']} by best rounds "
          f"({reference['best']['images_per_second']:.1f} img/s)")
    for key, name in (("shard_loop_vs_ceiling", "(k) shard loop"),
                      ("shard_loop_no_facts_vs_ceiling", "(l) shard loop, no facts")):
        if result.get(key):
            loop = result[key]
            print(f"{name} = {_fmt(loop['median'], '.2f')} x ceiling (best rounds "
                  f"{_fmt(loop['best'], '.2f')})")
    for name, value in result["steady_state_images_per_second"].items():
        fixed = result["fixed_overhead"][name]
        to_reference = result["steady_state_vs_better_reference"][name]
        ratio = result["steady_state_vs_ceiling"][name]
        print(f"{NAMES.get(name, name)}: steady state {_fmt(value['median'], '.1f')} "
              f"img/s (best {_fmt(value['best'], '.1f')})")
        print(f"    = {_fmt(to_reference['median'], '.2f')} x better reference (best "
              f"rounds {_fmt(to_reference['best'], '.2f')}), "
              f"{_fmt(ratio['median'], '.2f')} x ceiling (best rounds "
              f"{_fmt(ratio['best'], '.2f')})", end="")
        to_fused = result["steady_state_vs_fused_loop"].get(name)
        print(f", {_fmt(to_fused['median'], '.2f')} x fused loop" if to_fused else "")
        print(f"    fixed overhead, job only: {fixed['median_s']:.1f} s "
              f"(best {fixed['best_s']:.1f})", end="")
        if "whole_command_median_s" in fixed:
            print(f"; whole command: {fixed['whole_command_median_s']:.1f} s "
                  f"(best {fixed['whole_command_best_s']:.1f})", end="")
        print()
    checks = result["checks"]
    as_they_are = ("untagged image" if result["input"]["kind"] == "web"
                   else "image as it is (1 in 4 tagged 6)")
    print(f"EXIF orientation: {checks['exif_untagged_cpu_ms_per_image']:.3f} ms CPU per "
          f"{as_they_are}, {checks['exif_rotated_cpu_ms_per_image']:.3f} ms per rotated "
          f"one (ops alone: {checks['ops_cpu_ms_per_image']:.3f} ms)")
    for key, label in (("strict_check", "strict check"), ("exif", "EXIF orientation")):
        if f"{key}_steady_state_loss" in checks:
            loss = checks[f"{key}_steady_state_loss"]
            print(f"{label}: job steady state loss {_fmt(loss['median'], '.1%')} (best "
                  f"rounds {_fmt(loss['best'], '.1%')}), budget "
                  f"{checks['max_check_cost']:.0%} -> "
                  f"{'PASS' if checks[f'{key}_pass'] else 'FAIL'}")
    print(f"rejected photos per job run: {result['rejected_by_job_run']}")
    goal = result["goal"]
    if goal:
        print(f"goal: job steady state >= {goal['min_steady_state_vs_better_reference']} "
              f"x better reference ({goal['better_reference']}, medians): "
              f"{_fmt(goal['steady_state_vs_better_reference_median'], '.2f')} x -> "
              f"{'PASS' if goal['pass'] else 'FAIL'}")


def panel(setting: str, result: dict) -> harness.Panel:
    """The chart panel of one setting's result: each variant's rate overall and, for
    the jobs, in the steady state."""
    labels, medians, bests = [], [], []
    for name, value in result["images_per_second"].items():
        labels.append(NAMES.get(name, name) + " - overall")
        medians.append(value["median"])
        bests.append(value["best"])
        if name in result["steady_state_images_per_second"]:
            steady = result["steady_state_images_per_second"][name]
            labels.append(NAMES.get(name, name) + " - steady state")
            medians.append(steady["median"] or 0.0)
            bests.append(steady["best"] or 0.0)
    line = None
    if result["goal"]:
        goal = result["goal"]["min_steady_state_vs_better_reference"]
        reference = result["better_reference"]["median"]
        line = (goal * reference["images_per_second"],
                f"goal: {goal} x {reference['variant']} (median)")
    data = result["input"]
    return harness.Panel(f"{setting}: {_describe_input(data)} -> {data['image_size']} px JPEG, "
                         f"{result['machine']['cpu_cores']} cores, {result['date']}",
                         labels, medians, bests, line)


CHART = harness.Chart(panel=panel, unit="images / s", value_format=".1f")


if __name__ == "__main__":
    main()
