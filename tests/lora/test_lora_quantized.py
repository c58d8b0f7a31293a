"""LoRAs merged into quantized bases stay quantized, re-encoded as their authors do.

* fp8 (ComfyUI's scaled fp8, per-tensor scale): the merged weight is re-quantized under a new
  per-tensor scale. Oracle: ltx-core 1.0.0's ``loader/fuse_loras.py`` ``apply_loras`` (the
  authors' LoRA fusion into scaled fp8 weights: dequantize, add ``sum(strength * B @ A)``,
  ``quantize_weight_to_fp8_per_tensor``), on the same fp8 weights and LoRA. ltx-core forms
  the delta in bfloat16, so the LoRA's factors are small multiples of powers of two whose
  products are exact in bfloat16: both sides then add the same float32 delta, and the fp8
  data must be bit-equal (the new scales agree to one float32 ulp).
* GGUF Q8_0 kept (``quantized="keep"``): new block scales. Oracle: gguf 0.19's
  ``quants.quantize`` of the merged float weight (ggml's ``quantize_row_q8_0``): bit-equal.

Live adapters on an fp8 base lose nothing: the stored weights are dequantized in the layer and
the delta added after, equal to the LoRA merged into the dequantized base.

What the re-quantization costs is measured on the output against the same LoRA merged into
the dequantized base (recorded, and bounded loosely: it is fp8 / Q8_0 rounding of the
merged weights, the same order as the base's own quantization).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.models.wan2_1.test_wan2_1_dit import _inputs, _run_vidax
from tests.parity import assert_parity, compare, randomize
from tests.reference import wan22
from tests.translator import fp8_fixtures as fx
from vidax.models.wan2_1.dit import WanDiTConfig
from vidax.nn.quant import QArray

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")
LAYERS = ("blocks.0.self_attn.q", "blocks.0.ffn.0", "blocks.1.cross_attn.o")
#: their parameters in vidax's model (the Wan mapper's renames)
KERNEL = {"blocks.0.self_attn.q": "blocks.0.self_attn.q.kernel",
          "blocks.0.ffn.0": "blocks.0.ffn.fc1.kernel",
          "blocks.1.cross_attn.o": "blocks.1.cross_attn.o.kernel"}
RANK = 4


def _state(cfg):
    import torch

    model = wan22.model_module().WanModel(**dataclasses.asdict(cfg)).eval()
    randomize(model.named_parameters(), seed=0)
    return {k: v.detach().to(torch.float32).clone() for k, v in model.state_dict().items()}


def _exact_lora(state) -> dict:
    """Factors in {-2..2} / 16 (rank 4): every product sum is exact in bfloat16."""
    import torch

    g = torch.Generator().manual_seed(3)
    lora = {}
    for layer in LAYERS:
        out, inp = state[f"{layer}.weight"].shape
        lora[f"diffusion_model.{layer}.lora_A.weight"] = (
            torch.randint(-2, 3, (RANK, inp), generator=g).float() / 16)
        lora[f"diffusion_model.{layer}.lora_B.weight"] = (
            torch.randint(-2, 3, (out, RANK), generator=g).float() / 16)
    return lora


def _kernels(model) -> dict:
    return {".".join(map(str, p)): v.get_value() for p, v in nnx.iter_graph(model)
            if isinstance(v, nnx.Param)}


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    cfg = WanDiTConfig.tiny("t2v")
    state = _state(cfg)
    root = tmp_path_factory.mktemp("lora_quant")
    lora_path = root / "lora.safetensors"
    import safetensors.torch

    safetensors.torch.save_file(_exact_lora(state), lora_path)
    return cfg, state, root, lora_path, _inputs(cfg, seed=1)


def test_fp8_merge_equals_ltx_core_fusion(wan, record_property):
    import safetensors.torch
    import torch
    from ltx_core.loader.fuse_loras import apply_loras
    from ltx_core.loader.primitives import LoraStateDictWithStrength, StateDict

    cfg, state, root, lora_path, inputs = wan
    q = fx.comfy_quantize(state, list(LAYERS))
    path = root / "wan_scaled_fp8.safetensors"
    safetensors.torch.save_file({k: v.contiguous() for k, v in
                                 fx.comfy_legacy_file(q, input_scales=False).items()}, path)
    strength = 0.5
    model = vidax.load("wan2_1", "dit", path, config=cfg, loras=[(lora_path, strength)])
    kernels = _kernels(model)

    # ltx-core: its in-memory scaled fp8 weights are [in, out] (transposed for cuBLAS)
    lora = safetensors.torch.load_file(lora_path)
    model_sd = {}
    for layer in LAYERS:
        model_sd[f"{layer}.weight"] = q.stored[f"{layer}.weight"].t()
        model_sd[f"{layer}.weight_scale"] = q.scales[layer].reshape(())
    lora_sd = {k.removeprefix("diffusion_model."): v for k, v in lora.items()}
    fused = apply_loras(StateDict(model_sd, torch.device("cpu"), 0, set()),
                        [LoraStateDictWithStrength(StateDict(lora_sd, torch.device("cpu"), 0,
                                                             set()), strength)]).sd
    for layer in LAYERS:
        kernel = kernels[KERNEL[layer]]
        assert isinstance(kernel, QArray) and kernel.data.dtype == jax.numpy.float8_e4m3fn
        ours = np.asarray(kernel.data).view(np.uint8)
        theirs = fused[f"{layer}.weight"].contiguous().view(torch.uint8).numpy()
        np.testing.assert_array_equal(ours, theirs, err_msg=layer)
        # the scale within one float32 ulp: XLA's float32 division on CPU is not correctly
        # rounded in every case (1 / (448 / amax) here vs torch's reciprocal)
        np.testing.assert_allclose(float(kernel.scale), float(fused[f"{layer}.weight_scale"]),
                                   rtol=1.2e-7, atol=0)

    # the cost: against the same LoRA merged into the dequantized base
    out = np.asarray(_run_vidax(model, **inputs))
    floats = vidax.load("wan2_1", "dit", path, config=cfg, quantized="dequantize",
                        loras=[(lora_path, strength)])
    ref = np.asarray(_run_vidax(floats, **inputs))
    base = np.asarray(_run_vidax(vidax.load("wan2_1", "dit", path, config=cfg), **inputs))
    floats_path = root / "wan_float.safetensors"
    safetensors.torch.save_file(state, floats_path)
    unquantized = np.asarray(_run_vidax(vidax.load("wan2_1", "dit", floats_path, config=cfg),
                                        **inputs))
    # live on the fp8 base: the stored weights dequantized in the layer, the delta added after
    live = vidax.load("wan2_1", "dit", path, config=cfg, loras=[(lora_path, strength)],
                      lora_mode="live")
    assert isinstance(_kernels(live)[KERNEL[LAYERS[0]]].base, QArray)
    assert_parity("fp8_live", np.asarray(_run_vidax(live, **inputs)), ref, record_property)
    cost = compare("fp8_requantization_cost", out, ref, record_property)
    own = compare("fp8_base_quantization_error", base, unquantized, record_property)
    compare("lora_effect", base, ref, record_property)
    # re-encoding the merged weights costs what encoding them cost once, in order
    assert cost["max_abs_diff"] < 3 * own["max_abs_diff"]


def test_q8_0_merge_equals_gguf_quantize(wan, record_property):
    import gguf

    from tests.translator.test_gguf import _finish, _writer

    cfg, state, root, lora_path, inputs = wan
    path = root / "wan-Q8_0.gguf"
    w = _writer(path)
    for key, value in state.items():
        value = value.numpy()
        kind = (gguf.GGMLQuantizationType.Q8_0 if key.removesuffix(".weight") in LAYERS
                else gguf.GGMLQuantizationType.F32)
        w.add_tensor(key, gguf.quants.quantize(value, kind), raw_dtype=kind)
    _finish(w)
    strength = 0.75
    model = vidax.load("wan2_1", "dit", path, config=cfg, quantized="keep",
                       loras=[(lora_path, strength)])
    import safetensors.numpy

    lora = safetensors.numpy.load_file(lora_path)
    kernels = _kernels(model)
    for layer in LAYERS:
        kernel = kernels[KERNEL[layer]]
        assert isinstance(kernel, QArray) and kernel.block == 32
        stored = gguf.quants.dequantize(
            gguf.quants.quantize(state[f"{layer}.weight"].numpy(),
                                 gguf.GGMLQuantizationType.Q8_0),
            gguf.GGMLQuantizationType.Q8_0)
        up = lora[f"diffusion_model.{layer}.lora_B.weight"]
        down = lora[f"diffusion_model.{layer}.lora_A.weight"]
        merged = (stored + np.float32(strength) * (up @ down)).astype(np.float32)
        expect = gguf.quants.quantize(merged, gguf.GGMLQuantizationType.Q8_0)
        # ours, back to GGUF's [out, in] row blocks: quants and float16 scales
        quants = np.asarray(kernel.data).T.reshape(merged.shape[0], -1, 32)
        scales = np.asarray(kernel.scale).T.reshape(merged.shape[0], -1, 1)
        ours = np.concatenate([scales.astype(np.float16).view(np.uint8),
                               quants.astype(np.int8).view(np.uint8)], axis=-1)
        np.testing.assert_array_equal(ours.reshape(expect.shape), expect, err_msg=layer)
    out = np.asarray(_run_vidax(model, **inputs))
    ref = np.asarray(_run_vidax(vidax.load("wan2_1", "dit", path, config=cfg,
                                           loras=[(lora_path, strength)]), **inputs))
    compare("q8_0_requantization_cost", out, ref, record_property)
