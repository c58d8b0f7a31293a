"""The quantized forms a checkpoint file may take, recognised per file, whatever its family.

:func:`detect` looks at a file's keys, stored dtypes and header metadata (never its weights,
but for ComfyUI's few-byte ``comfy_quant`` records) and returns a :class:`Quantization`: its
form, the stored types it holds, and the mapper rules (``vidax.translator.mapping``) that
turn it into the model's weights. ``vidax.loading`` puts those rules ahead of the family's
table (``Mapper.with_rules``), so the same family mapper reads the authors' bf16 file and
every quantized copy of it, and the verification stays 1:1: each scale is consumed by its
weight, each marker and activation scale is ignored with its reason.

Forms (sources cited per rule):

* ``fp8`` -- weights stored as ``F8_E4M3`` / ``F8_E5M2`` without scales (a plain cast of
  the bf16 weights): read as they are; no rule.
* ``comfyui-scaled-fp8`` -- ComfyUI's legacy "scaled fp8": a root marker tensor
  ``scaled_fp8`` (its dtype names the fp8 kind) and per quantized Linear
  ``<layer>.scale_weight`` (float32, per tensor), optionally ``<layer>.scale_input``. The
  weight's value is ``weight.float() * scale_weight`` (ComfyUI ``comfy/utils.py``
  ``convert_old_quants``, which renames ``scale_weight`` -> ``weight_scale`` and
  ``scale_input`` -> ``input_scale``; ``comfy/quant_ops.py`` dequantizes as
  ``qdata * scale``).
* ``comfyui-quant`` -- ComfyUI's current form, which LTX-2's own fp8 files share:
  ``<layer>.weight_scale`` (and ``<layer>.input_scale``), with a per-layer record of the
  format either as ``<layer>.comfy_quant`` (the JSON of ``{"format": ...}`` stored as a
  uint8 tensor) or in the safetensors header's ``_quantization_metadata`` (JSON
  ``{"layers": {layer: {"format": ...}}}``). vidax reads the fp8 formats
  (``float8_e4m3fn``, ``float8_e5m2``); any other format (ComfyUI's nvfp4, mxfp8, int8
  block-wise, ...) is refused naming the layers.
* ``hunyuan-fp8-map`` -- HunyuanVideo's own fp8 release, ``X_fp8.pt`` with the per-tensor
  scales in ``X_fp8_map.pt``, which ``vidax.translator.io`` joins to it as
  ``<module>.fp8_map_scale`` (Tencent-Hunyuan/HunyuanVideo ``hyvideo/modules/
  fp8_optimization.py``: ``weight.to(dtype) * scale``).
* ``gguf`` -- GGUF quants (``vidax.translator.io.gguf``): the reader declares each quantized
  tensor (``TensorRef.quant``) and dequantizes it when read; no rule.

Activation scales (``input_scale`` / ``scale_input``) are ignored: vidax dequantizes the
weight and computes in the compute dtype, as ComfyUI does for fp8 weights on chips without
fp8 matmuls, so no activation is quantized.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from vidax.errors import CheckpointError
from vidax.translator.mapping import Dequantize, Ignore, Rule

#: The fp8 formats of ComfyUI's ``comfy_quant`` records vidax reads (``comfy/quant_ops.py``'s
#: layout names for per-tensor-scaled float8).
FP8_FORMATS = ("float8_e4m3fn", "float8_e5m2")

#: The root marker of ComfyUI's legacy scaled-fp8 files (``comfy/utils.py``).
SCALED_FP8_MARKER = "scaled_fp8"

#: A prefix ComfyUI's own saves put on every key of a diffusion model's file
#: (``comfy/model_detection.py`` ``unet_prefix_from_state_dict``; ``comfy/sd.py``).
CONTAINER_PREFIXES = ("model.diffusion_model.", "diffusion_model.")

_ACTIVATION = ("activation scale for quantizing the layer's input; vidax dequantizes the "
               "weight and computes in the compute dtype, so no input is quantized")


@dataclass(frozen=True)
class Quantization:
    """What :func:`detect` found: ``form`` (``None``: not quantized), ``types`` (stored
    dtype or quant type -> tensors of it, for the quantized ones), ``rules`` for the mapper,
    ``layers`` (ComfyUI's per-layer format records, layer -> format)."""

    form: str | None = None
    types: dict[str, int] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    layers: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        if self.form is None:
            return "none"
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(self.types.items()))
        return f"{self.form} ({kinds})" if kinds else self.form


def _dtype(ref) -> str:
    return str(getattr(ref, "dtype", ""))


