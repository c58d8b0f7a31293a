"""diffusers' Wan key layouts (``vidax.translator.mappings.wan2_2_diffusers``) against diffusers.

Oracles (DESIGN.md §6): diffusers' own ``AutoencoderKLWan`` (the Wan2.1 config, z 16, and the
Wan2.2 config, z 48 with ``is_residual`` and the 2x2 patch) and ``WanTransformer3DModel``
(t2v, and flf2v for the image branch) at tiny configs, random values in every tensor, written
by diffusers itself (``save_pretrained``: ``diffusion_pytorch_model.safetensors`` +
``config.json``). vidax reads the config from that ``config.json`` and the weights through
``vidax.load(..., layout="diffusers")``.

* VAE: diffusers' chunked encode (1 frame, then 4) and decode (one latent frame at a time)
  over 9 frames <-> 3 latent frames, batch 2: the posterior mean and log-variance, and the
  decoder's output before diffusers' clamp (caught per chunk with a hook, then diffusers' own
  ``unpatchify``).
* DiT: one forward, batch 2, different timesteps and text lengths (inputs as in
  tests/models/wan2_1/test_wan2_1_dit.py).

Bound: float32, matmul precision "highest", max |vidax - diffusers| <= 1e-4 x std(diffusers).
Measured: VAE <= 8.4e-6 x std (2.1) and <= 6.1e-6 x std (2.2); DiT ~1.3e-5 x std
(diffusers computes the sinusoidal timestep embedding in float32, vidax and the authors in
float64; see test_wan2_1_dit.py). Each negative control (two blocks exchanged in the saved
file) must fail the bound.

Also here: layout detection (``vidax.load`` with ``layout=None``, ``vidax inspect``), the
config readers of diffusers' ``config.json``, and every Wan2.2 / diffusers-layout manifest,
including the Cosmos releases that ship these VAEs.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity import (VAECase, assert_fails, assert_parity, draw_inputs, edited_copy,
                          swap_prefixes, to_channels_last, to_ncthw)
from tests.reference import wan22
from vidax import cli, loading, manifests, registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.models.wan2_1.dit import CLIP_DIM, CLIP_TOKENS, WanDiT, WanDiTConfig
from vidax.models.wan2_1.vae import WanVAE, WanVAEConfig
from vidax.models.wan2_2.vae import Wan22VAE, Wan22VAEConfig
from vidax.translator.mappings.wan2_2 import Wan22DiTConfigs
from vidax.translator.mappings.wan2_2_diffusers import (
    WanDiTDiffusersConfigs, dit_config_from_diffusers, vae_config_from_diffusers)

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def _randomize(model, seed: int) -> None:
    """Random values in every tensor (norm scales and biases included), scaled so
    activations stay O(1)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith(("scale_shift_table", "pos_embed")):
                p.copy_(0.5 * noise)
            elif name.endswith("gamma") or (p.ndim == 1 and name.endswith("weight")):
                p.copy_(1 + 0.2 * noise)
            elif p.ndim >= 2:  # Linear / Conv weights
                p.copy_(noise / p[0].numel() ** 0.5)
            else:  # biases
                p.copy_(0.1 * noise)


# ----------------------------------------------------------------------------- VAE
# version -> (vidax model_type, vidax tiny config, AutoencoderKLWan kwargs, spatial stride)
VAES = {
    "wan2_1": ("wan2_1", WanVAEConfig.tiny(), {"base_dim": 8, "z_dim": 4}, 8),
    "wan2_2": ("wan2_2", Wan22VAEConfig.tiny(),
               {"base_dim": 8, "decoder_base_dim": 12, "z_dim": 4, "is_residual": True,
                "in_channels": 12, "out_channels": 12, "patch_size": 2,
                "scale_factor_spatial": 16}, 16),
}
VAE_BATCH, VAE_FRAMES, VAE_LATENT_FRAMES = 2, 9, 3
# The negative controls: two residual blocks of one level exchanged in the encoder and in the
# decoder (the regrouped indices are what the diffusers rules rewrite).
VAE_NEGATIVE = {
    "wan2_1": {"encode": ("encoder.down_blocks.0.", "encoder.down_blocks.1."),
               "decode": ("decoder.up_blocks.0.resnets.1.", "decoder.up_blocks.0.resnets.2.")},
    "wan2_2": {"encode": ("encoder.down_blocks.0.resnets.0.", "encoder.down_blocks.0.resnets.1."),
               "decode": ("decoder.up_blocks.0.resnets.1.", "decoder.up_blocks.0.resnets.2.")},
}


