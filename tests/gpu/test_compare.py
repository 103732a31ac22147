#!/usr/bin/env python3
"""Unit tests of hf_layer.py's numpy-only half: the comparison statistics and `compare` on
hand-made directories (no torch, no GPU). ``python3 tests/gpu/test_compare.py`` or pytest."""

import contextlib
import io
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import hf_layer as hl  # noqa: E402
import safetensors_np as st  # noqa: E402


def bf(values):
    return st.f32_to_bf16(np.asarray(values, dtype=np.float32))


def next_up(bits, k=1):
    """k bf16 steps toward +inf (for positive finite values)."""
    return (np.asarray(bits, dtype=np.uint16) + k).astype(np.uint16)


# ----------------------------------------------------------------------------------------
# statistics


def test_identical():
    a = bf([1.0, -2.0, 0.5, 0.0])
    s = hl.bf16_stats(a, a)
    assert s["max_abs"] == 0 and s["rel_rms"] == 0 and s["differ"] == 0 and s["max_ulp"] == 0
    assert s["worst"] is None and s["ulp_hist"]["0"] == 4 and s["n"] == 4


def test_known_differences():
    b = bf([1.0, 2.0, 4.0, -8.0])
    a = b.copy()
    a[1] = next_up(b[1])  # 2 + 2^-6
    a[2] = next_up(b[2], 3)  # 4 + 3 * 2^-5
    s = hl.bf16_stats(a, b)
    assert s["differ"] == 2 and s["differ_frac"] == 0.5
    assert s["max_ulp"] == 3 and s["ulp_hist"]["1"] == 1 and s["ulp_hist"]["3-4"] == 1
    assert s["max_abs"] == 3 * 2**-5
    want = np.sqrt((2**-6) ** 2 + (3 * 2**-5) ** 2) / np.sqrt(1 + 4 + 16 + 64)
    assert abs(s["rel_rms"] - want) < 1e-15 * want
    assert s["worst"] == {"index": [2], "a": 4 + 3 * 2**-5, "b": 4.0}


def test_rel_rms_is_relative_to_the_second():
    a, b = bf([2.0, 2.0]), bf([1.0, 1.0])
    assert hl.bf16_stats(a, b)["rel_rms"] == 1.0
    assert hl.bf16_stats(b, a)["rel_rms"] == 0.5


def test_ulp_across_zero_and_signs():
    tiny = np.array([0x0001], dtype=np.uint16)  # smallest positive subnormal
    neg_tiny = np.array([0x8001], dtype=np.uint16)
    pz, nz = np.array([0x0000], dtype=np.uint16), np.array([0x8000], dtype=np.uint16)
    assert hl.bf16_stats(tiny, neg_tiny)["max_ulp"] == 2
    s = hl.bf16_stats(pz, nz)
    assert s["max_ulp"] == 0 and s["differ"] == 0  # +0 == -0
    keys = hl.ordered(np.arange(1 << 16, dtype=np.uint16))
    vals = st.bf16_to_f32(np.arange(1 << 16, dtype=np.uint16))
    ok = ~np.isnan(vals)
    order = np.argsort(vals[ok], kind="stable")
    assert np.all(np.diff(keys[ok][order]) >= 0), "ordered() must be monotone in the value"


def test_nonfinite():
    nan, inf = float("nan"), float("inf")
    a = bf([nan, 1.0, inf, nan, 2.0])
    b = bf([nan, 1.0, inf, 3.0, inf])
    s = hl.bf16_stats(a, b)
    assert s["differ"] == 2 and s["nonfinite_mismatch"] == 2
    assert s["max_abs"] == 0 and s["rel_rms"] == 0  # finite pairs agree
    assert hl.bad_nonfinite(a, b) == 1  # a's NaN where b has 3.0; a's 2.0 against b's inf is fine
    assert hl.bad_nonfinite(b, a) == 1  # b's inf where a has 2.0
    assert hl.bad_nonfinite(a[:3], b[:3]) == 0


def test_zero_reference():
    z = bf([0.0, 0.0])
    assert hl.bf16_stats(bf([0.0, 1.0]), z)["rel_rms"] == float("inf")
    assert hl.bf16_stats(z, z)["rel_rms"] == 0.0


def test_shape_mismatch_raises():
    try:
        hl.bf16_stats(bf([1.0, 2.0]), bf([[1.0, 2.0]]))
    except ValueError:
        return
    raise AssertionError("different shapes must raise")


def test_multi_dim_worst_index():
    b = bf(np.ones((2, 3, 4)))
    a = b.copy()
    a[1, 2, 3] = next_up(b[1, 2, 3], 5)
    s = hl.bf16_stats(a, b)
    assert s["worst"]["index"] == [1, 2, 3] and s["max_ulp"] == 5 and s["ulp_hist"]["5-8"] == 1


