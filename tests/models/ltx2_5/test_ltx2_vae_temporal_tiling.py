"""The LTX-2 video VAE decoded in time and space tiles (``LTXVideoVAE.decode_tiled``) against
diffusers' ``AutoencoderKLLTX2Video`` (``_temporal_tiled_decode`` composed with
``tiled_decode``) and ltx-core's own ``VideoDecoder.tiled_decode`` (what ltx-pipelines decode
with).

The decoder: ltx-core's tiny ``VideoDecoder`` of the 2.3 / 2.5 stack
(tests/models/ltx2_5/test_ltx2_vae.py: random values in every tensor, written as a release
file's ``vae.*`` and rebuilt through ltx-core's key filters), which vidax's untiled decode
already matches; vidax loads the file. Oracles (tests/reference/ltx_tiled_vae.py):

* diffusers' ``_decode`` called unbound with tiling and framewise decoding on, around that
  decoder: 12-frame tiles every 8 (3 + 1 latent frames every 2, 4 frames blended) and 64 px
  tiles every 48 (4 latent pixels every 3) over 5 x 3 x 6 latents: temporal tiles of 4 and 3
  latent frames (the final one-frame tile is skipped: diffusers drops its only frame), each in
  two spatial tiles of 3 x 4 and 3 x 3 latent pixels -- both loops and their composition;
* ltx-core's ``tiled_decode`` itself, bound to that decoder (its hard-coded 8 / 32 scale
  factors set to the tiny VAE's 4 / 16), at ``TilingConfig(SpatialTilingConfig(64, 32),
  TemporalTilingConfig(16, 8))`` over 7 x 5 x 6 latents: 3 x 3 x 2 tiles, ramps in all three
  axes.

Bound: float32, matmul precision "highest", max |vidax - reference| <= 1e-4 x std(reference).
Negative controls, on the same compiled programs: the untiled decode against each, diffusers'
tiles without the temporal blend, ltx-core's without ramps; each must fail the bound.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from tests.models.ltx2_5.test_ltx2_vae import _references, _write_release
from tests.parity import (assert_fails, assert_parity, draw_inputs, to_channels_last,
                          to_ncthw)
from tests.reference.ltx_tiled_vae import ltx_core_tiled_reference, ltx_tiled_reference
from vidax.tiling import spatially_tiled
from vidax.models.ltx_video import vae as ltx_vae
from vidax.models.ltx_video.vae import LTXCoreTiles, TileSettings, tile_geometry

jax.config.update("jax_default_matmul_precision", "highest")
DIFFUSERS_LATENTS = (1, 5, 3, 6)
CORE_LATENTS = (1, 7, 5, 6)
DIFFUSERS = TileSettings(64, 64, 48, 48, 12, 8)
CORE = LTXCoreTiles(64, 32, 16, 8)


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> dict:
    import torch
    from diffusers import AutoencoderKLLTX2Video

    import vidax

    path = _write_release("2.3", tmp_path_factory.mktemp("ltx2_tiles") / "vae.safetensors")
    _, decoder = _references(path)
    _, drawn = draw_inputs(6, {}, {"z": (*DIFFUSERS_LATENTS, 8), "z2": (*CORE_LATENTS, 8)})
    z, z2 = drawn["z"], drawn["z2"]
    with torch.no_grad():
        untiled = to_channels_last(decoder(to_ncthw(z)))
        untiled2 = to_channels_last(decoder(to_ncthw(z2)))
    return {
        "model": vidax.load("ltx2_5", "vae", path), "z": z, "z2": z2, "untiled": untiled,
        "untiled2": untiled2,
        "diffusers": ltx_tiled_reference(AutoencoderKLLTX2Video,
                                         lambda t, temb: decoder(t), z, DIFFUSERS,
                                         spatial_ratio=16, temporal_ratio=4),
        "core": ltx_core_tiled_reference(decoder, z2, CORE, spatial_ratio=16,
                                         temporal_ratio=4)}


def test_time_and_space_tiles_match_diffusers(case, record_property):
    calls = []
    out = case["model"].decode_tiled(case["z"], DIFFUSERS, framewise=True,
                                     on_chunk=lambda *a: calls.append(a))
    assert out.shape == (1, 17, 48, 96, 3) == case["diffusers"].shape
    assert_parity("ltx2_time_and_space_tiles", out, case["diffusers"], record_property)
    assert calls == [(n, 4) for n in range(1, 5)]
    g = tile_geometry(DIFFUSERS_LATENTS[1:], tiled=DIFFUSERS, framewise=True,
                      config=case["model"].config)
    assert (g.count, g.latent, g.sample) == (4, (4, 3, 4), (13, 48, 64))
    assert g.shapes == ((4, 3, 4), (4, 3, 3), (3, 3, 4), (3, 3, 3))


def test_ltx_core_tiles_match_ltx_core(case, record_property):
    out = case["model"].decode_tiled(case["z2"], CORE)
    assert out.shape == (1, 25, 80, 96, 3) == case["core"].shape
    assert_parity("ltx2_ltx_core_tiles", out, case["core"], record_property)
    g = tile_geometry(CORE_LATENTS[1:], tiled=CORE, config=case["model"].config)
    assert (g.count, g.latent, g.sample) == (18, (5, 3, 4), (17, 48, 64))


def test_negative_untiled(case, record_property):
    assert_fails("ltx2_negative_untiled_vs_diffusers", case["untiled"], case["diffusers"],
                 record_property)
    assert_fails("ltx2_negative_untiled_vs_core", case["untiled2"], case["core"],
                 record_property)


def test_negative_no_temporal_blend(case, record_property):
    model = case["model"]
    graphdef, state = nnx.split(model)
    run = lambda t: np.asarray(ltx_vae._decode(graphdef, state, t, None))  # noqa: E731
    spatial = DIFFUSERS.spatial(16)
    out = ltx_vae.temporally_tiled(lambda t: spatially_tiled(run, t, spatial, 16),
                                   model.denormalize(jax.numpy.asarray(case["z"])),
                                   dataclasses.replace(DIFFUSERS.temporal(4), blend=0))
    assert_fails("ltx2_negative_no_temporal_blend", out, case["diffusers"], record_property)


def test_negative_no_ramps(case, monkeypatch, record_property):
    monkeypatch.setattr(ltx_vae, "_ramp", lambda length, *a: np.ones(length, np.float32))
    out = case["model"].decode_tiled(case["z2"], CORE)
    assert_fails("ltx2_negative_no_ramps", out, case["core"], record_property)
