"""The HunyuanVideo-1.5 VAE (``vidax.models.hunyuan_video1_5.vae``) against diffusers'
``AutoencoderKLHunyuanVideo15``.

Oracle (DESIGN.md §6): a tiny random state dict in the release's layout (the authors'
``AutoencoderKLConv3D`` names: ``encoder.down.N.block.M``, ``mid.attn_1.q``, ``gamma
[C, 1, 1, 1]``), saved with ``safetensors.torch.save_file`` as
``vae/diffusion_pytorch_model.safetensors`` is, and read back through ``vidax.load``. The
reference is diffusers' own class at the same tiny config, given that state dict through
diffusers' own conversion (the renames of ``scripts/convert_hunyuan_video1_5_to_diffusers.py``,
transcribed below as data) and ``load_state_dict(strict=True)``. The authors' names come from
that conversion, not from vidax's mapper; at full size they are exactly the manifest's 218
(checked). The tiny config keeps the released structure (5 levels; space-time down at levels
2-3, space-only at 0-1; up in time at 0-1; DC-AE resamplers and channel shortcuts; 218
tensors, as many as the release) at widths 8-64, 4 latent channels. diffusers runs untiled
(``use_tiling`` is off by default and the inputs are below its tile size anyway).

Bound: float32, matmul precision "highest", max |vidax - diffusers| <= 1e-4 x std(diffusers)
for the posterior mean, its log-variance (9 frames -> 3 latent frames) and the decoded video
(3 latent frames -> 9 frames), before any clamp. Measured: see the printed lines
(``pytest -s``) and the docs' VAE section. Negative controls: ``q`` <-> ``k`` of the encoder's
mid-block attention, and ``conv1`` <-> ``conv2`` of one decoder block, exchanged in the saved
file, must fail it; so must an unmasked mid-block attention. ``decode(tiled=...)`` is checked
against diffusers' ``tiled_decode`` (``enable_tiling`` with small tiles, the same attributes
the authors' ``set_tile_sample_min_size`` sets); removing the blend must fail the bound.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from tests.parity import AbstractModel, VAECase, randomize, swap_prefixes
from vidax import manifests, registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.models.hunyuan_video1_5.vae import HunyuanVideo15VAE, HunyuanVideo15VAEConfig
from vidax import tiling

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

MANIFEST = "hunyuan_video1_5/base__vae"
FILE = "diffusion_pytorch_model.safetensors"
BATCH, FRAMES, LATENT_FRAMES = 2, 9, 3
HEIGHT, WIDTH = 32, 48                      # latent 2 x 3
NEGATIVE = {
    "encode": ("encoder.mid.attn_1.q.", "encoder.mid.attn_1.k."),
    "decode": ("decoder.up.1.block.1.conv1.", "decoder.up.1.block.1.conv2."),
}


# ------------------------------------------------------------ diffusers' conversion, as data
# Transcribed from huggingface/diffusers scripts/convert_hunyuan_video1_5_to_diffusers.py
# (``convert_hunyuan_video_15_vae_checkpoint_to_diffusers``, commit 38c42b4d), which pops each
# authors' key into its diffusers name one at a time; these are its renames (the down/upsample
# ones apply only where the checkpoint has that key, as in the script).
_RESNET_SUFFIXES = ("norm1.gamma", "conv1.conv.weight", "conv1.conv.bias", "norm2.gamma",
                    "conv2.conv.weight", "conv2.conv.bias")
_ATTENTION = (("norm.gamma", "norm.gamma"), ("q.weight", "to_q.weight"),
              ("q.bias", "to_q.bias"), ("k.weight", "to_k.weight"), ("k.bias", "to_k.bias"),
              ("v.weight", "to_v.weight"), ("v.bias", "to_v.bias"),
              ("proj_out.weight", "proj_out.weight"), ("proj_out.bias", "proj_out.bias"))
_ENDS = ("conv_in.conv.weight", "conv_in.conv.bias", "norm_out.gamma", "conv_out.conv.weight",
         "conv_out.conv.bias")


def diffusers_renames(levels: int, layers_per_block: int) -> list[tuple[str, str]]:
    """(authors' key, diffusers' key) for every rename of the script."""
    pairs = []
    for part, name, new, blocks, sampler, new_sampler in (
            ("encoder", "down", "down_blocks", layers_per_block, "downsample", "downsamplers"),
            ("decoder", "up", "up_blocks", layers_per_block + 1, "upsample", "upsamplers")):
        pairs += [(f"{part}.{end}", f"{part}.{end}") for end in _ENDS]
        for i in range(levels):
            for j in range(blocks):
                pairs += [(f"{part}.{name}.{i}.block.{j}.{s}", f"{part}.{new}.{i}.resnets.{j}.{s}")
                          for s in _RESNET_SUFFIXES]
            pairs += [(f"{part}.{name}.{i}.{sampler}.conv.conv.{p}",
                       f"{part}.{new}.{i}.{new_sampler}.0.conv.conv.{p}")
                      for p in ("weight", "bias")]
        for old, j in (("block_1", 0), ("block_2", 1)):
            pairs += [(f"{part}.mid.{old}.{s}", f"{part}.mid_block.resnets.{j}.{s}")
                      for s in _RESNET_SUFFIXES]
        pairs += [(f"{part}.mid.attn_1.{a}", f"{part}.mid_block.attentions.0.{b}")
                  for a, b in _ATTENTION]
    return pairs


def _diffusers_vae(cfg: HunyuanVideo15VAEConfig):
    from diffusers import AutoencoderKLHunyuanVideo15

    return AutoencoderKLHunyuanVideo15(
        in_channels=cfg.in_channels, out_channels=cfg.out_channels,
        latent_channels=cfg.latent_channels, block_out_channels=cfg.block_out_channels,
        layers_per_block=cfg.layers_per_block,
        spatial_compression_ratio=cfg.spatial_compression_ratio,
        temporal_compression_ratio=cfg.temporal_compression_ratio,
        downsample_match_channel=cfg.downsample_match_channel,
        upsample_match_channel=cfg.upsample_match_channel, scaling_factor=cfg.scaling_factor)


def _authors_keys(cfg: HunyuanVideo15VAEConfig, diffusers_keys) -> dict[str, str]:
    """authors' key -> diffusers' key, for the renames whose target the model has."""
    pairs = diffusers_renames(len(cfg.block_out_channels), cfg.layers_per_block)
    return {old: new for old, new in pairs if new in diffusers_keys}


# ----------------------------------------------------------------------------- full size
def test_manifest_verifies():
    report = verify_manifest(manifests.get_manifest(MANIFEST))
    assert report.ok, "\n".join(report.lines(10))
    assert report.headline() == "matched 218/218 tensors, 1,260,634,115 parameters"


@pytest.mark.slow     # builds diffusers' full-size VAE (on the meta device): seconds of CPU
def test_conversion_table_names_the_release():
    """The oracle's file layout is the release's: diffusers' renames, at the released config,
    consume exactly the manifest's 218 names with its shapes."""
    import torch

    cfg = HunyuanVideo15VAEConfig.base()
    with torch.device("meta"):
        state = _diffusers_vae(cfg).state_dict()
    names = _authors_keys(cfg, state)
    assert sorted(names.values()) == sorted(state)
    released = manifests.get_manifest(MANIFEST).tensors
    assert {k: list(state[v].shape) for k, v in names.items()} == \
        {k: list(t.shape) for k, t in released.items()}


