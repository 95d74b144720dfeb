#!/usr/bin/python3
"""test_api.py - black-box tests of the kcsd v1 HTTP API.

Starts kcsd (kcsd_harness.Kcsd) on 127.0.0.1 with an ephemeral port and a
temporary state dir and talks plain HTTP to it (http.client, stdlib only):
health and version; compile of an elementwise Add (every response field);
cache hit; kernel parts (metadata, object, IR, asm) and the workload; bad
input (400, 413, 415, 422, 404, 405) without the daemon falling over; tuned
schedules (PUT, list, compile again); the compile hit memo (a repeated
body answered on the HTTP thread: same reply as the worker's hit,
invalidated by a schedule PUT, a deleted kernel, another ?target= or
Content-Type); a restart on the same state dir; 16 concurrent identical compiles compiled once; SIGTERM with requests in
flight; 503 when the queue is full; config errors exit 2. Prints "ok N - name" / "not ok N - name" lines and a final
"N passed, M failed"; exits 1 on any failure.

usage: test_api.py --kcsd path/to/kcsd
"""

import argparse
import base64
import copy
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402

HEX64 = re.compile(r"^[0-9a-f]{64}$")




def request(d, method, path, body=None, ctype="application/json", timeout=120):
    """Returns (status, headers dict (lower-case keys), body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=timeout)
    headers = {}
    if body is not None:
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        if ctype:
            headers["Content-Type"] = ctype
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    h = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, h, data


def jrequest(d, method, path, body=None, **kw):
    st, h, data = request(d, method, path, body, **kw)
    try:
        j = json.loads(data)
    except ValueError:
        j = None
    return st, h, j, data


def tensor(name, shape, dtype="float32", formal=None):
    t = {"data_type": dtype, "format": "DefaultFormat", "shape": shape, "tensor_name": name}
    if formal:
        t["name"] = formal
    return t


def elementwise(op, shape, name=None, dtype="float32"):
    """A composite graph: out = op(input_0, input_1)."""
    return {
        "composite": True,
        "composite_graph": "test.1",
        "id": 0,
        "op": name or ("Fused_%s_test" % op),
        "platform": "AKG",
        "process": "cpu",
        "version": 1,
        "input_desc": [[tensor("input_0", shape, dtype)], [tensor("input_1", shape, dtype)]],
        "output_desc": [tensor("output_0_0", shape, dtype)],
        "op_desc": [{
            "name": op,
            "attr": None,
            "impl_path": "",
            "input_desc": [[tensor("input_0", shape, dtype, "input_0")],
                           [tensor("input_1", shape, dtype, "input_1")]],
            "output_desc": [tensor("output_0_0", shape, dtype, "output_0")],
        }],
    }


def metric(d, name):
    """The value of an unlabelled /metrics sample (an int when whole), or None."""
    st, _, data = request(d, "GET", "/metrics")
    for line in data.decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            v = float(parts[1])
            return int(v) if v.is_integer() else v
    return None


def compile_(d, graph, query=""):
    return jrequest(d, "POST", "/v1/compile" + query, graph)


def err_code(j):
    try:
        return j["error"]["code"]
    except (TypeError, KeyError):
        return None


# ---- groups of checks ------------------------------------------------------

def check_basics(d):
    st, _, j, _ = jrequest(d, "GET", "/healthz")
    T.ok(st == 200 and j == {"status": "ok"}, "GET /healthz", j)
    st, _, j, _ = jrequest(d, "GET", "/v1/version")
    T.ok(st == 200 and j and all(k in j for k in
         ("kcsd_version", "build_id", "llvm_version", "host_target", "abi"))
         and j["abi"] == "kcs-cpu-v1" and isinstance(j["host_target"], str),
         "GET /v1/version fields", j)


def check_compile_fields(j, graph):
    T.ok(HEX64.match(str(j.get("kernel_id"))), "compile: kernel_id is 64 hex", j.get("kernel_id"))
    T.ok(HEX64.match(str(j.get("workload_key"))), "compile: workload_key is 64 hex")
    T.ok(j.get("name") == graph["op"], "compile: name is the body's op", j.get("name"))
    T.ok(isinstance(j.get("symbol"), str) and j["symbol"], "compile: symbol")
    t = j.get("target") or {}
    T.ok(all(isinstance(t.get(k), str) for k in ("name", "triple", "cpu", "features"))
         and t["name"] and t["triple"], "compile: target fields", t)
    T.ok(j.get("format") == "elf-shared-object", "compile: format")
    T.ok(j.get("abi") == "kcs-cpu-v1", "compile: abi")
    args = j.get("args") or []
    want = [(0, "input", "input_0"), (1, "input", "input_1"), (2, "output", "output_0_0")]
    T.ok([(a.get("index"), a.get("role"), a.get("tensor_name")) for a in args] == want
         and all(a.get("dtype") == "float32" and a.get("shape") == [4, 8] for a in args),
         "compile: args", args)
    s = j.get("schedule") or {}
    T.ok(s.get("format") == "kcs-schedule-v1" and s.get("workload_key") == j.get("workload_key")
         and s.get("target") == t.get("name") and isinstance(s.get("template"), str)
         and isinstance(s.get("knobs"), dict) and "measured" in s
         and isinstance(s.get("provenance"), dict) and s.get("source") == "default",
         "compile: schedule record (default)", s)
    T.ok(isinstance(j.get("compile_ms"), (int, float)), "compile: compile_ms")
    obj = base64.b64decode(j.get("object_base64") or "")
    T.ok(len(obj) > 0 and hashlib.sha256(obj).hexdigest() == j.get("object_sha256"),
         "compile: object_sha256 matches object_base64")
    T.ok(obj[:4] == b"\x7fELF", "compile: object is ELF", obj[:8])
    return obj


def check_compile_and_parts(d):
    g = elementwise("Add", [4, 8])
    st, h, j, raw = compile_(d, g)
    if not T.ok(st == 200 and j, "POST /v1/compile Add float32[4,8] -> 200", raw[:2000]):
        return None
    T.ok(j.get("cache") == "miss", "first compile is a miss", j.get("cache"))
    obj = check_compile_fields(j, g)
    kid, wkey = j["kernel_id"], j["workload_key"]

    st, h, j2, raw = compile_(d, g)
    T.ok(st == 200 and j2 and j2.get("cache") == "hit" and j2.get("kernel_id") == kid,
         "second compile is a hit with the same kernel_id", raw[:500])
    T.ok(j2 and isinstance(j2.get("request_ms"), (int, float)), "hit has request_ms")
    st, h, j3, raw = compile_(d, g, "?target=" + j["target"]["name"])
    T.ok(st == 200 and j3 and j3.get("kernel_id") == kid,
         "?target=<resolved name> gives the same kernel", raw[:300])

    st, h, m, raw = jrequest(d, "GET", "/v1/kernels/" + kid)
    T.ok(st == 200 and m and m.get("kernel_id") == kid and "object_base64" not in m
         and m.get("object_sha256") == j["object_sha256"], "GET /v1/kernels/{id}", raw[:300])
    st, h, data = request(d, "GET", "/v1/kernels/%s/object" % kid)
    T.ok(st == 200 and data == obj and h.get("content-type") == "application/octet-stream",
         "GET /v1/kernels/{id}/object bytes match", (st, h.get("content-type"), len(data)))
    st, h, data = request(d, "GET", "/v1/kernels/%s/ir" % kid)
    T.ok(st == 200 and len(data) > 0 and h.get("content-type", "").startswith("text/plain"),
         "GET /v1/kernels/{id}/ir", (st, data[:200]))
    st, h, data = request(d, "GET", "/v1/kernels/%s/asm" % kid)
    T.ok(st == 200 and len(data) > 0 and h.get("content-type", "").startswith("text/plain"),
         "GET /v1/kernels/{id}/asm", (st, data[:300]))
    st, h, data2 = request(d, "GET", "/v1/kernels/%s/asm" % kid)
    T.ok(st == 200 and data2 == data, "GET /v1/kernels/{id}/asm again (stored) is identical")
    st, h, w, raw = jrequest(d, "GET", "/v1/workloads/" + wkey)
    T.ok(st == 200 and w is not None, "GET /v1/workloads/{key} is JSON", raw[:300])
    return j


def raw_exchange(d, head, body_part=b"", timeout=30):
    """Sends raw bytes, returns the status line's code and the reply text."""
    s = socket.create_connection(("127.0.0.1", d.port), timeout=timeout)
    try:
        s.sendall(head)
        if body_part:
            try:
                s.sendall(body_part)
            except OSError:
                pass
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except OSError:
                break
            if not b:
                break
            chunks.append(b)
            if b"\r\n\r\n" in b"".join(chunks):
                text = b"".join(chunks)
                m = re.search(rb"content-length:\s*(\d+)", text, re.I)
                hdr_end = text.index(b"\r\n\r\n") + 4
                if m and len(text) - hdr_end >= int(m.group(1)):
                    break
        text = b"".join(chunks)
    finally:
        s.close()
    m = re.match(rb"HTTP/1\.[01] (\d{3})", text)
    return (int(m.group(1)) if m else None), text


