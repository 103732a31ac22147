#!/usr/bin/env python3
"""Unit tests of lora_layer.py's numpy-only half (no torch, no GPU): the adapters and the
merged checkpoint tessel reads, the names and types against the .tsl steps, and `compare` on
hand-made directories. ``python3 tests/gpu/test_lora_layer.py`` or pytest."""

import contextlib
import io
import json
import os
import re
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)
import lora_layer as ll  # noqa: E402
import make_checkpoint as mc  # noqa: E402
import safetensors_np as st  # noqa: E402

TINY = {"architecture": "Qwen3ForCausalLM", "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "num_hidden_layers": 2, "rms_norm_eps": 1e-6, "rope_theta": 1e6}


def tiny_checkpoint(d):
    cfg = os.path.join(d, "tiny.json")
    with open(cfg, "w") as f:
        json.dump(TINY, f)
    ck = os.path.join(d, "ck")
    mc.write_checkpoint(cfg, ck, [0, 1], 1, shards=3, log=lambda *_: None)
    return cfg, ck


def resolve(weights_dir, name):
    """What tessel does with the index: weights_dir joined with the weight_map entry."""
    with open(os.path.join(weights_dir, "model.safetensors.index.json")) as f:
        wm = json.load(f)["weight_map"]
    path = os.path.join(weights_dir, wm[name])
    return st.read(path, [name])[name]


# ----------------------------------------------------------------------------------------
# the case files


def test_case_files_and_merged_checkpoint():
    with tempfile.TemporaryDirectory() as d:
        _, ck = tiny_checkpoint(d)
        spec = mc.layer_spec(TINY)
        out = os.path.join(d, "case")
        inputs, mine = ll.write_case_files(out, ck, spec, 1, 5, 3, 7, "dot", "normal", 0.02)
        got = st.read(os.path.join(out, "inputs.safetensors"))
        assert sorted(got) == ["dy", "pos", "x"], sorted(got)  # no adapter: --weights gives them
        assert got["x"][0] == "BF16" and got["x"][1].shape == (5, 64)
        assert got["pos"][0] == "I32" and got["pos"][1].tolist() == [0, 1, 2, 3, 4]
        assert not np.array_equal(got["x"][1], got["dy"][1])
        w = os.path.join(out, "weights")
        for c, module in ll.ADAPTERS:
            i, o = ll.adapter_shapes(spec)[c]
            da, a = resolve(w, ll.peft_name(1, module, "A"))
            db, b = resolve(w, ll.peft_name(1, module, "B"))
            assert da == db == "F32" and a.shape == (3, i) and b.shape == (o, 3), (c, a.shape, b.shape)
            assert np.array_equal(a, mine[c][0]) and np.array_equal(b, mine[c][1])
            assert np.abs(a).max() <= 1 / np.sqrt(i) and np.abs(a).max() > 0.5 / np.sqrt(i)
            assert 0.01 < b.std() < 0.04, b.std()
            _, a0 = resolve(w, ll.peft_name(0, module, "A"))  # layer 0's: other values
            assert a0.shape == a.shape and not np.array_equal(a0, a)
        # the base weights through the index, bit for bit as in the checkpoint
        for n in ("model.layers.1.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight"):
            assert np.array_equal(resolve(w, n)[1], st.read(ll.checkpoint_files(ck)[n], [n])[n][1])
        # deterministic, and the zero case
        out2 = os.path.join(d, "case2")
        _, mine2 = ll.write_case_files(out2, ck, spec, 1, 5, 3, 7, "mse", "zero", 0.02)
        assert sorted(st.read(os.path.join(out2, "inputs.safetensors"))) == ["pos", "target", "x"]
        for c in mine:
            assert np.array_equal(mine[c][0], mine2[c][0]) and not np.any(mine2[c][1])


def test_names_and_types_match_the_steps():
    """The `from` names, the output names and the declared types of the example steps are the
    ones lora_layer writes and expects."""
    for model, cfg in (("qwen3_14b", "qwen3_14b"), ("qwen2_5_14b", "qwen2_5_14b")):
        src = open(os.path.join(ROOT, "examples", "lora", f"{model}_lora.tsl")).read()
        spec = mc.layer_spec(json.load(open(os.path.join(ROOT, "examples", cfg, "config.json"))))
        froms = dict(re.findall(r"(\w+): f32\[[^\]]*\] from \"(base_model[^\"]+)\"", src))
        want = {f"{ab}{c}": ll.peft_name("{layer}", module, ab.upper()) for c, module in ll.ADAPTERS for ab in "ab"}
        assert froms == want, (model, set(froms.items()) ^ set(want.items()))
        for step, loss in (("grads", "dot"), ("mse_grads", "mse")):
            body = src[src.index(f"step {step}("):]
            ret = re.search(r"\) -> \((.*?)\) \{", body, re.S).group(1)
            tail = re.search(r"\n    \(([^()]*)\)\n\}", body).group(1)
            names = [n.strip() for n in tail.split(",")]
            assert names == ll.output_names(loss), (model, step, names)
            declared = re.findall(r"(bf16|f32)(?:\[([^\]]*)\])?", ret)
            types = ll.expected_types(spec, 16, 2048, loss)
            assert len(declared) == len(names)
            for n, (dt, dims) in zip(names, declared):
                shape = tuple(int(v.strip().replace("R", "16").replace("T", "2048")) for v in dims.split(",")) if dims else ()
                assert types[n] == (dt.upper(), shape), (model, n, types[n], dt, shape)


# ----------------------------------------------------------------------------------------
# compare on hand-made directories


def make_dir(d, loss="dot", zero_b=False, noise=1e-3, f64=True, seed=0):
    """A case directory whose "HF" results are random tensors of the declared types (eager),
    eager + noise (sdpa), eager in f32 (f64); tessel's file = eager + noise. Returns the tessel
    tensors (to modify) as {name: (dtype, array)}."""
    rng = np.random.default_rng(seed)
    spec = mc.layer_spec(TINY)
    T, R = 300, 3
    types = ll.expected_types(spec, R, T, loss)
    names = ll.output_names(loss)
    meta = {"outputs": names, "types": {k: [v[0], list(v[1])] for k, v in types.items()}, "loss": loss,
            "b_init": "zero" if zero_b else "normal", "T": T, "R": R}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)
    files = {"eager": [], "sdpa": [], "f64": []}
    tessel = {}
    for n in names:
        dt, shape = types[n]
        base = rng.standard_normal(shape).astype(np.float32)
        if zero_b and n.startswith("da"):
            base = np.zeros(shape, np.float32)
        pert = lambda: base * (1 + noise * rng.standard_normal(shape)).astype(np.float32)  # noqa: E731
        enc = (lambda v: st.f32_to_bf16(v)) if dt == "BF16" else (lambda v: np.asarray(v, np.float32))  # noqa: E731
        files["eager"].append((n, dt, ll.scalar_safe(enc(base))))
        files["sdpa"].append((n, dt, ll.scalar_safe(enc(pert()))))
        files["f64"].append((n, "F32", ll.scalar_safe(np.asarray(base, np.float32))))
        tessel[n] = (dt, ll.scalar_safe(enc(pert())))
    for impl in ("eager", "sdpa") + (("f64",) if f64 else ()):
        st.write(os.path.join(d, f"hf_{impl}.safetensors"), files[impl])
    write_tessel(d, tessel)
    return tessel


