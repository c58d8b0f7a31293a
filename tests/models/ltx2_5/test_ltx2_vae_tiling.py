"""The LTX-2 video VAE's spatially tiled decode (``LTXVideoVAE.decode_tiled``) against
diffusers' ``AutoencoderKLLTX2Video.tiled_decode``.

vidax reads the LTX-2 VAE in ltx-core's layout, not diffusers', so the oracle is diffusers'
``tiled_decode`` -- its own code, called unbound with its own ``blend_v`` / ``blend_h`` --
around ltx-core's tiny ``VideoDecoder`` (the 2.3 / 2.5 stack of
tests/models/ltx2_5/test_ltx2_vae.py, random values in every tensor, written as a release
file and rebuilt through ltx-core's key filters) as the per-tile decoder, the one vidax's
untiled decode already matches (:func:`tests.reference.tiled_vae.ltx2_tiled_reference`).
Tiles of 64 px every 48 (the spatial stride is 16 here: 4 latent pixels every 3) over 3
latent frames at 5 x 7 latent pixels: 2 x 3 tiles of 4 shapes, both blends, each tile over
every frame.

Bound: float32, matmul precision "highest", max |vidax - reference| <= 1e-4 x std(reference).
Measured: 5.9e-6 x std.
Negative controls, on the same compiled per-tile programs: the untiled decode, and the tiles
blended over half the overlap; each must fail the bound.
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
from tests.reference.tiled_vae import ltx2_tiled_reference
from vidax.errors import VidaxError
from vidax.tiling import spatially_tiled
from vidax.models.ltx_video import vae as ltx_vae
from vidax.models.ltx_video.vae import TileSettings, tile_geometry

jax.config.update("jax_default_matmul_precision", "highest")
LATENTS = (1, 3, 5, 7, 8)            # tiles of 4 every 3: rows 0, 3; columns 0, 3, 6
SETTINGS = TileSettings(64, 64, 48, 48)


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> dict:
    import torch

    import vidax

    path = _write_release("2.3", tmp_path_factory.mktemp("ltx2_tiling") / "vae.safetensors")
    _, decoder = _references(path)
    _, drawn = draw_inputs(5, {}, {"z": LATENTS})
    z = drawn["z"]
    tiled = ltx2_tiled_reference(decoder, z, SETTINGS, 16)
    with torch.no_grad():
        untiled = to_channels_last(decoder(to_ncthw(z)))
    return {"model": vidax.load("ltx2_5", "vae", path), "z": z, "tiled": tiled,
            "untiled": untiled}


def test_tiled_decode_matches_diffusers_tiling(case, record_property):
    calls = []
    out = case["model"].decode_tiled(case["z"], SETTINGS, on_chunk=lambda *a: calls.append(a))
    assert out.shape == (1, 9, 80, 112, 3) == case["tiled"].shape
    assert_parity("ltx2_tiled_decode", out, case["tiled"], record_property)
    assert calls == [(n, 6) for n in range(1, 7)]
    g = tile_geometry(LATENTS[1:4], tiled=SETTINGS, config=case["model"].config)
    assert (g.count, g.latent, g.sample) == (6, (3, 4, 4), (9, 64, 64))
    assert sorted(g.shapes) == [(3, 2, 1), (3, 2, 4), (3, 4, 1), (3, 4, 4)]


def test_negative_untiled(case, record_property):
    assert_fails("ltx2_negative_untiled", case["untiled"], case["tiled"], record_property)


def test_negative_half_overlap(case, record_property):
    model = case["model"]
    graphdef, state = nnx.split(model)
    tiles = SETTINGS.spatial(16)
    wrong = dataclasses.replace(tiles, blend=(8, 8))
    run = lambda t: np.asarray(ltx_vae._decode(graphdef, state, t, None))  # noqa: E731
    out = spatially_tiled(run, model.denormalize(jax.numpy.asarray(case["z"])), wrong, 16)
    assert_fails("ltx2_negative_half_overlap", out, case["tiled"], record_property)


def test_bad_settings_raise(case):
    for bad in (TileSettings(60, 64, 48, 48), TileSettings(64, 64, 80, 48), 3):
        with pytest.raises(VidaxError, match="LTX VAE"):
            case["model"].decode_tiled(case["z"], bad)
