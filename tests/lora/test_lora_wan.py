"""LoRAs on the Wan DiT against diffusers' own LoRA loading, in the three forms people use.

Oracle: diffusers 0.42.1 ``WanLoraLoaderMixin.lora_state_dict`` (its conversions of the
authors' ``diffusion_model.*`` form and of musubi-tuner's ``lora_unet_*`` form) +
``WanTransformer3DModel.load_lora_adapter`` + ``fuse_lora`` (merged) or ``set_adapters``
(unfused: PEFT's live adapters), on the tiny i2v model the DiT parity test builds
(``tests/models/wan2_1/test_wan2_1_dit.py``: one random authors'-layout state dict, loaded
by vidax from the file and by diffusers through its own converter). vidax reads the LoRA file
itself through the mapper the checkpoint used.

The LoRA: random down and up factors (rank 4) on every Linear of the blocks (self- and
cross-attention, the i2v ``k_img`` / ``v_img``, both FFN layers), alpha 8 on those (scale 2),
``diff_b`` bias deltas on block 0, and factors without alpha on the embeddings, the time
projection, the head and the image embedder (diffusers reads no alpha there). Its effect on
the output is asserted >= 100x the bound. Bound: 1e-4 x std(reference); the base model alone
differs from diffusers by ~1e-5 x std (diffusers' float32 timestep embedding, see the DiT
test).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
import vidax.lora
from tests.models.wan2_1.test_wan2_1_dit import (_authors_image_model_state, _diffusers_model,
                                                 _diffusers_output, _inputs, _run_vidax)
from tests.parity import REL_TOL, assert_fails, assert_parity
from vidax.errors import VidaxError
from vidax.models.wan2_1.dit import WanDiTConfig
from vidax.translator.lora import LoraError, read_lora

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")
RANK, ALPHA = 4, 8.0
EDGE = ("text_embedding", "time_embedding", "time_projection", "head.head", "img_emb.proj.1",
        "img_emb.proj.3")


def make_lora(state: dict, seed: int, *, form: str = "authors") -> dict:
    """A random LoRA over ``state``'s Linear weights: ``form`` "authors" (``diffusion_model.``,
    lora_down/up, alpha, diff_b) or "musubi" (``lora_unet_``, underscores, alpha everywhere:
    blocks only, as musubi-tuner trains them)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = {}
    for key, value in sorted(state.items()):
        module = key.removesuffix(".weight")
        in_blocks = module.startswith("blocks.")
        if not (key.endswith(".weight") and value.ndim == 2 and "norm" not in key
                and (in_blocks or (form == "authors" and module.startswith(EDGE)))):
            continue
        name = (f"diffusion_model.{module}" if form == "authors"
                else "lora_unet_" + module.replace(".", "_"))
        out[f"{name}.lora_down.weight"] = torch.randn(RANK, value.shape[1], generator=g) * 0.2
        out[f"{name}.lora_up.weight"] = torch.randn(value.shape[0], RANK, generator=g) * 0.2
        if in_blocks:
            out[f"{name}.alpha"] = torch.tensor(ALPHA)
        if form == "authors" and module.startswith("blocks.0."):
            out[f"{name}.diff_b"] = torch.randn(value.shape[0], generator=g) * 0.1
    return out


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """The tiny i2v DiT (file + diffusers model maker), inputs, base outputs, LoRA files."""
    import safetensors.torch

    from diffusers.loaders import WanLoraLoaderMixin

    cfg = WanDiTConfig.tiny("i2v")
    state = _authors_image_model_state(cfg, seed=2)
    root = tmp_path_factory.mktemp("wan_lora")
    path = root / "diffusion_pytorch_model.safetensors"
    safetensors.torch.save_file(state, path)
    files = {}
    for name, form, seed in (("authors", "authors", 5), ("second", "authors", 6),
                             ("musubi", "musubi", 7)):
        files[name] = root / f"{name}.safetensors"
        safetensors.torch.save_file(make_lora(state, seed, form=form), files[name])
    # the diffusers form: diffusers' own conversion of the authors' file, as diffusers saves it
    converted = WanLoraLoaderMixin.lora_state_dict(str(files["authors"]))
    files["diffusers"] = root / "diffusers.safetensors"
    safetensors.torch.save_file({k: v.contiguous() for k, v in converted.items()},
                                files["diffusers"])
    inputs = _inputs(cfg, seed=3)
    base = _run(vidax.load("wan2_1", "dit", path, config=cfg), inputs)
    return cfg, state, path, files, inputs, base


