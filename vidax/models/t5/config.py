"""The T5 encoders' config (:class:`T5Config`: UMT5-XXL, T5-v1.1-XXL, byT5); the model is
:mod:`vidax.models.t5.model`. No JAX here: the registry, ``vidax models`` and the manifests read
these without loading a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError


@dataclass(frozen=True)
class T5Config:
    """An encoder-only T5: the authors' ``T5Encoder`` arguments plus the two constants their
    ``T5RelativeEmbedding`` / ``T5LayerNorm`` fix (``max_distance`` 128, ``eps`` 1e-6).

    ``dim_attn`` is ``num_heads * head_dim`` (transformers: ``num_heads * d_kv``); it need
    not equal ``dim``. The feed-forward is always gated GELU-tanh (transformers'
    ``feed_forward_proj="gated-gelu"``), the one every encoder vidax serves uses (UMT5,
    T5-v1.1, byT5); the ReLU FFN of the original T5 is rejected by :meth:`from_dict`.
    """

    vocab_size: int = 256384
    dim: int = 4096
    dim_attn: int = 4096
    dim_ffn: int = 10240
    num_heads: int = 64
    num_layers: int = 24
    num_buckets: int = 32
    max_distance: int = 128
    shared_pos: bool = False
    eps: float = 1e-6

    def __post_init__(self):
        if self.dim_attn % self.num_heads:
            raise VidaxError(f"T5 dim_attn {self.dim_attn} must split into {self.num_heads} "
                             "equal heads")
        if self.num_buckets % 4 or self.num_buckets < 4:
            raise VidaxError(f"T5 num_buckets must be a positive multiple of 4 (half per "
                             f"direction, half of that exact), got {self.num_buckets}")
        if self.max_distance <= self.num_buckets // 4:
            raise VidaxError(f"T5 max_distance {self.max_distance} must exceed the exact range "
                             f"num_buckets // 4 = {self.num_buckets // 4}")

    @property
    def head_dim(self) -> int:
        return self.dim_attn // self.num_heads

    # ------------------------------------------------------------------ presets
    @classmethod
    def umt5_xxl(cls) -> T5Config:
        """UMT5-XXL, the authors' ``umt5_xxl(encoder_only=True)``: Wan2.1 and Wan2.2's text
        encoder (``models_t5_umt5-xxl-enc-bf16.pth``). One relative bias per layer."""
        return cls()

    @classmethod
    def t5_v1_1_xxl(cls) -> T5Config:
        """google/t5-v1_1-xxl's encoder (LTX-Video, CogVideoX, PixArt, DeepFloyd IF): one
        relative bias shared by every layer, the 32128-token SentencePiece vocabulary."""
        return cls(vocab_size=32128, shared_pos=True)

    @classmethod
    def glyph_sdxl_v2(cls) -> T5Config:
        """google/byt5-small's encoder as Glyph-SDXL-v2 fine-tuned it (``byt5_model.pt``,
        HunyuanVideo-1.5's glyph-text encoder): 12 layers of 1472, 6 heads of 64 (so
        ``dim_attn`` 384 != ``dim``), one relative bias shared by every layer, and the 384
        byte ids plus 1126 color/font tokens (the authors' ``resize_token_embeddings(1510)``)."""
        return cls(vocab_size=1510, dim=1472, dim_attn=384, dim_ffn=3584, num_heads=6,
                   num_layers=12, shared_pos=True)

    @classmethod
    def tiny(cls) -> T5Config:
        """For tests: every structural feature at toy widths, ``dim_attn != dim`` so a
        mis-ordered head reshape cannot hide, the real bucket settings."""
        return cls(vocab_size=1024, dim=48, dim_attn=64, dim_ffn=96, num_heads=4, num_layers=2)

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> T5Config:
        """From the authors' config (the ``umt5_xxl`` kwargs a manifest records) or a
        transformers ``config.json`` (``model_type`` ``t5``, ``mt5`` or ``umt5``).

        Keys of neither that would change the architecture are errors; keys that only
        steer training or the tokenizer are accepted and dropped (listed below).
        """
        if "d_model" in d:
            return cls._from_transformers(d)
        # Not the encoder's business: training-only dropout, the decoder half, the preset's
        # name, and the tokenizer's own settings (``text_len``, its folder).
        dropped = {"dropout", "encoder_only", "decoder_layers", "name", "text_len", "tokenizer"}
        renamed = {"encoder_layers": "num_layers"}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names | dropped | set(renamed))
        if unknown:
            raise VidaxError(f"unknown T5 encoder config keys {unknown}")
        kwargs = {renamed.get(k, k): v for k, v in d.items() if k not in dropped}
        return cls(**kwargs)

    @classmethod
    def _from_transformers(cls, d: dict[str, Any]) -> T5Config:
        model_type = d.get("model_type", "t5")
        if model_type not in ("t5", "mt5", "umt5"):
            raise VidaxError(f"a transformers config of model_type {model_type!r}; the T5 "
                             "encoder reads t5, mt5 and umt5 configs")
        ffn = d.get("feed_forward_proj", "relu")
        if ffn != "gated-gelu":
            raise VidaxError(f"T5 feed_forward_proj {ffn!r}: vidax implements the gated "
                             "GELU-tanh feed-forward ('gated-gelu': T5-v1.1, mT5, UMT5, byT5)")
        return cls(vocab_size=d["vocab_size"], dim=d["d_model"],
                   dim_attn=d["num_heads"] * d["d_kv"], dim_ffn=d["d_ff"],
                   num_heads=d["num_heads"], num_layers=d["num_layers"],
                   num_buckets=d.get("relative_attention_num_buckets", 32),
                   max_distance=d.get("relative_attention_max_distance", 128),
                   shared_pos=model_type != "umt5", eps=d.get("layer_norm_epsilon", 1e-6))
