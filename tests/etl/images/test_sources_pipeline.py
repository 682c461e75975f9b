"""ReadImageRecords on a few literal manifests and folders (TestPipeline + assert_that)."""

from __future__ import annotations

import json
import os

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from etl.core.shards import splits
from etl.images import sources
from etl.images.sources import ImageRecord


def _check(input_path: str, records: list[ImageRecord],
           rejected: list[tuple[str, str]]) -> None:
    """ReadImageRecords(input_path) yields exactly ``records`` and rejects exactly
    ``rejected`` as (key, reason)."""
    with TestPipeline() as pipeline:
        read, dead = pipeline | sources.ReadImageRecords(input_path)
        assert_that(read, equal_to(records), label="CheckRecords")
        reasons = dead | "KeyAndReason" >> beam.Map(lambda r: (r.key, r.reason))
        assert_that(reasons, equal_to(rejected), label="CheckRejected")


@pytest.fixture()
def manifest_dir(tmp_path) -> str:
    return os.path.abspath(str(tmp_path))


def test_read_image_records_csv_takes_the_split_column(manifest_dir):
    path = os.path.join(manifest_dir, "list.csv")
    with open(path, "w") as f:
        f.write("path,label,split\ncat/a.png,cat,train\ndog/b.png,dog,val\ncat/c.png,cat,\n")
    _check(path, [
        ImageRecord("cat/a.png", f"{manifest_dir}/cat/a.png", "cat", "train"),
        ImageRecord("dog/b.png", f"{manifest_dir}/dog/b.png", "dog", "validation"),
        ImageRecord("cat/c.png", f"{manifest_dir}/cat/c.png", "cat", None),
    ], [])


def test_read_image_records_csv_rejects_a_row_with_missing_columns(manifest_dir):
    path = os.path.join(manifest_dir, "list.csv")
    with open(path, "w") as f:
        f.write("path,label,split\ncat/a.png,cat,train\nmissing-columns-row\n")
    _check(path, [ImageRecord("cat/a.png", f"{manifest_dir}/cat/a.png", "cat", "train")],
           [(f"{path}:3", "malformed_manifest_row")])


def test_read_image_records_jsonl_takes_the_split_field(manifest_dir):
    path = os.path.join(manifest_dir, "list.jsonl")
    with open(path, "w") as f:
        for row in ({"path": "cat/a.png", "label": "cat", "split": "train"},
                    {"path": "dog/b.png", "label": "dog", "split": "validation"},
                    {"path": "dog/c.png", "label": "dog"}):
            f.write(json.dumps(row) + "\n")
    _check(path, [
        ImageRecord("cat/a.png", f"{manifest_dir}/cat/a.png", "cat", "train"),
        ImageRecord("dog/b.png", f"{manifest_dir}/dog/b.png", "dog", "validation"),
        ImageRecord("dog/c.png", f"{manifest_dir}/dog/c.png", "dog", None),
    ], [])


