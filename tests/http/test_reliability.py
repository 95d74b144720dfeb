#!/usr/bin/python3
"""test_reliability.py - kill -9 and damaged-state rounds against kcsd.

What docs/durability.md promises, checked black-box on 127.0.0.1:

  kill9     N rounds on one state dir: compile and schedule-PUT load from a
            few threads, kcsd killed with SIGKILL at a random moment, then
            restarted. Each restart must open cleanly; every kernel whose
            compile was answered must be served with bytes that hash to its
            object_sha256; every acknowledged (2xx) schedule PUT must be the
            stored record (or the one PUT that was in flight on that
            workload when kcsd died).
  truncate  N rounds: data.mdb cut to a random length.
  overwrite N rounds: random bytes written at random offsets of data.mdb.
  stalelock N rounds: kcsd killed with SIGKILL under load (lock.mdb left
            behind), then restarted: it must open cleanly with every
            acknowledged PUT present.
For the damage rounds kcsd must either refuse to start (exit code > 0, not
a signal, a message naming data.mdb on stderr) or move the file aside
(data.mdb.damaged-<time>, logged) and serve; started or not, it never dies
from a signal, a second start also works, and no object it serves fails
its SHA-256.

Seeds are printed first; --seed repeats a run. Prints "ok N - ..." /
"not ok N - ..." lines and "N passed, M failed"; exits 1 on any failure.
Standard library only; bounded (each request has a timeout; the whole run
takes about a minute on 2 cores).

usage: test_reliability.py --kcsd path/to/kcsd [--rounds 20] [--seed S]
"""

import argparse
import base64
import glob
import hashlib
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402


# the detail of a failure is a log: its end says most
T = Tap(lines=25, tail=True)


# ---- the daemon ---------------------------------------------------------------

