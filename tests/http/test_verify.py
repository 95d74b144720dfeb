#!/usr/bin/python3
"""test_verify.py - POST /v1/verify and ms_hash, black box.

Starts kcsd (kcsd_harness.Kcsd) with --test-fault-injection 1 and a short
--verify-timeout-s, then: an inline elementwise graph verifies ok (two
seeds, serial and threaded); several corpus files verify ok (skipped when
../shared/corpus/akg is absent); compile errors come back as from
/v1/compile; a target the host cannot run is 422 invalid_target;
?inject=crash answers ok:false "crashed" and ?inject=hang "timeout" within
the limit, and the daemon still serves /healthz and compiles afterwards;
?inject=ref-crash (the reference interpreter's runner dies) is a 500 and
the daemon lives on; a graph with Argmax, CumSum and Pool2D verifies ok;
the compile response's ms_hash equals the number in a corpus file's name.
A second daemon without the flag refuses ?inject with 400. Prints TAP-ish
"ok N - name" lines and "N passed, M failed"; exits 1 on any failure.

usage: test_verify.py --kcsd path/to/kcsd
"""

import argparse
import http.client
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(os.path.dirname(REPO), "shared", "corpus", "akg")
TIMEOUT_S = 2
CORPUS_FILES = [
    "Fused_Sigmoid_10233858830828102717.info",
    "Fused_Add_GeLU_fusion_5957932447569341016.info",
    "Fused_Cast_BiasAdd_Tanh_fusion_12695887258459050405.info",
    "Fused_Maximum_fusion_3649461503901703557.info",
    "Fused_BiasAdd_ReLU_fusion_1020217553232031159.info",
    "Fused_Greater_Select_Sqrt_Select_Maximum_Reshape_RealDiv_split_14150358161139991050.info",
    "Fused_Add_Log_Mul_Exp_Mul_Mul_Mul_split_13431054805825781152.info",
]
# the ops-branch ops: reductions (a float16 softmax, a mixed-precision
# layernorm), OneHot (valid random indices) and ElemAny + Assign
CORPUS_OPS_FILES = [
    "Fused_Softmax_1264009767807426805.json",
    "layernorm.json",
    "Fused_Sub_Exp_ReduceSum_split_7326645054496025314.info",
    "Fused_OneHot_fusion_7714818107872836369.info",
    "Fused_Cast_Mul_IsInf_IsNan_LogicalOr_ElemAny_Assign_split_13807630631961538942.info",
]




def post(d, path, body, timeout=120):
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=timeout)
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


def get(d, path):
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def tensor(name, dt, shape, value=None):
    t = {"data_type": dt, "format": "DefaultFormat", "shape": shape, "tensor_name": name}
    if value is not None:
        t["value"] = value
    return t


def op(name, ins, out):
    return {"attr": None, "name": name, "input_desc": [[t] for t in ins], "output_desc": [out]}


def inline_graph():
    """(a * b + 1) / sqrt(b), Greater(a, 0) -> Cast int32, over broadcasts."""
    a = tensor("a", "float32", [6, 17])
    b = tensor("b", "float32", [17])
    m = tensor("m", "float32", [6, 17])
    s = tensor("s", "float32", [6, 17])
    q = tensor("q", "float32", [17])
    o = tensor("o", "float32", [6, 17])
    g = tensor("g", "bool", [6, 17])
    gi = tensor("gi", "int32", [6, 17])
    return {
        "composite": True, "op": "Fused_verify_inline", "process": "cpu", "version": 1,
        "input_desc": [[a], [b]],
        "output_desc": [o, gi],
        "op_desc": [
            op("Mul", [a, b], m),
            op("Add", [m, tensor("one", "float32", [1], 1.0)], s),
            op("Sqrt", [b], q),
            op("RealDiv", [s, q], o),
            op("Greater", [a, tensor("zero", "float32", [1], 0.0)], g),
            op("Cast", [g], gi),
        ],
    }


