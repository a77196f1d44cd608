"""Compression speed and ratio of real codecs (LZ4, Snappy, zstd) on shuffle-like payloads built from shipped data.

``python -m mlsys_repro.papers.swallow.codecs [--out data/codecs/codec_table.csv]`` measures, single-threaded, each
codec compressing and decompressing independent 32 KiB blocks (Spark's default shuffle block size for LZ4/zstd) of five
payloads made from the repository's own data:

* ``trace_text``: the Facebook coflow trace as text records;
* ``cpu_csv``: Bitbrains CPU-utilisation CSV rows (text, what a Spark job shuffling a CSV dataset moves);
* ``cpu_f32``: the same matrix as little-endian float32 columns (binary serialised numbers);
* ``mnist_u8``: MNIST pixel records (binary, sparse);
* ``cifar_jpeg``: CIFAR-10 JPEG scans (already compressed; the codecs' worst case);

plus ``mix``, an equal-bytes blend of the five. Each block's time is its fastest of ``repeats`` tries (a block
pre-empted by another process on a shared machine is retried rather than averaged in). The experiments read the
committed table (so results do not depend on the load
of the machine that regenerates them); :func:`load_codec` returns ``(ratio, compress_Bps, decompress_Bps)``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.metadata as md
import io
import math
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlsys_repro.common.traces.errors import TraceFormatError

BLOCK = 32 * 1024
PAYLOAD_BYTES = 4 * 1024 * 1024
PAYLOADS = ("trace_text", "cpu_csv", "cpu_f32", "mnist_u8", "cifar_jpeg")
TABLE = "codecs/codec_table.csv"
LZ4_README = "codecs/lz4_readme_table.csv"


@dataclass(frozen=True)
class Codec:
    name: str
    library: str
    compress: object
    decompress: object


def codecs() -> list[Codec]:
    import cramjam
    import lz4.block
    import zstandard

    zc = zstandard.ZstdCompressor(level=1)
    zd = zstandard.ZstdDecompressor()
    return [
        Codec("lz4", f"lz4 {md.version('lz4')} (liblz4 {lz4.library_version_string()}), block, default level",
              lambda b: lz4.block.compress(b, mode="default", store_size=True), lz4.block.decompress),
        Codec("snappy", f"cramjam {md.version('cramjam')} snappy raw", lambda b: bytes(cramjam.snappy.compress_raw(b)),
              lambda b: bytes(cramjam.snappy.decompress_raw(b))),
        Codec("zstd", f"zstandard {md.version('zstandard')} (libzstd {'.'.join(map(str, zstandard.ZSTD_VERSION))}) "
              "level 1", zc.compress, zd.decompress),
    ]


def payloads(data_dir: Path, size: int = PAYLOAD_BYTES) -> dict[str, bytes]:
    """The five payloads, each cut or tiled to ``size`` bytes."""
    out: dict[str, bytes] = {}
    out["trace_text"] = gzip.decompress((data_dir / "coflow/FB2010-1Hr-150-0.txt.gz").read_bytes())
    csv_text = gzip.decompress((data_dir / "workload_traces/bitbrains_rnd/cpu_util_pct.csv.gz").read_bytes())
    out["cpu_csv"] = csv_text
    import pandas as pd

    m = pd.read_csv(io.BytesIO(csv_text[: 4 * size])).drop(columns="ts").to_numpy(np.float32)
    out["cpu_f32"] = np.nan_to_num(m, nan=0.0).T.astype("<f4").tobytes()
    out["mnist_u8"] = gzip.decompress((data_dir / "images/mnist/train-images.idx3-ubyte.gz").read_bytes())[16:]
    z = np.load(data_dir / "images/cifar10/cifar10_train_jpeg.npz")
    out["cifar_jpeg"] = z["data"].tobytes()
    for k, v in out.items():
        reps = -(-size // len(v))
        out[k] = (v * reps)[:size]
    return out


def measure(data_dir: Path, repeats: int = 15, size: int = PAYLOAD_BYTES) -> list[dict]:
    pl = payloads(data_dir, size)
    blocks = {k: [v[i:i + BLOCK] for i in range(0, len(v), BLOCK)] for k, v in pl.items()}
    rows = []
    for cd in codecs():
        tot = {"orig": 0, "comp": 0, "tc": 0.0, "td": 0.0}
        for name in PAYLOADS:
            bl = blocks[name]
            comp = [cd.compress(b) for b in bl]
            assert all(cd.decompress(c) == b for c, b in zip(comp, bl, strict=True)), f"{cd.name} round trip"
            tc = _timed(cd.compress, bl, repeats)
            td = _timed(cd.decompress, comp, repeats)
            orig = sum(map(len, bl))
            clen = sum(map(len, comp))
            rows.append(_row(cd, name, orig, clen, tc, td))
            tot["orig"] += orig
            tot["comp"] += clen
            tot["tc"] += tc
            tot["td"] += td
        rows.append(_row(cd, "mix", tot["orig"], tot["comp"], tot["tc"], tot["td"]))
    return rows


def _timed(fn, items, repeats: int) -> float:
    """Sum over blocks of each block's fastest time: a pre-empted block is retried, not averaged in."""
    best = np.full(len(items), np.inf)
    for _ in range(repeats):
        for i, x in enumerate(items):
            t0 = time.perf_counter()
            fn(x)
            best[i] = min(best[i], time.perf_counter() - t0)
    return float(best.sum())


