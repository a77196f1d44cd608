"""Trace-to-flow conventions (coflowsim's) on hand-made traces, and clear errors on malformed trace lines."""

import numpy as np
import pytest

from mlsys_repro.common.traces import TraceFormatError, load_coflow_trace, parse_coflow_text
from mlsys_repro.papers.swallow.flows import MIB, Conventions, build_flow_table, varys_bin
from mlsys_repro.papers.swallow.javarand import JavaRandom

TINY = """4 3
7 500 2 3 1 1 0:5
9 0 1 2 2 3:1 0:2
8 500 3 0 1 2 1 3:60
"""


def test_rounding_split_order_and_keys():
    ft = build_flow_table(parse_coflow_text(TINY))
    # arrival order, stable: 9 (0 ms), 7 (500), 8 (500)
    assert ft.cof_id.tolist() == [9, 7, 8]
    # coflow 9: one mapper (port 2), reducers 0 (2 MB) then 3 (1 MB): reducer ports ascending
    assert ft.red_port[:2].tolist() == [0, 3]
    assert ft.red_bytes[:2].tolist() == [2 * MIB, 1 * MIB]
    # coflow 7: mappers {1, 3}, reducer 0 with 5 MB -> rounded up to 6 MB (multiple of M=2) -> 3 MB per flow
    c = 1
    lo, n = ft.cof_first_flow[c], ft.cof_num_flow[c]
    assert ft.flow_src[lo:lo + n].tolist() == [1, 3]
    assert ft.flow_bytes[lo:lo + n].tolist() == [3 * MIB, 3 * MIB]
    assert ft.cof_bytes[c] == 6 * MIB and ft.cof_orig_bytes[c] == 5 * MIB
    # SEBF alpha = max(total/M, max reducer bytes) = max(3, 6) MB; SCF = max reducer / M; NCF = min(M, R)
    assert ft.cof_alpha[c] == 6 * MIB
    assert ft.cof_scf_key[c] == 3 * MIB and ft.cof_ncf_key[c] == 1
    # coflow 8: 3 mappers, 60 MB -> 20 MB per flow, alpha = max(20, 60) MB
    assert ft.cof_alpha[2] == 60 * MIB and ft.cof_ncf_key[2] == 1
    # deadline multipliers: 1 + nextDouble() of java.util.Random(17), in arrival order
    r = JavaRandom(17)
    assert ft.cof_deadline_mult.tolist() == [1.0 + r.next_double() for _ in range(3)]
    # flows: coflow-major, reducer-major inside, mapper ports ascending
    assert ft.flow_cof.tolist() == [0, 0, 1, 1, 2, 2, 2]
    assert ft.flow_dst.tolist() == [0, 3, 0, 0, 3, 3, 3]
    assert ft.total_bytes == pytest.approx((3 + 6 + 60) * MIB)


def test_exact_split_and_minimum_flow():
    ft = build_flow_table(parse_coflow_text("4 1\n1 0 3 0 1 2 1 3:1\n"), Conventions(mb_round="none"))
    # 1 MB over 3 mappers would be 1/3 MB per flow; coflowsim's floor makes every flow at least 1 MB
    assert ft.flow_bytes.tolist() == [MIB] * 3
    ft = build_flow_table(parse_coflow_text("4 1\n1 0 3 0 1 2 1 3:1\n"), Conventions(mb_round="none", min_flow_mb=0))
    assert ft.flow_bytes == pytest.approx([MIB / 3] * 3)


def test_max_coflows_and_bins():
    ft = build_flow_table(parse_coflow_text(TINY), max_coflows=2)
    assert ft.num_coflows == 2 and ft.cof_id.tolist() == [9, 7]
    assert varys_bin(1, np.array([4.0])) == 0  # short narrow
    assert varys_bin(1, np.array([5.0])) == 1  # long narrow
    assert varys_bin(10, np.array([1.0] * 6)) == 2  # 60 flows: wide, short
    assert varys_bin(2, np.array([100.0] * 30)) == 3
    with pytest.raises(ValueError):
        build_flow_table(parse_coflow_text(TINY), max_coflows=0)


def test_the_shipped_trace(data_dir=None):
    from tests.conftest import DATA

    ft = build_flow_table(load_coflow_trace(DATA / "coflow/FB2010-1Hr-150-0.txt.gz"))
    assert (ft.num_coflows, ft.num_ports, ft.num_flows) == (526, 150, 706397)
    assert np.bincount(ft.cof_bin, minlength=4).tolist() == [309, 90, 59, 68]
    assert np.all(np.diff(ft.cof_arrival_ms) >= 0)
    assert ft.total_bytes / MIB == 35533534  # every reducer is already a multiple of its mapper count


@pytest.mark.parametrize("text, line, field", [
    ("4 1\n1 0 2 0\n", 2, None),  # too few fields
    ("4 1\n1 zero 1 0 1 2:3\n", 2, "arrival_ms"),  # non-numeric
    ("4 1\n1 0 2 0 1 2:3\n", 2, "R"),  # M=2 mappers, then a reducer entry where the count R should be
    ("4 1\n1 0 3 0 1 2:3\n", 2, "mappers"),  # M=3 but the line ends first
    ("4 1\n1 0 2 1 1 1 2:3\n", 2, "mappers"),  # duplicate mapper port
    ("4 1\n1 0 1 0 2 2:3\n", 2, "reducers"),  # R=2 but one reducer entry
    ("4 1\n1 0 1 9 1 2:3\n", 2, "mapper[0]"),  # port out of range
    ("4 1\n1 0 1 0 1 2:x\n", 2, "reducer[0].MB"),
    ("4 2\n1 0 1 0 1 2:3\n", 1, "num_coflows"),  # truncated file
])
def test_malformed_lines_name_line_and_field(text, line, field):
    with pytest.raises(TraceFormatError) as e:
        build_flow_table(parse_coflow_text(text, "bad.txt"))
    msg = str(e.value)
    assert f"bad.txt:{line}:" in msg
    if field:
        assert field in msg
