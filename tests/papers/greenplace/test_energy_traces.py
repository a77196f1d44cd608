"""mlsys_repro/common/traces/energy.py: formats, gaps, negative prices, clear errors, and the vendored files."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.common.traces import LOADERS
from mlsys_repro.common.traces.energy import (
    fill_gaps,
    load_carbon_series,
    load_latency_table,
    load_price_series,
    load_profile,
    parse_carbon_csv,
    parse_latency_csv,
    parse_price_csv,
    parse_profile_csv,
    region_year,
)
from mlsys_repro.common.traces.errors import TraceFormatError
from tests.conftest import DATA

PH = "Datetime (UTC),Datetime (Local),Price (USD/MWh)\n"
CH = "datetime_utc,zone_id,ci_direct_gco2_per_kwh,ci_lca_gco2_per_kwh,low_carbon_pct,renewable_pct,estimated\n"


def _price(rows):
    return PH + "".join(f"2023-01-01 {h:02d}:00:00+00:00,x,{v}\n" for h, v in rows)


def test_negative_prices_are_kept():
    s = parse_price_csv(_price([(0, -484.4), (1, 12.5)]))
    assert s.values.tolist() == [-484.4, 12.5] and s.num_missing == 0


def test_missing_hours_and_empty_cells_become_counted_gaps():
    s = parse_price_csv(_price([(0, 1.0), (1, ""), (4, 4.0)]))
    assert len(s) == 5 and s.num_missing == 3
    assert np.isnan(s.values[[1, 2, 3]]).all() and s.values[4] == 4.0
    filled, n = fill_gaps(s.values)
    assert n == 3 and np.allclose(filled, [1.0, 1.75, 2.5, 3.25, 4.0])


def test_fill_gaps_is_linear_and_bounded():
    v = np.array([np.nan, 0.0, np.nan, np.nan, 3.0, np.nan])
    out, n = fill_gaps(v)
    assert n == 4 and np.allclose(out, [0, 0, 1, 2, 3, 3])
    with pytest.raises(ValueError, match="exceeds max_gap"):
        fill_gaps(np.array([1.0, np.nan, np.nan, 2.0]), max_gap=1)
    with pytest.raises(ValueError, match="every value"):
        fill_gaps(np.array([np.nan, np.nan]))


@pytest.mark.parametrize("text, line, field, msg", [
    (_price([(0, 1.0), (0, 2.0)]), 3, "Datetime (UTC)", "duplicate"),
    (_price([(2, 1.0), (1, 2.0)]), 3, "Datetime (UTC)", "decreasing"),
    (_price([(0, "abc")]), 2, "Price (USD/MWh)", "not a number"),
    (_price([(0, "inf")]), 2, "Price (USD/MWh)", "non-finite"),
    (PH + "2023-01-01 00:30:00+00:00,x,1\n", 2, "Datetime (UTC)", "not on the hour"),
    (PH + "yesterday,x,1\n", 2, "Datetime (UTC)", "not a timestamp"),
    (PH + "2023-01-01 00:00:00+00:00,1\n", 2, None, "2 fields"),
    ("a,b\n1,2\n", 1, None, "lacks columns"),
])
def test_price_errors_name_line_and_field(text, line, field, msg):
    with pytest.raises(TraceFormatError, match=msg) as e:
        parse_price_csv(text, "p.csv")
    assert e.value.line == line and e.value.field == field and e.value.path == "p.csv"


def test_carbon_checks_ranges_and_converts_percent():
    ok = parse_carbon_csv(CH + "2023-01-01 00:00:00,DE,100,120,80,55.5,false\n")
    assert ok.renewable_frac[0] == pytest.approx(0.555) and ok.ci_direct[0] == 100
    with pytest.raises(TraceFormatError, match="outside") as e:
        parse_carbon_csv(CH + "2023-01-01 00:00:00,DE,100,120,80,101,false\n")
    assert e.value.field == "renewable_pct"
    with pytest.raises(TraceFormatError, match="negative carbon"):
        parse_carbon_csv(CH + "2023-01-01 00:00:00,DE,-1,120,80,50,false\n")
    with pytest.raises(TraceFormatError, match="true/false"):
        parse_carbon_csv(CH + "2023-01-01 00:00:00,DE,1,120,80,50,maybe\n")


def test_region_year_aligns_fills_and_converts_units():
    p = parse_price_csv(_price([(0, -20.0), (2, 40.0)]))
    c = parse_carbon_csv(CH + "2023-01-01 00:00:00,DE,100,1,1,50,false\n2023-01-01 02:00:00,DE,300,1,1,70,true\n")
    ry = region_year(p, c, "DE", 2023, max_gap=None)
    assert ry.price_usd_per_kwh.size == 8760
    assert ry.price_usd_per_kwh[:3] == pytest.approx([-0.02, 0.01, 0.04])
    assert ry.ci_g_per_kwh[1] == pytest.approx(200.0) and ry.renewable_frac[1] == pytest.approx(0.6)
    assert not np.isnan(ry.price_usd_per_kwh).any()


def test_profile_and_latency_parsers():
    prof = parse_profile_csv("\ufeffload [kW]\n1\n2\n3\n", expected_rows=3)
    assert prof.values.tolist() == [1, 2, 3]
    with pytest.raises(TraceFormatError, match="expected 4 hourly rows"):
        parse_profile_csv("load\n1\n2\n3\n", expected_rows=4)
    with pytest.raises(TraceFormatError, match="negative"):
        parse_profile_csv("load\n1\n-2\n", expected_rows=None)
    t = parse_latency_csv("HW,Cin,latency\n8,3,0.5\n", "batchnorm")
    assert t.shape == (1, 3)
    with pytest.raises(TraceFormatError, match="> 0") as e:
        parse_latency_csv("HW,Cin,latency\n8,3,0\n", "batchnorm")
    assert e.value.line == 2 and e.value.field == "latency"
    with pytest.raises(TraceFormatError, match="no gaps"):
        parse_latency_csv("HW,Cin,latency\n8,,1\n", "batchnorm")
    with pytest.raises(TraceFormatError, match="unknown layer type"):
        parse_latency_csv("HW,Cin,latency\n8,3,1\n", "lstm")


def test_vendored_files_load_without_gaps():
    g = DATA / "energy/green-dcc"
    p = load_price_series(g / "price_DE-LU_2023.csv.gz")
    c = load_carbon_series(g / "ci_DE-LU_2023.csv.gz")
    assert len(p) == 8760 and p.num_missing == 0 and c.num_missing == 0
    assert p.values.min() < -400  # a real negative price, kept
    assert load_profile(next((DATA / "energy/pymgrid/load").glob("*.csv.gz"))).values.min() > 0
    t = load_latency_table(DATA / "energy/neurosurgeon-tjyy/edge_conv_lat.csv.gz", "conv")
    assert len(t) == 12051 and (t["latency"] > 0).all()
    assert "energy_green_dcc" in LOADERS


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(TraceFormatError, match="file not found"):
        load_price_series(tmp_path / "nope.csv.gz")
