"""tf.Transform's side: analyzers fit on train, and transformed rows as Examples.

``analysis`` runs the fit and writes ``transform_fn``; ``exact_stats`` and ``zscore``
give exact train moments and the z-score analyzer; ``class_vocabulary`` numbers class
ids; ``examples`` encodes a transformed instance as a deterministic Example.
"""
