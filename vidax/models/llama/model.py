"""The Llama decoder language model as a text encoder: HunyuanVideo 1.0's LLaVA-Llama-3-8B.

HunyuanVideo 1.0 conditions its DiT on the hidden states of the language model of
``xtuner/llava-llama-3-8b-v1_1-transformers`` (a Llama-3-8B fine-tune inside LLaVA); it reads
hidden states, never logits, and feeds text only, so vidax ports the language model alone.
It mirrors transformers' ``LlamaModel`` (``transformers/models/llama/modeling_llama.py``)
with its module names, so the mapper only strips the checkpoint's prefix:

=====================================================  ==========================================
transformers (torch)                                   vidax
=====================================================  ==========================================
``embed_tokens.weight``                                ``embed_tokens.embedding`` [vocab, hidden]
``layers.N.self_attn.{q,k,v,o}_proj.weight``           same (``kernel``; GQA: k/v narrower)
``layers.N.mlp.{gate,up,down}_proj.weight``            same (``kernel``)
``layers.N.{input,post_attention}_layernorm.weight``   same (``scale``)
``norm.weight``                                        ``norm.scale``
=====================================================  ==========================================

The computation is that of the Qwen2.5-VL language model of :mod:`vidax.models.reason1.model`
(pre-norm decoder, RMSNorm rounding before its scale, causal grouped-query attention with a
key padding mask, half-split RoPE, SwiGLU MLP): both are built from the same blocks,
:mod:`vidax.nn.decoder_lm`'s; what differs is small:

* projections: no biases by default (``attention_bias`` adds them to q, k, v *and* o, as
  ``LlamaAttention`` does; Qwen2 biases q, k, v only), and ``head_dim`` may be set apart
  from ``hidden_size / num_attention_heads`` (o_proj then maps ``heads * head_dim`` back);
* RoPE: plain one-axis RoPE at positions ``0 .. L-1`` (``LlamaRotaryEmbedding``, "default"
  type; Llama-3-8B and its LLaVA fine-tune have no ``rope_scaling``, unlike Llama-3.1's
  "llama3" type, which is refused rather than run unscaled). Frequencies
  ``theta ** (-2i / head_dim)`` rounded once to float32, float32 angles and cos/sin, cast to
  the activations' dtype before rotating, as transformers does.

``__call__`` returns every hidden state in transformers' ``output_hidden_states`` convention:
index 0 the token embeddings, index ``i`` the output of decoder layer ``i - 1``, and the last
one *after* the final norm. HunyuanVideo 1.0 takes ``hidden_states[-3]`` (the output of layer
29 of 32, before any final norm) and crops the prompt template's first tokens.

Precision: the computation runs in the parameters' dtype (``embed_tokens``'s), as
transformers' ``model.to(dtype)``; the release is float16 and ``vidax.load(...,
dtype=jnp.float32)`` gives a float32 encoder.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.llama.config import LlamaConfig
from vidax.nn.decoder_lm import (DecoderLayer, DecoderRMSNorm, causal_padding_mask,
                                 rope_inv_freq)
from vidax.nn.layers import Embedding, KeyGen


# ---------------------------------------------------------------------------- functions
def rope_tables(length: int, config: LlamaConfig, dtype) -> tuple[jax.Array, jax.Array]:
    """cos and sin ``[L, head_dim / 2]`` for positions ``0 .. L-1``: ``LlamaRotaryEmbedding``
    ("default" type, attention scaling 1) without its duplicated half. Host constants: the
    positions are static."""
    inv_freq = rope_inv_freq(config.rope_theta, config.head_dim)
    angles = np.outer(np.arange(length, dtype=np.float32), inv_freq)     # float32 products
    return jnp.asarray(np.cos(angles), dtype), jnp.asarray(np.sin(angles), dtype)


# ---------------------------------------------------------------------------- modules
class LlamaModel(nnx.Module):
    """Mirrors ``LlamaModel`` for text encoding (no cache).

    ``__call__(input_ids [B, L] int, attention_mask=None)`` -> a tuple of
    ``num_hidden_layers + 1`` hidden states ``[B, L, hidden]`` (see the module docstring).

    ``attention_mask``: ``[B, L]``, nonzero for real tokens; padded keys are masked out on
    top of the causal mask (transformers' ``create_causal_mask``). HunyuanVideo pads on the
    right, so every query sees at least the first token; a left pad (no key to see) gets a
    zero attention output, as in transformers. Queries at padded positions still get
    outputs; callers drop them. Positions are ``0 .. L-1`` for every row, whatever the mask
    (transformers' default without ``position_ids``).
    """

    def __init__(self, config: LlamaConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        cfg = self.config = config
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, **kw)
        # LlamaDecoderLayer: LlamaAttention's four projections all biased or not
        # (``attention_bias``), the SwiGLU LlamaMLP, LlamaRMSNorm (Qwen2's computation).
        self.layers = nnx.List([
            DecoderLayer(cfg, qkv_bias=cfg.attention_bias, o_bias=cfg.attention_bias, **kw)
            for _ in range(cfg.num_hidden_layers)])
        self.norm = DecoderRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, param_dtype=param_dtype)

    def __call__(self, input_ids: jax.Array,
                 attention_mask: jax.Array | None = None) -> tuple[jax.Array, ...]:
        input_ids = jnp.asarray(input_ids)
        if input_ids.ndim != 2:
            raise VidaxError(f"Llama input_ids must be [batch, length], got shape "
                             f"{list(input_ids.shape)}")
        b, n = input_ids.shape
        x = self.embed_tokens(input_ids)
        cos, sin = rope_tables(n, self.config, x.dtype)
        # rotated with per-row tables [B, L, head_dim / 2], as Qwen2's attention (which this
        # one was first written on) is
        cos, sin = (jnp.broadcast_to(t, (b, *t.shape)) for t in (cos, sin))
        if attention_mask is not None:
            attention_mask = jnp.asarray(attention_mask)
            if attention_mask.shape != (b, n):
                raise VidaxError(f"Llama attention_mask of shape {list(attention_mask.shape)}"
                                 f" for input_ids [{b}, {n}]")
        mask, no_keys = causal_padding_mask(n, attention_mask)
        hidden_states = [x]
        for layer in self.layers:
            x = layer(x, cos, sin, mask, no_keys)
            hidden_states.append(x)
        hidden_states[-1] = self.norm(x)
        return tuple(hidden_states)
