#!/usr/bin/env python3
"""PyTorch / Hugging Face baselines for tessel's decoder layer and attention, on the GPU.

    python3 tests/gpu/bench_torch.py [--config examples/qwen3_14b/config.json]
        [--cases copy,gemm,attn,prefill,decode] [--no-compile] [--rounds 30] [--warmup 10]
        [--capacity 4096] [--prefill-T 2048] [--json OUT.json]

What is timed (H = hidden_size, nq/nkv heads, d = head_dim, all bf16):
  copy     dst.copy_(src), 1 GiB: the device copy bandwidth, (read + write bytes) / time; and
           x.sum() over 1 GiB (read only). The memory floors below use the copy rate.
  gemm     torch.matmul 8192 x 8192 x 8192: the measured bf16 tensor-core peak, the FLOP floor.
  attn     torch.nn.functional.scaled_dot_product_attention alone:
           * causal prefill, q [1, nq, S, d], k/v [1, nkv, S, d], S = 2048 and 4096;
           * decode, q [B, nq, 1, d] over k/v [B, nkv, 4096, d], B = 1 and 8, no mask;
           each with GQA two ways: enable_gqa=True on the nkv heads, and K/V expanded to nq
           heads with repeat_interleave BEFORE the timed call (a plain MHA kernel, the
           expansion not timed); and per SDPA backend (torch.nn.attention.SDPBackend: the
           default dispatch, FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION; one that
           refuses the inputs is listed as such).
  prefill  the HF decoder layer (transformers' Qwen3DecoderLayer / Qwen2DecoderLayer, random
           weights with make_checkpoint.py's magnitudes) on x [1, T, H], T = --prefill-T,
           causal; attn_implementation sdpa and eager; plain and torch.compile (default mode).
  decode   the same layer, B = 1 and 8 sequences, T = 1 and 8 new tokens, after a cache of
           L = capacity - T tokens (so the step fills the --capacity rows; every sequence
           has the same L, which a batched HF cache needs), attn_implementation sdpa:
           * DynamicCache, plain (HF's default generate: torch.cat grows the cache each step;
             the cache is reset to its L rows before each call, outside the timing);
           * StaticCache (transformers.cache_utils, max_cache_len = capacity), plain and
             torch.compile(mode="reduce-overhead", fullgraph=True) (--compile-mode), HF's
             compiled-decode path with CUDA graphs; it attends over all capacity rows with a
             mask. Its write
             position (StaticLayer.cumulative_length) is reset to L before each call.
  The mask (masking_utils.create_causal_mask) and the RoPE tables (the model's rotary class)
  are made once outside the timing: the model makes them once per step for all its layers.

Method: CUDA events around each call, after --warmup calls; before every timed call a 256
MiB buffer is zeroed (an L2 flush, outside the events), so weights, caches and attention
inputs come from HBM even where they would fit the 50 MB L2. The median of --rounds calls is
reported (and the minimum). Plain (uncompiled) PyTorch launches each kernel from Python, so
its times include launch gaps the GPU sits idle in; that is what running it costs.

Floors: memory = bytes that must move / copy rate (decode: the weights, the L + T cached rows
read, the T new rows written, x and out); compute = FLOPs / the gemm peak (prefill: 2 T per
weight, plus causal attention 2 T^2 d nq). The table gives the ratio time / max(floors).

--device cpu times with time.perf_counter, no flush, a 16 MiB copy and a 512^3 GEMM: plumbing
only (use a tiny --config).
Needs torch and transformers 5.x. Prints a table and writes JSON (--json, default
bench_torch.json).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)

os.environ.setdefault("USE_HUB_KERNELS", "0")

import torch  # noqa: E402

from hf_layer import hf_modules, load_config  # noqa: E402
from make_checkpoint import layer_spec, layer_tensors  # noqa: E402

BF16 = torch.bfloat16
FLUSH_BYTES = 256 << 20


class Timer:
    """Times calls: CUDA events on a GPU, perf_counter (after a synchronize) on the CPU."""

    def __init__(self, device, warmup, rounds):
        self.device, self.warmup, self.rounds = device, warmup, rounds
        self.cuda = device.type == "cuda"
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device) if self.cuda else None

    def __call__(self, fn, reset=None):
        """Median and minimum time of fn() in µs; reset() runs before each call, untimed."""
        for _ in range(self.warmup):
            if reset:
                reset()
            fn()
        if not self.cuda:
            times = []
            for _ in range(self.rounds):
                if reset:
                    reset()
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
            return statistics.median(times), min(times)
        pairs = []
        for _ in range(self.rounds):
            if reset:
                reset()
            self.flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            pairs.append((s, e))
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) * 1e3 for s, e in pairs]
        return statistics.median(times), min(times)


class Rows:
    """The result table: one row per timed case."""

    def __init__(self):
        self.rows = []

    def add(self, group, case, variant, median_us=None, min_us=None, floor_us=None, work=None, note=None):
        row = {"group": group, "case": case, "variant": variant, "median_us": median_us, "min_us": min_us,
               "floor_us": floor_us, "work": work, "note": note}
        if median_us and floor_us:
            row["ratio_to_floor"] = median_us / floor_us
        self.rows.append(row)
        self.print_row(row)

    @staticmethod
    def print_row(r):
        if r["median_us"] is None:
            print(f"  {r['case']:<34} {r['variant']:<34} {'-':>10}   {r['note']}", flush=True)
            return
        floor = f"{r['floor_us']:>9.1f}" if r["floor_us"] else f"{'':>9}"
        ratio = f"{r['ratio_to_floor']:>6.2f}x" if r.get("ratio_to_floor") else f"{'':>7}"
        print(f"  {r['case']:<34} {r['variant']:<34} {r['median_us']:>10.1f} {r['min_us']:>10.1f} "
              f"{floor} {ratio}  {r['work'] or ''}{'  ' + r['note'] if r['note'] else ''}", flush=True)


HEAD = (f"  {'case':<34} {'variant':<34} {'median µs':>10} {'min µs':>10} {'floor µs':>9} {'ratio':>7}  "
        f"achieved")


# ----------------------------------------------------------------------------------------
# the machine: copy bandwidth and GEMM peak


def bench_copy(timer, rows, device):
    n = 1 << 30 if device.type == "cuda" else 1 << 24
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    med, mn = timer(lambda: dst.copy_(src))
    copy_bw = 2 * n / (med * 1e-6)
    rows.add("machine", f"copy {n >> 20} MiB", "dst.copy_(src)", med, mn, work=f"{copy_bw / 1e12:.3f} TB/s (read+write)")
    x = src.view(BF16)
    med_r, mn_r = timer(lambda: x.sum(dtype=torch.float32))
    rows.add("machine", f"read {n >> 20} MiB", "x.sum()", med_r, mn_r, work=f"{n / (med_r * 1e-6) / 1e12:.3f} TB/s (read)")
    return copy_bw


def bench_gemm(timer, rows, device):
    n = 8192 if device.type == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=BF16)
    b = torch.randn(n, n, device=device, dtype=BF16)
    med, mn = timer(lambda: a @ b)
    peak = 2 * n ** 3 / (med * 1e-6)
    rows.add("machine", f"gemm {n}^3", "torch.matmul bf16", med, mn, work=f"{peak / 1e12:.1f} TFLOP/s")
    return peak


# ----------------------------------------------------------------------------------------
# attention alone


def sdpa_backends():
    from torch.nn.attention import SDPBackend
    return [("default", None)] + [(b.name.lower(), b) for b in
                                  (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                                   SDPBackend.CUDNN_ATTENTION)]


def time_sdpa(timer, rows, case, q, k, v, causal, flops, nbytes, copy_bw, peak):
    from torch.nn.attention import sdpa_kernel
    F = torch.nn.functional.scaled_dot_product_attention
    rep = q.shape[1] // k.shape[1]
    k_rep, v_rep = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    floor = max(nbytes / copy_bw, flops / peak) * 1e6 if copy_bw and peak else None
    for gqa_name, kk, vv, extra in (("enable_gqa", k, v, {"enable_gqa": True}),
                                    ("repeat_interleave (untimed)", k_rep, v_rep, {})):
        for bname, backend in sdpa_backends():
            def call():
                return F(q, kk, vv, is_causal=causal, **extra)
            variant = f"{gqa_name}, {bname}"
            try:
                if backend is None:
                    med, mn = timer(call)
                else:
                    with sdpa_kernel(backend):
                        med, mn = timer(call)
            except RuntimeError as e:
                rows.add("attn", case, variant, note=f"not run: {str(e).splitlines()[0][:90]}")
                continue
            work = f"{flops / (med * 1e-6) / 1e12:.1f} TFLOP/s, {nbytes / (med * 1e-6) / 1e12:.2f} TB/s"
            rows.add("attn", case, variant, med, mn, floor, work)


def bench_attn(timer, rows, spec, device, copy_bw, peak, decode_keys):
    nq, nkv, d = spec["heads"], spec["kv_heads"], spec["head_dim"]
    g = torch.Generator(device=device).manual_seed(0)
    for S in (2048, 4096):
        q = torch.randn(1, nq, S, d, device=device, dtype=BF16, generator=g)
        k = torch.randn(1, nkv, S, d, device=device, dtype=BF16, generator=g)
        v = torch.randn(1, nkv, S, d, device=device, dtype=BF16, generator=g)
        flops = 2 * S * S * d * nq  # QK^T and PV, 2 S^2 d each per head, halved by the mask
        nbytes = 2 * (2 * S * nq * d + 2 * S * nkv * d)  # q, out, k, v
        time_sdpa(timer, rows, f"prefill causal S={S} ({nq}/{nkv} heads)", q, k, v, True, flops, nbytes,
                  copy_bw, peak)
    for B in (1, 8):
        S = decode_keys
        q = torch.randn(B, nq, 1, d, device=device, dtype=BF16, generator=g)
        k = torch.randn(B, nkv, S, d, device=device, dtype=BF16, generator=g)
        v = torch.randn(B, nkv, S, d, device=device, dtype=BF16, generator=g)
        flops = 4 * B * S * d * nq
        nbytes = 2 * (2 * B * nkv * S * d + 2 * B * nq * d)
        time_sdpa(timer, rows, f"decode B={B} over {S} keys", q, k, v, False, flops, nbytes, copy_bw, peak)


# ----------------------------------------------------------------------------------------
# the HF decoder layer


class Layer:
    """transformers' decoder layer with random weights of make_checkpoint.py's magnitudes."""

    def __init__(self, config_path, device, layer_idx=0):
        raw = load_config(config_path)
        self.spec = layer_spec(raw)
        config_cls, layer_cls, rotary_cls = hf_modules(raw)
        self.config = config_cls.from_dict(raw)
        self.idx, self.device = layer_idx, device
        with torch.device("meta"):
            self.layer = layer_cls(self.config, layer_idx)
        self.layer = self.layer.to_empty(device=device).to(BF16).eval()
        g = torch.Generator(device=device).manual_seed(0)
        scales = {n: (kind, s) for n, _, kind, s in layer_tensors(self.spec, 3.0)}
        with torch.no_grad():
            for name, p in self.layer.named_parameters():
                kind, s = scales[name]
                p.normal_(1.0 if kind == "norm" else 0.0, 0.1 * s if kind == "norm" else s, generator=g)
        self.weight_bytes = sum(p.numel() * p.element_size() for p in self.layer.parameters())
        self.n_params = sum(p.numel() for p in self.layer.parameters())
        self.rotary = rotary_cls(config=self.config).to(device)
        from transformers.masking_utils import create_causal_mask
        self.create_causal_mask = create_causal_mask

    def inputs(self, x, position_ids, impl, cache=None):
        """The mask and RoPE tables the model would make for this step."""
        self.config._attn_implementation = impl
        with torch.no_grad():
            mask = self.create_causal_mask(config=self.config, inputs_embeds=x, attention_mask=None,
                                           past_key_values=cache, position_ids=position_ids, layer_idx=self.idx)
            return mask, self.rotary(x, position_ids)

    def step_fn(self, mask, cos_sin, position_ids, cache):
        layer = self.layer

        def step(x):
            with torch.no_grad():
                return layer(x, attention_mask=mask, position_ids=position_ids, past_key_values=cache,
                             use_cache=cache is not None, position_embeddings=cos_sin)
        return step


def run_layer_case(timer, rows, group, case, variant, fn, x, reset=None, floor=None, work_of=None):
    try:
        med, mn = timer(lambda: fn(x), reset)
    except Exception as e:  # noqa: BLE001 -- a compile failure is a result to report, not a crash
        rows.add(group, case, variant, note=f"failed: {type(e).__name__}: {str(e).splitlines()[0][:90]}")
        return
    rows.add(group, case, variant, med, mn, floor, work_of(med) if work_of else None)


def bench_prefill(timer, rows, lay, T, copy_bw, peak, compile_too):
    spec, dev = lay.spec, lay.device
    x = torch.randn(1, T, spec["hidden"], device=dev, dtype=BF16)
    pos = torch.arange(T, device=dev)[None]
    flops = 2 * T * lay.n_params + 2 * T * T * spec["head_dim"] * spec["heads"]
    nbytes = lay.weight_bytes + 2 * x.numel() * 2
    floor = max(flops / peak, nbytes / copy_bw) * 1e6 if peak and copy_bw else None
    work = lambda us: f"{flops / (us * 1e-6) / 1e12:.1f} TFLOP/s"  # noqa: E731
    case = f"layer prefill T={T}"
    for impl in ("sdpa", "eager"):
        mask, cos_sin = lay.inputs(x, pos, impl)
        fn = lay.step_fn(mask, cos_sin, pos, None)
        run_layer_case(timer, rows, "prefill", case, f"{impl}, plain", fn, x, floor=floor, work_of=work)
        if compile_too:
            torch._dynamo.reset()
            run_layer_case(timer, rows, "prefill", case, f"{impl}, torch.compile", torch.compile(fn), x,
                           floor=floor, work_of=work)


def bench_decode(timer, rows, lay, capacity, copy_bw, compile_mode):
    from transformers.cache_utils import DynamicCache, StaticCache
    spec, dev, idx = lay.spec, lay.device, lay.idx
    nkv, d, H = spec["kv_heads"], spec["head_dim"], spec["hidden"]
    g = torch.Generator(device=dev).manual_seed(1)
    for B in (1, 8):
        for T in (1, 8):
            L = capacity - T
            x = torch.randn(B, T, H, device=dev, dtype=BF16, generator=g)
            pos = torch.arange(L, L + T, device=dev)[None].expand(B, T)
            k0 = torch.randn(B, nkv, L, d, device=dev, dtype=BF16, generator=g)
            v0 = torch.randn(B, nkv, L, d, device=dev, dtype=BF16, generator=g)
            kv_bytes = 2 * B * nkv * (L + 2 * T) * d * 2  # K and V: L + T rows read, T written
            nbytes = lay.weight_bytes + kv_bytes + 2 * x.numel() * 2
            floor = nbytes / copy_bw * 1e6 if copy_bw else None
            work = lambda us, nb=nbytes: f"{nb / (us * 1e-6) / 1e12:.2f} TB/s"  # noqa: E731
            case = f"layer decode B={B} T={T} L={L}"

            dyn = DynamicCache(config=lay.config)
            dyn.update(k0, v0, idx)
            dl = dyn.layers[idx]
            keys, values = dl.keys, dl.values

            def reset_dynamic(dl=dl, keys=keys, values=values):
                dl.keys, dl.values = keys, values
            mask, cos_sin = lay.inputs(x, pos, "sdpa", dyn)
            run_layer_case(timer, rows, "decode", case, "sdpa, DynamicCache, plain",
                           lay.step_fn(mask, cos_sin, pos, dyn), x, reset_dynamic, floor, work)
            del dyn, dl, keys, values

            sta = StaticCache(config=lay.config, max_cache_len=capacity)
            sta.update(k0, v0, idx)
            sl = sta.layers[idx]

            def reset_static(sl=sl, L=L):
                sl.cumulative_length.fill_(L)
            mask, cos_sin = lay.inputs(x, pos, "sdpa", sta)
            fn = lay.step_fn(mask, cos_sin, pos, sta)
            run_layer_case(timer, rows, "decode", case, "sdpa, StaticCache, plain", fn, x, reset_static, floor, work)
            if compile_mode:
                torch._dynamo.reset()
                run_layer_case(timer, rows, "decode", case, f"sdpa, StaticCache, compile {compile_mode}",
                               torch.compile(fn, mode=compile_mode, fullgraph=True), x, reset_static, floor, work)
            del sta, sl


# ----------------------------------------------------------------------------------------


def environment(device):
    import transformers
    env = {"torch": torch.__version__, "transformers": transformers.__version__, "device": str(device)}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(gpu=p.name, sms=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                   cuda=torch.version.cuda)
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return env


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=os.path.join(ROOT, "examples", "qwen3_14b", "config.json"))
    ap.add_argument("--cases", default="copy,gemm,attn,prefill,decode")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--compile-mode", help="decode's torch.compile mode (default: reduce-overhead on a GPU, "
                    "default on the CPU, where cudagraph trees only add overhead)")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--capacity", type=int, default=4096, help="decode: cache rows (keys attended)")
    ap.add_argument("--prefill-T", type=int, default=2048)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default="bench_torch.json")
    args = ap.parse_args(argv)
    cases = set(args.cases.split(","))
    unknown = cases - {"copy", "gemm", "attn", "prefill", "decode"}
    if unknown:
        ap.error(f"unknown --cases {sorted(unknown)}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device (pass --device cpu to check the plumbing)")
    timer = Timer(device, args.warmup, args.rounds)
    rows = Rows()
    env = environment(device)
    print(" ".join(f"{k}={v}" for k, v in env.items()))
    print(HEAD)
    copy_bw = bench_copy(timer, rows, device) if "copy" in cases else None
    peak = bench_gemm(timer, rows, device) if "gemm" in cases else None
    spec = layer_spec(load_config(args.config))
    if "attn" in cases:
        bench_attn(timer, rows, spec, device, copy_bw, peak, args.capacity)
    if cases & {"prefill", "decode"}:
        lay = Layer(args.config, device)
        print(f"  layer: {lay.n_params / 1e6:.1f} M parameters, {lay.weight_bytes / 2**20:.1f} MiB")
        if "prefill" in cases:
            bench_prefill(timer, rows, lay, args.prefill_T, copy_bw, peak, not args.no_compile)
        if "decode" in cases:
            mode = args.compile_mode or ("reduce-overhead" if device.type == "cuda" else "default")
            bench_decode(timer, rows, lay, args.capacity, copy_bw, None if args.no_compile else mode)
    result = {"env": env, "config": args.config, "rounds": args.rounds, "warmup": args.warmup,
              "l2_flush_bytes": FLUSH_BYTES if device.type == "cuda" else 0,
              "copy_bandwidth_bytes_per_s": copy_bw, "gemm_peak_flop_per_s": peak, "rows": rows.rows,
              "argv": sys.argv[1:]}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
