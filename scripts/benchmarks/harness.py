"""The benchmarks' one harness: the machine and code, quiet samples interleaved by
round, job runs, a command's peak memory, medians and best rounds, each benchmark's
results file (an entry per setting) and chart, and the entry point that runs them.

Every module of this folder but the helpers (:data:`HELPERS`) is a benchmark and
declares itself at its top level (:class:`Benchmark`). ``python -m scripts.benchmarks
--list`` names them; ``python -m scripts.benchmarks NAME [--quick] [ARGS...]``, from the
repository's root, runs one as ``python -m scripts.benchmarks.NAME`` would: benchmarks
import this harness and each other by package (``from scripts.benchmarks import
harness``), as they import ``etl``, ``reader`` and ``pipelines`` (``scripts/setup_env.sh``
installs the project into ``.venv``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import resource
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import psutil

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 2**20
# Packages whose versions decide the figures, by their distribution names.
_PACKAGES = ("apache-beam", "tensorflow", "tensorflow-transform")
# Seconds between a sample taken under foreign load and its retry.
_RETRY_PAUSE_S = 10.0


# --- the machine and the code ----------------------------------------------------------

def machine(**extra: Any) -> dict[str, Any]:
    """The machine and software the figures come from, plus ``extra`` entries."""
    versions = {}
    for package in _PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {"cpu_cores": os.cpu_count(), "cpu_model": _cpu_model(),
            "processor": platform.processor() or platform.machine(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "platform": platform.platform(), "python": platform.python_version(),
            **versions, **extra}


def _cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (None elsewhere): VMs of one size are
    lent on more than one kind of host, and their figures differ."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True).stdout.strip()


def code_commit() -> str:
    """The repository's HEAD commit (empty if git cannot tell)."""
    return _git("rev-parse", "HEAD")


def code_version() -> dict[str, Any]:
    """HEAD's commit and whether tracked files differ from it."""
    return {"commit": code_commit(),
            "uncommitted_changes": bool(_git("status", "--porcelain",
                                             "--untracked-files=no"))}


# --- samples on a quiet machine --------------------------------------------------------

def busy_cpu_seconds() -> float:
    """CPU seconds every process on the machine has used since boot."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


def own_cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Sample:
    """Wall time, this process tree's CPU and other processes' CPU while ``fn`` runs.

    ``extra`` is what ``fn`` returned; ``foreign_cores`` is the CPU other processes
    used meanwhile, in cores.
    """

    def __init__(self, fn: Callable[[], dict]) -> None:
        busy0, own0 = busy_cpu_seconds(), own_cpu_seconds()
        start = time.perf_counter()
        self.extra = fn()
        self.wall = time.perf_counter() - start
        self.own_cpu = own_cpu_seconds() - own0
        busy = busy_cpu_seconds() - busy0
        self.foreign_cores = max(0.0, busy - self.own_cpu) / self.wall


def warm_page_cache(paths: Sequence[str]) -> None:
    """Reads each file once (1 MiB at a time), so a timed run finds it in the page cache."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass


def wait_for_quiet(max_foreign: float, max_wait_s: float) -> float:
    """Waits (up to ``max_wait_s``) until other processes use at most ``max_foreign``
    cores over 3 s; returns what they used in the last 3 s."""
    deadline = time.monotonic() + max_wait_s
    while True:
        busy0, start = busy_cpu_seconds(), time.perf_counter()
        time.sleep(3)
        used = (busy_cpu_seconds() - busy0) / (time.perf_counter() - start)
        if used <= max_foreign or time.monotonic() > deadline:
            return used


