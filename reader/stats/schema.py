"""A schema inferred from statistics, and a new version's statistics checked against it,
by TFDV's rules.

    from reader.stats import files as stats_files
    from reader.stats import schema as stats_schema

    train = stats_files.read_split_statistics("out/images")["train"]
    schema = stats_schema.infer_schema(train, categorical=("label",))
    stats_schema.validate(new_train, schema)
    # [{"feature": "label", "kind": "new_values", "values": ["10"], ...}]

:func:`infer_schema` is TFDV's ``tfdv.infer_schema`` (``anomalies/schema.cc``
``CreateColumn``, tensorflow/data-validation @ 710b32fae04f): per feature its type,
``presence``, ``shape`` or ``value_count``, and a domain: ``bool_domain`` for INT
features in [0, 1] with max 1 and STRING features whose one or two values read as
true/false, an empty ``int_domain`` for STRING features whose values all read as
integers, else a ``string_domain`` of the rank histogram's values when there are at
most ``max_string_domain_size``. So digit class names ("0".."9") get ``int_domain
{}``, against which TFDV flags only values that are not integers (a new class "10"
passes): name such features in ``categorical`` to give them a ``string_domain``
(what a TFDV user does with ``tfdv.set_domain``). ``custom_stats`` domain hints and
nested (STRUCT) features are not read.

:func:`validate` reports what TFDV's ``validate_statistics`` reports for new values,
new and missing features, presence, value counts, shape and type; each anomaly
names TFDV's type (``ENUM_TYPE_UNEXPECTED_STRING_VALUES``, ...) and its description.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable
from typing import Any

from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

from reader.stats.drift import string_counts
from reader.stats.files import feature_name, serialized_path

_Stats = statistics_pb2.FeatureNameStatistics
_FEATURE_TYPES = {_Stats.STRING: schema_pb2.BYTES, _Stats.BYTES: schema_pb2.BYTES,
                  _Stats.INT: schema_pb2.INT, _Stats.FLOAT: schema_pb2.FLOAT,
                  _Stats.STRUCT: schema_pb2.STRUCT}
# bool_domain_util.cc GetTrueValues / GetFalseValues.
_TRUE_VALUES = frozenset({"TRUE", "true", "SET", "set", "1", ""})
_FALSE_VALUES = frozenset({"FALSE", "false", "CLEAR", "clear", "0"})
# absl::SimpleAtoi: ASCII whitespace around an optionally signed decimal int64.
_INT = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)
_DEPRECATED_STAGES = frozenset({schema_pb2.PLANNED, schema_pb2.ALPHA, schema_pb2.DEPRECATED,
                                schema_pb2.DEBUG_ONLY, schema_pb2.DISABLED})


def _common(feature: _Stats) -> statistics_pb2.CommonStatistics:
    return getattr(feature, feature.WhichOneof("stats")).common_stats


def _is_int64(text: str) -> bool:
    return bool(_INT.fullmatch(text)) and -(1 << 63) <= int(text) < (1 << 63)


def _values(feature: _Stats) -> list[str]:
    """The feature's distinct values, sorted (TFDV's ``GetStringValues``)."""
    return sorted(string_counts(feature))


def _valency(feature: _Stats) -> list[tuple[int, int, float]]:
    """(min values, max values, num missing) per nesting level (``GetMinMaxNumValues``)."""
    common = _common(feature)
    levels = common.presence_and_valency_stats
    if levels:
        return [(max(v.min_num_values, 0), v.max_num_values, v.num_missing) for v in levels]
    return [(max(common.min_num_values, 0), common.max_num_values, common.num_missing)]


def _set_value_count(low: int, high: int, count: schema_pb2.ValueCount) -> None:
    if low > 0:
        # The same count everywhere: min and max, so tf.Transform parses it dense.
        count.min = low if low == high else 1
        if low == high:
            count.max = high


def _init_presence_and_shape(stats: _Stats, feature: schema_pb2.Feature,
                             infer_shape: bool) -> None:
    """``InitPresenceAndShape`` (feature_util.cc)."""
    common = _common(stats)
    feature.presence.min_count = 0 if common.num_non_missing < 1 else 1
    if common.num_non_missing <= 0:
        return
    if common.num_missing == 0:
        feature.presence.min_fraction = 1.0
    levels = _valency(stats)
    if infer_shape and feature.type != schema_pb2.STRUCT and all(
            missing == 0 and low == high > 0 for low, high, missing in levels):
        for low, _, _ in levels:
            feature.shape.dim.add(size=low)
    elif len(levels) > 1:
        for low, high, _ in levels:
            _set_value_count(low, high, feature.value_counts.value_count.add())
    elif levels[0][0] > 0:
        _set_value_count(levels[0][0], levels[0][1], feature.value_count)


def _is_bool_candidate(stats: _Stats) -> bool:
    """``IsBoolDomainCandidate`` (bool_domain_util.cc)."""
    if stats.type == _Stats.INT:
        return stats.num_stats.min >= 0.0 and stats.num_stats.max == 1.0
    if stats.type != _Stats.STRING:
        return False
    tokens = _values(stats)
    if not 1 <= len(tokens) <= 2:
        return False
    true_seen = false_seen = False
    for token in tokens:
        if not true_seen and token in _TRUE_VALUES:
            true_seen = True
        elif not false_seen and token in _FALSE_VALUES:
            false_seen = True
        else:
            return False
    return True


def _set_bool_domain(stats: _Stats, feature: schema_pb2.Feature) -> None:
    """``BoolDomainFromStats``: a STRING feature's first true and false values."""
    feature.bool_domain.SetInParent()
    if stats.type == _Stats.STRING:
        for field, accepted in (("true_value", _TRUE_VALUES), ("false_value", _FALSE_VALUES)):
            value = next((v for v in _values(stats) if v in accepted), None)
            if value is not None:
                setattr(feature.bool_domain, field, value)