def detect(tensors: Mapping, metadata: Mapping | None = None, *,
           source: str = "the checkpoint") -> Quantization:
    """The quantization of a file's tensors (key -> anything with ``shape``/``dtype``, and
    ``quant`` where a reader declares it; ``read_view`` where the ``comfy_quant`` records
    can be read). Raises ``CheckpointError`` naming ``source`` and the layers for a format
    vidax does not read."""
    metadata = metadata or {}
    types: dict[str, int] = {}
    for key, ref in tensors.items():
        kind = getattr(ref, "quant", None) or (_dtype(ref) if _dtype(ref).startswith(
            "float8") else None)
        if kind is not None and key != SCALED_FP8_MARKER:
            types[kind] = types.get(kind, 0) + 1
    keys = list(tensors)
    if any(getattr(tensors[k], "quant", None) for k in keys):
        return Quantization("gguf", types)
    if any(k.endswith(".fp8_map_scale") for k in keys):
        rules = (Dequantize(r"(.*)\.weight", r"\1.fp8_map_scale", "float32",
                            "hunyuan-fp8-map"),)
        return Quantization("hunyuan-fp8-map", types, rules)
    if SCALED_FP8_MARKER in tensors:
        marker = _dtype(tensors[SCALED_FP8_MARKER])
        rules = (
            Ignore(re.escape(SCALED_FP8_MARKER),
                   f"ComfyUI's scaled-fp8 marker (stored {marker}: the fp8 kind of the file)"),
            Ignore(r".*\.scale_input", _ACTIVATION),
            Dequantize(r"(.*)\.weight", r"\1.scale_weight", "float32", "comfyui-scaled-fp8"),
        )
        return Quantization("comfyui-scaled-fp8", types, rules)
    layers = _layer_formats(tensors, metadata, source)
    if layers or any(k.endswith(".weight_scale") for k in keys):
        unsupported = {layer: f for layer, f in layers.items() if f not in FP8_FORMATS}
        if unsupported:
            formats = sorted(set(unsupported.values()))
            shown = ", ".join(sorted(unsupported)[:5])
            more = f" and {len(unsupported) - 5} more" if len(unsupported) > 5 else ""
            raise CheckpointError(
                source, f"its layers {shown}{more} are quantized as {', '.join(formats)} "
                f"(ComfyUI's comfy_quant records), which vidax does not read; it reads the "
                f"per-tensor fp8 formats {', '.join(FP8_FORMATS)}. Use an fp8, GGUF or "
                "bf16 copy of this model.")
        rules = (
            Ignore(r".*\.comfy_quant", "ComfyUI's per-layer quantization record (JSON of "
                   "the layer's format), read by vidax.translator.quant"),
            Ignore(r".*\.input_scale", _ACTIVATION),
            Dequantize(r"(.*)\.weight", r"\1.weight_scale", "float32", "fp8-weight-scale"),
        )
        form = "comfyui-quant" if layers else "fp8-weight-scale"
        return Quantization(form, types, rules, layers)
    if types:
        return Quantization("fp8", types)
    return Quantization()


def _layer_formats(tensors: Mapping, metadata: Mapping, source: str) -> dict[str, str]:
    """layer -> format of ComfyUI's per-layer records: the ``<layer>.comfy_quant`` tensors
    (read: a few bytes each) and the header's ``_quantization_metadata``."""
    layers: dict[str, str] = {}
    raw = metadata.get("_quantization_metadata")
    if raw:
        try:
            entries = json.loads(raw).get("layers", {})
            layers.update({k: str(v.get("format")) for k, v in entries.items()})
        except (ValueError, AttributeError, TypeError) as e:
            raise CheckpointError(source, f"its header's _quantization_metadata is not the "
                                  f"JSON ComfyUI writes ({e})") from None
    for key, ref in tensors.items():
        if not key.endswith(".comfy_quant"):
            continue
        layer = key[: -len(".comfy_quant")]
        if not hasattr(ref, "read_view") and not isinstance(ref, np.ndarray):
            # names and shapes only (a manifest): the weight's stored dtype is its format
            weight = tensors.get(layer + ".weight")
            layers.setdefault(layer, _dtype(weight) if weight is not None else "unknown")
            continue
        if int(np.prod(ref.shape)) > 4096:
            raise CheckpointError(source, f"{key} is {int(np.prod(ref.shape))} bytes, too "
                                  "long for a comfy_quant record")
        data = ref.read_view(()) if hasattr(ref, "read_view") else ref
        try:
            record = json.loads(np.asarray(data, np.uint8).tobytes().decode("utf-8"))
            layers[layer] = str(record["format"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise CheckpointError(source, f"{key} is not the JSON record of a quantized "
                                  f"layer ComfyUI writes ({e})") from None
    return layers


# --------------------------------------------------------------------------- the container
def container_prefix(keys, markers=(SCALED_FP8_MARKER,)) -> str:
    """The ComfyUI container prefix every key of a file carries (the root markers aside),
    or ``""``."""
    keys = [k for k in keys if k not in markers]
    for prefix in CONTAINER_PREFIXES:
        if keys and all(k.startswith(prefix) for k in keys):
            return prefix
    return ""


class StrippedView(Mapping):
    """A file's tensors with a container prefix taken off every key; the root markers
    (``scaled_fp8``) keep their names. ``metadata`` is the file's."""

    def __init__(self, tensors: Mapping, prefix: str, markers=(SCALED_FP8_MARKER,)):
        self._tensors, self.prefix = tensors, prefix
        self.metadata = getattr(tensors, "metadata", {})
        self._keys = {(k[len(prefix):] if k.startswith(prefix) else k): k for k in tensors
                      if k.startswith(prefix) or k in markers}

    def __getitem__(self, key):
        return self._tensors[self._keys[key]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def unwrapped(tensors: Mapping) -> Mapping:
    """A single model's file without its ComfyUI container prefix (the tensors as they are
    where it has none)."""
    prefix = container_prefix(tensors)
    return StrippedView(tensors, prefix) if prefix else tensors


def weights_only(view: Mapping, found: Quantization) -> dict:
    """The tensors of an :func:`unwrapped` file as the release they were quantized from
    would hold them: the quantization's own tensors (scales, markers, records, which its
    rules consume or ignore) left out. What ``vidax inspect`` identifies a quantized or
    repackaged file by."""
    ignored = [r.pattern for r in found.rules if isinstance(r, Ignore)]
    scales = set()
    for rule in (r for r in found.rules if isinstance(r, Dequantize)):
        for key in view:
            m = re.fullmatch(rule.pattern, key)
            if m is not None and m.expand(rule.scale) in view:
                scales.add(m.expand(rule.scale))
    return {k: view[k] for k in view
            if k not in scales and not any(re.fullmatch(p, k) for p in ignored)}
