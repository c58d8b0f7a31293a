"""LTX-2.x's configs: the audio-video DiT's (:class:`LTX2DiTConfig`), the video VAE's
(:class:`LTX2VideoVAEConfig`, LTX-Video's VAE config under ltx-core's constructor rules) and the
text projection's (:class:`LTX2TextProjectionConfig`); the models are
:mod:`vidax.models.ltx2_5.dit`, :class:`vidax.models.ltx_video.vae.LTXVideoVAE` and
:mod:`vidax.models.ltx2_5.text`. No JAX here: the registry, ``vidax models`` and the manifests
read these without loading a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError
from vidax.models.ltx_video.config import Block, LTXVideoVAEConfig

# ------------------------------------------------------------------------- DiT
@dataclass(frozen=True)
class LTX2DiTConfig:
    """The authors' ``LTXModel`` (and connector) arguments that shape the model.

    Defaults are the LTX-2 19B release. :meth:`from_dict` reads the ``transformer`` section of
    a release file's embedded metadata config (``config["transformer"]``).
    """

    num_attention_heads: int = 32
    attention_head_dim: int = 128
    in_channels: int = 128
    out_channels: int = 128
    num_layers: int = 48
    cross_attention_dim: int = 4096
    norm_eps: float = 1e-6
    positional_embedding_theta: float = 10000.0
    positional_embedding_max_pos: tuple[int, ...] = (20, 2048, 2048)
    timestep_scale_multiplier: float = 1000.0
    audio_num_attention_heads: int = 32
    audio_attention_head_dim: int = 64
    audio_in_channels: int = 128
    audio_out_channels: int = 128
    audio_cross_attention_dim: int = 2048
    audio_positional_embedding_max_pos: tuple[int, ...] = (20,)
    av_ca_timestep_scale_multiplier: float = 1000.0
    apply_gated_attention: bool = False          # 2.3+: to_gate_logits in every DiT attention
    cross_attention_adaln: bool = False          # 2.3+: 9-row tables, prompt AdaLN
    caption_channels: int = 3840
    caption_proj_before_connector: bool = False  # 2.3+: no caption_projection in the DiT
    ff_bias: bool = True                         # 2.5: the video FFN has no biases
    use_keyframes_abs_pos_embedding: bool = False  # 2.5
    # What the AV cross-attention's scale/shift AdaLN reads: "cross_sigma" (the other stream's
    # sigma: PyPI ltx-core 1.0.0, the tested oracle) or "own" (this stream's per-token
    # timesteps: the authors' later code, Lightricks/LTX-2@d5b526e, the only code that loads
    # 2.5). Not in the file's config; see the module docstring.
    av_ca_scale_shift_timestep: str = "cross_sigma"
    # the text connectors (Embeddings1DConnector x 2)
    connector_num_attention_heads: int = 30
    connector_attention_head_dim: int = 128
    connector_num_layers: int = 2
    audio_connector_num_attention_heads: int = 30
    audio_connector_attention_head_dim: int = 128
    audio_connector_num_layers: int = 2
    connector_num_learnable_registers: int = 128
    connector_positional_embedding_max_pos: tuple[int, ...] = (4096,)
    connector_apply_gated_attention: bool = False

    def __post_init__(self):
        for name in ("positional_embedding_max_pos", "audio_positional_embedding_max_pos",
                     "connector_positional_embedding_max_pos"):
            object.__setattr__(self, name, tuple(int(p) for p in getattr(self, name)))
        if len(self.positional_embedding_max_pos) != 3:
            raise VidaxError("LTX-2 DiT positional_embedding_max_pos needs 3 entries (time, "
                             f"height, width), got {self.positional_embedding_max_pos}")
        if len(self.audio_positional_embedding_max_pos) != 1 or len(
                self.connector_positional_embedding_max_pos) != 1:
            raise VidaxError("LTX-2 DiT audio and connector max_pos take one entry (time)")
        if self.av_ca_scale_shift_timestep not in ("cross_sigma", "own"):
            raise VidaxError("LTX-2 DiT av_ca_scale_shift_timestep must be 'cross_sigma' or "
                             f"'own', got {self.av_ca_scale_shift_timestep!r}")
        if self.audio_cross_attention_dim != self.audio_inner_dim:
            raise VidaxError(
                f"LTX-2 DiT audio_cross_attention_dim {self.audio_cross_attention_dim} must "
                f"equal the audio inner dim {self.audio_inner_dim}: the audio<->video "
                "attentions run at that width with the audio head layout")

    @property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def audio_inner_dim(self) -> int:
        return self.audio_num_attention_heads * self.audio_attention_head_dim

    @property
    def num_ada(self) -> int:
        """Rows of the per-block modulation tables: 6, plus 3 with ``cross_attention_adaln``."""
        return 9 if self.cross_attention_adaln else 6

    # ------------------------------------------------------------------ presets
    @classmethod
    def ltx2_19b(cls) -> LTX2DiTConfig:
        """``ltx-2-19b-{dev,distilled}``: 48 blocks, video 32 x 128, audio 32 x 64, caption
        projections in the DiT, 2-layer 30 x 128 connectors."""
        return cls()

    @classmethod
    def ltx2_3_22b(cls) -> LTX2DiTConfig:
        """``ltx-2.3-22b-*``: gated attention, cross-attention AdaLN, the caption projection
        moved to the text side, 8-layer connectors at each stream's width."""
        return cls(apply_gated_attention=True, cross_attention_adaln=True,
                   caption_proj_before_connector=True, connector_num_attention_heads=32,
                   connector_attention_head_dim=128, connector_num_layers=8,
                   audio_connector_num_attention_heads=32, audio_connector_attention_head_dim=64,
                   audio_connector_num_layers=8, connector_apply_gated_attention=True)

    @classmethod
    def ltx2_5_22b(cls) -> LTX2DiTConfig:
        """``ltx-2.5-22b-*``: 2.3's structure, the video FFN without biases, the keyframe
        position embedding, and the AV scale/shift timestep of the code that loads 2.5."""
        return dataclasses.replace(cls.ltx2_3_22b(), ff_bias=False,
                                   use_keyframes_abs_pos_embedding=True,
                                   av_ca_scale_shift_timestep="own")

    @classmethod
    def tiny(cls) -> LTX2DiTConfig:
        """For tests: video 2 x 16, audio 2 x 8, 2 blocks, 1-layer 2 x 12 connectors (their
        128 registers are fixed in ltx-core); the 19B structure."""
        return cls(num_attention_heads=2, attention_head_dim=16, in_channels=16, out_channels=16,
                   num_layers=2, cross_attention_dim=32, audio_num_attention_heads=2,
                   audio_attention_head_dim=8, audio_in_channels=8, audio_out_channels=8,
                   audio_cross_attention_dim=16, caption_channels=24,
                   connector_num_attention_heads=2, connector_attention_head_dim=12,
                   connector_num_layers=1, audio_connector_num_attention_heads=2,
                   audio_connector_attention_head_dim=12, audio_connector_num_layers=1)

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTX2DiTConfig:
        """From ``config["transformer"]`` of a release file (``AVTransformer3DModel`` kwargs),
        with ltx-core's defaults for missing keys (``LTXModelConfigurator`` and the connector
        configurators). Values that select an architecture vidax does not implement are
        errors."""
        for key, (default, supported) in _FIXED.items():
            value = d.get(key, default)
            if value != supported:
                raise VidaxError(f"LTX-2 transformer config {key}={value!r}: vidax implements "
                                 f"{key}={supported!r} (what every LTX-2 release uses)")
        heads = d.get("connector_num_attention_heads", 30)
        head_dim = d.get("connector_attention_head_dim", 128)
        layers = d.get("connector_num_layers", 2)
        kwargs = {k: d.get(k, default) for k, default in _LTX_CORE_DEFAULTS.items()}
        kwargs.update(
            connector_num_attention_heads=heads, connector_attention_head_dim=head_dim,
            connector_num_layers=layers,
            audio_connector_num_attention_heads=d.get("audio_connector_num_attention_heads",
                                                      heads),
            audio_connector_attention_head_dim=d.get("audio_connector_attention_head_dim",
                                                     head_dim),
            audio_connector_num_layers=d.get("audio_connector_num_layers", layers),
            # ltx-core builds every connector with its default of 128 registers
            connector_num_learnable_registers=128,
            # only the authors' later code (own timesteps) loads the 2.5 files (keyframes)
            av_ca_scale_shift_timestep=("own" if kwargs["use_keyframes_abs_pos_embedding"]
                                        else "cross_sigma"))
        return cls(**kwargs)


