#!/usr/bin/python3
"""test_verify_load.py - POST /v1/verify under load: the verify slots, the
?threads clamp and the daemon's memory, black box.

gate: kcsd --verify-concurrency 1 --verify-queue 1 --verify-wait-s 2 with
  fault injection. While an ?inject=hang verify holds the one slot, a
  second verify waits and is answered 503 overloaded ("no verify slot
  within 2 s") and, while it waits, a third is refused at once (queue
  full); both carry Retry-After: verify_timeout_s, /metrics counts two
  refusals and shows the slot and the waiter. Afterwards a verify works
  again. ?threads=64 is clamped to the CPUs online and the
  reply's "threads" says so; ?threads=65 is still 400.
load: with the default verify_concurrency (1), three concurrent verifies
  of a float32 Add of two 8 Mi-element inputs (128 MiB of arguments as
  verify counts them: inputs plus twice the output) all answer 200 with a
  passing comparison; kcsd_verifies_in_flight_max is 1; the daemon's
  VmHWM rises by at most 1.1 x 128 MiB over the three (measured after a
  /v1/compile of the same graph, so that LLVM's own peak is in the
  baseline); the figure is printed.
Prints "ok N - name" / "not ok N - name"; exits 1 on any failure.

usage: test_verify_load.py --kcsd path/to/kcsd [--only gate|load]
"""

import argparse
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402
from test_api import jrequest, metric  # noqa: E402
from test_verify import get, inline_graph, post  # noqa: E402

BIG_N = 8 << 20  # elements: 2 x 32 MiB inputs + 2 x 32 MiB output = 128 MiB
BIG_ARG_BYTES = 4 * BIG_N * 4
HANG_S = 8


def cpus():
    """The CPUs of this process's affinity mask, as kcsd counts them."""
    return len(os.sched_getaffinity(0))