# Wan2.2's (patchified, residual) in the fast lane; Wan2.1's in CI (``-m slow``).
@pytest.fixture(scope="module", params=[pytest.param("wan2_1", marks=pytest.mark.slow),
                                        "wan2_2"])
def vae_case(request, tmp_path_factory) -> VAECase:
    """diffusers' tiny VAE saved by itself, inputs, and its outputs (channels-last): the
    posterior ``mean`` and ``log_var`` and the ``decoded`` video (the decoder's chunks, caught
    with a hook: diffusers clamps what ``decode`` returns)."""
    import torch
    from diffusers import AutoencoderKLWan
    from diffusers.models.autoencoders.autoencoder_kl_wan import unpatchify

    version = request.param
    model_type, cfg, kwargs, stride = VAES[version]
    ref = AutoencoderKLWan(latents_mean=list(cfg.latents_mean),
                           latents_std=list(cfg.latents_std), **kwargs).eval()
    _randomize(ref, seed=0)
    folder = tmp_path_factory.mktemp(f"{version}_vae_diffusers")
    ref.save_pretrained(folder)
    videos, zs = draw_inputs(1, {"video": (VAE_BATCH, VAE_FRAMES, 2 * stride, 3 * stride, 3)},
                             {"z": (VAE_BATCH, VAE_LATENT_FRAMES, 2, 3, cfg.z_dim)})
    chunks = []
    hook = ref.decoder.register_forward_hook(lambda mod, args, out: chunks.append(out))
    with torch.no_grad():
        posterior = ref.encode(to_ncthw(videos["video"])).latent_dist
        ref.decode(to_ncthw(zs["z"]))
    hook.remove()
    decoded = torch.cat(chunks, dim=2)
    if ref.config.patch_size is not None:
        decoded = unpatchify(decoded, patch_size=ref.config.patch_size)
    return VAECase(model_type, folder / "diffusion_pytorch_model.safetensors", cfg,
                   {**videos, **zs},
                   {"mean": to_channels_last(posterior.mean),
                    "log_var": to_channels_last(posterior.logvar),
                    "decoded": to_channels_last(decoded)},
                   ref, load_options={"layout": "diffusers"})


def test_vae_matches_diffusers(vae_case, record_property):
    spec = registry.get(vae_case.family, "vae", "diffusers")
    cfg = spec.make_config(overrides=json.loads(
        (vae_case.path.parent / "config.json").read_text()))
    assert cfg == vae_case.config
    model = vae_case.load(config=cfg)
    mu, log_var = vae_case.outputs(model, "encode")
    decoded = vae_case.outputs(model, "decode")
    v = vae_case.family
    assert_parity(f"{v}_mu", mu, vae_case["mean"], record_property)
    assert_parity(f"{v}_log_var", log_var, vae_case["log_var"], record_property)
    assert_parity(f"{v}_decode", decoded, vae_case["decoded"], record_property)


@pytest.mark.parametrize("direction", ["encode", "decode"])
def test_vae_negative_control(vae_case, direction, tmp_path, record_property):
    vae_case.check_negative(tmp_path, direction,
                            swap_prefixes(*VAE_NEGATIVE[vae_case.family][direction]),
                            f"{vae_case.family}_negative_{direction}", record_property)


