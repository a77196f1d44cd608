"""results/index.html: every claim is on the page, every link and image resolves, and in a real headless Chromium
the page loads without console errors and its filter works; the same for the committed page."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from mlsys_repro.common.repro import forest
from mlsys_repro.common.repro.claims import Verdict, evaluate, parse_claims
from mlsys_repro.common.repro.site import _CSS, experiment_figures, write_site
from tests.conftest import ROOT


def _verdicts():
    doc = [
        {"id": "h1", "class": "headline", "source": "abstract", "text": "fast is 2x", "experiment": "costs",
         "metric": "m", "ours": "a", "baseline": "b", "kind": "ratio", "paper_value": 2.0, "regime": "toy <1 Gbps>",
         "revised": [{"date": "2026-12-06", "change": "band & metric", "before": "REPRODUCED"}]},
        {"id": "s1", "class": "secondary", "source": "text", "text": "fast <beats> slow & more", "experiment": "costs",
         "metric": "m", "ours": "b", "baseline": "a", "kind": "ratio", "min_effect": 1.05, "min_effect_why": "5 %",
         "regime": "toy"},
        {"id": "k1", "class": "check", "source": "notes", "text": "bytes", "experiment": "other", "metric": "m",
         "ours": "a", "baseline": "b", "kind": "ratio", "deterministic": True},
    ]
    rows = [{"policy": p, "seed": s, "metric": "m", "value": v, "unit": "s", "profile": "default"}
            for p, vals in {"a": [5.0, 5.1, 4.9], "b": [10.0, 10.0, 10.0]}.items() for s, v in enumerate(vals)]
    df = pd.DataFrame(rows)
    claims = parse_claims(doc)
    return {"toy": [evaluate(c, df if c.experiment == "costs" else None, "toy") for c in claims]}


@pytest.fixture
def site(tmp_path):
    res = tmp_path / "results"
    (res / "toy").mkdir(parents=True)
    pd.DataFrame({"x": [1]}).to_csv(res / "toy/costs.csv", index=False)
    shutil.copy(Path(__file__).parent / "fixtures/tiny.png", res / "toy/costs_bars.png")
    # another experiment whose name extends "costs": its figure is not one of costs' figures
    shutil.copy(Path(__file__).parent / "fixtures/tiny.png", res / "toy/costs_more_bars.png")
    (tmp_path / "mlsys_repro/papers/toy").mkdir(parents=True)
    (tmp_path / "mlsys_repro/papers/toy/README.md").write_text("# toy\n")
    (res / "toy/costs.manifest.json").write_text(json.dumps(
        {"git_sha": "abc123", "profile": "default", "seeds": [0, 1, 2], "code_hash": "c0de", "config_hash": "cf",
         "finished_utc": "2026-12-03T00:00:00Z", "wall_s": 12.0, "rows": 6}))
    fresh = {"toy": {"costs": "fresh", "costs_more": "missing", "other": "missing"}}
    return write_site(res, _verdicts(), fresh, {"toy": "Toy paper"}, papers_dir=tmp_path / "mlsys_repro" / "papers")


def test_first_screen_states_the_pages_provenance_and_regeneration_cost(site, tmp_path):
    text = site.read_text()
    prov = re.search(r'<p id="provenance">(.*?)</p>', text).group(1)
    assert "1 result files from 1 commit(s) (<code>abc123</code>)" in prov
    assert "finished 2026-12-03 to 2026-12-03" in prov and "suite <b>12 s</b>" in prov and "toy 12 s" in prov
    # a second experiment's manifest adds its wall time to its paper and the suite
    res = site.parent
    (res / "toy/other.manifest.json").write_text(json.dumps(
        {"git_sha": "def456", "finished_utc": "2026-12-05T10:00:00Z", "wall_s": 5400.0}))
    fresh = {"toy": {"costs": "fresh", "other": "fresh"}}
    again = write_site(res, _verdicts(), fresh, {"toy": "Toy paper"}, papers_dir=tmp_path / "mlsys_repro" / "papers")
    prov = re.search(r'<p id="provenance">(.*?)</p>', again.read_text()).group(1)
    assert "2 result files from 2 commit(s)" in prov and "to 2026-12-05" in prov
    assert "suite <b>1 h 30 min</b>" in prov


def test_multi_panel_figures_span_the_page_and_small_ones_stay_thumbnails(tmp_path):
    from PIL import Image

    from mlsys_repro.common.repro.site import _png_width

    res = tmp_path / "results"
    (res / "toy").mkdir(parents=True)
    pd.DataFrame({"x": [1]}).to_csv(res / "toy/costs.csv", index=False)
    Image.new("RGB", (1440, 400), "white").save(res / "toy/costs_panels.png")
    shutil.copy(Path(__file__).parent / "fixtures/tiny.png", res / "toy/costs_bars.png")
    assert _png_width(res / "toy/costs_panels.png") == 1440 and _png_width(res / "toy/costs.csv") == 0
    page = write_site(res, _verdicts(), {"toy": {"costs": "fresh", "other": "missing"}}, papers_dir=None).read_text()
    assert '<figure class="wide"><a href="toy/costs_panels.png">' in page
    assert '<figure><a href="toy/costs_bars.png">' in page and "(click for full size)" in page


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for k in ("href", "src"):
            if a.get(k):
                self.refs.append(a[k])


def test_page_lists_every_claim_and_every_link_resolves(site):
    text = site.read_text()
    for cid in ("h1", "s1", "k1"):
        assert f"<code>{cid}</code>" in text
    assert "fast &lt;beats&gt; slow &amp; more" in text  # escaped, not markup
    assert "./reproduce.sh toy --only costs --force" in text and "abc123" in text and "no result file" in text
    assert text.count('src="toy/costs_more_bars.png"') == 1  # under costs_more only, not under costs too
    assert text.index('id="toy-costs_more"') < text.index('src="toy/costs_more_bars.png"')
    assert 'href="../mlsys_repro/papers/toy/README.md"' in text
    p = _Links()
    p.feed(text)
    for ref in p.refs:
        if ref.startswith("#"):
            assert ref[1:] in p.ids, ref
        else:
            assert (site.parent / ref).exists(), ref
    assert "http://" not in text and "https://" not in text  # self-contained: nothing fetched


def _driver():
    webdriver = pytest.importorskip("selenium.webdriver")
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver_bin = shutil.which("chromedriver")
    if not chrome or not driver_bin:
        pytest.skip("no Chromium/chromedriver (.ci/run installs the Debian packages chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_bin), options=opts)


def _console_errors(d):
    return [e for e in d.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def test_page_in_a_real_browser(site):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = _driver()
    try:
        d.get(site.as_uri())
        rows = d.find_elements(By.CSS_SELECTOR, "#claims tbody tr")
        assert len(rows) == 3 and d.find_element(By.ID, "shown").text == "3"
        Select(d.find_element(By.ID, "f-class")).select_by_value("headline")
        visible = [r for r in rows if r.is_displayed()]
        assert len(visible) == 1 and "h1" in visible[0].text and d.find_element(By.ID, "shown").text == "1"
        Select(d.find_element(By.ID, "f-class")).select_by_value("")
        Select(d.find_element(By.ID, "f-verdict")).select_by_value("NOT_REPRODUCED")
        shown = [r for r in rows if r.is_displayed()]
        assert len(shown) == 1 and "s1" in shown[0].text
        img = d.find_element(By.CSS_SELECTOR, "figure img")
        assert d.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img)
        _forest_one_click_away(d, "toy")
        svg = d.find_element(By.CSS_SELECTOR, "#toy-forest svg.fp")  # one row per counted claim: not the check k1
        assert [g.get_attribute("data-claim") for g in svg.find_elements(By.CSS_SELECTOR, "g.fp-row")] == ["h1", "s1"]
        assert not _console_errors(d)
    finally:
        d.quit()


def _first_screen(d):
    """A screenshot of the first screen (1280 x 900, top of the page) shows the verdict counts per paper and the
    page's provenance line, and is a rendered page (many colours, the verdict badges among them), not a blank one."""
    import io

    from PIL import Image
    from selenium.webdriver.common.by import By

    for sel in ("#counts", "#provenance"):
        el = d.find_element(By.CSS_SELECTOR, sel)
        assert d.execute_script("var r = arguments[0].getBoundingClientRect(); return r.top >= 0 && r.bottom <= "
                                "window.innerHeight && r.width > 0", el), sel
    shot = Image.open(io.BytesIO(d.get_screenshot_as_png())).convert("RGB")
    assert shot.size[0] >= 1000
    colours = shot.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 20  # text, table rules and the badge colours
    badge = d.find_element(By.CSS_SELECTOR, "#counts thead .badge")
    rgb = d.execute_script("return getComputedStyle(arguments[0]).backgroundColor", badge)
    want = tuple(int(x) for x in re.findall(r"\d+", rgb)[:3])
    assert any(c == want for _, c in colours), (want, "the first verdict badge's colour is not on the screenshot")


