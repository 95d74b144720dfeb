#!/usr/bin/python3
"""test_sandbox.py - kcsd's children, seen from /proc (server/sandbox.c).

Starts kcsd with a secret in its environment (KCSD_DB_PASSWORD), two
compile workers, --test-fault-injection 1 and a short verify timeout, then
reads /proc of:
  - each compile worker (kcsd-worker, a child of kcsd) and its link helper
    (a child of the worker): an empty environment, NoNewPrivs 1, Seccomp 2,
    no capabilities, the scratch directory as working directory, no
    descriptors but stdio and its sockets, oom_score_adj 1000, RLIMIT_CORE
    0, RLIMIT_NOFILE 64, RLIMIT_AS compile_max_bytes (not in sanitizer
    builds), RLIMIT_NPROC 0 for the worker (the helper starts the linker);
  - a verify runner (kcsd-runner), held alive by ?inject=hang: the same,
    with its own RLIMIT_AS and RLIMIT_NPROC 0;
then checks that compiles still work, an AArch64 one through the link
helper included, and that a worker whose link helper dies is replaced
while idle. The inside view (what a child may and may not do) is
tests/unit/test_sandbox.c.
Prints TAP lines; exits 1 on any failure.

usage: test_sandbox.py --kcsd path/to/kcsd
"""

import argparse
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402
from test_api import compile_, elementwise  # noqa: E402
from test_verify import inline_graph, post  # noqa: E402

MAX_BYTES = 3 << 30


def status(pid):
    with open("/proc/%d/status" % pid) as f:
        return {k: v.strip() for k, v in
                (line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)}


def children(ppid, name):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            st = status(int(p))
        except OSError:
            continue
        if st.get("PPid") == str(ppid) and st.get("Name") == name:
            out.append(int(p))
    return out


def limits(pid):
    """{'Max processes': (soft, hard), ...} from /proc/pid/limits."""
    out = {}
    with open("/proc/%d/limits" % pid) as f:
        for line in f.read().splitlines()[1:]:
            name, rest = line[:26].strip(), line[26:].split()
            out[name] = (rest[0], rest[1])
    return out


