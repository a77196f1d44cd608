#!/usr/bin/env python3
"""Issue #20: move the import packages ``common`` and ``papers`` under one top-level package, ``mlsys_repro``.

Run from the root of a checkout that still has the old layout (``common/``, ``papers/`` at the root)::

    python dev/patches/20-package-name/rename.py [--dry-run] [--allow-dirty] [-v]
    git add -A && git commit

It ``git mv``s ``common/`` -> ``mlsys_repro/common/`` and ``papers/`` -> ``mlsys_repro/papers/``, adds
``mlsys_repro/__init__.py``, then rewrites every reference to the packages in the tracked text files (code, Hydra
YAMLs, docs, shell scripts, packaging). Standard library only; deterministic (same tree in, same tree out). It refuses
to run when ``mlsys_repro/`` exists already, and it checks every anchored edit before it changes anything: when the
base has moved and an anchor is gone, it stops and names it (fix the rule here, then rerun on a clean tree).

What is rewritten (the README next to this file has the details):

* dotted module names ``common.<x>`` / ``papers.<x>`` (imports, ``python -m``, ``fn:`` / ``params_class:`` /
  ``module:`` in conf/, ``monkeypatch`` targets, ``:mod:`` references, console-script entry point);
* ``from common import x`` / ``from papers import x``;
* directory paths ``common/...`` / ``papers/...`` (docs, comments, tests that build file names), the results page's
  ``../papers/<key>/README.md`` link, and ``/ "common"`` / ``/ "papers"`` path joins;
* ``Path(__file__).parents[k]`` reaching the repository root from a moved file (one level deeper now), and
  relative doc links from a moved file to the repository root (``../../results/...`` -> ``../../../results/...``);
* anchored edits where the package names are not spelt as paths or dotted names (``TOP_PACKAGES``, the git status
  paths of ``git_sha``, setuptools discovery and package data, the layering test, ...);
* Python lines the longer names push past the 120-column limit are wrapped (imports in ruff's isort style, comments
  and docstring paragraphs reflowed).

Not rewritten: ``results/`` (committed results keep their provenance until regenerated), ``data/`` except its
``*.md`` docs, ``dev/patches/`` (patches are cut against the tree they apply to), ``tests/common`` and
``tests/papers`` (test folders, not the packages), and the words "common" / "papers" as words (fedfoa's
``init: "common"``, argparse's ``papers`` arguments, "common random numbers", ...).
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tokenize
from collections import Counter
from pathlib import Path

PKG = "mlsys_repro"
OLD = ("common", "papers")
LINE_LENGTH = 120  # pyproject [tool.ruff] line-length

TEXT_SUFFIXES = {".py", ".yaml", ".yml", ".md", ".sh", ".toml", ".cfg", ".ini", ".txt"}
TEXT_NAMES = {".ci/run", "setup.py", "reproduce.sh"}
SKIP_PREFIXES = ("results/", ".venv/", "build/", "dist/", "dev/patches/")
DOCS_ONLY_PREFIXES = ("data/",)  # only the *.md files under these are rewritten (never the data files)

INIT = '"""mlsys-repro: the one import package of the reproductions (issue #20).\n\n' \
       '``mlsys_repro.common`` holds the shared core (runner, configs, claims checker, simulators, models, traces),\n' \
       '``mlsys_repro.papers.<key>`` one package per reproduced paper.\n"""\n'

counts: Counter[str] = Counter()


class AnchorMissing(Exception):
    pass


# ------------------------------------------------------------------------------------------------ generic rules

_NAMES = "(common|papers)"
# not part of a longer name, path or dotted name (tests/common, tests.common, selenium.webdriver.common, ...)
_FREE = r"(?<![\w./-])"

GENERIC: list[tuple[str, re.Pattern[str], str]] = [
    # common.repro.x, papers.<key>, papers.{paper}, "papers.$key.bench"
    ("dotted module name", re.compile(_FREE + _NAMES + r"\.(?=[A-Za-z_{<$*])"), PKG + r".\1."),
    # site.py's link from results/index.html to a paper's README
    ("../ link from results/", re.compile(_FREE + r"\.\./" + _NAMES + "/"), "../" + PKG + r"/\1/"),
    ("directory path", re.compile(_FREE + _NAMES + "/"), PKG + r"/\1/"),
    ("from-import of a package", re.compile(r"\bfrom(\s+)" + _NAMES + r"(?=\s+import\b)"), r"from\1" + PKG + r".\2"),
    ("path join / \"pkg\"", re.compile(r'/ "' + _NAMES + '"'), '/ "' + PKG + r'" / "\1"'),
    ("``package`` in docs", re.compile(r"(?<![`\w])(``?)" + _NAMES + r"\1(?![`\w])"), r"\1" + PKG + r".\2\1"),
]


def generic(text: str) -> str:
    for name, pat, repl in GENERIC:
        text, n = pat.subn(repl, text)
        counts[name] += n
    return text


# ------------------------------------------------------------------------------------------------ anchored rules


def _sub(text: str, old: str, new: str, kind: str, *, regex: bool = False, flags: int = 0) -> str:
    pat = re.compile(old if regex else re.escape(old), flags)
    text, n = pat.subn(new, text)
    if not n:
        raise AnchorMissing(f"{kind}: {old!r} not found")
    counts[kind] += n
    return text


def _protect(store: list[str], s: str) -> str:
    store.append(s)
    return f"\x00{len(store) - 1}\x00"


def _readme_layout(text: str, store: list[str]) -> str:
    """The Layout block: the package rows get the new path and the path column is realigned; the tests/ row's
    ``common/`` and ``papers/<key>/`` are tests' folders and stay."""
    m = re.search(r"(## Layout\n\n```\n)(.*?)(\n```)", text, re.S)
    if not m:
        raise AnchorMissing("README Layout block not found")
    rows = []
    for line in m.group(2).split("\n"):
        path, _, rest = re.match(r"(\S*)(\s*)(.*)", line).groups()
        rows.append((generic(path) if path else path, rest, bool(path)))
    width = max(len(p) for p, _, has in rows if has) + 2
    block = "\n".join((p.ljust(width) if has else " " * width) + r for p, r, has in rows)
    counts["README layout block"] += 1
    return text[: m.start(2)] + _protect(store, block) + text[m.end(2):]


def anchored(rel: str, text: str, store: list[str]) -> str:
    """Edits at fixed places (old path ``rel``). Each one must match, or the run stops before changing anything."""
    if rel == "pyproject.toml":
        text = _sub(text, 'include = ["common*", "papers*"]', f'include = ["{PKG}*"]', "setuptools discovery")
        text = _sub(text, r'^papers = \[', f'"{PKG}.papers" = [', "setuptools package-data key", regex=True,
                    flags=re.M)
    elif rel == "reproduce.sh":
        text = _sub(text, "import common, papers,", f"import {PKG}.common, {PKG}.papers,", "install check import")
    elif rel == "common/repro/freshness.py":
        text = _sub(text, 'TOP_PACKAGES = ("common", "papers")', f'TOP_PACKAGES = ("{PKG}",)', "TOP_PACKAGES")
        text = _sub(text, 'cands = sorted(r.joinpath("common").rglob("*.py")) + '
                          'sorted(r.joinpath(*package.split(".")).rglob("*.py"))',
                    _protect(store, f'cands = (sorted(r.joinpath("{PKG}").glob("*.py")) + sorted(r.joinpath("{PKG}", '
                                    '"common").rglob("*.py"))\n'
                                    '             + sorted(r.joinpath(*package.split(".")).rglob("*.py")))'),
                    "fingerprint file walk")
    elif rel == "common/repro/results.py":
        text = _sub(text, '"--", "common", "papers", "conf"]', f'"--", "{PKG}", "conf"]', "git status paths")
    elif rel == "common/repro/run_all.py":
        text = _sub(text, "under common/, papers/ or conf/", _protect(store, f"under {PKG}/ or conf/"),
                    "git status paths (message)")
    elif rel == "common/repro/schema.py":
        text = _sub(text, "holding ``common`` and ``papers`` when", _protect(store, f"holding ``{PKG}`` when"),
                    "docstring naming both packages")
    elif rel == "tests/test_imports.py":
        text = _sub(text, 'package_modules(ROOT, "common")', f'package_modules(ROOT, "{PKG}.common")',
                    "layering test")
        text = _sub(text, 'frozenset({"common", "papers"})', f'frozenset({{"{PKG}"}})', "layering test")
        text = _sub(text, 'startswith("papers")', f'startswith("{PKG}.papers")', "layering test")
    elif rel == "tests/common/test_registration.py":
        text = _sub(text, "m.split('.')[1] for m in sys.modules if m.startswith('papers.')",
                    f"m.split('.')[2] for m in sys.modules if m.startswith('{PKG}.papers.')",
                    "paper key from a module name")
    elif rel == "README.md":
        text = _sub(text, r"The import packages are\s+still the generic `common` and `papers`, so install it "
                          r"into its own virtualenv\. The move under one top-level\s+package, .*?eight papers\.",
                    _protect(store, f"The one import package is\n`{PKG}` (`{PKG}.common`: the shared core; "
                                    f"`{PKG}.papers.<key>`: one package per paper), named after\nthe distribution "
                                    "so that it does not collide with other projects' top-level names."),
                    "README package paragraph", regex=True, flags=re.S)
        text = _readme_layout(text, store)
    return text


# ------------------------------------------------------------------------------------------------ moved files


def moved_file_rules(rel: str, text: str) -> str:
    """A moved file sits one folder deeper: ``Path(__file__).parents[k]`` that reached the repository root (or
    beyond) and relative doc links up to the root gain a level."""
    depth = len(Path(rel).parts) - 1

    def parents(m: re.Match[str]) -> str:
        k = int(m.group(2))
        if k < depth:
            return m.group(0)
        counts["Path(__file__).parents[k] +1"] += 1
        return f"{m.group(1)}{k + 1}]"

    text = re.sub(r"(Path\(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)\]", parents, text)

    def up(m: re.Match[str]) -> str:
        ups = m.group(1)
        if ups.count("../") != depth:
            return m.group(0)
        counts["relative link to the root +../"] += 1
        return "../" + ups

    if rel.endswith(".md"):
        text = re.sub(r"(?<![\w./])((?:\.\./)+)(?!" + _NAMES + "/)(?=[\\w])", up, text)
    return text


# ------------------------------------------------------------------------------------------------ line length
# The longer names push some Python lines past the limit. Each such line is wrapped the way the code around it is
# written: inline comments lose their padding or move above the line, imports take ruff's isort form, code breaks
# after a comma inside brackets (the rest continues the next line of the same brackets, or a new line aligned to the
# bracket), long string literals split at a space into implicitly concatenated parts, and comments / docstring
# paragraphs reflow. Lines that were too long before are left as they were.

_MARKER = re.compile(r"(\* |- |\+ |\d+\. )")


class _Tok:
    __slots__ = ("kind", "text", "start", "end", "stack", "prev")

    def __init__(self, kind: str, text: str, start: tuple[int, int], end: tuple[int, int],
                 stack: tuple[tuple[int, int], ...], prev: str) -> None:
        self.kind, self.text, self.start, self.end, self.stack, self.prev = kind, text, start, end, stack, prev


def _scan(lines: list[str]) -> list[_Tok] | None:
    """Tokens (f-strings as one string on every Python version) with the brackets open before each."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    fstart, fend = getattr(tokenize, "FSTRING_START", -1), getattr(tokenize, "FSTRING_END", -1)
    nl = (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    out: list[_Tok] = []
    stack: list[tuple[int, int]] = []
    prev = "nl"
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.type == fstart:
            depth, j = 0, i
            while True:
                depth += (toks[j].type == fstart) - (toks[j].type == fend)
                if depth == 0:
                    break
                j += 1
            end = toks[j].end
            text = lines[t.start[0] - 1][t.start[1]:end[1]] if t.start[0] == end[0] else ""
            out.append(_Tok("str", text, t.start, end, tuple(stack), prev))
            prev, i = "str", j + 1
            continue
        kind = ("str" if t.type == tokenize.STRING else "comment" if t.type == tokenize.COMMENT
                else "op" if t.type == tokenize.OP else "nl" if t.type in nl else "other")
        out.append(_Tok(kind, t.string, t.start, t.end, tuple(stack), prev))
        if kind == "op" and t.string in "([{":
            stack.append(t.start)
        elif kind == "op" and t.string in ")]}" and stack:
            stack.pop()
        if kind != "comment":
            prev = kind
        i += 1
    return out


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _cut(line: str, floor: int) -> int:
    """Where to wrap ``line``: the last space within the limit, outside ``literals`` when there is one."""
    spaces = [k for k in range(floor + 1, min(len(line), LINE_LENGTH + 1)) if line[k] == " "]
    outside = [k for k in spaces if len(re.findall("``|`", line[:k])) % 2 == 0]
    return (outside or spaces or [-1])[-1]


def _reflow(lines: list[str], n: int, prefix: str, first_prefix_len: int, last: int) -> bool:
    """Wrap lines[n] (comment or docstring text) at the limit; the rest goes in front of the next line of the same
    paragraph (cascading, never past line ``last``) or on a new line starting with ``prefix``."""
    j, floor = n, first_prefix_len
    comment = "#" in prefix
    while len(lines[j]) > LINE_LENGTH:
        cut = _cut(lines[j], floor)
        if cut <= floor or not lines[j][floor:cut].strip():
            return False
        head, rest = lines[j][:cut].rstrip(), lines[j][cut + 1:]
        lines[j] = head
        nxt = lines[j + 1] if j + 1 < len(lines) and j + 1 <= last else ""
        if comment:  # the next comment line at the same column, unless it starts a list
            body = nxt[len(prefix):] if nxt.startswith(prefix) else ""
            same = bool(body.strip()) and not body.startswith(" ") and not _MARKER.match(body)
            nprefix = prefix
        else:  # the next docstring line, as deep or deeper (the rest of an ``Args:`` entry), not a new item
            nprefix = _indent(nxt)
            body = nxt[len(nprefix):]
            same = (bool(body.strip()) and len(nprefix) >= len(prefix) and not _MARKER.match(body)
                    and not re.fullmatch(r"\s*\w[\w ]*:|.*::", head) and body.strip() not in ('"""', "'''")
                    and not body.startswith((">>>", "..", "#", ":")))
        if same:
            lines[j + 1] = nprefix + rest + " " + body
            prefix = nprefix
        else:
            lines.insert(j + 1, prefix + rest)
            last += 1
        j, floor = j + 1, len(prefix)
    return True