def quiet_sample(fn: Callable[[], dict], max_foreign: float, retries: int, *,
                 before: Callable[[], None] | None = None,
                 max_wait_s: float = 0.0) -> tuple[Sample, list[float]]:
    """``fn`` sampled until other processes used at most ``max_foreign`` cores meanwhile.

    Up to ``retries`` more tries follow one taken under more foreign load. Before each
    try, untimed: a wait of up to ``max_wait_s`` for a quiet machine, then ``before()``
    (e.g. reading the input into the page cache).

    Returns:
        The last sample and each try's foreign cores (rounded to 0.001).
    """
    attempts: list[float] = []
    for _ in range(retries + 1):
        if max_wait_s:
            wait_for_quiet(max_foreign, max_wait_s)
        if before is not None:
            before()
        sample = Sample(fn)
        attempts.append(round(sample.foreign_cores, 3))
        if sample.foreign_cores <= max_foreign:
            break
        time.sleep(_RETRY_PAUSE_S)
    return sample, attempts


def add_sampling_flags(parser: argparse.ArgumentParser, rounds: int) -> None:
    """Adds --rounds (default ``rounds``), --max_foreign and --retries: the arguments
    of :func:`interleaved` and :func:`quiet_sample`."""
    parser.add_argument("--rounds", type=int, default=rounds,
                        help="Interleaved rounds: one sample of every variant each.")
    parser.add_argument("--max_foreign", type=float, default=0.15,
                        help="Retry a sample taken while other processes used more "
                             "than this many cores.")
    parser.add_argument("--retries", type=int, default=3,
                        help="Retries of a sample taken under more foreign load.")


def rotated(names: Sequence[str], r: int) -> list[str]:
    """``names`` in round ``r``'s order: starting from the ``r``-th (mod its length)."""
    first = r % len(names)
    return [*names[first:], *names[:first]]


def interleaved(names: Sequence[str], rounds: int) -> Iterator[tuple[int, str]]:
    """(round, name) for every name in every round, the first name rotating by round
    (:func:`rotated`), so that slow spells of a shared machine hit every variant alike."""
    for r in range(rounds):
        for name in rotated(list(names), r):
            yield r, name


# --- job runs --------------------------------------------------------------------------

# Python source that a job driver runs before the job: the local runner's stages are
# then recorded in ``stage_windows`` as (stage name, start, end), on CLOCK_MONOTONIC
# (the clock `perf` stamps its samples with).
TIME_STAGES = r"""
import time
from apache_beam.runners.portability.fn_api_runner import fn_runner
stage_windows = []
_execute_bundle = fn_runner.FnApiRunner._execute_bundle
def _timed(self, context, bundle, *args, **kwargs):
    start = time.monotonic()
    try:
        return _execute_bundle(self, context, bundle, *args, **kwargs)
    finally:
        stage_windows.append((bundle.stage.name, start, time.monotonic()))
fn_runner.FnApiRunner._execute_bundle = _timed
"""
# The name of the image job's shard step's stage contains this.
SHARD_STEP_STAGE = "WriteShards/GroupByShard/Read"
# Runs ``<module>.run(argv)`` (argv[1], argv[2] as JSON) in a fresh interpreter and
# writes its timings as JSON to argv[3]: the imports apart from the job itself, the
# job's CPU seconds (its process and any worker processes it waited for), and the
# seconds of each of the local runner's stages.
_TIMED_JOB = TIME_STAGES + r"""
import importlib, json, resource, sys
def cpu_s():
    return sum(u.ru_utime + u.ru_stime for u in (
        resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))
started = time.perf_counter()
job = importlib.import_module(sys.argv[1])
imported, imported_cpu = time.perf_counter(), cpu_s()
job.run(json.loads(sys.argv[2]))
finished, finished_cpu = time.perf_counter(), cpu_s()
stages = {}
for name, start, end in stage_windows:
    stages[name] = stages.get(name, 0.0) + end - start
with open(sys.argv[3], "w") as f:
    json.dump({"import_s": imported - started, "job_s": finished - imported,
               "job_cpu_s": finished_cpu - imported_cpu, "stages": stages}, f)
"""


