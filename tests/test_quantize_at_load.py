"""Quantizing a float release at load: ``vidax.load(..., quantize="int8" | "fp8")``
(``vidax.translator.quantize``).

The checkpoint: the authors' Wan2.1 ``WanModel`` (tests/reference) at a tiny config wide
enough that some Linear kernels reach the 2**14-value minimum and some do not (dim 128, ffn
256, text 32: the block Linears, ``text_embedding.fc2``, ``time_embedding`` and
``time_projection`` are 16,384-32,768 values; ``head.head`` 8,192 and ``text_embedding.fc1``
4,096 stay float), random values in every tensor, saved with its own ``state_dict()``.

Oracles: the float kernel the plain load gives (the quantizer's input), the rounding of a
float8_e4m3fn cast by PyTorch (an implementation other than ml_dtypes'), and the bound each
code's rounding allows: int8 ``|w - deq| <= s / 2`` per output channel; e4m3 (3 mantissa
bits) ``|w - deq| <= 2**-4 |w|`` on its normal range, ``<= 2**-10 s`` (half its subnormal
step 2**-9, times the scale) below it. The DiT forward of the quantized model is compared with
the float model's. Negative controls: norms, biases, the patch-embedding conv, the modulation
table and the small Linears stay float arrays; a quantized weight with its scale dropped
moves the output past the bound; a NaN in a weight is still refused; ``"int4"`` is refused
before any weight is read.
"""

from __future__ import annotations

import dataclasses

import jax
import ml_dtypes
import numpy as np
import pytest

import vidax
from tests.sharding.common import write_authors_dit
from vidax import registry, sharding
from vidax.errors import NonFiniteWeightsError, VidaxError
from vidax.models.wan2_1.dit import WanDiTConfig
from vidax.nn.quant import QArray
from vidax.translator import quantize as qz
from vidax.translator.io import open_checkpoint
from vidax.translator.verify import flat_params

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")

CFG = dataclasses.replace(WanDiTConfig.tiny(), dim=128, ffn_dim=256, num_heads=4, text_dim=32)
BLOCK = ("self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o", "cross_attn.q",
         "cross_attn.k", "cross_attn.v", "cross_attn.o", "ffn.fc1", "ffn.fc2")
#: The Linear kernels of CFG with >= 2**14 values, written out by hand (Flax paths).
QUANTIZED = ({f"blocks.{i}.{m}.kernel" for i in range(CFG.num_layers) for m in BLOCK}
             | {"text_embedding.fc2.kernel", "time_embedding.fc1.kernel",
                "time_embedding.fc2.kernel", "time_projection.fc.kernel"})
#: Linear kernels below the minimum: float.
SMALL = {"head.head.kernel": (128, 64), "text_embedding.fc1.kernel": (32, 128)}
FP8_REL = 2.0 ** -4          # e4m3: 3 mantissa bits, half an ulp of a normal value
FP8_SUB = 2.0 ** -10         # half of e4m3's subnormal step 2**-9 (in units of the scale)
#: The forward's relative L2 error vs the float model, measured here: int8 7.5e-3 (max |diff|
#: 3.2e-2), fp8 3.4e-2 (max |diff| 0.16) -- e4m3 keeps 3 mantissa bits everywhere, int8 ~7
#: bits at the top of each channel. The bounds leave ~2x; the scale-dropped control gives 1.0.
FORWARD_BOUND = {"int8": 1.5e-2, "fp8": 6e-2}


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    path = write_authors_dit(CFG, tmp_path_factory.mktemp("qload") / "wan.safetensors")
    floats = vidax.load("wan2_1", "dit", path, config=CFG)
    rng = np.random.default_rng(1)
    inputs = {"x": rng.standard_normal((1, 3, 8, 12, 16)).astype(np.float32),
              "t": np.asarray([700.0], np.float32),
              "context": rng.standard_normal((1, 12, CFG.text_dim)).astype(np.float32)}
    return path, floats, inputs


def _params(model) -> dict:
    return flat_params(model)


def _forward(model, inputs) -> np.ndarray:
    return np.asarray(vidax.compiled(model)(**inputs))


def _rel_l2(out, ref) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _held(model) -> int:
    return sum(v.nbytes for v in _params(model).values())


