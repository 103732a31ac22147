"""The package without a GPU: numpy arrays (and torch CPU tensors, when torch is installed)
through the CPU executor, bit for bit against the command line; every argument error names
its argument; compile errors carry the rendered report; the disk cache."""

import json
import os
import pathlib
import struct
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import tessel
from conftest import program

BF16 = np.dtype(ml_dtypes.bfloat16)
ST_DTYPES = {"BF16": BF16, "F16": np.float16, "F32": np.float32, "I32": np.int32, "BOOL": np.bool_}


def read_safetensors(path) -> dict:
    """A safetensors file's tensors as numpy arrays (the format: an 8-byte little-endian
    header length, a JSON header of dtype, shape and byte offsets, the data)."""
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype=ST_DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def write(tmp_path, name, text) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


# -- results ----------------------------------------------------------------------------------


def test_f32_step_matches_numpy(tmp_path):
    src = write(tmp_path, "axpy.tsl", "step axpy(x: f32[T], y: f32[T]) -> f32[T] { x * 2.0 + y }\n")
    step = tessel.compile(src, dims={"T": 37})
    x = np.linspace(-3, 3, 37, dtype=np.float32)
    y = np.arange(37, dtype=np.float32)
    out = step(x, y=y)
    assert out.dtype == np.float32 and out.shape == (37,)
    np.testing.assert_array_equal(out, x * np.float32(2.0) + y)


def test_bf16_promotion_matches_numpy():
    step = tessel.compile(program("small.tsl"), "promote", dims={"T": 100})
    a = (np.arange(100) / 7).astype(BF16)
    b = (np.arange(100) / 3).astype(np.float16)
    out = step(a, b)
    np.testing.assert_array_equal(out, a.astype(np.float32) + b.astype(np.float32))


@pytest.mark.parametrize(
    "file,step,dims",
    [
        ("layer_small.tsl", "qwen3", {"T": 33}),
        ("lora.tsl", "lora_bf16", {"M": 19, "K": 64, "N": 48, "R": 8}),
        ("kv_cache.tsl", "append", {"B": 2, "KV": 2, "R": 3, "S": 40, "D": 16}),
    ],
)
@pytest.mark.parametrize("profile", ["exact", "fast"])
def test_executor_bits_equal_the_command_line(tmp_path, tessel_cli, file, step, dims, profile):
    """The same step, the same inputs: the package's results and the CLI's `run --cpu`
    results are the same bits (including an `inout` cache, updated in place)."""
    dim_args = [a for n, v in dims.items() for a in ("--dim", f"{n}={v}")]
    inputs, outputs = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    subprocess.run(
        [tessel_cli, "run", program(file), "--step", step, "--profile", profile, "--cpu",
         "--seed", "7", "--save-inputs", str(inputs), "-o", str(outputs), *dim_args],
        check=True, capture_output=True,
    )
    given = read_safetensors(inputs)
    want = read_safetensors(outputs)
    s = tessel.compile(program(file), step, dims=dims, profile=profile, target="h200")
    args = {p.name: given[p.name].copy() for p in s.params}
    got = s(**args)
    got = got if isinstance(got, tuple) else (got,)
    for r, g in zip(s.results, got):
        assert g.dtype == want[r.name].dtype and g.shape == want[r.name].shape, r.name
        assert g.tobytes() == want[r.name].tobytes(), f"{file} {step}: `{r.name}` differs"
    for p in s.params:
        if p.inout:
            assert args[p.name].tobytes() == want[p.name].tobytes(), f"`{p.name}` in place"
            assert not np.array_equal(args[p.name], given[p.name]), "the cache was updated"


def test_results_that_are_inputs_or_repeated(tmp_path):
    src = write(
        tmp_path,
        "twice.tsl",
        "step twice(x: f32[T]) -> (f32[T], f32[T]) { let y = x * 2.0; (y, y) }\n"
        "step ident(x: f32[T]) -> f32[T] { x }\n",
    )
    x = np.arange(5, dtype=np.float32)
    twice = tessel.compile(src, "twice", dims={"T": 5})
    assert [r.memory for r in twice.results] == [None, ("result", 0)]
    first, second = twice(x)
    assert second is first, "a value returned twice is one array"
    np.testing.assert_array_equal(first, x * 2)
    # A step returning its input returns a copy: the caller's array is not aliased.
    ident = tessel.compile(src, "ident", dims={"T": 5})
    y = ident(x)
    assert y is not x and not np.shares_memory(x, y)
    np.testing.assert_array_equal(y, x)
    split = tessel.compile(program("small.tsl"), "splits", dims={"T": 4})
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    y, z = split(a)
    np.testing.assert_array_equal(y, a[:, 3:])
    np.testing.assert_array_equal(z, a[:, :3])


