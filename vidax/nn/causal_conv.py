"""Causal 3D convolution over time, with a per-chunk cache that ``jax.jit`` can carry.

Video VAEs (Wan2.1/2.2, LTX-Video, HunyuanVideo) encode and decode long videos a few frames at
a time. Their 3D convolutions are causal in time: output frame ``t`` sees input frames
``t - context .. t`` only, where ``context`` frames before the first one are padding (zeros in
Wan, copies of the first frame in LTX-Video and HunyuanVideo). Chunk by chunk, the frames
before a chunk's first frame come from the previous chunk instead: each causal conv keeps the
last ``context`` frames of its input for the next call.

The authors keep those frames in a Python list indexed by a running counter (Wan's
``feat_cache`` / ``feat_idx``), with ``None`` and string sentinels for the states before and
after the first chunk, and a cache that is sometimes one frame, sometimes two. A jitted
function needs arrays of fixed shapes instead. Here:

* :meth:`CausalConv3d.step` takes the conv's cache (``None`` at the start of the video:
  padding per ``pad_mode``) and returns its output and the new cache, which is *always* the
  last ``context`` frames of what the conv saw (padding included while the video is
  shorter), so after the first chunk every cache has one fixed shape.
* :class:`ChunkCache` collects the caches of a whole network in call order (the authors'
  ``feat_idx`` order): a tuple of arrays, the carry of a per-chunk ``jax.jit`` function.
  The first chunk runs with no cache (one compiled program), every later chunk with the
  carry of the one before (a second program, the same for all of them).

Where a family's first chunk differs in structure (Wan's temporal resampling is skipped on
the first chunk), that is static Python in the model, and :meth:`ChunkCache.skip` fills the
conv's slot with the array its next call must see.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from vidax.errors import VidaxError
from vidax.nn.layers import Conv, KeyGen

PAD_MODES = ("zeros", "replicate")


class CausalConv3d(Conv):
    """A 3D convolution over channels-last video ``[B, T, H, W, C]``, causal in time.

    Args:
      kernel_size: ``(kt, kh, kw)`` or one int for all three.
      stride: per ``(t, h, w)`` or one int.
      padding: symmetric *spatial* padding, ``(ph, pw)`` or one int (time is never padded
        on the right).
      context: input frames each output frame sees before its own; the left time padding
        of the first chunk and the length of the cache. Default ``kt - 1``.
      pad_mode: what stands in for the frames before the video: ``"zeros"`` or
        ``"replicate"`` (copies of the first frame).
    """

    def __init__(self, in_features: int, out_features: int, kernel_size: Sequence[int] | int, *,
                 keys: KeyGen, stride: Sequence[int] | int = 1,
                 padding: Sequence[int] | int = 0, context: int | None = None,
                 pad_mode: str = "zeros", bias: bool = True, param_dtype=jnp.float32):
        kernel_size = (kernel_size,) * 3 if isinstance(kernel_size, int) else tuple(kernel_size)
        ph, pw = (padding, padding) if isinstance(padding, int) else tuple(padding)
        if len(kernel_size) != 3:
            raise VidaxError(f"CausalConv3d kernel_size must have 3 entries, got {kernel_size}")
        if pad_mode not in PAD_MODES:
            raise VidaxError(f"CausalConv3d pad_mode must be one of {PAD_MODES}, got {pad_mode!r}")
        super().__init__(in_features, out_features, kernel_size, keys=keys, stride=stride,
                         padding=((0, 0), (ph, ph), (pw, pw)), bias=bias,
                         param_dtype=param_dtype)
        self.context = kernel_size[0] - 1 if context is None else context
        self.pad_mode = pad_mode

    def _past(self, x: jax.Array) -> jax.Array:
        """The ``context`` frames that precede the video: zeros or copies of its first frame."""
        shape = (x.shape[0], self.context, *x.shape[2:])
        if self.pad_mode == "zeros":
            return jnp.zeros(shape, x.dtype)
        return jnp.broadcast_to(x[:, :1], shape)

    def with_context(self, x: jax.Array, cache: jax.Array | None) -> jax.Array:
        """``x`` with the frames before it prepended: the cache, or padding at the start."""
        if self.context == 0:
            return x
        past = self._past(x) if cache is None else cache.astype(x.dtype)
        if past.shape[1] != self.context or past.shape[2:] != x.shape[2:]:
            raise VidaxError(f"causal conv cache {tuple(past.shape)} does not fit input "
                             f"{tuple(x.shape)} with {self.context} context frames")
        return jnp.concatenate([past, x], axis=1)

    def step(self, x: jax.Array, cache: jax.Array | None = None
             ) -> tuple[jax.Array, jax.Array | None]:
        """One chunk: the output, and the cache for the next chunk (the last ``context``
        frames of the input seen so far; ``None`` for a conv without temporal context)."""
        full = self.with_context(x, cache)
        new_cache = full[:, full.shape[1] - self.context:] if self.context else None
        return super().__call__(full), new_cache

    def __call__(self, x: jax.Array, cache: jax.Array | None = None) -> jax.Array:
        return super().__call__(self.with_context(x, cache))


class ChunkCache:
    """The caches of every causal conv of a network for one chunk, in call order.

    Built from the previous chunk's :meth:`result` (``None`` for the first chunk), it hands
    each conv its cache and collects the new one. Use it inside the per-chunk function: the
    model calls :meth:`conv` for every cached causal conv, in the same order on every chunk.
    """

    def __init__(self, entries: tuple[jax.Array, ...] | None = None):
        self._entries = entries
        self._taken = 0
        self._updated: list[jax.Array] = []

    @property
    def first(self) -> bool:
        """Whether this is the video's first chunk (no cache yet)."""
        return self._entries is None

    def _take(self) -> jax.Array | None:
        if self._entries is None:
            return None
        if self._taken >= len(self._entries):
            raise VidaxError(f"the chunk cache holds {len(self._entries)} entries and a "
                             "network asked for more: it was built by a different network")
        entry = self._entries[self._taken]
        self._taken += 1
        return entry

    def conv(self, conv: CausalConv3d, x: jax.Array) -> jax.Array:
        """Run ``conv`` on this chunk with its cache and keep its new cache."""
        y, new_cache = conv.step(x, self._take())
        self._updated.append(new_cache)
        return y

    def skip(self, frames: jax.Array) -> None:
        """A conv that does not run on this chunk keeps its slot; ``frames`` become the
        cache its next call sees."""
        self._take()
        self._updated.append(frames)

    def result(self) -> tuple[jax.Array, ...]:
        """The caches for the next chunk (the carry of the per-chunk function)."""
        if self._entries is not None and self._taken != len(self._entries):
            raise VidaxError(f"the chunk cache holds {len(self._entries)} entries and the "
                             f"network used {self._taken}: it was built by a different network")
        return tuple(self._updated)