def _set_domain(stats: _Stats, feature: schema_pb2.Feature, schema: schema_pb2.Schema,
                max_string_domain_size: int, categorical: bool) -> None:
    """The domain branch of ``CreateColumn``; ``categorical`` skips the bool and int
    candidates and goes to the string domain whatever the values look like."""
    if stats.string_stats.invalid_utf8_count > 0 or stats.type == _Stats.BYTES:
        return
    values = _values(stats)
    forced = categorical and bool(values)
    if not forced and _is_bool_candidate(stats):
        _set_bool_domain(stats, feature)
    elif not forced and stats.type == _Stats.STRING and values and all(map(_is_int64, values)):
        feature.int_domain.SetInParent()
    elif values and len(values) <= max_string_domain_size:
        # Schema::GetNewStringDomain: the feature's path, made unique with 2, 3, ...
        taken = {d.name for d in schema.string_domain}
        candidate = serialized_path(stats)
        name, index = candidate, 1
        while name in taken:
            index += 1
            name = f"{candidate}{index}"
        schema.string_domain.add(name=name, value=values)
        feature.domain = name


def infer_schema(dataset: statistics_pb2.DatasetFeatureStatistics,
                 max_string_domain_size: int = 100, *, infer_feature_shape: bool = True,
                 categorical: Iterable[str] = ()) -> schema_pb2.Schema:
    """TFDV's ``infer_schema`` on one dataset's statistics.

    Args:
        dataset: one split's statistics (the ETL job passes train's).
        max_string_domain_size: the most distinct values a string feature may have
            to get a ``string_domain``.
        infer_feature_shape: give features present everywhere with a fixed number
            of values a ``shape`` (else ``value_count``).
        categorical: STRING features that get a ``string_domain`` even when their
            values read as integers or booleans (e.g. a label whose classes are "0"-"9").

    Returns:
        The schema, its features in the statistics' order.
    """
    categorical = frozenset(categorical)
    schema = schema_pb2.Schema()
    for stats in dataset.features:
        # Features without common statistics are dropped (validation_api.py), and
        # nested paths belong to STRUCT features, which are not inferred here.
        if stats.WhichOneof("stats") is None or len(stats.path.step) > 1:
            continue
        name = feature_name(stats)
        feature = schema.feature.add(name=name, type=_FEATURE_TYPES.get(stats.type, 0))
        _init_presence_and_shape(stats, feature, infer_feature_shape)
        _set_domain(stats, feature, schema, max_string_domain_size, name in categorical)
    return schema


def _anomaly(feature: str | None, kind: str, anomaly: str | None, description: str,
             **extra: Any) -> dict[str, Any]:
    text = f"{anomaly}: {description}" if anomaly else description
    return {"feature": feature, "kind": kind, "anomaly": anomaly,
            "description": text.rstrip(), **extra}


def _deprecated(feature: schema_pb2.Feature) -> bool:
    return feature.deprecated or (feature.HasField("lifecycle_stage")
                                  and feature.lifecycle_stage in _DEPRECATED_STAGES)


def _required(feature: schema_pb2.Feature) -> bool:
    """``IsExistenceRequired`` (environments are not used here)."""
    return not _deprecated(feature) and (feature.presence.min_count > 0
                                         or feature.presence.min_fraction > 0.0)


def _c_escape(text: str) -> str:
    """``absl::Utf8SafeCEscape``: C escapes for quotes, backslash and control bytes."""
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "'": "\\'", "\\": "\\\\"}
    return "".join(named.get(c) or (f"\\{ord(c):03o}" if ord(c) < 0x20 or ord(c) == 0x7F
                                    else c) for c in text)


