"""The time-series input read into rows: files → byte ranges → parsed rows → chunks.

``sources`` names the columns and the input files; ``ranges`` cuts files into byte
ranges; ``parsing`` parses a range's CSV or JSON Lines rows into ``parsed_rows``
(typed columns, with ``time_texts`` for the time column); ``chunks`` groups them by
series into spilled chunks; ``read`` is the step that does it all; ``first_chunk``
checks the first chunk of each file before the job starts.
"""
