"""What every job shares: output flags, the validated output settings, the run flow."""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

from etl.core import dead_letters
from etl.core.io import storage
from etl.core.publishing import accounting
from etl.core.run import resume, run_lock, versions
from etl.core.run.output_dir import check_output_path, prepare_output_dir
from etl.core.shards import placement, splits
from etl.core.shards.files import DEFAULT_GZIP_LEVEL, ShardFormat, check_gzip_level
from pipelines import arguments, failures, held_reports, runner_defaults, summary
from reader.format import contract
from reader.format.contract import MANIFEST_FILENAME

_MIB = 1024 * 1024
_View = TypeVar("_View", bound=PipelineOptions)
# Each options object's views by class (DatasetOptions.view_as); outside the object,
# whose __dict__ Beam pickles.
_VIEWS: weakref.WeakKeyDictionary[PipelineOptions, dict[type, PipelineOptions]] = (
    weakref.WeakKeyDictionary())


class DatasetOptions(PipelineOptions):
    """Flags every job shares: input, output and sharding.

    Defined once: Beam builds one parser from every PipelineOptions subclass loaded
    in the process, so two jobs declaring the same flag would collide. A job's options
    class derives from this one *and* directly from ``PipelineOptions``
    (``class ImagesOptions(DatasetOptions, PipelineOptions)``): Beam parses the flags
    of PipelineOptions' direct subclasses only.
    """

    JOB = ""  # A job's options class names its job (arguments.JOBS), for --help.

    def view_as(self, cls: type[_View]) -> _View:
        """Beam's ``view_as``, made once per class. Beam's own builds a parser and
        parses the flags again on every call, and building a pipeline calls it for each
        transform applied (its type checks): about 1,300 calls, 0.3 s of a 12-image
        job's 2 s on a 2-core VM. A view reads and writes the options' shared values,
        so one serves every call."""
        views = _VIEWS.setdefault(self, {})
        if cls not in views:
            views[cls] = super().view_as(cls)
        return views[cls]

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        arguments.add_shared_flags(parser)


def mib_to_bytes(mib: float) -> int:
    """A size flag's MiB as whole bytes."""
    return int(mib * _MIB)


def require(options: Any, *flags: str) -> None:
    """Raises ValueError for the first flag that is unset.

    Checked here rather than with argparse's required=True: Beam parses every
    PipelineOptions subclass in the process, also where these flags are absent.
    """
    for flag in flags:
        if getattr(options, flag) in (None, ""):
            raise ValueError(f"--{flag} is required (see --help).")


@dataclasses.dataclass(frozen=True)
class OutputSettings:
    """Validated output flags shared by every job."""

    output_dir: str
    name: str
    fractions: splits.SplitFractions
    num_shards: int | None
    target_shard_bytes: int
    gzip_level: int
    tft_temp_dir: str
    overwrite: bool
    max_error_fraction: float
    resume: bool = True
    compression: str = contract.GZIP
    statistics: bool = True

    @property
    def shard_format(self) -> ShardFormat:
        return ShardFormat(self.compression, self.gzip_level)

    @classmethod
    def from_options(cls, options: Any, default_name: str,
                     default_gzip_level: int = DEFAULT_GZIP_LEVEL) -> OutputSettings:
        """The output flags of ``options``; ``default_name`` and ``default_gzip_level``
        are the job's own defaults for ``--name`` and ``--gzip_level``."""
        require(options, "output_dir")
        if not 0 <= options.max_error_fraction <= 1:
            raise ValueError(f"--max_error_fraction must be in [0, 1], got "
                             f"{options.max_error_fraction}.")
        if (options.compression == contract.NO_COMPRESSION
                and options.gzip_level is not None):
            raise ValueError(f"--gzip_level={options.gzip_level} needs "
                             f"--compression=gzip; --compression=none writes no GZIP.")
        target_shard_bytes = mib_to_bytes(options.target_shard_mb)
        placement.plan_num_shards(1, 1, target_shard_bytes, options.num_shards)
        return cls(
            output_dir=options.output_dir,
            name=options.name or default_name,
            fractions=splits.SplitFractions.parse(
                options.split_fractions or arguments.DEFAULT_SPLIT_FRACTIONS),
            num_shards=options.num_shards,
            target_shard_bytes=target_shard_bytes,
            compression=contract.check_compression(options.compression),
            gzip_level=check_gzip_level(
                default_gzip_level if options.gzip_level is None else options.gzip_level),
            tft_temp_dir=(runner_defaults.scratch_dir(options.tft_temp_dir,
                                                      options.output_dir)
                          if options.tft_temp_dir else
                          runner_defaults.default_tft_temp_dir(options.output_dir,
                                                               options)),
            overwrite=options.overwrite,
            max_error_fraction=options.max_error_fraction,
            resume=not options.no_resume,
            statistics=options.statistics == "on",
        )

    def describe(self) -> dict[str, Any]:
        """Sharding parameters for the manifest's "preprocessing" entry."""
        return {
            "num_shards": self.num_shards,
            "target_shard_bytes": self.target_shard_bytes,
            "compression": self.compression,
            "gzip_level": self.gzip_level if self.compression == contract.GZIP else None,
            "statistics": "on" if self.statistics else "off",
            "sharding": "shard = sha256-based hash of key % num_shards; in-shard order "
                        "by a second hash; empty shard ids dropped",
        }


