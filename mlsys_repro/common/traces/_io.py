"""File access shared by the loaders: existence checks and gzip reads that fail loudly when truncated."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from mlsys_repro.common.traces.errors import TraceFormatError


def resolve(data_dir: str | Path, rel: str | Path) -> Path:
    """``data_dir / rel``, or a clear error naming both if the file is missing."""
    p = Path(rel) if Path(rel).is_absolute() else Path(data_dir) / rel
    if not p.is_file():
        raise TraceFormatError(p, f"file not found (data_dir={data_dir}); see data/README.md for what is vendored")
    return p


def read_bytes(path: str | Path) -> bytes:
    """Whole file contents, transparently gunzipped when the name ends in ``.gz``."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(path, "file not found")
    raw = path.read_bytes()
    if path.suffix != ".gz":
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
        raise TraceFormatError(path, f"truncated or corrupt gzip ({type(e).__name__}: {e})") from None


def read_text(path: str | Path) -> str:
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise TraceFormatError(path, f"not UTF-8 text ({e.reason})", line=line) from None
