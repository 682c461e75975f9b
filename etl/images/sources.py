"""Image inputs: an ImageFolder tree or a CSV/JSONL manifest → ``ImageRecord``s.

Layouts (docs/IMAGE_JOB.md, "Input layouts"): ``<root>/<class>/.../<file>``,
``<root>/<split>/<class>/.../<file>`` when every top-level folder is a split name, or a
manifest of ``path``, ``label`` and optional ``split`` columns (RFC 4180 CSV, or JSON
Lines; more columns: ``etl/images/labels.py``). A key is its file's path relative to
the root, one per file however it is spelled (docs/FORMAT.md, "Image keys"); hidden
files are no inputs; a local input whose real path leaves the root is ``path_outside_root``
unless ``--allow_paths_outside_root``.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import apache_beam as beam

from etl.core import column_hints, dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import local_tree, storage, text_rows
from etl.core.shards import splits
from etl.images import labels
from etl.images.labels import Label, LabelColumns

PATH_COLUMN = "path"
SPLIT_COLUMN = "split"

REJECTED = dead_letters.REJECTED


@dataclasses.dataclass(frozen=True)
class ImageRecord:
    """One image input before it is read: where it is, its key, label and split.

    ``label`` is one class name, a sorted tuple of names (``--multi_label``) or None
    (``--label_column=none``); ``targets`` and ``carried`` hold the values of
    ``--target_columns`` and ``--carry_columns``, in the flags' order. ``listed`` is the
    file's ``(size, mtime)`` as the folder listing reported it (None for a manifest
    row, or a file the listing could not look up): what tells a resumed run the file
    is unchanged, which on an object store would cost a request per image.
    """

    key: str
    uri: str
    label: Label
    split: str | None = None  # None: assigned later from a hash of the key.
    targets: tuple[float, ...] = ()
    carried: tuple[str, ...] = ()
    listed: tuple[int, float] | None = None

    @property
    def source(self) -> str:  # The uri as text for files written (escaped as keys are).
        return local_tree.escape_name(self.uri)

    def identity(self) -> str:
        """What of the record shapes its example (``fingerprint.unit_identity``):
        everything but the listed size and mtime, so a file rewritten in place
        redoes its own shard only (``shards.TransformAndWriteImageShard``)."""
        return repr(dataclasses.replace(self, listed=None))

    def sort_key(self) -> tuple[Any, ...]:
        """Orders records of one key (duplicates) by everything they hold."""
        return (self.uri, labels.label_names(self.label), self.targets, self.carried,
                self.split or "")


def assign_split(record: ImageRecord, fractions: splits.SplitFractions,
                 allowed_labels: frozenset[str] | None = None) -> ImageRecord | Rejection:
    """The record with its split decided, or an ``unknown_label`` rejection: an explicit
    split (folder or column) wins, else a stable hash of the key decides. From here on
    the split travels on the record itself."""
    unknown = labels.names_not_in(record.label, allowed_labels or frozenset())
    if allowed_labels is not None and unknown:
        return Rejection(key=record.key, source=record.source, reason=dead_letters.UNKNOWN_LABEL,
                         message=f"Label {', '.join(map(repr, unknown))} is not in "
                                 f"--label_vocabulary.")
    if record.split is not None:
        return record
    return dataclasses.replace(record, split=splits.assign_split(record.key, fractions))


def detect_split_layout(root: str) -> bool:
    """True when every top-level folder of ``root`` is a split name.

    Raises:
        ValueError: if some top-level folders are split names and others are not
            (ambiguous: a class called "test" next to real classes?), or if
            ``root`` has no folders at all.
    """
    found = storage.subfolders(root)
    if not found and not storage.is_folder(root):
        raise ValueError(f"--input {root!r} is not a folder or a .csv/.jsonl manifest.")
    folders = [name for name in found if not name.startswith(".")]
    if not folders:
        raise ValueError(
            f"No class folders under {root!r}: expected <root>/<class>/<image> or "
            f"<root>/<split>/<class>/<image>."
        )
    is_split = [name.lower() in splits.SPLIT_ALIASES for name in folders]
    if all(is_split):
        return True
    if any(is_split):
        raise ValueError(
            f"Top-level folders of {root!r} mix split names and class names: "
            f"{folders}. Use either <root>/<class>/... or <root>/<split>/<class>/..."
        )
    return False


def record_from_folder_path(path: str, root: str, split_layout: bool,
                            allow_outside_root: bool = False,
                            listed: tuple[int, float] | None = None
                            ) -> ImageRecord | Rejection | None:
    """Turns one listed path into a record, a rejection, or None for hidden files.

    A path whose real path lies outside ``root`` (a symbolic link, or a file under a
    linked folder, pointing elsewhere) is rejected as ``path_outside_root`` unless
    ``allow_outside_root``: a folder must not make the job read files elsewhere by
    accident. The uri stays the path as listed; the key is it relative to ``root``,
    escaped. A class folder the label vocabulary cannot hold is ``invalid_label``.
    """
    relative = _relative(path, root)
    parts = relative.split("/")
    if any(part.startswith(".") for part in parts):
        return None
    key, source = local_tree.escape_name(relative), local_tree.escape_name(path)
    if not allow_outside_root and not storage.resolves_inside(path, root):
        return Rejection(
            key=key, source=source, reason=dead_letters.PATH_OUTSIDE_ROOT,
            message=f"{relative!r} is a symbolic link (or under one) that resolves outside "
                    f"the input folder {root!r}; pass --allow_paths_outside_root to "
                    f"read it.")
    split = None
    if split_layout and len(parts) > 1:
        split = splits.canonical_split(parts[0])
        parts = parts[1:]
    if len(parts) < 2:
        return Rejection(
            key=key, source=source, reason=dead_letters.MISSING_LABEL,
            message="File is not inside a class folder, so it has no label.")
    label = local_tree.escape_name(parts[0])
    problem = labels.vocabulary_problem(label)
    if problem is not None:
        return Rejection(key=key, source=source, reason=dead_letters.INVALID_LABEL,
                         message=f"Class folder {label!r} {problem}; rename the folder.")
    return ImageRecord(key=key, uri=path, label=label, split=split, listed=listed)


def record_from_row(row: Mapping[str, Any], manifest_dir: str, source: str,
                    allow_outside_root: bool = False,
                    columns: LabelColumns = labels.ONE_CLASS, from_csv: bool = True
                    ) -> ImageRecord | Rejection:
    """Validates one manifest row (already parsed into a mapping).

    The key is the path relative to the manifest's folder (the root), however written
    (``local_tree.resolve_under``), escaped. A path resolving outside it (``../``, a
    path or URI elsewhere, a link leaving it) is ``path_outside_root`` unless
    ``allow_outside_root``: a manifest must not make the job read any file by accident.
    """
    path = row.get(PATH_COLUMN)
    if not isinstance(path, str) or not path.strip():
        return Rejection(key=source, source=source,
                         reason=dead_letters.MALFORMED_MANIFEST_ROW,
                         message=f"Row has no usable {PATH_COLUMN!r} value: {dict(row)!r}")
    path = path.strip()
    name, uri, inside = local_tree.resolve_under(path, manifest_dir)
    if not local_tree.is_file_name(uri):
        return Rejection(key=source, source=source, message=(
            f"Row's {PATH_COLUMN!r} value {path!r} names no file: it holds a lone surrogate "
            f"code point (a JSON \\uD800-\\uDFFF escape) that is no byte of a file name."),
                         reason=dead_letters.MALFORMED_MANIFEST_ROW)
    key = local_tree.escape_name(name)
    if not allow_outside_root and not (inside and storage.resolves_inside(uri, manifest_dir)):
        return Rejection(key=key, source=source, reason=dead_letters.PATH_OUTSIDE_ROOT,
                         message=f"{path!r} resolves outside the manifest's folder "
                                 f"{manifest_dir!r} (symbolic links followed); pass "
                                 f"--allow_paths_outside_root to read it.")
    try:
        label, targets, carried = columns.parse(row, from_csv)
    except labels.RowError as e:
        return Rejection(key=key, source=source, reason=e.reason, message=str(e))
    split_value = row.get(SPLIT_COLUMN)
    split = None
    if split_value not in (None, ""):
        try:
            split = splits.canonical_split(str(split_value))
        except ValueError as e:
            return Rejection(key=key, source=source, reason=dead_letters.INVALID_SPLIT,
                             message=str(e))
    return ImageRecord(key=key, uri=uri, label=label, split=split, targets=targets,
                       carried=carried)


def read_csv_header(manifest_path: str, columns: LabelColumns = labels.ONE_CLASS
                    ) -> tuple[str, ...]:
    """The CSV header, checked to contain ``path`` and ``columns``' columns.

    Raises:
        ValueError: naming the columns found if a required one is missing.
    """
    try:
        header = text_rows.read_csv_header(manifest_path)
    except ValueError as e:
        raise ValueError(f"Manifest {manifest_path!r} has an unreadable header: {e}") from None
    required = (PATH_COLUMN, *columns.required_columns())
    missing = [c for c in required if c not in header]
    if missing:
        hint = column_hints.pass_flags_hint(columns.named_columns(), header,
                                            reserved=(PATH_COLUMN, SPLIT_COLUMN))
        raise ValueError(f"Manifest {manifest_path!r} lacks column(s) {missing}; its header "
                         f"is {list(header)}{hint}. Required: "
                         f"{', '.join(map(repr, required))}; optional: {SPLIT_COLUMN!r}.")
    return header


def is_manifest(input_path: str) -> bool:
    """True if ``input_path`` names a CSV or JSONL manifest rather than a folder."""
    return input_path.lower().endswith((".csv", ".jsonl"))


def check_input(input_path: str, columns: LabelColumns = labels.ONE_CLASS) -> bool | None:
    """Validates the input before anything runs (layout, manifest header).

    Returns:
        For a folder, whether its top-level folders are splits
        (:func:`detect_split_layout`); None for a manifest.

    Raises:
        ValueError: if the input is missing or has an unusable layout or header, or
            ``columns`` asks a folder for more than one class per image.
    """
    if is_manifest(input_path):
        if not storage.exists(input_path):
            raise ValueError(f"--input {input_path!r} does not exist.")
        if kind := storage.special_kind(input_path):  # Reading a FIFO would block.
            raise ValueError(f"--input {input_path!r} is a {kind}, not a regular file.")
    elif not storage.is_folder(input_path):
        where = " (no object under that prefix)" if storage.is_remote(input_path) else ""
        raise ValueError(f"--input {input_path!r} does not exist{where}.")
    if not is_manifest(input_path):
        if not columns.is_default:
            raise ValueError(
                f"--input {input_path!r} is a folder, which gives one class per image "
                f"(its class folder); --multi_label, --label_column, --target_columns "
                f"and --carry_columns read a .csv or .jsonl manifest.")
        return detect_split_layout(storage.absolute(input_path))
    if input_path.lower().endswith(".csv"):
        read_csv_header(input_path, columns)
    return None


class _ParseManifestRow(beam.DoFn):
    def __init__(self, manifest_path: str, header: tuple[str, ...] | None,
                 allow_outside_root: bool, columns: LabelColumns) -> None:
        self._manifest_path = manifest_path
        self._manifest_dir = posixpath.dirname(manifest_path)
        self._header = header  # None: JSON Lines.
        self._allow_outside_root = allow_outside_root
        self._columns = columns

    def process(self, numbered: text_rows.NumberedRow) -> Iterator[Any]:
        yield from dead_letters.route(self._parse(numbered))

    def _parse(self, numbered: text_rows.NumberedRow) -> ImageRecord | Rejection:
        source = f"{self._manifest_path}:{numbered.line}"  # The line the row starts on.
        where = ("line" if numbered.last_line == numbered.line
                 else f"row (lines {numbered.line}-{numbered.last_line})")
        row = None if numbered.problem else (
            text_rows.parse_jsonl_line(numbered.text) if self._header is None
            else text_rows.parse_csv_line(numbered.text, self._header))
        if row is None:
            what = (f"Manifest {where} is {numbered.problem}" if numbered.problem
                    else f"Cannot parse manifest {where}")
            return Rejection(key=source, source=source, message=f"{what}: {numbered.text[:200]!r}",
                             reason=dead_letters.MALFORMED_MANIFEST_ROW)
        result = record_from_row(row, self._manifest_dir, source, self._allow_outside_root,
                                 self._columns, from_csv=self._header is not None)
        if isinstance(result, Rejection) and where != "line":
            result = dataclasses.replace(
                result, message=f"{result.message} (The row spans lines {numbered.line}-"
                                f"{numbered.last_line}: a quoted field holds a line break.)")
        return result


def _relative(path: str, root: str) -> str:  # A listed path below root, with "/".
    return path[len(root):].lstrip("/\\").replace(os.sep, "/")


def _listed_once(root: str, allow_outside_root: bool) -> Iterator[Any]:
    """The folder's files (``storage.list_tree``), a file whose key an earlier one
    has a ``duplicate_key``: only a UTF-8 name spelled like another's escape can."""
    kept: dict[str, str] = {}
    for listed in storage.list_tree(root, allow_outside_root):
        key = local_tree.escape_name(_relative(listed.path, root))
        if "%" in key and kept.setdefault(key, listed.path) != listed.path:
            yield Rejection(key=key, source=local_tree.escape_name(listed.path),
                            reason=dead_letters.DUPLICATE_KEY,
                            message=f"Key listed twice; kept the file {kept[key]!r}.")
        else:
            yield listed