def test_preset_is_the_released_config():
    """The release's ``vae/config.json`` (the manifest's ``config``, the authors' keys) reads
    as the preset."""
    released = manifests.get_manifest(MANIFEST).config
    spec = registry.get("hunyuan_video1_5", "vae", "original")
    assert HunyuanVideo15VAEConfig.from_dict(released) == spec.make_config("base")
    assert spec.make_config("base") == HunyuanVideo15VAEConfig.base()


def test_full_size_traces():
    """The released VAE (abstract): 9 frames at 64 x 96 -> 3 latent frames at 4 x 6 and back."""
    model = AbstractModel(lambda: HunyuanVideo15VAE(HunyuanVideo15VAEConfig.base()))
    assert model.shapes("moments", (1, 9, 64, 96, 3)).shape == (1, 3, 4, 6, 64)
    assert model.shapes("reconstruct", (1, 3, 4, 6, 32)).shape == (1, 9, 64, 96, 3)


def test_config_reader():
    """diffusers' keys read too; what the model cannot run is refused by name."""
    diffusers_keys = {"_class_name": "AutoencoderKLHunyuanVideo15", "latent_channels": 4,
                      "block_out_channels": [8, 16, 32, 64, 64], "spatial_compression_ratio": 16,
                      "temporal_compression_ratio": 4, "scaling_factor": 1.03682}
    assert HunyuanVideo15VAEConfig.from_dict(diffusers_keys) == HunyuanVideo15VAEConfig.tiny()
    for bad in ({"shift_factor": 0.1}, {"ffactor_spatial": 12}, {"frobnicate": 1},
                {"ffactor_temporal": 32}, {"latent_channels": 48},
                {"downsample_match_channel": False},
                {"block_out_channels": [128, 256, 512, 1024, 1000]}):
        with pytest.raises(VidaxError):
            HunyuanVideo15VAEConfig.from_dict(bad)
    model = nnx.eval_shape(lambda: HunyuanVideo15VAE(HunyuanVideo15VAEConfig.tiny()))
    with pytest.raises(VidaxError):
        model.encode(np.zeros((1, 8, 32, 32, 3), np.float32))
    with pytest.raises(VidaxError):
        model.decode(np.zeros((1, 2, 2, 2, 3), np.float32))


