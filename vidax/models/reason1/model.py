"""The Qwen2.5-VL language model as a text encoder: Cosmos-Reason1-7B (Cosmos-Predict2.5) and
Qwen2.5-VL-7B-Instruct (HunyuanVideo-1.5).

Both releases are the same 7B decoder (Reason1 is a fine-tune of Qwen2.5-VL-7B); the video
pipelines read its hidden states, never its logits, and feed it text only, so vidax ports the
language model alone. It mirrors transformers' ``Qwen2_5_VLTextModel``
(``transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py``) with its module names, so the
mapper only strips the checkpoint's prefix:

=====================================================  ==========================================
transformers (torch)                                   vidax
=====================================================  ==========================================
``embed_tokens.weight``                                ``embed_tokens.embedding`` [vocab, hidden]
``layers.N.self_attn.{q,k,v}_proj.{weight,bias}``      same (``kernel``/``bias``; GQA: k/v narrower)
``layers.N.self_attn.o_proj.weight``                   same (``kernel``, no bias)
``layers.N.mlp.{gate,up,down}_proj.weight``            same (``kernel``, no bias)
``layers.N.{input,post_attention}_layernorm.weight``   same (``scale``)
``norm.weight``                                        ``norm.scale``
=====================================================  ==========================================

The math, as transformers computes it:

* pre-norm decoder layers: ``x + attn(rms(x))``, then ``x + mlp(rms(x))``; RMSNorm statistics
  in float32, the normalised activations cast back to the input dtype and *then* scaled
  (``Qwen2_5_VLRMSNorm``).
* attention: causal, grouped-query (each key/value head serves ``heads / kv_heads``
  consecutive query heads, ``repeat_kv``), ``1/sqrt(head_dim)`` scale; an optional padding
  mask removes padded *keys* (HunyuanVideo-1.5 passes its tokenizer's mask; Cosmos passes none).
* multimodal RoPE (``Qwen2_5_VLRotaryEmbedding``): every token has three positions (time,
  height, width); the ``head_dim / 2`` rotation frequencies are cut into ``mrope_section``
  chunks ([16, 24, 24]) and chunk ``i`` turns by position ``i``. Text tokens have
  ``t = h = w = index``, so for text this is ordinary half-split ("rotate_half") RoPE. The
  angles are float32 products of float32 positions and float32 frequencies, and the cos/sin
  tables are cast to the activations' dtype before rotating, as transformers does.
* SwiGLU MLP: ``down(silu(gate(x)) * up(x))``.

``__call__`` returns every hidden state in transformers' ``output_hidden_states`` convention:
index 0 is the token embeddings, index ``i`` the output of decoder layer ``i - 1``, and the
last one is taken *after* the final norm (the raw output of the last layer is not returned).
Cosmos-Predict2.5 turns them into its text embedding with :func:`full_concat`;
HunyuanVideo-1.5 takes ``hidden_states[-3]`` (the output of layer 25 of 28).

Precision: the computation runs in the parameters' dtype (``embed_tokens``'s), as
transformers' ``model.to(dtype)``; the releases are bfloat16 and ``vidax.load(...,
dtype=jnp.float32)`` gives a float32 encoder.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.reason1.config import Reason1Config
from vidax.nn.decoder_lm import (DecoderLayer, DecoderRMSNorm, causal_padding_mask,
                                 rope_inv_freq)
from vidax.nn.layers import Embedding, KeyGen


# ---------------------------------------------------------------------------- functions
def mrope_tables(position_ids: jax.Array, config: Reason1Config,
                 dtype) -> tuple[jax.Array, jax.Array]:
    """cos and sin ``[B, L, head_dim / 2]`` of the multimodal RoPE for ``position_ids``
    ``[3, B, L]`` (t, h, w): ``Qwen2_5_VLRotaryEmbedding`` without its duplicated half (vidax's
    half-split rotation reuses one table for both halves).

    The frequencies are ``theta ** (-2i / head_dim)`` rounded once to float32 (transformers
    raises in float32, which can land one unit in the last place away on some frequencies);
    angles and their cos/sin are float32, then cast to ``dtype``.
    """
    inv_freq = rope_inv_freq(config.rope_theta, config.head_dim)
    angles = position_ids.astype(jnp.float32)[..., None] * inv_freq    # [3, B, L, dim/2]
    bounds = np.cumsum((0, *config.mrope_section))
    angles = jnp.concatenate([angles[axis, ..., lo:hi]
                              for axis, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))], -1)
    return jnp.cos(angles).astype(dtype), jnp.sin(angles).astype(dtype)


def text_position_ids(batch: int, length: int) -> jax.Array:
    """Text-only positions ``[3, B, L]``: ``t = h = w = index`` (transformers' default when no
    position ids are given)."""
    return jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (3, batch, length))


def full_concat(hidden_states, *, eps: float = 1e-8) -> jax.Array:
    """Cosmos-Predict2.5's text embedding from Reason1's hidden states: every state but the
    token embeddings (``hidden_states[1:]``: 28 for the 7B model, the last one after the final
    norm), each normalised per token over its features, ``(h - mean) / (std + eps)`` with the
    unbiased std, concatenated on features -> ``[B, L, 28 * 3584]`` (diffusers'
    ``Cosmos2_5_PredictBasePipeline._get_prompt_embeds``, the authors' ``full_concat``
    strategy). Statistics in float32; the result in the hidden states' dtype."""
    parts = []
    for h in hidden_states[1:]:
        hf = h.astype(jnp.float32)
        mean = hf.mean(-1, keepdims=True)
        std = jnp.std(hf, axis=-1, keepdims=True, ddof=1)
        parts.append(((hf - mean) / (std + eps)).astype(h.dtype))
    return jnp.concatenate(parts, axis=-1)


