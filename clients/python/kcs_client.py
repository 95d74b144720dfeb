"""kcs_client - Python client for kcsd (API v1, ABI kcs-cpu-v1).

Compiles a MindSpore/AKG composite JSON on a kcsd server and runs the
returned x86-64 shared object in this process through ctypes:

    import numpy as np, kcs_client as kc
    k = kc.Client("http://127.0.0.1:8787").compile("Fused_ReLU.info")
    (y,) = k(np.random.rand(32, 64).astype(np.float32))
    with kc.ThreadPoolRuntime(4) as rt:
        (y,) = k(x, runtime=rt)

Only the standard library and numpy, plus Debian's python3-cryptography
for Ed25519 (libcrypto through ctypes when it is absent). The kernel calling
convention is described in clients/include/kcs_abi.h and docs/abi.md. A
kernel is only loaded when its object_sha256 matches, its signature verifies
with a trusted key (KcsSignatureError otherwise) and every CPU feature it was
compiled for is present on this machine (KcsFeatureError otherwise).

Trusted keys: a file of "<key_id> <base64 raw public key>" lines, by default
$KCS_TRUSTED_KEYS, then ~/.config/kcs/trusted_keys. Client(..., tofu=True)
fills an empty or absent file from the server's /v1/keys (trust on first
use, with a warning). HTTPS: Client("https://...", cacert="ca.pem") verifies
the server certificate against that CA ($KCS_CACERT); token= or $KCS_TOKEN
is sent as a bearer token.
"""

import ctypes
import ctypes.util
import hashlib
import json
import os
import platform
import queue
import ssl
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
import base64

import numpy as np

__all__ = [
    "Client", "Kernel", "ThreadPoolRuntime", "KcsError", "KcsFeatureError",
    "KcsSignatureError", "verify_artifact", "read_trusted_keys",
    "default_trusted_keys_path",
    "host_target", "host_features", "check_target", "to_bfloat16",
    "from_bfloat16", "DEFAULT_SERVER", "MAX_RESPONSE_BYTES",
]

DEFAULT_SERVER = "http://127.0.0.1:8787"
MAX_RESPONSE_BYTES = 256 << 20
ABI = "kcs-cpu-v1"


class KcsError(Exception):
    """An error reply of the server ({"error": {...}}) or a transport error.

    Attributes: status (HTTP status, 0 for transport errors), code, where,
    message.
    """

    def __init__(self, status, code, where, message):
        self.status = status
        self.code = code
        self.where = where
        self.message = message
        super().__init__("%s %s at %s: %s" % (status, code, where, message))


class KcsFeatureError(KcsError):
    """The kernel needs a CPU feature (or architecture) this machine lacks."""

    def __init__(self, message):
        super().__init__(0, "missing_cpu_feature", "client", message)


class KcsSignatureError(KcsError):
    """The artifact's signature is missing, by an untrusted key, or does not
    verify, or its object is not the one the signed metadata names."""

    def __init__(self, message):
        super().__init__(0, "bad_signature", "client", message)


# ---- signatures -----------------------------------------------------------

def default_trusted_keys_path():
    """$KCS_TRUSTED_KEYS, else $XDG_CONFIG_HOME (~/.config)/kcs/trusted_keys."""
    p = os.environ.get("KCS_TRUSTED_KEYS")
    if p:
        return p
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(
        os.path.expanduser("~"), ".config")
    return os.path.join(base, "kcs", "trusted_keys")


def key_id(public_raw):
    """First 16 hex characters of SHA-256 over the raw 32-byte key."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def read_trusted_keys(path):
    """{key_id: raw public key bytes} from a trusted-keys file ({} when the
    file does not exist). Lines: "<key_id> <base64 public key>"; '#'
    comments. A line whose key_id is not its key's is an error."""
    keys = {}
    try:
        f = open(path, encoding="utf-8")
    except FileNotFoundError:
        return keys
    with f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            try:
                raw = base64.b64decode(parts[1], validate=True)
            except (IndexError, ValueError):
                raw = b""
            if len(parts) != 2 or len(raw) != 32 or key_id(raw) != parts[0]:
                raise KcsSignatureError("%s:%d: expected \"<key_id> <base64 "
                                        "public key>\" with key_id = sha256"
                                        "(key)[:16]" % (path, n))
            keys[parts[0]] = raw
    return keys


