"""Small-job benchmark (issue #49): what a 12-photo or 2,000-row job costs, before and after.

For the current checkout and, with --baseline_dir, another checkout of the project (the
"before"; its packages are put first on PYTHONPATH and it is the jobs' cwd), measures
in each round, every version once per measure, the versions interleaved (the first
one alternating by round):
  import_only       wall s of a fresh ``python -c "import tensorflow, apache_beam,
                    tensorflow_transform.beam"``: the floor of any job command;
  images_command    wall s of a fresh ``python -m pipelines.images --input=<12 photos>
                    --output_dir=... --overwrite`` (the job's default flags: what a new
                    user runs); images_command_over_import is its ratio to import_only
                    in the same round (goal: at most 1.5 x, on the medians);
  in_process        one fresh child that imports both jobs (import_s), runs the image
                    job on the 12 photos twice (image_first_s, image_second_s: goal at
                    most 4 s) and the time-series job on a 2,000-row CSV twice
                    (series_first_s, series_second_s: goal at most 3 s), each run into
                    its own output folder, the jobs' stdout silenced.
--profile adds profile rounds after those (--profile_only: they alone, stored as the
setting "profile"): per round, version and job (the 12 photos, the 2,000 rows,
as above), one job command in a fresh scripts/benchmarks/small_jobs_profile.py child, timed by phase
(defined there); reported: each phase's median, the 3 stages of the longest median, the rounds.
The photos are scripts/benchmarks/sample_photos.py's web-size JPEGs (10 class folders); the CSV
(``series_id,timestamp,value``, 4 series x 500 rows: etl.testing.write_series) is
written into --work_dir, the series job run with --window_size=24
--horizon=4. Each child's peak RSS (``*_rss_mib``) comes from os.wait4, and the CPU
other processes used meanwhile (``*_foreign_cores``) is recorded beside it.

Reported per measure and version: median, best (min) and every round; with a baseline,
current / baseline of the medians. --check exits with status 1 when the current
checkout misses a goal (on the medians).

Usage:
    python -m scripts.benchmarks small_jobs [--rounds 5 | --quick] [--baseline_dir DIR] \\
        [--work_dir DIR] [--out FILE] [--check] [--profile | --profile_only]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from etl import testing
from scripts.benchmarks import harness
from scripts.benchmarks.sample_photos import describe, ensure_photos

BENCHMARK = harness.Benchmark(
    name="small_jobs",
    measures="a job on a dozen files against importing TensorFlow, Beam and tf.Transform",
    quick=("--quick", "--work_dir", "{quick_dir}/small_jobs", "--out",
           "{quick_dir}/small_jobs.json"),
)


PHOTOS = 12
SERIES, ROWS_PER_SERIES = 4, 500
SERIES_FLAGS = ("--window_size=24", "--horizon=4")
IMPORTS = "import tensorflow, apache_beam, tensorflow_transform.beam"
GOALS = {"images_command_over_import": 1.5, "image_second_s": 4.0, "series_second_s": 3.0}
IN_PROCESS = ("import_s", "image_first_s", "image_second_s", "series_first_s",
              "series_second_s")
MEASURES = ("import_only_s", "images_command_s", "images_command_over_import",
            *IN_PROCESS, "import_only_rss_mib", "images_command_rss_mib",
            "in_process_rss_mib")
# --profile's child and phases (defined in the child), PHASE_SUM's adding up to total_s.
PROFILE_CHILD = os.path.join(harness.REPO_ROOT, "scripts", "benchmarks", "small_jobs_profile.py")
PROFILE_JOBS = ("images", "series")
PHASES = ("python_start_s", "imports_s", "options_and_checks_s", "graph_s", "tft_expand_s",
          "graph_to_stages_s", "to_runner_api_s", "stages_s", "num_stages", "tft_stages_s",
          "shard_step_s", "after_run_s", "teardown_s", "other_s", "total_s")
PHASE_SUM = ("python_start_s", "imports_s", "options_and_checks_s", "graph_s",
             "graph_to_stages_s", "stages_s", "after_run_s", "teardown_s")
# The in-process child: argv[1] = JSON [[key, module, job argv], ...], argv[2] = where
# its timings go (JSON).
_CHILD = r"""
import importlib, json, resource, sys, time
start = time.perf_counter()
import pipelines.images, pipelines.timeseries
times = {"import_s": time.perf_counter() - start}
for key, module, argv in json.loads(sys.argv[1]):
    start = time.perf_counter()
    importlib.import_module(module).run(argv)
    times[key] = time.perf_counter() - start
