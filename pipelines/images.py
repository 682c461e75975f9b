"""Image job: a labelled image folder or manifest → sharded GZIP TFRecords + manifest.

Usage::

    python -m pipelines.images --input=<folder | manifest.csv | manifest.jsonl> \\
        --output_dir=<dir> [--image_size=224 --image_format=jpeg ...] [Beam flags]

Any standard Beam flag is accepted (``--runner``, ``--direct_num_workers``,
``--direct_running_mode``, Dataflow's ``--project`` ...). Without ``--runner`` the
job runs locally and offline on Beam's FnApiRunner (the DirectRunner's batch engine).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
import tensorflow_transform.beam as tft_beam
from apache_beam.options.pipeline_options import PipelineOptions
from tensorflow_transform.tf_metadata import dataset_metadata

from etl import contract, dead_letters, image_codec, image_preprocessing, sharding, splits
from etl.contract import load_manifest
from etl.examples import serialize_example
from etl.image_loading import REJECTED, LoadImages, split_index
from etl.image_sources import ReadImageRecords, check_input
from etl.manifest import WriteManifest
from etl.output_dir import prepare_output_dir
from etl.sharding import KeyedExample, WriteShards
from pipelines import runner_defaults, summary


class ImagesOptions(PipelineOptions):
    """Options of the image job (Beam's own flags are parsed alongside)."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument(
            "--input", default=None,
            help="Image folder (<root>/<class>/<image> or <root>/<split>/<class>/<image>)"
                 " or a manifest .csv/.jsonl with columns path,label[,split]; paths "
                 "are relative to the manifest's folder.")
        parser.add_argument(
            "--output_dir", default=None,
            help="Where shards, transform_fn/, transformed_metadata/, errors/ and "
                 "manifest.json are written (local path or gs://...).")
        parser.add_argument(
            "--name", default="images",
            help="Dataset name, the shard file prefix: <name>-<split>-SSSSS-of-NNNNN.")
        parser.add_argument(
            "--image_size", type=int, default=224,
            help="Output images are image_size x image_size: shorter side resized to "
                 "this (bilinear, antialiased), then centre-cropped.")
        parser.add_argument(
            "--image_format", default=image_codec.JPEG, choices=image_codec.IMAGE_FORMATS,
            help="Stored encoding: jpeg (smallest, lossy), png (lossless, larger, "
                 "slower to decode), raw (uint8 pixels, largest, no decode). Trade-offs "
                 "measured in docs/FORMAT.md.")
        parser.add_argument(
            "--jpeg_quality", type=int, default=95,
            help="JPEG quality 1-100 when --image_format=jpeg.")
        parser.add_argument(
            "--split_fractions", default="0.8,0.1,0.1",
            help="train,validation,test fractions for hashing keys into splits; "
                 "split folders or a split column in the input take precedence.")
        parser.add_argument(
            "--num_shards", type=int, default=None,
            help="Shards per split (capped at the split's record count). Default: "
                 "from --target_shard_mb.")
        parser.add_argument(
            "--target_shard_mb", type=float,
            default=sharding.DEFAULT_TARGET_SHARD_BYTES / (1024 * 1024),
            help="Target shard size in MiB of serialized examples (before GZIP), "
                 "used when --num_shards is not given.")
        parser.add_argument(
            "--overwrite", action="store_true",
            help="Replace a finished dataset already in --output_dir (refused otherwise).")
        parser.add_argument(
            "--tft_temp_dir", default=None,
            help="tf.Transform scratch directory (must be shared storage on a "
                 "distributed runner). Default: <output_dir>/tmp.")


def _to_keyed_example(instance: dict[str, Any], split: str) -> KeyedExample:
    key = instance[contract.SOURCE_KEY]
    key = key.decode("utf-8") if isinstance(key, bytes) else str(key)
    return KeyedExample(split, key, serialize_example(instance))


def _label_of(element: tuple[str, dict[str, Any]]) -> tuple[tuple[str, str], int]:
    split, raw = element
    return (split, raw["label"]), 1


