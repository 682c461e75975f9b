"""reader/format/contract.py's manifest loader, and the readers that pass it their file
access (tf.io.gfile, fsspec)."""

from __future__ import annotations

import pytest

from reader import records
from reader.format import contract
from reader.tfdata import dataset_info

MANIFEST = {"format_version": 1, "name": "images", "label": "été"}


def _files(files: dict[str, bytes]):
    return files.get


def test_load_manifest_parses_the_file_it_is_handed():
    read = _files({"out/manifest.json": contract.dumps_manifest(MANIFEST).encode()})
    assert contract.load_manifest("out", read) == MANIFEST


def test_load_manifest_missing_says_job_did_not_finish():
    with pytest.raises(FileNotFoundError) as raised:
        contract.load_manifest("out", _files({}))
    assert str(raised.value) == contract.no_manifest_message("out")


def test_load_manifest_rejects_text_that_is_not_json():
    read = _files({"out/manifest.json": b'{"name": "ima'})
    with pytest.raises(contract.DatasetError, match=r"^'out/manifest.json' is not valid JSON"):
        contract.load_manifest("out", read)


def test_load_manifest_rejects_json_that_is_not_an_object():
    read = _files({"out/manifest.json": b"[1, 2]"})
    with pytest.raises(contract.DatasetError, match="holds a JSON list, not a manifest"):
        contract.load_manifest("out", read)


READERS = {"gfile": dataset_info.load_manifest, "fsspec": records.load_manifest}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_reader_load_manifest_reads_written_manifest(tmp_path, reader):
    (tmp_path / "manifest.json").write_text(contract.dumps_manifest(MANIFEST),
                                            encoding="utf-8")
    assert READERS[reader](str(tmp_path) + "/") == MANIFEST


@pytest.mark.parametrize("reader", sorted(READERS))
def test_reader_load_manifest_missing_says_job_did_not_finish(tmp_path, reader):
    (tmp_path / "train").mkdir()
    with pytest.raises(FileNotFoundError, match="did the ETL job finish"):
        READERS[reader](str(tmp_path))
