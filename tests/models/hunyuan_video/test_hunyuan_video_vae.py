"""The HunyuanVideo 1.0 VAE (``vidax.models.hunyuan_video.vae``) against diffusers'
``AutoencoderKLHunyuanVideo``.

Oracle (DESIGN.md §6): diffusers' own class at a tiny config with the released structure
(4 levels, space halved at levels 0-2 and time at levels 1-2, 2 encoder / 3 decoder resnets per
level, shortcut convs where the width changes, frame-causal mid-block attention, quant convs;
widths 8-32, 4 groups, 4 latent channels: 248 tensors, as many as the release), random values
in every tensor (GroupNorm affines included), its ``state_dict()`` written with ``torch.save``
as a bare dict into ``pytorch_model.pt`` -- the released file's layout -- and read back through
``vidax.load``. The reference runs untiled (``use_tiling`` off, framewise encoding/decoding off;
at these lengths diffusers would not tile anyway): the whole clip in one pass, as vidax does.

Bound: float32, matmul precision "highest", max |vidax - diffusers| <= 1e-4 x std(diffusers)
for the posterior mean, its log-variance and the decoded video (before any clamp). Measured:
see the printed lines (``pytest -s``) and the docs' VAE section. Negative controls:
``to_q`` <-> ``to_k`` of the encoder's mid-block attention, and ``conv1`` <-> ``conv2`` of one
decoder resnet, exchanged in the saved file, must fail it; so must an unmasked mid-block
attention. ``framewise=True`` (temporal tiles) is checked against diffusers' framewise
encode/decode at 21 frames / 6 latent frames, where the one-pass output fails the bound.
``tiled=`` (spatial tiles, alone and inside temporal tiles) is checked against diffusers'
``enable_tiling()`` decode with small tiles; removing the blend must fail the bound.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.parity import (AbstractModel, VAECase, assert_fails, assert_parity, randomize,
                          swap_prefixes, to_channels_last, to_ncthw)
from vidax import manifests, registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.models.hunyuan_video.vae import HunyuanVideoVAE, HunyuanVideoVAEConfig
from vidax import tiling

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

MANIFEST = "hunyuan_video/t2v-720p__vae"
BATCH, FRAMES, LATENT_FRAMES = 2, 9, 3
HEIGHT, WIDTH = 16, 24                      # latent 2 x 3
NEGATIVE = {
    "encode": ("encoder.mid_block.attentions.0.to_q.", "encoder.mid_block.attentions.0.to_k."),
    "decode": ("decoder.up_blocks.1.resnets.1.conv1.", "decoder.up_blocks.1.resnets.1.conv2."),
}


# ----------------------------------------------------------------------------- full size
def test_manifest_verifies():
    report = verify_manifest(manifests.get_manifest(MANIFEST))
    assert report.ok, "\n".join(report.lines(10))
    assert report.headline() == "matched 248/248 tensors, 246,478,803 parameters"


def test_preset_is_the_released_config():
    """The release's ``vae/config.json`` (the manifest's ``config``, the authors' keys) reads
    as the preset."""
    released = manifests.get_manifest(MANIFEST).config
    spec = registry.get("hunyuan_video", "vae", "original")
    assert HunyuanVideoVAEConfig.from_dict(released) == spec.make_config("t2v-720p")
    assert spec.make_config("t2v-720p") == HunyuanVideoVAEConfig.t2v_720p()


def test_full_size_traces():
    """The released VAE (abstract): 9 frames at 64 x 96 -> 3 latent frames at 8 x 12 and back."""
    model = AbstractModel(lambda: HunyuanVideoVAE(HunyuanVideoVAEConfig.t2v_720p()))
    assert model.shapes("moments", (1, 9, 64, 96, 3)).shape == (1, 3, 8, 12, 32)
    assert model.shapes("reconstruct", (1, 3, 8, 12, 16)).shape == (1, 9, 64, 96, 3)


def test_config_reader():
    """diffusers' keys read too; what the model cannot run is refused by name."""
    diffusers_keys = {"_class_name": "AutoencoderKLHunyuanVideo", "act_fn": "silu",
                      "block_out_channels": [8, 16, 32, 32], "latent_channels": 4,
                      "norm_num_groups": 4, "temporal_compression_ratio": 4,
                      "down_block_types": ["HunyuanVideoDownBlock3D"] * 4,
                      "up_block_types": ["HunyuanVideoUpBlock3D"] * 4}
    assert HunyuanVideoVAEConfig.from_dict(diffusers_keys) == HunyuanVideoVAEConfig.tiny()
    for bad in ({"act_fn": "relu"}, {"time_compression_ratio": 8},
                {"down_block_types": ["DownEncoderBlock2D"] * 4}, {"frobnicate": 1},
                {"block_out_channels": [8, 16, 32, 30]}):
        with pytest.raises(VidaxError):
            HunyuanVideoVAEConfig.from_dict(bad)


