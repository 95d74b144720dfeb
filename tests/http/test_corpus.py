#!/usr/bin/python3
"""test_corpus.py - end-to-end acceptance test over the real AKG corpus.

Starts kcsd on an ephemeral loopback port with a temporary state dir. For
every corpus file whose ops and dtypes are all in the first slice it
compiles the file (?target=cpu), runs the kernel through the Python client
(rt=NULL, and a 3-thread ThreadPoolRuntime with misaligned inputs and
garbage-filled outputs), and compares with a float64 numpy interpretation of
the composite JSON written here. Then it checks that a second POST is a
cache hit with the same kernel_id, and again after restarting kcsd on the
same state dir. Each kernel runs in a forked child, so a crashing kernel
fails its file only; if kcsd dies, the file fails and kcsd is restarted.
The object must need only libc/libm, bool outputs hold only 0/1, and the
runtime's workspace must be freed. Files outside the slice are POSTed too:
kcsd must answer them (kernel or 4xx) without dying or a 5xx. Output: one
TAP line per file, the skipped files with the reason and kcsd's answer, and
a final "N passed, M failed" line; exit 1 on any failure.

With --fixture DIR (what ctest passes: the corpus fixture of
tests/corpus.cmake, made by the kcsd under test) nothing is compiled
again: the objects and compile answers are the fixture's, kcsd starts on
a copy of the fixture's state dir, and the POST after the run must be a
hit with the same kernel_id and object (the fixture's kcsd compiled it, so
this is already a hit after a restart), as must the one after restarting.
Files outside the slice are checked on the fixture's answers.

Usage: test_corpus.py --kcsd BUILD/server/kcsd [--corpus DIR] [--only SUBSTR]
                      [--fixture DIR]
"""

import argparse
import base64
import glob
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
sys.path.insert(0, HERE)
import kcs_client as kc  # noqa: E402
import corpus_fixture  # noqa: E402

SLICE_OPS = set("""Add TensorAdd Sub Mul RealDiv Div Maximum Minimum Pow Neg
Abs Exp Log Sqrt Rsqrt Reciprocal Tanh Erf Square Floor Round Sign Greater
GreaterEqual Less LessEqual Equal NotEqual LogicalAnd LogicalOr LogicalNot
IsNan IsInf IsFinite Select Cast BroadcastTo Reshape ReduceSum ReduceMax
ReduceMin ReduceProd Transpose ExpandDims Tile StridedSlice Assign
InplaceAssign OneHot Gather Concat MatMul BatchMatMul ElemAny ElemAll
Conv2D Sin Cos Asin ASin ACos Atan Atan2 Asinh Acosh Expm1 AddN""".split())
SLICE_DTYPES = {"float32", "float16", "int32", "bool"}
# Ops whose inputs after the first are attributes (v2 value inputs).
ATTR_TAIL_OPS = {"Cast", "Reshape", "BroadcastTo", "ReduceSum", "ReduceMax",
                 "ReduceMin", "ReduceProd", "Transpose", "ExpandDims", "Tile",
                 "StridedSlice"}
# v2 value inputs that are attrs (akg-format 4.3), after the first input.
ATTR_TAIL_NAMES = {"ReduceSum": ["axis"], "ReduceMax": ["axis"],
                   "ReduceMin": ["axis"], "ReduceProd": ["axis"],
                   "Transpose": ["perm"], "ExpandDims": ["axis"],
                   "Tile": ["multiples"],
                   "StridedSlice": ["begin", "end", "strides"]}
# v2 value inputs that are attrs at other positions.
ATTR_POS = {"OneHot": {1: "depth"}, "Gather": {2: "axis"}}
REDUCE_OPS = {"ReduceSum": np.sum, "ReduceMax": np.max, "ReduceMin": np.min,
              "ReduceProd": np.prod}
COMPARE_OPS = {"Greater", "GreaterEqual", "Less", "LessEqual", "Equal",
               "NotEqual"}
FLOAT = {"float32", "float16", "float64", "bfloat16"}


# ---- kcsd launcher ---------------------------------------------------------

try:
    from kcsd_harness import Kcsd  # written by the server work
except Exception:  # pragma: no cover - fallback until/unless it exists
    Kcsd = None


class _Kcsd:
    """Minimal launcher: kcsd --listen 127.0.0.1:0 --state-dir D
    --port-file F; url is http://127.0.0.1:<port>."""

    def __init__(self, binary, state_dir=None, extra_args=()):
        self.binary = binary
        self.own_dir = state_dir is None
        self.state_dir = state_dir or tempfile.mkdtemp(prefix="kcsd-state-")
        self.extra_args = list(extra_args)
        self.proc = None
        self.url = None

    def __enter__(self):
        self.tmp = tempfile.mkdtemp(prefix="kcsd-run-")
        port_file = os.path.join(self.tmp, "port")
        self.log_path = os.path.join(self.tmp, "kcsd.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [self.binary, "--listen", "127.0.0.1:0", "--state-dir",
             self.state_dir, "--port-file", port_file] + self.extra_args,
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with open(port_file) as f:
                    txt = f.read().strip()
                if txt:
                    self.url = "http://127.0.0.1:%d" % int(txt)
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        self.__exit__(None, None, None)
        raise RuntimeError("kcsd did not start (rc=%s):\n%s"
                           % (self.proc.returncode, self.log_tail()))

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def launcher():
    return Kcsd if Kcsd is not None else _Kcsd


