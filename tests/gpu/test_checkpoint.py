#!/usr/bin/env python3
"""Unit tests of scripts/safetensors_np.py (bf16 rounding, the safetensors format) and
scripts/make_checkpoint.py. No GPU and no torch needed: runs with plain python3 + numpy
(``python3 tests/gpu/test_checkpoint.py``) or under pytest. Where the ``safetensors`` package
or torch is installed, their readers and torch's bf16 conversion are used as second opinions;
without them those checks are skipped and say so.
"""

import contextlib
import json
import os
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import make_checkpoint as mc  # noqa: E402
import safetensors_np as st  # noqa: E402

try:
    from safetensors import safe_open
except ImportError:
    safe_open = None
try:
    import torch
except ImportError:
    torch = None

TINY_QWEN3 = {
    "architecture": "Qwen3ForCausalLM", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "qkv_bias": False, "qk_norm": True, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
}
TINY_QWEN2 = dict(TINY_QWEN3, architecture="Qwen2ForCausalLM", qkv_bias=True, qk_norm=False)


def skip(why):
    print(f"    skipped: {why}")


def tiny_config(d, cfg):
    path = os.path.join(d, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


# ----------------------------------------------------------------------------------------
# bf16 rounding


def reference_bf16(x):
    """Independent RNE reference: the two bf16 neighbours of x, compared in float64, ties to
    the even encoding; the neighbour past the largest finite value is 2^128 (IEEE rounds as
    if the exponent range were unbounded, then overflows to inf)."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    lo_bits = (bits >> 16).astype(np.uint16)  # truncation: toward zero
    hi_bits = (lo_bits + 1).astype(np.uint16)  # one step away from zero, same sign
    lo = st.bf16_to_f32(lo_bits).astype(np.float64)
    sign = np.where(bits >> 31, -1.0, 1.0)
    hi_is_inf = (hi_bits & 0x7FFF) == 0x7F80
    with np.errstate(over="ignore", invalid="ignore"):
        hi = np.where(hi_is_inf, sign * 2.0 ** 128, st.bf16_to_f32(hi_bits).astype(np.float64))
        x64 = x.astype(np.float64)
        dlo, dhi = np.abs(x64 - lo), np.abs(hi - x64)
    even = np.where(lo_bits & 1, hi_bits, lo_bits)
    r = np.where(dlo < dhi, lo_bits, np.where(dhi < dlo, hi_bits, even))
    exact = (bits & 0xFFFF) == 0
    r = np.where(exact, lo_bits, r)
    finite = np.isfinite(x)
    r = np.where(finite | np.isinf(x), r, (lo_bits & 0x8000) | 0x7FC0)
    return r.astype(np.uint16)


def boundary_cases():
    """Every bf16 pattern with the low f32 half at the interesting values (exact, just below,
    at and just above the tie, the top), plus random patterns: covers ties at every exponent,
    subnormals, the step into inf, and NaN encodings."""
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000], dtype=np.uint32)
    rng = np.random.default_rng(7)
    rand = rng.integers(0, 1 << 32, size=2_000_000, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([(hi[:, None] | lows[None, :]).ravel(), rand]).view(np.float32)


def test_bf16_matches_reference():
    x = boundary_cases()
    with np.errstate(invalid="ignore"):
        got, want = st.f32_to_bf16(x), reference_bf16(x)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, f"{bad.size} mismatches, first: f32 {x.view(np.uint32)[bad[0]]:#010x} " \
        f"-> {got[bad[0]]:#06x}, expected {want[bad[0]]:#06x}"


def test_bf16_named_values():
    cases = [  # a list: 0.0 and -0.0 are one dict key
        (1.0, 0x3F80), (-2.0, 0xC000), (0.0, 0x0000), (-0.0, 0x8000),
        (float(np.float32(1 + 2**-8)), 0x3F80),  # tie, kept part even: stays
        (float(np.float32(1 + 3 * 2**-8)), 0x3F82),  # tie, kept part odd: rounds up to even
        (float(np.float32(1 + 2**-8 + 2**-20)), 0x3F81),  # just past the tie
        (3.3895313892515355e38, 0x7F7F),  # largest finite bf16
        (float(np.float32(3.3961775292304957e38)), 0x7F80),  # at the midpoint to 2^128: inf
        (float(np.float32(3.3961773e38)), 0x7F7F),  # just below that midpoint
        (float("inf"), 0x7F80), (float("-inf"), 0xFF80),
        (float(np.float32(2**-133)), 0x0001),  # smallest bf16 subnormal, kept
        (float(np.float32(2**-134)), 0x0000),  # half of it: tie to even (zero)
        (float(np.float32(3 * 2**-134)), 0x0002),  # 1.5 ulp: tie to even (2)
    ]
    for v, want in cases:
        got = int(st.f32_to_bf16(np.float32(v)))
        assert got == want, f"{v!r}: got {got:#06x}, want {want:#06x}"
    nan = np.array([0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0xFF812345], dtype=np.uint32).view(np.float32)
    assert list(st.f32_to_bf16(nan)) == [0x7FC0, 0x7FC0, 0xFFC0, 0xFFC0]


def test_bf16_round_trip():
    b = np.arange(1 << 16, dtype=np.uint16)
    finite = (b & 0x7F80) != 0x7F80
    assert np.array_equal(st.f32_to_bf16(st.bf16_to_f32(b[finite])), b[finite])
    assert st.bf16_to_f32(np.uint16(0x3F80)) == 1.0


def test_bf16_matches_torch():
    if torch is None:
        return skip("torch is not installed")
    x = boundary_cases()
    x = x[~np.isnan(x)]  # torch keeps NaN payload bits; the NaN rule is tested above
    want = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(st.f32_to_bf16(x), want)


# ----------------------------------------------------------------------------------------
# safetensors files


def sample_tensors():
    rng = np.random.default_rng(1)
    return [
        ("w", "BF16", st.f32_to_bf16(rng.standard_normal((3, 5), dtype=np.float32))),
        ("pos", "I32", np.arange(7, dtype=np.int32)),
        ("f", "F32", rng.standard_normal((2, 2, 3)).astype(np.float32)),
        ("empty", "F32", np.zeros((0, 4), dtype=np.float32)),
        ("odd", "U8", np.arange(3, dtype=np.uint8)),  # leaves the next tensor unaligned: allowed
        ("h", "F16", np.array([1.5, -2.0], dtype=np.float16)),
    ]


def test_write_layout():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "a.safetensors")
        total = st.write(p, sample_tensors(), {"format": "pt"})
        raw = open(p, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        assert n % 8 == 0 and raw[8:9] == b"{"
        header = json.loads(raw[8:8 + n])
        assert header["__metadata__"] == {"format": "pt"}
        assert len(raw) == 8 + n + total
        at = 0
        for name, dtype, arr in sample_tensors():
            e = header[name]
            assert e["dtype"] == dtype and e["shape"] == list(arr.shape)
            assert e["data_offsets"] == [at, at + arr.nbytes]
            assert raw[8 + n + at:8 + n + at + arr.nbytes] == arr.tobytes()
            at += arr.nbytes


def test_read_back():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "a.safetensors")
        st.write(p, sample_tensors(), {"format": "pt", "k": "v"})
        _, meta, _ = st.read_header(p)
        assert meta == {"format": "pt", "k": "v"}
        got = st.read(p)
        for name, dtype, arr in sample_tensors():
            assert got[name][0] == dtype and np.array_equal(got[name][1], arr)
        assert list(st.read(p, ["pos"])) == ["pos"]
        try:
            st.read(p, ["nope"])
            raise AssertionError("a missing name must raise")
        except KeyError:
            pass


def test_reference_reader_accepts():
    if safe_open is None:
        return skip("the safetensors package is not installed")
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "a.safetensors")
        st.write(p, sample_tensors(), {"format": "pt"})
        with safe_open(p, framework="numpy") as f:
            assert f.metadata() == {"format": "pt"}
            assert sorted(f.keys()) == sorted(n for n, _, _ in sample_tensors())
            for name, dtype, arr in sample_tensors():
                sl = f.get_slice(name)
                assert sl.get_dtype() == dtype and list(sl.get_shape()) == list(arr.shape)
                if dtype != "BF16":  # numpy has no bf16
                    assert np.array_equal(f.get_tensor(name), arr)
        if torch is not None:
            from safetensors.torch import load_file
            t = load_file(p)
            w = dict((n, a) for n, _, a in sample_tensors())["w"]
            assert t["w"].dtype == torch.bfloat16
            assert np.array_equal(t["w"].view(torch.int16).numpy().view(np.uint16), w)


def test_reader_rejects_bad_files():
    with tempfile.TemporaryDirectory() as d:
        def bad(header, data_len):
            p = os.path.join(d, "bad.safetensors")
            raw = json.dumps(header).encode()
            with open(p, "wb") as f:
                f.write(struct.pack("<Q", len(raw)) + raw + b"\0" * data_len)
            try:
                st.read_header(p)
            except ValueError:
                return
            raise AssertionError(f"accepted {header}")
        bad({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, 12)  # hole
        bad({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, 8)  # overlap
        bad({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, 8)  # size vs shape
        bad({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 9)  # trailing bytes
        bad({"a": {"dtype": "X9", "shape": [2], "data_offsets": [0, 8]}}, 8)  # unknown dtype


def test_write_rejects_mismatch():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "a.safetensors")
        for tensors in ([("a", "F32", np.zeros(2, dtype=np.float64))],
                        [("a", "BF16", np.zeros(2, dtype=np.float32))],
                        [("a", "F32", (3,), lambda: np.zeros(2, dtype=np.float32))]):
            try:
                st.write(p, tensors)
            except ValueError:
                continue
            raise AssertionError(f"accepted {tensors}")


# ----------------------------------------------------------------------------------------
# make_checkpoint


def expected_names(layer, qkv_bias, qk_norm):
    p = f"model.layers.{layer}."
    names = [p + "input_layernorm.weight", p + "post_attention_layernorm.weight",
             p + "self_attn.o_proj.weight", p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
             p + "mlp.down_proj.weight"]
    for x in "qkv":
        names.append(p + f"self_attn.{x}_proj.weight")
        if qkv_bias:
            names.append(p + f"self_attn.{x}_proj.bias")
    if qk_norm:
        names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    return sorted(names)


def test_layer_spec_from_architecture():
    s = mc.layer_spec({k: v for k, v in TINY_QWEN2.items() if k not in ("qkv_bias", "qk_norm")})
    assert s["qkv_bias"] and not s["qk_norm"]
    s = mc.layer_spec({k: v for k, v in TINY_QWEN3.items() if k not in ("qkv_bias", "qk_norm")})
    assert not s["qkv_bias"] and s["qk_norm"]
    s = mc.layer_spec(dict(TINY_QWEN3, architectures=["Qwen3ForCausalLM"], architecture=None, head_dim=None))
    assert s["head_dim"] == 16
    for cfg in (dict(TINY_QWEN3, architecture="LlamaForCausalLM"), {"architecture": "Qwen3ForCausalLM"}):
        try:
            mc.layer_spec(cfg)
        except ValueError:
            continue
        raise AssertionError(f"accepted {cfg}")


def test_names_shapes_and_magnitudes():
    for cfg in (TINY_QWEN3, TINY_QWEN2):
        with tempfile.TemporaryDirectory() as d:
            r = mc.write_checkpoint(tiny_config(d, cfg), os.path.join(d, "ck"), [0, 2], seed=5, log=lambda _: None)
            assert r["files"] == ["model.safetensors"]
            got = st.read(os.path.join(d, "ck", "model.safetensors"))
            want = sorted(expected_names(0, cfg["qkv_bias"], cfg["qk_norm"]) +
                          expected_names(2, cfg["qkv_bias"], cfg["qk_norm"]))
            assert sorted(got) == want, sorted(set(got) ^ set(want))
            header, meta, _ = st.read_header(os.path.join(d, "ck", "model.safetensors"))
            assert list(header) == sorted(header), "tensors are written sorted by name"
            assert meta["format"] == "pt" and meta["seed"] == "5"
            H, I, d_, nq, nkv = 64, 96, 16, 4, 2
            shapes = {"q_proj.weight": [nq * d_, H], "k_proj.weight": [nkv * d_, H],
                      "v_proj.weight": [nkv * d_, H], "o_proj.weight": [H, nq * d_],
                      "q_proj.bias": [nq * d_], "k_proj.bias": [nkv * d_], "v_proj.bias": [nkv * d_],
                      "q_norm.weight": [d_], "k_norm.weight": [d_], "gate_proj.weight": [I, H],
                      "up_proj.weight": [I, H], "down_proj.weight": [H, I],
                      "input_layernorm.weight": [H], "post_attention_layernorm.weight": [H]}
            for name, (dtype, arr) in got.items():
                assert dtype == "BF16"
                key = ".".join(name.split(".")[-2:])
                assert list(arr.shape) == shapes[key], (name, arr.shape)
            assert open(os.path.join(d, "ck", "config.json")).read() == json.dumps(cfg)


def test_magnitudes():
    cfg = dict(TINY_QWEN3, hidden_size=512, intermediate_size=768)
    spec = mc.layer_spec(cfg)
    for local, shape, kind, scale in mc.layer_tensors(spec, 3.0):
        v = st.bf16_to_f32(mc.make_values(1, 0, local, shape, kind, scale)).astype(np.float64)
        if kind == "norm":
            assert abs(v.mean() / scale - 1) < 0.05 and abs(v.std() / scale - 0.1) < 0.03, local
        else:
            assert abs(v.mean()) < 0.1 * scale and abs(v.std() / scale - 1) < 0.05, local
    by = {n: (k, s) for n, _, k, s in mc.layer_tensors(spec, 3.0)}
    assert by["self_attn.q_norm.weight"] == ("norm", np.sqrt(3.0))
    assert np.isclose(by["mlp.down_proj.weight"][1], 1 / np.sqrt(768))
    spec2 = mc.layer_spec(dict(TINY_QWEN2, hidden_size=512))
    by2 = {n: s for n, _, _, s in mc.layer_tensors(spec2, 4.0)}
    assert np.isclose(by2["self_attn.q_proj.weight"], 2 / np.sqrt(512))
    assert np.isclose(by2["self_attn.v_proj.weight"], 1 / np.sqrt(512))


def test_values_do_not_depend_on_chunking_or_company():
    a = mc.make_values(3, 1, "mlp.up_proj.weight", (40, 33), "normal", 0.5)
    b = mc.make_values(3, 1, "mlp.up_proj.weight", (40, 33), "normal", 0.5, chunk=7)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, mc.make_values(3, 2, "mlp.up_proj.weight", (40, 33), "normal", 0.5))
    assert not np.array_equal(a, mc.make_values(4, 1, "mlp.up_proj.weight", (40, 33), "normal", 0.5))
    with tempfile.TemporaryDirectory() as d:
        c = tiny_config(d, TINY_QWEN3)
        mc.write_checkpoint(c, os.path.join(d, "one"), [3], seed=9, log=lambda _: None)
        mc.write_checkpoint(c, os.path.join(d, "two"), [1, 3], seed=9, log=lambda _: None)
        x = st.read(os.path.join(d, "one", "model.safetensors"))
        y = st.read(os.path.join(d, "two", "model.safetensors"))
        for name, (_, arr) in x.items():
            assert np.array_equal(arr, y[name][1]), name


def test_shards_and_index():
    with tempfile.TemporaryDirectory() as d:
        c = tiny_config(d, TINY_QWEN2)
        mc.write_checkpoint(c, os.path.join(d, "one"), [0, 1], seed=2, log=lambda _: None)
        r = mc.write_checkpoint(c, os.path.join(d, "sh"), [0, 1], seed=2, shards=3, log=lambda _: None)
        assert r["files"] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
        assert not os.path.exists(os.path.join(d, "sh", "model.safetensors"))
        index = json.load(open(os.path.join(d, "sh", "model.safetensors.index.json")))
        assert set(index) == {"metadata", "weight_map"}
        whole = st.read(os.path.join(d, "one", "model.safetensors"))
        assert index["metadata"]["total_size"] == sum(a.nbytes for _, a in whole.values())
        assert sorted(index["weight_map"]) == sorted(whole)
        seen = {}
        for f in r["files"]:
            part = st.read(os.path.join(d, "sh", f))
            assert part, f"{f} is empty"
            for name, (_, arr) in part.items():
                assert index["weight_map"][name] == f
                seen[name] = arr
        assert sorted(seen) == sorted(whole)
        for name, (_, arr) in whole.items():
            assert np.array_equal(seen[name], arr), name


def test_split_shards():
    assert mc.split_shards([10, 10, 10, 10], 2) == [0, 0, 1, 1]
    assert mc.split_shards([1, 1, 100], 3) == [0, 1, 2]  # by size one shard would be empty
    idx = mc.split_shards([5, 1, 1, 1, 5, 1, 1, 1], 2)
    assert idx == sorted(idx) and set(idx) == {0, 1}
    for bad in (0, 5):
        try:
            mc.split_shards([1, 2, 3, 4], bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_cli():
    quiet = open(os.devnull, "w")
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        c = tiny_config(d, TINY_QWEN3)
        assert mc.main([c, os.path.join(d, "ck"), "--layers", "0,5", "--seed", "1", "--shards", "2"]) == 0
        assert os.path.exists(os.path.join(d, "ck", "model.safetensors.index.json"))
        for argv in ([c, d, "--layers", "6", "--seed", "1"], [c, d, "--layers", "1,1", "--seed", "1"],
                     [c, d, "--layers", "x", "--seed", "1"]):
            try:
                mc.main(argv)
            except SystemExit as e:
                assert e.code == 2
                continue
            raise AssertionError(argv)


def run(namespace):
    """Runs every test_* function here; prints 'N passed, N failed'."""
    tests = [(n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    failed = 0
    for name, f in tests:
        try:
            f()
            print(f"ok   {name}")
        except Exception as e:  # noqa: BLE001 -- report every failure, then go on
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(globals()))
