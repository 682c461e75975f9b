"""Unit tests of etl/images/sources.py and paths.py: paths and manifest rows → records."""

from __future__ import annotations

import os

import pytest

from etl.core.dead_letters import Rejection
from etl.core.io import local_tree as paths
from etl.images import sources
from etl.images.sources import ImageRecord

ROOT = "/data/images"
MANIFEST_DIR = "/data/manifests"
SOURCE = "/data/manifests/manifest.csv:7"
HEADER = ("path", "label", "split")


def _mkdirs(root, *names: str) -> str:
    for name in names:
        (root / name).mkdir(parents=True)
    return str(root)


# --- record_from_folder_path ----------------------------------------------------------

def test_record_from_folder_path_class_layout():
    record = sources.record_from_folder_path(f"{ROOT}/cat/1.png", ROOT, False)
    assert record == ImageRecord(key="cat/1.png", uri=f"{ROOT}/cat/1.png", label="cat",
                                 split=None)


def test_record_from_folder_path_label_is_first_folder_of_nested_path():
    record = sources.record_from_folder_path(f"{ROOT}/cat/indoor/2.jpg", ROOT, False)
    assert record == ImageRecord(key="cat/indoor/2.jpg", uri=f"{ROOT}/cat/indoor/2.jpg",
                                 label="cat", split=None)


def test_record_from_folder_path_split_layout_maps_val_to_validation():
    record = sources.record_from_folder_path(f"{ROOT}/val/dog/3.png", ROOT, True)
    assert record == ImageRecord(key="val/dog/3.png", uri=f"{ROOT}/val/dog/3.png",
                                 label="dog", split="validation")


def test_record_from_folder_path_split_layout_train():
    record = sources.record_from_folder_path(f"{ROOT}/Train/dog/3.png", ROOT, True)
    assert isinstance(record, ImageRecord)
    assert (record.label, record.split) == ("dog", "train")


def test_record_from_folder_path_escapes_bytes_that_are_not_utf8():
    path = os.fsdecode(b"/data/images/caf\xe9/b\xff%E9.png")
    record = sources.record_from_folder_path(path, ROOT, False)
    # The documented rule: 0xE9 -> %E9, 0xFF -> %FF, the "%E9" of the name kept.
    assert record == ImageRecord(key="caf%E9/b%FF%E9.png", uri=path, label="caf%E9",
                                 split=None)
    assert record.source == f"{ROOT}/caf%E9/b%FF%E9.png"


@pytest.mark.parametrize("folder", ["two\nlines", "cr\r"])
def test_record_from_folder_path_class_folder_with_a_line_break_is_invalid_label(folder):
    result = sources.record_from_folder_path(f"{ROOT}/{folder}/1.png", ROOT, False)
    assert isinstance(result, Rejection)
    assert (result.key, result.reason) == (f"{folder}/1.png", "invalid_label")
    assert result.message == (
        f"Class folder {folder!r} contains a line break: tf.Transform's label vocabulary "
        f"is a text file of one name a line, which cannot hold it; rename the folder.")


def test_record_from_folder_path_file_under_root_is_missing_label():
    result = sources.record_from_folder_path(f"{ROOT}/stray.png", ROOT, False)
    assert isinstance(result, Rejection)
    assert (result.key, result.source, result.reason) == (
        "stray.png", f"{ROOT}/stray.png", "missing_label")


def test_record_from_folder_path_file_under_split_folder_is_missing_label():
    result = sources.record_from_folder_path(f"{ROOT}/train/stray.png", ROOT, True)
    assert isinstance(result, Rejection)
    assert (result.key, result.reason) == ("train/stray.png", "missing_label")


def test_record_from_folder_path_file_under_root_of_split_layout_is_missing_label():
    # detect_split_layout only looks at folders, so a stray file next to train/ and
    # test/ reaches this function: it must be a rejection, not an exception that fails
    # the whole job (canonical_split("stray.png") raises ValueError).
    result = sources.record_from_folder_path(f"{ROOT}/stray.png", ROOT, True)
    assert isinstance(result, Rejection)
    assert (result.key, result.reason) == ("stray.png", "missing_label")


