#!/usr/bin/python3
"""test_wedge.py - a wedged compile takes neither the workers nor the stop.

Against kcsd with --workers 2, --test-fault-injection 1 and
--shutdown-grace-s 2:
  - POST /v1/compile?inject=hang hangs its compile worker (until the
    compile_timeout_s deadline, 30 s by default); three identical injected
    requests park on its flight (kcsd_compile_parked reaches 3) and hold no
    worker (kcsd_workers_busy stays 1);
  - meanwhile an ordinary compile of the same body and one of another body,
    from 127.0.0.2, answer 200: the second worker is free and an ordinary
    request never joins the injected flight;
  - SIGTERM makes kcsd exit on its own (code 0) within 30 s, the three
    parked requests get 503 shutting_down and the log says a job was
    abandoned;
  - the store reopens clean: a new kcsd on the same state directory serves
    the kernel compiled before as a hit, and stops cleanly;
  - without --test-fault-injection, ?inject is refused with 400 naming it;
  - started pinned to one CPU, kcsd's default worker count is 1.
Prints TAP lines; exits 1 on any failure.

usage: test_wedge.py --kcsd path/to/kcsd
"""

import argparse
import json
import os
import re
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402
from test_api import compile_, elementwise, err_code, jrequest, metric  # noqa: E402


def send_compile(port, body, query="", source="127.0.0.1"):
    """Opens a connection from `source` and sends a compile; returns the socket."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(60)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(("POST /v1/compile%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\nConnection: close\r\n\r\n"
               % (query, len(body))).encode() + body)
    return s


def read_reply(s):
    """(status, parsed JSON body or None) once the server closes, else (None, None)."""
    chunks = []
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    except OSError:
        pass
    s.close()
    data = b"".join(chunks)
    if not data.startswith(b"HTTP/1.1 "):
        return None, None
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        j = json.loads(body)
    except ValueError:
        j = None
    return int(data[9:12]), j


def wait_for(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    return pred()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    args = ap.parse_args()

    hang_graph = elementwise("Add", [64, 64], name="Fused_Add_wedge")
    body = json.dumps(hang_graph).encode()
    other = json.dumps(elementwise("Mul", [64, 64], name="Fused_Mul_wedge")).encode()

    d = Kcsd(args.kcsd, extra_args=["--workers", "2", "--test-fault-injection", "1",
                                    "--shutdown-grace-s", "2"])
    d.start()
    state = d.state_dir
    leader = send_compile(d.port, body, "?inject=hang")
    T.ok(wait_for(lambda: "inject=hang: the worker compiling this request hangs" in d.log()),
         "inject=hang: the leader's compile hangs", d.log()[-1500:])
    dups = [send_compile(d.port, body, "?inject=hang") for _ in range(3)]
    parked = wait_for(lambda: metric(d, "kcsd_compile_parked") == 3)
    T.ok(parked, "three identical injected requests park on the flight",
         metric(d, "kcsd_compile_parked"))
    T.ok(metric(d, "kcsd_workers_busy") == 1, "the parked requests hold no worker",
         metric(d, "kcsd_workers_busy"))

    t0 = time.monotonic()
    st_same, j_same = read_reply(send_compile(d.port, body, source="127.0.0.2"))
    st_other, j_other = read_reply(send_compile(d.port, other, source="127.0.0.2"))
    T.ok(st_same == 200 and j_same and j_same.get("cache") == "miss",
         "127.0.0.2: the same body without inject compiles (200, not the hang's flight)",
         (st_same, j_same))
    T.ok(st_other == 200, "127.0.0.2: another body compiles on the free worker (200)",
         (st_other, j_other))
    T.ok(time.monotonic() - t0 < 25, "127.0.0.2's compiles did not wait on the wedge")
    T.ok(metric(d, "kcsd_compile_parked") == 3, "the three are still parked",
         metric(d, "kcsd_compile_parked"))

    # SIGTERM: exit on its own within 30 s, whatever the worker does
    t0 = time.monotonic()
    d.proc.send_signal(15)
    replies = [read_reply(s) for s in dups]
    try:
        d.proc.wait(timeout=30)
        rc = d.proc.returncode
    except Exception:  # noqa: BLE001 - report and clean up
        rc = None
        d.kill()
    waited = time.monotonic() - t0
    T.ok(rc == 0, "SIGTERM with a wedged worker: kcsd exits 0 on its own (%.1f s)" % waited,
         (rc, d.log()[-2000:]))
    T.ok(all(st == 503 and err_code(j) == "shutting_down" for st, j in replies),
         "the parked requests get 503 shutting_down", replies)
    T.ok(re.search(r"shutdown_grace_s \(2 s\) is over with 1 job\(s\) running", d.log()),
         "the log says the wedged job was abandoned", d.log()[-1500:])
    read_reply(leader)
    d.proc = None
    d._log.close()

    # the store reopens clean and still holds the kernel compiled before
    d2 = Kcsd(args.kcsd, state_dir=state)
    d2.start()
    st, h, j, _ = compile_(d2, hang_graph)
    T.ok(st == 200 and j and j.get("cache") == "hit"
         and j.get("kernel_id") == (j_same or {}).get("kernel_id"),
         "reopened: the kernel compiled before is a hit", (st, j and j.get("cache")))
    rc2 = d2.stop(check=False)
    T.ok(rc2 == 0, "reopened daemon stops cleanly", d2.log()[-1500:])
    T.ok("rolled back" not in d2.log() and "corrupt" not in d2.log().lower(),
         "reopened: no recovery or corruption in the log", d2.log()[-1500:])
    d2.cleanup()
    d.cleanup()

    # ?inject without --test-fault-injection; started pinned to one CPU, the
    # default worker count follows the affinity mask, not the host's CPUs
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(mask)})
    with Kcsd(args.kcsd) as d3:
        os.sched_setaffinity(0, mask)  # kcsd inherited the one-CPU mask
        st, h, j, _ = compile_(d3, hang_graph, "?inject=hang")
        T.ok(st == 400 and err_code(j) == "bad_request" and j["error"].get("where") == "?inject",
             "?inject without test_fault_injection: 400 naming ?inject", (st, j))
        st, h, j, _ = jrequest(d3, "GET", "/v1/stats")
        T.ok(st == 200 and j["queue"]["workers"] == 1,
             "pinned to one CPU: workers 0 means one worker (the affinity mask)",
             (st, j and j.get("queue")))
    sys.exit(T.done())


if __name__ == "__main__":
    main()
