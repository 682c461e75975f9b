"""The jobs on runners other than the default FnApiRunner, all offline.

* PortableRunner with ``--job_endpoint=embed``: Beam's in-process Python job service
  (``local_job_service.LocalJobServicer``, no Java job server, no download) submits
  the portable pipeline proto over the Job API; the SDK harness runs either in the
  job's process (``LOOPBACK``) or as a separate ``sdk_worker_main`` subprocess, which
  unpickles every DoFn from the proto like a remote worker would. Both jobs' commands
  on both are tested in test_exit_status.py: exit status 0, output byte-identical to
  the default runner's.
* DataflowRunner with ``--dry_run=True``: the command ``scripts/submit_dataflow.sh``
  runs, for each job, with its paths on a local GCS server: the complete Dataflow
  job (portable pipeline proto, Docker environment, staged ``setup.py`` sdist) is
  built and validated exactly as for a submission, and then not submitted. Local
  paths are refused before that, in one line.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

import apache_beam as beam
import pytest

from tests import image_fixtures
from tests.gcs_server import objects
from tests.job_commands import REPO_ROOT
from tests.job_runs import run_main

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


def test_a_job_options_view_is_made_once_per_class_and_shares_every_value():
    # Beam's view_as parses the flags again per call, and building a pipeline calls it
    # per transform: the job's options keep one view per class (pipelines.common).
    import pickle

    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    from pipelines import images

    options = images.ImagesOptions(["--input=x", "--runner=DirectRunner"])
    parsed = []
    original = PipelineOptions.__init__

    def counting(self, *args, **kwargs):
        parsed.append(type(self).__name__)
        original(self, *args, **kwargs)

    PipelineOptions.__init__ = counting
    try:
        views = [options.view_as(StandardOptions) for _ in range(3)]
    finally:
        PipelineOptions.__init__ = original
    assert parsed == ["StandardOptions"] and views[0] is views[2]
    views[0].runner = "FlinkRunner"
    assert options.view_as(StandardOptions).runner == "FlinkRunner"
    assert options.get_all_options()["runner"] == "FlinkRunner"
    copy = pickle.loads(pickle.dumps(options))  # what a runner is sent
    assert copy.view_as(StandardOptions).runner == "FlinkRunner"
    assert copy.view_as(images.ImagesOptions).input == "x"


def _copy_project(dest: str) -> str:
    """setup.py and the packages, without build leftovers; returns the setup.py path."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(os.path.join(REPO_ROOT, package), os.path.join(dest, package),
                        ignore=ignore)
    shutil.copy(os.path.join(REPO_ROOT, "setup.py"), dest)
    return os.path.join(dest, "setup.py")


def _submit_command(job: str, bucket: str, extra: tuple[str, ...], tmp_path) -> list[str]:
    """The job argv ``scripts/submit_dataflow.sh`` runs, taken from a stand-in for the
    launcher's interpreter (``PYTHON``) that records its arguments."""
    fake_python, recorded = tmp_path / "python", tmp_path / "argv.txt"
    fake_python.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{recorded}"\n')
    fake_python.chmod(0o755)
    subprocess.run(["bash", "scripts/submit_dataflow.sh", job, "example-project",
                    "us-central1", bucket, *extra], cwd=REPO_ROOT, check=True,
                   env={**os.environ, "PYTHON": str(fake_python)}, capture_output=True)
    argv = recorded.read_text().splitlines()
    assert argv[:2] == ["-m", f"pipelines.{job}"], argv
    return argv[2:]


def _offline_dry_run(argv: list[str], tmp_path, monkeypatch, stage_sdist: bool = True
                     ) -> list[str]:
    """``argv`` ready for a dry run here: --dry_run=True, the sdist staged from a copy
    of the project (the stager runs ``setup.py sdist`` beside setup.py; without
    ``stage_sdist``, none), and tf.Transform's scratch files, which it writes while
    the graph is built through TensorFlow's own GCS client (it reaches only Google's
    endpoint), sent to a local folder instead. Returns the ``--tft_temp_dir``
    tf.Transform asked for."""
    from tensorflow_transform.beam import context

    asked: list[str] = []

    def local_scratch(cls):
        asked.append(cls._get_topmost_state_frame().temp_dir)
        os.makedirs(tmp_path / "tft_scratch", exist_ok=True)
        return str(tmp_path / "tft_scratch")

    monkeypatch.setattr(context.Context, "create_base_temp_dir", classmethod(local_scratch))
    # The stager writes the sdist and pickled main session to a mkdtemp() folder.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    setup_file = _copy_project(str(tmp_path / "src")) if stage_sdist else None
    argv[:] = [(f"--setup_file={setup_file}" if arg.startswith("--setup_file=") else arg)
               for arg in argv if setup_file or not arg.startswith("--setup_file=")]
    argv.append("--dry_run=True")
    return asked