def test_out_is_written():
    step = tessel.compile(program("small.tsl"), "promote", dims={"T": 4})
    out = np.full(4, np.nan, dtype=np.float32)
    r = step(np.ones(4, dtype=BF16), np.ones(4, dtype=np.float16), out=out)
    assert r is out
    np.testing.assert_array_equal(out, np.full(4, 2.0, dtype=np.float32))


def test_step_description():
    step = tessel.compile(program("kv_cache.tsl"), "append", dims={"B": 1, "KV": 1, "R": 1, "S": 8, "D": 4})
    assert [p.name for p in step.params] == ["k_new", "pos", "k_cache"]
    assert [p.inout for p in step.params] == [False, False, True]
    assert step.params[2].shape == (1, 1, 8, 4) and step.params[2].dtype == "bf16"
    assert step.results[-1].memory == ("param", 2)
    assert ".entry" in step.ptx and step.kernels
    assert "launch" in step.program
    assert step.profile == "exact" and step.target == "NVIDIA H200"
    assert "append(" in repr(step)


# -- argument errors --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def promote():
    return tessel.compile(program("small.tsl"), "promote", dims={"T": 6}, cache=False)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda s, a, b: s(a), "missing `b`"),
        (lambda s, a, b: s(a, b, a), "given 3 positional"),
        (lambda s, a, b: s(a, b=b, c=a), "no parameter `c`"),
        (lambda s, a, b: s(a, b, a=a), "`a` is given twice"),
        (lambda s, a, b: s(a, a), "`b` must be f16"),
        (lambda s, a, b: s(a, b[:5]), "`b` must have shape [6]"),
        (lambda s, a, b: s(a, np.stack([b, b])[:, 0]), "`b` must have shape [6]"),
        (lambda s, a, b: s(a, np.stack([b, b], axis=1)[:, 0]), "`b` is not C-contiguous"),
        (lambda s, a, b: s(a, [1.0] * 6), "`b` must be a torch.Tensor or numpy.ndarray, given a list"),
        (lambda s, a, b: s(a, b, out=[None, None]), "`out` has 2 entries"),
        (lambda s, a, b: s(a, b, out=np.zeros(6, np.float64)), "`out[out]` must be f32"),
    ],
)
def test_argument_errors_name_the_argument(promote, call, message):
    a = np.ones(6, dtype=BF16)
    b = np.ones(6, dtype=np.float16)
    with pytest.raises(tessel.ArgumentError) as e:
        call(promote, a, b)
    assert message in str(e.value)
    assert isinstance(e.value, tessel.TesselError)


def test_compile_errors_carry_the_report(tmp_path):
    src = write(tmp_path, "bad.tsl", "step f(x: f32[T]) -> f32[T] {\n    x + y\n}\n")
    with pytest.raises(tessel.CompileError) as e:
        tessel.compile(src, dims={"T": 3})
    text = str(e.value)
    assert "E0201" in text and "unknown name `y`" in text
    assert "bad.tsl:2:9" in text and "x + y" in text, text


def test_request_errors(tmp_path):
    f = program("small.tsl")
    with pytest.raises(tessel.ArgumentError, match="has no step `nope`"):
        tessel.compile(f, "nope", dims={"T": 3})
    with pytest.raises(tessel.ArgumentError, match="name one with step="):
        tessel.compile(f, dims={"T": 3})
    with pytest.raises(tessel.ArgumentError, match=r"step `promote` needs the dims T: pass dims=\{\"T\": \.\.\.\}"):
        tessel.compile(f, "promote")
    with pytest.raises(tessel.ArgumentError, match="the profiles are"):
        tessel.compile(f, "promote", dims={"T": 3}, profile="quick")
    with pytest.raises(tessel.ArgumentError, match="the targets are"):
        tessel.compile(f, "promote", dims={"T": 3}, target="a100x")
    with pytest.raises(tessel.ArgumentError, match="unknown option `wgmma`"):
        tessel.compile(f, "promote", dims={"T": 3}, wgmma=True)
    with pytest.raises(tessel.ArgumentError, match="at least 1"):
        tessel.compile(f, "promote", dims={"T": 0})
    with pytest.raises(tessel.CompileError, match="cannot read"):
        tessel.compile(str(tmp_path / "missing.tsl"))
    assert tessel.steps(f)[:2] == ["promote", "scale"]


