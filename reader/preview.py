"""A PNG contact sheet of a dataset: images with their label names, or windows with targets.

    python -m reader.preview DATA_DIR [--split train] [--out preview.png] [--n 64]
                             [--augment] [--seed 0]

Images are shown as stored (the pixels ``make_dataset`` decodes), captioned with the
name of their label id (every name of a multi-label set) and their numeric targets in
the input's units (``column=value``, the manifest's z-scoring undone), each beside its
augmented version with ``--augment``.
Time-series windows are drawn in the input's units (the manifest's normalisation
undone: ``x = z * std + mean``), followed by their forecast target, or captioned
with their label. Which examples: ``make_dataset``'s shuffled order with ``--seed``,
so the same command draws the same sheet.

Drawing needs matplotlib, which a training install need not have
(``pip install matplotlib``); the rest of ``reader`` never imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from reader.format import contract
from reader.format.contract import FORECAST, IMAGES
from reader.tfdata import augment as augment_lib
from reader.tfdata.dataset_info import DatasetInfo, open_dataset
from reader.tfdata.pipeline import make_dataset

# Shown tiles are at least / at most this many pixels wide: small images are enlarged
# by an integer factor (each pixel a square block), large ones shrunk by area.
MIN_TILE = 96
MAX_TILE = 160
CAPTION_HEIGHT = 16
GAP = 4
_BACKGROUND = 255


@dataclasses.dataclass(frozen=True)
class ImagePreview:
    """What an image sheet shows.

    Attributes:
        images: ``uint8 [n, s, s, 3]``, as stored.
        augmented: the same images augmented (``[n, s, s, 3]`` uint8), or None.
        captions: each image's label names (comma-separated; ``(no label)`` for an
            empty multi-label set), then on a new line its targets, if any.
        targets: ``float64 [n, k]`` numeric targets in the input's units, or None.
        target_columns: the ``k`` target names.
    """

    images: np.ndarray
    augmented: np.ndarray | None
    captions: list[str]
    targets: np.ndarray | None = None
    target_columns: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class WindowPreview:
    """What a time-series sheet shows, in the input's units where known.

    Attributes:
        windows: ``[n, W, F]``.
        targets: ``[n, H, F]`` (forecast) or None (classification).
        captions: ``series_id @ window_start``, and the label name when classified.
        value_columns: names of the ``F`` columns.
        stride: rows between window steps (the target continues at the same stride).
        units: ``"input"``, or ``"normalised"`` when the statistics are per series
            (they live only in ``transform_fn``).
    """

    windows: np.ndarray
    targets: np.ndarray | None
    captions: list[str]
    value_columns: list[str]
    stride: int
    units: str


def label_caption(info: DatasetInfo, label: int, label_name: str) -> str:
    """The vocabulary name of ``label``; the stored name if it is not in the vocabulary."""
    if 0 <= label < len(info.label_vocab):
        return info.label_vocab[label]
    return f"{label_name} (not in train)"


def labels_caption(info: DatasetInfo, labels: Sequence[int], label_names: Sequence[str]
                   ) -> str:
    """The names of a multi-label set, comma-separated; ``(no label)`` if empty."""
    return ", ".join(label_caption(info, int(label), name)
                     for label, name in zip(labels, label_names, strict=True)) or (
        "(no label)")


def targets_caption(columns: Sequence[str], values: Sequence[float]) -> str:
    """``column=value`` for each target, 4 significant digits."""
    return ", ".join(f"{column}={value:.4g}"
                     for column, value in zip(columns, values, strict=True))


def _first_examples(info: DatasetInfo, split: str, n: int, seed: int,
                    features: list[str]) -> dict[str, Any]:
    """The first batch's features: arrays, and lists of lists for var_len ones."""
    dataset = make_dataset(info.data_dir, split, batch_size=n, shuffle=True, seed=seed,
                           features=features)
    batch, _ = next(iter(dataset))
    return {name: value.to_list() if isinstance(value, tf.RaggedTensor) else value.numpy()
            for name, value in batch.items()}


