"""Pipeline options shared by the jobs: the offline-safe default runner, temp cleanup."""

from __future__ import annotations

from collections.abc import Sequence

from apache_beam import Pipeline
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineState

# Beam's DirectRunner first tries to download and start the Prism runner, which stalls
# or fails without internet access. Its batch engine, the FnApiRunner, runs in-process
# and honours --direct_num_workers and --direct_running_mode, so it is our default.
DEFAULT_RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def pipeline_options(argv: Sequence[str] | None,
                     options_class: type[PipelineOptions] = PipelineOptions
                     ) -> PipelineOptions:
    """Beam options from ``argv`` with our default runner when ``--runner`` is absent.

    Parsing through the job's own ``options_class`` makes ``--help`` list its flags.
    """
    options = options_class(list(argv or []))
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = DEFAULT_RUNNER
    return options


def run_to_completion(pipeline: Pipeline) -> None:
    """Runs ``pipeline`` and waits; raises if it ends in any state but DONE."""
    result = pipeline.run()
    state = result.wait_until_finish()
    if state != PipelineState.DONE:
        raise RuntimeError(f"Pipeline finished in state {state}, not DONE; see the "
                           f"runner's logs. No manifest was published.")


def remove_temp_dir(path: str) -> None:
    """Deletes the tf.Transform scratch directory once the job has succeeded."""
    import tensorflow as tf

    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)
