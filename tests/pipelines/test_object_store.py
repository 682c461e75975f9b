"""Both jobs on an object store: inputs and output on a local GCS server.

The server is fake-gcs-server, started by the tests (``tests/gcs_server.py``); the
job processes see it as ``STORAGE_EMULATOR_HOST`` with no credentials at all. Each
job reads ``gs://`` inputs and writes a ``gs://`` output directory, with a local
``--tft_temp_dir`` (tf.Transform writes through TensorFlow's own GCS client, which
reaches only Google: docs/RUNNING_AT_SCALE.md). What the bucket holds is checked
as the server lists it, downloaded and compared with the same job's output on a
local disk.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import re
import sys

import numpy as np
import pytest

from etl.core import dead_letters
from etl.core.io import storage
from etl.core.run import fault_injection
from etl.core.stats import step as stats_step
from reader.format import contract
from reader.report import build as report
from reader.report import html as report_html
from tests import image_fixtures
from tests.gcs_server import download_tree, objects, upload_tree
from tests.job_commands import kill_when_stopped, start_job_to_pause
from tests.job_runs import (
    TEST_IMAGE_SIZE,
    all_records,
    printing,
    rejected_records,
    run_images_job,
    shard_digests,
)
from tests.series_fixtures import GEOMETRY, run_timeseries_job, series_rows

# The module (the package's attribute of that name is a read-only view of its table).
FSSPEC_REGISTRY = importlib.import_module("fsspec.registry")
BUCKET = "datasets"
# A folder name with a space, "#", "[", "?" and non-ASCII: a prefix like any other.
PHOTOS = "camera roll [2024] #1?é"
# Uncompressed shards, each with its record index: one more object per shard to
# write, rename, verify on resume and keep on append. (GZIP shards on gs:// are the
# clean-install round's, scripts/checks/clean_install.sh.)
IMAGE_FLAGS = ("--num_shards=1", "--max_error_fraction=0.5", "--compression=none",
               "--cross_split_duplicates=report")
SHARD_FILES = (contract.shard_suffix(contract.NO_COMPRESSION),
               contract.shard_suffix(contract.NO_COMPRESSION) + contract.INDEX_SUFFIX)
SUMMARY_LINE = re.compile(r"resumed: (\d+) shard\(s\) kept from the interrupted run")


@pytest.fixture(scope="module")
def gcs(gcs_server, tmp_path_factory):
    """The local GCS server with the ``datasets`` bucket, this process's environment
    hermetic for the module (in-process jobs and job commands inherit it)."""
    config = str(tmp_path_factory.mktemp("gcloud_config"))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in gcs_server.hermetic_environment(config).items():
            patch.setenv(name, value)
        patch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
        gcs_server.create_bucket(BUCKET)
        yield gcs_server


def _download(gcs, prefix: str, dest) -> str:
    download_tree(gcs, BUCKET, prefix, str(dest))
    return str(dest)


# --- the image job ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def photos(gcs, tmp_path_factory) -> tuple[str, dict[str, str]]:
    """Every fixture format and the known-bad files, on disk and under the odd
    prefix: (local root, {bad key: reason})."""
    root = str(tmp_path_factory.mktemp("photos"))
    image_fixtures.write_image_folder(root, copies=1)
    bad = image_fixtures.write_bad_files(root)
    upload_tree(gcs, root, BUCKET, PHOTOS)
    return root, bad


@pytest.fixture(scope="module")
def image_runs(gcs, photos, tmp_path_factory) -> dict[str, tuple[str, dict]]:
    """The image job on the local folder (one worker), and on the bucket prefix into
    gs:// on two worker threads (parallel bundles, which share the process's
    transform and decoders, must not change a byte either): name → (local copy of
    the output, manifest)."""
    root, _ = photos
    base = tmp_path_factory.mktemp("image_runs")
    on_disk = str(base / "on_disk")
    local = run_images_job(root, on_disk, *IMAGE_FLAGS)
    remote = run_images_job(f"gs://{BUCKET}/{PHOTOS}", f"gs://{BUCKET}/images", *IMAGE_FLAGS,
                            f"--tft_temp_dir={base / 'tft_tmp'}", "--direct_num_workers=2",
                            "--direct_running_mode=multi_threading")
    return {"disk": (on_disk, local),
            "gcs": (_download(gcs, "images", base / "from_gcs"), remote)}


def test_image_job_on_gcs_writes_every_output_object(gcs, image_runs):
    _, manifest = image_runs["gcs"]
    names = set(objects(gcs, BUCKET, "images/"))
    shards = {f"images/{shard[file]['path'] if file else shard['path']}"
              for split in contract.SPLITS
              for shard in manifest["splits"][split]["shards"] for file in ("", "index")}
    assert shards and shards <= names
    assert {"images/manifest.json", "images/errors/rejected.jsonl",
            "images/transform_fn/saved_model.pb", "images/keys/keys-v00001.txt",
            "images/transformed_metadata/schema.pbtxt",
            "images/metadata/schema.pbtxt", "images/keys/hashes-v00001.jsonl",
            "images/duplicates/summary.json", "images/duplicates/pairs.jsonl"} <= names
    # Nothing of the run's progress, temporary or pending files is left.
    assert not [n for n in names if "/progress/" in n or "-pending-" in n
                or n.endswith(".incomplete")], sorted(names)


def test_image_job_on_gcs_writes_what_it_writes_on_disk(image_runs):
    (disk, local), (remote_copy, remote) = image_runs["disk"], image_runs["gcs"]
    assert shard_digests(remote_copy) == shard_digests(disk)
    assert remote == local
    with open(os.path.join(remote_copy, contract.MANIFEST_FILENAME), "rb") as f:
        remote_manifest_bytes = f.read()
    with open(os.path.join(disk, contract.MANIFEST_FILENAME), "rb") as f:
        assert f.read() == remote_manifest_bytes
    # The duplicate report and the kept signatures too (they name keys, not files).
    for relpath in (contract.DUPLICATE_PAIRS_RELPATH, contract.DUPLICATES_SUMMARY_RELPATH,
                    "keys/hashes-v00001.jsonl"):
        with open(os.path.join(remote_copy, relpath), "rb") as f, \
                open(os.path.join(disk, relpath), "rb") as g:
            assert f.read() == g.read(), relpath
    assert "duplicates" in remote
    # The dead letters name their files where they were (the folder, the prefix).
    assert [(r["key"], r["reason"], r["message"]) for r in rejected_records(remote_copy)] == [
        (r["key"], r["reason"], r["message"]) for r in rejected_records(disk)]


def test_the_job_writes_its_gcs_report_without_gcsfs(gcs, image_runs, monkeypatch):
    # A project installed from install_requires has no gcsfs (it is in the test
    # extra): the job's report must read the dataset and write the page through the
    # job's own storage layer, not through fsspec, which would need gcsfs for gs://.
    data_dir = f"gs://{BUCKET}/images"
    page = storage.join(data_dir, contract.REPORT_RELPATH)
    storage.delete(page)
    with monkeypatch.context() as blocked:
        # As without gcsfs: `import gcsfs` raises ImportError, and fsspec has not
        # registered its filesystem (an earlier import in this process would have).
        blocked.setitem(sys.modules, "gcsfs", None)
        for protocol in ("gs", "gcs"):
            blocked.delitem(FSSPEC_REGISTRY._registry, protocol, raising=False)
        with pytest.raises(ImportError):
            report.gather(data_dir)  # fsspec's way: what failed in the job before.
        assert stats_step.write_report(storage.join(data_dir, "manifest.json"),
                                       data_dir) == page
    # The same page as reader.report renders reading through fsspec and gcsfs.
    assert storage.read_bytes(page) == report_html.render(
        report.gather(data_dir)).encode("utf-8")


def test_sharded_records_read_the_gcs_dataset_as_the_disk_one(image_runs):
    """``reader.records`` at a gs:// URI (fsspec's gcsfs, which the local server
    serves through STORAGE_EMULATOR_HOST): every record of every split equals the
    same index read from the disk run's output."""
    from reader.records import ShardedRecords

    for split in contract.SPLITS:
        remote = ShardedRecords(f"gs://{BUCKET}/images", split)
        local = ShardedRecords(image_runs["disk"][0], split)
        assert len(remote) == len(local) == image_runs["gcs"][1]["splits"][split][
            "num_records"]
        for i in range(len(local)):
            a, b = remote[i], local[i]
            assert a.keys() == b.keys() and a["key"] == b["key"]
            np.testing.assert_array_equal(a["image"], b["image"])


