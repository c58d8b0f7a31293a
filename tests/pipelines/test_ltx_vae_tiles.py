"""The LTX pipelines' VAE decode rule (:mod:`vidax.pipelines.ltx_tiles`): ltx-core's
``TilingConfig.default()`` tiles wherever they split the latent, the whole clip in one pass
where they do not.

* The tiles at full size against ltx-core's own ``VideoDecoder._prepare_tiles`` (run on a
  meta tensor: shapes only): every tile's latent and output slices and its three 1-D ramps,
  for the default requests' latents and odd ones (the numbers of the tiled decode itself:
  tests/models/*/test_*_vae_temporal_tiling.py).
* ``vae_geometry`` of each LTX release's default request (built without files, as
  scripts/memory_table.py does) reports one tile, and its decode estimate is a few GiB.
* The tiny VAEs at the pipeline tests' sizes are one tile (they decode as before).
* Each pipeline's decode takes the tiled path, with the decode timestep for LTX-Video, where
  the tiles split the latent (tiles made small here), and the jitted one-pass decode where they
  do not.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from vidax.models.ltx2_5.config import LTX2VideoVAEConfig
from vidax.models.ltx_video.vae import (LTXCoreTiles, LTXVideoVAE, LTXVideoVAEConfig,
                                        ltx_core_tiles)
from vidax.pipelines import ltx_tiles, memory

ROOT = Path(__file__).resolve().parents[2]
SMALL = LTXCoreTiles(64, 32, 16, 8)      # at the tiny VAEs' strides: 4 latent pixels / frames


@pytest.mark.parametrize("shape", [(16, 28, 50), (16, 22, 38), (16, 16, 24), (16, 32, 48),
                                   (31, 17, 30), (9, 16, 16), (5, 8, 8), (3, 40, 3)])
def test_tiles_are_ltx_cores(shape):
    import torch
    from ltx_core.model.video_vae import TilingConfig, VideoDecoder
    from ltx_core.types import SpatioTemporalScaleFactors

    this = SimpleNamespace(video_downscale_factors=SpatioTemporalScaleFactors.default())
    theirs = VideoDecoder._prepare_tiles(this, torch.empty((1, 128, *shape), device="meta"),
                                         TilingConfig.default())
    ours = ltx_core_tiles(shape, ltx_tiles.TILES, 32, 8)
    assert len(ours) == len(theirs)
    for (latent, where, ramps), tile in zip(ours, theirs, strict=True):
        assert tuple(tile.in_coords[2:]) == latent
        assert tuple(tile.out_coords[2:]) == where
        for ramp, mask in zip(ramps, tile.masks_1d[2:], strict=True):
            np.testing.assert_allclose(ramp, mask.numpy(), rtol=0, atol=1e-7)


def _memory_table():
    spec = importlib.util.spec_from_file_location("memory_table",
                                                  ROOT / "scripts" / "memory_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_default_requests_decode_one_tile_at_a_time():
    mt = _memory_table()
    expected = {"LTX-Video 0.9.8 2B distilled": ((1600, 896), (65, 288, 512), 48),
                "LTX-Video 0.9.8 13B dev": ((1600, 896), (65, 288, 512), 48),
                "LTX-2.3 22B dev": ((768, 512), (65, 352, 512), 12),
                "LTX-2.3 22B distilled": ((1536, 1024), (65, 352, 512), 48)}
    for row in mt.ROWS:
        if row.label not in expected:
            continue
        pipe = mt._module(row.family).Pipeline(mt.release(row), precision="bf16", **row.options)
        g = pipe.vae_geometry(pipe.resolve(pipe.request("a prompt")))
        size, tile, count = expected.pop(row.label)
        assert (g.frame_size, (g.frames, g.height, g.width), g.chunks, g.total_frames) == (
            size, tile, count, 121), row.label
        assert memory.vae_decode(g, "gpu").bytes < 6 * 2**30, row.label
    assert not expected


def test_tiny_sizes_are_one_tile():
    for cfg in (LTXVideoVAEConfig.tiny(), LTX2VideoVAEConfig.tiny()):
        assert ltx_tiles.tiles_for(cfg, (16, 32, 32)) is None
        assert ltx_tiles.tiles_for(cfg, (17, 4, 4)) is ltx_tiles.TILES
        assert ltx_tiles.tiles_for(cfg, (2, 4, 33)) is ltx_tiles.TILES


def _random_vae(config) -> LTXVideoVAE:
    """Random values put into the abstract tree (an eager init takes ~20 s)."""
    graphdef, state = nnx.split(nnx.eval_shape(lambda: LTXVideoVAE(config)))
    rng = np.random.default_rng(1)
    return nnx.merge(graphdef, jax.tree.map(
        lambda a: (0.2 * rng.standard_normal(a.shape)).astype(a.dtype), state))


def _spy(monkeypatch, calls):
    original = LTXVideoVAE.decode_tiled
    monkeypatch.setattr(LTXVideoVAE, "decode_tiled",
                        lambda self, *a, **k: calls.append((a, k)) or original(self, *a, **k))


def test_ltx2_decode_tiles_where_they_split(monkeypatch):
    from vidax.pipelines import ltx2_5

    vae, calls = _random_vae(LTX2VideoVAEConfig.tiny()), []
    chunks = []

    @contextlib.contextmanager
    def phase(*a, **k):
        yield lambda n=1, total=None: chunks.append(total)

    stub = SimpleNamespace(
        vae=vae, check_finite=lambda a, what: a, _decoder=lambda choice: "vae",
        _matmul_precision=contextlib.nullcontext, _place=jnp.asarray, to_uint8=lambda v: v,
        _progress=SimpleNamespace(phase=phase))
    latents = np.random.default_rng(0).standard_normal(
        (3, 5, 6, vae.config.latent_channels)).astype(np.float32)
    _spy(monkeypatch, calls)
    whole = ltx2_5.Pipeline.decode(stub, latents)
    assert not calls and chunks == [1]
    np.testing.assert_array_equal(whole, np.asarray(ltx2_5._decode_video(vae, latents[None]))[0])
    monkeypatch.setattr(ltx_tiles, "TILES", SMALL)
    tiled = ltx2_5.Pipeline.decode(stub, latents)
    assert calls[0][0][1] is SMALL and chunks[1:] == [6] * 6
    np.testing.assert_array_equal(tiled, vae.decode_tiled(latents[None], SMALL)[0])
    assert np.abs(tiled - whole).max() > 1e-3


def test_ltx_video_decode_tiles_with_the_timestep(monkeypatch):
    from vidax.pipelines import ltx_video

    vae, calls = _random_vae(LTXVideoVAEConfig.tiny()), []
    assert vae.config.timestep_conditioning
    stub = SimpleNamespace(vae=vae)
    latents = jnp.asarray(np.random.default_rng(0).standard_normal(
        (1, 3, 5, 6, vae.config.latent_channels)).astype(np.float32))
    _spy(monkeypatch, calls)
    whole = np.asarray(ltx_video.Pipeline.decode_latents(stub, latents, 0.05))
    assert not calls
    np.testing.assert_array_equal(whole, ltx_video._decode_jit(vae, latents, jnp.float32(0.05)))
    monkeypatch.setattr(ltx_tiles, "TILES", SMALL)
    tiled = ltx_video.Pipeline.decode_latents(stub, latents, 0.05)
    assert calls[0][0][1] is SMALL and float(calls[0][1]["timestep"]) == np.float32(0.05)
    np.testing.assert_array_equal(tiled, vae.decode_tiled(latents, SMALL, timestep=0.05))
    assert np.abs(tiled - whole).max() > 1e-3
    other = vae.decode_tiled(latents, SMALL, timestep=0.5)
    assert np.abs(other - tiled).max() > 1e-3
