"""Wan2.1's configs: the DiT's (:class:`WanDiTConfig`, the authors' ``WanModel``
hyper-parameters) and the VAE's (:class:`WanVAEConfig`, ``WanVAE_`` plus the latent
statistics), with a preset per release. No JAX here: the registry and ``vidax models`` read
these without loading a model (:mod:`vidax.models.wan2_1.dit`, :mod:`vidax.models.wan2_1.vae`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError
from vidax.tiling import SpatialTiles

# ----------------------------------------------------------------------------- DiT
MODEL_TYPES = ("t2v", "i2v", "flf2v")

# The image branch's width is fixed in the authors' code (``MLPProj(1280, dim)``): the
# hidden size of the CLIP ViT-H/14 whose features it takes.
CLIP_DIM = 1280

# CLIP tokens per image (256 patches + class token) and flf2v's two images
# (``FIRST_LAST_FRAME_CONTEXT_TOKEN_NUMBER``), which ``img_emb.emb_pos`` covers.
CLIP_TOKENS = 257
FLF2V_CLIP_TOKENS = 2 * CLIP_TOKENS


@dataclass(frozen=True)
class WanDiTConfig:
    """The authors' ``WanModel`` hyper-parameters; the defaults are their ``__init__``'s.

    Those defaults matter: the released ``config.json`` files omit the keys the authors list
    in ``ignore_for_config`` (patch_size, cross_attn_norm, qk_norm, text_dim, window_size),
    so :meth:`from_dict` falls back to them exactly as ``WanModel.from_pretrained`` does.
    """

    model_type: str = "t2v"
    patch_size: tuple[int, int, int] = (1, 2, 2)
    text_len: int = 512
    in_dim: int = 16
    dim: int = 2048
    ffn_dim: int = 8192
    freq_dim: int = 256
    text_dim: int = 4096
    out_dim: int = 16
    num_heads: int = 16
    num_layers: int = 32
    window_size: tuple[int, int] = (-1, -1)
    qk_norm: bool = True
    cross_attn_norm: bool = True
    eps: float = 1e-6

    def __post_init__(self):
        object.__setattr__(self, "patch_size", tuple(int(p) for p in self.patch_size))
        object.__setattr__(self, "window_size", tuple(int(w) for w in self.window_size))
        if self.model_type not in MODEL_TYPES:
            raise VidaxError(f"Wan2.1 DiT model_type must be one of {MODEL_TYPES}, "
                             f"got {self.model_type!r}")
        if len(self.patch_size) != 3:
            raise VidaxError(f"Wan2.1 DiT patch_size must have 3 entries, got {self.patch_size}")
        if self.window_size != (-1, -1):
            raise VidaxError(f"Wan2.1 DiT window_size {self.window_size}: only global attention "
                             "(-1, -1) is implemented, the setting of every released checkpoint")
        if self.dim % self.num_heads or (self.dim // self.num_heads) % 2:
            raise VidaxError(f"Wan2.1 DiT dim {self.dim} must split into {self.num_heads} heads "
                             "of an even size")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def rope_axis_dims(self) -> tuple[int, int, int]:
        """Real RoPE dims per (t, h, w) axis: ``d - 4(d//6), 2(d//6), 2(d//6)`` (44/42/42)."""
        d = self.head_dim
        return d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)

    @property
    def has_image_branch(self) -> bool:
        return self.model_type in ("i2v", "flf2v")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WanDiTConfig:
        """From the authors' ``config.json`` or a manifest's ``config``.

        Keys starting with ``_`` (diffusers' ``ConfigMixin`` bookkeeping: ``_class_name``,
        ``_diffusers_version``, ``_name_or_path``) are ignored; any other unknown key is an
        error, since it means a different architecture (e.g. VACE's ``vace_layers``).
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names and not k.startswith("_"))
        if unknown:
            raise VidaxError(f"unknown Wan2.1 DiT config keys {unknown}")
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def t2v_1_3b(cls) -> WanDiTConfig:
        return cls(model_type="t2v", in_dim=16, dim=1536, ffn_dim=8960, num_heads=12,
                   num_layers=30)

    @classmethod
    def t2v_14b(cls) -> WanDiTConfig:
        """Wan2.1-T2V-14B (and T2I-14B)."""
        return cls(model_type="t2v", in_dim=16, dim=5120, ffn_dim=13824, num_heads=40,
                   num_layers=40)

    @classmethod
    def i2v_14b(cls) -> WanDiTConfig:
        """Wan2.1-I2V-14B-480P and -720P (same config)."""
        return dataclasses.replace(cls.t2v_14b(), model_type="i2v", in_dim=36)

    @classmethod
    def flf2v_14b(cls) -> WanDiTConfig:
        """Wan2.1-FLF2V-14B-720P."""
        return dataclasses.replace(cls.t2v_14b(), model_type="flf2v", in_dim=36)

    @classmethod
    def tiny(cls, model_type: str = "t2v") -> WanDiTConfig:
        """For tests: tiny widths, every structural feature kept.

        head_dim 16 gives RoPE axes 8/4/4 (unequal, like 44/42/42); text_len stays 512
        because the authors split image from text tokens by a hard-coded 512.
        """
        return cls(model_type=model_type, in_dim=16 if model_type == "t2v" else 36, dim=64,
                   ffn_dim=128, text_dim=32, num_heads=4, num_layers=2)


# ----------------------------------------------------------------------------- VAE
# The latent statistics of the released VAE: constants of the authors' ``Wan2_1_VAE`` wrapper
# (not stored in the file). Latents are normalised as ``(mu - mean) * (1 / std)``.
WAN2_1_LATENTS_MEAN = (-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                       0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921)

WAN2_1_LATENTS_STD = (2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                      3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160)


@dataclass(frozen=True)
class WanVAEConfig:
    """The authors' ``WanVAE_`` hyper-parameters plus the latent statistics.

    ``temporal_downsample`` is the authors' ``temperal_downsample`` (their spelling is
    accepted by :meth:`from_dict`); the decoder upsamples in the reverse order.
    """

    dim: int = 96
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_downsample: tuple[bool, ...] = (False, True, True)
    latents_mean: tuple[float, ...] = WAN2_1_LATENTS_MEAN
    latents_std: tuple[float, ...] = WAN2_1_LATENTS_STD

    def __post_init__(self):
        for name in ("dim_mult", "temporal_downsample", "latents_mean", "latents_std"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if len(self.dim_mult) != 4:
            # The decoder's channel halving after each upsampling is written for four levels
            # (``if i == 1 or i == 2 or i == 3`` in the authors' Decoder3d).
            raise VidaxError(f"Wan2.1 VAE dim_mult must have 4 levels, got {self.dim_mult}")
        if len(self.temporal_downsample) != len(self.dim_mult) - 1:
            raise VidaxError(f"Wan2.1 VAE temporal_downsample needs {len(self.dim_mult) - 1} "
                             f"entries, got {self.temporal_downsample}")
        if sum(self.temporal_downsample) != 2:
            # Chunks of 1 + 4k frames and 4n+1 <-> n+1 assume a temporal stride of 4.
            raise VidaxError("Wan2.1 VAE: exactly two levels must downsample in time (stride 4), "
                             f"got temporal_downsample {self.temporal_downsample}")
        if len(self.latents_mean) != self.z_dim or len(self.latents_std) != self.z_dim:
            raise VidaxError(f"Wan2.1 VAE latents_mean/std need z_dim={self.z_dim} values each, "
                             f"got {len(self.latents_mean)} and {len(self.latents_std)}")

    @property
    def spatial_stride(self) -> int:
        return 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_stride(self) -> int:
        return 2 ** sum(self.temporal_downsample)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WanVAEConfig:
        """From the authors' ``WanVAE_`` keyword arguments (a manifest's ``config``).

        ``attn_scales`` must be empty (the released setting; the authors' chunked
        encode/decode cannot run attention inside the down/up blocks) and ``dropout`` is
        accepted and unused (inference). Keys starting with ``_`` are ignored; any other
        unknown key is an error.
        """
        d = dict(d)
        if d.pop("attn_scales", []):
            raise VidaxError(f"Wan2.1 VAE attn_scales {d.get('attn_scales')}: only [] (the "
                             "released setting) is supported")
        d.pop("dropout", None)
        if "temperal_downsample" in d:
            d["temporal_downsample"] = d.pop("temperal_downsample")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names and not k.startswith("_"))
        if unknown:
            raise VidaxError(f"unknown Wan2.1 VAE config keys {unknown}")
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def wan2_1(cls) -> WanVAEConfig:
        """``Wan2.1_VAE.pth`` (every Wan2.1 release, Wan2.2 A14B, Cosmos-Predict2.5)."""
        return cls()

    @classmethod
    def tiny(cls) -> WanVAEConfig:
        """For tests: the released block structure at width 8 and 4 latent channels (their
        statistics: the first 4 released values)."""
        return cls(dim=8, z_dim=4, latents_mean=WAN2_1_LATENTS_MEAN[:4],
                   latents_std=WAN2_1_LATENTS_STD[:4])


# ------------------------------------------------------------ VAE tiling (issue #19)
@dataclass(frozen=True)
class TileSettings:
    """The spatial tiles of a tiled decode, in output pixels: diffusers'
    ``AutoencoderKLWan.enable_tiling`` arguments ``tile_sample_min_height`` / ``_width``
    (``height`` / ``width``) and ``tile_sample_stride_height`` / ``_width``; the defaults are
    its constructor's (256 px every 192). Sizes and strides must be multiples of the VAE's
    spatial stride (8 for Wan2.1, 16 for Wan2.2), each stride positive and at most its size."""

    height: int = 256
    width: int = 256
    stride_height: int = 192
    stride_width: int = 192

    def spatial(self, ratio: int, patch: int = 1) -> SpatialTiles:
        """The latent tiles and the blend in decoder-output pixels (``patch`` image pixels
        each), as ``tiled_decode`` derives them: tile ``size // ratio`` and stride
        ``stride // ratio`` latent pixels; blend ``(size - stride) // patch``, keep
        ``stride // patch``."""
        pairs = ((self.height, self.stride_height), (self.width, self.stride_width))
        if any(size % ratio or stride % ratio or not 0 < stride <= size
               for size, stride in pairs):
            raise VidaxError(f"Wan VAE tiles {self}: sizes and strides must be positive "
                             f"multiples of {ratio} px, each stride at most its size")
        (h, sh), (w, sw) = pairs
        return SpatialTiles((h // ratio, w // ratio), (sh // ratio, sw // ratio),
                            ((h - sh) // patch, (w - sw) // patch), (sh // patch, sw // patch))