def wait_metric(d, name, want, limit_s=60):
    """Polls /metrics until name == want; True if it got there."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if metric(d, name) == want:
            return True
        time.sleep(0.02)
    return False


def post_h(d, path, body):
    """post() with the response headers."""
    st, headers, j, raw = jrequest(d, "POST", path, body)
    return st, j, raw.decode("utf-8", "replace"), headers


def in_thread(fn, *args):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", fn(*args)))
    t.start()
    return t, box


def check_gate(binary):
    args = ["--test-fault-injection", "1", "--verify-concurrency", "1", "--verify-queue", "1",
            "--verify-wait-s", "2", "--verify-timeout-s", str(HANG_S), "--workers", "4"]
    with Kcsd(binary, extra_args=args) as d:
        g = inline_graph()
        st, j, raw = post(d, "/v1/compile?target=cpu", g)
        T.ok(st == 200, "gate: the graph compiles", raw[:300])
        ta, a = in_thread(post_h, d, "/v1/verify?inject=hang", g)
        T.ok(wait_metric(d, "kcsd_verifies_in_flight", 1),
             "gate: the hanging verify holds the one slot")
        tb, b = in_thread(post_h, d, "/v1/verify?seed=1", g)
        T.ok(wait_metric(d, "kcsd_verifies_waiting", 1), "gate: a second verify waits")
        st, j, raw, h = post_h(d, "/v1/verify?seed=2", g)
        T.ok(st == 503 and j and j["error"]["code"] == "overloaded"
             and "busy" in j["error"]["message"] and h.get("retry-after") == str(HANG_S),
             "gate: a third verify, queue full: 503 overloaded at once, Retry-After", (raw, h))
        tb.join()
        st, j, raw, h = b["r"]
        T.ok(st == 503 and j and j["error"]["code"] == "overloaded"
             and "within 2 s" in j["error"]["message"] and h.get("retry-after") == str(HANG_S),
             "gate: the waiter gets no slot within verify_wait_s: 503, Retry-After", (raw, h))
        T.ok(metric(d, "kcsd_verify_refusals_total") == 2
             and metric(d, "kcsd_verifies_waiting") == 0
             and metric(d, "kcsd_verify_slots") == 1,
             "gate: /metrics counts two refusals, nobody waits now")
        ta.join()
        st, j, raw, h = a["r"]
        T.ok(st == 200 and j and j.get("failure") == "timeout",
             "gate: the hanging verify ends in failure timeout", raw[:400])
        st, j, raw = post(d, "/v1/verify?seed=3&threads=64", g)
        T.ok(st == 200 and j and j.get("ok") is True and j.get("threads") == min(64, cpus()),
             "gate: a verify after the hang works; threads=64 runs as %d (the CPUs online)"
             % min(64, cpus()), raw[:400])
        st, j, raw = post(d, "/v1/verify?seed=3&threads=1", g)
        T.ok(st == 200 and j and j.get("threads") == 1, "gate: threads=1 stays 1", raw[:400])
        st, j, raw = post(d, "/v1/verify?threads=65", g)
        T.ok(st == 400 and j and j["error"]["where"] == "?threads",
             "gate: threads=65 is 400 naming ?threads", raw[:300])
        T.ok(metric(d, "kcsd_verifies_in_flight") == 0
             and metric(d, "kcsd_verifies_in_flight_max") == 1,
             "gate: no verify in flight now; the high-water mark is 1")
        st, body = get(d, "/v1/stats")
        v = json.loads(body).get("verify", {}) if st == 200 else {}
        T.ok(v.get("in_flight_max") == 1 and v.get("refusals") == 2 and v.get("slots") == 1,
             "gate: /v1/stats has the same verify numbers", body[:600])


def big_add():
    t = lambda n: {"data_type": "float32", "format": "DefaultFormat", "shape": [BIG_N],
                   "tensor_name": n}
    a, b, o = t("a"), t("b"), t("o")
    return {"composite": True, "op": "Fused_Add_verify_load", "process": "cpu", "version": 1,
            "input_desc": [[a], [b]], "output_desc": [o],
            "op_desc": [{"attr": None, "name": "Add", "input_desc": [[a], [b]],
                         "output_desc": [o]}]}


def vm_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def check_load(binary):
    # every request reaches the gate at once (4 workers); nobody gives up
    args = ["--workers", "4", "--verify-wait-s", "600", "--verify-timeout-s", "60"]
    with Kcsd(binary, extra_args=args) as d:
        g = big_add()
        st, j, raw = post(d, "/v1/compile?target=cpu", g, timeout=300)
        T.ok(st == 200, "load: the 128 MiB Add compiles", raw[:300])
        before = vm_hwm_kib(d.proc.pid)
        res = {}

        def one(i):
            q = "/v1/verify?seed=%d%s" % (i, "&threads=64" if i == 0 else "")
            res[i] = post(d, q, g, timeout=900)

        ths = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        after = vm_hwm_kib(d.proc.pid)
        for i in range(3):
            st, j, raw = res[i]
            outs = (j or {}).get("outputs") or [{}]
            T.ok(st == 200 and j.get("ok") is True and j.get("failure") is None
                 and outs[0].get("mismatches") == 0,
                 "load: verify %d of three concurrent 128 MiB Adds passes" % i, raw[:500])
        st, j, raw = res[0]
        T.ok(j and j.get("threads") == min(64, cpus()),
             "load: threads=64 runs as %d (the CPUs online)" % min(64, cpus()), raw[:500])
        T.ok(metric(d, "kcsd_verifies_in_flight_max") == 1
             and metric(d, "kcsd_verify_refusals_total") == 0,
             "load: they ran one at a time (kcsd_verifies_in_flight_max 1), none refused")
        rise = (after - before) * 1024
        print("# VmHWM %d KiB -> %d KiB: rise %.1f MiB = %.3f x the %d MiB of arguments"
              % (before, after, rise / 2**20, rise / BIG_ARG_BYTES, BIG_ARG_BYTES >> 20))
        T.ok(rise <= 1.1 * BIG_ARG_BYTES,
             "load: the daemon's VmHWM rise is at most 1.1 x the arguments (%.3f x)"
             % (rise / BIG_ARG_BYTES))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--only", choices=["gate", "load"])
    args = ap.parse_args()
    if args.only != "load":
        check_gate(args.kcsd)
    if args.only != "gate":
        check_load(args.kcsd)
    return T.done()


if __name__ == "__main__":
    sys.exit(main())
