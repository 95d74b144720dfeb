#!/usr/bin/python3
"""test_conformance.py - the AKG corpus as a conformance suite.

Starts kcsd (kcsd_harness.Kcsd) with a long --verify-timeout-s and posts
every file of ../shared/corpus/akg (legacy_inplace_assign/ included) to
POST /v1/verify?target=cpu, whatever its `process`: the daemon compiles it
for this host, runs the kernel in its runner on seeded inputs and compares
with the reference interpreter (float32/float64 rtol = atol = 1e-4, 1e-2
with float16/bfloat16 upstream, ints and bools exact). A file passes when
the answer is ok:true. A refusal (4xx with a JSON error) is allowed only
for Custom ops, Ascend-only layouts (FRACTAL_NZ) and the ops listed in
JUSTIFIED below, each with its reason; anything else fails the test.

With --fixture DIR (what ctest passes: the corpus fixture of
tests/corpus.cmake) the work is not done again: kcsd's compile answers
come from DIR (made by the kcsd under test, checked by build id and file
digests), and each kernel runs in kcsd-runner, as POST /v1/verify runs it
(same runner, 2 threads), on the fixture's seeded inputs (the same seed),
compared by the same rule with the reference interpreter's outputs that
tests/corpus_ref.c computed once for every corpus test. /v1/verify itself
is tested by test_verify.py; without --fixture this test posts every file
to it, as above.

--write regenerates docs/conformance.md from the results (per file: ops,
pass / refused / FAIL, the reason or the errors, the time). Skips cleanly
(exit 77, "# SKIP") when the corpus is absent.

usage: test_conformance.py --kcsd path/to/kcsd [--fixture DIR] [--write]
                           [--only SUBSTR] [--verify-timeout S] [--corpus DIR]
"""

import argparse
import glob
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kcsd_harness import Kcsd  # noqa: E402
import corpus_fixture  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "clients", "python"))
import kcs_client as kc  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(os.path.dirname(REPO), "shared", "corpus", "akg")
SEED = 11

# Refusals justified one by one (op name -> why); docs/conformance.md
# repeats them. Custom and FRACTAL_NZ are allowed by the issue itself.
JUSTIFIED = {
    "Complex": "complex64 (Complex/CReal/CImag) is not supported yet: no complex "
               "dtype in the backend or the interpreter; refused with 422 (the one "
               "corpus file, complex_fusion.info, also passes Add its two operands as "
               "one tuple input list)",
    "CReal": "complex64 is not supported yet; refused with 422",
    "CImag": "complex64 is not supported yet; refused with 422",
}


def corpus_files(corpus):
    return sorted(glob.glob(os.path.join(corpus, "*.info")) +
                  glob.glob(os.path.join(corpus, "*.json")) +
                  glob.glob(os.path.join(corpus, "*", "*.info")) +
                  glob.glob(os.path.join(corpus, "*", "*.json")))


def ops_of(desc):
    seen = []
    for op in desc.get("op_desc") or []:
        n = op.get("name")
        if n and n not in seen:
            seen.append(n)
    return seen


