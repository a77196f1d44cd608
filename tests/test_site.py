"""results/index.html: every claim is on the page, every link and image resolves, and in a real headless Chromium
the page loads without console errors and its filter works."""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from common.repro.claims import evaluate, parse_claims
from common.repro.site import write_site


def _verdicts():
    doc = [
        {"id": "h1", "class": "headline", "source": "abstract", "text": "fast is 2x", "experiment": "costs",
         "metric": "m", "ours": "a", "baseline": "b", "kind": "ratio", "paper_value": 2.0},
        {"id": "s1", "class": "secondary", "source": "text", "text": "fast <beats> slow & more", "experiment": "costs",
         "metric": "m", "ours": "b", "baseline": "a", "kind": "ratio"},
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
    (res / "toy/costs.manifest.json").write_text(json.dumps(
        {"git_sha": "abc123", "profile": "default", "seeds": [0, 1, 2], "code_hash": "c0de", "config_hash": "cf",
         "finished_utc": "2026-12-03T00:00:00Z", "wall_s": 12.0, "rows": 6}))
    fresh = {"toy": {"costs": "fresh", "other": "missing"}}
    return write_site(res, _verdicts(), fresh, {"toy": "Toy paper"})


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
    assert "./reproduce.sh toy --only costs" in text and "abc123" in text and "no result file" in text
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
        errors = [e for e in d.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
        assert not errors, errors
    finally:
        d.quit()