# ----------------------------------------------------------------------------- tiny parity
def reference():
    """``(config, diffusers' tiny VAE)`` at vidax's tiny config, random values in every tensor,
    tiling and framewise passes off (one pass, as vidax's untiled calls)."""
    from diffusers import AutoencoderKLHunyuanVideo

    cfg = HunyuanVideoVAEConfig.tiny()
    ref = AutoencoderKLHunyuanVideo(block_out_channels=cfg.block_out_channels,
                                    latent_channels=cfg.latent_channels,
                                    norm_num_groups=cfg.norm_num_groups).eval()
    ref.disable_tiling()
    ref.use_framewise_encoding = ref.use_framewise_decoding = False
    randomize(sorted(ref.named_parameters()), seed=0)
    return cfg, ref


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> VAECase:
    """diffusers' tiny VAE saved as the release is, the inputs, and its outputs."""
    import torch

    cfg, ref = reference()
    path = tmp_path_factory.mktemp("hunyuan_video_vae") / "pytorch_model.pt"
    state = ref.state_dict()
    assert len(state) == manifests.get_manifest(MANIFEST).num_tensors
    torch.save(state, path)
    case = VAECase.posterior("hunyuan_video", path, cfg, ref,
                             video=(BATCH, FRAMES, HEIGHT, WIDTH, 3),
                             latents=(BATCH, LATENT_FRAMES, HEIGHT // 8, WIDTH // 8,
                                      cfg.latent_channels))
    assert case["mean"].shape[1] == LATENT_FRAMES and case["decoded"].shape[1] == FRAMES
    return case


def test_vae_matches_diffusers(case, record_property):
    model = case.load()
    assert isinstance(model, HunyuanVideoVAE)
    case.check_posterior(model, "hunyuan_video_vae", record_property)


@pytest.mark.slow
@pytest.mark.parametrize("direction, frames", [("encode", 1), ("encode", 6), ("decode", 1)])
def test_vae_other_lengths(case, direction, frames, record_property):
    """One frame (an image: no temporal resampling has anything to pair), a count that is not
    4k + 1 (6 frames -> 2 latent frames, as diffusers' strided causal convs give), and one
    latent frame (the upsamplers keep a lone first frame single)."""
    case.check_input(case.load(), direction, case.other_input(direction, frames),
                     f"hunyuan_video_vae_{direction}_{frames}_frames", record_property)


@pytest.mark.parametrize("direction", ["encode", "decode"])
def test_vae_negative_control(case, direction, tmp_path, record_property):
    case.check_negative(tmp_path, direction, swap_prefixes(*NEGATIVE[direction]),
                        f"hunyuan_video_vae_negative_{direction}", record_property)


@pytest.mark.slow
def test_causal_mask_matters(case, monkeypatch, record_property):
    """The parity above depends on the frame-causal mask: the same weights with the encoder's
    mid-block attention unmasked (every frame sees every frame) fail the bound."""
    from vidax.models.hunyuan_video import vae

    case.check_unmasked_attention_fails(vae, monkeypatch, "hunyuan_video_vae_negative_unmasked",
                                        record_property)