# -- the cache ----------------------------------------------------------------------------------


def test_a_second_compile_reads_the_cache(fresh_cache):
    f = program("layer_small.tsl")
    first = tessel.compile(f, "qwen3", dims={"T": 20}, profile="fast")
    assert not first.from_cache
    entry = fresh_cache / first.key
    assert (entry / "program.tkir").exists() and (entry / "step.ptx").exists()
    again = tessel.compile(f, "qwen3", dims={"T": 20}, profile="fast")
    assert again.from_cache and again.key == first.key
    assert again.ptx == first.ptx and again.program == first.program
    other = tessel.compile(f, "qwen3", dims={"T": 21}, profile="fast")
    assert not other.from_cache and other.key != first.key
    # Another process reads it too, without compiling.
    code = (
        "import tessel; s = tessel.compile(%r, 'qwen3', dims={'T': 20}, profile='fast'); "
        "print(s.from_cache, s.key)" % f
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, TESSEL_CACHE_DIR=str(fresh_cache)))
    assert run.stdout.split() == ["True", first.key]


def test_cached_steps_compute_the_same_bits():
    f = program("lora.tsl")
    dims = {"M": 9, "K": 32, "N": 16, "R": 4}
    x = (np.arange(9 * 32).reshape(9, 32) % 13 / 13).astype(BF16)
    a = (np.arange(4 * 32).reshape(4, 32) % 7 / 7).astype(BF16)
    b = (np.arange(16 * 4).reshape(16, 4) % 5 / 5).astype(BF16)
    fresh = tessel.compile(f, "lora_bf16", dims=dims)
    cached = tessel.compile(f, "lora_bf16", dims=dims)
    assert cached.from_cache
    assert fresh(x, a, b).tobytes() == cached(x, a, b).tobytes()


def test_an_edited_source_misses(tmp_path):
    src = tmp_path / "e.tsl"
    src.write_text("step e(x: f32[T]) -> f32[T] { x + 1.0 }\n")
    one = tessel.compile(str(src), dims={"T": 4})
    src.write_text("step e(x: f32[T]) -> f32[T] { x + 2.0 }\n")
    two = tessel.compile(str(src), dims={"T": 4})
    assert not two.from_cache and two.key != one.key
    np.testing.assert_array_equal(two(np.zeros(4, np.float32)), np.full(4, 2.0, np.float32))


def test_a_damaged_entry_is_compiled_again(fresh_cache):
    f = program("small.tsl")
    s = tessel.compile(f, "scale", dims={"T": 8})
    (fresh_cache / s.key / "program.tkir").write_text("program garbage {")
    again = tessel.compile(f, "scale", dims={"T": 8})
    assert not again.from_cache
    assert tessel.compile(f, "scale", dims={"T": 8}).from_cache


def test_the_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSEL_CACHE_DIR", "off")
    assert tessel.cache_dir() is None
    f = program("small.tsl")
    assert not tessel.compile(f, "scale", dims={"T": 8}).from_cache
    assert not tessel.compile(f, "scale", dims={"T": 8}).from_cache
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path / "c2"))
    tessel.compile(f, "scale", dims={"T": 8}, cache=False)
    assert not (tmp_path / "c2").exists()


# -- torch on the CPU (when installed) ----------------------------------------------------------


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    step = tessel.compile(program("kv_cache.tsl"), "append_f32", dims={"B": 2, "R": 2, "S": 6, "D": 3})
    x = torch.arange(12, dtype=torch.float32).reshape(2, 2, 3)
    pos = torch.tensor([0, 3], dtype=torch.int32)
    cache = torch.zeros(2, 6, 3)
    m, c = step(x, pos, cache)
    assert c is cache and isinstance(m, torch.Tensor)
    assert torch.equal(cache[0, :2], x[0] * 0.5 + 1.0) and torch.equal(cache[1, 3:5], x[1] * 0.5 + 1.0)
    assert torch.equal(m, cache.max(dim=1).values)
    with pytest.raises(tessel.ArgumentError, match="`x` is not contiguous"):
        step(x.transpose(1, 2).contiguous().transpose(1, 2), pos, cache)