def _write_trusted_keys(path, keys):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, mode=0o700, exist_ok=True)
    tmp = "%s.tmp%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        for kid, raw in keys.items():
            f.write("%s %s\n" % (kid, base64.b64encode(raw).decode()))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


_libcrypto = None


def _ed25519_verify(public_raw, sig, msg):
    """True when sig is a valid Ed25519 signature of msg."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import \
            Ed25519PublicKey
    except ImportError:
        return _ed25519_verify_ctypes(public_raw, sig, msg)
    try:
        Ed25519PublicKey.from_public_bytes(public_raw).verify(sig, msg)
        return True
    except (InvalidSignature, ValueError):
        return False


def _ed25519_verify_ctypes(public_raw, sig, msg):
    global _libcrypto
    if _libcrypto is None:
        name = ctypes.util.find_library("crypto")
        if not name:
            raise KcsSignatureError("no Ed25519 implementation: install "
                                    "python3-cryptography or libssl3")
        lib = ctypes.CDLL(name)
        lib.EVP_PKEY_new_raw_public_key.restype = ctypes.c_void_p
        lib.EVP_PKEY_new_raw_public_key.argtypes = [
            ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.EVP_MD_CTX_new.restype = ctypes.c_void_p
        lib.EVP_DigestVerifyInit.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_void_p]
        lib.EVP_DigestVerify.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                         ctypes.c_size_t, ctypes.c_char_p,
                                         ctypes.c_size_t]
        lib.EVP_MD_CTX_free.argtypes = [ctypes.c_void_p]
        lib.EVP_PKEY_free.argtypes = [ctypes.c_void_p]
        _libcrypto = lib
    lib = _libcrypto
    pkey = lib.EVP_PKEY_new_raw_public_key(1087, None, public_raw, 32)
    if not pkey:
        return False
    ctx = lib.EVP_MD_CTX_new()
    try:
        return (lib.EVP_DigestVerifyInit(ctx, None, None, None, pkey) == 1 and
                lib.EVP_DigestVerify(ctx, sig, len(sig), msg, len(msg)) == 1)
    finally:
        lib.EVP_MD_CTX_free(ctx)
        lib.EVP_PKEY_free(pkey)


def verify_artifact(meta, obj, trusted):
    """Checks an artifact before it is written or loaded: SHA-256(obj) is
    meta["object_sha256"] and meta["signature"] is a valid Ed25519
    signature, by a key in `trusted` ({key_id: raw key}), of
    "kcs-artifact-v1:<kernel_id>:<object_sha256>:<workload_key>:<symbol>".
    Raises KcsSignatureError."""
    digest = hashlib.sha256(obj).hexdigest()
    if digest != meta.get("object_sha256"):
        raise KcsSignatureError("object sha256 %s does not match object_sha256 %s"
                                % (digest, meta.get("object_sha256")))
    sig = meta.get("signature")
    if not isinstance(sig, dict) or not isinstance(sig.get("key_id"), str) \
            or not isinstance(sig.get("sig"), str):
        raise KcsSignatureError("kernel %s carries no signature"
                                % meta.get("kernel_id"))
    pub = trusted.get(sig["key_id"])
    if pub is None:
        raise KcsSignatureError(
            "kernel %s is signed by key %s, which is not in the trusted keys "
            "(add it, or use trust on first use on a fresh keys file)"
            % (meta.get("kernel_id"), sig["key_id"]))
    try:
        raw_sig = base64.b64decode(sig["sig"], validate=True)
    except ValueError:
        raw_sig = b""
    fields = [meta.get(k) for k in ("kernel_id", "object_sha256",
                                    "workload_key", "symbol")]
    if len(raw_sig) != 64 or not all(isinstance(x, str) for x in fields):
        raise KcsSignatureError("kernel %s: malformed signature or metadata"
                                % meta.get("kernel_id"))
    msg = ("kcs-artifact-v1:" + ":".join(fields)).encode()
    if not _ed25519_verify(pub, raw_sig, msg):
        raise KcsSignatureError("kernel %s: signature by key %s does not verify"
                                % (meta.get("kernel_id"), sig["key_id"]))


# ---- host target ----------------------------------------------------------

# /proc/cpuinfo "flags" spelling -> LLVM feature name (x86).
_X86_FLAGS = {
    "fpu": "x87", "cmov": "cmov", "cx8": "cx8", "mmx": "mmx", "fxsr": "fxsr",
    "sse": "sse", "sse2": "sse2", "lm": "64bit",
    "pni": "sse3", "sse3": "sse3", "ssse3": "ssse3", "sse4_1": "sse4.1",
    "sse4_2": "sse4.2", "sse4a": "sse4a", "popcnt": "popcnt", "avx": "avx",
    "avx2": "avx2", "fma": "fma", "fma4": "fma4", "xop": "xop", "f16c": "f16c",
    "bmi1": "bmi", "bmi2": "bmi2", "abm": "lzcnt", "lzcnt": "lzcnt",
    "movbe": "movbe", "aes": "aes", "pclmulqdq": "pclmul", "adx": "adx",
    "rdrand": "rdrnd", "rdseed": "rdseed", "fsgsbase": "fsgsbase",
    "invpcid": "invpcid", "sha_ni": "sha", "clflushopt": "clflushopt",
    "clwb": "clwb", "xsave": "xsave", "xsaveopt": "xsaveopt",
    "xsavec": "xsavec", "xsaves": "xsaves", "cx16": "cx16", "lahf_lm": "sahf",
    "3dnowprefetch": "prfchw", "prefetchw": "prfchw", "tbm": "tbm",
    "lwp": "lwp", "clzero": "clzero", "monitorx": "mwaitx",
    "wbnoinvd": "wbnoinvd", "rdpid": "rdpid", "pku": "pku",
    "gfni": "gfni", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq",
    "movdiri": "movdiri", "movdir64b": "movdir64b", "waitpkg": "waitpkg",
    "serialize": "serialize", "tsxldtrk": "tsxldtrk", "ptwrite": "ptwrite",
    "cldemote": "cldemote", "enqcmd": "enqcmd", "uintr": "uintr",
    "hreset": "hreset", "rtm": "rtm", "sgx": "sgx", "user_shstk": "shstk",
    "avx_vnni": "avxvnni", "avx_vnni_int8": "avxvnniint8",
    "avx_ifma": "avxifma", "avx_ne_convert": "avxneconvert",
    "cmpccxadd": "cmpccxadd", "prefetchi": "prefetchi",
    "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512bw": "avx512bw",
    "avx512dq": "avx512dq", "avx512vl": "avx512vl",
    "avx512_vnni": "avx512vnni", "avx512_bf16": "avx512bf16",
    "avx512_fp16": "avx512fp16", "avx512ifma": "avx512ifma",
    "avx512vbmi": "avx512vbmi", "avx512_vbmi2": "avx512vbmi2",
    "avx512_bitalg": "avx512bitalg", "avx512_vpopcntdq": "avx512vpopcntdq",
    "avx512_vp2intersect": "avx512vp2intersect",
    "amx_tile": "amx-tile", "amx_int8": "amx-int8", "amx_bf16": "amx-bf16",
    "amx_fp16": "amx-fp16", "amx_complex": "amx-complex", "rdpru": "rdpru",
    "mwaitx": "mwaitx", "avx512er": "avx512er", "avx512pf": "avx512pf",
    "pconfig": "pconfig", "sha512": "sha512", "sm3": "sm3", "sm4": "sm4",
}
# LLVM features implied by others (present whenever the key is).
_X86_IMPLIED = {"sse4.2": ["crc32"], "avx512f": ["evex512"], "fxsr": [],
                "xsave": []}
# Features not checked: CET shadow-stack instructions are NOPs on CPUs without
# it, and Linux shows the flag ("user_shstk") only when it enables user shadow
# stacks, so LLVM's CPUID-based host detection reports it where cpuinfo does
# not.
_UNCHECKED = {"shstk"}
# Features printed in the default target name (the ones codegen cares about).
_X86_TARGET = ["sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2",
               "fma", "f16c", "bmi", "bmi2", "lzcnt", "movbe", "aes",
               "pclmul", "adx", "avx512f", "avx512cd", "avx512bw",
               "avx512dq", "avx512vl", "avx512vnni", "avx512bf16",
               "avx512fp16", "avx512ifma", "avx512vbmi", "avx512vbmi2",
               "avx512bitalg", "avx512vpopcntdq", "gfni", "vaes",
               "vpclmulqdq", "avxvnni"]

# /proc/cpuinfo "Features" spelling -> LLVM feature name (aarch64).
_ARM_FLAGS = {
    "fp": "fp-armv8", "asimd": "neon", "aes": "aes", "pmull": "aes",
    "sha1": "sha2", "sha2": "sha2", "sha3": "sha3", "sha512": "sha3",
    "crc32": "crc", "atomics": "lse", "fphp": "fullfp16",
    "asimdhp": "fullfp16", "asimdrdm": "rdm", "asimddp": "dotprod",
    "sve": "sve", "sve2": "sve2", "i8mm": "i8mm", "bf16": "bf16",
    "fcma": "complxnum", "jscvt": "jsconv", "lrcpc": "rcpc", "dcpop": "ccpp",
    "sm3": "sm4", "sm4": "sm4", "asimdfhm": "fp16fml", "flagm": "flagm",
    "ssbs": "ssbs", "sb": "sb", "paca": "pauth", "bti": "bti", "mte": "mte",
    "frint": "fptoint", "rng": "rand",
}
_ARM_TARGET = ["neon", "fullfp16", "dotprod", "i8mm", "bf16", "sve", "sve2",
               "lse", "crc", "aes", "sha2"]

_host_cache = None


def _arch():
    m = platform.machine().lower()
    if m in ("amd64", "x86_64", "x64"):
        return "x86_64"
    if m in ("arm64", "aarch64"):
        return "aarch64"
    return m


def _cpuinfo_flags():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(val.split())
    except OSError:
        pass
    return set()


def host_features():
    """(arch, set of LLVM feature names this CPU has)."""
    global _host_cache
    if _host_cache is None:
        arch = _arch()
        flags = _cpuinfo_flags()
        feats = set()
        if arch == "x86_64":
            table = _X86_FLAGS
            feats.update(["64bit", "x87", "cmov", "cx8", "mmx", "fxsr", "sse",
                          "sse2"])
        elif arch == "aarch64":
            table = _ARM_FLAGS
            feats.update(["neon", "fp-armv8"])
        else:
            table = {}
        for fl in flags:
            if fl in table:
                feats.add(table[fl])
        for f in list(feats):
            feats.update(_X86_IMPLIED.get(f, []))
        _host_cache = (arch, frozenset(feats))
    return _host_cache


def host_target():
    """The target name for this machine, e.g. "x86_64+avx+avx2+fma"."""
    arch, feats = host_features()
    order = _X86_TARGET if arch == "x86_64" else _ARM_TARGET
    return arch + "".join("+" + f for f in order if f in feats)


def check_target(target):
    """Raises KcsFeatureError unless this CPU can run code for `target`,
    the "target" object of a compile response ({name, triple, cpu,
    features})."""
    arch, feats = host_features()
    triple = (target or {}).get("triple") or ""
    karch = triple.split("-")[0]
    if karch in ("amd64", "x86-64"):
        karch = "x86_64"
    if karch in ("arm64",):
        karch = "aarch64"
    if karch and karch != arch:
        raise KcsFeatureError("kernel is for %s, this machine is %s"
                              % (triple, arch))
    missing = []
    for f in ((target or {}).get("features") or "").split(","):
        f = f.strip()
        if not f.startswith("+"):
            continue
        name = f[1:]
        if name not in feats and name not in _UNCHECKED:
            missing.append(name)
    if missing:
        raise KcsFeatureError("kernel needs CPU features this machine lacks: "
                              + ", ".join(missing))


# ---- dtypes ---------------------------------------------------------------

_NP_DTYPES = {
    "float32": np.float32, "float16": np.float16, "float64": np.float64,
    "bfloat16": np.uint16, "int8": np.int8, "int16": np.int16,
    "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
    "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "bool": np.bool_,
}


def np_dtype(name):
    """numpy dtype holding elements of the wire dtype `name` (bfloat16 is
    carried as raw np.uint16 bits)."""
    try:
        return np.dtype(_NP_DTYPES[name])
    except KeyError:
        raise TypeError("dtype %r has no numpy equivalent" % name) from None


def to_bfloat16(x):
    """float32 array -> np.uint16 array of bfloat16 bits (round to nearest
    even; NaN stays NaN)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        r[nan] = ((b[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def from_bfloat16(u):
    """np.uint16 array of bfloat16 bits -> float32 array."""
    u = np.ascontiguousarray(u, dtype=np.uint16)
    return (u.astype(np.uint32) << 16).view(np.float32)


# ---- runtime --------------------------------------------------------------

TASKFN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64,
                          ctypes.c_int64)
PARALLEL_FOR = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p,
                                ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_int64)
ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                         ctypes.c_uint64)
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


