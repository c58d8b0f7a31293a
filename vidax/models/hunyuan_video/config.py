"""HunyuanVideo 1.0's configs: the DiT's (:class:`HunyuanVideoDiTConfig`, on :class:`DiTGeometry`,
which HunyuanVideo-1.5's DiT config shares) and the VAE's (:class:`HunyuanVideoVAEConfig`); the
models are :mod:`vidax.models.hunyuan_video.dit` and ``.vae``. No JAX here: the registry,
``vidax models`` and the manifests read these without loading a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError
from vidax.tiling import SpatialTiles, TileGeometry  # noqa: F401  (re-exported)

# ------------------------------------------------------------------------- DiT
# The authors' named architectures (``HUNYUAN_VIDEO_CONFIG``) that ``from_dict`` resolves a
# config's ``model`` key through, before the explicit keys override them.
_NAMED_MODELS: dict[str, dict[str, Any]] = {
    "HYVideo-T/2": dict(mm_double_blocks_depth=20, mm_single_blocks_depth=40,
                        rope_dim_list=(16, 56, 56), hidden_size=3072, heads_num=24,
                        mlp_width_ratio=4.0, guidance_embed=False),
    "HYVideo-T/2-cfgdistill": dict(mm_double_blocks_depth=20, mm_single_blocks_depth=40,
                                   rope_dim_list=(16, 56, 56), hidden_size=3072, heads_num=24,
                                   mlp_width_ratio=4.0, guidance_embed=True),
}

# Options of the authors' class for which vidax implements one value: every release's.
_FIXED = {"qkv_bias": True, "qk_norm": True, "qk_norm_type": "rms", "mlp_act_type": "gelu_tanh",
          "text_projection": "single_refiner", "use_attention_mask": True}


class DiTGeometry:
    """What the HunyuanVideo 1.0 and 1.5 DiT configs share: the (t, h, w) patch and RoPE split
    checks and the head / MLP sizes. Subclasses are frozen dataclasses with ``patch_size``,
    ``rope_dim_list``, ``hidden_size``, ``heads_num`` and ``mlp_width_ratio`` fields, and name
    themselves in ``_NAME`` for the error messages."""

    _NAME = "HunyuanVideo DiT"

    def __post_init__(self):
        object.__setattr__(self, "patch_size", tuple(int(p) for p in self.patch_size))
        object.__setattr__(self, "rope_dim_list", tuple(int(d) for d in self.rope_dim_list))
        if len(self.patch_size) != 3 or len(self.rope_dim_list) != 3:
            raise VidaxError(f"{self._NAME} patch_size {self.patch_size} and rope_dim_list "
                             f"{self.rope_dim_list} must have 3 entries (t, h, w)")
        if self.hidden_size % self.heads_num:
            raise VidaxError(f"{self._NAME} hidden_size {self.hidden_size} does not split "
                             f"into {self.heads_num} heads")
        if sum(self.rope_dim_list) != self.head_dim or any(d % 2 for d in self.rope_dim_list):
            raise VidaxError(f"{self._NAME} rope_dim_list {self.rope_dim_list} must be even "
                             f"sizes summing to the head size {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.heads_num

    @property
    def mlp_dim(self) -> int:
        return int(self.hidden_size * self.mlp_width_ratio)


@dataclass(frozen=True)
class HunyuanVideoDiTConfig(DiTGeometry):
    """The authors' ``HYVideoDiffusionTransformer`` hyper-parameters (their argument names)."""

    patch_size: tuple[int, int, int] = (1, 2, 2)
    in_channels: int = 16
    out_channels: int = 16
    hidden_size: int = 3072
    heads_num: int = 24
    mlp_width_ratio: float = 4.0
    mm_double_blocks_depth: int = 20
    mm_single_blocks_depth: int = 40
    rope_dim_list: tuple[int, int, int] = (16, 56, 56)
    rope_theta: float = 256.0
    guidance_embed: bool = True
    text_states_dim: int = 4096      # LLaVA-Llama-3-8B hidden size
    text_states_dim_2: int = 768     # CLIP-L pooled vector

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HunyuanVideoDiTConfig:
        """From the authors' model arguments (a manifest's ``config``): ``model`` names one of
        their ``HUNYUAN_VIDEO_CONFIG`` entries, whose values the explicit keys override, as
        their ``load_model`` does. Keys starting with ``_`` are ignored; an option with another
        value than every release's, or an unknown key, is an error."""
        d = {k: v for k, v in d.items() if not k.startswith("_")}
        base: dict[str, Any] = {}
        if "model" in d:
            name = d.pop("model")
            if name not in _NAMED_MODELS:
                raise VidaxError(f"unknown HunyuanVideo DiT model {name!r}; known: "
                                 f"{', '.join(_NAMED_MODELS)}")
            base = dict(_NAMED_MODELS[name])
        for key, value in _FIXED.items():
            if key in d and d.pop(key) != value:
                raise VidaxError(f"HunyuanVideo DiT config {key}: only {value!r} (every "
                                 "release) is implemented")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names)
        if unknown:
            raise VidaxError(f"unknown HunyuanVideo DiT config keys {unknown}")
        return cls(**{**base, **d})

    @classmethod
    def t2v_720p(cls) -> HunyuanVideoDiTConfig:
        """``hunyuan-video-t2v-720p`` (HYVideo-T/2-cfgdistill): 20 double + 40 single blocks of
        width 3072, guidance-distilled."""
        return cls()

    @classmethod
    def tiny(cls) -> HunyuanVideoDiTConfig:
        """For tests: tiny widths, every structural feature kept (2 heads of 32 with unequal
        RoPE axes 8/12/12, like 16/56/56; two blocks of each kind; the guidance embedding)."""
        return cls(hidden_size=64, heads_num=2, mm_double_blocks_depth=2,
                   mm_single_blocks_depth=2, rope_dim_list=(8, 12, 12), text_states_dim=32,
                   text_states_dim_2=24)