def check_child(label, pid, want_nproc0, sanitized, as_bytes, cwd_prefix):
    st = status(pid)
    with open("/proc/%d/environ" % pid, "rb") as f:
        env = f.read()
    T.ok(env == b"", "%s: an empty environment" % label, env[:200])
    T.ok(st.get("NoNewPrivs") == "1", "%s: NoNewPrivs: 1" % label, st.get("NoNewPrivs"))
    T.ok(st.get("Seccomp") == "2", "%s: Seccomp: 2 (a filter)" % label, st.get("Seccomp"))
    T.ok(st.get("CapEff") == "0000000000000000" and st.get("CapBnd") == "0000000000000000",
         "%s: no capabilities" % label, (st.get("CapEff"), st.get("CapBnd")))
    cwd = os.readlink("/proc/%d/cwd" % pid)
    T.ok(os.path.basename(cwd).startswith(cwd_prefix),
         "%s: its scratch directory is its working directory" % label, cwd)
    fds = sorted(int(x) for x in os.listdir("/proc/%d/fd" % pid))
    targets = [os.readlink("/proc/%d/fd/%d" % (pid, fd)) for fd in fds if fd >= 3]
    T.ok(all(t.startswith("socket:") for t in targets),
         "%s: no descriptors but stdio and its sockets" % label, targets)
    with open("/proc/%d/oom_score_adj" % pid) as f:
        oom = f.read().strip()
    T.ok(oom == "1000", "%s: oom_score_adj 1000" % label, oom)
    lim = limits(pid)
    T.ok(lim["Max core file size"] == ("0", "0"), "%s: RLIMIT_CORE 0" % label,
         lim["Max core file size"])
    T.ok(lim["Max open files"] == ("64", "64"), "%s: RLIMIT_NOFILE 64" % label,
         lim["Max open files"])
    if sanitized:
        T.skip("%s: RLIMIT_AS" % label, "sanitizer build: no RLIMIT_AS")
    elif as_bytes is None:
        T.ok(lim["Max address space"][1] != "unlimited", "%s: RLIMIT_AS set" % label,
             lim["Max address space"])
    else:
        T.ok(lim["Max address space"] == (str(as_bytes), str(as_bytes)),
             "%s: RLIMIT_AS %d" % (label, as_bytes), lim["Max address space"])
    if want_nproc0:
        T.ok(lim["Max processes"] == ("0", "0"), "%s: RLIMIT_NPROC 0" % label,
             lim["Max processes"])
    else:
        T.ok(lim["Max processes"] != ("0", "0"),
             "%s: may start processes (the system linker)" % label, lim["Max processes"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    opt = ap.parse_args()
    os.environ["KCSD_DB_PASSWORD"] = "hunter2"
    d = Kcsd(opt.kcsd, extra_args=["--workers", "2", "--test-fault-injection", "1",
                                    "--verify-timeout-s", "3",
                                    "--compile-max-bytes", str(MAX_BYTES)])
    d.start()
    try:
        sanitized = "sanitizer build: compile_max_bytes" in d.log()
        with open("/proc/%d/environ" % d.proc.pid, "rb") as f:
            T.ok(b"KCSD_DB_PASSWORD=hunter2" in f.read(), "kcsd itself has the secret")
        workers = children(d.proc.pid, "kcsd-worker")
        T.ok(len(workers) == 2, "two compile workers", workers)
        for i, w in enumerate(workers):
            check_child("worker %d" % i, w, True, sanitized, MAX_BYTES, "kcsd-worker-")
            helpers = children(w, "kcsd-worker")
            T.ok(len(helpers) == 1, "worker %d has one link helper" % i, helpers)
            for h in helpers:
                check_child("worker %d's link helper" % i, h, False, sanitized, MAX_BYTES,
                            "kcsd-worker-")

        # a runner, held by ?inject=hang until the verify timeout kills it
        res = {}
        t = threading.Thread(target=lambda: res.update(
            r=post(d, "/v1/verify?inject=hang", inline_graph())))
        t.start()
        runner = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runner = children(d.proc.pid, "kcsd-runner")
            # seen once it has entered the sandbox and started its
            # threads, its last step (a sanitizer build's runner takes a
            # while to get there)
            try:
                if runner and status(runner[0]).get("Seccomp") == "2" and \
                        limits(runner[0])["Max processes"] == ("0", "0"):
                    break
            except OSError:
                pass
            time.sleep(0.02)
        T.ok(len(runner) == 1, "a verify runner is running", runner)
        for r in runner:
            try:
                check_child("runner", r, True, sanitized, None, "kcsd-verify-")
            except OSError as e:
                T.ok(False, "runner: /proc readable while it runs", repr(e))
        t.join()
        st, j, raw = res["r"]
        T.ok(st == 200 and j.get("failure") == "timeout",
             "the hung runner is reported as a timeout", raw[:300])

        # compiles still work, the system linker's (AArch64) too
        st, _, j, _ = compile_(d, elementwise("Add", [64, 64], name="Fused_Add_sandboxed"))
        T.ok(st == 200, "a compile in the sandbox answers 200", j)
        st, j, raw = post(d, "/v1/compile?target=aarch64",
                          elementwise_body("Fused_Mul_sandboxed_a64"))
        if st == 422 and "ld.lld" in raw:
            T.skip("aarch64 compile", "no ld.lld-19 here")
        else:
            T.ok(st == 200, "an AArch64 compile (ld.lld-19 from the link helper) answers 200",
                 raw[:300])
        st, j, raw = post(d, "/v1/verify", inline_graph())
        T.ok(st == 200 and j.get("ok") is True, "a verify in the sandbox passes", raw[:300])

        # a link helper killed while its worker is idle takes the worker
        # along; the pool starts another, and AArch64 links still work
        before = children(d.proc.pid, "kcsd-worker")
        victim = before[0]
        helper = children(victim, "kcsd-worker")
        for h in helper:
            os.kill(h, signal.SIGKILL)
        deadline = time.monotonic() + 30
        now = before
        while time.monotonic() < deadline:
            now = children(d.proc.pid, "kcsd-worker")
            if victim not in now and len(now) == 2:
                break
            time.sleep(0.05)
        T.ok(helper and victim not in now and len(now) == 2,
             "a worker whose link helper died is replaced while idle", (before, now))
        for i in range(3):
            st, j, raw = post(d, "/v1/compile?target=aarch64",
                              elementwise_body("Fused_Mul_after_helper_%d" % i))
            T.ok(st == 200 or (st == 422 and "ld.lld" in raw),
                 "AArch64 compile %d after the helper's death" % i, raw[:300])
    finally:
        d.stop(check=False)
        d.cleanup()
    return T.done()


def elementwise_body(name):
    return json.dumps(elementwise("Mul", [32, 48], name=name)).encode()


if __name__ == "__main__":
    sys.exit(main())
