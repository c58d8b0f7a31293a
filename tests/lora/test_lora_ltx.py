"""LoRAs on the LTX DiTs against their oracles' own LoRA code.

LTX-2.x (``ltx2_5``, the authors' ``LTXModel`` names): ltx-core 1.0.0 reads a LoRA file with
``loader/sft_loader.py`` ``SafetensorsStateDictLoader`` and the ``diffusion_model.`` prefix
stripped (``loader/sd_ops.py`` ``LTXV_LORA_COMFY_RENAMING_MAP``, what ``ltx_pipelines`` passes
for ``--lora``), then ``loader/fuse_loras.py`` ``apply_loras`` adds ``(B * strength) @ A`` per
``<module>.weight`` (``_prepare_deltas``: PEFT ``lora_A`` / ``lora_B`` only, no alpha, no bias
deltas). ``apply_loras`` fuses only into bfloat16 or fp8 weights (``_fuse_deltas`` raises on
float32), so the float32 oracle takes ltx-core's own delta (``_prepare_deltas``, from the
state dict its loader read) and adds it to the float32 weight, as ``_fuse_delta_with_bfloat16``
does. The model is the tiny 2.3 structure of ``tests/models/ltx2_5/test_ltx2_dit.py`` (its
reference builder, inputs and forwards), the forward audio + video; the LoRA covers every
Linear of ``LTXModel`` (blocks, AV cross-attention, AdaLN embedders, projections).

fp8: ltx-core fuses a LoRA into a scaled fp8 weight (``_fuse_delta_with_scaled_fp8``) by
dequantizing (``weight.t().float() * weight_scale``, the weight held [in, out] for cuBLAS),
adding the delta (computed in float32, rounded to bfloat16 first: ``deltas_dtype``), and
re-quantizing under a *new* per-tensor scale ``max|w| / 448``
(``quantization/fp8_scaled_mm.py`` ``quantize_weight_to_fp8_per_tensor``). vidax's merge into
an fp8 base (``vidax.lora.requantized``) is checked against that on the weights themselves.

LTX-Video 0.9.8 (``ltx_video``): diffusers 0.42.1 ``LTXVideoLoraLoaderMixin.lora_state_dict``
(``_convert_non_diffusers_ltxv_lora_to_diffusers``: ``diffusion_model.`` -> ``transformer.``,
no renaming) + ``LTXVideoTransformer3DModel.load_lora_adapter`` + ``fuse_lora``, on a diffusers
model holding the weights of the tiny release file of ``tests/models/ltx_video/`` (converted by
diffusers' own ``convert_ltx_transformer_checkpoint_to_diffusers``; its forward equals the
authors' to the bit here). Since diffusers does not rename the authors' module names in a
LoRA (``patchify_proj``, ``adaln_single`` are ``proj_in`` / ``time_embed`` in its model), the
LoRA covers the modules both name alike: every block Linear, the caption projection, proj_out.

Every LoRA: random A and B (rank 4), the effect on the output asserted >= 100x the bound;
bound 1e-4 x std(reference), float32, "highest". Negative control: the same LoRA with the
factors of attn1's to_q and to_k exchanged in every block (same shapes) must fail.
"""

from __future__ import annotations

