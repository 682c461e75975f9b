"""Hostile inputs, drawn: folders, manifests and series files mixing good inputs with
names that are not UTF-8, line breaks in class names, FIFOs, sockets, link loops,
truncated, empty and mislabelled files, odd CSV rows and values.

The property, for every draw: the job ends with exit status 0 or one ``error:`` line
(no traceback); ``inputs = written + rejected``, each hostile input being one dead
letter with the reason docs/FORMAT.md gives it; every stored record equals an
independent reading of its source (Pillow for images, pandas for series) under the
documented key, label, split and normalisation rules; and no file outside the job's
own is touched: not the input, not the user's files beside the output folder (some
named like it or like what a run writes), not the user's files inside it.

A job run costs seconds, so each test puts a whole batch of hostile inputs in one draw
(every kind each time, some twice, in drawn places and names) and runs the job once on
it: ``max_examples=1``, a new draw each run of the suite, never shrunk (a failure
prints the draw and a blob that replays it). Good images are solid colours: one colour
survives any resize and crop exactly, so each stored PNG must decode to its source's
colour, pixel for pixel.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import dataclasses
import hashlib
import io
import json
import math
import os
import stat
import sys
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from PIL import Image

from etl import testing
from pipelines import common, images, timeseries
from reader.format import contract
from tests import special_files
from tests.job_runs import restored_console

SIZE = 16
IMAGE_FLAGS = ("--image_format=png", f"--image_size={SIZE}", "--cross_split_duplicates=off")
# One draw a run, never shrunk (each example is a job run); printed with a replay blob.
ONE_BATCH = settings(max_examples=1, deadline=None, database=None, phases=[Phase.generate],
                     print_blob=True, suppress_health_check=list(HealthCheck))
SPLIT_NAMES = {"train", "validation", "val", "valid", "test"}  # docs/IMAGE_JOB.md
FRACTIONS = (0.8, 0.1, 0.1)  # --split_fractions' default
NONCE = st.integers(0, 2**32)  # Drawn first: 0 marks Hypothesis' simplest draw.

# Documented reasons (docs/FORMAT.md, errors/rejected.jsonl) of each hostile file.
FILE_REASONS = {
    "empty": "empty_file",                  # 0 bytes
    "text": "unsupported_format",           # text under an image's name
    "truncated_png": "undecodable_image",   # PNG cut inside its image data
    "truncated_jpeg": "undecodable_image",  # "With strict decoding a truncated JPEG ..."
    "fifo": "not_a_regular_file",
    "socket": "not_a_regular_file",
    "loop": "unreadable_file",              # a link to itself: cannot be opened
}


# --- What the docs say, computed here ------------------------------------------------

def documented_key(name: bytes) -> str:
    """docs/FORMAT.md, "Image keys": each byte that does not decode as UTF-8 is %XX
    (upper-case hex); every other character is kept."""
    return "".join(f"%{ord(c) - 0xDC00:02X}" if 0xDC80 <= ord(c) <= 0xDCFF else c
                   for c in name.decode("utf-8", "surrogateescape"))


def documented_split(key: str) -> str:
    """docs/FORMAT.md, "Splits and sharding": first 8 bytes of sha256("split\\0" + key)
    over 2^64, on the default fractions."""
    u = int.from_bytes(hashlib.sha256(b"split\0" + key.encode()).digest()[:8], "big") / 2**64
    train, validation, _ = FRACTIONS
    return ("train" if u < train else "validation" if u < train + validation
            else "test")


# --- Not touching what is not the job's ----------------------------------------------

def _entry(path: bytes) -> tuple:
    found = os.lstat(path)
    if stat.S_ISREG(found.st_mode):
        with open(path, "rb") as f:
            content: object = hashlib.sha256(f.read()).hexdigest()
    elif stat.S_ISLNK(found.st_mode):
        content = os.readlink(path)
    else:
        content = None
    # A folder's mtime changes when anything is created in it, even if removed again.
    return found.st_mode, found.st_size, found.st_mtime_ns, found.st_ino, content


def snapshot(top: str | bytes, skip: str) -> dict[bytes, tuple]:
    """Every entry under ``top`` but ``skip`` (links not followed, FIFOs and sockets
    never opened): mode, size, mtime, inode and a file's sha256 or a link's target."""
    top, skip_ = os.fsencode(top), os.fsencode(skip)
    found = {}
    for folder, subfolders, names in os.walk(top):
        subfolders[:] = [s for s in subfolders if os.path.join(folder, s) != skip_]
        for name in subfolders + names:
            path = os.path.join(folder, name)
            if path != skip_:
                found[path] = _entry(path)
    return found


def write_file(path: bytes | str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def write_user_files(base: str) -> None:
    """Files of the user's beside the output folder ``<base>/out``, some named like
    it or like what a run writes."""
    for name, data in {"notes.txt": b"my notes\n", "mine/notes.txt": b"mine\n",
                       "mine/deep/data.csv": b"a,b\n1,2\n",
                       "out-old/train/images-train-00000-of-00001.tfrecord.gz": b"not ours",
                       "out-old/manifest.json": b"{}", "out.incomplete": b"partial",
                       "outx/errors/rejected.jsonl": b"{}\n"}.items():
        write_file(os.path.join(base, name), data)


# --- Running a job in-process --------------------------------------------------------

def run_job(run: Callable, argv: Sequence[str], fifos: Sequence[str] = ()) -> str | None:
    """Runs a job's console entry (``python -m pipelines.<job>``) in-process: None
    for exit status 0, else its ``error:`` line, checked to be one line with no
    traceback printed. A reader blocked on one of ``fifos`` is freed after a while
    and fails the test."""
    stdout, stderr = io.StringIO(), io.StringIO()
    code = None
    with restored_console() as patch, special_files.freeing_blocked_readers(
            list(fifos)) as freed:
        patch.setattr(sys, "argv", [run.__module__, *argv])
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                common.main(run)
            except SystemExit as e:
                code = e.code
    assert not freed, f"the job blocked opening {freed}"
    printed = stderr.getvalue()
    assert "Traceback" not in printed, printed[-4000:]
    if code in (None, 0):
        return None
    assert isinstance(code, str) and code.startswith("error: "), (code, printed[-4000:])
    assert "\n" not in code and "\r" not in code, f"not one line: {code!r}"
    return code


def load_result(out: str) -> testing.JobResult:
    with open(os.path.join(out, contract.MANIFEST_FILENAME)) as f:
        return testing.JobResult.from_output_dir(out, json.load(f))


def check_dead_letters(found: collections.Counter, wanted: collections.Counter) -> None:
    assert found == wanted, (f"dead letters missing: {sorted(wanted - found)}; "
                             f"unexpected: {sorted(found - wanted)}")


# --- Images --------------------------------------------------------------------------

ASCII = "abcxyzABZ019_-+=%@ ,;'()[]~"
UNICODE = ["é", "ß", "Ω", "猫", "ñ", "€"]

# A small image of one colour: (mode, (width, height), fill), L, RGB or opaque RGBA.
_sides = st.tuples(st.integers(6, 40), st.integers(6, 40))
_rgb = st.tuples(*[st.integers(0, 255)] * 3)
solid = st.one_of(st.tuples(st.just("L"), _sides, st.integers(0, 255)),
                  st.tuples(st.just("RGB"), _sides, _rgb),
                  st.tuples(st.just("RGBA"), _sides, _rgb.map(lambda c: (*c, 255))))


def png(spec: tuple) -> bytes:
    mode, size, fill = spec
    buffer = io.BytesIO()
    Image.new(mode, size, fill).save(buffer, "PNG")
    return buffer.getvalue()


def names(alphabet: str = ASCII, high_bytes: bool = True) -> st.SearchStrategy[bytes]:
    """Name parts as bytes: ASCII, UTF-8 characters and (``high_bytes``) single bytes
    0x80-0xFF, which may or may not make UTF-8 with their neighbours."""
    pieces = [st.sampled_from(list(alphabet)).map(str.encode),
              st.sampled_from(UNICODE).map(str.encode)]
    if high_bytes:
        pieces.append(st.integers(0x80, 0xFF).map(lambda b: bytes([b])))
    return st.lists(st.one_of(*pieces), min_size=1, max_size=6).map(b"".join)


def is_class_name(name: bytes) -> bool:
    text = name.decode("utf-8", "surrogateescape")
    return (not name.startswith(b".") and text.strip() == text and text != ""
            and text.lower() not in SPLIT_NAMES)


def _noise(seed: int, image_format: str) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, image_format)
    return buffer.getvalue()


def make_hostile(draw: Callable, kind: str, path: bytes) -> None:
    """Puts a hostile file of ``kind`` (a FILE_REASONS key) at ``path``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        special_files.make_socket(os.fsdecode(path))
    elif kind == "loop":
        os.symlink(os.path.basename(path), path)
    elif kind == "empty":
        write_file(path, b"")
    elif kind == "text":  # Lower-case text opens with no image signature.
        write_file(path, draw(st.text("abcdefghij klm\n", min_size=1, max_size=40)).encode())
    else:  # Noise compresses badly: the cut falls inside the image data.
        image_format, low = ("PNG", 0.2) if kind == "truncated_png" else ("JPEG", 0.6)
        data = _noise(draw(st.integers(0, 2**16)), image_format)
        write_file(path, data[:int(len(data) * draw(st.floats(low, 0.95)))])


