"""The image job's peak memory on large, highly compressible images (issue 59).

Small files can decode to large images: an 8192 x 8192 16-bit RGBA PNG of smooth
content is half a megabyte on disk and 256 MiB of 8-bit RGBA once decoded. The job
weighs each image by what its decode will hold (``etl.images.loading.decode_weight``)
and decodes at most ``--decode_budget_mb`` of them at once. Two measurements:

  per_image  in a fresh process per case, warmed up on small images of every kind (so
             that tracing is not counted), the peak RSS that one batch of the shard
             step's decode and finish adds (``decode_batch``, ``FinishImages.decode``
             and ``FinishImages``, what ``ImageTransform`` runs besides the labels):
             --side x --side PNGs of each mode (L, LA, RGB, RGBA and 16-bit RGBA),
             alone and two at once, and RGBA and LA composited on
             ``--alpha_background`` alone; as bytes per decoded pixel, beside the
             weight the job gives them (``decode_weight``, which must not be less);
  job        the image job as a user runs it, ``python -m pipelines.images
             --input=<tree> --output_dir=... --overwrite [--job_flags]``, under the
             harness's exact peak-RSS wrapper (``ru_maxrss`` of the job process), on
             --count files of each --kinds: ``png16_rgba`` and ``png8_rgba`` (--side x
             --side RGBA PNGs, a coarse colour gradient with rows filtered Up, about
             0.56 and 0.29 MB each at 8192 px; file ``i`` in ``c{i % 4}/``) and
             ``web`` (scripts/benchmarks/sample_photos.py's web-size JPEGs).

Both run on this checkout and, with --baseline_dir, on another checkout (the
"before": its packages first on PYTHONPATH, its folder the cwd), whose job gets
--baseline_count files of the PNG kinds (default 6: before the budget, a folder of
such images was decoded 32 at a time, about 0.85 GiB each at 8192 px). Target,
printed PASS/FAIL and saved: every job run of this checkout exits 0, writes every
image, and peaks at most --max_peak_gb (2.5 GB = 2.5e9 bytes).

Generated inputs are kept in --work_dir and reused. Usage (the full measurement,
about 15 minutes on 2 cores with a baseline):

    nice -n 19 python -m scripts.benchmarks decode_memory --work_dir /tmp/bench_decode \\
        --count 32 --baseline_dir /tmp/base59
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

from scripts.benchmarks import harness
from scripts.benchmarks.sample_photos import describe, ensure_photos

BENCHMARK = harness.Benchmark(
    name="decode_memory",
    measures="the image job's peak memory on large compressible PNGs and on photos",
    quick=("--work_dir", "{quick_dir}/decode_memory", "--side", "2048", "--count", "4",
           "--kinds", "png16_rgba,web", "--out", "{quick_dir}/decode_memory.json"),
)

PNG_KINDS = {"png16_rgba": (4, 16), "png8_rgba": (4, 8)}  # kind: (channels, bits)
KINDS = (*PNG_KINDS, "web")
# per_image cases: (name, mode, channels, bits, images at once, composited).
PER_IMAGE = (
    ("L", 1, 8, 1, False), ("LA", 2, 8, 1, False), ("RGB", 3, 8, 1, False),
    ("RGBA", 4, 8, 1, False), ("RGBA16", 4, 16, 1, False),
    ("L", 1, 8, 2, False), ("LA", 2, 8, 2, False), ("RGB", 3, 8, 2, False),
    ("RGBA", 4, 8, 2, False), ("LA", 2, 8, 1, True), ("RGBA", 4, 8, 1, True),
)
_COLOUR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # PNG colour type by channels


def write_png(path: str, side: int, channels: int, bits: int, seed: int) -> int:
    """A ``side x side`` PNG of ``channels`` (1-4) ``bits``-bit samples that compresses
    well: a colour gradient in 64-pixel steps over a random base colour, every row
    after the first filtered Up (the difference to the row above). Written a row at
    a time; returns the file's size."""
    rng = np.random.default_rng(seed)
    top = 2**bits - 1
    base = rng.integers(0, top + 1, channels)
    steps = (np.arange(side) // 64 * 64 * top // side).astype(np.int64)
    dtype = ">u2" if bits == 16 else "u1"
    deflate, parts, previous = zlib.compressobj(6), [], None
    for y in range(side):
        row = np.empty((side, channels), np.int64)
        row[:] = base
        row[:, 0] = (steps + (y // 64) * 97) % (top + 1)
        raw = np.frombuffer(row.astype(dtype).tobytes(), np.uint8)
        parts.append(deflate.compress(b"\x00" + raw.tobytes() if previous is None
                                      else b"\x02" + (raw - previous).tobytes()))
        previous = raw
    parts.append(deflate.flush())

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", side, side, bits, _COLOUR_TYPES[channels], 0, 0, 0)
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b""))
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    return len(data)


def ensure_pngs(work_dir: str, kind: str, side: int, count: int) -> str:
    """The tree ``<work_dir>/<kind>_<side>_<count>`` of ``count`` PNGs of ``kind``
    (file ``i`` is ``c{i % 4}/{i:04d}.png``, seed ``i``), made once."""
    channels, bits = PNG_KINDS[kind]
    root = os.path.join(work_dir, f"{kind}_{side}_{count}")
    for i in range(count):
        path = os.path.join(root, f"c{i % 4}", f"{i:04d}.png")
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_png(path, side, channels, bits, seed=i)
    return root


def tree_facts(root: str) -> dict:
    sizes = [os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root)
             for f in files if f.endswith((".png", ".jpg"))]
    return {"files": len(sizes), "mib": round(sum(sizes) / harness.MIB, 2),
            "mean_kb": round(sum(sizes) / len(sizes) / 1000, 1)}