import copy
import functools

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
import vidax.lora
from tests.models.ltx2_5 import test_ltx2_dit as ltx2
from tests.models.ltx_video import test_ltx_video as ltxv
from tests.parity import REL_TOL, assert_fails, assert_parity
from vidax.translator.lora import read_lora

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = [pytest.mark.filterwarnings("ignore:torch.meshgrid:UserWarning"),
              pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")]
RANK, STRENGTH = 4, 0.7
STRUCTURE = "2.3"


def make_lora(state: dict, seed: int, keep=lambda module: True, *,
              prefix: str = "diffusion_model.") -> dict:
    """Random PEFT factors (``lora_A`` [rank, in], ``lora_B`` [out, rank]) on every 2-D
    ``.weight`` of ``state`` whose module ``keep`` accepts."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = {}
    for key, value in sorted(state.items()):
        module = key.removesuffix(".weight")
        if not (key.endswith(".weight") and value.ndim == 2 and keep(module)):
            continue
        rows, cols = value.shape
        out[f"{prefix}{module}.lora_A.weight"] = torch.randn(RANK, cols, generator=g) * 0.2
        out[f"{prefix}{module}.lora_B.weight"] = torch.randn(rows, RANK, generator=g) * 0.2
    return out


def swapped_q_k(lora: dict) -> dict:
    """The negative control: attn1's to_q and to_k factors exchanged in every block."""
    out = dict(lora)
    for key in lora:
        if ".attn1.to_q." in key:
            other = key.replace(".attn1.to_q.", ".attn1.to_k.")
            out[key], out[other] = lora[other], lora[key]
    return out


def _effect(ref, base) -> float:
    return float(np.abs(np.asarray(ref) - np.asarray(base)).max() / np.asarray(ref).std())


# One jit per model structure, keyed on the graph and the arrays' shapes (not on the model
# object, which apply / set_strengths change in place): the base, merged, strength-0 and
# swapped models share one compile, the live ones another.
@functools.partial(jax.jit, static_argnames=("graphdef", "family"))
def _forward(graphdef, state, x, family):
    model = nnx.merge(graphdef, state)
    if family == "ltx2_5":
        return ltx2._run.__wrapped__(model, x, False)
    return ltxv._run_dit.__wrapped__(model, x["latents"], x["timestep"], x["context"],
                                     x["context_mask"], None, None)


def _run(model, x, family) -> list[np.ndarray]:
    graphdef, state = nnx.split(model)
    # committed, as merged parameters are (vidax.load's are not: jit would compile twice)
    state = jax.device_put(state, jax.devices()[0])
    out = _forward(graphdef, state, x, family)
    return [np.asarray(o) for o in out] if family == "ltx2_5" else [np.asarray(out)]


def _save(tensors: dict, path) -> str:
    import safetensors.torch

    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return str(path)


# ============================================================================ LTX-2 (ltx-core)
def _ltx_core_fused(model, lora_path: str, strength: float):
    """A copy of ``model`` with the LoRA fused by ltx-core's own reading and delta."""
    import torch
    from ltx_core.loader.fuse_loras import _prepare_deltas
    from ltx_core.loader.primitives import LoraStateDictWithStrength
    from ltx_core.loader.sd_ops import LTXV_LORA_COMFY_RENAMING_MAP
    from ltx_core.loader.sft_loader import SafetensorsStateDictLoader

    lsd = SafetensorsStateDictLoader().load(lora_path, sd_ops=LTXV_LORA_COMFY_RENAMING_MAP,
                                            device=torch.device("cpu"))
    loras = [LoraStateDictWithStrength(lsd, strength)]
    fused, count = copy.deepcopy(model), 0
    with torch.no_grad():
        for name, p in fused.named_parameters():
            delta = _prepare_deltas(loras, name, torch.float32, torch.device("cpu"))
            if delta is not None:
                p.add_(delta)
                count += 1
    assert 2 * count == len(lsd.sd), (count, len(lsd.sd))   # every factor pair was used
    return fused


@pytest.fixture(scope="module")
def ltx2_case(tmp_path_factory):
    refs = ltx2._reference(STRUCTURE)
    root = tmp_path_factory.mktemp("ltx2_lora")
    path = ltx2._write(root / "ltx-2-tiny.safetensors", *refs, ltx2.STRUCTURES[STRUCTURE])
    lora = make_lora(refs[0].state_dict(), seed=5)
    files = {"ltx2_lora": _save(lora, root / "ltx2_lora.safetensors"),
             "swapped": _save(swapped_q_k(lora), root / "swapped.safetensors")}
    x = ltx2._inputs(STRUCTURE, seed=3)
    base = ltx2._reference_forward(refs[0], x, video_only=False)
    fused = _ltx_core_fused(refs[0], files["ltx2_lora"], STRENGTH)
    ref = ltx2._reference_forward(fused, x, video_only=False)
    return path, files, x, base, ref


def _ltx2_vidax(case, name, strength, mode="merge"):
    path, files, x = case[:3]
    model = vidax.load("ltx2_5", "dit", path)
    applied = vidax.lora.apply(model, "ltx2_5", "dit", [(files[name], strength)], mode=mode)
    return model, applied, _run(model, x, "ltx2_5")


def test_ltx2_merged_matches_ltx_core(ltx2_case, record_property):
    _, files, _, base, ref = ltx2_case
    _, applied, merged = _ltx2_vidax(ltx2_case, "ltx2_lora", STRENGTH)
    assert applied.changed == len(read_lora(files["ltx2_lora"]).modules) == 96
    for i, stream in enumerate(("video", "audio")):
        assert _effect(ref[i], base[i]) > 100 * REL_TOL
        assert_parity(f"ltx2 lora merged {stream}", merged[i], ref[i], record_property)


def test_ltx2_live_matches_ltx_core_and_merged(ltx2_case, record_property):
    """Live adapters (their own compile); strength 0 then gives the base model's output
    without a new compile."""
    path, _, x, _, ref = ltx2_case
    model, _, live = _ltx2_vidax(ltx2_case, "ltx2_lora", STRENGTH, mode="live")
    merged = _ltx2_vidax(ltx2_case, "ltx2_lora", STRENGTH)[2]
    compiled = _forward._cache_size()
    for i, stream in enumerate(("video", "audio")):
        assert_parity(f"ltx2 lora live {stream}", live[i], ref[i], record_property)
        assert_parity(f"ltx2 lora live vs merged {stream}", live[i], merged[i], record_property)
    vidax.lora.set_strengths(model, {"ltx2_lora": 0.0})
    zero = _run(model, x, "ltx2_5")
    plain = _run(vidax.load("ltx2_5", "dit", path), x, "ltx2_5")
    assert _forward._cache_size() == compiled     # a strength is data, not a constant
    for i in range(2):
        np.testing.assert_array_equal(zero[i], plain[i])


def test_ltx2_strength_zero_is_the_base_and_swapped_factors_fail(ltx2_case, record_property):
    path, _, x, base, ref = ltx2_case
    plain = _run(vidax.load("ltx2_5", "dit", path), x, "ltx2_5")
    _, _, zero = _ltx2_vidax(ltx2_case, "ltx2_lora", 0.0)
    _, _, bad = _ltx2_vidax(ltx2_case, "swapped", STRENGTH)
    for i, stream in enumerate(("video", "audio")):
        np.testing.assert_array_equal(zero[i], plain[i])
        assert_parity(f"ltx2 base {stream}", plain[i], base[i], record_property)
        assert_fails(f"ltx2 lora swapped q/k {stream}", bad[i], ref[i], record_property)


# ============================================================================ LTX-Video (diffusers)
LTXV_KEEP = ("transformer_blocks.", "caption_projection.", "proj_out")


def _diffusers_ltxv(state: dict):
    """diffusers' LTXVideoTransformer3DModel at the tiny config with the release file's DiT
    weights, converted by diffusers' own single-file converter."""
    from diffusers import LTXVideoTransformer3DModel
    from diffusers.loaders.single_file_utils import convert_ltx_transformer_checkpoint_to_diffusers

    cfg = ltxv.DIT_CONFIG
    model = LTXVideoTransformer3DModel(
        in_channels=cfg["in_channels"], out_channels=cfg["out_channels"],
        num_attention_heads=cfg["num_attention_heads"],
        attention_head_dim=cfg["attention_head_dim"],
        cross_attention_dim=cfg["cross_attention_dim"], num_layers=cfg["num_layers"],
        caption_channels=cfg["caption_channels"], qk_norm="rms_norm_across_heads")
    model.load_state_dict(convert_ltx_transformer_checkpoint_to_diffusers(dict(state)),
                          strict=True)
    return model.eval()


def _diffusers_ltxv_forward(model, vae, x) -> np.ndarray:
    """diffusers' forward with the authors' pipeline positions (``video_coords``) and the
    timestep in its 0..1000 units."""
    import torch

    coords = ltxv.ref.pixel_coords(ltxv.FRAMES, ltxv.HEIGHT, ltxv.WIDTH, ltxv.BATCH, vae,
                                   causal_fix=True).float()
    coords[:, 0] = coords[:, 0] * (1.0 / ltxv.FRAME_RATE)
    t = torch.from_numpy
    with torch.no_grad():
        out = model(t(x["latents"]).reshape(ltxv.BATCH, -1, 16), t(x["context"]),
                    t(x["timestep"]) * 1000, t(x["context_mask"]), video_coords=coords,
                    return_dict=False)[0]
    return out.reshape(x["latents"].shape).numpy()


@pytest.fixture(scope="module")
def ltxv_case(tmp_path_factory):
    import torch

    from diffusers.loaders import LTXVideoLoraLoaderMixin

    gen = torch.Generator().manual_seed(0)
    dit = ltxv.ref.Transformer3DModel.from_config(copy.deepcopy(ltxv.DIT_CONFIG))
    vae = ltxv.ref.CausalVideoAutoencoder.from_config(copy.deepcopy(ltxv.VAE_CONFIG))
    ltxv._randomize(dit.named_parameters(), gen)
    ltxv._randomize(vae.named_parameters(), gen)
    statistics = {name: torch.randn(16, generator=gen) for name in ltxv.ref.STATISTICS}
    root = tmp_path_factory.mktemp("ltxv_lora")
    path = ltxv.ref.write_release_file(root / "ltxv-tiny-0.9.8.safetensors", dit,
                                       ltxv.DIT_CONFIG, vae, ltxv.VAE_CONFIG, statistics)
    dit.eval()
    state = {ltxv.ref.DIT_PREFIX + k: v.detach().clone() for k, v in dit.state_dict().items()}
    lora = make_lora(dit.state_dict(), seed=7, keep=lambda m: m.startswith(LTXV_KEEP))
    files = {"authors": _save(lora, root / "authors.safetensors"),
             "swapped": _save(swapped_q_k(lora), root / "swapped.safetensors")}
    converted = LTXVideoLoraLoaderMixin.lora_state_dict(files["authors"])
    files["diffusers"] = _save(converted, root / "diffusers.safetensors")
    x = ltxv._dit_inputs(1, per_token=True)
    model = _diffusers_ltxv(state)
    base = _diffusers_ltxv_forward(model, vae, x)
    authors = ltxv._dit_reference(dit, vae, x, None, None)
    np.testing.assert_array_equal(base, authors)       # diffusers' model is the authors'
    model.load_lora_adapter(converted, prefix="transformer", adapter_name="authors")
    model.set_adapters(["authors"], weights=[STRENGTH])
    model.fuse_lora(adapter_names=["authors"])
    model.unload_lora()
    ref = _diffusers_ltxv_forward(model, vae, x)
    return path, files, x, base, ref


def _ltxv_vidax(case, name, strength, mode="merge"):
    path, files, x = case[:3]
    model = vidax.load("ltx_video", "dit", path)
    vidax.lora.apply(model, "ltx_video", "dit", [(files[name], strength)], mode=mode)
    return model, _run(model, x, "ltx_video")[0]


@pytest.mark.parametrize("form", ["authors", "diffusers"])
def test_ltxv_merged_matches_diffusers(ltxv_case, form, record_property):
    _, _, _, base, ref = ltxv_case
    assert _effect(ref, base) > 100 * REL_TOL
    assert_parity(f"ltxv lora merged {form}", _ltxv_vidax(ltxv_case, form, STRENGTH)[1], ref,
                  record_property)


def test_ltxv_live_strength_zero_and_negative_control(ltxv_case, record_property):
    path, _, x, base, ref = ltxv_case
    model, live = _ltxv_vidax(ltxv_case, "authors", STRENGTH, mode="live")
    assert_parity("ltxv lora live", live, ref, record_property)
    vidax.lora.set_strengths(model, {"authors": 0.0})
    plain = _run(vidax.load("ltx_video", "dit", path), x, "ltx_video")[0]
    np.testing.assert_array_equal(_run(model, x, "ltx_video")[0], plain)
    np.testing.assert_array_equal(_ltxv_vidax(ltxv_case, "authors", 0.0)[1], plain)
    assert_parity("ltxv base", plain, base, record_property)
    assert_fails("ltxv lora swapped q/k", _ltxv_vidax(ltxv_case, "swapped", STRENGTH)[1], ref,
                 record_property)


# ============================================================================ LTX-2 fp8 (ltx-core)
def _vidax_name(layer: str) -> str:
    """vidax's parameter for an ``LTXModel`` Linear (the ltx2_5 mapper's renames)."""
    return (layer.replace("to_out.0", "to_out").replace("ff.net.0.proj", "ff.proj_in")
            .replace("ff.net.2", "ff.proj_out") + ".kernel")


def _params(model) -> dict:
    return {".".join(map(str, path)): var.get_value() for path, var in nnx.iter_graph(model)
            if isinstance(var, nnx.Param)}


def test_ltx2_merge_into_fp8_matches_ltx_core(tmp_path):
    """vidax's merge into an fp8 base (``vidax.load`` keeps the scaled fp8 weights as QArrays)
    against ltx-core's ``apply_loras`` on the same scaled fp8 state dict (weights [in, out]
    as ``FP8_TRANSPOSE_SD_OPS`` holds them, ``weight_scale`` beside): both dequantize, add the
    delta and re-quantize under a new per-tensor scale. ltx-core rounds the delta to bfloat16
    first; the factors here are multiples of 1/4 (rank 4, strength 0.5), so the delta is exact
    in bfloat16 and float32 alike and the two results must agree: the scales to one
    float32 step, the codes bit for bit where the scales are equal (else at most one code
    apart, on < 1% of a weight: values on a rounding boundary). Negative control:
    re-quantizing under the base's old scale changes the codes."""
    import json

    import ml_dtypes
    import safetensors.torch
    import torch
    from ltx_core.loader.fuse_loras import apply_loras
    from ltx_core.loader.primitives import LoraStateDictWithStrength, StateDict
    from ltx_core.loader.sd_ops import LTXV_LORA_COMFY_RENAMING_MAP
    from ltx_core.loader.sft_loader import SafetensorsStateDictLoader

    from tests.translator import fp8_fixtures as fx
    from vidax.nn.quant import QArray

    refs = ltx2._reference(STRUCTURE)
    state = {k: v.detach().clone() for k, v in refs[0].state_dict().items()}
    layers = sorted(n for n, m in refs[0].named_modules()
                    if isinstance(m, torch.nn.Linear) and n.startswith("transformer_blocks."))
    q = fx.ltx_quantize(state, layers)
    tensors = {ltx2.PREFIX + k: v for k, v in q.stored.items()}
    for layer, scale in q.scales.items():
        tensors[f"{ltx2.PREFIX}{layer}.weight_scale"] = scale
        tensors[f"{ltx2.PREFIX}{layer}.input_scale"] = torch.tensor(0.02)
    for name, connector in (("video", refs[1]), ("audio", refs[2])):
        tensors.update({f"{ltx2.PREFIX}{name}_embeddings_connector.{k}": v
                        for k, v in connector.state_dict().items()})
    path = tmp_path / "ltx-2-tiny-fp8.safetensors"
    safetensors.torch.save_file(
        {k: v.detach().contiguous().clone() for k, v in tensors.items()}, str(path),
        metadata={"config": json.dumps({"transformer": ltx2.STRUCTURES[STRUCTURE]})})
    # factors in {+-1/4, +-1/2}: every product entry is a multiple of 1/32 below 1 in size
    lora = {k: torch.where(v > 0, 0.25, -0.25) * (1 + (v.abs() > 0.15))
            for k, v in make_lora({f"{n}.weight": state[f"{n}.weight"] for n in layers},
                                  seed=9).items()}
    lora_path = _save(lora, tmp_path / "fp8_lora.safetensors")

    held = {}
    for layer in layers:
        held[f"{layer}.weight"] = q.stored[f"{layer}.weight"].t()      # cuBLAS layout
        held[f"{layer}.weight_scale"] = q.scales[layer]
    lsd = SafetensorsStateDictLoader().load(lora_path, sd_ops=LTXV_LORA_COMFY_RENAMING_MAP,
                                            device=torch.device("cpu"))
    fused = apply_loras(StateDict(held, torch.device("cpu"), 0, set()),
                        [LoraStateDictWithStrength(lsd, 0.5)]).sd

    model = vidax.load("ltx2_5", "dit", path)
    old = {n: float(_params(model)[_vidax_name(n)].scale) for n in layers}   # donated below
    vidax.lora.apply(model, "ltx2_5", "dit", [(lora_path, 0.5)])
    changed_codes, new_scales, boundary, merged_params = 0, 0, 0, _params(model)
    for layer in layers:
        value = merged_params[_vidax_name(layer)]
        assert isinstance(value, QArray)
        ref = fused[f"{layer}.weight"]
        assert ref.dtype == torch.float8_e4m3fn
        ref_codes = ref.contiguous().view(torch.uint8).numpy()
        codes = np.asarray(value.data).view(np.uint8)
        # the same formula; vidax's 1 / (448 / amax) may land one float32 step from torch's
        # reciprocal, and then a value on an fp8 rounding boundary one code away
        ref_scale = float(fused[f"{layer}.weight_scale"])
        np.testing.assert_allclose(float(value.scale), ref_scale, rtol=2.5e-7, atol=0,
                                   err_msg=layer)
        if float(value.scale) == ref_scale:
            np.testing.assert_array_equal(codes, ref_codes, err_msg=layer)
        else:
            off = codes != ref_codes
            assert np.abs(codes.astype(int) - ref_codes.astype(int)).max() <= 1, layer
            assert off.mean() < 0.01, (layer, off.mean())
            boundary += int(off.sum())
        new_scales += float(value.scale) != old[layer]
        # the negative control: the merged weight under the base's own scale
        merged = np.asarray(value.data).astype(np.float32) * float(value.scale)
        under_old = (merged / old[layer]).clip(-448, 448).astype(
            ml_dtypes.float8_e4m3fn).view(np.uint8)
        changed_codes += int((under_old != ref_codes).sum())
    print(f"ltx2 fp8 merge: {len(layers)} layers, {new_scales} new scales, {boundary} "
          f"codes one step off (scale one float32 step off), {changed_codes} codes differ "
          f"under the old scales")
    assert changed_codes > 0 and new_scales > len(layers) // 2, (changed_codes, new_scales)
