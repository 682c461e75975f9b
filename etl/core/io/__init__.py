"""The one seam to files: every file a job reads, writes, lists or deletes.

``storage`` on any filesystem Beam has, with ``gcs`` (object requests),
``local_tree`` (local folders with their links) and ``conditional_writes``
(create-if-absent); ``timed_calls`` bounds a read on a stalled mount; ``text_rows``
reads CSV and JSON Lines rows through it. Every other module passes paths.
"""
