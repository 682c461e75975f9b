"""Unit tests of etl/core/io/local_tree.py: the key escape of names that are not UTF-8,
and the name of a path under a root however it is spelled. (Listing and links:
tests/etl/images/test_sources.py.)"""

from __future__ import annotations

import itertools
import os

import pytest

from etl.core.io import local_tree


def documented_escape(name: bytes) -> str:
    """The rule docs/FORMAT.md states, on the name's bytes: each byte that is not part
    of UTF-8 text as ``%XX``, every other character kept. (The names below are ASCII
    but for their 0x80-0xFF bytes, which are not UTF-8.)"""
    return "".join(chr(b) if b < 0x80 else f"%{b:02X}" for b in name)


@pytest.mark.parametrize(("name", "escaped"), [
    (b"cat/caf\xe9.jpg", "cat/caf%E9.jpg"),
    (b"\xff\xfe/x.png", "%FF%FE/x.png"),
    (b"cat/caf%E9 100% %20.jpg", "cat/caf%E9 100% %20.jpg"),  # UTF-8: kept as is
    (b"cat/%\xe9.jpg", "cat/%%E9.jpg"),
])
def test_escape_name_follows_the_documented_rule(name, escaped):
    assert documented_escape(name) == escaped
    assert local_tree.escape_name(os.fsdecode(name)) == escaped


def test_escape_name_keeps_utf8_names_as_they_are():
    name = "chats/café 🐈 [1] #2 %.png caf%C3%A9 %25"
    assert local_tree.escape_name(name) == name


def test_escape_name_is_always_utf8_and_one_to_one_on_names_without_percent():
    # Every name of up to 5 characters over the characters that matter is UTF-8 text
    # once escaped, and names without a "%" never share a key. (A name holding "%XX"
    # can meet another's escape: the job makes the second a duplicate_key.)
    alphabet = ["%", "E", "9", "a", os.fsdecode(b"\xe9"), os.fsdecode(b"\x80")]
    seen: dict[str, str] = {}
    for n in range(6):
        for chars in itertools.product(alphabet, repeat=n):
            name = "".join(chars)
            escaped = local_tree.escape_name(name)
            escaped.encode("utf-8")
            if "%" not in name:
                assert seen.setdefault(escaped, name) == name


@pytest.mark.parametrize(("path", "expected"), [
    ("/data/images/cat/1.png", "cat/1.png"),
    ("/data/images", None),
    ("/data/images2/cat/1.png", None),
    ("/data/other/1.png", None),
    ("gs://b/images/cat/1.png", None),
])
def test_relative_to_root_cuts_the_root_lexically(path, expected):
    assert local_tree.relative_to_root(path, "/data/images") == expected


def test_relative_to_root_through_another_name_of_the_root(tmp_path):
    root = tmp_path / "images"
    (root / "cat").mkdir(parents=True)
    os.symlink(root, tmp_path / "alias")
    os.symlink(root / "cat", root / "linked")  # a link under the root keeps its name
    assert local_tree.relative_to_root(f"{tmp_path}/alias/linked/1.png",
                                       str(root)) == "linked/1.png"
    assert local_tree.relative_to_root(f"{tmp_path}/alias/cat/1.png",
                                       f"{tmp_path}/alias") == "cat/1.png"
    assert local_tree.relative_to_root(f"{tmp_path}/images/cat/1.png",
                                       f"{tmp_path}/alias") == "cat/1.png"


def test_relative_to_root_of_object_stores_is_lexical():
    assert local_tree.relative_to_root("gs://b/images/cat/1.png", "gs://b/images") == \
        "cat/1.png"
    assert local_tree.relative_to_root("gs://b/imagesX/1.png", "gs://b/images") is None


@pytest.mark.parametrize(("path", "expected"), [
    ("cat/1.png", ("cat/1.png", "/data/cat/1.png", True)),
    ("./cat//x/../1.png", ("cat/1.png", "/data/cat/1.png", True)),
    ("cat\\1.png", ("cat/1.png", "/data/cat/1.png", True)),
    ("/data/cat/./1.png", ("cat/1.png", "/data/cat/1.png", True)),
    ("../data/cat/1.png", ("cat/1.png", "/data/cat/1.png", True)),
    ("../up.png", ("../up.png", "/up.png", False)),
    ("/elsewhere//1.png", ("/elsewhere/1.png", "/elsewhere/1.png", False)),
    ("gs://b/x/../1.png", ("gs://b/1.png", "gs://b/1.png", False)),
])
def test_resolve_under_gives_one_name_per_file(path, expected):
    assert local_tree.resolve_under(path, "/data") == expected


@pytest.mark.parametrize(("path", "expected"), [
    ("gs://b/imgs/./cat//1.png", ("cat/1.png", "gs://b/imgs/cat/1.png", True)),
    ("cat/../dog/1.png", ("dog/1.png", "gs://b/imgs/dog/1.png", True)),
    ("gs://b/imgs/../x/1.png", ("gs://b/x/1.png", "gs://b/x/1.png", False)),
    ("../x/1.png", ("../x/1.png", "gs://b/x/1.png", False)),
])
def test_resolve_under_an_object_store_is_lexical(path, expected):
    assert local_tree.resolve_under(path, "gs://b/imgs") == expected