def _percentage(count: float, total: float) -> str:
    """``PercentageAsString`` (string_domain_util.cc)."""
    if total == 0:
        return "?"
    percent = 100 * count / total
    return "<1%" if percent < 1.0 else f"~{math.floor(percent)}%"


def _new_string_values(stats: _Stats, feature: schema_pb2.Feature,
                       domain: Iterable[str]) -> list[dict[str, Any]]:
    """``UpdateStringDomain``: values outside the domain, beyond the allowed mass."""
    valid = set(domain)
    counts = string_counts(stats)
    missing = {v: counts[v] for v in sorted(counts) if v not in valid}
    common = _common(stats)
    total = common.tot_num_values or common.num_non_missing * common.avg_num_values
    missing_count = sum(missing.values())
    constraints = feature.distribution_constraints
    max_off = (1.0 - constraints.min_domain_mass
               if constraints.HasField("min_domain_mass") else 0.0)
    ratio = missing_count / total if total else (math.inf if missing_count else math.nan)
    if not (ratio > max_off or (max_off == 0 and missing)):
        return []
    listed = ", ".join(f"{_c_escape(v)} ({_percentage(int(c), total)})"
                       for v, c in missing.items())
    return [_anomaly(feature.name, "new_values", "ENUM_TYPE_UNEXPECTED_STRING_VALUES",
                     f"Examples contain values missing from the schema: {listed}. ",
                     values=list(missing))]


def _new_bool_or_int_strings(stats: _Stats, feature: schema_pb2.Feature
                             ) -> list[dict[str, Any]]:
    """``UpdateBoolDomain`` / ``UpdateIntDomain`` on a STRING feature's values."""
    values = _values(stats)
    if feature.HasField("bool_domain"):
        domain = feature.bool_domain
        valid = sorted({v for v, has in ((domain.true_value, domain.HasField("true_value")),
                                         (domain.false_value, domain.HasField("false_value")))
                        if has})
        bad = [v for v in values if v not in valid]
        shown = '{"' + '", "'.join(valid) + '"}' if valid else "{}"
        if bad:
            return [_anomaly(feature.name, "new_values", "BOOL_TYPE_UNEXPECTED_STRING",
                             f'Saw unexpected value "{bad[0]}" instead of {shown}.',
                             values=bad)]
    elif feature.type == schema_pb2.BYTES:
        bad = [v for v in values if not _is_int64(v)]
        if bad:
            return [_anomaly(feature.name, "new_values", "INT_TYPE_NOT_INT_STRING",
                             f'String values that were not ints were found, such as '
                             f'"{bad[0]}".', values=bad)]
    return []


def _domain_anomalies(stats: _Stats, feature: schema_pb2.Feature,
                      schema: schema_pb2.Schema) -> list[dict[str, Any]]:
    which = feature.WhichOneof("domain_info")
    if which == "domain":
        domain = next((d for d in schema.string_domain if d.name == feature.domain), None)
        return [] if domain is None else _new_string_values(stats, feature, domain.value)
    if which == "string_domain":
        return _new_string_values(stats, feature, feature.string_domain.value)
    if which in ("bool_domain", "int_domain") and stats.type == _Stats.STRING:
        return _new_bool_or_int_strings(stats, feature)
    return []


def _presence_anomalies(stats: _Stats, feature: schema_pb2.Feature,
                        num_examples: int) -> list[dict[str, Any]]:
    """``UpdatePresence`` (feature_util.cc)."""
    common, presence, found = _common(stats), feature.presence, []
    if presence.HasField("min_count") and common.num_non_missing < presence.min_count:
        found.append(_anomaly(
            feature.name, "low_presence", "FEATURE_TYPE_LOW_NUMBER_PRESENT",
            f"The feature was present in fewer examples than expected: minimum count = "
            f"{presence.min_count}, actual = {common.num_non_missing}"))
    if not presence.HasField("min_fraction") or num_examples <= 0:
        return found
    fraction = 1.0 if common.num_missing == 0 else common.num_non_missing / num_examples
    if fraction < presence.min_fraction:
        # TFDV prints the schema's fraction through a C float.
        expected = struct.unpack("f", struct.pack("f", presence.min_fraction))[0]
        found.append(_anomaly(
            feature.name, "low_presence", "FEATURE_TYPE_LOW_FRACTION_PRESENT",
            f"The feature was present in fewer examples than expected: minimum fraction "
            f"= {expected:f}, actual = {fraction:f}"))
    elif presence.min_fraction == 1.0 and common.num_missing != 0:
        found.append(_anomaly(
            feature.name, "low_presence", "FEATURE_TYPE_LOW_FRACTION_PRESENT",
            f"The feature was expected everywhere, but was missing in "
            f"{common.num_missing:.6g} examples."))
    return found


