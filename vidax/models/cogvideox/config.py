"""CogVideoX / CogVideoX1.5's configs (diffusers' ``CogVideoXTransformer3DModel`` and
``AutoencoderKLCogVideoX`` hyper-parameters); the models are :mod:`vidax.models.cogvideox.dit`
and ``.vae``. No JAX here: the registry, ``vidax models`` and the manifests read these without
loading a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError
from vidax.tiling import SpatialTiles

# ------------------------------------------------------------------------- DiT
#: ``CogVideoXTransformer3DModel`` config keys with one implemented value (every release's),
#: and keys without effect at inference.
_FIXED_KEYS = {"activation_fn": "gelu-approximate", "timestep_activation_fn": "silu"}
_IGNORED_KEYS = {"dropout"}


@dataclass(frozen=True)
class CogVideoXDiTConfig:
    """``CogVideoXTransformer3DModel``'s hyper-parameters, by diffusers' names; the defaults
    are its ``__init__``'s (the released ``config.json`` files rely on some of them)."""

    num_attention_heads: int = 30
    attention_head_dim: int = 64
    in_channels: int = 16
    out_channels: int = 16
    flip_sin_to_cos: bool = True
    freq_shift: int = 0
    time_embed_dim: int = 512
    ofs_embed_dim: int | None = None
    text_embed_dim: int = 4096
    num_layers: int = 30
    attention_bias: bool = True
    sample_width: int = 90
    sample_height: int = 60
    sample_frames: int = 49
    patch_size: int = 2
    patch_size_t: int | None = None
    temporal_compression_ratio: int = 4
    max_text_seq_length: int = 226
    norm_elementwise_affine: bool = True
    norm_eps: float = 1e-5
    spatial_interpolation_scale: float = 1.875
    temporal_interpolation_scale: float = 1.0
    use_rotary_positional_embeddings: bool = False
    use_learned_positional_embeddings: bool = False
    patch_bias: bool = True

    def __post_init__(self):
        if self.use_learned_positional_embeddings and not self.use_rotary_positional_embeddings:
            raise VidaxError("CogVideoX DiT: a learned positional table without RoPE exists in "
                             "no release (diffusers refuses it too)")
        if self.patch_size_t is not None and not self.use_rotary_positional_embeddings:
            raise VidaxError("CogVideoX DiT: temporal patching (patch_size_t) with the sincos "
                             "table exists in no release (CogVideoX1.5 uses RoPE)")
        if self.use_rotary_positional_embeddings and self.attention_head_dim % 16:
            raise VidaxError(f"CogVideoX DiT: RoPE splits attention_head_dim "
                             f"{self.attention_head_dim} into t/h/w parts of d/4, 3d/8, 3d/8 "
                             "dims, each an even count; d must be a multiple of 16")
        if self.ofs_embed_dim and self.ofs_embed_dim != self.time_embed_dim:
            raise VidaxError(f"CogVideoX DiT: the ofs embedding (width {self.ofs_embed_dim}) "
                             f"is added to the time embedding (width {self.time_embed_dim}); "
                             "the two must match")
        if not self.use_rotary_positional_embeddings and self.inner_dim % 16:
            raise VidaxError(f"CogVideoX DiT: the 3D sincos table needs a width divisible by "
                             f"16, got {self.inner_dim}")

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def has_pos_table(self) -> bool:
        """Whether an absolute table is added to the tokens (2b sincos, 5b-i2v learned)."""
        return (not self.use_rotary_positional_embeddings
                or self.use_learned_positional_embeddings)

    @property
    def sample_grid(self) -> tuple[int, int, int]:
        """The (frames, rows, columns) token grid at the sample size: where the learned
        table is defined."""
        return ((self.sample_frames - 1) // self.temporal_compression_ratio + 1,
                self.sample_height // self.patch_size, self.sample_width // self.patch_size)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CogVideoXDiTConfig:
        """From diffusers' ``transformer/config.json`` (or a manifest's ``config``). Keys
        starting with ``_`` are diffusers' bookkeeping; ``dropout`` is unused at inference;
        ``activation_fn`` / ``timestep_activation_fn`` must be the releases' values."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if not k.startswith("_") and k not in names
                         and k not in _FIXED_KEYS and k not in _IGNORED_KEYS)
        if unknown:
            raise VidaxError(f"unknown CogVideoXTransformer3DModel config keys {unknown}")
        for key, value in _FIXED_KEYS.items():
            if d.get(key, value) != value:
                raise VidaxError(f"CogVideoXTransformer3DModel {key} {d[key]!r}: only "
                                 f"{value!r} (every release) is implemented")
        kwargs = {k: v for k, v in d.items() if k in names}
        if kwargs.get("out_channels", 16) is None:
            raise VidaxError("CogVideoXTransformer3DModel out_channels is null; diffusers "
                             "cannot build that model either")
        return cls(**kwargs)

    @classmethod
    def cogvideox_2b(cls) -> CogVideoXDiTConfig:
        """THUDM/CogVideoX-2b: 30 layers of width 1920, sincos positions."""
        return cls(num_attention_heads=30, num_layers=30)

    @classmethod
    def cogvideox_5b(cls) -> CogVideoXDiTConfig:
        """THUDM/CogVideoX-5b: 42 layers of width 3072, 3D RoPE."""
        return cls(num_attention_heads=48, num_layers=42, use_rotary_positional_embeddings=True)

    @classmethod
    def cogvideox_5b_i2v(cls) -> CogVideoXDiTConfig:
        """THUDM/CogVideoX-5b-I2V: the 5b with 32 input channels and a learned table."""
        return dataclasses.replace(cls.cogvideox_5b(), in_channels=32,
                                   use_learned_positional_embeddings=True)

    @classmethod
    def cogvideox1_5_5b(cls) -> CogVideoXDiTConfig:
        """THUDM/CogVideoX1.5-5B: temporal patch 2, Linear patch embedding, slice RoPE."""
        return dataclasses.replace(cls.cogvideox_5b(), patch_size_t=2, patch_bias=False,
                                   sample_frames=81, sample_height=300, sample_width=300)

    @classmethod
    def cogvideox1_5_5b_i2v(cls) -> CogVideoXDiTConfig:
        """THUDM/CogVideoX1.5-5B-I2V: the 1.5 with 32 input channels and the ofs embedding."""
        return dataclasses.replace(cls.cogvideox1_5_5b(), in_channels=32, ofs_embed_dim=512)

    @classmethod
    def tiny(cls, variant: str = "2b") -> CogVideoXDiTConfig:
        """For tests: the structure of ``variant`` (a released variant's name) at tiny
        widths: 2 heads of 16 (RoPE pairs t/h/w = 2/3/3), 2 layers, 8 text tokens, and a
        sample size of 3 latent frames x 4 x 6 patches (where the learned table applies)."""
        presets = {"2b": cls.cogvideox_2b, "5b": cls.cogvideox_5b,
                   "5b-i2v": cls.cogvideox_5b_i2v, "1.5-5b": cls.cogvideox1_5_5b,
                   "1.5-5b-i2v": cls.cogvideox1_5_5b_i2v}
        if variant not in presets:
            raise VidaxError(f"CogVideoX DiT has no variant {variant!r}; known: "
                             f"{', '.join(presets)}")
        base = presets[variant]()
        return dataclasses.replace(
            base, num_attention_heads=2, attention_head_dim=16, num_layers=2,
            time_embed_dim=24, text_embed_dim=20, max_text_seq_length=8,
            ofs_embed_dim=24 if base.ofs_embed_dim else None,
            sample_frames=2 * base.temporal_compression_ratio + 1,
            sample_height=4 * base.patch_size, sample_width=6 * base.patch_size)
# ------------------------------------------------------------------------- VAE
@dataclass(frozen=True)
class CogVideoXVAEConfig:
    """``AutoencoderKLCogVideoX``'s hyper-parameters (diffusers' names).

    ``scaling_factor``: latents fed to the DiT are ``mean * scaling_factor``.
    ``invert_scale_latents`` (1.5 releases): the image-to-video pipelines *divide* the image
    latent by ``scaling_factor`` instead (a training quirk of CogVideoX1.5; video latents are
    still multiplied). The VAE itself never reads it; it is here for the pipelines.
    """

    in_channels: int = 3
    out_channels: int = 3
    block_out_channels: tuple[int, ...] = (128, 256, 256, 512)
    latent_channels: int = 16
    layers_per_block: int = 3
    norm_num_groups: int = 32
    norm_eps: float = 1e-6
    temporal_compression_ratio: int = 4
    scaling_factor: float = 1.15258426
    invert_scale_latents: bool = False

    def __post_init__(self):
        object.__setattr__(self, "block_out_channels", tuple(self.block_out_channels))
        ratio = self.temporal_compression_ratio
        if ratio < 1 or ratio & (ratio - 1):
            raise VidaxError(f"CogVideoX VAE temporal_compression_ratio {ratio}: must be a "
                             "power of two (the releases: 4)")
        for c in self.block_out_channels:
            if c % self.norm_num_groups:
                raise VidaxError(f"CogVideoX VAE block_out_channels {self.block_out_channels}: "
                                 f"each must split into norm_num_groups={self.norm_num_groups}")

    @property
    def spatial_stride(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)

    @property
    def temporal_levels(self) -> int:
        """How many of the first down / up blocks resample time (diffusers' ``compress_time``
        is ``i < log2(temporal_compression_ratio)``)."""
        return int(self.temporal_compression_ratio).bit_length() - 1

    # ------------------------------------------------------------------ released configs
    @classmethod
    def cogvideox_2b(cls) -> CogVideoXVAEConfig:
        """THUDM/CogVideoX-2b ``vae/config.json``."""
        return cls(scaling_factor=1.15258426)

    @classmethod
    def cogvideox_5b(cls) -> CogVideoXVAEConfig:
        """THUDM/CogVideoX-5b and -5b-I2V."""
        return cls(scaling_factor=0.7)

    @classmethod
    def cogvideox1_5_5b(cls) -> CogVideoXVAEConfig:
        """THUDM/CogVideoX1.5-5B and -5B-I2V (``invert_scale_latents: true``)."""
        return cls(scaling_factor=0.7, invert_scale_latents=True)

    @classmethod
    def tiny(cls) -> CogVideoXVAEConfig:
        """For tests: the released block structure (4 levels, time compressed in the first
        two, 3 resnets per encoder level and 4 per decoder level) at widths 8-16, 4 groups,
        4 latent channels."""
        return cls(block_out_channels=(8, 16, 16, 16), latent_channels=4, norm_num_groups=4)

    # The config.json keys read below, and those accepted without effect: the tiling
    # defaults (sample_height/width), force_upcast, and latents_mean/std / shift_factor, which
    # diffusers' CogVideoX code stores but never uses.
    _UNUSED_KEYS = ("sample_height", "sample_width", "force_upcast", "latents_mean",
                    "latents_std", "shift_factor")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CogVideoXVAEConfig:
        """From diffusers' ``vae/config.json`` (a manifest's ``config``). Keys starting with
        ``_`` are ignored; an unknown key, another block type or activation, or enabled quant
        convs are errors."""
        d = {k: v for k, v in d.items() if not k.startswith("_")}
        for key in cls._UNUSED_KEYS:
            d.pop(key, None)
        levels = len(d.get("block_out_channels", cls.block_out_channels))
        for key, kind in (("down_block_types", "CogVideoXDownBlock3D"),
                          ("up_block_types", "CogVideoXUpBlock3D")):
            types = d.pop(key, [kind] * levels)
            if list(types) != [kind] * levels:
                raise VidaxError(f"AutoencoderKLCogVideoX {key} {types}: only {levels} x "
                                 f"{kind!r} (every release) is supported")
        if d.pop("act_fn", "silu") != "silu":
            raise VidaxError("AutoencoderKLCogVideoX act_fn: only 'silu' (every release) is "
                             "supported")
        for key in ("use_quant_conv", "use_post_quant_conv"):
            if d.pop(key, False):
                raise VidaxError(f"AutoencoderKLCogVideoX {key}: true is not supported (every "
                                 "release has it false: no quant_conv tensors)")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise VidaxError(f"unknown AutoencoderKLCogVideoX config keys {unknown}")
        if "temporal_compression_ratio" in d:
            ratio = d["temporal_compression_ratio"]
            if int(ratio) != ratio:
                raise VidaxError(f"AutoencoderKLCogVideoX temporal_compression_ratio {ratio}: "
                                 "must be an integer power of two")
            d["temporal_compression_ratio"] = int(ratio)
        return cls(**d)


# ------------------------------------------------------------ VAE tiling (issue #19)
@dataclass(frozen=True)
class TileSettings:
    """The spatial tiles of a tiled decode: ``AutoencoderKLCogVideoX.enable_tiling``'s
    ``tile_sample_min_height`` / ``_width`` (output pixels, multiples of the spatial stride)
    and ``tile_overlap_factor_height`` / ``_width``; the defaults are its constructor's for
    the releases' ``sample_height`` / ``sample_width`` (480 / 720, halved) and overlaps. The
    latent tile starts every ``int(latent * (1 - overlap))``, blends ``int(size * overlap)``
    output pixels and keeps ``size - blend``, which must equal the latent stride times the
    spatial stride (else diffusers' tiles would not add up to the frame)."""

    height: int = 240
    width: int = 360
    overlap_height: float = 1 / 6
    overlap_width: float = 1 / 5

    def spatial(self, ratio: int = 8) -> SpatialTiles:
        dims = []
        for size, overlap in ((self.height, self.overlap_height),
                              (self.width, self.overlap_width)):
            latent = size // ratio
            stride = int(latent * (1 - overlap))
            blend = int(size * overlap)
            if size <= 0 or size % ratio or not 0 < stride <= latent or \
                    size - blend != stride * ratio:
                raise VidaxError(f"CogVideoX VAE tiles {self}: sizes must be multiples of "
                                 f"{ratio} px with size * (1 - overlap) a whole number of "
                                 f"latent pixels (as 240 x 360 with 1/6 and 1/5)")
            dims.append((latent, stride, blend, size - blend))
        (lh, sh, bh, kh), (lw, sw, bw, kw) = dims
        return SpatialTiles((lh, lw), (sh, sw), (bh, bw), (kh, kw))