def test_vae_layout_detected(vae_case, tmp_path):
    """``layout=None`` picks diffusers' layout for diffusers' file and the authors' layout
    for the authors' file of the same VAE."""
    import torch

    model_type, cfg = vae_case.family, vae_case.config
    assert loading._detect_layout(model_type, "vae", vae_case.path, cfg) == "diffusers"
    assert loading._detect_layout(model_type, "vae", vae_case.path, None) == "diffusers"
    model = vidax.load(model_type, "vae", vae_case.path, config=cfg)
    assert isinstance(model, WanVAE if model_type == "wan2_1" else Wan22VAE)

    path = tmp_path / "authors.pth"
    torch.save(wan22.authors_vae(cfg).state_dict(), path)
    assert loading._detect_layout(model_type, "vae", path, None) == "original"
    vidax.load(model_type, "vae", path, config=cfg)


# ----------------------------------------------------------------------------- DiT
DIT_BATCH, DIT_FRAMES, DIT_HEIGHT, DIT_WIDTH = 2, 3, 8, 12  # latent size; tokens 3 x 4 x 6
TEXT_LENS = (7, 12)
TIMESTEPS = (937.0, 121.5)


def _dit_inputs(cfg: WanDiTConfig, seed: int) -> dict[str, np.ndarray | None]:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    context = np.zeros((DIT_BATCH, max(TEXT_LENS), cfg.text_dim), f32)
    for i, n in enumerate(TEXT_LENS):
        context[i, :n] = rng.standard_normal((n, cfg.text_dim))
    inputs = {"x": rng.standard_normal((DIT_BATCH, DIT_FRAMES, DIT_HEIGHT, DIT_WIDTH, 16)
                                       ).astype(f32),
              "t": np.asarray(TIMESTEPS, f32), "context": context, "clip_fea": None, "y": None}
    if cfg.has_image_branch:
        tokens = CLIP_TOKENS * (2 if cfg.model_type == "flf2v" else 1)
        inputs["clip_fea"] = rng.standard_normal((DIT_BATCH, tokens, CLIP_DIM)).astype(f32)
        inputs["y"] = rng.standard_normal((DIT_BATCH, DIT_FRAMES, DIT_HEIGHT, DIT_WIDTH,
                                           cfg.in_dim - 16)).astype(f32)
    return inputs


def _diffusers_dit_output(model, cfg: WanDiTConfig, inputs) -> np.ndarray:
    """diffusers' forward: NCTHW latents (x and y concatenated), text padded to 512 (its
    pipeline pads, the model does not), flf2v's CLIP features as [2B, 257, 1280]."""
    import torch

    x = inputs["x"] if inputs["y"] is None else np.concatenate([inputs["x"], inputs["y"]], -1)
    context = np.zeros((DIT_BATCH, cfg.text_len, cfg.text_dim), np.float32)
    context[:, : inputs["context"].shape[1]] = inputs["context"]
    image = None
    if inputs["clip_fea"] is not None:
        image = torch.from_numpy(inputs["clip_fea"].reshape(-1, CLIP_TOKENS, CLIP_DIM))
    with torch.no_grad():
        out = model(hidden_states=to_ncthw(x), timestep=torch.from_numpy(inputs["t"]),
                    encoder_hidden_states=torch.from_numpy(context),
                    encoder_hidden_states_image=image, return_dict=False)[0]
    return to_channels_last(out)


def _vidax_dit_output(path: Path, cfg: WanDiTConfig, inputs, layout="diffusers") -> np.ndarray:
    model = vidax.load("wan2_1", "dit", path, config=cfg, layout=layout)
    return np.asarray(_run_dit(model, **inputs))


@nnx.jit
def _run_dit(model, x, t, context, clip_fea, y):
    return model(x, t, context, clip_fea=clip_fea, y=y)


DIT_NEGATIVE = {"t2v": ("blocks.0.attn1.to_q.", "blocks.0.attn1.to_k."),
                "flf2v": ("blocks.1.attn2.add_k_proj.", "blocks.1.attn2.add_v_proj.")}