# ------------------------------------------------------------------------- VAE
@dataclass(frozen=True)
class HunyuanVideoVAEConfig:
    """``AutoencoderKLHunyuanVideo``'s hyper-parameters (diffusers' names).

    ``scaling_factor``: latents fed to the DiT are ``mean * scaling_factor`` (no shift).
    """

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 16
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: int = 2
    norm_num_groups: int = 32
    scaling_factor: float = 0.476986
    spatial_compression_ratio: int = 8
    temporal_compression_ratio: int = 4
    mid_block_add_attention: bool = True

    def __post_init__(self):
        object.__setattr__(self, "block_out_channels", tuple(self.block_out_channels))
        levels = len(self.block_out_channels)
        if self.temporal_compression_ratio != 4:
            raise VidaxError(f"HunyuanVideo VAE temporal_compression_ratio "
                             f"{self.temporal_compression_ratio}: only 4 is supported (the "
                             "release; diffusers' decoder takes no other)")
        s = self.spatial_compression_ratio
        if s < 1 or s & (s - 1) or s.bit_length() - 1 > levels:
            raise VidaxError(f"HunyuanVideo VAE spatial_compression_ratio {s}: must be a power "
                             f"of two of at most 2^{levels} ({levels} levels)")
        if levels < 4:
            raise VidaxError(f"HunyuanVideo VAE block_out_channels {self.block_out_channels}: "
                             "4x temporal compression needs at least 4 levels")
        for c in self.block_out_channels:
            if c % self.norm_num_groups:
                raise VidaxError(f"HunyuanVideo VAE block_out_channels {self.block_out_channels}:"
                                 f" each must split into norm_num_groups={self.norm_num_groups}")

    def resample(self, level: int) -> tuple[int, int]:
        """(time, space) factors of level ``level``'s down- (encoder) or up-sampler (decoder,
        counted from its first, widest level): space at the first ``log2(spatial ratio)``
        levels, time at the two levels before the last (diffusers' ``add_*_downsample`` /
        ``add_*_upsample`` for a temporal ratio of 4)."""
        levels = len(self.block_out_channels)
        space = level < self.spatial_compression_ratio.bit_length() - 1
        time = levels - 3 <= level < levels - 1
        return (2 if time else 1), (2 if space else 1)

    # ------------------------------------------------------------------ released configs
    @classmethod
    def t2v_720p(cls) -> HunyuanVideoVAEConfig:
        """``tencent/HunyuanVideo`` ``hunyuan-video-t2v-720p/vae/config.json``."""
        return cls()

    @classmethod
    def tiny(cls) -> HunyuanVideoVAEConfig:
        """For tests: the released structure (4 levels; space halved at levels 0-2, time at
        levels 1-2; 2 encoder / 3 decoder resnets per level; width changes, hence shortcut convs,
        where the release has them; mid-block attention) at widths 8-32, 4 groups, 4 latent
        channels."""
        return cls(block_out_channels=(8, 16, 32, 32), latent_channels=4, norm_num_groups=4)

    #: config.json keys accepted without effect: the authors' tiling sizes.
    _UNUSED_KEYS = ("sample_size", "sample_tsize")
    #: Block types: diffusers' names and the authors' (``AutoencoderKLCausal3D``).
    _DOWN_TYPES = ("HunyuanVideoDownBlock3D", "DownEncoderBlockCausal3D")
    _UP_TYPES = ("HunyuanVideoUpBlock3D", "UpDecoderBlockCausal3D")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HunyuanVideoVAEConfig:
        """From the release's ``vae/config.json`` (the authors' keys, as in the manifest) or a
        diffusers ``AutoencoderKLHunyuanVideo`` ``config.json``. Keys starting with ``_`` are
        ignored; the authors' ``time_compression_ratio`` is diffusers'
        ``temporal_compression_ratio``; an unknown key, another block type or activation are
        errors."""
        d = {k: v for k, v in d.items() if not k.startswith("_")}
        for key in cls._UNUSED_KEYS:
            d.pop(key, None)
        if "time_compression_ratio" in d:
            ratio = d.pop("time_compression_ratio")
            if d.setdefault("temporal_compression_ratio", ratio) != ratio:
                raise VidaxError("HunyuanVideo VAE config: time_compression_ratio and "
                                 "temporal_compression_ratio disagree")
        levels = len(d.get("block_out_channels", cls.block_out_channels))
        for key, kinds in (("down_block_types", cls._DOWN_TYPES),
                           ("up_block_types", cls._UP_TYPES)):
            types = list(d.pop(key, [kinds[0]] * levels))
            if len(types) != levels or any(t != types[0] for t in types) or \
                    types[0] not in kinds:
                raise VidaxError(f"HunyuanVideo VAE {key} {types}: only {levels} x one of "
                                 f"{list(kinds)} is supported")
        if d.pop("act_fn", "silu") != "silu":
            raise VidaxError("HunyuanVideo VAE act_fn: only 'silu' (the release) is supported")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise VidaxError(f"unknown HunyuanVideo VAE config keys {unknown}")
        return cls(**d)

