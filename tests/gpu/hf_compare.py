#!/usr/bin/env python3
"""Compare tessel's Qwen3-14B examples with Hugging Face transformers, element by element.

Usage:
    python3 tests/gpu/hf_compare.py DIR [--json OUT.json] [--device cuda|cpu]

DIR holds, for each example, the files written by

    tessel run examples/qwen3_14b/X.tsl --dim T=4096 --step STEP --seed S \
        [--fill pos=iota:START] --save-inputs D/STEP.inputs.safetensors \
        --dump-temps -o D/STEP.outputs.safetensors

(any D under DIR, or DIR itself).  Steps recognised: hidden_norm, qk_norm (rms_norm.tsl),
rope_qk (rope.tsl), swiglu (swiglu.tsl).  A step whose name is unknown is recognised by its
input names ({x,w}, {q,k,wq,wk}, {q,k,pos}, {gate,up}).

Outputs: a single result is `out`, a tuple `out0`, `out1`, ...  Other names are matched by
position in the file's sorted order (with a warning).  Names starting with `t` are the
temporaries tessel materialised between kernels (`--dump-temps`).

What Hugging Face computes (all on --device, bf16 exactly as the model runs):
  * RMSNorm: Qwen3RMSNorm(5120, eps=1e-6) with weight w (hidden_norm); Qwen3RMSNorm(128,
    eps=1e-6) with wq / wk over the last axis of q [T,40,128] / k [T,8,128] (qk_norm).
  * RoPE: Qwen3RotaryEmbedding for the Qwen3-14B config (head_dim 128, rope_theta 1e6,
    max_position_embeddings 40960, rope_type default), position_ids = pos[None, :], a bf16
    dummy x; then apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1) on q, k in HF's
    [1, heads, T, 128] layout, transposed back to [T, heads, 128].
  * SwiGLU: Qwen3MLP(config).act_fn(gate) * up (silu in f32 rounded to bf16, then a bf16
    product).

Every output is compared bit for bit (NaN == NaN counts as a match; +0 vs -0 is a
mismatch).  Reported: mismatching elements / total (and %), the largest absolute difference,
the largest difference in bf16 ulps (distance in the ordered bf16 encoding).

EXPLANATION RULES (every mismatch must be explained by one of them, else exit code 1).
"Boundary" means a bf16 rounding boundary: the midpoint between two adjacent bf16 values.
"Near a boundary with tolerance K" means |y - mid| <= K * 2^-23 * |y| (K f32 ulps, relative
to the exact value y, computed in float64); lo, hi are the two bf16 neighbours of that
boundary (the bf16 values around y).

  R1 rms_boundary (RMSNorm, K = --tol-rms, default 8):
     Both sides compute n = bf16(x * rsqrt(mean(x^2) + eps)) in f32 (HF: torch's reduction
     order and CUDA rsqrt; tessel: its own fixed reduction order and libm-free rsqrt), then
     out = bf16(w * n), an identical bf16 product.  A mismatch is explained iff the exact
     y = x / sqrt(mean(x^2) + eps) (float64) is near a boundary, HF's own n (recomputed with
     HF's exact op sequence; checked to reproduce the module's output bit for bit) is one of
     lo, hi, and tessel's output equals bf16(w * n') for n' the OTHER neighbour.
  R2 table_boundary (RoPE tables, K = --tol-rope, default 4):
     If the dump holds tessel's bf16 cos/sin tables [T,128] (identified by shape and by
     being closest to HF's tables), each table mismatch is explained iff the float64
     cos/sin of the f32 angle (angle = f32(f32(pos) * inv_freq_f32), inv_freq = HF's module
     buffer) is near a boundary and both tessel's and HF's entries are its neighbours lo, hi.
     HF's inv_freq is compared bit for bit with tessel's f32 [64] temporary (reported).
  R2b inv_freq_differs (RoPE tables): where tessel's inv_freq[i] differs from HF's (a pow
     computed by a different libm), a table mismatch in column i or i+64 is explained iff
     tessel's entry is the correctly rounded bf16 of cos/sin of TESSEL's f32 angle, or a
     neighbour of a boundary near it (K = --tol-rope).  Reported separately: it is a
     difference in inv_freq, not in cos/sin.
  R3 rope_table (RoPE outputs): HF's formula q*cos + rotate_half(q)*sin is recomputed in
     bf16 (HF's apply_rotary_pos_emb on --device) with TESSEL's tables: it must equal
     tessel's output bit for bit everywhere (every difference there is unexplained).  An
     output mismatch vs HF at (t, h, d) is then explained iff tessel's cos or sin table
     differs from HF's at (t, d) and that table difference is itself explained (R2/R2b).
  R3f rope_output_boundary (fallback when the tables are not in the dump): an output
     mismatch is explained iff cos or sin at (t, d) is near a boundary (K = --tol-rope) and
     tessel's output equals the bf16 formula evaluated with the other neighbour(s) in place
     of HF's table entries.
  R4 silu_boundary (SwiGLU, K = --tol-silu, default 8): a mismatch is explained iff the
     float64 silu(gate) = g / (1 + exp(-g)) is near a boundary, HF's bf16 silu is one of lo,
     hi, and tessel's output equals bf16(up * other neighbour) (the product is an identical
     bf16 op on both sides).

Self-checks (a failure counts as unexplained): HF's module output equals the replica of its
op sequence the rules rely on (RMSNorm: w * bf16(x*rsqrt(var+eps)); RoPE:
q*cos + rotate_half(q)*sin; SwiGLU: act_fn == torch.nn.functional.silu), and the RoPE
module's inv_freq is 1/1e6^(2i/128) (so rope_theta reached the module).

Exit code: 0 if every difference is explained, 1 otherwise, 2 on a usage / setup error.
"""

import argparse
import glob
import inspect
import json
import math
import os
import re
import struct
import sys

# Hub kernels would swap modules' forward for downloaded kernels; none are wanted here.
os.environ.setdefault("USE_HUB_KERNELS", "0")

import torch  # noqa: E402

BF16 = torch.bfloat16
F32 = torch.float32
F64 = torch.float64

# Qwen3-14B (shared/models/qwen3_14b.json).
HIDDEN = 5120
INTERMEDIATE = 17408
N_HEADS = 40
N_KV_HEADS = 8
HEAD_DIM = 128
ROPE_THETA = 1000000.0
MAX_POS = 40960
EPS = 1e-6

MAX_EXAMPLES = 10


