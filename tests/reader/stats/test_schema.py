"""reader.stats.schema: TFDV's schema inference and validation on hand-built statistics.

Expected schemas are written out by hand from TFDV's rules (anomalies/schema.cc
CreateColumn, feature_util.cc InitPresenceAndShape, bool/int/string_domain_util.cc);
expected descriptions are TFDV's sentences with the numbers worked out by hand.
"""

from __future__ import annotations

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

from reader.stats import schema as stats_schema
from reader.stats.files import schema_text

_Stats = statistics_pb2.FeatureNameStatistics
NUM_EXAMPLES = 10


def feature(name: str, kind: str, present: int = NUM_EXAMPLES, values: tuple = (1, 1),
            counts: dict[str, float] | None = None, low: float = 0.0, high: float = 0.0,
            invalid_utf8: int = 0) -> _Stats:
    """One feature's statistics: ``present`` of NUM_EXAMPLES examples, ``values``
    (min, max) per example; a rank histogram of ``counts``; numeric min and max."""
    result = _Stats(type=_Stats.Type.Value(kind))
    result.path.step.append(name)
    stats = (result.num_stats if kind in ("INT", "FLOAT")
             else result.bytes_stats if kind == "BYTES" else result.string_stats)
    common = stats.common_stats
    common.num_non_missing, common.num_missing = present, NUM_EXAMPLES - present
    if present:
        common.min_num_values, common.max_num_values = values
    if kind in ("INT", "FLOAT"):
        stats.min, stats.max = low, high
    for label, count in (counts or {}).items():
        stats.rank_histogram.buckets.add(label=label, sample_count=count)
    if counts:
        common.tot_num_values = int(sum(counts.values()))
    if kind == "STRING":
        stats.invalid_utf8_count = invalid_utf8
    return result


def dataset(*features: _Stats) -> statistics_pb2.DatasetFeatureStatistics:
    return statistics_pb2.DatasetFeatureStatistics(name="train", num_examples=NUM_EXAMPLES,
                                                   features=features)


def schema(text: str) -> schema_pb2.Schema:
    return text_format.Parse(text, schema_pb2.Schema())


TRAIN = dataset(
    feature("label", "STRING", counts={"cat": 6, "dog": 4}),
    feature("brightness", "FLOAT", low=0.1, high=0.9),
    feature("width", "INT", low=3, high=640),
    feature("blank", "INT", low=0, high=1),
    feature("tags", "STRING", present=8, values=(1, 3), counts={"b": 9, "a": 5}),
    feature("digit", "STRING", counts={str(d): 1 for d in range(10)}),
    feature("flag", "STRING", counts={"true": 7, "false": 3}),
    feature("never", "FLOAT", present=0),
    feature("bbox", "FLOAT", values=(4, 4), low=0, high=1),
    feature("raw", "BYTES"),
    feature("many", "STRING", counts={f"v{i}": 1 for i in range(101)}),
    feature("garbled", "STRING", counts={"x": 10}, invalid_utf8=1),
    _Stats(name="no_stats", type=_Stats.FLOAT),
)


def test_infer_schema_follows_tfdvs_rules_for_each_kind_of_feature():
    expected = schema("""
        feature { name: "label" type: BYTES domain: "label"
          presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 1 } } }
        feature { name: "brightness" type: FLOAT
          presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 1 } } }
        feature { name: "width" type: INT
          presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 1 } } }
        feature { name: "blank" type: INT bool_domain {}
          presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 1 } } }
        feature { name: "tags" type: BYTES domain: "tags"
          presence { min_count: 1 } value_count { min: 1 } }
        feature { name: "digit" type: BYTES int_domain {}
          presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 1 } } }
        feature { name: "flag" type: BYTES bool_domain { true_value: "true" false_value: "false" }
          presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 1 } } }
        feature { name: "never" type: FLOAT presence { min_count: 0 } }
        feature { name: "bbox" type: FLOAT
          presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 4 } } }
        feature { name: "raw" type: BYTES
          presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 1 } } }
        feature { name: "many" type: BYTES
          presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 1 } } }
        feature { name: "garbled" type: BYTES
          presence { min_fraction: 1.0 min_count: 1 } shape { dim { size: 1 } } }
        string_domain { name: "label" value: "cat" value: "dog" }
        string_domain { name: "tags" value: "a" value: "b" }
        """)
    assert schema_text(stats_schema.infer_schema(TRAIN)) == schema_text(expected)


