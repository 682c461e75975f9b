"""A dataset's statistics, schema and drift, read and compared without TensorFlow.

``files``: the statistics and schema files as TFDV's protos; ``schema``: a schema
inferred from statistics and new statistics checked against it; ``drift``: drift
between two splits' statistics as TFDV measures it. The job writes with these
(``etl.core.stats``) and the report reads with them.
"""