def warn(msg):
    print(f"WARNING: {msg}", flush=True)


# ----------------------------------------------------------------------------------------
# safetensors I/O (the safetensors package if present, else a small reader)

_ST_DTYPES = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
    "I32": torch.int32, "I64": torch.int64, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}


def load_safetensors(path):
    try:
        from safetensors.torch import load_file
        return dict(load_file(path, device="cpu"))
    except ImportError:
        pass
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        s, e = meta["data_offsets"]
        dt = _ST_DTYPES[meta["dtype"]]
        buf = bytearray(raw[base + s:base + e])
        t = torch.frombuffer(buf, dtype=dt) if len(buf) else torch.empty(0, dtype=dt)
        out[name] = t.reshape(meta["shape"]).clone()
    return out


# ----------------------------------------------------------------------------------------
# bf16 helpers

def bits16(t):
    return t.contiguous().view(torch.int16)


def same_bits(a, b):
    return bits16(a) == bits16(b)


def mismatch_mask(a, b):
    """Bitwise mismatch, NaN == NaN counted as a match."""
    return (bits16(a) != bits16(b)) & ~(torch.isnan(a) & torch.isnan(b))


def ordered_key(t):
    """bf16 -> int64 monotone in the value (ulp distance = key difference)."""
    b = bits16(t).to(torch.int64)
    return torch.where(b < 0, -(b & 0x7FFF), b)


def pow2(e):
    """2**e exactly as float64, e an int64 tensor in the normal f64 range."""
    return ((e + 1023) << 52).view(F64)


def bracket(y):
    """For float64 y: (lo, hi, mid, dist): lo <= y < hi adjacent bf16 values, mid their
    midpoint (the rounding boundary between them) and |y - mid| in f32 ulps relative to
    |y| (i.e. divided by 2^-23 |y|)."""
    y = y.to(F64)
    _, e = torch.frexp(y)  # y = m * 2^e, 0.5 <= |m| < 1
    e = e.to(torch.int64).clamp(min=-125)  # bf16 subnormals share the spacing 2^-133
    s = pow2(e - 8)  # bf16 spacing in [2^(e-1), 2^e)
    lo = torch.floor(y / s) * s
    hi = lo + s
    mid = lo + s / 2
    with torch.no_grad():
        dist = (y - mid).abs() / (y.abs() * 2.0 ** -23)
    dist = torch.where(torch.isfinite(dist), dist, torch.full_like(dist, float("inf")))
    return lo, hi, mid, dist


def rn_bf16_f64(y):
    """Correctly rounded (RNE) bf16 of float64 y, returned as bf16."""
    lo, hi, mid, _ = bracket(y)
    s = hi - lo
    k = torch.floor(y / s)  # lo = k * s
    even_lo = torch.remainder(k, 2) == 0
    r = torch.where(y < mid, lo, torch.where(y > mid, hi, torch.where(even_lo, lo, hi)))
    r = torch.where(torch.isfinite(y), r, y)
    return r.to(F32).to(BF16)  # r is a bf16 value, both conversions exact


def bmul(a, b):
    """bf16 product as torch computes it: f32 product (exact for bf16 inputs), one RNE."""
    return (a.to(F32) * b.to(F32)).to(BF16)


def badd(a, b):
    """bf16 sum as torch computes it: f32 sum, then RNE to bf16."""
    return (a.to(F32) + b.to(F32)).to(BF16)


def fmt_bf16(v):
    v = v.reshape(())
    return f"{float(v.to(F32)):.9g}(0x{int(bits16(v.reshape(1))) & 0xFFFF:04x})"


def unravel(flat, shape):
    out = []
    for d in reversed(shape):
        out.append(flat % d)
        flat = flat // d
    return tuple(reversed(out))


def basic_stats(tess, hf):
    m = mismatch_mask(tess, hf)
    n = int(m.sum())
    total = m.numel()
    st = {"total": total, "mismatches": n, "pct": 100.0 * n / total if total else 0.0,
          "max_abs_diff": 0.0, "max_ulp_diff": 0}
    if n:
        a, b = tess[m], hf[m]
        d = (a.to(F64) - b.to(F64)).abs()
        ok = ~(torch.isnan(a) | torch.isnan(b))
        if bool(ok.any()):
            dd = d[ok]
            st["max_abs_diff"] = float(dd[~torch.isnan(dd)].max()) if bool((~torch.isnan(dd)).any()) else float("nan")
            st["max_ulp_diff"] = int((ordered_key(a[ok]) - ordered_key(b[ok])).abs().max())
        if bool((~ok).any()):
            st["nan_vs_number"] = int((~ok).sum())
    return st, m


class Report:
    """Per-output result: plain counts, explained counts by rule, unexplained examples."""

    def __init__(self, name, stats):
        self.d = dict(name=name, **stats)
        self.d["explained"] = {}
        self.d["unexplained"] = 0
        self.d["unexplained_reasons"] = {}
        self.d["unexplained_examples"] = []
        self.d["max_boundary_dist_f32_ulps_explained"] = None

    def explain(self, rule, n):
        if n:
            self.d["explained"][rule] = self.d["explained"].get(rule, 0) + int(n)

    def unexplained(self, reason, n, examples=()):
        if n:
            self.d["unexplained"] += int(n)
            self.d["unexplained_reasons"][reason] = self.d["unexplained_reasons"].get(reason, 0) + int(n)
            room = MAX_EXAMPLES - len(self.d["unexplained_examples"])
            self.d["unexplained_examples"].extend(list(examples)[:max(room, 0)])

    def boundary_dist(self, dist_explained):
        if dist_explained.numel():
            v = float(dist_explained.max())
            old = self.d["max_boundary_dist_f32_ulps_explained"]
            self.d["max_boundary_dist_f32_ulps_explained"] = v if old is None else max(old, v)

    def print(self, indent="  "):
        d = self.d
        print(f"{indent}{d['name']}: {d['mismatches']}/{d['total']} mismatching "
              f"({d['pct']:.4f}%), max |diff| {d['max_abs_diff']:.6g}, max {d['max_ulp_diff']} bf16 ulp")
        for rule, n in sorted(d["explained"].items()):
            print(f"{indent}  explained by {rule}: {n}")
        if d["max_boundary_dist_f32_ulps_explained"] is not None:
            print(f"{indent}  largest boundary distance among explained: "
                  f"{d['max_boundary_dist_f32_ulps_explained']:.3f} f32 ulps")
        for k, v in d.items():
            if k.startswith("check_"):
                print(f"{indent}  {k}: {v}")
        print(f"{indent}  UNEXPLAINED: {d['unexplained']}")
        for reason, n in sorted(d["unexplained_reasons"].items()):
            print(f"{indent}    {reason}: {n}")
        for ex in d["unexplained_examples"]:
            print(f"{indent}    {ex}")