# ---- corpus selection ------------------------------------------------------

def corpus_files(corpus):
    files = sorted(glob.glob(os.path.join(corpus, "*.info")) +
                   glob.glob(os.path.join(corpus, "*.json")) +
                   glob.glob(os.path.join(corpus, "*", "*.info")) +
                   glob.glob(os.path.join(corpus, "*", "*.json")))
    return files


def data_inputs(op):
    """The op's tensor operands (attr-like v2 value inputs dropped)."""
    ins = [lst[0] for lst in (op.get("input_desc") or []) if lst]
    if op["name"] in ("Concat", "AddN"):  # one dynamic input: the pieces
        ins = list(op["input_desc"][0])
    if op["name"] in ATTR_TAIL_OPS:
        ins = ins[:1]
    if op["name"] in ATTR_POS and len(ins) > max(ATTR_POS[op["name"]]):
        ins = [t for i, t in enumerate(ins) if i not in ATTR_POS[op["name"]]]
    return [t for t in ins if not isinstance(t.get("value"), list)]


def op_attrs(op):
    """The op's attrs by name: the attr list/object plus v2 value inputs."""
    res = {}
    at = op.get("attr")
    if isinstance(at, dict):
        res.update(at)
    elif isinstance(at, list):
        for e in at:
            if isinstance(e, dict) and "name" in e:
                res[e["name"]] = e.get("value")
    ins = [lst[0] for lst in (op.get("input_desc") or []) if lst]
    for name, t in zip(ATTR_TAIL_NAMES.get(op["name"], []), ins[1:]):
        if "value" in t:
            res[name] = t["value"]
    for i, name in ATTR_POS.get(op["name"], {}).items():
        if i < len(ins) and "value" in ins[i]:
            res[name] = ins[i]["value"]
    return res


def _ints(x):
    return [int(v) for v in (x if isinstance(x, list) else [x])]


def strided_slice(a, at):
    """TF StridedSlice as a numpy index: spec entry i is Ellipsis (the first
    ellipsis_mask bit), None (new_axis_mask), an int (shrink_axis_mask) or
    a slice whose masked bound is None (numpy then starts/stops at the end
    the stride's sign implies, as TF does)."""
    begin, end = _ints(at["begin"]), _ints(at["end"])
    strides = _ints(at.get("strides") or [1] * len(begin))
    bm, em = int(at.get("begin_mask") or 0), int(at.get("end_mask") or 0)
    sm = int(at.get("shrink_axis_mask") or 0)
    elm = int(at.get("ellipsis_mask") or 0)
    nam = int(at.get("new_axis_mask") or 0)
    idx, ell = [], False
    for i in range(len(begin)):
        if elm >> i & 1 and not ell:
            idx.append(Ellipsis)
            ell = True
        elif nam >> i & 1:
            idx.append(None)
        elif sm >> i & 1:
            idx.append(begin[i])
        else:
            idx.append(slice(None if bm >> i & 1 else begin[i],
                             None if em >> i & 1 else end[i], strides[i]))
    return a[tuple(idx)]


def eligibility(desc):
    """None when the file is in the first slice, else the reason."""
    ops = [op["name"] for op in desc.get("op_desc") or []]
    bad = sorted(set(ops) - SLICE_OPS)
    if bad:
        return "ops outside the slice: " + ", ".join(bad)
    dts = set()
    for t in desc.get("input_desc") or []:
        dts.add(t[0]["data_type"])
    for t in desc.get("output_desc") or []:
        dts.add(t["data_type"])
    for op in desc["op_desc"]:
        for t in data_inputs(op):
            dts.add(t["data_type"])
        for t in op["output_desc"]:
            dts.add(t["data_type"])
    bad = sorted(dts - SLICE_DTYPES)
    if bad:
        return "dtypes outside the slice: " + ", ".join(bad)
    fmts = set()
    for t in desc.get("input_desc") or []:
        fmts.add(t[0].get("format"))
    for op in desc["op_desc"]:
        for t in data_inputs(op) + op["output_desc"]:
            fmts.add(t.get("format"))
    if "FRACTAL_NZ" in fmts:
        return "Ascend FRACTAL_NZ layout (refused with 422)"
    return None


# ---- numpy reference -------------------------------------------------------

def as_dtype(x, dt):
    """Rounds float64/int/bool values to what dtype `dt` can hold; returns
    float64 for floats, int64 for ints, bool for bool."""
    x = np.asarray(x)
    if dt == "bool":
        return x != 0
    if dt in ("int32", "int64", "int16", "int8"):
        if x.dtype.kind == "f":
            x = np.trunc(np.nan_to_num(x))
        bits = {"int8": np.int8, "int16": np.int16, "int32": np.int32,
                "int64": np.int64}[dt]
        return x.astype(np.int64).astype(bits).astype(np.int64)
    if dt == "float16":
        return x.astype(np.float64).astype(np.float16).astype(np.float64)
    if dt == "float32":
        return x.astype(np.float64).astype(np.float32).astype(np.float64)
    if dt == "bfloat16":
        return kc.from_bfloat16(kc.to_bfloat16(x.astype(np.float32))) \
            .astype(np.float64)
    return x.astype(np.float64)


def _erf(x):
    if x.size <= 200000:
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    # Abramowitz-Stegun 7.1.26, |error| < 1.5e-7.
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t
                - 0.284496736) * t + 0.254829592) * t * np.exp(-a * a)
    return s * y


