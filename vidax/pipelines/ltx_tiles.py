"""How the LTX pipelines (:mod:`vidax.pipelines.ltx_video`, :mod:`vidax.pipelines.ltx2_5`)
decode their video with the conv VAE (issue #19).

The rule: ltx-core's tiled decode at ``TilingConfig.default()`` (:data:`TILES`: 512 px tiles
overlapping by 64, 64-frame tiles overlapping by 24; each axis's spatial tile scaled by its
share of the longer side) wherever those tiles split the latent, and the whole clip in one
jitted pass where one tile covers it (the same numbers: every weight is one).

Why: it is what the authors run for their main pipelines, and it bounds the decode's memory at
every size. The ``main()`` of ltx-pipelines 1.0.0's ``distilled.py``, ``ti2vid_two_stages.py``
(and ``_hq``), ``ic_lora.py``, ``keyframe_interpolation.py``, ``retake.py`` and
``a2vid_two_stage.py`` passes ``TilingConfig.default()`` to ``ltx_core.model.video_vae.
decode_video``, i.e. ``VideoDecoder.tiled_decode`` (``ltx_core/model/video_vae/video_vae.py``:
overlapping tiles weighted by trapezoidal ramps, a later temporal tile starting one latent
frame early so that its causal first frame weighs nothing), so vidax's distilled and
two-stage LTX-2 decodes are the authors' numbers at every size. ``ti2vid_one_stage.py`` (the
dev one-stage pipeline), and every ``__call__`` left at its default ``tiling_config=None``,
decode the whole clip instead; vidax tiles there too, on purpose: the whole 768 x 512 x 121
clip needs ~23 GiB of decoder activations and 1536 x 1024 ~90 GiB (docs/memory.md), the
tiles a few. LTX-Video's own ``inference.py`` never tiles (its ``CausalVideoAutoencoder`` has
``enable_z_tiling`` / ``enable_hw_tiling``, which nothing calls, and whose time split does
not overlap), nor does diffusers' ``LTXPipeline`` (tiling off by default); its 0.9.8 default,
1216 x 704 x 121, needs ~80 GiB whole, so it takes the same rule, from the same authors'
later library, its decode timestep given to every tile. diffusers' own tiles
(``LTXVideoVAE.decode_tiled`` with a ``TileSettings`` and ``framewise``: ``enable_tiling`` +
``use_framewise_decoding``) stay available but are not the rule: its temporal tiles place
every later tile's frames one frame late (the module docstring of
:mod:`vidax.models.ltx_video.vae`).

The tests' tiny sizes are one tile (512 px is 32 latent pixels of the tiny VAEs, 64 frames
16 latent frames), so they decode as before.
"""

from __future__ import annotations

from vidax.models.ltx_video.vae import LTXCoreTiles, tile_geometry
from vidax.pipelines import memory

#: ltx-core 1.0.0's ``TilingConfig.default()``.
TILES = LTXCoreTiles.default()


def tiles_for(config, latent_shape) -> LTXCoreTiles | None:
    """:data:`TILES` where they split latents ``(T, h, w[, C])`` into more than one tile;
    None: one pass over the whole clip."""
    return TILES if tile_geometry(latent_shape, tiled=TILES, config=config).count > 1 else None


def vae_geometry(config, latent_shape, size, frames: int,
                 channels: float) -> memory.VAEGeometry:
    """One decoder pass of :func:`tiles_for`'s decode (the largest tile, or the whole clip)
    for :mod:`vidax.pipelines.memory`: frames ``size`` (width, height), ``frames`` in all, the
    decoder's widest stage holding ``channels`` values per output pixel."""
    g = tile_geometry(latent_shape, tiled=TILES, config=config)
    return memory.VAEGeometry(*g.sample, channels, g.count, frames, frame_size=tuple(size))


def decode(vae, latents, whole, *, timestep=None, on_chunk=None):
    """Latents ``[1, T, h, w, C]`` (normalised) -> video ``[1, F, H, W, 3]`` in [-1, 1]:
    ``vae.decode_tiled`` in :data:`TILES` (``timestep`` to every tile) where they split the
    latent, else ``whole(latents)`` (the pipeline's jitted one-pass decode)."""
    tiles = tiles_for(vae.config, latents.shape[1:4])
    if tiles is None:
        video = whole(latents)
        if on_chunk is not None:
            on_chunk(1, 1)
        return video
    return vae.decode_tiled(latents, tiles, timestep=timestep, on_chunk=on_chunk)