class _FolderPathToRecord(beam.DoFn):
    def __init__(self, root: str, split_layout: bool, allow_outside_root: bool) -> None:
        self._root = root
        self._split_layout = split_layout
        self._allow_outside_root = allow_outside_root

    def process(self, listed: Any) -> Iterator[Any]:  # storage.Listed or a Rejection
        result = listed if isinstance(listed, Rejection) else record_from_folder_path(
            listed.path, self._root, self._split_layout, self._allow_outside_root,
            None if listed.info is None else (listed.info.size, listed.info.mtime))
        if result is not None:
            yield from dead_letters.route(result)


def _keep_first_of_duplicates(element: tuple[str, Iterable[ImageRecord]]
                              ) -> Iterator[Any]:
    """One record per key: the first by ``ImageRecord.sort_key`` (uri, label, targets,
    carried values, split); the others are dead letters (``duplicate_key``), so a
    listed image never silently appears twice."""
    key, records = element
    ordered = sorted(records, key=ImageRecord.sort_key)
    yield ordered[0]
    for extra in ordered[1:]:
        yield from dead_letters.route(Rejection(
            key=key, source=extra.source, reason=dead_letters.DUPLICATE_KEY,
            message=f"Key listed {len(ordered)} times; kept the row for {ordered[0].uri!r}."))


