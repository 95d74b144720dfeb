#!/usr/bin/python3
"""test_cli.py - the kcs CLI and the Python client against a live kcsd.

Starts kcsd on an ephemeral port and checks: `kcs compile FILE -o out.so`
(default target = this machine) prints metadata without object_base64 and
writes an object whose SHA-256 matches; `kcs get ID --object` returns the
same bytes; `kcs get ID`, `--ir`, `--asm` and `kcs version` answer; server
errors print "kcs: <status> <code> at <where>: <message>" and exit 1; a
kernel for a CPU feature this machine lacks is refused with exit 3 (CLI) or
KcsFeatureError (Python) and nothing is written; concurrent calls share one
ThreadPoolRuntime. First, without the server, a C kernel built here probes
ThreadPoolRuntime (every task once, barrier, first error returned, workspace
freed). TAP output, then "N passed, M failed".

Usage: test_cli.py --kcsd BUILD/server/kcsd --kcs BUILD/clients/kcs
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
sys.path.insert(0, HERE)
import kcs_client as kc  # noqa: E402
import test_corpus as tc  # noqa: E402
from tap import T  # noqa: E402

# A small kernel that needs no corpus: y = Exp(x) * 2 + x, Cast to float16.
SMALL = {
    "composite": True, "op": "Fused_Exp_Mul_Add_Cast_test", "process": "cpu",
    "version": 1, "platform": "AKG", "composite_graph": "t", "id": 0,
    "input_desc": [[{"data_type": "float32", "format": "DefaultFormat",
                     "shape": [4, 33], "tensor_name": "input_0"}]],
    "output_desc": [{"data_type": "float16", "format": "DefaultFormat",
                     "shape": [4, 33], "tensor_name": "output_0_3"}],
    "op_desc": [
        {"name": "Exp", "attr": None, "impl_path": "",
         "input_desc": [[{"data_type": "float32", "format": "DefaultFormat",
                          "name": "input_0", "shape": [4, 33],
                          "tensor_name": "input_0"}]],
         "output_desc": [{"data_type": "float32", "format": "DefaultFormat",
                          "name": "output_0", "shape": [4, 33],
                          "tensor_name": "output_0_0"}]},
        {"name": "Mul", "attr": None, "impl_path": "",
         "input_desc": [[{"data_type": "float32", "format": "DefaultFormat",
                          "name": "input_0", "shape": [4, 33],
                          "tensor_name": "output_0_0"}],
                        [{"data_type": "float32", "format": "DefaultFormat",
                          "name": "input_1", "shape": [1],
                          "tensor_name": "input_1", "value": 2.0}]],
         "output_desc": [{"data_type": "float32", "format": "DefaultFormat",
                          "name": "output_0", "shape": [4, 33],
                          "tensor_name": "output_0_1"}]},
        {"name": "Add", "attr": None, "impl_path": "",
         "input_desc": [[{"data_type": "float32", "format": "DefaultFormat",
                          "name": "input_0", "shape": [4, 33],
                          "tensor_name": "output_0_1"}],
                        [{"data_type": "float32", "format": "DefaultFormat",
                          "name": "input_1", "shape": [4, 33],
                          "tensor_name": "input_0"}]],
         "output_desc": [{"data_type": "float32", "format": "DefaultFormat",
                          "name": "output_0", "shape": [4, 33],
                          "tensor_name": "output_0_2"}]},
        {"name": "Cast", "attr": [{"data_type": "str", "name": "dst_type",
                                   "value": "float16"}], "impl_path": "",
         "input_desc": [[{"data_type": "float32", "format": "DefaultFormat",
                          "name": "input_0", "shape": [4, 33],
                          "tensor_name": "output_0_2"}]],
         "output_desc": [{"data_type": "float16", "format": "DefaultFormat",
                          "name": "output_0", "shape": [4, 33],
                          "tensor_name": "output_0_3"}]},
    ],
}

# LLVM x86 features, rarest first: one of them is missing on most hosts.
RARE = ["avx512vp2intersect", "amx-fp16", "amx-tile", "avx512fp16",
        "avxvnniint8", "avx512bf16", "avx512vnni", "avx512f", "avx2"]

# A hand-written kernel of the ABI, for checking ThreadPoolRuntime itself:
# one region of 100 tasks, each marks its slot (detects tasks run twice or
# not at all) and task 57 fails with 7; workspace comes from rt->alloc.
RT_PROBE_C = r"""
#include "kcs_abi.h"
#include <stdlib.h>
typedef struct { int32_t *hits; int32_t *ws; } P;
static int32_t task(void *c, int64_t t, int64_t n)
{
	P *p = c;
	(void)n;
	__atomic_add_fetch(&p->hits[t], 1, __ATOMIC_SEQ_CST);
	p->ws[t] = (int32_t)t;
	return t == 57 ? 7 : 0;
}
int32_t rt_probe(const KcsRuntime *rt, void *const *args, const int64_t *dims)
{
	P p = {args[0], 0};
	(void)dims;
	p.ws = rt ? rt->alloc(rt->ctx, 400, 64) : malloc(400);
	int32_t rc = 0;
	if (rt)
		rc = rt->parallel_for(rt->ctx, task, &p, 100);
	else
		for (int64_t t = 0; t < 100; t++) {
			int32_t r = task(&p, t, 100);
			rc = rc ? rc : r;
		}
	for (int t = 0; t < 100 && rc == 7; t++)
		if (p.ws[t] != t)
			rc = 99; /* barrier broken: a task had not finished */
	if (rt)
		rt->free(rt->ctx, p.ws);
	else
		free(p.ws);
	return rc;
}
"""



def runtime_probe(tmp):
    """Checks ThreadPoolRuntime against a C kernel built here (skipped
    without a C compiler)."""
    import shutil
    import numpy as np
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        print("# SKIP runtime probe: no C compiler")
        return
    src = os.path.join(tmp, "probe.c")
    so = os.path.join(tmp, "probe.so")
    with open(src, "w") as f:
        f.write(RT_PROBE_C)
    p = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-I",
                        os.path.join(REPO, "clients", "include"), "-o", so,
                        src], capture_output=True, text=True)
    if not ok(p.returncode == 0, "runtime probe builds", p.stderr):
        return
    obj = open(so, "rb").read()
    meta = {"abi": "kcs-cpu-v1", "symbol": "rt_probe",
            "object_sha256": hashlib.sha256(obj).hexdigest(),
            "target": {"triple": "", "features": ""},
            "args": [{"index": 0, "role": "output", "tensor_name": "hits",
                      "dtype": "int32", "shape": [100]}]}
    k = kc.Kernel(meta, obj)
    for rt_threads in (None, 1, 4):
        hits = np.zeros(100, np.int32)
        rt = kc.ThreadPoolRuntime(rt_threads) if rt_threads else None
        try:
            k.run([hits], runtime=rt)
            rc = 0
        except kc.KcsError as e:
            rc = int(e.message.split()[-1])
        finally:
            if rt:
                rt.close()
        ok(rc == 7 and (hits == 1).all() and
           (rt is None or (rt.outstanding == 0 and rt.regions == 1)),
           "runtime probe (%s): every task once, barrier, first error 7"
           % ("rt=NULL" if rt is None else "%d threads" % rt_threads),
           "rc=%d hits=%s" % (rc, np.unique(hits)))


ok = T.ok


def kcs(opt, url, *args, env=None):
    e = dict(os.environ)
    e.pop("KCS_SERVER", None)
    e.update(env or {})
    cmd = [opt.kcs] + list(args)
    if url:
        cmd += ["--server", url]
    p = subprocess.run(cmd, capture_output=True, env=e, timeout=600)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--kcs", required=True)
    opt = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kcs-cli-")
    src = os.path.join(tmp, "small.info")
    with open(src, "w") as f:
        json.dump(SMALL, f)

    runtime_probe(tmp)

    rc, out, err = kcs(opt, None, "host-target")
    host = out.decode().strip()
    ok(rc == 0 and host == kc.host_target(),
       "kcs host-target matches the Python client",
       "%r vs %r %s" % (host, kc.host_target(), err))

    with tc.launcher()(opt.kcsd) as d:
        url = d.url
        so = os.path.join(tmp, "k.so")
        rc, out, err = kcs(opt, url, "compile", src, "-o", so)
        meta = {}
        try:
            meta = json.loads(out)
        except ValueError:
            pass
        ok(rc == 0 and "kernel_id" in meta and "object_base64" not in meta,
           "kcs compile -o prints metadata without object_base64",
           "rc=%d %s %s" % (rc, err, out[:300]))
        ok(meta.get("target", {}).get("name", "").startswith("x86_64") or
           not host.startswith("x86_64"),
           "default target is this machine's x86_64+features",
           json.dumps(meta.get("target")))
        data = open(so, "rb").read() if os.path.exists(so) else b""
        ok(data[:4] == b"\x7fELF" and
           hashlib.sha256(data).hexdigest() == meta.get("object_sha256"),
           "written object is an ELF with the advertised sha256")

        kid = meta.get("kernel_id", "none")
        so2 = os.path.join(tmp, "k2.so")
        rc, out, err = kcs(opt, url, "get", kid, "--object", "-o", so2)
        data2 = open(so2, "rb").read() if os.path.exists(so2) else b""
        ok(rc == 0 and data2 == data and data,
           "kcs get ID --object returns the same bytes", err)

        rc, out, err = kcs(opt, url, "get", kid)
        try:
            m2 = json.loads(out)
        except ValueError:
            m2 = {}
        ok(rc == 0 and m2.get("kernel_id") == kid,
           "kcs get ID prints the metadata", err + out.decode()[:300])
        for what in ("--ir", "--asm"):
            rc, out, err = kcs(opt, url, "get", kid, what)
            ok(rc == 0 and len(out) > 0, "kcs get ID %s" % what, err)

        rc, out, err = kcs(opt, url, "version")
        try:
            v = json.loads(out)
        except ValueError:
            v = {}
        ok(rc == 0 and "kcsd_version" in v and "host_target" in v,
           "kcs version", err + out.decode()[:300])

        rc, out, err = kcs(opt, None, "version",
                           env={"KCS_SERVER": url})
        ok(rc == 0, "server URL from $KCS_SERVER", err)

        bad = os.path.join(tmp, "bad.info")
        with open(bad, "w") as f:
            f.write("{not json")
        rc, out, err = kcs(opt, url, "compile", bad)
        ok(rc == 1 and re.match(r"kcs: 400 \S+ at \S*: .+", err),
           "server error printed as 'kcs: <status> <code> at <where>: "
           "<message>', exit 1", "rc=%d %s" % (rc, err))

        rc, out, err = kcs(opt, url, "get", "0" * 64)
        ok(rc == 1 and err.startswith("kcs: 404 "),
           "unknown kernel id: 404, exit 1", "rc=%d %s" % (rc, err))

        _, have = kc.host_features()
        lack = [f for f in RARE if f not in have]
        if lack and host.startswith("x86_64"):
            tgt = "x86_64+" + lack[0]
            so3 = os.path.join(tmp, "k3.so")
            rc, out, err = kcs(opt, url, "compile", src, "--target", tgt,
                               "-o", so3)
            ok(rc == 3 and not os.path.exists(so3) and lack[0] in err,
               "kernel needing %s is refused with exit 3" % lack[0],
               "rc=%d %s" % (rc, err))
            try:
                kc.Client(url).compile(src, target=tgt)
                refused = False
            except kc.KcsFeatureError:
                refused = True
            ok(refused, "Python client refuses it too (KcsFeatureError)")
        else:
            print("# SKIP feature refusal: this CPU has all of %s" % RARE)

        # The Python client end to end on the small kernel.
        import numpy as np
        k = kc.Client(url).compile(SMALL)
        x = np.linspace(-2, 2, 4 * 33, dtype=np.float32).reshape(4, 33)
        want = (np.exp(x.astype(np.float64)) * 2 + x).astype(np.float16)
        (y,) = k(x)
        with kc.ThreadPoolRuntime(2) as rt:
            (y2,) = k(x, runtime=rt)
        ok(y.dtype == np.float16 and
           np.allclose(y.astype(np.float64), want.astype(np.float64),
                       rtol=1e-2, atol=1e-2) and (y == y2).all(),
           "Python client runs the kernel (rt=NULL and 2 threads)")
        # Concurrent calls of one kernel sharing one runtime (section 5 of
        # docs/abi.md): 4 Python threads x 10 calls, each with its own output,
        # on a shape big enough to open parallel regions.
        import threading
        res, errs = [], []
        big = json.loads(json.dumps(SMALL).replace("[4, 33]", "[512, 1031]"))
        k = kc.Client(url).compile(big)
        x = np.linspace(-2, 2, 512 * 1031, dtype=np.float32).reshape(512, 1031)
        (y,) = k(x)

        def worker():
            try:
                for _ in range(10):
                    res.append(k(x, runtime=rt2)[0])
            except Exception as e:  # reported below
                errs.append(repr(e))
        with kc.ThreadPoolRuntime(3) as rt2:
            ts = [threading.Thread(target=worker) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            leaks, regions = rt2.outstanding, rt2.regions
        ok(not errs and len(res) == 40 and all((r == y).all() for r in res)
           and leaks == 0,
           "concurrent calls sharing one ThreadPoolRuntime (%d regions)"
           % regions, "%s leaks=%d" % (errs[:2], leaks))
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    return T.done(plan=True)


if __name__ == "__main__":
    sys.exit(main())