def timed_job_command(module: str, argv: Sequence[str], timings_path: str) -> list[str]:
    """The command that runs job ``module`` (e.g. ``pipelines.images``) on ``argv``
    and writes ``{"import_s", "job_s", "job_cpu_s", "stages"}`` to ``timings_path``
    (``stages``: seconds per local-runner stage, by stage name)."""
    return [sys.executable, "-c", _TIMED_JOB, module, json.dumps(list(argv)), timings_path]


def job_env(code_dir: str = REPO_ROOT) -> dict[str, str]:
    """The environment of a job subprocess: ``code_dir``'s packages first (another
    checkout, for before/after comparisons), TensorFlow's C++ logs off."""
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
            "PYTHONPATH": os.pathsep.join(filter(None, [code_dir,
                                                        os.environ.get("PYTHONPATH")]))}


# --- peak memory ------------------------------------------------------------------------

# Runs args["command"] (argv[1], JSON) as its only child, logging to args["log"], reaps
# every descendant and writes the children's peak RSS as JSON to args["result"].
_PEAK_RSS_WRAPPER = r"""
import ctypes, json, os, resource, subprocess, sys, time
args = json.loads(sys.argv[1])
if sys.platform.startswith("linux"):
    # PR_SET_CHILD_SUBREAPER: descendants orphaned by the job are re-parented here.
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
start = time.perf_counter()
with open(args["log"], "wb") as log:
    rc = subprocess.run(args["command"], stdout=log, stderr=subprocess.STDOUT).returncode
wall_s = time.perf_counter() - start
stragglers, killed, deadline = 0, 0, time.monotonic() + 60
while True:
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid:
        stragglers += 1
    elif time.monotonic() > deadline:
        import psutil
        for child in psutil.Process().children():
            child.kill()
            killed += 1
        deadline = float("inf")
    else:
        time.sleep(0.1)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(args["result"], "w") as f:
    json.dump({"rc": rc, "wall_s": wall_s, "ru_maxrss": usage.ru_maxrss,
               "cpu_s": usage.ru_utime + usage.ru_stime, "stragglers": stragglers,
               "stragglers_killed": killed}, f)
"""


def peak_rss_command(command: Sequence[str], log_path: str, result_path: str) -> list[str]:
    """``command`` as the only child of a fresh wrapper process, its output to
    ``log_path``; the wrapper writes ``{"rc", "wall_s", "cpu_s", "ru_maxrss", ...}`` to
    ``result_path`` (:func:`read_peak_rss`): ``ru_maxrss`` of RUSAGE_CHILDREN after
    every descendant is reaped is the peak RSS of the largest process of the
    command's tree, exactly, and nothing of the caller's."""
    return [sys.executable, "-c", _PEAK_RSS_WRAPPER,
            json.dumps({"command": list(command), "log": log_path, "result": result_path})]


def read_peak_rss(result_path: str) -> dict[str, Any]:
    """What a :func:`peak_rss_command` wrapper wrote, ``ru_maxrss`` as ``peak_rss_mib``."""
    result = read_json(result_path)
    # Linux reports kibibytes, macOS bytes.
    peak = result.pop("ru_maxrss") * (1 if sys.platform == "darwin" else 1024)
    return {**result, "peak_rss_mib": round(peak / MIB, 1)}


def measure(command: list[str], log_path: str, code_dir: str = REPO_ROOT) -> dict:
    """Runs ``command`` under a fresh wrapper; its exact peak RSS, wall and CPU time.

    The wrapper (and so ``command``) runs in ``code_dir`` with ``job_env(code_dir)``:
    another checkout of this project there (a before/after comparison's baseline) is
    what the command imports.
    """
    with tempfile.TemporaryDirectory() as tmp:
        result_path = os.path.join(tmp, "memory.json")
        proc = subprocess.run(peak_rss_command(command, log_path, result_path),
                              cwd=code_dir, env=job_env(code_dir), capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"the measuring wrapper failed:\n{proc.stderr[-3000:]}")
        return read_peak_rss(result_path)