# ----------------------------------------------------------------------------------------
# transformers: Qwen3 pieces, checked against the installed API at run time

class HF:
    def __init__(self, device):
        import transformers
        from transformers.models.qwen3 import modeling_qwen3 as mq
        self.transformers = transformers
        self.mq = mq
        self.device = device
        self.notes = []
        self.config = self._make_config()
        self._rot = None
        self._act = None

    def note(self, s):
        self.notes.append(s)
        print(f"  [transformers] {s}")

    # -- config ---------------------------------------------------------------------------
    def _effective_rope(self, cfg):
        rp = getattr(cfg, "rope_parameters", None)
        if isinstance(rp, dict):
            if "rope_theta" not in rp and "full_attention" in rp and isinstance(rp["full_attention"], dict):
                rp = rp["full_attention"]
            theta = rp.get("rope_theta", getattr(cfg, "rope_theta", None))
            rtype = rp.get("rope_type", rp.get("type", "default"))
            return theta, rtype
        theta = getattr(cfg, "rope_theta", None)
        rs = getattr(cfg, "rope_scaling", None)
        rtype = "default" if not rs else rs.get("rope_type", rs.get("type", "default"))
        return theta, rtype

    def _make_config(self):
        from transformers import Qwen3Config
        base = dict(vocab_size=151936, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                    num_hidden_layers=40, num_attention_heads=N_HEADS,
                    num_key_value_heads=N_KV_HEADS, head_dim=HEAD_DIM, hidden_act="silu",
                    max_position_embeddings=MAX_POS, rms_norm_eps=EPS,
                    tie_word_embeddings=False)
        try:
            params = set(inspect.signature(Qwen3Config.__init__).parameters)
        except (TypeError, ValueError):
            params = set()
        fields = set(getattr(Qwen3Config, "__dataclass_fields__", {}) or {}) | params
        attempts = []
        if "rope_parameters" in fields:
            attempts.append(("rope_parameters={'rope_type': 'default', 'rope_theta': 1e6}",
                             {"rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA}}))
        attempts.append(("rope_theta=1e6", {"rope_theta": ROPE_THETA}))
        if "rope_parameters" not in fields:
            attempts.append(("rope_parameters={'rope_type': 'default', 'rope_theta': 1e6}",
                             {"rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA}}))
        errors = []
        for label, extra in attempts:
            try:
                cfg = Qwen3Config(**base, **extra)
            except Exception as e:  # noqa: BLE001 - any API mismatch: try the next form
                errors.append(f"{label}: {type(e).__name__}: {e}")
                continue
            theta, rtype = self._effective_rope(cfg)
            if theta is not None and float(theta) == ROPE_THETA and rtype == "default":
                self.note(f"Qwen3Config accepted {label}: effective rope_theta {theta}, rope_type {rtype}")
                return cfg
            errors.append(f"{label}: built, but effective rope_theta={theta}, rope_type={rtype}")
        raise RuntimeError("cannot build a Qwen3Config with rope_theta 1e6: " + "; ".join(errors))

    # -- RMSNorm --------------------------------------------------------------------------
    def rms_norm(self, x, w):
        norm = self.mq.Qwen3RMSNorm(w.shape[0], eps=EPS)
        norm = norm.to(device=self.device, dtype=BF16)
        with torch.no_grad():
            norm.weight.copy_(w)
        assert norm.weight.dtype == BF16
        return norm(x)

    # -- RoPE -----------------------------------------------------------------------------
    def rotary(self):
        if self._rot is not None:
            return self._rot
        cls = self.mq.Qwen3RotaryEmbedding
        params = inspect.signature(cls.__init__).parameters
        if "config" in params:
            rot = cls(config=self.config)
            self.note(f"Qwen3RotaryEmbedding{inspect.signature(cls.__init__)}: built with config= (no device)")
        else:  # very old API: (dim, max_position_embeddings, base, device)
            rot = cls(HEAD_DIM, max_position_embeddings=MAX_POS, base=ROPE_THETA)
            self.note("Qwen3RotaryEmbedding: legacy (dim, max_position_embeddings, base) constructor")
        rot = rot.to(self.device)  # buffers move, inv_freq stays f32
        inv = rot.inv_freq
        if inv.dtype != F32:
            warn(f"HF inv_freq is {inv.dtype}, not float32")
        expect = 1.0 / (ROPE_THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=F64) / HEAD_DIM))
        rel = ((inv.double().cpu() - expect).abs() / expect).max().item()
        ok = inv.shape == (HEAD_DIM // 2,) and rel < 1e-6
        self.inv_check = {"shape": list(inv.shape), "max_rel_err_vs_f64": rel, "ok": bool(ok)}
        self.note(f"inv_freq shape {list(inv.shape)}, max rel err vs 1/1e6^(2i/128) in f64: {rel:.3g}"
                  f" ({'ok' if ok else 'WRONG: rope_theta did not reach the module'})")
        self.note(f"attention_scaling = {getattr(rot, 'attention_scaling', None)}, rope_type = {getattr(rot, 'rope_type', None)}")
        self._rot = rot
        return rot

    def cos_sin(self, pos):
        rot = self.rotary()
        T = pos.shape[0]
        position_ids = pos.to(torch.int64).to(self.device)[None, :]
        x = torch.zeros(1, T, HEAD_DIM, dtype=BF16, device=self.device)
        with torch.no_grad():
            cos, sin = rot(x, position_ids)
        assert cos.dtype == BF16 and sin.dtype == BF16, (cos.dtype, sin.dtype)
        return cos.reshape(T, HEAD_DIM), sin.reshape(T, HEAD_DIM)

    def apply_rope(self, q, k, cos, sin):
        """q [T,Hq,D], k [T,Hk,D], cos/sin [T,D] -> HF's apply_rotary_pos_emb in HF's
        [1, heads, T, D] layout with cos/sin [1, T, D] and unsqueeze_dim=1."""
        fn = self.mq.apply_rotary_pos_emb
        qh = q.permute(1, 0, 2).unsqueeze(0)
        kh = k.permute(1, 0, 2).unsqueeze(0)
        c, s = cos.unsqueeze(0), sin.unsqueeze(0)
        params = inspect.signature(fn).parameters
        if "unsqueeze_dim" in params:
            qo, ko = fn(qh, kh, c, s, unsqueeze_dim=1)
        else:
            qo, ko = fn(qh, kh, c, s)
        return qo[0].permute(1, 0, 2).contiguous(), ko[0].permute(1, 0, 2).contiguous()

    # -- SwiGLU ---------------------------------------------------------------------------
    def act_fn(self):
        if self._act is not None:
            return self._act
        try:
            with torch.device("meta"):
                mlp = self.mq.Qwen3MLP(self.config)
            self.note("Qwen3MLP(config) built on the meta device; using its act_fn")
        except Exception as e:  # noqa: BLE001
            warn(f"Qwen3MLP on meta failed ({e}); building it on the CPU")
            mlp = self.mq.Qwen3MLP(self.config)
        act = mlp.act_fn
        from transformers.activations import ACT2FN
        self.note(f"Qwen3MLP.act_fn = {type(act).__name__}; ACT2FN['silu'] = {type(ACT2FN['silu']).__name__}")
        self._act = act.to(self.device) if isinstance(act, torch.nn.Module) else act
        return self._act


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


# ----------------------------------------------------------------------------------------
# outputs of a step

def split_outputs(outs, expected):
    """expected: list of (shape, dtype) of the step's results in order.  Returns (results,
    temps) where temps is {name: tensor}."""
    names = sorted(outs)
    pat = re.compile(r"^out(\d*)$")
    outnames = [n for n in names if pat.match(n)]
    outnames.sort(key=lambda n: int(pat.match(n).group(1) or -1))
    want = ["out"] if len(expected) == 1 else [f"out{i}" for i in range(len(expected))]
    if outnames == want:
        chosen = outnames
    else:
        warn(f"output names {names} are not {want}; matching by position in sorted order")
        cands = [n for n in names if not n.startswith("t")] + [n for n in names if n.startswith("t")]
        chosen, used = [], set()
        for shape, dtype in expected:
            for n in cands:
                if n not in used and tuple(outs[n].shape) == tuple(shape) and outs[n].dtype == dtype:
                    chosen.append(n)
                    used.add(n)
                    break
            else:
                raise RuntimeError(f"no output of shape {shape} {dtype} among {names}")
    temps = {n: outs[n] for n in names if n not in chosen}
    return [outs[n] for n in chosen], chosen, temps


# ----------------------------------------------------------------------------------------
# RMSNorm

def analyse_rmsnorm(name, x, w, tess, hf_out, tol):
    D = x.shape[-1]
    x2, t2, h2 = x.reshape(-1, D), tess.reshape(-1, D), hf_out.reshape(-1, D)
    # HF's op sequence (Qwen3RMSNorm.forward), replicated to get its n.
    xf = x2.to(F32)
    var = xf.pow(2).mean(-1, keepdim=True)
    n_hf = (xf * torch.rsqrt(var + EPS)).to(BF16)
    replica_bad = int(mismatch_mask(w * n_hf, h2).sum())
    st, m = basic_stats(t2, h2)
    rep = Report(name, st)
    rep.d["check_hf_replica_mismatches"] = replica_bad
    rep.unexplained("self-check: HF module != w*bf16(x*rsqrt(var+eps)) replica", replica_bad)
    if not st["mismatches"]:
        return rep
    rc = m.nonzero()
    r, c = rc[:, 0], rc[:, 1]
    ms = (x2.to(F64) ** 2).mean(-1)
    eps32 = float(torch.tensor(EPS, dtype=F32))
    rms = torch.sqrt(ms[r] + eps32)
    xv = x2[r, c]
    y = xv.to(F64) / rms
    lo, hi, mid, dist = bracket(y)
    near = dist <= tol
    lo_b, hi_b = lo.to(F32).to(BF16), hi.to(F32).to(BF16)
    hn = n_hf[r, c]
    hf_lo, hf_hi = same_bits(hn, lo_b), same_bits(hn, hi_b)
    other = torch.where(hf_lo, hi_b, lo_b)
    wc = w[c]
    cand = bmul(wc, other)
    tv, hv = t2[r, c], h2[r, c]
    tess_ok = same_bits(tv, cand)
    ok = near & (hf_lo | hf_hi) & tess_ok
    rep.explain("rms_boundary", int(ok.sum()))
    rep.boundary_dist(dist[ok])
    bad = (~ok).nonzero().flatten()
    if bad.numel():
        exs = []
        for i in bad[:MAX_EXAMPLES].tolist():
            idx = unravel(int(r[i]) * D + int(c[i]), tuple(x.shape))
            why = []
            if not bool(near[i]):
                why.append(f"not near a boundary ({float(dist[i]):.1f} f32 ulps > {tol})")
            if not bool(hf_lo[i] | hf_hi[i]):
                why.append("HF's n is not a neighbour")
            if not bool(tess_ok[i]):
                why.append("tessel != bf16(w*other neighbour)")
            exs.append(
                f"{name}{list(idx)}: x={fmt_bf16(xv[i])} rms={float(rms[i]):.17g} y={float(y[i]):.17g} "
                f"boundary={float(mid[i]):.17g} dist={float(dist[i]):.2f} f32ulp lo={fmt_bf16(lo_b[i])} "
                f"hi={fmt_bf16(hi_b[i])} n_hf={fmt_bf16(hn[i])} w={fmt_bf16(wc[i])} "
                f"w*lo={fmt_bf16(bmul(wc[i], lo_b[i]))} w*hi={fmt_bf16(bmul(wc[i], hi_b[i]))} "
                f"tessel={fmt_bf16(tv[i])} hf={fmt_bf16(hv[i])} [{'; '.join(why)}]")
        rep.unexplained("rms: not a boundary case", bad.numel(), exs)
    return rep


# ----------------------------------------------------------------------------------------
# SwiGLU

def analyse_swiglu(name, gate, up, tess, hf_out, hf_silu, tol):
    st, m = basic_stats(tess, hf_out)
    rep = Report(name, st)
    f_silu = torch.nn.functional.silu(gate)
    act_bad = int(mismatch_mask(hf_silu, f_silu).sum())
    rep.d["check_act_fn_vs_F_silu_mismatches"] = act_bad
    rep.unexplained("self-check: act_fn != F.silu", act_bad)
    rep_bad = int(mismatch_mask(hf_silu * up, hf_out).sum())
    rep.d["check_hf_replica_mismatches"] = rep_bad
    rep.unexplained("self-check: HF out != act_fn(gate)*up", rep_bad)
    if not st["mismatches"]:
        return rep
    g, u, tv, hv, hs = gate[m], up[m], tess[m], hf_out[m], hf_silu[m]
    g64 = g.to(F64)
    y = g64 / (1.0 + torch.exp(-g64))
    lo, hi, mid, dist = bracket(y)
    near = dist <= tol
    lo_b, hi_b = lo.to(F32).to(BF16), hi.to(F32).to(BF16)
    hf_lo, hf_hi = same_bits(hs, lo_b), same_bits(hs, hi_b)
    other = torch.where(hf_lo, hi_b, lo_b)
    cand = bmul(u, other)
    tess_ok = same_bits(tv, cand)
    ok = near & (hf_lo | hf_hi) & tess_ok
    rep.explain("silu_boundary", int(ok.sum()))
    rep.boundary_dist(dist[ok])
    bad = (~ok).nonzero().flatten()
    if bad.numel():
        flat = m.reshape(-1).nonzero().flatten()
        exs = []
        for i in bad[:MAX_EXAMPLES].tolist():
            idx = unravel(int(flat[i]), tuple(gate.shape))
            why = []
            if not bool(near[i]):
                why.append(f"not near a boundary ({float(dist[i]):.1f} f32 ulps > {tol})")
            if not bool(hf_lo[i] | hf_hi[i]):
                why.append("HF's silu is not a neighbour")
            if not bool(tess_ok[i]):
                why.append("tessel != bf16(up*other neighbour)")
            exs.append(
                f"{name}{list(idx)}: gate={fmt_bf16(g[i])} up={fmt_bf16(u[i])} silu64={float(y[i]):.17g} "
                f"boundary={float(mid[i]):.17g} dist={float(dist[i]):.2f} f32ulp lo={fmt_bf16(lo_b[i])} "
                f"hi={fmt_bf16(hi_b[i])} silu_hf={fmt_bf16(hs[i])} up*lo={fmt_bf16(bmul(u[i], lo_b[i]))} "
                f"up*hi={fmt_bf16(bmul(u[i], hi_b[i]))} tessel={fmt_bf16(tv[i])} hf={fmt_bf16(hv[i])} "
                f"[{'; '.join(why)}]")
        rep.unexplained("silu: not a boundary case", bad.numel(), exs)
    return rep


# ----------------------------------------------------------------------------------------
# RoPE

def find_tables(temps, T, cos_hf, sin_hf):
    """tessel's bf16 cos/sin tables among the temporaries, by shape and closeness to HF."""
    cands = {n: t.reshape(T, HEAD_DIM) for n, t in temps.items()
             if t.dtype == BF16 and t.numel() == T * HEAD_DIM}
    if not cands:
        return None, None, {}
    dev = cos_hf.device
    score = {n: (int(mismatch_mask(t.to(dev), cos_hf).sum()), int(mismatch_mask(t.to(dev), sin_hf).sum()))
             for n, t in cands.items()}
    info = {"candidates": {n: {"mismatch_vs_hf_cos": a, "mismatch_vs_hf_sin": b} for n, (a, b) in score.items()}}
    names = sorted(cands)
    cos_n = min(names, key=lambda n: score[n][0])
    rest = [n for n in names if n != cos_n]
    sin_n = min(rest, key=lambda n: score[n][1]) if rest else None
    if sin_n is not None and score[cos_n][1] < score[cos_n][0] and score[sin_n][0] < score[sin_n][1]:
        cos_n, sin_n = sin_n, cos_n
    if len(cands) > 2:
        warn(f"{len(cands)} bf16 [T,128] temporaries {names}; chose cos={cos_n}, sin={sin_n}")
    if sin_n is None:
        warn(f"only one bf16 [T,128] temporary ({cos_n}); the table path needs both")
        return None, None, info
    info["cos"], info["sin"] = cos_n, sin_n
    return cands[cos_n].to(dev), cands[sin_n].to(dev), info


def analyse_table(name, tab_t, tab_hf, ref_hf, ref_t, inv_diff_col, tol):
    """ref_hf / ref_t: float64 cos or sin of HF's / tessel's f32 angles [T,128];
    inv_diff_col: bool [128], True where tessel's inv_freq differs from HF's."""
    st, m = basic_stats(tab_t, tab_hf)
    rep = Report(name, st)
    # HF's own table against the correctly rounded value (information).
    rn_hf = rn_bf16_f64(ref_hf)
    hm = mismatch_mask(tab_hf, rn_hf)
    _, _, _, dall = bracket(ref_hf)
    rep.d["hf_not_correctly_rounded"] = int(hm.sum())
    rep.d["hf_not_correctly_rounded_and_not_near_boundary"] = int((hm & (dall > tol)).sum())
    tm = mismatch_mask(tab_t, rn_hf)
    rep.d["tessel_not_correctly_rounded_wrt_hf_angle"] = int(tm.sum())
    unexpl = torch.zeros_like(m)
    if not st["mismatches"]:
        return rep, m, unexpl
    td = m.nonzero()
    t_i, d_i = td[:, 0], td[:, 1]
    tv, hv = tab_t[t_i, d_i], tab_hf[t_i, d_i]
    y = ref_hf[t_i, d_i]
    lo, hi, mid, dist = bracket(y)
    lo_b, hi_b = lo.to(F32).to(BF16), hi.to(F32).to(BF16)
    t_nb = same_bits(tv, lo_b) | same_bits(tv, hi_b)
    h_nb = same_bits(hv, lo_b) | same_bits(hv, hi_b)
    ok_b = (dist <= tol) & t_nb & h_nb
    ok_inv = torch.zeros_like(ok_b)
    if ref_t is not None and bool(inv_diff_col.any()):
        yt = ref_t[t_i, d_i]
        lo2, hi2, _, dist2 = bracket(yt)
        rn2 = rn_bf16_f64(yt)
        nb2 = (dist2 <= tol) & (same_bits(tv, lo2.to(F32).to(BF16)) | same_bits(tv, hi2.to(F32).to(BF16)))
        ok_inv = inv_diff_col[d_i] & ~ok_b & (same_bits(tv, rn2) | nb2)
    rep.explain("table_boundary", int(ok_b.sum()))
    rep.explain("inv_freq_differs", int(ok_inv.sum()))
    rep.boundary_dist(dist[ok_b])
    ok = ok_b | ok_inv
    bad = (~ok).nonzero().flatten()
    if bad.numel():
        unexpl[t_i[bad], d_i[bad]] = True
        exs = []
        for i in bad[:MAX_EXAMPLES].tolist():
            exs.append(
                f"{name}[t={int(t_i[i])}, d={int(d_i[i])}]: f64={float(y[i]):.17g} boundary={float(mid[i]):.17g} "
                f"dist={float(dist[i]):.2f} f32ulp lo={fmt_bf16(lo_b[i])} hi={fmt_bf16(hi_b[i])} "
                f"tessel={fmt_bf16(tv[i])} hf={fmt_bf16(hv[i])} inv_differs={bool(inv_diff_col[d_i[i]])}")
        rep.unexplained("table: not a boundary case", bad.numel(), exs)
    return rep, m, unexpl


def analyse_rope_output(name, x, tess, hf_out, recompute, tab_mis, tab_unexpl):
    """x [T,H,D]; tab_mis / tab_unexpl: bool [T,D] (cos or sin differs / unexplained)."""
    st, m = basic_stats(tess, hf_out)
    rep = Report(name, st)
    rbad = mismatch_mask(recompute, tess)
    nr = int(rbad.sum())
    rep.d["check_recompute_with_tessel_tables_mismatches"] = nr
    if nr:
        idx = rbad.nonzero()[:MAX_EXAMPLES]
        exs = [f"{name}{idx[j].tolist()}: tessel={fmt_bf16(tess[tuple(idx[j])])} "
               f"HF formula on tessel tables={fmt_bf16(recompute[tuple(idx[j])])} hf={fmt_bf16(hf_out[tuple(idx[j])])}"
               for j in range(idx.shape[0])]
        rep.unexplained("tessel != HF formula on tessel's tables", nr, exs)
    if not st["mismatches"]:
        return rep
    thd = m.nonzero()
    t_i, h_i, d_i = thd[:, 0], thd[:, 1], thd[:, 2]
    diff_here = tab_mis[t_i, d_i]
    tab_ok = ~tab_unexpl[t_i, d_i]
    rec_ok = ~rbad[t_i, h_i, d_i]
    ok = diff_here & tab_ok & rec_ok
    rep.explain("rope_table", int(ok.sum()))
    # Elements that fail only through rec_ok were already counted above.
    bad = (~ok & rec_ok).nonzero().flatten()
    if bad.numel():
        exs = []
        for i in bad[:MAX_EXAMPLES].tolist():
            t, h, d = int(t_i[i]), int(h_i[i]), int(d_i[i])
            why = "no table difference at (t,d)" if not bool(diff_here[i]) else "the table difference there is unexplained"
            exs.append(f"{name}[{t},{h},{d}]: x={fmt_bf16(x[t, h, d])} tessel={fmt_bf16(tess[t, h, d])} "
                       f"hf={fmt_bf16(hf_out[t, h, d])} [{why}]")
        rep.unexplained("rope output: not explained by a table difference", bad.numel(), exs)
    return rep


def analyse_rope_output_fallback(name, x, tess, hf_out, cos_hf, sin_hf, cref, sref, tol):
    st, m = basic_stats(tess, hf_out)
    rep = Report(name, st)
    if not st["mismatches"]:
        return rep
    thd = m.nonzero()
    t_i, h_i, d_i = thd[:, 0], thd[:, 1], thd[:, 2]
    xv = x[t_i, h_i, d_i]
    rx = rotate_half(x)[t_i, h_i, d_i]
    tv, hv = tess[t_i, h_i, d_i], hf_out[t_i, h_i, d_i]
    hc, hs = cos_hf[t_i, d_i], sin_hf[t_i, d_i]

    def alt(yref, hval):
        lo, hi, _, dist = bracket(yref)
        lo_b, hi_b = lo.to(F32).to(BF16), hi.to(F32).to(BF16)
        other = torch.where(same_bits(hval, lo_b), hi_b, torch.where(same_bits(hval, hi_b), lo_b, hval))
        near = dist <= tol
        return torch.where(near, other, hval), near, dist

    ac, nc, dc = alt(cref[t_i, d_i], hc)
    as_, ns, ds = alt(sref[t_i, d_i], hs)
    emu_hf = badd(bmul(xv, hc), bmul(rx, hs))
    emu_bad = int(mismatch_mask(emu_hf, hv).sum())
    rep.d["check_emulation_vs_hf_mismatches"] = emu_bad
    rep.unexplained("self-check: bf16 emulation of HF's formula != HF", emu_bad)
    ok = torch.zeros_like(nc)
    for c, s in ((ac, hs), (hc, as_), (ac, as_)):
        ok |= same_bits(badd(bmul(xv, c), bmul(rx, s)), tv)
    ok &= nc | ns
    rep.explain("rope_output_boundary", int(ok.sum()))
    rep.boundary_dist(torch.minimum(torch.where(nc, dc, torch.inf), torch.where(ns, ds, torch.inf))[ok])
    bad = (~ok).nonzero().flatten()
    if bad.numel():
        exs = []
        for i in bad[:MAX_EXAMPLES].tolist():
            exs.append(f"{name}[{int(t_i[i])},{int(h_i[i])},{int(d_i[i])}]: x={fmt_bf16(xv[i])} "
                       f"rot_half(x)={fmt_bf16(rx[i])} cos64={float(cref[t_i[i], d_i[i]]):.17g} "
                       f"(dist {float(dc[i]):.2f}) sin64={float(sref[t_i[i], d_i[i]]):.17g} (dist {float(ds[i]):.2f}) "
                       f"cos_hf={fmt_bf16(hc[i])} sin_hf={fmt_bf16(hs[i])} tessel={fmt_bf16(tv[i])} hf={fmt_bf16(hv[i])}")
        rep.unexplained("rope output: not a boundary case (fallback)", bad.numel(), exs)
    return rep


# ----------------------------------------------------------------------------------------
# steps

STEP_INPUTS = {
    "hidden_norm": {"x", "w"},
    "qk_norm": {"q", "k", "wq", "wk"},
    "rope_qk": {"q", "k", "pos"},
    "swiglu": {"gate", "up"},
}


def which_step(name, inputs):
    if name in STEP_INPUTS and STEP_INPUTS[name] <= set(inputs):
        return name
    for s, keys in STEP_INPUTS.items():
        if set(inputs) == keys:
            warn(f"step `{name}` recognised as {s} by its input names")
            return s
    return None


def run_step(step, ins, outs, hf, dev, args):
    ex = {"step": step, "outputs": [], "tables": [], "info": {}}
    I = {k: v.to(dev) for k, v in ins.items()}
    if step == "hidden_norm":
        x, w = I["x"], I["w"]
        (o,), names, temps = split_outputs(outs, [(x.shape, BF16)])
        with torch.no_grad():
            h = hf.rms_norm(x, w)
        ex["outputs"].append(analyse_rmsnorm(f"out ({names[0]})", x, w, o.to(dev), h, args.tol_rms))
    elif step == "qk_norm":
        q, k, wq, wk = I["q"], I["k"], I["wq"], I["wk"]
        (oq, ok_), names, temps = split_outputs(outs, [(q.shape, BF16), (k.shape, BF16)])
        with torch.no_grad():
            hq, hk = hf.rms_norm(q, wq), hf.rms_norm(k, wk)
        ex["outputs"].append(analyse_rmsnorm(f"q_normed ({names[0]})", q, wq, oq.to(dev), hq, args.tol_rms))
        ex["outputs"].append(analyse_rmsnorm(f"k_normed ({names[1]})", k, wk, ok_.to(dev), hk, args.tol_rms))
    elif step == "swiglu":
        g, u = I["gate"], I["up"]
        (o,), names, temps = split_outputs(outs, [(g.shape, BF16)])
        act = hf.act_fn()
        with torch.no_grad():
            s = act(g)
            h = s * u
        ex["outputs"].append(analyse_swiglu(f"out ({names[0]})", g, u, o.to(dev), h, s, args.tol_silu))
    elif step == "rope_qk":
        ex.update(run_rope(I, outs, hf, dev, args))
    else:
        raise AssertionError(step)
    return ex


def run_rope(I, outs, hf, dev, args):
    q, k, pos = I["q"], I["k"], I["pos"]
    T = pos.shape[0]
    (oq, ok_), names, temps = split_outputs(outs, [(q.shape, BF16), (k.shape, BF16)])
    oq, ok_ = oq.to(dev), ok_.to(dev)
    res = {"outputs": [], "tables": [], "info": {}}
    info = res["info"]
    with torch.no_grad():
        cos_hf, sin_hf = hf.cos_sin(pos)
        hq, hk = hf.apply_rope(q, k, cos_hf, sin_hf)
    info["hf_inv_freq_check"] = hf.inv_check
    # Self-check: HF's apply_rotary_pos_emb is the plain bf16 formula.
    lq = q * cos_hf[:, None, :] + rotate_half(q) * sin_hf[:, None, :]
    lk = k * cos_hf[:, None, :] + rotate_half(k) * sin_hf[:, None, :]
    info["check_hf_apply_vs_formula_mismatches"] = int(mismatch_mask(lq, hq).sum() + mismatch_mask(lk, hk).sum())
    inv_hf = hf.rotary().inv_freq.detach().to(F32).cpu()
    # Reference angles: f32(pos) * inv_freq rounded once to f32 (on the CPU: IEEE multiply).
    posf = pos.cpu().to(F32)
    ang_hf = posf[:, None] * inv_hf[None, :]
    emb_hf = torch.cat((ang_hf, ang_hf), -1).to(F64)
    cref, sref = torch.cos(emb_hf).to(dev), torch.sin(emb_hf).to(dev)
    # tessel's f32 temporaries: inv_freq [64] and any angle table.
    inv_t = None
    for n, t in sorted(temps.items()):
        if t.dtype == F32 and t.numel() == HEAD_DIM // 2:
            if inv_t is not None:
                warn(f"several f32 [64] temporaries; using the first for inv_freq, ignoring {n}")
                continue
            inv_t = t.reshape(-1).cpu()
            d = (inv_t.view(torch.int32) != inv_hf.view(torch.int32))
            info["inv_freq_temp"] = n
            info["inv_freq_mismatches_vs_hf"] = int(d.sum())
            info["inv_freq_mismatch_detail"] = [
                {"i": int(i), "tessel": float(inv_t[i]), "hf": float(inv_hf[i]),
                 "ulps": int(inv_t.view(torch.int32)[i]) - int(inv_hf.view(torch.int32)[i])}
                for i in d.nonzero().flatten().tolist()]
        elif t.dtype == F32 and t.numel() in (T * HEAD_DIM // 2, T * HEAD_DIM):
            ref = ang_hf if t.numel() == T * HEAD_DIM // 2 else torch.cat((ang_hf, ang_hf), -1)
            info.setdefault("angle_temps", {})[n] = {
                "shape": list(t.shape),
                "mismatches_vs_hf_angles": int((t.reshape(ref.shape).cpu().view(torch.int32) != ref.view(torch.int32)).sum())}
    if inv_t is None:
        info["inv_freq_temp"] = None
        warn("no f32 [64] inv_freq temporary in the dump")
    print(f"  rope: HF inv_freq vs tessel: {info.get('inv_freq_mismatches_vs_hf', 'n/a')} differing of 64"
          + (f" ({info['inv_freq_temp']})" if info.get("inv_freq_temp") else ""))
    for e in info.get("inv_freq_mismatch_detail", []):
        print(f"    inv_freq[{e['i']}]: tessel {e['tessel']!r} hf {e['hf']!r} ({e['ulps']:+d} f32 ulp)")
    if info.get("angle_temps"):
        print(f"  rope: angle temporaries vs HF angles: {info['angle_temps']}")
    if info["check_hf_apply_vs_formula_mismatches"]:
        warn("HF's apply_rotary_pos_emb differs from q*cos + rotate_half(q)*sin")
    cos_t, sin_t, tinfo = find_tables(temps, T, cos_hf, sin_hf)
    info["tables"] = tinfo
    extra_unexpl = info["check_hf_apply_vs_formula_mismatches"]
    if not hf.inv_check["ok"]:
        extra_unexpl += 1
    if cos_t is not None:
        print(f"  rope: tessel tables: cos={tinfo['cos']} sin={tinfo['sin']}")
        inv_diff = torch.zeros(HEAD_DIM, dtype=torch.bool)
        ref_t = None
        if inv_t is not None and info["inv_freq_mismatches_vs_hf"]:
            dd = inv_t.view(torch.int32) != inv_hf.view(torch.int32)
            inv_diff = torch.cat((dd, dd))
            ang_t = posf[:, None] * inv_t[None, :]
            emb_t = torch.cat((ang_t, ang_t), -1).to(F64)
            ref_t = (torch.cos(emb_t).to(dev), torch.sin(emb_t).to(dev))
        inv_diff = inv_diff.to(dev)
        rc, cm, cu = analyse_table(f"cos table ({tinfo['cos']})", cos_t, cos_hf, cref,
                                   ref_t[0] if ref_t else None, inv_diff, args.tol_rope)
        rs, sm, su = analyse_table(f"sin table ({tinfo['sin']})", sin_t, sin_hf, sref,
                                   ref_t[1] if ref_t else None, inv_diff, args.tol_rope)
        res["tables"] += [rc, rs]
        with torch.no_grad():
            rq, rk = hf.apply_rope(q, k, cos_t, sin_t)
        tab_mis, tab_un = cm | sm, cu | su
        res["outputs"].append(analyse_rope_output(f"q_rot ({names[0]})", q, oq, hq, rq, tab_mis, tab_un))
        res["outputs"].append(analyse_rope_output(f"k_rot ({names[1]})", k, ok_, hk, rk, tab_mis, tab_un))
    else:
        warn("tessel's cos/sin tables are not in the dump: falling back to the boundary test on outputs")
        res["outputs"].append(analyse_rope_output_fallback(f"q_rot ({names[0]})", q, oq, hq, cos_hf, sin_hf, cref, sref, args.tol_rope))
        res["outputs"].append(analyse_rope_output_fallback(f"k_rot ({names[1]})", k, ok_, hk, cos_hf, sin_hf, cref, sref, args.tol_rope))
    if extra_unexpl:
        res["outputs"][0].unexplained("self-check failed (HF apply formula / inv_freq)", extra_unexpl)
    return res


def discover(root):
    files = sorted(set(glob.glob(os.path.join(root, "*.inputs.safetensors"))
                       + glob.glob(os.path.join(root, "*", "*.inputs.safetensors"))
                       + glob.glob(os.path.join(root, "*", "*", "*.inputs.safetensors"))))
    found = []
    for f in files:
        step = os.path.basename(f)[: -len(".inputs.safetensors")]
        o = f[: -len(".inputs.safetensors")] + ".outputs.safetensors"
        found.append((step, f, o))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--json", help="write every number here")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument("--tol-rms", type=float, default=8.0, help="R1 tolerance, f32 ulps of |y| (default 8)")
    ap.add_argument("--tol-rope", type=float, default=4.0, help="R2/R3f tolerance, f32 ulps (default 4)")
    ap.add_argument("--tol-silu", type=float, default=8.0, help="R4 tolerance, f32 ulps (default 8)")
    args = ap.parse_args()

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: CUDA is not available (use --device cpu to test the plumbing)", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    torch.set_grad_enabled(False)
    env = {"torch": torch.__version__, "device": str(dev)}
    if dev.type == "cuda":
        env["tf32_matmul_default"] = bool(torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False  # the torch default; HF's rope used a K=1 matmul
        torch.backends.cudnn.allow_tf32 = False
        env["gpu"] = torch.cuda.get_device_name(dev)
    steps = discover(args.dir)
    if not steps:
        print(f"error: no *.inputs.safetensors under {args.dir}", file=sys.stderr)
        return 2
    try:
        import transformers
        env["transformers"] = transformers.__version__
    except ImportError as e:
        print(f"error: transformers is not importable: {e}", file=sys.stderr)
        return 2
    print(f"torch {env['torch']}, transformers {env['transformers']}, device {env.get('gpu', dev)}")
    hf = HF(dev)
    results = []
    for step_name, fin, fout in steps:
        ins = load_safetensors(fin)
        step = which_step(step_name, ins)
        print(f"\n== {step_name} ({os.path.relpath(fin, args.dir)})")
        if step is None:
            warn(f"unknown step `{step_name}` with inputs {sorted(ins)}; skipped")
            continue
        if not os.path.exists(fout):
            warn(f"{fout} is missing; skipped")
            continue
        outs = load_safetensors(fout)
        shapes = {k: f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}" for k, v in ins.items()}
        print(f"  inputs: {shapes}")
        temps = sorted(n for n in outs if n.startswith("t"))
        print(f"  outputs file: {sorted(n for n in outs if not n.startswith('t'))}, {len(temps)} temporaries")
        ex = run_step(step, ins, outs, hf, dev, args)
        ex["dir"] = os.path.relpath(os.path.dirname(fin), args.dir)
        ex["step_file"] = step_name
        ex["inputs"] = shapes
        for r in ex["tables"] + ex["outputs"]:
            r.print()
        rules = {}
        for r in ex["tables"] + ex["outputs"]:
            for k, v in r.d["explained"].items():
                rules[k] = rules.get(k, 0) + v
        un = sum(r.d["unexplained"] for r in ex["tables"] + ex["outputs"])
        print(f"  -> {step_name}: explained by rule {rules or '{}'}; unexplained {un}")
        results.append(ex)

    print("\n== summary")
    hdr = f"{'step':<12} {'output':<24} {'mismatch':>10} {'total':>11} {'%':>9} {'max|d|':>10} {'ulp':>5} {'explained':>10} {'UNEXPL':>7}"
    print(hdr)
    print("-" * len(hdr))
    all_ok = True
    for ex in results:
        for r in ex["tables"] + ex["outputs"]:
            d = r.d
            expl = sum(d["explained"].values())
            all_ok &= d["unexplained"] == 0
            print(f"{ex['step_file']:<12} {d['name'][:24]:<24} {d['mismatches']:>10} {d['total']:>11} "
                  f"{d['pct']:>9.4f} {d['max_abs_diff']:>10.3g} {d['max_ulp_diff']:>5} {expl:>10} {d['unexplained']:>7}")
    print(f"\n{'ALL DIFFERENCES EXPLAINED' if all_ok else 'SOME DIFFERENCES ARE UNEXPLAINED'}")
    if args.json:
        out = {"env": env, "transformers_api": hf.notes, "tolerances_f32_ulps":
               {"rms": args.tol_rms, "rope": args.tol_rope, "silu": args.tol_silu},
               "all_explained": all_ok,
               "examples": [{**{k: v for k, v in ex.items() if k not in ("outputs", "tables")},
                             "tables": [r.d for r in ex["tables"]],
                             "outputs": [r.d for r in ex["outputs"]]} for ex in results]}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
        print(f"wrote {args.json}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