def still_serving(d, label):
    st, _ = get(d, "/healthz")
    T.ok(st == 200, "after %s: /healthz answers 200" % label, st)
    st, j, raw = post(d, "/v1/compile?target=cpu", inline_graph())
    T.ok(st == 200 and j and j.get("kernel_id"), "after %s: a compile still works" % label,
         raw[:300])


def check_inline(d):
    g = inline_graph()
    for q in ("?seed=1", "?seed=2&threads=0", "?target=cpu&seed=3&threads=4"):
        st, j, raw = post(d, "/v1/verify" + q, g)
        T.ok(st == 200 and j and j.get("ok") is True and j.get("failure") is None
             and len(j.get("outputs", [])) == 2,
             "inline graph verifies ok (%s)" % q, raw[:600])
        if j and j.get("outputs"):
            o = j["outputs"]
            T.ok(o[0]["index"] == 2 and o[1]["index"] == 3 and o[1]["max_abs_err"] == 0
                 and o[0]["max_rel_err"] <= 1e-4 and j.get("seed") is not None
                 and len(j.get("kernel_id", "")) == 64,
                 "verify response fields (%s)" % q, raw[:600])


def check_errors(d):
    st, j, raw = post(d, "/v1/verify", "{not json")
    T.ok(st == 400 and j and j["error"]["code"] == "malformed_json",
         "bad JSON: 400 as from /v1/compile", raw[:300])
    bad = inline_graph()
    bad["op_desc"][0]["name"] = "NoSuchOp"
    st, j, raw = post(d, "/v1/verify", bad)
    T.ok(st == 422 and j and j["error"]["code"] == "unsupported_op",
         "unknown op: 422 unsupported_op", raw[:300])
    st, j, raw = post(d, "/v1/verify?target=aarch64", inline_graph())
    T.ok(st == 422 and j and j["error"]["code"] == "invalid_target",
         "a target this host cannot run: 422 invalid_target", raw[:300])
    st, j, raw = post(d, "/v1/verify?seed=-4", inline_graph())
    T.ok(st == 400, "a bad seed: 400", raw[:300])
    st, j, raw = post(d, "/v1/verify?inject=explode", inline_graph())
    T.ok(st == 400, "an unknown ?inject: 400", raw[:300])


def check_faults(d):
    g = inline_graph()
    t0 = time.monotonic()
    st, j, raw = post(d, "/v1/verify?inject=crash", g)
    T.ok(st == 200 and j and j.get("ok") is False and j.get("failure") == "crashed",
         "inject=crash: ok false, failure crashed", raw[:600])
    still_serving(d, "a crashing kernel")
    t0 = time.monotonic()
    st, j, raw = post(d, "/v1/verify?inject=hang", g)
    dt = time.monotonic() - t0
    T.ok(st == 200 and j and j.get("ok") is False and j.get("failure") == "timeout",
         "inject=hang: ok false, failure timeout", raw[:600])
    T.ok(dt < TIMEOUT_S + 15, "inject=hang answered within the limit (%.1f s)" % dt)
    still_serving(d, "a hanging kernel")
    # the reference interpreter runs in a second runner, not in the daemon:
    # its crash is this request's 500, and the daemon lives on
    pid_before = d.proc.pid if hasattr(d, "proc") else None
    st, j, raw = post(d, "/v1/verify?inject=ref-crash", g)
    T.ok(st == 500 and j and j["error"]["code"] == "internal"
         and "reference interpreter" in j["error"]["message"]
         and "signal" in j["error"]["message"],
         "inject=ref-crash: 500 internal, the reference runner died", raw[:600])
    if pid_before is not None:
        T.ok(d.proc.poll() is None, "the daemon survived the reference runner's crash")
    still_serving(d, "a crashing reference interpreter")
    st, j, raw = post(d, "/v1/verify?seed=4", g)
    T.ok(st == 200 and j and j.get("ok") is True,
         "verify works after a reference crash", raw[:600])


