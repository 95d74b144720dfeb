#!/usr/bin/python3
"""test_workers.py - compiles that cannot take the daemon down.

Against kcsd with --workers 2, --test-fault-injection 1 and
--compile-timeout-s 2 (the compile workers: worker/pool.c, server/kcsd-worker.c):
  - ?inject=crash answers 500 compiler_crashed naming the signal, ?inject=hang
    504 compile_timeout with its worker killed (PID gone, a replacement
    started), ?inject=alloc the 500 of a worker at its memory cap (skipped
    in sanitizer builds, which apply no RLIMIT_AS); an identical injected
    request sent with each gets the same answer; an ordinary compile sent
    meanwhile answers 200; kcsd's PID never changes;
  - an injected failure never reaches the negative cache;
  - an ordinary compile whose worker is killed (SIGSTOP, then kill -9)
    answers 500 compiler_crashed with its kernel_id; retried, it gets the
    same code at once with Retry-After and "negative_cache": true, counted,
    and no worker starts; after DELETE /v1/kernels/{id} it compiles;
  - 20 rounds of kill -9 mid-compile over distinct bodies: every request
    is answered, each kernel then compiles and its stored object matches
    its object_sha256 on every read;
  - (--load) 200 compiles from 4 clients while a worker is killed every
    few requests: every request answered, the pool back to its size;
  - a worker reporting another build id makes kcsd refuse to start,
    naming both ids.
Prints TAP lines; exits 1 on any failure.

usage: test_workers.py --kcsd path/to/kcsd [--load]
"""

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402
from test_api import compile_, elementwise, err_code, jrequest, metric, request  # noqa: E402

WORKERS = 2


