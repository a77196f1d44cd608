"""The reviewer's page: ``results/index.html``, one self-contained file (no network) next to the results.

A first screen of verdict counts per paper and counted class (NOT_TESTED apart from INCONCLUSIVE); a table of every
claim (paper, class, claim, regime, paper value, measured mean [CI], n, verdict, the ungated verdict where gates
dropped cells, revisions made after results were seen with the verdict before, freshness), filterable by paper,
class and verdict; then one section per paper with, for each experiment, the claims it
decides, its figures (linked relatively, so the page works from a fresh clone or a copied ``results/`` folder), the
exact command that regenerates it, its CSV and its provenance (commit, profile, seeds, code fingerprint, date,
wall time: the experiment's manifest); each paper section opens with a forest plot of its counted claims (inline SVG,
:mod:`mlsys_repro.common.repro.forest`; the paper's name in the first screen links to it), then a "paper vs ours"
table of the claims for which the paper gives a number. Written by ``python -m mlsys_repro.common.repro.report`` (=
``python -m mlsys_repro.common.repro.claims``) and ``./reproduce.sh``.

An experiment's figures are the ones its manifest lists (``figures``, recorded by the runner), else the files
``<experiment>_*.png`` that belong to no longer experiment name (``accuracy_*`` is not ``accuracy_cifar10_*``).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from mlsys_repro.common.repro.claims.evaluate import VERDICTS, Verdict, _fmt
from mlsys_repro.common.repro.claims.report import VERDICT_MEANING, counts
from mlsys_repro.common.repro.claims.schema import CLASSES, COUNTED
from mlsys_repro.common.repro.forest import VERDICT_COLOURS, forest_html
from mlsys_repro.common.repro.results import atomic_write_bytes

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
table{border-collapse:collapse;width:100%;margin:.6em 0}th,td{border:1px solid #ccc;padding:3px 6px;
vertical-align:top;text-align:left}th{background:#f2f2f2}code{font-size:12px}
.badge{font-weight:600;padding:1px 6px;border-radius:3px;white-space:nowrap}
.stale,.missing,.incomplete{color:#a40}
figure{display:inline-block;vertical-align:top;margin:.4em;max-width:100%}
figure img{max-width:min(560px,100%);height:auto;border:1px solid #ddd}
figure.wide{display:block}figure.wide img{max-width:100%}
.controls label{margin-right:1.2em}.muted{color:#666}caption{text-align:left;font-weight:600;padding:2px 0}
details.forest{margin:.6em 0}details.forest summary{cursor:pointer;font-weight:600}.forest p{font-size:12px}
svg.fp{display:block;width:100%;max-width:1150px;height:auto;margin:.3em 0}
""" + "".join(  # the verdict colours, shared with the forest plots' markers and badges
    f"{','.join('.' + k for k, c in VERDICT_COLOURS.items() if c == colour)}{{background:{colour}}}"
    for colour in dict.fromkeys(VERDICT_COLOURS.values())) + "\n"

