"""Trace loaders on the shipped files and on malformed input: errors name file, line and field."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from mlsys_repro.common.traces import (
    TraceFormatError,
    load_cifar10_jpeg,
    load_coflow_trace,
    load_mnist,
    load_workload_matrix,
    parse_coflow_text,
    parse_idx,
    parse_workload_csv,
)
from mlsys_repro.common.traces.images import fashion_mnist_dir, load_fashion_mnist
from tests.conftest import DATA

FB = DATA / "coflow/FB2010-1Hr-150-0.txt.gz"


# ------------------------------------------------------------------------------------------- coflow


def test_fb_trace_matches_its_readme():
    t = load_coflow_trace(FB)
    assert t.num_ports == 150 and len(t) == 526 and t.num_flows == 706_397
    assert t.coflows[0].arrival_ms == 0 and t.coflows[-1].arrival_ms == 3_629_235
    assert t.total_mb == pytest.approx(35.5e6, rel=0.02)  # "35.5 TB" in MB


GOOD = "4 2\n1 0 2 0 1 1 2:10.0\n2 5 1 3 2 0:1 1:2.5\n"


def test_tiny_known_answer():
    t = parse_coflow_text(GOOD)
    assert [c.id for c in t.coflows] == [1, 2]
    np.testing.assert_array_equal(t.coflows[1].reducers, [0, 1])
    np.testing.assert_allclose(t.coflows[1].reducer_mb, [1.0, 2.5])


@pytest.mark.parametrize("text, line, field", [
    ("4 2\n1 0 2 0 1 1 2:10.0\n", 1, "num_coflows"),                 # truncated: fewer coflows than header
    ("4 1\n1 0 3 0 1 2\n", 2, "mappers"),                              # missing fields: M=3, two listed
    ("4 1\n1 x 1 0 1 2:1\n", 2, "arrival_ms"),                         # non-numeric
    ("4 1\n1 0 1 0 2 2:1\n", 2, "reducers"),                           # R disagrees with listed reducers
    ("4 1\n1 0 2 0 1 2:1\n", 2, "R"),                                  # M disagrees with listed mappers
    ("4 1\n1 0 1 9 1 2:1\n", 2, "mapper[0]"),                          # port out of range
    ("4 1\n1 0 1 0 1 7:1\n", 2, "reducer[0].port"),                    # reducer port out of range
    ("4 1\n1 0 1 0 1 2:-3\n", 2, "reducer[0].MB"),                     # negative MB
    ("4 1\n1 0 1 0 1 2:nan\n", 2, "reducer[0].MB"),                    # NaN MB
    ("4 1\n1 -5 1 0 1 2:1\n", 2, "arrival_ms"),                        # negative arrival
    ("4 1\n1 0 1 0 1 2\n", 2, "reducer[0]"),                           # no colon
    ("4 2\n1 0 1 0 1 2:1\n1 3 1 0 1 2:1\n", 3, "coflow_id"),          # duplicate id
])
def test_malformed_coflow_lines(text, line, field):
    with pytest.raises(TraceFormatError) as ei:
        parse_coflow_text(text, "bad.txt")
    e = ei.value
    assert (e.line, e.field) == (line, field), str(e)
    assert str(e).startswith(f"bad.txt:{line}: field '{field}'")


def test_truncated_gzip_is_named(tmp_path):
    p = tmp_path / "t.txt.gz"
    p.write_bytes(FB.read_bytes()[:5000])
    with pytest.raises(TraceFormatError, match=r"t\.txt\.gz: truncated or corrupt gzip"):
        load_coflow_trace(p)


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="file not found"):
        load_coflow_trace(tmp_path / "nope.txt")


# ------------------------------------------------------------------------------------------- workload


@pytest.mark.parametrize("rel, shape, tcol", [
    ("workload_traces/bitbrains_rnd/cpu_util_pct.csv.gz", (17_856, 402), "ts"),
    ("workload_traces/azure_v1_100vm/cpu_avg_pct.csv.gz", (8_004, 100), "step"),
    ("workload_traces/google2011_gcd_97jobs/cpu_pct.csv.gz", (2_304, 97), "step"),
])
def test_shipped_workload_matrices(rel, shape, tcol):
    m = load_workload_matrix(DATA / rel)
    assert m.shape == shape and m.time_column == tcol and len(m.entities) == shape[1]
    assert np.all(np.diff(m.time) > 0)
    finite = m.values[~np.isnan(m.values)]
    assert finite.min() >= 0
    if "bitbrains" in rel:
        assert 0.04 < m.num_missing / m.values.size < 0.07  # README: 5.3 % gaps


W = "step,a,b\n0,1.0,2.0\n1,,3.0\n2,4.0,5.0\n"


def test_workload_gaps_are_explicit():
    m = parse_workload_csv(W)
    assert m.num_missing == 1 and np.isnan(m.values[1, 0])
    with pytest.raises(TraceFormatError, match="empty cells"):
        parse_workload_csv(W, allow_gaps=False)


@pytest.mark.parametrize("text, line, field, msg", [
    ("step,a,b\n0,1,2\n1,NaN,3\n", 3, "a", "not a number"),
    ("step,a,b\n0,1,2\n1,x,3\n", 3, "a", "not a number"),
    ("step,a,b\n0,1,2\n1,-1,3\n", 3, "a", "negative"),
    ("step,a,b\n0,1,2\n1,1\n", 3, None, "2 fields"),
    ("step,a,b\n0,1,2\n0,1,3\n", 3, "step", "does not increase"),
    ("step,a,b\n0,1,2\n1.5,1,3\n", 3, "step", "integer"),
    ("step,a,a\n0,1,2\n", 1, None, "duplicate"),
    ("step,a,b\n", 1, None, "at least one data row"),
    ("step,a,b\n0,1,2\n1,inf,3\n", 3, "a", "infinite"),
])
def test_malformed_workload(text, line, field, msg):
    with pytest.raises(TraceFormatError, match=msg) as ei:
        parse_workload_csv(text, "w.csv")
    assert (ei.value.line, ei.value.field) == (line, field)


def test_workload_truncated_gzip(tmp_path):
    src = DATA / "workload_traces/google2011_gcd_97jobs/cpu_pct.csv.gz"
    p = tmp_path / "cut.csv.gz"
    p.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    with pytest.raises(TraceFormatError, match="cut.csv.gz: truncated or corrupt gzip"):
        load_workload_matrix(p)


# ------------------------------------------------------------------------------------------- images


def test_mnist_counts_and_mean():
    x, y = load_mnist(DATA, "train")
    assert x.shape == (60_000, 28, 28, 1) and x.dtype == np.uint8
    np.testing.assert_array_equal(np.bincount(y), [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949])
    assert x.mean() == pytest.approx(33.318, abs=0.01)
    xt, yt = load_mnist(DATA, "test")
    assert xt.shape[0] == yt.shape[0] == 10_000


def test_cifar_jpeg_subset_decodes():
    x, y = load_cifar10_jpeg(DATA, "test", limit=5)
    assert x.shape == (50, 32, 32, 3) and np.bincount(y).tolist() == [5] * 10
    assert 80 < x.mean() < 160


def _idx(magic: int, dims: list[int], body: bytes) -> bytes:
    return magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + body


def test_idx_errors(tmp_path):
    assert parse_idx(_idx(2049, [3], bytes([1, 2, 3]))).tolist() == [1, 2, 3]
    with pytest.raises(TraceFormatError, match="magic"):
        parse_idx(_idx(1234, [3], bytes(3)), "f")
    with pytest.raises(TraceFormatError, match="body"):
        parse_idx(_idx(2051, [2, 2, 2], bytes(7)), "f")
    with pytest.raises(TraceFormatError, match="header truncated"):
        parse_idx(b"\x00\x00", "f")
    # labels out of range in an otherwise valid pair of files
    d = tmp_path / "images/mnist"
    d.mkdir(parents=True)
    (d / "train-images.idx3-ubyte.gz").write_bytes(gzip.compress(_idx(2051, [2, 1, 1], bytes(2))))
    (d / "train-labels.idx1-ubyte.gz").write_bytes(gzip.compress(_idx(2049, [2], bytes([3, 12]))))
    with pytest.raises(TraceFormatError, match="labels outside") as ei:
        load_mnist(tmp_path, "train")
    assert ei.value.field == "label"
    (d / "train-labels.idx1-ubyte.gz").write_bytes(gzip.compress(_idx(2049, [3], bytes([3, 1, 2]))))
    with pytest.raises(TraceFormatError, match="3 labels for 2 images"):
        load_mnist(tmp_path, "train")


def test_fashion_mnist_when_installed():
    if fashion_mnist_dir(DATA) is None:
        pytest.skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist); .ci/run installs it")
    x, y = load_fashion_mnist(DATA, "test")
    assert x.shape == (10_000, 28, 28, 1) and np.bincount(y).tolist() == [1000] * 10