def _forest_one_click_away(d, paper):
    """From the top of the page, one click on the paper's name in the first screen's counts table brings its forest
    plot (open, laid out at the page's width) into view."""
    from selenium.webdriver.common.by import By

    d.set_window_size(1280, 900)
    d.execute_script("window.scrollTo(0, 0)")
    _first_screen(d)
    link = d.find_element(By.CSS_SELECTOR, f'#counts a[href="#{paper}"]')
    assert d.execute_script("return arguments[0].getBoundingClientRect().bottom <= window.innerHeight", link)
    link.click()
    svg = d.find_element(By.CSS_SELECTOR, f"#{paper}-forest svg.fp")
    assert svg.is_displayed() and d.find_element(By.ID, f"{paper}-forest").get_attribute("open") is not None
    box = d.execute_script("var r = arguments[0].getBoundingClientRect(); return [r.top, r.width, r.height, "
                           "window.innerHeight]", svg)
    assert 0 <= box[0] < box[3] and box[1] > 600 and box[2] > 40, box


def test_paper_vs_ours_lists_the_claims_with_a_paper_number(site):
    text = site.read_text()
    start = text.index('<table class="pvo">')
    table = text[start:text.index("</table>", start)]
    assert "<code>h1</code>" in table and "<td>2.000</td>" in table  # the paper's number beside ours
    assert "[1.800, 2.200]" in table  # the band (default tolerance 10 %) that counts as the paper's size
    assert "<code>s1</code>" not in table and "<code>k1</code>" not in table  # no paper number: not here


