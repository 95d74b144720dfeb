#!/usr/bin/python3
"""test_dump.py - GET /v1/kernels/{id}/dump and `kcs compile --dump`.

Starts kcsd (kcsd_harness.Kcsd) with a read and a write token and checks:
  sections   each pass name alone gives exactly its "== name ==" section
             (text/plain, with that pass's content); several passes come in
             pipeline order whatever the order asked, repeats once; the
             fresh compile gives the stored object (X-Kcsd-Dump-Object:
             same); a kernel compiled under a tuned schedule dumps that
             schedule's knobs.
  auth       a read token suffices; no token is 401 with WWW-Authenticate,
             as on the other read routes.
  errors     no ?pass, an empty one, an unknown name (alone or in a list)
             are 400 bad_request with where "?pass", the bad value and every
             valid name in the message; an unknown kernel is 404 not_found,
             a malformed id 404.
  restart    after a restart (no body in memory) the dump is rebuilt from
             the stored canonical workload: tensors named i<k>, the same
             object again.
  limit      a daemon with a small max_dump_bytes answers 413 too_large
             naming the pass whose section crosses it, and still serves
             what fits.
  cli        `kcs compile FILE --dump schedule` prints the schedule section
             alone on stdout (kernel id on stderr); `--dump bogus` exits 1
             with the server's 400 on stderr.
Prints "ok N - name" / "not ok N - name" and "N passed, M failed"; exits 1
on any failure.

usage: test_dump.py --kcsd path/to/kcsd [--kcs path/to/kcs]
"""

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402

PASSES = ["graph", "lower", "schedule", "emit-llvm", "optimize", "object", "link"]
READ, WRITE = "dump-read-token-1", "dump-write-token-1"

ok = T.ok


def desc(name, shape=(4, 33), dtype="float32", formal=None, value=None):
    d = {"data_type": dtype, "format": "DefaultFormat", "shape": list(shape),
         "tensor_name": name}
    if formal:
        d["name"] = formal
    if value is not None:
        d["value"] = value
    return d


# y = Cast(Exp(x) * 2 + x, float16)
GRAPH = {
    "composite": True, "op": "Fused_Exp_Mul_Add_Cast_dump", "process": "cpu",
    "version": 1, "platform": "AKG", "composite_graph": "d", "id": 0,
    "input_desc": [[desc("input_0")]],
    "output_desc": [desc("output_0_3", dtype="float16")],
    "op_desc": [
        {"name": "Exp", "attr": None, "impl_path": "",
         "input_desc": [[desc("input_0", formal="input_0")]],
         "output_desc": [desc("output_0_0", formal="output_0")]},
        {"name": "Mul", "attr": None, "impl_path": "",
         "input_desc": [[desc("output_0_0", formal="input_0")],
                        [desc("input_1", (1,), formal="input_1", value=2.0)]],
         "output_desc": [desc("output_0_1", formal="output_0")]},
        {"name": "Add", "attr": None, "impl_path": "",
         "input_desc": [[desc("output_0_1", formal="input_0")],
                        [desc("input_0", formal="input_1")]],
         "output_desc": [desc("output_0_2", formal="output_0")]},
        {"name": "Cast", "attr": [{"data_type": "str", "name": "dst_type", "value": "float16"}],
         "impl_path": "",
         "input_desc": [[desc("output_0_2", formal="input_0")]],
         "output_desc": [desc("output_0_3", dtype="float16", formal="output_0")]},
    ],
}


def req(d, method, path, body=None, token=READ):
    """(status, headers (lower-case), raw bytes, parsed JSON or None)."""
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=300)
    h = {}
    if body is not None:
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    if token:
        h["Authorization"] = "Bearer " + token
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    raw = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    try:
        j = json.loads(raw)
    except ValueError:
        j = None
    return r.status, hd, raw, j


def compile_kernel(d, body=GRAPH):
    st, _, raw, j = req(d, "POST", "/v1/compile?target=cpu", body)
    assert st == 200, raw
    return j