def add_image_dataset_flags(parser: argparse.ArgumentParser, *, work_dir: str,
                            num_images: int, batch_size: int) -> None:
    """The flags of a benchmark that reads an :func:`image_dataset`: ``--work_dir``,
    ``--num_images``, ``--num_shards`` and the reader's ``--batch_size``."""
    parser.add_argument("--work_dir", default=work_dir,
                        help="Photos and the dataset built from them are kept here.")
    parser.add_argument("--num_images", type=int, default=num_images)
    parser.add_argument("--num_shards", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=batch_size)


def image_dataset(work_dir: str, num_images: int, num_shards: int, name: str,
                  *flags: str) -> str:
    """Web-size photos (kept in ``work_dir``) → the image job's 224 px records, all in
    train, with ``flags``, in ``<work_dir>/<name>_<num_images>_<num_shards>``; returns
    that folder. The job runs in its own process, once: a finished dataset is reused."""
    from scripts.benchmarks.sample_photos import ensure_photos

    os.makedirs(work_dir, exist_ok=True)
    photos = ensure_photos(work_dir, num_images, verbose=True)
    out = os.path.join(work_dir, f"{name}_{num_images}_{num_shards}")
    if os.path.exists(os.path.join(out, "manifest.json")):
        return out
    command = [sys.executable, "-m", "pipelines.images", f"--input={photos}",
               f"--output_dir={out}", "--split_fractions=1,0,0",
               f"--num_shards={num_shards}", "--image_size=224", *flags, "--overwrite"]
    print("building the dataset:", " ".join(command), flush=True)
    subprocess.run(command, cwd=REPO_ROOT, env=job_env(), check=True)
    return out


def float64_mean_and_std(values: Any) -> tuple[Any, Any]:
    """Per column of ``[rows, columns]`` float32 values: the population mean and std
    summed in float64 with ``math.fsum`` (two passes), independently of the jobs'
    exact integer sums; what the statistics checks compare the manifests with."""
    import math

    import numpy as np

    means, stds = [], []
    for column in np.asarray(values).T.astype(np.float64):
        mean = math.fsum(column) / len(column)
        means.append(mean)
        stds.append(math.sqrt(math.fsum((column - mean) ** 2) / len(column)))
    return np.array(means), np.array(stds)


def read_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def read_manifest(output_dir: str) -> dict[str, Any]:
    """The manifest a job published in ``output_dir`` (``reader.records.load_manifest``)."""
    # Imported here: small_jobs_profile.py reads this file under another checkout's code.
    from reader import records

    return records.load_manifest(output_dir)


def output_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """Examples, rejections, shards and MiB of the dataset ``manifest`` describes."""
    splits = manifest["splits"].values()
    return {"examples": sum(s["num_records"] for s in splits),
            "rejected": manifest["rejected"]["count"],
            "shards": sum(len(s["shards"]) for s in splits),
            "output_mib": round(sum(s["num_bytes"] for s in splits) / MIB, 1)}


# --- results ---------------------------------------------------------------------------

