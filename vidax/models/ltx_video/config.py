"""LTX-Video 0.9.x's configs: the DiT's (:class:`LTXVideoDiTConfig`), the causal VAE's
(:class:`LTXVideoVAEConfig` with its :class:`Block` stages) and the latent upsampler's
(:class:`LTXVideoUpsamplerConfig`), each read from a release file's metadata as the authors
build the models; the models are :mod:`vidax.models.ltx_video.dit`, ``.vae`` and ``.upsampler``.
No JAX here: the registry, ``vidax models`` and the manifests read these without loading a
model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError
from vidax.tiling import SpatialTiles

# ------------------------------------------------------------------------- DiT
@dataclass(frozen=True)
class LTXVideoDiTConfig:
    """The authors' ``Transformer3DModel`` arguments that shape the model.

    Defaults are the 13B 0.9.8 release. :meth:`from_dict` reads the ``transformer`` section
    of a release file's embedded metadata config.
    """

    num_attention_heads: int = 32
    attention_head_dim: int = 128
    in_channels: int = 128
    out_channels: int = 128
    num_layers: int = 48
    cross_attention_dim: int = 4096
    caption_channels: int = 4096
    attention_bias: bool = True
    norm_eps: float = 1e-6
    positional_embedding_theta: float = 10000.0
    positional_embedding_max_pos: tuple[int, int, int] = (20, 2048, 2048)
    timestep_scale_multiplier: float | None = 1000.0
    causal_temporal_positioning: bool = True

    def __post_init__(self):
        object.__setattr__(self, "positional_embedding_max_pos",
                           tuple(int(p) for p in self.positional_embedding_max_pos))
        if len(self.positional_embedding_max_pos) != 3:
            raise VidaxError("LTX-Video DiT positional_embedding_max_pos needs 3 entries "
                             f"(time, height, width), got {self.positional_embedding_max_pos}")
        if self.cross_attention_dim != self.inner_dim:
            raise VidaxError(
                f"LTX-Video DiT cross_attention_dim {self.cross_attention_dim} must equal "
                f"num_attention_heads x attention_head_dim = {self.inner_dim}: the authors' "
                "forward feeds the caption projection's inner_dim features to cross-attention")
        if self.inner_dim < 6:
            raise VidaxError(f"LTX-Video DiT inner dim {self.inner_dim} is too small for 3-axis "
                             "RoPE (at least 6)")

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    # ------------------------------------------------------------------ presets
    @classmethod
    def ltxv_13b_0_9_8_dev(cls) -> LTXVideoDiTConfig:
        """``ltxv-13b-0.9.8-dev``: 48 layers, 32 heads x 128."""
        return cls()

    @classmethod
    def ltxv_13b_0_9_8_distilled(cls) -> LTXVideoDiTConfig:
        """``ltxv-13b-0.9.8-distilled``: the dev model's architecture."""
        return cls()

    @classmethod
    def ltxv_2b_0_9_8_distilled(cls) -> LTXVideoDiTConfig:
        """``ltxv-2b-0.9.8-distilled``: 28 layers, 32 heads x 64 (no 2B 0.9.8 dev exists)."""
        return cls(attention_head_dim=64, num_layers=28, cross_attention_dim=2048)

    @classmethod
    def tiny(cls) -> LTXVideoDiTConfig:
        """For tests: inner dim 32 (5 RoPE frequencies per axis, 2 unrotated features),
        caption channels unlike the inner dim, every structural feature kept."""
        return cls(num_attention_heads=2, attention_head_dim=16, in_channels=16,
                   out_channels=16, num_layers=2, cross_attention_dim=32, caption_channels=24)

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTXVideoDiTConfig:
        """From ``Transformer3DModel`` kwargs (a release file's ``config["transformer"]``).

        Missing keys take the authors' ``__init__`` defaults, as their ``from_config`` does.
        Keys that select an architecture vidax does not implement are errors; keys without
        effect on inference are accepted and dropped.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in fields and k not in _FIXED
                         and k not in _NO_EFFECT and not k.startswith("_"))
        if unknown:
            raise VidaxError(f"unknown LTX-Video transformer config keys {unknown}")
        for key, (default, supported) in _FIXED.items():
            value = d.get(key, default)
            if value != supported:
                raise VidaxError(
                    f"LTX-Video transformer config {key}={value!r}: vidax implements the "
                    f"0.9.x architecture ({key}={supported!r})")
        kwargs = {k: d.get(k, _AUTHORS_DEFAULTS.get(k)) for k in fields
                  if k in d or k in _AUTHORS_DEFAULTS}
        for key in ("in_channels", "cross_attention_dim", "caption_channels",
                    "positional_embedding_theta", "positional_embedding_max_pos"):
            if kwargs.get(key) is None:
                raise VidaxError(f"LTX-Video transformer config has no {key}; every released "
                                 "LTX-Video DiT sets it")
        if kwargs.get("out_channels") is None:
            kwargs["out_channels"] = kwargs["in_channels"]
        return cls(**kwargs)


# The authors' __init__ defaults for the fields above that a config may omit.
_AUTHORS_DEFAULTS = {"num_attention_heads": 16, "attention_head_dim": 88, "in_channels": None,
                     "out_channels": None, "num_layers": 1, "cross_attention_dim": None,
                     "caption_channels": None, "attention_bias": False, "norm_eps": 1e-5,
                     "positional_embedding_theta": None, "positional_embedding_max_pos": None,
                     "timestep_scale_multiplier": None, "causal_temporal_positioning": False}

# key -> (the authors' default, the only value implemented): the 0.9.x architecture.
_FIXED = {"activation_fn": ("geglu", "gelu-approximate"),
          "adaptive_norm": ("single_scale_shift", "single_scale_shift"),
          "standardization_norm": ("layer_norm", "rms_norm"),
          "norm_elementwise_affine": (True, False),
          "qk_norm": (None, "rms_norm"),
          "positional_embedding_type": ("rope", "rope"),
          "only_cross_attention": (False, False),
          "double_self_attention": (False, False),
          "attention_type": ("default", "default"),
          "num_vector_embeds": (None, None)}

# Stored in the config but without effect on the inference forward pass (dropout is off;
# the others are never read by the layers the 0.9.x settings build, or steer only a TPU
# kernel); ``project_to_2d_pos`` is not even an argument of the authors' __init__.
_NO_EFFECT = {"dropout", "norm_num_groups", "num_embeds_ada_norm", "upcast_attention",
              "use_linear_projection", "use_tpu_flash_attention", "project_to_2d_pos"}
# ------------------------------------------------------------------------- VAE
#: Encoder blocks (space-to-depth stages with their strides) and decoder blocks (depth-to-space).
ENCODER_STRIDES = {"compress_space_res": (1, 2, 2), "compress_time_res": (2, 1, 1),
                   "compress_all_res": (2, 2, 2)}

DECODER_STRIDES = {"compress_space": (1, 2, 2), "compress_time": (2, 1, 1),
                   "compress_all": (2, 2, 2)}
PADDING_MODES = {"zeros": "constant", "replicate": "edge", "reflect": "reflect"}
LOG_VARS = ("uniform", "per_channel")


@dataclass(frozen=True)
class Block:
    """One entry of the authors' ``encoder_blocks`` / ``decoder_blocks`` list. ``multiplier``
    is None where the config omits it (its default differs between the authors' uses)."""

    name: str
    num_layers: int = 1
    multiplier: int | None = None
    residual: bool = False

    @classmethod
    def parse(cls, entry, where: str) -> Block:
        name, params = entry
        if isinstance(params, int):
            params = {"num_layers": params}
        params = dict(params)
        if params.pop("inject_noise", False):
            raise VidaxError(f"LTX-Video VAE {where} block {name}: inject_noise=True draws noise "
                             "inside the decoder; no released 0.9.x VAE uses it")
        if "attention_head_dim" in params:
            raise VidaxError(f"LTX-Video VAE {where} block {name}: attention blocks are not "
                             "part of any released 0.9.x VAE")
        unknown = sorted(set(params) - {"num_layers", "multiplier", "residual"})
        if unknown:
            raise VidaxError(f"LTX-Video VAE {where} block {name}: unknown parameters {unknown}")
        return cls(name, **params)


def _blocks(entries, where: str, names) -> tuple[Block, ...]:
    blocks = tuple(b if isinstance(b, Block) else Block.parse(b, where) for b in entries)
    for b in blocks:
        if b.name not in names:
            raise VidaxError(f"LTX-Video VAE {where} block {b.name!r}: vidax implements "
                             f"{sorted(names)} (the 0.9.x stacks)")
    return blocks


@dataclass(frozen=True)
class LTXVideoVAEConfig:
    """The authors' ``CausalVideoAutoencoder`` config (a release file's ``config["vae"]``).

    Defaults: the 0.9.8 VAE (all three 0.9.8 releases ship the same architecture).
    """

    encoder_blocks: tuple[Block, ...] = (
        Block("res_x", 4), Block("compress_space_res", multiplier=2), Block("res_x", 6),
        Block("compress_time_res", multiplier=2), Block("res_x", 6),
        Block("compress_all_res", multiplier=2), Block("res_x", 2),
        Block("compress_all_res", multiplier=2), Block("res_x", 2))
    decoder_blocks: tuple[Block, ...] = (
        Block("res_x", 5), Block("compress_all", multiplier=2, residual=True), Block("res_x", 5),
        Block("compress_all", multiplier=2, residual=True), Block("res_x", 5),
        Block("compress_all", multiplier=2, residual=True), Block("res_x", 5))
    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 128
    patch_size: int = 4
    encoder_base_channels: int = 128
    decoder_base_channels: int = 128
    latent_log_var: str = "uniform"
    causal_decoder: bool = False
    timestep_conditioning: bool = True
    spatial_padding_mode: str = "zeros"
    #: The decoder's own padding mode; None: ``spatial_padding_mode``. The LTX-Video code
    #: pads encoder and decoder alike; ltx-core (LTX-2) reads them with different defaults.
    decoder_spatial_padding_mode: str | None = None
    #: Whether ``compress_time`` / ``compress_space`` decoder stages narrow the width by their
    #: ``multiplier`` as ``compress_all`` does: ltx-core's ``_make_decoder_block`` (LTX-2.3)
    #: does; the LTX-Video ``Decoder`` passes the multiplier to ``compress_all`` only.
    decoder_multiplier_on_every_stage: bool = False

    def __post_init__(self):
        object.__setattr__(self, "encoder_blocks", _blocks(
            self.encoder_blocks, "encoder", {"res_x", *ENCODER_STRIDES}))
        object.__setattr__(self, "decoder_blocks", _blocks(
            self.decoder_blocks, "decoder", {"res_x", *DECODER_STRIDES}))
        if self.latent_log_var not in LOG_VARS:
            raise VidaxError(f"LTX-Video VAE latent_log_var {self.latent_log_var!r}: vidax "
                             f"implements {LOG_VARS}")
        for mode in (self.spatial_padding_mode, self.decoder_padding_mode):
            if mode not in PADDING_MODES:
                raise VidaxError(f"LTX-Video VAE spatial padding mode {mode!r}: one of "
                                 f"{sorted(PADDING_MODES)}")

    @property
    def decoder_padding_mode(self) -> str:
        """The decoder's spatial padding mode."""
        return self.decoder_spatial_padding_mode or self.spatial_padding_mode

    @property
    def spatial_downscale_factor(self) -> int:
        """Pixels per latent along H and W (32 for 0.9.8): the authors' property."""
        n = sum(ENCODER_STRIDES[b.name][1] == 2 for b in self.encoder_blocks if b.name != "res_x")
        return 2 ** n * self.patch_size

    @property
    def temporal_downscale_factor(self) -> int:
        """Frames per latent frame after the first (8 for 0.9.8)."""
        return 2 ** sum(ENCODER_STRIDES[b.name][0] == 2
                        for b in self.encoder_blocks if b.name != "res_x")

    @property
    def decoder_channels(self) -> int:
        """The decoder's widest width (``conv_in``'s output): base x every compress multiplier."""
        return self.decoder_base_channels * math.prod(
            b.multiplier or 1 for b in self.decoder_blocks if b.name != "res_x")

    # ------------------------------------------------------------------ presets
    @classmethod
    def ltxv_0_9_8(cls) -> LTXVideoVAEConfig:
        """The VAE of ``ltxv-13b-0.9.8-{dev,distilled}`` and ``ltxv-2b-0.9.8-distilled``."""
        return cls()

    @classmethod
    def tiny(cls) -> LTXVideoVAEConfig:
        """For tests: every block kind, 4x temporal and 16x spatial compression, widths 8-64.

        The decoder mixes a residual ``compress_all`` with plain ``compress_time`` and
        ``compress_space`` stages so both depth-to-space paths and the frame drop run.
        """
        return cls(
            encoder_blocks=(Block("res_x", 1), Block("compress_space_res", multiplier=2),
                            Block("res_x", 1), Block("compress_time_res", multiplier=2),
                            Block("res_x", 1), Block("compress_all_res", multiplier=2),
                            Block("res_x", 1)),
            decoder_blocks=(Block("res_x", 2), Block("compress_all", multiplier=2, residual=True),
                            Block("res_x", 1), Block("compress_time"), Block("res_x", 1),
                            Block("compress_space"), Block("res_x", 1)),
            latent_channels=16, encoder_base_channels=8, decoder_base_channels=16)

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTXVideoVAEConfig:
        """From the authors' config dict, with their ``from_config`` defaults for omitted keys.

        Settings vidax does not implement (2-D or dual convs, quant convs, batch-normalised
        latents, group/layer norm) are errors naming the key.
        """
        if d.get("_class_name", "CausalVideoAutoencoder") != "CausalVideoAutoencoder":
            raise VidaxError(f"LTX-Video VAE config _class_name {d['_class_name']!r}: vidax "
                             "reads CausalVideoAutoencoder configs")
        known = {"_class_name", "_diffusers_version", "dims", "in_channels", "out_channels",
                 "latent_channels", "encoder_blocks", "decoder_blocks", "blocks",
                 "scaling_factor", "norm_layer", "patch_size", "latent_log_var",
                 "use_quant_conv", "causal_decoder", "timestep_conditioning", "double_z",
                 "normalize_latent_channels", "encoder_base_channels", "decoder_base_channels",
                 "spatial_padding_mode"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise VidaxError(f"unknown LTX-Video VAE config keys {unknown}")
        dims = d.get("dims")
        fixed = {"dims": (tuple(dims) if isinstance(dims, list) else dims, 3),
                 "use_quant_conv": (d.get("use_quant_conv", True), False),
                 "normalize_latent_channels": (d.get("normalize_latent_channels", False), False),
                 "norm_layer": (d.get("norm_layer", "group_norm"), "pixel_norm")}
        for key, (value, supported) in fixed.items():
            if value != supported:
                raise VidaxError(f"LTX-Video VAE config {key}={value!r}: vidax implements the "
                                 f"0.9.x VAE ({key}={supported!r})")
        if "latent_channels" not in d:
            raise VidaxError("LTX-Video VAE config has no latent_channels (the authors' "
                             "from_config requires it)")
        double_z = d.get("double_z", True)
        blocks = d.get("blocks")
        return cls(
            encoder_blocks=d.get("encoder_blocks", blocks),
            decoder_blocks=d.get("decoder_blocks", blocks),
            in_channels=d.get("in_channels", 3), out_channels=d.get("out_channels", 3),
            latent_channels=d["latent_channels"], patch_size=d.get("patch_size", 1),
            encoder_base_channels=d.get("encoder_base_channels", 128),
            decoder_base_channels=d.get("decoder_base_channels", 128),
            latent_log_var=d.get("latent_log_var", "per_channel" if double_z else "none"),
            causal_decoder=d.get("causal_decoder", False),
            timestep_conditioning=d.get("timestep_conditioning", False),
            spatial_padding_mode=d.get("spatial_padding_mode", "zeros"))
# ------------------------------------------------------------ latent upsampler
GROUPS = 32
#: ltx-core's ``SpatialRationalResampler`` scales: up by ``num`` (pixel shuffle), then an
#: anti-aliased stride-``den`` downsample (ltx_core/model/upsampler/spatial_rational_resampler.py).
RATIONAL_SCALES = {0.75: (3, 4), 1.5: (3, 2), 2.0: (2, 1), 4.0: (4, 1)}


@dataclass(frozen=True)
class LTXVideoUpsamplerConfig:
    """The authors' ``LatentUpsampler`` arguments; defaults: the 0.9.8 spatial upscaler.

    ``spatial_scale`` and ``rational_resampler`` are ltx-core's (LTX-2.x) additions; LTX-Video's
    class has neither (:class:`LTX2UpsamplerConfig` reads them from LTX-2.x files). As in
    ltx-core, the rational resampler is used only for a spatial-only upsampler; otherwise
    both are inert (a temporal file declares ``spatial_scale: 1.0``).
    """

    in_channels: int = 128
    mid_channels: int = 512
    num_blocks_per_stage: int = 4
    spatial_upsample: bool = True
    temporal_upsample: bool = False
    spatial_scale: float = 2.0
    rational_resampler: bool = False

    def __post_init__(self):
        object.__setattr__(self, "spatial_scale", float(self.spatial_scale))
        if not (self.spatial_upsample or self.temporal_upsample):
            raise VidaxError("LTX-Video latent upsampler: spatial_upsample or temporal_upsample "
                             "must be true")
        if self.mid_channels % GROUPS:
            raise VidaxError(f"LTX-Video latent upsampler mid_channels {self.mid_channels} must "
                             f"be a multiple of {GROUPS} (its GroupNorm groups)")
        if self.uses_rational_resampler and self.spatial_scale not in RATIONAL_SCALES:
            raise VidaxError(f"LTX latent upsampler spatial_scale {self.spatial_scale}: the "
                             f"rational resampler supports {sorted(RATIONAL_SCALES)}")

    @property
    def uses_rational_resampler(self) -> bool:
        """ltx-core's rule: the rational resampler replaces the 2x pixel shuffle only when the
        upsampler is spatial-only and ``rational_resampler`` is set."""
        return self.rational_resampler and self.spatial_upsample and not self.temporal_upsample

    @property
    def rational(self) -> tuple[int, int]:
        """(up, down) factors of the rational resampler (``spatial_scale = up / down``)."""
        return RATIONAL_SCALES[self.spatial_scale]

    @property
    def stride(self) -> tuple[int, int, int]:
        """The (time, height, width) pixel-shuffle factors (the rational resampler's up
        factor in H and W, its blur-downsample following)."""
        t = 2 if self.temporal_upsample else 1
        s = (self.rational[0] if self.uses_rational_resampler else 2) if self.spatial_upsample \
            else 1
        return (t, s, s)

    @classmethod
    def spatial_0_9_8(cls) -> LTXVideoUpsamplerConfig:
        """``ltxv-spatial-upscaler-0.9.8.safetensors``: 128 -> 512 channels, 4 + 4 ResBlocks,
        2x H and W (the file's metadata config carries these numbers and is read first)."""
        return cls()

    @classmethod
    def tiny(cls, temporal: bool = False) -> LTXVideoUpsamplerConfig:
        """For tests: 16 latent channels, 64 mid channels (2 per GroupNorm group), 2 + 2 blocks."""
        return cls(in_channels=16, mid_channels=64, num_blocks_per_stage=2,
                   spatial_upsample=not temporal, temporal_upsample=temporal)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTXVideoUpsamplerConfig:
        """From the file's metadata ``config`` (the authors' ``LatentUpsampler.config()``),
        with their ``from_config`` defaults for omitted keys."""
        if d.get("_class_name", "LatentUpsampler") != "LatentUpsampler":
            raise VidaxError(f"LTX-Video latent upsampler config _class_name "
                             f"{d['_class_name']!r}: vidax reads LatentUpsampler configs")
        names = {f.name for f in dataclasses.fields(cls)} - {"spatial_scale",
                                                             "rational_resampler"}
        unknown = sorted(k for k in d if k not in names | {"dims"} and not k.startswith("_"))
        if unknown:
            raise VidaxError(f"unknown LTX-Video latent upsampler config keys {unknown}")
        if d.get("dims", 2) != 3:
            raise VidaxError(f"LTX-Video latent upsampler dims={d.get('dims', 2)}: vidax "
                             "implements the released dims=3 upsamplers")
        defaults = {"in_channels": 4, "mid_channels": 128, "num_blocks_per_stage": 4,
                    "spatial_upsample": True, "temporal_upsample": False}
        return cls(**{k: d.get(k, v) for k, v in defaults.items()})


@dataclass(frozen=True)
class LTX2UpsamplerConfig(LTXVideoUpsamplerConfig):
    """ltx-core's ``LatentUpsampler`` (LTX-2 / 2.3 / 2.5 latent upscalers): the same model as
    LTX-Video's plus ``spatial_scale`` / ``rational_resampler``. The presets are the released
    files (``ltx2_5`` manifests ``<variant>__upsampler``); :meth:`from_dict` reads a file's
    ``__metadata__["config"]`` with ltx-core 1.0.0's ``LatentUpsamplerConfigurator``
    defaults."""

    # ---------------------------------------------------------------- presets
    @classmethod
    def spatial_x2_rational(cls) -> LTX2UpsamplerConfig:
        """``ltx-2-spatial-upscaler-x2-1.0`` and ``ltx-2.3-spatial-upscaler-x2-1.0``: 1024 mid
        channels, the rational resampler at 2.0 (its blur is stride 1: the stored kernel is
        loaded and unused, as in ltx-core)."""
        return cls(mid_channels=1024, spatial_scale=2.0, rational_resampler=True)

    @classmethod
    def spatial_x2(cls) -> LTX2UpsamplerConfig:
        """``ltx-2.3-spatial-upscaler-x2-1.1`` and ``ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0``:
        1024 mid channels, the plain 2x pixel shuffle (``upsampler.0``)."""
        return cls(mid_channels=1024, spatial_scale=2.0, rational_resampler=False)

    @classmethod
    def spatial_x1_5(cls) -> LTX2UpsamplerConfig:
        """``ltx-2.3-spatial-upscaler-x1.5-1.0``: 1024 mid channels, x3 pixel shuffle then a
        stride-2 5x5 binomial blur."""
        return cls(mid_channels=1024, spatial_scale=1.5, rational_resampler=True)

    @classmethod
    def temporal_x2(cls) -> LTX2UpsamplerConfig:
        """The temporal x2 upscalers (LTX-2, 2.3, 2.5): 512 mid channels, frames ``F -> 2F - 1``
        (their files declare ``spatial_scale: 1.0, rational_resampler: true``, inert here)."""
        return cls(mid_channels=512, spatial_upsample=False, temporal_upsample=True,
                   spatial_scale=1.0, rational_resampler=True)

    @classmethod
    def tiny(cls, temporal: bool = False) -> LTX2UpsamplerConfig:
        """For tests: 16 latent channels, 64 mid channels, 1 + 1 blocks, the x1.5 resampler
        (or temporal x2)."""
        if temporal:
            return cls(in_channels=16, mid_channels=64, num_blocks_per_stage=1,
                       spatial_upsample=False, temporal_upsample=True)
        return cls(in_channels=16, mid_channels=64, num_blocks_per_stage=1, spatial_scale=1.5,
                   rational_resampler=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTX2UpsamplerConfig:
        """From an LTX-2.x file's metadata ``config`` (ltx-core's ``LatentUpsampler`` keys;
        omitted keys take ``LatentUpsamplerConfigurator.from_config``'s defaults)."""
        if d.get("_class_name", "LatentUpsampler") != "LatentUpsampler":
            raise VidaxError(f"LTX-2 latent upsampler config _class_name "
                             f"{d['_class_name']!r}: vidax reads LatentUpsampler configs")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names | {"dims"} and not k.startswith("_"))
        if unknown:
            raise VidaxError(f"unknown LTX-2 latent upsampler config keys {unknown}")
        if d.get("dims", 3) != 3:
            raise VidaxError(f"LTX-2 latent upsampler dims={d['dims']}: vidax implements the "
                             "released dims=3 upsamplers")
        defaults = {"in_channels": 128, "mid_channels": 512, "num_blocks_per_stage": 4,
                    "spatial_upsample": True, "temporal_upsample": False, "spatial_scale": 2.0,
                    "rational_resampler": False}
        return cls(**{k: d.get(k, v) for k, v in defaults.items()})


# ------------------------------------------------------------ VAE tiling (issue #19)
@dataclass(frozen=True)
class TileSettings:
    """The tiles of :meth:`LTXVideoVAE.decode_tiled`, in output pixels and frames: diffusers'
    ``enable_tiling`` arguments (``autoencoder_kl_ltx.py`` / ``autoencoder_kl_ltx2.py``)
    ``tile_sample_min_height`` / ``_width`` / ``_num_frames`` and
    ``tile_sample_stride_height`` / ``_width`` / ``_num_frames``, defaults its constructor's
    (512 px every 448; 16 frames every 8, used only with ``framewise``). Spatial sizes and
    strides are multiples of the spatial stride (32), temporal ones of the temporal stride
    (8); each stride positive and at most its size. (:class:`LTXCoreTiles` is ltx-core's
    tiling, which the LTX pipelines decode in.)"""

    height: int = 512
    width: int = 512
    stride_height: int = 448
    stride_width: int = 448
    frames: int = 16
    stride_frames: int = 8

    def spatial(self, ratio: int = 32) -> SpatialTiles:
        """Latent tiles ``size // ratio`` every ``stride // ratio``; blend ``size - stride``
        output pixels, keep ``stride`` (``tiled_decode``)."""
        pairs = ((self.height, self.stride_height), (self.width, self.stride_width))
        if any(size % ratio or stride % ratio or not 0 < stride <= size
               for size, stride in pairs):
            raise VidaxError(f"LTX VAE tiles {self}: sizes and strides must be positive "
                             f"multiples of {ratio} px, each stride at most its size")
        (h, sh), (w, sw) = pairs
        return SpatialTiles((h // ratio, w // ratio), (sh // ratio, sw // ratio),
                            (h - sh, w - sw), (sh, sw))

    def temporal(self, ratio: int = 8) -> TemporalTiles:
        """The framewise tiles in latent frames (``_temporal_tiled_decode``)."""
        if self.frames % ratio or self.stride_frames % ratio or not (
                0 < self.stride_frames <= self.frames):
            raise VidaxError(f"LTX VAE tiles {self}: frames and stride_frames must be positive "
                             f"multiples of {ratio}, the stride at most the size")
        return TemporalTiles(self.frames // ratio, self.stride_frames // ratio,
                             self.frames - self.stride_frames, self.stride_frames, ratio)


@dataclass(frozen=True)
class TemporalTiles:
    """diffusers' ``_temporal_tiled_decode`` (``AutoencoderKLLTXVideo`` and
    ``AutoencoderKLLTX2Video``) in latent frames: where the latent has more than ``tile``
    frames, tiles of ``tile + 1`` latent frames starting every ``stride``; every tile but the
    first loses its *last* decoded frame; each tile's first ``blend`` output frames cross-fade
    from the previous tile's last ones (``blend_t``), then the first tile keeps ``keep + 1``
    frames and every later one ``keep``. ``ratio``: output frames per latent frame."""

    tile: int
    stride: int
    blend: int
    keep: int
    ratio: int

    def applies(self, t: int) -> bool:
        return t > self.tile

    def spans(self, t: int) -> list[tuple[int, int]]:
        """``(first, length)`` latent frames of each tile whose output is kept: diffusers also
        decodes a last one-frame tile, whose one frame it then drops (so vidax skips it)."""
        if not self.applies(t):
            return [(0, t)]
        return [(i, min(self.tile + 1, t - i)) for i in range(0, t, self.stride)
                if i == 0 or t - i > 1]


@dataclass(frozen=True)
class LTXCoreTiles:
    """ltx-core 1.0.0's ``TilingConfig`` (``ltx_core/model/video_vae/tiling.py``), the tiles
    of :meth:`LTXVideoVAE.decode_tiled` given one of these: ``pixels`` / ``overlap_pixels``
    (``SpatialTilingConfig``; ``pixels=None``: no spatial tiles) and ``frames`` /
    ``overlap_frames`` (``TemporalTilingConfig``; ``frames=None``: no temporal tiles).
    :meth:`default` is ``TilingConfig.default()``: 512 px overlapping by 64, 64 frames
    overlapping by 24, what ltx-pipelines' distilled and two-stage ``main()`` decode with
    (:mod:`vidax.pipelines.ltx_tiles`). Sizes and overlaps
    are multiples of the VAE's spatial (temporal) stride, each overlap below its size (ltx-core
    asks for multiples of 32 px and 8 frames, at least 64 px and 16 frames)."""

    pixels: int | None = 512
    overlap_pixels: int = 64
    frames: int | None = 64
    overlap_frames: int = 24

    @classmethod
    def default(cls) -> LTXCoreTiles:
        return cls()

    def _check(self, size, overlap, ratio: int, unit: str) -> None:
        if size is not None and (size % ratio or overlap % ratio or not 0 <= overlap < size):
            raise VidaxError(f"LTX VAE tiles {self}: {unit} sizes and overlaps must be "
                             f"multiples of {ratio}, each overlap below its size")

    def spans(self, latent_shape, spatial_ratio: int, temporal_ratio: int):
        """The latent intervals ``(start, end, left_ramp, right_ramp)`` along time, height and
        width (three lists) that ltx-core's ``VideoDecoder._prepare_tiles`` makes for latents
        ``(T, h, w)``; a tile is one interval of each."""
        self._check(self.pixels, self.overlap_pixels, spatial_ratio, "spatial")
        self._check(self.frames, self.overlap_frames, temporal_ratio, "temporal")
        t, h, w = latent_shape[:3]
        times = [(0, t, 0, 0)]
        if self.frames is not None:
            times = _core_split(t, self.frames // temporal_ratio,
                                self.overlap_frames // temporal_ratio, causal=True)
        rows, cols = [(0, h, 0, 0)], [(0, w, 0, 0)]
        if self.pixels is not None:
            size, overlap = self.pixels // spatial_ratio, self.overlap_pixels // spatial_ratio
            # each axis's tile scaled by its share of the longer side, at least overlap + 1
            # (and 2) latent pixels
            rows, cols = (_core_split(n, max(2, overlap + 1, round(size * n / max(h, w))),
                                      overlap) for n in (h, w))
        return times, rows, cols


def _core_split(n: int, size: int, overlap: int, causal: bool = False):
    """ltx-core's ``split_with_symmetric_overlaps`` (``causal``: ``split_temporal_latents``)
    along an axis of ``n`` latents: one interval where ``n <= size``; else tiles of ``size``
    every ``size - overlap`` (as many as ``(n + size - 2 overlap - 1) // (size - overlap)``,
    the last cut at ``n``) ramping over ``overlap`` where they meet; ``causal``: every tile
    after the first starts one latent frame earlier and ramps over one more."""
    if n <= size:
        return [(0, n, 0, 0)]
    step = size - overlap
    count = (n + size - 2 * overlap - 1) // step
    spans = []
    for i in range(count):
        start, end = i * step, n if i == count - 1 else i * step + size
        left, right = (overlap if i else 0), (overlap if i < count - 1 else 0)
        if causal and i:
            start, left = start - 1, left + 1
        spans.append((start, end, left, right))
    return spans
