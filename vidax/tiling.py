"""Decoding a video VAE in pieces: spatial tiles cross-faded over their overlap, as
diffusers' ``tiled_decode`` loops run them, and the bookkeeping every family's tiled decode
shares (the geometry a memory estimate reads, progress per decoder pass). numpy only (no
JAX), so the families' config modules import it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SpatialTiles:
    """A spatial tiling as diffusers' ``tiled_decode`` loops (and the authors'
    ``spatial_tiled_decode``) run it: latent tiles of ``tile`` (height, width) latent pixels
    starting every ``stride``; each decoded tile's first ``blend`` output rows / columns
    cross-faded from its upper / left neighbour's last ones, then its first ``keep`` rows /
    columns kept. Tiling applies when the latent is larger than one tile in either direction."""

    tile: tuple[int, int]
    stride: tuple[int, int]
    blend: tuple[int, int]
    keep: tuple[int, int]

    def applies(self, h: int, w: int) -> bool:
        return h > self.tile[0] or w > self.tile[1]

    def grid(self, h: int, w: int) -> list[tuple[int, int, int, int]]:
        """``(top, left, height, width)`` of every latent tile, in raster order."""
        return [(i, j, min(self.tile[0], h - i), min(self.tile[1], w - j))
                for i in range(0, h, self.stride[0]) for j in range(0, w, self.stride[1])]


@dataclass(frozen=True)
class TileGeometry:
    """The decoder passes of one tiled decode: the largest tile's ``latent`` ``(T, h, w)``
    and its decoded ``sample`` ``(frames, H, W)``, the ``count`` of passes, and the distinct
    latent tile ``shapes`` (one compiled program each)."""

    latent: tuple[int, int, int]
    sample: tuple[int, int, int]
    count: int
    shapes: tuple[tuple[int, int, int], ...]


def blend(a: np.ndarray, b: np.ndarray, extent: int, axis: int) -> None:
    """diffusers' ``blend_v`` / ``blend_h`` / ``blend_t`` (in place on ``b``): its first
    ``n = min(extent, both sizes)`` entries along ``axis`` become ``a``'s last ``n`` times
    ``1 - k/n`` plus themselves times ``k/n`` (float32 weights)."""
    n = min(a.shape[axis], b.shape[axis], extent)
    if n <= 0:
        return
    shape = [1] * b.ndim
    shape[axis] = n
    k = np.arange(n, dtype=np.float64) / n
    head = (slice(None),) * axis
    b[head + (slice(0, n),)] = (a[head + (slice(a.shape[axis] - n, None),)]
                                * (1 - k).astype(np.float32).reshape(shape)
                                + b[head + (slice(0, n),)] * k.astype(np.float32).reshape(shape))


def spatially_tiled(run, z, tiles: SpatialTiles, ratio: int) -> np.ndarray:
    """diffusers' ``tiled_decode`` over latents ``z [B, T, h, w, C]``: ``run`` (one decoder
    pass, returning host numpy ``[B, F, H, W, 3]``) on each tile in raster order; each decoded
    tile is blended as soon as it arrives with its already-blended upper and left neighbours
    (the order diffusers' in-place loops give), on the host; only the previous row of tiles
    is kept. Output cut to ``ratio * (h, w)``."""
    h, w = z.shape[2:4]
    rows, prev, row = [], None, []
    grid = tiles.grid(h, w)
    for n, (i, j, th, tw) in enumerate(grid):
        tile = np.array(run(z[:, :, i:i + th, j:j + tw]), np.float32)
        if prev is not None:
            blend(prev[len(row)], tile, tiles.blend[0], axis=2)
        if row:
            blend(row[-1], tile, tiles.blend[1], axis=3)
        row.append(tile)
        if n + 1 == len(grid) or grid[n + 1][0] != i:
            rows.append(np.concatenate([t[:, :, :tiles.keep[0], :tiles.keep[1]] for t in row],
                                       axis=3))
            prev, row = row, []
    return np.concatenate(rows, axis=2)[:, :, :ratio * h, :ratio * w]


def counted(decode, total: int, on_chunk=None):
    """``decode`` calling ``on_chunk(done, total)`` after each of its calls (one decoder pass
    of a tiled decode; the pipelines' progress)."""
    done = iter(range(1, total + 1))

    def one(x):
        out = decode(x)
        if on_chunk is not None:
            on_chunk(next(done), total)
        return out

    return one


def ticker(total: int, on_chunk=None):
    """A callable reporting ``on_chunk(done, total)`` once per call (one decoded chunk)."""
    done = iter(range(1, total + 1))

    def tick():
        n = next(done)
        if on_chunk is not None:
            on_chunk(n, total)
    return tick