_JS = """
function applyFilter(){
  var p=document.getElementById('f-paper').value, c=document.getElementById('f-class').value,
      v=document.getElementById('f-verdict').value, shown=0;
  document.querySelectorAll('#claims tbody tr').forEach(function(tr){
    var ok=(!p||tr.dataset.paper===p)&&(!c||tr.dataset.cls===c)&&(!v||tr.dataset.verdict===v);
    tr.style.display=ok?'':'none'; if(ok){shown++;}
  });
  document.getElementById('shown').textContent=shown;
}
document.addEventListener('DOMContentLoaded',function(){
  ['f-paper','f-class','f-verdict'].forEach(function(id){
    document.getElementById(id).addEventListener('change',applyFilter);});
  applyFilter();
});
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _options(values: Sequence[str], label: str, ident: str) -> str:
    opts = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
    return f'<label>{label} <select id="{ident}"><option value="">all</option>{opts}</select></label>'


def _manifest(results_dir: Path, paper: str, exp: str) -> dict | None:
    p = results_dir / paper / f"{exp}.manifest.json"
    try:
        return json.loads(p.read_text()) if p.exists() else None
    except (OSError, json.JSONDecodeError):
        return None


def regenerate_command(paper: str, exp: str, args: str = "") -> str:
    """The command that reruns one experiment into this folder (``args``: its profile and folder where they are not
    the defaults) and rechecks its claims (``--force``: even when its stored result is fresh)."""
    return f"./reproduce.sh {paper} --only {exp}{args} --force"


def experiment_figures(paper_dir: Path, exp: str, experiments: Sequence[str], man: dict | None) -> list[Path]:
    """The PNGs of ``exp`` in ``paper_dir``: those its manifest lists (when it lists any that exist), else
    ``<exp>_*.png`` minus the figures of any other experiment whose name extends ``exp`` (``<exp>_<more>``)."""
    listed = (man or {}).get("figures")
    if isinstance(listed, list):
        found = [paper_dir / str(n) for n in listed if (paper_dir / str(n)).is_file()]
        if found:
            return found
    longer = [o for o in experiments if o != exp and o.startswith(exp + "_")]
    return [f for f in sorted(paper_dir.glob(f"{exp}_*.png"))
            if not any(f.name.startswith(o + "_") for o in longer)]


def _paper_vs_ours(vs: Sequence[Verdict]) -> list[str]:
    """The side-by-side table of the claims that state a number of the paper."""
    rows = [v for v in vs if v.claim.paper_value is not None]
    if not rows:
        return ['<p class="muted">The paper gives no number that a claim here compares against (the claims are '
                "directions or smallest effects; see the table of each experiment).</p>"]
    out = ["<table class=\"pvo\"><caption>Paper vs ours: every claim for which the paper gives a number</caption>"
           "<thead><tr><th>claim</th><th>source</th><th>paper</th><th>band counted as the paper's size</th>"
           "<th>ours: mean [CI] (n)</th><th>verdict</th></tr></thead><tbody>"]
    for v in rows:
        c = v.claim
        band = c.band()
        band_s = "—" if band is None else f"[{_fmt(band[0])}, {_fmt(band[1])}]"
        out.append(f'<tr><td><a href="#{_e(v.paper)}-{_e(c.experiment)}"><code>{_e(c.id)}</code></a> {_e(c.text)}'
                   f"</td><td>{_e(c.source)}</td><td>{_e(_fmt(c.paper_value))}</td><td>{_e(band_s)}</td>"
                   f"<td>{_e(v.measured())}</td><td>{_badge(v.shown)}</td></tr>")
    out.append("</tbody></table>")
    return out


def _provenance(man: dict | None) -> str:
    if not man:
        return '<span class="stale">no manifest (made before provenance was recorded)</span>'
    seeds = man.get("seeds") or []
    seed_s = f"{seeds[0]}..{seeds[-1]} ({len(seeds)})" if seeds else "-"
    wall = man.get("wall_s")
    wall_s = "-" if wall is None or (isinstance(wall, float) and math.isnan(wall)) else f"{float(wall):.0f} s"
    return (f"commit <code>{_e(man.get('git_sha', '?'))}</code>, profile {_e(man.get('profile', '?'))}, seeds "
            f"{_e(seed_s)}, code <code>{_e(man.get('code_hash', '?'))}</code>, config "
            f"<code>{_e(man.get('config_hash', '?'))}</code>, finished {_e(man.get('finished_utc', '?'))}, "
            f"wall {_e(wall_s)}, {_e(man.get('rows', '?'))} rows")


def _badge(verdict: str) -> str:
    return f'<span class="badge {_e(verdict)}">{_e(verdict)}</span>' if verdict else "—"


def _ungated(v: Verdict) -> str:
    return _badge(v.ungated_shown) if v.ungated and v.ungated != v.verdict else "—"


def _revised(v: Verdict) -> str:
    if not v.claim.revised:
        return "—"
    return "<br>".join(f'<span title="{_e(r.change)}">{_e(r.date)}: was {_e(r.before)}</span>'
                       for r in v.claim.revised)


def _row(v: Verdict, fresh: str) -> str:
    c = v.claim
    pv = "—" if c.paper_value is None else _fmt(c.paper_value)
    if c.paper_value is None and c.min_effect is not None:
        pv = f"≥ {_fmt(c.min_effect)} (min_effect)"
    state = fresh.split(":")[0] if fresh else "?"
    return (f'<tr data-paper="{_e(v.paper)}" data-cls="{_e(c.cls)}" data-verdict="{_e(v.shown)}">'
            f'<td><a href="#{_e(v.paper)}">{_e(v.paper)}</a></td><td>{_e(c.cls)}</td>'
            f'<td><a href="#{_e(v.paper)}-{_e(c.experiment)}"><code>{_e(c.id)}</code></a> {_e(c.text)}</td>'
            f'<td>{_e(c.regime or "—")}</td><td>{_e(pv)}</td><td>{_e(v.measured())}</td>'
            f"<td>{_badge(v.shown)}</td><td>{_ungated(v)}</td><td>{_revised(v)}</td>"
            f'<td class="{_e(state)}" title="{_e(fresh)}">{_e(state)}</td></tr>')


def _png_width(path: Path) -> int:
    """The pixel width of a PNG from its header (0 when it is not a readable PNG)."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError:
        return 0
    return int.from_bytes(head[16:20], "big") if head[:8] == b"\x89PNG\r\n\x1a\n" else 0