def test_read_image_records_jsonl_rejects_a_line_that_is_not_json(manifest_dir):
    path = os.path.join(manifest_dir, "list.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"path": "cat/a.png", "label": "cat"}) + "\n{not json\n")
    _check(path, [ImageRecord("cat/a.png", f"{manifest_dir}/cat/a.png", "cat", None)],
           [(f"{path}:2", "malformed_manifest_row")])


def test_read_image_records_rejects_duplicate_keys_keeping_one(manifest_dir):
    path = os.path.join(manifest_dir, "list.csv")
    with open(path, "w") as f:
        f.write("path,label\ncat/a.png,cat\ncat/a.png,dog\n")
    # The first by (uri, label, split): "cat" sorts before "dog".
    _check(path, [ImageRecord("cat/a.png", f"{manifest_dir}/cat/a.png", "cat", None)],
           [("cat/a.png", "duplicate_key")])


def test_read_image_records_csv_rows_are_rfc4180_rows_and_spellings_one_key(manifest_dir):
    # A quoted field holding a line break continues its row; a row that is not UTF-8
    # is malformed; an absolute and a "./" spelling of a listed file are its key again.
    path = os.path.join(manifest_dir, "list.csv")
    with open(path, "wb") as f:
        f.write(b'path,label\r\ncat/a.png,cat\r\n"dog/b, c.png","big\ndog"\r\n'
                b"cat/d.png,caf\xe9\r\n"
                + f"{manifest_dir}/cat/a.png,cat\r\n./cat//a.png,cat\r\n".encode()
                + b'"cat/""e"".png",cat\r\n')
    line_break = ("Label 'big\\ndog' contains a line break: tf.Transform's label "
                  "vocabulary is a text file of one name a line, which cannot hold it. "
                  "(The row spans lines 3-4: a quoted field holds a line break.)")
    not_utf8 = ("Manifest line is not UTF-8 text (byte 0xE9 on line 5): "
                "'cat/d.png,caf\\\\xe9'")
    duplicate = f"Key listed 3 times; kept the row for '{manifest_dir}/cat/a.png'."
    with TestPipeline() as pipeline:
        read, dead = pipeline | sources.ReadImageRecords(path)
        assert_that(read, equal_to([
            ImageRecord("cat/a.png", f"{manifest_dir}/cat/a.png", "cat", None),
            ImageRecord('cat/"e".png', f'{manifest_dir}/cat/"e".png', "cat", None)]),
            label="CheckRecords")
        rejected = dead | beam.Map(lambda r: (r.key, r.source, r.reason, r.message))
        assert_that(rejected, equal_to([
            ("dog/b, c.png", f"{path}:3", "invalid_label", line_break),
            (f"{path}:5", f"{path}:5", "malformed_manifest_row", not_utf8),
            ("cat/a.png", f"{manifest_dir}/cat/a.png", "duplicate_key", duplicate),
            ("cat/a.png", f"{manifest_dir}/cat/a.png", "duplicate_key", duplicate)]),
            label="CheckRejected")


def test_read_image_records_folder_labels_by_first_folder(tmp_path):
    root = os.path.abspath(str(tmp_path))
    for key in ("cat/a.png", "dog/deep/b.jpg", "stray.png"):
        os.makedirs(os.path.dirname(os.path.join(root, key)), exist_ok=True)
        open(os.path.join(root, key), "wb").close()
    def listed(key: str) -> tuple[int, float]:
        found = os.stat(os.path.join(root, key))
        return found.st_size, found.st_mtime_ns / 1e9

    _check(root, [ImageRecord("cat/a.png", f"{root}/cat/a.png", "cat", None,
                              listed=listed("cat/a.png")),
                  ImageRecord("dog/deep/b.jpg", f"{root}/dog/deep/b.jpg", "dog", None,
                              listed=listed("dog/deep/b.jpg"))],
           [("stray.png", "missing_label")])


def test_read_image_records_bucket_prefix_with_odd_names(gcs_bucket):
    # On an object store a folder is a prefix; its name may hold glob and URL
    # characters. Sizes and mtimes come from the listing itself.
    root = f"{gcs_bucket.url}/my photos [2024]#?"
    bucket = gcs_bucket.server.client().bucket(gcs_bucket.name)
    for key, data in (("Katze ä/a b.png", b"12"), ("dog/deep/[1].jpg", b"345"),
                      ("stray.png", b"6")):
        bucket.blob(f"my photos [2024]#?/{key}").upload_from_string(data)
    # A sibling prefix that starts with the same characters is not the input.
    bucket.blob("my photos [2024]#?2/cat/x.png").upload_from_string(b"x")
    blobs = {blob.name: blob for blob in bucket.list_blobs()}

    def listed(key: str) -> tuple[int, float]:
        blob = blobs[f"my photos [2024]#?/{key}"]
        return blob.size, blob.updated.timestamp()

    _check(root, [
        ImageRecord("Katze ä/a b.png", f"{root}/Katze ä/a b.png", "Katze ä", None,
                    listed=listed("Katze ä/a b.png")),
        ImageRecord("dog/deep/[1].jpg", f"{root}/dog/deep/[1].jpg", "dog", None,
                    listed=listed("dog/deep/[1].jpg"))],
        [("stray.png", "missing_label")])


def test_assign_split_keeps_an_explicit_split_over_the_hash():
    fractions = splits.SplitFractions()
    # A key the hash sends to train, listed as test.
    key = next(k for k in (f"{i}.png" for i in range(100))
               if splits.assign_split(k, fractions) == "train")
    record = ImageRecord(key, f"/in/{key}", "cat", "test")
    assert sources.assign_split(record, fractions) == record


def test_assign_split_hashes_the_key_when_no_split_is_given():
    fractions = splits.SplitFractions()
    record = ImageRecord("cat/a.png", "/in/cat/a.png", "cat", None)
    assert sources.assign_split(record, fractions).split == splits.assign_split(
        "cat/a.png", fractions)


def test_read_image_records_folder_name_spelled_like_an_escape_is_a_duplicate_key(tmp_path):
    # b"caf\xe9.png" has the key "cat/caf%E9.png" (docs/FORMAT.md), which the UTF-8
    # name "caf%E9.png" spells too: the first in path order is kept.
    root = os.fsencode(os.path.abspath(str(tmp_path)))
    os.makedirs(os.path.join(root, b"cat"))
    for name in (b"caf%E9.png", b"caf\xe9.png"):
        open(os.path.join(root, b"cat", name), "wb").close()
    root_text = os.fsdecode(root)
    first, second = sorted(os.fsdecode(os.path.join(root, b"cat", n))
                           for n in (b"caf%E9.png", b"caf\xe9.png"))
    with TestPipeline() as pipeline:
        read, dead = pipeline | sources.ReadImageRecords(root_text)
        assert_that(read | beam.Map(lambda r: (r.key, r.uri)),
                    equal_to([("cat/caf%E9.png", first)]), label="CheckRecords")
        assert_that(dead | beam.Map(lambda r: (r.key, r.reason, r.message)), equal_to([
            ("cat/caf%E9.png", "duplicate_key",
             f"Key listed twice; kept the file {first!r}.")]), label="CheckRejected")
    assert second != first