# -- autograd (the compiled pair; the torch glue is tested on the GPU and below when torch
# is installed) --------------------------------------------------------------------------------

MLP = """
fn mlp(x: f32[T, 6], w: f32[5, 6], ids: i32[T], g: f32[5]) -> f32[T, 5] {
    let h = x @ w^T;
    silu(h) * g + f32(ids)[:, None] * 0.25
}
"""


def test_autograd_pair_agrees_with_finite_differences(tmp_path):
    src = write(tmp_path, "mlp.tsl", MLP)
    f = tessel.autograd.function(src, "mlp", dims={"T": 3})
    assert f.differentiable == [True, True, False, True]
    assert [p.name for p in f.backward_step.params] == ["x", "w", "ids", "g", "grad_output"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6), dtype=np.float32)
    w = rng.standard_normal((5, 6), dtype=np.float32)
    ids = np.array([1, 0, 4], dtype=np.int32)
    g = rng.standard_normal(5, dtype=np.float32)
    dy = rng.standard_normal((3, 5), dtype=np.float32)
    dx, dw, dg = f.backward_step(x, w, ids, g, dy)

    def loss(x, w, g):
        return float(np.sum(f.forward_step(x, w, ids, g).astype(np.float64) * dy))

    for name, base, grad in [("x", x, dx), ("w", w, dw), ("g", g, dg)]:
        for i in range(base.size):
            plus, minus = base.copy(), base.copy()
            plus.flat[i] += 1e-2
            minus.flat[i] -= 1e-2
            args = {"x": x, "w": w, "g": g}
            numeric = (loss(**{**args, name: plus}) - loss(**{**args, name: minus})) / 2e-2
            assert abs(numeric - grad.flat[i]) < 2e-3 * (1 + abs(numeric)), (name, i)


def test_autograd_refuses_what_has_no_gradient(tmp_path):
    src = write(tmp_path, "two.tsl", "fn two(x: f32[T]) -> (f32[T], f32[T]) { (x, x) }\n")
    with pytest.raises(tessel.ArgumentError, match="it has 2 results"):
        tessel.autograd.function(src, "two", dims={"T": 2})
    with pytest.raises(tessel.ArgumentError, match="its `fn`s are: two"):
        tessel.autograd.function(src, "three", dims={"T": 2})


def test_autograd_with_torch_cpu(tmp_path):
    torch = pytest.importorskip("torch")
    src = write(tmp_path, "mlp.tsl", MLP)
    f = tessel.autograd.function(src, "mlp", dims={"T": 3})
    x = torch.randn(3, 6, requires_grad=True)
    w = torch.randn(5, 6, requires_grad=True)
    g = torch.randn(5, requires_grad=True)
    ids = torch.tensor([1, 0, 4], dtype=torch.int32)
    f(x, w, ids, g).square().sum().backward()
    xr, wr, gr = (t.detach().clone().requires_grad_() for t in (x, w, g))
    h = xr @ wr.T
    (torch.nn.functional.silu(h) * gr + ids.float()[:, None] * 0.25).square().sum().backward()
    for a, b in [(x, xr), (w, wr), (g, gr)]:
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)


# -- tessel.lora (the layer runs on torch tensors, on the GPU: tests/gpu/python_lora.py) ------


@pytest.mark.parametrize("fn", ["lora_linear", "lora_linear_bias"])
def test_the_packaged_lora_source_compiles_its_pair(fn):
    f = tessel.autograd.function(
        tessel.lora.SOURCE, fn, wrt=["x", "a", "b"], dims={"T": 5, "E": 64, "N": 32, "R": 4},
        profile="invariant",
    )
    # Gradients for x, lora_A and lora_B only: the base weight (and bias) are frozen.
    assert [r.dtype for r in f.backward_step.results] == ["bf16", "f32", "f32"]
    assert [r.shape for r in f.backward_step.results] == [(5, 64), (4, 64), (32, 4)]
    rng = np.random.default_rng(3)
    args = [
        rng.standard_normal(p.shape).astype(BF16 if p.dtype == "bf16" else np.float32)
        for p in f.forward_step.params
    ]
    # The forward against numpy in f64: PEFT's roundings (bf16 base product, f32 delta).
    x, w = (a.astype(np.float64) for a in args[:2])
    a, b, scale = (args[-3].astype(np.float64), args[-2].astype(np.float64), args[-1])
    base = x @ w.T
    if fn == "lora_linear_bias":
        base = base + args[2].astype(np.float64)
    want = base.astype(BF16).astype(np.float64) + (x @ a.T @ b.T) * float(scale)
    got = f.forward_step(*args).astype(np.float64)
    assert np.sqrt(np.mean((got - want) ** 2) / np.mean(want**2)) < 2**-8


