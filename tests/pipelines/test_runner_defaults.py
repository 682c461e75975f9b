"""Where a runner's workers can reach files: local paths refused, before anything
runs, for a runner whose workers share no disk with this machine, unless they lie
inside a folder every worker host mounts (``--shared_folders``)."""

from __future__ import annotations

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import common, images, runner_defaults, timeseries
from tests import image_fixtures
from tests.job_runs import run_main

REMOTE_FLINK = ("--runner=FlinkRunner", "--flink_master=10.0.0.9:8081")
GIVE_GS = "give gs:// paths for --input, --output_dir, --tft_temp_dir and --temp_location"


def check(*flags: str) -> None:
    """``require_shared_storage`` on the command line ``flags``, as ``run_job`` calls it."""
    options = PipelineOptions(list(flags))
    own = options.view_as(common.DatasetOptions)
    runner_defaults.require_shared_storage(options, {
        "--input": own.input, "--output_dir": own.output_dir,
        "--tft_temp_dir": own.tft_temp_dir}, own.shared_folders)


def refusal(*flags: str) -> str:
    with pytest.raises(ValueError) as refused:
        check(*flags)
    return str(refused.value)


def test_require_shared_storage_accepts_local_paths_on_the_default_runner(tmp_path):
    check(f"--input={tmp_path}", f"--output_dir={tmp_path}/out", "--temp_location=/tmp")


def test_require_shared_storage_refuses_a_local_path_on_dataflow():
    assert refusal("--runner=DataflowRunner", "--output_dir=out",
                   "--temp_location=gs://b/tmp") == (
        f"--output_dir 'out' is on this machine's disk, which DataflowRunner workers "
        f"cannot see: {GIVE_GS}.")


def test_require_shared_storage_refuses_shared_folders_on_dataflow(tmp_path):
    assert refusal("--runner=DataflowRunner", f"--shared_folders={tmp_path}",
                   "--output_dir=gs://b/out") == (
        f"--shared_folders is for Flink or Spark clusters whose hosts mount a shared "
        f"folder; DataflowRunner workers mount none of this machine's folders: leave "
        f"it out and {GIVE_GS}.")


def test_require_shared_storage_refuses_a_local_path_on_a_remote_flink_master():
    assert refusal(*REMOTE_FLINK, "--output_dir=/data/out") == (
        f"--output_dir '/data/out' is on this machine's disk, which FlinkRunner "
        f"workers (--flink_master=10.0.0.9:8081) cannot see: {GIVE_GS}, or, if every "
        f"worker host mounts a shared folder (NFS, Filestore) at the same path, paths "
        f"inside it and --shared_folders=<that folder>.")


def test_require_shared_storage_refuses_a_local_temp_location_on_a_remote_flink_master():
    assert refusal(*REMOTE_FLINK, "--output_dir=gs://b/out",
                   "--temp_location=/tmp").startswith(
        "--temp_location '/tmp' is on this machine's disk, which FlinkRunner workers")


def test_require_shared_storage_accepts_gs_paths_on_a_remote_flink_master():
    check(*REMOTE_FLINK, "--input=gs://b/photos", "--output_dir=gs://b/out",
          "--tft_temp_dir=gs://b/tft", "--temp_location=gs://b/tmp")


@pytest.mark.parametrize("inside", ["shared", "shared/", "shared/out",
                                    "shared/a/../out", "other/../shared/out"])
def test_require_shared_storage_accepts_a_path_inside_a_shared_folder(tmp_path, inside):
    (tmp_path / "first").mkdir()
    (tmp_path / "shared").mkdir()
    check(*REMOTE_FLINK, f"--shared_folders={tmp_path}/first, {tmp_path}/shared/",
          f"--output_dir={tmp_path}/{inside}", f"--tft_temp_dir={tmp_path}/shared/tft")


def test_require_shared_storage_compares_relative_paths_as_absolute(tmp_path, monkeypatch):
    (tmp_path / "shared").mkdir()
    monkeypatch.chdir(tmp_path / "shared")
    check(*REMOTE_FLINK, "--shared_folders=.", f"--output_dir={tmp_path}/shared/out",
          "--tft_temp_dir=tft")


def test_require_shared_storage_refuses_a_sibling_whose_name_starts_like_the_folder(
        tmp_path):
    (tmp_path / "shared").mkdir()
    assert refusal(*REMOTE_FLINK, f"--shared_folders={tmp_path}/shared",
                   f"--output_dir={tmp_path}/shared2") == (
        f"--output_dir '{tmp_path}/shared2' is on this machine's disk outside "
        f"--shared_folders ({tmp_path}/shared), which FlinkRunner workers "
        f"(--flink_master=10.0.0.9:8081) cannot see: {GIVE_GS}, or a path inside one "
        f"of those folders.")