def ops_b_graph():
    """Argmax over rows of Exp(x), CumSum (reverse, exclusive) and an
    average Pool2D with pads: the reference comes from the runner."""
    x = tensor("x", "float32", [2, 6, 7, 3])
    e = tensor("e", "float32", [2, 6, 7, 3])
    am = tensor("am", "int32", [2, 7, 3])
    cs = tensor("cs", "float32", [2, 6, 7, 3])
    pl = tensor("pl", "float32", [2, 3, 4, 3])
    attr = lambda **kw: [{"name": k, "value": v} for k, v in kw.items()]
    o1 = op("Exp", [x], e)
    o2 = op("Argmax", [e], am)
    o2["attr"] = attr(axis=1)
    o3 = op("CumSum", [x], cs)
    o3["attr"] = attr(axis=-2, exclusive=True, reverse=True)
    o4 = op("Pool2D", [x], pl)
    o4["attr"] = attr(pool_type="avg", data_layout="NHWC", kernel_size=[3, 3],
                      strides=[2, 2], pad=[1, 1, 1, 1], round_mode=0)
    return {
        "composite": True, "op": "Fused_verify_ops_b", "process": "cpu", "version": 1,
        "input_desc": [[x]], "output_desc": [am, cs, pl], "op_desc": [o1, o2, o3, o4],
    }


def check_ops_b(d):
    st, j, raw = post(d, "/v1/verify?seed=9", ops_b_graph())
    T.ok(st == 200 and j and j.get("ok") is True and len(j.get("outputs", [])) == 3,
         "Argmax, CumSum and Pool2D verify ok against the runner's reference", raw[:800])


def check_corpus(d):
    if not os.path.isdir(CORPUS):
        T.skip("corpus files verify ok", "%s is absent" % CORPUS)
        T.skip("ms_hash of a corpus file", "%s is absent" % CORPUS)
        return
    passed = 0
    for name in CORPUS_FILES:
        path = os.path.join(CORPUS, name)
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            body = f.read()
        st, j, raw = post(d, "/v1/verify?seed=11", body)
        good = st == 200 and j and j.get("ok") is True
        passed += bool(good)
        T.ok(good, "corpus %s verifies ok" % name[:60], raw[:600])
    T.ok(passed >= 5, "at least 5 corpus files verify ok (%d)" % passed)
    for name in CORPUS_OPS_FILES:
        path = os.path.join(CORPUS, name)
        if not os.path.exists(path):
            T.skip("corpus %s verifies ok" % name[:60], "absent")
            continue
        with open(path, "rb") as f:
            body = f.read()
        t0 = time.time()
        st, j, raw = post(d, "/v1/verify?seed=5", body)
        good = st == 200 and j and j.get("ok") is True
        T.ok(good, "corpus %s verifies ok (%.1f s)" % (name[:60], time.time() - t0), raw[:600])
    name = CORPUS_FILES[0]
    with open(os.path.join(CORPUS, name), "rb") as f:
        body = f.read()
    st, j, raw = post(d, "/v1/compile?target=cpu", body)
    want = name.rsplit("_", 1)[1].split(".")[0]
    T.ok(st == 200 and j and j.get("ms_hash") == want,
         "compile response ms_hash equals the name's hash", raw[-400:])
    st, j2, raw = post(d, "/v1/compile?target=cpu", body)
    T.ok(st == 200 and j2 and j2.get("cache") == "hit" and j2.get("ms_hash") == want,
         "ms_hash also on a cache hit", raw[-400:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    args = ap.parse_args()
    with Kcsd(args.kcsd, extra_args=["--test-fault-injection", "1", "--verify-timeout-s",
                                     str(TIMEOUT_S)]) as d:
        check_inline(d)
        check_errors(d)
        check_faults(d)
        check_ops_b(d)
        check_corpus(d)
    with Kcsd(args.kcsd) as d:
        st, j, raw = post(d, "/v1/verify?inject=crash", inline_graph())
        T.ok(st == 400 and j and j["error"]["code"] == "bad_request",
             "without --test-fault-injection, ?inject is refused with 400", raw[:300])
    return T.done()


if __name__ == "__main__":
    sys.exit(main())