# ------------------------------------------------------------ VAE tiling (issue #14 addition)
#: diffusers' framewise (temporal-tile) defaults: ``tile_sample_min_num_frames`` (a tile spans
#: one frame more) and ``tile_sample_stride_num_frames``, in video frames.
TILE_FRAMES, TILE_STRIDE = 16, 12
#: diffusers' spatial-tile defaults (``enable_tiling``): ``tile_sample_min_height`` / ``_width``
#: and ``tile_sample_stride_height`` / ``_width``, in output pixels.
TILE_SIZE, TILE_SPATIAL_STRIDE = 256, 192


@dataclass(frozen=True)
class TileSettings:
    """diffusers' ``AutoencoderKLHunyuanVideo.enable_tiling`` sizes, in output pixels /
    frames: ``tile_sample_min_height`` / ``_width`` and ``tile_sample_stride_height`` /
    ``_width`` (defaults 256 and 192: also the authors' ``sample_size`` 256 with
    ``tile_overlap_factor`` 0.25), ``tile_sample_min_num_frames`` /
    ``tile_sample_stride_num_frames`` (16 and 12; the temporal tiles of ``framewise``).
    Multiples of the spatial (temporal) ratio, strides positive and at most the size.
    :data:`AUTHORS_TILES` is what the authors' ``AutoencoderKLCausal3D`` tiles with."""

    height: int = TILE_SIZE
    width: int = TILE_SIZE
    stride_height: int = TILE_SPATIAL_STRIDE
    stride_width: int = TILE_SPATIAL_STRIDE
    frames: int = TILE_FRAMES
    stride_frames: int = TILE_STRIDE

    def spatial(self, ratio: int = 8) -> SpatialTiles:
        pairs = ((self.height, self.stride_height, ratio), (self.width, self.stride_width, ratio),
                 (self.frames, self.stride_frames, 4))
        if any(size % r or stride % r or not 0 < stride <= size for size, stride, r in pairs):
            raise VidaxError(f"HunyuanVideo VAE tiles {self}: sizes and strides must be "
                             f"positive multiples of {ratio} px (4 frames), each stride at "
                             "most its size")
        return SpatialTiles((self.height // ratio, self.width // ratio),
                            (self.stride_height // ratio, self.stride_width // ratio),
                            (self.height - self.stride_height, self.width - self.stride_width),
                            (self.stride_height, self.stride_width))


#: The authors' tiles (``AutoencoderKLCausal3D`` with the release's ``sample_size`` 256,
#: ``sample_tsize`` 64 and ``tile_overlap_factor`` 0.25, hyvideo/vae/autoencoder_kl_causal_3d.py
#: at fa14b001; their pipeline's default ``--vae-tiling`` turns both on): diffusers' spatial
#: defaults, temporal tiles of 64 frames every 48 (17 latent frames every 12) instead of 16 / 12.
AUTHORS_TILES = TileSettings(frames=64, stride_frames=48)
