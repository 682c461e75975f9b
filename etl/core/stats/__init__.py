"""A written dataset's statistics in TFDV's format, computed on tfx_bsl's sketches.

``columns`` shapes per-example facts as the sketches take them; ``partials`` and
``histograms`` hold one feature's sketches and TFDV's histograms; ``features``
accumulates one split; ``step`` is the statistics step both jobs hand the
publishing tail (statistics, schema, drift and the report).
"""