# ltx-core's defaults (LTXModelConfigurator.from_config, Embeddings1DConnectorConfigurator)
# for the config fields read from the file.
_LTX_CORE_DEFAULTS = {
    "num_attention_heads": 32, "attention_head_dim": 128, "in_channels": 128,
    "out_channels": 128, "num_layers": 48, "cross_attention_dim": 4096, "norm_eps": 1e-6,
    "positional_embedding_theta": 10000.0, "positional_embedding_max_pos": (20, 2048, 2048),
    "timestep_scale_multiplier": 1000, "audio_num_attention_heads": 32,
    "audio_attention_head_dim": 64, "audio_in_channels": 128, "audio_out_channels": 128,
    "audio_cross_attention_dim": 2048, "audio_positional_embedding_max_pos": (20,),
    "av_ca_timestep_scale_multiplier": 1, "apply_gated_attention": False,
    "cross_attention_adaln": False, "caption_channels": 3840,
    "caption_proj_before_connector": False, "ff_bias": True,
    "use_keyframes_abs_pos_embedding": False, "connector_positional_embedding_max_pos": (1,),
    "connector_apply_gated_attention": False}

# key -> (ltx-core's default, the only value implemented).
_FIXED = {"rope_type": ("interleaved", "split"),
          "frequencies_precision": (False, "float64"),
          "use_middle_indices_grid": (True, True),
          "activation_fn": (None, "gelu-approximate"),
          "qk_norm": (None, "rms_norm"),
          "standardization_norm": (None, "rms_norm"),
          "norm_elementwise_affine": (None, False),
          "attention_bias": (None, True),
          "use_audio_video_cross_attention": (None, True),
          "av_cross_ada_norm": (None, True),
          "share_ff": (None, False)}
