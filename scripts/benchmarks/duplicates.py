"""What the duplicate report costs: the image job with --cross_split_duplicates=off,
report (the default) and drop, on the same web-size photos, interleaved.

Each sample runs ``pipelines.images.run`` in a fresh interpreter (``timed_job_command``)
under a fresh parent that reports its children's peak RSS
(``harness.peak_rss_command``: the largest process of the job's tree). Images/s is the photo count
over the job's own wall time (imports apart). Where that time goes: the local
runner's stages are timed, and each sample splits the job's time into the shard step
(the stage that reads, hashes and writes every image), the duplicate search (the
stages of ``FindDuplicates``) and the rest (building the graph, listing, analysis,
finishing); the summary gives each part's median and its difference from off. Every
variant runs once a round, the first one rotating (``interleaved``); a sample taken
while other processes used more than --max_foreign cores is retried. Medians are
reported beside best rounds, with the ratio of report (and drop) to off: of the
medians, of the best rounds, and round by round (each round's runs follow each
other, so a machine whose speed drifts over the minutes of a benchmark shifts
them alike), with the median of those; and the ratio of the job's CPU seconds
(median of the rounds' ratios).

With ``--side_by_side`` a round's modes run at the same time instead, each pinned to
a CPU of its own (the CPUs swap from round to round). A shared VM whose speed drifts
by more than the report costs (this project's 2-core VMs: ±10-20 % over minutes)
then slows both runs of a round alike, which runs a minute apart are not; each job
has one core, so its time is its CPU cost. ``--modes off,off`` is the A/A check:
how far apart two identical runs land this way.

Usage: python -m scripts.benchmarks duplicates --work_dir /work/bench_data \\
           --num_images 20000 --rounds 5
       python -m scripts.benchmarks duplicates --work_dir /work/bench_data \\
           --num_images 20000 --rounds 8 --modes off,report --side_by_side
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import tempfile

from scripts.benchmarks import harness
from scripts.benchmarks.sample_photos import describe, ensure_tree

BENCHMARK = harness.Benchmark(
    name="duplicates",
    measures="the image job with its duplicate report (and drop) against it without",
    quick=("--work_dir", "{quick_dir}/photos", "--num_images", "40", "--rounds", "1", "--modes",
           "off,report", "--out", "{quick_dir}/duplicates.json"),
)


MODES = ("off", "report", "drop")
# The stages of the duplicate search, by a piece of their names.
SEARCH_STAGES = "/Screen/"
PARTS = ("shard_step_s", "search_s", "rest_s")


def job_parts(job_s: float, stages: dict[str, float]) -> dict[str, float]:
    """The job's seconds in the shard step, the duplicate search and the rest."""
    shard = sum(t for name, t in stages.items() if harness.SHARD_STEP_STAGE in name)
    search = sum(t for name, t in stages.items()
                 if SEARCH_STAGES in name and harness.SHARD_STEP_STAGE not in name)
    return {"shard_step_s": round(shard, 2), "search_s": round(search, 2),
            "rest_s": round(job_s - shard - search, 2)}


def start_variant(tree: str, work: str, label: str, flags: list[str],
                  core: int | None = None) -> subprocess.Popen:
    """Starts the run of ``label`` (a mode, or ``MODE#n``) into a fresh output dir,
    on CPU ``core`` alone if given."""
    out = os.path.join(work, f"out_{label}")
    shutil.rmtree(out, ignore_errors=True)
    mode = label.partition("#")[0]
    argv = [f"--input={tree}", f"--output_dir={out}", f"--cross_split_duplicates={mode}",
            *flags]
    command = harness.peak_rss_command(
        harness.timed_job_command("pipelines.images", argv,
                                  os.path.join(work, f"timings_{label}.json")),
        os.path.join(work, f"{label}.log"), os.path.join(work, f"{label}.rss.json"))
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    # Output to files, not pipes: a run waited for second must never block on a full
    # pipe while the first is read.
    with open(os.path.join(work, f"{label}.wrapper.log"), "w") as output:
        return subprocess.Popen(command, env=harness.job_env(), stdout=output,
                                stderr=subprocess.STDOUT, preexec_fn=pin)


