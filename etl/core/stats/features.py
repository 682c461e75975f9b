"""Statistics of one split in TFDV's format, accumulated on tfx_bsl's sketches.

:class:`SplitStatistics` takes columns of per-example facts and builds the
``DatasetFeatureStatistics`` that TFDV's ``BasicStatsGenerator`` and
``TopKUniquesSketchStatsGenerator`` would build from the same examples, with their
default options, so ``tfdv.load_statistics``, TFDV's schema inference, drift
comparators and Facets read it unchanged:

- every feature: ``common_stats`` (examples with and without the feature, values per
  example, a QUANTILES histogram of them);
- INT and FLOAT: exact count, mean, population standard deviation, zeros, min and
  max; median, a STANDARD (10 equal-width buckets) and a QUANTILES (10 buckets)
  histogram from one quantiles sketch (rank error <= ``EPSILON`` * values; a batch
  of more than 65,536 values feeds it a stratified quarter of them, which adds about
  0.001, ``stats_partials.sketch_sample``);
- STRING: average length in bytes, distinct values (``unique``), the 20 most frequent
  values (``top_values``) and all values by frequency (``rank_histogram``).

Value counts are exact while a feature has at most ``EXACT_COUNT_LIMIT`` (1000)
distinct values and ``unique`` while it has at most ``KMV_BUCKETS`` (1024); beyond
that both are the sketches' estimates (counts are then upper bounds).

Usage::

    stats = SplitStatistics([FeatureSpec("width", INT), FeatureSpec("label", STRING)])
    stats.add(3, {"width": np.array([640, 800, 1024]), "label": ["cat", "dog", None]})
    write_statistics("statistics/train.tfrecord", stats.to_proto("train"))
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tensorflow_metadata.proto.v0 import statistics_pb2

from etl.core.io import storage
from etl.core.stats.columns import FLOAT, INT, STRING, FeatureSpec, to_column
from etl.core.stats.partials import EPSILON, EXACT_COUNT_LIMIT, KMV_BUCKETS, FeatureStatistics
from reader.format import record_index

__all__ = ["EPSILON", "EXACT_COUNT_LIMIT", "FLOAT", "INT", "KMV_BUCKETS", "STRING",
           "FeatureSpec", "SplitStatistics", "merge_in_order", "statistics_list",
           "write_statistics"]


class SplitStatistics:
    """Mergeable, picklable accumulator of one split's statistics (one dataset).

    Args:
      features: the features, in the order the statistics list them; names unique.

    Raises:
      ValueError: a feature name appears twice.
    """

    def __init__(self, features: Sequence[FeatureSpec]) -> None:
        self._specs = tuple(features)
        names = [spec.name for spec in self._specs]
        if len(set(names)) != len(names):
            raise ValueError(f"Feature names must be unique, got {names}")
        self._features = {spec.name: FeatureStatistics(spec) for spec in self._specs}
        self._num_examples = 0

    @property
    def features(self) -> tuple[FeatureSpec, ...]:
        return self._specs

    @property
    def num_examples(self) -> int:
        return self._num_examples

    def add(self, num_examples: int, columns: Mapping[str, Any]) -> None:
        """Adds ``num_examples`` examples.

        Args:
          num_examples: the number of examples the columns describe.
          columns: feature name -> one entry per example (``len == num_examples``).
            Entry forms: a 1-D NumPy array (one value per example; NaN: the value is
            missing), a Python sequence of scalars (None or NaN: missing), or a
            sequence of sequences (multi-valued, e.g. labels; None or [] missing, None
            and NaN items skipped). A declared feature absent from ``columns`` is
            missing in all these examples.

        Raises:
          ValueError: an undeclared feature, a column of the wrong length or type
            (nothing is added then).
        """
        if num_examples < 0:
            raise ValueError(f"num_examples must be >= 0, got {num_examples}")
        unknown = sorted(set(columns) - set(self._features))
        if unknown:
            raise ValueError(f"Undeclared features {unknown}: declare them in the "
                             f"FeatureSpecs ({sorted(self._features)})")
        converted = [(feature, to_column(feature.spec, columns[name], num_examples))
                     for name, feature in self._features.items() if name in columns]
        for feature, column in converted:
            feature.add(column)
        self._num_examples += num_examples

    def merge(self, other: SplitStatistics) -> SplitStatistics:
        """Adds ``other``'s statistics to these (``other`` is left as it is).

        Returns:
          self.

        Raises:
          ValueError: the two were declared with different features.
        """
        if other.features != self._specs:
            raise ValueError(f"Cannot merge statistics of different features: "
                             f"{self._specs} and {other.features}")
        self._num_examples += other.num_examples
        for name, feature in self._features.items():
            feature.merge(other._features[name])
        return self

    def compact(self) -> None:
        """Shrinks the quantiles sketches: call it before a stage boundary."""
        for feature in self._features.values():
            feature.compact()

    def to_proto(self, name: str) -> statistics_pb2.DatasetFeatureStatistics:
        """The statistics as TFDV writes them, as dataset ``name`` (the split).

        Leaves the accumulator as it is: it still adds, merges and pickles."""
        result = statistics_pb2.DatasetFeatureStatistics(
            name=name, num_examples=self._num_examples)
        for feature in self._features.values():
            result.features.append(feature.to_proto(self._num_examples))
        return result


def merge_in_order(parts: Iterable[tuple[Any, SplitStatistics]]) -> SplitStatistics | None:
    """Merges partial accumulators in the order of their sort keys.

    Beam delivers parts in any order, and floating-point sums and sketch merges depend
    on the order, so sorting them first makes the result the same on every run and
    worker count. The parts are left as they are.

    Args:
      parts: (sort key, accumulator) pairs; keys distinct and comparable.

    Returns:
      A new accumulator holding all parts, or None without parts.

    Raises:
      ValueError: two parts share a key (their order would be Beam's).
    """
    ordered = sorted(parts, key=lambda part: part[0])
    if not ordered:
        return None
    keys = [key for key, _ in ordered]
    repeated = sorted({repr(a) for a, b in itertools.pairwise(keys) if a == b})
    if repeated:
        raise ValueError(f"Partial statistics need distinct sort keys, got {repeated} twice")
    result = SplitStatistics(ordered[0][1].features)
    for _, part in ordered:
        result.merge(part)
    return result


def statistics_list(datasets: Sequence[statistics_pb2.DatasetFeatureStatistics]
                    ) -> statistics_pb2.DatasetFeatureStatisticsList:
    """The datasets in one ``DatasetFeatureStatisticsList``."""
    return statistics_pb2.DatasetFeatureStatisticsList(datasets=list(datasets))


def write_statistics(path: str, dataset: statistics_pb2.DatasetFeatureStatistics) -> None:
    """Writes ``dataset`` as ``tfdv.load_statistics`` reads it: an uncompressed TFRecord
    file holding one record, a ``DatasetFeatureStatisticsList`` of ``dataset`` alone."""
    record = statistics_list([dataset]).SerializeToString(deterministic=True)
    storage.write_bytes(path, record_index.frames([record]))
