#!/usr/bin/python3
"""test_tls.py - kcsd over HTTPS (libmicrohttpd + GnuTLS).

Makes a throw-away CA and a server certificate for 127.0.0.1 with the
`openssl` command in a temp dir, starts kcsd with tls_cert_file and
tls_key_file, and runs HTTP checks over https through the Python client
(Client(url, cacert=...)) and the kcs CLI (--cacert / $KCS_CACERT):
health, version, a compile of a small inline graph (miss, then hit), the
object bytes, the metadata, an error status; then checks that a client
without the CA fails verification, that plain http to the TLS port gets no
answer, and that an unreadable certificate file stops kcsd with exit 2
naming the file.

usage: test_tls.py --kcsd path/to/kcsd --kcs path/to/kcs
"""

import argparse
import base64
import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
from kcsd_harness import Kcsd  # noqa: E402
from tap import T  # noqa: E402
import kcs_client as kc  # noqa: E402

ok = T.ok


def graph():
    def t(n, formal=None):
        d = {"data_type": "float32", "format": "DefaultFormat", "shape": [8, 16],
             "tensor_name": n}
        if formal:
            d["name"] = formal
        return d
    return {
        "composite": True, "composite_graph": "tls.1", "id": 0, "op": "Fused_Add_tls",
        "platform": "AKG", "process": "cpu", "version": 1,
        "input_desc": [[t("input_0")], [t("input_1")]],
        "output_desc": [t("output_0_0")],
        "op_desc": [{"name": "Add", "attr": None, "impl_path": "",
                     "input_desc": [[t("input_0", "input_0")], [t("input_1", "input_1")]],
                     "output_desc": [t("output_0_0", "output_0")]}],
    }


def openssl(*args, cwd):
    p = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), p.stderr))