def source_colour(path: bytes) -> tuple[int, int, int]:
    """The one colour of an image file, read by Pillow."""
    with open(path, "rb") as f, Image.open(f) as image:
        colours = image.convert("RGB").getcolors()
    assert len(colours) == 1, colours
    return colours[0][1]


def stored_colours(image: bytes) -> set[tuple[int, ...]]:
    """The colours of a stored PNG, read by Pillow, after checking its size."""
    with Image.open(io.BytesIO(image)) as decoded:
        assert decoded.format == "PNG" and decoded.size == (SIZE, SIZE)
        pixels = np.asarray(decoded.convert("RGB"))
    return {tuple(int(v) for v in p) for p in pixels.reshape(-1, 3)}


@dataclasses.dataclass
class ImagePlan:
    """What a drawn image input should give: stored records (key → (label, source
    file)), dead letters ``(key, reason)``, the inputs counted, the FIFOs made."""

    expected: dict[str, tuple[str, bytes]] = dataclasses.field(default_factory=dict)
    rejected: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    inputs: int = 0
    fifos: list[str] = dataclasses.field(default_factory=list)

    @property
    def has_train(self) -> bool:
        return any(documented_split(key) == "train" for key in self.expected)

    def hostile(self, draw: Callable, kind: str, root: bytes, relative: bytes,
                key: str) -> None:
        path = os.path.join(root, relative)
        make_hostile(draw, kind, path)
        self.rejected.append((key, FILE_REASONS[kind]))
        self.fifos += [os.fsdecode(path)] if kind == "fifo" else []


