"""The child of ``small_jobs.py --profile``: one job command, timed by phase.

Usage (the job's code dir the cwd and first on PYTHONPATH, the job's stdout dropped):
    python scripts/benchmarks/small_jobs_profile.py MODULE TIMINGS_JSON JOB_ARGV...

Runs the job as ``python -m MODULE JOB_ARGV...`` does in that code version: with
``sys.argv`` set, ``pipelines.command.run_command(run)`` where the version has
``pipelines/command.py``, else ``pipelines.common.main(run)`` then ``SystemExit(0)``.
Its steps are timed with ``time.perf_counter`` wrappers (no profiler): the job
module's import, its ``run`` and ``build_pipeline``, tf.Transform's
``AnalyzeDataset.expand``, ``Pipeline.to_runner_api``, the local runner's
``run_stages`` and each ``_execute_bundle`` (by stage name). When ``common.main``
returns, TIMINGS_JSON is written (flushed, fsynced) before the process ends as the
version's command ends it: marks and totals in seconds since this file's first line,
whose ``time.time()`` is ``first_line_epoch``; the stages' windows are
harness.TIME_STAGES's. Everything is imported after the first line's clock reads.

The phases small_jobs.py derives (s; the parent takes time.time() just before
Popen and the child's wall time, perf_counter around Popen..os.wait4):
  python_start_s        the parent's Popen to this file's first line (interpreter start);
  imports_s             importing the job module (TensorFlow, Beam, tf.Transform, ours);
  options_and_checks_s  start of the job's ``run`` to its ``build_pipeline``'s start;
  graph_s               the job's ``build_pipeline`` (Beam graph, tf.Transform expansion);
  tft_expand_s            of which ``tensorflow_transform.beam.AnalyzeDataset.expand``;
  graph_to_stages_s     ``build_pipeline``'s end to ``FnApiRunner.run_stages``'s start;
  to_runner_api_s         of which ``Pipeline.to_runner_api`` (all calls; seen to fall here);
  stages_s              ``FnApiRunner.run_stages`` (all calls): the local runner's stages;
  num_stages              ``FnApiRunner._execute_bundle`` calls;
  tft_stages_s            of stages_s, those named *AnalyzeAndWrite* or *AnalyzeTrain*;
  shard_step_s            of stages_s, those named *WriteShards* (read, transform, write);
  after_run_s           ``run_stages``' end to ``common.main``'s return (summary, cleanup);
  teardown_s            the report's write (fsynced, ms) and the process's end, as the
                        version's command ends it: parent's end - child's report time;
  other_s               total_s less the phases above but the "of which" ones (this
                        file's own steps, ``main`` before ``run``);
  total_s               the parent's wall time of the child.
"""

# ruff: noqa: E402 (the clocks are read before anything is imported)
import time

FIRST_LINE_EPOCH = time.time()
FIRST_LINE = time.perf_counter()

import functools
import importlib
import json
import os
import runpy
import sys
from collections.abc import Callable
from typing import Any

marks: dict[str, float] = {}
totals = {"graph_s": 0.0, "tft_expand_s": 0.0, "to_runner_api_s": 0.0, "stages_s": 0.0}
# harness.TIME_STAGES's namespace: its ``stage_windows`` (name, start, end).
stage_timing: dict[str, Any] = {}


def now() -> float:
    """Seconds since this file's first line."""
    return time.perf_counter() - FIRST_LINE


def timed(owner: Any, name: str, total: str | None = None, first: str | None = None,
          last: str | None = None) -> None:
    """Wraps ``owner.name``: its outermost calls' seconds add to ``totals[total]``; the
    start of its first call goes to ``marks[first]``, the end of its last to ``marks[last]``."""
    inner = getattr(owner, name)
    depth = [0]

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = now()
        if first:
            marks.setdefault(first, start)
        depth[0] += 1
        try:
            return inner(*args, **kwargs)
        finally:
            depth[0] -= 1
            end = now()
            if total and not depth[0]:
                totals[total] += end - start
            if last:
                marks[last] = end

    setattr(owner, name, wrapper)


def report(path: str) -> None:
    """Writes the timings to ``path`` (flushed, fsynced)."""
    marks["reported"] = now()
    stages: dict[str, float] = {}
    windows = stage_timing.get("stage_windows", [])
    for name, start, end in windows:
        stages[name] = stages.get(name, 0.0) + end - start
    with open(path, "w") as f:
        json.dump({"first_line_epoch": FIRST_LINE_EPOCH, "marks": marks, "totals": totals,
                   "stages": stages, "num_stages": len(windows)}, f)
        f.flush()
        os.fsync(f.fileno())


def reporting_main(main: Callable[..., None], path: str) -> Callable[..., None]:
    """``main``, writing the timings to ``path`` when it returns or raises."""
    def wrapper(run: Callable[..., Any]) -> None:
        marks["main_start"] = now()
        try:
            main(run)
        finally:
            marks["main_return"] = now()
            report(path)

    return wrapper


def profile() -> None:
    module, timings_path, *job_argv = sys.argv[1:]
    marks["import_start"] = now()
    job = importlib.import_module(module)
    marks["imported"] = now()
    import apache_beam
    import tensorflow_transform.beam
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    from pipelines import common

    timed(job, "run", first="run_start")
    timed(job, "build_pipeline", "graph_s", first="graph_start", last="graph_end")
    timed(tensorflow_transform.beam.AnalyzeDataset, "expand", "tft_expand_s")
    timed(apache_beam.Pipeline, "to_runner_api", "to_runner_api_s")
    timed(fn_runner.FnApiRunner, "run_stages", "stages_s", first="stages_start",
          last="stages_end")
    # Read from the harness beside this file by its path: the job's code dir comes
    # first on sys.path, and a checkout there has a ``scripts.benchmarks`` of its own.
    harness = os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness.py")
    time_stages = runpy.run_path(harness)["TIME_STAGES"]

    exec(time_stages, stage_timing)  # Each _execute_bundle's stage name and window.
    common.main = reporting_main(common.main, timings_path)
    sys.argv = [job.__file__, *job_argv]
    if os.path.exists(os.path.join(os.path.dirname(common.__file__), "command.py")):
        from pipelines.command import run_command

        run_command(job.run)
    common.main(job.run)
    raise SystemExit(0)


if __name__ == "__main__":
    profile()