def _duration(seconds: float) -> str:
    m = int(round(seconds / 60.0))
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min" if m else f"{seconds:.0f} s"


def _page_provenance(results_dir: Path, papers: Sequence[str], freshness: Mapping[str, Mapping[str, str]]) -> str:
    """The page's own provenance and cost, from the manifests of the result files it shows (so the page's bytes
    depend only on the folder): how many result files, from which commits, finished when, and what regenerating
    them cost (the recorded wall times, summed per paper and for the suite)."""
    per_paper: dict[str, float] = {}
    shas, dates, n = set(), [], 0
    for paper in papers:
        for exp in sorted(freshness.get(paper, {})):
            man = _manifest(results_dir, paper, exp)
            if not man:
                continue
            n += 1
            wall = man.get("wall_s")
            if isinstance(wall, (int, float)) and math.isfinite(wall):
                per_paper[paper] = per_paper.get(paper, 0.0) + float(wall)
            shas.add(str(man.get("git_sha", "?")))
            if man.get("finished_utc"):
                dates.append(str(man["finished_utc"]))
    if not n:
        return '<p id="provenance" class="muted">No result file with a manifest in this folder.</p>'
    sha_list = ", ".join(f"<code>{_e(x)}</code>" for x in sorted(shas)[:8]) + (" ..." if len(shas) > 8 else "")
    cost = ", ".join(f"{_e(p)} {_duration(w)}" for p, w in sorted(per_paper.items()))
    return (f'<p id="provenance">{n} result files from {len(shas)} commit(s) ({sha_list}), finished '
            f"{_e(min(dates)[:10])} to {_e(max(dates)[:10])} (UTC). Regeneration cost, the wall times the manifests "
            f"record (each on the machine that made it): suite <b>{_duration(sum(per_paper.values()))}</b>; "
            f"per paper: {cost}.</p>")