def check_bad_input(d):
    good = json.dumps(elementwise("Add", [4, 8])).encode()
    st, h, j, raw = jrequest(d, "POST", "/v1/compile", good[: len(good) // 2])
    T.ok(st == 400 and err_code(j) == "malformed_json", "truncated JSON -> 400 malformed_json",
         raw[:300])
    T.ok(j and isinstance(j.get("error", {}).get("message"), str)
         and j["error"].get("status") == 400, "error body has status and message", raw[:300])

    g = elementwise("Add", [4, 8])
    g["op_desc"][0]["name"] = "NoSuchOpXyz"
    st, h, j, raw = compile_(d, g)
    T.ok(st == 422 and err_code(j) == "unsupported_op"
         and j["error"].get("where") == "/op_desc/0/name",
         "unknown op -> 422 unsupported_op at /op_desc/0/name", raw[:300])

    big = 2 ** 31
    g = elementwise("Add", [big, big, big])
    st, h, j, raw = compile_(d, g)
    T.ok(st == 422 and err_code(j) is not None, "element count overflowing int64 -> 422",
         raw[:300])

    # 100 MB declared honestly; the server must answer 413 from the headers
    # alone (sending body bytes it will never read would only race its
    # close against our read).
    n = 100 * 1024 * 1024
    head = ("POST /v1/compile HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % n).encode()
    t0 = time.monotonic()
    code, text = raw_exchange(d, head)
    T.ok(code == 413 and b"too_large" in text and time.monotonic() - t0 < 10,
         "100 MB body -> 413 too_large without reading it", text[:300])

    # chunked (no Content-Length) over the 1 MiB cap: dropped, then 413
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    c.request("POST", "/v1/compile", body=iter([b" " * 65536] * 32), encode_chunked=True,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    T.ok(r.status == 413 and b"too_large" in data, "2 MiB chunked body -> 413", (r.status, data))

    st, h, j, raw = jrequest(d, "POST", "/v1/compile", good, ctype="text/plain")
    T.ok(st == 415 and err_code(j) == "unsupported_media_type", "text/plain body -> 415",
         raw[:300])
    st, h, j, raw = jrequest(d, "POST", "/v1/compile", good,
                             ctype="application/json; charset=utf-8")
    T.ok(st == 200, "application/json; charset=utf-8 is accepted", raw[:300])

    st, h, j, raw = jrequest(d, "GET", "/v1/kernels/" + "0" * 64)
    T.ok(st == 404 and err_code(j) == "not_found", "unknown kernel id -> 404", raw[:300])
    for bad in ("/v1/kernels/xyz", "/v1/kernels/" + "g" * 64, "/v1/kernels/" + "0" * 65,
                "/v1/kernels/" + "0" * 64 + "/nope", "/v1/nothing", "/" + "a" * 4000):
        st, h, j, raw = jrequest(d, "GET", bad)
        T.ok(st == 404 and err_code(j) == "not_found", "GET %s -> 404" % bad[:40], raw[:200])
    st, h, j, raw = jrequest(d, "DELETE", "/v1/compile")
    T.ok(st == 405 and err_code(j) == "method_not_allowed" and "POST" in h.get("allow", ""),
         "DELETE /v1/compile -> 405 with Allow: POST", (st, h.get("allow"), raw[:200]))
    st, h, j, raw = jrequest(d, "GET", "/v1/compile")
    T.ok(st == 405, "GET /v1/compile -> 405")
    # invalid UTF-8 in the op name: the reply must still be valid JSON
    raw_body = good.replace(b'"Fused_Add_test"', b'"Fused_\xff\xfe_utf8"')
    st, h, data = request(d, "POST", "/v1/compile", raw_body)
    try:
        j = json.loads(data.decode("utf-8"))
    except ValueError:
        j = None
    T.ok(st in (200, 400, 422) and j is not None, "invalid UTF-8 in the body -> valid JSON reply",
         (st, data[:200]))

    # route fuzz: random paths never crash the daemon or get a 5xx
    import random
    rnd = random.Random(1234)
    alphabet = "/abcdefv1kernelsobjectirasmworkloadschedules0123456789%.-_~{}"
    prefixes = ["/v1/kernels/", "/v1/workloads/", "/v1/schedules/", "/v1/", "/", "//"]
    bad_status = []
    for _ in range(300):
        path = rnd.choice(prefixes) + "".join(rnd.choice(alphabet)
                                              for _ in range(rnd.randint(0, 80)))
        if rnd.random() < 0.3:
            path = path.rstrip("/") + "/" + "%064x" % rnd.getrandbits(256)
            if rnd.random() < 0.5:
                path += rnd.choice(["/object", "/ir", "/asm", "/x", "/"])
        method = rnd.choice(["GET", "GET", "PUT", "DELETE", "PATCH", "POST"])
        st, h, data = request(d, method, path, b"{}" if method in ("PUT", "POST") else None)
        if st >= 500 or st < 200:
            bad_status.append((method, path, st))
    T.ok(not bad_status, "300 fuzzed paths: no 5xx", bad_status[:5])

    st, _, j, _ = jrequest(d, "GET", "/healthz")
    T.ok(st == 200, "daemon still serving after bad input")


def check_schedules(d, first):
    wkey, target = first["workload_key"], first["target"]["name"]
    knobs = dict(first["schedule"]["knobs"])
    knobs["unroll"] = 4 if knobs.get("unroll") != 4 else 8
    rec = {
        "format": "kcs-schedule-v1",
        "workload_key": wkey,
        "target": target,
        "template": first["schedule"]["template"],
        "knobs": knobs,
        "measured": {"seconds": 1.5e-6, "gflops": 0.02},
        "provenance": {"by": "test_api", "at": "2026-11-30T10:00:00Z", "kcsd_version": "0.1.0"},
    }
    st, h, j, raw = jrequest(d, "PUT", "/v1/schedules/%s?target=%s" % (wkey, target), rec)
    T.ok(st in (200, 201) and j and j.get("knobs") == knobs and j.get("target") == target,
         "PUT /v1/schedules/{key} -> 201 with the stored record", raw[:500])
    st, h, j, raw = jrequest(d, "GET", "/v1/schedules/" + wkey)
    T.ok(st == 200 and j and len(j.get("records", [])) == 1
         and j["records"][0].get("knobs") == knobs, "GET /v1/schedules/{key} lists it", raw[:500])

    st, h, j, raw = compile_(d, elementwise("Add", [4, 8]))
    T.ok(st == 200 and j and j["schedule"].get("source") == "tuned"
         and j["schedule"].get("knobs") == knobs and j["kernel_id"] != first["kernel_id"]
         and j["schedule"].get("measured") == rec["measured"],
         "compile after PUT uses the tuned schedule (new kernel_id)", raw[:600])

    for field, value, where in (("knobs", {"unroll": 100000}, "/knobs"),
                                ("knobs", {"no_such_knob": 1}, "/knobs"),
                                ("template", "no-such-template", "/template"),
                                ("format", "kcs-schedule-v0", "/format"),
                                ("workload_key", "0" * 64, "/workload_key"),
                                ("measured", {"seconds": -1}, "/measured")):
        bad = copy.deepcopy(rec)
        bad[field] = value
        st, h, j, raw = jrequest(d, "PUT", "/v1/schedules/%s?target=%s" % (wkey, target), bad)
        T.ok(st == 422 and err_code(j) == "invalid_schedule"
             and str(j["error"].get("where", "")).startswith(where),
             "invalid schedule (%s) -> 422 invalid_schedule at %s" % (field, where), raw[:300])
    st, h, j, raw = jrequest(d, "PUT", "/v1/schedules/%s?target=%s" % ("1" * 64, target),
                             dict(rec, workload_key="1" * 64))
    T.ok(st == 404, "schedule for an unknown workload -> 404", raw[:300])
    return j


def fast_hits(d):
    """(hits, fast_hits) from GET /v1/stats."""
    st, _, j, raw = jrequest(d, "GET", "/v1/stats")
    c = (j or {}).get("cache", {})
    return c.get("hits", -1), c.get("fast_hits", -1)


def check_fast_path(d):
    """A body answered once is remembered (body, ?target, schedule
    generation) -> kernel_id; its repeats are hits answered on the HTTP
    thread, counted in cache.fast_hits (and in cache.hits)."""
    g = elementwise("Sub", [4, 8], name="Fused_Sub_fast")
    body = json.dumps(g).encode()
    st, h, j0, raw = jrequest(d, "POST", "/v1/compile", body)
    if not T.ok(st == 200 and j0 and j0.get("cache") == "miss", "fast path: first compile "
                "is a miss", raw[:300]):
        return
    kid = j0["kernel_id"]
    # the same kernel from a body spelled differently: a slow hit (a worker)
    # that records the memo entry; its repeat is a fast hit
    body2 = json.dumps(g, indent=1, sort_keys=True).encode()
    h0, f0 = fast_hits(d)
    st, h, slow, raw = jrequest(d, "POST", "/v1/compile", body2)
    h1, f1 = fast_hits(d)
    T.ok(st == 200 and slow and slow.get("cache") == "hit" and slow["kernel_id"] == kid
         and (h1, f1) == (h0 + 1, f0), "fast path: a new spelling of the body is a slow hit",
         (st, (h0, f0), (h1, f1), raw[:300]))
    st, hh, fast, raw = jrequest(d, "POST", "/v1/compile", body2)
    h2, f2 = fast_hits(d)
    T.ok(st == 200 and fast and fast.get("cache") == "hit" and (h2, f2) == (h1 + 1, f1 + 1)
         and hh.get("x-kcsd-cache") == "hit" and hh.get("content-type") == "application/json",
         "fast path: its repeat is a fast hit (counted in hits and fast_hits)",
         (st, (h1, f1), (h2, f2), hh, raw[:300]))
    if slow and fast:
        keys = list(slow.keys())
        T.ok(keys == list(fast.keys()) and "ms_hash" in fast
             and all(slow[k] == fast[k] for k in keys if k != "request_ms")
             and isinstance(fast.get("request_ms"), (int, float)),
             "fast path: the fast hit's JSON equals the slow hit's (fields, order, values "
             "but request_ms)", [k for k in keys if slow.get(k) != fast.get(k)])
        T.ok(raw.endswith(b"\"}\n") and b"\"ms_hash\":\"" in raw
             and raw.index(b"\"ms_hash\"") < raw.index(b"\"cache\"")
             < raw.index(b"\"request_ms\"") < raw.index(b"\"object_base64\""),
             "fast path: per-request fields last, in order", raw[-120:])
        obj = base64.b64decode(fast.get("object_base64") or "")
        T.ok(hashlib.sha256(obj).hexdigest() == fast.get("object_sha256"),
             "fast path: object_sha256 matches object_base64")

    # the memo is keyed by Content-Type-independent bytes, but the checks hold
    st, h, j, raw = jrequest(d, "POST", "/v1/compile", body2, ctype="text/plain")
    T.ok(st == 415, "fast path: a memoised body with the wrong Content-Type -> 415", raw[:200])
    # another ?target= is another entry
    st, h, j, raw = jrequest(d, "POST", "/v1/compile?target=no-such-arch", body2)
    T.ok(st == 422 and err_code(j) == "invalid_target" or (400 <= st < 500 and j and
                                                            "error" in j),
         "fast path: a memoised body with a bad ?target= -> 4xx error", (st, raw[:200]))
    _, f3 = fast_hits(d)
    st, h, jx, raw = jrequest(d, "POST", "/v1/compile?target=x86_64", body2)
    _, f4 = fast_hits(d)
    T.ok(st == 200 and jx and jx["target"]["name"] != j0["target"]["name"]
         and jx["kernel_id"] != kid and f4 == f3,
         "fast path: another ?target= is not answered from the entry of the first",
         (st, f3, f4, raw[:300]))
    st, h, jx2, raw = jrequest(d, "POST", "/v1/compile?target=x86_64", body2)
    _, f5 = fast_hits(d)
    T.ok(st == 200 and jx2 and jx2.get("cache") == "hit" and jx and
         jx2["kernel_id"] == jx["kernel_id"] and f5 == f4 + 1,
         "fast path: ... and has its own entry", (st, f4, f5, raw[:300]))

    # DELETE of the kernel: the memo entry names a missing kernel -> recompiled
    st, h, j, raw = jrequest(d, "DELETE", "/v1/kernels/" + kid)
    T.ok(st in (200, 204), "fast path: DELETE /v1/kernels/{id}", (st, raw[:200]))
    st, h, j, raw = jrequest(d, "POST", "/v1/compile", body2)
    T.ok(st == 200 and j and j.get("cache") == "miss" and j["kernel_id"] == kid,
         "fast path: after DELETE the memoised body is compiled again (a miss)",
         (st, raw[:300]))
    st, h, j, raw = jrequest(d, "POST", "/v1/compile", body2)
    _, f6 = fast_hits(d)
    T.ok(st == 200 and j and j.get("cache") == "hit" and f6 == f5 + 1,
         "fast path: ... then a fast hit again", (st, f5, f6, raw[:300]))

    # a tuned schedule PUT after the entry: the next request takes the slow
    # path and picks the tuned record
    knobs = dict(j0["schedule"]["knobs"])
    knobs["unroll"] = 4 if knobs.get("unroll") != 4 else 8
    rec = {"format": "kcs-schedule-v1", "workload_key": j0["workload_key"],
           "target": j0["target"]["name"], "template": j0["schedule"]["template"],
           "knobs": knobs, "measured": {"seconds": 1e-6},
           "provenance": {"by": "test_api", "at": "2026-11-30T10:00:00Z",
                          "kcsd_version": "0.1.0"}}
    st, h, j, raw = jrequest(d, "PUT", "/v1/schedules/%s?target=%s"
                             % (j0["workload_key"], j0["target"]["name"]), rec)
    T.ok(st in (200, 201), "fast path: PUT a tuned schedule", (st, raw[:300]))
    for b, what in ((body2, "slow-hit spelling"), (body, "first spelling")):
        st, h, j, raw = jrequest(d, "POST", "/v1/compile", b)
        T.ok(st == 200 and j and j["schedule"].get("source") == "tuned"
             and j["schedule"].get("knobs") == knobs and j["kernel_id"] != kid,
             "fast path: after a schedule PUT the memoised body (%s) gets the tuned "
             "kernel" % what, raw[:400])
    _, f7 = fast_hits(d)
    st, h, j2, raw = jrequest(d, "POST", "/v1/compile", body2)
    _, f8 = fast_hits(d)
    T.ok(st == 200 and j2 and j2["schedule"].get("source") == "tuned" and f8 == f7 + 1
         and j2.get("cache") == "hit", "fast path: ... and its repeat is a fast hit of the "
         "tuned kernel", (f7, f8, raw[:300]))

    # the store's object changed under a running daemon (the kernel's reply
    # parts are in memory): never served, whichever way it changed
    if not j2:
        return
    obj = base64.b64decode(j2["object_base64"])
    kid2 = j2["kernel_id"]
    path = os.path.join(d.state_dir, "data.mdb")
    for reframe in (True, False):
        what = "re-framed" if reframe else "a flipped byte"
        jrequest(d, "POST", "/v1/compile", body2)  # the reply parts are in memory
        with open(path, "r+b") as fh:
            data = bytearray(fh.read())
            n = 0
            at = data.find(obj)
            while at >= 40:
                bad = bytearray(obj)
                bad[len(bad) // 2] ^= 0x5A
                data[at:at + len(obj)] = bad
                if reframe and data[at - 32:at] == hashlib.sha256(obj).digest():
                    data[at - 32:at] = hashlib.sha256(bytes(bad)).digest()
                n += 1
                at = data.find(obj, at + 1)
            fh.seek(0)
            fh.write(data)
        if not T.ok(n >= 1, "fast path: the object's bytes are in the store (%s)" % what, n):
            return
        _, f9 = fast_hits(d)
        st, h, j, raw = jrequest(d, "POST", "/v1/compile", body2)
        _, f10 = fast_hits(d)
        got = base64.b64decode((j or {}).get("object_base64", ""))
        T.ok(st == 200 and got == obj and j["kernel_id"] == kid2
             and (f10 == f9 + 1 if not reframe else j.get("cache") == "miss"),
             "fast path: store tampered while running (%s): the genuine object is served (%s)"
             % (what, "from the verified copy in memory" if not reframe else
                "refused, compiled again"), (st, (j or {}).get("cache"), f9, f10, raw[:200]))
        st, h, data = request(d, "GET", "/v1/kernels/%s/object" % kid2)
        if reframe:
            T.ok(st == 200 and data == obj and "has SHA-256" in d.log(),
                 "fast path: store tampered while running (%s): logged, and the store holds "
                 "the genuine object again" % what, (st, len(data)))
        else:
            T.ok(st != 200 or data == obj, "fast path: store tampered while running (%s): "
                 "GET object never serves the tampered bytes" % what, (st, len(data)))
    # leave a sound store behind: the damaged kernel deleted, compiled again
    jrequest(d, "DELETE", "/v1/kernels/" + kid2)
    st, h, j, raw = jrequest(d, "POST", "/v1/compile", body2)
    T.ok(st == 200 and j and j.get("cache") == "miss" and
         base64.b64decode(j["object_base64"]) == obj,
         "fast path: a damaged kernel deleted is compiled again", (st, raw[:200]))


def check_concurrent(d):
    g = elementwise("Mul", [4, 8], name="Fused_Mul_concurrent")
    before = jrequest(d, "GET", "/v1/version")[2]["stats"]
    results = [None] * 16
    barrier = threading.Barrier(16)

    def worker(i):
        barrier.wait()
        try:
            results[i] = compile_(d, g)
        except Exception as e:  # noqa: BLE001
            results[i] = (None, None, None, repr(e).encode())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = all(r[0] == 200 and r[2] for r in results)
    T.ok(ok, "16 concurrent identical compiles -> all 200",
         [(r[0], r[3][:200]) for r in results if r[0] != 200])
    if not ok:
        return
    ids = {r[2]["kernel_id"] for r in results}
    T.ok(len(ids) == 1, "... all with the same kernel_id", ids)
    misses = sum(1 for r in results if r[2].get("cache") == "miss")
    T.ok(misses == 1, "... exactly one response is a miss", misses)
    after = jrequest(d, "GET", "/v1/version")[2]["stats"]
    T.ok(after["compiles"] - before["compiles"] == 1,
         "... and the daemon compiled once (stats.compiles +1)", (before, after))
    kid = ids.pop()
    n_logged = d.log().count("compiled kernel " + kid)
    T.ok(n_logged == 1, "... and logged one compile", n_logged)


def check_sigterm_in_flight(binary):
    d = Kcsd(binary, extra_args=["--workers", "1"])
    d.start()
    n = 16
    results = [None] * n
    socks = []
    try:
        for i in range(n):
            body = json.dumps(elementwise("Sub", [4, 8 + i], name="Fused_Sub_%d" % i)).encode()
            s = socket.create_connection(("127.0.0.1", d.port), timeout=60)
            s.sendall(("POST /v1/compile HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                       "\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                       % len(body)).encode() + body)
            socks.append(s)
        time.sleep(0.02)
        d.proc.send_signal(15)

        def reader(i):
            chunks = []
            try:
                while True:
                    b = socks[i].recv(65536)
                    if not b:
                        break
                    chunks.append(b)
            except OSError:
                pass
            results[i] = b"".join(chunks)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in socks:
            s.close()
    codes = [int(r[9:12]) if r and r.startswith(b"HTTP/1.1 ") else None for r in results]
    T.ok(all(c == 200 for c in codes), "SIGTERM: %d in-flight compiles all answered 200" % n,
         codes)
    try:
        rc = d.stop(check=False)
    except AssertionError as e:
        rc = str(e)
    T.ok(rc == 0, "SIGTERM: exit code 0", (rc, d.log()[-2000:]))
    m = re.search(r"shutting down: (\d+) request\(s\) in flight", d.log())
    T.ok(m and int(m.group(1)) > 0, "SIGTERM: requests really were in flight",
         m.group(0) if m else d.log()[-1000:])
    d.cleanup()


def check_overload(binary):
    """One worker, a queue of one: a burst of distinct compiles gets 503s."""
    with Kcsd(binary, extra_args=["--workers", "1", "--queue-depth", "1"]) as d:
        n = 12
        results = [None] * n
        barrier = threading.Barrier(n)

        def worker(i):
            g = elementwise("Maximum", [4, 8 + i], name="Fused_Max_%d" % i)
            barrier.wait()
            try:
                results[i] = compile_(d, g)
            except Exception as e:  # noqa: BLE001
                results[i] = (None, {}, None, repr(e).encode())

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = [r[0] for r in results]
        busy = [r for r in results if r[0] == 503]
        T.ok(all(c in (200, 503) for c in codes) and 200 in codes,
             "overload: every request is answered 200 or 503", codes)
        T.ok(busy and all(err_code(r[2]) == "overloaded" and r[1].get("retry-after") == "1"
                          for r in busy),
             "overload: 503 overloaded with Retry-After: 1", codes)
        st, _, _, _ = jrequest(d, "GET", "/healthz")
        T.ok(st == 200, "overload: still serving")


def check_config(binary):
    import subprocess
    r = subprocess.run([binary, "--version"], capture_output=True, timeout=30)
    T.ok(r.returncode == 0 and b"kcsd" in r.stdout, "--version exits 0", r)
    for bad in (["--workers", "abc"], ["--workers", "100000"], ["--no-such-flag", "1"],
                ["--log-level", "loud"], ["--config", "/nonexistent/kcsd.conf"],
                ["--max-body-bytes", "12Q"]):
        r = subprocess.run([binary] + bad, capture_output=True, timeout=30)
        T.ok(r.returncode == 2 and r.stderr, "bad config %s exits 2 with a message" % bad[0],
             (r.returncode, r.stderr[:200]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    args = ap.parse_args()
    first = None
    tmp = tempfile.mkdtemp(prefix="kcsd-api-")
    state_dir = os.path.join(tmp, "state")
    try:
        with Kcsd(args.kcsd, state_dir=state_dir, extra_args=["--max-body-bytes", "1M"]) as d:
            check_basics(d)
            first = check_compile_and_parts(d)
            check_bad_input(d)
            if first:
                check_schedules(d, first)
            check_fast_path(d)
            check_concurrent(d)
            tuned = compile_(d, elementwise("Add", [4, 8]))[2]
        with Kcsd(args.kcsd, state_dir=state_dir) as d2:
            st, h, j, raw = compile_(d2, elementwise("Add", [4, 8]))
            T.ok(st == 200 and j and j.get("cache") == "hit"
                 and tuned and j.get("kernel_id") == tuned.get("kernel_id"),
                 "after a restart on the same state dir: still a hit", raw[:300])
            if first:
                st, h, data = request(d2, "GET", "/v1/kernels/%s/object" % first["kernel_id"])
                T.ok(st == 200 and hashlib.sha256(data).hexdigest() == first["object_sha256"],
                     "after a restart: first kernel's object still served")
        check_sigterm_in_flight(args.kcsd)
        check_overload(args.kcsd)
        check_config(args.kcsd)
    except Exception as e:  # noqa: BLE001
        T.ok(False, "harness: %r" % (e,), str(e))
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return T.done()


if __name__ == "__main__":
    sys.exit(main())
