"""The Gemma 3 decoder language model as a text encoder: LTX-2 / LTX-2.3's Gemma 3 12B.

LTX-2 (19B) and LTX-2.3 (22B) condition on every hidden state of the language model of
``google/gemma-3-12b-it-qat-q4_0-unquantized`` (a ``Gemma3ForConditionalGeneration``); they
read hidden states, never logits, and feed text only, so vidax ports the language model
alone. It mirrors transformers' ``Gemma3TextModel`` (``models/gemma3/modeling_gemma3.py``)
with its module names, so the mapper only strips the checkpoint's prefix:

==========================================================  =====================================
transformers (torch)                                        vidax
==========================================================  =====================================
``embed_tokens.weight``                                     ``embed_tokens.embedding``
``layers.N.self_attn.{q,k,v,o}_proj.weight``                same (``kernel``; GQA: k/v narrower)
``layers.N.self_attn.{q,k}_norm.weight``                    same (``scale``, per head)
``layers.N.mlp.{gate,up,down}_proj.weight``                 same (``kernel``)
``layers.N.{input,post_attention}_layernorm.weight``        same (``scale``)
``layers.N.{pre,post}_feedforward_layernorm.weight``        same (``scale``)
``norm.weight``                                             ``norm.scale``
==========================================================  =====================================

What sets Gemma 3 apart from the Llama/Qwen decoders of :mod:`vidax.models.llama.model` and
:mod:`vidax.models.reason1.model` (of their blocks, :mod:`vidax.nn.decoder_lm`, it shares the
attention, given its q/k norms and scale, and the gated MLP, given its activation):

* the token embeddings are multiplied by ``sqrt(hidden_size)``, rounded to the
  activations' dtype first (``Gemma3TextScaledWordEmbedding``);
* RMSNorm scales by ``1 + weight`` in float32 and rounds once (``Gemma3RMSNorm``); the
  stored weights are offsets from one;
* q and k are RMS-normed per head (``q_norm``/``k_norm``) before RoPE, and the logits are
  scaled by ``query_pre_attn_scalar ** -0.5`` rather than ``head_dim ** -0.5``;
* layers alternate between local (``sliding_attention``: a query sees the
  ``sliding_window`` most recent keys, itself included) and global (``full_attention``)
  attention, by ``layer_types`` (default: every ``sliding_window_pattern``-th layer
  global). Each type has its own RoPE: local ``theta = rope_local_base_freq`` unscaled,
  global ``theta = rope_theta`` with linear scaling (frequencies divided by the factor: 8
  for the 12B model);
* four norms per layer: ``x + post_attention_norm(attn(input_norm(x)))``, then
  ``x + post_feedforward_norm(mlp(pre_feedforward_norm(x)))``;
* the MLP is ``down(gelu_tanh(gate(x)) * up(x))``.

``__call__`` returns every hidden state in transformers' ``output_hidden_states``
convention: index 0 the scaled token embeddings, index ``i`` the output of decoder layer
``i - 1``, and the last one *after* the final norm -- 49 states for the 12B model, all of
which LTX-2's feature extractor reads (``vidax.models.ltx2_5.text``).

Precision: the computation runs in the parameters' dtype (``embed_tokens``'s), as
transformers' ``model.to(dtype)``; the release is bfloat16 and ``vidax.load(...,
dtype=jnp.float32)`` gives a float32 encoder.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.gemma.config import FULL, SLIDING, GemmaConfig
from vidax.nn.decoder_lm import DecoderAttention, GatedMLP, rope_inv_freq
from vidax.nn.layers import Embedding, KeyGen


# ---------------------------------------------------------------------------- functions
def rope_tables(length: int, config: GemmaConfig, layer_type: str,
                dtype) -> tuple[jax.Array, jax.Array]:
    """cos and sin ``[L, head_dim / 2]`` for positions ``0 .. L-1`` of one layer type:
    ``Gemma3RotaryEmbedding`` without its duplicated half. Frequencies
    ``theta ** (-2i / head_dim)`` rounded once to float32, divided by the linear factor on
    global layers (``_compute_linear_scaling_rope_parameters``); float32 angles, cast to
    ``dtype``. Host constants: the positions are static."""
    dim = config.head_dim
    if layer_type == FULL:
        theta, factor = config.rope_theta, config.rope_scaling_factor
    else:
        theta, factor = config.rope_local_base_freq, 1.0
    inv_freq = rope_inv_freq(theta, dim) / np.float32(factor)
    angles = np.outer(np.arange(length, dtype=np.float32), inv_freq)
    return jnp.asarray(np.cos(angles), dtype), jnp.asarray(np.sin(angles), dtype)


def attention_masks(length: int, config: GemmaConfig,
                    attention_mask: jax.Array | None) -> dict[str, jax.Array]:
    """The boolean masks ``[B or 1, 1, L, L]`` of each layer type: causal (and the padding
    mask on keys, transformers' ``create_causal_mask``); local layers also drop keys more
    than ``sliding_window - 1`` positions back (``sliding_window_overlay``:
    ``kv > q - window``)."""
    q = np.arange(length)[:, None]
    kv = np.arange(length)[None, :]
    causal = kv <= q
    masks = {FULL: jnp.asarray(causal),
             SLIDING: jnp.asarray(causal & (kv > q - config.sliding_window))}
    masks = {k: m[None, None] for k, m in masks.items()}
    if attention_mask is not None:
        keys_ok = (attention_mask != 0)[:, None, None, :]
        masks = {k: m & keys_ok for k, m in masks.items()}
    return masks


def checked_inputs(name: str, input_ids, attention_mask):
    """``input_ids [B, L]`` and ``attention_mask`` (None or ``[B, L]``) as arrays, or one
    clear error naming the shapes."""
    input_ids = jnp.asarray(input_ids)
    if input_ids.ndim != 2:
        raise VidaxError(f"{name} input_ids must be [batch, length], got shape "
                         f"{list(input_ids.shape)}")
    if attention_mask is not None:
        attention_mask = jnp.asarray(attention_mask)
        if attention_mask.shape != input_ids.shape:
            raise VidaxError(f"{name} attention_mask of shape {list(attention_mask.shape)} "
                             f"for input_ids {list(input_ids.shape)}")
    return input_ids, attention_mask


def _gelu_tanh(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


# ---------------------------------------------------------------------------- modules
class GemmaRMSNorm(nnx.Module):
    """Mirrors ``Gemma3RMSNorm``: ``(x / rms(x)) * (1 + weight)`` in float32, rounded once
    to ``x``'s dtype. The stored weight is an offset from one (zeros = identity)."""

    def __init__(self, dim: int, *, eps: float, param_dtype):
        self.eps = eps
        self.scale = nnx.Param(jnp.zeros((dim,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.square(xf).mean(-1, keepdims=True) + self.eps)
        return (y * (1.0 + self.scale[...].astype(jnp.float32))).astype(x.dtype)


class GemmaDecoderLayer(nnx.Module):
    """Mirrors ``Gemma3DecoderLayer``: normed attention and MLP, each normed again before
    its residual add."""

    def __init__(self, cfg: GemmaConfig, layer_type: str, *, keys: KeyGen, param_dtype):
        self.layer_type = layer_type
        norm = dict(eps=cfg.rms_norm_eps, param_dtype=param_dtype)
        self.input_layernorm = GemmaRMSNorm(cfg.hidden_size, **norm)
        # Gemma3Attention: unbiased q/k/v/o, q and k RMS-normed per head before RoPE, logits
        # scaled by query_pre_attn_scalar ** -0.5
        self.self_attn = DecoderAttention(
            cfg, qkv_bias=False, o_bias=False, keys=keys, param_dtype=param_dtype,
            scale=float(cfg.query_pre_attn_scalar) ** -0.5,
            qk_norm=lambda dim: GemmaRMSNorm(dim, **norm))
        self.post_attention_layernorm = GemmaRMSNorm(cfg.hidden_size, **norm)
        self.pre_feedforward_layernorm = GemmaRMSNorm(cfg.hidden_size, **norm)
        self.mlp = GatedMLP(cfg, _gelu_tanh, keys=keys, param_dtype=param_dtype)   # Gemma3MLP
        self.post_feedforward_layernorm = GemmaRMSNorm(cfg.hidden_size, **norm)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
                 no_keys: jax.Array) -> jax.Array:
        h = self.self_attn(self.input_layernorm(x), cos, sin, mask, no_keys)
        x = x + self.post_attention_layernorm(h)
        h = self.mlp(self.pre_feedforward_layernorm(x))
        return x + self.post_feedforward_layernorm(h)


class GemmaModel(nnx.Module):
    """Mirrors ``Gemma3TextModel`` for text encoding (no cache).

    ``__call__(input_ids [B, L] int, attention_mask=None)`` -> a tuple of
    ``num_hidden_layers + 1`` hidden states ``[B, L, hidden]`` (see the module docstring).

    ``attention_mask``: ``[B, L]``, nonzero for real tokens; padded keys are masked out on
    top of each layer type's causal mask. LTX-2 pads on the left (to 1024 tokens), so a
    padded query sees no key and its attention output is zero, as in transformers. Queries
    at padded positions still get outputs; LTX-2's feature extractor zeroes them. Positions
    are ``0 .. L-1`` for every row, whatever the mask (transformers' default without
    ``position_ids``, which is how ltx-core calls it).
    """

    def __init__(self, config: GemmaConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        cfg = self.config = config
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, **kw)
        self.layers = nnx.List([GemmaDecoderLayer(cfg, t, **kw) for t in cfg.layer_types])
        self.norm = GemmaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, param_dtype=param_dtype)

    def __call__(self, input_ids: jax.Array,
                 attention_mask: jax.Array | None = None) -> tuple[jax.Array, ...]:
        input_ids, attention_mask = checked_inputs("Gemma", input_ids, attention_mask)
        b, n = input_ids.shape
        x = self.embed_tokens(input_ids)
        # Gemma3TextScaledWordEmbedding rounds sqrt(hidden) to the weights' dtype first
        x = x * jnp.asarray(self.config.hidden_size ** 0.5, x.dtype)
        masks = attention_masks(n, self.config, attention_mask)
        no_keys = {t: jnp.broadcast_to(~m[:, 0].any(-1), (b, n)) for t, m in masks.items()}
        tables = {t: rope_tables(n, self.config, t, x.dtype) for t in masks}
        hidden_states = [x]
        for layer in self.layers:
            t = layer.layer_type
            x = layer(x, *tables[t], masks[t], no_keys[t])
            hidden_states.append(x)
        hidden_states[-1] = self.norm(x)
        return tuple(hidden_states)