def _run(model, inputs) -> np.ndarray:
    return np.asarray(_run_vidax(model, **inputs))


def _reference(case, loras: list[tuple[str, float]], fuse: bool = True) -> np.ndarray:
    """diffusers' output with ``loras`` ((file key, strength)) loaded through its own
    conversion, fused (``fuse_lora``) or as live PEFT adapters (``set_adapters``)."""
    from diffusers.loaders import WanLoraLoaderMixin

    cfg, state, _, files, inputs, _ = case
    model = _diffusers_model(cfg, state)
    for name, _ in loras:
        sd = WanLoraLoaderMixin.lora_state_dict(str(files[name]))
        model.load_lora_adapter(sd, prefix="transformer", adapter_name=name)
    model.set_adapters([n for n, _ in loras], weights=[s for _, s in loras])
    if fuse:
        model.fuse_lora(adapter_names=[n for n, _ in loras])
        model.unload_lora()
    return _diffusers_output(model, cfg, inputs)


def _vidax(case, loras, mode="merge"):
    cfg, _, path, files, inputs, _ = case
    model = vidax.load("wan2_1", "dit", path, config=cfg,
                       loras=[(files[n], s) for n, s in loras], lora_mode=mode)
    return model, _run(model, inputs)


def _effect(ref, base) -> float:
    return float(np.abs(ref - base).max() / ref.std())


@pytest.mark.parametrize("form", ["authors", "diffusers", "musubi"])
def test_merged_matches_diffusers(case, form, record_property):
    ref = _reference(case, [(form if form != "diffusers" else "authors", 0.7)])
    _, out = _vidax(case, [(form, 0.7)])
    assert _effect(ref, case[-1]) > 100 * REL_TOL
    assert_parity(f"wan_lora_{form}", out, ref, record_property)


def test_live_equals_merged_and_strengths_change_without_recompiling(case, record_property):
    cfg, _, path, files, inputs, base = case
    merged = _vidax(case, [("authors", 0.7)])[1]
    model = vidax.load("wan2_1", "dit", path, config=cfg, loras=[(files["authors"], 0.7)],
                       lora_mode="live")
    graphdef, state = nnx.split(model)
    step = jax.jit(lambda s, i: _forward(graphdef, s, i))
    live = np.asarray(step(state, inputs))
    assert_parity("wan_lora_live_vs_merged", live, merged, record_property)
    vidax.lora.set_strengths(model, {"authors": 0.0})
    zero = np.asarray(step(nnx.split(model)[1], inputs))
    assert step._cache_size() == 1          # a strength is data, not a constant
    np.testing.assert_allclose(zero, base, rtol=0, atol=1e-5 * base.std())
    assert vidax.lora.live_strengths(model) == {"authors": 0.0}


def _forward(graphdef, state, inputs):
    return nnx.merge(graphdef, state)(**inputs)


def test_two_loras_with_strengths_match_diffusers_live_adapters(case, record_property):
    loras = [("authors", 0.5), ("second", -0.8)]
    ref = _reference(case, loras, fuse=False)            # PEFT's unfused forward
    merged = _vidax(case, loras)[1]
    live = _vidax(case, loras, mode="live")[1]
    assert_parity("wan_two_loras_merged", merged, ref, record_property)
    assert_parity("wan_two_loras_live", live, ref, record_property)
    # negative control: the second LoRA's strength taken as +0.8
    assert_fails("wan_two_loras_sign", _vidax(case, [("authors", 0.5), ("second", 0.8)])[1],
                 ref, record_property)


def test_strength_zero_is_the_base_exactly(case):
    np.testing.assert_array_equal(_vidax(case, [("authors", 0.0)])[1], case[-1])


def test_negative_control_alpha_ignored(case, tmp_path, record_property):
    import safetensors.torch

    ref = _reference(case, [("authors", 1.0)])
    lora = safetensors.torch.load_file(case[3]["authors"])
    no_alpha = tmp_path / "no_alpha.safetensors"
    safetensors.torch.save_file({k: v for k, v in lora.items() if not k.endswith(".alpha")},
                                no_alpha)
    cfg, _, path, _, inputs, _ = case
    out = _run(vidax.load("wan2_1", "dit", path, config=cfg, loras=[no_alpha]), inputs)
    assert_fails("wan_lora_alpha_ignored", out, ref, record_property)