def test_require_shared_storage_refuses_a_shared_folder_missing_here(tmp_path):
    assert refusal(*REMOTE_FLINK, f"--shared_folders={tmp_path}/nfs",
                   "--output_dir=gs://b/out") == (
        f"--shared_folders '{tmp_path}/nfs' is not a folder on this machine: mount it "
        f"here at the path the workers see it at, or leave it out.")


def test_require_shared_storage_refuses_an_object_store_shared_folder():
    assert refusal(*REMOTE_FLINK, "--shared_folders=gs://b/shared",
                   "--output_dir=gs://b/out").startswith(
        "--shared_folders 'gs://b/shared' is not a local folder:")


@pytest.mark.parametrize("master", [(), ("--flink_master=[auto]",),
                                    ("--flink_master=[local]",)])
def test_require_shared_storage_accepts_local_paths_on_an_embedded_flink_master(master):
    check("--runner=FlinkRunner", *master, "--output_dir=/data/out")


def test_require_shared_storage_refuses_docker_workers_on_an_embedded_flink_master():
    assert "FlinkRunner workers (--environment_type=DOCKER) cannot see" in refusal(
        "--runner=FlinkRunner", "--flink_master=[local]", "--environment_type=DOCKER",
        "--output_dir=/data/out")


@pytest.mark.parametrize("runner", ["flink", "FlinkRunner",
                                    "apache_beam.runners.portability.flink_runner.FlinkRunner"])
def test_require_shared_storage_knows_each_spelling_of_the_runner(runner):
    assert " workers (--flink_master=10.0.0.9:8081) cannot see" in refusal(
        f"--runner={runner}", "--flink_master=10.0.0.9:8081", "--output_dir=/data/out")


@pytest.mark.parametrize("master", [(), ("--spark_master_url=local[2]",),
                                    ("--spark_master_url=local",)])
def test_require_shared_storage_accepts_local_paths_on_a_local_spark_master(master):
    check("--runner=SparkRunner", *master, "--output_dir=/data/out")


def test_require_shared_storage_refuses_a_local_path_on_a_spark_cluster():
    assert refusal("--runner=SparkRunner", "--spark_master_url=spark://host:7077",
                   "--input=/data/in").startswith(
        "--input '/data/in' is on this machine's disk, which SparkRunner workers "
        "(--spark_master_url=spark://host:7077) cannot see: ")


@pytest.mark.parametrize("environment", [
    "--environment_type=LOOPBACK",
    "--environment_type=beam:env:harness_subprocess_python:v1"])
def test_require_shared_storage_accepts_a_portable_harness_on_this_machine(environment):
    check("--runner=PortableRunner", "--job_endpoint=embed", environment,
          "--output_dir=/data/out")


def test_require_shared_storage_refuses_portable_process_workers():
    assert refusal("--runner=PortableRunner", "--job_endpoint=localhost:8099",
                   "--environment_type=PROCESS", "--output_dir=/data/out").startswith(
        "--output_dir '/data/out' is on this machine's disk, which PortableRunner "
        "workers (--environment_type=PROCESS) cannot see: ")


def test_shared_folders_change_no_job_setting(tmp_path):
    # The resume fingerprint and the manifest hold the job's described settings.
    image_fixtures.write_image_folder(str(tmp_path / "in"), copies=1)
    (tmp_path / "shared").mkdir()
    flags = [f"--input={tmp_path}/in", f"--output_dir={tmp_path}/out"]

    def described(*more: str) -> dict:
        options = runner_defaults.pipeline_options([*flags, *more], images.ImagesOptions)
        return images.ImageJob.from_options(
            options.view_as(images.ImagesOptions)).describe_preprocessing()

    assert described(f"--shared_folders={tmp_path}/shared") == described()


@pytest.mark.parametrize("job", [images, timeseries])
def test_main_refuses_a_local_output_on_a_flink_cluster_before_anything_runs(
        job, tmp_path, monkeypatch, root_logging):
    exit_error = run_main(monkeypatch, job.run, [
        "--runner=FlinkRunner", "--flink_master=10.0.0.9:8081",
        f"--output_dir={tmp_path}/out"])
    assert exit_error.code == (
        f"error: --output_dir '{tmp_path}/out' is on this machine's disk, which "
        f"FlinkRunner workers (--flink_master=10.0.0.9:8081) cannot see: {GIVE_GS}, "
        f"or, if every worker host mounts a shared folder (NFS, Filestore) at the same "
        f"path, paths inside it and --shared_folders=<that folder>.")
    assert not (tmp_path / "out").exists()
