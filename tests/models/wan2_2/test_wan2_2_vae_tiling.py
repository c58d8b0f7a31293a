"""The Wan2.2 VAE's spatially tiled decode (``decode(tiled=...)``) against diffusers'.

Oracle (DESIGN.md §6): diffusers' ``AutoencoderKLWan`` at the Wan2.2 tiny config (z 4,
``is_residual``, 2x2 patch, stride 16), random values in every tensor, written by
``save_pretrained`` and read through ``vidax.load(layout="diffusers")``
(:func:`tests.reference.tiled_vae.wan_case`); its ``enable_tiling`` with 64 px tiles every 48
(4 latent pixels every 3) and ``decode`` of 2 latent frames at 3 x 7 latent pixels: one row of
3 tiles (2 shapes; the vertical blend is the same code, tested on Wan2.1 in
tests/models/wan2_1/test_wan2_1_vae_tiling.py), blended in the decoder's patches before
unpatchifying (diffusers divides the blend and the kept extent by ``patch_size``), each
tile's cache (and the DupUp3D first-chunk crop) started afresh and carried over its 2
frames. diffusers' final clamp is the identity during the reference call.

Bound: float32, matmul precision "highest", max |vidax - diffusers| <= 1e-4 x std(diffusers).
Measured: 6.4e-6 x std. Negative controls, on the same per-tile programs: the untiled
reference, the tiles blended over half the overlap, and the blend done on the unpatchified
pixels at twice the extent; each must fail the bound.
"""

from __future__ import annotations

import dataclasses

import jax
import pytest
from flax import nnx

from tests.parity import assert_fails, assert_parity
from tests.reference.tiled_vae import wan_case
from vidax.tiling import SpatialTiles
from vidax.tiling import spatially_tiled
from vidax.models.wan2_1 import vae as wan_vae
from vidax.models.wan2_1.vae import TileSettings, tile_geometry
from vidax.models.wan2_2.vae import Wan22VAEConfig, unpatchify

jax.config.update("jax_default_matmul_precision", "highest")
FRAMES, HEIGHT, WIDTH = 2, 3, 7      # latent; tiles of 4 every 3: one row, columns 0, 3, 6
SETTINGS = TileSettings(64, 64, 48, 48)


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> dict:
    return wan_case("wan2_2", tmp_path_factory.mktemp("wan2_2_vae_tiling"),
                    (1, FRAMES, HEIGHT, WIDTH), SETTINGS)


def _tiled(case, tiles: SpatialTiles, *, unpack_first: bool = False):
    """The tiles through vidax's own per-chunk programs (compiled by the parity test),
    blended at ``tiles``; ``unpack_first``: unpatchified before blending."""
    graphdef, state = nnx.split(case["model"])

    def run(tile):
        out = wan_vae._frames(wan_vae._decode_chunk_packed, graphdef, state,
                              jax.numpy.asarray(tile), lambda: None)
        return unpatchify(out) if unpack_first else out

    out = spatially_tiled(run, case["z"], tiles, 16 if unpack_first else 8)
    return out if unpack_first else unpatchify(out)


def test_tiled_decode_matches_diffusers(case, record_property):
    calls = []
    out = case["model"].decode(case["z"], normalized=False, clamp=False, tiled=SETTINGS,
                               on_chunk=lambda *a: calls.append(a))
    assert out.shape == (1, 4 * (FRAMES - 1) + 1, 16 * HEIGHT, 16 * WIDTH, 3)
    assert_parity("wan2_2_tiled_decode", out, case["tiled"], record_property)
    assert calls == [(n, 3 * FRAMES) for n in range(1, 3 * FRAMES + 1)]
    geometry = tile_geometry((FRAMES, HEIGHT, WIDTH), tiled=SETTINGS,
                             config=Wan22VAEConfig.tiny())
    assert (geometry.count, geometry.latent, geometry.sample) == (3 * FRAMES, (1, 3, 4),
                                                                  (4, 48, 64))


def test_negative_untiled(case, record_property):
    assert_fails("wan2_2_negative_untiled", case["untiled"], case["tiled"], record_property)


def test_negative_half_overlap(case, record_property):
    tiles = SETTINGS.spatial(16, 2)
    assert tiles.blend == (8, 8) and tiles.keep == (24, 24)   # in 2-pixel patches
    wrong = dataclasses.replace(tiles, blend=tuple(b // 2 for b in tiles.blend))
    assert_fails("wan2_2_negative_half_overlap", _tiled(case, wrong), case["tiled"],
                 record_property)


def test_negative_blend_after_unpatchify(case, record_property):
    """Blending the unpatchified pixels over 16 of them (as if there were no patch) instead
    of 8 patches of the decoder's output must fail the bound."""
    pixels = SpatialTiles((4, 4), (3, 3), (16, 16), (48, 48))
    assert_fails("wan2_2_negative_blend_unpatchified",
                 _tiled(case, pixels, unpack_first=True), case["tiled"], record_property)