def finish_variant(work: str, label: str, proc: subprocess.Popen) -> dict:
    """Waits for a run of :func:`start_variant`: job seconds, peak RSS, what it found."""
    if proc.wait() != 0:
        with open(os.path.join(work, f"{label}.wrapper.log")) as f:
            raise RuntimeError(f"{label}: the measuring wrapper failed:\n{f.read()[-4000:]}")
    status = harness.read_peak_rss(os.path.join(work, f"{label}.rss.json"))
    if status["rc"] != 0:
        with open(os.path.join(work, f"{label}.log"), errors="replace") as f:
            raise RuntimeError(f"{label} failed:\n{f.read()[-4000:]}")
    manifest = harness.read_manifest(os.path.join(work, f"out_{label}"))
    found = manifest.get("duplicates") or {}
    timed = harness.read_json(os.path.join(work, f"timings_{label}.json"))
    return {"job_s": timed["job_s"], "job_cpu_s": round(timed["job_cpu_s"], 2),
            **job_parts(timed["job_s"], timed["stages"]),
            "peak_rss_mib": status["peak_rss_mib"],
            "written": sum(s["num_records"] for s in manifest["splits"].values()),
            "cross_split_pairs": found.get("cross_split_pairs"),
            "pairs": {kind: sum(counts.values())
                      for kind, counts in found.get("pairs", {}).items()},
            "removed": found.get("removed")}


def unique_labels(modes: list[str]) -> list[str]:
    """The modes as sample labels: a mode's second run is ``MODE#2`` (an A/A check)."""
    return [mode if i == 0 else f"{mode}#{i + 1}"
            for mode, i in ((mode, modes[:n].count(mode)) for n, mode in enumerate(modes))]


def run_round(tree: str, work: str, labels: list[str], flags: list[str],
              round_index: int | None) -> dict[str, dict]:
    """The runs of ``labels``: one after the other, or with ``round_index`` all at
    the same time, each on a CPU of its own (rotating by round), so that the
    machine's slow spells hit them alike. Returns ``{label: run}``."""
    if round_index is None:
        return {label: finish_variant(work, label, start_variant(tree, work, label, flags))
                for label in labels}
    cores = sorted(os.sched_getaffinity(0))
    placed = {label: cores[(i + round_index) % len(labels)]
              for i, label in enumerate(labels)}
    procs = {label: start_variant(tree, work, label, flags, core)
             for label, core in placed.items()}
    return {label: {**finish_variant(work, label, proc), "core": placed[label]}
            for label, proc in procs.items()}


def _by_round(values: list[float], off: list[float]) -> list[float]:
    """Each round's value over off's in the same round (samples are in round order)."""
    return [mine / base for mine, base in zip(values, off, strict=True)]


