"""HunyuanVideo-1.5's configs: the DiT's (:class:`HunyuanVideo15DiTConfig`) and the VAE's
(:class:`HunyuanVideo15VAEConfig`, with its :class:`Resampler` stages); the models are
:mod:`vidax.models.hunyuan_video1_5.dit` and ``.vae``. No JAX here: the registry, ``vidax
models`` and the manifests read these without loading a model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError
from vidax.models.hunyuan_video.config import DiTGeometry
from vidax.tiling import SpatialTiles

# ------------------------------------------------------------------------- DiT
# Options of the authors' class for which vidax implements one value: every release's.
_FIXED = {"mm_single_blocks_depth": 0, "qkv_bias": True, "qk_norm": True, "qk_norm_type": "rms",
          "mlp_act_type": "gelu_tanh", "text_projection": "single_refiner",
          "use_attention_mask": True, "glyph_byT5_v2": True, "vision_projection": "linear",
          "use_cond_type_embedding": True, "guidance_embed": False, "text_pool_type": None,
          "text_states_dim_2": None, "is_reshape_temporal_channels": False,
          "concat_condition": True}

# Keys that choose the attention kernel (flash / SSTA block-sparse); vidax always runs dense
# attention through ``vidax.nn.attention``, so they have no effect here.
_KERNEL_KEYS = ("attn_mode", "attn_param")


@dataclass(frozen=True)
class HunyuanVideo15DiTConfig(DiTGeometry):
    """The authors' ``HunyuanVideo_1_5_DiffusionTransformer`` hyper-parameters (their argument
    names; ``byt5_states_dim`` / ``byt5_hidden_dim`` are their hard-coded ``ByT5Mapper(in_dim=
    1472, hidden_dim=2048, out_dim=2048)``)."""

    _NAME = "HunyuanVideo-1.5 DiT"

    patch_size: tuple[int, int, int] = (1, 1, 1)
    in_channels: int = 32            # latent channels; img_in sees 2 * in_channels + 1
    out_channels: int = 32
    hidden_size: int = 2048
    heads_num: int = 16
    mlp_width_ratio: float = 4.0
    mm_double_blocks_depth: int = 54
    rope_dim_list: tuple[int, int, int] = (16, 56, 56)
    rope_theta: float = 256.0
    use_meanflow: bool = False       # step-distilled: ``time_r_in``
    text_states_dim: int = 3584      # Qwen2.5-VL-7B hidden size
    vision_states_dim: int = 1152    # SigLIP so400m
    byt5_states_dim: int = 1472      # byT5-small d_model
    byt5_hidden_dim: int = 2048
    ideal_resolution: str | None = None   # pipeline hints ("480p" / "720p"), no effect here
    ideal_task: str | None = None         # "t2v" / "i2v"

    @property
    def img_in_channels(self) -> int:
        """``concat_condition``: [noisy latent | condition latent | mask]."""
        return 2 * self.in_channels + 1

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HunyuanVideo15DiTConfig:
        """From a release's ``transformer/<variant>/config.json`` (a manifest's ``config``).
        Keys starting with ``_`` and the attention-kernel keys are ignored; an option with
        another value than every release's, or an unknown key, is an error."""
        d = {k: v for k, v in d.items() if not k.startswith("_") and k not in _KERNEL_KEYS}
        for key, value in _FIXED.items():
            if key in d and d.pop(key) != value:
                raise VidaxError(f"HunyuanVideo-1.5 DiT config {key}: only {value!r} (every "
                                 "base release) is implemented")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names)
        if unknown:
            raise VidaxError(f"unknown HunyuanVideo-1.5 DiT config keys {unknown}")
        return cls(**d)

    # The releases (``transformer/<variant>``). All share one tensor set except the
    # step-distilled one; the cfg-distilled ones differ only in their weights.
    @classmethod
    def t2v_480p(cls) -> HunyuanVideo15DiTConfig:
        return cls(ideal_resolution="480p", ideal_task="t2v")

    @classmethod
    def i2v_480p(cls) -> HunyuanVideo15DiTConfig:
        return cls(ideal_resolution="480p", ideal_task="i2v")

    @classmethod
    def t2v_720p(cls) -> HunyuanVideo15DiTConfig:
        return cls(ideal_resolution="720p", ideal_task="t2v")

    @classmethod
    def i2v_720p(cls) -> HunyuanVideo15DiTConfig:
        return cls(ideal_resolution="720p", ideal_task="i2v")

    t2v_480p_distilled = t2v_480p
    i2v_480p_distilled = i2v_480p
    i2v_720p_distilled = i2v_720p
    i2v_720p_distilled_sparse = i2v_720p   # SSTA: a kernel choice, same weights and config

    @classmethod
    def i2v_480p_step_distilled(cls) -> HunyuanVideo15DiTConfig:
        """MeanFlow step distillation: ``time_r_in`` embeds the interval end ``t_r``."""
        return cls(ideal_resolution="480p", ideal_task="i2v", use_meanflow=True)

    @classmethod
    def tiny(cls) -> HunyuanVideo15DiTConfig:
        """For tests: tiny widths, every structural feature of the base releases kept (2 heads
        of 32 with unequal RoPE axes, 2 double blocks, all three condition streams;
        ``dataclasses.replace(..., use_meanflow=True)`` adds ``time_r_in``). The byT5
        mapper's hidden width stays the authors' hard-coded 2048."""
        return cls(in_channels=4, out_channels=4, hidden_size=64, heads_num=2,
                   mm_double_blocks_depth=2, rope_dim_list=(8, 12, 12), text_states_dim=32,
                   vision_states_dim=24, byt5_states_dim=20)