def _fit(x, shape):
    shape = tuple(shape)
    x = np.asarray(x)
    if x.shape == shape:
        return x
    if x.size == int(np.prod(shape, dtype=np.int64)):
        return x.reshape(shape)
    return np.broadcast_to(x, shape)


def _f(x):
    return np.asarray(x).astype(np.float64) if np.asarray(x).dtype == bool \
        else np.asarray(x)


def _tie_tol(dts):
    return 2e-3 if "float16" in dts or "bfloat16" in dts else 1e-6


def _pair(v, dflt=1):
    """A Conv2D stride/dilation as (h, w): int, [h, w], [1, 1, h, w] or
    [1, h, w, 1] (what kcsd accepts)."""
    if v is None:
        return dflt, dflt
    v = _ints(v)
    if len(v) == 1:
        return v[0], v[0]
    if len(v) == 2:
        return v[0], v[1]
    if v[0] == 1 and v[1] == 1:
        return v[2], v[3]
    return v[1], v[2]


def conv2d(op, x, w):
    """Conv2D in float64. Layout: the input tensor's format when NHWC/NCHW,
    else data_format/format, else NCHW. NHWC: x [N,H,W,C], w [O,KH,KW,C/g];
    NCHW: x [N,C,H,W], w [O,C/g,KH,KW]. Pads pad_list|pad [t,b,l,r], else
    pad_mode same (TF rule), else 0. One BLAS product per kernel tap."""
    at = op_attrs(op)
    fmt = data_inputs(op)[0].get("format")
    if fmt not in ("NHWC", "NCHW"):
        fmt = at.get("data_format") or at.get("format") or "NCHW"
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    if fmt == "NCHW":
        x, w = x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1)
    sh, sw = _pair(at.get("stride"))
    dh, dw = _pair(at.get("dilation"))
    g = int(at.get("groups", at.get("group", 1)) or 1)
    N, H, W, C = x.shape
    O, KH, KW, Cg = w.shape
    pads = at.get("pad_list", at.get("pad"))
    if pads is not None:
        pads = _ints(pads) * (4 if len(_ints(pads)) == 1 else 1)
    elif str(at.get("pad_mode", "")).lower() == "same":
        pads = []
        for n, k, s, d in ((H, KH, sh, dh), (W, KW, sw, dw)):
            t = max((-(-n // s) - 1) * s + d * (k - 1) + 1 - n, 0)
            pads += [t // 2, t - t // 2]
    else:
        pads = [0, 0, 0, 0]
    xp = np.pad(x, ((0, 0), (pads[0], pads[1]), (pads[2], pads[3]), (0, 0)))
    OH = (xp.shape[1] - dh * (KH - 1) - 1) // sh + 1
    OW = (xp.shape[2] - dw * (KW - 1) - 1) // sw + 1
    out = np.zeros((N, OH, OW, O))
    Og = O // g
    for kh in range(KH):
        for kw in range(KW):
            p = xp[:, kh * dh:kh * dh + sh * (OH - 1) + 1:sh,
                   kw * dw:kw * dw + sw * (OW - 1) + 1:sw, :]
            if g == 1:
                out += (p.reshape(-1, C) @ w[:, kh, kw, :].T).reshape(out.shape)
            else:
                out += np.einsum("nhwgc,goc->nhwgo",
                                 p.reshape(N, OH, OW, g, Cg),
                                 w[:, kh, kw, :].reshape(g, Og, Cg)
                                 ).reshape(out.shape)
    return out.transpose(0, 3, 1, 2) if fmt == "NCHW" else out


def reference(desc, inputs):
    """Interprets the composite JSON op by op in float64 (each op's result
    rounded to its declared dtype). inputs: tensor_name -> numpy array.
    Returns (outputs, fuzzy, half): lists in output_desc order; fuzzy[i] is
    None or a bool mask of elements downstream of a comparison whose
    operands were within rounding distance (a mismatch there is allowed);
    half[i] tells whether float16 is upstream."""
    env, fz, h16 = {}, {}, {}
    for t in desc.get("input_desc") or []:
        t = t[0]
        x = inputs[t["tensor_name"]]
        if t["data_type"] == "bfloat16":
            x = kc.from_bfloat16(x)
        env[t["tensor_name"]] = as_dtype(x, t["data_type"])
        fz[t["tensor_name"]] = None
        h16[t["tensor_name"]] = t["data_type"] in ("float16", "bfloat16")
    ops = desc["op_desc"]
    keep = {t["tensor_name"] for t in desc["output_desc"]}
    written = {}  # kernel input name -> its value after the in-place writes
    last = {}
    for i, op in enumerate(ops):
        for t in data_inputs(op):
            last[t["tensor_name"]] = i
    for i, op in enumerate(ops):
        name = op["name"]
        out = op["output_desc"][0]
        odt, oshape = out["data_type"], out["shape"]
        args, masks, dts, half = [], [], [], False
        for t in data_inputs(op):
            if "value" in t:
                v = as_dtype(np.array(t["value"], dtype=np.float64),
                             t["data_type"])
                args.append(v.reshape(t.get("shape") or [1]))
                masks.append(None)
                half |= t["data_type"] in ("float16", "bfloat16")
            else:
                tn = t["tensor_name"]
                args.append(env[tn])
                masks.append(fz[tn])
                half |= h16[tn]
            dts.append(t["data_type"])
        a = args[0] if args else None
        b = args[1] if len(args) > 1 else None
        tie = None
        view = None  # a layout op or reduction: maps the input's mask too
        with np.errstate(all="ignore"):
            if name in ("Add", "TensorAdd"):
                r = _f(a) + _f(b)
            elif name == "Sub":
                r = _f(a) - _f(b)
            elif name == "Mul":
                r = _f(a) * _f(b)
            elif name in ("RealDiv", "Div"):
                if odt in FLOAT:
                    r = _f(a) / _f(b)
                else:
                    r = np.trunc(np.asarray(a, np.float64) /
                                 np.asarray(b, np.float64))
            elif name == "Maximum":
                r = np.maximum(a, b)
            elif name == "Minimum":
                r = np.minimum(a, b)
            elif name == "Pow":
                r = np.power(_f(a).astype(np.float64), _f(b))
            elif name == "Neg":
                r = -_f(a)
            elif name == "Abs":
                r = np.abs(a)
            elif name == "Exp":
                r = np.exp(a)
            elif name == "Log":
                r = np.log(a)
            elif name == "Sqrt":
                r = np.sqrt(a)
            elif name == "Rsqrt":
                r = 1.0 / np.sqrt(a)
            elif name == "Reciprocal":
                r = 1.0 / _f(a).astype(np.float64)
            elif name == "Tanh":
                r = np.tanh(a)
            elif name in ("Sin", "Cos", "Asin", "ASin", "ACos", "Atan",
                          "Asinh", "Acosh", "Expm1"):
                fn = {"Sin": np.sin, "Cos": np.cos, "Asin": np.arcsin,
                      "ASin": np.arcsin, "ACos": np.arccos, "Atan": np.arctan,
                      "Asinh": np.arcsinh, "Acosh": np.arccosh,
                      "Expm1": np.expm1}[name]
                r = fn(np.asarray(a, np.float64))
            elif name == "Atan2":
                r = np.arctan2(np.asarray(a, np.float64), np.asarray(b, np.float64))
            elif name == "AddN":
                r = _f(args[0])
                for x in args[1:]:  # a chain of Adds, each in the dtype
                    r = as_dtype(r + _f(x), odt)
            elif name == "Erf":
                r = _erf(np.asarray(a, np.float64))
            elif name == "Square":
                r = _f(a) * _f(a)
            elif name == "Floor":
                r = np.floor(a)
            elif name == "Round":
                r = np.rint(a)
            elif name == "Sign":
                r = np.sign(_f(a))
            elif name in COMPARE_OPS:
                fa, fb = _f(a), _f(b)
                r = {"Greater": np.greater, "GreaterEqual": np.greater_equal,
                     "Less": np.less, "LessEqual": np.less_equal,
                     "Equal": np.equal, "NotEqual": np.not_equal}[name](fa, fb)
                if all(d in FLOAT for d in dts):
                    tol = _tie_tol(dts + (["float16"] if half else []))
                    tie = np.abs(fa - fb) <= tol * np.maximum(
                        1.0, np.maximum(np.abs(fa), np.abs(fb)))
            elif name == "LogicalAnd":
                r = np.logical_and(a, b)
            elif name == "LogicalOr":
                r = np.logical_or(a, b)
            elif name == "LogicalNot":
                r = np.logical_not(a)
            elif name == "IsNan":
                r = np.isnan(a)
            elif name == "IsInf":
                r = np.isinf(a)
            elif name == "IsFinite":
                r = np.isfinite(a)
            elif name == "Select":
                r = np.where(np.asarray(a) != 0, args[1], args[2])
            elif name == "Cast":
                r = a
            elif name in ("BroadcastTo", "Reshape"):
                r = a
            elif name in REDUCE_OPS:
                at = op_attrs(op)
                a = np.asarray(a)
                ax = at.get("axis")
                ax = _ints(ax) if ax is not None else []
                ax = tuple(sorted({x % a.ndim for x in ax})) if ax else \
                    tuple(range(a.ndim))
                src = a.astype(np.int64) if a.dtype.kind in "iub" else \
                    a.astype(np.float64)
                kd = bool(at.get("keep_dims"))
                r = REDUCE_OPS[name](src, axis=ax, keepdims=kd)
                view = lambda m, ax=ax, kd=kd: np.any(m, axis=ax, keepdims=kd)
            elif name == "Transpose":
                view = lambda m: np.transpose(m, _ints(op_attrs(op)["perm"]))
            elif name == "ExpandDims":
                view = lambda m: np.expand_dims(m, _ints(op_attrs(op)["axis"])[0])
            elif name == "Tile":
                view = lambda m: np.tile(m, _ints(op_attrs(op)["multiples"]))
            elif name == "StridedSlice":
                view = lambda m: strided_slice(m, op_attrs(op))
            elif name in ("ElemAny", "ElemAll"):
                # "any/all elements non-zero" (AKG's op_dsl has x.all() for
                # ElemAny: a slip)
                nz = np.asarray(a) != 0
                r = np.array([nz.any() if name == "ElemAny" else nz.all()])
                view = lambda m: np.array([np.asarray(m).any()])
            elif name in ("MatMul", "BatchMatMul"):
                at = op_attrs(op)
                x = np.asarray(a, np.float64)
                y = np.asarray(b, np.float64)
                if at.get("transpose_a"):
                    x = np.swapaxes(x, -1, -2)
                if at.get("transpose_b"):
                    y = np.swapaxes(y, -1, -2)
                r = np.matmul(x, y)
            elif name == "Conv2D":
                r = conv2d(op, a, b)
            elif name == "OneHot":
                at = op_attrs(op)
                depth = _ints(at["depth"])[0]
                ax = int(at.get("axis", -1) if at.get("axis") is not None else -1)
                ind = np.asarray(a).astype(np.int64)
                ax = ind.ndim if ax < 0 else ax
                pos = np.arange(depth).reshape([depth] + [1] * (ind.ndim - ax))
                r = np.where(np.expand_dims(ind, ax) == pos, _f(args[1]).reshape(()),
                             _f(args[2]).reshape(()))
            elif name == "Gather":
                ax = _ints(op_attrs(op).get("axis", 0))[0]
                a = np.asarray(a)
                ax = ax % a.ndim
                ind = np.clip(np.asarray(b).astype(np.int64), 0, a.shape[ax] - 1)
                r = np.take(a, ind, axis=ax)
            elif name == "Concat":
                ax = _ints(op_attrs(op).get("axis", 0))[0]
                r = np.concatenate([np.asarray(x) for x in args], axis=ax)
            elif name in ("Assign", "InplaceAssign"):
                dst = data_inputs(op)[0]["tensor_name"]
                r = args[1] if name == "Assign" else args[2]
                written[dst] = as_dtype(_fit(args[1], np.shape(args[0])),
                                        data_inputs(op)[0]["data_type"])
            else:
                raise ValueError("reference has no op %s" % name)
        if view is not None:
            if name not in REDUCE_OPS and name not in ("ElemAny", "ElemAll"):
                r = view(np.asarray(a))
            masks = [None if mk is None else
                     view(np.broadcast_to(mk, np.shape(a))) for mk in masks]
        r = as_dtype(_fit(r, oshape), odt)
        m = None
        for mk in masks + [tie]:
            if mk is None:
                continue
            m = mk if m is None else (np.broadcast_to(m, np.broadcast_shapes(
                np.shape(m), np.shape(mk))) | mk)
        if m is not None:
            m = np.ascontiguousarray(_fit(m, oshape))
            if not m.any():
                m = None
        tn = out["tensor_name"]
        env[tn], fz[tn] = r, m
        h16[tn] = half or odt in ("float16", "bfloat16")
        if name in ("Assign", "InplaceAssign"):
            # later ops read the new value of the destination
            dst = data_inputs(op)[0]["tensor_name"]
            env[dst] = written[dst]
            fz[dst], h16[dst] = fz[tn], h16[tn]
            keep.add(dst)
        for t in data_inputs(op):
            x = t.get("tensor_name")
            if x in env and last.get(x) == i and x not in keep:
                del env[x]
                fz.pop(x, None)
    outs, fuzz, halfs = [], [], []
    for t in desc["output_desc"]:
        outs.append(env[t["tensor_name"]])
        fuzz.append(fz[t["tensor_name"]])
        halfs.append(h16[t["tensor_name"]])
    return outs, fuzz, halfs, written


def positive_inputs(desc):
    """Tensor names that reach a Log/Sqrt/Rsqrt/Pow base or a divisor."""
    need = set()
    for op in reversed(desc["op_desc"]):
        ins = data_inputs(op)
        outs = {t["tensor_name"] for t in op["output_desc"]}
        if op["name"] in ("Log", "Sqrt", "Rsqrt", "Pow", "Reciprocal") \
                and ins:
            need.add(ins[0].get("tensor_name"))
        if op["name"] in ("RealDiv", "Div") and len(ins) > 1:
            need.add(ins[1].get("tensor_name"))
        if outs & need:
            need.update(t.get("tensor_name") for t in ins)
    return need


def make_inputs(desc, seed):
    rng = np.random.default_rng(seed)
    pos = positive_inputs(desc)
    res = {}
    for t in desc.get("input_desc") or []:
        t = t[0]
        shape, dt, tn = t["shape"], t["data_type"], t["tensor_name"]
        if dt == "bool":
            x = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif dt.startswith("int") or dt.startswith("uint"):
            lo = 1 if tn in pos else -5
            x = rng.integers(lo, 6, size=shape).astype(kc.np_dtype(dt))
        else:
            lo, hi = (0.5, 2.0) if tn in pos else (-2.0, 2.0)
            x = rng.uniform(lo, hi, size=shape)
            x = kc.to_bfloat16(x) if dt == "bfloat16" else \
                x.astype(kc.np_dtype(dt))
        res[tn] = x
    return res


# ---- running one kernel ----------------------------------------------------

def misaligned_copy(x):
    """A copy of x whose address is element-aligned but not 16-aligned
    (when the element is smaller than 16 bytes)."""
    n = x.nbytes
    item = x.dtype.itemsize
    buf = np.empty(n + 128, np.uint8)
    base = buf.ctypes.data
    off = (64 - base % 64) % 64 + (item if item < 16 else 0)
    y = buf[off:off + n].view(x.dtype).reshape(x.shape)
    y[...] = x
    return y


def compare(name, got, ref, fuzzy, half, dt):
    """Returns (ok, message, n_fuzzy_mismatches)."""
    if dt == "bfloat16":
        got = kc.from_bfloat16(got)
    if dt == "bool":
        raw = got.view(np.uint8)
        if (raw > 1).any():
            return False, "%s: bool output holds bytes other than 0/1" % name, 0
    g = got.astype(np.float64) if got.dtype.kind in "fc" else \
        got.astype(np.int64)
    r = ref
    if dt in FLOAT:
        tol = 1e-2 if half else 1e-4
        with np.errstate(all="ignore"):
            bad = ~((np.abs(g - r) <= tol + tol * np.abs(r)) |
                    (np.isnan(g) & np.isnan(r)) | (g == r))
    else:
        bad = np.asarray(g != r.astype(g.dtype))
    nf = 0
    if fuzzy is not None and bad.any():
        nf = int((bad & fuzzy).sum())
        bad = bad & ~fuzzy
    if bad.any():
        idx = np.argwhere(bad)
        first = tuple(idx[0])
        return False, ("%s: %d/%d mismatches, first at %s got %r want %r"
                       % (name, int(bad.sum()), bad.size, list(first),
                          g[first].item(), r[first].item())), nf
    return True, "", nf


def elf_needed(obj):
    """DT_NEEDED names of an ELF64 little-endian shared object (via the
    section headers), or None when it cannot be parsed."""
    import struct
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    secs = []
    for i in range(shnum):
        o = shoff + i * shentsize
        _, typ, _, _, off, size, link = struct.unpack_from("<IIQQQQI", obj, o)
        secs.append((typ, off, size, link))
    names = []
    for typ, off, size, link in secs:
        if typ != 6:  # SHT_DYNAMIC
            continue
        stroff = secs[link][1]
        for k in range(0, size, 16):
            tag, val = struct.unpack_from("<qQ", obj, off + k)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                end = obj.index(b"\0", stroff + val)
                names.append(obj[stroff + val:end].decode())
    return names


def run_kernel(meta, obj, desc, seed):
    """Loads and runs one kernel twice; returns a result dict."""
    res = {"ok": True, "notes": [], "errors": []}
    needed = elf_needed(obj)
    if needed is None:
        res["errors"].append("object is not an ELF64 LE shared object")
    elif set(needed) - {"libc.so.6", "libm.so.6"}:
        res["errors"].append("object needs %s (only libc and libm allowed)"
                             % needed)
    k = kc.Kernel(meta, obj)
    ins = make_inputs(desc, seed)
    # Argument metadata must follow the JSON.
    kin = [t[0] for t in desc.get("input_desc") or []]
    kout = desc["output_desc"]
    want = [("input", t) for t in kin] + [("output", t) for t in kout]
    if len(k.args) != len(want):
        res["errors"].append("args: %d, expected %d" % (len(k.args),
                                                         len(want)))
        res["ok"] = False
        return res
    for a, (role, t) in zip(k.args, want):
        if a["role"] != role or a["tensor_name"] != t["tensor_name"] or \
                a["dtype"] != t["data_type"] or \
                list(a["shape"]) != list(t["shape"]):
            res["errors"].append("arg %d is %s %s %s %s, expected %s %s %s %s"
                                 % (a["index"], a["role"], a["tensor_name"],
                                    a["dtype"], a["shape"], role,
                                    t["tensor_name"], t["data_type"],
                                    t["shape"]))
            res["ok"] = False
    if not res["ok"]:
        return res
    refs, fuzz, halfs, written = reference(desc, ins)
    in_orig = [ins[t["tensor_name"]] for t in kin]
    in_arrays = [x.copy() for x in in_orig]  # in-place writes change them
    t0 = time.perf_counter()
    outs1 = k(*in_arrays, runtime=None)
    t1 = time.perf_counter()
    with kc.ThreadPoolRuntime(3) as rt:
        margs = [misaligned_copy(x) for x in in_orig]
        outs2 = []
        for a in k.outputs:
            o = misaligned_copy(np.empty(k._shapes[a["index"]],
                                         k._dtypes[a["index"]]))
            o.view(np.uint8)[...] = 0xFF
            outs2.append(o)
        t2 = time.perf_counter()
        k.run(margs + outs2, runtime=rt)
        t3 = time.perf_counter()
        if rt.outstanding:
            res["errors"].append("rt: %d workspace blocks not freed"
                                 % rt.outstanding)
        if rt.errors:
            res["errors"].append("rt errors: %s" % rt.errors[:3])
        res["notes"].append("rt: %d regions, %d tasks, %d threads, %d allocs"
                            % (rt.regions, rt.tasks_run,
                               len(rt.threads_used), rt.allocs))
    res["notes"].append("run %.1f ms serial, %.1f ms 3 threads"
                        % ((t1 - t0) * 1e3, (t3 - t2) * 1e3))
    nfz = 0
    for mode, outs in (("rt=NULL", outs1), ("rt=3 threads", outs2)):
        for j, (o, r) in enumerate(zip(outs, refs)):
            ok, msg, nf = compare("%s out %d (%s)" % (mode, j,
                                                      kout[j]["tensor_name"]),
                                  o, r, fuzz[j], halfs[j],
                                  kout[j]["data_type"])
            nfz += nf
            if not ok:
                res["errors"].append(msg)
    # in-place writes: the kernel input holds the written value, and the
    # output that yields it says which input it writes
    for mode, arrs in (("rt=NULL", in_arrays), ("rt=3 threads", margs)):
        for j, t in enumerate(kin):
            if t["tensor_name"] not in written:
                continue
            ok, msg, _ = compare("%s written input %d (%s)" % (
                mode, j, t["tensor_name"]), arrs[j], written[t["tensor_name"]],
                None, True, t["data_type"])
            if not ok:
                res["errors"].append(msg)
    want_w = {}  # output tensor name -> the input its Assign writes
    for op in desc["op_desc"]:
        if op["name"] in ("Assign", "InplaceAssign"):
            dst = data_inputs(op)[0]["tensor_name"]
            idx = [j for j, t in enumerate(kin) if t["tensor_name"] == dst]
            if idx:
                want_w[op["output_desc"][0]["tensor_name"]] = idx[0]
    for a in meta.get("args", []):
        w = a.get("writes_input")
        if a["role"] == "output" and want_w.get(a["tensor_name"]) != w:
            res["errors"].append("arg %d: writes_input %r, expected %r"
                                 % (a["index"], w, want_w.get(a["tensor_name"])))
    for j, (o1, o2) in enumerate(zip(outs1, outs2)):
        if o1.tobytes() != o2.tobytes():
            res["notes"].append("out %d differs bitwise between serial "
                                "and threaded" % j)
    if nfz:
        res["notes"].append("%d near-tie comparison mismatches allowed" % nfz)
    res["ok"] = not res["errors"]
    return res


def run_isolated(meta, obj, desc, seed, timeout=600):
    """run_kernel in a forked child: a crash or hang fails this file only."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(rfd)
        try:
            out = run_kernel(meta, obj, desc, seed)
        except BaseException as e:
            out = {"ok": False, "notes": [],
                   "errors": ["%s: %s" % (type(e).__name__, e)],
                   "trace": traceback.format_exc()}
        try:
            with os.fdopen(wfd, "wb") as f:
                f.write(json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    chunks, deadline = [], time.time() + timeout
    while True:
        left = deadline - time.time()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(rfd)
            return {"ok": False, "notes": [],
                    "errors": ["kernel run timed out after %ds" % timeout]}
        r, _, _ = select.select([rfd], [], [], left)
        if not r:
            continue
        c = os.read(rfd, 1 << 16)
        if not c:
            break
        chunks.append(c)
    os.close(rfd)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st):
        return {"ok": False, "notes": [],
                "errors": ["kernel run crashed with signal %d"
                           % os.WTERMSIG(st)]}
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"ok": False, "notes": [], "errors": ["child gave no result"]}


# ---- main ------------------------------------------------------------------

class Daemon:
    """kcsd on one state dir that is restarted when it dies, so that a crash
    fails the file that caused it and the run goes on."""

    def __init__(self, binary, state):
        self.binary, self.state = binary, state
        self.d = None
        self.url = None

    def start(self):
        self.d = launcher()(self.binary, state_dir=self.state)
        self.d.__enter__()
        self.url = self.d.url
        self.client = kc.Client(self.url)

    def stop(self, clean=True):
        d, self.d = self.d, None
        if d is None:
            return
        if clean:
            d.__exit__(None, None, None)
        else:  # the harness keeps its temp dir (and log) on errors
            d.__exit__(RuntimeError, RuntimeError("kcsd died"), None)

    def post(self, text, r, what):
        """POST ?target=cpu; returns the reply (with "_ms") or None after
        recording the error in r (restarting kcsd if it died)."""
        t0 = time.perf_counter()
        try:
            meta = self.client.compile_raw(text, target="cpu")
            meta["_ms"] = (time.perf_counter() - t0) * 1e3
            return meta
        except kc.KcsError as e:
            proc = getattr(self.d, "proc", None)
            rc = proc.poll() if proc is not None else None
            if rc is None:
                r["errors"].append("%s: %s" % (what, e))
                return None
            log = getattr(self.d, "log_path", "?")
            r["errors"].append("%s: kcsd died with %s (log %s)"
                               % (what, "signal %d" % -rc if rc < 0 else
                                  "exit %d" % rc, log))
            self.stop(clean=False)
            self.start()
            return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kcsd", required=True, help="path of the kcsd binary")
    ap.add_argument("--corpus",
                    default=os.path.join(REPO, "..", "shared", "corpus",
                                         "akg"))
    ap.add_argument("--only", default=None,
                    help="run only files whose name contains this")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--fixture", default=None,
                    help="the corpus fixture (tests/corpus.cmake) to take compiles from")
    opt = ap.parse_args()

    if not os.path.isdir(opt.corpus):
        print("# SKIP corpus absent (%s)" % opt.corpus)
        print("0 passed, 0 failed")
        return 0

    files, skipped = [], []
    for path in corpus_files(opt.corpus):
        rel = os.path.relpath(path, opt.corpus)
        if opt.only and opt.only not in rel:
            continue
        try:
            with open(path, "rb") as f:
                text = f.read()
            desc = json.loads(text)
        except (OSError, ValueError) as e:
            skipped.append((rel, "unreadable: %s" % e, None))
            continue
        why = eligibility(desc)
        if why:
            skipped.append((rel, why, text))
        else:
            files.append((rel, text, desc))

    print("# %d corpus files eligible, %d skipped" % (len(files),
                                                       len(skipped)))
    results = {rel: {"errors": [], "notes": []} for rel, _, _ in files}
    answers, extra_fail = {}, []
    ids = {}
    state = tempfile.mkdtemp(prefix="kcsd-corpus-state-")
    fx = None
    if opt.fixture:
        fx = corpus_fixture.load(opt.fixture)
        if fx is None:
            print("not ok 1 - the corpus fixture %s was not made" % opt.fixture)
            return 1
        state = fx.state_copy(os.path.join(state, "state"))
    daemon = Daemon(opt.kcsd, state)
    try:
        daemon.start()
        print("# kcsd at %s" % daemon.url)
        if fx is not None:
            fx.check(opt.corpus, daemon.client.version())
        for n, (rel, text, desc) in enumerate(files):
            r = results[rel]
            if fx is not None:
                ans, meta, obj = fx.compiled(rel)
                if meta is None:
                    r["errors"].append("compile: HTTP %s %s" % (ans["status"],
                                                              json.dumps(ans.get("error"))[:300]))
                    continue
                meta["_ms"] = ans["ms"]
            else:
                meta = daemon.post(text, r, "compile")
                if meta is None:
                    continue
                obj = base64.b64decode(meta.pop("object_base64"))
            ids[rel] = meta["kernel_id"]
            r["notes"].append("%s %.0f ms (server %s ms)%s"
                              % (meta.get("cache"), meta.pop("_ms"),
                                 meta.get("compile_ms"),
                                 " in the corpus fixture" if fx is not None else ""))
            for key, val in (("abi", "kcs-cpu-v1"),
                             ("format", "elf-shared-object")):
                if meta.get(key) != val:
                    r["errors"].append("%s is %r" % (key, meta.get(key)))
            out = run_isolated(meta, obj, desc, opt.seed + n)
            r["errors"] += out["errors"]
            r["notes"] += out["notes"]
            if out.get("trace"):
                r["notes"].append(out["trace"].strip().splitlines()[-1])
            meta2 = daemon.post(text, r, "second POST")
            if meta2 is not None:
                if meta2.get("cache") != "hit" or \
                        meta2.get("kernel_id") != meta["kernel_id"]:
                    r["errors"].append("second POST: cache %r id %s"
                                       % (meta2.get("cache"),
                                          meta2.get("kernel_id")))
                if meta2.get("object_sha256") != meta["object_sha256"]:
                    r["errors"].append("second POST: different object")
            print("# %s: %s" % (rel, "ok" if not r["errors"] else
                                "; ".join(r["errors"])[:300]), flush=True)
        # Files outside the slice are not checked for results, but kcsd must
        # answer them (a compiled kernel or a 4xx) without dying or a 5xx.
        for rel, why, text in skipped:
            if text is None:
                continue
            r = {"errors": [], "notes": []}
            if fx is not None:
                ans, meta, _ = fx.compiled(rel)
                e = (ans.get("error") or {}).get("error")
                if meta is None:
                    if 400 <= ans["status"] < 500 and isinstance(e, dict) and \
                            not ans.get("kcsd_died"):
                        answers[rel] = "kcsd: %d %s%s: %s" % (
                            ans["status"], e.get("code"),
                            " at " + e["where"] if e.get("where") else "", e.get("message"))
                    else:
                        answers[rel] = None
                        extra_fail.append((rel, ["out-of-slice POST: HTTP %s%s %s" % (
                            ans["status"], " (kcsd died)" if ans.get("kcsd_died") else "",
                            json.dumps(ans.get("error"))[:300])]))
                    continue
                answers[rel] = "kcsd compiles it (%s)" % meta.get("cache")
                continue
            meta = daemon.post(text, r, "out-of-slice POST")
            if meta is not None:
                answers[rel] = "kcsd compiles it (%s)" % meta.get("cache")
            elif r["errors"] and re.search(r"\b4\d\d \w+", r["errors"][0]) \
                    and "kcsd died" not in r["errors"][0]:
                answers[rel] = "kcsd: %s" % r["errors"][0].split(": ", 1)[1]
            else:
                answers[rel] = None
                extra_fail.append((rel, r["errors"]))
        daemon.stop()
        daemon.start()
        for rel, text, _ in files:
            if rel not in ids:
                continue
            r = results[rel]
            meta3 = daemon.post(text, r, "after restart")
            if meta3 is not None and (meta3.get("cache") != "hit" or
                                      meta3.get("kernel_id") != ids[rel]):
                r["errors"].append("after restart: cache %r id %s"
                                   % (meta3.get("cache"),
                                      meta3.get("kernel_id")))
        daemon.stop()
    except Exception as e:  # kcsd failed to start or died: fail them all
        print("# kcsd: %s" % e)
        for rel, _, _ in files:
            if not results[rel]["errors"]:
                results[rel]["errors"].append("kcsd: %s"
                                              % str(e).splitlines()[0])
    finally:
        shutil.rmtree(state, ignore_errors=True)

    npass = nfail = 0
    print("1..%d" % (len(files) + len(extra_fail)))
    for n, (rel, _, _) in enumerate(files, 1):
        r = results[rel]
        if r["errors"]:
            nfail += 1
            print("not ok %d - %s" % (n, rel))
            for e in r["errors"]:
                print("#   %s" % e)
        else:
            npass += 1
            print("ok %d - %s" % (n, rel))
        for note in r["notes"]:
            print("#   %s" % note)
    for rel, errs in extra_fail:
        nfail += 1
        print("not ok %d - %s (outside the slice; must not crash kcsd or 5xx)"
              % (npass + nfail, rel))
        for e in errs:
            print("#   %s" % e)
    print("# skipped (%d):" % len(skipped))
    for rel, why, _ in skipped:
        ans = answers.get(rel)
        print("#   %s: %s%s" % (rel, why, "; " + ans[:160] if ans else ""))
    print("%d passed, %d failed" % (npass, nfail))
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
