"""LoRAs on the HunyuanVideo 1.0 and HunyuanVideo-1.5 DiTs against diffusers' LoRA loading.

HunyuanVideo 1.0 (tiny model and reference of tests/models/hunyuan_video/test_hunyuan_video_dit.py:
one random authors'-layout state dict, loaded by vidax from the file and by diffusers'
``HunyuanVideoTransformer3DModel`` through diffusers' own converter):

* oracle for the authors' LoRA form (``diffusion_model.<authors' module>.lora_A/B.weight``):
  diffusers 0.42.1 ``HunyuanVideoLoraLoaderMixin.lora_state_dict`` -- its own
  ``_convert_hunyuan_video_lora_to_diffusers`` (lora_conversion_utils.py), which splits the
  fused ``img_attn_qkv`` / ``txt_attn_qkv`` up factors in thirds and the single blocks'
  ``linear1`` up factor into q / k / v / MLP rows, the down factor shared -- then
  ``load_lora_adapter(prefix="transformer")`` + ``fuse_lora(lora_scale=S)``. That converter
  hard-codes the release width 3072 for ``linear1``; as in the DiT test, the same code object
  runs with that one constant replaced by the tiny width (the DiT test's ``with_width``).
  Left out of this LoRA: the token refiner's ``self_attn_qkv`` and
  ``final_layer.adaLN_modulation.1``, where that converter chunks the *down* factor too
  (``remap_txt_in_`` / ``remap_norm_scale_shift_`` apply to ``lora_A`` as to ``lora_B``),
  which cannot be right for rank 4; and alpha and ``diff_b``, which it does not read.
* the forms diffusers does not convert (musubi/kohya ``lora_unet_*`` with ``alpha``; ComfyUI's
  own names, layout ``comfyui``, with ``diff_b``), covering also the refiner ``self_attn_qkv``
  and the final modulation: reference = the DiT test's reference path (diffusers' converter +
  model) fed the authors'-layout weights ``W + S * alpha / rank * up @ down`` (``b + S * diff_b``).

HunyuanVideo-1.5 (tests/models/hunyuan_video1_5/test_hunyuan_video1_5_dit.py): diffusers has no
LoRA conversion for it and its checkpoint conversion is a script outside the PyPI package; the
family test carries that script's conversion as data (``to_diffusers``). The diffusers names of
the LoRA come from that same function, run over each module's row indices
(``arange(out)`` named as the module's weight): it yields the diffusers module(s) and which
rows of the up factor each takes (the refiner ``self_attn_qkv`` chunked in 3, the final
modulation's halves swapped); the down factor goes whole to each. Oracle: diffusers'
``HunyuanVideo15Transformer3DModel.load_lora_adapter`` + ``fuse_lora``.

Both: rank 4 on every Linear of the blocks (and the embedders), strength 0.7; vidax merged and
live against the oracle, bound 1e-4 x std(reference), the LoRA's effect asserted >= 100x the
bound; live equals merged; at strength 0 merging leaves every weight bit-identical to the plain
load, and live gives exactly that model's output. Negative controls: the q and k thirds of one
fused ``img_attn_qkv`` up factor swapped (1.0), the LoRA's strength taken as 1 (1.5).
"""

from __future__ import annotations

from unittest import mock

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
import vidax.lora
from tests.models.hunyuan_video import test_hunyuan_video_dit as hv
from tests.models.hunyuan_video1_5 import test_hunyuan_video1_5_dit as hv15
from tests.parity import REL_TOL, assert_fails, assert_parity, randomize
from tests.translator.test_comfyui_hunyuan import comfy_name

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")
RANK, ALPHA, STRENGTH = 4, 8.0, 0.7
#: where diffusers' 1.0 LoRA converter chunks the down factor as well (see the module doc)
NOT_DIFFUSERS = ("txt_in.individual_token_refiner.blocks.0.self_attn_qkv",
                 "txt_in.individual_token_refiner.blocks.1.self_attn_qkv",
                 "final_layer.adaLN_modulation.1")


