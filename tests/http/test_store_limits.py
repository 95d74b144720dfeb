#!/usr/bin/python3
"""test_store_limits.py - the store's size limits, black-box over HTTP.

One kcsd with a 16 MiB map (cache_map_bytes; cache_max_bytes defaults to
half of it) and max_ops raised so that one graph can pass the canonical cap:

1. workloads: 20 distinct 3000-op chains (t_i = Add(t_{i-1}, c_i) on [4,4],
   about 240 KB of canonical text and 2.8 MB stored each), compiled one at
   a time; schedules PUT for the last two; then POST /v1/admin/evict to 1
   byte: every kernel is gone, and with it every workload record but the
   two with a schedule (GET /v1/workloads/{key} 404 / 200, /v1/stats);
2. full: pinned data (imported schedules with large synthetic workloads,
   which eviction may not remove) until an import is refused as full; then
   distinct compiles until kcsd_kernels_not_stored_total moves: each still
   answers 200 with its kernel, "cache":"miss-not-stored"; every record
   stored before reads back, also after a restart;
3. a 14000-op chain (canonical form over 1 MiB) is refused with 413
   too_large naming max_canonical_bytes.

data.mdb is checked against cache_map_bytes after every step, and the
stopped store is reopened with the audit tool (tests/cache_audit.c): no
kernel or schedule without its workload, no workload with neither. Figures
(time per compile, bytes in use, file size) are printed as TAP comments.

usage: test_store_limits.py --kcsd path/to/kcsd --audit path/to/cache_audit
"""

import argparse
import base64
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402
from test_api import metric, request  # noqa: E402

MAP_BYTES = 16 << 20
CHAINS = 20
CHAIN_OPS = 3000


def note(msg):
    print("# " + msg)
    sys.stdout.flush()


def tensor(name, shape, formal=None, value=None):
    t = {"data_type": "float32", "format": "DefaultFormat", "shape": shape, "tensor_name": name}
    if formal:
        t["name"] = formal
    if value is not None:
        t["value"] = value
    return t


def chain(n, seed):
    """t_k = Add(t_{k-1}, c_k) over [4,4]; the constants make each seed a
    distinct workload. Linear in n for the compiler."""
    s, ops, prev = [4, 4], [], "input_0"
    for k in range(n):
        out = "output_0_0" if k == n - 1 else "t_%d" % k
        ops.append({"name": "Add", "attr": None, "impl_path": "",
                    "input_desc": [[tensor(prev, s, formal="x")],
                                   [tensor("c_%d" % k, [1], formal="y",
                                           value=seed * 10000.0 + k)]],
                    "output_desc": [tensor(out, s, formal="output")]})
        prev = out
    return {"composite": True, "composite_graph": "chain.%d" % seed, "id": 0,
            "op": "Fused_Add_chain_%d" % n, "platform": "AKG", "process": "cpu", "version": 1,
            "input_desc": [[tensor("input_0", s)]],
            "output_desc": [tensor("output_0_0", s)], "op_desc": ops}


def compile_(d, g):
    """(status, headers, json or None, seconds)."""
    t0 = time.monotonic()
    st, h, data = request(d, "POST", "/v1/compile?target=cpu", g)
    dt = time.monotonic() - t0
    try:
        j = json.loads(data)
    except ValueError:
        j = None
    return st, h, j, dt


def object_ok(j):
    obj = base64.b64decode(j.get("object_base64", ""))
    return len(obj) > 0 and hashlib.sha256(obj).hexdigest() == j.get("object_sha256")


def stats(d):
    st, _, data = request(d, "GET", "/v1/stats")
    return json.loads(data)["cache"] if st == 200 else {}


def file_size(state_dir):
    try:
        return os.path.getsize(os.path.join(state_dir, "data.mdb"))
    except OSError:
        return -1


class FileWatch:
    """data.mdb's size after every step: never above cache_map_bytes."""

    def __init__(self, state_dir):
        self.state_dir = state_dir
        self.max = 0
        self.over = []

    def step(self, what):
        n = file_size(self.state_dir)
        self.max = max(self.max, n)
        if n > MAP_BYTES:
            self.over.append((what, n))
        return n