def test_image_job_on_gcs_rejects_the_bad_files_and_counts_reconcile(photos, image_runs):
    _, bad = photos
    copy, manifest = image_runs["gcs"]
    rejected = {r["key"]: r["reason"] for r in rejected_records(copy)}
    assert rejected == bad
    assert all(r["source"].startswith(f"gs://{BUCKET}/{PHOTOS}/")
               for r in rejected_records(copy))
    written = sum(manifest["splits"][split]["num_records"] for split in contract.SPLITS)
    assert manifest["inputs"] == written + manifest["rejected"]["count"]


def test_image_job_reads_a_csv_manifest_of_gcs_paths(gcs, photos, image_runs, tmp_path):
    # Absolute gs:// paths, one to an object that is not there, in a manifest that is
    # itself an object; no --tft_temp_dir: a local temp folder, removed at the end.
    root, bad = photos
    _, reference = image_runs["disk"]
    keys = sorted(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                  for folder, _, names in os.walk(root) for name in names
                  if "/" in os.path.relpath(os.path.join(folder, name), root))
    rows = [(f"gs://{BUCKET}/{PHOTOS}/{key}", key.split("/")[0]) for key in keys]
    rows.append((f"gs://{BUCKET}/{PHOTOS}/cat/absent.png", "cat"))
    with open(tmp_path / "photos.csv", "w", newline="") as f:
        csv.writer(f).writerows([("path", "label"), *rows])
    gcs.client().bucket(BUCKET).blob("lists/photos.csv").upload_from_filename(
        str(tmp_path / "photos.csv"))
    manifest, stdout, _ = printing(
        run_images_job, f"gs://{BUCKET}/lists/photos.csv", f"gs://{BUCKET}/from_csv",
        *IMAGE_FLAGS, "--allow_paths_outside_root")
    copy = _download(gcs, "from_csv", tmp_path / "copy")
    stored = all_records(copy, manifest)
    expected_bad = {f"gs://{BUCKET}/{PHOTOS}/{key}": reason for key, reason in bad.items()
                    if "/" in key}
    expected_bad[f"gs://{BUCKET}/{PHOTOS}/cat/absent.png"] = dead_letters.UNREADABLE_FILE
    assert {r["key"]: r["reason"] for r in rejected_records(copy)} == expected_bad
    assert sorted(stored) == sorted(uri for uri, _ in rows if uri not in expected_bad)
    assert manifest["inputs"] == len(rows)
    assert manifest["label_vocab"] == reference["label_vocab"]
    assert f"Wrote dataset 'images' to gs://{BUCKET}/from_csv" in stdout


