"""Random access to a split's records without TensorFlow: for PyTorch, JAX/Grain, NumPy.

    from reader.records import ShardedRecords

    train = ShardedRecords("out/images", "train")
    len(train)        # the manifest's num_records
    train[0]          # {"image": uint8 [H, W, 3], "label": ..., "key": "...", ...}

``ShardedRecords`` is a random-access data source as Grain and PyTorch define one
(``__len__`` and ``__getitem__``): Grain's ``MapDataset.source(records)`` shuffles it
globally and checkpoints an index; PyTorch's ``DataLoader`` takes it as a map-style
``Dataset`` and splits the indices between its worker processes. It reads datasets
written with ``--compression=none`` (GZIP streams cannot be entered in the middle):
each shard's record index gives every record's place in its file, index ``i`` of the
split is record ``i`` counting through the shards in manifest order.

Each read is one ranged read of the record's bytes (``os.pread`` on a local file,
``fsspec`` for a URI such as ``gs://``), both TFRecord CRCs checked, the Example
parsed by ``protobuf`` (:mod:`reader.format.example_proto`) and the image decoded by Pillow
(libjpeg-turbo's accurate integer IDCT, the pixels ``make_dataset`` decodes). Nothing
here imports TensorFlow (docs/READER.md: "From PyTorch", "From JAX / Grain").
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import io
import os
import posixpath
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, BinaryIO, Protocol

import numpy as np
from PIL import Image

from reader.format import contract, example_proto, record_index
from reader.format.contract import IMAGES, MULTI_LABEL, DatasetError

# Stored features that hold text (decoded to ``str``); ``image`` stays bytes until
# decoded.
_BYTES_FEATURES = frozenset({contract.IMAGE_KEY})


def _is_uri(path: str) -> bool:
    return "://" in path


class Files(Protocol):
    """Another way to reach a dataset's files than this module's own (a program
    with a storage client of its own passes one to :func:`files_through`)."""

    def read(self, path: str) -> bytes: ...  # FileNotFoundError if it is not there.
    def open(self, path: str) -> BinaryIO: ...
    def write(self, path: str, data: bytes) -> None: ...
    def names(self, directory: str) -> list[str]: ...  # Files directly in it.


# Set by files_through for the calls made inside it, in this thread (a context
# variable: Beam runs bundles in several threads of one process).
_FILES: contextvars.ContextVar[Files | None] = contextvars.ContextVar("files", default=None)


@contextlib.contextmanager
def files_through(files: Files) -> Iterator[None]:
    """Inside it, this module's whole-file reads, streams, writes and listings (the
    report's, the statistics files') go through ``files`` instead of fsspec.

    The ETL job writes its report this way, through its own storage layer: a
    project installed without gcsfs (what ``pip install`` and Dataflow's workers
    get) writes to ``gs://`` with the client it already has, and needs no second
    set of credentials. Random access (:class:`ShardedRecords`) is not affected.
    """
    token = _FILES.set(files)
    try:
        yield
    finally:
        _FILES.reset(token)


def _fs(path: str) -> Any:
    try:
        import fsspec
    except ImportError as e:
        raise ImportError(f"Reading {path!r} needs fsspec and the filesystem for its "
                          f"scheme (e.g. `pip install gcsfs` for gs://).") from e
    return fsspec.core.url_to_fs(path)[0]


def read_file(path: str) -> bytes:
    """The whole file at ``path`` (local, or a URI through fsspec)."""
    if (files := _FILES.get()) is not None:
        return files.read(path)
    if _is_uri(path):
        return _fs(path).cat_file(path)
    with open(path, "rb") as f:
        return f.read()


def open_file(path: str) -> BinaryIO:
    """``path`` opened for streaming reads (local, or a URI through fsspec)."""
    if (files := _FILES.get()) is not None:
        return files.open(path)
    if _is_uri(path):
        return _fs(path).open(path, "rb")
    return open(path, "rb")


def write_file(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path`` whole (local, with its folders made, or a URI)."""
    if (files := _FILES.get()) is not None:
        files.write(path, data)
        return
    if _is_uri(path):
        _fs(path).pipe_file(path, data)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def file_names(directory: str) -> list[str]:
    """Names of the files directly in ``directory`` (local, or a URI through
    fsspec); FileNotFoundError if there is no such folder."""
    if (files := _FILES.get()) is not None:
        return files.names(directory)
    if _is_uri(directory):
        fs = _fs(directory)
        return [posixpath.basename(p.rstrip("/")) for p in fs.ls(directory, detail=False)]
    return os.listdir(directory)