class ReadImageRecords(beam.PTransform):
    """Lists the input (folder or manifest) as ``ImageRecord``s plus rejections.

    Returns ``(records, rejected)``: a PCollection of ``ImageRecord``s with unique
    keys and one of ``Rejection``s (rows or files that name no usable image, and
    duplicate keys). Every listed input ends in exactly one of the two.
    ``split_layout`` is a folder's :func:`check_input` result (None: detected here).
    """

    def __init__(self, input_path: str, allow_outside_root: bool = False,
                 columns: LabelColumns = labels.ONE_CLASS,
                 split_layout: bool | None = None) -> None:
        super().__init__()
        self._input = input_path
        self._allow_outside_root = allow_outside_root
        self._columns = columns
        self._split_layout = split_layout

    def expand(self, pbegin: beam.pvalue.PBegin) -> tuple[beam.PCollection, ...]:
        if not is_manifest(self._input):
            root = storage.absolute(self._input)
            split_layout = (detect_split_layout(root) if self._split_layout is None
                            else self._split_layout)
            # Listed on a worker, so a large folder is not pickled into the job graph.
            paths = (
                pbegin
                | "StartListing" >> beam.Create([root])
                | "ListImageFiles" >> beam.FlatMap(
                    _listed_once, allow_outside_root=self._allow_outside_root)
            )
            listed = (
                paths
                | "PathsToRecords" >> beam.ParDo(
                    _FolderPathToRecord(root, split_layout,
                                        self._allow_outside_root)).with_outputs(
                        REJECTED, main="records")
            )
            return listed.records, listed[REJECTED]
        path = storage.absolute(self._input)
        header = (read_csv_header(path, self._columns) if path.lower().endswith(".csv")
                  else None)
        parsed = (
            pbegin
            | "StartManifest" >> beam.Create([path])
            # Streamed row by row on a worker (not pickled into the job graph, so large
            # manifests stay within Dataflow's graph limits): NumberedRow(line, text)
            | "NumberManifestRows" >> beam.FlatMap(
                text_rows.numbered_rows, skip_header=header is not None,
                csv_quoting=header is not None)
            | "ReshuffleManifestRows" >> beam.Reshuffle()
            | "ParseManifestRows" >> beam.ParDo(
                _ParseManifestRow(path, header, self._allow_outside_root,
                                  self._columns)).with_outputs(
                    REJECTED, main="records")
        )
        unique = (
            parsed.records
            | "KeyByKey" >> beam.Map(lambda record: (record.key, record))
            | "GroupByKey" >> beam.GroupByKey()
            | "DropDuplicateKeys" >> beam.FlatMap(_keep_first_of_duplicates).with_outputs(
                REJECTED, main="records")
        )
        rejected = ((parsed[REJECTED], unique[REJECTED])
                    | "FlattenListingRejections" >> beam.Flatten())
        return unique.records, rejected
