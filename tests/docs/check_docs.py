#!/usr/bin/python3
"""check_docs.py - docs/ARCHITECTURE.md against the tree it describes.

The tour names files and functions; this keeps those names true, and keeps
the tour a tour. It fails (exit 1, one line per problem) when the page has:

  - a backticked path that is not in the tree: a token with a file
    extension (lower.c, routes.def, docs/api.md) or one whose first folder
    is a top-level entry of the repository (scripts/build, tests/golden/).
    A bare file name must exist somewhere in the tree; a path with a
    folder, at that path (globs allowed). build/... is looked up in the
    build tree (BUILD_DIR), ../... only when its first folder exists.
  - a backticked function that no source defines or calls: `name()`, or an
    identifier with '_' followed by '(' (`kc_parse(c, ...)`), must occur
    as `name(` in some *.c or *.h file.
  - a backticked identifier with '_' (a type, field, knob, config key or
    macro: `LnStage.jam`, `max_body_bytes`) that occurs nowhere in the
    sources, build files, scripts or tests.
  - a before -> after figure ("23 -> 10 ms", "0.92 → 1.02x", "19 ms
    instead of 33", "from 62-80 to 86-92", "went from", "(was 144)"): figures live in
    docs/performance*.md and in commit messages.
  - history or issue numbers ("issue 4", "#12", "this session", "used to",
    "no longer"), or a prose sentence of more than MAX_WORDS words.

usage: tests/docs/check_docs.py [--root DIR] [--build BUILD_DIR] [--selftest] [DOC]
"""
import argparse
import fnmatch
import glob
import os
import re
import sys
import tempfile

MAX_WORDS = 60
EXTS = ("c", "h", "def", "md", "py", "cmake", "sh", "txt", "json", "info", "in", "service")
SRC_EXTS = (".c", ".h")
# Where an identifier may be defined or used (besides C sources).
WORD_EXTS = (".c", ".h", ".def", ".py", ".cmake", ".sh", ".in", ".txt", ".service", ".conf")
SKIP_DIRS = {".git", "build", "__pycache__"}
SELF = "tests/docs/check_docs.py"  # its planted names must not count as found