class Daemon:
    """One kcsd process on a given state dir; stderr to a file."""

    def __init__(self, binary, state_dir, work):
        self.binary = binary
        self.state_dir = state_dir
        self.work = work
        self.proc = None
        self.port = None
        self.err_path = os.path.join(work, "stderr.log")

    def start(self, timeout=30.0):
        """Returns True when serving, False when kcsd exited during start."""
        port_file = os.path.join(self.work, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        self.errf = open(self.err_path, "wb")
        self.proc = subprocess.Popen(
            [self.binary, "--listen", "127.0.0.1:0", "--state-dir", self.state_dir,
             "--port-file", port_file, "--workers", "2", "--cache-touch-flush-ms", "100"],
            stdout=subprocess.DEVNULL, stderr=self.errf)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.errf.close()
                return False
            try:
                with open(port_file) as f:
                    text = f.read().strip()
                if text:
                    self.port = int(text)
                    return True
            except (OSError, ValueError):
                pass
            time.sleep(0.01)
        self.kill()
        raise RuntimeError("kcsd neither served nor exited within %.0fs" % timeout)

    def returncode(self):
        return self.proc.poll() if self.proc else None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        if self.proc:
            self.errf.close()

    def stop(self):
        """SIGTERM; returns the exit status (negative: killed by a signal)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.errf.close()
        return self.proc.returncode

    def stderr(self):
        try:
            with open(self.err_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def request(port, method, path, body=None, ctype="application/json", timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {}
    if body is not None:
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        headers["Content-Type"] = ctype
    try:
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


# ---- workloads ----------------------------------------------------------------

def tensor(name, shape, formal=None):
    t = {"data_type": "float32", "format": "DefaultFormat", "shape": shape, "tensor_name": name}
    if formal:
        t["name"] = formal
    return t


def graph(op, shape):
    return {
        "composite": True, "composite_graph": "rel.1", "id": 0,
        "op": "Fused_%s_rel" % op, "platform": "AKG", "process": "cpu", "version": 1,
        "input_desc": [[tensor("input_0", shape)], [tensor("input_1", shape)]],
        "output_desc": [tensor("output_0_0", shape)],
        "op_desc": [{
            "name": op, "attr": None, "impl_path": "",
            "input_desc": [[tensor("input_0", shape, "input_0")],
                           [tensor("input_1", shape, "input_1")]],
            "output_desc": [tensor("output_0_0", shape, "output_0")],
        }],
    }


class Ledger:
    """What the clients were told: kernels compiled, schedules acknowledged."""

    def __init__(self):
        self.mu = threading.Lock()
        self.kernels = {}    # kernel_id -> object_sha256
        self.acked = {}      # workload_key -> knobs of the last 2xx PUT
        self.inflight = {}   # workload_key -> knobs of a PUT sent, not answered
        self.wkeys = []      # workloads known to kcsd (compiled once)

    def compiled(self, j):
        with self.mu:
            self.kernels[j["kernel_id"]] = j["object_sha256"]


def compile_one(port, g, ledger):
    st, data = request(port, "POST", "/v1/compile?target=cpu", g)
    if st != 200:
        return None
    j = json.loads(data)
    obj = base64.b64decode(j["object_base64"])
    if hashlib.sha256(obj).hexdigest() != j["object_sha256"]:
        raise AssertionError("compile answered an object that fails its hash")
    ledger.compiled(j)
    return j


def knobs_for(rng):
    return {"vector_width": rng.choice([1, 2, 4, 8, 16]), "unroll": rng.randint(1, 16),
            "parallel_grain": rng.randint(1, 1 << 20)}


def put_schedule(port, wk, knobs, ledger):
    rec = {"format": "kcs-schedule-v1", "workload_key": wk, "target": "cpu",
           "template": "injective", "knobs": knobs,
           "measured": {"seconds": 1e-6, "gflops": 1.0},
           "provenance": {"by": "test_reliability", "at": "2026-11-30T00:00:00Z",
                          "kcsd_version": "test"}}
    with ledger.mu:
        ledger.inflight[wk] = knobs
    st, _ = request(port, "PUT", "/v1/schedules/%s?target=cpu" % wk, rec)
    with ledger.mu:
        if st in (200, 201):
            ledger.acked[wk] = knobs
            ledger.inflight.pop(wk, None)
    return st


def load(port, ledger, rng, stop, graphs):
    """Two threads of schedule PUTs (each its own workloads), one of compiles."""
    errors = []

    def putter(idx):
        r = random.Random(rng.random())
        mine = [w for i, w in enumerate(ledger.wkeys) if i % 2 == idx]
        while not stop.is_set():
            try:
                put_schedule(port, r.choice(mine), knobs_for(r), ledger)
            except (OSError, http.client.HTTPException):
                return  # kcsd was killed

    def compiler():
        r = random.Random(rng.random())
        while not stop.is_set():
            try:
                compile_one(port, r.choice(graphs), ledger)
            except (OSError, http.client.HTTPException, ValueError):
                return
            except AssertionError as e:
                errors.append(str(e))
                return

    th = [threading.Thread(target=putter, args=(0,)), threading.Thread(target=putter, args=(1,)),
          threading.Thread(target=compiler)]
    for t in th:
        t.start()
    return th, errors


def verify(port, ledger, objects=True):
    """Every answered compile is served and hashes right; every acknowledged
    PUT (or the one in flight) is stored. Returns a list of problems."""
    bad = []
    with ledger.mu:
        kernels = dict(ledger.kernels)
        acked = dict(ledger.acked)
        inflight = dict(ledger.inflight)
    if objects:
        for kid, sha in kernels.items():
            st, data = request(port, "GET", "/v1/kernels/%s/object" % kid)
            if st != 200:
                bad.append("kernel %s: GET object -> %d" % (kid[:16], st))
            elif hashlib.sha256(data).hexdigest() != sha:
                bad.append("kernel %s: object fails its SHA-256" % kid[:16])
    for wk, knobs in acked.items():
        st, data = request(port, "GET", "/v1/schedules/%s" % wk)
        recs = json.loads(data).get("records", []) if st == 200 else []
        stored = [r.get("knobs", {}) for r in recs]
        want = [knobs] + ([inflight[wk]] if wk in inflight else [])
        ok = any(all(s.get(k) == v for k, v in w.items()) for s in stored for w in want)
        if not ok:
            bad.append("workload %s: acknowledged schedule %s missing (stored %s)"
                       % (wk[:16], knobs, stored))
    return bad


def crashed(rc):
    return rc is not None and rc < 0 and rc != -signal.SIGTERM and rc != -signal.SIGKILL


# ---- rounds -------------------------------------------------------------------

def kill9_rounds(binary, rounds, rng, work):
    state = os.path.join(work, "kill9-state")
    ledger = Ledger()
    d = Daemon(binary, state, work)
    if not T.ok(d.start(), "kill9: first start", d.stderr()):
        return
    graphs = [graph(op, [4, 8 * (i + 1)]) for i, op in enumerate(["Add", "Mul", "Sub", "Add"])]
    for g in graphs:
        j = compile_one(d.port, g, ledger)
        if j:
            ledger.wkeys.append(j["workload_key"])
    T.ok(len(ledger.wkeys) == len(graphs), "kill9: setup compiles", d.stderr())
    for rnd in range(rounds):
        stop = threading.Event()
        th, errors = load(d.port, ledger, rng, stop, graphs)
        time.sleep(rng.uniform(0.15, 0.6))
        d.kill()
        stop.set()
        for t in th:
            t.join(timeout=30)
        rc = d.returncode()
        started = d.start()
        problems = list(errors)
        if not started:
            problems.append("restart failed: exit %s\n%s" % (d.returncode(), d.stderr()))
        else:
            try:
                problems += verify(d.port, ledger)
            except (OSError, http.client.HTTPException, ValueError) as e:
                problems.append("verify: %r" % e)
        T.ok(rc == -signal.SIGKILL and started and not problems,
             "kill9 round %d: restart opens, %d kernels verify, %d acknowledged PUTs present"
             % (rnd + 1, len(ledger.kernels), len(ledger.acked)),
             "\n".join(problems) + "\n" + d.stderr()[-3000:])
        if not started:
            return
    rc = d.stop()
    T.ok(rc == 0, "kill9: clean stop at the end", d.stderr()[-2000:])


def make_golden(binary, work):
    """A state dir with a few kernels and schedules, stopped cleanly."""
    state = os.path.join(work, "golden")
    ledger = Ledger()
    d = Daemon(binary, state, work)
    if not d.start():
        raise RuntimeError("golden: kcsd did not start:\n" + d.stderr())
    graphs = [graph(op, [2 + i, 16]) for i, op in enumerate(["Add", "Mul", "Sub", "Maximum",
                                                               "Minimum", "Add", "Mul", "Sub"])]
    r = random.Random(1)
    for g in graphs:
        j = compile_one(d.port, g, ledger)
        if j:
            ledger.wkeys.append(j["workload_key"])
    for wk in ledger.wkeys:
        put_schedule(d.port, wk, knobs_for(r), ledger)
    for g in graphs[:4]:  # compiles with the tuned schedules: more kernels
        compile_one(d.port, g, ledger)
    rc = d.stop()
    if rc != 0:
        raise RuntimeError("golden: kcsd exit %d:\n%s" % (rc, d.stderr()))
    return state, ledger, graphs


def damage(kind, path, rng):
    size = os.path.getsize(path)
    if kind == "truncate":
        n = rng.randrange(0, size)
        os.truncate(path, n)
        return "truncated %d -> %d bytes" % (size, n)
    spots = []
    with open(path, "r+b") as f:
        for _ in range(rng.randint(1, 8)):
            off = rng.randrange(0, size)
            n = rng.randint(1, 64)
            f.seek(off)
            f.write(bytes(rng.getrandbits(8) for _ in range(n)))
            spots.append("%d+%d" % (off, n))
    return "overwrote " + ", ".join(spots)


def served_objects_ok(port, ledger):
    """No object served fails its hash (a 404 is fine after damage)."""
    bad = []
    for kid, sha in ledger.kernels.items():
        st, data = request(port, "GET", "/v1/kernels/%s/object" % kid)
        if st == 200 and hashlib.sha256(data).hexdigest() != sha:
            bad.append("kernel %s served with a wrong hash" % kid[:16])
        elif st not in (200, 404):
            bad.append("kernel %s: GET object -> %d" % (kid[:16], st))
    for wk in ledger.wkeys:
        st, data = request(port, "GET", "/v1/schedules/%s" % wk)
        if st == 200:
            json.loads(data)
        elif st != 404:
            bad.append("workload %s: GET schedules -> %d" % (wk[:16], st))
    return bad


def damage_round(binary, kind, rnd, golden, ledger, graphs, rng, work):
    rwork = os.path.join(work, "%s-%d" % (kind, rnd))
    state = os.path.join(rwork, "state")
    shutil.copytree(golden, state)
    path = os.path.join(state, "data.mdb")
    what = damage(kind, path, rng)
    problems = []
    outcome = None
    for attempt in (1, 2):  # a second start must work too (no crash loop)
        d = Daemon(binary, state, rwork)
        d.err_path = os.path.join(rwork, "stderr-%d.log" % attempt)
        started = d.start()
        if not started:
            rc = d.returncode()
            err = d.stderr()
            if rc is None or rc <= 0:
                problems.append("start %d: died from signal %d" % (attempt, -rc if rc else 0))
            elif "data.mdb" not in err:
                problems.append("start %d: exit %d without naming data.mdb" % (attempt, rc))
            outcome = outcome or "refused (exit %d)" % rc
            continue
        err = d.stderr()
        if attempt == 1:
            moved = glob.glob(path + ".damaged-*")
            outcome = "moved aside, started empty" if moved else "started"
            if moved and "damaged" not in err:
                problems.append("moved aside without saying so in the log")
        try:
            problems += ["start %d: %s" % (attempt, p) for p in served_objects_ok(d.port, ledger)]
            st, _ = request(d.port, "POST", "/v1/compile?target=cpu", graphs[rnd % len(graphs)])
            if st not in (200, 500):
                problems.append("start %d: compile -> %d" % (attempt, st))
        except (OSError, http.client.HTTPException, ValueError) as e:
            problems.append("start %d: request failed: %r" % (attempt, e))
        rc = d.stop()
        if crashed(rc) or (rc is not None and rc < 0 and rc == -signal.SIGKILL):
            problems.append("start %d: kcsd died from signal %d\n%s"
                            % (attempt, -rc, d.stderr()[-3000:]))
    T.ok(not problems, "%s round %d: %s; %s" % (kind, rnd + 1, what, outcome),
         "\n".join(problems))
    if not problems:
        shutil.rmtree(rwork, ignore_errors=True)


def stalelock_round(binary, rnd, golden, ledger0, graphs, rng, work):
    rwork = os.path.join(work, "stalelock-%d" % rnd)
    state = os.path.join(rwork, "state")
    shutil.copytree(golden, state)
    ledger = Ledger()
    ledger.kernels = dict(ledger0.kernels)
    ledger.acked = dict(ledger0.acked)
    ledger.wkeys = list(ledger0.wkeys)
    problems = []
    d = Daemon(binary, state, rwork)
    if d.start():
        stop = threading.Event()
        th, errors = load(d.port, ledger, rng, stop, graphs)
        time.sleep(rng.uniform(0.05, 0.3))
        d.kill()
        stop.set()
        for t in th:
            t.join(timeout=30)
        problems += errors
        lock_left = os.path.exists(os.path.join(state, "lock.mdb"))
        d2 = Daemon(binary, state, rwork)
        if d2.start():
            try:
                problems += verify(d2.port, ledger)
            except (OSError, http.client.HTTPException, ValueError) as e:
                problems.append("verify: %r" % e)
            rc = d2.stop()
            if rc != 0:
                problems.append("stop: exit %s\n%s" % (rc, d2.stderr()[-2000:]))
        else:
            problems.append("restart with the stale lock failed: exit %s\n%s"
                            % (d2.returncode(), d2.stderr()))
        if not lock_left:
            problems.append("lock.mdb was not left behind (test did not test)")
    else:
        problems.append("first start failed:\n" + d.stderr())
    T.ok(not problems, "stalelock round %d: restart after kill -9, %d acknowledged PUTs present"
         % (rnd + 1, len(ledger.acked)), "\n".join(problems))
    if not problems:
        shutil.rmtree(rwork, ignore_errors=True)


# ---- the admin and sharing endpoints (fast) -----------------------------------

def sched_line(wk_text, target, seconds, knobs=None):
    """An export line for a synthetic workload text."""
    wk = hashlib.sha256(wk_text.encode()).hexdigest()
    rec = {"format": "kcs-schedule-v1", "workload_key": wk, "target": target,
           "template": "injective", "knobs": knobs or {"unroll": 2},
           "measured": None if seconds is None else {"seconds": seconds, "gflops": 1.0},
           "provenance": {"by": "t", "at": "2026-11-30T00:00:00Z", "kcsd_version": "t"}}
    return wk, '{"workload_key":"%s","workload":%s,"record":%s}' % (wk, wk_text, json.dumps(rec))


def admin_checks(binary, work):
    ledger = Ledger()
    a = Daemon(binary, os.path.join(work, "admin-a"), work)
    b_work = os.path.join(work, "b")
    os.makedirs(b_work)
    b = Daemon(binary, os.path.join(work, "admin-b"), b_work)
    if not (T.ok(a.start(), "admin: start A", a.stderr())
            and T.ok(b.start(), "admin: start B", b.stderr())):
        return
    g1, g2 = graph("Add", [3, 5]), graph("Mul", [3, 5])
    j1, k2 = compile_one(a.port, g1, ledger), compile_one(a.port, g2, ledger)
    wk1 = j1["workload_key"]
    knobs = {"vector_width": 4, "unroll": 3, "parallel_grain": 4096}
    rec = {"format": "kcs-schedule-v1", "workload_key": wk1, "target": "cpu",
           "template": "injective", "knobs": knobs,
           "measured": {"seconds": 2e-6, "gflops": 1.0},
           "provenance": {"by": "tuner", "at": "2026-11-30T10:00:00Z", "kcsd_version": "0.1.0"}}
    st, _ = request(a.port, "PUT", "/v1/schedules/%s?target=cpu" % wk1, rec)
    T.ok(st == 201, "admin: PUT schedule on A", st)

    c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
    c.request("GET", "/v1/export")
    r = c.getresponse()
    body = r.read()
    ctype = r.getheader("Content-Type")
    c.close()
    lines = [ln for ln in body.split(b"\n") if ln]
    ok = r.status == 200 and ctype == "application/x-ndjson" and len(lines) == 1
    if ok:
        j = json.loads(lines[0])
        raw = lines[0].split(b'"workload":', 1)[1].split(b',"record":', 1)[0]
        ok = (j["workload_key"] == wk1 and hashlib.sha256(raw).hexdigest() == wk1
              and j["record"]["knobs"]["unroll"] == 3
              and j["record"]["provenance"]["by"] == "tuner"
              and j["record"]["measured"]["seconds"] == 2e-6
              and j["record"]["target"] == j1["target"]["name"])
    T.ok(ok, "admin: GET /v1/export: one JSON line, workload hashes to its key, provenance",
         (r.status, ctype, body[:500]))

    def imp(d, text, ctype="application/x-ndjson"):
        st, data = request(d.port, "POST", "/v1/import", text.encode(), ctype=ctype)
        try:
            return st, json.loads(data)
        except ValueError:
            return st, data

    st, j = imp(b, body.decode())
    T.ok(st == 200 and j == {"imported": 1, "kept_existing": 0, "rejected": []},
         "admin: import into B stores the record", (st, j))
    st, data = request(b.port, "GET", "/v1/schedules/%s" % wk1)
    T.ok(st == 200 and json.loads(data)["records"][0]["knobs"]["unroll"] == 3,
         "admin: imported record listed on B", data[:300])
    st, data = request(b.port, "POST", "/v1/compile?target=cpu", g1)
    jj = json.loads(data) if st == 200 else {}
    T.ok(st == 200 and jj.get("schedule", {}).get("source") == "tuned"
         and jj["schedule"]["knobs"]["unroll"] == 3,
         "admin: B compiles the workload with the imported schedule", data[:300])
    st, j = imp(b, body.decode())
    T.ok(st == 200 and j.get("imported") == 0 and j.get("kept_existing") == 1,
         "admin: the same record again is kept (tie keeps existing)", j)

    # merge rule on synthetic workloads
    w = '{"kcs_workload":1,"synthetic":"merge"}'
    wk, worse = sched_line(w, "cpu", 5e-6)
    _, better = sched_line(w, "cpu", 1e-6, {"unroll": 7})
    _, unmeasured = sched_line(w, "cpu", None, {"unroll": 9})
    st, j = imp(b, worse + "\n")
    st2, j2 = imp(b, better + "\n" + unmeasured + "\n" + worse + "\n")
    st3, data = request(b.port, "GET", "/v1/schedules/%s" % wk)
    recs = json.loads(data)["records"] if st3 == 200 else []
    T.ok(j.get("imported") == 1 and j2.get("imported") == 1 and j2.get("kept_existing") == 2
         and len(recs) == 1 and recs[0]["knobs"]["unroll"] == 7,
         "admin: merge keeps the smaller measured.seconds; unmeasured never wins", (j, j2, recs))
    bad_key = '{"workload_key":"%s","workload":{"x":1},"record":{}}' % ("0" * 64)
    _, bad_knob = sched_line('{"kcs_workload":1,"k":1}', "cpu", 1e-6, {"unroll": 99})
    _, bad_target = sched_line('{"kcs_workload":1,"k":2}', "sparc-v9", 1e-6)
    st, j = imp(b, "\n".join(["not json", bad_key, "", bad_knob, bad_target, better]))
    rej = {x["line"]: x["error"]["code"] for x in j.get("rejected", [])} if isinstance(j, dict) else {}
    T.ok(st == 200 and rej == {1: "malformed_json", 2: "invalid_schedule",
                                4: "invalid_schedule", 5: "invalid_target"}
         and j.get("kept_existing") == 1,
         "admin: bad lines rejected with their line and error, good ones merged", (st, j))
    st, _ = imp(b, better, ctype="text/plain")
    T.ok(st == 415, "admin: import needs application/x-ndjson", st)

    # a long export streams across many batches
    many = [sched_line('{"kcs_workload":1,"n":%d}' % i, "cpu", 1e-6)[1] for i in range(300)]
    st, j = imp(b, "\n".join(many))
    st2, data = request(b.port, "GET", "/v1/export")
    out = [json.loads(ln) for ln in data.split(b"\n") if ln]
    T.ok(j.get("imported") == 300 and st2 == 200 and len(out) == 302
         and len({x["workload_key"] for x in out}) == 302,
         "admin: export of 302 records streams all of them once", (j, st2, len(out)))

    # delete, evict, backup on A
    kid = j1["kernel_id"]
    st, data = request(a.port, "DELETE", "/v1/kernels/%s" % kid)
    st2, _ = request(a.port, "GET", "/v1/kernels/%s/object" % kid)
    st3, _ = request(a.port, "DELETE", "/v1/kernels/%s" % kid)
    T.ok(st == 200 and json.loads(data)["deleted"] == kid and st2 == 404 and st3 == 404,
         "admin: DELETE /v1/kernels/{id}: 200, then GET 404, DELETE again 404", (st, st2, st3))
    st, data = request(a.port, "POST", "/v1/admin/evict", {"target_bytes": 1})
    ev = json.loads(data) if st == 200 else {}
    st2, _ = request(a.port, "GET", "/v1/kernels/%s/object" % k2["kernel_id"])
    st3, sl = request(a.port, "GET", "/v1/schedules/%s" % wk1)
    st4, _ = request(a.port, "GET", "/v1/workloads/%s" % k2["workload_key"])
    st5, _ = request(a.port, "GET", "/v1/workloads/%s" % wk1)
    T.ok(st == 200 and ev.get("evicted_kernels", 0) >= 1 and ev["bytes_after"] < ev["bytes_before"]
         and ev.get("evicted_workloads", 0) >= 1
         and st2 == 404 and st3 == 200 and json.loads(sl)["records"] and st4 == 404 and st5 == 200,
         "admin: evict removes kernels and the workloads left with neither kernel nor schedule, "
         "keeps schedules and their workloads", (st, ev, st2, st3, st4, st5))
    st, data = request(a.port, "POST", "/v1/admin/evict", b"{\"target_bytes\": -1}")
    T.ok(st == 400, "admin: evict with a bad body is 400", (st, data[:200]))
    j = compile_one(a.port, g2, ledger)
    T.ok(j is not None, "admin: an evicted kernel compiles again")
    st, data = request(a.port, "POST", "/v1/admin/backup")
    bk = json.loads(data) if st == 200 else {}
    path = bk.get("path", "")
    T.ok(st == 200 and path.startswith(os.path.join(a.state_dir, "backups") + "/")
         and os.path.getsize(os.path.join(path, "data.mdb")) == bk.get("bytes"),
         "admin: backup writes <state_dir>/backups/<time>/data.mdb", (st, bk))
    T.ok(a.stop() == 0 and b.stop() == 0, "admin: both stop cleanly")
    if path:
        restored = Daemon(binary, path, b_work)
        if T.ok(restored.start(), "admin: kcsd starts on the backup", restored.stderr()):
            st, data = request(restored.port, "GET", "/v1/schedules/%s" % wk1)
            T.ok(st == 200 and json.loads(data)["records"][0]["knobs"]["unroll"] == 3,
                 "admin: the backup holds the schedule", data[:300])
            T.ok(restored.stop() == 0, "admin: restored kcsd stops cleanly")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--only", default="kill9,truncate,overwrite,stalelock",
                    help="comma-separated groups: admin,kill9,truncate,overwrite,stalelock")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % 1000000007
    print("# seed %d (repeat with --seed %d)" % (seed, seed))
    sys.stdout.flush()
    rng = random.Random(seed)
    t0 = time.monotonic()
    work = tempfile.mkdtemp(prefix="kcsd-rel-")
    only = set(args.only.split(","))
    try:
        if "admin" in only:
            admin_checks(args.kcsd, work)
        if "kill9" in only:
            kill9_rounds(args.kcsd, args.rounds, rng, work)
        if only & {"truncate", "overwrite", "stalelock"}:
            golden, ledger, graphs = make_golden(args.kcsd, work)
        for kind in ("truncate", "overwrite"):
            if kind in only:
                for rnd in range(args.rounds):
                    damage_round(args.kcsd, kind, rnd, golden, ledger, graphs, rng, work)
        if "stalelock" in only:
            for rnd in range(args.rounds):
                stalelock_round(args.kcsd, rnd, golden, ledger, graphs, rng, work)
    finally:
        if T.failed == 0:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("# state of failed rounds kept in %s" % work)
    print("# %.1f s" % (time.monotonic() - t0))
    return T.done()


if __name__ == "__main__":
    sys.exit(main())