def _docstring_prefix(lines: list[str], n: int, tok: _Tok) -> tuple[str, int] | None:
    """(continuation prefix, columns before the text) for docstring line ``n`` (0-based), or None in a literal
    block (an indented block after ``::`` or after a blank line: examples, commands), which is not reflowed."""
    c0 = tok.start[1]
    line = lines[n]
    if n + 1 == tok.start[0]:
        quote = re.match(r"[A-Za-z]*('''|\"\"\")", line[c0:])
        if not quote:
            return None
        at = c0 + quote.end()
        m = _MARKER.match(line[at:])
        return " " * (c0 + (len(m.group(1)) if m else 0)), at
    ws = _indent(line)
    if len(ws) > c0:
        blank = False
        for k in range(n - 1, tok.start[0] - 2, -1):
            above = lines[k]
            if not above.strip():
                blank = True
            elif len(_indent(above)) <= c0 or k == tok.start[0] - 1:
                if blank or above.rstrip().endswith("::"):
                    return None
                break
    m = _MARKER.match(line[len(ws):])
    return ws + (" " * len(m.group(1)) if m else ""), len(ws) + (len(m.group(1)) if m else 0)


def _literal_line(lines: list[str], n: int, tok: _Tok) -> str | None:
    """A too-long line of a docstring example: an aligned ``# comment`` loses padding or moves above the line; a
    shell command continues on the next line after a backslash."""
    line = lines[n]
    m = re.fullmatch(r"(\s*)(\S.*?)\s{2,}(#.*)", line)
    if m:
        ind, code, comment = m.groups()
        if len(ind + code) + 2 + len(comment) <= LINE_LENGTH:
            lines[n] = f"{ind}{code}  {comment}"
            return "docstring example: comment padding shortened"
        lines[n: n + 1] = [ind + comment, ind + code]
        return "docstring example: comment moved above its line"
    raw = "r" in re.match("[A-Za-z]*", lines[tok.start[0] - 1][tok.start[1]:]).group(0).lower()
    bs = "\\" if raw else "\\\\"  # a backslash at the end of the example's line, as the source spells it
    ind = _indent(line)
    cont = line.endswith(" " + bs)
    body = line[: -len(bs) - 1] if cont else line
    prev_cont = n > 0 and lines[n - 1].endswith(" " + bs)
    if not (prev_cont or body.lstrip().startswith(("python", "./", ".venv/", "PYTHONPATH=", "mlsys-repro"))):
        return None
    cut = body.rfind(" ", len(ind) + 1, LINE_LENGTH - len(bs))
    if cut <= len(ind):
        return None
    head, rest = body[:cut].rstrip(), body[cut + 1:]
    ind2 = ind if prev_cont else ind + "    "
    nxt = lines[n + 1] if n + 1 < len(lines) else ""
    if cont and _indent(nxt) == ind2 and nxt.strip():
        lines[n: n + 2] = [f"{head} {bs}", f"{ind2}{rest} {nxt.lstrip()}"]
    else:
        lines[n: n + 1] = [f"{head} {bs}", ind2 + rest + (f" {bs}" if cont else "")]
    return "docstring example: command continued after a backslash"