def _counts_table(all_verdicts: Mapping[str, list[Verdict]]) -> list[str]:
    """Per paper and counted class: how many claims read each verdict (the page's first screen)."""
    out = ['<table id="counts"><caption>Counted claims per paper (sensitivity readings, extensions and checks are '
           "shown below but not counted)</caption><thead><tr><th>paper</th><th>class</th>"
           + "".join(f'<th><span class="badge {k}">{k}</span></th>' for k in VERDICTS) + "</tr></thead><tbody>"]
    for paper, vs in sorted(all_verdicts.items()):
        for cls in COUNTED:
            c = counts(vs, cls)
            if sum(c.values()):
                out.append(f'<tr><td><a href="#{_e(paper)}">{_e(paper)}</a></td><td>{cls}</td>'
                           + "".join(f"<td>{c[k] or ''}</td>" for k in VERDICTS) + "</tr>")
    out.append("</tbody></table>")
    return out


def default_papers_dir() -> Path | None:
    """The checkout's ``mlsys_repro/papers/`` (the page links ``../mlsys_repro/papers/<paper>/README.md``, which
    resolves from the checkout's ``results/``); ``None`` when installed from a wheel, where no such sibling folder
    exists."""
    from mlsys_repro.common.repro.schema import installed, repo_root

    return None if installed() else Path(repo_root()) / "mlsys_repro" / "papers"