# ------------------------------------------------------------------- video VAE
#: Keys ltx-core's configurators read, and the ones a release config carries that they ignore.
_READ = {"dims", "in_channels", "out_channels", "latent_channels", "encoder_blocks",
         "decoder_blocks", "patch_size", "norm_layer", "latent_log_var", "causal_decoder",
         "timestep_conditioning", "decoder_base_channels", "spatial_padding_mode"}
_IGNORED = {"_class_name", "scaling_factor", "use_quant_conv", "normalize_latent_channels"}


@dataclass(frozen=True)
class LTX2VideoVAEConfig(LTXVideoVAEConfig):
    """ltx-core's video VAE config. Defaults: the 19B (LTX-2.0) VAE, the 0.9.8 block stack
    without timestep conditioning and with a reflect-padded decoder."""

    timestep_conditioning: bool = False
    decoder_spatial_padding_mode: str | None = "reflect"
    decoder_multiplier_on_every_stage: bool = True

    def __post_init__(self):
        super().__post_init__()
        if self.encoder_base_channels != self.latent_channels:
            raise VidaxError(f"LTX-2 video VAE: ltx-core's encoder starts at latent_channels "
                             f"({self.latent_channels}) wide, not {self.encoder_base_channels}")
        if self.timestep_conditioning:
            raise VidaxError("LTX-2 video VAE config timestep_conditioning=True: no LTX-2 release "
                             "conditions its decoder on a timestep, and vidax does not port "
                             "ltx-core's conditioned decoder")

    @property
    def decoder_channels(self) -> int:
        """ltx-core's ``VideoDecoder``: ``conv_in`` is ``base_channels * 8`` wide whatever
        the block list says."""
        return self.decoder_base_channels * 8

    # ------------------------------------------------------------------ presets
    @classmethod
    def ltx2_19b(cls) -> LTX2VideoVAEConfig:
        """``ltx-2-19b-{dev,distilled}``: encoder 128 -> 2048 wide, three residual
        ``compress_all`` decoder stages."""
        return cls()

    @classmethod
    def ltx2_3_22b(cls) -> LTX2VideoVAEConfig:
        """``ltx-2.3-22b-*`` and LTX-2.5's ``ltx-2.5-video-vae-conv``: encoder res_x 4/6/4/2/2
        up to 1024 wide (the last ``compress_all_res`` keeps the width), a non-residual
        decoder of ``compress_space`` / ``compress_time`` / ``compress_all`` stages, zero
        padding."""
        return cls(
            encoder_blocks=(Block("res_x", 4), Block("compress_space_res", multiplier=2),
                            Block("res_x", 6), Block("compress_time_res", multiplier=2),
                            Block("res_x", 4), Block("compress_all_res", multiplier=2),
                            Block("res_x", 2), Block("compress_all_res", multiplier=1),
                            Block("res_x", 2)),
            decoder_blocks=(Block("res_x", 4), Block("compress_space", multiplier=2),
                            Block("res_x", 6), Block("compress_time", multiplier=2),
                            Block("res_x", 4), Block("compress_all", multiplier=1),
                            Block("res_x", 2), Block("compress_all", multiplier=2),
                            Block("res_x", 2)),
            decoder_spatial_padding_mode="zeros")

    @classmethod
    def tiny(cls) -> LTX2VideoVAEConfig:
        """For tests: the 19B kinds of stage at 4x temporal and 16x spatial compression."""
        return cls(
            encoder_blocks=(Block("res_x", 1), Block("compress_space_res", multiplier=2),
                            Block("res_x", 1), Block("compress_time_res", multiplier=2),
                            Block("res_x", 1), Block("compress_all_res", multiplier=2),
                            Block("res_x", 1)),
            decoder_blocks=(Block("res_x", 1), Block("compress_all", multiplier=2, residual=True),
                            Block("res_x", 1), Block("compress_all", multiplier=2, residual=True),
                            Block("res_x", 2)),
            latent_channels=8, encoder_base_channels=8, decoder_base_channels=4)

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTX2VideoVAEConfig:
        """From a release file's ``config["vae"]``, with ltx-core's configurator defaults."""
        unknown = sorted(set(d) - _READ - _IGNORED)
        if unknown:
            raise VidaxError(f"unknown LTX-2 video VAE config keys {unknown}")
        if d.get("_class_name", "CausalVideoAutoencoder") != "CausalVideoAutoencoder":
            raise VidaxError(f"LTX-2 video VAE config _class_name {d['_class_name']!r}: vidax "
                             "reads the conv VAE (CausalVideoAutoencoder); LTX-2.5's diffusion "
                             "decoder is another model")
        for key, default, supported in (("dims", 3, 3), ("norm_layer", "pixel_norm",
                                                         "pixel_norm")):
            if d.get(key, default) != supported:
                raise VidaxError(f"LTX-2 video VAE config {key}={d[key]!r}: vidax implements "
                                 f"{key}={supported!r}")
        padding = d.get("spatial_padding_mode")
        latent_channels = d.get("latent_channels", 128)
        return cls(
            encoder_blocks=d.get("encoder_blocks", ()),
            decoder_blocks=d.get("decoder_blocks", ()),
            in_channels=d.get("in_channels", 3), out_channels=d.get("out_channels", 3),
            latent_channels=latent_channels, patch_size=d.get("patch_size", 4),
            encoder_base_channels=latent_channels,
            decoder_base_channels=d.get("decoder_base_channels", 128),
            latent_log_var=d.get("latent_log_var", "uniform"),
            causal_decoder=d.get("causal_decoder", False),
            timestep_conditioning=d.get("timestep_conditioning", True),
            spatial_padding_mode=padding or "zeros",
            decoder_spatial_padding_mode=padding or "reflect")
