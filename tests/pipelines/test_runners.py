"""The jobs on runners other than the default FnApiRunner, all offline.

* PortableRunner with ``--job_endpoint=embed``: Beam's in-process Python job service
  (``local_job_service.LocalJobServicer``, no Java job server, no download) submits
  the portable pipeline proto over the Job API; the SDK harness runs either in the
  job's process (``LOOPBACK``) or as a separate ``sdk_worker_main`` subprocess, which
  unpickles every DoFn from the proto like a remote worker would. Both jobs' commands
  on both are tested in test_exit_status.py: exit status 0, output byte-identical to
  the default runner's.
* DataflowRunner with ``--dry_run=True``: the complete Dataflow job (portable
  pipeline proto, Docker environment, staged ``setup.py`` sdist) is built and
  validated exactly as for a submission, and then not submitted.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import tarfile
import tempfile

import apache_beam as beam
import pytest

from tests import image_fixtures
from tests.job_commands import REPO_ROOT

PACKAGES = ("etl", "pipelines", "reader")

# The Beam transforms that make up the job; each must appear in the Dataflow graph.
JOB_TRANSFORMS = {
    "ReadImageRecords", "AssignSplits", "AnalyzeLabels", "AnalyzeTrain", "WriteTransformFn",
    "Publish", "PlanShards", "TransformAndWrite", "FinalizeShards",
    "WriteRejections", "WriteManifest",
}


@pytest.fixture(scope="module")
def small_input(tmp_path_factory: pytest.TempPathFactory) -> str:
    """33 good images (every format, 3 labels): the input the dry runs plan for."""
    root = str(tmp_path_factory.mktemp("runners_input"))
    image_fixtures.write_image_folder(root, copies=1)
    return root


def test_job_flags_are_in_the_options_beam_sends_to_runners():
    # Beam serializes the flags of PipelineOptions' *direct* subclasses only; a
    # job-specific flag missing there was logged as "Unparseable argument".
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import images, timeseries  # noqa: F401  (registers the options)

    options = PipelineOptions(["--image_size=32", "--window_size=5", "--horizon=2",
                               "--input=x", "--gzip_level=1"]).get_all_options()
    assert (options["image_size"], options["window_size"], options["horizon"],
            options["input"], options["gzip_level"]) == (32, 5, 2, "x", 1)


def _copy_project(dest: str) -> str:
    """setup.py and the packages, without build leftovers; returns the setup.py path."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(os.path.join(REPO_ROOT, package), os.path.join(dest, package),
                        ignore=ignore)
    shutil.copy(os.path.join(REPO_ROOT, "setup.py"), dest)
    return os.path.join(dest, "setup.py")


def test_dataflow_job_graph_builds_offline(small_input, tmp_path, monkeypatch):
    from apache_beam.options.pipeline_options import WorkerOptions
    from apache_beam.portability.api import beam_runner_api_pb2

    from pipelines import images, runner_defaults

    # The stager writes the sdist and pickled main session to a mkdtemp() folder.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # The stager runs `setup.py sdist` next to setup.py: build from a copy so that
    # the checkout's egg-info is left alone.
    setup_file = _copy_project(str(tmp_path / "src"))
    argv = [
        f"--input={small_input}", "--output_dir=gs://example-bucket/out/images",
        # tf.Transform creates its scratch folder while the graph is built.
        f"--tft_temp_dir={tmp_path / 'tft_tmp'}",
        "--runner=DataflowRunner", "--project=example-project", "--region=us-central1",
        "--temp_location=gs://example-bucket/tmp",
        "--staging_location=gs://example-bucket/staging",
        f"--setup_file={setup_file}", "--machine_type=n2-standard-4",
        "--dry_run=True",
    ]
    options = runner_defaults.pipeline_options(argv, images.ImagesOptions)
    job = images.ImageJob.from_options(options.view_as(images.ImagesOptions))
    pipeline = beam.Pipeline(options=options)
    images.build_pipeline(pipeline, job)
    result = pipeline.run()  # Built and validated, not submitted.

    dataflow_job = result.job
    assert dataflow_job.proto.type_.name == "JOB_TYPE_BATCH"
    assert dataflow_job.options.view_as(WorkerOptions).machine_type == "n2-standard-4"
    proto = dataflow_job.proto_pipeline
    segments = {part for transform in proto.components.transforms.values()
                for part in transform.unique_name.split("/")}
    assert segments >= JOB_TRANSFORMS, JOB_TRANSFORMS - segments

    # One Docker environment: Beam's Python SDK image for this Python and Beam,
    # with this project's sdist staged as workflow.tar.gz for the workers.
    (environment,) = proto.components.environments.values()
    assert environment.urn == "beam:env:docker:v1"
    image = beam_runner_api_pb2.DockerPayload.FromString(environment.payload).container_image
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert image.endswith(f"beam_python{python}_sdk:{beam.__version__}"), image
    staged = {}
    for dependency in environment.dependencies:
        role = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
            dependency.role_payload)
        staged[role.staged_name] = beam_runner_api_pb2.ArtifactFilePayload.FromString(
            dependency.type_payload).path
    assert "workflow.tar.gz" in staged, sorted(staged)
    with tarfile.open(staged["workflow.tar.gz"]) as sdist:
        in_sdist = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for package in PACKAGES:
        modules = {os.path.relpath(p, os.path.dirname(setup_file))
                   for p in glob.glob(os.path.join(os.path.dirname(setup_file), package,
                                                   "**", "*.py"), recursive=True)}
        assert modules and modules <= in_sdist, sorted(modules - in_sdist)


def test_cli_dry_run_touches_no_output(small_input, tmp_path, monkeypatch, capsys):
    from pipelines import images

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    setup_file = _copy_project(str(tmp_path / "src"))
    out = tmp_path / "would_be_output"
    manifest = images.run([
        f"--input={small_input}", f"--output_dir={out}",
        f"--tft_temp_dir={tmp_path / 'tft_tmp'}",
        "--runner=DataflowRunner", "--project=example-project", "--region=us-central1",
        "--temp_location=gs://example-bucket/tmp", f"--setup_file={setup_file}",
        "--dry_run=True"])
    assert manifest == {}
    assert "nothing submitted or written" in capsys.readouterr().out
    assert not out.exists()