def wait_for(pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    return pred()


def children(d, name="kcsd-worker"):
    """PIDs of kcsd's children whose comm is `name`."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/status" % p) as f:
                st = f.read()
        except OSError:
            continue
        f = dict(line.split(":\t", 1) for line in st.splitlines() if ":\t" in line)
        if f.get("PPid", "").strip() == str(d.proc.pid) and f.get("Name", "").strip() == name:
            out.append(int(p))
    return out


def alive(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return "State:\tZ" not in f.read()
    except OSError:
        return False


def pool_full(d):
    return metric(d, "kcsd_compile_workers_ready") == WORKERS


def in_threads(fns):
    """Runs each fn on its own thread; returns their results in order."""
    out = [None] * len(fns)

    def run(i):
        try:
            out[i] = fns[i]()
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            out[i] = ("exception", repr(e))

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def stop_workers(d):
    """SIGSTOPs kcsd's live workers; returns their PIDs. A worker killed in
    an earlier round may be listed and then reaped by kcsd before the
    signal: it is no longer one of them."""
    pids = []
    for p in children(d):
        try:
            if alive(p):
                os.kill(p, signal.SIGSTOP)
                pids.append(p)
        except ProcessLookupError:
            pass
    return pids


def kill_all(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def compile_with_killed_worker(d, graph):
    """Stops every worker, sends an ordinary compile, kills the workers
    once it holds one, returns the reply."""
    pids = stop_workers(d)
    res = {}
    t = threading.Thread(target=lambda: res.update(r=compile_(d, graph)))
    t.start()
    wait_for(lambda: metric(d, "kcsd_compile_workers_busy") == 1, 10)
    kill_all(pids)
    t.join()
    return res["r"]


def check_injected(d):
    kpid = d.proc.pid
    sanitized = "sanitizer build: compile_max_bytes" in d.log()
    other_i = [0]

    def ordinary():
        other_i[0] += 1
        g = elementwise("Sub", [32, 16 + other_i[0]], name="Fused_Sub_meanwhile")
        return compile_(d, g)

    for fault, status, code in (("crash", 500, "compiler_crashed"),
                                ("hang", 504, "compile_timeout"),
                                ("alloc", 500, "compiler_crashed")):
        if fault == "alloc" and sanitized:
            T.skip("inject=alloc", "sanitizer build: no RLIMIT_AS (compile_max_bytes), and an "
                   "unbounded allocation would take the machine's memory")
            continue
        T.ok(wait_for(lambda: pool_full(d)), "%s: the pool is full before" % fault)
        starts0 = metric(d, "kcsd_compile_worker_starts_total")
        crashes0 = metric(d, "kcsd_compile_worker_crashes_total")
        oom0 = metric(d, "kcsd_compile_worker_oom_total")
        before = set(children(d))
        g = elementwise("Add", [64, 64], name="Fused_Add_inject_" + fault)
        # the leader and an identical injected request; the ordinary
        # compile goes last so the pair take one worker, it the other
        r = in_threads([lambda: compile_(d, g, "?inject=" + fault),
                        lambda: (time.sleep(0.05), compile_(d, g, "?inject=" + fault))[1],
                        lambda: (time.sleep(0.2), ordinary())[1]])
        (st1, h1, j1, _), (st2, _, j2, _), (st3, _, j3, _) = r
        T.ok(st1 == status and err_code(j1) == code,
             "inject=%s: %d %s" % (fault, status, code), (st1, j1))
        T.ok(st2 == st1 and err_code(j2) == err_code(j1),
             "inject=%s: the identical injected request gets the same answer" % fault, (st2, j2))
        T.ok(st3 == 200, "inject=%s: an ordinary compile sent meanwhile answers 200" % fault,
             (st3, j3))
        msg = (j1 or {}).get("error", {}).get("message", "")
        if fault == "crash":
            T.ok("signal" in msg and "SIG" in msg, "inject=crash: the error names the signal", msg)
        if fault == "hang":
            T.ok("compile_timeout_s" in msg and "killed" in msg,
                 "inject=hang: the error says the worker was killed at the deadline", msg)
        if fault == "alloc":
            T.ok("compile_max_bytes" in msg or "memory" in msg,
                 "inject=alloc: the error names the memory cap", msg)
            T.ok(metric(d, "kcsd_compile_worker_oom_total") > oom0,
                 "inject=alloc: counted in kcsd_compile_worker_oom_total")
        T.ok("negative_cache" not in (j1 or {}).get("error", {}),
             "inject=%s: not from the negative cache" % fault, j1)
        T.ok(wait_for(lambda: pool_full(d)), "inject=%s: the pool is back to %d ready workers"
             % (fault, WORKERS), metric(d, "kcsd_compile_workers_ready"))
        gone = [p for p in before if not alive(p)]
        T.ok(len(gone) >= 1, "inject=%s: the failed worker's PID is gone" % fault,
             (before, children(d)))
        T.ok(metric(d, "kcsd_compile_worker_starts_total") >= starts0 + len(gone),
             "inject=%s: a replacement was started for each" % fault)
        T.ok(metric(d, "kcsd_compile_worker_crashes_total") > crashes0 or fault == "hang",
             "inject=%s: counted in kcsd_compile_worker_crashes_total" % fault)
        T.ok(d.proc.pid == kpid and d.proc.poll() is None, "inject=%s: kcsd still runs" % fault)

    # an injected failure never reaches the negative cache: the same body
    # again crashes a worker again, and an ordinary request compiles
    g = elementwise("Add", [64, 64], name="Fused_Add_inject_crash")
    neg0 = metric(d, "kcsd_compile_negative_hits_total")
    crashes0 = metric(d, "kcsd_compile_worker_crashes_total")
    st, h, j, _ = compile_(d, g, "?inject=crash")
    T.ok(st == 500 and "negative_cache" not in j["error"] and "retry-after" not in h,
         "a repeated injected crash is compiled again, not a negative hit", (st, h, j))
    T.ok(metric(d, "kcsd_compile_worker_crashes_total") == crashes0 + 1,
         "... and crashed a worker again")
    st, _, j, _ = compile_(d, g)
    T.ok(st == 200, "the same body without inject compiles (200)", (st, j))
    T.ok(metric(d, "kcsd_compile_negative_hits_total") == neg0,
         "no negative hit was counted for injected requests")


def check_negative(d):
    T.ok(wait_for(lambda: pool_full(d)), "negative: the pool is full before")
    g = elementwise("Mul", [128, 64], name="Fused_Mul_killed")
    st, h, j, _ = compile_with_killed_worker(d, g)
    e = (j or {}).get("error", {})
    T.ok(st == 500 and e.get("code") == "compiler_crashed" and "SIGKILL" in e.get("message", ""),
         "kill -9 of the worker mid-compile: 500 compiler_crashed naming SIGKILL", (st, j))
    kid = e.get("kernel_id")
    T.ok(kid and len(kid) == 64, "the error record carries the kernel_id", e)
    T.ok(wait_for(lambda: pool_full(d)), "the pool is back to its size")
    starts = metric(d, "kcsd_compile_worker_starts_total")
    neg0 = metric(d, "kcsd_compile_negative_hits_total")
    st2, h2, j2, _ = compile_(d, g)
    e2 = (j2 or {}).get("error", {})
    T.ok(st2 == 500 and e2.get("code") == "compiler_crashed" and e2.get("negative_cache") is True
         and e2.get("kernel_id") == kid,
         "the retry gets the same code from the negative cache", (st2, j2))
    ra = h2.get("retry-after", "")
    T.ok(ra.isdigit() and 1 <= int(ra) <= 60, "with Retry-After (negative_ttl_s 60)", h2)
    T.ok(metric(d, "kcsd_compile_negative_hits_total") == neg0 + 1,
         "counted in kcsd_compile_negative_hits_total")
    T.ok(metric(d, "kcsd_compile_worker_starts_total") == starts,
         "and no worker was started")
    st3, _, j3, _ = jrequest(d, "DELETE", "/v1/kernels/" + kid)
    T.ok(st3 == 200 and j3.get("deleted") == kid and j3.get("negative_cache") is True
         and j3.get("stored") is False,
         "DELETE /v1/kernels/{id} clears the negative entry", (st3, j3))
    st4, _, j4, _ = compile_(d, g)
    T.ok(st4 == 200 and j4.get("kernel_id") == kid and j4.get("cache") == "miss",
         "after DELETE it compiles (200, miss)", (st4, j4))


def stored_object_ok(d, kid):
    """The stored object's bytes match the metadata's object_sha256."""
    st, _, meta, _ = jrequest(d, "GET", "/v1/kernels/" + kid)
    if st != 200:
        return False, ("meta", st)
    st, _, data = request(d, "GET", "/v1/kernels/%s/object" % kid)
    if st != 200:
        return False, ("object", st)
    got = hashlib.sha256(data).hexdigest()
    want = meta.get("object_sha256")
    return got == want, (got, want)


def check_kill_rounds(d, rounds):
    answered, crashed, compiled = 0, 0, 0
    kids = {}
    rnd = random.Random(11)
    for i in range(rounds):
        if not wait_for(lambda: pool_full(d)):
            T.ok(False, "round %d: the pool did not come back" % i,
                 metric(d, "kcsd_compile_workers_ready"))
            return
        g = elementwise("Add", [16, 8 + i], name="Fused_Add_round%d" % i)
        if i % 2 == 0:
            st, _, j, _ = compile_with_killed_worker(d, g)
        else:
            # a random worker at a random moment: the compile's, or not
            pids = children(d)
            res = {}
            t = threading.Thread(target=lambda: res.update(r=compile_(d, g)))
            t.start()
            time.sleep(rnd.uniform(0, 0.03))
            kill_all([rnd.choice(pids)])
            t.join()
            st, _, j, _ = res["r"]
        if st in (200, 500):
            answered += 1
        if st == 500 and err_code(j) == "compiler_crashed":
            crashed += 1
            kids[i] = j["error"].get("kernel_id")
        elif st == 200:
            compiled += 1
            kids[i] = j.get("kernel_id")
        else:
            T.ok(False, "round %d: an unexpected answer" % i, (st, j))
    T.ok(answered == rounds, "kill -9 mid-compile, %d rounds: every request answered "
         "(%d compiler_crashed, %d compiled)" % (rounds, crashed, compiled))
    # every kernel compiles once its negative entry is cleared, and what is
    # stored matches its digest (read twice: nothing damaged it)
    bad = []
    for i, kid in kids.items():
        jrequest(d, "DELETE", "/v1/kernels/%s" % kid)
        g = elementwise("Add", [16, 8 + i], name="Fused_Add_round%d" % i)
        st, _, j, _ = compile_(d, g)
        if st != 200 or j.get("kernel_id") != kid:
            bad.append((i, st, j))
            continue
        for _ in range(2):
            ok, why = stored_object_ok(d, kid)
            if not ok:
                bad.append((i, why))
    T.ok(not bad, "every round's kernel then compiles and its stored object matches "
         "object_sha256", bad[:3])


def check_load(d, total=200, clients=4, kill_every=8):
    T.ok(wait_for(lambda: pool_full(d)), "load: the pool is full before")
    lock = threading.Lock()
    counts = {"sent": 0, "done": 0}
    answers = {}
    stop = threading.Event()

    def client(c):
        while True:
            with lock:
                n = counts["sent"]
                if n >= total:
                    return
                counts["sent"] += 1
            g = elementwise("Mul", [8 + n % 50, 24 + n // 50], name="Fused_Mul_load%d" % n)
            try:
                st, _, j, _ = compile_(d, g)
                key = st if st == 200 else "%d %s" % (st, err_code(j))
            except OSError as e:
                key = "no answer: %r" % e
            with lock:
                answers[key] = answers.get(key, 0) + 1
                counts["done"] += 1

    kills = [0]

    def killer():
        rnd = random.Random(7)
        last = 0
        while not stop.is_set():
            with lock:
                done = counts["done"]
            if done - last >= kill_every:
                last = done
                pids = children(d)
                if pids:
                    try:
                        os.kill(rnd.choice(pids), signal.SIGKILL)
                        kills[0] += 1
                    except ProcessLookupError:
                        pass
            time.sleep(0.01)

    t0 = time.monotonic()
    k = threading.Thread(target=killer)
    k.start()
    in_threads([(lambda c=c: client(c)) for c in range(clients)])
    stop.set()
    k.join()
    secs = time.monotonic() - t0
    ok_keys = {200, "500 compiler_crashed", "503 overloaded"}
    T.ok(counts["done"] == total and all(key in ok_keys for key in answers),
         "load: %d compiles from %d clients in %.1f s, %d workers killed: every request "
         "answered %s" % (total, clients, secs, kills[0], answers), answers)
    T.ok(answers.get(200, 0) > total // 2, "load: most compiled", answers)
    T.ok(wait_for(lambda: pool_full(d)), "load: the pool is back to %d ready workers" % WORKERS,
         metric(d, "kcsd_compile_workers_ready"))
    T.ok(len(children(d)) == WORKERS, "load: %d kcsd-worker children" % WORKERS, children(d))


def check_build_id(binary):
    tmp = tempfile.mkdtemp(prefix="kcsd-fakeworker-")
    fake = os.path.join(tmp, "kcsd-worker")
    with open(fake, "w") as f:
        f.write("#!/usr/bin/python3\n"
                "import os, sys, time\n"
                "fd = int(sys.argv[sys.argv.index('--fd') + 1])\n"
                "os.write(fd, b'kcsd-worker-v1 build_id=0123456789abcdef pid=%d\\n' % os.getpid())\n"
                "time.sleep(30)\n")
    os.chmod(fake, 0o755)
    ver = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    ours = ver.split("build ", 1)[1].split(",", 1)[0] if "build " in ver else "?"
    d = Kcsd(binary, extra_args=["--workers", "1", "--worker", fake], start_timeout=30)
    try:
        d.start()
        T.ok(False, "a worker of another build id: kcsd must not start", d.log()[-800:])
        d.kill()
    except RuntimeError:
        code = d.proc.returncode if d.proc else None
        log = d.log()
        T.ok(code == 1, "a worker of another build id: kcsd exits 1", (code, log[-800:]))
        T.ok("0123456789abcdef" in log and ours in log,
             "the refusal names both build ids (%s and %s)" % ("0123456789abcdef", ours),
             log[-800:])
        d.kill()
    d.cleanup()
    subprocess.run(["rm", "-rf", tmp])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--load", action="store_true", help="also the 200-compile load run (slow)")
    args = ap.parse_args()

    # a 1.5 GiB cap (the worker starts at ~0.2 GiB of address space) so
    # that inject=alloc reaches it well within the 2 s deadline
    d = Kcsd(args.kcsd, extra_args=["--workers", str(WORKERS), "--test-fault-injection", "1",
                                    "--compile-timeout-s", "2", "--compile-max-bytes", "1536M"])
    d.start()
    kpid = d.proc.pid
    try:
        if args.load:
            check_load(d)
        else:
            check_injected(d)
            check_negative(d)
            check_kill_rounds(d, args.rounds)
        T.ok(d.proc.pid == kpid and d.proc.poll() is None, "kcsd's PID never changed")
        d.stop()
        T.ok(True, "kcsd stops cleanly (exit 0)")
    except AssertionError as e:
        T.ok(False, "kcsd stops cleanly", str(e)[-1500:])
    finally:
        d.kill()
        d.cleanup()
    if not args.load:
        check_build_id(args.kcsd)
    T.done()


if __name__ == "__main__":
    main()