def test_lora_adapter_grads_accumulate_in_sequence_order():
    """`lora_adapter_grads` (tessel.lora's grad_order="sequence"): the accumulators after
    calls of 1 and then 3 sequences, or 2 and 2, have the bits of one call of 4 — the left
    fold over sequences starting from the accumulator — and are the gradients (against numpy
    in f64, from the same inputs)."""
    dims = {"L": 24, "E": 40, "N": 48, "R": 4}
    steps = {
        s: tessel.compile(tessel.lora.SOURCE, "lora_adapter_grads", dims={"S": s, **dims},
                          profile="invariant")
        for s in (1, 2, 3, 4)
    }
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 24, 40)).astype(BF16)
    dy = rng.standard_normal((4, 24, 48)).astype(BF16)
    a = rng.standard_normal((4, 40)).astype(np.float32)
    b = rng.standard_normal((48, 4)).astype(np.float32)
    scale = np.float32(2.0)
    ga0 = rng.standard_normal((4, 40)).astype(np.float32)  # an earlier micro-batch's sum
    gb0 = rng.standard_normal((48, 4)).astype(np.float32)

    def run(cuts):
        ga, gb = ga0.copy(), gb0.copy()
        at = 0
        for s in cuts:
            steps[s](x[at : at + s], a, b, scale, dy[at : at + s], ga, gb)
            at += s
        return ga, gb

    whole = run([4])
    for cuts in ([1, 3], [2, 2], [1, 1, 1, 1], [3, 1]):
        got = run(cuts)
        assert all(np.array_equal(g.view(np.uint32), w.view(np.uint32)) for g, w in zip(got, whole)), cuts
    # The gradients themselves, in f64: dB = gdᵀ·h, dA = (gd·b)ᵀ·x over all 96 tokens.
    xf, gd = x.astype(np.float64).reshape(96, 40), dy.astype(np.float64).reshape(96, 48) * 2.0
    h = xf @ a.astype(np.float64).T
    want_b = gb0 + gd.T @ h
    want_a = ga0 + (gd @ b.astype(np.float64)).T @ xf
    for got, want in zip(whole, (want_a, want_b)):
        assert np.sqrt(np.mean((got - want) ** 2) / np.mean(want**2)) < 1e-6


def test_lora_apply_without_peft_says_so():
    try:
        import peft  # noqa: F401

        pytest.skip("peft is installed")
    except ImportError:
        pass
    with pytest.raises(tessel.ArgumentError, match="needs peft"):
        tessel.lora.apply(object())


# -- tessel.models (the layer source; the model runs on the GPU: tests/gpu/python_models.py) --


class Cfg:
    """A transformers config's attributes, as tessel.models reads them."""

    def __init__(self, model_type, **kw):
        self.model_type = model_type
        self.hidden_size, self.num_attention_heads, self.num_key_value_heads = 64, 4, 2
        self.head_dim, self.intermediate_size, self.rms_norm_eps = 128, 96, 1e-6
        self.rope_theta, self.rope_scaling, self.attention_bias = 1000000.0, None, False
        self.__dict__.update(kw)


def random_inputs(step, seed, ints):
    rng = np.random.default_rng(seed)
    out = {}
    for p in step.params:
        if p.dtype == "i32":
            out[p.name] = np.asarray(ints[p.name], dtype=np.int32).reshape(p.shape)
        else:
            out[p.name] = (rng.standard_normal(p.shape) * 0.5).astype(BF16)
    return out


