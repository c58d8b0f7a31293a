"""LTX-Video 0.9.8's timestep-conditioned VAE decoded in time tiles (``LTXVideoVAE.decode_tiled``)
against diffusers' ``AutoencoderKLLTXVideo._temporal_tiled_decode`` and ltx-core's
``VideoDecoder.tiled_decode``.

The decoder: the authors' tiny ``CausalVideoAutoencoder`` of tests/models/ltx_video/
test_ltx_video.py (every block kind, 4x temporal and 16x spatial strides, timestep
conditioning, random values in every tensor and statistics vector), written as a release
file's ``vae.*`` with its config in the metadata and loaded by ``vidax.load`` without a
config. The oracles (tests/reference/ltx_tiled_vae.py) call diffusers' ``_decode`` unbound
(tiling and framewise decoding on) and ltx-core's ``tiled_decode`` unbound, each around the
authors' ``vae_decode`` (normalised latents, the decode timestep), which vidax's untiled
decode already matches (test_ltx_video.py). Batch 2 with per-sample decode timesteps
(0.05, 0.2), 7 latent frames (25 frames) of 5 x 6 latent pixels:

* diffusers: 12-frame tiles every 8 (3 + 1 latent frames every 2, 4 frames blended; spatial
  tiles of 96 px: the frame is one tile): tiles of 4, 4 and 3 latent frames (the final one-frame
  tile is skipped: diffusers drops its only frame);
* ltx-core: 64 px tiles overlapping by 32, 16-frame tiles overlapping by 8 (at these strides
  4 latent pixels overlapping by 2, 4 latent frames overlapping by 2): 3 x 3 x 2 tiles of
  4 or 5 latent frames and 3 x 4 latent pixels, weighted by ltx-core's ramps.

Also recorded: diffusers' later temporal tiles lag one frame (the frames only a later tile
gives are 2-4x closer to the untiled decode's previous frame than to the same one), ltx-core's
do not -- why the pipelines decode in ltx-core's tiles (vidax.pipelines.ltx_tiles).

Bound: float32, matmul precision "highest", max |vidax - reference| <= 1e-4 x std(reference).
Negative controls, on the same compiled programs: the untiled decode, diffusers' tiles without
the temporal blend, ltx-core's tiles without ramps (a plain average), and both samples at
timestep 0.05; each must fail the bound.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import jax
import numpy as np
import pytest
from flax import nnx

from tests.models.ltx_video.test_ltx_video import VAE_CONFIG, _randomize
from tests.parity import assert_fails, assert_parity, to_channels_last, to_ncthw
from tests.reference import ltx_video as ref
from tests.reference.ltx_tiled_vae import ltx_core_tiled_reference, ltx_tiled_reference
from vidax.errors import VidaxError
from vidax.models.ltx_video import vae as ltx_vae
from vidax.models.ltx_video.vae import LTXCoreTiles, TileSettings, tile_geometry

jax.config.update("jax_default_matmul_precision", "highest")
# The authors' SymmetricPatchifier module imports torch.meshgrid without indexing=.
pytestmark = pytest.mark.filterwarnings("ignore:torch.meshgrid:UserWarning")
LATENTS = (2, 7, 5, 6, 16)
TIMESTEP = np.array([0.05, 0.2], np.float32)
DIFFUSERS = TileSettings(96, 96, 96, 96, 12, 8)
CORE = LTXCoreTiles(64, 32, 16, 8)


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> dict:
    import safetensors.torch
    import torch
    from diffusers import AutoencoderKLLTXVideo

    import vidax

    gen = torch.Generator().manual_seed(0)
    vae = ref.CausalVideoAutoencoder.from_config(copy.deepcopy(VAE_CONFIG))
    _randomize(vae.named_parameters(), gen)
    stats = {name: torch.randn(16, generator=gen) for name in ref.STATISTICS}
    stats["std-of-means"] = 0.5 + torch.rand(16, generator=gen)
    tensors = {"vae." + k: v.contiguous() for k, v in vae.state_dict().items()}
    tensors |= {f"vae.per_channel_statistics.{k}": v.contiguous() for k, v in stats.items()}
    path = tmp_path_factory.mktemp("ltx_vae_tiles") / "ltxv-vae-tiny.safetensors"
    safetensors.torch.save_file(tensors, str(path),
                                metadata={"config": json.dumps({"vae": VAE_CONFIG})})
    ref_vae = ref.CausalVideoAutoencoder.from_pretrained(path).eval()

    def decode(z, temb):
        return ref.vae_encode.vae_decode(z, ref_vae, is_video=True,
                                         vae_per_channel_normalize=True, timestep=temb)

    z = np.random.default_rng(7).standard_normal(LATENTS).astype(np.float32)
    with torch.no_grad():
        untiled = to_channels_last(decode(to_ncthw(z), torch.from_numpy(TIMESTEP)))
    return {
        "model": vidax.load("ltx_video", "vae", path), "z": z, "untiled": untiled,
        "diffusers": ltx_tiled_reference(AutoencoderKLLTXVideo, decode, z, DIFFUSERS,
                                         spatial_ratio=16, temporal_ratio=4,
                                         timestep=TIMESTEP),
        "core": ltx_core_tiled_reference(decode, z, CORE, spatial_ratio=16, temporal_ratio=4,
                                         timestep=TIMESTEP)}


def test_framewise_decode_matches_diffusers(case, record_property):
    calls = []
    out = case["model"].decode_tiled(case["z"], DIFFUSERS, framewise=True, timestep=TIMESTEP,
                                     on_chunk=lambda *a: calls.append(a))
    assert out.shape == (2, 25, 80, 96, 3) == case["diffusers"].shape
    assert_parity("ltx_video_framewise_decode", out, case["diffusers"], record_property)
    assert calls == [(1, 3), (2, 3), (3, 3)]
    g = tile_geometry(LATENTS[1:4], tiled=DIFFUSERS, framewise=True,
                      config=case["model"].config)
    assert (g.count, g.latent, g.sample, g.shapes) == (3, (4, 5, 6), (13, 80, 96),
                                                       ((4, 5, 6), (3, 5, 6)))


def test_ltx_core_tiled_decode_matches_ltx_core(case, record_property):
    calls = []
    out = case["model"].decode_tiled(case["z"], CORE, timestep=TIMESTEP,
                                     on_chunk=lambda *a: calls.append(a))
    assert_parity("ltx_video_ltx_core_tiled_decode", out, case["core"], record_property)
    assert len(calls) == 18 and calls[-1] == (18, 18)
    g = tile_geometry(LATENTS[1:4], tiled=CORE, config=case["model"].config)
    assert (g.count, g.latent, g.sample, g.shapes) == (18, (5, 3, 4), (17, 48, 64),
                                                       ((4, 3, 4), (5, 3, 4)))


def test_diffusers_later_tiles_lag_one_frame(case):
    """Why the pipelines use ltx-core's tiles: in diffusers' output the frames a later tile
    alone gives (13..24: the second tile's after its 4 blended ones, the third's) are much
    closer to the untiled decode's previous frame than to the same frame; ltx-core's are not."""
    def err(video, shift):
        return np.array([np.abs(video[:, p] - case["untiled"][:, p - shift]).mean()
                         for p in range(13, 25)])

    lag = err(case["diffusers"], 1) / err(case["diffusers"], 0)
    core = err(case["core"], 0) / err(case["core"], 1)
    print(f"frames 13..24, mean |diff| to the untiled previous frame / to the same frame: "
          f"diffusers {lag.min():.2f}..{lag.max():.2f}; ltx-core's, inverse "
          f"{core.min():.2f}..{core.max():.2f}")
    assert (lag < 0.6).all() and (core < 1).all()


def test_negative_untiled(case, record_property):
    assert_fails("ltx_video_negative_untiled_vs_framewise", case["untiled"],
                 case["diffusers"], record_property)
    assert_fails("ltx_video_negative_untiled_vs_core", case["untiled"], case["core"],
                 record_property)


def test_negative_no_temporal_blend(case, record_property):
    model = case["model"]
    graphdef, state = nnx.split(model)
    tiles = dataclasses.replace(DIFFUSERS.temporal(4), blend=0)
    run = lambda t: np.asarray(ltx_vae._decode(graphdef, state, t, TIMESTEP))  # noqa: E731
    out = ltx_vae.temporally_tiled(run, model.denormalize(jax.numpy.asarray(case["z"])), tiles)
    assert_fails("ltx_video_negative_no_temporal_blend", out, case["diffusers"],
                 record_property)


def test_negative_no_ramps(case, monkeypatch, record_property):
    monkeypatch.setattr(ltx_vae, "_ramp",
                        lambda length, *a: np.ones(length, np.float32))
    out = case["model"].decode_tiled(case["z"], CORE, timestep=TIMESTEP)
    assert_fails("ltx_video_negative_no_ramps", out, case["core"], record_property)


def test_negative_one_timestep(case, record_property):
    out = case["model"].decode_tiled(case["z"], CORE, timestep=np.array([0.05, 0.05],
                                                                         np.float32))
    assert_fails("ltx_video_negative_one_timestep", out, case["core"], record_property)


def test_bad_settings_raise(case):
    for bad in (TileSettings(frames=10, stride_frames=8), TileSettings(frames=16, stride_frames=24),
                LTXCoreTiles(64, 64, 16, 8), LTXCoreTiles(64, 32, 18, 8)):
        with pytest.raises(VidaxError, match="LTX VAE tiles"):
            case["model"].decode_tiled(case["z"], bad, framewise=True, timestep=TIMESTEP)
