"""etl/core/transform/class_vocabulary.py: class ids by sorted name or by train frequency, the
same at serving time; expected orders are worked out here with plain sorted()."""

from __future__ import annotations

import tensorflow as tf

from etl.core.transform import class_vocabulary


def _fit(tmp_path, instances: list[dict], spec: dict, preprocessing_fn) -> tuple:
    """``(transformed instances, transform output)`` of tf.Transform fit on ``instances``."""
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    with tft_beam.Context(temp_dir=str(tmp_path / "tmp")):
        (transformed, _), transform_fn = ((instances, metadata)
                                          | tft_beam.AnalyzeAndTransformDataset(preprocessing_fn))
        _ = transform_fn | tft_beam.WriteTransformFn(str(tmp_path / "out"))
    return transformed, tft.TFTransformOutput(str(tmp_path / "out"))


def _vocabulary(output) -> list[str]:
    return [name.decode() for name in output.vocabulary_by_name("label")]


def test_apply_class_vocabulary_by_name_is_sorted_and_served_alike(tmp_path):
    # Weighted as the time-series job weighs labels: a name whose weights sum below
    # the threshold ("down": no train window) gets no id. The jobs' runs check the
    # unweighted orders (tests/pipelines/test_images.py, test_image_labels.py).
    rows = [("up", 2.0), ("down", 0.0), ("flat", 1.0), ("down", 0.0), ("Zen", 1.0)]

    def preprocessing_fn(inputs):
        return {"id": class_vocabulary.apply_class_vocabulary(
            inputs["label"], order="name", weights=inputs["weight"], frequency_threshold=1)}

    transformed, output = _fit(
        tmp_path, [{"label": name, "weight": weight} for name, weight in rows],
        {"label": tf.io.FixedLenFeature([], tf.string),
         "weight": tf.io.FixedLenFeature([], tf.float32)}, preprocessing_fn)
    expected = sorted(["up", "flat", "Zen"])
    assert expected == ["Zen", "flat", "up"]  # code points: "Z" < "f"
    assert _vocabulary(output) == expected
    assert [int(row["id"]) for row in transformed] == [2, -1, 1, -1, 0]
    served = output.transform_features_layer()(
        {"label": tf.constant(["up", "Zen", "down"]), "weight": tf.constant([0.0] * 3)})
    assert served["id"].numpy().tolist() == [2, 0, -1]


def test_sorted_class_names_is_python_sorted_without_what_a_text_file_cannot_hold():
    totals = {b"b": 1.0, "Á".encode(): 1.0, b"a": 1.0, b"": 1.0,
              b"x\ny": 1.0, "é".encode(): 1.0, b"rare": 0.0}
    assert class_vocabulary.sorted_class_names(totals, min_total=1.0) == [
        name.encode() for name in sorted(["b", "Á", "a", "é"])]