# --- killed and resumed, appended ---------------------------------------------------------

@pytest.fixture(scope="module")
def killed_and_rerun(gcs, photos, image_runs, tmp_path_factory):
    """The job into a gs:// output killed (-9) once two of its three shards are written,
    then the same command rerun: (objects when killed, the rerun's summary)."""
    tft_tmp = tmp_path_factory.mktemp("killed_tft_tmp")
    args = (f"--input=gs://{BUCKET}/{PHOTOS}", f"--output_dir=gs://{BUCKET}/killed",
            f"--image_size={TEST_IMAGE_SIZE}", *IMAGE_FLAGS, f"--tft_temp_dir={tft_tmp}")
    kill_when_stopped(start_job_to_pause(
        "images", *args, point=f"{fault_injection.SHARD_RECORDED}:2"))
    when_killed = objects(gcs, BUCKET, "killed/")
    from pipelines import images

    _, stdout, _ = printing(images.run, list(args))
    return when_killed, stdout


def test_a_killed_gcs_run_leaves_no_manifest_object(killed_and_rerun):
    when_killed, _ = killed_and_rerun
    assert "killed/manifest.json" not in when_killed
    pending = sorted(name for name in when_killed if "-pending-" in name)
    assert len(pending) == 4 and all(  # two shards, each with its record index
        f"{name}{contract.INDEX_SUFFIX}" in pending for name in pending
        if name.endswith(SHARD_FILES[0]))