def check_images_job(out: str, plan: ImagePlan) -> None:
    """Accounting, dead letters and every stored record against ``plan``: each
    in its documented split, with its label's id, and its source's one colour."""
    result = load_result(out)
    assert result.manifest["inputs"] == plan.inputs
    assert result.inputs == result.written + len(result.rejected)
    assert result.manifest["rejected"]["count"] == len(result.rejected)
    check_dead_letters(collections.Counter((r["key"], r["reason"]) for r in result.rejected),
                       collections.Counter(plan.rejected))
    vocab = list(result.manifest["label_vocab"])
    stored = {}
    for split in contract.SPLITS:
        for record in result.records(split):
            assert record["key"] not in stored, f"key stored twice: {record['key']!r}"
            stored[record["key"]] = (split, record)
    assert sorted(stored) == sorted(plan.expected)
    for key, (split, record) in stored.items():
        label, source = plan.expected[key]
        assert split == documented_split(key), key
        assert record["label_name"] == label, key
        assert record["label"] == (vocab.index(label) if label in vocab else -1), key
        assert (record["height"], record["width"], record["channels"]) == (SIZE, SIZE, 3)
        assert stored_colours(record["image"]) == {source_colour(source)}, key
    # The vocabulary is fit on the train split: it holds every stored train label.
    assert {plan.expected[k][0] for k, (s, _) in stored.items() if s == "train"} <= set(vocab)


