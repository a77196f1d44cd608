"""The one error type of every trace loader: it names the file, and the line and field when known."""

from __future__ import annotations

from pathlib import Path


class TraceFormatError(ValueError):
    """A data file that cannot be read as its declared format.

    ``str(e)`` reads ``<file>:<line>: field '<field>': <message>`` (line and field when known), so the offending
    spot can be opened directly.
    """

    def __init__(self, path: str | Path, message: str, line: int | None = None, field: str | None = None):
        self.path, self.line, self.field, self.message = str(path), line, field, message
        where = self.path + (f":{line}" if line is not None else "")
        what = f"field {field!r}: " if field is not None else ""
        super().__init__(f"{where}: {what}{message}")