@pytest.mark.parametrize("profile", ["exact", "fast"])
def test_generated_qwen3_layer_is_the_examples_layer(tmp_path, profile):
    """The layer tessel.models generates for a config, and tests/programs/layer_small.tsl's
    qwen3_decode (built from the same qwen.tsl by hand, at hidden 64): the same bits."""
    src = tessel.models.write_layer_source(Cfg("qwen3"))
    dims = {"B": 2, "T": 3, "S": 40}
    mine = tessel.compile(src, "layer", dims=dims, profile=profile)
    ref = tessel.compile(program("layer_small.tsl"), "qwen3_decode", dims=dims, profile=profile)
    lens = [5, 20]
    args = random_inputs(ref, 11, {"r": lens})
    want = ref(**{k: v.copy() for k, v in args.items()})
    mine_args = {k: v.copy() for k, v in args.items() if k != "r"}
    got = mine(len=np.array(lens, dtype=np.int32), **mine_args)
    assert got[0].tobytes() == want[1].tobytes(), "out"
    assert mine_args["k_cache"].tobytes() == want[2].tobytes(), "k_cache"
    assert mine_args["v_cache"].tobytes() == want[3].tobytes(), "v_cache"
    assert [p.name for p in mine.params][4:] == tessel.models.layer_params("qwen3")


def test_generated_qwen2_layer_compiles_with_biases():
    src = tessel.models.write_layer_source(Cfg("qwen2"))
    s = tessel.compile(src, "layer", dims={"B": 1, "T": 1, "S": 8})
    assert [p.name for p in s.params][4:] == tessel.models.layer_params("qwen2")
    assert s.params[8].name == "bq" and s.params[8].shape == (512,)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"model_type": "llama"}, "takes qwen3 and qwen2"),
        ({"head_dim": 64}, "head_dim 64"),
        ({"rope_scaling": {"rope_type": "yarn"}}, "only the default RoPE"),
        ({"attention_bias": True}, "attention_bias"),
    ],
)
def test_unsupported_configs_are_refused(change, message):
    with pytest.raises(tessel.ArgumentError, match=message):
        tessel.models.layer_source(Cfg(**{"model_type": "qwen3", **change}))


# -- reproducer bundles ------------------------------------------------------------------------


def test_a_reproducer_bundle_holds_the_step_and_its_inputs(tmp_path, tessel_cli):
    step = tessel.compile(program("layer_small.tsl"), "qwen3", dims={"T": 9}, profile="fast")
    where, inputs = step._c.write_repro(str(tmp_path / "b"), "a failure", None)
    where = pathlib.Path(where)
    assert inputs is None
    assert where.parent == tmp_path / "b" and where.name.startswith("qwen3-")
    meta = json.loads((where / "bundle.json").read_text())
    assert meta["step"] == "qwen3" and "a failure" in json.dumps(meta)
    assert (where / "qwen3.ptx").read_text() == step.ptx
    assert list((where / "stages").iterdir()), "the IR stages"
    sources = [p.name for p in (where / "src").rglob("*.tsl")]
    assert {"layer_small.tsl", "qwen.tsl"} <= set(sources), sources


def test_a_failed_call_writes_a_reproducer(tmp_path, monkeypatch):
    """The glue: a failing executor run raises its error with the bundle's path, and the
    inputs written beside it read back to the call's arguments."""
    monkeypatch.setenv("TESSEL_REPRO_DIR", str(tmp_path / "r"))
    step = tessel.compile(program("small.tsl"), "promote", dims={"T": 4})

    class Failing:
        def __getattr__(self, name):
            return getattr(step_c, name)

        def run_executor(self, data):
            raise tessel.DeviceError("executing step `promote` on the CPU: out of cheese")

    step_c = step._c
    step._c = Failing()
    a, b = np.arange(4).astype(BF16), np.ones(4, np.float16)
    with pytest.raises(tessel.DeviceError) as e:
        step(a, b)
    text = str(e.value)
    assert "out of cheese" in text and "reproducer written to" in text, text
    inputs = next((tmp_path / "r").glob("promote-inputs-*.safetensors"))
    back = read_safetensors(inputs)
    assert back["a"].tobytes() == a.tobytes() and back["b"].tobytes() == b.tobytes()
    bundle = next(p for p in (tmp_path / "r").iterdir() if p.is_dir())
    assert str(inputs) in (bundle / "bundle.json").read_text()
    monkeypatch.setenv("TESSEL_REPRO_DIR", "off")
    with pytest.raises(tessel.DeviceError) as e:
        step(a, b)
    assert "reproducer" not in str(e.value)