# ------------------------------------------------------------- text projection
# ltx-core's _V2_EXPECTED_CONFIG: these DiT config keys with these values select V2
_V2_KEYS = {"caption_proj_before_connector": True, "caption_projection_first_linear": False,
            "caption_proj_input_norm": False, "caption_projection_second_linear": False}


@dataclass(frozen=True)
class LTX2TextProjectionConfig:
    """``version`` 1 (one ``aggregate_embed`` to ``embedding_dim``) or 2 (video and audio
    projections to ``video_dim`` / ``audio_dim``). ``embedding_dim`` and ``num_layers`` are
    the Gemma hidden size and hidden-state count (ltx-core takes them from its fixed Gemma 3
    12B config)."""

    version: int = 2
    embedding_dim: int = 3840
    num_layers: int = 49
    video_dim: int = 4096
    audio_dim: int = 2048

    def __post_init__(self):
        if self.version not in (1, 2):
            raise VidaxError(f"LTX-2 text projection version {self.version}: ltx-core has "
                             "versions 1 (LTX-2 19B) and 2 (LTX-2.3, 2.5)")

    @property
    def flat_dim(self) -> int:
        return self.embedding_dim * self.num_layers

    # ------------------------------------------------------------------ presets
    @classmethod
    def ltx2_19b(cls) -> LTX2TextProjectionConfig:
        """LTX-2 19B: V1, 188160 -> 3840 for both connectors."""
        return cls(version=1, video_dim=3840, audio_dim=3840)

    @classmethod
    def ltx2_3_22b(cls) -> LTX2TextProjectionConfig:
        """LTX-2.3 22B (and LTX-2.5, whose projection sits in its text-encoder file): V2,
        video 32 x 128 = 4096, audio 32 x 64 = 2048."""
        return cls()

    @classmethod
    def tiny(cls) -> LTX2TextProjectionConfig:
        return cls(embedding_dim=16, num_layers=4, video_dim=24, audio_dim=12)

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTX2TextProjectionConfig:
        """This config's own fields (``version``, ``embedding_dim``, ``num_layers``, ...: a
        pipeline's, which sizes the input by its Gemma), or an LTX-2.x DiT config (the metadata's
        ``config["transformer"]``, or the whole ``config``), as ltx-core's
        ``_create_feature_extractor``: none of the V2 keys
        -> V1; all four with their expected values -> V2 with the DiT's video and audio
        inner dims; anything else is an error. The Gemma side is Gemma 3 12B's (3840 x 49),
        as ltx-core fixes it."""
        if {"version", "embedding_dim", "num_layers"} <= d.keys():   # this config's own fields
            return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})
        t = d.get("transformer", d)
        if not t.keys() & _V2_KEYS.keys():
            return cls.ltx2_19b()
        wrong = sorted(k for k in _V2_KEYS if t.get(k, not _V2_KEYS[k]) != _V2_KEYS[k])
        if wrong:
            raise VidaxError(f"LTX-2 DiT config with an unknown text-projection setup: "
                             f"{', '.join(f'{k}={t.get(k)!r}' for k in wrong)} (ltx-core "
                             f"knows V1, without these keys, and V2 = {_V2_KEYS})")
        try:
            return cls(version=2,
                       video_dim=t["num_attention_heads"] * t["attention_head_dim"],
                       audio_dim=t["audio_num_attention_heads"] * t["audio_attention_head_dim"])
        except KeyError as e:
            raise VidaxError(f"LTX-2 DiT config has no {e.args[0]!r}, which sizes the text "
                             "projection") from e