def _forest_verdicts():
    """A hand-made paper: a ratio with a paper value, a NOT_TESTED min_effect claim, a deterministic diff with a
    paper value, a bound, a SKIPPED and a NOT_RUN counted claim, and a check and an extension (not counted)."""
    base = {"source": "text", "experiment": "e", "metric": "m", "ours": "a", "baseline": "b", "regime": "toy"}
    doc = [
        {**base, "id": "r1", "class": "secondary", "kind": "ratio", "paper_value": 1.5},
        {**base, "id": "p1", "class": "secondary", "kind": "pct_reduction", "min_effect": 2.0, "min_effect_why": "2 %"},
        {**base, "id": "d1", "class": "secondary", "kind": "diff", "paper_value": 0.25, "deterministic": True},
        {**base, "id": "b1", "class": "secondary", "kind": "bound", "paper_value": 1.0, "better": "higher",
         "baseline": None},
        {**base, "id": "sk", "class": "headline", "kind": "ratio", "paper_value": 2.0, "skip": "no testbed"},
        {**base, "id": "nr", "class": "headline", "kind": "ratio", "min_effect": 1.05, "min_effect_why": "5 %"},
        {**base, "id": "k1", "class": "check", "kind": "ratio", "deterministic": True},
        {**base, "id": "x1", "class": "extension", "kind": "ratio", "min_effect": 1.05, "min_effect_why": "5 %"},
    ]
    c = {cl.id: cl for cl in parse_claims(doc)}
    return [
        Verdict("toy", c["r1"], "DIRECTION_ONLY", 2.0, 1.8, 2.2, 5),
        Verdict("toy", c["p1"], "NOT_TESTED", 5.0, -1.0, 11.0, 5, ungated="INCONCLUSIVE"),
        Verdict("toy", c["d1"], "REPRODUCED", 0.26, 0.26, 0.26, 1, point=True),
        Verdict("toy", c["b1"], "NOT_REPRODUCED", 0.7, 0.67, 0.72, 5),
        Verdict("toy", c["sk"], "SKIPPED", note="no testbed"),
        Verdict("toy", c["nr"], "NOT_RUN"),
        Verdict("toy", c["k1"], "REPRODUCED", 1.0, 1.0, 1.0, 1, point=True),
        Verdict("toy", c["x1"], "REPRODUCED", 1.2, 1.1, 1.3, 5),
    ]


