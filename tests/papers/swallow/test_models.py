"""Codec table, CPU-load series, speed predictors and the JCT model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.traces import parse_coflow_text
from mlsys_repro.common.traces.errors import TraceFormatError
from mlsys_repro.papers.swallow import codecs, cpuload, jobs
from mlsys_repro.papers.swallow.flows import build_flow_table
from mlsys_repro.papers.swallow.predictor import ewma_predict, windows
from tests.conftest import DATA


@pytest.fixture
def data_dir():
    return DATA


def test_measured_codec_table_is_consistent(data_dir):
    rows = codecs.load_table(data_dir)
    assert {r["codec"] for r in rows} == {"lz4", "snappy", "zstd"}
    for r in rows:
        assert float(r["ratio"]) == pytest.approx(int(r["compressed_bytes"]) / int(r["original_bytes"]), abs=1e-4)
        assert float(r["compress_MBps"]) > 0 and float(r["decompress_MBps"]) > 0
    ratio, s, d = codecs.load_codec(data_dir, "lz4")
    assert 0 < ratio < 1 and s > 0 and d > s  # LZ4 decompresses faster than it compresses
    # the authors' constants: LZ4 1.7.3, 2.101 original/compressed (r = 0.48), 625 MB/s
    r, s, d = codecs.load_codec(data_dir, "lz4", "lz4_readme")
    assert r == pytest.approx(1 / 2.101) and s == 625e6 and d == 3220e6
    # zstd compresses tighter than LZ4 on the mixed payload
    assert codecs.load_codec(data_dir, "zstd")[0] < codecs.load_codec(data_dir, "lz4")[0]


def _broken_copy(tmp_path, edit):
    """A data dir whose codec table is the committed one with ``edit(rows)`` applied (rows: list of CSV lines)."""
    (tmp_path / "codecs").mkdir()
    for name in ("codec_table.csv", "lz4_readme_table.csv"):
        (tmp_path / "codecs" / name).write_text((DATA / "codecs" / name).read_text())
    path = tmp_path / codecs.TABLE
    lines = path.read_text().splitlines()
    path.write_text("\n".join(edit(lines)) + "\n")
    return tmp_path


@pytest.mark.parametrize("edit, message", [
    (lambda ls: [ls[0], ls[1].replace(",0.48472,", ",nan,")] + ls[2:], r"codec_table.csv:2: field 'ratio': must be"),
    (lambda ls: ls[:2] + [ls[2].replace(",316.8,", ",fast,")] + ls[3:], r":3: field 'compress_MBps': is not a number"),
    (lambda ls: ls[:3] + [ls[3].replace(",0.38115,", ",2.5,")] + ls[4:], r":4: field 'ratio': compressed/original 2.5"),
    (lambda ls: ls + [ls[1]], r"duplicate row for codec='lz4' payload='trace_text'"),
    (lambda ls: [ls[0].replace("decompress_MBps", "decomp")] + ls[1:], r"missing column\(s\) \['decompress_MBps'\]"),
    (lambda ls: [ls[0], "lz4" + ls[1][3:].replace("trace_text", "")] + ls[2:], r":2: field 'payload': is empty"),
])
def test_malformed_codec_table_names_file_line_and_field(tmp_path, edit, message):
    bad = _broken_copy(tmp_path, edit)
    with pytest.raises(TraceFormatError, match=message):  # the runner's one-line data-file error
        codecs.load_codec(bad, "lz4")
    assert str(bad / codecs.TABLE) in str(pytest.raises(codecs.CodecTableError, codecs.load_table, bad).value)


def test_malformed_lz4_readme_table_is_rejected(tmp_path):
    bad = _broken_copy(tmp_path, lambda ls: ls)
    p = bad / codecs.LZ4_README
    p.write_text(p.read_text().replace(",2.101,", ",-2.101,"))
    with pytest.raises(codecs.CodecTableError, match=r"lz4_readme_table.csv:2: field 'ratio_orig_over_comp': must be"):
        codecs.load_codec(bad, "lz4", "lz4_readme")


def test_codec_lookup_errors(data_dir):
    with pytest.raises(KeyError):
        codecs.load_codec(data_dir, "brotli")
    with pytest.raises(KeyError):
        codecs.load_codec(data_dir, "lz4", payload="nope")
    with pytest.raises(ValueError):
        codecs.load_codec(data_dir, "lz4", source="web")


def test_codecs_round_trip():
    payload = (b"mapper 17 reducer 3 " * 2000) + bytes(range(256)) * 10
    for cd in codecs.codecs():
        assert cd.decompress(cd.compress(payload)) == payload, cd.name


def test_fill_gaps_forward_fills_and_clips():
    x = np.array([[np.nan, 5.0], [10.0, np.nan], [np.nan, 120.0], [3.0, np.nan]])
    got = cpuload.fill_gaps(x)
    np.testing.assert_array_equal(got, [[0, 5], [10, 5], [10, 100], [3, 100]])


def test_port_window_is_seeded_and_in_the_test_split(data_dir):
    tr = cpuload.load_cpu_trace(str(data_dir), "azure")
    h1, w1 = cpuload.port_window(tr, 150, 64, 12, seed=3)
    h2, w2 = cpuload.port_window(tr, 150, 64, 12, seed=3)
    assert h1.shape == (12, 150) and w1.shape == (64, 150)
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(h1, h2)
    assert np.all((w1 >= 0) & (w1 <= 100))
    test = tr.split("test")
    assert set(np.unique(w1)) <= set(np.unique(test))
    with pytest.raises(ValueError):
        cpuload.load_cpu_trace(str(data_dir), "google")


def test_windows_and_ewma_known_answers():
    series = np.arange(10, dtype=float).reshape(5, 2)  # T=5, N=2
    X, y = windows(series, 2)
    # t0 = 0, 1, 2; per t0 the two columns
    np.testing.assert_array_equal(X, [[0, 2], [1, 3], [2, 4], [3, 5], [4, 6], [5, 7]])
    np.testing.assert_array_equal(y, [4, 5, 6, 7, 8, 9])
    np.testing.assert_allclose(ewma_predict(np.array([[0.0, 10.0, 20.0]]), 0.5), [12.5])
    np.testing.assert_allclose(ewma_predict(np.array([[4.0, 8.0]]), 1.0), [8.0])  # alpha 1 = last value


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.5, 4.0), st.floats(0.0, 1.0))
def test_jct_model_is_seeded_positive_and_policy_independent(seed, kappa, sigma):
    ft = build_flow_table(parse_coflow_text("4 3\n1 0 1 0 1 1:10\n2 50 2 0 1 2 2:8 3:4\n3 90 1 2 1 3:1\n"))
    m1, r1 = jobs.compute_stages_s(ft, seed, kappa, sigma)
    m2, r2 = jobs.compute_stages_s(ft, seed, kappa, sigma)
    np.testing.assert_array_equal(m1, m2)
    assert np.all(m1 > 0) and np.all(r1 > 0)
    if sigma == 0:  # kappa exact: map + reduce = kappa x isolated shuffle at 1 Gbps
        np.testing.assert_allclose(m1 + r1, kappa * ft.cof_alpha * 8 / 2.0**30)
    cct = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(jobs.jct_s(cct, m1, r1) - jobs.jct_s(cct / 2, m1, r1), cct / 2)


def test_jct_model_rejects_bad_parameters():
    ft = build_flow_table(parse_coflow_text("2 1\n1 0 1 0 1 1:10\n"))
    with pytest.raises(ValueError):
        jobs.compute_stages_s(ft, 0, median_kappa=0.0)
    with pytest.raises(ValueError):
        jobs.compute_stages_s(ft, 0, sigma=-1.0)
    with pytest.raises(ValueError, match="disk_Bps"):
        jobs.io_stages_s(ft, np.ones(1), 0.0)
    with pytest.raises(ValueError, match="wire_fraction"):
        jobs.io_stages_s(ft, np.ones(2))
    with pytest.raises(ValueError, match="wire_fraction"):
        jobs.io_stages_s(ft, np.array([1.5]))


def test_disk_stages_known_answer_and_compression_gains_more_in_jct_than_in_cct():
    # coflow 1: 2 mappers, reducers 2 (8 MB) and 3 (4 MB): 6 MB per mapper, the busiest reducer reads 8 MB
    ft = build_flow_table(parse_coflow_text("4 2\n1 0 1 0 1 1:10\n2 50 2 0 1 2 2:8 3:4\n"))
    spill, merge = jobs.io_stages_s(ft, np.ones(2), disk_Bps=2**20)
    np.testing.assert_allclose(spill, [10.0, 6.0])
    np.testing.assert_allclose(merge, [10.0, 8.0])
    half = jobs.io_stages_s(ft, np.array([0.5, 0.5]), disk_Bps=2**20)
    np.testing.assert_allclose(half[0] + half[1], (spill + merge) / 2)
    # a policy that halves CCT *and* the compressed volume: JCT speed-up > CCT speed-up; without disk, it cannot
    mp, rd = jobs.compute_stages_s(ft, 0)
    cct = np.array([4.0, 4.0])
    base = jobs.jct_s(cct, mp, rd, spill, merge)
    ours = jobs.jct_s(cct / 2, mp, rd, *half)
    no_disk = jobs.jct_s(cct, mp, rd) / jobs.jct_s(cct / 2, mp, rd)
    assert np.all(no_disk < 2.0) and np.all(base / ours > no_disk)


def test_forecaster_is_picked_on_the_validation_split_only():
    import jax

    from mlsys_repro.papers.swallow.predictor import GruConfig, Trained, make_train, pick_by_error, select_on_validation

    assert pick_by_error({"last": {"mae": 1.0}, "ewma": {"mae": 0.5}, "gru": {"mae": 0.7}}) == "ewma"
    assert pick_by_error({"last": {"mae": 0.5}, "ewma": {"mae": 0.5}, "gru": {"mae": 0.5}}) == "last"  # simplest
    rng = np.random.default_rng(0)
    walk = np.clip(50 + np.cumsum(rng.normal(0, 5, (400, 3)), axis=0), 0, 100)  # last value is the best guess
    noise = np.clip(50 + rng.normal(0, 20, (400, 3)), 0, 100)  # a mean is the best guess: EWMA wins

    class Trace:  # the test split must never be read
        def __init__(self, x):
            self.x = x

        def split(self, name):
            assert name != "test", "model selection read the test split"
            return {"train": self.x[:280], "val": self.x[280:320]}[name]

    cfg = GruConfig(window=6, hidden=4, steps=3, batch=8)
    for series, want in ((walk, "last"), (noise, "ewma")):
        graphdef, train = make_train(cfg, series[:280])
        params, losses = jax.jit(train)(jax.random.key(0))
        tr = Trained(graphdef, params, 0.1 if want == "ewma" else 0.9, cfg.window, np.asarray(losses))
        got = select_on_validation(tr, Trace(series), stride=1)
        assert got in (want, "gru")  # a 3-step GRU is a residual on the last value: it may tie, never the other
        if want == "ewma":
            assert got == "ewma"


# --- map/shuffle pipelining (jobs.pipelined_jct_s) ---------------------------------------------------------------

_STAGES = dict(map_s=np.array([4.0, 0.0, 3.0]), spill_s=np.array([1.0, 0.0, 3.0]), cct_s=np.array([2.0, 5.0, 3.0]),
               merge_s=np.array([1.0, 0.0, 3.0]), reduce_s=np.array([0.5, 1.0, 0.0]))


def test_pipelined_jct_with_one_chunk_is_jct_exactly():
    rng = np.random.default_rng(7)
    st_ = {k: rng.exponential(3.0, 50) for k in ("cct_s", "map_s", "reduce_s", "spill_s", "merge_s")}
    np.testing.assert_array_equal(jobs.pipelined_jct_s(**st_), jobs.jct_s(**st_))
    np.testing.assert_array_equal(jobs.pipelined_jct_s(**st_, chunks=np.ones(50, np.int64)), jobs.jct_s(**st_))
    np.testing.assert_array_equal(jobs.pipelined_jct_s(**_STAGES, chunks=1), jobs.jct_s(**_STAGES))
    # scalars, positional like jct_s
    assert float(jobs.pipelined_jct_s(2.0, 4.0, 0.5, 1.0, 1.0)) == jobs.jct_s(2.0, 4.0, 0.5, 1.0, 1.0) == 8.5


def test_pipelined_jct_known_answers():
    # stages 4, 1, 2, 1 in 4 pieces of 1, .25, .5, .25: the map is the bottleneck, makespan 4 + (8 - 4) / 4 = 5
    assert float(jobs.pipelined_jct_s(cct_s=2.0, map_s=4.0, reduce_s=0.5, spill_s=1.0, merge_s=1.0, chunks=4)) == 5.5
    # per coflow: [4,1,2,1] n=4 -> 5; [0,0,5,0] -> the shuffle alone, 5, whatever n; [3,3,3,3] n=3 -> 3 + 9/3 = 6
    got = jobs.pipelined_jct_s(**_STAGES, chunks=np.array([4, 7, 3]))
    np.testing.assert_allclose(got, [5.5, 6.0, 6.0])
    # two pieces of equal stages 3, 3, 3, 3: piece 1 leaves merge at 4 x 1.5 = 6, piece 2 right behind, at 7.5
    assert float(jobs.pipelined_jct_s(3.0, 3.0, 0.0, 3.0, 3.0, chunks=2)) == 7.5
    # no spill/merge (disk_Bps = inf): map 4, shuffle 2, n = 2 -> 4 + 2/2 = 5, plus reduce
    assert float(jobs.pipelined_jct_s(cct_s=2.0, map_s=4.0, reduce_s=1.0, chunks=2)) == 6.0


def test_pipelined_jct_is_non_increasing_in_chunks_and_tends_to_the_longest_stage():
    rng = np.random.default_rng(3)
    st_ = {k: rng.exponential(2.0, 40) for k in ("cct_s", "map_s", "reduce_s", "spill_s", "merge_s")}
    longest = np.max([st_[k] for k in ("map_s", "spill_s", "cct_s", "merge_s")], axis=0)
    floor = longest + st_["reduce_s"]
    prev = jobs.jct_s(**st_)
    for n in (1, 2, 3, 4, 8, 16, 100, 10**4, 10**6):
        cur = jobs.pipelined_jct_s(**st_, chunks=n)
        assert np.all(cur <= prev) and np.all(cur >= floor)
        prev = cur
    assert np.all(prev < jobs.jct_s(**st_))  # strictly better than the barrier once a second stage is non-zero
    np.testing.assert_allclose(prev, floor, rtol=1e-5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False), min_size=5, max_size=5),
       st.integers(1, 10**9))
def test_pipelined_jct_lies_between_longest_stage_and_barrier(times, n):
    cct, mp, rd, sp, mg = times
    got = float(jobs.pipelined_jct_s(cct, mp, rd, sp, mg, chunks=n))
    assert max(mp, sp, cct, mg) + rd <= got <= float(jobs.jct_s(cct, mp, rd, sp, mg))
    # and equals the pipeline formula sum/n + (n - 1) max/n, up to rounding
    total, longest = mp + sp + cct + mg, max(mp, sp, cct, mg)
    assert got == pytest.approx(total / n + (n - 1) * longest / n + rd, rel=1e-9, abs=1e-9)


def test_pipelined_jct_rejects_bad_inputs():
    ok = dict(cct_s=np.ones(2), map_s=np.ones(2), reduce_s=np.ones(2))
    for bad in (0, -1, 1.0, 2.5, True, np.array([1, 0]), np.array([2.0, 3.0])):
        with pytest.raises(ValueError, match="chunks"):
            jobs.pipelined_jct_s(**ok, chunks=bad)
    for name in ("cct_s", "map_s", "reduce_s", "spill_s", "merge_s"):
        for v in (np.array([1.0, -0.5]), np.array([np.nan, 1.0]), np.array([1.0, np.inf]), -1.0):
            with pytest.raises(ValueError, match=name):
                jobs.pipelined_jct_s(**(ok | {name: v}), chunks=2)
    with pytest.raises(ValueError, match="broadcast"):
        jobs.pipelined_jct_s(**(ok | {"cct_s": np.ones(3)}))
    with pytest.raises(ValueError, match="broadcast"):
        jobs.pipelined_jct_s(**ok, chunks=np.array([1, 2, 3]))


def test_payload_models_weight_mapper_classes_by_bytes(data_dir):
    """per_mapper: a coflow's ratio is the byte-weighted mean of its mappers' class ratios and its speed their
    byte-weighted harmonic mean; per_coflow: one class per coflow; both seeded; a single class is the table row."""
    from mlsys_repro.papers.swallow.data import _mapper_bytes, codec_numbers
    from mlsys_repro.papers.swallow.schemas import CoflowFabric

    # coflow 1: one mapper; coflow 2: mappers 0 and 1, reducers 2 (8 MB) and 3 (4 MB): 6 MB per mapper
    text = "4 2\n1 0 1 0 1 1:10\n2 50 2 0 1 2 2:8 3:4\n"
    ft = build_flow_table(parse_coflow_text(text))
    np.testing.assert_allclose(_mapper_bytes(ft), np.array([10.0, 6.0, 6.0]) * 2**20)
    hw = CoflowFabric()
    table = [codecs.load_codec(data_dir, "lz4", "measured", pl) for pl in codecs.PAYLOADS]
    r_cls, s_cls = np.minimum([t[0] for t in table], 1.0), np.array([t[1] for t in table])
    for seed in range(20):
        r, s = codec_numbers(data_dir, hw, "lz4", ft, seed, "per_mapper")
        r2, s2 = codec_numbers(data_dir, hw, "lz4", ft, seed, "per_mapper")
        np.testing.assert_array_equal(r, r2)
        np.testing.assert_array_equal(s, s2)
        assert r.shape == s.shape == (2,)
        assert r[0] in r_cls and s[0] in s_cls  # one mapper: one class, exactly
        # two equal-byte mappers: the mean of two class ratios, the harmonic mean of two class speeds
        pairs = [(a, b) for a in range(5) for b in range(5)]
        assert any(np.isclose(r[1], (r_cls[a] + r_cls[b]) / 2) and np.isclose(s[1], 2 / (1 / s_cls[a] + 1 / s_cls[b]))
                   for a, b in pairs)
        rc, sc = codec_numbers(data_dir, hw, "lz4", ft, seed, "per_coflow")
        assert all(x in r_cls for x in rc) and all(x in s_cls for x in sc)
    seen = {tuple(codec_numbers(data_dir, hw, "lz4", ft, seed, "per_mapper")[0]) for seed in range(20)}
    assert len(seen) > 5  # seeds draw different classes
    r, s = codec_numbers(data_dir, hw, "lz4", ft, 0, "cpu_csv")
    assert r.shape == (1,) and (r[0], s[0]) == (min(table[1][0], 1.0), table[1][1])
    with pytest.raises(ValueError, match="flow table"):
        codec_numbers(data_dir, hw, "lz4", None, 0, "per_mapper")


def test_per_mapper_payloads_narrow_the_spread_of_a_wide_coflows_ratio(data_dir):
    """A coflow with many mappers averages many draws: its ratio varies across seeds far less than one class per
    coflow does (the reason the headline draws per mapper)."""
    from mlsys_repro.papers.swallow.data import codec_numbers
    from mlsys_repro.papers.swallow.schemas import CoflowFabric

    mappers = " ".join(str(i) for i in range(40))
    ft = build_flow_table(parse_coflow_text(f"41 1\n1 0 40 {mappers} 1 40:400\n"))
    hw = CoflowFabric()
    per_mapper = [codec_numbers(data_dir, hw, "lz4", ft, s, "per_mapper")[0][0] for s in range(40)]
    per_coflow = [codec_numbers(data_dir, hw, "lz4", ft, s, "per_coflow")[0][0] for s in range(40)]
    assert np.std(per_mapper) < 0.3 * np.std(per_coflow)