@dataclasses.dataclass(frozen=True)
class ImageJob:
    """The image job's validated settings (built from ``ImagesOptions``)."""

    input: str
    output_dir: str
    name: str
    preprocessing: image_preprocessing.ImagePreprocessing
    fractions: splits.SplitFractions
    num_shards: int | None
    target_shard_bytes: int
    tft_temp_dir: str
    overwrite: bool

    @classmethod
    def from_options(cls, options: ImagesOptions) -> ImageJob:
        """Validates every option and the input's layout; nothing is written.

        Raises:
            ValueError: naming the flag (or input) at fault.
        """
        # Checked here rather than with argparse's required=True: Beam parses every
        # PipelineOptions subclass in the process, also where these flags are absent.
        for flag in ("input", "output_dir"):
            if not getattr(options, flag):
                raise ValueError(f"--{flag} is required (see --help).")
        target_shard_bytes = int(options.target_shard_mb * 1024 * 1024)
        sharding.plan_num_shards(1, 1, target_shard_bytes, options.num_shards)
        check_input(options.input)
        return cls(
            input=options.input,
            output_dir=options.output_dir,
            name=options.name,
            preprocessing=image_preprocessing.ImagePreprocessing(
                image_size=options.image_size, image_format=options.image_format,
                jpeg_quality=options.jpeg_quality),
            fractions=splits.SplitFractions.parse(options.split_fractions),
            num_shards=options.num_shards,
            target_shard_bytes=target_shard_bytes,
            tft_temp_dir=options.tft_temp_dir or os.path.join(options.output_dir, "tmp"),
            overwrite=options.overwrite,
        )

    def describe_preprocessing(self) -> dict[str, Any]:
        """Every parameter that shapes the output, for the manifest."""
        return {
            **self.preprocessing.describe(),
            "split_fractions": self.fractions.as_dict(),
            "split_rule": "explicit split folder/column, else sha256-based hash of the key",
            "num_shards": self.num_shards,
            "target_shard_bytes": self.target_shard_bytes,
            "sharding": "shard = sha256-based hash of key % num_shards; in-shard order "
                        "by a second hash; empty shard ids dropped",
        }


def build_pipeline(pipeline: beam.Pipeline, job: ImageJob) -> None:
    """Adds the image job's transforms to ``pipeline``."""
    output_dir = job.output_dir

    listed = pipeline | "ReadImageRecords" >> ReadImageRecords(job.input)
    loaded = listed.records | "LoadImages" >> beam.ParDo(
        LoadImages(job.fractions)).with_outputs(REJECTED, main="images")
    # (split, {"image": bytes, "label": str, "key": str})
    images = loaded.images

    rejected_summary = (
        (listed[REJECTED], loaded[REJECTED])
        | "FlattenRejections" >> beam.Flatten()
        | "WriteRejections" >> dead_letters.WriteRejections(output_dir)
    )
    label_counts = (
        images
        | "KeyBySplitAndLabel" >> beam.Map(_label_of)
        | "CountLabels" >> beam.CombinePerKey(sum)
    )

    by_split = images | "PartitionBySplit" >> beam.Partition(split_index,
                                                            len(contract.SPLITS))
    raw_metadata = dataset_metadata.DatasetMetadata.from_feature_spec(
        image_preprocessing.RAW_FEATURE_SPEC)
    preprocessing_fn = functools.partial(image_preprocessing.preprocessing_fn,
                                         config=job.preprocessing)
    keyed_examples = []
    with tft_beam.Context(temp_dir=job.tft_temp_dir):
        raw_by_split = {
            split: by_split[i] | f"DropSplitKey[{split}]" >> beam.Values()
            for i, split in enumerate(contract.SPLITS)
        }
        # Analyzers (the label vocabulary) see the train split only.
        transform_fn = (
            (raw_by_split[contract.TRAIN], raw_metadata)
            | "AnalyzeTrain" >> tft_beam.AnalyzeDataset(preprocessing_fn)
        )
        transform_written = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(
            output_dir)
        for split in contract.SPLITS:
            transformed, _ = (
                ((raw_by_split[split], raw_metadata), transform_fn)
                | f"Transform[{split}]" >> tft_beam.TransformDataset()
            )
            keyed_examples.append(
                transformed | f"Serialize[{split}]" >> beam.Map(_to_keyed_example,
                                                                split=split))

    shards = (
        keyed_examples
        | "FlattenSplits" >> beam.Flatten()
        | "WriteShards" >> WriteShards(output_dir, job.name, num_shards=job.num_shards,
                                       target_shard_bytes=job.target_shard_bytes)
    )
    _ = pipeline | "WriteManifest" >> WriteManifest(
        output_dir, job.name, job.describe_preprocessing(), shards=shards,
        label_counts=label_counts, rejected=rejected_summary,
        transform_written=transform_written)


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the image job and returns the manifest it wrote.

    Raises:
        ValueError: for invalid options or input layouts, before anything runs.
    """
    options = runner_defaults.pipeline_options(argv, ImagesOptions)
    job = ImageJob.from_options(options.view_as(ImagesOptions))
    started = time.monotonic()
    prepare_output_dir(job.output_dir, job.overwrite)
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, job)
    runner_defaults.run_to_completion(pipeline)
    elapsed = time.monotonic() - started
    runner_defaults.remove_temp_dir(job.tft_temp_dir)
    manifest = load_manifest(job.output_dir)
    print(summary.format_summary(job.output_dir, manifest, elapsed))
    return manifest


def main() -> None:
    logging.getLogger().setLevel(logging.WARNING)
    try:
        run(sys.argv[1:])
    except ValueError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