def test_forest_plot_of_the_counted_claims():
    vs = _forest_verdicts()
    svg = forest.forest_svg(vs, "toy")
    root = ET.fromstring(svg)  # well-formed: it is inline SVG in an HTML page
    rows = {g.get("data-claim"): g for g in root.iter("g") if g.get("class") == "fp-row"}
    # one row per counted claim with a measured effect, in order; SKIPPED / NOT_RUN / uncounted: no row
    assert list(rows) == ["r1", "p1", "d1", "b1"]

    def one(g, cls):
        found = [e for e in g.iter() if cls in (e.get("class") or "").split()]
        assert len(found) <= 1
        return found[0] if found else None

    # the paper's band exactly where the claim has a paper value (a bound: the side that satisfies it)
    assert {k for k, g in rows.items() if one(g, "fp-band") is not None} == {"r1", "d1", "b1"}
    assert one(rows["p1"], "fp-min") is not None and one(rows["r1"], "fp-min") is None  # min_effect: dashed line
    # the reference line at the same x in every row, and at the x where that row's scale puts no effect (1 for a
    # ratio, on its log scale; 0 for a percentage) or the bound
    for g in rows.values():
        assert float(one(g, "fp-null").get("x1")) == pytest.approx(forest.X0)
    assert [rows[k].get("data-ref") for k in rows] == ["1", "0", "0", "1"]
    assert rows["r1"].get("data-scale") == "log" and rows["p1"].get("data-scale") == "linear"

    def where(g, value, lo, hi, t=lambda x: x):  # the x of ``value`` interpolated from the CI bar's ends
        ci = one(g, "fp-ci")
        x1, x2 = float(ci.get("x1")), float(ci.get("x2"))
        return x1 + (t(value) - t(lo)) / (t(hi) - t(lo)) * (x2 - x1)

    assert where(rows["r1"], 1.0, 1.8, 2.2, math.log) == pytest.approx(forest.X0, abs=0.3)
    assert where(rows["p1"], 0.0, -1.0, 11.0) == pytest.approx(forest.X0, abs=0.3)
    assert where(rows["p1"], 2.0, -1.0, 11.0) == pytest.approx(float(one(rows["p1"], "fp-min").get("x1")), abs=0.3)
    band = one(rows["r1"], "fp-band")  # [1.35, 1.65] around the paper's 1.5 (default tolerance 10 %)
    bx, bw = float(band.get("x")), float(band.get("width"))
    assert bx == pytest.approx(where(rows["r1"], 1.35, 1.8, 2.2, math.log), abs=0.3)
    assert bx + bw == pytest.approx(where(rows["r1"], 1.65, 1.8, 2.2, math.log), abs=0.3)
    bound = one(rows["b1"], "fp-band")  # "at or above 1": from the bound to the row's right end
    assert float(bound.get("x")) == pytest.approx(forest.X0)
    assert float(bound.get("x")) + float(bound.get("width")) == pytest.approx(forest.RIGHT)
    # NOT_TESTED: a hollow marker and its label, with the ungated verdict
    mean = one(rows["p1"], "fp-mean")
    assert "fp-hollow" in mean.get("class") and mean.get("fill") == "#fff"
    texts = ["".join(t.itertext()) for t in rows["p1"].iter("text")]
    assert "NOT_TESTED" in texts and "ungated: INCONCLUSIVE" in texts
    assert all("fp-hollow" not in one(rows[k], "fp-mean").get("class") for k in ("r1", "d1", "b1"))
    # the other markers in the page's verdict colours; a deterministic point has no CI bar
    assert one(rows["r1"], "fp-mean").get("fill") == forest.VERDICT_COLOURS["DIRECTION_ONLY"]
    assert ".DIRECTION_ONLY{background:#fde9b0}" in _CSS and forest.VERDICT_COLOURS["DIRECTION_ONLY"] == "#fde9b0"
    assert one(rows["d1"], "fp-ci") is None and "fp-point" in one(rows["d1"], "fp-mean").get("class")
    # SKIPPED / NOT_RUN listed by name under the plot, not drawn; uncounted claims neither
    page = forest.forest_html(vs, "toy")
    assert page.startswith('<details class="forest" id="toy-forest" open>')
    assert re.findall(r'class="fp-unplotted" data-claim="(\w+)"', page) == ["sk", "nr"]
    assert 'data-claim="k1"' not in page and 'data-claim="x1"' not in page
    assert "http://" not in page and "https://" not in page  # no xmlns either: nothing that looks fetched
    # the same verdicts give the same bytes (the committed page is compared byte for byte with a rebuild)
    assert forest.forest_html(copy.deepcopy(vs), "toy") == page
    assert forest.forest_html([], "toy").count("fp-row") == 0