def dump(d, kid, passes, token=READ):
    q = "" if passes is None else "?pass=" + passes
    return req(d, "GET", "/v1/kernels/%s/dump%s" % (kid, q), token=token)


def sections(text):
    """[(name, body)] split at the "== name ==" lines of known passes."""
    out = []
    for line in text.splitlines(keepends=True):
        m = re.match(r"^== (\S+) ==\n$", line)
        if m and m.group(1) in PASSES:
            out.append([m.group(1), ""])
        elif out:
            out[-1][1] += line
        else:
            return None  # text before the first header
    return [tuple(s) for s in out]


def error(j):
    try:
        return j["error"]
    except (TypeError, KeyError):
        return {}


def token_args(kcsd, tmp):
    conf = os.path.join(tmp, "kcsd.conf")
    lines = []
    for tok, role in ((READ, "read"), (WRITE, "write")):
        p = subprocess.run([kcsd, "--hash-token", tok, role], capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 0, p.stderr
        lines.append("token = %s\n" % p.stdout.strip())
    with open(conf, "w") as f:
        f.writelines(lines)
    return ["--config", conf]


# Content each pass's section must show (the symbol is filled in).
EXPECT = {
    "graph": r"^graph Fused_Exp_Mul_Add_Cast_dump version \d+ process \S+\n.*= Exp\(",
    "lower": r"stage s0",
    "schedule": r"^template \S+ knobs \{.*\}\n.*stage s0",
    "emit-llvm": r"define .*@Fused_Exp_Mul_Add_Cast_dump_kernel",
    "optimize": r"define .*@Fused_Exp_Mul_Add_Cast_dump_kernel",
    "object": r"^\d+ bytes, target \S+\n$",
    "link": r"^\d+ bytes, symbol Fused_Exp_Mul_Add_Cast_dump_kernel\n$",
}


def test_sections(d, meta):
    kid = meta["kernel_id"]
    got = {}
    for p in PASSES:
        st, h, raw, _ = dump(d, kid, p)
        text = raw.decode("utf-8", "replace")
        secs = sections(text) if st == 200 else None
        ok(st == 200 and h.get("content-type", "").startswith("text/plain") and secs
           and [s[0] for s in secs] == [p], "pass=%s gives one text/plain section '%s'" % (p, p),
           "%d %s %s" % (st, h.get("content-type"), text[:600]))
        body = secs[0][1] if secs else ""
        ok(re.search(EXPECT[p], body, re.S), "the %s section shows that pass" % p, body[:600])
        ok(h.get("x-kcsd-dump-object") == "same",
           "pass=%s: the fresh compile gives the stored object" % p, str(h))
        got[p] = body
    st, h, raw, _ = dump(d, kid, "link,graph,schedule,graph")
    secs = sections(raw.decode()) if st == 200 else None
    ok(secs and [s[0] for s in secs] == ["graph", "schedule", "link"],
       "several passes come in pipeline order, a repeat once", raw[:300])
    ok(secs and dict(secs) == {p: got[p] for p in ("graph", "schedule", "link")},
       "each section is the same as asked alone", raw[:600])
    st, h, raw, _ = dump(d, kid, ",".join(PASSES))
    secs = sections(raw.decode()) if st == 200 else None
    ok(secs and [s[0] for s in secs] == PASSES, "all seven passes, in order",
       [s[0] for s in secs or []])
    ok(secs and "input_0" in dict(secs)["graph"],
       "a kernel compiled by this process dumps the body's tensor names", raw[:400])
    return got


def test_auth(d, kid):
    st, h, raw, j = dump(d, kid, "graph", token=None)
    ok(st == 401 and error(j).get("code") == "unauthorized"
       and h.get("www-authenticate", "").startswith("Bearer"),
       "no token: 401 with WWW-Authenticate", "%d %s %s" % (st, h, raw))
    st2, _, raw2, _ = req(d, "GET", "/v1/kernels/%s/ir" % kid, token=None)
    ok(st2 == st, "the same answer as GET /ir without a token", raw2)
    st, _, raw, _ = dump(d, kid, "graph", token="not-a-token")
    ok(st == 401, "an unknown token: 401", raw)
    st, _, raw, _ = dump(d, kid, "graph", token=WRITE)
    ok(st == 200, "a write token (higher role) also works", raw[:200])


def test_errors(d, kid):
    for q, bad in ((None, None), ("", None), ("bogus", "bogus"), ("graph,Lower", "Lower"),
                   ("graph,,link", "''"), ("schedule,", "''")):
        st, _, raw, j = dump(d, kid, q)
        e = error(j)
        msg = e.get("message", "")
        good = (st == 400 and e.get("code") == "bad_request" and e.get("where") == "?pass"
                and all(p in msg for p in PASSES))
        if bad:
            good = good and ("'%s'" % bad.strip("'") in msg if bad != "''" else "''" in msg)
        ok(good, "pass=%r: 400 naming ?pass%s and listing the valid passes"
           % (q, " and %s" % bad if bad else ""), raw)
    st, _, raw, j = dump(d, "0" * 64, "graph")
    ok(st == 404 and error(j).get("code") == "not_found", "unknown kernel: 404 not_found", raw)
    st, _, raw, j = dump(d, "abc", "graph")
    ok(st == 404, "malformed kernel id: 404", raw)
    st, _, raw, j = req(d, "POST", "/v1/kernels/%s/dump?pass=graph" % kid, {})
    ok(st == 405, "POST: 405", raw)


def test_tuned(d, meta):
    """A tuned schedule (PUT, then a compile) is what the dump compiles."""
    wkey, target = meta["workload_key"], meta["target"]["name"]
    knobs = dict(meta["schedule"]["knobs"])
    knobs["vector_width"] = 4 if knobs.get("vector_width") != 4 else 8
    rec = {"format": "kcs-schedule-v1", "workload_key": wkey, "target": target,
           "template": meta["schedule"]["template"], "knobs": knobs,
           "measured": {"seconds": 1e-6, "gflops": 1.0}}
    st, _, raw, _ = req(d, "PUT", "/v1/schedules/%s" % wkey, rec, token=WRITE)
    ok(st in (200, 201), "PUT a tuned schedule", raw)
    tuned = compile_kernel(d)
    ok(tuned["kernel_id"] != meta["kernel_id"] and tuned["schedule"]["source"] == "tuned",
       "the next compile uses it", json.dumps(tuned.get("schedule")))
    st, _, raw, _ = dump(d, tuned["kernel_id"], "schedule")
    text = raw.decode()
    ok(st == 200 and '"vector_width":%d' % knobs["vector_width"] in text
       and "vectorized(%d)" % knobs["vector_width"] in text,
       "the dump shows the tuned knobs and their effect", text[:600])
    return tuned


def test_restart(d, metas, warm):
    for meta in metas:
        kid = meta["kernel_id"]
        st, h, raw, _ = dump(d, kid, "graph,schedule,link")
        secs = dict(sections(raw.decode()) or []) if st == 200 else {}
        ok(st == 200 and h.get("x-kcsd-dump-object") == "same",
           "after a restart %s... dumps from the stored workload, same object" % kid[:12],
           "%d %s %s" % (st, h, raw[:400]))
        g = secs.get("graph", "")
        ok("; i0" in g and "input_0" not in g,
           "the graph section names tensors as the canonical form does", g)
        if meta is metas[0]:
            ok(secs.get("link") == warm["link"],
               "the link section is the one dumped before the restart", secs.get("link"))


def section_sizes(d, kid):
    st, _, raw, _ = dump(d, kid, ",".join(PASSES))
    text = raw.decode()
    starts = [m.start() for m in re.finditer(r"^== \S+ ==\n", text, re.M)]
    return {p: (starts[i], (starts + [len(raw)])[i + 1]) for i, p in enumerate(PASSES)}


def test_limit(opt, args, spans):
    # a limit inside the lower section (when graph and lower are asked for)
    g_len = spans["graph"][1] - spans["graph"][0]
    l_len = spans["lower"][1] - spans["lower"][0]
    limit = g_len + l_len // 2
    with Kcsd(opt.kcsd, extra_args=args + ["--max-dump-bytes", str(limit)]) as d:
        kid = compile_kernel(d)["kernel_id"]
        st, _, raw, j = dump(d, kid, "graph,lower")
        e = error(j)
        ok(st == 413 and e.get("code") == "too_large" and "lower" in e.get("message", "")
           and "graph" not in e.get("message", "") and "max_dump_bytes" in e.get("message", ""),
           "max_dump_bytes=%d: graph,lower is 413 naming lower" % limit, raw)
        st, _, raw, j = dump(d, kid, "optimize")
        ok(st == 413 and "optimize" in error(j).get("message", ""),
           "a first section over the limit is 413 naming it", raw)
        st, _, raw, _ = dump(d, kid, "graph")
        ok(st == 200 and len(raw) == g_len, "the graph section alone fits: 200", raw[:200])
        st, _, raw, _ = dump(d, kid, "graph,link")
        ok(st == 200, "graph,link fits: 200", raw[:200])


def test_cli(opt, d, tmp):
    path = os.path.join(tmp, "k.json")
    with open(path, "w") as f:
        json.dump(GRAPH, f)
    env = dict(os.environ, KCS_TOKEN=READ)
    p = subprocess.run([opt.kcs, "compile", path, "--target", "cpu", "--dump", "schedule",
                        "--server", d.url], capture_output=True, text=True, timeout=300, env=env)
    secs = sections(p.stdout)
    ok(p.returncode == 0 and secs and [s[0] for s in secs] == ["schedule"]
       and secs[0][1].startswith("template "),
       "kcs compile FILE --dump schedule prints the schedule section alone",
       "rc=%d\n%s\n%s" % (p.returncode, p.stdout[:400], p.stderr))
    m = re.search(r"kcs: kernel ([0-9a-f]{64})", p.stderr)
    st, _, raw, _ = dump(d, m.group(1) if m else "0" * 64, "schedule")
    ok(m and raw.decode() == p.stdout, "it is what the route answers for that kernel",
       p.stderr)
    p = subprocess.run([opt.kcs, "compile", path, "--target", "cpu", "--dump=graph,link",
                        "--server", d.url], capture_output=True, text=True, timeout=300, env=env)
    secs = sections(p.stdout)
    ok(p.returncode == 0 and secs and [s[0] for s in secs] == ["graph", "link"],
       "--dump=graph,link prints both", p.stdout[:400] + p.stderr)
    p = subprocess.run([opt.kcs, "compile", path, "--target", "cpu", "--dump", "bogus",
                        "--server", d.url], capture_output=True, text=True, timeout=300, env=env)
    ok(p.returncode == 1 and "400 bad_request at ?pass" in p.stderr and "bogus" in p.stderr
       and p.stdout == "", "--dump bogus: exit 1 with the server's error", p.stderr)
    p = subprocess.run([opt.kcs, "get", "0" * 64, "--dump", "graph", "--server", d.url],
                       capture_output=True, text=True, timeout=60, env=env)
    ok(p.returncode == 2, "--dump with get is a usage error", p.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--kcs")
    opt = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kcs-dump-")
    try:
        args = token_args(opt.kcsd, tmp)
        state = os.path.join(tmp, "state")
        with Kcsd(opt.kcsd, state_dir=state, extra_args=args) as d:
            meta = compile_kernel(d)
            warm = test_sections(d, meta)
            spans = section_sizes(d, meta["kernel_id"])
            test_auth(d, meta["kernel_id"])
            test_errors(d, meta["kernel_id"])
            tuned = test_tuned(d, meta)
        with Kcsd(opt.kcsd, state_dir=state, extra_args=args) as d:
            test_restart(d, [meta, tuned], warm)
            if opt.kcs:
                test_cli(opt, d, tmp)
            else:
                print("# SKIP cli: no --kcs")
        test_limit(opt, args, spans)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return T.done()


if __name__ == "__main__":
    sys.exit(main())
