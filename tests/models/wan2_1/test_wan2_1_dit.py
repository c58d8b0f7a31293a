"""vidax's Wan2.1 DiT against the authors' model (t2v) and diffusers' (i2v, flf2v).

Oracles (DESIGN.md §6):

* t2v: the authors' ``WanModel`` (``tests/reference/wan22.py``) at a tiny config, random
  values in every tensor, saved with ``safetensors.torch.save_file`` from its own
  ``state_dict()``; vidax loads that file and runs the same inputs.
* i2v / flf2v: the authors' Wan2.2 ``WanModel`` has no CLIP image branch, so the oracle is
  diffusers' ``WanTransformer3DModel``, fed through diffusers' own converter from the same
  authors'-layout file vidax loads.

Inputs: batch 2 with different timesteps and text lengths (7 and 12 of text_len 512 tokens, so
the zero padding the authors attend over matters), a 3 x 4 x 6 token grid (unequal axes, so a
transposed RoPE axis shows). Bound: float32, matmul precision "highest",
max |vidax - reference| <= 1e-4 x std(reference). Each test has a negative control: a file
with two tensors swapped must fail that bound.

Measured residue: t2v ~2.4e-6 x std. Against diffusers it is 4-6x larger because diffusers
computes the sinusoidal timestep embedding in float32 where the authors (and vidax) use
float64; with the authors' float64 embedding swapped into diffusers it drops to ~3e-6 x std.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity import assert_fails, assert_parity, edited_copy, randomize, swap
from tests.reference import wan22
from vidax.loading import verify_manifest
from vidax.manifests import get_manifest
from vidax.errors import VidaxError
from vidax.models.wan2_1.dit import CLIP_DIM, CLIP_TOKENS, WanDiT, WanDiTConfig

jax.config.update("jax_default_matmul_precision", "highest")
# The authors' torch.amp.autocast("cuda") blocks warn on a CPU build (see tests/reference/wan22.py).
pytestmark = pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")
BATCH, FRAMES, HEIGHT, WIDTH = 2, 3, 8, 12  # latent size; tokens 3 x 4 x 6
TEXT_LENS = (7, 12)
TIMESTEPS = (937.0, 121.5)


# ----------------------------------------------------------------------------- loading
def load_vidax(path: Path, cfg: WanDiTConfig) -> WanDiT:
    """The authors'-layout file as a vidax model, through the translator."""
    return vidax.load("wan2_1", "dit", path, config=cfg)


@nnx.jit
def _run_vidax(model, x, t, context, clip_fea, y):
    return model(x, t, context, clip_fea=clip_fea, y=y)


# ----------------------------------------------------------------------------- helpers