# t2v in the fast lane; flf2v (the image branch, its position table) in CI (``-m slow``).
@pytest.mark.parametrize("model_type", [pytest.param("flf2v", marks=pytest.mark.slow), "t2v"])
def test_dit_matches_diffusers(model_type, tmp_path, record_property):
    from diffusers import WanTransformer3DModel

    tiny = WanDiTConfig.tiny(model_type)
    image = {} if model_type == "t2v" else {
        "image_dim": CLIP_DIM, "added_kv_proj_dim": tiny.dim,
        "pos_embed_seq_len": 2 * CLIP_TOKENS if model_type == "flf2v" else None}
    ref = WanTransformer3DModel(
        patch_size=tiny.patch_size, num_attention_heads=tiny.num_heads,
        attention_head_dim=tiny.head_dim, in_channels=tiny.in_dim, out_channels=tiny.out_dim,
        text_dim=tiny.text_dim, freq_dim=tiny.freq_dim, ffn_dim=tiny.ffn_dim,
        num_layers=tiny.num_layers, cross_attn_norm=tiny.cross_attn_norm,
        qk_norm="rms_norm_across_heads", eps=tiny.eps, **image).eval()
    _randomize(ref, seed=2)
    ref.save_pretrained(tmp_path)
    path = tmp_path / "diffusion_pytorch_model.safetensors"
    cfg = registry.get("wan2_1", "dit", "diffusers").make_config(
        overrides=json.loads((tmp_path / "config.json").read_text()))
    assert cfg == tiny
    inputs = _dit_inputs(cfg, seed=3)
    expected = _diffusers_dit_output(ref, cfg, inputs)

    assert_parity(f"dit_{model_type}", _vidax_dit_output(path, cfg, inputs), expected,
                  record_property)
    # The layout is found without being named.
    assert loading._detect_layout("wan2_1", "dit", path, None) == "diffusers"
    assert isinstance(vidax.load("wan2_1", "dit", path, config=cfg), WanDiT)

    bad = edited_copy(path, tmp_path / "negative.safetensors",
                      swap_prefixes(*DIT_NEGATIVE[model_type]))
    assert_fails(f"dit_{model_type}_negative", _vidax_dit_output(bad, cfg, inputs), expected,
                 record_property)