def summarise(samples: dict[str, list[dict]], num_images: int) -> dict:
    """Each mode's medians and best round; with off among the modes, each other mode
    against it."""
    rates = {mode: [num_images / s["job_s"] for s in runs] for mode, runs in samples.items()}
    summary = {mode: {"median_images_per_s": round(statistics.median(r), 1),
                      "best_images_per_s": round(max(r), 1),
                      "median_peak_rss_mib": round(statistics.median(
                          s["peak_rss_mib"] for s in samples[mode]), 1),
                      "median_job_cpu_s": round(statistics.median(
                          s["job_cpu_s"] for s in samples[mode]), 1),
                      **{f"median_{part}": round(statistics.median(
                          s[part] for s in samples[mode]), 2) for part in PARTS}}
               for mode, r in rates.items()}
    if "off" not in samples:
        return summary
    off = summary["off"]
    for mode, mine in summary.items():
        if mode == "off":
            continue
        for part in PARTS:
            mine[f"{part}_vs_off"] = round(mine[f"median_{part}"] - off[f"median_{part}"], 2)
        mine["median_vs_off"] = round(
            mine["median_images_per_s"] / off["median_images_per_s"], 3)
        mine["best_vs_off"] = round(mine["best_images_per_s"] / off["best_images_per_s"], 3)
        # A round's runs follow each other; rounds are many minutes apart. Where the
        # machine's speed drifts, the medians' ratio mixes rounds far apart, the ratio
        # within each round does not.
        paired = _by_round(rates[mode], rates["off"])
        mine["round_vs_off"] = [round(ratio, 3) for ratio in paired]
        mine["median_round_vs_off"] = round(statistics.median(paired), 3)
        mine["job_cpu_vs_off"] = round(statistics.median(_by_round(
            [s["job_cpu_s"] for s in samples[mode]],
            [s["job_cpu_s"] for s in samples["off"]])), 3)
        mine["peak_rss_vs_off"] = round(
            mine["median_peak_rss_mib"] / off["median_peak_rss_mib"], 3)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--num_images", type=int, default=20000)
    parser.add_argument("--photos", default="web")
    parser.add_argument("--modes", default=",".join(MODES))
    harness.add_result_flags(parser, "duplicates", "<photos>_<num_images>, and _side_by_side with "
                             "--side_by_side")
    parser.add_argument("job_flags", nargs="*", help="Extra image job flags (after --).")
    parser.add_argument("--side_by_side", action="store_true",
                        help="Run a round's modes at the same time, each on a CPU of its "
                             "own (as many CPUs as modes); a mode named twice is an A/A "
                             "check (its second run is labelled MODE#2).")
    harness.add_sampling_flags(parser, rounds=2)
    args = parser.parse_args()
    labels = unique_labels(args.modes.split(","))
    if args.side_by_side and len(labels) > len(os.sched_getaffinity(0)):
        parser.error(f"--side_by_side needs a CPU per mode: {len(labels)} modes, "
                     f"{len(os.sched_getaffinity(0))} CPUs.")
    tree = ensure_tree(args.work_dir, args.num_images, args.photos)
    work = tempfile.mkdtemp(prefix="bench_duplicates_")
    samples: dict[str, list[dict]] = {label: [] for label in labels}
    attempts: dict[str, list[list[float]]] = {label: [] for label in labels}
    if args.side_by_side:
        rounds = [(r, labels) for r in range(args.rounds)]
    else:
        rounds = [(r, [label]) for r, label in harness.interleaved(labels, args.rounds)]
    for round_index, together in rounds:
        sample, tries = harness.quiet_sample(
            lambda together=together, r=round_index: run_round(
                tree, work, together, args.job_flags, r if args.side_by_side else None),
            args.max_foreign, args.retries, max_wait_s=120)
        for label in together:
            run = sample.extra[label]
            samples[label].append({**run, "wall_s": round(sample.wall, 2),
                                   "foreign_cores": round(sample.foreign_cores, 3)})
            attempts[label].append(tries)
            print(f"round {round_index} {label}: {args.num_images / run['job_s']:.1f} "
                  f"images/s, peak RSS {run['peak_rss_mib']:.0f} MiB", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    result = {
        "what": "image job with --cross_split_duplicates=off / report / drop, same photos",
        "date": datetime.date.today().isoformat(),
        "machine": harness.machine(), "code": harness.code_version(),
        "input": describe(tree), "num_images": args.num_images,
        "job_flags": args.job_flags, "rounds": args.rounds,
        "side_by_side": args.side_by_side,
        "summary": summarise(samples, args.num_images),
        "samples": samples, "foreign_cores_per_try": attempts,
    }
    harness.write_result(args.out, args.setting or (
        f"{args.photos}_{args.num_images}" + ("_side_by_side" if args.side_by_side else "")),
        result, CHART)
    print(json.dumps(result["summary"], indent=1))


CHART = harness.Chart("the image job by mode", lambda result: {
    mode: {"median": m["median_images_per_s"], "best": m["best_images_per_s"]}
    for mode, m in result["summary"].items()}, unit="images / s")


if __name__ == "__main__":
    main()
