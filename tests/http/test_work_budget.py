#!/usr/bin/python3
"""test_work_budget.py - the work budget through the service.

Starts kcsd (kcsd_harness.Kcsd, protected mode: loopback, no tokens) and
checks:
  default    a Fibonacci chain of 60 Adds over [64,64] (t_i = t_{i-2} +
             t_{i-1}, a DAG with 2^60 paths) compiles, and its dump ends
             each section with a "; work:" line whose node counts stay
             within 16 x the graph's values.
  nodes      a daemon started with --max-work-nodes 200 answers the same
             chain 422 work_budget_exceeded, where and message naming the
             pass and "max_work_nodes 200"; a 10-op chain still compiles.
  insns      --max-work-insns 100: the chain is 422 with where "emit-llvm"
             and the message naming max_work_insns.
Prints "ok N - name" / "not ok N - name" and "N passed, M failed"; exits 1
on any failure.

usage: test_work_budget.py --kcsd path/to/kcsd
"""

import argparse
import http.client
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402

ok = T.ok
VISITS_PER_VALUE = 16


def desc(name, formal=None):
    d = {"data_type": "float32", "format": "DefaultFormat", "shape": [64, 64],
         "tensor_name": name}
    if formal:
        d["name"] = formal
    return d


def chain(n, op="Add"):
    """t_i = op(t_{i-2}, t_{i-1}) for i = 2 .. n+1; the output t_{n+1}."""
    ops = [{"name": op, "attr": None, "impl_path": "",
            "input_desc": [[desc("t%d" % (i - 2), "input_0")],
                           [desc("t%d" % (i - 1), "input_1")]],
            "output_desc": [desc("t%d" % i, "output_0")]} for i in range(2, n + 2)]
    return {"composite": True, "op": "Fused_%s_chain_%d" % (op, n), "process": "cpu",
            "platform": "AKG", "composite_graph": "w", "id": 0,
            "input_desc": [[desc("t0")], [desc("t1")]], "op_desc": ops,
            "output_desc": [desc("t%d" % (n + 1))]}


def req(d, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=300)
    h = {}
    if body is not None:
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        j = json.loads(raw)
    except ValueError:
        j = None
    return r.status, raw, j


def compile_(d, body):
    return req(d, "POST", "/v1/compile?target=cpu", body)


def refused(st, j, where, limit, what):
    e = (j or {}).get("error", {})
    ok(st == 422 and e.get("code") == "work_budget_exceeded",
       what + ": 422 work_budget_exceeded", "%s %s" % (st, j))
    ok(e.get("where") == where and limit in e.get("message", "")
       and e.get("message", "").startswith("work budget: "),
       what + ": where %s, message names %s" % (where, limit), json.dumps(e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    a = ap.parse_args()

    with Kcsd(a.kcsd) as d:
        st, raw, j = compile_(d, chain(60))
        ok(st == 200, "default: the 60-op chain compiles", raw[:300])
        kid = (j or {}).get("kernel_id", "")
        st, raw, _ = req(d, "GET", "/v1/kernels/%s/dump?pass=graph,lower,schedule,emit-llvm"
                         % kid)
        text = raw.decode("utf-8", "replace")
        lines = [ln for ln in text.splitlines() if ln.startswith("; work:")]
        ok(st == 200 and len(lines) == 4, "default: one work line per section", text[-600:])
        bound = VISITS_PER_VALUE * 62
        counts = {}
        for ln in lines:
            for k, v in re.findall(r"(\S+)=(\d+)", ln):
                if k not in ("stages", "insns"):
                    counts[k] = int(v)
        want = {"parse", "plan", "lower", "collapse", "verify-lower", "schedule",
                "verify-schedule", "emit-llvm"}
        ok(want <= set(counts) and all(0 < counts[k] <= bound for k in want),
           "default: each pass visits at most %d nodes" % bound, json.dumps(counts))

    with Kcsd(a.kcsd, extra_args=["--max-work-nodes", "200"]) as d:
        st, _, j = compile_(d, chain(60))
        refused(st, j, "plan", "max_work_nodes 200", "nodes")
        st, raw, _ = compile_(d, chain(10))
        ok(st == 200, "nodes: a 10-op chain fits the budget", raw[:300])

    with Kcsd(a.kcsd, extra_args=["--max-work-insns", "100"]) as d:
        st, _, j = compile_(d, chain(60))
        refused(st, j, "emit-llvm", "max_work_insns 100", "insns")

    return T.done()


if __name__ == "__main__":
    sys.exit(main())