def test_the_rerun_keeps_the_finished_shards_and_matches_an_uninterrupted_run(
        gcs, killed_and_rerun, image_runs, tmp_path):
    when_killed, stdout = killed_and_rerun
    assert SUMMARY_LINE.search(stdout).group(1) == "2", stdout
    copy = _download(gcs, "killed", tmp_path / "killed")
    assert shard_digests(copy) == shard_digests(image_runs["gcs"][0])
    manifest = json.loads((tmp_path / "killed" / contract.MANIFEST_FILENAME).read_text())
    named = {f"killed/{shard['path']}" for split in contract.SPLITS
             for shard in manifest["splits"][split]["shards"]}
    # The killed run's objects are never what the manifest names.
    assert named and not named & set(when_killed)
    assert named <= set(objects(gcs, BUCKET, "killed/"))


def test_append_on_gcs_adds_shards_and_leaves_every_old_object_untouched(
        gcs, photos, image_runs, tmp_path):
    # Version 1: a server-side copy of the published gs:// dataset. The input: its
    # photos and two more, under another prefix (keys are relative to it).
    client_bucket = gcs.client().bucket(BUCKET)
    for name, blob in objects(gcs, BUCKET, "images/").items():
        client_bucket.copy_blob(blob, client_bucket, name.replace("images/", "grown/", 1))
    photos_objects = objects(gcs, BUCKET, f"{PHOTOS}/")
    for name, blob in photos_objects.items():
        client_bucket.copy_blob(blob, client_bucket, name.replace(PHOTOS, "more", 1))
    new_keys = ["cat/new one.png", "dog/new [2].png"]
    for key, colour in zip(new_keys, ((250, 10, 10), (10, 10, 250)), strict=True):
        client_bucket.blob(f"more/{key}").upload_from_string(
            image_fixtures._encode("png", 20, 20, colour))
    before = {name: (blob.md5_hash, blob.crc32c, blob.generation)
              for name, blob in objects(gcs, BUCKET, "grown/").items()}
    manifest = run_images_job(f"gs://{BUCKET}/more", f"gs://{BUCKET}/grown", "--append",
                              *IMAGE_FLAGS, f"--tft_temp_dir={tmp_path / 'tft_tmp'}")
    after = objects(gcs, BUCKET, "grown/")
    old_files = sorted(name for name in before if name.endswith(SHARD_FILES))
    for name in old_files:
        assert (after[name].md5_hash, after[name].crc32c, after[name].generation) == (
            before[name]), name
    new_files = sorted(name for name in after if name.endswith(SHARD_FILES)
                       and name not in before and "/statistics/" not in name)
    assert new_files and all("-v2-" in name for name in new_files)
    assert f"grown/{contract.statistics_relpath('train', 2)}" in after
    old_shards = [name for name in old_files if name.endswith(SHARD_FILES[0])
                  and "/statistics/" not in name]
    new_shards = [name for name in new_files if name.endswith(SHARD_FILES[0])]
    assert len(new_files) == 2 * len(new_shards)  # each with its index
    assert (manifest["dataset_version"], manifest["history"][-1]["inputs"]) == (2, 2)
    listed = sorted(f"grown/{shard['path']}" for split in contract.SPLITS
                    for shard in manifest["splits"][split]["shards"])
    assert listed == sorted(old_shards + new_shards)
    copy = _download(gcs, "grown", tmp_path / "grown")
    stored = all_records(copy, manifest)
    assert sorted(stored) == sorted([*all_records(*image_runs["disk"]), *new_keys])
    # The new images' signatures beside the new key index; the report, recomputed from
    # both versions' signatures, counts every image.
    with open(os.path.join(copy, "keys", "hashes-v00002.jsonl")) as f:
        assert sorted(json.loads(line)["key"] for line in f) == sorted(new_keys)
    assert manifest["duplicates"]["images"] == len(stored)