# ----------------------------------------------------------------------------- tiny parity
@pytest.fixture(scope="module")
def case(tmp_path_factory) -> VAECase:
    """A random authors'-layout file, diffusers' tiny VAE loaded from it, inputs, outputs."""
    import torch
    from safetensors.torch import load_file, save_file

    cfg = HunyuanVideo15VAEConfig.tiny()
    ref = _diffusers_vae(cfg).eval()
    # diffusers' HunyuanVideo15AttnBlock passes a [B, L, L] mask against [B, 1, L, L] scores,
    # which fails for B > 1 (the authors' AttnBlock unsqueezes it to [B, 1, L, L]; open fix:
    # huggingface/diffusers PR #13133); the samples are independent, so the reference runs
    # them one at a time (its own slicing).
    ref.enable_slicing()
    shapes = {k: v.shape for k, v in ref.state_dict().items()}
    names = _authors_keys(cfg, shapes)
    authors = {k: torch.empty(shapes[v]) for k, v in names.items()}
    randomize(sorted(authors.items()), seed=0)
    assert len(authors) == manifests.get_manifest(MANIFEST).num_tensors
    path = tmp_path_factory.mktemp("hunyuan_video1_5_vae") / FILE
    save_file(authors, path)
    ref.load_state_dict({names[k]: v for k, v in load_file(path).items()}, strict=True)
    case = VAECase.posterior("hunyuan_video1_5", path, cfg, ref,
                             video=(BATCH, FRAMES, HEIGHT, WIDTH, 3),
                             latents=(BATCH, LATENT_FRAMES, HEIGHT // 16, WIDTH // 16,
                                      cfg.latent_channels))
    assert case["mean"].shape[1] == LATENT_FRAMES and case["decoded"].shape[1] == FRAMES
    return case


def test_vae_matches_diffusers(case, record_property):
    model = case.load()
    assert isinstance(model, HunyuanVideo15VAE)
    case.check_posterior(model, "hunyuan_video1_5_vae", record_property)


@pytest.mark.parametrize("direction", ["encode", "decode"])
def test_vae_negative_control(case, direction, tmp_path, record_property):
    case.check_negative(tmp_path, direction, swap_prefixes(*NEGATIVE[direction]),
                        f"hunyuan_video1_5_vae_negative_{direction}", record_property)


@pytest.mark.slow
def test_causal_mask_matters(case, monkeypatch, record_property):
    """The parity above depends on the frame-causal mask: the same weights with the
    mid-block attention unmasked fail the bound."""
    from vidax.models.hunyuan_video1_5 import vae

    case.check_unmasked_attention_fails(vae, monkeypatch,
                                        "hunyuan_video1_5_vae_negative_unmasked",
                                        record_property)


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["encode", "decode"])
def test_vae_single_frame(case, direction, record_property):
    """One frame (an image, as the i2v condition latent is encoded) and one latent frame:
    the temporal resamplers see only their separately handled first frame."""
    x = (case["video"] if direction == "encode" else case["z"])[:1, :1]
    out = case.check_input(case.load(), direction, x,
                           f"hunyuan_video1_5_vae_{direction}_1_frame", record_property)
    assert out.shape[1] == 1