def _inputs(cfg: WanDiTConfig, seed: int) -> dict[str, np.ndarray]:
    """Channels-last inputs for vidax; text zero-padded to the longest real length."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    context = np.zeros((BATCH, max(TEXT_LENS), cfg.text_dim), f32)
    for i, n in enumerate(TEXT_LENS):
        context[i, :n] = rng.standard_normal((n, cfg.text_dim))
    inputs = {
        "x": rng.standard_normal((BATCH, FRAMES, HEIGHT, WIDTH, 16)).astype(f32),
        "t": np.asarray(TIMESTEPS, f32),
        "context": context,
        "clip_fea": None,
        "y": None,
    }
    if cfg.has_image_branch:
        tokens = CLIP_TOKENS * (2 if cfg.model_type == "flf2v" else 1)
        inputs["clip_fea"] = rng.standard_normal((BATCH, tokens, CLIP_DIM)).astype(f32)
        inputs["y"] = rng.standard_normal((BATCH, FRAMES, HEIGHT, WIDTH, cfg.in_dim - 16)
                                          ).astype(f32)
    return inputs


def _swapped(path: Path, out: Path, a: str, b: str) -> Path:
    """A copy of the file with tensors ``a`` and ``b`` exchanged."""
    return edited_copy(path, out, swap((a, b)))


def _vidax_output(path: Path, cfg: WanDiTConfig, inputs) -> np.ndarray:
    return np.asarray(_run_vidax(load_vidax(path, cfg), **inputs))


# ----------------------------------------------------------------------------- t2v: the authors
@pytest.fixture(scope="module")
def t2v_case(tmp_path_factory):
    """The authors' tiny t2v WanModel: its file, the inputs and its output (channels-last)."""
    import safetensors.torch
    import torch

    cfg = WanDiTConfig.tiny("t2v")
    model = wan22.model_module().WanModel(**dataclasses.asdict(cfg)).eval()
    randomize(model.named_parameters(), seed=0)
    path = tmp_path_factory.mktemp("wan2_1_t2v") / "diffusion_pytorch_model.safetensors"
    safetensors.torch.save_file(model.state_dict(), path)

    inputs = _inputs(cfg, seed=1)
    seq_len = FRAMES * (HEIGHT // 2) * (WIDTH // 2)
    with torch.no_grad():
        out = model(
            [torch.from_numpy(u).permute(3, 0, 1, 2) for u in inputs["x"]],
            # Wan2.2's forward expands a 1-D t with t.expand(B, seq_len), which only
            # broadcasts for B == 1; a per-token t [B, seq_len] (its ti2v path) is the same
            # computation as Wan2.1's per-sample t.
            t=torch.from_numpy(inputs["t"])[:, None].expand(BATCH, seq_len),
            context=[torch.from_numpy(c[:n]) for c, n in zip(inputs["context"], TEXT_LENS)],
            seq_len=seq_len)
    ref = torch.stack(out).permute(0, 2, 3, 4, 1).numpy()
    return cfg, path, inputs, ref


def test_t2v_matches_authors(t2v_case, record_property):
    cfg, path, inputs, ref = t2v_case
    assert_parity("t2v", _vidax_output(path, cfg, inputs), ref, record_property)


def test_t2v_negative_control_swapped_q_k(t2v_case, tmp_path, record_property):
    cfg, path, inputs, ref = t2v_case
    bad = tmp_path / "swapped.safetensors"
    _swapped(path, bad, "blocks.1.self_attn.q.weight", "blocks.1.self_attn.k.weight")
    _swapped(bad, bad, "blocks.1.self_attn.q.bias", "blocks.1.self_attn.k.bias")
    assert_fails("t2v_negative", _vidax_output(bad, cfg, inputs), ref, record_property)


# ----------------------------------------------------------------------------- i2v/flf2v: diffusers
def _authors_image_model_state(cfg: WanDiTConfig, seed: int) -> dict:
    """A random tiny state dict in the authors' Wan2.1 i2v/flf2v layout
    (:func:`tests.reference.wan22.wan2_1_dit_state`)."""
    state = wan22.wan2_1_dit_state(cfg)
    randomize(sorted(state.items()), seed)
    return state


def _diffusers_model(cfg: WanDiTConfig, authors_state: dict):
    from diffusers import WanTransformer3DModel
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    state = convert_wan_transformer_to_diffusers(dict(authors_state))
    if cfg.model_type == "flf2v":
        # diffusers' converter has no rule for flf2v's position embedding and leaves it
        # under its authors' name; diffusers calls it image_embedder.pos_embed.
        state["condition_embedder.image_embedder.pos_embed"] = state.pop("img_emb.emb_pos")
    model = WanTransformer3DModel(
        patch_size=cfg.patch_size, num_attention_heads=cfg.num_heads,
        attention_head_dim=cfg.head_dim, in_channels=cfg.in_dim, out_channels=cfg.out_dim,
        text_dim=cfg.text_dim, freq_dim=cfg.freq_dim, ffn_dim=cfg.ffn_dim,
        num_layers=cfg.num_layers, cross_attn_norm=cfg.cross_attn_norm,
        qk_norm="rms_norm_across_heads", eps=cfg.eps, image_dim=CLIP_DIM,
        added_kv_proj_dim=cfg.dim,
        pos_embed_seq_len=2 * CLIP_TOKENS if cfg.model_type == "flf2v" else None)
    model.load_state_dict(state, strict=True)
    return model.eval()


def _diffusers_output(model, cfg: WanDiTConfig, inputs) -> np.ndarray:
    """diffusers' forward on the same inputs: NCTHW latents, text already padded to 512
    (its pipeline pads, the model does not), flf2v's CLIP features as [2B, 257, 1280]."""
    import torch

    x = np.concatenate([inputs["x"], inputs["y"]], axis=-1)
    context = np.zeros((BATCH, cfg.text_len, cfg.text_dim), np.float32)
    context[:, : inputs["context"].shape[1]] = inputs["context"]
    with torch.no_grad():
        out = model(hidden_states=torch.from_numpy(x).permute(0, 4, 1, 2, 3),
                    timestep=torch.from_numpy(inputs["t"]),
                    encoder_hidden_states=torch.from_numpy(context),
                    encoder_hidden_states_image=torch.from_numpy(
                        inputs["clip_fea"].reshape(-1, CLIP_TOKENS, CLIP_DIM)),
                    return_dict=False)[0]
    return out.permute(0, 2, 3, 4, 1).numpy()


# The negative control per type: i2v exchanges one block's image keys and values; flf2v
# exchanges emb_pos's first-frame and last-frame halves (done on the tensor, see below).
# i2v in the fast lane; flf2v (its two-image position table) in CI (``-m slow``).
@pytest.mark.parametrize("model_type", ["i2v", pytest.param("flf2v", marks=pytest.mark.slow)])
def test_image_branch_matches_diffusers(model_type, tmp_path, record_property):
    import safetensors.torch

    cfg = WanDiTConfig.tiny(model_type)
    authors_state = _authors_image_model_state(cfg, seed=2)
    path = tmp_path / "diffusion_pytorch_model.safetensors"
    safetensors.torch.save_file(authors_state, path)
    inputs = _inputs(cfg, seed=3)
    ref = _diffusers_output(_diffusers_model(cfg, authors_state), cfg, inputs)

    assert_parity(model_type, _vidax_output(path, cfg, inputs), ref, record_property)

    bad = tmp_path / "negative.safetensors"
    if model_type == "i2v":
        _swapped(path, bad, "blocks.1.cross_attn.k_img.weight", "blocks.1.cross_attn.v_img.weight")
    else:
        def roll(tensors):
            tensors["img_emb.emb_pos"] = np.roll(tensors["img_emb.emb_pos"], CLIP_TOKENS, axis=1)
        edited_copy(path, bad, roll)
    assert_fails(f"{model_type}_negative", _vidax_output(bad, cfg, inputs), ref,
                 record_property)


# ----------------------------------------------------------------------------- structure, config
PRESETS = {"t2v-1.3b": WanDiTConfig.t2v_1_3b, "t2v-14b": WanDiTConfig.t2v_14b,
           "i2v-14b": WanDiTConfig.i2v_14b, "flf2v-14b": WanDiTConfig.flf2v_14b}


# The 1.3B in the fast lane; the 14B releases in CI (``-m slow``).
@pytest.mark.parametrize("variant", [v if v == "t2v-1.3b" else
                                     pytest.param(v, marks=pytest.mark.slow)
                                     for v in sorted(PRESETS)])
def test_release_manifest_verifies(variant):
    """The full-size release's names and shapes, through the mapper, match the model's
    abstract tree 1:1, and the manifest's config is the preset."""
    manifest = get_manifest(f"wan2_1/{variant}__dit")
    assert WanDiTConfig.from_dict(manifest.config) == PRESETS[variant]()
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == report.num_tensors == manifest.num_tensors
    assert report.num_params == manifest.num_params


def test_config_from_released_config_json():
    # Wan2.1-T2V-14B's config.json: the keys in WanModel.ignore_for_config are not saved.
    released = {"_class_name": "WanModel", "_diffusers_version": "0.30.0", "dim": 5120,
                "eps": 1e-06, "ffn_dim": 13824, "freq_dim": 256, "in_dim": 16,
                "model_type": "t2v", "num_heads": 40, "num_layers": 40, "out_dim": 16,
                "text_len": 512}
    assert WanDiTConfig.from_dict(released) == WanDiTConfig.t2v_14b()
    with pytest.raises(VidaxError, match="vace_layers"):
        WanDiTConfig.from_dict(dict(released, vace_layers=[0, 2]))
    with pytest.raises(VidaxError, match="model_type"):
        WanDiTConfig.from_dict(dict(released, model_type="ti2v"))