def _image_captions(info: DatasetInfo, batch: dict[str, Any],
                    targets: np.ndarray | None) -> list[str]:
    count = len(batch[contract.IMAGE_KEY])
    lines: list[list[str]] = [[] for _ in range(count)]
    if info.has_classes:
        for i, (label, name) in enumerate(zip(batch[contract.LABEL_KEY],
                                              batch[contract.LABEL_NAME_KEY], strict=True)):
            lines[i].append(
                labels_caption(info, label, [n.decode() for n in name]) if info.multi_label
                else label_caption(info, int(label), name.decode()))
    if targets is not None:
        for i, values in enumerate(targets):
            lines[i].append(targets_caption(info.target_columns, values))
    return ["\n".join(parts) for parts in lines]


def image_preview(data_dir: str, split: str = contract.TRAIN, n: int = 64,
                  augment: bool = False, seed: int = 0) -> ImagePreview:
    """The first ``n`` images of ``split`` in ``make_dataset``'s order for ``seed``."""
    info = open_dataset(data_dir, splits=[split])
    if info.kind != IMAGES:
        raise ValueError(f"{data_dir!r} holds {info.kind}, not images.")
    names = [contract.IMAGE_KEY]
    names += [contract.LABEL_KEY, contract.LABEL_NAME_KEY] if info.has_classes else []
    names += [contract.TARGET_KEY] if info.target_columns else []
    batch = _first_examples(info, split, n, seed, names)
    images = batch[contract.IMAGE_KEY]  # float32 in [0, 1]
    augmented = None
    if augment:
        # The reader's own augmentation, on exactly these images.
        augmented = augment_lib.augment_images(
            tf.constant(images), tf.constant([seed, 1], tf.int64),
            augment_lib.Augmentation()).numpy()
        augmented = _to_uint8(augmented)
    targets = (info.denormalize_targets(batch[contract.TARGET_KEY])
               if info.target_columns else None)
    return ImagePreview(_to_uint8(images), augmented, _image_captions(info, batch, targets),
                        targets, info.target_columns)


def _to_uint8(images: np.ndarray) -> np.ndarray:
    return np.clip(np.round(images * 255.0), 0, 255).astype(np.uint8)


def window_preview(data_dir: str, split: str = contract.TRAIN, n: int = 64,
                   seed: int = 0) -> WindowPreview:
    """The first ``n`` windows of ``split``, de-normalised with the manifest's statistics."""
    info = open_dataset(data_dir, splits=[split])
    if info.kind == IMAGES:
        raise ValueError(f"{data_dir!r} holds images, not time series.")
    forecast = info.task == FORECAST
    names = [contract.WINDOW_KEY, contract.SERIES_ID_KEY, contract.WINDOW_START_KEY]
    names += [contract.TARGET_KEY] if forecast else [contract.LABEL_KEY,
                                                     contract.LABEL_NAME_KEY]
    batch = _first_examples(info, split, n, seed, names)
    normalisation = info.manifest.get("normalisation", {})
    windows = batch[contract.WINDOW_KEY].astype(np.float64)
    targets = batch[contract.TARGET_KEY].astype(np.float64) if forecast else None
    units = "normalised"
    if not normalisation.get("per_series", True):
        mean = np.asarray(normalisation["mean"], np.float64)
        std = np.asarray(normalisation["std"], np.float64)
        windows = windows * std + mean
        targets = None if targets is None else targets * std + mean
        units = "input"
    captions = []
    for i in range(len(windows)):
        caption = (f"{batch[contract.SERIES_ID_KEY][i].decode()} @ "
                   f"{batch[contract.WINDOW_START_KEY][i].decode()}")
        if not forecast:
            caption += ": " + label_caption(info, int(batch[contract.LABEL_KEY][i]),
                                            batch[contract.LABEL_NAME_KEY][i].decode())
        captions.append(caption)
    geometry = info.manifest.get("timeseries", {})
    columns = list(geometry.get("value_columns", [f"value {f}" for f in
                                                  range(windows.shape[-1])]))
    return WindowPreview(windows, targets, captions, columns,
                         int(geometry.get("stride", 1)), units)