# ---------------------------------------------------------------------------- modules
class Reason1TextModel(nnx.Module):
    """Mirrors ``Qwen2_5_VLTextModel`` for text encoding (no cache, no sliding window).

    ``__call__(input_ids [B, L] int, attention_mask=None, position_ids=None)`` -> a tuple of
    ``num_hidden_layers + 1`` hidden states ``[B, L, hidden]`` (see the module docstring).

    ``attention_mask``: ``[B, L]``, nonzero for real tokens; padded keys are masked out on top
    of the causal mask (transformers' ``create_causal_mask``). ``None``: no padding mask, as
    Cosmos-Predict2.5 runs it (trailing pads then attend to the prompt and to each other).
    Queries at padded positions still get outputs, as transformers computes them (a left pad,
    which sees no valid key, attends to nothing); callers drop them.
    ``position_ids``: ``[B, L]`` (used for t, h and w alike) or ``[3, B, L]``; default
    ``0 .. L-1`` for every row, whatever the mask (as transformers' text model).
    """

    def __init__(self, config: Reason1Config, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        cfg = self.config = config
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, **kw)
        # Qwen2_5_VLDecoderLayer (vidax.nn.decoder_lm): Qwen2_5_VLAttention biases q, k, v, not o
        self.layers = nnx.List([DecoderLayer(cfg, qkv_bias=True, o_bias=False, **kw)
                                for _ in range(cfg.num_hidden_layers)])
        self.norm = DecoderRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, param_dtype=param_dtype)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None,
                 position_ids: jax.Array | None = None) -> tuple[jax.Array, ...]:
        input_ids = jnp.asarray(input_ids)
        b, n = input_ids.shape
        if position_ids is None:
            position_ids = text_position_ids(b, n)
        position_ids = jnp.asarray(position_ids)
        if position_ids.ndim == 2:
            position_ids = jnp.broadcast_to(position_ids, (3, *position_ids.shape))
        if position_ids.shape != (3, b, n):
            raise VidaxError(f"Qwen2.5-VL position_ids of shape {list(position_ids.shape)}; "
                             f"expected [{b}, {n}] or [3, {b}, {n}] for input_ids [{b}, {n}]")
        x = self.embed_tokens(input_ids)
        cos, sin = mrope_tables(position_ids, self.config, x.dtype)
        mask, no_keys = causal_padding_mask(n, attention_mask)
        hidden_states = [x]
        for layer in self.layers:
            x = layer(x, cos, sin, mask, no_keys)
            hidden_states.append(x)
        hidden_states[-1] = self.norm(x)
        return tuple(hidden_states)