# --- the time-series job ----------------------------------------------------------------

@pytest.fixture(scope="module")
def series_files(gcs, tmp_path_factory) -> tuple[str, str]:
    """The same rows as one CSV and as two Parquet files (every series spread over
    both, rows out of order), on disk and in the bucket: (local CSV path, local
    folder)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("series")
    rng = np.random.default_rng(7)
    rows = [row for sid, n in (("a", 90), ("b", 61), ("c", 40))
            for row in series_rows(sid, rng.normal(size=n).round(4).tolist())]
    rows.append({"series_id": "a", "timestamp": 5000, "value": "not a number"})
    with open(folder / "rows.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["series_id", "timestamp", "value"])
        writer.writeheader()
        writer.writerows(rows)
    numeric = [row for row in rows if row["value"] != "not a number"]
    for part in range(2):
        pq.write_table(pa.Table.from_pylist(numeric[::-1][part::2]),
                       str(folder / f"part-{part}.parquet"))
    upload_tree(gcs, str(folder), BUCKET, "series")
    return str(folder / "rows.csv"), str(folder)


@pytest.fixture(scope="module")
def series_runs(gcs, series_files, tmp_path_factory) -> dict[str, tuple[str, dict]]:
    csv_path, _ = series_files
    base = tmp_path_factory.mktemp("series_runs")
    runs = {"disk": (str(base / "on_disk"),
                     run_timeseries_job(csv_path, str(base / "on_disk"), *GEOMETRY))}
    for name, pattern in (("csv", "rows.csv"), ("parquet", "part-*.parquet")):
        manifest = run_timeseries_job(f"gs://{BUCKET}/series/{pattern}",
                                      f"gs://{BUCKET}/windows_{name}", *GEOMETRY,
                                      f"--tft_temp_dir={base / name}")
        runs[name] = _download(gcs, f"windows_{name}", base / f"from_{name}"), manifest
    return runs


# The Parquet glob's run also shows that Parquet gives the shards of text, and that a
# glob gives those of one file however its rows are spread over the files.
@pytest.mark.parametrize("source", ["csv", "parquet"])
def test_timeseries_job_on_gcs_writes_the_shards_it_writes_on_disk(series_runs, source):
    disk, local = series_runs["disk"]
    copy, remote = series_runs[source]
    assert shard_digests(copy) == shard_digests(disk)
    assert os.path.exists(os.path.join(copy, contract.MANIFEST_FILENAME))
    assert os.path.exists(os.path.join(copy, contract.ERRORS_DIRNAME,
                                       contract.REJECTED_FILENAME))
    assert remote["splits"] == local["splits"]
    assert remote["normalisation"] == local["normalisation"]
    assert os.path.exists(os.path.join(copy, contract.TRANSFORM_FN_DIRNAME,
                                       "saved_model.pb"))


def test_timeseries_job_on_gcs_counts_reconcile_with_its_dead_letters(series_runs):
    copy, manifest = series_runs["csv"]
    rejected = rejected_records(copy)
    assert [(r["reason"], r["source"]) for r in rejected] == [
        ("unparsable_value", f"gs://{BUCKET}/series/rows.csv:193")]
    assert manifest["rejected"]["count"] == 1
    assert (manifest["inputs"], manifest["timeseries"]["parse_rejected"]) == (192, 1)


def test_the_jobs_here_ran_with_no_credentials_to_find(gcs):
    # What the jobs above saw: google-auth finds no credentials at all (no file, an
    # empty gcloud configuration, no metadata server asked for).
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    assert os.environ["NO_GCE_CHECK"] == "true"
    assert os.listdir(os.environ["CLOUDSDK_CONFIG"]) == []
    with pytest.raises(DefaultCredentialsError):
        google.auth.default()