def tile_size(image_size: int) -> int:
    """Pixels a stored ``image_size`` image takes on the sheet."""
    if image_size < MIN_TILE:
        return image_size * math.ceil(MIN_TILE / image_size)
    return min(image_size, MAX_TILE)


def _tile(image: np.ndarray, size: int) -> np.ndarray:
    if image.shape[0] == size:
        return image
    if size % image.shape[0] == 0:  # Enlarge: each pixel becomes a square block.
        factor = size // image.shape[0]
        return np.repeat(np.repeat(image, factor, axis=0), factor, axis=1)
    shrunk = tf.image.resize(image, [size, size], method="area", antialias=True)
    return _to_uint8(shrunk.numpy() / 255.0)


@dataclasses.dataclass(frozen=True)
class SheetLayout:
    """Where each example goes on an image sheet (pixels, origin top left).

    A cell is one tile, or two side by side (image, augmented) with ``GAP`` between,
    above ``caption_lines`` caption strips; cells are ``GAP`` apart and the sheet has a
    ``GAP`` margin.
    """

    columns: int
    rows: int
    tile: int
    tiles_per_cell: int
    caption_lines: int = 1

    @property
    def cell_width(self) -> int:
        return self.tiles_per_cell * self.tile + (self.tiles_per_cell - 1) * GAP

    @property
    def cell_height(self) -> int:
        return self.tile + self.caption_lines * CAPTION_HEIGHT

    @property
    def caption_chars(self) -> int:
        """Characters of a caption line that fit under a cell."""
        return max(4, self.cell_width // 6)

    @property
    def width(self) -> int:
        return GAP + self.columns * (self.cell_width + GAP)

    @property
    def height(self) -> int:
        return GAP + self.rows * (self.cell_height + GAP)

    def tile_origin(self, index: int, which: int = 0) -> tuple[int, int]:
        """(top, left) of example ``index``'s tile ``which`` (1: augmented)."""
        row, column = divmod(index, self.columns)
        return (GAP + row * (self.cell_height + GAP),
                GAP + column * (self.cell_width + GAP) + which * (self.tile + GAP))


def sheet_layout(count: int, image_size: int, augmented: bool,
                 captions: Sequence[str] = ()) -> SheetLayout:
    """The layout of ``count`` examples, with room for the longest of ``captions``."""
    tiles_per_cell = 2 if augmented else 1
    columns = max(1, math.ceil(math.sqrt(count / tiles_per_cell)))
    layout = SheetLayout(columns=columns, rows=math.ceil(count / columns),
                         tile=tile_size(image_size), tiles_per_cell=tiles_per_cell)
    lines = max([len(wrap_caption(c, layout.caption_chars)) for c in captions] + [1])
    return dataclasses.replace(layout, caption_lines=lines)


def wrap_caption(caption: str, max_chars: int) -> list[str]:
    """A caption's lines on the sheet: each of its lines wrapped at ``max_chars``."""
    return [wrapped for line in caption.split("\n")
            for wrapped in textwrap.wrap(line, max_chars, break_on_hyphens=False) or [""]]


def contact_sheet(preview: ImagePreview) -> tuple[np.ndarray, SheetLayout]:
    """The sheet's pixels (``uint8 [height, width, 3]``, captions not drawn) and layout."""
    layout = sheet_layout(len(preview.images), preview.images.shape[1],
                          preview.augmented is not None, preview.captions)
    sheet = np.full((layout.height, layout.width, 3), _BACKGROUND, np.uint8)
    versions = [preview.images] + ([preview.augmented] if preview.augmented is not None
                                   else [])
    for index in range(len(preview.images)):
        for which, images in enumerate(versions):
            top, left = layout.tile_origin(index, which)
            sheet[top:top + layout.tile, left:left + layout.tile] = _tile(
                images[index], layout.tile)
    return sheet, layout


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ImportError("reader.preview draws with matplotlib, which is not installed: "
                          "pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_image_sheet(preview: ImagePreview, out: str, title: str) -> SheetLayout:
    """Writes the contact sheet with captions to ``out`` (PNG), pixels 1:1."""
    plt = _pyplot()
    sheet, layout = contact_sheet(preview)
    title_height = 2 * CAPTION_HEIGHT
    dpi = 100
    fig = plt.figure(figsize=(layout.width / dpi, (layout.height + title_height) / dpi),
                     dpi=dpi)
    fig.figimage(sheet, xo=0, yo=0, origin="upper")
    height = layout.height + title_height
    fig.text(GAP / layout.width, 1 - (CAPTION_HEIGHT * 0.8) / height, title,
             fontsize=9, va="center", ha="left")
    for index, caption in enumerate(preview.captions):
        top, left = layout.tile_origin(index)
        for line, text in enumerate(wrap_caption(caption, layout.caption_chars)):
            # Figure coordinates grow upwards; the sheet sits at the bottom of the figure.
            y = (layout.height - (top + layout.tile + CAPTION_HEIGHT * (line + 0.5))
                 ) / height
            fig.text(left / layout.width, y, text, fontsize=8, va="center", ha="left")
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    return layout


def save_window_sheet(preview: WindowPreview, out: str, title: str) -> None:
    """Writes a grid of window plots (window, then target) to ``out`` (PNG)."""
    plt = _pyplot()
    count = len(preview.windows)
    columns = max(1, math.ceil(math.sqrt(count)))
    rows = math.ceil(count / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(2.4 * columns, 1.9 * rows + 0.4),
                             squeeze=False, dpi=100)
    window_size = preview.windows.shape[1]
    steps = np.arange(window_size) * preview.stride
    for index, ax in enumerate(axes.ravel()):
        if index >= count:
            ax.axis("off")
            continue
        for f, column in enumerate(preview.value_columns):
            line, = ax.plot(steps, preview.windows[index, :, f], lw=1,
                            label=column if index == 0 else None)
            if preview.targets is not None:
                horizon = preview.targets.shape[1]
                after = (window_size - 1 + np.arange(1, horizon + 1)) * preview.stride
                ax.plot(after, preview.targets[index, :, f], "o", ms=2.5,
                        color=line.get_color())
        ax.set_title(preview.captions[index], fontsize=7)
        ax.tick_params(labelsize=6)
    units = "input units" if preview.units == "input" else (
        "normalised units: per-series statistics are only in transform_fn")
    what = "window, then target (dots)" if preview.targets is not None else "window"
    fig.suptitle(f"{title}: {', '.join(preview.value_columns)}; {what}, {units}",
                 fontsize=9)
    if len(preview.value_columns) > 1:
        fig.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reader.preview",
        description="Writes a PNG contact sheet of a dataset's examples.")
    parser.add_argument("data_dir")
    parser.add_argument("--split", default=contract.TRAIN, choices=contract.SPLITS)
    parser.add_argument("--out", default="preview.png")
    parser.add_argument("--n", type=int, default=64, help="Examples to show.")
    parser.add_argument("--augment", action="store_true",
                        help="Images: show each beside its augmented version.")
    parser.add_argument("--seed", type=int, default=0,
                        help="Which examples (make_dataset's shuffle) and augmentations.")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n must be >= 1, got {args.n}.")
    info = open_dataset(args.data_dir, splits=[args.split])
    title = f"{info.manifest.get('name', args.data_dir)} / {args.split}"
    if info.kind == IMAGES:
        preview = image_preview(args.data_dir, args.split, args.n, args.augment,
                                args.seed)
        save_image_sheet(preview, args.out, title + (": image | augmented" if args.augment
                                                      else ""))
        shown = len(preview.images)
    else:
        if args.augment:
            parser.error("--augment applies to images only.")
        windows = window_preview(args.data_dir, args.split, args.n, args.seed)
        save_window_sheet(windows, args.out, title)
        shown = len(windows.windows)
    print(f"wrote {args.out}: {shown} examples ({info.kind}) of {args.data_dir}, "
          f"split {args.split}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