# ----------------------------------------------------------------------------- refusals
def _params(model) -> dict[str, np.ndarray]:
    return {".".join(map(str, path)): np.asarray(var.get_value())
            for path, var in nnx.iter_graph(model) if isinstance(var, nnx.Param)}


def _edited(case, tmp_path, edit) -> str:
    import safetensors.torch

    lora = safetensors.torch.load_file(case[3]["authors"])
    edit(lora)
    out = tmp_path / "edited.safetensors"
    safetensors.torch.save_file(lora, out)
    return str(out)


def test_refusals_name_the_keys_and_change_nothing(case, tmp_path):
    import torch

    cfg, _, path, _, _, _ = case
    model = vidax.load("wan2_1", "dit", path, config=cfg)
    before = _params(model)
    unknown = _edited(case, tmp_path, lambda sd: sd.__setitem__(
        "diffusion_model.blocks.0.self_attn.q.lora_magic.weight", torch.zeros(2)))
    with pytest.raises(LoraError, match=r"lora_magic"):
        vidax.lora.apply(model, "wan2_1", "dit", [unknown])

    def bad_rank(sd):
        key = "diffusion_model.blocks.1.ffn.0.lora_up.weight"
        sd[key] = sd[key][:, :RANK - 1].contiguous()
    with pytest.raises(LoraError, match=r"blocks\.1\.ffn\.0\.lora_up\.weight.*rank mismatch"
                                        r"|rank mismatch.*blocks\.1\.ffn\.0"):
        vidax.lora.apply(model, "wan2_1", "dit", [_edited(case, tmp_path, bad_rank)])

    def other_size(sd):                     # a LoRA for a wider model: the q rows double
        key = "diffusion_model.blocks.0.self_attn.q.lora_up.weight"
        sd[key] = torch.cat([sd[key], sd[key]]).contiguous()
    with pytest.raises(LoraError, match=r"blocks\.0\.self_attn\.q.*the model's is"):
        vidax.lora.apply(model, "wan2_1", "dit", [_edited(case, tmp_path, other_size)])

    def other_family(sd):                   # HunyuanVideo's module names
        sd["diffusion_model.double_blocks.0.img_attn_qkv.lora_A.weight"] = torch.zeros(4, 8)
        sd["diffusion_model.double_blocks.0.img_attn_qkv.lora_B.weight"] = torch.zeros(24, 4)
    with pytest.raises(LoraError, match=r"double_blocks\.0\.img_attn_qkv.*does not have"):
        vidax.lora.apply(model, "wan2_1", "dit", [_edited(case, tmp_path, other_family)])
    after = _params(model)
    assert all(np.array_equal(before[k], after[k]) for k in before)   # nothing applied


def test_lora_spec_parsing(tmp_path):
    spec = vidax.lora.LoraSpec.parse
    assert spec("a/b.safetensors") == vidax.lora.LoraSpec("a/b.safetensors", 1.0, None)
    assert spec("b.safetensors:0.6@high") == vidax.lora.LoraSpec("b.safetensors", 0.6, "high")
    assert spec("C:/x/b.safetensors:-1@low").strength == -1.0
    assert spec("C:/x/b.safetensors").path == "C:/x/b.safetensors"
    with pytest.raises(VidaxError, match="expert"):
        spec("b.safetensors@middle")