class Job(Protocol):
    """What ``run_job`` needs of a job's validated settings (``ImageJob``,
    ``TimeSeriesJob``)."""

    @property
    def output(self) -> OutputSettings:
        """The output flags: where the dataset is written and how."""

    @property
    def version(self) -> versions.DatasetVersion:
        """The dataset version the run publishes: the first, or (``--append``) the
        next one."""


_Options = TypeVar("_Options", bound=DatasetOptions)
_Job = TypeVar("_Job", bound=Job)


def run_job(argv: Sequence[str] | None, options_class: type[_Options],
            make_job: Callable[[_Options], _Job],
            build_pipeline: Callable[[beam.Pipeline, _Job], None],
            adjust_options: Callable[[PipelineOptions], None] | None = None
            ) -> dict[str, Any]:
    """Validates, prepares the output dir, runs, cleans up, prints the summary.

    ``make_job(options)`` validates everything and changes nothing (nothing is
    written before it returns). ``adjust_options(options)``, if given, then changes
    the options the runner sees.

    Returns:
        The manifest the job published.
    """
    arguments.exit_if_help(options_class.JOB, argv or [])
    arguments.check_values(options_class.JOB, argv or [])
    options = runner_defaults.pipeline_options(argv, options_class)
    own = options.view_as(DatasetOptions)
    runner_defaults.require_shared_storage(options, {
        "--input": own.input, "--output_dir": own.output_dir,
        "--tft_temp_dir": own.tft_temp_dir}, own.shared_folders)
    storage.configure(options)
    job = make_job(options.view_as(options_class))
    if adjust_options is not None:
        adjust_options(options)
    if options.view_as(TestOptions).dry_run:
        # DataflowRunner builds, validates and stages the job locally; nothing is
        # submitted and the output directory is not touched.
        pipeline = beam.Pipeline(options=options)
        build_pipeline(pipeline, job)
        pipeline.run()
        print("Dry run: job graph built and validated; nothing submitted or written.")
        return {}
    started, started_cpu = time.monotonic(), summary.cpu_seconds()
    version = job.version
    check_output_path(job.output.output_dir)
    # The lock first: nothing in the folder is read for a decision, or changed,
    # while another run may be changing it.
    with run_lock.RunLock.acquire(job.output.output_dir):
        prepare_output_dir(job.output.output_dir, job.output.overwrite,
                           job.output.resume, append=version.appends)
        pipeline = beam.Pipeline(options=options)
        build_pipeline(pipeline, job)
        try:
            result = runner_defaults.run_to_completion(pipeline)
        except Exception as e:
            # Every runner reports a failed step in its own words; a withheld dataset
            # is recognised by the record the manifest step left, with its type.
            withheld = accounting.read_failure(job.output.output_dir)
            if withheld is not None:
                raise withheld from e
            raise
        elapsed = time.monotonic() - started
        # Cores busy here, where the work ran here (not a cluster's or Dataflow's).
        cores = (None if runner_defaults.remote_workers(options) else summary.CoresUsed(
            summary.cpu_seconds() - started_cpu, elapsed))
        runner_defaults.remove_temp_dir(job.output.tft_temp_dir)
        resume.remove_progress(job.output.output_dir)
    manifest = versions.read_manifest(job.output.output_dir)
    counts = summary.run_counts(result)
    if manifest.get("dataset_version", 1) < version.number:
        print(summary.format_nothing_new(job.output.output_dir, manifest, counts))
    else:
        print(summary.format_summary(job.output.output_dir, manifest, elapsed, counts,
                                     cores))
    return manifest