# ------------------------------------------------------------------------- 2.5 diffusion decoder
# The authors' DiffusionVideoDecoder defaults (ltx-core @400fd31,
# ltx_core/model/video_vae/diffusion_video_decoder.py), used where a config omits a key.
_NA_STAGE_CHANNELS = (1024, 512, 256, 256, 128)
_NA_STAGE_DEPTHS = (4, 6, 4, 2, 8)
_NA_STAGE_KERNELS = ((3, 7, 7), (3, 7, 7), (3, 5, 5), (3, 5, 5), (3, 3, 3))
_NA_UPSAMPLES = (((1, 2, 2), 2), ((2, 1, 1), 2), ((2, 2, 2), 1), ((2, 2, 2), 2))
#: decoder keys ltx-core's ``_build_diffusion_video_decoder`` reads, and the ones a release
#: config carries that no code reads (no convolution in the decoder; the upsample is the
#: Linear + pixel shuffle every release uses).
_NA_READ = {"in_channels", "out_channels", "patch_size", "head_dim", "na_head_dim",
            "t_emb_dim", "default_num_inference_steps", "timestep_scale_multiplier",
            "stage_channels", "stage_depths", "stage_kernels", "upsamples", "stage5_kernel",
            "stage5_channels"}
_NA_NO_EFFECT = {"_class_name", "spatial_padding_mode", "resampler_kind"}
#: encoder keys ltx-core's ``_prepare_video_encoder_kwargs`` reads (nested layout), and two
#: it does not (the encoder starts ``out_channels`` wide; ``constant`` fills its own value).
_ENC_READ = {"dims", "in_channels", "out_channels", "blocks", "encoder_blocks", "patch_size",
             "norm_layer", "latent_log_var", "spatial_padding_mode"}
_ENC_NO_EFFECT = {"_class_name", "base_channels", "latent_log_var_value"}


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _triple(v, what: str) -> tuple[int, int, int]:
    v = tuple(int(x) for x in v)
    if len(v) != 3 or min(v) < 1:
        raise VidaxError(f"LTX-2.5 diffusion decoder {what} {v}: three positive (T, H, W) sizes")
    return v