def write_json(path: str, result: dict[str, Any]) -> None:
    """Writes ``result`` to ``path`` (parent folders created), keys sorted so that
    reruns diff cleanly."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)


# One results file per benchmark: docs/benchmarks/<name>.json.
RESULTS_DIR = os.path.join(REPO_ROOT, "docs", "benchmarks")
RESULT_FIELDS = {"benchmark", "settings"}


def result_path(name: str) -> str:
    """The results file of benchmark ``name``: ``docs/benchmarks/<name>.json``."""
    return os.path.join(RESULTS_DIR, name + ".json")


def read_settings(path: str) -> dict[str, dict[str, Any]]:
    """The results in benchmark results file ``path`` by setting (``{}`` if there is
    none yet).

    Raises:
        ValueError: the file is not ``{"benchmark": ..., "settings": {...}}``.
    """
    if not os.path.exists(path):
        return {}
    content = read_json(path)
    if not isinstance(content, dict) or set(content) != RESULT_FIELDS:
        raise ValueError(f"{path} is not a benchmark results file: expected the fields "
                         f"{sorted(RESULT_FIELDS)}.")
    return content["settings"]


def write_result(path: str, setting: str, result: dict[str, Any], chart: Chart
                 ) -> dict[str, dict]:
    """Stores ``result`` as the entry ``setting`` (the input it was measured on) of the
    benchmark's one results file ``path``, ``{"benchmark": <file stem>, "settings":
    {setting: result}}``, and redraws the benchmark's ``chart`` beside it; the file's
    other settings, the same benchmark's current results on other inputs, are kept
    (earlier results are in git). Returns every setting's result."""
    settings = {**read_settings(path), setting: result}
    write_json(path, {"benchmark": os.path.splitext(os.path.basename(path))[0],
                      "settings": settings})
    chart.draw(path, settings)
    return settings


def add_result_flags(parser: argparse.ArgumentParser, name: str, setting: str) -> None:
    """``--out``, benchmark ``name``'s results file, and ``--setting``, the entry a run
    is stored as (``setting`` says its default, which names the run's input)."""
    parser.add_argument("--out", default=result_path(name),
                        help="The benchmark's results file (its chart goes beside it "
                             "as .png); this run is its --setting entry, the other "
                             "settings are kept.")
    parser.add_argument("--setting", default=None,
                        help=f"The entry this run is stored as. Default: {setting}.")


@dataclasses.dataclass(frozen=True)
class Panel:
    """One chart panel: a bar pair (median and best round) per label, first on top.

    ``line`` is an optional vertical line, ``(x, legend entry)``, e.g. a goal."""

    title: str
    labels: Sequence[str]
    medians: Sequence[float]
    bests: Sequence[float]
    line: tuple[float, str] | None = None


def plot_rates(path: str, panels: Sequence[Panel], *, unit: str, value_format: str
               ) -> None:
    """Saves a bar chart (PNG) of one panel per setting, one above the other.

    Args:
        path: Where the PNG goes.
        panels: What each panel shows.
        unit: The x axes' label, e.g. ``"images / s"``.
        value_format: Format spec of the value printed beside each bar, e.g. ``".1f"``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heights = [0.5 * len(panel.labels) + 1.5 for panel in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        y = list(range(len(panel.labels)))[::-1]
        ax.barh([v + 0.2 for v in y], panel.bests, height=0.4, color="#cc6633",
                label="best round")
        ax.barh([v - 0.2 for v in y], panel.medians, height=0.4, color="#6699cc",
                label="median round")
        for yy, median, best in zip(y, panel.medians, panel.bests, strict=True):
            ax.text(best, yy + 0.2, f" {best:{value_format}}", va="center", fontsize=8)
            ax.text(median, yy - 0.2, f" {median:{value_format}}", va="center", fontsize=8)
        if panel.line is not None:
            ax.axvline(panel.line[0], color="gray", linestyle="--", linewidth=1,
                       label=panel.line[1])
        ax.set_yticks(y, panel.labels, fontsize=8)
        ax.set_xlabel(unit)
        ax.legend(loc="best", fontsize=8)
        ax.set_title(panel.title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


@dataclasses.dataclass(frozen=True)
class Chart:
    """How a benchmark draws its one chart, a panel per setting's result: titled
    ``what``, a bar pair per label of ``figures(result)``, ``{label: {"median", "best",
    ...}}`` or ``{label: value}`` for figures measured once; or, with ``panel``, the
    panel that ``panel(setting, result)`` makes. Every panel is in ``unit``."""

    what: str = ""
    figures: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None
    unit: str = ""
    value_format: str = ".1f"
    panel: Callable[[str, dict[str, Any]], Panel] | None = None

    def panel_of(self, setting: str, result: dict[str, Any]) -> Panel:
        """The panel of one setting's result."""
        if self.panel is not None:
            return self.panel(setting, result)
        if self.figures is None:
            raise ValueError("A Chart needs figures or a panel.")
        figures = self.figures(result)
        medians = [f["median"] if isinstance(f, Mapping) else f for f in figures.values()]
        bests = [f["best"] if isinstance(f, Mapping) else f for f in figures.values()]
        return Panel(setting_title(setting, result, self.what), list(figures), medians, bests)

    def draw(self, results_path: str, settings: dict[str, dict[str, Any]]) -> str:
        """Draws the chart of ``settings`` beside ``results_path`` (``.png``); its path."""
        path = os.path.splitext(results_path)[0] + ".png"
        plot_rates(path, [self.panel_of(name, result) for name, result in settings.items()],
                   unit=self.unit, value_format=self.value_format)
        return path