# One batch of the shard step's decode and finish in a warm process (argv[1]: JSON
# {"files", "alpha_background", "image_size"}); prints the peak RSS it added.
_PER_IMAGE = r"""
import io, json, resource, sys
from PIL import Image
from etl.images import loading
from etl.images.batches import Loaded, decode_batch, finish_images
from etl.images.preprocessing import ImagePreprocessing
from etl.images.sources import ImageRecord
args = json.loads(sys.argv[1])
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
background = (255, 255, 255) if args["alpha_background"] else None
config = ImagePreprocessing(image_size=args["image_size"], image_format="jpeg",
                            jpeg_quality=95, alpha_background=background)
finish = finish_images(config, thumbnails=True, quality=True)
limits = loading.InputLimits(max_file_bytes=2**31, max_image_pixels=2**31)
def load(data):
    checked = loading.check_image(data, limits, args["image_size"])
    return Loaded(ImageRecord(key="k", uri="u", label="a"), data, jpeg=checked.jpeg,
                  header=checked.header)
def run(batch):  # what ImageTransform runs on a batch, but for the labels
    decoded = decode_batch(batch, True)
    others = iter(finish.decode([i.data for i in decoded if i.pixels is None]) if any(
        i.pixels is None for i in decoded) else ())
    pixels = [i.pixels if i.pixels is not None else next(others) for i in decoded]
    finish(pixels, [i.data for i in decoded])
for mode in ("L", "LA", "RGB", "RGBA"):
    small = io.BytesIO()
    Image.new(mode, (300, 200)).save(small, "PNG")
    run([load(small.getvalue())])
small = io.BytesIO()
Image.new("RGB", (600, 400)).save(small, "JPEG")
run([load(small.getvalue())])
batch = [load(open(path, "rb").read()) for path in args["files"]]
weigh = getattr(loading, "decode_weight", None)
weight = None if weigh is None else sum(weigh(item.data, item.header, args["image_size"],
                                              background is not None) for item in batch)
before, warm_peak = rss(), peak()
run(batch)
print(json.dumps({"rss_before": before, "warm_peak": warm_peak, "peak": peak(),
                  "pixels": sum(item.header.pixels for item in batch), "weight": weight}))
"""


