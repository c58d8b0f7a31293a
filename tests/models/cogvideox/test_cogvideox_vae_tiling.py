"""The CogVideoX VAE's spatially tiled decode (``decode(tiled=...)``) against diffusers'.

Oracle (DESIGN.md §6): diffusers' ``AutoencoderKLCogVideoX`` at the tiny config (the released
structure, widths 8-16, stride 8), random values in every tensor, written by
``save_pretrained`` and read through ``vidax.load`` (:func:`tests.reference.tiled_vae.
cogvideox_case`); its ``enable_tiling`` with 48 x 40 px tiles and the default overlap factors
1/6 and 1/5 (latent tiles 6 x 5 every 5 x 4, blends of 8 px: the defaults' proportions at
1/5 the size) and ``decode`` of 3 latent frames (one frame batch: 9 frames) at 7 x 6 latent
pixels: 2 x 2 tiles of 4 distinct shapes, both blends, every GroupNorm over its tile. One
frame batch keeps this file to 4 compiled programs; the batches and their carried cache are
the untiled path's own code (tests/models/cogvideox/test_cogvideox_vae.py: 3 + 2 + 2).

Bound: float32, matmul precision "highest", max |vidax - diffusers| <= 1e-4 x std(diffusers)
(diffusers' ``decode`` does not clamp). Measured: 1.05e-5 x std. Negative controls, on the
same per-tile programs: the untiled reference (tiling moves the numbers by ~4 x std) and the
tiles blended over half the overlap; each must fail the bound.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from tests.parity import assert_fails, assert_parity
from tests.reference.tiled_vae import cogvideox_case
from vidax.errors import VidaxError
from vidax.models.cogvideox import vae as cog_vae
from vidax.models.cogvideox.vae import (CogVideoXVAE, CogVideoXVAEConfig, TileSettings,
                                        tile_geometry)
from vidax.tiling import spatially_tiled

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
FRAMES, HEIGHT, WIDTH = 3, 7, 6      # latent; rows 0, 5 (6, 2); columns 0, 4 (5, 2)
SETTINGS = TileSettings(48, 40, 1 / 6, 1 / 5)


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> dict:
    return cogvideox_case(tmp_path_factory.mktemp("cogvideox_vae_tiling"),
                          (1, FRAMES, HEIGHT, WIDTH), SETTINGS)


def test_tiled_decode_matches_diffusers(case, record_property):
    calls = []
    out = case["model"].decode(case["z"], normalized=False, clamp=False, tiled=SETTINGS,
                               on_chunk=lambda *a: calls.append(a))
    assert out.shape == (1, 9, 8 * HEIGHT, 8 * WIDTH, 3)
    assert_parity("cogvideox_tiled_decode", out, case["tiled"], record_property)
    assert calls == [(n, 4) for n in range(1, 5)]
    clamped = case["model"].decode(case["z"], normalized=False, tiled=SETTINGS)
    np.testing.assert_array_equal(clamped, np.clip(out, -1, 1))


def test_negative_untiled(case, record_property):
    assert_fails("cogvideox_negative_untiled", case["untiled"], case["tiled"], record_property)


def test_negative_half_overlap(case, record_property):
    """The same tiles (vidax's compiled programs) blended over half the overlap."""
    graphdef, state = nnx.split(case["model"])
    tiles = SETTINGS.spatial(8)
    wrong = dataclasses.replace(tiles, blend=(4, 4))
    out = spatially_tiled(lambda t: cog_vae._frames(graphdef, state, jax.numpy.asarray(t),
                                                    lambda: None), case["z"], wrong, 8)
    assert_fails("cogvideox_negative_half_overlap", out, case["tiled"], record_property)


def test_settings_and_geometry():
    """The release defaults are diffusers' (240 x 360 px: latent 30 x 45 every 25 x 36,
    blends 40 x 72); a 720 x 480 frame (60 x 90 latent) makes 3 x 3 tiles; settings that do
    not add up are refused."""
    assert TileSettings().spatial(8) == cog_vae.SpatialTiles((30, 45), (25, 36), (40, 72),
                                                             (200, 288))
    cfg = CogVideoXVAEConfig.cogvideox_5b()
    g = tile_geometry((13, 60, 90), tiled=True, config=cfg)
    assert (g.count, g.latent, g.sample) == (9 * 6, (3, 30, 45), (9, 240, 360))
    whole = tile_geometry((13, 60, 90), config=cfg)
    assert (whole.count, whole.latent, whole.sample) == (6, (3, 60, 90), (9, 480, 720))
    assert tile_geometry((4, 60, 90), config=cfg).sample == (8, 480, 720)
    g = tile_geometry((FRAMES, HEIGHT, WIDTH), tiled=SETTINGS, config=CogVideoXVAEConfig.tiny())
    assert sorted(g.shapes) == [(3, 2, 2), (3, 2, 5), (3, 6, 2), (3, 6, 5)]
    model = nnx.eval_shape(lambda: CogVideoXVAE(CogVideoXVAEConfig.tiny()))
    z = np.zeros((1, 1, 7, 6, 4), np.float32)
    for bad in (TileSettings(44, 40), TileSettings(48, 40, 0.3, 0.2), "yes"):
        with pytest.raises(VidaxError, match="CogVideoX VAE"):
            model.decode(z, tiled=bad)