FIGURE = [
    (re.compile(r"\d[\d.,]*\s*(?:[%×x]|[A-Za-zµ/]+)?\s*(?:->|→)\s*[~≈]?\d"), "a before -> after figure"),
    (re.compile(r"\d[\d.,]*\s*(?:ms|us|µs|s|ns|GB/s|GFLOP/s|×|x|%)\s+instead of\s+\d"),
     "a before/after figure ('instead of')"),
    (re.compile(r"\bwent from\s+\S*\d"), "a before/after figure ('went from')"),
    (re.compile(r"\bfrom\s+\d[\d.,–-]*\s*[^\s\d]{0,8}\s+to\s+\d"),
     "a before/after figure ('from N to M')"),
    (re.compile(r"\(was\s+\d"), "a before/after figure ('(was N')"),
]
HISTORY = [
    (re.compile(r"\bissues?\s+#?\d+", re.I), "an issue number"),
    (re.compile(r"(?<![\w/&])#\d+\b"), "an issue number"),
    (re.compile(r"\bthis session\b", re.I), "session history"),
    (re.compile(r"\bused to\b", re.I), "history ('used to')"),
    (re.compile(r"\bno longer\b", re.I), "history ('no longer')"),
]
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\(")
PATHISH = re.compile(r"^[A-Za-z0-9_.~\-+*{}\[\]]+(?:/[A-Za-z0-9_.\-+*{}\[\]]*)*$")


class Tree:
    """The files of a repository, indexed once."""

    def __init__(self, root, build):
        self.root = root
        self.build = build
        self.files = []
        for dp, dns, fns in os.walk(root):
            dns[:] = [d for d in dns if d not in SKIP_DIRS and not d.startswith("build")]
            for f in fns:
                self.files.append(os.path.relpath(os.path.join(dp, f), root))
        self.basenames = {os.path.basename(f) for f in self.files}
        self.top = set(os.listdir(root))
        self._src = None
        self._words = None

    def _read(self, exts, doc):
        out = []
        for f in self.files:
            if f in (doc, SELF) or not (f.endswith(exts) or f.startswith("scripts/") or
                                os.path.basename(f) == "CMakeLists.txt"):
                continue
            try:
                with open(os.path.join(self.root, f), errors="replace") as fh:
                    out.append(fh.read())
            except OSError:
                pass
        return "\n".join(out)

    def has_call(self, name):
        if self._src is None:
            self._src = "\n".join(
                open(os.path.join(self.root, f), errors="replace").read()
                for f in self.files if f.endswith(SRC_EXTS))
        return re.search(r"\b" + re.escape(name) + r"\(", self._src) is not None

    def has_word(self, name, doc):
        if self._words is None:
            self._words = self._read(WORD_EXTS, doc)
        return re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])",
                         self._words) is not None

    def has_path(self, tok):
        tok = tok.rstrip("/")
        if not tok.startswith(("build/", "../")) and os.path.exists(os.path.join(self.root, tok)):
            return True
        if tok.startswith("build/"):
            if not self.build:
                return True  # no build tree named: nothing to check against
            return bool(glob.glob(os.path.join(self.build, tok[len("build/"):])))
        if tok.startswith("../"):
            if not os.path.isdir(os.path.join(self.root, "..", tok.split("/")[1])):
                return True  # a sibling checkout that is absent here (the corpus)
            return bool(glob.glob(os.path.normpath(os.path.join(self.root, tok))))
        if "/" not in tok:
            return any(fnmatch.fnmatch(b, tok) for b in self.basenames) \
                if any(c in tok for c in "*?[") else tok in self.basenames
        if any(c in tok for c in "*?["):
            return any(fnmatch.fnmatch(f, tok) or fnmatch.fnmatch(f, tok + "/*")
                       for f in self.files)
        return os.path.exists(os.path.join(self.root, tok))


def is_path(tok, tree):
    """Does a token look like a path into the tree?"""
    if tok.startswith("/") or "://" in tok or not PATHISH.match(tok):
        return False
    if "{" in tok:  # a route or a pattern, not a file
        return False
    last = tok.rstrip("/").rsplit("/", 1)[-1]
    if "." in last and last.rsplit(".", 1)[1] in EXTS and not last.startswith("."):
        return True
    if "/" in tok:
        first = tok.split("/", 1)[0]
        return first in tree.top or first in ("build", "..")
    return False


def code_spans(text):
    """(line number, span) of every inline code span outside fenced blocks,
    and the prose lines (fences and tables left out) for the sentence check."""
    spans, prose = [], []
    fence = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for m in re.finditer(r"(`+)(.+?)\1", line):
            spans.append((n, m.group(2).strip()))
        if not line.lstrip().startswith("|"):
            prose.append((n, line))
    return spans, prose


def sentences(prose):
    """Prose paragraphs split into sentences, with their first line."""
    out, cur, start = [], [], None
    for n, line in prose + [(0, "")]:
        s = line.strip()
        if not s or s.startswith("#"):
            if cur:
                out.append((start, " ".join(cur)))
            cur, start = [], None
            continue
        if re.match(r"^([-*]|\d+\.)\s", s) and cur:  # a list item starts a sentence
            out.append((start, " ".join(cur)))
            cur, start = [], None
        if start is None:
            start = n
        cur.append(s)
    res = []
    for n, para in out:
        para = re.sub(r"`[^`]*`", "X", para)
        para = re.sub(r"\([^()]*\)", lambda m: m.group(0).replace(". ", "; "), para)
        for sent in re.split(r"(?<=[.!?])\s+(?=[A-Z`(\[])", para):
            res.append((n, sent))
    return res