FOLDER_KINDS = (*FILE_REASONS, "line_breaks", "stray", "collision", "outside_link", "hidden")


@st.composite
def folder_batch(draw):
    """Class folders, good images in them ((class, name, image)) and hostile kinds:
    every kind once, some twice, in drawn order."""
    classes = draw(st.lists(names().filter(is_class_name), min_size=1, max_size=3,
                            unique_by=documented_key))
    good = [(c, f"{i}-".encode() + draw(names()) + b".png", draw(solid))
            for c in classes for i in range(draw(st.integers(1, 4)))]
    kinds = draw(st.permutations(
        [*FOLDER_KINDS, *draw(st.lists(st.sampled_from(FOLDER_KINDS), max_size=4))]))
    return classes, good, kinds


def write_folder(draw: Callable, base: str, classes, good, kinds) -> tuple[bytes, ImagePlan]:
    """The ImageFolder tree ``<base>/in`` of a drawn batch, and what it should give."""
    root = os.fsencode(os.path.join(base, "in"))
    plan = ImagePlan()
    for c, name, spec in good:
        write_file(os.path.join(root, c, name), png(spec))
        plan.expected[documented_key(os.path.join(c, name))] = (
            documented_key(c), os.path.join(root, c, name))
    plan.inputs = len(good)
    secret = os.fsencode(os.path.join(base, "mine", "secret.png"))
    write_file(secret, png(draw(solid)))
    for n, kind in enumerate(kinds):
        c = draw(st.sampled_from(classes))
        name = f"h{n}-{kind}".encode() + draw(st.sampled_from([b".png", b".jpg"]))
        relative = os.path.join(c, name)
        if kind in FILE_REASONS:
            plan.hostile(draw, kind, root, relative, documented_key(relative))
        elif kind == "line_breaks":  # Three class folders whose names break lines.
            for folder in (b"two\nlines", b"two\rlines", b"two\r\nlines"):
                relative = os.path.join(f"h{n}-".encode() + folder, name)
                write_file(os.path.join(root, relative), png(draw(solid)))
                plan.rejected.append((documented_key(relative), "invalid_label"))
            plan.inputs += 2
        elif kind == "stray":  # Outside any class folder.
            write_file(os.path.join(root, name), png(draw(solid)))
            plan.rejected.append((documented_key(name), "missing_label"))
        elif kind == "collision":
            # A UTF-8 name spelled like another's escape: one key, and the second in
            # path order a duplicate_key (docs/FORMAT.md, "Names that are not UTF-8").
            first = os.path.join(c, f"h{n}-caf%E9.png".encode())
            second = os.path.join(c, f"h{n}-caf\xe9.png".encode("latin-1"))
            for each in (first, second):
                write_file(os.path.join(root, each), png(draw(solid)))
            assert documented_key(first) == documented_key(second)
            plan.expected[documented_key(first)] = (documented_key(c),
                                                    os.path.join(root, first))
            plan.rejected.append((documented_key(second), "duplicate_key"))
            plan.inputs += 1
        elif kind == "outside_link":  # A link to a file of the user's.
            os.symlink(secret, os.path.join(root, relative))
            plan.rejected.append((documented_key(relative), "path_outside_root"))
        else:  # Hidden files and folders are no inputs.
            write_file(os.path.join(root, c, b".DS_Store"), b"\0\0\0\1Bud1")
            write_file(os.path.join(root, b".hidden", c, b"x.png"), png(draw(solid)))
            plan.inputs -= 1
        plan.inputs += 1
    return root, plan


