"""The Wan2.1 VAE's spatially tiled decode (``decode(tiled=...)``) against diffusers'.

Oracle (DESIGN.md §6): diffusers' ``AutoencoderKLWan`` at the Wan2.1 tiny config (z 4,
stride 8), random values in every tensor, written by ``save_pretrained`` and read through
``vidax.load(layout="diffusers")`` (:func:`tests.reference.tiled_vae.wan_case`); its
``enable_tiling`` with 32 px tiles every 24 (4 latent pixels every 3) and ``decode`` of one
latent frame at 5 x 7 latent pixels: 2 x 3 tiles of 4 distinct shapes (the last row and
column cut short), both blends, each applied in place in diffusers' order. One frame keeps
this file to 4 compiled programs; the per-tile cache over several frames is the Wan2.2
test's (the same ``ChunkedVideoVAE`` code). diffusers' final clamp is the identity during
the reference call (the unclamped numbers are compared); vidax's own clamp is checked
separately.

Bound: float32, matmul precision "highest", max |vidax - diffusers| <= 1e-4 x std(diffusers).
Measured: 8.4e-6 x std. Negative controls, on the same per-tile programs (nothing
recompiled): the untiled reference (6.3 x std away) and the
tiles blended over half the overlap (5.3 x std); each must fail the bound.

Also: the chunks counted by ``tile_geometry`` and reported by ``on_chunk``, bad settings,
and a tile's compiled chunk program needing less temporary memory than the whole frame's
(``memory_analysis().temp_size_in_bytes``: a 32 x 32 px tile vs a 256 x 256 frame).
The Wan2.2 VAE's (patchified) tiles: tests/models/wan2_2/test_wan2_2_vae_tiling.py.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from tests.parity import assert_fails, assert_parity
from tests.reference.tiled_vae import wan_case
from vidax.errors import VidaxError
from vidax.tiling import spatially_tiled
from vidax.models.wan2_1 import vae as wan_vae
from vidax.models.wan2_1.vae import TileSettings, WanVAE, WanVAEConfig, tile_geometry

jax.config.update("jax_default_matmul_precision", "highest")
FRAMES, HEIGHT, WIDTH = 1, 5, 7      # latent; tiles of 4 every 3: rows 0, 3; columns 0, 3, 6
SETTINGS = TileSettings(32, 32, 24, 24)


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> dict:
    return wan_case("wan2_1", tmp_path_factory.mktemp("wan2_1_vae_tiling"),
                    (1, FRAMES, HEIGHT, WIDTH), SETTINGS)


@pytest.fixture(scope="module")
def decoded(case) -> dict:
    """vidax's unclamped tiled decode and the ``on_chunk`` calls it made."""
    calls = []
    out = case["model"].decode(case["z"], normalized=False, clamp=False, tiled=SETTINGS,
                               on_chunk=lambda *a: calls.append(a))
    return {"video": out, "calls": calls}


def tile_run(model):
    """One tile's decode by vidax's own per-chunk program (the one ``decode`` compiled):
    its decoder output before unpatchifying, on the host."""
    graphdef, state = nnx.split(model)
    return lambda tile: wan_vae._frames(wan_vae._decode_chunk_packed, graphdef, state,
                                        jax.numpy.asarray(tile), lambda: None)


# ----------------------------------------------------------------------------- parity
def test_tiled_decode_matches_diffusers(case, decoded, record_property):
    assert decoded["video"].shape == (1, 4 * (FRAMES - 1) + 1, 8 * HEIGHT, 8 * WIDTH, 3)
    assert_parity("wan2_1_tiled_decode", decoded["video"], case["tiled"], record_property)


def test_clamped(case):
    """``clamp=True`` is ``np.clip`` of the unclamped tiled decode (latents scaled up so that
    some values leave [-1, 1])."""
    z, model = 8 * case["z"], case["model"]
    unclamped = model.decode(z, normalized=False, clamp=False, tiled=SETTINGS)
    assert np.abs(unclamped).max() > 1
    np.testing.assert_array_equal(model.decode(z, normalized=False, tiled=SETTINGS),
                                  np.clip(unclamped, -1, 1))


def test_chunks_counted(decoded):
    """6 tiles x 1 latent frame, reported in order; ``tile_geometry`` agrees; at
    diffusers' default 256 px tiles this latent is one tile (not tiled)."""
    total = 6 * FRAMES
    assert decoded["calls"] == [(n, total) for n in range(1, total + 1)]
    cfg = WanVAEConfig.tiny()
    geometry = tile_geometry((FRAMES, HEIGHT, WIDTH), tiled=SETTINGS, config=cfg)
    assert (geometry.count, geometry.latent, geometry.sample) == (total, (1, 4, 4),
                                                                  (4, 32, 32))
    # (``sample``: a later chunk's 4 frames, the largest a chunk makes)
    assert sorted(geometry.shapes) == [(1, 2, 1), (1, 2, 4), (1, 4, 1), (1, 4, 4)]
    for tiled in (False, True):
        untiled = tile_geometry((FRAMES, HEIGHT, WIDTH), tiled=tiled, config=cfg)
        assert (untiled.count, untiled.latent) == (FRAMES, (1, HEIGHT, WIDTH))


# ----------------------------------------------------------------------------- negative controls
def test_negative_untiled(case, record_property):
    """The untiled decode differs from the tiled one: the comparison sees the tiling."""
    assert_fails("wan2_1_negative_untiled", case["untiled"], case["tiled"], record_property)


def test_negative_half_overlap(case, record_property):
    """The same tiles blended over half the overlap must fail the bound."""
    tiles = SETTINGS.spatial(8)
    wrong = dataclasses.replace(tiles, blend=tuple(b // 2 for b in tiles.blend))
    out = spatially_tiled(tile_run(case["model"]), case["z"], wrong, 8)
    assert_fails("wan2_1_negative_half_overlap", out, case["tiled"], record_property)


# ----------------------------------------------------------------------------- settings, memory
def test_bad_settings_raise():
    model = nnx.eval_shape(lambda: WanVAE(WanVAEConfig.tiny()))
    z = np.zeros((1, 1, 5, 7, 4), np.float32)
    for bad in (TileSettings(36, 32, 24, 24), TileSettings(32, 32, 40, 24),
                TileSettings(32, 32, 0, 24)):
        with pytest.raises(VidaxError, match="multiples of 8"):
            model.decode(z, tiled=bad)
    with pytest.raises(VidaxError, match="TileSettings"):
        model.decode(z, tiled=256)


def test_tile_needs_less_temp_memory():
    """The later-chunk program (4 frames out) over one 32 x 32 px tile needs less temporary
    memory than the same program over a 256 x 256 frame (XLA's own count; 64x the pixels)."""
    cfg = WanVAEConfig.tiny()
    graphdef, state = nnx.split(nnx.eval_shape(lambda: WanVAE(cfg)))

    def temp_bytes(h, w):
        z = jax.ShapeDtypeStruct((1, 1, h, w, cfg.z_dim), np.float32)
        cache = jax.eval_shape(lambda s, x: wan_vae._decode_chunk(graphdef, s, x, None)[1],
                               state, z)
        compiled = wan_vae._decode_chunk.lower(graphdef, state, z, cache).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    tile, frame = temp_bytes(4, 4), temp_bytes(32, 32)
    print(f"temp bytes: tile {tile}, frame {frame} ({frame / tile:.1f}x)")
    assert tile * 16 < frame