# ----------------------------------------------------------------------------- inspect
def _sparse_safetensors(path: Path, manifest) -> Path:
    """A safetensors file with the manifest's names and shapes (float32) whose data is a
    hole: full-size for the reader's header checks, ~nothing on disk."""
    header, offset = {}, 0
    for key, spec in manifest.tensors.items():
        size = 4 * math.prod(spec.shape)
        header[key] = {"dtype": "F32", "shape": list(spec.shape),
                       "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + offset)
    return path


def test_inspect_reports_the_diffusers_layout(tmp_path, capsys):
    """A full-size (sparse) diffusers-layout Wan2.2 VAE: ``vidax inspect`` names the release
    and the layout, and loading resolves layout and release config from the keys alone."""
    manifest = manifests.get_manifest("wan2_2_diffusers/ti2v-5b__vae")
    folder = tmp_path / "vae"
    folder.mkdir()
    path = _sparse_safetensors(folder / "diffusion_pytorch_model.safetensors", manifest)
    assert cli.main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "exact match, diffusers layout" in text and "wan2_2_diffusers/ti2v-5b__vae" in text
    assert loading._detect_layout("wan2_2", "vae", path, None) == "diffusers"
    spec = registry.get("wan2_2", "vae", "diffusers")
    assert loading._detect_config(spec, path) == Wan22VAEConfig.wan2_2()


def test_inspect_json_names_the_layout_of_a_tiny_file(vae_case, capsys):
    """A tiny file matches no release exactly; its nearest releases are all diffusers'."""
    assert cli.main(["inspect", str(vae_case.path), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["identification"]
    matches = found["parts"][0]["matches"]
    assert matches and {m["layout"] for m in matches} == {"diffusers"}


# ----------------------------------------------------------------------------- manifests
# Every Wan2.2 and diffusers-layout Wan manifest, and the other releases that ship these VAEs.
MANIFESTS = sorted(m.name for m in manifests.all_manifests()
                   if m.family in ("wan2_2", "wan2_2_diffusers")) + [
    "cosmos2_5/predict-2b__vae_diffusers", "cosmos3/edge__vae", "cosmos3/nano__vae"]


# The diffusers-layout releases in the fast lane; the authors'-layout Wan2.2 and the Cosmos
# ones (their own modules verify them too) in CI (``-m slow``).
@pytest.mark.parametrize("name", [n if n.startswith("wan2_2_diffusers/") else
                                  pytest.param(n, marks=pytest.mark.slow) for n in MANIFESTS])
def test_release_manifest_verifies(name):
    manifest = manifests.get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == report.num_tensors == manifest.num_tensors
    assert report.num_params == manifest.num_params


def test_manifest_count():
    """9 wan2_2 + 4 wan2_2_diffusers + 3 Cosmos VAEs: a new manifest shows up here."""
    assert len(MANIFESTS) == 16


# ----------------------------------------------------------------------------- configs
def test_dit_configs_from_config_json():
    for name, preset in (("wan2_2_diffusers/t2v-1.3b__dit", WanDiTConfig.t2v_1_3b()),
                         ("wan2_2_diffusers/ti2v-5b__dit", Wan22DiTConfigs.ti2v_5b())):
        assert dit_config_from_diffusers(manifests.get_manifest(name).config) == preset
    for variant, preset in (("ti2v-5b", Wan22DiTConfigs.ti2v_5b()),
                            ("i2v-a14b", Wan22DiTConfigs.i2v_a14b()),
                            ("t2v-a14b", Wan22DiTConfigs.t2v_a14b())):
        config = manifests.get_manifest(f"wan2_2/{variant}__dit").config
        assert Wan22DiTConfigs.from_dict(config) == preset
    # diffusers' configs of the image models (scripts/convert_wan_to_diffusers.py).
    i2v = {"_class_name": "WanTransformer3DModel", "num_attention_heads": 40,
           "attention_head_dim": 128, "in_channels": 36, "out_channels": 16, "ffn_dim": 13824,
           "num_layers": 40, "image_dim": 1280, "added_kv_proj_dim": 5120}
    assert dit_config_from_diffusers(i2v) == WanDiTConfig.i2v_14b()
    assert dit_config_from_diffusers(dict(i2v, pos_embed_seq_len=514)) == \
        WanDiTConfig.flf2v_14b()
    a14b = dict(i2v, image_dim=None, added_kv_proj_dim=None)
    assert dit_config_from_diffusers(a14b) == Wan22DiTConfigs.i2v_a14b()
    assert WanDiTDiffusersConfigs.from_dict(i2v) == WanDiTConfig.i2v_14b()
    with pytest.raises(VidaxError, match="image_dim"):
        dit_config_from_diffusers(dict(i2v, added_kv_proj_dim=None))
    with pytest.raises(VidaxError, match="unknown"):
        dit_config_from_diffusers(dict(i2v, vace_layers=[0, 2]))


def test_vae_configs_from_config_json():
    for name, preset in (("wan2_2_diffusers/t2v-1.3b__vae", WanVAEConfig.wan2_1()),
                         ("cosmos2_5/predict-2b__vae_diffusers", WanVAEConfig.wan2_1()),
                         ("wan2_2_diffusers/ti2v-5b__vae", Wan22VAEConfig.wan2_2()),
                         ("cosmos3/nano__vae", Wan22VAEConfig.wan2_2())):
        assert vae_config_from_diffusers(manifests.get_manifest(name).config) == preset
    wan22_config = dict(manifests.get_manifest("wan2_2_diffusers/ti2v-5b__vae").config)
    # diffusers' conversion script also passes clip_output=False; it builds no tensor.
    assert vae_config_from_diffusers(dict(wan22_config, clip_output=False)) == \
        Wan22VAEConfig.wan2_2()
    with pytest.raises(VidaxError, match="patch_size"):
        vae_config_from_diffusers(dict(wan22_config, patch_size=None))
    with pytest.raises(VidaxError, match="num_res_blocks"):
        vae_config_from_diffusers(dict(wan22_config, num_res_blocks=3))
    with pytest.raises(VidaxError, match="Wan2.1 VAE"):
        registry.get("wan2_2", "vae", "diffusers").make_config(
            overrides=manifests.get_manifest("wan2_2_diffusers/t2v-1.3b__vae").config)