def _linears(state: dict) -> list[str]:
    """The Linear modules (2-D weights) of an authors'-layout state dict."""
    return sorted(k.removesuffix(".weight") for k, v in state.items()
                  if k.endswith(".weight") and v.ndim == 2 and "cond_type" not in k)


def _factors(state: dict, modules, seed: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    out = {}
    for m in modules:
        n_out, n_in = state[f"{m}.weight"].shape
        out[m] = (torch.randn(RANK, n_in, generator=g) * 0.2,
                  torch.randn(n_out, RANK, generator=g) * 0.2,
                  torch.randn(n_out, generator=g) * 0.1)
    return out


def _merged_state(state: dict, factors: dict, *, scale: float, diff_b=()) -> dict:
    """The authors'-layout weights with the LoRA folded in: ``W + S * scale * up @ down``."""
    out = dict(state)
    for m, (down, up, bias) in factors.items():
        out[f"{m}.weight"] = state[f"{m}.weight"] + STRENGTH * scale * (up @ down)
        if m in diff_b:
            out[f"{m}.bias"] = state[f"{m}.bias"] + STRENGTH * bias
    return out


def _save(tensors: dict, path):
    import safetensors.torch

    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, path)
    return path


def _committed(model):
    """``model`` with every parameter committed to the device: ``vidax.load`` leaves them
    uncommitted and ``lora.apply`` / ``set_strengths`` commit the ones they change, a
    difference jit keys on (each LoRA covering other parameters, and the first
    ``set_strengths``, would recompile the model)."""
    nnx.update(model, jax.device_put(nnx.state(model), jax.devices()[0]))
    return model


def _fused(model, sd: dict, forward, inputs, scale=STRENGTH):
    model.load_lora_adapter(sd, prefix="transformer", adapter_name="lora")
    model.fuse_lora(lora_scale=scale)
    return forward(model, inputs)


