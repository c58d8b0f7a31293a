"""HunyuanVideo 1.0 / 1.5 DiTs in ComfyUI's own names (layout ``comfyui``,
``vidax.translator.mappings.comfyui_hunyuan``) compute what the authors'-layout file computes.

The renaming here is written from ComfyUI's source, independently of vidax's mapper:
``comfy/supported_models.py`` class ``HunyuanVideo`` ``process_unet_state_dict`` -- the
substring replacements ComfyUI applies to the authors' names to load them into its Flux-style
module (comfy/ldm/hunyuan_video/model.py), in ComfyUI's order -- plus ComfyUI's save prefix
``model.model.`` (``process_unet_state_dict_for_saving``) and, for 1.0, the late-2024
RMSNorm leaf ``.scale``. For 1.5 the double blocks' split q/k/v are fused into one
``{img,txt}_attn_qkv`` (ComfyUI's ``DoubleStreamBlock`` holds one qkv Linear): Comfy-Org's
repackaged form as it is (authors' names otherwise), and ComfyUI's saved form renamed as above.

Reference: the same models the family tests use (diffusers' ``HunyuanVideoTransformer3DModel``
/ ``HunyuanVideo15Transformer3DModel`` fed the authors'-layout state dict, see
tests/models/hunyuan_video*/), at their tiny configs with random values in every tensor; the
ComfyUI-named file (safetensors) is loaded through ``vidax.load`` with the layout detected.
float32, matmul precision "highest", bound 1e-4 x std(reference). Negative controls: the q and
k thirds of one fused ``img_attn.qkv`` swapped (weight and bias) must fail the bound.

Also here: the 1.0 VAE in ComfyUI's ldm names (diffusers' ``AutoencoderKLHunyuanVideo`` as
reference, its state dict renamed by ComfyUI's ``convert_vae_state_dict`` rules, written out in
:func:`comfy_vae_state`; negative controls: the encoder attention's q/k swapped, and one
reversed-numbered decoder level's convs swapped) and HunyuanVideo-1.5's byT5 in ComfyUI's
``T5`` names (transformers' ``T5EncoderModel`` as reference). Measured numbers:
docs/checkpoints_comfyui.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vidax  # noqa: E402
from tests.parity import assert_fails, assert_parity, randomize  # noqa: E402
from vidax.loading import _detect_layout  # noqa: E402
from vidax.manifests import get_manifest, identify  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

#: ComfyUI's renaming of the authors' HunyuanVideo DiT names (comfyanonymous/ComfyUI
#: comfy/supported_models.py, class HunyuanVideo, process_unet_state_dict; stored as
#: Comfy-Org/ComfyUI@01f03bbd), as (old, new) substring replacements in ComfyUI's order.
COMFY_RENAMES = (
    ("txt_in.t_embedder.mlp.0.", "txt_in.t_embedder.in_layer."),
    ("txt_in.t_embedder.mlp.2.", "txt_in.t_embedder.out_layer."),
    ("txt_in.c_embedder.linear_1.", "txt_in.c_embedder.in_layer."),
    ("txt_in.c_embedder.linear_2.", "txt_in.c_embedder.out_layer."),
    ("_mod.linear.", "_mod.lin."),
    ("_attn_qkv.", "_attn.qkv."),
    ("mlp.fc1.", "mlp.0."),
    ("mlp.fc2.", "mlp.2."),
    ("_attn_q_norm.weight", "_attn.norm.query_norm.weight"),
    ("_attn_k_norm.weight", "_attn.norm.key_norm.weight"),
    (".q_norm.weight", ".norm.query_norm.weight"),
    (".k_norm.weight", ".norm.key_norm.weight"),
    ("_attn_proj.", "_attn.proj."),
    (".modulation.linear.", ".modulation.lin."),
    ("_in.mlp.2.", "_in.out_layer."),
    ("_in.mlp.0.", "_in.in_layer."),
)
SAVE_PREFIX = "model.model."


def comfy_name(key: str, *, prefix: str = SAVE_PREFIX, scale_leaf: bool = False) -> str:
    for old, new in COMFY_RENAMES:
        key = key.replace(old, new)
    if scale_leaf and key.endswith("_norm.weight"):       # late-2024 ComfyUI RMSNorm
        key = key[: -len("weight")] + "scale"
    return prefix + key


def comfy_state(authors: dict, **kw) -> dict:
    out = {comfy_name(k, **kw): v for k, v in authors.items()}
    assert len(out) == len(authors)
    return out


def fused_qkv(authors: dict) -> dict:
    """HunyuanVideo-1.5's split double-block q/k/v fused as ComfyUI's DoubleStreamBlock holds
    them (rows [q | k | v] of one ``{img,txt}_attn_qkv``)."""
    import torch

    out = {}
    for k, v in authors.items():
        for part in ("_attn_k.", "_attn_v."):
            if part in k:
                break
        else:
            if "_attn_q." in k and k.startswith("double_blocks."):
                stem = k.replace("_attn_q.", "_attn_{}.")
                out[k.replace("_attn_q.", "_attn_qkv.")] = torch.cat(
                    [authors[stem.format(p)] for p in "qkv"])
            else:
                out[k] = v
    return out


def _save(state: dict, path):
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return path


def _swap_qk(state: dict, key_stem: str, rows: int) -> dict:
    import torch

    bad = dict(state)
    for leaf in ("weight", "bias"):
        q, k, v = state[f"{key_stem}.{leaf}"].split(rows)
        bad[f"{key_stem}.{leaf}"] = torch.cat([k, q, v])
    return bad


# ------------------------------------------------------------------------- manifests
@pytest.mark.parametrize("name, authors", [
    ("comfyui/hunyuan-video-t2v-720p-bf16__dit", "hunyuan_video/t2v-720p__dit"),
    ("comfyui/hunyuanvideo1.5-720p-t2v-fp16__dit", "hunyuan_video1_5/720p_t2v__dit"),
    ("comfyui/hunyuanvideo1.5-480p-i2v-step-distilled-fp16__dit",
     "hunyuan_video1_5/480p_i2v_step_distilled__dit"),
])
def test_comfyui_dit_manifest_is_comfyuis_renaming(name, authors):
    """The derived manifest is the test's own renaming of the authors' release (same shapes,
    as many parameters) and is told apart from it by identify (its 1:1 verification:
    tests/translator/test_comfyui_layouts.py ``test_manifest_verifies_one_to_one``)."""
    m, base = get_manifest(name), get_manifest(authors)
    assert m.num_params == base.num_params
    names = {k: tuple(t.shape) for k, t in base.tensors.items()}
    if "1_5" in authors:        # the fused rows, by shape (fused_qkv on meta tensors)
        import torch

        with torch.device("meta"):
            names = {k: tuple(v.shape) for k, v in fused_qkv(
                {k: torch.empty(s) for k, s in names.items()}).items()}
    if "1_5" in authors:        # Comfy-Org's 1.5 repackaging: the authors' names, qkv fused
        expect = names
    else:                       # the 1.0 file: ComfyUI's own names, saved under model.model.
        expect = {comfy_name(k, scale_leaf=True): s for k, s in names.items()}
    assert {k: tuple(t.shape) for k, t in m.tensors.items()} == expect
    ident = identify({k: (t.shape, t.dtype) for k, t in m.tensors.items()})
    exact = [x.manifest.name for x in ident.parts[0].matches if x.kind == "exact"]
    assert exact == [name]


# ------------------------------------------------------------------------- 1.0 parity
@pytest.fixture(scope="module")
def hv10(tmp_path_factory):
    from tests.models.hunyuan_video.test_hunyuan_video_dit import (
        _diffusers_output, _inputs, authors_state, diffusers_model)
    from vidax.models.hunyuan_video.dit import HunyuanVideoDiTConfig

    cfg = HunyuanVideoDiTConfig.tiny()
    state = authors_state(cfg)
    randomize(state.items(), seed=0)
    inputs = _inputs(cfg, seed=1)
    ref = _diffusers_output(diffusers_model(cfg, state), inputs)
    return cfg, state, inputs, ref, tmp_path_factory.mktemp("hv10_comfy")


def _hv10_out(path, cfg, inputs):
    from tests.models.hunyuan_video.test_hunyuan_video_dit import _run_vidax

    model = vidax.load("hunyuan_video", "dit", path, config=cfg)
    return np.asarray(_run_vidax(model, **inputs))


@pytest.mark.slow
@pytest.mark.parametrize("prefix, scale_leaf", [(SAVE_PREFIX, True), ("", False)])
def test_hunyuan_video_comfyui_layout_matches_the_reference(hv10, prefix, scale_leaf,
                                                            record_property):
    cfg, state, inputs, ref, folder = hv10
    comfy = comfy_state(state, prefix=prefix, scale_leaf=scale_leaf)
    assert f"{prefix}double_blocks.0.img_attn.qkv.weight" in comfy
    assert f"{prefix}single_blocks.0.modulation.lin.weight" in comfy
    path = _save(comfy, folder / f"hunyuan_video_t2v_720p_bf16{prefix.rstrip('.')}.safetensors")
    assert _detect_layout("hunyuan_video", "dit", path, cfg) == "comfyui"
    assert_parity(f"comfyui_hunyuan_video_dit{'_prefixed' if prefix else ''}",
                  _hv10_out(path, cfg, inputs), ref, record_property)


@pytest.mark.slow
def test_hunyuan_video_comfyui_negative_control(hv10, record_property):
    cfg, state, inputs, ref, folder = hv10
    comfy = _swap_qk(comfy_state(state), f"{SAVE_PREFIX}double_blocks.1.img_attn.qkv",
                     cfg.hidden_size)
    path = _save(comfy, folder / "bad.safetensors")
    assert_fails("comfyui_hunyuan_video_dit_negative", _hv10_out(path, cfg, inputs), ref,
                 record_property)


# ------------------------------------------------------------------------- 1.5 parity
@pytest.fixture(scope="module")
def hv15(tmp_path_factory):
    from tests.models.hunyuan_video1_5.test_hunyuan_video1_5_dit import (
        _diffusers_output, _inputs, authors_state, diffusers_model)
    from vidax.models.hunyuan_video1_5.config import HunyuanVideo15DiTConfig

    cfg = HunyuanVideo15DiTConfig.tiny()
    state = authors_state(cfg)
    randomize(state.items(), seed=0)
    inputs = _inputs(cfg, seed=1, i2v=True)
    ref = _diffusers_output(diffusers_model(cfg, state), inputs)
    return cfg, state, inputs, ref, tmp_path_factory.mktemp("hv15_comfy")


def _hv15_out(path, cfg, inputs):
    from tests.models.hunyuan_video1_5.test_hunyuan_video1_5_dit import _run_vidax

    model = vidax.load("hunyuan_video1_5", "dit", path, config=cfg)
    return np.asarray(_run_vidax(model, **inputs))


@pytest.mark.slow
@pytest.mark.parametrize("form", ["repackaged", "saved"])
def test_hunyuan_video1_5_comfyui_layout_matches_the_reference(hv15, form, record_property):
    """``repackaged``: Comfy-Org's form (the authors' names, the double blocks' q/k/v fused as
    ``{img,txt}_attn_qkv``; kohya-ss/musubi-tuner's HunyuanVideo-1.5 loader documents it);
    ``saved``: what ComfyUI itself writes (its module names under ``model.model.``)."""
    cfg, state, inputs, ref, folder = hv15
    fused = fused_qkv(state)
    comfy = fused if form == "repackaged" else comfy_state(fused)
    qkv = ("double_blocks.0.txt_attn_qkv.bias" if form == "repackaged"
           else f"{SAVE_PREFIX}double_blocks.0.txt_attn.qkv.bias")
    assert qkv in comfy and not any("_attn_q." in k for k in comfy)
    path = _save(comfy, folder / f"hunyuanvideo1.5_720p_i2v_fp16_{form}.safetensors")
    assert _detect_layout("hunyuan_video1_5", "dit", path, cfg) == "comfyui"
    assert_parity(f"comfyui_hunyuan_video1_5_dit_{form}", _hv15_out(path, cfg, inputs), ref,
                  record_property)


@pytest.mark.slow
def test_hunyuan_video1_5_comfyui_negative_control(hv15, record_property):
    cfg, state, inputs, ref, folder = hv15
    comfy = _swap_qk(fused_qkv(state), "double_blocks.0.img_attn_qkv", cfg.hidden_size)
    path = _save(comfy, folder / "bad.safetensors")
    assert_fails("comfyui_hunyuan_video1_5_dit_negative", _hv15_out(path, cfg, inputs), ref,
                 record_property)


# ------------------------------------------------------------------------- 1.0 VAE parity
def comfy_vae_state(authors: dict) -> dict:
    """diffusers' / the authors' HunyuanVideo VAE names as ComfyUI's ``convert_vae_state_dict``
    writes them (comfyanonymous/ComfyUI comfy/diffusers_convert.py @06a5766d): the ldm
    ``AutoencoderKL`` names, up levels numbered in reverse (4 levels), the mid attention's
    Linear weights as 1x1x1 conv kernels (the file's convs are 3D)."""
    table = [("conv_shortcut", "nin_shortcut"), ("conv_norm_out", "norm_out"),
             ("mid_block.attentions.0.", "mid.attn_1.")]
    for i in range(4):
        table += [(f"encoder.down_blocks.{i}.resnets.{j}.", f"encoder.down.{i}.block.{j}.")
                  for j in range(2)]
        if i < 3:
            table += [(f"down_blocks.{i}.downsamplers.0.", f"down.{i}.downsample."),
                      (f"up_blocks.{i}.upsamplers.0.", f"up.{3 - i}.upsample.")]
        table += [(f"decoder.up_blocks.{i}.resnets.{j}.", f"decoder.up.{3 - i}.block.{j}.")
                  for j in range(3)]
    table += [(f"mid_block.resnets.{i}.", f"mid.block_{i + 1}.") for i in range(2)]
    attention = [("group_norm.", "norm."), ("to_q.", "q."), ("to_k.", "k."), ("to_v.", "v."),
                 ("to_out.0.", "proj_out.")]
    out = {}
    for key, value in authors.items():
        new = key
        for old, repl in table:
            new = new.replace(old, repl)
        if "attentions" in key:
            for old, repl in attention:
                new = new.replace(old, repl)
        if any(new.endswith(f"mid.attn_1.{w}.weight") for w in ("q", "k", "v", "proj_out")):
            value = value.reshape(*value.shape, 1, 1, 1)
        out[new] = value
    assert len(out) == len(authors)
    return out


@pytest.fixture(scope="module")
def vae_case(tmp_path_factory):
    import dataclasses

    import torch

    from tests.models.hunyuan_video.test_hunyuan_video_vae import (
        BATCH, FRAMES, HEIGHT, LATENT_FRAMES, WIDTH, reference)
    from tests.parity import VAECase

    cfg, ref = reference()
    folder = tmp_path_factory.mktemp("hv10_vae_comfy")
    torch.save(ref.state_dict(), folder / "pytorch_model.pt")
    case = VAECase.posterior("hunyuan_video", folder / "pytorch_model.pt", cfg, ref,
                             video=(BATCH, FRAMES, HEIGHT, WIDTH, 3),
                             latents=(BATCH, LATENT_FRAMES, HEIGHT // 8, WIDTH // 8,
                                      cfg.latent_channels))
    comfy = comfy_vae_state(ref.state_dict())
    assert "decoder.up.3.block.2.norm1.weight" in comfy
    assert comfy["encoder.mid.attn_1.q.weight"].ndim == 5
    path = _save(comfy, folder / "hunyuan_video_vae_bf16.safetensors")
    return dataclasses.replace(case, path=path)


@pytest.mark.slow
def test_hunyuan_video_vae_comfyui_layout_matches_diffusers(vae_case, record_property):
    assert _detect_layout("hunyuan_video", "vae", vae_case.path, vae_case.config) == "comfyui"
    vae_case.check_posterior(vae_case.load(), "comfyui_hunyuan_video_vae", record_property)


@pytest.mark.slow
@pytest.mark.parametrize("direction, a, b", [
    ("encode", "encoder.mid.attn_1.q.", "encoder.mid.attn_1.k."),
    # up.2 is diffusers' up_blocks.1: reading the levels in ComfyUI's order unreversed fails
    ("decode", "decoder.up.2.block.1.conv1.", "decoder.up.2.block.1.conv2.")])
def test_hunyuan_video_vae_comfyui_negative_control(vae_case, direction, a, b, tmp_path,
                                                    record_property):
    from tests.parity import swap_prefixes

    vae_case.check_negative(tmp_path, direction, swap_prefixes(a, b),
                            f"comfyui_hunyuan_video_vae_negative_{direction}", record_property)


# ------------------------------------------------------------------------- 1.5 byT5 parity
BYT5_TINY = dict(vocab_size=300, d_model=48, d_kv=16, num_heads=4, d_ff=96, num_layers=3,
                 feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
                 relative_attention_max_distance=128, dropout_rate=0.0)


@pytest.mark.slow
def test_byt5_comfyui_layout_matches_transformers(tmp_path, record_property):
    """transformers' ``T5EncoderModel`` (byT5's architecture: gated GELU, one relative table in
    block 0) at a tiny config, saved as ComfyUI's ``T5`` holds it (``shared`` + ``encoder.*``,
    no ``encoder.embed_tokens``), read with layout ``comfyui``; ids padded past 128 with the
    mask. Negative control: blocks 0 and 1 swap their q projections."""
    import torch
    from transformers import T5Config as HFConfig
    from transformers import T5EncoderModel

    from vidax.models.t5.config import T5Config

    torch.manual_seed(0)
    model = T5EncoderModel(HFConfig(**BYT5_TINY)).eval()
    randomize(model.named_parameters(), seed=4)
    state = {k: v for k, v in model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    assert sum("relative_attention_bias" in k for k in state) == 1
    rng = np.random.default_rng(0)
    ids = np.zeros((2, 140), np.int64)
    mask = np.zeros_like(ids)
    for i, n in enumerate((9, 140)):
        ids[i, :n], mask[i, :n] = rng.integers(3, 300, n), 1
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids),
                    attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    cfg = T5Config(vocab_size=300, dim=48, dim_attn=64, dim_ffn=96, num_heads=4, num_layers=3,
                   shared_pos=True)
    valid = mask.astype(bool)

    def run(path):
        enc = vidax.load("t5", "encoder", path, config=cfg)     # the layout detected
        return np.asarray(enc(ids, mask))[valid]

    assert_parity("comfyui_byt5", run(_save(state, tmp_path / "byt5_small_glyphxl_fp16"
                                                            ".safetensors")),
                  ref[valid], record_property)
    bad = dict(state)
    a, b = (f"encoder.block.{i}.layer.0.SelfAttention.q.weight" for i in (0, 1))
    bad[a], bad[b] = state[b], state[a]
    assert_fails("comfyui_byt5_negative", run(_save(bad, tmp_path / "bad.safetensors")),
                 ref[valid], record_property)