def setting_title(setting: str, result: dict[str, Any], what: str) -> str:
    """A panel's title: the setting, what it shows, the machine's cores and the date."""
    cores = (result.get("machine") or {}).get("cpu_cores", "?")
    return f"{setting}: {what}, {cores} cores, {str(result.get('date', ''))[:10]}"


# --- the suite: declarations, side-by-side rounds, the entry point ---------------------

FOLDER = os.path.dirname(os.path.abspath(__file__))
# The package of the benchmarks, the modules of FOLDER.
PACKAGE = "scripts.benchmarks"
# Modules of this folder that are not benchmarks: this harness and what benchmarks share.
HELPERS = ("harness", "sample_photos", "small_jobs_profile")
# Where ``--quick`` runs put their inputs and results ("{quick_dir}" in ``Benchmark.quick``),
# never over docs/benchmarks/.
QUICK_DIR = os.path.join(tempfile.gettempdir(), "benchmarks_quick")


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """What a benchmark module declares at its top level, as ``BENCHMARK =
    harness.Benchmark(name=..., measures=..., quick=(...))``, in literals: the entry
    point reads it without importing the module (and TensorFlow with it).

    ``name`` is the module's name; ``measures`` one line for ``--list``; ``quick`` the
    arguments of a run that only checks the benchmark works (a small input, one round,
    results under :data:`QUICK_DIR`)."""

    name: str
    measures: str
    quick: tuple[str, ...] = ()


def declared(folder: str = FOLDER) -> dict[str, Benchmark]:
    """Every benchmark module of ``folder`` by name, from its ``BENCHMARK`` declaration.

    Raises:
        ValueError: a module that is not a helper declares no benchmark, or one
            under another name than its own.
    """
    found: dict[str, Benchmark] = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.py"))):
        stem = os.path.splitext(os.path.basename(path))[0]
        if stem.startswith("_") or stem in HELPERS:
            continue
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        calls = [node.value for node in tree.body if isinstance(node, ast.Assign)
                 and [getattr(t, "id", None) for t in node.targets] == ["BENCHMARK"]
                 and isinstance(node.value, ast.Call)]
        if len(calls) != 1:
            raise ValueError(f"{path}: no top-level BENCHMARK = Benchmark(...) declaration.")
        fields = {k.arg: ast.literal_eval(k.value) for k in calls[0].keywords}
        benchmark = Benchmark(**{**fields, "quick": tuple(fields.get("quick", ()))})
        if benchmark.name != stem:
            raise ValueError(f"{path} declares the benchmark {benchmark.name!r}; "
                             f"name it {stem!r}, as its module.")
        found[stem] = benchmark
    return found