def _read_if_there(path: str) -> bytes | None:
    try:
        return read_file(path)
    except FileNotFoundError:
        return None


def load_manifest(data_dir: str) -> dict[str, Any]:
    """``<data_dir>/manifest.json``, read without TensorFlow.

    Raises:
        FileNotFoundError: no manifest (the job did not finish).
        DatasetError: the manifest is not a JSON object.
    """
    return contract.load_manifest(data_dir, _read_if_there)


class _Shards:
    """Ranged reads of a split's shard files: on a disk one open file per shard and
    process (``os.pread``: no shared file position, so threads need no lock); at a
    URI one request per read through the scheme's fsspec filesystem."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)
        self._lock = threading.Lock()
        self._files: dict[int, Any] = {}
        self._remote: Any = None
        self._pid = os.getpid()

    def read(self, shard: int, offset: int, length: int) -> bytes:
        path = self.paths[shard]
        if _is_uri(path):
            return self._filesystem().cat_file(path, start=offset, end=offset + length)
        return os.pread(self._fd(shard), length, offset)

    def _fd(self, shard: int) -> int:
        with self._lock:
            self._after_fork()
            if shard not in self._files:
                self._files[shard] = os.open(self.paths[shard], os.O_RDONLY)
            return self._files[shard]

    def _filesystem(self) -> Any:
        with self._lock:
            self._after_fork()
            if self._remote is None:
                self._remote = _fs(self.paths[0])
            return self._remote

    def _after_fork(self) -> None:
        """A forked worker opens its own files and connections."""
        if self._pid != os.getpid():
            self._files, self._remote, self._pid = {}, None, os.getpid()

    def close(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                for fd in self._files.values():
                    os.close(fd)
            self._files = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"paths": self.paths}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["paths"])


class ShardedRecords:
    """The records of one split, by global index, as dicts of NumPy values.

    Args:
        data_dir: a dataset written with ``--compression=none`` (local or a URI).
        split: ``"train"``, ``"validation"`` or ``"test"``.
        features: the stored features to return (default: all the manifest lists).
        decode_images: decode ``image`` to ``uint8 [H, W, 3]`` (False: the stored
            JPEG/PNG/raw bytes).

    Each item maps a feature name to its value, as ``make_dataset`` gives it:
    ``image`` ``uint8 [H, W, 3]``; ``label`` an ``int64`` class id (``-1``: not in
    train), or for multi-label datasets a ``float32 [num_classes]`` multi-hot;
    ``target``, ``window`` and the other numeric blocks arrays of their manifest
    shape; ``key``, ``label_name``, ``series_id`` and carried columns ``str`` (a
    multi-label ``label_name`` a list of ``str``).

    Deterministic (item ``i`` is always the same record), safe to call from several
    threads, picklable (worker processes reopen the files). The manifest's record
    indexes are read, and checked against their sha256, when it is made.

    Raises:
        FileNotFoundError: no manifest.
        DatasetError: the dataset is GZIP-compressed, or a record index is missing,
            altered or does not match its shard's record count; on a read, a record
            that fails its CRC checks or does not parse (naming file and offset).
        ValueError: an unknown split or feature.
    """

    def __init__(self, data_dir: str, split: str, *,
                 features: Sequence[str] | None = None,
                 decode_images: bool = True) -> None:
        self.data_dir = data_dir.rstrip("/")
        self.split = split
        self.manifest = load_manifest(self.data_dir)
        self._check_readable()
        described = self.manifest["features"]
        names = sorted(described) if features is None else list(features)
        unknown = sorted(set(names) - set(described))
        if unknown:
            raise ValueError(f"Unknown features {unknown}: {self.data_dir!r} stores "
                             f"{sorted(described)}.")
        self._features = {name: described[name] for name in names}
        self._decode_images = decode_images
        shards = self.manifest["splits"][split]["shards"]
        self._shards = _Shards([posixpath.join(self.data_dir, s["path"]) for s in shards])
        self._offsets, self._lengths, self._ends = self._read_indexes(shards)

    def _check_readable(self) -> None:
        contract.check_splits(self.manifest, self.data_dir, [self.split])
        if contract.compression_of(self.manifest) != contract.NO_COMPRESSION:
            raise DatasetError(
                f"{self.data_dir!r} holds GZIP shards, which cannot be read from the "
                f"middle; rebuild it with --compression=none for random access (or "
                f"read it with reader.make_dataset).")

    def _read_indexes(self, shards: Sequence[Mapping[str, Any]]
                      ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        offsets, lengths = [], []
        for shard in shards:
            entry = shard.get("index")
            where = posixpath.join(self.data_dir, entry["path"] if entry else shard["path"])
            if entry is None:
                raise DatasetError(f"Shard {where!r} has no record index in the manifest.")
            text = read_file(where)
            if hashlib.sha256(text).hexdigest() != entry["sha256"]:
                raise DatasetError(f"Record index {where!r} does not match the sha256 in "
                                   f"the manifest: it was altered after the job wrote it.")
            shard_offsets, shard_lengths = record_index.parse_index(text.decode("ascii"),
                                                                    where)
            if len(shard_offsets) != shard["num_records"]:
                raise DatasetError(f"Record index {where!r} lists {len(shard_offsets)} "
                                   f"records, the manifest {shard['num_records']}.")
            offsets.append(shard_offsets)
            lengths.append(shard_lengths)
        ends = np.cumsum([len(o) for o in offsets], dtype=np.int64)
        return offsets, lengths, ends

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self._item(self.read_record(index))

    def read_record(self, index: int) -> bytes:
        """The serialized Example at global ``index``, its CRCs checked."""
        position = int(index)
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(f"Record {index} is outside the {len(self)} records of "
                             f"{self.split!r}.")
        shard = int(np.searchsorted(self._ends, position, side="right"))
        local = position - (int(self._ends[shard - 1]) if shard else 0)
        offset = int(self._offsets[shard][local])
        frame = self._shards.read(shard, offset, int(self._lengths[shard][local]))
        where = f"{self._shards.paths[shard]} at byte {offset:,} (record {local})"
        try:
            return record_index.unframe(frame, where)
        except record_index.RecordError as e:
            raise DatasetError(str(e)) from e

    def _item(self, serialized: bytes) -> dict[str, Any]:
        try:
            item = example_proto.parse_example(serialized, self._features)
        except example_proto.ExampleParseError as e:
            raise DatasetError(f"{self.data_dir!r} {self.split}: {e}") from e
        for name, value in item.items():
            if name in _BYTES_FEATURES or self._features[name]["dtype"] != "string":
                continue
            item[name] = (value.decode("utf-8") if isinstance(value, bytes)
                          else [v.decode("utf-8") for v in value])
        if self.manifest.get("task") == MULTI_LABEL and contract.LABEL_KEY in item:
            item[contract.LABEL_KEY] = _multi_hot(item[contract.LABEL_KEY],
                                                  len(self.manifest["label_vocab"]))
        if (self._decode_images and contract.IMAGE_KEY in item
                and self.manifest.get("kind", IMAGES) == IMAGES):
            item[contract.IMAGE_KEY] = decode_image(item[contract.IMAGE_KEY],
                                                    self.manifest["preprocessing"])
        return item

    def close(self) -> None:
        """Closes this process's shard files (reads reopen them)."""
        self._shards.close()

    def __repr__(self) -> str:
        return (f"ShardedRecords({self.data_dir!r}, {self.split!r}: {len(self)} records "
                f"in {len(self._shards.paths)} shards)")


