"""The on-disk contract every writer and reader shares, without TensorFlow.

``contract``: names, layout, shard suffixes, the manifest's keys and its one loader;
``record_index``: TFRecord framing read by record index; ``example_proto``:
``tf.train.Example`` parsed into NumPy by feature spec. Nothing here imports TensorFlow.
"""
