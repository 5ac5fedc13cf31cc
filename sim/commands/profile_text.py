"""A profile's TOML text, edited line by line: the commands that write a profile
(``sim calibrate``'s measured values and ``[host.sources]``, ``sim host-profile``'s
``[host]`` table) change the lines they own and keep every other line and comment as the
base profile has it, which a TOML writer would not."""

from __future__ import annotations

import re

__all__ = ["TABLE", "KEY", "table_span", "quoted"]

#: a table's header line, ``[name]`` (group 1: the name); an array of tables' ``[[...]]`` is not one
TABLE = re.compile(r"^\s*\[([^\[\]]+)\]\s*$")
#: a key's line, ``key = ...`` (group 1: the bare key)
KEY = re.compile(r"^\s*([A-Za-z0-9_]+)\s*=")


def table_span(lines, name):
    """``(start, stop)`` of table ``[name]`` in ``lines`` (its header line to the next
    table, less the blank lines before it), or None.

    >>> table_span(["[meta]", "a = 1", "", "[host]", "b = 2"], "meta")
    (0, 2)
    >>> table_span(["[meta]", "a = 1", "", "[host]", "b = 2"], "host")
    (3, 5)
    """
    start = None
    for i, line in enumerate(lines):
        table = TABLE.match(line)
        if table and start is not None:
            stop = i
            while stop > start and not lines[stop - 1].strip():
                stop -= 1
            return start, stop
        if table and table.group(1).strip() == name:
            start = i
    return (start, len(lines)) if start is not None else None


def quoted(text) -> str:
    """``text`` as a TOML basic string.

    >>> print(quoted('a "b" \\\\ c'))
    "a \\"b\\" \\\\ c"
    """
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'