def test_full_deltas_land_where_the_authors_weights_do(case, tmp_path, record_property):
    """``diff`` / ``diff_b`` / ``diff_m`` (LightX2V's modulation deltas; a ``diff`` on the free
    ``head.modulation`` tensor itself; norm deltas -- all of which diffusers drops): the model
    with the LoRA equals the checkpoint with each delta added to its tensor by hand (the
    oracle: the authors' key names, no vidax mapping)."""
    import safetensors.torch
    import torch

    cfg, state, path, _, inputs, base = case
    g = torch.Generator().manual_seed(9)
    deltas = {"blocks.0.modulation": "blocks.0.diff_m", "head.modulation": "head.modulation.diff",
              "blocks.1.norm3.weight": "blocks.1.norm3.diff",
              "blocks.1.norm3.bias": "blocks.1.norm3.diff_b",
              "blocks.0.self_attn.norm_q.weight": "blocks.0.self_attn.norm_q.diff",
              "patch_embedding.weight": "patch_embedding.diff"}
    lora = {f"diffusion_model.{k}": torch.randn(state[t].shape, generator=g) * 0.3
            for t, k in deltas.items()}
    lora_path = tmp_path / "diffs.safetensors"
    safetensors.torch.save_file(lora, lora_path)
    strength = 0.6
    edited = {k: (v + strength * lora[f"diffusion_model.{deltas[k]}"] if k in deltas else v)
              for k, v in state.items()}
    edited_path = tmp_path / "edited.safetensors"
    safetensors.torch.save_file(edited, edited_path)
    ref = _run(vidax.load("wan2_1", "dit", edited_path, config=cfg), inputs)
    out = _run(vidax.load("wan2_1", "dit", path, config=cfg,
                          loras=[(lora_path, strength)]), inputs)
    assert _effect(ref, base) > 100 * REL_TOL
    assert_parity("wan_full_deltas", out, ref, record_property)
    assert_fails("wan_full_deltas_negative", base, ref, record_property)


def test_lycoris_loha_and_lokr_equal_lycoris_deltas(case, tmp_path, record_property):
    """LyCORIS LoHa and LoKr files (``hada_*`` / ``lokr_*`` keys, alpha): the model with them
    equals the checkpoint with the deltas of lycoris-lora's own ``functional.loha`` /
    ``functional.lokr.diff_weight`` added by hand."""
    import safetensors.torch
    import torch
    from lycoris.functional import loha, lokr

    cfg, state, path, _, inputs, base = case
    g = torch.Generator().manual_seed(13)
    rnd = lambda *shape: torch.randn(*shape, generator=g) * 0.3  # noqa: E731
    lora, edited, strength = {}, dict(state), 0.9
    for module in ("blocks.0.ffn.0", "blocks.1.self_attn.o"):        # LoHa, rank 3, alpha 6
        out, inp = state[f"{module}.weight"].shape
        w1a, w1b, w2a, w2b = rnd(out, 3), rnd(3, inp), rnd(out, 3), rnd(3, inp)
        lora.update({f"diffusion_model.{module}.hada_w1_a": w1a,
                     f"diffusion_model.{module}.hada_w1_b": w1b,
                     f"diffusion_model.{module}.hada_w2_a": w2a,
                     f"diffusion_model.{module}.hada_w2_b": w2b,
                     f"diffusion_model.{module}.alpha": torch.tensor(6.0)})
        delta = loha.diff_weight(w1b, w1a, w2b, w2a, None, None, gamma=6.0 / 3)
        edited[f"{module}.weight"] = state[f"{module}.weight"] + strength * delta
    for module in ("blocks.1.ffn.2", "blocks.0.cross_attn.k"):        # LoKr, w2 low-rank
        out, inp = state[f"{module}.weight"].shape
        w1, w2a, w2b = rnd(4, 2), rnd(out // 4, 2), rnd(2, inp // 2)
        lora.update({f"diffusion_model.{module}.lokr_w1": w1,
                     f"diffusion_model.{module}.lokr_w2_a": w2a,
                     f"diffusion_model.{module}.lokr_w2_b": w2b,
                     f"diffusion_model.{module}.alpha": torch.tensor(1.0)})
        delta = lokr.diff_weight(w1, None, None, None, w2a, w2b, None, gamma=1.0)
        edited[f"{module}.weight"] = state[f"{module}.weight"] + strength * delta
    lora_path, edited_path = tmp_path / "lycoris.safetensors", tmp_path / "edited.safetensors"
    safetensors.torch.save_file(lora, lora_path)
    safetensors.torch.save_file({k: v.contiguous() for k, v in edited.items()}, edited_path)
    ref = _run(vidax.load("wan2_1", "dit", edited_path, config=cfg), inputs)
    out = _run(vidax.load("wan2_1", "dit", path, config=cfg, loras=[(lora_path, strength)]),
               inputs)
    assert _effect(ref, base) > 100 * REL_TOL
    assert_parity("wan_lycoris", out, ref, record_property)
    assert_fails("wan_lycoris_ignored", base, ref, record_property)
    assert read_lora(lora_path).form == "lycoris"