def audit(tool, state_dir):
    p = subprocess.run([tool, state_dir, str(MAP_BYTES)], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        return None, p.stderr
    return json.loads(p.stdout), p.stderr


def audit_clean(a):
    return (a is not None and a["unreferenced_workloads"] == 0
            and a["kernels_without_workload"] == 0 and a["schedules_without_workload"] == 0)


def check_workloads(d, watch):
    """20 chains, schedules on the last two, evict to 1 byte."""
    results = [None] * CHAINS
    lock = threading.Lock()
    nxt = [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= CHAINS:
                return
            results[i] = compile_(d, chain(CHAIN_OPS, 1 + i))
            with lock:
                watch.step("compile %d" % i)

    # one at a time: two concurrent compiles of this size take about 2.5x
    # as long each on a two-core machine, which is no faster in all
    th = [threading.Thread(target=worker) for _ in range(1)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    good = [r for r in results if r and r[0] == 200 and r[2] and object_ok(r[2])]
    T.ok(len(good) == CHAINS, "workloads: %d distinct %d-op chains compiled (200, object "
         "matches its hash)" % (CHAINS, CHAIN_OPS),
         [(r[0], r[2] and r[2].get("error")) for r in results if r and r[0] != 200])
    if len(good) != CHAINS:
        return None
    ms = sorted(r[2]["compile_ms"] for r in results)
    walls = sorted(r[3] for r in results)
    note("per %d-op compile: compile_ms min %.0f median %.0f max %.0f; request wall "
         "median %.2f s (one at a time); canonical ~%d bytes" % (
             CHAIN_OPS, ms[0], ms[len(ms) // 2], ms[-1], walls[len(walls) // 2],
             len(request(d, "GET", "/v1/workloads/%s" % results[-1][2]["workload_key"])[2])))
    keys = [r[2]["workload_key"] for r in results]
    T.ok(all(r[2]["cache"] == "miss" for r in results) and len(set(keys)) == CHAINS,
         "workloads: every chain is its own workload and was stored (cache miss)",
         [r[2]["cache"] for r in results])
    # schedules on the two compiled last (their workloads are still stored)
    pinned = []
    for r in results[-2:]:
        rec = dict(r[2]["schedule"])
        rec.pop("source", None)
        st, _, data = request(d, "PUT", "/v1/schedules/%s?target=cpu" % r[2]["workload_key"],
                              rec)
        if st in (200, 201):
            pinned.append(r[2]["workload_key"])
        else:
            note("PUT schedule: %d %s" % (st, data[:200]))
    T.ok(len(pinned) == 2, "workloads: schedules stored for the last two", pinned)
    s0 = stats(d)
    watch.step("schedules")
    st, _, data = request(d, "POST", "/v1/admin/evict", {"target_bytes": 1})
    ev = json.loads(data) if st == 200 else {}
    size = watch.step("evict")
    s1 = stats(d)
    gone = [k for k in keys if request(d, "GET", "/v1/workloads/%s" % k)[0] == 404]
    kept = [k for k in keys if k not in gone]
    note("before evict: %d bytes in use, %d kernels, %d workloads; after: %d bytes in use "
         "(evict says %d -> %d), %d kernels, %d workloads; data.mdb %d bytes (cache_map_bytes "
         "%d)" % (s0.get("bytes", -1), s0.get("kernels", -1), s0.get("workloads", -1),
                  s1.get("bytes", -1), ev.get("bytes_before", -1), ev.get("bytes_after", -1),
                  s1.get("kernels", -1), s1.get("workloads", -1), size, MAP_BYTES))
    T.ok(st == 200 and s1.get("kernels") == 0 and s1.get("artifacts") == 0,
         "workloads: evict to 1 byte removes every kernel", (st, ev, s1))
    T.ok(sorted(kept) == sorted(pinned) and s1.get("workloads") == 2
         and s1.get("schedules") == 2,
         "workloads: only the two with a schedule are left (the others GET 404)",
         (len(gone), kept, pinned, s1))
    for k in pinned:
        st, _, data = request(d, "GET", "/v1/schedules/%s" % k)
        wst, _, wl = request(d, "GET", "/v1/workloads/%s" % k)
        T.ok(st == 200 and json.loads(data)["records"] and wst == 200
             and hashlib.sha256(wl).hexdigest() == k,
             "workloads: a scheduled workload is kept whole with its schedule", (st, wst))
    T.ok(s1.get("evicted_workloads", 0) >= CHAINS - 2,
         "workloads: /v1/stats counts the workload records evicted", s1)
    # the evicted ones compile again (and are stored again)
    st, _, j, _ = compile_(d, chain(CHAIN_OPS, 1))
    T.ok(st == 200 and j and j["cache"] == "miss" and object_ok(j)
         and request(d, "GET", "/v1/workloads/%s" % j["workload_key"])[0] == 200,
         "workloads: an evicted workload compiles and is stored again", (st, j and j.get("cache")))
    watch.step("recompile")
    return pinned


def pinned_line(i, size):
    """An import line whose synthetic workload is `size` bytes: a schedule
    and its workload, which eviction may not remove."""
    text = '{"kcs_workload":1,"fill":%d,"pad":"%s"}' % (i, "x" * size)
    wk = hashlib.sha256(text.encode()).hexdigest()
    rec = {"format": "kcs-schedule-v1", "workload_key": wk, "target": "cpu",
           "template": "injective", "knobs": {"unroll": 2}, "measured": None,
           "provenance": {"by": "t", "at": "2026-11-30T00:00:00Z", "kcsd_version": "t"}}
    return wk, '{"workload_key":"%s","workload":%s,"record":%s}\n' % (wk, text, json.dumps(rec))


def check_full(d, watch, pinned):
    """Pin data until an import is refused as full; compiles still answer."""
    stored = {}
    refused = None
    # a workload over max_canonical_bytes is refused on import as on compile
    _, big = pinned_line(999, 1 << 20)
    st, _, data = request(d, "POST", "/v1/import", big, ctype="application/x-ndjson")
    rj = json.loads(data) if st == 200 else {}
    T.ok(st == 200 and rj.get("imported") == 0 and rj.get("rejected")
         and rj["rejected"][0]["error"]["code"] == "too_large"
         and rj["rejected"][0]["error"]["where"] == "/workload",
         "full: an imported workload over max_canonical_bytes is rejected (too_large)",
         (st, data[:300]))
    for i in range(40):
        wk, line = pinned_line(i, (1 << 20) - 64)
        st, _, data = request(d, "POST", "/v1/import", line, ctype="application/x-ndjson")
        watch.step("import %d" % i)
        if st == 200 and json.loads(data).get("imported") == 1:
            stored[wk] = line
            continue
        refused = (st, data[:300])
        break
    s = stats(d)
    note("full: %d pinned 1 MiB workloads stored, then %s; %d bytes in use, data.mdb %d "
         "bytes" % (len(stored), refused, s.get("bytes", -1), file_size(watch.state_dir)))
    T.ok(refused is not None and refused[0] == 500 and b"full" in refused[1]
         and len(stored) >= 8,
         "full: an import that does not fit is refused as full (500 cache_error), not grown into",
         (len(stored), refused))
    before = metric(d, "kcsd_kernels_not_stored_total")
    answered = []
    for i in range(4):
        st, h, j, dt = compile_(d, chain(CHAIN_OPS, 500 + i))
        watch.step("full compile %d" % i)
        answered.append((st, j and j.get("cache"), h.get("x-kcsd-cache"), j and object_ok(j)))
        if metric(d, "kcsd_kernels_not_stored_total") != before:
            break
    after = metric(d, "kcsd_kernels_not_stored_total")
    last = answered[-1]
    T.ok(after is not None and before is not None and after == before + 1
         and last == (200, "miss-not-stored", "miss-not-stored", True),
         "full: a compile still answers 200 with its kernel, marked miss-not-stored, and "
         "kcsd_kernels_not_stored_total counts it", (before, after, answered))
    s = stats(d)
    T.ok(s.get("not_stored") == after and s.get("full_writes", 0) >= 1,
         "full: /v1/stats has not_stored and full_writes", s)
    T.ok(metric(d, "kcsd_cache_full_writes_total") == s.get("full_writes"),
         "full: kcsd_cache_full_writes_total matches", s)
    # evicting on a full store frees what may go and keeps what may not
    st, _, data = request(d, "POST", "/v1/admin/evict", {"target_bytes": 1})
    T.ok(st == 200, "full: evict on a full store answers", (st, data[:200]))
    watch.step("full evict")
    return stored


def records_intact(d, stored, pinned):
    bad = []
    for wk, line in stored.items():
        st, _, data = request(d, "GET", "/v1/workloads/%s" % wk)
        sst, _, sdata = request(d, "GET", "/v1/schedules/%s" % wk)
        if st != 200 or hashlib.sha256(data).hexdigest() != wk or sst != 200 \
                or not json.loads(sdata)["records"]:
            bad.append((wk[:12], st, sst))
    for wk in pinned:
        if request(d, "GET", "/v1/schedules/%s" % wk)[0] != 200:
            bad.append((wk[:12], "schedule"))
    return bad


def check_too_large(d):
    g = chain(14000, 9)
    st, _, j, _ = compile_(d, g)
    e = (j or {}).get("error", {})
    T.ok(st == 413 and e.get("code") == "too_large" and e.get("where") == ""
         and "max_canonical_bytes" in e.get("message", "")
         and "canonical workload is" in e.get("message", ""),
         "too large: a canonical workload over 1 MiB is 413 too_large naming "
         "max_canonical_bytes", (st, e))
    note("too large: %s" % e.get("message"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--audit", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kcsd-store-")
    state_dir = os.path.join(tmp, "state")
    watch = FileWatch(state_dir)
    # the chains' bodies (1.3 MB for 3000 ops; 6 MB and 742K JSON tokens
    # for the 14000-op one) must reach the store's limits, past the
    # request limits they would otherwise meet first
    extra = ["--cache-map-bytes", str(MAP_BYTES), "--max-ops", "16384",
             "--max-body-bytes", "16M", "--max-json-tokens", "4194304"]
    t0 = time.monotonic()
    try:
        with Kcsd(args.kcsd, state_dir=state_dir, extra_args=extra) as d:
            check_too_large(d)
            pinned = check_workloads(d, watch)
            stored = check_full(d, watch, pinned or []) if pinned else {}
            if pinned:
                bad = records_intact(d, stored, pinned)
                T.ok(not bad, "full: every record stored before reads back whole", bad)
        watch.step("stop")
        if pinned:
            a, err = audit(args.audit, state_dir)
            note("audit: %s" % a)
            T.ok(audit_clean(a) and a["schedules"] == len(stored) + 2
                 and a["workloads"] == len(stored) + 2,
                 "audit: the reopened store passes its check, its references agree",
                 (a, err))
            T.ok(not glob.glob(os.path.join(state_dir, "data.mdb.damaged-*")),
                 "audit: nothing was moved aside as damaged")
            with Kcsd(args.kcsd, state_dir=state_dir, extra_args=extra) as d2:
                bad = records_intact(d2, stored, pinned)
                T.ok(not bad, "restart: every record still reads back", bad)
                st, _, j, _ = compile_(d2, chain(300, 900))
                T.ok(st == 200 and j and object_ok(j),
                     "restart: a compile on the full store answers 200", (st, j and j.get("cache")))
            watch.step("stop 2")
        T.ok(not watch.over, "data.mdb never grew past cache_map_bytes (%d); largest seen %d"
             % (MAP_BYTES, watch.max), watch.over)
    except Exception as e:  # noqa: BLE001
        T.ok(False, "harness: %r" % (e,), str(e))
    note("total %.1f s" % (time.monotonic() - t0))
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(T.done(plan=True))


if __name__ == "__main__":
    main()