def test_figures_come_from_the_manifest_else_from_names(tmp_path):
    for name in ("acc_a.png", "acc_b.png", "acc_cifar_a.png"):
        (tmp_path / name).write_bytes(b"")
    exps = ["acc", "acc_cifar"]
    assert [p.name for p in experiment_figures(tmp_path, "acc", exps, None)] == ["acc_a.png", "acc_b.png"]
    assert [p.name for p in experiment_figures(tmp_path, "acc_cifar", exps, None)] == ["acc_cifar_a.png"]
    man = {"figures": ["acc_b.png"]}
    assert [p.name for p in experiment_figures(tmp_path, "acc", exps, man)] == ["acc_b.png"]
    gone = {"figures": ["acc_old.png"]}  # listed figures that no longer exist: fall back to the names
    assert [p.name for p in experiment_figures(tmp_path, "acc", exps, gone)] == ["acc_a.png", "acc_b.png"]


_COMMITTED = ROOT / "results/index.html"
_committed = pytest.mark.skipif(not _COMMITTED.exists(), reason="no committed results/index.html")


@_committed
def test_committed_page_has_every_summary_claim_and_resolves():
    """A new user opening results/index.html from a clone finds every claim of SUMMARY.md, and every figure, CSV and
    anchor it links to is there."""
    summary = (ROOT / "results/SUMMARY.md").read_text()
    claims = re.findall(r"^\| \[(\w+)\]\([^)]*\) \| `([^`]+)`", summary, flags=re.M)
    assert len(claims) > 20
    text = _COMMITTED.read_text()
    rows = re.findall(r'<tr data-paper="([^"]+)"[^>]*>.*?<code>([^<]+)</code>', text)
    assert sorted(claims) == sorted(rows)
    p = _Links()
    p.feed(text)
    bad = [r for r in p.refs if (r[1:] not in p.ids if r.startswith("#") else not (_COMMITTED.parent / r).exists())]
    assert not bad, bad[:10]
    assert "http://" not in text and "https://" not in text