def side_by_side(variants: dict[str, Callable[[], dict]], rounds: int, *,
                 max_foreign: float = 0.15, retries: int = 3) -> dict[str, list[dict]]:
    """Each variant (a job and its references) sampled once a round, rounds interleaved
    (:func:`interleaved`), each sample quiet (:func:`quiet_sample`): per variant, one
    ``{"seconds", "cpu_s", "foreign_cores", "attempts", **what it returned}`` a round."""
    samples: dict[str, list[dict]] = {name: [] for name in variants}
    for _, name in interleaved(list(variants), rounds):
        sample, attempts = quiet_sample(variants[name], max_foreign, retries)
        samples[name].append({"seconds": sample.wall, "cpu_s": sample.own_cpu,
                              "foreign_cores": round(sample.foreign_cores, 3),
                              "attempts": attempts, **(sample.extra or {})})
    return samples


def spread(values: Iterable[float], *, higher_is_better: bool) -> dict[str, float]:
    """The median, the best and the worst of one measure's rounds: the best is the
    highest with ``higher_is_better`` (a rate), else the lowest (a time)."""
    ordered = sorted(values)
    best, worst = (ordered[-1], ordered[0]) if higher_is_better else (ordered[0], ordered[-1])
    return {"median": statistics.median(ordered), "best": best, "worst": worst}


def write_rates(out: str, setting: str, title: str, samples: dict[str, list[dict]],
                work: float, unit: str) -> dict[str, Any]:
    """Each variant's rate (``work`` per second) in its median and its best round, with
    the samples, the machine and the code, as ``setting``'s entry of the results file
    ``out`` (:func:`write_result`); and the benchmark's chart beside it (``.png``),
    a panel per setting."""
    rates = {name: spread((work / s["seconds"] for s in runs), higher_is_better=True)
             for name, runs in samples.items()}
    result = {"title": title, "unit": unit, "work": work, "date": time.strftime("%Y-%m-%d"),
              "machine": machine(), "code": code_version(), "samples": samples,
              "median": {name: r["median"] for name, r in rates.items()},
              "best": {name: r["best"] for name, r in rates.items()}}
    write_result(out, setting, result, Chart(unit=unit, panel=lambda name, entry: Panel(
        f"{name}: {entry['title']}", list(entry["median"]), list(entry["median"].values()),
        list(entry["best"].values()))))
    return result


def package_folder(package: str) -> str:
    """The folder of the importable package ``package``."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{package!r} is not a package on sys.path: run the benchmarks "
                         f"from the repository's root.")
    return next(iter(spec.submodule_search_locations))


def run(name: str, args: Sequence[str], *, quick: bool = False, package: str = PACKAGE
        ) -> None:
    """Runs benchmark ``name`` of ``package`` as ``python -m PACKAGE.NAME ARGS`` would
    (with ``quick``, its ``quick`` arguments before ``args``).

    Raises:
        SystemExit: no benchmark of that name (the message lists them).
    """
    benchmarks = declared(package_folder(package))
    if name not in benchmarks:
        raise SystemExit(f"No benchmark {name!r}; there are: {', '.join(benchmarks)}.")
    extra = [a.format(quick_dir=QUICK_DIR) for a in benchmarks[name].quick] if quick else []
    saved_argv = sys.argv
    sys.argv = [name, *extra, *args]  # run_module puts the module's path first.
    try:
        runpy.run_module(f"{package}.{name}", run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved_argv


def main(argv: Sequence[str] | None = None, package: str = PACKAGE) -> None:
    """``--list``, or ``NAME [--quick] [ARGS...]``: ARGS are the benchmark's own flags."""
    argv = list(sys.argv[1:] if argv is None else argv)
    folder = package_folder(package)
    if not argv or argv[0] in ("-h", "--help"):
        print(main.__doc__)
        print("Benchmarks: " + ", ".join(declared(folder)))
        return
    if argv[0] == "--list":
        for benchmark in declared(folder).values():
            print(f"{benchmark.name:<18} {benchmark.measures}")
        return
    quick = argv[1:2] == ["--quick"]
    run(argv[0], argv[2:] if quick else argv[1:], quick=quick, package=package)