def _multi_hot(ids: np.ndarray, num_classes: int) -> np.ndarray:
    """Class ids → ``float32 [num_classes]``; ids ``-1`` (not in train) are ignored,
    as ``reader.tfdata.labels.multi_hot`` does."""
    hot = np.zeros(num_classes, np.float32)
    hot[ids[ids >= 0]] = 1.0
    return hot


def decode_image(encoded: bytes, preprocessing: Mapping[str, Any]) -> np.ndarray:
    """A stored image → ``uint8 [size, size, 3]``: the inverse of the job's encoding,
    decoded by Pillow (JPEG with libjpeg-turbo's accurate integer IDCT, the one
    ``contract.STORED_JPEG_DCT_METHOD`` names).

    Raises:
        DatasetError: the bytes are not an image of the stored format and size.
    """
    size, image_format = int(preprocessing["image_size"]), preprocessing["image_format"]
    if image_format == contract.RAW:
        pixels = np.frombuffer(encoded, np.uint8)
        if pixels.size != size * size * 3:
            raise DatasetError(f"A raw image holds {pixels.size} bytes, not "
                               f"{size}x{size}x3.")
        return pixels.reshape(size, size, 3)
    try:
        with Image.open(io.BytesIO(encoded), formats=[image_format.upper()]) as image:
            pixels = np.asarray(image.convert("RGB"))
    except (OSError, ValueError) as e:
        raise DatasetError(f"A stored {image_format} image does not decode: {e}") from e
    if pixels.shape != (size, size, 3):
        raise DatasetError(f"A stored image is {pixels.shape}, not ({size}, {size}, 3).")
    return pixels