def per_image(versions: dict[str, str], work_dir: str, side: int, image_size: int
              ) -> list[dict]:
    """The per_image measurement (see the module) of each case, for each version."""
    files = {}
    for name, channels, bits, _, _ in PER_IMAGE:
        path = os.path.join(work_dir, f"single_{name}_{side}.png")
        if not os.path.exists(path):
            write_png(path, side, channels, bits, seed=0)
        files[name] = path
    rows = []
    for name, _, _, at_once, composited in PER_IMAGE:
        for version, code_dir in versions.items():
            if version != "current" and (at_once > 1 or composited):
                continue  # The "before" alone, on the plain decodes.
            args = {"files": [files[name]] * at_once, "alpha_background": composited,
                    "image_size": image_size}
            proc = subprocess.run([sys.executable, "-c", _PER_IMAGE, json.dumps(args)],
                                  cwd=code_dir, env=harness.job_env(code_dir),
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"per_image {name} ({version}):\n{proc.stderr[-3000:]}")
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            added = max(0, got["peak"] - got["rss_before"])
            row = {"case": name, "images": at_once, "composited": composited,
                   "version": version, "peak_added_mib": round(added / harness.MIB, 1),
                   "bytes_per_pixel": round(added / got["pixels"], 2)}
            if got["weight"] is not None:
                row["weight_mib"] = round(got["weight"] / harness.MIB, 1)
                row["weight_covers_peak"] = got["weight"] >= added
            rows.append(row)
            print(f"per_image {name:<7} x{at_once}{' composited' if composited else '':<11} "
                  f"{version:<9} +{row['peak_added_mib']:7.1f} MiB "
                  f"({row['bytes_per_pixel']:5.2f} B/px)"
                  + (f", weighed {row['weight_mib']:.1f} MiB" if "weight_mib" in row else ""),
                  flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"Comma-separated job inputs: {', '.join(KINDS)}.")
    parser.add_argument("--side", type=int, default=8192,
                        help="The PNGs' width and height (8192: the default "
                             "--max_image_pixels, 64 Mi pixels).")
    parser.add_argument("--count", type=int, default=32, help="Files per job input.")
    parser.add_argument("--baseline_dir", default=None,
                        help="Another checkout of this project (the 'before').")
    parser.add_argument("--baseline_count", type=int, default=6,
                        help="Files of each PNG kind for the baseline's job.")
    parser.add_argument("--job_flags", default="",
                        help="Extra flags for every job run, e.g. '--decode_budget_mb=512'.")
    parser.add_argument("--no_per_image", action="store_true")
    parser.add_argument("--image_size", type=int, default=224,
                        help="The per_image measurement's output size (the job's "
                             "default).")
    parser.add_argument("--max_peak_gb", type=float, default=2.5)
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "bench_decode_memory"))
    harness.add_result_flags(parser, "decode_memory", "<side>px_<count>")
    args = parser.parse_args()

    versions = {"current": harness.REPO_ROOT}
    if args.baseline_dir:
        versions["baseline"] = os.path.abspath(args.baseline_dir)
    os.makedirs(args.work_dir, exist_ok=True)
    job_flags = shlex.split(args.job_flags)
    rows = ([] if args.no_per_image
            else per_image(versions, args.work_dir, args.side, args.image_size))
    log_dir = os.path.join(args.work_dir, "logs")
    os.makedirs(log_dir, exist_ok=True)
    runs, inputs = [], {}
    for kind in args.kinds.split(","):
        for version, code_dir in versions.items():
            count = (args.count if version == "current" or kind not in PNG_KINDS
                     else min(args.count, args.baseline_count))
            root = (ensure_photos(args.work_dir, count) if kind == "web"
                    else ensure_pngs(args.work_dir, kind, args.side, count))
            inputs[f"{kind}_{count}"] = describe(root) if kind == "web" else tree_facts(root)
            out = os.path.join(args.work_dir, f"out_{version}_{kind}")
            log = os.path.join(log_dir, f"{version}_{kind}_{count}.log")
            command = [sys.executable, "-m", "pipelines.images", f"--input={root}",
                       f"--output_dir={out}", "--overwrite", *job_flags]
            print(f"job {kind:<10} {version:<9} {count:3d} files: running (log {log})",
                  flush=True)
            run = {"kind": kind, "version": version, "files": count,
                   "command": command[1:], **harness.measure(command, log, code_dir)}
            if run["rc"] == 0:
                run.update(harness.output_summary(harness.read_manifest(out)))
            else:
                with open(log, errors="replace") as f:
                    run["log_tail"] = f.read()[-2000:]
            shutil.rmtree(out, ignore_errors=True)
            runs.append(run)
            print(f"job {kind:<10} {version:<9} {count:3d} files: peak RSS "
                  f"{run['peak_rss_mib']:8.1f} MiB, wall {run['wall_s']:6.1f} s, rc "
                  f"{run['rc']}" + (f", {run['examples']} written, {run['rejected']} "
                                    f"rejected" if run["rc"] == 0 else ""), flush=True)

    limit = args.max_peak_gb * 1e9
    verdict = {r["kind"]: r["rc"] == 0 and r.get("examples") == r["files"]
               and r["peak_rss_mib"] * harness.MIB <= limit
               for r in runs if r["version"] == "current"}
    for kind, ok in verdict.items():
        print(f"target: {kind}: every image written, peak <= {args.max_peak_gb} GB -> "
              f"{'PASS' if ok else 'FAIL'}")
    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": harness.machine(),
        "code": {name: {"dir": path, "commit": subprocess.run(
            ["git", "-C", path, "rev-parse", "HEAD"], capture_output=True,
            text=True).stdout.strip()} for name, path in versions.items()},
        "uncommitted_changes": harness.code_version()["uncommitted_changes"],
        "side": args.side, "image_size": args.image_size, "job_flags": job_flags,
        "inputs": inputs, "per_image": rows, "runs": runs,
        "targets": {"max_peak_bytes": limit, "pass": verdict},
        "definitions": {
            "peak_added_mib": "per_image: ru_maxrss after one batch's decode and finish "
                              "minus VmRSS before it, in a process warmed up on small "
                              "images",
            "bytes_per_pixel": "peak_added over the batch's decoded pixels",
            "weight_mib": "etl.images.loading.decode_weight of the batch's images",
            "peak_rss_mib": "job: resource.getrusage(RUSAGE_CHILDREN).ru_maxrss of a "
                            "fresh wrapper whose only child is the job command",
        },
    }
    harness.write_result(args.out, args.setting or f"{args.side}px_{args.count}", result,
                         CHART)
    print(f"{'all targets PASS' if all(verdict.values()) else 'some target FAILED'}; "
          f"wrote {args.out}")


CHART = harness.Chart("job peak RSS", lambda result: {
    f"{run['kind']}, {run['files']} files ({run['version']})": run["peak_rss_mib"]
    for run in result["runs"]}, unit="MiB (peak RSS)", value_format=",.0f")


if __name__ == "__main__":
    main()