# ------------------------------------------------------------------------- VAE
@dataclass(frozen=True)
class Resampler:
    """One down- or upsampler: its level's input and output widths and whether it also
    resamples time (space is always halved / doubled)."""

    in_ch: int
    out_ch: int
    temporal: bool

    @property
    def factor(self) -> int:
        """Positions folded into channels: 2x2 in space, times 2 in time."""
        return 8 if self.temporal else 4


@dataclass(frozen=True)
class HunyuanVideo15VAEConfig:
    """``AutoencoderKLConv3D``'s hyper-parameters (diffusers' names for the two ratios; the
    authors' ``ffactor_spatial`` / ``ffactor_temporal`` are read by :meth:`from_dict`).

    ``scaling_factor``: latents fed to the DiT are ``mean * scaling_factor`` (no shift).
    """

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 32
    block_out_channels: tuple[int, ...] = (128, 256, 512, 1024, 1024)
    layers_per_block: int = 2
    spatial_compression_ratio: int = 16
    temporal_compression_ratio: int = 4
    downsample_match_channel: bool = True
    upsample_match_channel: bool = True
    scaling_factor: float = 1.03682

    def __post_init__(self):
        object.__setattr__(self, "block_out_channels", tuple(self.block_out_channels))
        chs, levels = self.block_out_channels, len(self.block_out_channels)
        for name in ("spatial_compression_ratio", "temporal_compression_ratio"):
            r = getattr(self, name)
            if r < 1 or r & (r - 1) or r.bit_length() > levels:
                raise VidaxError(f"HunyuanVideo-1.5 VAE {name} {r}: must be a power of two "
                                 f"of at most 2^{levels - 1} ({levels} levels)")
        if self.temporal_compression_ratio > self.spatial_compression_ratio:
            raise VidaxError("HunyuanVideo-1.5 VAE: temporal_compression_ratio above "
                             "spatial_compression_ratio (time is only resampled together "
                             "with space)")
        if chs[-1] % (2 * self.latent_channels):
            raise VidaxError(f"HunyuanVideo-1.5 VAE block_out_channels {chs}: the last width "
                             f"must be a multiple of 2 x latent_channels "
                             f"({2 * self.latent_channels}) for the encoder's and decoder's "
                             "channel shortcuts")
        for where, in_ch, out_ch in self._resnet_widths():
            if in_ch != out_ch:
                raise VidaxError(f"HunyuanVideo-1.5 VAE config: the {where} residual blocks "
                                 f"would change width {in_ch} -> {out_ch} (a 'nin_shortcut' "
                                 "conv, which no release has, is not supported)")
        for r in self.downsamplers():
            # conv to out/f channels; shortcut groups of f*in/out (half that for a first frame)
            if r and (r.out_ch % r.factor or r.in_ch * r.factor % r.out_ch
                      or r.temporal and r.in_ch * r.factor // r.out_ch % 2):
                self._refuse_resampler("downsampler", r)
        for r in self.upsamplers():
            # repeats f*out/in (half that after unfolding a first frame's in/4 channels)
            if r and (r.out_ch * r.factor % r.in_ch
                      or r.temporal and (r.in_ch % 4 or r.out_ch * r.factor // r.in_ch % 2)):
                self._refuse_resampler("upsampler", r)

    def _refuse_resampler(self, where: str, r: Resampler):
        raise VidaxError(f"HunyuanVideo-1.5 VAE block_out_channels {self.block_out_channels}: "
                         f"the {where} {r.in_ch} -> {r.out_ch} channels "
                         f"({'space-time' if r.temporal else 'space'}) does not fold into "
                         "whole channel groups")

    def downsamplers(self) -> list[Resampler | None]:
        """Per encoder level (authors' ``Encoder.__init__``): space halved at the first
        ``log2(spatial)`` levels, time too at the last ``log2(temporal)`` of those; the
        output width is the next level's (``downsample_match_channel``) or unchanged."""
        chs = self.block_out_channels
        n_space = int(math.log2(self.spatial_compression_ratio))
        first_time = n_space - int(math.log2(self.temporal_compression_ratio))
        out = []
        for i, ch in enumerate(chs):
            if i < n_space:
                nxt = chs[i + 1] if self.downsample_match_channel else ch
                out.append(Resampler(ch, nxt, temporal=i >= first_time))
            else:
                out.append(None)
        return out

    def upsamplers(self) -> list[Resampler | None]:
        """Per decoder level (widest first, authors' ``Decoder.__init__``): space doubled at
        the first ``log2(spatial)`` levels, time at the first ``log2(temporal)``."""
        chs = self.block_out_channels[::-1]
        n_space = int(math.log2(self.spatial_compression_ratio))
        n_time = int(math.log2(self.temporal_compression_ratio))
        out = []
        for i, ch in enumerate(chs):
            if i < max(n_space, n_time):
                nxt = chs[i + 1] if self.upsample_match_channel else ch
                out.append(Resampler(ch, nxt, temporal=i < n_time))
            else:
                out.append(None)
        return out

    def _resnet_widths(self):
        """(where, input width, output width) of each level's first residual block."""
        for where, chs, samplers in (("encoder", self.block_out_channels, self.downsamplers()),
                                     ("decoder", self.block_out_channels[::-1],
                                      self.upsamplers())):
            block_in = chs[0]
            for i, (ch, r) in enumerate(zip(chs, samplers)):
                yield f"{where} level {i}", block_in, ch
                block_in = r.out_ch if r else ch

    # ------------------------------------------------------------------ released configs
    @classmethod
    def base(cls) -> HunyuanVideo15VAEConfig:
        """``tencent/HunyuanVideo-1.5`` ``vae/config.json`` (shared by every DiT variant)."""
        return cls()

    @classmethod
    def tiny(cls) -> HunyuanVideo15VAEConfig:
        """For tests: the released structure (5 levels; space halved at levels 0-3, time
        at 2-3; decoder time doubled at levels 0-1, space at 0-3; 2 encoder / 3 decoder
        resnets per level; no nin_shortcut) at widths 8-64 and 4 latent channels."""
        return cls(block_out_channels=(8, 16, 32, 64, 64), latent_channels=4)

    #: config.json keys accepted without effect: the authors' tiling sizes, and a shift
    #: that the release leaves unset (checked to be null).
    _UNUSED_KEYS = ("sample_size", "sample_tsize")
    _AUTHORS_KEYS = {"ffactor_spatial": "spatial_compression_ratio",
                     "ffactor_temporal": "temporal_compression_ratio"}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HunyuanVideo15VAEConfig:
        """From the release's ``vae/config.json`` (the authors' keys, as in the manifest) or
        a diffusers ``AutoencoderKLHunyuanVideo15`` ``config.json``. Keys starting with ``_``
        are ignored; an unknown key or a non-null ``shift_factor`` is an error."""
        d = {k: v for k, v in d.items() if not k.startswith("_")}
        for key in cls._UNUSED_KEYS:
            d.pop(key, None)
        if d.pop("shift_factor", None) is not None:
            raise VidaxError("HunyuanVideo-1.5 VAE config: a shift_factor is not supported "
                             "(the release has none)")
        for authors, ours in cls._AUTHORS_KEYS.items():
            if authors in d:
                value = d.pop(authors)
                if d.setdefault(ours, value) != value:
                    raise VidaxError(f"HunyuanVideo-1.5 VAE config: {authors} and {ours} "
                                     "disagree")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise VidaxError(f"unknown HunyuanVideo-1.5 VAE config keys {unknown}")
        return cls(**d)


# ------------------------------------------------------------ VAE tiling (issue #14 addition)
@dataclass(frozen=True)
class TileSettings:
    """The spatial tiles of a tiled decode, in output pixels: ``height`` / ``width`` are
    diffusers' ``tile_sample_min_height`` / ``_width`` (the authors' single
    ``tile_sample_min_size``), ``overlap`` its and the authors' ``tile_overlap_factor``. The
    latent tile is ``size // 16`` (the authors' ``set_tile_sample_min_size`` and diffusers'
    constructor; diffusers' ``enable_tiling`` leaves ``tile_latent_min_*`` as they were unless
    passed too). Latent tiles start every ``int(latent * (1 - overlap))``, blend
    ``int(size * overlap)`` output pixels and keep ``size - blend`` of them; that must equal
    the latent stride times 16 (else the tiles would not add up to the frame: the authors'
    ``set_tile_sample_min_size`` asserts the related ``latent * overlap`` is whole)."""

    height: int = 256
    width: int = 256
    overlap: float = 0.125

    def spatial(self, ratio: int = 16) -> SpatialTiles:
        dims = []
        for size in (self.height, self.width):
            latent = size // ratio
            stride = int(latent * (1 - self.overlap))
            blend = int(size * self.overlap)
            if size <= 0 or size % ratio or not 0 < stride <= latent or \
                    (size - blend) != stride * ratio:
                raise VidaxError(f"HunyuanVideo-1.5 VAE tiles {self}: need sizes that are "
                                 f"multiples of {ratio} px with size * (1 - overlap) a whole "
                                 f"number of latent pixels (e.g. 256 px with 0.125 or 0.25)")
            dims.append((latent, stride, blend, size - blend))
        (lh, sh, bh, kh), (lw, sw, bw, kw) = dims
        return SpatialTiles((lh, lw), (sh, sw), (bh, bw), (kh, kw))


#: What the authors' pipeline decodes with (``get_vae_inference_config``, hyvideo/pipelines/
#: hunyuan_video_pipeline.py at 60783e70): 256 px tiles, overlap 0.125, on GPUs above 21 GB;
#: ``AUTHORS_SMALL_GPU_TILES`` (128 px, 0.25) below. diffusers' ``enable_tiling()`` defaults
#: are ``DIFFUSERS_TILES`` (256 px, 0.25).
AUTHORS_TILES = TileSettings(256, 256, 0.125)
AUTHORS_SMALL_GPU_TILES = TileSettings(128, 128, 0.25)
DIFFUSERS_TILES = TileSettings(256, 256, 0.25)