def formats_of(desc):
    fm = set()

    def walk(x):
        if isinstance(x, dict):
            if isinstance(x.get("format"), str):
                fm.add(x["format"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(desc)
    return fm


def allowed_refusal(desc, ops):
    """The reason a refusal of this file is acceptable, or None."""
    if "Custom" in ops:
        return "Custom ops (embedded source) are always refused"
    if "FRACTAL_NZ" in formats_of(desc):
        return "FRACTAL_NZ is an Ascend-only layout"
    for op in ops:
        if op in JUSTIFIED:
            return JUSTIFIED[op]
    return None


def post(port, path, body, timeout):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
    finally:
        c.close()
    try:
        j = json.loads(raw)
    except ValueError:
        j = None
    return r.status, j, raw.decode("utf-8", "replace")


def refused(r, st, e, desc, ops):
    """Fills result r for a 4xx answer with error record e: "refused",
    or "FAIL" when the refusal is not one the corpus allows."""
    r["result"] = "refused"
    r["code"] = e.get("code")
    r["why"] = "%d %s: %s%s" % (st, e.get("code"), e.get("message"),
                                (" at " + e["where"]) if e.get("where") else "")
    r["allowed"] = allowed_refusal(desc, ops)
    if not r["allowed"]:
        r["result"] = "FAIL"


def run_one(d, path, rel, timeout):
    with open(path, "rb") as f:
        body = f.read()
    try:
        desc = json.loads(body)
    except ValueError as e:
        return {"file": rel, "ops": [], "result": "FAIL", "why": "not JSON: %s" % e, "s": 0}
    ops = ops_of(desc)
    t0 = time.monotonic()
    try:
        st, j, raw = post(d.port, "/v1/verify?target=cpu&seed=%d" % SEED, body, timeout + 120)
    except (OSError, http.client.HTTPException) as e:
        st, j, raw = 0, None, "request failed: %s" % e
    dt = time.monotonic() - t0
    r = {"file": rel, "ops": ops, "s": dt, "status": st}
    if st == 200 and j and j.get("ok") is True:
        outs = j.get("outputs") or []
        r["result"] = "pass"
        r["why"] = "max abs err %.3g" % max([o.get("max_abs_err") or 0 for o in outs] or [0])
    elif st == 200 and j:
        r["result"] = "FAIL"
        r["why"] = "failure %s: %s" % (j.get("failure"), json.dumps(j.get("outputs"))[:300])
    elif j and isinstance(j.get("error"), dict):
        refused(r, st, j["error"], desc, ops)
    else:
        r["result"] = "FAIL"
        r["why"] = "HTTP %s: %s" % (st, raw[:300])
    return r


NP_DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
             "bfloat16": np.uint16, "int8": np.int8, "int16": np.int16, "int32": np.int32,
             "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
             "uint64": np.uint64, "bool": np.uint8}


def as_f64(raw, dtype):
    if dtype == "bfloat16":
        return kc.from_bfloat16(raw).astype(np.float64)
    return raw.astype(np.float64)


def compare(dtype, got, want, ties, tol):
    """POST /v1/verify's rule: floats within tol + tol |want| (NaN = NaN),
    the rest bit for bit; elements on a near tie (ties) excused. Returns
    (mismatches, max abs err over the compared elements)."""
    keep = ties == 0
    if dtype in ("float32", "float64", "float16", "bfloat16"):
        g, w = as_f64(got, dtype), as_f64(want, dtype)
        both_nan = np.isnan(g) & np.isnan(w)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(g - w)
            same = both_nan | (g == w) | (diff <= tol + tol * np.abs(w))
        err = np.where(both_nan | (g == w), 0.0, diff)[keep]
        return int(np.count_nonzero(~same & keep)), float(np.nanmax(err)) if err.size else 0.0
    bad = int(np.count_nonzero((got != want) & keep))
    return bad, 0.0


def run_fixture(fx, runner, corpus, path, rel, timeout):
    """run_one's result from the fixture: kcsd's compile answer, the kernel
    run in kcsd-runner on the fixture's inputs, compared with its outputs."""
    with open(path, "rb") as f:
        desc = json.loads(f.read())
    ops = ops_of(desc)
    t0 = time.monotonic()
    ans, meta, _ = fx.compiled(rel)
    r = {"file": rel, "ops": ops, "status": ans["status"]}
    ref = fx.reference(rel)
    if ans["status"] == 200 and "error" in ref:
        # the interpreter refuses it: /v1/verify answers that as an error
        ans = {"status": 413 if ref["error"]["code"] == "too_large" else 500,
               "error": {"error": ref["error"]}}
    if ans["status"] != 200:
        e = (ans.get("error") or {}).get("error")
        if isinstance(e, dict) and 400 <= ans["status"] < 500:
            refused(r, ans["status"], e, desc, ops)
        else:
            r["result"] = "FAIL"
            r["why"] = "HTTP %s: %s" % (ans["status"], json.dumps(ans.get("error"))[:300])
        r["s"] = time.monotonic() - t0
        return r
    with tempfile.TemporaryDirectory(prefix="kcs-conf-") as tmp:
        out = os.path.join(tmp, "out")
        try:
            p = subprocess.run([runner, "--so", os.path.join(fx.out, ans["object"]),
                                "--symbol", meta["symbol"], "--in", ref["in"], "--out", out,
                                "--threads", "2", "--cpu-s", str(3 * timeout + 1)],
                               capture_output=True, timeout=timeout)
            rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            rc, err = None, "timeout after %d s" % timeout
        outs = [a for a in ref["args"] if a["is_output"]]
        if rc != 0:
            r["result"] = "FAIL"
            r["why"] = "failure %s: %s" % ("timeout" if rc is None else
                                           "crashed" if rc < 0 else "exit %d" % rc, err[:300])
            r["s"] = time.monotonic() - t0
            return r
        got_all = np.fromfile(out, np.uint8)
    want_all = np.memmap(ref["ref"], np.uint8, "r")
    tie_at = sum(a["bytes"] for a in outs)
    off = tie_off = 0
    bad, maxa, errs = 0, 0.0, []
    for a in outs:
        dt = NP_DTYPES[a["dtype"]]
        n = a["bytes"] // np.dtype(dt).itemsize
        got = got_all[off:off + a["bytes"]].view(dt)
        want = np.asarray(want_all[off:off + a["bytes"]]).view(dt)
        ties = np.asarray(want_all[tie_at + tie_off:tie_at + tie_off + n])
        nb, ea = compare(a["dtype"], got, want, ties, a["tolerance"])
        if nb:
            errs.append({"index": a["index"], "tensor_name": a["tensor_name"], "mismatches": nb})
        bad += nb
        maxa = max(maxa, ea)
        off += a["bytes"]
        tie_off += n
    del want_all
    r["s"] = time.monotonic() - t0
    if bad:
        r["result"] = "FAIL"
        r["why"] = "failure mismatch: %s" % json.dumps(errs)[:300]
    else:
        r["result"] = "pass"
        r["why"] = "max abs err %.3g" % maxa
    return r


def md_escape(s):
    return s.replace("|", "\\|").replace("\n", " ")


def write_doc(results, opt, total_s):
    npass = sum(r["result"] == "pass" for r in results)
    nref = sum(r["result"] == "refused" for r in results)
    nfail = sum(r["result"] == "FAIL" for r in results)
    L = []
    L.append("# Conformance: the AKG corpus on the CPU backend")
    L.append("")
    L.append("Generated by `tests/http/test_conformance.py --kcsd build/server/kcsd --write`")
    L.append("(ctest `http_conformance`). Every file of `../shared/corpus/akg` (with")
    L.append("`legacy_inplace_assign/`) is posted to `POST /v1/verify?target=cpu&seed=%d`," % SEED)
    L.append("whatever its `process`: compiled for this host, run in the runner on seeded")
    L.append("inputs, and compared with the reference interpreter (float32/float64")
    L.append("rtol = atol = 1e-4; 1e-2 with float16/bfloat16 upstream; ints and bools")
    L.append("exact; near-tie comparison elements excused), with kcsd")
    L.append("`--verify-timeout-s %d --verify-max-bytes %d` (the large files need more"
             % (opt.verify_timeout, opt.verify_max_mib << 20))
    L.append("than the defaults, 10 s and 256 MiB).")
    L.append("")
    L.append("**%d files: %d pass, %d refused, %d fail** (%.0f s in all on the machine"
             " that wrote this page)." % (len(results), npass, nref, nfail, total_s))
    L.append("")
    L.append("## Refusals and why they are allowed")
    L.append("")
    L.append("Refusals are allowed only for `Custom` (the service never compiles code it")
    L.append("is sent), Ascend-only layouts (`FRACTAL_NZ`), and these, one by one:")
    L.append("")
    for op, why in JUSTIFIED.items():
        L.append("* `%s`: %s." % (op, why))
    L.append("")
    L.append("Ops no corpus file uses are checked elsewhere against the same interpreter:")
    L.append("Argmax/Argmin, CumSum/CumProd and Pool2D by `test_graphfuzz`, `test_interp`")
    L.append("(hand-computed numpy values) and `tests/http/test_verify.py`. Multi-output")
    L.append("op entries (several `output_desc` items, read through `tuple_getitem`) are")
    L.append("refused with 422 `unsupported`: no op kcsd compiles has more than one output.")
    L.append("")
    L.append("## Per file")
    L.append("")
    L.append("| file | ops | result | reason / max abs err | s |")
    L.append("|---|---|---|---|---|")
    for r in results:
        why = r.get("why", "")
        if r["result"] == "refused":
            why += " (allowed: %s)" % r["allowed"]
        L.append("| `%s` | %s | %s | %s | %.1f |" % (
            r["file"], md_escape(", ".join(r["ops"])), r["result"], md_escape(why), r["s"]))
    L.append("")
    with open(os.path.join(REPO, "docs", "conformance.md"), "w") as f:
        f.write("\n".join(L))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--only", default=None)
    ap.add_argument("--write", action="store_true", help="regenerate docs/conformance.md")
    ap.add_argument("--fixture", default=None,
                    help="the corpus fixture (tests/corpus.cmake) to take compiles and "
                         "reference outputs from, instead of POST /v1/verify")
    ap.add_argument("--verify-timeout", type=int, default=600,
                    help="kcsd --verify-timeout-s (the large MatMul files need minutes)")
    ap.add_argument("--verify-max-mib", type=int, default=2048,
                    help="kcsd --verify-max-bytes in MiB (four corpus files exceed the "
                         "default 512)")
    opt = ap.parse_args()
    if not os.path.isdir(opt.corpus):
        print("# SKIP corpus absent (%s)" % opt.corpus)
        return 77
    files = corpus_files(opt.corpus)
    if opt.only:
        files = [p for p in files if opt.only in os.path.relpath(p, opt.corpus)]
    results, n, failed = [], 0, 0
    t0 = time.monotonic()
    args = ["--verify-timeout-s", str(opt.verify_timeout),
            "--verify-max-bytes", str(opt.verify_max_mib << 20)]
    fx = corpus_fixture.load(opt.fixture) if opt.fixture else None
    if opt.fixture and fx is None:
        print("not ok 1 - the corpus fixture %s was not made (corpus_compile failed?)"
              % opt.fixture)
        return 1
    d = Kcsd(opt.kcsd, extra_args=args)
    d.start()
    try:
        if fx is not None:
            _, version = corpus_fixture.http_json(d.port, "GET", "/v1/version")
            fx.check(opt.corpus, version)
        runner = os.path.join(os.path.dirname(os.path.abspath(opt.kcsd)), "kcsd-runner")
        for path in files:
            rel = os.path.relpath(path, opt.corpus)
            if fx is not None:
                r = run_fixture(fx, runner, opt.corpus, path, rel, opt.verify_timeout)
            else:
                r = run_one(d, path, rel, opt.verify_timeout)
            if d.proc is not None and d.proc.poll() is not None:
                # the daemon died on this file: a bug in itself; record
                # it and go on with a fresh daemon
                code = d.stop(check=False)
                r["result"] = "FAIL"
                r["why"] = "kcsd died (exit %s) on this file; %s" % (code, r.get("why", ""))
                d.cleanup()
                d = Kcsd(opt.kcsd, extra_args=args)
                d.start()
            results.append(r)
            n += 1
            good = r["result"] != "FAIL"
            failed += not good
            print("%s %d - %s: %s %s (%.1f s)" % ("ok" if good else "not ok", n, rel[:70],
                                                 r["result"], r.get("why", "")[:300], r["s"]))
            sys.stdout.flush()
    finally:
        d.stop(check=False)
        d.cleanup()
    total = time.monotonic() - t0
    npass = sum(r["result"] == "pass" for r in results)
    nref = sum(r["result"] == "refused" for r in results)
    print("# conformance: %d files, %d pass, %d refused (allowed), %d fail, %.0f s" %
          (len(results), npass, nref, failed, total))
    if opt.write and not opt.only:
        write_doc(results, opt, total)
        print("# wrote docs/conformance.md")
    print("%d passed, %d failed" % (n - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
