"""mlsys_repro.common.traces.gpu: the shipped GPU traces match their READMEs; malformed rows fail with file/line/field;
invalid jobs are counted filters (or errors with strict=True)."""

from __future__ import annotations

import gzip
import io
import tarfile
from types import SimpleNamespace

import numpy as np
import pytest

from mlsys_repro.common.traces import TraceFormatError, load_trace
from mlsys_repro.common.traces import gpu as G
from tests.conftest import DATA

D = DATA / "gpu_traces"
PH_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
SIA_HEAD = "source_set,workload,name,time_s,application,num_replicas,batch_size\n"


# ---------------------------------------------------------------------------------------------- shipped files


def test_philly_matches_readme():
    p = G.load_philly_jobs(D / "philly/sia_philly_jobs.csv.gz")
    assert len(p) == 82_247 and p.dropped == {"duration<=0": 0, "num_gpus<=0": 0}
    assert np.all(np.diff(p.submit_s) >= 0)
    counts = dict(zip(*np.unique(p.num_gpus, return_counts=True), strict=True))
    assert counts[1] == 76_627 and counts[8] == 1_643 and counts[128] == 3
    np.testing.assert_allclose(p.gpu_time_s, p.duration_s * p.num_gpus)


def test_registered_loaders_dispatch():
    cfg = SimpleNamespace(name="t", loader="sia_workloads", files={"workloads": "gpu_traces/sia_workloads/"
                                                                   "sia_pollux_workloads.csv.gz"},
                          options={"source_set": "saturn"})
    w = load_trace(cfg, DATA)
    assert len(w) == 1_600 and set(w.source_set) == {"saturn"}
    assert w.workloads("saturn")[:3] == ["workload-1", "workload-2", "workload-3"]


def test_saturn_select_and_unknown_names():
    w = G.load_sia_workloads(D / "sia_workloads/sia_pollux_workloads.csv.gz")
    s = w.select("saturn", "workload-7")
    assert len(s) == 160 and np.all(np.diff(s.time_s) >= 0)
    with pytest.raises(KeyError, match="no source_set"):
        w.select("nope")
    with pytest.raises(KeyError, match="no workload"):
        w.select("saturn", "workload-99")


def test_alibaba_pods_and_nodes():
    pods = G.load_alibaba_pods(D / "alibaba_openb2023/openb_pod_list_default.csv.gz")
    assert pods.dropped["num_gpu==0"] == 1_088 and len(pods) == 7_063
    assert np.all(pods.duration_s > 0) and np.all(pods.num_gpu >= 1)
    frac = G.load_alibaba_pods(D / "alibaba_openb2023/openb_pod_list_default.csv.gz", fractional="drop")
    assert frac.dropped["gpu_milli<1000:fractional"] > 0
    assert len(frac) == len(pods) - frac.dropped["gpu_milli<1000:fractional"]
    nodes = G.load_alibaba_nodes(D / "alibaba_openb2023/openb_node_list_gpu_node.csv.gz")
    assert len(nodes.sn) == 1_213 and (nodes.gpus == 8).sum() == 617


def test_synergy_profiles_are_normalised_at_fair_share():
    s = G.load_synergy_profiles(D / "synergy/synergy_cpu_mem_tput.csv.gz", D / "synergy/synergy_model_stats.csv")
    assert len(s.models) == 12 and s.tput.shape == (12, 9, 5)
    i, j = list(s.cpu_levels).index(3.0), list(s.mem_levels).index(62.5)
    np.testing.assert_allclose(s.tput[:, i, j], 1.0)
    assert s.speedup[s.index("alexnet")] == pytest.approx(2.94) and s.task[s.index("m5")] == "speech"
    with pytest.raises(KeyError, match="unknown model"):
        s.index("gpt5")


def test_sia_app_profiles():
    apps = G.load_sia_app_profiles(D / "sia_profiles/sia_app_profiles_subset.tar.gz")
    assert sorted(apps) == ["bert", "cifar10", "deepspeech2", "imagenet", "yolov3"]
    assert 2048 in apps["cifar10"].validation and (apps["imagenet"].scalability["step_time"] > 0).all()


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("row, line, field", [
    ("2017-13-01 00:00:00,10,1,10,vc", 2, "timestamp"),
    ("2017-10-01 00:00:00,ten,1,10,vc", 2, "duration"),
    ("2017-10-01 00:00:00,10,1.5,15,vc", 2, "num_gpus"),
    ("2017-10-01 00:00:00,10,2,10,vc", 2, "gpu_time"),
    ("2017-10-01 00:00:00,10,1,10,", 2, "cluster"),
    ("2017-10-01 00:00:00,10,1,10", 2, None),
    ("2017-10-01 00:00:00,inf,1,inf,vc", 2, "duration"),
])
def test_philly_malformed_rows_name_line_and_field(row, line, field):
    with pytest.raises(TraceFormatError) as ei:
        G.parse_philly_csv(PH_HEAD + row + "\n", "p.csv")
    assert (ei.value.line, ei.value.field) == (line, field), str(ei.value)


