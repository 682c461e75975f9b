"""A dataset's report: one self-contained HTML page a person opens in a browser.

    python -m reader.report DATA_DIR [--compare OTHER_DIR] [--out PATH]

    from reader.report import write_report
    write_report("out/images")            # -> "out/images/report/index.html"

The page shows the records and labels per split, each feature's statistics and
histogram per split (``statistics/``), the drift table (``statistics/drift.json``,
what is over its threshold first), the duplicate report's summary, the dead letters
by reason, a few images per class (time series: a few series with their split
boundaries and windows, each channel by its column and role), every flagged image
(``statistics/flags.jsonl``) and the two images of duplicate pairs across splits
(``duplicates/pairs.jsonl``), read from the stored shards, and the run's settings
and library versions (the manifest). With ``--compare`` it starts with the other
dataset's counts and labels side by side and the drift between the same splits of
the two, the other dataset the baseline (both sides' first-version statistics).

The page loads nothing: styles inline, charts SVG, images ``data:`` URIs; it renders
offline. What a dataset lacks (statistics, a duplicate report, flags) is one line
saying so; a section that does not apply to its kind (labels without classes,
duplicates and flags of a time series) is left out. The same dataset gives the same
bytes. Paths may be URIs (``gs://``):
files are read, and the page written, through ``reader.records`` (fsspec for
URIs). Nothing here imports TensorFlow.

``build`` gathers what the page shows from the dataset's files; ``samples``,
``series`` and ``gallery`` read and draw the stored records; ``features``, ``tables``
and ``svg`` lay out statistics, counts and charts; ``html`` renders the page.
"""

from reader.report.build import gather, main, write_report

__all__ = ["gather", "main", "write_report"]
