"""LTX-2.x's text feature extractor: Gemma's hidden states -> the text connectors' input.

ltx-core (``ltx_core/text_encoders/gemma/feature_extractor.py``) stacks all hidden states
of the Gemma language model (``vidax.models.gemma.model``: the embeddings and every layer's
output, 49 of width 3840 for Gemma 3 12B) into ``[B, T, D, L]``, normalises them, flattens
to ``[B, T, D * L]`` and projects. The flattening is hidden-dim-major: feature ``d * L + l``
is feature ``d`` of hidden state ``l``, which is the column order of the stored weights.
Two versions exist:

* **V1** (LTX-2 19B, ``FeatureExtractorV1``): per sample and per hidden state, the valid
  tokens' mean and range over tokens and features; ``8 * (x - mean) / (max - min + 1e-6)``
  (the mean's denominator ``n_valid * D + 1e-6``); padded tokens zeroed; one bias-free
  ``aggregate_embed`` (188160 -> 3840) whose output feeds both the video and the audio
  connector.
* **V2** (LTX-2.3 and 2.5, ``FeatureExtractorV2``): per token and per hidden state,
  ``x / sqrt(mean(x^2) + 1e-6)`` over the features; padded tokens zeroed; then
  ``video_aggregate_embed(x * sqrt(video_dim / D))`` (-> 4096) and
  ``audio_aggregate_embed(x * sqrt(audio_dim / D))`` (-> 2048), both biased.

The weights are the release file's ``text_embedding_projection.*`` tensors (the 2.0 and 2.3
monoliths; 2.5's text-encoder file). Which version a file is comes from its DiT config, as
ltx-core's ``_create_feature_extractor`` decides (:meth:`LTX2TextProjectionConfig.from_dict`).

Precision: the normalisation runs in the hidden states' dtype, as ltx-core's (it does not
upcast), then the projection in the parameters' dtype.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.ltx2_5.config import LTX2TextProjectionConfig
from vidax.nn.layers import KeyGen, Linear


# ---------------------------------------------------------------------------- functions
def _stack(hidden_states, embedding_dim: int, num_layers: int) -> jax.Array:
    """``[B, T, D, L]`` from a sequence of ``L`` states ``[B, T, D]`` (or the stack)."""
    if isinstance(hidden_states, (list, tuple)):
        x = jnp.stack([jnp.asarray(h) for h in hidden_states], axis=-1)
    else:
        x = jnp.asarray(hidden_states)
    if x.ndim != 4 or x.shape[2:] != (embedding_dim, num_layers):
        raise VidaxError(f"LTX-2 text projection expects {num_layers} hidden states of width "
                         f"{embedding_dim} ([B, T, {embedding_dim}, {num_layers}] stacked), "
                         f"got {list(x.shape)}")
    return x


def normalize_v1(x: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """ltx-core's ``_norm_and_concat_padded_batch`` on ``x [B, T, D, L]`` -> ``[B, T, D * L]``.
    The valid tokens are those the mask marks (for LTX-2's left or right padding this is
    ltx-core's index rule from the sequence lengths)."""
    b, t, d, n = x.shape
    valid = (attention_mask != 0)[:, :, None, None]                 # [B, T, 1, 1]
    # torch promotes here: the integer count + 1e-6 is float32, so the mean and the
    # difference are float32 whatever x's dtype; the range stays in x's dtype
    count = valid.sum((1, 2, 3)).astype(jnp.float32) * d + 1e-6     # [B]
    total = jnp.where(valid, x, 0).sum((1, 2), keepdims=True)
    mean = total.astype(jnp.float32) / count[:, None, None, None]
    lo = jnp.where(valid, x, jnp.inf).min((1, 2), keepdims=True)
    hi = jnp.where(valid, x, -jnp.inf).max((1, 2), keepdims=True)
    normed = 8 * (x.astype(jnp.float32) - mean) / (hi - lo + 1e-6).astype(jnp.float32)
    normed = normed.reshape(b, t, d * n)
    return jnp.where(valid[..., 0], normed, 0).astype(x.dtype)


def normalize_v2(x: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """ltx-core's ``norm_and_concat_per_token_rms`` on ``x [B, T, D, L]`` -> ``[B, T, D * L]``."""
    b, t, d, n = x.shape
    normed = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=2, keepdims=True) + 1e-6)
    normed = normed.reshape(b, t, d * n)
    return jnp.where((attention_mask != 0)[:, :, None], normed, 0).astype(x.dtype)


# ---------------------------------------------------------------------------- module
class LTX2TextProjection(nnx.Module):
    """ltx-core's ``FeatureExtractorV1`` / ``V2``.

    ``__call__(hidden_states, attention_mask)``: ``hidden_states`` the Gemma model's tuple
    (``num_layers`` states ``[B, T, embedding_dim]``) or their stack ``[B, T, D, L]``;
    ``attention_mask [B, T]`` nonzero on real tokens. Returns ``(video, audio)`` features
    ``[B, T, video_dim]`` and ``[B, T, audio_dim]`` (V1: the same array twice, as ltx-core
    returns for the audio-video model).
    """

    def __init__(self, config: LTX2TextProjectionConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        cfg = self.config = config
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        kw = dict(keys=keys, param_dtype=param_dtype)
        if cfg.version == 1:
            self.aggregate_embed = Linear(cfg.flat_dim, cfg.embedding_dim, bias=False, **kw)
        else:
            self.video_aggregate_embed = Linear(cfg.flat_dim, cfg.video_dim, **kw)
            self.audio_aggregate_embed = Linear(cfg.flat_dim, cfg.audio_dim, **kw)

    def __call__(self, hidden_states, attention_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        cfg = self.config
        x = _stack(hidden_states, cfg.embedding_dim, cfg.num_layers)
        attention_mask = jnp.asarray(attention_mask)
        if attention_mask.shape != x.shape[:2]:
            raise VidaxError(f"LTX-2 text projection: attention_mask of shape "
                             f"{list(attention_mask.shape)} for hidden states of "
                             f"[batch, tokens] = {list(x.shape[:2])}")
        if cfg.version == 1:
            features = self.aggregate_embed(normalize_v1(x, attention_mask))
            return features, features
        normed = normalize_v2(x, attention_mask)
        video = self.video_aggregate_embed(
            normed * math.sqrt(cfg.video_dim / cfg.embedding_dim))
        audio = self.audio_aggregate_embed(
            normed * math.sqrt(cfg.audio_dim / cfg.embedding_dim))
        return video, audio
