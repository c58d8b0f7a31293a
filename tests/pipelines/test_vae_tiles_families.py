"""When the Wan-VAE families (Wan2.1, Wan2.2, Cosmos-Predict2.5, Cosmos3) and CogVideoX decode
in spatial tiles, and what their memory estimate then counts.

The rules: Wan (``vidax.pipelines.wan2_1.vae_tiles``) decodes whole frames up to 1280 x 720
(every released size, as the authors and diffusers' pipelines decode) and in diffusers'
``enable_tiling()`` tiles above; CogVideoX (``vidax.pipelines.cogvideox.VAE_TILES``) always
has tiling on, as its authors' ``cli_demo.py`` (its untiled float32 decode needs tens of GiB
at the released sizes). Checked on stub VAEs and abstract configs: no weights, nothing
compiled.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from vidax.models.cogvideox.vae import CogVideoXVAEConfig
from vidax.models.cogvideox.vae import TileSettings as CogTiles
from vidax.models.wan2_1.vae import TileSettings, WanVAEConfig
from vidax.models.wan2_2.vae import Wan22VAEConfig
from vidax.pipelines import cogvideox, cosmos2_5, cosmos3, memory, wan2_1


class StubVAE:
    """Records the ``tiled`` each decode asks for."""

    def __init__(self, config):
        self.config, self.calls = config, []

    def decode(self, latents, *, tiled=False, on_chunk=None, **options):
        self.calls.append(tiled)
        return latents


def _request(size, frames, stride, channels):
    width, height = size
    return SimpleNamespace(size=size, frames=frames, latent_shape=(
        (frames - 1) // 4 + 1, height // stride, width // stride, channels))


@pytest.mark.parametrize("size, tiled", [((832, 480), False), ((1280, 720), False),
                                         ((720, 1280), False), ((1280, 704), False),
                                         ((1280, 736), True), ((1920, 1088), True)])
def test_wan_rule(size, tiled):
    assert (wan2_1.vae_tiles(size) == TileSettings()) is tiled
    assert tiled or wan2_1.vae_tiles(size) is None


@pytest.mark.parametrize("cfg", [WanVAEConfig.wan2_1(), Wan22VAEConfig()], ids=["2.1", "2.2"])
def test_wan_families_decode_and_estimate_tiles(cfg):
    """Each Wan-VAE pipeline's ``decode_latents`` passes the rule's tiles; its
    ``vae_geometry`` is unchanged up to 720p and reports the largest tile above, whose
    activations (a 256 px tile) are far below the whole 1080p frame's."""
    s = cfg.spatial_stride
    release = SimpleNamespace(configs={"vae": cfg})
    stubs = {"wan": SimpleNamespace(vae=StubVAE(cfg), component_config=lambda c: cfg),
             "cosmos2_5": SimpleNamespace(vae=StubVAE(cfg), release=release),
             "cosmos3": SimpleNamespace(vae=StubVAE(cfg), release=release)}
    classes = {"wan": wan2_1.WanPipeline, "cosmos2_5": cosmos2_5.Pipeline,
               "cosmos3": cosmos3.Pipeline}
    for name, cls in classes.items():
        stub = stubs[name]
        for (width, height) in ((1280, 720), (1920, 1088)):
            cls.decode_latents(stub, np.zeros((1, 2, height // s, width // s, cfg.z_dim)))
        assert stub.vae.calls == [False, TileSettings()], name
        small, large = _request((1280, 720), 81, s, cfg.z_dim), _request((1920, 1088), 81, s,
                                                                           cfg.z_dim)
        assert cls.vae_geometry(stub, small) == memory.wan_vae(cfg, small), name
        tiled, whole = cls.vae_geometry(stub, large), memory.wan_vae(cfg, large)
        rows, cols = len(range(0, 1088 // s, 192 // s)), len(range(0, 1920 // s, 192 // s))
        assert (tiled.height, tiled.width, tiled.frame_size) == (256, 256, (1920, 1088))
        assert tiled.chunks == rows * cols * whole.chunks
        assert tiled.attention == (1, (256 // s) ** 2, whole.attention[2])
        tiled_bytes, whole_bytes = (memory.vae_decode(g, "gpu").bytes for g in (tiled, whole))
        assert tiled_bytes * 10 < whole_bytes, name


def test_cogvideox_tiles_as_the_authors_demo():
    """Always ``enable_tiling()``'s tiles (the VAE tiles where the frame is larger than
    one); ``vae_geometry`` counts a whole frame of at most one tile (the tests' sizes) and
    the largest tile otherwise, the released sizes included."""
    assert cogvideox.VAE_TILES == CogTiles()
    cfg = CogVideoXVAEConfig.cogvideox1_5_5b()
    stub = SimpleNamespace(vae=StubVAE(cfg), release=SimpleNamespace(configs={"vae": cfg}))
    cogvideox.Pipeline.decode_latents(stub, np.zeros((1, 21, 96, 170, 16)))
    assert stub.vae.calls == [CogTiles()]
    small = cogvideox.Pipeline.vae_geometry(stub, _request((360, 240), 81, 8, 16))
    assert (small.height, small.width, small.chunks, small.frame_size) == (240, 360, 10, None)
    for (width, height), rows, cols in (((720, 480), 3, 3), ((1360, 768), 4, 5)):
        tiled = cogvideox.Pipeline.vae_geometry(stub, _request((width, height), 81, 8, 16))
        assert (tiled.height, tiled.width, tiled.frame_size) == (240, 360, (width, height))
        assert tiled.chunks == rows * cols * 10 and tiled.frames == 9
        whole = dataclasses.replace(tiled, height=height, width=width, chunks=10,
                                    frame_size=None)
        assert memory.vae_decode(tiled, "gpu").bytes * 3 < memory.vae_decode(whole, "gpu").bytes