def _row(cd: Codec, payload: str, orig: int, comp: int, tc: float, td: float) -> dict:
    return {"codec": cd.name, "payload": payload, "original_bytes": orig, "compressed_bytes": comp,
            "ratio": round(comp / orig, 5), "compress_MBps": round(orig / tc / 1e6, 1),
            "decompress_MBps": round(orig / td / 1e6, 1), "block_bytes": BLOCK, "library": cd.library}


class CodecTableError(TraceFormatError):
    """A malformed codec side file: a data-file error like a trace's (``<file>:<line>: field '<f>': ...``), so the
    runner reports it in one line."""


TABLE_COLUMNS = {"codec": str, "payload": str, "ratio": float, "compress_MBps": float, "decompress_MBps": float}
README_COLUMNS = {"codec": str, "ratio_orig_over_comp": float, "compress_MBps": float, "decompress_MBps": float}


def _read_validated(path: Path, columns: dict[str, type], what: str) -> list[dict]:
    """Rows of a codec CSV, validated like a trace: every column present, numbers finite and positive, ratios
    compressed/original in (0, 1.5] (or original/compressed >= 1/1.5), no duplicate (codec, payload)."""
    if not path.exists():
        raise FileNotFoundError(f"{what} {path} missing; run python -m mlsys_repro.papers.swallow.codecs")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in columns if rows and c not in rows[0]] or ([] if rows else ["(no rows)"])
    if missing:
        raise CodecTableError(path, f"missing column(s) {missing}")
    seen = set()
    for line, r in enumerate(rows, start=2):  # line 1 is the header
        for col, typ in columns.items():
            v = (r.get(col) or "").strip()
            if typ is str:
                if not v:
                    raise CodecTableError(path, "is empty", line, col)
                continue
            try:
                x = float(v)
            except ValueError:
                raise CodecTableError(path, f"is not a number: {v!r}", line, col) from None
            if not math.isfinite(x) or x <= 0:
                raise CodecTableError(path, f"must be finite and positive, got {v!r}", line, col)
            if col == "ratio" and x > 1.5:
                raise CodecTableError(path, f"compressed/original {x} above 1.5", line, col)
            if col == "ratio_orig_over_comp" and x < 1 / 1.5:
                raise CodecTableError(path, f"original/compressed {x} below 1/1.5", line, col)
        key = (r["codec"], r.get("payload"))
        if key in seen:
            raise CodecTableError(path, f"duplicate row for codec={key[0]!r}"
                                  + (f" payload={key[1]!r}" if key[1] is not None else ""), line)
        seen.add(key)
    return rows


def load_table(data_dir: Path) -> list[dict]:
    """The committed measured table (``data/codecs/codec_table.csv``), validated (:class:`CodecTableError`)."""
    return _read_validated(Path(data_dir) / TABLE, TABLE_COLUMNS, "codec table")


def load_codec(data_dir: Path, codec: str, source: str = "measured",
               payload: str = "mix") -> tuple[float, float, float]:
    """``(ratio compressed/original, compress bytes/s per core, decompress bytes/s per core)``.

    ``source="measured"`` reads our table; ``source="lz4_readme"`` the LZ4 README table the authors used
    (MB there = 10**6 bytes).
    """
    if source == "measured":
        for r in load_table(data_dir):
            if r["codec"] == codec and r["payload"] == payload:
                return float(r["ratio"]), float(r["compress_MBps"]) * 1e6, float(r["decompress_MBps"]) * 1e6
        raise KeyError(f"no measured row for codec={codec!r} payload={payload!r}")
    if source == "lz4_readme":
        for r in _read_validated(Path(data_dir) / LZ4_README, README_COLUMNS, "LZ4 README table"):
            if r["codec"] == codec:
                return (1.0 / float(r["ratio_orig_over_comp"]), float(r["compress_MBps"]) * 1e6,
                        float(r["decompress_MBps"]) * 1e6)
        raise KeyError(f"codec {codec!r} not in the LZ4 README table")
    raise ValueError(f"codec source must be 'measured' or 'lz4_readme', got {source!r}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[3] / "data")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)
    rows = measure(args.data_dir, args.repeats)
    out = args.out or args.data_dir / TABLE
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out} ({platform.processor() or platform.machine()}, python {platform.python_version()})")
    for r in rows:
        print(f"  {r['codec']:7s} {r['payload']:11s} ratio {r['ratio']:.3f}  comp {r['compress_MBps']:8.1f} MB/s"
              f"  decomp {r['decompress_MBps']:8.1f} MB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
