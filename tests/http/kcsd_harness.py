"""kcsd_harness - start and stop a kcsd daemon for black-box tests.

    with Kcsd("/path/to/kcsd") as d:            # fresh temp state dir
        urllib.request.urlopen(d.url + "/healthz")

    with Kcsd(binary, state_dir=dir, extra_args=["--workers", "2"]) as d:
        ...

The daemon listens on 127.0.0.1 with an ephemeral port, which it writes to
--port-file; the harness waits for that file and for GET /healthz, then
yields. On exit it sends SIGTERM and asserts exit code 0. The daemon's
stderr (its log) goes to d.log_path; d.log() returns it so far.

Signed artifacts: unless trust_keys=False, the daemon's /v1/keys are
appended to one trusted-keys file per test process (d.trusted_keys), and
$KCS_TRUSTED_KEYS is pointed at it unless the test set it, so the clients
(Python and CLI) accept this daemon's kernels. TLS: tls_ca="ca.pem" makes
the harness talk https (the test passes --tls-cert-file/--tls-key-file).
Standard library only.
"""

import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request

__all__ = ["Kcsd", "trusted_keys_file"]

_trust_file = None


def trusted_keys_file():
    """This process's trusted-keys file (created empty on first use)."""
    global _trust_file
    if _trust_file is None:
        d = tempfile.mkdtemp(prefix="kcs-trust-")
        _trust_file = os.path.join(d, "trusted_keys")
        open(_trust_file, "a").close()
    return _trust_file


class Kcsd:
    def __init__(self, binary, state_dir=None, extra_args=(), start_timeout=30.0,
                 stop_timeout=60.0, trust_keys=True, tls_ca=None):
        self.binary = binary
        self.trust_keys = trust_keys
        self.tls_ca = tls_ca
        self.ssl_context = ssl.create_default_context(cafile=tls_ca) if tls_ca else None
        self.trusted_keys = None
        self.extra_args = list(extra_args)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._tmp = tempfile.mkdtemp(prefix="kcsd-test-")
        self.state_dir = state_dir or os.path.join(self._tmp, "state")
        self.port_file = os.path.join(self._tmp, "port")
        self.log_path = os.path.join(self._tmp, "kcsd.log")
        self.proc = None
        self.port = None
        self.url = None
        self.returncode = None

    # -- lifecycle --------------------------------------------------------
    def start(self):
        args = [self.binary, "--listen", "127.0.0.1:0", "--state-dir", self.state_dir,
                "--port-file", self.port_file] + self.extra_args
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("kcsd exited with %d during start-up:\n%s"
                                   % (self.proc.returncode, self.log()))
            try:
                with open(self.port_file) as f:
                    text = f.read().strip()
                if text:
                    self.port = int(text)
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        if self.port is None:
            self.kill()
            raise RuntimeError("kcsd did not write its port file:\n" + self.log())
        self.url = "%s://127.0.0.1:%d" % ("https" if self.tls_ca else "http", self.port)
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2,
                                            context=self.ssl_context) as r:
                    if r.status == 200:
                        if self.trust_keys:
                            self._trust()
                        return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError("kcsd did not answer /healthz:\n" + self.log())

    def _trust(self):
        with urllib.request.urlopen(self.url + "/v1/keys", timeout=10,
                                    context=self.ssl_context) as r:
            keys = json.loads(r.read())["keys"]
        self.trusted_keys = trusted_keys_file()
        with open(self.trusted_keys) as f:
            have = f.read()
        with open(self.trusted_keys, "a") as f:
            for k in keys:
                line = "%s %s\n" % (k["key_id"], k["public_key"])
                if line not in have:
                    f.write(line)
        if os.environ.get("KCS_TRUSTED_KEYS") in (None, "", self.trusted_keys):
            os.environ["KCS_TRUSTED_KEYS"] = self.trusted_keys

    def stop(self, check=True):
        """SIGTERM, wait, and (check=True) assert a clean exit code 0."""
        if self.proc is None:
            return self.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.returncode = self.proc.returncode
                self.proc = None
                self._log.close()
                raise AssertionError("kcsd did not stop within %.0fs of SIGTERM:\n%s"
                                     % (self.stop_timeout, self.log()))
        self.returncode = self.proc.returncode
        self.proc = None
        self._log.close()
        if check:
            assert self.returncode == 0, ("kcsd exited with %d:\n%s"
                                          % (self.returncode, self.log()))
        return self.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc is not None:
            self.returncode = self.proc.returncode
            self._log.close()
        self.proc = None

    def log(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def cleanup(self):
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.stop(check=True)
            else:
                self.kill()
        finally:
            if exc_type is None:
                self.cleanup()
        return False