times["self_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
with open(sys.argv[2], "w") as f:
    json.dump(times, f)
"""


def measured(command: list[str], code_dir: str, log_path: str) -> dict[str, float]:
    """Runs ``command`` in ``code_dir`` (stdout dropped, stderr to ``log_path``): its wall
    s, peak RSS (os.wait4), others' cores meanwhile and time.time() just before its start."""
    with open(log_path, "w") as log:
        busy0, epoch, start = harness.busy_cpu_seconds(), time.time(), time.perf_counter()
        process = subprocess.Popen(command, cwd=code_dir, env=harness.job_env(code_dir),
                                   stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        foreign = harness.busy_cpu_seconds() - busy0 - usage.ru_utime - usage.ru_stime
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        with open(log_path) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"{command[:3]} exited {process.returncode} in {code_dir}:\n"
                           f"{tail}")
    return {"wall_s": wall, "rss_mib": usage.ru_maxrss / 1024, "start_epoch": epoch,
            "foreign_cores": max(0.0, foreign) / wall}


def image_argv(photos: str, out: str) -> list[str]:
    return [f"--input={photos}", f"--output_dir={out}", "--overwrite"]


def series_argv(csv_path: str, out: str) -> list[str]:
    return [f"--input={csv_path}", f"--output_dir={out}", "--overwrite", *SERIES_FLAGS]


def run_round(name: str, code_dir: str, photos: str, csv_path: str,
              tmp: str) -> dict[str, float]:
    """One round's three measures for the code in ``code_dir``."""
    row: dict[str, float] = {}
    log = os.path.join(tmp, f"{name}.log")
    imports = measured([sys.executable, "-c", IMPORTS], code_dir, log)
    command = measured([sys.executable, "-m", "pipelines.images",
                        *image_argv(photos, os.path.join(tmp, f"{name}_command"))],
                       code_dir, log)
    runs = [["image_first_s", "pipelines.images", image_argv(photos, f"{tmp}/{name}_i1")],
            ["image_second_s", "pipelines.images", image_argv(photos, f"{tmp}/{name}_i2")],
            ["series_first_s", "pipelines.timeseries",
             series_argv(csv_path, f"{tmp}/{name}_s1")],
            ["series_second_s", "pipelines.timeseries",
             series_argv(csv_path, f"{tmp}/{name}_s2")]]
    times_path = os.path.join(tmp, f"{name}_times.json")
    child = measured([sys.executable, "-c", _CHILD, json.dumps(runs), times_path],
                     code_dir, log)
    with open(times_path) as f:
        row.update(json.load(f))
    for key, sample in (("import_only", imports), ("images_command", command),
                        ("in_process", child)):
        row[f"{key}_rss_mib"] = sample["rss_mib"]
        row[f"{key}_foreign_cores"] = sample["foreign_cores"]
    row.update(import_only_s=imports["wall_s"], images_command_s=command["wall_s"],
               in_process_wall_s=child["wall_s"],
               images_command_over_import=command["wall_s"] / imports["wall_s"])
    return {key: round(value, 4) for key, value in row.items()}


def measure(versions: dict[str, str], rounds: int, photos: str, csv_path: str,
            args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    """Every round of every version, the first version alternating by round."""
    raw: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    names = list(versions)
    inputs = [*glob.glob(os.path.join(photos, "*", "*.jpg")), csv_path]
    with tempfile.TemporaryDirectory(prefix="small_jobs_") as tmp:
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                if args.quiet_wait_s:
                    harness.wait_for_quiet(args.max_foreign, args.quiet_wait_s)
                harness.warm_page_cache(inputs)
                raw[name].append(run_round(name, versions[name], photos, csv_path, tmp))
                print(f"round {r + 1}/{rounds} {name}: " + ", ".join(
                    f"{k}={raw[name][-1][k]:.2f}" for k in MEASURES[:7]), flush=True)
                for out in glob.glob(os.path.join(tmp, f"{name}_*")):
                    if os.path.isdir(out):
                        shutil.rmtree(out)
    return raw


def summarize(raw: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Per version and measure: median, best and all rounds; current / baseline."""
    summary: dict[str, Any] = {}
    for name, rows in raw.items():
        summary[name] = {}
        for key in MEASURES:
            values = [row[key] for row in rows]
            spread = harness.spread(values, higher_is_better=False)
            summary[name][key] = {"median": round(spread["median"], 4),
                                  "best": spread["best"], "rounds": values}
        medians = summary[name]
        summary[name]["images_command_over_import_of_medians"] = round(
            medians["images_command_s"]["median"] / medians["import_only_s"]["median"], 4)
    if "baseline" in summary:
        summary["current_over_baseline_medians"] = {
            key: round(summary["current"][key]["median"]
                       / summary["baseline"][key]["median"], 4) for key in MEASURES}
    return summary


def missed_goals(summary: dict[str, Any]) -> list[str]:
    """The goals the current checkout misses, on the medians."""
    current = summary["current"]
    found = {"images_command_over_import": current["images_command_over_import_of_medians"],
             "image_second_s": current["image_second_s"]["median"],
             "series_second_s": current["series_second_s"]["median"]}
    return [f"{key} = {value:.2f} > {GOALS[key]}" for key, value in found.items()
            if value > GOALS[key]]


def print_table(summary: dict[str, Any], names: list[str]) -> None:
    header = f"{'measure':28}" + "".join(f"{n + ' median':>17}{n + ' best':>15}"
                                         for n in names)
    ratios = summary.get("current_over_baseline_medians")
    print(header + (f"{'cur/base':>10}" if ratios else ""))
    for key in MEASURES:
        line = f"{key:28}" + "".join(f"{summary[n][key]['median']:17.2f}"
                                     f"{summary[n][key]['best']:15.2f}" for n in names)
        print(line + (f"{ratios[key]:10.2f}" if ratios else ""))
    print(f"{'cmd/import of medians':28}" + "".join(
        f"{summary[n]['images_command_over_import_of_medians']:17.2f}{'':15}"
        for n in names))
    print("goals (current, medians): " + ", ".join(f"{k} <= {v}" for k, v in GOALS.items()))


def baseline_version(code_dir: str) -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", code_dir, *args], capture_output=True,
                              text=True).stdout.strip()

    return {"dir": code_dir, "commit": git("rev-parse", "HEAD"),
            "uncommitted_changes": bool(git("status", "--porcelain",
                                            "--untracked-files=no"))}


def profile_run(name: str, code_dir: str, job: str, photos: str, csv_path: str,
                tmp: str) -> dict[str, Any]:
    """One fresh profiled command of ``job`` (small_jobs_profile.py) for the code in
    ``code_dir``: its phases (see the module) and its stages' seconds by name."""
    out = os.path.join(tmp, f"{name}_p_{job}")
    module, argv = (("pipelines.images", image_argv(photos, out)) if job == "images"
                    else ("pipelines.timeseries", series_argv(csv_path, out)))
    sample = measured([sys.executable, PROFILE_CHILD, module, f"{out}.json", *argv],
                      code_dir, f"{out}.log")
    with open(f"{out}.json") as f:
        child = json.load(f)
    marks, stages, first = child["marks"], child["stages"], child["first_line_epoch"]
    row = {**child["totals"], "num_stages": child["num_stages"],
           "python_start_s": first - sample["start_epoch"],
           "imports_s": marks["imported"] - marks["import_start"],
           "options_and_checks_s": marks["graph_start"] - marks["run_start"],
           "graph_to_stages_s": marks["stages_start"] - marks["graph_end"],
           "tft_stages_s": sum(s for n, s in stages.items() if any(
               step in n for step in ("AnalyzeAndWrite", "AnalyzeTrain"))),
           "shard_step_s": sum(s for n, s in stages.items() if "WriteShards" in n),
           "after_run_s": marks["main_return"] - marks["stages_end"],
           "teardown_s": sample["start_epoch"] + sample["wall_s"] - first - marks["reported"],
           "total_s": sample["wall_s"], "rss_mib": sample["rss_mib"],
           "foreign_cores": sample["foreign_cores"]}
    row["other_s"] = row["total_s"] - sum(row[key] for key in PHASE_SUM)
    return {**{key: round(value, 4) for key, value in row.items()},
            "stages": {n: round(s, 4) for n, s in stages.items()}}


def measure_profile(versions: dict[str, str], rounds: int, photos: str, csv_path: str,
                    args: argparse.Namespace) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every profile round: per version (interleaved) and job, one profiled command."""
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {job: [] for job in PROFILE_JOBS} for name in versions}
    inputs = [*glob.glob(os.path.join(photos, "*", "*.jpg")), csv_path]
    with tempfile.TemporaryDirectory(prefix="small_jobs_profile_") as tmp:
        for r, name in harness.interleaved(list(versions), rounds):
            for job in PROFILE_JOBS:
                if args.quiet_wait_s:
                    harness.wait_for_quiet(args.max_foreign, args.quiet_wait_s)
                harness.warm_page_cache(inputs)
                row = profile_run(name, versions[name], job, photos, csv_path, tmp)
                raw[name][job].append(row)
                print(f"profile round {r + 1}/{rounds} {name} {job}: " + ", ".join(
                    f"{k}={row[k]:.2f}" for k in ("total_s", "imports_s", "graph_s",
                                                  "stages_s", "teardown_s")), flush=True)
                shutil.rmtree(os.path.join(tmp, f"{name}_p_{job}"), ignore_errors=True)
    return raw


def stage_label(name: str) -> str:
    """A stage's name, short: no parentheses nor ``ref_AppliedPTransform_``, 60 chars."""
    return re.sub(r"[()]|ref_AppliedPTransform_", "", name)[:60]


def summarize_profile(raw: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per version and job: each phase's median over the rounds, the 3 stages of the
    largest median seconds, and the rounds (with their 5 longest stages)."""
    summary: dict[str, Any] = {}
    for name, jobs in raw.items():
        for job, rows in jobs.items():
            names = {n for row in rows for n in row["stages"]}
            median = {n: statistics.median([row["stages"].get(n, 0.0) for row in rows])
                      for n in names}
            top = sorted(names, key=lambda n: -median[n])[:3]
            summary.setdefault(name, {})[job] = {
                "medians": {key: round(statistics.median([row[key] for row in rows]), 4)
                            for key in PHASES},
                "top_stages": [[stage_label(n), round(median[n], 4)] for n in top],
                "rounds": [{**{k: v for k, v in row.items() if k != "stages"},
                            "top_stages": [[stage_label(n), s] for n, s in sorted(
                                row["stages"].items(), key=lambda item: -item[1])[:5]]}
                           for row in rows]}
    return summary


def print_profile(summary: dict[str, Any], names: list[str]) -> None:
    """The phases' medians: a row per phase, a column per job and version (before first)."""
    columns = [(job, name) for job in PROFILE_JOBS for name in reversed(names)]
    print(f"{'phase (median s)':22}" + "".join(f"{j + ' ' + n:>18}" for j, n in columns))
    for key in PHASES:
        print(f"{key:22}" + "".join(f"{summary[name][job]['medians'][key]:18.2f}"
                                    for job, name in columns))
    for job, name in columns:
        print(f"longest stages, {job} {name}: " + "; ".join(
            f"{s:.2f} {label}" for label, s in summary[name][job]["top_stages"]))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="One round.")
    parser.add_argument("--baseline_dir", default=None,
                        help="Another checkout of this project (the 'before').")
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "bench_small_jobs"),
                        help="Where the photos and the CSV are (made once, reused).")
    harness.add_result_flags(parser, "small_jobs",
                             "profile with --profile_only, else rounds_<rounds>")
    parser.add_argument("--quiet_wait_s", type=float, default=0.0,
                        help="Before each version's round, wait up to this long for "
                             "other processes to use at most --max_foreign cores.")
    parser.add_argument("--max_foreign", type=float, default=0.15)
    parser.add_argument("--check", action="store_true",
                        help="Exit 1 if the current checkout misses a goal.")
    parser.add_argument("--profile", action="store_true",
                        help="Then profile rounds: where a job command's time goes.")
    parser.add_argument("--profile_only", action="store_true",
                        help="Only the profile rounds (no goals checked).")
    args = parser.parse_args()
    return args


def main() -> None:
    args = parse_args()
    rounds = 1 if args.quick else args.rounds
    versions = {"current": harness.REPO_ROOT}
    if args.baseline_dir:
        versions["baseline"] = os.path.abspath(args.baseline_dir)
    os.makedirs(args.work_dir, exist_ok=True)
    photos = ensure_photos(args.work_dir, PHOTOS)
    csv_path = testing.write_series(os.path.join(
        args.work_dir, f"series_{SERIES}x{ROWS_PER_SERIES}.csv"), [ROWS_PER_SERIES] * SERIES).input
    code = {"current": {"dir": harness.REPO_ROOT, **harness.code_version()}}
    if args.baseline_dir:
        code["baseline"] = baseline_version(versions["baseline"])
    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": harness.machine(), "code": code,
        "settings": {"rounds": rounds, "python": sys.executable, "imports": IMPORTS,
                     "photos": describe(photos), "series_csv": csv_path,
                     "series_rows": SERIES * ROWS_PER_SERIES, "series_flags": SERIES_FLAGS,
                     "quiet_wait_s": args.quiet_wait_s, "max_foreign": args.max_foreign}}
    missed: list[str] = []
    if not args.profile_only:
        raw = measure(versions, rounds, photos, csv_path, args)
        summary = summarize(raw)
        print_table(summary, list(versions))
        missed = missed_goals(summary)
        result.update(goals=GOALS, rounds=raw, summary=summary)
    if args.profile or args.profile_only:
        result["profile"] = summarize_profile(
            measure_profile(versions, rounds, photos, csv_path, args))
        print_profile(result["profile"], list(versions))
    harness.write_result(args.out, args.setting or (
        "profile" if args.profile_only else f"rounds_{rounds}"), result, CHART)
    print(f"wrote {args.out}")
    if not args.profile_only:
        print("goals missed (current): " + ("; ".join(missed) if missed else "none"))
    if args.check and missed:
        sys.exit(1)


CHART = harness.Chart("seconds by measure", lambda result: {
    f"{measure} ({version})": value for version, measures in result["summary"].items()
    if isinstance(measures, dict) for measure, value in measures.items()
    if measure.endswith("_s") and isinstance(value, dict)}, unit="s", value_format=".2f")


if __name__ == "__main__":
    main()