def _valency_anomalies(stats: _Stats, feature: schema_pb2.Feature) -> list[dict[str, Any]]:
    """``UpdateValueCount`` (one nesting level) and ``UpdateFeatureShape``."""
    levels, found = _valency(stats), []
    count = feature.value_count
    if feature.HasField("value_count") and len(levels) == 1:
        if count.HasField("min") and levels[0][0] < count.min:
            found.append(_anomaly(feature.name, "value_count", "FEATURE_TYPE_LOW_NUMBER_VALUES",
                                  "Some examples have fewer values than expected."))
        if count.HasField("max") and levels[0][1] > count.max:
            found.append(_anomaly(feature.name, "value_count", "FEATURE_TYPE_HIGH_NUMBER_VALUES",
                                  "Some examples have more values than expected."))
    if not feature.HasField("shape"):
        return found
    expected = math.prod(dim.size for dim in feature.shape.dim)
    fixed = all(low == high != 0 for low, high, _ in levels)
    actual = math.prod(low for low, _, _ in levels) if fixed else -1
    if actual <= 0 or any(missing != 0 for _, _, missing in levels):
        found.append(_anomaly(
            feature.name, "shape", "INVALID_FEATURE_SHAPE",
            "The feature has a shape, but it's not always present (if the feature is "
            "nested, then it should always be present at each nested level) or its "
            "value lengths vary."))
    elif actual != expected:
        found.append(_anomaly(
            feature.name, "shape", "INVALID_FEATURE_SHAPE",
            f"The feature has fixed value length {actual} but it's not compatible with "
            f"the specified shape."))
    return found


def _feature_anomalies(stats: _Stats, feature: schema_pb2.Feature, schema: schema_pb2.Schema,
                       num_examples: int) -> list[dict[str, Any]]:
    """``UpdateFeatureInternal``: value counts, shape, presence, type and domain."""
    if _common(stats).num_non_missing == 0:
        if not _required(feature):
            return []
        return [_anomaly(feature.name, "not_present", "FEATURE_TYPE_NOT_PRESENT",
                         "The feature was not present in any examples.")]
    found = _valency_anomalies(stats, feature) + _presence_anomalies(stats, feature,
                                                                     num_examples)
    expected = _FEATURE_TYPES.get(stats.type, schema_pb2.TYPE_UNKNOWN)
    if expected != feature.type:
        found.append(_anomaly(
            feature.name, "type_changed", "UNEXPECTED_DATA_TYPE",
            f"Expected data of type: {schema_pb2.FeatureType.Name(feature.type)} but got "
            f"{_Stats.Type.Name(stats.type)}"))
    return found + _domain_anomalies(stats, feature, schema)


def validate(dataset: statistics_pb2.DatasetFeatureStatistics,
             schema: schema_pb2.Schema) -> list[dict[str, Any]]:
    """Anomalies of ``dataset`` against ``schema``, as TFDV's ``validate_statistics``
    finds them for new values, new, missing and absent features, presence, value
    counts, shape and type.

    Returns:
        ``[{"feature", "kind", "anomaly", "description", ...}]`` sorted by feature,
        kind and anomaly: ``kind`` is ``new_values`` (with ``values``, sorted),
        ``new_feature``, ``missing_feature``, ``not_present``, ``low_presence``,
        ``value_count``, ``shape``, ``type_changed`` or ``no_data``; ``anomaly`` is
        TFDV's ``AnomalyInfo.Type`` name (None for ``no_data``, TFDV's
        ``data_missing``), and ``description`` is that name followed by TFDV's text.
        Not checked: nested value counts, numeric ranges (inference sets none),
        environments, and drift (:mod:`reader.stats.drift`).
    """
    if dataset.num_examples == 0:
        return [_anomaly(None, "no_data", None, "The statistics hold no examples.")]
    listed: dict[str, _Stats] = {}
    for stats in dataset.features:
        # As in inference, a feature without statistics is not counted as listed.
        if stats.WhichOneof("stats") is not None:
            listed.setdefault(feature_name(stats), stats)
    found = []
    for feature in schema.feature:
        stats = listed.get(feature.name)
        if _deprecated(feature):
            continue
        if stats is None:
            if _required(feature):
                found.append(_anomaly(feature.name, "missing_feature", "SCHEMA_MISSING_COLUMN",
                                      "Column is completely missing"))
            continue
        found += _feature_anomalies(stats, feature, schema, dataset.num_examples)
    known = {feature.name for feature in schema.feature}
    found += [_anomaly(name, "new_feature", "SCHEMA_NEW_COLUMN",
                       "New column (column in data but not in schema)")
              for name, stats in listed.items()
              if name not in known and len(stats.path.step) <= 1]
    return sorted(found, key=lambda a: (a["feature"] or "", a["kind"], a["anomaly"] or ""))