def test_infer_schema_without_shapes_writes_value_counts():
    inferred = stats_schema.infer_schema(dataset(feature("bbox", "FLOAT", values=(4, 4))),
                                         infer_feature_shape=False)
    assert schema_text(inferred) == schema_text(schema("""
        feature { name: "bbox" type: FLOAT presence { min_fraction: 1.0 min_count: 1 }
                  value_count { min: 4 max: 4 } }"""))


def test_infer_schema_gives_categorical_features_a_string_domain():
    inferred = stats_schema.infer_schema(TRAIN, categorical=["digit", "flag"])
    by_name = {f.name: f for f in inferred.feature}
    assert (by_name["digit"].domain, by_name["flag"].domain) == ("digit", "flag")
    domains = {d.name: list(d.value) for d in inferred.string_domain}
    assert domains["digit"] == [str(d) for d in range(10)]
    assert domains["flag"] == ["false", "true"]


def test_infer_schema_respects_max_string_domain_size():
    inferred = stats_schema.infer_schema(TRAIN, max_string_domain_size=1)
    assert [d.name for d in inferred.string_domain] == []


def test_infer_schema_quotes_a_domain_name_as_tfdv_serializes_the_path():
    inferred = stats_schema.infer_schema(dataset(
        feature("a.b", "STRING", counts={"x": 10})))
    assert [d.name for d in inferred.string_domain] == ["'a.b'"]


def test_validate_finds_a_planted_new_label():
    new = dataset(feature("label", "STRING", counts={"cat": 5, "dog": 3, "bird": 2}))
    found = stats_schema.validate(new, stats_schema.infer_schema(dataset(TRAIN.features[0])))
    assert found == [{
        "feature": "label", "kind": "new_values",
        "anomaly": "ENUM_TYPE_UNEXPECTED_STRING_VALUES", "values": ["bird"],
        "description": "ENUM_TYPE_UNEXPECTED_STRING_VALUES: Examples contain values "
                       "missing from the schema: bird (~20%)."}]


def test_validate_finds_nothing_in_the_statistics_the_schema_came_from():
    assert stats_schema.validate(TRAIN, stats_schema.infer_schema(TRAIN)) == []


def test_validate_reports_missing_new_absent_thinned_and_retyped_features():
    old = stats_schema.infer_schema(dataset(
        feature("label", "STRING", counts={"cat": 10}), feature("brightness", "FLOAT"),
        feature("width", "INT"), feature("gone", "FLOAT"), feature("empty", "FLOAT")))
    new = dataset(feature("label", "STRING", counts={"cat": 10}),
                  feature("brightness", "FLOAT", present=9), feature("width", "FLOAT"),
                  feature("empty", "FLOAT", present=0), feature("extra", "INT"))
    assert [(a["feature"], a["kind"], a["description"]) for a in
            stats_schema.validate(new, old)] == [
        ("brightness", "low_presence", ("FEATURE_TYPE_LOW_FRACTION_PRESENT: The feature was "
         "present in fewer examples than expected: minimum fraction = 1.000000, "
         "actual = 0.900000")),
        ("brightness", "shape", ("INVALID_FEATURE_SHAPE: The feature has a shape, but it's "
         "not always present (if the feature is nested, then it should always be present "
         "at each nested level) or its value lengths vary.")),
        ("empty", "not_present", ("FEATURE_TYPE_NOT_PRESENT: The feature was not present "
         "in any examples.")),
        ("extra", "new_feature", ("SCHEMA_NEW_COLUMN: New column (column in data but not "
         "in schema)")),
        ("gone", "missing_feature", "SCHEMA_MISSING_COLUMN: Column is completely missing"),
        ("width", "type_changed", ("UNEXPECTED_DATA_TYPE: Expected data of type: INT but "
         "got FLOAT")),
    ]


