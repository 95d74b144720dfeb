#!/usr/bin/python3
"""corpus_fixture.py - the compile half of the corpus fixture (tests/corpus.cmake).

    corpus_fixture.py --kcsd BUILD/server/kcsd --out BUILD/tests/corpus
                      [--corpus DIR] [--targets cpu[,T...]] [--jobs N]

Starts kcsd on OUT/state (emptied first) and POSTs every corpus file (DIR/
*.info|*.json and one folder down) to /v1/compile?target=T for each
target, N requests at a time, once per ctest run. The corpus tests then
read what it wrote instead of compiling again, and start their own kcsd on
a copy of OUT/state, where every kernel is already cached:
  OUT/index.json   {"corpus": DIR, "kcsd": path, "version": GET /v1/version,
                    "targets": [T...], "files": [{"file": path below DIR,
                    "key": the path with '/' as "__", "sha256": of its bytes,
                    "compile": {T: ANSWER}}]}
  OUT/T/KEY.json   the compile response (200) without object_base64
  OUT/T/KEY.so     its object
  ANSWER           {"status": HTTP status (0: no answer), "ms": round trip,
                    "meta": "T/KEY.json", "object": "T/KEY.so" (200 only),
                    "error": the JSON error body (otherwise), "kcsd_died":
                    true when the daemon died on the file (it is restarted)}
OUT/ref/ (tests/corpus_ref.c) holds the inputs and the interpreter's outputs.
Every file must get an answer, a kernel or a 4xx with a JSON error; a 5xx,
no answer or a dead daemon fails this setup (the file is still recorded).
Exit 77 (ctest's skip) when DIR is absent. load(OUT) is the consumers' side.
"""

import argparse
import base64
import concurrent.futures
import glob
import hashlib
import http.client
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kcsd_harness import Kcsd  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(os.path.dirname(REPO), "shared", "corpus", "akg")


def corpus_files(corpus):
    """Paths below corpus, sorted: *.info and *.json, and one folder down."""
    return sorted(os.path.relpath(p, corpus) for pat in ("*.info", "*.json", "*/*.info", "*/*.json")
                  for p in glob.glob(os.path.join(corpus, pat)))


def key_of(rel):
    return rel.replace("/", "__")