def test_rel_rms_large_random():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(100_000).astype(np.float32)
    y = x * np.float32(1 + 1e-2)
    s = hl.bf16_stats(bf(y), bf(x))
    assert 0.5e-2 < s["rel_rms"] < 1.5e-2


def test_decode_lengths():
    lens = hl.decode_lengths(8, 8, 4096, seed=1)
    assert len(lens) == 8 and all(1 <= v <= 4088 for v in lens)
    assert lens == hl.decode_lengths(8, 8, 4096, seed=1) != hl.decode_lengths(8, 8, 4096, seed=2)
    assert hl.decode_lengths(2, 1, 10, 0, [0, 9]) == [0, 9]
    for bad in ([0, 10], [-1, 0], [1]):
        try:
            hl.decode_lengths(2, 1, 10, 0, bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_cache_rows_check():
    orig = np.zeros((2, 1, 8, 2), dtype=np.uint16)
    orig[0, :, :3] = 7
    upd = orig.copy()
    upd[0, :, 3:5] = 9  # L_0 = 3, T = 2
    upd[1, :, 6:8] = 9  # L_1 = 6
    rows, changed, first = hl.cache_rows_check(upd, orig, [3, 6], 2)
    assert rows.shape == (2, 1, 2, 2) and np.all(rows == 9) and changed == 0 and first is None
    upd[1, 0, 2, 1] = 1  # a row before L_1
    upd[0, 0, 7, 0] = 1  # a row after L_0 + T
    _, changed, first = hl.cache_rows_check(upd, orig, [3, 6], 2)
    assert changed == 2 and first == [0, 0, 7, 0]


def test_parse_names():
    assert hl.parse_names("attn=out0, out=out1") == {"attn": "out0", "out": "out1"}
    assert hl.parse_names(None) == {}
    try:
        hl.parse_names("attn")
    except Exception:  # noqa: BLE001 -- argparse's ArgumentTypeError
        return
    raise AssertionError("a name without = must raise")


# ----------------------------------------------------------------------------------------
# compare on hand-made directories


def make_dir(d, mode, tessel, meta_extra=None):
    """Writes meta.json, inputs and hf_{eager,sdpa} for a small case; tessel: a function of
    (hf_eager dict, inputs dict) -> list of (name, dtype, array) for tessel.safetensors."""
    rng = np.random.default_rng(3)
    meta = {"mode": mode}
    if mode == "prefill":
        T, H, A = 300, 8, 6
        inputs = {"x": bf(rng.standard_normal((T, H))), "pos": np.arange(T, dtype=np.int32)}
        eager = {"attn": bf(rng.standard_normal((T, A))), "out": bf(rng.standard_normal((T, H)))}
    else:
        B, T, H, A, nkv, S, d_ = 2, 2, 8, 6, 1, 16, 4
        lens = [3, 10]
        meta["lens"] = lens
        k = np.zeros((B, nkv, S, d_), dtype=np.uint16)
        v = np.zeros_like(k)
        for b, L in enumerate(lens):
            k[b, :, :L] = bf(rng.standard_normal((nkv, L, d_)))
            v[b, :, :L] = bf(rng.standard_normal((nkv, L, d_)))
        inputs = {"x": bf(rng.standard_normal((B, T, H))), "len": np.array(lens, dtype=np.int32),
                  "k_cache": k, "v_cache": v}
        eager = {"attn": bf(rng.standard_normal((B, T, A))), "out": bf(rng.standard_normal((B, T, H))),
                 "k_new": bf(rng.standard_normal((B, nkv, T, d_))), "v_new": bf(rng.standard_normal((B, nkv, T, d_)))}
    meta.update(meta_extra or {})
    sdpa = {k: next_up(v) if k in ("attn", "out") else v for k, v in eager.items()}
    json.dump(meta, open(os.path.join(d, "meta.json"), "w"))
    st.write(os.path.join(d, "inputs.safetensors"),
             [(n, "I32" if a.dtype == np.int32 else "BF16", a) for n, a in inputs.items()])
    for name, t in (("eager", eager), ("sdpa", sdpa)):
        st.write(os.path.join(d, f"hf_{name}.safetensors"), [(n, "BF16", a) for n, a in t.items()])
    st.write(os.path.join(d, "tessel.safetensors"), tessel(eager, inputs))


def run_compare(d, *extra):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = hl.main(["compare", "--out", d, *extra])
    rep = json.load(open(os.path.join(d, "compare.json")))
    return rc, rep, buf.getvalue()


def with_cache(h, inp, T=2):
    out = [("attn", "BF16", h["attn"]), ("out", "BF16", h["out"])]
    for kv in "kv":
        c = inp[f"{kv}_cache"].copy()
        for b, L in enumerate(inp["len"]):
            c[b, :, L:L + T] = h[f"{kv}_new"][b]
        out.append((f"{kv}_cache", "BF16", c))
    return out


def test_compare_prefill_tuple_names():
    with tempfile.TemporaryDirectory() as d:
        make_dir(d, "prefill", lambda h, i: [("out0", "BF16", h["attn"]), ("out1", "BF16", h["out"])])
        rc, rep, text = run_compare(d)
        assert rc == 0, text
        for o in ("attn", "out"):
            e = rep["outputs"][o]
            assert e["tessel_vs_eager"]["differ"] == 0
            assert e["tessel_vs_sdpa"]["max_ulp"] == 1 and e["eager_vs_sdpa"]["max_ulp"] == 1
            assert list(e["rel_rms_by_block"]["tessel_vs_sdpa"]) == ["t0-255", "t256-299"]
        assert "tessel vs eager" in text and "eager vs sdpa" in text


def test_compare_decode_cache_in_place():
    with tempfile.TemporaryDirectory() as d:
        make_dir(d, "decode", with_cache)
        rc, rep, text = run_compare(d)
        assert rc == 0, text
        assert rep["cache"]["k_cache"]["changed_outside_new_rows"] == 0
        for o in ("attn", "out", "k_new", "v_new"):
            assert rep["outputs"][o]["tessel_vs_eager"]["differ"] == 0, o
        assert list(rep["outputs"]["out"]["rel_rms_by_sequence"]["tessel_vs_sdpa"]) == ["b0_L3", "b1_L10"]


def test_compare_decode_new_rows_named():
    with tempfile.TemporaryDirectory() as d:
        make_dir(d, "decode", lambda h, i: [(n, "BF16", a) for n, a in h.items()])
        rc, _, text = run_compare(d)
        assert rc == 0, text


def test_compare_fails_on_clobbered_cache():
    def clobber(h, inp):
        t = with_cache(h, inp)
        t[2][2][0, 0, 0, 0] ^= 1  # a context row of k_cache
        t[3][2][1, 0, 15, 3] = 0x3F80  # a row past L_1 + T in v_cache
        return t
    with tempfile.TemporaryDirectory() as d:
        make_dir(d, "decode", clobber)
        rc, rep, text = run_compare(d)
        assert rc == 1 and "outside rows" in text
        assert rep["cache"]["k_cache"]["first_changed"] == [0, 0, 0, 0]
        assert rep["cache"]["v_cache"]["first_changed"] == [1, 0, 15, 3]


def test_compare_fails_on_missing_cache_unless_allowed():
    with tempfile.TemporaryDirectory() as d:
        make_dir(d, "decode", lambda h, i: [("attn", "BF16", h["attn"]), ("out", "BF16", h["out"])])
        rc, _, text = run_compare(d)
        assert rc == 1 and "neither `k_cache` nor `k_new`" in text
        rc, rep, _ = run_compare(d, "--allow-missing-cache")
        assert rc == 0 and "tessel_vs_sdpa" not in rep["outputs"]["k_new"]


def test_compare_fails_on_nan_shape_dtype_and_missing():
    def nan_out(h, i):
        o = h["out"].copy()
        o[0, 0] = 0x7FC0
        return [("attn", "BF16", h["attn"]), ("out", "BF16", o)]
    cases = [
        (nan_out, "NaN/inf"),
        (lambda h, i: [("attn", "BF16", h["attn"][:5]), ("out", "BF16", h["out"])], "is [5, 6]"),
        (lambda h, i: [("attn", "F32", st.bf16_to_f32(h["attn"])), ("out", "BF16", h["out"])], "F32"),
        (lambda h, i: [("out", "BF16", h["out"])], "no `attn`"),
    ]
    for make, msg in cases:
        with tempfile.TemporaryDirectory() as d:
            make_dir(d, "prefill", make)
            rc, _, text = run_compare(d)
            assert rc == 1 and msg in text, (msg, text[-600:])


def test_compare_reshape_and_names_override():
    with tempfile.TemporaryDirectory() as d:
        make_dir(d, "prefill", lambda h, i: [("a", "BF16", h["attn"].reshape(-1)), ("o", "BF16", h["out"])])
        rc, _, text = run_compare(d, "--names", "attn=a,out=o")
        assert rc == 0 and "read as" in text, text


def test_compare_missing_tessel_file():
    with tempfile.TemporaryDirectory() as d:
        make_dir(d, "prefill", lambda h, i: [("attn", "BF16", h["attn"]), ("out", "BF16", h["out"])])
        os.remove(os.path.join(d, "tessel.safetensors"))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert hl.main(["compare", "--out", d]) == 1
        assert "does not exist" in buf.getvalue()


def test_compare_max_rel_rms_gate():
    def off(h, i):
        return [("attn", "BF16", next_up(h["attn"], 4)), ("out", "BF16", h["out"])]
    with tempfile.TemporaryDirectory() as d:
        make_dir(d, "prefill", off)
        assert run_compare(d)[0] == 0
        rc, _, text = run_compare(d, "--max-rel-rms", "1e-6")
        assert rc == 1 and "attn: rel-RMS" in text and "out: rel-RMS" not in text
        assert run_compare(d, "--max-rel-rms", "1")[0] == 0


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