def _check_rounding(w: np.ndarray, q: QArray, mode: str) -> None:
    """``q`` against its float kernel ``w``: the scale rule and each value's rounding bound."""
    scale = np.asarray(q.scale)
    amax = np.abs(w).max(axis=0, keepdims=True)
    np.testing.assert_array_equal(scale, (amax / np.float32(qz.TOP[mode])).astype(np.float32))
    data = np.asarray(q.data).astype(np.float32)
    # the channel's largest |w| lands on the top code (rounded in fp8: 448 is a code)
    np.testing.assert_array_equal(np.abs(data).max(axis=0), qz.TOP[mode])
    assert _error_ratio(w, np.asarray(q[...]), scale, mode) <= 1


def _error_ratio(w: np.ndarray, dequantized: np.ndarray, scale: np.ndarray, mode: str) -> float:
    """The largest ``|w - dequantized|`` as a share of the rounding bound of ``mode``."""
    err = np.abs(w - dequantized)
    if mode == "int8":
        bound = scale * (0.5 + 1e-5)
    else:
        bound = np.maximum(FP8_REL * np.abs(w), FP8_SUB * scale) * (1 + 1e-5)
    return float((err / bound).max())


# ------------------------------------------------------------------------------------- (a)
@pytest.mark.parametrize("mode", ["int8", "fp8"])
def test_eligible_linear_kernels_become_qarrays(wan, mode, record_property):
    path, floats, inputs = wan
    model, report = vidax.load_with_report("wan2_1", "dit", path, config=CFG, quantize=mode)
    params, ref = _params(model), _params(floats)
    quantized = {k for k, v in params.items() if isinstance(v, QArray)}
    assert quantized == QUANTIZED
    # the same set, read off the plan: 2-D targets of the converter's "linear" layout
    with open_checkpoint(path) as ckpt:
        from vidax.loading import plan_tensors

        plan, _ = plan_tensors(registry.get("wan2_1", "dit", "original"), ckpt)
        linear = {n for n, t in plan.targets.items()
                  if t.layout == "linear" and len(t.shape) == 2}
    assert QUANTIZED == {n for n in linear if np.prod(plan.targets[n].shape) >= 2 ** 14}
    assert set(SMALL) == linear - QUANTIZED
    # negative: everything else is the float array the plain load gives, bit for bit
    for name, value in params.items():
        if name in QUANTIZED:
            continue
        assert not isinstance(value, QArray) and value.dtype == np.float32, name
        np.testing.assert_array_equal(np.asarray(value), np.asarray(ref[name]), err_msg=name)
    assert {k: params[k].shape for k in SMALL} == SMALL
    assert params["patch_embedding.kernel"].ndim == 5
    assert any(k.endswith(".bias") for k in params) and any(k.endswith(".scale")
                                                            for k in params)
    for name in QUANTIZED:
        q, w = params[name], np.asarray(ref[name])
        assert q.data.dtype == qz.CODES[mode] and q.format == qz.FORMATS[mode]
        assert q.block is None and q.scale.dtype == np.float32
        assert q.scale.shape == (1, w.shape[1])
        _check_rounding(w, q, mode)
    assert report.kept_quantized == len(QUANTIZED)
    assert f"{len(QUANTIZED)} weights quantized to {mode} at load" in report.quantization

    # bytes held: 1 byte a quantized value + 4 per output channel; the rest float32
    held, floats_held = _held(model), _held(floats)
    expect = floats_held - sum(3 * params[k].size - 4 * params[k].shape[1] for k in QUANTIZED)
    assert held == expect
    record_property("bytes_ratio", held / floats_held)      # 0.293 (685,312 / 2,340,608)
    assert held / floats_held < 0.3

    out, base = _forward(model, inputs), _forward(floats, inputs)
    rel = _rel_l2(out, base)
    record_property("forward_rel_l2", rel)
    print(f"{mode}: forward rel L2 {rel:.2e}, max|diff| {np.abs(out - base).max():.2e}, "
          f"bytes {held} / {floats_held}")
    assert 0 < rel <= FORWARD_BOUND[mode]
    # negative control: one weight's scale dropped (its codes read as the weights)
    broken = vidax.load("wan2_1", "dit", path, config=CFG, quantize=mode)
    layer = broken.blocks[0].ffn.fc1
    layer.kernel.set_value(QArray(layer.kernel.get_value().data,
                                  np.ones((1, CFG.ffn_dim), np.float32), None, "broken"))
    wrong = _rel_l2(_forward(broken, inputs), base)
    print(f"{mode}: blocks.0.ffn.fc1 without its scale: rel L2 {wrong:.2e}")
    assert wrong > FORWARD_BOUND[mode]


