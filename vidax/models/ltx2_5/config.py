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
        """From an LTX-2.x DiT config (the metadata's ``config["transformer"]``, or the
        whole ``config``), as ltx-core's ``_create_feature_extractor``: none of the V2 keys
        -> V1; all four with their expected values -> V2 with the DiT's video and audio
        inner dims; anything else is an error. The Gemma side is Gemma 3 12B's (3840 x 49),
        as ltx-core fixes it."""
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


# ------------------------------------------------------------------------- audio VAE


# ------------------------------------------------------------------------- vocoders


# ------------------------------------------------------------------------- 2.5 diffusion decoder
