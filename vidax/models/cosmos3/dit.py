"""The Cosmos3 (Nano, Edge) diffusion transformer, after diffusers' ``Cosmos3OmniTransformer``.

Mirrors diffusers 0.42.1 ``models/transformers/transformer_cosmos3.py`` (``Cosmos3OmniTransformer``,
``Cosmos3VLTextMoTDecoderLayer``, ``Cosmos3PackedMoTAttention`` with ``Cosmos3AttnProcessor``,
``Cosmos3VLTextMLP``, ``Cosmos3VLTextRotaryEmbedding``) as ``Cosmos3OmniPipeline``
(``pipelines/cosmos/pipeline_cosmos3_omni.py``) calls it for video: one prompt, one video, no
sound or action tokens. The released files are diffusers folders (``transformer/``); their
names are the module names here, so the mapper (``vidax.translator.mappings.cosmos3``) only
ignores what video generation does not read.

The network is a Mixture-of-Transformers vision-language model: every layer has two sets of
weights. The *understanding* pathway (``to_q/k/v/out``, ``mlp``, ``input_layernorm``, ...)
runs the prompt's tokens (``embed_tokens``) with causal attention among themselves; the
*generation* pathway (``add_{q,k,v}_proj``, ``to_add_out``, ``mlp_moe_gen``, ``*_moe_gen``
norms) runs the noisy video tokens, whose queries attend, unmasked, to the concatenation
[prompt keys, video keys] with [prompt values, video values]. The prompt never sees the video,
so its per-layer keys and values do not change across sampling steps:
:meth:`Cosmos3DiT.encode_prompt` computes them once and :meth:`Cosmos3DiT.__call__` takes them
back (``prompt_kv=``), or computes them itself from ``input_ids``.

The two released backbones differ only in flags (:class:`Cosmos3DiTConfig`):

* Nano (Qwen3-VL-8B): SwiGLU MLPs ``down(silu(gate(x)) * up(x))``, RMSNorm eps 1e-6, per-head
  RMSNorm on q and k in both pathways (``norm_q/k``, ``norm_added_q/k``), RoPE theta 5e6.
* Edge (Nemotron-2B): squared-ReLU MLPs ``down(relu(up(x))^2)`` (no ``gate_proj``), RMSNorm eps
  1e-5, no q/k norm on the prompt pathway, but a separate per-head RMSNorm
  ``k_norm_und_for_gen`` on the prompt keys as the video queries see them (the prompt's own
  attention uses them un-normed); RoPE theta 1e8. Its "Nemotron" RMSNorm (float32 statistics,
  weight applied in float32) is vidax's :class:`~vidax.nn.layers.RMSNorm`.

Both: grouped-query attention (``num_key_value_heads`` key/value heads, query head ``h`` reads
key head ``h // groups``), head_dim 128, no biases, no AdaLN: the only timestep input is
``time_embedder(sinusoid(t * timestep_scale))`` (256 channels, ``[cos, sin]``) ADDED to the
noisy frames' tokens after ``proj_in``; conditioning (clean) frames get none and their output is
zero, as diffusers leaves them.

Token layout (``_patchify_and_pack_latents``): the latent ``[T, H, W, C]`` is zero-padded to even
H, W and cut into 2 x 2 patches, tokens in (t, h, w) order, a patch's features ordered
``(p_h, p_w, c)`` -- the channel FASTEST; ``proj_out``'s output is read back the same way and
cropped.

Positions (``Cosmos3VLTextRotaryEmbedding`` over the pipeline's
``get_3d_mrope_ids_text_tokens`` / ``get_3d_mrope_ids_vae_tokens``): every token has a (t, h, w)
position. Prompt token ``i`` is at (i, i, i). The video's t starts at ``prompt length +
temporal_modality_margin`` (15000) and, with fps modulation, advances ``base_fps / fps`` per
latent frame; h and w restart at 0 (``reset_spatial_ids``). The head_dim / 2 = 64 frequencies
``theta ** (-2i / head_dim)`` are shared by the axes INTERLEAVED: frequency ``i < 3 *
rope_axes_dim[1]`` with ``i % 3 == 1`` turns with h, ``i % 3 == 2`` (below ``3 *
rope_axes_dim[2]``) with w, every other one with t; the angle table is applied half-split
(``rotate_half``, :func:`vidax.nn.rope.apply_rope_half`). Positions and angles are float32, as
diffusers computes them (at t ~ 15000 one float32 rounding of an angle is ~1e-3 rad, so the
port rounds exactly where diffusers does, see :func:`rope_inv_freq` and :func:`video_positions`).

Precision (``compute_dtype``): float32 (the default) runs everything in float32. bfloat16 runs
every Linear and the attention in bfloat16 (float32 accumulation) and keeps float32 for the
residual streams, the norms' statistics, RoPE, the timestep embedder (diffusers'
``_keep_in_fp32_modules``) and the output projection's input norm (vidax's policy for every
DiT, DESIGN section 7; diffusers runs the residual stream in the weights' bfloat16).
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.cosmos3.config import Cosmos3DiTConfig
from vidax.nn.attention import attention
from vidax.nn.embeddings import diffusers_timestep_embedding
from vidax.nn.layers import Embedding, KeyGen, Linear, RMSNorm
from vidax.nn.rope import apply_rope_half
from vidax.nn import offload
from vidax.nn.step_cache import run_blocks

log = logging.getLogger("vidax.cosmos3")

_F32 = jnp.float32
#: The DiT's compute dtypes (see the module docstring).
COMPUTE_DTYPES = (jnp.float32, jnp.bfloat16)
#: Channels of the timestep sinusoid (``Timesteps(num_channels=256)``, fixed in diffusers).
TIME_PROJ_DIM = 256


# ----------------------------------------------------------------------------- positions
def rope_inv_freq(head_dim: int, theta: float) -> np.ndarray:
    """``1 / theta ** (2i / head_dim)`` as float32, rounded where torch rounds it
    (``Cosmos3VLTextRotaryEmbedding.inv_freq``: a float32 power, then a float32 reciprocal).

    Both steps are correctly rounded here (the power in float64 rounded once; the reciprocal of
    that float32 in float64 rounds to the float32 quotient). torch's float32 ``pow`` is within
    one ulp of this (on CPU it differs at one or three of the 64 release frequencies), which
    moves an angle at position ~15000 by about 1.4e-5 rad at most.
    """
    exponent = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    power = np.power(np.float64(theta), exponent.astype(np.float64)).astype(np.float32)
    return (1.0 / power.astype(np.float64)).astype(np.float32)


def mrope_axis_of_frequency(cfg: Cosmos3DiTConfig) -> np.ndarray:
    """Which position axis (0 t, 1 h, 2 w) turns each of the head_dim / 2 frequencies
    (``apply_interleaved_mrope``): h at ``1, 4, 7, ...`` below ``3 * rope_axes_dim[1]``, w at
    ``2, 5, 8, ...`` below ``3 * rope_axes_dim[2]``, t everywhere else."""
    axis = np.zeros(cfg.head_dim // 2, np.int64)
    for a in (1, 2):
        axis[a:3 * cfg.rope_axes_dim[a]:3] = a
    return axis


def text_positions(text_len: int) -> np.ndarray:
    """float32 (t, h, w) positions ``[3, text_len]`` of the prompt: token ``i`` at (i, i, i)
    (the pipeline's ``get_3d_mrope_ids_text_tokens`` from offset 0)."""
    return np.ascontiguousarray(
        np.broadcast_to(np.arange(text_len, dtype=np.float32), (3, text_len)))


def video_positions(cfg: Cosmos3DiTConfig, text_len: int, grid: tuple[int, int, int],
                    fps: float | None = None) -> np.ndarray:
    """float32 (t, h, w) positions ``[3, t h w]`` of the video tokens after a prompt of
    ``text_len`` tokens, as the pipeline's ``get_3d_mrope_ids_vae_tokens`` makes them
    (``_prepare_vision_segment``; offset ``text_len + temporal_modality_margin``).

    With ``enable_fps_modulation`` and an ``fps`` (the pipeline always passes one) a video of
    more than one latent frame has ``t = frame / (fps / tcf) * (base_fps / tcf) + offset`` in
    float32, in torch's operation order.
    """
    frames, height, width = grid
    offset = text_len + cfg.unified_3d_mrope_temporal_modality_margin
    frame = np.arange(frames, dtype=np.float32)
    if cfg.enable_fps_modulation and fps is not None and frames > 1:
        tcf = cfg.temporal_compression_factor
        t = frame / np.float32(fps / tcf) * np.float32(cfg.base_fps / tcf) + np.float32(offset)
    else:
        t = frame + np.float32(offset)
    spatial = np.float32(0 if cfg.unified_3d_mrope_reset_spatial_ids else offset)
    h = np.arange(height, dtype=np.float32) + spatial
    w = np.arange(width, dtype=np.float32) + spatial
    return np.stack([np.broadcast_to(t[:, None, None], grid),
                     np.broadcast_to(h[None, :, None], grid),
                     np.broadcast_to(w[None, None, :], grid)]).reshape(3, -1)


def mrope_tables(cfg: Cosmos3DiTConfig, positions: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """float32 cos / sin ``[N, head_dim / 2]`` for (t, h, w) positions ``[3, N]``: each
    frequency times its axis' position, one float32 product (diffusers' fp32 matmul with an
    inner size of 1). Only the positions are constants of the program; the angles are traced."""
    inv_freq = jnp.asarray(rope_inv_freq(cfg.head_dim, cfg.rope_theta))
    pos = jnp.asarray(positions, _F32)[mrope_axis_of_frequency(cfg)]   # [head_dim / 2, N]
    angles = pos.T * inv_freq
    return jnp.cos(angles), jnp.sin(angles)


# ----------------------------------------------------------------------------- modules
class Cosmos3MLP(nnx.Module):
    """``Cosmos3VLTextMLP``: SwiGLU (``silu``) or squared ReLU (``relu2``, no gate); the
    activation in float32, rounded once to the compute dtype."""

    def __init__(self, cfg: Cosmos3DiTConfig, *, keys: KeyGen, param_dtype):
        dim, hidden, kw = cfg.hidden_size, cfg.intermediate_size, dict(keys=keys,
                                                                       param_dtype=param_dtype)
        self.act = cfg.hidden_act
        if self.act == "silu":
            self.gate_proj = Linear(dim, hidden, bias=False, **kw)
        self.up_proj = Linear(dim, hidden, bias=False, **kw)
        self.down_proj = Linear(hidden, dim, bias=False, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        up = self.up_proj(x).astype(_F32)
        if self.act == "silu":
            h = jax.nn.silu(self.gate_proj(x).astype(_F32)) * up
        else:
            h = jnp.square(jax.nn.relu(up))
        return self.down_proj(h.astype(x.dtype))


def _heads(x: jax.Array, n: int) -> jax.Array:
    return x.reshape(*x.shape[:-1], n, x.shape[-1] // n)


class Cosmos3Attention(nnx.Module):
    """``Cosmos3PackedMoTAttention`` + ``Cosmos3AttnProcessor``: both pathways' projections and
    per-head norms. ``norm_q`` / ``norm_k`` exist only with ``qk_norm_for_text`` (Nano),
    ``k_norm_und_for_gen`` only without it and with ``use_und_k_norm_for_gen`` (Edge)."""

    def __init__(self, cfg: Cosmos3DiTConfig, *, keys: KeyGen, param_dtype):
        dim, hd = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        kw = dict(keys=keys, param_dtype=param_dtype, bias=cfg.attention_bias)
        nkw = dict(eps=cfg.rms_norm_eps, param_dtype=param_dtype)
        self.to_q = Linear(dim, self.heads * hd, **kw)
        self.to_k = Linear(dim, self.kv_heads * hd, **kw)
        self.to_v = Linear(dim, self.kv_heads * hd, **kw)
        self.to_out = Linear(self.heads * hd, dim, **kw)
        text_norm = cfg.qk_norm_for_text
        self.norm_q = RMSNorm(hd, **nkw) if text_norm else None
        self.norm_k = RMSNorm(hd, **nkw) if text_norm else None
        self.k_norm_und_for_gen = RMSNorm(hd, **nkw) if cfg.has_und_k_norm_for_gen else None
        self.add_q_proj = Linear(dim, self.heads * hd, **kw)
        self.add_k_proj = Linear(dim, self.kv_heads * hd, **kw)
        self.add_v_proj = Linear(dim, self.kv_heads * hd, **kw)
        self.to_add_out = Linear(self.heads * hd, dim, **kw)
        self.norm_added_q = RMSNorm(hd, **nkw)
        self.norm_added_k = RMSNorm(hd, **nkw)

    def understand(self, x: jax.Array, rope) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The prompt's causal self-attention: its output, and the keys (RoPE'd; through
        ``k_norm_und_for_gen`` where present) and values the video queries read."""
        q, k, v = (_heads(p(x), n) for p, n in ((self.to_q, self.heads),
                                                (self.to_k, self.kv_heads),
                                                (self.to_v, self.kv_heads)))
        if self.norm_q is not None:
            q, k = self.norm_q(q), self.norm_k(k)
        k_for_gen = k if self.k_norm_und_for_gen is None else self.k_norm_und_for_gen(k)
        q, k, k_for_gen = (apply_rope_half(a, *rope) for a in (q, k, k_for_gen))
        length = x.shape[1]
        causal = jnp.tril(jnp.ones((length, length), bool))
        out = attention(q, k, v, mask=causal)
        return self.to_out(out.reshape(*x.shape[:2], -1)), k_for_gen, v

    def generate(self, x: jax.Array, k_und: jax.Array, v_und: jax.Array, rope) -> jax.Array:
        """The video queries over [prompt keys, video keys], no mask."""
        q = apply_rope_half(self.norm_added_q(_heads(self.add_q_proj(x), self.heads)), *rope)
        k = apply_rope_half(self.norm_added_k(_heads(self.add_k_proj(x), self.kv_heads)), *rope)
        v = _heads(self.add_v_proj(x), self.kv_heads)
        k = jnp.concatenate([k_und.astype(k.dtype), k], axis=1)
        v = jnp.concatenate([v_und.astype(v.dtype), v], axis=1)
        # the prompt's and the video's tokens are both sequence-split activations: Ulysses
        # over the [prompt, video] keys, not a gather of them (keys_sequence_parallel)
        out = attention(q, k, v, keys_sequence_parallel=True)
        return self.to_add_out(out.reshape(*x.shape[:2], -1))


class Cosmos3DecoderLayer(nnx.Module):
    """``Cosmos3VLTextMoTDecoderLayer``: pre-norm attention and MLP per pathway; float32
    residual streams, each sub-layer's input rounded once to the compute dtype."""

    def __init__(self, cfg: Cosmos3DiTConfig, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        nkw = dict(eps=cfg.rms_norm_eps, param_dtype=param_dtype)
        self.self_attn = Cosmos3Attention(cfg, **kw)
        self.mlp = Cosmos3MLP(cfg, **kw)
        self.mlp_moe_gen = Cosmos3MLP(cfg, **kw)
        self.input_layernorm = RMSNorm(cfg.hidden_size, **nkw)
        self.input_layernorm_moe_gen = RMSNorm(cfg.hidden_size, **nkw)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, **nkw)
        self.post_attention_layernorm_moe_gen = RMSNorm(cfg.hidden_size, **nkw)

    def understand(self, x: jax.Array, rope, cd) -> tuple[jax.Array, jax.Array, jax.Array]:
        out, k, v = self.self_attn.understand(self.input_layernorm(x).astype(cd), rope)
        x = x + out.astype(_F32)
        x = x + self.mlp(self.post_attention_layernorm(x).astype(cd)).astype(_F32)
        return x, k, v

    def generate(self, x: jax.Array, k_und: jax.Array, v_und: jax.Array, rope, cd) -> jax.Array:
        out = self.self_attn.generate(self.input_layernorm_moe_gen(x).astype(cd), k_und, v_und,
                                      rope)
        x = x + out.astype(_F32)
        return x + self.mlp_moe_gen(self.post_attention_layernorm_moe_gen(x).astype(cd)
                                    ).astype(_F32)


class TimestepEmbedding(nnx.Module):
    """diffusers' ``TimestepEmbedding``: ``linear_2(silu(linear_1(x)))``, both with bias."""

    def __init__(self, dim_in: int, dim: int, *, keys: KeyGen, param_dtype):
        self.linear_1 = Linear(dim_in, dim, keys=keys, param_dtype=param_dtype)
        self.linear_2 = Linear(dim, dim, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear_2(jax.nn.silu(self.linear_1(x)))


class Cosmos3DiT(nnx.Module):
    """The Cosmos3 (Nano, Edge) video DiT: ``Cosmos3OmniTransformer``'s video path in Flax NNX,
    channels-last and batched (each batch item is one of diffusers' packed sequences)."""

    def __init__(self, config: Cosmos3DiTConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        if not isinstance(keys, KeyGen):
            keys = KeyGen(keys)
        cfg = self.config = config
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, **kw)
        self.layers = nnx.List([Cosmos3DecoderLayer(cfg, **kw)
                                for _ in range(cfg.num_hidden_layers)])
        self.norm_moe_gen = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps,
                                    param_dtype=param_dtype)
        self.proj_in = Linear(cfg.patch_latent_dim, cfg.hidden_size, **kw)
        self.proj_out = Linear(cfg.hidden_size, cfg.patch_latent_dim, **kw)
        self.time_embedder = TimestepEmbedding(TIME_PROJ_DIM, cfg.hidden_size, **kw)

    def encode_prompt(self, input_ids: jax.Array, *,
                      compute_dtype=jnp.float32) -> tuple[jax.Array, jax.Array]:
        """The prompt's per-layer keys and values as the video queries read them:
        ``(k, v)``, each ``[layers, B, L, num_key_value_heads, head_dim]`` (k after RoPE and
        ``k_norm_und_for_gen``). They do not depend on the video or the timestep: compute them
        once per prompt and pass them to every sampling step (``prompt_kv=``).

        ``input_ids``: ``[B, L]`` token ids (the pipeline's chat-templated prompt, one length
        for the batch: diffusers attends to every prompt token, there is no padding mask).
        """
        cd = _compute_dtype(compute_dtype)
        ids = jnp.asarray(input_ids)
        if ids.ndim != 2 or not jnp.issubdtype(ids.dtype, jnp.integer):
            raise VidaxError(f"Cosmos3 DiT input_ids {tuple(ids.shape)} ({ids.dtype}) must be "
                             "integer token ids [B, L]")
        x = offload.fetch(self.embed_tokens)(ids).astype(_F32)
        rope = mrope_tables(self.config, text_positions(ids.shape[1]))

        def understand(layer, carry):
            x, k, v = layer.understand(carry[0], rope, cd)
            return x, carry[1] + (k,), carry[2] + (v,)

        # the layers as the sampling step runs them: streamed in when kept in host memory
        _, ks, vs = offload.run(self.layers, (x, (), ()), understand)
        return jnp.stack(ks), jnp.stack(vs)

    def __call__(self, latents: jax.Array, timesteps: jax.Array,
                 input_ids: jax.Array | None = None, *,
                 prompt_kv: tuple[jax.Array, jax.Array] | None = None,
                 condition_mask: jax.Array | None = None, fps: float | None = None,
                 compute_dtype=jnp.float32) -> jax.Array:
        """The velocity for noisy video latents; mirrors ``Cosmos3OmniTransformer.forward``
        on one text + one video segment.

        Args:
          latents: ``[B, T, H, W, latent_channel]`` (the Wan2.2 VAE's normalised latents;
            odd H or W are zero-padded to the patch and the output cropped back).
          timesteps: scheduler timesteps (0..1000, scaled by ``timestep_scale`` here): a
            scalar, ``[B]``, or one per latent frame ``[B, T]``.
          input_ids: the prompt's token ids ``[B, L]``; or give ``prompt_kv``.
          prompt_kv: :meth:`encode_prompt`'s output for the same prompt (and compute dtype).
          condition_mask: ``[B, T]`` or ``[T]``, 1 on clean conditioning frames (image-to-video
            frame 0): they get no timestep embedding and their output is 0, as in diffusers.
          fps: the video's frame rate; with ``enable_fps_modulation`` it stretches the temporal
            positions by ``base_fps / fps`` (the pipeline passes its ``fps``, default 24 = no
            change). A static Python number.
          compute_dtype: ``jnp.float32`` or ``jnp.bfloat16`` (see the module docstring).

        Returns:
          ``[B, T, H, W, latent_channel]`` float32.
        """
        cfg = self.config
        cd = _compute_dtype(compute_dtype)
        x = jnp.asarray(latents, _F32)
        if x.ndim != 5 or x.shape[-1] != cfg.latent_channel:
            raise VidaxError(f"Cosmos3 DiT latents {tuple(x.shape)} must be [B, T, H, W, "
                             f"{cfg.latent_channel}]")
        if (input_ids is None) == (prompt_kv is None):
            raise VidaxError("Cosmos3 DiT: give the prompt as input_ids or as prompt_kv "
                             "(from encode_prompt), exactly one of them")
        b, frames = x.shape[:2]
        noisy = 1.0 - self._frame_mask(condition_mask, b, frames)           # [B, T]
        t = self._timesteps(timesteps, b, frames) * jnp.float32(cfg.timestep_scale)
        if prompt_kv is None:
            prompt_kv = self.encode_prompt(input_ids, compute_dtype=cd)
        k_und, v_und = prompt_kv
        want = (cfg.num_hidden_layers, b, cfg.num_key_value_heads, cfg.head_dim)
        if k_und.ndim != 5 or (*k_und.shape[:2], *k_und.shape[3:]) != want or (
                v_und.shape != k_und.shape):
            raise VidaxError(f"Cosmos3 DiT prompt_kv shapes {tuple(k_und.shape)} / "
                             f"{tuple(v_und.shape)} must be [{cfg.num_hidden_layers}, {b}, L, "
                             f"{cfg.num_key_value_heads}, {cfg.head_dim}] (encode_prompt)")

        tokens, grid = self.patchify(x)
        h = self.proj_in(tokens.astype(cd)).astype(_F32)                    # [B, N, D]
        with jax.default_matmul_precision("highest"):
            emb = self.time_embedder(diffusers_timestep_embedding(
                t, TIME_PROJ_DIM, flip_sin_to_cos=True, downscale_freq_shift=0.0))
        emb = (emb * noisy[..., None])[:, :, None, :]                       # [B, T, 1, D]
        h = (h.reshape(b, frames, -1, cfg.hidden_size) + emb).reshape(h.shape)

        rope = mrope_tables(cfg, video_positions(cfg, k_und.shape[2], grid, fps))
        # each layer with the prompt's keys and values at that layer
        h = run_blocks(h, (list(zip(self.layers, k_und, v_und)),
                           lambda layer_kv, h: layer_kv[0].generate(h, *layer_kv[1:], rope, cd)))
        with jax.default_matmul_precision("highest"):
            out = self.proj_out(self.norm_moe_gen(h))
        out = self.unpatchify(out, grid, x.shape[2:4])
        return out * noisy[:, :, None, None, None]

    def patchify(self, x: jax.Array) -> tuple[jax.Array, tuple[int, int, int]]:
        """``[B, T, H, W, C]`` -> ``[B, T h w, (p_h p_w C)]`` and the token grid ``(T, h, w)``
        (``_patchify_and_pack_latents``: H, W zero-padded up to the patch, the channel fastest
        in a patch feature)."""
        p = self.config.latent_patch_size
        b, frames, height, width, c = x.shape
        hp, wp = -(-height // p), -(-width // p)
        x = jnp.pad(x, ((0, 0), (0, 0), (0, hp * p - height), (0, wp * p - width), (0, 0)))
        x = x.reshape(b, frames, hp, p, wp, p, c).transpose(0, 1, 2, 4, 3, 5, 6)
        return x.reshape(b, frames * hp * wp, p * p * c), (frames, hp, wp)

    def unpatchify(self, x: jax.Array, grid: tuple[int, int, int],
                   size: tuple[int, int]) -> jax.Array:
        """The inverse of :meth:`patchify`, cropped to the latents' ``size`` (H, W)."""
        p, c = self.config.latent_patch_size, self.config.latent_channel
        frames, hp, wp = grid
        x = x.reshape(x.shape[0], frames, hp, wp, p, p, c).transpose(0, 1, 2, 4, 3, 5, 6)
        return x.reshape(x.shape[0], frames, hp * p, wp * p, c)[:, :, :size[0], :size[1]]

    @staticmethod
    def _timesteps(t, batch: int, frames: int) -> jax.Array:
        t = jnp.asarray(t, _F32)
        if t.ndim <= 1 and t.size in (1, batch):
            return jnp.broadcast_to(t.reshape(-1, 1), (batch, frames))
        if t.ndim != 2 or t.shape[0] not in (1, batch) or t.shape[1] not in (1, frames):
            raise VidaxError(f"Cosmos3 DiT timesteps of shape {tuple(t.shape)}: give a scalar, "
                             f"[B] or one per latent frame [B, T] (B = {batch}, T = {frames})")
        return jnp.broadcast_to(t, (batch, frames))

    @staticmethod
    def _frame_mask(mask, batch: int, frames: int) -> jax.Array:
        if mask is None:
            return jnp.zeros((batch, frames), _F32)
        mask = jnp.asarray(mask, _F32)
        if mask.ndim == 1:
            mask = mask[None]
        if mask.ndim != 2 or mask.shape[1] != frames or mask.shape[0] not in (1, batch):
            raise VidaxError(f"Cosmos3 DiT condition_mask {tuple(mask.shape)} must be [B, T] "
                             f"or [T] (B = {batch}, T = {frames} latent frames)")
        return jnp.broadcast_to(mask, (batch, frames))


def _compute_dtype(compute_dtype) -> jnp.dtype:
    cd = jnp.dtype(compute_dtype)
    if cd not in COMPUTE_DTYPES:
        raise VidaxError(f"Cosmos3 DiT compute_dtype must be float32 or bfloat16, got {cd}")
    return cd