@pytest.mark.parametrize("relative", [
    ".DS_Store", "cat/.DS_Store", "cat/._1.png", ".cache/cat/1.png", "cat/.thumbs/1.png",
])
def test_record_from_folder_path_hidden_entries_are_skipped(relative):
    assert sources.record_from_folder_path(f"{ROOT}/{relative}", ROOT, False) is None


def test_record_from_folder_path_hidden_split_entries_are_skipped():
    assert sources.record_from_folder_path(
        f"{ROOT}/train/.cat/1.png", ROOT, True) is None


# --- symbolic links: the real path must stay inside the root --------------------------

@pytest.fixture()
def linked_tree(tmp_path):
    """``in/`` (the root: cat/1.png, dog/2.png) next to ``secret/passwd``."""
    for name in ("in/cat", "in/dog", "secret"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "in/cat/1.png").write_bytes(b"png")
    (tmp_path / "in/dog/2.png").write_bytes(b"png")
    (tmp_path / "secret/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    return tmp_path


def _link(tree, name: str, target: str) -> None:
    (tree / name).symlink_to(tree / target)


def _assert_outside(result, key: str, source: str) -> None:
    assert isinstance(result, Rejection)
    assert (result.key, result.source, result.reason) == (key, source, "path_outside_root")
    assert "--allow_paths_outside_root" in result.message
    assert "root:x" not in result.message


def test_record_from_folder_path_symlink_to_file_outside_root_is_path_outside_root(
        linked_tree):
    _link(linked_tree, "in/cat/evil.jpg", "secret/passwd")
    root = str(linked_tree / "in")
    result = sources.record_from_folder_path(f"{root}/cat/evil.jpg", root, False)
    _assert_outside(result, "cat/evil.jpg", f"{root}/cat/evil.jpg")


def test_record_from_folder_path_symlink_outside_root_is_read_when_allowed(linked_tree):
    _link(linked_tree, "in/cat/evil.jpg", "secret/passwd")
    root = str(linked_tree / "in")
    record = sources.record_from_folder_path(f"{root}/cat/evil.jpg", root, False,
                                                   allow_outside_root=True)
    assert record == ImageRecord(key="cat/evil.jpg", uri=f"{root}/cat/evil.jpg",
                                 label="cat", split=None)


def test_record_from_folder_path_file_under_symlinked_folder_outside_root_is_rejected(
        linked_tree):
    _link(linked_tree, "in/cat/linked", "secret")
    root = str(linked_tree / "in")
    for relative in ("cat/linked/passwd", "cat/linked"):
        result = sources.record_from_folder_path(f"{root}/{relative}", root, False)
        _assert_outside(result, relative, f"{root}/{relative}")


def test_record_from_folder_path_symlink_chain_ending_inside_root_is_accepted(
        linked_tree):
    # in/cat/alias.png -> hop.png (outside the root) -> in/dog/2.png
    _link(linked_tree, "hop.png", "in/dog/2.png")
    _link(linked_tree, "in/cat/alias.png", "hop.png")
    root = str(linked_tree / "in")
    record = sources.record_from_folder_path(f"{root}/cat/alias.png", root, False)
    assert record == ImageRecord(key="cat/alias.png", uri=f"{root}/cat/alias.png",
                                 label="cat", split=None)


def test_record_from_folder_path_symlink_chain_ending_outside_root_is_rejected(
        linked_tree):
    # in/cat/a.png -> in/dog/b.png (inside the root) -> secret/passwd
    _link(linked_tree, "in/dog/b.png", "secret/passwd")
    _link(linked_tree, "in/cat/a.png", "in/dog/b.png")
    root = str(linked_tree / "in")
    result = sources.record_from_folder_path(f"{root}/cat/a.png", root, False)
    _assert_outside(result, "cat/a.png", f"{root}/cat/a.png")


def test_record_from_folder_path_dangling_symlink_outside_root_is_rejected(linked_tree):
    _link(linked_tree, "in/cat/gone.png", "secret/missing.png")
    root = str(linked_tree / "in")
    result = sources.record_from_folder_path(f"{root}/cat/gone.png", root, False)
    _assert_outside(result, "cat/gone.png", f"{root}/cat/gone.png")


def test_record_from_folder_path_root_reached_through_a_symlink_holds_its_files(
        linked_tree):
    # Like /tmp on macOS (a link to /private/tmp): keys and uris stay as listed.
    _link(linked_tree, "via", "in")
    root = str(linked_tree / "via")
    record = sources.record_from_folder_path(f"{root}/cat/1.png", root, False)
    assert record == ImageRecord(key="cat/1.png", uri=f"{root}/cat/1.png", label="cat",
                                 split=None)


def test_record_from_row_rejects_symlink_leaving_the_manifest_folder(linked_tree):
    _link(linked_tree, "in/cat/evil.jpg", "secret/passwd")
    manifest_dir = str(linked_tree / "in")
    result = sources.record_from_row({"path": "cat/evil.jpg", "label": "cat"},
                                           manifest_dir, SOURCE)
    _assert_outside(result, "cat/evil.jpg", SOURCE)


def test_record_from_row_reads_symlink_leaving_the_manifest_folder_when_allowed(
        linked_tree):
    _link(linked_tree, "in/cat/evil.jpg", "secret/passwd")
    manifest_dir = str(linked_tree / "in")
    record = sources.record_from_row({"path": "cat/evil.jpg", "label": "cat"},
                                           manifest_dir, SOURCE, allow_outside_root=True)
    assert record == ImageRecord(key="cat/evil.jpg", uri=f"{manifest_dir}/cat/evil.jpg",
                                 label="cat", split=None)


def test_record_from_row_accepts_symlink_chain_ending_inside_the_manifest_folder(
        linked_tree):
    _link(linked_tree, "hop.png", "in/dog/2.png")
    _link(linked_tree, "in/cat/alias.png", "hop.png")
    manifest_dir = str(linked_tree / "in")
    record = sources.record_from_row({"path": "cat/alias.png", "label": "cat"},
                                           manifest_dir, SOURCE)
    assert record == ImageRecord(key="cat/alias.png", uri=f"{manifest_dir}/cat/alias.png",
                                 label="cat", split=None)


@pytest.mark.parametrize(("path", "root", "expected"), [
    ("gs://bucket/in/cat/1.png", "gs://bucket/in", True),
    ("gs://bucket/in2/cat/1.png", "gs://bucket/in", False),
    ("s3://bucket/other/1.png", "s3://bucket/in", False),
])
def test_resolves_inside_compares_object_store_uris_as_written(path, root, expected):
    assert paths.resolves_inside(path, root) is expected


# --- list_local_files -----------------------------------------------------------------

def _relative_listing(tree, **kwargs) -> list[str]:
    root = str(tree / "in")
    return [path[len(root) + 1:] for path in paths.list_local_files(root, **kwargs)]


def test_list_local_files_lists_files_and_links_to_files_dangling_included(linked_tree):
    _link(linked_tree, "in/cat/evil.jpg", "secret/passwd")
    _link(linked_tree, "in/dog/gone.png", "secret/missing.png")
    assert _relative_listing(linked_tree) == [
        "cat/1.png", "cat/evil.jpg", "dog/2.png", "dog/gone.png"]


def test_list_local_files_lists_a_folder_linked_outside_the_root_without_walking_it(
        linked_tree):
    _link(linked_tree, "in/cat/linked", "secret")
    assert _relative_listing(linked_tree) == ["cat/1.png", "cat/linked", "dog/2.png"]


def test_list_local_files_walks_a_folder_linked_outside_the_root_when_allowed(
        linked_tree):
    _link(linked_tree, "in/cat/linked", "secret")
    assert _relative_listing(linked_tree, allow_outside_root=True) == [
        "cat/1.png", "cat/linked/passwd", "dog/2.png"]


def test_list_local_files_lists_files_under_a_second_name_once(linked_tree):
    _link(linked_tree, "in/dog/alias", "in/cat")   # a second name for cat/
    _link(linked_tree, "in/cat/loop", "in")        # a cycle back to the root
    assert _relative_listing(linked_tree) == ["cat/1.png", "dog/2.png"]


def test_list_local_files_cycle_through_an_outside_folder_ends_when_allowed(linked_tree):
    # in/cat/up -> the root's parent, which holds in/ again: walked once, not forever.
    _link(linked_tree, "in/cat/up", ".")
    assert _relative_listing(linked_tree, allow_outside_root=True) == [
        "cat/1.png", "cat/up/secret/passwd", "dog/2.png"]


def test_list_local_files_does_not_walk_hidden_folders(linked_tree):
    (linked_tree / "in/cat/.thumbs").mkdir()
    (linked_tree / "in/cat/.thumbs/1.png").write_bytes(b"png")
    _link(linked_tree, "in/.cache", "secret")
    assert _relative_listing(linked_tree, allow_outside_root=True) == [
        "cat/1.png", "dog/2.png"]


# --- detect_split_layout --------------------------------------------------------------

def test_detect_split_layout_true_when_all_folders_are_splits(tmp_path):
    root = _mkdirs(tmp_path, "train/cat", "val/cat", "Test/cat")
    assert sources.detect_split_layout(root) is True


def test_detect_split_layout_false_for_class_folders(tmp_path):
    root = _mkdirs(tmp_path, "cat", "dog")
    assert sources.detect_split_layout(root) is False


def test_detect_split_layout_ignores_hidden_folders_and_files(tmp_path):
    root = _mkdirs(tmp_path, "train/cat", ".cache")
    (tmp_path / "README.txt").write_text("not a folder")
    assert sources.detect_split_layout(root) is True


def test_detect_split_layout_mixed_raises(tmp_path):
    root = _mkdirs(tmp_path, "cat", "test")
    with pytest.raises(ValueError, match=r"mix split names and class names: \['cat', 'test'\]"):
        sources.detect_split_layout(root)


def test_detect_split_layout_empty_raises(tmp_path):
    with pytest.raises(ValueError, match="No class folders under"):
        sources.detect_split_layout(str(tmp_path))


def test_detect_split_layout_files_only_raises(tmp_path):
    (tmp_path / "a.png").write_bytes(b"x")
    with pytest.raises(ValueError, match="No class folders under"):
        sources.detect_split_layout(str(tmp_path))


def test_detect_split_layout_not_a_folder_raises(tmp_path):
    with pytest.raises(ValueError, match="is not a folder"):
        sources.detect_split_layout(str(tmp_path / "missing"))


# --- record_from_row ------------------------------------------------------------------

def test_record_from_row_relative_path_joins_manifest_dir():
    record = sources.record_from_row({"path": "cat/1.png", "label": "cat"},
                                           MANIFEST_DIR, SOURCE)
    assert record == ImageRecord(key="cat/1.png", uri=f"{MANIFEST_DIR}/cat/1.png",
                                 label="cat", split=None)


@pytest.mark.parametrize("path", ["./cat/1.png", "cat//1.png", "cat/x/../1.png",
                                  "cat\\1.png", "  cat/1.png  "])
def test_record_from_row_normalises_relative_key(path):
    record = sources.record_from_row({"path": path, "label": "cat"},
                                           MANIFEST_DIR, SOURCE)
    assert isinstance(record, ImageRecord)
    assert (record.key, record.uri) == ("cat/1.png", f"{MANIFEST_DIR}/cat/1.png")


@pytest.mark.parametrize(("path", "normalised"), [
    ("/abs/images/cat/1.png", "/abs/images/cat/1.png"),
    ("gs://bucket/cat/1.png", "gs://bucket/cat/1.png"),
    ("s3://bucket/a/../b.png", "s3://bucket/b.png"),
    ("gs://bucket//a/./b.png", "gs://bucket/a/b.png"),
])
def test_record_from_row_keeps_absolute_paths_and_uris_normalised_when_allowed(
        path, normalised):
    record = sources.record_from_row({"path": path, "label": "cat"},
                                           MANIFEST_DIR, SOURCE, allow_outside_root=True)
    assert isinstance(record, ImageRecord)
    assert (record.key, record.uri) == (normalised, normalised)


@pytest.mark.parametrize("path", ["/abs/images/cat/1.png", "gs://bucket/cat/1.png",
                                  "../up.png", "a/../../up.png"])
def test_record_from_row_rejects_paths_outside_the_manifest_folder(path):
    rejection = sources.record_from_row({"path": path, "label": "cat"},
                                              MANIFEST_DIR, SOURCE)
    assert isinstance(rejection, Rejection)
    assert rejection.reason == "path_outside_root"
    assert "--allow_paths_outside_root" in rejection.message


@pytest.mark.parametrize("path", [
    f"{MANIFEST_DIR}/cat/./1.png", f"{MANIFEST_DIR}//cat/x/../1.png",
    "../manifests/cat/1.png", "cat/../cat/./1.png"])
def test_record_from_row_keys_every_spelling_of_a_file_inside_the_folder_alike(path):
    record = sources.record_from_row({"path": path, "label": "cat"}, MANIFEST_DIR, SOURCE)
    assert isinstance(record, ImageRecord)
    assert (record.key, record.uri) == ("cat/1.png", f"{MANIFEST_DIR}/cat/1.png")


def test_record_from_row_absolute_path_through_a_link_to_the_folder(tmp_path):
    root = tmp_path / "manifests"
    (root / "cat").mkdir(parents=True)
    os.symlink(root, tmp_path / "alias")
    record = sources.record_from_row({"path": f"{tmp_path}/alias/cat/1.png", "label": "cat"},
                                     str(root), SOURCE)
    assert isinstance(record, ImageRecord)
    assert (record.key, record.uri) == ("cat/1.png", f"{tmp_path}/alias/cat/1.png")


def test_record_from_row_jsonl_path_escaping_a_byte_names_that_file():
    # JSON "\udce9" is how Python's json holds the byte 0xE9 of a file name.
    name = os.fsdecode(b"cat/caf\xe9.png")
    record = sources.record_from_row({"path": name, "label": "cat"}, MANIFEST_DIR, SOURCE,
                                     from_csv=False)
    assert isinstance(record, ImageRecord)
    assert (record.key, record.uri, record.source) == (
        "cat/caf%E9.png", f"{MANIFEST_DIR}/{name}", f"{MANIFEST_DIR}/cat/caf%E9.png")
    assert os.fsencode(record.uri) == os.fsencode(MANIFEST_DIR) + b"/cat/caf\xe9.png"


@pytest.mark.parametrize(("path", "manifest_dir"), [
    ("cat/\ud800.png", MANIFEST_DIR), ("cat/\udce9.png", "gs://b/imgs"),
    ("gs://b/imgs/\udce9.png", MANIFEST_DIR)])
def test_record_from_row_path_no_file_name_can_be_is_malformed(path, manifest_dir):
    result = sources.record_from_row({"path": path, "label": "cat"}, manifest_dir, SOURCE,
                                     from_csv=False)
    assert isinstance(result, Rejection)
    assert (result.key, result.reason) == (SOURCE, "malformed_manifest_row")
    assert "lone surrogate" in result.message


def test_record_from_row_strips_label():
    record = sources.record_from_row({"path": "a.png", "label": "  cat "},
                                           MANIFEST_DIR, SOURCE)
    assert isinstance(record, ImageRecord)
    assert record.label == "cat"


@pytest.mark.parametrize("row", [
    {"path": "a.png"}, {"path": "a.png", "label": None}, {"path": "a.png", "label": ""},
    {"path": "a.png", "label": "   "},
])
def test_record_from_row_missing_label(row):
    result = sources.record_from_row(row, MANIFEST_DIR, SOURCE)
    assert isinstance(result, Rejection)
    assert (result.key, result.source, result.reason) == ("a.png", SOURCE, "missing_label")


@pytest.mark.parametrize("label", ["cat\ndog", "cat\r", 3, ["cat"]])
def test_record_from_row_invalid_label(label):
    result = sources.record_from_row({"path": "a.png", "label": label},
                                           MANIFEST_DIR, SOURCE)
    assert isinstance(result, Rejection)
    assert result.reason == "invalid_label"


@pytest.mark.parametrize(("split", "expected"), [
    ("val", "validation"), ("TEST", "test"), ("train", "train"), ("", None), (None, None),
])
def test_record_from_row_split_values(split, expected):
    record = sources.record_from_row({"path": "a.png", "label": "cat", "split": split},
                                           MANIFEST_DIR, SOURCE)
    assert isinstance(record, ImageRecord)
    assert record.split == expected


def test_record_from_row_bad_split_is_invalid_split():
    result = sources.record_from_row({"path": "a.png", "label": "cat", "split": "dev"},
                                           MANIFEST_DIR, SOURCE)
    assert isinstance(result, Rejection)
    assert (result.key, result.reason) == ("a.png", "invalid_split")
    assert "Unknown split 'dev'" in result.message


@pytest.mark.parametrize("row", [
    {"label": "cat"}, {"path": "", "label": "cat"}, {"path": "   ", "label": "cat"},
    {"path": None, "label": "cat"}, {"path": 12, "label": "cat"},
])
def test_record_from_row_missing_path_is_malformed(row):
    result = sources.record_from_row(row, MANIFEST_DIR, SOURCE)
    assert isinstance(result, Rejection)
    assert (result.key, result.source, result.reason) == (
        SOURCE, SOURCE, "malformed_manifest_row")


# --- read_csv_header / check_input ----------------------------------------------------

def test_read_csv_header_strips_column_names(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text(" path , label ,split\na.png,cat,train\n")
    assert sources.read_csv_header(str(manifest)) == HEADER


def test_read_csv_header_missing_column_names_found_columns(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("file,label\na.png,cat\n")
    with pytest.raises(ValueError) as info:
        sources.read_csv_header(str(manifest))
    message = str(info.value)
    assert "lacks column(s) ['path']" in message
    assert "its header is ['file', 'label']" in message


def test_read_csv_header_missing_label_column_says_which_flag_to_pass(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("path,class,split\na.png,cat,train\n")
    with pytest.raises(ValueError) as info:
        sources.read_csv_header(str(manifest))
    assert ("lacks column(s) ['label']; its header is ['path', 'class', 'split']: pass "
            "--label_column=class (the closest column no other flag names)") in str(info.value)


def test_read_csv_header_empty_file_lacks_both_columns(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['path', 'label'\]"):
        sources.read_csv_header(str(manifest))


def test_check_input_missing_path_raises(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(ValueError, match=f"--input {missing!r} does not exist"):
        sources.check_input(missing)


def test_check_input_checks_csv_header(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("label\ncat\n")
    with pytest.raises(ValueError, match="lacks column"):
        sources.check_input(str(manifest))


def test_check_input_checks_folder_layout(tmp_path):
    _mkdirs(tmp_path, "cat", "train")
    with pytest.raises(ValueError, match="mix split names"):
        sources.check_input(str(tmp_path) + "/")


def test_check_input_accepts_good_inputs(tmp_path):
    _mkdirs(tmp_path, "imgs/cat")
    (tmp_path / "m.csv").write_text("path,label\n")
    (tmp_path / "m.jsonl").write_text("")
    assert sources.check_input(str(tmp_path / "imgs")) is False
    _mkdirs(tmp_path, "split/train/cat")
    assert sources.check_input(str(tmp_path / "split")) is True
    for path in ("m.csv", "m.jsonl"):
        assert sources.check_input(str(tmp_path / path)) is None


def test_read_csv_header_accepts_utf8_bom(tmp_path):
    # Excel's "CSV UTF-8" starts the file with a byte-order mark.
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffpath,label\na.png,cat\n".encode())
    assert sources.read_csv_header(str(path)) == ("path", "label")