@ONE_BATCH
@given(nonce=NONCE, batch=folder_batch(), data=st.data())
def test_image_folder_of_hostile_files(tmp_path_factory, nonce, batch, data):
    assume(nonce)  # Hypothesis tries its simplest draw first: never the one run.
    base = str(tmp_path_factory.mktemp("hostile_folder"))
    out = os.path.join(base, "out")
    root, plan = write_folder(data.draw, base, *batch)
    write_user_files(base)
    untouched = snapshot(base, skip=out)

    argv = [f"--input={os.fsdecode(root)}", f"--output_dir={out}", *IMAGE_FLAGS]
    error = run_job(images.run, [*argv, "--max_error_fraction=1"], plan.fifos)
    if plan.has_train:
        assert error is None
        check_images_job(out, plan)
    else:
        assert error is not None and error.startswith("error: The train split is empty")
    assert snapshot(base, skip=out) == untouched

    # Again, over the dataset and the user's files beside it, with --overwrite and a
    # threshold the draw exceeds: deletes what it replaces, keeps the user's files,
    # and fails in one line, publishing nothing.
    mine = [os.fsencode(os.path.join(out, name)) for name in ("NOTES.md", "train/notes.txt")]
    for path in mine:
        write_file(path, b"the user's\n")
    kept = {path: _entry(path) for path in mine}
    error = run_job(images.run, [*argv, "--overwrite", "--max_error_fraction=0"], plan.fifos)
    assert error is not None
    if plan.has_train:
        assert error.startswith(f"error: {len(plan.rejected)} of {plan.inputs} inputs ("), error
        assert "were rejected, above --max_error_fraction=0" in error
    assert not os.path.exists(os.path.join(out, contract.MANIFEST_FILENAME))
    assert snapshot(base, skip=out) == untouched
    assert {path: _entry(path) for path in mine} == kept


# --- Image manifests -----------------------------------------------------------------

MANIFEST_KINDS = (*FILE_REASONS, "latin1", "line_break_label", "duplicate", "outside",
                  "absolute_outside", "missing", "no_label", "columns", "blank")
TEXT_NAME = ASCII + '"'


def text_names() -> st.SearchStrategy[str]:
    return names(TEXT_NAME, high_bytes=False).map(bytes.decode)


def spellings(root: str, relative: str) -> list[str]:
    """Ways to write one file's path in a manifest in ``root`` (docs/FORMAT.md,
    "Image keys")."""
    folder, name = relative.split("/")
    return [relative, f"./{relative}", os.path.join(root, relative), f"{folder}//{name}",
            f"{folder}/../{folder}/{name}"]


@st.composite
def manifest_batch(draw):
    """Folders, good images ((folder, name, image, label as written)), hostile
    kinds, and every row's order."""
    folders = draw(st.lists(text_names().filter(lambda n: is_class_name(n.encode())),
                            min_size=1, max_size=2, unique=True))
    labels = draw(st.lists(text_names().filter(lambda n: n.strip() == n), min_size=1,
                           max_size=3, unique=True))
    padded = st.tuples(st.sampled_from(["", " ", "  "]), st.sampled_from(labels),
                       st.sampled_from(["", " "])).map("".join)
    good = [(f, f"{i}-{draw(text_names())}.png", draw(solid), draw(padded))
            for f in folders for i in range(draw(st.integers(1, 4)))]
    kinds = [*MANIFEST_KINDS, *draw(st.lists(st.sampled_from(MANIFEST_KINDS), max_size=4))]
    return folders, good, kinds


def csv_row(*fields: str) -> bytes:
    text = io.StringIO()
    csv.writer(text).writerow(fields)  # RFC 4180: quotes, doubled quotes, \r\n
    return text.getvalue().encode()