def _wrap_import(line: str) -> list[str] | None:
    m = re.fullmatch(r"(\s*)(from \S+ import )([^()#]+?)", line)
    if not m:
        return None
    ind, head, names = m.group(1), m.group(2), [x.strip() for x in m.group(3).split(",") if x.strip()]
    return [f"{ind}{head}("] + [f"{ind}    {x}," for x in names] + [f"{ind})"]


def _bracket_indent(lines: list[str], toks: list[_Tok], lineno: int, br: tuple[int, int]) -> int:
    """Continuation column inside bracket ``br``: aligned after it, or the current indentation when the bracket
    ends its line (hanging indent)."""
    after = [t for t in toks if t.start[0] == br[0] and t.start[1] > br[1] and t.kind not in ("nl", "comment")]
    return br[1] + 1 if after else len(_indent(lines[lineno - 1]))


def _split_string(t: _Tok, shift: int) -> tuple[str, str] | None:
    """``t`` (one line) cut at a space within the limit (``shift`` more columns before it) into two literals whose
    implicit concatenation is ``t`` (f prefixes kept where a part has a placeholder)."""
    m = re.match(r"([A-Za-z]*)(['\"])", t.text)
    if not m or t.text[m.end() - 1:].startswith(m.group(2) * 3):
        return None
    pfx, q = m.groups()
    body = t.text[m.end():-1]
    isf = "f" in pfx.lower()
    best, depth, k = None, 0, 0
    while k < len(body):
        ch = body[k]
        if isf and body.startswith(("{{", "}}"), k):
            k += 2
            continue
        if isf and ch in "{}":
            depth += 1 if ch == "{" else -1
        elif ch == " " and depth == 0 and k > 0 and body[k - 1] != "\\" \
                and t.start[1] + shift + len(pfx) + 1 + k + 2 <= LINE_LENGTH and body[k + 1:].strip():
            best = k
        k += 1
    if best is None:
        return None

    def part(b: str) -> str:
        p = pfx if not isf or "{" in b.replace("{{", "") else re.sub("[fF]", "", pfx)
        return p + q + b + q

    return part(body[: best + 1]), part(body[best + 1:])