def test_philly_invalid_jobs_are_counted_or_strict_errors():
    text = PH_HEAD + ("2017-10-01 00:00:02,10,1,10,vc\n2017-10-01 00:00:01,-5,1,-5,vc\n"
                      "2017-10-01 00:00:03,0,1,0,vc\n2017-10-01 00:00:00,7,0,0,vc\n")
    p = G.parse_philly_csv(text, "p.csv")
    assert len(p) == 1 and p.dropped == {"duration<=0": 2, "num_gpus<=0": 1}
    with pytest.raises(TraceFormatError, match="strict") as ei:
        G.parse_philly_csv(text, "p.csv", strict=True)
    assert ei.value.line == 3


def test_wrong_header_blank_line_and_truncated_gzip(tmp_path):
    with pytest.raises(TraceFormatError, match="header"):
        G.parse_philly_csv("a,b\n1,2\n", "p.csv")
    with pytest.raises(TraceFormatError, match="blank line") as ei:
        G.parse_philly_csv(PH_HEAD + "\n2017-10-01 00:00:00,10,1,10,vc\n", "p.csv")
    assert ei.value.line == 2
    bad = tmp_path / "x.csv.gz"
    bad.write_bytes(gzip.compress((PH_HEAD * 50).encode())[:40])
    with pytest.raises(TraceFormatError, match="truncated or corrupt gzip"):
        G.load_philly_jobs(bad)


def test_sia_unknown_application_and_bad_values():
    rows = "saturn,w-1,a,0,cifar10,4,128\nsaturn,w-1,b,5,llama,4,128\nsaturn,w-1,c,9,bert,0,12\n"
    w = G.parse_sia_workloads_csv(SIA_HEAD + rows, "s.csv")
    assert len(w) == 1 and w.dropped == {"num_replicas<=0": 1, "batch_size<=0": 0, "application:unknown": 1}
    with pytest.raises(TraceFormatError, match="strict"):
        G.parse_sia_workloads_csv(SIA_HEAD + rows, "s.csv", strict=True)
    with pytest.raises(TraceFormatError) as ei:
        G.parse_sia_workloads_csv(SIA_HEAD + "saturn,w-1,a,-3,cifar10,4,128\n", "s.csv")
    assert ei.value.field == "time_s"


def test_alibaba_negative_request_is_an_error():
    head = ",".join(G.ALIBABA_POD_COLUMNS) + "\n"
    with pytest.raises(TraceFormatError) as ei:
        G.parse_alibaba_pods_csv(head + "p,-1,10,1,1000,,LS,Running,0,10,0\n", "a.csv")
    assert (ei.value.line, ei.value.field) == (2, "cpu_milli")
    with pytest.raises(ValueError, match="fractional"):
        G.parse_alibaba_pods_csv(head, "a.csv", fractional="maybe")


def test_synergy_incomplete_grid_is_an_error(tmp_path):
    src = (D / "synergy/synergy_cpu_mem_tput.csv.gz")
    lines = gzip.decompress(src.read_bytes()).decode().splitlines()
    cut = tmp_path / "t.csv"
    cut.write_text("\n".join(lines[:30]) + "\n")  # alexnet only partly present
    with pytest.raises(TraceFormatError, match="full 9x5 grid|lacks"):
        G.load_synergy_profiles(cut, D / "synergy/synergy_model_stats.csv")


def test_sia_profiles_bad_archive(tmp_path):
    bad = tmp_path / "x.tar.gz"
    bad.write_bytes(gzip.compress(b"not a tar"))
    with pytest.raises(TraceFormatError, match="tar"):
        G.load_sia_app_profiles(bad)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        data = b"placement,local_bsz,step_time,sync_time\n1,4,0.1,0.0\n"
        info = tarfile.TarInfo("sia_profiles/bert/placements.csv")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    part = tmp_path / "p.tar.gz"
    part.write_bytes(buf.getvalue())
    with pytest.raises(TraceFormatError, match="lacks"):
        G.load_sia_app_profiles(part)