def make_pki(d):
    """ca.pem (self-signed CA) and server.pem/server.key for IP 127.0.0.1."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=kcs test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
            cwd=d)
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    # a second CA that did not sign the server certificate
    openssl("req", "-x509", *ec, "-keyout", "other.key", "-out", "other.pem", "-days", "2",
            "-subj", "/CN=another CA", cwd=d)
    return (os.path.join(d, n) for n in ("ca.pem", "server.pem", "server.key", "other.pem"))


def cli(opt, url, *args, env=None):
    e = dict(os.environ)
    e.pop("KCS_SERVER", None)
    e.pop("KCS_CACERT", None)
    e.update(env or {})
    p = subprocess.run([opt.kcs] + list(args) + ["--server", url], capture_output=True, env=e,
                       timeout=600)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def check_python(d, ca, other):
    c = kc.Client(d.url, cacert=ca)
    st, h, body = c.request("GET", "/healthz")
    ok(st == 200 and json.loads(body).get("status") == "ok", "python: GET /healthz over https",
       body)
    v = c.version()
    ok(v.get("kcsd_version") and v.get("auth") == "protected-mode", "python: GET /v1/version",
       v)
    k = c.compile(graph(), target="cpu")
    ok(isinstance(k, kc.Kernel) and k.cache == "miss",
       "python: compile over https (verified and loaded)", k.cache)
    import numpy as np
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    (y,) = k(x, x)
    ok(np.array_equal(y, x + x), "python: the kernel runs")
    raw = c.compile_raw(graph(), target="cpu")
    ok(raw.get("cache") == "hit" and raw.get("kernel_id") == k.kernel_id,
       "python: second compile is a hit", raw.get("cache"))
    obj = c.object(k.kernel_id)
    ok(hashlib.sha256(obj).hexdigest() == k.meta["object_sha256"] and
       obj == base64.b64decode(raw["object_base64"]),
       "python: GET /v1/kernels/{id}/object bytes over https")
    meta = c.kernel(k.kernel_id)
    ok(meta.get("signature", {}).get("key_id"), "python: GET /v1/kernels/{id} is signed", meta)
    try:
        c.kernel("0" * 64)
        e = None
    except kc.KcsError as ex:
        e = ex
    ok(e is not None and e.status == 404 and e.code == "not_found",
       "python: an error status (404) over https", e)
    try:
        kc.Client(d.url, cacert=ca).request("POST", "/v1/compile", b"{", "application/json")
        e = None
    except kc.KcsError as ex:
        e = ex
    ok(e is not None and e.status == 400, "python: a 400 over https", e)
    ok(kc.Client(d.url, cacert=ca).load(k.kernel_id).kernel_id == k.kernel_id,
       "python: Client.load over https")
    for what, cafile in (("no CA", None), ("another CA", other)):
        try:
            kc.Client(d.url, cacert=cafile).version()
            e = None
        except kc.KcsError as ex:
            e = ex
        ok(e is not None and e.code == "connect_failed" and "CERTIFICATE_VERIFY_FAILED" in str(e),
           "python: a client with %s fails certificate verification" % what, e)
    os.environ["KCS_CACERT"] = ca
    try:
        ok(kc.Client(d.url).version().get("kcsd_version"), "python: $KCS_CACERT is used")
    finally:
        del os.environ["KCS_CACERT"]
    return k


def check_cli(opt, d, ca, other, tmp, k):
    src = os.path.join(tmp, "g.json")
    with open(src, "w") as f:
        json.dump(graph(), f)
    rc, out, err = cli(opt, d.url, "version", "--cacert", ca)
    ok(rc == 0 and json.loads(out or b"{}").get("kcsd_version"), "cli: kcs version over https",
       err)
    so = os.path.join(tmp, "k.so")
    rc, out, err = cli(opt, d.url, "compile", src, "--target", "cpu", "-o", so, "--cacert", ca)
    meta = json.loads(out or b"{}")
    ok(rc == 0 and meta.get("cache") == "hit" and os.path.exists(so) and
       hashlib.sha256(open(so, "rb").read()).hexdigest() == meta.get("object_sha256"),
       "cli: kcs compile -o over https (a hit, verified, written)", err)
    so2 = os.path.join(tmp, "k2.so")
    rc, out, err = cli(opt, d.url, "get", k.kernel_id, "--object", "-o", so2,
                       env={"KCS_CACERT": ca})
    ok(rc == 0 and open(so2, "rb").read() == open(so, "rb").read(),
       "cli: kcs get --object over https with $KCS_CACERT", err)
    rc, out, err = cli(opt, d.url, "get", "0" * 64, "--cacert", ca)
    ok(rc == 1 and err.startswith("kcs: 404 not_found"), "cli: an error status over https", err)
    for what, extra in (("no CA", []), ("another CA", ["--cacert", other])):
        rc, out, err = cli(opt, d.url, "version", *extra)
        ok(rc == 1 and ("certificate" in err.lower() or "SSL" in err),
           "cli: a client with %s fails certificate verification" % what, err)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kcsd", required=True)
    ap.add_argument("--kcs", required=True)
    opt = ap.parse_args()
    if not shutil.which("openssl"):
        print("# SKIP openssl command absent")
        return 0
    tmp = tempfile.mkdtemp(prefix="kcs-tls-")
    try:
        ca, cert, key, other = make_pki(tmp)
        with Kcsd(opt.kcsd, tls_ca=ca,
                  extra_args=["--tls-cert-file", cert, "--tls-key-file", key]) as d:
            ok(d.url.startswith("https://"), "kcsd serves https", d.url)
            ok("(https," in d.log(), "the start-up log says https", d.log()[-400:])
            k = check_python(d, ca, other)
            check_cli(opt, d, ca, other, tmp, k)
            # plain http to the TLS port gets no HTTP answer
            s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                data = s.recv(100)
            except OSError:
                data = b""
            s.close()
            ok(not data.startswith(b"HTTP/1.1 200"), "plain http to the https port is not served",
               data)
        missing = os.path.join(tmp, "no-such-cert.pem")
        p = subprocess.run([opt.kcsd, "--listen", "127.0.0.1:0", "--state-dir",
                            os.path.join(tmp, "st2"), "--tls-cert-file", missing,
                            "--tls-key-file", key], capture_output=True, text=True, timeout=60)
        ok(p.returncode == 2 and missing in p.stderr,
           "an unreadable tls_cert_file -> exit 2 naming the file", p.stderr)
        p = subprocess.run([opt.kcsd, "--listen", "127.0.0.1:0", "--state-dir",
                            os.path.join(tmp, "st2"), "--tls-cert-file", cert],
                           capture_output=True, text=True, timeout=60)
        ok(p.returncode == 2 and "tls_key_file" in p.stderr,
           "tls_cert_file without tls_key_file -> exit 2", p.stderr)
        p = subprocess.run([opt.kcsd, "--listen", "127.0.0.1:0", "--state-dir",
                            os.path.join(tmp, "st2"), "--tls-cert-file", cert,
                            "--tls-key-file", os.path.join(tmp, "other.key")],
                           capture_output=True, text=True, timeout=60)
        ok(p.returncode == 1 and cert in p.stderr,
           "a key that does not match the certificate -> exit 1 naming the files", p.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return T.done()


if __name__ == "__main__":
    sys.exit(main())