@pytest.mark.slow
def test_framewise_matches_diffusers(case, record_property):
    """``framewise=True`` against diffusers' default ``use_framewise_encoding`` / ``_decoding``
    (temporal tiles, blended): 21 frames encode as tiles of 17 and 9 frames (6 latent frames),
    6 latent frames decode as tiles of 5 and 3. The one-pass outputs differ from
    the tiled ones by far more than the bound, so this checks the tiling itself."""
    import torch

    ref, cfg = case.ref, case.config
    rng = np.random.default_rng(3)
    video = rng.uniform(-1, 1, (1, 21, HEIGHT, WIDTH, 3)).astype(np.float32)
    z = rng.standard_normal((1, 6, HEIGHT // 8, WIDTH // 8, cfg.latent_channels)
                            ).astype(np.float32)
    ref.use_framewise_encoding = ref.use_framewise_decoding = True
    try:
        with torch.no_grad():
            ref_mean = to_channels_last(ref.encode(to_ncthw(video)).latent_dist.mean)
            ref_video = to_channels_last(ref.decode(to_ncthw(z)).sample)
    finally:
        ref.use_framewise_encoding = ref.use_framewise_decoding = False
    model = case.load()
    mean = np.asarray(model.encode(video, normalize=False, framewise=True))
    decoded = model.decode(z, normalized=False, clamp=False, framewise=True)
    assert_parity("hunyuan_video_vae_framewise_mean", mean, ref_mean, record_property)
    assert_parity("hunyuan_video_vae_framewise_decode", decoded, ref_video, record_property)
    one_pass = model.decode(z, normalized=False, clamp=False)
    assert_fails("hunyuan_video_vae_negative_one_pass", one_pass, ref_video, record_property)


# ----------------------------------------------------------------------------- spatial tiles
#: Small diffusers ``enable_tiling`` sizes: latent tiles of 4 x 4 every 2 (16 px blends), and
#: temporal tiles of 4 latent frames every 2 (4-frame blends; the defaults are 5 every 3).
SMALL_TILES = {"tile_sample_min_height": 32, "tile_sample_min_width": 32,
               "tile_sample_stride_height": 16, "tile_sample_stride_width": 16,
               "tile_sample_min_num_frames": 12, "tile_sample_stride_num_frames": 8}


def test_tile_geometry():
    """The decoder passes of a 720p 129-frame request (33 x 90 x 160 latents) at diffusers'
    defaults: 11 temporal tiles (5 latent frames every 3, the last 3 long) of 4 x 7 spatial
    tiles (32 every 24; the last row 18 tall, the last column 16 wide)."""
    from vidax.models.hunyuan_video.vae import AUTHORS_TILES, TileSettings, tile_geometry

    g = tile_geometry((33, 90, 160, 16), framewise=True, tiled=True)
    assert g.count == 11 * 4 * 7 and g.latent == (5, 32, 32) and g.sample == (17, 256, 256)
    assert set(g.shapes) == {(n, h, w) for n in (5, 3) for h in (32, 18) for w in (32, 16)}
    assert tile_geometry((33, 90, 160), framewise=True).count == 11
    g = tile_geometry((33, 90, 160), framewise=True, tiled=AUTHORS_TILES)   # 17 every 12
    assert g.count == 3 * 4 * 7 and g.latent == (17, 32, 32) and g.sample == (65, 256, 256)
    assert tile_geometry((3, 20, 30), tiled=True).count == 1          # below one tile
    for bad in (TileSettings(stride_height=100), TileSettings(stride_width=264),
                TileSettings(frames=18)):
        with pytest.raises(VidaxError):
            bad.spatial()
    with pytest.raises(VidaxError):
        tile_geometry((3, 8, 8), tiled="yes")


@pytest.mark.slow
def test_tiled_matches_diffusers(case, record_property):
    """``tiled`` (with and without ``framewise``) against diffusers' ``enable_tiling()`` at
    small tiles: 4 x 6 latents in 2 x 3 overlapping tiles (and 4 latent frames in 2 temporal
    tiles, of 4 and 2: 12 decoder passes). One compiled program per distinct tile shape (8;
    their compiles are most of this test's ~25 s on 2 cores). Negative control: the blend
    removed (each tile's overlaps taken from the later tile alone) fails the bound."""
    import torch

    from vidax.models.hunyuan_video import vae
    from vidax.models.hunyuan_video.vae import TileSettings, tile_geometry

    ref, cfg = case.ref, case.config
    rng = np.random.default_rng(4)
    z = rng.standard_normal((1, 4, 4, 6, cfg.latent_channels)).astype(np.float32)
    settings = TileSettings(32, 32, 16, 16, frames=12, stride_frames=8)
    ref.enable_tiling(**SMALL_TILES)
    ref.use_framewise_decoding = True
    try:
        with torch.no_grad():
            ref_framewise = to_channels_last(ref.decode(to_ncthw(z)).sample)
            ref_tiled = to_channels_last(ref.decode(to_ncthw(z[:, :2])).sample)
    finally:
        ref.disable_tiling()
        ref.use_framewise_decoding = False
    model = case.load()
    vae._reconstruct.clear_cache()
    calls = []
    out = model.decode(z, normalized=False, clamp=False, framewise=True, tiled=settings,
                       on_chunk=lambda done, total: calls.append((done, total)))
    geometry = tile_geometry(z.shape[1:], framewise=True, tiled=settings)
    assert calls[-1] == (12, 12) and geometry.count == 12
    assert vae._reconstruct._cache_size() == len(geometry.shapes) == 8
    assert_parity("hunyuan_video_vae_tiled_framewise", out, ref_framewise, record_property)
    tiled = model.decode(z[:, :2], normalized=False, clamp=False, tiled=settings)
    assert_parity("hunyuan_video_vae_tiled", tiled, ref_tiled, record_property)
    original = tiling.blend   # the tiles' cross-fade (vidax.tiling), switched off
    try:
        tiling.blend = lambda *args, **kwargs: None
        unblended = model.decode(z[:, :2], normalized=False, clamp=False, tiled=settings)
    finally:
        tiling.blend = original
    assert_fails("hunyuan_video_vae_negative_unblended", unblended, ref_tiled, record_property)
