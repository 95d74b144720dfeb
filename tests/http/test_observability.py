#!/usr/bin/python3
"""test_observability.py - GET /metrics, GET /v1/stats and systemd notify.

metrics: after a compile, a cache hit, a 404 and a 405, GET /metrics is
  valid Prometheus text (HELP/TYPE for every family, one sample per line,
  cumulative histogram buckets ending in +Inf = _count) with the expected
  counts, and GET /v1/stats reports the same numbers as JSON.
notify: kcsd started with $NOTIFY_SOCKET (a unix datagram socket made here)
  and WATCHDOG_USEC=2000000 sends READY=1 only once /healthz answers,
  WATCHDOG=1 about every second, and STOPPING=1 on SIGTERM, then exits 0.
wedge: with --workers 1 --compile-timeout-s 1, a compile that runs for
  several seconds stops the WATCHDOG=1 pings while every worker is stuck,
  counts an overrun, and the pings resume afterwards (skipped if this
  kcsd compiles the slow graph too fast to tell).
Prints "ok N - name" / "not ok N - name"; exits 1 on any failure.

usage: test_observability.py --kcsd path/to/kcsd
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import http.client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402
from test_api import compile_, elementwise, jrequest, request, tensor  # noqa: E402

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (-?[0-9.e+-]+|\+Inf|NaN)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prom(text):
    """Returns ({(name, frozenset(labels)): value}, {family: type}, errors)."""
    samples, types, helps, errors = {}, {}, set(), []
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP "):
            helps.add(line.split()[2])
            continue
        if line.startswith("# TYPE "):
            parts = line.split()
            types[parts[2]] = parts[3]
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            errors.append("bad line: " + line)
            continue
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    for name, _ in samples:
        fam = re.sub(r'_(bucket|sum|count)$', '', name)
        if name not in types and fam not in types:
            errors.append("no TYPE for " + name)
        if name not in helps and fam not in helps:
            errors.append("no HELP for " + name)
    return samples, types, errors


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def check_histogram(samples, name, **labels):
    """Buckets cumulative and non-decreasing, +Inf == _count."""
    buckets = []
    for (n, ls), v in samples.items():
        d = dict(ls)
        if n != name + "_bucket":
            continue
        le = d.pop("le")
        if d != labels:
            continue
        buckets.append((float("inf") if le == "+Inf" else float(le), v))
    buckets.sort()
    count = value(samples, name + "_count", **labels)
    ok = (len(buckets) >= 10 and buckets[-1][0] == float("inf")
          and all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))
          and count is not None and buckets[-1][1] == count
          and value(samples, name + "_sum", **labels) is not None)
    return ok, buckets, count


def check_metrics(binary):
    with Kcsd(binary, extra_args=["--workers", "2"]) as d:
        g = elementwise("Add", [4, 8], name="Fused_Add_metrics")
        st1, h1, j1, _ = compile_(d, g)
        st2, h2, j2, _ = compile_(d, g)
        st3, _, _, _ = jrequest(d, "GET", "/no/such/path")
        st4, _, _, _ = jrequest(d, "DELETE", "/healthz")
        T.ok(st1 == 200 and st2 == 200 and st3 == 404 and st4 == 405,
             "metrics: setup requests", (st1, st2, st3, st4))
        # a request is counted when its connection completes, just after
        # the client has its answer: wait for all of them to land
        deadline = time.monotonic() + 5
        while True:
            st, h, body = request(d, "GET", "/metrics")
            text = body.decode()
            if ('kcsd_http_requests_total{route="other",status="405"} 1' in text
                    and 'kcsd_http_requests_total{route="other",status="404"} 1' in text
                    and 'route="/v1/compile",status="200"} 2' in text) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        T.ok(st == 200 and h.get("content-type", "").startswith("text/plain; version=0.0.4"),
             "GET /metrics is 200 text/plain; version=0.0.4", (st, h))
        samples, types, errors = parse_prom(text)
        T.ok(not errors, "metrics: valid exposition format (HELP, TYPE, samples)",
             "\n".join(errors[:10]))
        want = {
            ("kcsd_http_requests_total", (("route", "/v1/compile"), ("status", "200"))): 2,
            ("kcsd_http_requests_total", (("route", "other"), ("status", "404"))): 1,
            ("kcsd_http_requests_total", (("route", "other"), ("status", "405"))): 1,
            ("kcsd_cache_hits_total", ()): 1,
            ("kcsd_cache_misses_total", ()): 1,
            ("kcsd_compiles_total", ()): 1,
            ("kcsd_compiles_in_flight", ()): 0,
            ("kcsd_compile_seconds_count", ()): 1,
            ("kcsd_queue_depth", ()): 0,
            ("kcsd_queue_capacity", ()): 256,
            ("kcsd_workers", ()): 2,
            ("kcsd_cache_checksum_failures_total", ()): 0,
            ("kcsd_cache_evictions_total", ()): None,
            ("kcsd_cache_bytes", ()): None,
        }
        bad = []
        for (name, labels), v in want.items():
            got = value(samples, name, **dict(labels))
            if got is None or (v is not None and got != v):
                bad.append("%s%s = %r, want %r" % (name, dict(labels), got, v))
        T.ok(not bad, "metrics: counters and gauges have the expected values", "\n".join(bad))
        T.ok(types.get("kcsd_compile_seconds") == "histogram"
             and types.get("kcsd_http_requests_total") == "counter"
             and types.get("kcsd_queue_depth") == "gauge",
             "metrics: family types", types)
        ok, buckets, count = check_histogram(samples, "kcsd_compile_seconds")
        T.ok(ok and count == 1, "metrics: compile latency histogram is cumulative", buckets)
        ok, buckets, count = check_histogram(samples, "kcsd_http_request_seconds",
                                             route="/v1/compile")
        T.ok(ok and count == 2, "metrics: request latency histogram per route", buckets)
        T.ok(any(n == "kcsd_build_info" and dict(ls).get("build_id") for n, ls in samples),
             "metrics: build info gauge")

        st, h, j, raw = jrequest(d, "GET", "/v1/stats")
        ok = (st == 200 and isinstance(j, dict)
              and j["requests"]["/v1/compile"]["200"] == 2
              and j["requests"]["other"]["404"] == 1
              and j["cache"]["hits"] == 1 and j["cache"]["misses"] == 1
              and j["cache"]["checksum_failures"] == 0 and "evictions" in j["cache"]
              and j["cache"]["bytes"] > 0
              and j["compile"]["compiles"] == 1 and j["compile"]["in_flight"] == 0
              and j["compile"]["seconds"]["count"] == 1
              and j["compile"]["seconds"]["buckets"]["+Inf"] == 1
              and j["queue"]["depth"] == 0 and j["queue"]["capacity"] == 256
              and j["queue"]["workers"] == 2 and j["uptime_s"] >= 0)
        T.ok(ok, "GET /v1/stats: JSON with the same numbers", raw[:600])
        time.sleep(0.2)
        st, h, body = request(d, "GET", "/metrics")
        samples2, _, _ = parse_prom(body.decode())
        T.ok(value(samples2, "kcsd_http_requests_total", route="/metrics", status="200") >= 1
             and value(samples2, "kcsd_http_requests_total", route="/v1/stats",
                       status="200") == 1,
             "metrics: scrapes are counted too")


class NotifyListener:
    """A unix datagram socket standing in for systemd's $NOTIFY_SOCKET.
    Each message is kept as (monotonic time, text); on READY=1 it checks
    at once that /healthz answers (the port file is written before)."""

    def __init__(self, tmp, port_file):
        self.path = os.path.join(tmp, "notify.sock")
        self.port_file = port_file
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.msgs = []
        self.healthz_at_ready = None
        self.healthz_error = None
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            text = data.decode(errors="replace")
            t = time.monotonic()
            if "READY=1" in text.split("\n") and self.healthz_at_ready is None:
                self.healthz_at_ready = self.healthz()
            # listed only after the probe: a waiter that sees READY=1 also
            # sees the probe's result (it once read None under ASan)
            self.msgs.append((t, text))

    def healthz(self):
        # One try, no retry: a refused connection here would be a real bug
        # (READY=1 before listening). The timeout is generous because ctest
        # runs compile-heavy tests beside this one on 2 vCPUs; the reason for
        # a failure is kept for the test's diagnostic.
        try:
            with open(self.port_file) as f:
                port = int(f.read().strip())
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
            c.request("GET", "/healthz")
            st = c.getresponse().status
            c.close()
            self.healthz_error = None if st == 200 else "status %d" % st
            return st == 200
        except (OSError, ValueError, http.client.HTTPException) as e:
            self.healthz_error = repr(e)
            return False

    def times(self, word):
        return [t for t, m in self.msgs if word in m.split("\n")]

    def close(self):
        self.stop = True
        self.thread.join(timeout=2)
        self.sock.close()


def start_notified(binary, tmp, extra=()):
    port_file = os.path.join(tmp, "port")
    lis = NotifyListener(tmp, port_file)
    env = dict(os.environ, NOTIFY_SOCKET=lis.path, WATCHDOG_USEC="2000000")
    env.pop("WATCHDOG_PID", None)
    log = open(os.path.join(tmp, "kcsd.log"), "wb")
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--state-dir",
                             os.path.join(tmp, "state"), "--port-file", port_file] + list(extra),
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not lis.times("READY=1") and proc.poll() is None:
        time.sleep(0.02)
    return lis, proc, log


def log_text(tmp):
    with open(os.path.join(tmp, "kcsd.log"), errors="replace") as f:
        return f.read()


def check_notify(binary):
    tmp = tempfile.mkdtemp(prefix="kcsd-notify-")
    lis, proc, log = start_notified(binary, tmp)
    try:
        T.ok(bool(lis.times("READY=1")), "notify: READY=1 arrives", log_text(tmp)[-800:])
        T.ok(lis.healthz_at_ready is True, "notify: /healthz answers when READY=1 arrives",
             lis.healthz_error)
        time.sleep(3.5)
        pings = lis.times("WATCHDOG=1")
        T.ok(len(pings) >= 3, "notify: WATCHDOG=1 about every second (WATCHDOG_USEC/2)",
             [round(b - a, 2) for a, b in zip(pings, pings[1:])])
        T.ok(all(b - a < 1.9 for a, b in zip(pings, pings[1:])),
             "notify: watchdog pings never further apart than the period",
             [round(b - a, 2) for a, b in zip(pings, pings[1:])])
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        time.sleep(0.3)
        T.ok(rc == 0 and bool(lis.times("STOPPING=1")), "notify: STOPPING=1 on SIGTERM, exit 0",
             (rc, [m for _, m in lis.msgs][-3:]))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        lis.close()
        shutil.rmtree(tmp, ignore_errors=True)


def slow_graph(n):
    """A chain of n Pow ops: LLVM time grows fast with n (seconds at n=40)."""
    s = [4, 8]
    ops, prev = [], "input_0"
    for k in range(n):
        out = "output_0_0" if k == n - 1 else "t_%d" % k
        ops.append({"name": "Pow", "attr": None, "impl_path": "",
                    "input_desc": [[tensor(prev, s, formal="x")],
                                   [tensor("input_1", s, formal="y")]],
                    "output_desc": [tensor(out, s, formal="output")]})
        prev = out
    return {"composite": True, "composite_graph": "slow.1", "id": 0,
            "op": "Fused_Pow_chain_%d" % n, "platform": "AKG", "process": "cpu", "version": 1,
            "input_desc": [[tensor("input_0", s)], [tensor("input_1", s)]],
            "output_desc": [tensor("output_0_0", s)], "op_desc": ops}


def check_wedge(binary):
    tmp = tempfile.mkdtemp(prefix="kcsd-wedge-")
    lis, proc, log = start_notified(binary, tmp, ["--workers", "1", "--compile-timeout-s", "1"])
    try:
        with open(os.path.join(tmp, "port")) as f:
            port = int(f.read().strip())

        d = types.SimpleNamespace(port=port)
        t0 = time.monotonic()
        st, _, j, raw = compile_(d, slow_graph(40))
        t1 = time.monotonic()
        time.sleep(2.5)
        ms = (j or {}).get("compile_ms", 0)
        if st != 200 or ms < 4000:
            T.ok(st == 200, "wedge: slow compile answered (%.0f ms: too fast to test the "
                 "watchdog gap) # SKIP" % ms, raw[:300])
            return
        pings = lis.times("WATCHDOG=1")
        during = [p for p in pings if t0 + 2.0 < p < t1 - 0.5]
        after = [p for p in pings if p > t1]
        T.ok(not during and len(after) >= 1,
             "wedge: no WATCHDOG=1 while the only worker is stuck past compile_timeout_s, "
             "pings resume after (compile %.1f s)" % (ms / 1000.0),
             (len(during), len(after)))
        T.ok("not pinging the systemd watchdog" in log_text(tmp), "wedge: logged")
        st, _, body = request(d, "GET", "/metrics")
        samples, _, _ = parse_prom(body.decode())
        T.ok(value(samples, "kcsd_compile_overruns_total") == 1, "wedge: overrun counted")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        lis.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--only", choices=["fast", "wedge"],
                    help="fast: metrics and notify; wedge: the slow watchdog check")
    args = ap.parse_args()
    if args.only != "wedge":
        check_metrics(args.kcsd)
        check_notify(args.kcsd)
    if args.only != "fast":
        check_wedge(args.kcsd)
    return T.done()


if __name__ == "__main__":
    sys.exit(main())