def test_validate_reports_value_counts_and_shapes_outside_the_schema():
    old = schema("""feature { name: "tags" type: BYTES value_count { min: 1 max: 3 } }
                    feature { name: "bbox" type: FLOAT shape { dim { size: 4 } } }""")
    new = dataset(feature("tags", "STRING", values=(0, 5)),
                  feature("bbox", "FLOAT", values=(2, 2)))
    assert [(a["feature"], a["description"]) for a in stats_schema.validate(new, old)] == [
        ("bbox", ("INVALID_FEATURE_SHAPE: The feature has fixed value length 2 but it's "
         "not compatible with the specified shape.")),
        ("tags", ("FEATURE_TYPE_HIGH_NUMBER_VALUES: Some examples have more values than "
         "expected.")),
        ("tags", ("FEATURE_TYPE_LOW_NUMBER_VALUES: Some examples have fewer values than "
         "expected.")),
    ]


def test_validate_reports_fewer_examples_than_the_minimum_count():
    old = schema('feature { name: "x" type: FLOAT presence { min_count: 5 } }')
    found = stats_schema.validate(dataset(feature("x", "FLOAT", present=3)), old)
    assert [a["description"] for a in found] == [
        ("FEATURE_TYPE_LOW_NUMBER_PRESENT: The feature was present in fewer examples than "
        "expected: minimum count = 5, actual = 3")]


def test_validate_skips_deprecated_and_optional_features():
    old = schema("""feature { name: "old" type: FLOAT presence { min_count: 1 }
                              lifecycle_stage: DEPRECATED }
                    feature { name: "optional" type: FLOAT presence { min_count: 0 } }""")
    assert stats_schema.validate(dataset(feature("old", "INT")), old) == []


def test_validate_on_digit_labels_follows_tfdv_and_categorical_catches_new_ones():
    train = dataset(feature("label", "STRING", counts={str(d): 1 for d in range(10)}))
    new = dataset(feature("label", "STRING", counts={"0": 5, "10": 4, "cat": 1}))
    as_ints = stats_schema.validate(new, stats_schema.infer_schema(train))
    assert [(a["anomaly"], a["values"], a["description"]) for a in as_ints] == [
        ("INT_TYPE_NOT_INT_STRING", ["cat"], ('INT_TYPE_NOT_INT_STRING: String values '
         'that were not ints were found, such as "cat".'))]
    as_classes = stats_schema.validate(
        new, stats_schema.infer_schema(train, categorical=["label"]))
    assert [(a["values"], a["description"]) for a in as_classes] == [
        (["10", "cat"], ("ENUM_TYPE_UNEXPECTED_STRING_VALUES: Examples contain values "
         "missing from the schema: 10 (~40%), cat (~10%)."))]


def test_validate_reports_a_string_outside_a_bool_domain():
    old = stats_schema.infer_schema(dataset(feature("flag", "STRING",
                                                    counts={"true": 7, "false": 3})))
    found = stats_schema.validate(
        dataset(feature("flag", "STRING", counts={"true": 5, "maybe": 3, "false": 2})), old)
    assert [(a["anomaly"], a["values"], a["description"]) for a in found] == [
        ("BOOL_TYPE_UNEXPECTED_STRING", ["maybe"], ('BOOL_TYPE_UNEXPECTED_STRING: Saw '
         'unexpected value "maybe" instead of {"false", "true"}.'))]


def test_validate_allows_off_domain_mass_up_to_min_domain_mass():
    old = schema("""feature { name: "label" type: BYTES domain: "label"
                              distribution_constraints { min_domain_mass: 0.9 } }
                    string_domain { name: "label" value: "cat" }""")
    few = dataset(feature("label", "STRING", counts={"cat": 199, "dog": 1}))
    many = dataset(feature("label", "STRING", counts={"cat": 170, "dog": 30}))
    assert stats_schema.validate(few, old) == []
    assert [a["description"] for a in stats_schema.validate(many, old)] == [
        ("ENUM_TYPE_UNEXPECTED_STRING_VALUES: Examples contain values missing from the "
        "schema: dog (~15%).")]
    strict = schema('feature { name: "label" type: BYTES string_domain { value: "cat" } }')
    assert [a["description"] for a in stats_schema.validate(few, strict)] == [
        ("ENUM_TYPE_UNEXPECTED_STRING_VALUES: Examples contain values missing from the "
        "schema: dog (<1%).")]


def test_validate_of_statistics_without_examples_says_so():
    empty = statistics_pb2.DatasetFeatureStatistics(name="test")
    assert stats_schema.validate(empty, stats_schema.infer_schema(TRAIN)) == [
        {"feature": None, "kind": "no_data", "anomaly": None,
         "description": "The statistics hold no examples."}]