def _fix_code_line(lines: list[str], n: int, toks: list[_Tok]) -> str | None:
    lineno, line = n + 1, lines[n]
    on = [t for t in toks if t.start[0] <= lineno <= t.end[0] and t.kind != "nl"]
    if any(t.start[0] < lineno for t in on):
        return None  # inside a multi-line string that is not a docstring: its text is data
    comment = next((t for t in on if t.kind == "comment"), None)
    if comment and comment is on[0]:
        ind = _indent(line)
        pre = re.match(r"\s*#+\s*", line).group(0)
        return "long comment reflowed" if _reflow(lines, n, ind + pre[len(ind):], len(pre), len(lines) - 1) else None
    if comment:
        head = line[: comment.start[1]].rstrip()
        if len(head) + 2 + len(comment.text) <= LINE_LENGTH:
            lines[n] = f"{head}  {comment.text}"
            return "inline comment padding shortened"
        lines[n: n + 1] = [_indent(line) + comment.text, head]
        return "inline comment moved above its line"
    if wrapped := _wrap_import(line):
        lines[n: n + 1] = wrapped
        return "long import wrapped (isort style)"
    commas = [t for t in on if t.kind == "op" and t.text == "," and t.stack and t.end[1] <= LINE_LENGTH
              and line[t.end[1]:].strip()]
    if commas:
        t = commas[-1]
        col = _bracket_indent(lines, toks, lineno, t.stack[-1])
        head, rest = line[: t.end[1]], line[t.end[1]:].strip()
        if col + len(rest) >= len(line):
            return None
        nxt = next((u for u in toks if u.start[0] == lineno + 1 and u.kind != "nl"), None)
        commented = any(u.kind == "comment" for u in toks if u.start[0] == lineno + 1)
        if nxt is not None and nxt.start[1] == col and nxt.stack and nxt.stack[-1] == t.stack[-1] and not commented \
                and nxt.kind != "comment" and nxt.text not in ")]}" and len(_indent(lines[n + 1])) == col:
            lines[n: n + 2] = [head, " " * col + rest + " " + lines[n + 1][col:]]
        else:
            lines[n: n + 1] = [head, " " * col + rest]
        return "long code line broken after a comma"
    for t in on:
        if t.kind == "str" and t.start[0] == t.end[0] and t.start[1] < LINE_LENGTH - 2 < t.end[1] - 2:
            parts = _split_string(t, 0 if t.stack else 1)
            if parts is None:
                return None
            col, pre, post = t.start[1], line[: t.start[1]], line[t.end[1]:]
            if not t.stack:  # a bare string at statement level: parenthesise it
                if post.strip():
                    return None
                pre, col, post = pre + "(", col + 1, ")"
            lines[n: n + 1] = [pre + parts[0], " " * col + parts[1] + post]
            nxt = lines[n + 2] if n + 2 < len(lines) else None
            m = re.match(r"([A-Za-z]*)(['\"])", parts[1])
            nm = re.match(r"( *)([A-Za-z]*)(['\"])(?!\3\3)", nxt or "")
            if not post.strip() and nm and len(nm.group(1)) == col and nm.group(2).lower() == m.group(1).lower() \
                    and nm.group(3) == m.group(2):  # same kind of string continues there: join the rest to it
                lines[n + 1: n + 3] = [nxt[: nm.end()] + parts[1][m.end(): -1] + nxt[nm.end():]]
            return "long string split"
    return None


