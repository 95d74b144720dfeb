#!/usr/bin/python3
"""test_limits.py - kcsd's memory and connection limits under a hostile client.

Part 1, one kcsd with an 8 MiB body budget (--max-inflight-body-bytes 8M),
every route's body cap at 1 MiB and a request deadline of 3 s:
  - a cache-hit compile loop runs from 127.0.0.2 (one kept-alive
    connection, a small composite graph compiled once first), for at
    least --loop requests and until the hostile load below is over;
  - 20 near-cap uploads from 127.0.0.1: headers with Content-Length just
    under 1 MiB and a quarter of the body, then held. Those past the
    budget get 503 overloaded with Retry-After at once; the others are
    held until the deadline closes them;
  - a chunked upload (no Content-Length) from 127.0.0.4 while the budget
    is full: 503 once its body ends;
  - 50 connections from 127.0.0.3 trickle a request line and headers, one
    byte a second: all of them are closed by kcsd (reaped), and
    kcsd_connections_reaped_total counts them and the held uploads;
  - kcsd's RSS (VmRSS sampled through the load, and VmHWM after a reset
    of the peak when the kernel allows it) stays under idle RSS + the
    budget + 64 MiB;
  - every request of the loop answers 200.
Part 2, a kcsd with the defaults: a body within max_body_bytes but over
max_json_tokens (about 1 MiB of "[0,0,...]") and one nested past
max_json_depth are answered 413 naming "body" by the JSON pre-scan, on
compile, schedule PUT, admin evict and (as a rejected line) import;
kcsd_json_refusals_total counts them, and VmHWM stays under idle + 64 MiB.
The routes.def cap column: a 2 MiB body is 413 on compile (max_body_bytes)
and taken by import (max_import_bytes), a declared 33 MiB import is 413.
Bounded: about 25 s. Prints "ok N - name" / "not ok N - name"; exits 1 on
any failure.

usage: test_limits.py --kcsd path/to/kcsd [--loop 200]
"""

import argparse
import http.client
import json
import os
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402
from test_api import elementwise, err_code, jrequest, metric  # noqa: E402

MIB = 1 << 20
BUDGET = 8 * MIB
DEADLINE_S = 3
HELD = 20
TRICKLES = 50
NEAR_CAP = MIB - 4096  # a near-cap upload's Content-Length


def proc_status(pid):
    """VmRSS and VmHWM of pid, in bytes."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def reset_peak(pid):
    """Resets VmHWM to the current RSS (Linux >= 4.0); False if not allowed."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def connect_from(src, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_response(s, timeout):
    """(status, headers, body) of one response on s, None if s closes (or
    stays silent for `timeout` s) without a whole one."""
    buf = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r, _, _ = select.select([s], [], [], max(0.0, end - time.monotonic()))
        if not r:
            break
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
        head_end = buf.find(b"\r\n\r\n")
        if head_end < 0:
            continue
        lines = buf[:head_end].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        if len(buf) >= head_end + 4 + n:
            return int(lines[0].split()[1]), headers, buf[head_end + 4:head_end + 4 + n]
    return None