# ----------------------------------------------------------------------------- spatial tiles
def test_tile_geometry():
    """The decoder passes of a 720p 121-frame decode (31 x 45 x 80 latents): the authors'
    256 px / 0.125 tiles are 16 x 16 latents every 14, 4 x 6 of them (last row 3 tall, last
    column 10 wide), each over all 31 frames; diffusers' defaults (0.25: every 12) 4 x 7; the
    authors' small-GPU 128 px / 0.25, 8 x 14."""
    from vidax.models.hunyuan_video1_5.vae import (AUTHORS_SMALL_GPU_TILES, DIFFUSERS_TILES,
                                                   TileSettings, tile_geometry)

    g = tile_geometry((31, 45, 80, 32), tiled=True)
    assert g.count == 24 and g.latent == (31, 16, 16) and g.sample == (121, 256, 256)
    assert set(g.shapes) == {(31, h, w) for h in (16, 3) for w in (16, 10)}
    assert tile_geometry((31, 45, 80), tiled=DIFFUSERS_TILES).count == 28
    assert tile_geometry((31, 45, 80), tiled=AUTHORS_SMALL_GPU_TILES).count == 112
    assert tile_geometry((31, 45, 80)).shapes == ((31, 45, 80),)
    assert tile_geometry((31, 16, 16), tiled=True).count == 1           # one tile: untiled
    with pytest.raises(VidaxError):     # 4-pixel latent tiles every 3 would keep 56, not 48 px
        TileSettings(64, 64, 0.125).spatial()
    with pytest.raises(VidaxError):
        tile_geometry((3, 8, 8), tiled=256)


@pytest.mark.slow
def test_tiled_matches_diffusers(case, record_property):
    """``decode(tiled=...)`` against diffusers' ``tiled_decode`` (``enable_tiling`` with
    64 px tiles, 4 latent pixels, overlap 0.25 -- diffusers' default factor; the authors'
    0.125 needs 8-pixel latent tiles for whole numbers, too big here): 6 x 8 latents in 2 x 3
    overlapping tiles (latent stride 3, 16 px blends), 3 latent frames, batch 2 (decoded one
    sample at a time, as the authors' and the reference's slicing). One compiled program per
    distinct tile shape (4). Negative control: the blend removed (overlaps taken from the
    later tile alone) fails the bound."""
    import torch

    from tests.parity import assert_fails, assert_parity, to_channels_last, to_ncthw
    from vidax.models.hunyuan_video1_5 import vae
    from vidax.models.hunyuan_video1_5.vae import TileSettings, tile_geometry

    ref, cfg = case.ref, case.config
    z = np.random.default_rng(4).standard_normal(
        (BATCH, LATENT_FRAMES, 6, 8, cfg.latent_channels)).astype(np.float32)
    ref.enable_tiling(tile_sample_min_height=64, tile_sample_min_width=64,
                      tile_latent_min_height=4, tile_latent_min_width=4,
                      tile_overlap_factor=0.25)
    try:
        with torch.no_grad():
            expected = to_channels_last(ref.decode(to_ncthw(z)).sample)
    finally:
        ref.disable_tiling()
    model = case.load()
    settings = TileSettings(64, 64, 0.25)
    vae._reconstruct.clear_cache()
    calls = []
    out = model.decode(z, normalized=False, clamp=False, tiled=settings,
                       on_chunk=lambda done, total: calls.append((done, total)))
    geometry = tile_geometry(z.shape[1:], tiled=settings)
    assert calls[-1] == (12, 12) and geometry.count == 6      # per sample
    assert vae._reconstruct._cache_size() == len(geometry.shapes) == 4
    assert out.shape == expected.shape == (BATCH, 9, 96, 128, 3)
    assert_parity("hunyuan_video1_5_vae_tiled", out, expected, record_property)
    original = tiling.blend   # the tiles' cross-fade (vidax.tiling), switched off
    try:
        tiling.blend = lambda *args, **kwargs: None
        unblended = model.decode(z, normalized=False, clamp=False, tiled=settings)
    finally:
        tiling.blend = original
    assert_fails("hunyuan_video1_5_vae_negative_unblended", unblended, expected,
                 record_property)