def fix_line_length(rel: str, old: str, new: str, log: list[str]) -> tuple[str, list[str]]:
    """Wrap the lines of ``new`` that the rename pushed past the limit (lines already too long before are left)."""
    before = {ln for ln in old.split("\n") if len(ln) > LINE_LENGTH}
    lines = new.split("\n")
    left: list[str] = []
    n = steps = 0
    while n < len(lines):
        steps += 1
        if steps > 100 * len(lines) + 1000:
            raise RuntimeError(f"{rel}: line wrapping does not terminate")
        if len(lines[n]) <= LINE_LENGTH or lines[n] in before:
            n += 1
            continue
        toks = _scan(lines)
        doc = None if toks is None else next((t for t in toks if t.kind == "str" and t.prev == "nl" and not t.stack
                                              and t.start[0] <= n + 1 <= t.end[0]), None)
        snapshot = lines[n]
        how = None
        if doc is not None:
            pre = _docstring_prefix(lines, n, doc)
            if pre and _reflow(lines, n, *pre, doc.end[0] - 1):
                how = "long docstring line reflowed"
            elif pre is None:
                how = _literal_line(lines, n, doc)
        elif toks is not None:
            how = _fix_code_line(lines, n, toks)
        if how is None:
            left.append(f"{rel}:{n + 1}: {snapshot.strip()[:90]}")
            n += 1
            continue
        counts[how] += 1
        log.append(f"{rel}:{n + 1}: {how}")
    return "\n".join(lines), left