def test_written_memory_may_not_alias_another_argument():
    step = tessel.compile(program("kv_cache.tsl"), "append_f32", dims={"B": 1, "R": 2, "S": 4, "D": 2})
    cache = np.zeros((1, 4, 2), np.float32)
    pos = np.zeros(1, np.int32)
    with pytest.raises(tessel.ArgumentError, match="`x` and `cache` share memory"):
        step(cache[:, :2], pos, cache)
    # Reading one array twice is fine; writing `out` over an input is not.
    two = tessel.compile(program("small.tsl"), "compare", dims={"T": 3})
    a = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(two(a, a), a)
    with pytest.raises(tessel.ArgumentError, match="`a` and `out\\[out\\]` share memory"):
        two(a, a + 1, out=a)


# -- regressions from a new user's attempts to break the package (2026-12-07) -------------------

TWO_CACHES = """
step two(x: f32[1, 1], pos: i32[1], c: inout f32[1, 4], d: inout f32[1, 4]) -> f32[1] {
    let a = update(c, x, at: pos, axis: 1);
    let b = update(d, x * -1.0, at: pos, axis: 1);
    sum(a, axis: 1) + sum(b, axis: 1)
}
step named(x: f32[T], out: f32[T]) -> f32[T] { x + out }
"""


def test_the_executor_out_of_host_memory_is_a_memory_error(tmp_path):
    """A step whose buffers do not fit the process's address space raises MemoryError (it
    aborted the interpreter)."""
    code = f"""
import resource, numpy as np, ml_dtypes, tessel
s = tessel.compile({program('layer_small.tsl')!r}, "qwen3", dims={{"T": 2**14}}, profile="exact")
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
args = {{p.name: np.zeros(p.shape, dtype=np.int32 if p.dtype == "i32" else ml_dtypes.bfloat16)
        for p in s.params}}
try:
    s(**args)
    print("no error")
except MemoryError as e:
    print("MemoryError", e)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, TESSEL_REPRO_DIR="off"))
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("MemoryError") and "out of host memory" in run.stdout, run.stdout


def test_inouts_aliasing_each_other_are_refused(tmp_path):
    s = tessel.compile(write(tmp_path, "two.tsl", TWO_CACHES), "two")
    c = np.zeros((1, 4), np.float32)
    with pytest.raises(tessel.ArgumentError, match="`c` and `d` share memory"):
        s(np.full((1, 1), 5, np.float32), np.array([0], np.int32), c, c)
    d = np.zeros((1, 4), np.float32)
    s(np.full((1, 1), 5, np.float32), np.array([1], np.int32), c, d)
    assert c.tolist() == [[0, 5, 0, 0]] and d.tolist() == [[0, -5, 0, 0]]


def test_everything_is_checked_before_the_step_runs(tmp_path):
    s = tessel.compile(write(tmp_path, "two.tsl", TWO_CACHES), "two")
    x, pos = np.full((1, 1), 5, np.float32), np.array([0], np.int32)
    c, d = np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32)
    d.flags.writeable = False
    with pytest.raises(tessel.ArgumentError, match="`d` is read-only"):
        s(x, pos, c, d)
    assert not c.any(), "nothing was written"
    d = np.zeros((1, 4), np.float32)
    with pytest.raises(tessel.ArgumentError, match="out\\[out\\]` must be f32"):
        s(x, pos, c, d, out=[np.zeros(1, np.float64), None, None])
    assert not c.any() and not d.any(), "nothing was written"


def test_a_parameter_named_out(tmp_path):
    s = tessel.compile(write(tmp_path, "two.tsl", TWO_CACHES), "named", dims={"T": 3})
    x, y = np.ones(3, np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(s(x, out=y), x + y)
    buf = np.zeros(3, np.float32)
    assert s.into(buf, x, out=y) is buf
    np.testing.assert_array_equal(buf, x + y)


def test_companions_written_from_many_threads(tmp_path):
    import threading

    src = write(tmp_path, "mlp.tsl", MLP)
    errors = []

    def work():
        try:
            for _ in range(4):
                tessel.autograd.function(src, "mlp", dims={"T": 3})
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def test_an_unwritable_cache_is_a_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(RuntimeWarning, match="cannot write the compile cache"):
        s = tessel.compile(program("small.tsl"), "scale", dims={"T": 4})
    assert not s.from_cache
    f = tessel.autograd.function(write(tmp_path, "mlp.tsl", MLP), "mlp", dims={"T": 3}, cache=False)
    assert f.forward_step is not None


def test_generated_imports_of_unusual_paths(tmp_path):
    odd = tmp_path / "jürgen ü"
    odd.mkdir()
    lib = odd / "qwen.tsl"
    lib.write_text(tessel.models.LIB.read_text())
    text = tessel.models.layer_source(Cfg("qwen3"), lib=str(lib))
    assert f'import "{lib}";' in text
    gen = odd / "layer.tsl"
    gen.write_text(text)
    tessel.compile(str(gen), "layer", dims={"B": 1, "T": 1, "S": 4})
    f = tessel.autograd.function(write(odd, "mlp.tsl", MLP), "mlp", dims={"T": 3})
    assert f.differentiable == [True, True, False, True]
    quoted = tmp_path / 'a"b'
    quoted.mkdir()
    with pytest.raises(tessel.ArgumentError, match="quote, backslash or line break"):
        tessel.autograd.function(write(quoted, "mlp.tsl", MLP), "mlp", dims={"T": 3})


def test_autograd_default_wrt_and_wrt_spelling(tmp_path):
    src = write(tmp_path, "m.tsl", "fn f(x: f32[T], t: f32[T]) -> f32[T] { where(t > 0.0, x, x * -1.0) }\n")
    with pytest.raises(tessel.ArgumentError, match="wrt="):
        tessel.autograd.function(src, "f", dims={"T": 3})
    f = tessel.autograd.function(src, "f", wrt=["x"], dims={"T": 3})
    assert f.differentiable == [True, False]
    with pytest.raises(tessel.ArgumentError, match="a list of parameter names"):
        tessel.autograd.function(src, "f", wrt="x", dims={"T": 3})


@pytest.mark.parametrize(
    "change,message",
    [
        ({"num_key_value_heads": 3}, "not a multiple of 3"),
        ({"hidden_size": 0}, "a positive integer"),
        ({"intermediate_size": 96.0}, "a positive integer"),
        ({"rms_norm_eps": float("nan")}, "finite positive"),
        ({"rms_norm_eps": -1.0}, "finite positive"),
        ({"rope_theta": float("inf")}, "finite positive"),
        ({"rope_scaling": {"type": "linear"}}, "RoPE type 'linear'"),
    ],
)
def test_layer_configs_are_checked(change, message):
    with pytest.raises(tessel.ArgumentError, match=message):
        tessel.models.layer_source(Cfg("qwen3", **change))


def test_dims_of_numpy_integers_and_too_large():
    s = tessel.compile(program("small.tsl"), "scale", dims={"T": np.int64(4)})
    assert s.params[0].shape == (4,)
    with pytest.raises(tessel.ArgumentError, match="too large"):
        tessel.compile(program("small.tsl"), "scale", dims={"T": 2**64})
    with pytest.raises(tessel.ArgumentError, match="a dim is an integer"):
        tessel.compile(program("small.tsl"), "scale", dims={"T": 4.0})


@pytest.mark.parametrize("profile", ["exact", "fast"])
def test_generated_qwen2_layer_is_the_examples_prefill(profile):
    """The Qwen2 layer tessel.models generates, run over an empty cache (len = 0, T = S = 7),
    and tests/programs/layer_small.tsl's qwen2 prefill step on the same rows: the same bits."""
    src = tessel.models.write_layer_source(Cfg("qwen2"))
    mine = tessel.compile(src, "layer", dims={"B": 1, "T": 7, "S": 7}, profile=profile)
    ref = tessel.compile(program("layer_small.tsl"), "qwen2", dims={"T": 7}, profile=profile)
    rng = np.random.default_rng(5)
    args = {p.name: (rng.standard_normal(p.shape) * 0.5).astype(BF16)
            for p in ref.params if p.dtype != "i32"}
    want = ref(pos=np.arange(7, dtype=np.int32), **args)[1]
    caches = [np.zeros((1, 2, 7, 128), BF16) for _ in range(2)]
    rest = {k: v for k, v in args.items() if k != "x"}
    got = mine(args["x"].reshape(1, 7, 64), np.zeros(1, np.int32), *caches, **rest)[0]
    assert got.tobytes() == want.tobytes()
