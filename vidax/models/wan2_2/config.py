"""Wan2.2's configs, with no JAX import (the registry reads them without loading a model):

* :class:`Wan22VAEConfig`: the 48-channel VAE of TI2V-5B (:mod:`vidax.models.wan2_2.vae`).
* :class:`Wan22DiTConfigs`: the Wan2.2 DiTs. Every Wan2.2 ``WanModel`` is the Wan2.1 DiT
  (:class:`vidax.models.wan2_1.config.WanDiTConfig`) at its own config: the A14B T2V experts
  are Wan2.1 T2V-14B; I2V-A14B has 36 input channels and, unlike Wan2.1 I2V, no CLIP branch
  (structurally a "t2v" model with ``in_dim=36``); TI2V-5B is a "t2v" model at its own widths.
* diffusers' ``config.json`` readers for every Wan release (``WanTransformer3DModel``,
  ``AutoencoderKLWan``): the registry's config entries of the ``diffusers`` layout
  (:mod:`vidax.translator.mappings.wan2_2_diffusers`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError
from vidax.models.wan2_1.config import CLIP_DIM, FLF2V_CLIP_TOKENS, WanDiTConfig, WanVAEConfig

# ----------------------------------------------------------------------------- VAE
# The latent statistics of the released VAE: constants of the authors' ``Wan2_2_VAE`` wrapper
# (not stored in the file). Latents are normalised as ``(mu - mean) * (1 / std)``.
WAN2_2_LATENTS_MEAN = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542,
    0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109,
    0.2665, -0.2108, -0.2158, 0.2502, -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899,
    -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667)

WAN2_2_LATENTS_STD = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344,
    0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804,
    0.5833, 1.4146, 0.8986, 0.5659, 0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999,
    0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744)

#: The pixel patch of the authors' ``patchify`` / ``unpatchify`` (hard-coded 2 there, and
#: the trunk's 12 input / output channels with it).
PATCH = 2
RGB = 3


@dataclass(frozen=True)
class Wan22VAEConfig:
    """The authors' ``WanVAE_`` (vae2_2) hyper-parameters plus the latent statistics.

    ``dim`` is the encoder's base width (``c_dim`` of the ``Wan2_2_VAE`` wrapper) and
    ``dec_dim`` the decoder's; ``temporal_downsample`` is the authors'
    ``temperal_downsample`` (accepted by :meth:`from_dict`).
    """

    dim: int = 160
    dec_dim: int = 256
    z_dim: int = 48
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_downsample: tuple[bool, ...] = (False, True, True)
    latents_mean: tuple[float, ...] = WAN2_2_LATENTS_MEAN
    latents_std: tuple[float, ...] = WAN2_2_LATENTS_STD

    def __post_init__(self):
        for name in ("dim_mult", "temporal_downsample", "latents_mean", "latents_std"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if len(self.dim_mult) < 2:
            raise VidaxError(f"Wan2.2 VAE dim_mult needs at least 2 levels, got {self.dim_mult}")
        if len(self.temporal_downsample) > len(self.dim_mult) - 1 or sum(
                self.temporal_downsample) != 2:
            # Chunks of 1 + 4k frames and 4n+1 <-> n+1 assume a temporal stride of 4.
            raise VidaxError("Wan2.2 VAE: exactly two of the first "
                             f"{len(self.dim_mult) - 1} levels must downsample in time "
                             f"(stride 4), got temporal_downsample {self.temporal_downsample}")
        if len(self.latents_mean) != self.z_dim or len(self.latents_std) != self.z_dim:
            raise VidaxError(f"Wan2.2 VAE latents_mean/std need z_dim={self.z_dim} values each, "
                             f"got {len(self.latents_mean)} and {len(self.latents_std)}")

    @property
    def spatial_stride(self) -> int:
        return PATCH * 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_stride(self) -> int:
        return 2 ** sum(self.temporal_downsample)

    def temporal(self, level: int) -> bool:
        """Whether down level ``level`` halves time (the authors pad the list with False)."""
        return level < len(self.temporal_downsample) and self.temporal_downsample[level]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Wan22VAEConfig:
        """From the authors' ``WanVAE_`` keyword arguments (a manifest's ``config``).

        ``attn_scales`` must be empty (the released setting) and ``dropout`` is accepted and
        unused (inference); ``c_dim`` (the wrapper's name of ``dim``) is accepted. Keys
        starting with ``_`` are ignored; any other unknown key is an error.
        """
        d = dict(d)
        if d.pop("attn_scales", []):
            raise VidaxError("Wan2.2 VAE attn_scales: only [] (the released setting) is "
                             "supported")
        d.pop("dropout", None)
        for theirs, ours in (("temperal_downsample", "temporal_downsample"), ("c_dim", "dim")):
            if theirs in d:
                d[ours] = d.pop(theirs)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names and not k.startswith("_"))
        if unknown:
            raise VidaxError(f"unknown Wan2.2 VAE config keys {unknown}")
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def wan2_2(cls) -> Wan22VAEConfig:
        """``Wan2.2_VAE.pth`` (TI2V-5B; Cosmos3's VAE in diffusers' layout)."""
        return cls()

    @classmethod
    def tiny(cls) -> Wan22VAEConfig:
        """For tests: the released block structure with encoder width 8, decoder width 12
        (unequal, as released) and 4 latent channels (their statistics: the first 4 released
        values)."""
        return cls(dim=8, dec_dim=12, z_dim=4, latents_mean=WAN2_2_LATENTS_MEAN[:4],
                   latents_std=WAN2_2_LATENTS_STD[:4])


# ----------------------------------------------------------------------------- DiT
class Wan22DiTConfigs:
    """The Wan2.2 DiT configs, as ``WanDiTConfig`` instances: the registry's config entry for
    ``wan2_2`` ``dit``.

    Built from the Wan2.1 presets with ``dataclasses.replace``, so
    ``vidax.models.wan2_1.dit`` stays the one place that defines the architecture.
    """

    tiny = staticmethod(WanDiTConfig.tiny)

    @staticmethod
    def ti2v_5b() -> WanDiTConfig:
        """Wan2.2-TI2V-5B: 48 latent channels in and out (the Wan2.2 VAE), 24 x 128 heads."""
        return dataclasses.replace(WanDiTConfig.t2v_1_3b(), in_dim=48, out_dim=48, dim=3072,
                                   ffn_dim=14336, num_heads=24)

    @staticmethod
    def t2v_a14b() -> WanDiTConfig:
        """Each Wan2.2-T2V-A14B expert: Wan2.1 T2V-14B."""
        return WanDiTConfig.t2v_14b()

    @staticmethod
    def i2v_a14b() -> WanDiTConfig:
        """Each Wan2.2-I2V-A14B expert: T2V-14B with 36 input channels and no CLIP branch."""
        return dataclasses.replace(WanDiTConfig.t2v_14b(), in_dim=36)

    @staticmethod
    def from_dict(d: dict) -> WanDiTConfig:
        """The authors' Wan2.2 ``config.json`` (or a manifest's ``config``).

        Wan2.2's ``WanModel`` builds no image branch whatever its ``model_type`` ("t2v",
        "i2v" with 36 channels, "ti2v"), so every one of them is the "t2v" tree here. (A
        Wan2.1 I2V config reads the same but has the CLIP branch: load it as ``wan2_1``.)
        """
        return WanDiTConfig.from_dict({**d, "model_type": "t2v"})


# -------------------------------------------- diffusers' config.json readers (every Wan release)
def dit_config_from_diffusers(d: dict[str, Any]) -> WanDiTConfig:
    """A ``WanTransformer3DModel`` ``config.json`` as a ``WanDiTConfig``.

    The image branch is read from ``image_dim`` / ``added_kv_proj_dim`` (Wan2.1 I2V/FLF2V:
    1280 / dim; FLF2V also ``pos_embed_seq_len`` 514); without them the tree is the "t2v" one
    whatever ``in_channels`` is (Wan2.2 I2V-A14B: 36, TI2V-5B: 48). ``rope_max_seq_len``
    must be the authors' 1024 and ``qk_norm`` ``rms_norm_across_heads``.
    """
    d = {k: v for k, v in d.items() if not k.startswith("_")}
    known = {"patch_size", "num_attention_heads", "attention_head_dim", "in_channels",
             "out_channels", "text_dim", "freq_dim", "ffn_dim", "num_layers", "cross_attn_norm",
             "qk_norm", "eps", "image_dim", "added_kv_proj_dim", "rope_max_seq_len",
             "pos_embed_seq_len"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise VidaxError(f"unknown WanTransformer3DModel config keys {unknown} (a different "
                         "architecture, e.g. VACE or Animate)")
    heads, head_dim = d.get("num_attention_heads", 40), d.get("attention_head_dim", 128)
    if d.get("qk_norm", "rms_norm_across_heads") not in ("rms_norm_across_heads", None):
        raise VidaxError(f"WanTransformer3DModel qk_norm {d['qk_norm']!r}: only "
                         "'rms_norm_across_heads' (every release) is supported")
    if d.get("rope_max_seq_len", 1024) != 1024:
        raise VidaxError(f"WanTransformer3DModel rope_max_seq_len {d['rope_max_seq_len']}: "
                         "only 1024 (every release) is supported")
    image_dim, added_kv = d.get("image_dim"), d.get("added_kv_proj_dim")
    if (image_dim is None) != (added_kv is None) or image_dim not in (None, CLIP_DIM) or (
            added_kv not in (None, heads * head_dim)):
        raise VidaxError(f"WanTransformer3DModel image_dim {image_dim} / added_kv_proj_dim "
                         f"{added_kv}: the Wan image branch needs {CLIP_DIM} / "
                         f"{heads * head_dim}, or neither")
    pos_len = d.get("pos_embed_seq_len")
    if pos_len not in (None, FLF2V_CLIP_TOKENS):
        raise VidaxError(f"WanTransformer3DModel pos_embed_seq_len {pos_len}: only "
                         f"{FLF2V_CLIP_TOKENS} (FLF2V) is supported")
    model_type = "t2v" if image_dim is None else ("flf2v" if pos_len else "i2v")
    in_dim = d.get("in_channels", 16)
    # WanTransformer3DModel's own defaults where the config.json leaves a key out.
    return WanDiTConfig(
        model_type=model_type, patch_size=tuple(d.get("patch_size", (1, 2, 2))),
        in_dim=in_dim, out_dim=d.get("out_channels") or in_dim, dim=heads * head_dim,
        ffn_dim=d.get("ffn_dim", 13824), freq_dim=d.get("freq_dim", 256),
        text_dim=d.get("text_dim", 4096), num_heads=heads, num_layers=d.get("num_layers", 40),
        qk_norm=d.get("qk_norm", "rms_norm_across_heads") is not None,
        cross_attn_norm=d.get("cross_attn_norm", True), eps=d.get("eps", 1e-6))


class WanDiTDiffusersConfigs(Wan22DiTConfigs):
    """Every Wan DiT release's config (Wan2.1 and Wan2.2), as ``WanDiTConfig`` instances;
    :meth:`from_dict` reads diffusers' ``config.json``. The registry's config entry for
    the diffusers layout."""

    t2v_1_3b = staticmethod(WanDiTConfig.t2v_1_3b)
    t2v_14b = staticmethod(WanDiTConfig.t2v_14b)
    i2v_14b = staticmethod(WanDiTConfig.i2v_14b)
    flf2v_14b = staticmethod(WanDiTConfig.flf2v_14b)
    from_dict = staticmethod(dit_config_from_diffusers)


# Every release: num_res_blocks = 2, four levels (the diffusers VAE layout's index
# arithmetic in vidax.translator.mappings.wan2_2_diffusers assumes them).
_RES, _LEVELS = 2, 4

#: The AutoencoderKLWan ``config.json`` keys: read below, or checked, or (dropout, the
#: compression factors, clip_output) accepted and unused.
_VAE_KEYS = {"attn_scales", "dropout", "latents_mean", "latents_std", "scale_factor_temporal",
             "scale_factor_spatial", "clip_output", "in_channels", "out_channels", "patch_size",
             "is_residual", "base_dim", "decoder_base_dim", "z_dim", "dim_mult",
             "num_res_blocks", "temperal_downsample"}


def vae_config_from_diffusers(d: dict[str, Any]) -> WanVAEConfig | Wan22VAEConfig:
    """An ``AutoencoderKLWan`` ``config.json`` as the vidax VAE config it describes:
    ``is_residual`` (with ``patch_size`` 2 and 12 channels) is the Wan2.2 VAE, otherwise the
    Wan2.1 VAE (3 channels, no patch). ``clip_output`` (diffusers' conversion script passes
    it; it creates no tensor) is accepted and unused."""
    d = {k: v for k, v in d.items() if not k.startswith("_")}
    unknown = sorted(set(d) - _VAE_KEYS)
    if unknown:
        raise VidaxError(f"unknown AutoencoderKLWan config keys {unknown}")
    if d.get("attn_scales"):
        raise VidaxError("AutoencoderKLWan attn_scales: only [] (every release) is supported")
    if d.get("num_res_blocks", _RES) != _RES or len(d.get("dim_mult", (1, 2, 4, 4))) != _LEVELS:
        raise VidaxError(f"AutoencoderKLWan num_res_blocks {d.get('num_res_blocks')} / "
                         f"dim_mult {d.get('dim_mult')}: the diffusers layout is read for "
                         f"{_RES} residual blocks on {_LEVELS} levels (every release)")
    residual = bool(d.get("is_residual", False))
    channels = 12 if residual else 3
    patch = 2 if residual else None
    if (d.get("in_channels", 3), d.get("out_channels", 3), d.get("patch_size")) != (
            channels, channels, patch):
        raise VidaxError(
            f"AutoencoderKLWan is_residual={residual} with in/out_channels "
            f"{d.get('in_channels', 3)}/{d.get('out_channels', 3)} and patch_size "
            f"{d.get('patch_size')}: the released Wan VAEs are 3/3 without a patch (Wan2.1) "
            "and 12/12 with patch_size 2 (Wan2.2)")
    # The latent statistics where given (save_pretrained writes them), else the release's.
    common = {"z_dim": d.get("z_dim", 16), "dim_mult": d.get("dim_mult", (1, 2, 4, 4)),
              "num_res_blocks": _RES,
              "temporal_downsample": d.get("temperal_downsample", (False, True, True)),
              **{k: d[k] for k in ("latents_mean", "latents_std") if k in d}}
    base = d.get("base_dim", 96)
    if residual:
        return Wan22VAEConfig(dim=base, dec_dim=d.get("decoder_base_dim") or base, **common)
    if d.get("decoder_base_dim") not in (None, base):
        raise VidaxError("AutoencoderKLWan decoder_base_dim differs from base_dim: the Wan2.1 "
                         "VAE has one width")
    return WanVAEConfig(dim=base, **common)


class WanVAEDiffusersConfigs:
    """The Wan2.1 VAE's configs (``WanVAEConfig``); :meth:`from_dict` reads diffusers'
    ``config.json``. The registry's config entry for ``wan2_1`` ``vae`` ``diffusers``."""

    wan2_1 = staticmethod(WanVAEConfig.wan2_1)
    tiny = staticmethod(WanVAEConfig.tiny)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> WanVAEConfig:
        cfg = vae_config_from_diffusers(d)
        if not isinstance(cfg, WanVAEConfig):
            raise VidaxError("this AutoencoderKLWan config (is_residual) is the Wan2.2 VAE: "
                             "load it as wan2_2 vae")
        return cfg


class Wan22VAEDiffusersConfigs:
    """The Wan2.2 VAE's configs (``Wan22VAEConfig``); :meth:`from_dict` reads diffusers'
    ``config.json``. The registry's config entry for ``wan2_2`` ``vae`` ``diffusers``."""

    wan2_2 = staticmethod(Wan22VAEConfig.wan2_2)
    tiny = staticmethod(Wan22VAEConfig.tiny)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Wan22VAEConfig:
        cfg = vae_config_from_diffusers(d)
        if not isinstance(cfg, Wan22VAEConfig):
            raise VidaxError("this AutoencoderKLWan config (no is_residual) is the Wan2.1 VAE: "
                             "load it as wan2_1 vae")
        return cfg