@dataclass(frozen=True)
class LTX2DiffusionDecoderConfig:
    """The authors' ``NADiffusionDecoder`` (ltx-core ``DiffusionVideoDecoder``) arguments:
    a release file's ``config["vae"]["decoder"]`` plus the top-level ``model_output_type``.
    Defaults: LTX-2.5's ``ltx-2.5-video-vae-bf16``.

    ``stage_kernels`` has one entry per stage as the file stores it; the four deterministic
    stages use the first four (the fifth is not read: stage 5 uses ``stage5_kernel``).
    ``upsamples``: per deterministic stage ``((s_t, s_h, s_w), channel reduction)``.
    ``t_emb_dim`` is not in the file (ltx-core's default, 384, which the stored
    ``t_embedder`` shapes confirm)."""

    in_channels: int = 128
    out_channels: int = 3
    patch_size: int = 4
    head_dim: int = 64
    stage_channels: tuple[int, ...] = (2048, 1024, 512, 512, 256)
    stage_depths: tuple[int, ...] = (4, 6, 4, 2, 8)
    stage_kernels: tuple[tuple[int, int, int], ...] = (
        (3, 7, 7), (3, 7, 7), (3, 5, 5), (3, 5, 5), (11, 11, 11))
    upsamples: tuple[tuple[tuple[int, int, int], int], ...] = _NA_UPSAMPLES
    stage5_kernel: tuple[int, int, int] = (11, 11, 11)
    stage5_channels: int | None = None
    t_emb_dim: int = 384
    timestep_scale_multiplier: float = 1000.0
    default_num_inference_steps: int = 1
    model_output_type: str = "x0"

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        set_("stage_channels", tuple(int(c) for c in self.stage_channels))
        set_("stage_depths", tuple(int(d) for d in self.stage_depths))
        set_("stage_kernels", tuple(_triple(k, "stage kernel") for k in self.stage_kernels))
        set_("upsamples", tuple((_triple(s, "upsample stride"), int(r))
                                for s, r in self.upsamples))
        set_("stage5_kernel", _triple(self.stage5_kernel, "stage5_kernel"))
        n = len(self.stage_channels)
        if not (len(self.stage_depths) == len(self.stage_kernels) == n == len(self.upsamples) + 1):
            raise VidaxError(
                f"LTX-2.5 diffusion decoder: {n} stage_channels need as many stage_depths and "
                f"stage_kernels and {n - 1} upsamples, got {len(self.stage_depths)}, "
                f"{len(self.stage_kernels)}, {len(self.upsamples)}")
        for i, ((stride, reduction), c) in enumerate(zip(self.upsamples, self.stage_channels)):
            if stride[0] not in (1, 2):
                raise VidaxError(f"LTX-2.5 diffusion decoder upsample {i}: temporal stride "
                                 f"{stride[0]} (the causal frame mapping takes 1 or 2)")
            if c * _prod(stride) % reduction or c // reduction != self.stage_channels[i + 1]:
                raise VidaxError(
                    f"LTX-2.5 diffusion decoder: upsample {i} reduces {c} channels by "
                    f"{reduction}, but stage {i + 1} is {self.stage_channels[i + 1]} wide")
        for c in (*self.stage_channels, self.stage5_width):
            if c % self.head_dim:
                raise VidaxError(f"LTX-2.5 diffusion decoder width {c} is not a multiple of "
                                 f"head_dim {self.head_dim}")
        if self.head_dim % 8:
            raise VidaxError(f"LTX-2.5 diffusion decoder head_dim {self.head_dim}: the 3-axis "
                             "RoPE split needs a multiple of 8")
        if self.model_output_type not in ("x0", "v"):
            raise VidaxError(f"LTX-2.5 diffusion decoder model_output_type "
                             f"{self.model_output_type!r}: 'x0' or 'v'")
        if self.default_num_inference_steps < 1:
            raise VidaxError("LTX-2.5 diffusion decoder default_num_inference_steps must be >= 1")

    @property
    def stage5_width(self) -> int:
        """Stage 5's width (``stage5_channels``, else the context width)."""
        return self.stage5_channels or self.stage_channels[-1]

    @property
    def trailing_pad_latent_frames(self) -> int:
        """Copies of the last latent frame run through stages 1-4 and cropped before stage 5
        (the authors' NATTEN border workaround): ``(stage 1 K_t // 2) * 2``."""
        return (self.stage_kernels[0][0] // 2) * 2

    @property
    def temporal_upscale(self) -> int:
        return _prod(s[0] for s, _ in self.upsamples)

    @property
    def spatial_upscale(self) -> int:
        """Pixels per latent along H and W (32 for LTX-2.5); W equals H in every release."""
        return _prod(s[1] for s, _ in self.upsamples) * self.patch_size

    @classmethod
    def from_dict(cls, d: dict[str, Any],
                  model_output_type: str = "v") -> LTX2DiffusionDecoderConfig:
        """From ``config["vae"]["decoder"]`` with ltx-core's defaults for missing keys
        (``model_output_type`` sits one level up in the file; ltx-core's default is 'v')."""
        unknown = sorted(set(d) - _NA_READ - _NA_NO_EFFECT)
        if unknown:
            raise VidaxError(f"unknown LTX-2.5 diffusion decoder config keys {unknown}")
        if d.get("_class_name", "NADiffusionDecoder") != "NADiffusionDecoder":
            raise VidaxError(f"LTX-2.5 diffusion decoder _class_name {d['_class_name']!r}: "
                             "vidax reads NADiffusionDecoder")
        if d.get("resampler_kind", "linear") != "linear":
            raise VidaxError(f"LTX-2.5 diffusion decoder resampler_kind "
                             f"{d['resampler_kind']!r}: vidax implements 'linear'")
        return cls(
            in_channels=d.get("in_channels", 128), out_channels=d.get("out_channels", 3),
            patch_size=d.get("patch_size", 4), head_dim=d.get("head_dim", d.get("na_head_dim", 64)),
            stage_channels=d.get("stage_channels", _NA_STAGE_CHANNELS),
            stage_depths=d.get("stage_depths", _NA_STAGE_DEPTHS),
            stage_kernels=d.get("stage_kernels", _NA_STAGE_KERNELS),
            upsamples=d.get("upsamples", _NA_UPSAMPLES),
            stage5_kernel=d.get("stage5_kernel", (3, 7, 7)),
            stage5_channels=d.get("stage5_channels"), t_emb_dim=d.get("t_emb_dim", 384),
            timestep_scale_multiplier=float(d.get("timestep_scale_multiplier", 1.0)),
            default_num_inference_steps=d.get("default_num_inference_steps", 2),
            model_output_type=model_output_type)


def _diffusion_vae_encoder(blocks, *, in_channels: int = 3, latent_channels: int = 128,
                           patch_size: int = 4, padding: str = "zeros",
                           log_var: str = "constant") -> LTX2VideoVAEConfig:
    """The encoder half as the conv VAE's config (its decoder fields unused). ``constant``
    builds like ``uniform`` (``conv_out`` latent + 1 wide, ltx-core's ``VideoEncoder``)."""
    if log_var not in ("constant", "uniform", "per_channel"):
        raise VidaxError(f"LTX-2.5 diffusion VAE encoder latent_log_var {log_var!r}: vidax "
                         "implements 'constant', 'uniform' and 'per_channel'")
    return LTX2VideoVAEConfig(
        encoder_blocks=blocks, decoder_blocks=(), in_channels=in_channels,
        latent_channels=latent_channels, patch_size=patch_size,
        encoder_base_channels=latent_channels,
        latent_log_var="per_channel" if log_var == "per_channel" else "uniform",
        spatial_padding_mode=padding, decoder_spatial_padding_mode=padding)


@dataclass(frozen=True)
class LTX2DiffusionVAEConfig:
    """LTX-2.5's ``CausalDiffusionVAE`` (``config["vae"]`` of ``ltx-2.5-video-vae-bf16``):
    the conv VAE's encoder (``encoder``, an :class:`LTX2VideoVAEConfig` whose decoder
    fields are unused) and the neighborhood-attention diffusion decoder (``decoder``).
    ``latent_log_var`` is the encoder's own mode (``constant``: the stored log-variance
    channel is dropped, ``latent_log_var_value`` is the fixed one)."""

    encoder: LTX2VideoVAEConfig = dataclasses.field(default_factory=lambda: _diffusion_vae_encoder(
        LTX2VideoVAEConfig.ltx2_3_22b().encoder_blocks))
    decoder: LTX2DiffusionDecoderConfig = dataclasses.field(
        default_factory=LTX2DiffusionDecoderConfig)
    latent_log_var: str = "constant"
    latent_log_var_value: float = -7.824046010856292

    def __post_init__(self):
        if self.decoder.in_channels != self.encoder.latent_channels:
            raise VidaxError(f"LTX-2.5 diffusion VAE: the decoder reads "
                             f"{self.decoder.in_channels} latent channels, the encoder writes "
                             f"{self.encoder.latent_channels}")
        if self.decoder.patch_size != self.encoder.patch_size:
            raise VidaxError("LTX-2.5 diffusion VAE: encoder and decoder patch sizes differ")

    @property
    def latent_channels(self) -> int:
        return self.encoder.latent_channels

    # ------------------------------------------------------------------ presets
    @classmethod
    def ltx2_5(cls) -> LTX2DiffusionVAEConfig:
        """``ltx-2.5-video-vae-bf16``: the 2.3 encoder, the 2048/1024/512/512/256 decoder
        (depths 4/6/4/2/8), one x0 step."""
        return cls()

    @classmethod
    def tiny(cls) -> LTX2DiffusionVAEConfig:
        """For tests: the 2.3 encoder stack one layer deep without its space-only stage, at
        8 latent channels (8 -> 32 wide), and a decoder 64 -> 32 wide (head_dim 16) with
        every kind of upsample stride: 16x spatial and 8x temporal compression."""
        return cls(
            encoder=_diffusion_vae_encoder(
                (Block("res_x", 1), Block("compress_time_res", multiplier=2),
                 Block("res_x", 1), Block("compress_all_res", multiplier=2),
                 Block("res_x", 1), Block("compress_all_res", multiplier=1),
                 Block("res_x", 1)), latent_channels=8),
            decoder=LTX2DiffusionDecoderConfig(
                in_channels=8, head_dim=16, stage_channels=(64, 32, 32, 32, 32),
                stage_depths=(1, 1, 1, 1, 2),
                stage_kernels=((3, 3, 3), (3, 3, 3), (3, 3, 3), (3, 5, 5), (5, 7, 7)),
                upsamples=(((1, 2, 2), 2), ((2, 1, 1), 1), ((2, 2, 2), 1), ((2, 1, 1), 1)),
                stage5_kernel=(5, 7, 7), t_emb_dim=48))

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTX2DiffusionVAEConfig:
        """From a release file's ``config["vae"]`` (the nested ``CausalDiffusionVAE``
        layout), as ltx-core @400fd31 reads it (``_prepare_video_encoder_kwargs``,
        ``_build_diffusion_video_decoder``), its defaults for missing keys."""
        if d.get("_class_name") != "CausalDiffusionVAE":
            raise VidaxError(f"LTX-2.5 diffusion VAE config _class_name "
                             f"{d.get('_class_name')!r}: expected 'CausalDiffusionVAE' (the "
                             "conv VAE is component video_vae_conv)")
        unknown = sorted(set(d) - {"_class_name", "dims", "model_output_type",
                                   "spatial_padding_mode", "encoder", "decoder",
                                   "latent_channels"})
        if unknown:
            raise VidaxError(f"unknown LTX-2.5 diffusion VAE config keys {unknown}")
        enc, dec = d.get("encoder", {}), d.get("decoder", {})
        unknown = sorted(set(enc) - _ENC_READ - _ENC_NO_EFFECT)
        if unknown:
            raise VidaxError(f"unknown LTX-2.5 diffusion VAE encoder config keys {unknown}")
        for key, default, supported in (("dims", 3, 3), ("norm_layer", "pixel_norm",
                                                         "pixel_norm")):
            value = enc.get(key, d.get(key, default))
            if value != supported:
                raise VidaxError(f"LTX-2.5 diffusion VAE encoder {key}={value!r}: vidax "
                                 f"implements {key}={supported!r}")
        latent = enc.get("out_channels", d.get("latent_channels", 128))
        log_var = enc.get("latent_log_var", "uniform")
        encoder = _diffusion_vae_encoder(
            tuple(Block.parse(b, "encoder") if not isinstance(b, Block) else b
                  for b in enc.get("blocks", enc.get("encoder_blocks", ()))),
            in_channels=enc.get("in_channels", 3), latent_channels=latent,
            patch_size=enc.get("patch_size", 4),
            padding=enc.get("spatial_padding_mode", "zeros"), log_var=log_var)
        decoder = LTX2DiffusionDecoderConfig.from_dict(
            {"in_channels": latent, **dec}, d.get("model_output_type", "v"))
        return cls(encoder=encoder, decoder=decoder, latent_log_var=log_var,
                   latent_log_var_value=float(enc.get("latent_log_var_value", -30.0)))