def site_html(results_dir: Path, all_verdicts: Mapping[str, list[Verdict]],
              freshness: Mapping[str, Mapping[str, str]], titles: Mapping[str, str] | None = None,
              papers_dir: Path | None | str = "default", args: str = "") -> str:
    """The page for the verdicts and the result files under ``results_dir`` (links relative to it). A paper's
    README is linked as ``../mlsys_repro/papers/<paper>/README.md`` when it exists under ``papers_dir`` (default: the
    checkout's); the page's bytes do not depend on where ``results_dir`` is."""
    results_dir = Path(results_dir)
    papers_dir = default_papers_dir() if papers_dir == "default" else (Path(papers_dir) if papers_dir else None)
    titles = titles or {}
    everything = [v for vs in all_verdicts.values() for v in vs]
    verdict_names = sorted({v.shown for v in everything})
    head = (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Claims vs measured results"
            f"</title><style>{_CSS}</style><script>{_JS}</script></head><body>")
    out = [head, "<h1>Claims vs measured results</h1>", *_counts_table(all_verdicts),
           _page_provenance(results_dir, sorted(all_verdicts), freshness),
           f"<p>{_e(VERDICT_MEANING)}</p>",
           "<p class=\"muted\">Each paper's name links to its section, which opens with a forest plot of its counted "
           "claims (the measured effect and its CI against the paper's band and no effect). "
           "Every row links to its experiment below: figures, the command that regenerates it, "
           "its CSV and where its numbers came from. Measured: mean [95 % CI] over seeds (Bonferroni for "
           "\"up to\" claims, level shown; their band test uses the plain 95 % CI). Ungated: the verdict over every "
           "cell, where failed gates dropped some. Revised: changes made after results were seen, with the verdict "
           "before each (hover for what changed). Result file: fresh / stale / missing / incomplete "
           "(<code>./reproduce.sh --status</code>).</p>",
           '<div class="controls">', _options(sorted(all_verdicts), "paper", "f-paper"),
           _options(list(CLASSES), "class", "f-class"),
           _options(verdict_names, "verdict", "f-verdict"),
           f'<span class="muted"><span id="shown">{len(everything)}</span> of {len(everything)} claims shown'
           "</span></div>",
           '<table id="claims"><thead><tr><th>paper</th><th>class</th><th>claim</th><th>regime</th>'
           "<th>paper value</th><th>measured</th><th>verdict</th><th>ungated</th><th>revised after results</th>"
           "<th>result file</th></tr></thead><tbody>"]
    for paper, vs in sorted(all_verdicts.items()):
        out += [_row(v, freshness.get(paper, {}).get(v.claim.experiment, "")) for v in vs]
    out.append("</tbody></table>")
    for paper, vs in sorted(all_verdicts.items()):
        out.append(f'<h2 id="{_e(paper)}">{_e(paper)}</h2>')
        if titles.get(paper):
            out.append(f"<p>{_e(titles[paper])}</p>")
        md = (f'<a href="{_e(paper)}/claims.md">{_e(paper)}/claims.md</a>'
              if (results_dir / paper / "claims.md").exists() else f"<code>{_e(paper)}/claims.md</code>")
        readme = papers_dir / paper / "README.md" if papers_dir else None
        rd = (f'<a href="../mlsys_repro/papers/{_e(paper)}/README.md">mlsys_repro/papers/{_e(paper)}/README.md</a>'
              if readme and readme.is_file() else f"<code>mlsys_repro/papers/{_e(paper)}/README.md</code>")
        out.append(f"<p>All claims with notes: {md}; the paper's tables next to ours, with the setup: {rd}.</p>")
        out.append(forest_html(vs, paper))
        out += _paper_vs_ours(vs)
        exps = list(dict.fromkeys([v.claim.experiment for v in vs] + sorted(freshness.get(paper, {}))))
        for exp in exps:
            out.append(f'<h3 id="{_e(paper)}-{_e(exp)}">{_e(paper)}/{_e(exp)}</h3>')
            fresh = freshness.get(paper, {}).get(exp, "?")
            csv = results_dir / paper / f"{exp}.csv"
            csv_link = (f'<a href="{_e(paper)}/{_e(exp)}.csv">{_e(exp)}.csv</a>' if csv.exists()
                        else '<span class="missing">no result file</span>')
            man = _manifest(results_dir, paper, exp)
            out.append(f"<p>Regenerate: <code>{_e(regenerate_command(paper, exp, args))}</code> "
                       "<span class=\"muted\">(without --force a fresh result is kept)</span> &middot; "
                       f"{csv_link} &middot; result file: <span class=\"{_e(fresh.split(':')[0])}\">{_e(fresh)}"
                       f"</span><br>Provenance: {_provenance(man)}</p>")
            mine = [v for v in vs if v.claim.experiment == exp]
            if mine:
                out.append("<table><thead><tr><th>claim</th><th>class</th><th>paper value</th><th>measured</th>"
                           "<th>verdict</th><th>ungated</th><th>note</th></tr></thead><tbody>")
                for v in mine:
                    pv = "—" if v.claim.paper_value is None else _fmt(v.claim.paper_value)
                    rev = "".join(f"<br>revised {_e(r.short())}" for r in v.claim.revised)
                    out.append(f"<tr><td><code>{_e(v.claim.id)}</code> {_e(v.claim.text)}</td><td>"
                               f"{_e(v.claim.cls)}</td><td>{_e(pv)}</td><td>{_e(v.measured())}</td>"
                               f"<td>{_badge(v.shown)}</td><td>{_ungated(v)}</td><td>{_e(v.note)}{rev}</td></tr>")
                out.append("</tbody></table>")
            for fig in experiment_figures(results_dir / paper, exp, exps, man):
                rel = f"{paper}/{fig.name}"
                wide = ' class="wide"' if _png_width(fig) > 900 else ""  # multi-panel: the page's full width
                out.append(f'<figure{wide}><a href="{_e(rel)}"><img src="{_e(rel)}" alt="{_e(fig.stem)}" '
                           f'loading="lazy"></a><figcaption>{_e(fig.name)} (click for full size)</figcaption>'
                           "</figure>")
    out.append("</body></html>\n")
    return "\n".join(out)


def write_site(results_dir: Path, all_verdicts: Mapping[str, list[Verdict]],
               freshness: Mapping[str, Mapping[str, str]], titles: Mapping[str, str] | None = None,
               papers_dir: Path | None | str = "default", args: str = "") -> Path:
    """Write ``<results_dir>/index.html`` and return its path."""
    path = Path(results_dir) / "index.html"
    atomic_write_bytes(path, site_html(results_dir, all_verdicts, freshness, titles, papers_dir, args).encode())
    return path