def closed_by_peer(s, timeout):
    """True once the peer has closed s (EOF or reset) within timeout s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r, _, _ = select.select([s], [], [], max(0.0, end - time.monotonic()))
        if not r:
            return False
        try:
            if not s.recv(65536):
                return True
        except OSError:
            return True
    return False


class Loop(threading.Thread):
    """POST /v1/compile of one body, again and again, on one kept-alive
    connection from 127.0.0.2; keeps every status."""

    def __init__(self, port, body, at_least):
        super().__init__(daemon=True)
        self.port, self.body, self.at_least = port, body, at_least
        self.statuses, self.lat = [], []
        self.stop = threading.Event()

    def run(self):
        c = None
        while not self.stop.is_set() or len(self.statuses) < self.at_least:
            t0 = time.monotonic()
            try:
                if c is None:
                    c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30,
                                                   source_address=("127.0.0.2", 0))
                c.request("POST", "/v1/compile?target=cpu", body=self.body,
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                self.statuses.append(r.status)
            except (OSError, http.client.HTTPException) as e:
                self.statuses.append(repr(e))
                c = None
            self.lat.append(time.monotonic() - t0)


def hold_uploads(port, n):
    """n near-cap uploads from 127.0.0.1: headers and a quarter of the
    body, then nothing. Returns (sockets still held, answers received)."""
    socks = []
    for _ in range(n):
        s = connect_from("127.0.0.1", port)
        s.sendall(b"POST /v1/compile HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % NEAR_CAP)
        try:
            s.sendall(b" " * (NEAR_CAP // 4))
        except OSError:
            pass  # refused at the headers and closed: its answer is read below
        socks.append(s)
    # a refusal comes at once: give them all half a second together (the
    # held ones must stay well inside the deadline)
    held, answers = [], []
    end = time.monotonic() + 0.5
    for s in socks:
        r = read_response(s, max(0.05, end - time.monotonic()))
        if r is None:
            held.append(s)
        else:
            answers.append(r)
            s.close()
    return held, answers


def chunked_upload(port, size):
    """A chunked POST /v1/compile of `size` bytes from 127.0.0.4."""
    s = connect_from("127.0.0.4", port)
    s.sendall(b"POST /v1/compile HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    left = size
    while left:
        n = min(left, 65536)
        s.sendall(b"%x\r\n%s\r\n" % (n, b" " * n))
        left -= n
    s.sendall(b"0\r\n\r\n")
    r = read_response(s, 10.0)
    s.close()
    return r


def trickle(port, n, deadline_s, timeout):
    """n connections from 127.0.0.3 that send a request's headers one byte
    a second. Returns (closed by kcsd, seconds from the first connect
    until the last was closed)."""
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
    socks = [connect_from("127.0.0.3", port) for _ in range(n)]
    t0 = time.monotonic()
    sent = 0
    open_ = set(range(n))
    closed = set()
    end = t0 + timeout
    while open_ and time.monotonic() < end:
        for i in list(open_):
            try:
                socks[i].send(head[sent:sent + 1])
            except OSError:
                open_.discard(i)
                closed.add(i)
        sent += 1
        # a second between bytes, watching for kcsd closing them
        tick = time.monotonic() + 1.0
        while open_ and time.monotonic() < tick:
            r, _, _ = select.select([socks[i] for i in open_], [], [],
                                    max(0.0, tick - time.monotonic()))
            for s in r:
                i = socks.index(s)
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    open_.discard(i)
                    closed.add(i)
    took = time.monotonic() - t0
    for s in socks:
        s.close()
    return len(closed), took, sent


def part_hostile(binary, loop_n):
    args = ["--max-inflight-body-bytes", "8M", "--max-body-bytes", "1M",
            "--max-import-bytes", "1M", "--max-tune-bytes", "1M",
            "--request-deadline-s", str(DEADLINE_S), "--workers", "2", "--log-level", "warn"]
    with Kcsd(binary, extra_args=args) as d:
        pid = d.proc.pid
        body = json.dumps(elementwise("Add", [4, 64], name="Fused_Add_limits")).encode()
        st, _, j, raw = jrequest(d, "POST", "/v1/compile?target=cpu", json.loads(body))
        T.ok(st == 200, "hostile: the loop's graph compiles once", raw[:300])
        idle = proc_status(pid)["VmRSS"]
        peak_reset = reset_peak(pid)

        loop = Loop(d.port, body, loop_n)
        loop.start()
        samples = []
        sampling = threading.Event()

        def sample():
            while not sampling.is_set():
                samples.append(proc_status(pid)["VmRSS"])
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()

        held, answers = hold_uploads(d.port, HELD)
        busy = [a for a in answers if a[0] == 503]
        codes = [err_code(json.loads(a[2])) for a in busy]
        T.ok(held and len(busy) == len(answers) == HELD - len(held)
             and all(c == "overloaded" for c in codes)
             and all(a[1].get("retry-after") for a in busy),
             "hostile: %d near-cap uploads held, %d past the budget answered 503 overloaded "
             "with Retry-After" % (len(held), len(busy)),
             [(a[0], a[1].get("retry-after"), a[2][:120]) for a in answers])
        T.ok(len(held) * NEAR_CAP <= BUDGET,
             "hostile: the held uploads fit the 8 MiB budget (%d x %d bytes)"
             % (len(held), NEAR_CAP))
        inflight = metric(d, "kcsd_body_bytes_inflight")
        T.ok(inflight is not None and len(held) * NEAR_CAP <= inflight <= BUDGET,
             "hostile: kcsd_body_bytes_inflight %s <= budget %d" % (inflight, BUDGET))
        r = chunked_upload(d.port, 900 * 1024)
        T.ok(r is not None and r[0] == 503 and err_code(json.loads(r[2])) == "overloaded",
             "hostile: a chunked upload past the budget is answered 503 at its end",
             r and (r[0], r[2][:200]))

        closed, took, sent = trickle(d.port, TRICKLES, DEADLINE_S, timeout=DEADLINE_S + 15)
        T.ok(closed == TRICKLES,
             "hostile: kcsd closed all %d trickling connections (%d of them, after %d "
             "header bytes, %.1f s)" % (TRICKLES, closed, sent, took))
        held_closed = sum(closed_by_peer(s, DEADLINE_S + 5) for s in held)
        T.ok(held_closed == len(held),
             "hostile: the %d held uploads were closed at the deadline too (%d)"
             % (len(held), held_closed))
        for s in held:
            s.close()
        reaped = metric(d, "kcsd_connections_reaped_total")
        T.ok(reaped is not None and reaped >= TRICKLES + len(held),
             "hostile: kcsd_connections_reaped_total %s >= %d trickles + %d held uploads"
             % (reaped, TRICKLES, len(held)))
        refusals = metric(d, "kcsd_body_budget_refusals_total")
        T.ok(refusals == len(busy) + 1,
             "hostile: kcsd_body_budget_refusals_total %s = %d" % (refusals, len(busy) + 1))

        loop.stop.set()
        loop.join(timeout=60)
        sampling.set()
        sampler.join()
        st = proc_status(pid)
        peak = max(samples + [st["VmRSS"]])
        hwm = st["VmHWM"] if peak_reset else None
        bound = idle + BUDGET + 64 * MIB
        T.ok(peak <= bound and (hwm is None or hwm <= bound),
             "hostile: RSS idle %.1f MiB, peak sampled %.1f MiB, VmHWM %s (bound %.1f MiB)"
             % (idle / MIB, peak / MIB,
                "%.1f MiB" % (hwm / MIB) if hwm is not None else "not reset", bound / MIB))
        bad = [s for s in loop.statuses if s != 200]
        lat = sorted(loop.lat)
        T.ok(len(loop.statuses) >= loop_n and not bad,
             "hostile: all %d cache-hit compiles from 127.0.0.2 answered 200 (p50 %.1f ms, "
             "p99 %.1f ms, max %.1f ms)"
             % (len(loop.statuses), 1e3 * lat[len(lat) // 2], 1e3 * lat[int(len(lat) * 0.99)],
                1e3 * lat[-1]), bad[:10])
        st, _, _, _ = jrequest(d, "GET", "/healthz")
        T.ok(st == 200 and metric(d, "kcsd_body_bytes_inflight") == 0,
             "hostile: afterwards /healthz answers and no body bytes are reserved")


def declared(port, path, n):
    """The answer to a POST whose headers declare n body bytes, none sent."""
    s = connect_from("127.0.0.1", port)
    s.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (path.encode(), n))
    r = read_response(s, 10.0)
    s.close()
    return r


def part_json(binary):
    with Kcsd(binary, extra_args=["--log-level", "warn"]) as d:
        pid = d.proc.pid
        idle = proc_status(pid)["VmRSS"]
        peak_reset = reset_peak(pid)
        n = (MIB - 16) // 2
        flat = b"[" + b"0," * (n - 1) + b"0]"
        deep = b"[" * 100 + b"]" * 100
        st, _, j, raw = jrequest(d, "POST", "/v1/compile", flat)
        T.ok(len(flat) <= MIB and st == 413 and err_code(j) == "too_large"
             and j["error"]["where"] == "body" and "max_json_tokens" in j["error"]["message"],
             "json: %d bytes of [0,0,...] -> 413 too_large naming body (max_json_tokens)"
             % len(flat), raw[:300])
        st, _, j, raw = jrequest(d, "POST", "/v1/compile", deep)
        T.ok(st == 413 and j["error"]["where"] == "body"
             and "max_json_depth" in j["error"]["message"],
             "json: nesting 100 deep -> 413 naming body (max_json_depth)", raw[:300])
        wk = "0" * 64
        st, _, j, raw = jrequest(d, "PUT", "/v1/schedules/%s?target=cpu" % wk, flat)
        T.ok(st == 413 and j["error"]["where"] == "body",
             "json: schedule PUT of the flat body -> 413 naming body", raw[:300])
        st, _, j, raw = jrequest(d, "POST", "/v1/admin/evict", deep)
        T.ok(st == 413 and j["error"]["where"] == "body",
             "json: admin evict of the deep body -> 413 naming body", raw[:300])
        st, _, j, raw = jrequest(d, "POST", "/v1/import", b"\n" + deep + b"\n",
                                 ctype="application/x-ndjson")
        rej = (j or {}).get("rejected") or [{}]
        T.ok(st == 200 and rej[0].get("line") == 2
             and rej[0].get("error", {}).get("code") == "too_large"
             and rej[0]["error"].get("where") == "body",
             "json: an import line nested too deep is rejected 413 naming body", raw[:300])
        # the refusals are counted once their connections complete
        want, got = 5, None
        end = time.monotonic() + 5
        while time.monotonic() < end:
            got = metric(d, "kcsd_json_refusals_total")
            if got == want:
                break
            time.sleep(0.05)
        T.ok(got == want, "json: kcsd_json_refusals_total = %s (want %d)" % (got, want))
        # every connection so far is closed: only the scrape's is open (the
        # previous scrape's may linger a moment, until MHD cleans it up)
        end = time.monotonic() + 5
        seen = []
        while time.monotonic() < end:
            seen.append(metric(d, "kcsd_connections_open"))
            if seen[-1] == 1:
                break
            time.sleep(0.05)
        T.ok(seen[-1] == 1,
             "json: kcsd_connections_open comes back to 1 (the scrape) once the others "
             "closed", seen[-10:])
        st = proc_status(pid)
        hwm = st["VmHWM"]
        bound = idle + 64 * MIB
        T.ok(hwm <= bound,
             "json: VmHWM %.1f MiB <= idle %.1f MiB + 64 MiB (peak %s)"
             % (hwm / MIB, idle / MIB, "reset after start" if peak_reset else "since start"))
        st, _, j, raw = jrequest(d, "POST", "/v1/compile",
                                 elementwise("Add", [2, 3], name="Fused_Add_after"))
        T.ok(st == 200, "json: a real compile still works", raw[:300])

        # the routes.def cap column: import has its own, larger, cap
        big = b"\n" * (2 * MIB) + deep + b"\n"
        r = declared(d.port, "/v1/compile", len(big))
        T.ok(r is not None and r[0] == 413 and b"max_body_bytes" in r[2],
             "caps: a declared 2 MiB compile body -> 413 naming max_body_bytes",
             r and r[2][:200])
        st, _, j, raw = jrequest(d, "POST", "/v1/import", big, ctype="application/x-ndjson")
        T.ok(st == 200 and len(j.get("rejected", [])) == 1,
             "caps: a 2 MiB import body is taken (max_import_bytes 32M)", raw[:300])
        r = declared(d.port, "/v1/import", 33 * MIB)
        T.ok(r is not None and r[0] == 413 and b"max_import_bytes" in r[2],
             "caps: a declared 33 MiB import -> 413 naming max_import_bytes before the body",
             r and r[2][:200])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--loop", type=int, default=200)
    args = ap.parse_args()
    t0 = time.monotonic()
    try:
        part_hostile(args.kcsd, args.loop)
        part_json(args.kcsd)
    except Exception as e:  # noqa: BLE001
        T.ok(False, "harness: %r" % (e,), str(e))
    print("# test_limits took %.1f s" % (time.monotonic() - t0))
    return T.done()


if __name__ == "__main__":
    sys.exit(main())