@_committed
def test_committed_page_in_a_real_browser():
    """The committed page loads with no console error, every image decodes (lazy ones forced to load), and the
    paper filter leaves exactly that paper's rows."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    d = _driver()
    try:
        d.get(_COMMITTED.as_uri())
        rows = d.find_elements(By.CSS_SELECTOR, "#claims tbody tr")
        papers = {r.get_attribute("data-paper") for r in rows}
        paper = sorted(papers)[0]
        Select(d.find_element(By.ID, "f-paper")).select_by_value(paper)
        mine = d.execute_script("return Array.from(document.querySelectorAll('#claims tbody tr'))"
                                ".filter(r => r.style.display !== 'none').map(r => r.dataset.paper)")
        assert mine and set(mine) == {paper}
        d.execute_script("document.querySelectorAll('img').forEach(i => { i.loading = 'eager'; })")
        WebDriverWait(d, 60).until(lambda drv: drv.execute_script(
            "return Array.from(document.images).every(i => i.complete)"))
        broken = d.execute_script("return Array.from(document.images).filter(i => !(i.naturalWidth > 0))"
                                  ".map(i => i.getAttribute('src'))")
        assert d.execute_script("return document.images.length") > 0 and not broken, broken
        # every paper section has its forest plot: one row per counted claim with a measured effect, the rest listed
        for p in sorted(papers):
            want = sorted(d.execute_script(
                "return Array.from(document.querySelectorAll('#claims tbody tr')).filter(r => r.dataset.paper === "
                "arguments[0] && ['headline', 'secondary'].includes(r.dataset.cls)).map(r => r.querySelector("
                "'code').textContent)", p))
            drawn = d.execute_script("return Array.from(document.querySelectorAll('#' + arguments[0] + '-forest "
                                     "g.fp-row')).map(g => g.dataset.claim)", p)
            listed = d.execute_script("return Array.from(document.querySelectorAll('#' + arguments[0] + '-forest "
                                      ".fp-unplotted')).map(s => s.dataset.claim)", p)
            assert sorted(drawn + listed) == want, p
            assert not drawn or d.find_element(By.CSS_SELECTOR, f"#{p}-forest svg.fp").is_displayed(), p
        _forest_one_click_away(d, paper)
        assert not _console_errors(d)
    finally:
        d.quit()


def test_report_module_regenerates_the_page_without_running(toy_conf, tmp_path, monkeypatch, capsys):
    """``python -m mlsys_repro.common.repro.report`` (and ``mlsys-repro report``) rebuilds index.html from stored
    results."""
    from mlsys_repro.common.repro.cli import main as cli_main
    from mlsys_repro.common.repro.run_all import main as run_all

    for paper in (toy_conf / "paper").glob("*.yaml"):  # the toy paper alone: fast
        if paper.stem != "toy":
            paper.unlink()
            shutil.rmtree(toy_conf / "experiment" / paper.stem, ignore_errors=True)
    res = tmp_path / "res"
    monkeypatch.setenv("TOY_FIGURE", "1")
    assert run_all(["toy", "--conf-dir", str(toy_conf), "--results-dir", str(res), "--only", "costs", "--profile",
                    "smoke", "--no-claims"]) == 0
    assert not (res / "index.html").exists()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "mlsys_repro.common.repro.report", "--conf-dir", str(toy_conf),
                          "--results-dir", str(res)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert str(res / "index.html") in out.stdout
    text = (res / "index.html").read_text()
    assert "<code>fast_is_2x</code>" in text and 'src="toy/costs_bars.png"' in text
    assert (res / "SUMMARY.md").is_file() and (res / "toy/claims.md").is_file()
    (res / "index.html").unlink()
    assert cli_main(["report", "--conf-dir", str(toy_conf), "--results-dir", str(res)]) == 0
    assert (res / "index.html").is_file()
    capsys.readouterr()
    assert cli_main(["report", "--conf-dir", str(toy_conf), "--results-dir", str(res), "tyo"]) == 2
    assert "did you mean 'toy'" in capsys.readouterr().err
    (res / "index.html").unlink()  # ./reproduce.sh (run_all) writes the page after its runs too
    assert run_all(["toy", "--conf-dir", str(toy_conf), "--results-dir", str(res), "--only", "costs", "--profile",
                    "smoke"]) == 0
    assert "<code>fast_is_2x</code>" in (res / "index.html").read_text()
