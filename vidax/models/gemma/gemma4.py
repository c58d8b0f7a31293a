"""The Gemma 4 decoder language model as a text encoder: LTX-2.5's fine-tuned Gemma 4 12B.

LTX-2.5 conditions on every hidden state of the language model of a fine-tuned
``gemma4_unified`` (transformers' ``Gemma4UnifiedForConditionalGeneration``), stored in
``text_encoders/gemma4-12b-with-proj-ltx-2.5-bf16.safetensors``. Only text reaches it, so
vidax ports the language model alone. It mirrors transformers 5.24's
``Gemma4UnifiedTextModel`` (``models/gemma4_unified/modeling_gemma4_unified.py``) with its
module names, so the mapper (``vidax.translator.mappings.gemma``) only strips a prefix:

==========================================================  =====================================
transformers (torch)                                        vidax
==========================================================  =====================================
``embed_tokens.weight``                                     ``embed_tokens.embedding``
``layers.N.self_attn.{q,k,v,o}_proj.weight``                same (``kernel``; no ``v_proj`` on
                                                            global K=V layers)
``layers.N.self_attn.{q,k}_norm.weight``                    same (``scale``, per head)
``layers.N.mlp.{gate,up,down}_proj.weight``                 same (``kernel``)
``layers.N.{input,post_attention}_layernorm.weight``        same (``scale``)
``layers.N.{pre,post}_feedforward_layernorm.weight``        same (``scale``)
``layers.N.layer_scalar`` ``[1]``                           same (a parameter)
``norm.weight``                                             ``norm.scale``
==========================================================  =====================================

Where it differs from Gemma 3 (:mod:`vidax.models.gemma.model`):

* RMSNorm multiplies by ``weight`` itself (``Gemma4UnifiedRMSNorm``: ``x * (mean(x^2) +
  eps) ** -0.5 * weight`` in float32, rounded once; stored weights are the scales, not
  offsets from one) -- :class:`vidax.nn.layers.RMSNorm`;
* the attention logits are not scaled (``scaling = 1.0``): q and k are RMS-normed per head
  first (``q_norm``/``k_norm``), and v is RMS-normed per head *without* a weight
  (``v_norm``, every layer);
* local (``sliding_attention``) layers: ``head_dim`` heads, grouped-query k/v, default RoPE
  at ``rope_local_theta`` (1e4), a query sees the ``sliding_window`` most recent keys;
  global (``full_attention``) layers: ``global_head_dim`` heads (512), and under
  ``attention_k_eq_v`` one shared key/value head and **no v_proj**: v is the key
  projection's output before ``k_norm`` and RoPE, then ``v_norm``; RoPE is *proportional*:
  only the first ``partial_rotary_factor`` (a quarter) of the frequency pairs turn, with
  frequencies ``theta ** (-2i / global_head_dim)``, the rest have frequency 0
  (``_compute_proportional_rope_parameters``), in the rotate-half convention over the whole
  head;
* each layer's output (after both residual adds) is multiplied by its ``layer_scalar``;
* ``Gemma4UnifiedModel`` embeds the image / video / audio placeholder ids as the padding id
  (the config's ``placeholder_token_ids``); the embeddings are multiplied by
  ``sqrt(hidden_size)`` rounded to the weights' dtype first.

The MLP is Gemma 3's (``down(gelu_tanh(gate(x)) * up(x))``, :class:`GatedMLP`), and the four
norms per layer sit where Gemma 3's do. ``final_logit_softcapping`` touches only the logits,
which LTX never reads.

``__call__`` returns every hidden state in transformers' ``output_hidden_states``
convention: index 0 the scaled embeddings, index ``i`` the output of decoder layer ``i - 1``,
the last one after the final norm -- 49 states of width 3840 for the 12B model, all of which
LTX-2.5's feature extractor reads (``vidax.models.ltx2_5.text``, V2).

Precision: the computation runs in the parameters' dtype (``embed_tokens``'s); the release is
bfloat16, ``vidax.load(..., dtype=jnp.float32)`` gives a float32 encoder.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.models.gemma.config import FULL, SLIDING, Gemma4Config
from vidax.models.gemma.model import _gelu_tanh, attention_masks, checked_inputs
from vidax.nn.attention import attention
from vidax.nn.decoder_lm import GatedMLP
from vidax.nn.layers import Embedding, KeyGen, Linear, RMSNorm, rms_norm
from vidax.nn.rope import apply_rope_half


# ---------------------------------------------------------------------------- functions
def inv_freq(config: Gemma4Config, layer_type: str) -> np.ndarray:
    """The ``head_dim / 2`` RoPE frequencies of one layer type, float32: local layers
    ``theta ** (-2i / head_dim)``; global layers the proportional rule (the first
    ``int(partial_rotary_factor * global_head_dim // 2)`` pairs at
    ``theta ** (-2i / global_head_dim)``, the rest 0, all divided by ``rope_factor``).
    transformers raises to the power in float32; vidax computes in float64 and rounds once."""
    dim = config.layer_head_dim(layer_type)
    if layer_type == SLIDING:
        theta, rotated, factor = config.rope_local_theta, dim // 2, 1.0
    else:
        theta, factor = config.rope_theta, config.rope_factor
        rotated = int(config.partial_rotary_factor * dim // 2)
    freq = np.zeros(dim // 2, np.float64)
    freq[:rotated] = 1.0 / np.power(float(theta),
                                    np.arange(0, 2 * rotated, 2, dtype=np.float64) / dim)
    return (freq.astype(np.float32) / np.float32(factor)).astype(np.float32)


def rope_tables(length: int, config: Gemma4Config, layer_type: str,
                dtype) -> tuple[jax.Array, jax.Array]:
    """cos and sin ``[L, head_dim / 2]`` for positions ``0 .. L-1`` of one layer type
    (``Gemma4UnifiedTextRotaryEmbedding`` without its duplicated half): float32 angles, cast
    to ``dtype``. Host constants: the positions are static."""
    angles = np.outer(np.arange(length, dtype=np.float32), inv_freq(config, layer_type))
    return jnp.asarray(np.cos(angles), dtype), jnp.asarray(np.sin(angles), dtype)


# ---------------------------------------------------------------------------- modules
class Gemma4Attention(nnx.Module):
    """Mirrors ``Gemma4UnifiedTextAttention`` (no cache, no shared key/value layers)."""

    def __init__(self, cfg: Gemma4Config, layer_type: str, *, keys: KeyGen, param_dtype):
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.kv_heads(layer_type)
        self.head_dim = dim = cfg.layer_head_dim(layer_type)
        self.eps = cfg.rms_norm_eps
        kw = dict(keys=keys, bias=False, param_dtype=param_dtype)
        self.q_proj = Linear(cfg.hidden_size, self.num_heads * dim, **kw)
        self.k_proj = Linear(cfg.hidden_size, self.num_kv_heads * dim, **kw)
        # attention_k_eq_v: the global layers' values are the key projection
        self.v_proj = (None if cfg.shares_kv(layer_type)
                       else Linear(cfg.hidden_size, self.num_kv_heads * dim, **kw))
        self.o_proj = Linear(self.num_heads * dim, cfg.hidden_size, **kw)
        norm = dict(eps=cfg.rms_norm_eps, param_dtype=param_dtype)
        self.q_norm = RMSNorm(dim, **norm)
        self.k_norm = RMSNorm(dim, **norm)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
                 no_keys: jax.Array) -> jax.Array:
        b, n, _ = x.shape
        q = self.q_proj(x).reshape(b, n, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(b, n, self.num_kv_heads, self.head_dim)
        v = k if self.v_proj is None else self.v_proj(x).reshape(k.shape)
        q = apply_rope_half(self.q_norm(q), cos, sin)
        k = apply_rope_half(self.k_norm(k), cos, sin)
        v = rms_norm(v, self.eps)                               # v_norm: no weight, no RoPE
        out = attention(q, k, v, mask=mask, scale=1.0)          # grouped-query: k/v shared
        # a query with no key (a left pad) gets zeros, as torch's SDPA returns
        out = jnp.where(no_keys[:, :, None, None], jnp.zeros((), out.dtype), out)
        return self.o_proj(out.reshape(b, n, -1))


class Gemma4DecoderLayer(nnx.Module):
    """Mirrors ``Gemma4UnifiedTextDecoderLayer``: Gemma 3's four-norm layer, its output
    multiplied by ``layer_scalar``."""

    def __init__(self, cfg: Gemma4Config, layer_type: str, *, keys: KeyGen, param_dtype):
        self.layer_type = layer_type
        norm = dict(eps=cfg.rms_norm_eps, param_dtype=param_dtype)
        self.input_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.self_attn = Gemma4Attention(cfg, layer_type, keys=keys, param_dtype=param_dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.pre_feedforward_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.mlp = GatedMLP(cfg, _gelu_tanh, keys=keys, param_dtype=param_dtype)
        self.post_feedforward_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.layer_scalar = nnx.Param(jnp.ones((1,), param_dtype))

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
                 no_keys: jax.Array) -> jax.Array:
        h = self.self_attn(self.input_layernorm(x), cos, sin, mask, no_keys)
        x = x + self.post_attention_layernorm(h)
        h = self.mlp(self.pre_feedforward_layernorm(x))
        x = x + self.post_feedforward_layernorm(h)
        return x * self.layer_scalar[...].astype(x.dtype)


class Gemma4Model(nnx.Module):
    """Mirrors ``Gemma4UnifiedModel``'s text path into ``Gemma4UnifiedTextModel`` (no cache).

    ``__call__(input_ids [B, L] int, attention_mask=None)`` -> a tuple of
    ``num_hidden_layers + 1`` hidden states ``[B, L, hidden]`` (see the module docstring).

    ``attention_mask``: ``[B, L]``, nonzero for real tokens; padded keys are masked out on
    top of each layer type's causal mask. LTX-2.5 pads on the left (to 1024 tokens): a
    padded query sees no key and its attention output is zero, as in transformers. Positions
    are ``0 .. L-1`` for every row whatever the mask (transformers' default without
    ``position_ids``, which is how ltx-core calls it).
    """

    def __init__(self, config: Gemma4Config, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        cfg = self.config = config
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, **kw)
        self.layers = nnx.List([Gemma4DecoderLayer(cfg, t, **kw) for t in cfg.layer_types])
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, param_dtype=param_dtype)

    def __call__(self, input_ids: jax.Array,
                 attention_mask: jax.Array | None = None) -> tuple[jax.Array, ...]:
        input_ids, attention_mask = checked_inputs("Gemma 4", input_ids, attention_mask)
        b, n = input_ids.shape
        cfg = self.config
        if cfg.placeholder_token_ids:    # Gemma4UnifiedModel: placeholders embed as padding
            placeholder = jnp.isin(input_ids, jnp.asarray(cfg.placeholder_token_ids))
            input_ids = jnp.where(placeholder, cfg.pad_token_id, input_ids)
        x = self.embed_tokens(input_ids)
        x = x * jnp.asarray(cfg.hidden_size ** 0.5, x.dtype)   # rounded to the dtype first
        masks = attention_masks(n, cfg, attention_mask)
        no_keys = {t: jnp.broadcast_to(~m[:, 0].any(-1), (b, n)) for t, m in masks.items()}
        tables = {t: rope_tables(n, cfg, t, x.dtype) for t in (SLIDING, FULL)}
        hidden_states = [x]
        for layer in self.layers:
            t = layer.layer_type
            x = layer(x, *tables[t], masks[t], no_keys[t])
            hidden_states.append(x)
        hidden_states[-1] = self.norm(x)
        return tuple(hidden_states)