def test_submit_script_builds_the_image_job_for_dataflow(gcs_bucket, small_input, tmp_path,
                                                         monkeypatch):
    # The script's command, built and validated as Dataflow would take it, against the
    # local GCS server: nothing is submitted and nothing is written to the bucket.
    from apache_beam.options.pipeline_options import WorkerOptions
    from apache_beam.portability.api import beam_runner_api_pb2

    from pipelines import images, runner_defaults
    from tests.gcs_server import upload_tree

    upload_tree(gcs_bucket.server, small_input, gcs_bucket.name, "images")
    argv = _submit_command("images", gcs_bucket.name, (), tmp_path)
    assert f"--output_dir={gcs_bucket.url}/out/images" in argv
    asked = _offline_dry_run(argv, tmp_path, monkeypatch)
    options = runner_defaults.pipeline_options(argv, images.ImagesOptions)
    job = images.ImageJob.from_options(options.view_as(images.ImagesOptions))
    pipeline = beam.Pipeline(options=options)
    images.build_pipeline(pipeline, job)
    result = pipeline.run()  # Built and validated, not submitted.

    assert asked == [f"{gcs_bucket.url}/out/images/tmp"]
    assert list(objects(gcs_bucket.server, gcs_bucket.name)) == sorted(
        objects(gcs_bucket.server, gcs_bucket.name, "images/"))
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
    setup_dir = str(tmp_path / "src")
    with tarfile.open(staged["workflow.tar.gz"]) as sdist:
        in_sdist = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for package in PACKAGES:
        modules = {os.path.relpath(p, setup_dir)
                   for p in glob.glob(os.path.join(setup_dir, package, "**", "*.py"),
                                      recursive=True)}
        assert modules and modules <= in_sdist, sorted(modules - in_sdist)


def test_submit_script_builds_the_timeseries_job_for_dataflow(gcs_bucket, tmp_path,
                                                              monkeypatch, capsys):
    from pipelines import timeseries

    rows = "series_id,date,co2\n" + "".join(f"s,{day},{day % 7}\n" for day in range(40))
    gcs_bucket.server.client().bucket(gcs_bucket.name).blob(
        "series/co2.csv").upload_from_string(rows)
    argv = _submit_command("timeseries", gcs_bucket.name, (
        "--timestamp_column=date", "--value_columns=co2", "--window_size=6",
        "--horizon=2"), tmp_path)
    assert f"--input={gcs_bucket.url}/series/*.csv" in argv
    # The staged sdist is the image job's test's; this one builds the job's graph.
    asked = _offline_dry_run(argv, tmp_path, monkeypatch, stage_sdist=False)
    assert timeseries.run(argv) == {}
    assert "nothing submitted or written" in capsys.readouterr().out
    assert asked == [f"{gcs_bucket.url}/out/timeseries/tmp"]
    assert list(objects(gcs_bucket.server, gcs_bucket.name)) == ["series/co2.csv"]


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
@pytest.mark.parametrize("job", ["images", "timeseries"])
def test_python_m_builds_the_job_from_the_imported_module(job, monkeypatch):
    # `python -m pipelines.<job>` runs the module as __main__; the run it hands to
    # main must be the imported module's, so that no step pickles by value from
    # __main__ (workers import pipelines.<job> from the installed package).
    import runpy

    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import command

    handed = []

    def run_command(run):  # The real one ends the process (os._exit) and never returns.
        handed.append(run)
        raise SystemExit(0)

    monkeypatch.setattr(command, "run_command", run_command)
    with pytest.raises(SystemExit) as stopped:
        runpy.run_module(f"pipelines.{job}", run_name="__main__")
    assert stopped.value.code == 0
    # __main__ stopped before defining its options class a second time.
    assert not [cls for cls in PipelineOptions.__subclasses__()
                if cls.__module__ == "__main__"]
    (run,) = handed
    assert run.__module__ == f"pipelines.{job}"
    assert run is __import__(f"pipelines.{job}").__dict__[job].run


@pytest.mark.parametrize("local_flag", ["--input", "--output_dir", "--tft_temp_dir"])
def test_dataflow_with_a_local_path_is_refused_in_one_line(
        local_flag, gcs_bucket, small_input, tmp_path, monkeypatch, root_logging):
    from pipelines import images

    bucket = gcs_bucket.url
    paths = {"--input": f"{bucket}/images", "--output_dir": f"{bucket}/out",
             "--tft_temp_dir": f"{bucket}/tft_tmp"}
    paths[local_flag] = small_input if local_flag == "--input" else str(tmp_path / "x")
    exit_error = run_main(monkeypatch, images.run, [
        *(f"{flag}={path}" for flag, path in paths.items()),
        "--runner=DataflowRunner", "--project=example-project", "--region=us-central1",
        f"--temp_location={bucket}/tmp"])
    assert exit_error.code == (
        f"error: {local_flag} {paths[local_flag]!r} is on this machine's disk, which "
        f"DataflowRunner workers cannot see: give gs:// paths for --input, "
        f"--output_dir, --tft_temp_dir and --temp_location.")
    assert not (tmp_path / "x").exists()