def write_tessel(d, tessel):
    st.write(os.path.join(d, "tessel.safetensors"), [(n, dt, a) for n, (dt, a) in tessel.items()])


def run_compare(d, *extra):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = ll.main(["compare", "--out", d, *extra])
    return rc, buf.getvalue()


def test_compare_passes_and_reports():
    with tempfile.TemporaryDirectory() as d:
        make_dir(d)
        rc, text = run_compare(d)
        assert rc == 0, text
        rep = json.load(open(os.path.join(d, "compare.json")))
        assert [r["tensor"] for r in rep["summary"]] == ll.output_names("dot")
        e = rep["outputs"]["daq"]
        assert set(e) >= {"tessel_vs_eager", "tessel_vs_sdpa", "eager_vs_sdpa", "tessel_vs_f64", "yardstick", "accuracy"}
        assert 5e-4 < e["tessel_vs_eager"]["rel_rms"] < 2e-3 and "max_ulp" in e["tessel_vs_eager"]
        assert 0.5 < e["yardstick"] < 2, e["yardstick"]
        o = rep["outputs"]["out"]
        assert "ulp_hist" in o["tessel_vs_eager"] and "t256-299" in o["rel_rms_by_block"]["tessel_vs_eager"]
        assert "rel_rms_by_block" not in e