def check(doc_path, tree, doc_rel):
    with open(doc_path, errors="replace") as fh:
        text = fh.read()
    bad = []
    spans, prose = code_spans(text)
    for n, span in spans:
        toks = span.split()
        for tok in toks:
            t = tok.strip(",;:()'\"").rstrip(".")
            t = re.sub(r":\d+$", "", t)  # file.c:123
            if is_path(t, tree) and not tree.has_path(t):
                bad.append(f"{doc_rel}:{n}: `{span}`: path {t} is not in the tree")
        for m in CALL.finditer(span):
            name = m.group(1)
            if span.startswith(name + "()") or "_" in name:
                if not tree.has_call(name):
                    bad.append(f"{doc_rel}:{n}: `{span}`: no {name}( in any *.c or *.h")
        if len(toks) == 1 and "(" not in span:
            parts = re.split(r"\.|->", span)
            if all(IDENT.match(p) for p in parts) and not is_path(span, tree):
                for p in parts:
                    if "_" in p and not tree.has_word(p, doc_rel):
                        bad.append(f"{doc_rel}:{n}: `{span}`: {p} occurs nowhere in the sources")
    fence = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        # figures count everywhere; "#3" in a fenced dump is LLVM, not an issue
        for rx, what in FIGURE + ([] if fence else HISTORY):
            m = rx.search(line)
            if m:
                bad.append(f"{doc_rel}:{n}: {what}: '{m.group(0)}' (figures go to "
                           "docs/performance*.md, history to git)")
    for n, sent in sentences(prose):
        words = len(sent.split())
        if words > MAX_WORDS:
            bad.append(f"{doc_rel}:{n}: a sentence of {words} words (at most {MAX_WORDS}): "
                       f"'{sent[:60]}...'")
    return bad


def selftest(tree, doc_rel):
    """Every kind of problem is reported, and a clean page passes."""
    good = ("# Tour\n\nThe pipeline is in `compiler/compile.c` (`kc_compile()`); "
            "see `scripts/build` and `routes.def`.\n"
            "A stage is an `LnStage`; `LnStage.jam` counts rows. "
            "Route `/v1/compile`, `float16/bfloat16`.\n\n```\nb0 -> b1\n```\n")
    planted = {
        "missing path": "See `compiler/nonesuch.c`.\n",
        "missing bare file": "See `nonesuch_file.def`.\n",
        "missing folder path": "Run `scripts/nonesuch`.\n",
        "missing function": "It calls `kc_nonesuch_fn(c, g)`.\n",
        "missing foo()": "It calls `nonesuchfn()`.\n",
        "missing identifier": "The knob `nonesuch_knob` sets it.\n",
        "arrow figure": "It went faster: 23 -> 10 ms.\n",
        "unicode arrow figure": "Ratio 0.92 → 1.02x.\n",
        "instead of": "Softmax compiles in 19 ms instead of 33.\n",
        "from to": "MatMul moved from 0.92x to 1.02x of OpenBLAS.\n",
        "issue number": "See issue 4 for why.\n",
        "history": "The parser used to refuse it.\n",
        "long sentence": "Word " * (MAX_WORDS + 5) + "end.\n",
    }
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "doc.md")
        with open(p, "w") as fh:
            fh.write(good)
        got = check(p, tree, "selftest")
        if got:
            print("selftest: a clean page was refused:\n  " + "\n  ".join(got))
            fails += 1
        for what, line in planted.items():
            with open(p, "w") as fh:
                fh.write(good + "\n" + line)
            if not check(p, tree, "selftest"):
                print(f"selftest: {what} was not reported")
                fails += 1
    print(f"check_docs selftest: {len(planted) + 1 - fails}/{len(planted) + 1} cases right")
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--build", default=None)
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("doc", nargs="?", default="docs/ARCHITECTURE.md")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    tree = Tree(root, os.path.abspath(a.build) if a.build else None)
    if a.selftest:
        return selftest(tree, a.doc)
    bad = check(os.path.join(root, a.doc), tree, a.doc)
    for b in bad:
        print(b)
    if bad:
        print(f"check_docs: {len(bad)} problem(s) in {a.doc}")
        return 1
    print(f"check_docs: every path and function {a.doc} names exists; no figures, no history")
    return 0


if __name__ == "__main__":
    sys.exit(main())