class _HideWithheldTracebacks(logging.Filter):
    """Drops the log record of a withheld dataset's exception, or of an input that
    stops the job: Beam logs a failing step's exception with its traceback before
    re-raising it, and ``main`` reports either in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else record.msg
        return not isinstance(error, (accounting.WithheldError, dead_letters.InputError))


def main(run: Callable[[Sequence[str]], Any]) -> None:
    """Console entry: quiet logs; a run that stops ends with one ``error:`` line.

    Option errors and withheld datasets (too many rejections, counts that do not
    reconcile, no train examples) are that line alone. So is a resource or
    environment failure (disk full, output not writable, input vanished, a killed
    worker: ``pipelines/failures.py``), with what the output directory holds after
    it; the tracebacks Beam logs for it are held back. Any other error is a bug: its
    traceback stays, then the line. ``--debug`` shows every traceback.
    """
    argv = sys.argv[1:]
    flags = failures.console_flags(argv)
    root = logging.getLogger()
    root.setLevel(logging.WARNING)
    if not root.handlers:
        logging.basicConfig()  # Installed now, so that later calls add no other one.
    if not flags.debug:
        # Beam's notices that it started and stopped a runner's job server (Flink,
        # Spark) are warnings; the stop comes after the summary, as the run's last line.
        logging.getLogger("apache_beam.utils.subprocess_server").setLevel(logging.ERROR)
    held = held_reports.HeldReports()
    for handler in root.handlers:
        handler.addFilter(_HideWithheldTracebacks())
        if not flags.debug:
            handler.addFilter(held.filter_for(handler))
    if not flags.debug:
        held.hold_thread_errors_and_stderr()
    published_before = _manifest_sha256(flags.output_dir)
    try:
        run(argv)
    except UnicodeError as e:  # A ValueError, but never the user's to fix: a bug.
        sys.exit(one_line(_stopped_run_line(e, flags, held, published_before)))
    except (ValueError, accounting.WithheldError) as e:
        # An input found on a worker to stop the job is its line alone; what Beam
        # held of it (a worker's own report) is dropped.
        held.drop() if isinstance(e, dead_letters.InputError) else held.release()
        if flags.debug:
            traceback.print_exc()
        sys.exit(one_line(f"error: {e}"))
    except Exception as e:
        sys.exit(one_line(_stopped_run_line(e, flags, held, published_before)))
    except BaseException:  # Ctrl-C, --help's exit: what was held is printed first.
        held.release()
        raise
    held.release()


def one_line(text: str) -> str:
    """``text`` as the one line it must stay: a line break it quotes (a key or a class
    folder named with one) written ``\\n`` or ``\\r``."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _stopped_run_line(error: Exception, flags: failures.ConsoleFlags,
                      held: held_reports.HeldReports, published_before: str | None
                      ) -> str:
    """The last line of a run ``error`` stopped; prints its traceback first unless
    it is a recognised failure (or with ``--debug``, always)."""
    failure = failures.classify(error, flags.written_roots(), held.texts())
    if failure is None or flags.debug:
        held.release()
        traceback.print_exception(error)
    else:
        held.drop()
    outcome = _outcome(flags.output_dir, published_before)
    if failure is None:
        return failures.format_unexpected(error, outcome)
    return failures.format_line(failure, outcome)


def _manifest_sha256(output_dir: str | None) -> str | None:
    """The sha256 of ``output_dir``'s manifest; None if it has none or cannot be read."""
    if not output_dir:
        return None
    path = storage.join(output_dir, MANIFEST_FILENAME)
    try:
        return storage.sha256(path) if storage.exists(path) else None
    except OSError:
        return None


def _outcome(output_dir: str | None, published_before: str | None) -> failures.Outcome:
    """What a failed run left in ``output_dir``: a published dataset (this run's, the
    one there before, none) and the finished shards a rerun reuses."""
    if not output_dir:
        return failures.Outcome(None, failures.Publication.NONE, None)
    published = _manifest_sha256(output_dir)
    publication = (failures.Publication.NONE if published is None
                   else failures.Publication.PREVIOUS_INTACT if published == published_before
                   else failures.Publication.PUBLISHED)
    try:
        reusable: int | None = resume.count_recorded_shards(output_dir)
    except OSError:
        reusable = None
    return failures.Outcome(output_dir, publication, reusable)
