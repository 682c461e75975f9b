"""The publishing tail every job ends with, and the accounts it must balance.

``tail`` plans and writes the shards, the dead letters and the manifest (written
last), from what a job hands it (``spec``: a ``PublishSpec``, with the job's screen
and statistics steps); ``dead_letters`` are rejected inputs with their reasons;
``accounting`` checks inputs = written + rejected and the error fraction; ``inputs``
and ``manifest`` build the manifest's entries.
"""
