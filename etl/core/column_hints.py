"""What to pass when an input lacks a column a flag names: the flag, with the closest column.

Both jobs read columns by the names their flags give (``--label_column``,
``--series_id_column``, ``--value_columns`` ...), each with a default; an input whose
columns are named otherwise lacks them. The error then names the flag to pass and,
as its value, the input's column closest to the one missing among those no flag
names yet (``pass --label_column=class``), so the fix can be copied. The flags that
name several columns are read by one parser (``column_names``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence


def column_names(flag_value: str | None) -> tuple[str, ...]:
    """A comma-separated flag value → its column names, each stripped of spaces; empty
    entries (``"a,"``, a blank flag, None) name nothing.

    Example:
        >>> column_names(" sales , price,")
        ('sales', 'price')
    """
    return tuple(name for part in (flag_value or "").split(",") if (name := part.strip()))


def pass_flags_hint(named: Mapping[str, Sequence[str]], available: Sequence[str],
                    reserved: Sequence[str] = ()) -> str:
    """``: pass --label_column=class (...)`` for the columns ``named`` that ``available``
    lacks; ``""`` when none is missing. ``reserved``: columns read by their fixed names
    (an image manifest's ``path``, ``split``), never suggested.

    Each flag naming a missing column is shown with that column replaced by the
    closest (``difflib``) of the available columns no flag names, each used once; a
    flag that names several columns keeps the others (``--value_columns=sales,price``).

    Example:
        >>> pass_flags_hint({"--label_column": ["label"]}, ["path", "class"])
        ': pass --label_column=class (the closest column no other flag names)'
    """
    used = {column for columns in named.values() for column in columns}
    unused = [column for column in available if column not in used and column not in reserved]
    suggestions, seen = [], set()
    for flag, columns in named.items():
        values = []
        for column in columns:
            if column in available or column in seen:
                values.append(column)
                continue
            seen.add(column)
            ranked = difflib.get_close_matches(column, unused, n=1, cutoff=0.0)
            if ranked:
                unused.remove(ranked[0])
            values.append(ranked[0] if ranked else "<column>")
        if values != list(columns):
            suggestions.append(f"{flag}={','.join(values)}")
    if not suggestions:
        return ""
    return (f": pass {' '.join(suggestions)} (the closest column"
            f"{'s' if len(seen) > 1 else ''} no other flag names)")