@ONE_BATCH
@given(nonce=NONCE, batch=manifest_batch(), data=st.data())
def test_image_manifest_of_hostile_rows(tmp_path_factory, nonce, batch, data):
    assume(nonce)
    folders, good, kinds = batch
    draw = data.draw
    base = str(tmp_path_factory.mktemp("hostile_manifest"))
    root, out = os.path.join(base, "in"), os.path.join(base, "out")
    manifest_path = os.path.join(root, "list.csv")
    plan = ImagePlan()
    # (row, "malformed_manifest_row" for a row keyed by its line, "blank", or None)
    rows: list[tuple[bytes, str | None]] = []
    for f, name, spec, label in good:
        relative = f"{f}/{name}"
        write_file(os.path.join(root, relative), png(spec))
        plan.expected[relative] = (label.strip(), os.fsencode(os.path.join(root, relative)))
        rows.append((csv_row(draw(st.sampled_from(spellings(root, relative))), label), None))
    for n, kind in enumerate(kinds):
        f = draw(st.sampled_from(folders))
        relative = f"{f}/h{n}-{kind}" + draw(st.sampled_from([".png", ".jpg"]))
        label = draw(st.sampled_from([label for *_, label in good]))
        if kind in FILE_REASONS:
            plan.hostile(draw, kind, os.fsencode(root), relative.encode(), relative)
            rows.append((csv_row(relative, label), None))
        elif kind == "latin1":  # One byte that is not UTF-8: the row is its line.
            rows.append((csv_row(relative, "caf").rstrip(b"\r\n") + b"\xe9\r\n",
                         "malformed_manifest_row"))
        elif kind == "columns":
            rows.append((csv_row(relative, label, "extra"), "malformed_manifest_row"))
        elif kind == "blank":
            rows.append((draw(st.sampled_from([b"\r\n", b"\n"])), "blank"))
        elif kind == "line_break_label":  # Quoted as Python's csv writes it.
            write_file(os.path.join(root, relative), png(draw(solid)))
            rows.append((csv_row(relative, draw(st.sampled_from(["big\ncat", "big\r\ncat"]))),
                         None))
            plan.rejected.append((relative, "invalid_label"))
        elif kind == "no_label":
            write_file(os.path.join(root, relative), png(draw(solid)))
            rows.append((csv_row(relative, draw(st.sampled_from(["", " "]))), None))
            plan.rejected.append((relative, "missing_label"))
        elif kind == "duplicate":
            f, name, _, label = draw(st.sampled_from(good))
            rows.append((csv_row(draw(st.sampled_from(spellings(root, f"{f}/{name}"))),
                                 label), None))
            plan.rejected.append((f"{f}/{name}", "duplicate_key"))
        elif kind == "outside":  # A file of the user's beside the input folder.
            write_file(os.path.join(base, f"x{n}.png"), png(draw(solid)))
            rows.append((csv_row(f"../x{n}.png", label), None))
            plan.rejected.append((f"../x{n}.png", "path_outside_root"))
        elif kind == "absolute_outside":
            path = os.path.join(base, "mine", f"y{n}.png")
            write_file(path, png(draw(solid)))
            rows.append((csv_row(path, label), None))
            plan.rejected.append((path, "path_outside_root"))
        else:  # Listed, never there.
            rows.append((csv_row(relative, label), None))
            plan.rejected.append((relative, "unreadable_file"))
    text = csv_row("path", "label")
    for row, line_keyed in draw(st.permutations(rows)):
        if line_keyed == "malformed_manifest_row":  # Keyed <manifest>:<its line>.
            line = text.count(b"\n") + 1
            plan.rejected.append((f"{manifest_path}:{line}", line_keyed))
        plan.inputs += line_keyed != "blank"
        text += row
    write_file(manifest_path, text)
    write_user_files(base)
    untouched = snapshot(base, skip=out)

    error = run_job(images.run, [f"--input={manifest_path}", f"--output_dir={out}",
                                 *IMAGE_FLAGS, "--max_error_fraction=1"], plan.fifos)
    if plan.has_train:
        assert error is None
        check_images_job(out, plan)
    else:
        assert error is not None and error.startswith("error: The train split is empty")
    assert snapshot(base, skip=out) == untouched


# --- Time series ---------------------------------------------------------------------

WINDOW, HORIZON = 4, 1
SPAN = WINDOW + HORIZON
SERIES_FLAGS = (f"--window_size={WINDOW}", f"--horizon={HORIZON}", "--split_by=series",
                "--max_error_fraction=1")
