"""fp8 checkpoint files for ``test_fp8_formats.py``, each written in the key layout of its format
by that format's own quantizer, with the oracle's dequantized weights beside it.

Formats and their sources (details and commits: docs and ``vidax/translator/quant.py``):

* ComfyUI legacy "scaled fp8": root marker ``scaled_fp8`` (an empty tensor whose dtype is the
  fp8 kind), per quantized Linear ``<layer>.weight`` (fp8) + ``<layer>.scale_weight`` (float32,
  0-dim) + optional ``<layer>.scale_input``; value = ``weight.float() * scale_weight``
  (ComfyUI ``comfy/utils.py`` ``convert_old_quants``, ``comfy/ops.py`` ``scaled_fp8_ops``).
* ComfyUI current form: ``<layer>.weight_scale`` / ``<layer>.input_scale`` and the per-layer
  record ``<layer>.comfy_quant`` (uint8 bytes of the JSON ``{"format": ...}``), or the same
  records in the safetensors header's ``_quantization_metadata``
  (``{"format_version": "1.0", "layers": {layer: {"format": ...}}}``) (ComfyUI
  ``comfy/quant_ops.py`` ``QUANT_ALGOS``, ``comfy/ops.py`` ``_load_quantized_module``).
  Quantizer and dequantizer of both: comfy-kitchen's ``TensorCoreFP8Layout`` (per-tensor
  scale; ComfyUI's own kernels package, PyPI ``comfy-kitchen`` 0.2.40).
* HunyuanVideo 1.0's own fp8 release: ``mp_rank_00_model_states_fp8.pt`` (``{"module": sd}``,
  the Linear weights of ``double_blocks`` / ``single_blocks`` stored float8_e4m3fn) and
  ``mp_rank_00_model_states_fp8_map.pt`` (``{module name: scale}``); value =
  ``weight.to(dtype) * scale`` (Tencent-Hunyuan/HunyuanVideo @ fa14b001,
  ``hyvideo/modules/fp8_optimization.py`` ``convert_fp8_linear`` / ``fp8_linear_forward``;
  their per-tensor scale is ``max|w| / 448``). The repository has no converter, so the file is
  written with that formula.
* LTX-2 fp8: ``<layer>.weight`` float8_e4m3fn [out, in], ``<layer>.weight_scale`` and
  ``<layer>.input_scale`` 0-dim float32; quantizer ltx-core 1.0.0's
  ``quantization.fp8_scaled_mm.quantize_weight_to_fp8_per_tensor`` (which returns the weight
  transposed for cuBLAS: the file keeps ``[out, in]``), value ``weight.float() * weight_scale``
  (ltx-core ``loader/fuse_loras.py`` ``_fuse_delta_with_scaled_fp8``).

Every quantized layer's scale differs from 1 and from every other layer's (``FACTORS``), so a
scale dropped or applied twice on one layer moves the output past the parity bound.
torch is imported inside the functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

#: ComfyUI's container prefix on a diffusion model's file (comfy/model_detection.py
#: ``unet_prefix_from_state_dict``).
COMFY_PREFIX = "model.diffusion_model."
#: The largest finite float8_e4m3fn value (HunyuanVideo's ``get_fp_maxval()``).
E4M3_MAX = 448.0


@dataclass
class Quantized:
    """A state dict with some Linear weights quantized: ``stored`` (what the file holds per
    key, fp8 weights included), ``scales`` (layer -> 0-dim float32 scale), ``dequantized`` (the
    oracle's float32 value of each quantized weight, key -> tensor), ``fp8_dtype`` per layer."""

    stored: dict
    scales: dict = field(default_factory=dict)
    dequantized: dict = field(default_factory=dict)
    fp8_dtype: dict = field(default_factory=dict)

    def reference_state(self, original: dict, *, drop: str | None = None,
                        twice: str | None = None) -> dict:
        """``original`` with every quantized weight replaced by the oracle's value; for a
        negative control, layer ``drop`` without its scale or layer ``twice`` with it applied
        twice."""
        import torch

        state = {k: v.clone() for k, v in original.items()}
        for key, value in self.dequantized.items():
            layer = key[: -len(".weight")]
            if layer == drop:
                value = self.stored[key].to(torch.float32)
            elif layer == twice:
                value = value * self.scales[layer]
            state[key] = value
        return state


def factor(i: int) -> float:
    """A per-layer multiplier in (1, 2): scale = amax / fp8 max x factor, distinct per layer."""
    return 1.0 + 0.37 * ((i * 0.618034) % 1.0) + 0.01


def kitchen_quantize(weight, scale, dtype):
    """comfy-kitchen's per-tensor fp8 quantize and dequantize (its ``TensorCoreFP8Layout``):
    ``(q, scale, dequantized float32)``."""
    from comfy_kitchen.tensor import TensorCoreFP8Layout

    q, params = TensorCoreFP8Layout.quantize(weight.float(), scale=scale, dtype=dtype)
    return q, params.scale, TensorCoreFP8Layout.dequantize(q, params).float()


def comfy_quantize(state: dict, layers: list[str], *, e5m2: tuple[str, ...] = ()) -> Quantized:
    """``state`` with the ``<layer>.weight`` of each of ``layers`` quantized by comfy-kitchen
    (float8_e4m3fn, or float8_e5m2 for those in ``e5m2``), scale = amax / fp8 max x factor."""
    import torch

    out = Quantized(stored=dict(state))
    for i, layer in enumerate(layers):
        key = f"{layer}.weight"
        dtype = torch.float8_e5m2 if layer in e5m2 else torch.float8_e4m3fn
        w = state[key].float()
        scale = (w.abs().amax() / torch.finfo(dtype).max * factor(i)).to(torch.float32)
        q, scale, dq = kitchen_quantize(w, scale, dtype)
        out.stored[key], out.scales[layer], out.dequantized[key] = q, scale, dq
        out.fp8_dtype[layer] = dtype
    return out


def comfy_legacy_file(q: Quantized, *, prefix: str = COMFY_PREFIX,
                      input_scales: bool = True) -> dict:
    """The tensors of a legacy scaled-fp8 file: ``scaled_fp8`` marker (empty, e4m3fn), each
    scale as ``<layer>.scale_weight`` and, with ``input_scales``, a ``<layer>.scale_input``
    (!= 1, so it is not the converter's dropped default) on every other layer."""
    import torch

    tensors = {f"{prefix}{k}": v for k, v in q.stored.items()}
    tensors[f"{prefix}scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    for i, (layer, scale) in enumerate(q.scales.items()):
        tensors[f"{prefix}{layer}.scale_weight"] = scale.reshape(())
        if input_scales and i % 2 == 0:
            tensors[f"{prefix}{layer}.scale_input"] = torch.tensor(0.05 + 0.01 * i)
    return tensors


def comfy_record(fmt: str):
    """A ``comfy_quant`` record as ComfyUI writes it: the UTF-8 bytes of the JSON, uint8."""
    import torch

    return torch.tensor(list(json.dumps({"format": fmt}).encode("utf-8")), dtype=torch.uint8)


def comfy_current_file(q: Quantized, *, prefix: str = COMFY_PREFIX,
                       header: bool = False) -> tuple[dict, dict]:
    """``(tensors, metadata)`` of a current-form file: ``<layer>.weight_scale``, an
    ``<layer>.input_scale`` on every other layer, and the per-layer format either as
    ``<layer>.comfy_quant`` tensors or (``header``) in ``_quantization_metadata``."""
    import torch

    tensors = {f"{prefix}{k}": v for k, v in q.stored.items()}
    layers = {}
    for i, (layer, scale) in enumerate(q.scales.items()):
        fmt = str(q.fp8_dtype[layer]).removeprefix("torch.")
        tensors[f"{prefix}{layer}.weight_scale"] = scale.reshape(())
        if i % 2 == 0:
            tensors[f"{prefix}{layer}.input_scale"] = torch.tensor(0.05 + 0.01 * i)
        if header:
            layers[f"{prefix}{layer}"] = {"format": fmt}
        else:
            tensors[f"{prefix}{layer}.comfy_quant"] = comfy_record(fmt)
    metadata = ({"_quantization_metadata": json.dumps({"format_version": "1.0",
                                                       "layers": layers})} if header else {})
    return tensors, metadata


def plain_fp8(state: dict, layers: list[str]) -> Quantized:
    """``state`` with the weights of ``layers`` cast to float8_e4m3fn, no scale (the oracle:
    the cast value itself)."""
    import torch

    out = Quantized(stored=dict(state))
    for layer in layers:
        key = f"{layer}.weight"
        q = state[key].to(torch.float8_e4m3fn)
        out.stored[key], out.dequantized[key] = q, q.to(torch.float32)
        out.scales[layer] = torch.tensor(1.0)
        out.fp8_dtype[layer] = torch.float8_e4m3fn
    return out


def hunyuan_quantize(state: dict) -> Quantized:
    """HunyuanVideo's fp8: every Linear weight of ``double_blocks`` / ``single_blocks`` as
    float8_e4m3fn with scale = max|w| / 448 x factor; value ``weight.float() * scale``
    (``hyvideo/modules/fp8_optimization.py``)."""
    import torch

    out = Quantized(stored=dict(state))
    layers = [k[: -len(".weight")] for k, v in sorted(state.items())
              if k.endswith(".weight") and v.ndim == 2
              and k.startswith(("double_blocks.", "single_blocks."))]
    for i, layer in enumerate(layers):
        key = f"{layer}.weight"
        w = state[key].float()
        scale = (w.abs().amax() / E4M3_MAX * factor(i)).to(torch.float32)
        q = (w / scale).to(torch.float8_e4m3fn)
        out.stored[key], out.scales[layer] = q, scale
        out.dequantized[key] = q.to(torch.float32) * scale
        out.fp8_dtype[layer] = torch.float8_e4m3fn
    return out


def hunyuan_files(q: Quantized, folder, *, drop_from_map: str | None = None):
    """The release pair in ``folder``: ``mp_rank_00_model_states_fp8.pt`` (``{"module":
    sd}``) and ``mp_rank_00_model_states_fp8_map.pt`` (``{module name: scale}``, without
    ``drop_from_map``). Returns the weights file's path."""
    import torch

    path = folder / "mp_rank_00_model_states_fp8.pt"
    torch.save({"module": {k: v.contiguous() for k, v in q.stored.items()}}, path)
    scale_map = {k: v.clone() for k, v in q.scales.items() if k != drop_from_map}
    torch.save(scale_map, folder / "mp_rank_00_model_states_fp8_map.pt")
    return path


def ltx_quantize(state: dict, layers: list[str]) -> Quantized:
    """LTX-2 fp8 by ltx-core's ``quantize_weight_to_fp8_per_tensor`` (its weight comes back
    transposed [in, out]; the file keeps [out, in])."""
    import torch
    from ltx_core.quantization.fp8_scaled_mm import quantize_weight_to_fp8_per_tensor

    out = Quantized(stored=dict(state))
    for layer in layers:
        key = f"{layer}.weight"
        q_t, scale = quantize_weight_to_fp8_per_tensor(state[key])
        q = q_t.t().contiguous()
        out.stored[key], out.scales[layer] = q, scale.to(torch.float32).reshape(())
        # ltx-core's own dequantization (fuse_loras._fuse_delta_with_scaled_fp8) of the
        # in-memory [in, out] weight
        out.dequantized[key] = q_t.t().to(torch.float32) * scale
        out.fp8_dtype[layer] = torch.float8_e4m3fn
    return out


def check_fp8_error(q: Quantized, original: dict, dtype_rel: dict | None = None) -> dict:
    """Self-check of a fixture: every quantized weight's oracle value differs from the original
    by a plausible fp8 rounding error (nonzero, at most half an fp8 ulp of the largest value,
    relative error typical of 3 (e4m3) or 2 (e5m2) mantissa bits), and the scales are distinct
    and != 1. Returns layer -> max relative error."""
    import torch

    errors = {}
    for key, dq in q.dequantized.items():
        layer = key[: -len(".weight")]
        w = original[key].float()
        mantissa = 2 if q.fp8_dtype[layer] == torch.float8_e5m2 else 3
        err = (dq - w).abs()
        amax = w.abs().amax()
        # round to nearest: |err| <= half a step at the value's binade; steps of the largest
        # binade bound every error
        assert 0 < float(err.max()) <= float(amax) * 2.0 ** -mantissa, (key, err.max(), amax)
        big = w.abs() > amax / 8                 # normal numbers well above the subnormals
        rel = float((err[big] / w.abs()[big]).max())
        assert rel <= 2.0 ** -(mantissa + 1) * 1.0001, (key, rel)
        errors[layer] = rel
    scales = [float(s) for s in q.scales.values()]
    if any(s != 1.0 for s in scales):
        assert all(s != 1.0 for s in scales) and len(set(scales)) == len(scales), scales
    return errors