def test_compare_mse_scalar_loss():
    with tempfile.TemporaryDirectory() as d:
        make_dir(d, loss="mse")
        rc, text = run_compare(d)  # HF's and tessel's loss both stored as [1], read as []
        assert rc == 0 and "loss  f32[]" in text and "read as []" in text, text
        rep = json.load(open(os.path.join(d, "compare.json")))
        assert rep["outputs"]["loss"]["tessel_vs_eager"]["n"] == 1
        assert [r["tensor"] for r in rep["summary"]] == ll.output_names("mse")


def test_compare_failures():
    cases = {
        "nan": lambda t: t["dbg"][1].__setitem__((0, 0), np.nan),
        "shape": lambda t: t.__setitem__("dav", ("F32", t["dav"][1][:, :-1].copy())),
        "dtype": lambda t: t.__setitem__("dx", ("F32", st.bf16_to_f32(t["dx"][1]))),
        "missing": lambda t: t.pop("dbd"),
        "far": lambda t: t.__setitem__("dak", ("F32", -t["dak"][1])),
    }
    want = {"nan": "dbg: tessel has 1 NaN", "shape": "dav: tessel's is", "dtype": "dx: tessel's is F32",
            "missing": "dbd: tessel wrote no", "far": "dak: rel-RMS"}
    for k, mutate in cases.items():
        with tempfile.TemporaryDirectory() as d:
            t = make_dir(d)
            mutate(t)
            write_tessel(d, t)
            rc, text = run_compare(d)
            assert rc == 1 and want[k] in text, (k, text[-800:])


def test_compare_bound_is_an_option():
    with tempfile.TemporaryDirectory() as d:
        make_dir(d, noise=2e-2)
        assert run_compare(d)[0] == 0
        rc, text = run_compare(d, "--max-rel-rms", "1e-3")
        assert rc == 1 and "rel-RMS" in text


def test_compare_zero_gradients():
    with tempfile.TemporaryDirectory() as d:
        t = make_dir(d, zero_b=True, f64=False)
        rc, text = run_compare(d)
        assert rc == 0 and "tessel has 0 non-zero values" in text, text
        a = t["dag"][1].copy()
        a[1, 2] = 1e-30
        t["dag"] = ("F32", a)
        write_tessel(d, t)
        rc, text = run_compare(d)
        assert rc == 1 and "tessel has 1 non-zero values" in text and "dag: rel-RMS inf" in text, text


def test_compare_default_tuple_names():
    with tempfile.TemporaryDirectory() as d:
        t = make_dir(d)
        write_tessel(d, {f"out{i}": v for i, v in enumerate(t.values())})
        rc, text = run_compare(d)
        assert rc == 0, text


def test_float_stats_f32_ulps_and_zero():
    a = ("F32", np.array([1.0, -0.0, 2.0], np.float32))
    b = ("F32", np.array([np.nextafter(np.float32(1), np.float32(2)), 0.0, 2.0], np.float32))
    s = ll.float_stats(a, b)
    assert s["differ"] == 1 and s["max_ulp"] == 1 and s["max_abs"] == float(np.float32(2) ** -23)
    z = ("F32", np.zeros(3, np.float32))
    assert ll.float_stats(z, z)["rel_rms"] == 0 and ll.float_stats(a, z)["rel_rms"] == float("inf")


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