# Hostile rows, each in a series of its own (the good series stay whole): the line's
# fields → the reason (docs/FORMAT.md); "missing" rows are dropped (--missing=drop),
# blank lines are no rows.
SERIES_KINDS = {
    "missing": ("~m{n}", "{t}", st.sampled_from(["nan", "NaN", "", "NA", "null"])),
    "infinite": ("~i{n}", "{t}", st.sampled_from(["inf", "-inf", "Infinity"])),
    "out_of_range": ("~r{n}", "{t}", st.sampled_from(["1e39", "-3.5e38", "1e308"])),
    "not_a_number": ("~v{n}", "{t}", st.sampled_from(["abc", "1.2.3", "0x"])),
    "timestamp": ("~t{n}", st.sampled_from(["yesterday", "2024-13-45", "nan", "1e400", "12:99"]),
                  st.just("1.5")),
    "no_id": ("", "{t}", st.just("2.5")),
}
SERIES_REASONS = {"infinite": "unparsable_value", "out_of_range": "value_out_of_range",
                  "not_a_number": "unparsable_value", "timestamp": "unparsable_timestamp",
                  "no_id": "missing_series_id", "long": "unparsable_value",
                  "latin1": "malformed_row", "columns": "malformed_row"}
ALL_SERIES_KINDS = (*SERIES_KINDS, "latin1", "columns", "blank")
series_ids = st.text("abcXYZ019_-é猫", min_size=1, max_size=5)


@st.composite
def series_batch(draw):
    """Good series (id → (first timestamp, values)), a short one or none, and the
    hostile kinds (with one 3 MB line always)."""
    ids = draw(st.lists(series_ids, min_size=1, max_size=4, unique=True))
    values = st.integers(-100_000, 100_000).map(lambda i: i / 100)
    good = {i: (draw(st.integers(-1000, 10**6)), draw(st.lists(values, min_size=SPAN,
                                                                max_size=30)))
            for i in ids[:-1] or ids}
    short = {i: (draw(st.integers(0, 100)), draw(st.lists(values, min_size=1,
                                                           max_size=SPAN - 1)))
             for i in ids[-1:] if len(ids) > 1}
    kinds = ["long", *ALL_SERIES_KINDS,
             *draw(st.lists(st.sampled_from(ALL_SERIES_KINDS), max_size=6))]
    return good, short, kinds


def expected_windows(path: str, good: Sequence[str], manifest: dict
                     ) -> tuple[dict[str, tuple[str, np.ndarray, np.ndarray]],
                                np.ndarray, np.ndarray]:
    """The series file read by pandas: ``(key → (split, window, target), train
    mean, train std)`` of the ``good`` series, z-scored with the manifest's
    statistics, and the statistics of their train rows computed here."""
    rows = pd.read_csv(path, dtype=str, keep_default_na=False, engine="c",
                       encoding="utf-8", encoding_errors="replace")
    rows = rows[rows["series_id"].isin(good)].copy()
    rows["t"] = rows["timestamp"].astype(np.int64)
    rows["x"] = rows["value"].astype(np.float64).astype(np.float32)
    mean = np.float32(manifest["normalisation"]["mean"][0])
    std = np.float32(manifest["normalisation"]["std"][0])
    windows, train = {}, []
    for series_id, series in rows.groupby("series_id"):
        series = series.sort_values("t")
        split = documented_split(series_id)
        x = series["x"].to_numpy()
        train += [x] if split == "train" else []
        z = (x - mean) / std  # float32, as the transform
        for i, start in enumerate(series["timestamp"].iloc[:len(x) - SPAN + 1]):
            windows[f"{series_id}@{start}"] = (split, z[i:i + WINDOW],
                                               z[i + WINDOW:i + SPAN])
    values = np.concatenate(train).astype(np.float64) if train else np.zeros(1)
    train_std = values.std()
    return windows, values.mean(), (train_std if train_std > 0 else 1.0)