# ------------------------------------------------------------------------------------------------ driver


def tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], capture_output=True, text=True, check=True).stdout.split("\0")
    files = []
    for rel in sorted(f for f in out if f):
        if rel.startswith(SKIP_PREFIXES) or ".egg-info/" in rel:
            continue
        if rel.startswith(DOCS_ONLY_PREFIXES) and not rel.endswith(".md"):
            continue
        if Path(rel).suffix in TEXT_SUFFIXES or rel in TEXT_NAMES:
            files.append(rel)
    return files


def new_path(rel: str) -> str:
    top = rel.split("/", 1)[0]
    return f"{PKG}/{rel}" if top in OLD else rel


def rewrite(rel: str, text: str) -> str:
    store: list[str] = []
    text = anchored(rel, text, store)
    text = generic(text)
    if new_path(rel) != rel:
        text = moved_file_rules(rel, text)
    return re.sub("\x00(\\d+)\x00", lambda m: store[int(m.group(1))], text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="compute and report every edit, change nothing")
    ap.add_argument("--allow-dirty", action="store_true", help="run even with uncommitted changes to tracked files")
    ap.add_argument("-v", "--verbose", action="store_true", help="also list every wrapped line")
    args = ap.parse_args(argv)

    root = Path.cwd()
    if not (root / "pyproject.toml").is_file() or 'name = "mlsys-repro"' not in (root / "pyproject.toml").read_text():
        sys.exit("run from the repository root (pyproject.toml of mlsys-repro not found)")
    if (root / PKG).exists():
        sys.exit(f"{PKG}/ exists already: this tree has the new layout (or a half-applied run); nothing done")
    for d in OLD:
        if not (root / d / "__init__.py").is_file():
            sys.exit(f"{d}/__init__.py not found: not the old layout; nothing done")
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           check=True).stdout.strip()
    if dirty and not args.allow_dirty and not args.dry_run:
        sys.exit(f"uncommitted changes to tracked files (commit or stash them, or --allow-dirty):\n{dirty}")

    # 1. every new text, in memory; an anchor that is gone stops the run here, before any change
    edits: dict[str, str] = {}
    missing, too_long, wrapped = [], [], []
    for rel in tracked_text_files():
        with open(rel, encoding="utf-8", newline="") as fh:
            old = fh.read()
        try:
            new = rewrite(rel, old)
        except AnchorMissing as e:
            missing.append(f"{rel}: {e}")
            continue
        if rel.endswith(".py") and new != old:
            new, left = fix_line_length(rel, old, new, wrapped)
            too_long += left
        if new != old:
            edits[rel] = new
    if missing:
        print("anchored edits that no longer match (the base moved; update the rules):", *missing, sep="\n  ",
              file=sys.stderr)
        return 2

    print(f"{len(edits)} files rewritten; git mv common/ papers/ -> {PKG}/")
    width = max(len(k) for k in counts)
    for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {kind:<{width}}  {n}")
    if args.verbose:
        print("wrapped lines (old paths):", *wrapped, sep="\n  ")
    if too_long:
        print(f"lines still over {LINE_LENGTH} columns (fix by hand):", *too_long, sep="\n  ")
    if args.dry_run:
        return 0

    # 2. move, add the top-level package, write
    (root / PKG).mkdir()
    for d in OLD:
        subprocess.run(["git", "mv", d, f"{PKG}/{d}"], check=True)
    (root / PKG / "__init__.py").write_text(INIT)
    subprocess.run(["git", "add", f"{PKG}/__init__.py"], check=True)
    for rel, text in edits.items():
        with open(new_path(rel), "w", encoding="utf-8", newline="") as fh:
            fh.write(text)

    # 3. nothing may import or name the old modules any more
    left = subprocess.run(["git", "grep", "-nE", r"^\s*(from|import) (common|papers)\b", "--", "*.py",
                           ":!dev/patches"], capture_output=True, text=True).stdout
    dotted = subprocess.run(["git", "grep", "-nP", r"(?<![\w./-])(common|papers)\.[a-z_]+\.", "--", ".",
                             ":!results", ":!data", ":!dev/patches"], capture_output=True, text=True).stdout
    if left or dotted:
        print("still naming the old modules:\n" + left + dotted, file=sys.stderr)
        return 1
    return 1 if too_long else 0


if __name__ == "__main__":
    sys.exit(main())
