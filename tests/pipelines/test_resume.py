"""Interrupted runs, end to end on the image job: kill -9 at a pause point, rerun.

A rerun keeps the shards the killed run finished and recorded, after checking each
one's size and sha256, transforms only the rest, and publishes exactly the dataset
an uninterrupted run publishes.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import shutil
import socket

import pytest

from etl.core.run import fault_injection, resume, run_lock
from reader.format import contract
from tests import image_fixtures
from tests.job_commands import (
    kill_job,
    kill_when_stopped,
    start_job_to_pause,
    wait_until_stopped,
)
from tests.job_runs import (
    REPORT_DUPLICATES,
    TEST_IMAGE_SIZE,
    files_under,
    output_digests,
    run_images_job,
    run_images_job_printing,
)

FLAGS = ("--num_shards=6", f"--image_size={TEST_IMAGE_SIZE}")
# Where each run is frozen and killed (ETL_PAUSE_AT, etl/core/run/fault_injection.py):
# the 4th shard written but not yet recorded (~30 % of the shards finished); the
# 9th shard's temporary file half written (~70 %); every shard renamed to its final
# name, no manifest yet. A copy of the ~30 % run's folder is rerun with another option
# (the folder's path is not part of what a run resumes).
AT_30 = f"{fault_injection.SHARD_WRITTEN}:4"
AT_70 = f"{fault_injection.SHARD_WRITING}:9"
BEFORE_MANIFEST = fault_injection.MANIFEST_WRITING
FOR_OTHER_OPTION = "copy of the ~30 % run"
OTHER_OPTION = "--jpeg_quality=80"
# What a second run started on the ~30 % run's folder while it was frozen met:
# [error message, the frozen run's pid, whether the folder was left unchanged].
SECOND_RUN: list = []
SUMMARY_LINE = re.compile(r"resumed: (\d+) shard\(s\) kept from the interrupted run, "
                          r"(\d+) transformed \((\d+) inputs\)")


def _records(out: str) -> list[dict]:
    paths = glob.glob(os.path.join(out, resume.PROGRESS_DIRNAME,
                                   resume.SHARD_RECORDS_DIRNAME, "*.json"))
    return [json.load(open(path)) for path in sorted(paths)]


@dataclasses.dataclass(frozen=True)
class Rerun:
    """A killed run and its rerun: what the killed run left, what the rerun said."""

    out: str
    files_when_stopped: list[str]
    records: list[dict]  # the shard records on disk after the kill
    stdout: str
    stderr: str

    def kept_transformed_inputs(self) -> tuple[int, int, int]:
        found = SUMMARY_LINE.search(self.stdout)
        return tuple(map(int, found.groups())) if found else (0, 0, 0)


@pytest.fixture(scope="module")
def kill_input(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("kill_input"))
    image_fixtures.write_image_folder(root, copies=1)
    return root


def _flip_a_byte(out: str, record: dict) -> None:
    path = os.path.join(out, record["path"])
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.fixture(scope="module")
def reruns(kill_input, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rerun]:
    """One command per pause point, all started at once, each killed where it froze
    and then run again in-process (the 70 % one after a byte of a finished shard is
    flipped); a copy of the ~30 % one is rerun with another option."""
    root = tmp_path_factory.mktemp("killed")
    started = {}
    second_run = SECOND_RUN
    for point in (AT_30, AT_70, BEFORE_MANIFEST):
        out = str(root / point.replace(":", "_"))
        started[point] = out, start_job_to_pause(
            "images", f"--input={kill_input}", f"--output_dir={out}", *FLAGS, point=point)
    killed = {}
    try:
        for point, (out, process) in started.items():
            if point == AT_30:
                # A second run while the first holds the folder: refused, the
                # first's files untouched.
                wait_until_stopped(process)
                before = files_under(out)
                with pytest.raises(run_lock.LockHeldError) as refused:
                    run_images_job(kill_input, out, *FLAGS)
                second_run[:] = [str(refused.value), process.pid,
                                 before == files_under(out)]
            kill_when_stopped(process)
            killed[point] = out, files_under(out), _records(out)
    finally:
        for _, process in started.values():
            if process.poll() is None:
                kill_job(process)
    copy = str(root / "other_option")
    shutil.copytree(killed[AT_30][0], copy)
    killed[FOR_OTHER_OPTION] = copy, *killed[AT_30][1:]
    _flip_a_byte(killed[AT_70][0], killed[AT_70][2][0])
    runs = {}
    for point, (out, files, records) in killed.items():
        # In-process: the rerun is the same job, without another interpreter start.
        _, stdout, stderr = run_images_job_printing(
            kill_input, out, *FLAGS[:1], REPORT_DUPLICATES,
            *([OTHER_OPTION] if point == FOR_OTHER_OPTION else []))
        runs[point] = Rerun(out, files, records, stdout, stderr)
    return runs


@pytest.fixture(scope="module")
def uninterrupted(kill_input, tmp_path_factory: pytest.TempPathFactory
                  ) -> tuple[str, dict]:
    out = str(tmp_path_factory.mktemp("uninterrupted") / "out")
    manifest = run_images_job(kill_input, out, *FLAGS[:1], REPORT_DUPLICATES)
    assert manifest["rejected"]["count"] == 0  # Every shard step writes a file.
    return out, manifest


def _num_shards(manifest: dict) -> int:
    return sum(len(manifest["splits"][split]["shards"]) for split in contract.SPLITS)


def test_the_kills_leave_unfinished_work_and_no_manifest(reruns, uninterrupted):
    _, manifest = uninterrupted
    total = _num_shards(manifest)
    at_30, at_70 = reruns[AT_30], reruns[AT_70]
    assert len(at_30.records) == 3 and 0.2 <= 3 / total <= 0.4, total
    assert [p for p in at_30.files_when_stopped if "-pending-" in p] and len(
        [p for p in at_30.files_when_stopped if "-pending-" in p]) == 4  # one unrecorded
    assert len(at_70.records) == 8 and 0.6 <= 8 / total <= 0.8, total
    assert [p for p in at_70.files_when_stopped if p.endswith(".incomplete")]
    assert len(reruns[BEFORE_MANIFEST].records) == total
    assert [p for p in reruns[BEFORE_MANIFEST].files_when_stopped if "-of-" in p]
    for run in reruns.values():
        assert contract.MANIFEST_FILENAME not in run.files_when_stopped


@pytest.mark.parametrize("point", [AT_30, AT_70, BEFORE_MANIFEST])
def test_rerun_publishes_the_uninterrupted_dataset_byte_for_byte(reruns, uninterrupted,
                                                                 point):
    out, _ = uninterrupted
    run = reruns[point]
    assert output_digests(run.out) == output_digests(out)
    # Nothing else is left: no temporary file, no pending shard, no progress.
    assert files_under(run.out) == files_under(out)


@pytest.mark.parametrize("point", [AT_30, AT_70, BEFORE_MANIFEST])
def test_rerun_transforms_only_the_shards_not_kept(reruns, uninterrupted, point):
    _, manifest = uninterrupted
    run = reruns[point]
    # The 70 % run had a byte of its first recorded shard flipped: that one is redone.
    trusted = run.records[1:] if point == AT_70 else run.records
    kept, transformed, inputs = run.kept_transformed_inputs()
    assert kept == len(trusted)
    assert transformed == _num_shards(manifest) - kept
    assert inputs == manifest["inputs"] - sum(r["num_records"] for r in trusted)
    assert f"{len(run.records)} finished shard(s) recorded" in run.stderr
    # The last progress line counts every shard kept.
    progress = [line for line in run.stderr.splitlines() if line.startswith("[images]")]
    assert f", {kept} kept from the interrupted run);" in progress[-1], progress


def test_a_corrupted_finished_shard_is_redone_not_trusted(reruns):
    run = reruns[AT_70]
    flipped = run.records[0]
    assert (f"{flipped['split']} shard {flipped['shard']} is written again: "
            f"{flipped['path']} does not have its recorded sha256.") in run.stderr


def test_a_changed_option_starts_clean_in_one_line(reruns, uninterrupted):
    run = reruns[FOR_OTHER_OPTION]
    lines = [line for line in run.stderr.splitlines() if line.startswith("[resume]")]
    expected = (f"[resume] starting clean in {run.out}: job.preprocessing.jpeg_quality "
                f"was 95, now 80.")
    assert lines == [expected], run.stderr
    assert run.kept_transformed_inputs() == (0, 0, 0)
    assert output_digests(run.out) != output_digests(uninterrupted[0])


def test_a_second_run_on_a_held_folder_refuses_naming_the_holder(reruns):
    message, pid, unchanged = SECOND_RUN
    assert message.startswith(f"--output_dir {reruns[AT_30].out!r} is in use by "
                              f"another run (host {socket.gethostname()}, pid {pid}, "
                              f"started "), message
    assert unchanged


@pytest.mark.parametrize("point", [AT_30, AT_70, BEFORE_MANIFEST])
def test_a_killed_runs_lock_is_taken_over_in_one_line(reruns, point):
    run = reruns[point]
    lines = [line for line in run.stderr.splitlines() if line.startswith("[lock]")]
    assert len(lines) == 1 and lines[0].startswith(
        f"[lock] taking over {run.out} from an earlier run (host "
        f"{socket.gethostname()}, pid "), run.stderr
    assert lines[0].endswith("its process no longer exists.")
    assert not os.path.exists(run_lock.lock_path(run.out))  # Released at the end.