@pytest.mark.parametrize("mode", ["int8", "fp8"])
def test_quantize_kernel_rule(mode):
    import torch

    rng = np.random.default_rng(3)
    stored = (rng.standard_normal((48, 40)) * rng.uniform(1e-3, 3, (48, 1))).astype(np.float32)
    stored[5] = 0.0                                   # an output channel of zeros
    stored[7, :20] = 1e-6                             # values in e4m3's subnormal range
    kernel = stored.T                                 # the Flax [in, out] view of [out, in]
    data, scale = qz.quantize_kernel(kernel, mode)
    assert data.flags.f_contiguous                    # encoded in the stored order
    contiguous = qz.quantize_kernel(np.ascontiguousarray(kernel), mode)
    np.testing.assert_array_equal(data, contiguous[0])
    np.testing.assert_array_equal(scale, contiguous[1])
    assert scale.shape == (1, 48) and scale[0, 5] == 1 and not data[:, 5].any()
    q = QArray(data, scale, None, qz.FORMATS[mode])
    nonzero = np.ones(48, bool)
    nonzero[5] = False
    _check_rounding(kernel[:, nonzero], QArray(data[:, nonzero], scale[:, nonzero]), mode)
    if mode == "fp8":                                 # PyTorch's own e4m3 cast: same codes
        theirs = torch.from_numpy(np.ascontiguousarray(kernel / scale)).to(torch.float8_e4m3fn)
        np.testing.assert_array_equal(np.ascontiguousarray(data).view(np.uint8),
                                      theirs.view(torch.uint8).numpy())
    else:
        np.testing.assert_array_equal(data, np.clip(np.round(kernel / scale), -127, 127))
    assert np.asarray(q[...]).shape == kernel.shape
    # negative controls: the bound tells the rule from a coarser one -- int8 codes truncated
    # toward zero, fp8 codes with 2 mantissa bits (float8_e5m2)
    x = kernel / scale
    worse = (np.trunc(x) if mode == "int8"
             else x.astype(ml_dtypes.float8_e5m2).astype(np.float32)) * scale
    assert _error_ratio(kernel[:, nonzero], worse[:, nonzero], scale[:, nonzero], mode) > 1.5


# ------------------------------------------------------------------------------------- (b)
def test_on_a_mesh_the_codes_are_sharded_and_equal(wan):
    path, _, _ = wan
    mesh = sharding.make_mesh("fsdp=2", devices=jax.devices()[:2])
    one = _params(vidax.load("wan2_1", "dit", path, config=CFG, quantize="int8"))
    two = _params(vidax.load("wan2_1", "dit", path, config=CFG, quantize="int8", mesh=mesh))
    split = 0
    for name in QUANTIZED:
        a, b = one[name], two[name]
        assert isinstance(b, QArray) and b.data.dtype == np.int8
        np.testing.assert_array_equal(np.asarray(b.data), np.asarray(a.data), err_msg=name)
        np.testing.assert_array_equal(np.asarray(b.scale), np.asarray(a.scale), err_msg=name)
        np.testing.assert_array_equal(np.asarray(b[...]), np.asarray(a[...]), err_msg=name)
        assert b.data.sharding.mesh == mesh
        split += not b.data.sharding.is_fully_replicated
        spec = tuple(b.data.sharding.spec) + (None,) * 2
        if spec[1] is not None:                       # split on out: the scale follows
            assert tuple(b.scale.sharding.spec)[1] == spec[1], name
    assert split > 0                                  # fsdp=2 really splits some codes


# ------------------------------------------------------------------------------------- (c)
def test_a_bad_choice_is_refused_before_any_weight_is_read(wan):
    path, _, _ = wan
    with open_checkpoint(path) as ckpt:
        with pytest.raises(VidaxError) as e:
            vidax.load("wan2_1", "dit", ckpt, config=CFG, quantize="int4")
        assert ckpt.bytes_read == 0
    message = str(e.value)
    assert "'int4'" in message and "'int8'" in message and "'fp8'" in message
    with pytest.raises(VidaxError, match="'int8', 'fp8'"):
        qz.quantized_bytes(registry.get("wan2_1", "dit", "original"), CFG, None, "nf4")