class KcsRuntimeStruct(ctypes.Structure):
    """The C struct KcsRuntime of kcs_abi.h."""
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("ctx", ctypes.c_void_p),
        ("parallel_for", PARALLEL_FOR),
        ("alloc", ALLOC),
        ("free", FREE),
        ("num_threads", ctypes.c_int64),
    ]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.c_size_t, ctypes.c_size_t]
_libc.posix_memalign.restype = ctypes.c_int
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


class _Region:
    """One parallel_for call: tasks are handed out by a shared counter."""

    def __init__(self, fn, closure, ntasks, nworkers):
        self.fn = fn
        self.closure = closure
        self.ntasks = ntasks
        self.next = 0
        self.result = 0
        self.pending = nworkers
        self.lock = threading.Lock()
        self.done = threading.Event()


class ThreadPoolRuntime:
    """A KcsRuntime backed by `nthreads` Python threads.

    parallel_for hands the region's tasks to the worker threads, which call
    the task function through ctypes (the GIL is released during the call),
    and waits for all of them. alloc/free use posix_memalign/free. Counters
    for tests: regions, tasks_run, threads_used (thread idents that ran a
    task), allocs, frees, outstanding (blocks not yet freed), max_ntasks.
    Use as a context manager or call close(); the struct (`.struct`,
    `.pointer`) and callbacks live as long as this object.
    """

    def __init__(self, nthreads=None):
        if nthreads is None:
            nthreads = os.cpu_count() or 1
        if nthreads < 1:
            raise ValueError("nthreads must be >= 1")
        self.nthreads = int(nthreads)
        self._q = queue.Queue()
        self._stats = threading.Lock()
        self.regions = 0
        self.tasks_run = 0
        self.max_ntasks = 0
        self.threads_used = set()
        self.allocs = 0
        self.frees = 0
        self._blocks = set()
        self.errors = []
        self._closed = False
        # Keep the ctypes callback objects referenced for the struct's life.
        self._cb_pfor = PARALLEL_FOR(self._parallel_for)
        self._cb_alloc = ALLOC(self._alloc)
        self._cb_free = FREE(self._free)
        self.struct = KcsRuntimeStruct(1, 0, None, self._cb_pfor,
                                       self._cb_alloc, self._cb_free,
                                       self.nthreads)
        self.pointer = ctypes.pointer(self.struct)
        self._threads = [threading.Thread(target=self._worker, daemon=True,
                                          name="kcs-worker-%d" % i)
                         for i in range(self.nthreads)]
        for t in self._threads:
            t.start()

    @property
    def outstanding(self):
        with self._stats:
            return len(self._blocks)

    def _worker(self):
        while True:
            reg = self._q.get()
            if reg is None:
                return
            ran = 0
            try:
                task_fn = TASKFN(reg.fn)
                while True:
                    with reg.lock:
                        t = reg.next
                        if t >= reg.ntasks:
                            break
                        reg.next = t + 1
                    rc = task_fn(reg.closure, t, reg.ntasks)
                    ran += 1
                    if rc != 0:
                        with reg.lock:
                            if reg.result == 0:
                                reg.result = rc
            except BaseException as e:  # never let a worker die silently
                self.errors.append(repr(e))
                with reg.lock:
                    if reg.result == 0:
                        reg.result = -1
            finally:
                if ran:
                    with self._stats:
                        self.tasks_run += ran
                        self.threads_used.add(threading.get_ident())
                with reg.lock:
                    reg.pending -= 1
                    last = reg.pending == 0
                if last:
                    reg.done.set()

    def _parallel_for(self, ctx, fn, closure, ntasks):
        try:
            if self._closed or not fn:
                return -1
            if ntasks <= 0:
                return 0
            nw = min(self.nthreads, ntasks)
            reg = _Region(fn, closure, ntasks, nw)
            with self._stats:
                self.regions += 1
                self.max_ntasks = max(self.max_ntasks, ntasks)
            for _ in range(nw):
                self._q.put(reg)
            reg.done.wait()
            return reg.result
        except BaseException as e:
            self.errors.append(repr(e))
            return -1

    def _alloc(self, ctx, nbytes, align):
        try:
            a = max(int(align), ctypes.sizeof(ctypes.c_void_p))
            if a & (a - 1):
                return None
            p = ctypes.c_void_p()
            if _libc.posix_memalign(ctypes.byref(p), a, max(int(nbytes), 1)):
                return None
            with self._stats:
                self.allocs += 1
                self._blocks.add(p.value)
            return p.value
        except BaseException as e:
            self.errors.append(repr(e))
            return None

    def _free(self, ctx, p):
        try:
            if not p:
                return
            with self._stats:
                if p not in self._blocks:
                    self.errors.append("free of unknown block 0x%x" % p)
                    return
                self._blocks.discard(p)
                self.frees += 1
            _libc.free(p)
        except BaseException as e:
            self.errors.append(repr(e))

    def close(self):
        """Stops the worker threads. The runtime must not be in use."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._q.put(None)
        for t in self._threads:
            t.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- kernels --------------------------------------------------------------

KERNEL_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_void_p),
                             ctypes.c_void_p)


def _private_copy(data):
    """Writes `data` to a fresh private file that dlopen can map; returns the
    path (the caller unlinks it)."""
    dirs = [None, os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm",
            os.path.expanduser("~")]
    last = None
    for d in dirs:
        if d is not None and not os.path.isdir(d):
            continue
        try:
            fd, path = tempfile.mkstemp(prefix="kcs-", suffix=".so", dir=d)
        except OSError as e:
            last = e
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path
    raise OSError("no directory for a private kernel file: %s" % last)


class Kernel:
    """A compiled kernel loaded into this process.

    meta is the compile response without object_base64. Attributes:
    kernel_id, symbol, name, target, args (list of dicts), inputs/outputs
    (the args with role input/output), cache ("hit"/"miss").
    """

    def __init__(self, meta, obj, check_features=True):
        if meta.get("abi") != ABI:
            raise KcsError(0, "bad_abi", "client",
                           "kernel ABI %r, this client speaks %r"
                           % (meta.get("abi"), ABI))
        digest = hashlib.sha256(obj).hexdigest()
        if digest != meta.get("object_sha256"):
            raise KcsError(0, "bad_object", "client",
                           "object_sha256 mismatch: got %s, expected %s"
                           % (digest, meta.get("object_sha256")))
        if check_features:
            check_target(meta.get("target"))
        self.meta = meta
        self.kernel_id = meta.get("kernel_id")
        self.symbol = meta["symbol"]
        self.name = meta.get("name")
        self.target = meta.get("target")
        self.cache = meta.get("cache")
        self.args = sorted(meta["args"], key=lambda a: a["index"])
        self.inputs = [a for a in self.args if a["role"] == "input"]
        self.outputs = [a for a in self.args if a["role"] == "output"]
        self._dtypes = [np_dtype(a["dtype"]) for a in self.args]
        self._shapes = [tuple(int(d) for d in a["shape"]) for a in self.args]
        path = _private_copy(obj)
        try:
            self._lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        finally:
            os.unlink(path)
        self._fn = KERNEL_FN((self.symbol, self._lib))

    def _check(self, i, arr):
        a = self.args[i]
        if not isinstance(arr, np.ndarray):
            raise TypeError("arg %d (%s): expected a numpy array"
                            % (i, a["tensor_name"]))
        if arr.dtype != self._dtypes[i]:
            raise TypeError("arg %d (%s): dtype %s, kernel wants %s (%s)"
                            % (i, a["tensor_name"], arr.dtype, a["dtype"],
                               self._dtypes[i]))
        if tuple(arr.shape) != self._shapes[i] and \
                arr.size != int(np.prod(self._shapes[i], dtype=np.int64)):
            raise ValueError("arg %d (%s): shape %s, kernel wants %s"
                             % (i, a["tensor_name"], arr.shape,
                                list(self._shapes[i])))
        if not arr.flags.c_contiguous:
            raise ValueError("arg %d (%s): not C-contiguous"
                             % (i, a["tensor_name"]))
        if a["role"] == "output" and not arr.flags.writeable:
            raise ValueError("arg %d (%s): output not writeable"
                             % (i, a["tensor_name"]))

    def run(self, args, runtime=None):
        """Calls the kernel on caller-allocated arrays: inputs then outputs,
        in args order, each C-contiguous with the exact dtype and shape (or
        element count). Outputs are written in place. Raises KcsError when
        the kernel returns non-zero."""
        if len(args) != len(self.args):
            raise ValueError("kernel takes %d arrays (%d in, %d out), got %d"
                             % (len(self.args), len(self.inputs),
                                len(self.outputs), len(args)))
        for i, arr in enumerate(args):
            self._check(i, arr)
        for i in range(len(args)):
            for j in range(i):
                if self.args[i]["role"] == "output" or \
                        self.args[j]["role"] == "output":
                    if np.may_share_memory(args[i], args[j]):
                        raise ValueError("args %d and %d overlap" % (j, i))
        ptrs = (ctypes.c_void_p * max(len(args), 1))(
            *[a.ctypes.data for a in args])
        rt = None
        if runtime is not None:
            rt = ctypes.cast(runtime.pointer, ctypes.c_void_p)
        rc = self._fn(rt, ptrs, None)
        if rc != 0:
            raise KcsError(0, "kernel_failed", self.symbol,
                           "kernel returned %d" % rc)

    def __call__(self, *inputs, runtime=None):
        """Runs the kernel on input arrays (converted to C-contiguous; their
        dtype must match exactly) and returns a list of new output arrays."""
        if len(inputs) != len(self.inputs):
            raise ValueError("kernel takes %d inputs, got %d"
                             % (len(self.inputs), len(inputs)))
        ins = []
        for k, x in enumerate(inputs):
            i = self.inputs[k]["index"]
            if not isinstance(x, np.ndarray):
                x = np.asarray(x, dtype=self._dtypes[i])
            if x.dtype != self._dtypes[i]:
                self._check(i, x)
            x = np.ascontiguousarray(x).reshape(self._shapes[i])
            ins.append(x)
        outs = [np.empty(self._shapes[a["index"]], self._dtypes[a["index"]])
                for a in self.outputs]
        self.run(ins + outs, runtime=runtime)
        return outs


# ---- HTTP client ----------------------------------------------------------

def _read_capped(resp, cap):
    n = resp.headers.get("Content-Length")
    if n is not None and int(n) > cap:
        raise KcsError(0, "response_too_large", "client",
                       "response of %s bytes exceeds %d" % (n, cap))
    data = resp.read(cap + 1)
    if len(data) > cap:
        raise KcsError(0, "response_too_large", "client",
                       "response exceeds %d bytes" % cap)
    return data


class Client:
    """HTTP(S) client of one kcsd server. url defaults to $KCS_SERVER, then
    http://127.0.0.1:8787. token (default $KCS_TOKEN) is sent as a bearer
    token. cacert (default $KCS_CACERT): a PEM CA file the server
    certificate must chain to (https). trusted_keys: path of the trusted
    keys file (default default_trusted_keys_path()); tofu=True fills it
    from /v1/keys when it is empty or absent. Responses are capped at
    MAX_RESPONSE_BYTES."""

    def __init__(self, url=None, timeout=600, cacert=None, token=None,
                 trusted_keys=None, tofu=False):
        self.url = (url or os.environ.get("KCS_SERVER") or
                    DEFAULT_SERVER).rstrip("/")
        self.timeout = timeout
        self.token = token if token is not None else os.environ.get("KCS_TOKEN")
        cacert = cacert or os.environ.get("KCS_CACERT") or None
        self._ctx = None
        if self.url.startswith("https:"):
            self._ctx = ssl.create_default_context(cafile=cacert)
        self.trusted_keys_path = trusted_keys or default_trusted_keys_path()
        self.tofu = tofu

    def request(self, method, path, body=None, ctype=None):
        """(status, headers, body bytes); raises KcsError for error replies."""
        req = urllib.request.Request(self.url + path, data=body,
                                     method=method)
        if ctype:
            req.add_header("Content-Type", ctype)
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout,
                                        context=self._ctx) as r:
                return r.status, r.headers, _read_capped(r, MAX_RESPONSE_BYTES)
        except urllib.error.HTTPError as e:
            raw = e.read(1 << 20)
            try:
                err = json.loads(raw)["error"]
                raise KcsError(err.get("status", e.code), err.get("code"),
                               err.get("where"), err.get("message")) from None
            except (ValueError, KeyError, TypeError):
                raise KcsError(e.code, "http_error", "client",
                               raw[:200].decode("utf-8", "replace")) from None
        except urllib.error.URLError as e:
            raise KcsError(0, "connect_failed", "client",
                           "%s: %s" % (self.url, e.reason)) from None

    def get_json(self, path):
        return json.loads(self.request("GET", path)[2])

    def compile_raw(self, src, target=None):
        """POSTs the composite JSON; returns the parsed response dict (with
        object_base64). target None = host_target()."""
        body = _body(src)
        t = host_target() if target is None else target
        path = "/v1/compile?target=" + urllib.parse.quote(t, safe="")
        return json.loads(self.request("POST", path, body,
                                       "application/json")[2])

    def compile(self, src, target=None, check_features=True):
        """Compiles `src` (JSON text, dict, bytes or a file path), verifies
        and loads the result. Returns a Kernel; raises KcsError,
        KcsSignatureError or KcsFeatureError."""
        meta = self.compile_raw(src, target)
        obj = base64.b64decode(meta.pop("object_base64"), validate=True)
        self.verify(meta, obj)
        return Kernel(meta, obj, check_features=check_features)

    def load(self, kernel_id, check_features=True):
        """Fetches a stored kernel (metadata and object), verifies and
        loads it."""
        meta = self.kernel(kernel_id)
        obj = self.object(kernel_id)
        self.verify(meta, obj)
        return Kernel(meta, obj, check_features=check_features)

    def keys(self):
        """The server's public keys (GET /v1/keys): a list of dicts."""
        return self.get_json("/v1/keys")["keys"]

    def trusted(self):
        """{key_id: raw key} of the trusted keys file; with tofu and an
        empty or absent file, first fills it from the server's /v1/keys
        (with a warning on stderr)."""
        keys = read_trusted_keys(self.trusted_keys_path)
        if keys or not self.tofu:
            return keys
        for k in self.keys():
            raw = base64.b64decode(k.get("public_key", ""), validate=True)
            if k.get("alg") == "ed25519" and len(raw) == 32 and \
                    key_id(raw) == k.get("key_id"):
                keys[k["key_id"]] = raw
        if keys:
            _write_trusted_keys(self.trusted_keys_path, keys)
            sys.stderr.write("kcs: warning: trust on first use: trusting the "
                             "key(s) %s of %s, stored in %s; check them out of "
                             "band\n" % (", ".join(keys), self.url,
                                         self.trusted_keys_path))
        return keys

    def verify(self, meta, obj):
        """verify_artifact against this client's trusted keys."""
        verify_artifact(meta, obj, self.trusted())

    def kernel(self, kernel_id):
        return self.get_json("/v1/kernels/" + urllib.parse.quote(kernel_id))

    def object(self, kernel_id):
        return self.request("GET", "/v1/kernels/%s/object"
                            % urllib.parse.quote(kernel_id))[2]

    def ir(self, kernel_id):
        return self.request("GET", "/v1/kernels/%s/ir"
                            % urllib.parse.quote(kernel_id))[2].decode()

    def asm(self, kernel_id):
        return self.request("GET", "/v1/kernels/%s/asm"
                            % urllib.parse.quote(kernel_id))[2].decode()

    def version(self):
        return self.get_json("/v1/version")


def _body(src):
    if isinstance(src, dict):
        return json.dumps(src).encode()
    if isinstance(src, (bytes, bytearray)):
        return bytes(src)
    if isinstance(src, os.PathLike):
        with open(src, "rb") as f:
            return f.read()
    if isinstance(src, str):
        if src.lstrip().startswith("{"):
            return src.encode()
        with open(src, "rb") as f:
            return f.read()
    raise TypeError("compile() takes JSON text, a dict, bytes or a path")