@ONE_BATCH
@given(nonce=NONCE, batch=series_batch(), data=st.data())
def test_timeseries_file_of_hostile_rows(tmp_path_factory, nonce, batch, data):
    assume(nonce)
    good, short, kinds = batch
    draw = data.draw
    base = str(tmp_path_factory.mktemp("hostile_series"))
    path, out = os.path.join(base, "in", "rows.csv"), os.path.join(base, "out")
    lines: list[tuple[bytes, str | None]] = []  # (line, the reason of its dead letter)
    for series_id, (start, values) in {**good, **short}.items():
        lines += [(f"{series_id},{start + k},{v!r}".encode(), None)
                  for k, v in enumerate(values)]
    for n, kind in enumerate(kinds):
        if kind in SERIES_KINDS:
            fields = [f if isinstance(f, str) else draw(f) for f in SERIES_KINDS[kind]]
            line = ",".join(f.format(n=n, t=n) for f in fields).encode()
        elif kind == "long":  # A value field of 3 million characters.
            line = f"~l{n},{n},".encode() + b"x" * 3_000_000
        elif kind == "latin1":
            line = f"~a{n},{n},1.5".encode() + b"\xe9"
        elif kind == "columns":
            line = f"~c{n},{n}".encode()
        else:
            line = b""
        lines.append((line, "missing" if kind == "missing" else SERIES_REASONS.get(kind)))
    text, wanted, inputs, dropped = b"series_id,timestamp,value\n", [], 0, 0
    for line, reason in draw(st.permutations(lines)):
        number = text.count(b"\n") + 1
        inputs += line != b""
        if reason == "missing":
            dropped += 1
        elif reason is not None:
            wanted.append((f"{path}:{number}", reason))
        text += line + b"\n"
    write_file(path, text)
    write_user_files(base)
    untouched = snapshot(base, skip=out)

    has_train = any(documented_split(i) == "train" for i in good)
    error = run_job(timeseries.run, [f"--input={path}", f"--output_dir={out}",
                                     *SERIES_FLAGS])
    assert snapshot(base, skip=out) == untouched
    if not has_train:
        assert error is not None and error.startswith("error: The train split is empty")
        return
    assert error is None
    result = load_result(out)
    manifest, counts = result.manifest, result.manifest["timeseries"]["counts"]
    parsed = [r for r in result.rejected if r["reason"] != "series_too_short"]
    check_dead_letters(collections.Counter((r["source"], r["reason"]) for r in parsed),
                       collections.Counter(wanted))
    assert sorted(r["key"] for r in result.rejected if r["reason"] == "series_too_short") == \
        sorted(short)
    # Rows: every line a row parsed or rejected, every parsed row kept or dropped.
    good_rows = sum(len(v) for _, v in good.values())
    assert manifest["inputs"] == inputs == counts["rows_read"] + manifest["timeseries"][
        "parse_rejected"]
    assert manifest["timeseries"]["parse_rejected"] == len(wanted)
    assert tuple(counts.get(name, 0) for name in (  # A count of 0 may be left out.
        "rows_read", "rows_kept", "rows_dropped_missing", "rows_rejected",
        "rows_merged_duplicates")) == (
        good_rows + sum(len(v) for _, v in short.values()) + dropped,
        good_rows + sum(len(v) for _, v in short.values()), dropped, 0, 0)
    assert manifest["rejected"]["count"] == len(result.rejected) == len(wanted) + len(short)

    windows, train_mean, train_std = expected_windows(path, list(good), manifest)
    mean, std = manifest["normalisation"]["mean"][0], manifest["normalisation"]["std"][0]
    assert math.isclose(mean, train_mean, rel_tol=1e-6, abs_tol=1e-6 * train_std)
    assert math.isclose(std, train_std, rel_tol=1e-6)
    stored = {split: result.records(split) for split in contract.SPLITS}
    for split in contract.SPLITS:
        assert counts[f"windows_{split}"] == len(stored[split]) == sum(
            s == split for s, _, _ in windows.values())
    found = {r["key"]: (split, r) for split in contract.SPLITS for r in stored[split]}
    assert sorted(found) == sorted(windows)
    for key, (split, record) in found.items():
        want_split, window, target = windows[key]
        assert split == want_split, key
        assert f"{record['series_id']}@{record['window_start']}" == key
        got_window = np.asarray(record["window"], np.float32).reshape(-1)
        got_target = np.asarray(record["target"], np.float32).reshape(-1)
        np.testing.assert_allclose(got_window, window, rtol=1e-6, atol=1e-5, err_msg=key)
        np.testing.assert_allclose(got_target, target, rtol=1e-6, atol=1e-5, err_msg=key)