def test_a_nan_is_still_refused(wan, tmp_path):
    from tests.parity import edited_copy

    path, _, _ = wan
    key = "blocks.1.ffn.0.weight"

    def poison(tensors):
        tensors[key] = tensors[key].copy()
        tensors[key][3, 4] = np.nan

    bad = edited_copy(path, tmp_path / "bad.safetensors", poison)
    with pytest.raises(NonFiniteWeightsError, match=key.replace(".", r"\.")) as e:
        vidax.load("wan2_1", "dit", bad, config=CFG, quantize="int8")
    assert e.value.bad == {key: 1}


# ------------------------------------------------------------------------------------- (d)
def test_a_stored_fp8_file_is_left_as_stored(wan, tmp_path):
    import safetensors.torch
    import torch

    from tests.translator import fp8_fixtures as fx

    path, _, _ = wan
    layers = ["blocks.0.self_attn.q", "blocks.1.ffn.0"]
    state = {k: v.to(torch.float32) for k, v in safetensors.torch.load_file(path).items()}
    q = fx.comfy_quantize(state, layers)
    fp8 = tmp_path / "wan_scaled_fp8.safetensors"
    safetensors.torch.save_file({k: v.contiguous() for k, v in
                                 fx.comfy_legacy_file(q, input_scales=False).items()}, fp8)
    stored = _params(vidax.load("wan2_1", "dit", fp8, config=CFG))
    model, report = vidax.load_with_report("wan2_1", "dit", fp8, config=CFG, quantize="int8")
    params = _params(model)
    kept = {"blocks.0.self_attn.q.kernel", "blocks.1.ffn.fc1.kernel"}
    for name in kept:                                 # the file's fp8 and scale, untouched
        a, b = params[name], stored[name]
        assert isinstance(a, QArray) and a.data.dtype == ml_dtypes.float8_e4m3fn
        assert a.format == b.format != qz.FORMATS["int8"]
        np.testing.assert_array_equal(np.asarray(a.data).view(np.uint8),
                                      np.asarray(b.data).view(np.uint8))
        np.testing.assert_array_equal(np.asarray(a.scale), np.asarray(b.scale))
    for name in QUANTIZED - kept:                     # the file's floats: quantized here
        assert params[name].format == "int8" and params[name].data.dtype == np.int8
    assert report.kept_quantized == len(QUANTIZED)
    assert report.quantization.startswith("comfyui-scaled-fp8")
    assert f"{len(QUANTIZED - kept)} weights quantized to int8 at load" in report.quantization


# ------------------------------------------------------------------------------------- (e)
@pytest.mark.parametrize("mode, dtype", [("int8", "float32"), ("fp8", "bf16"),
                                         ("int8", None), (None, "bf16")])
def test_quantized_bytes_equal_what_a_load_holds(wan, mode, dtype):
    path, _, _ = wan
    model = vidax.load("wan2_1", "dit", path, config=CFG, quantize=mode, dtype=dtype)
    spec = registry.get("wan2_1", "dit", "original")
    total, text = qz.quantized_bytes(spec, CFG, dtype, mode)
    assert total == _held(model)
    if mode:
        assert f"{len(QUANTIZED)} Linear weights {qz.FORMATS[mode]}" in text
    assert text.startswith("bfloat16" if dtype == "bf16" else "float32")


def test_a_converted_folder_is_quantized_alike(wan, tmp_path):
    from vidax.convert import convert

    path, _, _ = wan
    out = convert("wan2_1", "dit", path, tmp_path / "converted", config=CFG)
    a = _params(vidax.load("wan2_1", "dit", out, quantize="fp8"))
    b = _params(vidax.load("wan2_1", "dit", path, config=CFG, quantize="fp8"))
    assert {k for k, v in a.items() if isinstance(v, QArray)} == QUANTIZED
    for name in QUANTIZED:
        np.testing.assert_array_equal(np.asarray(a[name].data).view(np.uint8),
                                      np.asarray(b[name].data).view(np.uint8))