def http_json(port, method, path, body=None, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
    finally:
        c.close()
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, {"raw": raw[:300].decode("utf-8", "replace")}


# ---- the consumers' side -----------------------------------------------------

class Fixture:
    """What the setup wrote, checked against the corpus and the kcsd under
    test: a stale fixture (another kcsd build, a changed file) is an error,
    never silently used."""

    def __init__(self, out):
        self.out = out
        with open(os.path.join(out, "index.json")) as f:
            self.index = json.load(f)
        self.files = {e["file"]: e for e in self.index["files"]}

    def check(self, corpus, version=None):
        """Raises ValueError unless the fixture covers exactly corpus's files
        as they are now and (given GET /v1/version) the same kcsd build."""
        if version is not None and version.get("build_id") != \
                self.index["version"].get("build_id"):
            raise ValueError("corpus fixture made by kcsd build %s, testing %s"
                             % (self.index["version"].get("build_id"), version.get("build_id")))
        now = corpus_files(corpus)
        if now != sorted(self.files):
            raise ValueError("corpus fixture lists %d files, %s has %d"
                             % (len(self.files), corpus, len(now)))
        for rel in now:
            with open(os.path.join(corpus, rel), "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != self.files[rel]["sha256"]:
                    raise ValueError("%s changed since the corpus fixture was made" % rel)

    def compiled(self, rel, target="cpu"):
        """(answer, meta, object bytes): meta/object None unless status 200."""
        a = self.files[rel]["compile"][target]
        if a.get("status") != 200:
            return a, None, None
        with open(os.path.join(self.out, a["meta"])) as f:
            meta = json.load(f)
        with open(os.path.join(self.out, a["object"]), "rb") as f:
            obj = f.read()
        return a, meta, obj

    def reference(self, rel):
        """The corpus_ref record (KEY.json) plus "in"/"ref" paths."""
        k = self.files[rel]["key"]
        with open(os.path.join(self.out, "ref", k + ".json")) as f:
            r = json.load(f)
        r["in"] = os.path.join(self.out, "ref", k + ".in")
        r["ref"] = os.path.join(self.out, "ref", k + ".ref")
        return r

    def state_copy(self, dest):
        """A copy of the setup's kcsd state dir (every kernel cached) at dest:
        each consumer's kcsd gets its own."""
        shutil.copytree(os.path.join(self.out, "state"), dest)
        return dest


def load(out):
    """The Fixture at out, or None when the setup has not written one."""
    if not out or not os.path.exists(os.path.join(out, "index.json")):
        return None
    return Fixture(out)


# ---- the setup -------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--targets", default="cpu")
    ap.add_argument("--jobs", type=int, default=min(os.cpu_count() or 2, 4))
    opt = ap.parse_args()
    index_path = os.path.join(opt.out, "index.json")
    if os.path.exists(index_path):
        os.unlink(index_path)  # consumers never see a half-made fixture
    if not os.path.isdir(opt.corpus):
        print("# SKIP corpus absent (%s)" % opt.corpus)
        return 77
    targets = opt.targets.split(",")
    state = os.path.join(opt.out, "state")
    shutil.rmtree(state, ignore_errors=True)
    for t in targets:
        shutil.rmtree(os.path.join(opt.out, t), ignore_errors=True)
        os.makedirs(os.path.join(opt.out, t))
    files = []
    for rel in corpus_files(opt.corpus):
        with open(os.path.join(opt.corpus, rel), "rb") as f:
            body = f.read()
        files.append({"file": rel, "key": key_of(rel), "sha256": hashlib.sha256(body).hexdigest(),
                      "compile": {}, "_body": body})

    t0 = time.monotonic()
    d = Kcsd(opt.kcsd, state_dir=state, trust_keys=False)
    d.start()
    st, version = http_json(d.port, "GET", "/v1/version")
    failed = 0

    def compile_one(e, t):
        t1 = time.monotonic()
        try:
            st, j = http_json(d.port, "POST", "/v1/compile?target=%s" % t, e["_body"])
        except (OSError, http.client.HTTPException) as x:
            st, j = 0, {"raw": "request failed: %s" % x}
        a = {"status": st, "ms": round((time.monotonic() - t1) * 1e3, 1)}
        if st == 200:
            obj = base64.b64decode(j.pop("object_base64"))
            a["meta"] = "%s/%s.json" % (t, e["key"])
            a["object"] = "%s/%s.so" % (t, e["key"])
            with open(os.path.join(opt.out, a["meta"]), "w") as f:
                json.dump(j, f, indent=1)
            with open(os.path.join(opt.out, a["object"]), "wb") as f:
                f.write(obj)
        else:
            a["error"] = j
        return a

    try:
        for t in targets:
            pending = list(files)
            while pending:
                with concurrent.futures.ThreadPoolExecutor(opt.jobs) as ex:
                    answers = list(ex.map(lambda e: compile_one(e, t), pending))
                died = d.proc.poll() is not None
                for e, a in zip(pending, answers):
                    e["compile"][t] = a
                if not died:
                    break
                # the daemon died: the files it did not answer are retried one
                # at a time on a fresh daemon, so the culprit is named
                d.stop(check=False)
                d.cleanup()
                d = Kcsd(opt.kcsd, state_dir=state, trust_keys=False)
                d.start()
                retry = [e for e, a in zip(pending, answers) if a["status"] == 0]
                pending = []
                for e in retry:
                    a = compile_one(e, t)
                    if d.proc.poll() is not None:
                        a["kcsd_died"] = True
                        d.stop(check=False)
                        d.cleanup()
                        d = Kcsd(opt.kcsd, state_dir=state, trust_keys=False)
                        d.start()
                    e["compile"][t] = a
        for e in files:
            for t in targets:
                a = e["compile"][t]
                bad = a["status"] == 0 or a["status"] >= 500 or a.get("kcsd_died") or \
                    (a["status"] != 200 and not isinstance(a["error"].get("error"), dict))
                failed += bool(bad)
                print("%s %s %s: %s (%.0f ms)%s" % (
                    "not ok -" if bad else "#", t, e["file"], a["status"], a["ms"],
                    "" if a["status"] == 200 else " " + json.dumps(a["error"])[:200]))
    finally:
        d.stop(check=False)
        d.cleanup()
    for e in files:
        del e["_body"]
    tmp = index_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"corpus": os.path.abspath(opt.corpus), "kcsd": os.path.abspath(opt.kcsd),
                   "version": version, "targets": targets, "files": files}, f, indent=1)
    os.replace(tmp, index_path)
    n200 = sum(e["compile"][t]["status"] == 200 for e in files for t in targets)
    print("# corpus fixture: %d files x %d targets, %d kernels, %d refused, %d failed, %.1f s"
          % (len(files), len(targets), n200, len(files) * len(targets) - n200 - failed, failed,
             time.monotonic() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