def _vidax_pair(load, run, model_type, lora):
    """vidax merged and live outputs. Strength 0 is checked too: merged at 0, every weight
    equals the plain load's exactly; live at 0, the output equals merged-at-0's exactly."""
    plain = load()
    zero = load()
    vidax.lora.apply(zero, model_type, "dit", [f"{lora}:0"])
    for a, b in zip(jax.tree.leaves(nnx.state(plain)), jax.tree.leaves(nnx.state(zero))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    out_zero = run(zero)
    merged = load()
    vidax.lora.apply(merged, model_type, "dit", [f"{lora}:{STRENGTH}"])
    out_merged = run(merged)
    live = load()
    vidax.lora.apply(live, model_type, "dit", [f"{lora}:{STRENGTH}"], mode="live")
    out_live = run(live)
    vidax.lora.set_strengths(live, {lora.stem: 0.0})
    np.testing.assert_array_equal(run(live), out_zero)
    return out_merged, out_live


def _effect(ref, base, name):
    effect = float(np.abs(ref - base).max())
    bound = REL_TOL * float(ref.std())
    print(f"{name}: LoRA effect max|ref - base| {effect:.3e} = {effect / bound:.0f} x bound")
    assert effect >= 100 * bound, (effect, bound)


# ----------------------------------------------------------------------------- HunyuanVideo 1.0
@pytest.fixture(scope="module")
def hv10(tmp_path_factory):
    import torch
    from diffusers.loaders import lora_pipeline

    cfg = hv.HunyuanVideoDiTConfig.tiny()
    state = hv.authors_state(cfg)
    randomize(state.items(), seed=0)
    root = tmp_path_factory.mktemp("hunyuan_lora")
    path = hv._save(state, root / "mp_rank_00_model_states.pt")
    # guidance x 1000 of 60 / 35, not the DiT test's 6000: there torch's float32 exp, one ulp
    # off in 2 frequencies (see the DiT test), leaves 4.5e-5 x std, which the LoRA on
    # guidance_in amplifies to 8e-5 x std, too close to the bound
    inputs = dict(hv._inputs(cfg, seed=1), guidance=np.asarray((60.0, 35.0), np.float32))
    modules = _linears(state)
    factors = _factors(state, modules, seed=3)

    # the authors' form, read by diffusers
    authors = {}
    for m in modules:
        if m not in NOT_DIFFUSERS:
            down, up, _ = factors[m]
            authors[f"diffusion_model.{m}.lora_A.weight"] = down
            authors[f"diffusion_model.{m}.lora_B.weight"] = up
    lora = _save(authors, root / "hv_authors.safetensors")
    bad = dict(authors)
    key = "diffusion_model.double_blocks.1.img_attn_qkv.lora_B.weight"
    q, k, v = authors[key].split(cfg.hidden_size)
    bad[key] = torch.cat([k, q, v])
    bad_lora = _save(bad, root / "hv_swapped.safetensors")
    converter = hv.with_width(lora_pipeline._convert_hunyuan_video_lora_to_diffusers,
                            cfg.hidden_size)
    with mock.patch.object(lora_pipeline, "_convert_hunyuan_video_lora_to_diffusers", converter):
        sd = lora_pipeline.HunyuanVideoLoraLoaderMixin.lora_state_dict(str(lora))
    assert len(sd) == len(authors) + 2 * (4 * cfg.mm_double_blocks_depth
                                          + 3 * cfg.mm_single_blocks_depth), len(sd)
    model = hv.diffusers_model(cfg, state)
    base = hv._diffusers_output(model, inputs)
    ref = _fused(model, sd, hv._diffusers_output, inputs)

    # the forms diffusers does not read: musubi/kohya (alpha) and ComfyUI's names (diff_b)
    diff_b = [m for m in modules if m.startswith(("double_blocks.0.", "single_blocks.0."))]
    musubi, comfy = {}, {}
    for m, (down, up, bias) in factors.items():
        name = "lora_unet_" + m.replace(".", "_")
        musubi.update({f"{name}.lora_down.weight": down, f"{name}.lora_up.weight": up,
                       f"{name}.alpha": torch.tensor(ALPHA)})
        name = comfy_name(f"{m}.weight", prefix="diffusion_model.").removesuffix(".weight")
        comfy.update({f"{name}.lora_down.weight": down, f"{name}.lora_up.weight": up,
                      f"{name}.alpha": torch.tensor(ALPHA)})
        if m in diff_b:
            comfy[f"{name}.diff_b"] = bias
    merged_musubi = _merged_state(state, factors, scale=ALPHA / RANK)
    merged_comfy = _merged_state(state, factors, scale=ALPHA / RANK, diff_b=diff_b)
    refs = {"musubi": hv._diffusers_output(hv.diffusers_model(cfg, merged_musubi), inputs),
            "comfyui": hv._diffusers_output(hv.diffusers_model(cfg, merged_comfy), inputs)}
    files = {"musubi": _save(musubi, root / "hv_musubi.safetensors"),
             "comfyui": _save(comfy, root / "hv_comfy.safetensors")}

    def load():
        return _committed(vidax.load("hunyuan_video", "dit", path, config=cfg))

    def run(m):
        return np.asarray(hv._run_vidax(m, **inputs))

    return dict(cfg=cfg, load=load, run=run, base=base, ref=ref, lora=lora,
                bad_lora=bad_lora, refs=refs, files=files)


def _matches(c, model_type: str, name: str, record_property) -> None:
    """Merged and live against the reference, and against each other."""
    _effect(c["ref"], c["base"], name)
    merged, live = _vidax_pair(c["load"], c["run"], model_type, c["lora"])
    assert_parity(f"{name}_merged", merged, c["ref"], record_property)
    assert_parity(f"{name}_live", live, c["ref"], record_property)
    assert_parity(f"{name}_live_vs_merged", live, merged, record_property)


def test_hunyuan_video_lora_matches_diffusers(hv10, record_property):
    _matches(hv10, "hunyuan_video", "hv_lora", record_property)


def test_hunyuan_video_lora_negative_control(hv10, record_property):
    """The q and k thirds of one fused ``img_attn_qkv`` up factor swapped must fail."""
    c = hv10
    model = c["load"]()
    vidax.lora.apply(model, "hunyuan_video", "dit", [f"{c['bad_lora']}:{STRENGTH}"])
    assert_fails("hv_lora_negative", c["run"](model), c["ref"], record_property)


@pytest.mark.parametrize("form", ["musubi", "comfyui"])
def test_hunyuan_video_lora_other_forms(hv10, form, record_property):
    """musubi/kohya names with alpha, ComfyUI's names with alpha and diff_b: against the
    reference path fed the weights with the LoRA folded in (diffusers reads neither)."""
    c = hv10
    ref = c["refs"][form]
    _effect(ref, c["base"], f"hv_lora_{form}")
    model = c["load"]()
    vidax.lora.apply(model, "hunyuan_video", "dit", [f"{c['files'][form]}:{STRENGTH}"])
    assert_parity(f"hv_lora_{form}", c["run"](model), ref, record_property)


# ----------------------------------------------------------------------------- HunyuanVideo-1.5
def _diffusers_names(m: str, n_out: int) -> dict[str, np.ndarray]:
    """diffusers' module(s) for the authors' Linear ``m`` and the rows of ``m``'s weight each
    takes, by the family test's diffusers conversion run over the row indices."""
    import torch

    rows = hv15.to_diffusers({f"{m}.weight": torch.arange(n_out, dtype=torch.float64)})
    return {k.removesuffix(".weight"): v.numpy().astype(np.int64) for k, v in rows.items()}


@pytest.fixture(scope="module")
def hy15(tmp_path_factory):
    cfg = hv15.HunyuanVideo15DiTConfig.tiny()
    root = tmp_path_factory.mktemp("hy15_lora")
    state, path, model = hv15._case(cfg, root / "base", seed=0)
    inputs = hv15._inputs(cfg, seed=1, i2v=True)
    modules = _linears(state)
    factors = _factors(state, modules, seed=4)
    authors, sd = {}, {}
    for m, (down, up, _) in factors.items():
        authors[f"diffusion_model.{m}.lora_A.weight"] = down
        authors[f"diffusion_model.{m}.lora_B.weight"] = up
        for name, rows in _diffusers_names(m, up.shape[0]).items():
            sd[f"transformer.{name}.lora_A.weight"] = down.clone()
            sd[f"transformer.{name}.lora_B.weight"] = up[rows].clone()
    assert len(sd) == 2 * (len(modules) + 2 * 2), len(sd)   # + refiner q/k/v of 2 blocks
    lora = _save(authors, root / "hy15_authors.safetensors")
    base = hv15._diffusers_output(model, inputs)
    ref = _fused(model, sd, hv15._diffusers_output, inputs)

    def load():
        return _committed(vidax.load("hunyuan_video1_5", "dit", path, config=cfg))

    def run(m):
        return np.asarray(hv15._run_vidax(m, **inputs))

    return dict(load=load, run=run, base=base, ref=ref, lora=lora)


def test_hunyuan_video1_5_lora_matches_diffusers(hy15, record_property):
    c = hy15
    _matches(c, "hunyuan_video1_5", "hy15_lora", record_property)
    model = c["load"]()    # negative control: the strength ignored (taken as 1)
    vidax.lora.apply(model, "hunyuan_video1_5", "dit", [str(c["lora"])])
    assert_fails("hy15_lora_negative", c["run"](model), c["ref"], record_property)
