"""The tf.data reader: a dataset folder → a pipeline ready for ``model.fit``.

``dataset_info`` opens a dataset (``open_dataset``), its features read as ``tf.io``
parse specs (``feature_specs``); ``pipeline`` builds ``make_dataset`` from
``read_config``, ``decoding``, ``labels`` and ``augment``;
``resume`` checkpoints ``fit`` mid-epoch; ``helpers`` are what training code needs
beside it. This is the one part of ``reader`` that needs TensorFlow.
"""
