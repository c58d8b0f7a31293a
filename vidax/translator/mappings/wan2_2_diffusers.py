"""diffusers' Wan key layouts (``*-Diffusers`` releases, Cosmos3's and Cosmos-Predict2.5's VAEs)
-> the same vidax modules as the authors' layouts.

Registered as layout ``diffusers`` of the components they implement: ``wan2_1`` ``dit``
(``WanTransformer3DModel``), ``wan2_1`` ``vae`` and ``wan2_2`` ``vae`` (``AutoencoderKLWan``
with the Wan2.1 / Wan2.2 configs), ``wan2_2`` ``dit`` (TI2V-5B, A14B experts). Every tensor maps
1:1 with the shape it has in the authors' layout (checked against diffusers'
``scripts/convert_wan_to_diffusers.py``; ../shared/families/wan.md), so the rules are renames
only; the converter's automatic layout then does what it does for the authors' files.

DiT: a pure rename (the conversion script's ``TRANSFORMER_KEYS_RENAME_DICT``, read backwards).

VAE: the authors' ``nn.Sequential`` indices become diffusers' named blocks, and the flat
Wan2.1 decoder list ``upsamples.N`` is regrouped by diffusers into
``up_blocks.N // 4 .{resnets.N % 4 | upsamplers.0}``; Wan2.2's nested lists become
``down_blocks.I.{resnets.J | downsampler}`` / ``up_blocks.I.{resnets.J | upsampler}``. The
index arithmetic assumes ``num_res_blocks = 2`` (every release; the diffusers config readers
below refuse any other value, and verification would fail on the tree).
"""

from __future__ import annotations

from typing import Any

from vidax.errors import VidaxError
from vidax.models.wan2_1.dit import CLIP_DIM, FLF2V_CLIP_TOKENS, WanDiTConfig
from vidax.models.wan2_1.vae import WanVAEConfig
from vidax.models.wan2_2.vae import Wan22VAEConfig
from vidax.registry import Alias, ComponentSpec, alias, register
from vidax.translator.mapping import Mapper, Rename, Transform
from vidax.translator.mappings.wan2_2 import Wan22DiTConfigs

# ----------------------------------------------------------------------------- DiT
DIT = Mapper(
    name="wan2_2_diffusers.dit",
    description="Wan DiT, diffusers' layout (WanTransformer3DModel state dict)",
    rules=(
        Rename(r"^scale_shift_table$", "head.modulation"),
        Rename(r"^proj_out\.", "head.head."),
        Rename(r"^blocks\.(\d+)\.scale_shift_table$", r"blocks.\1.modulation"),
        Rename(r"^condition_embedder\.time_embedder\.linear_([12])\.", r"time_embedding.fc\1."),
        Rename(r"^condition_embedder\.text_embedder\.linear_([12])\.", r"text_embedding.fc\1."),
        Rename(r"^condition_embedder\.time_proj\.", "time_projection.fc."),
        Rename(r"^condition_embedder\.image_embedder\.pos_embed$", "img_emb.emb_pos"),
        Rename(r"^condition_embedder\.image_embedder\.ff\.net\.0\.proj\.", "img_emb.fc1."),
        Rename(r"^condition_embedder\.image_embedder\.ff\.net\.2\.", "img_emb.fc2."),
        Rename(r"^condition_embedder\.image_embedder\.", "img_emb."),
        # diffusers' norm2 is the affine LayerNorm before cross-attention (the authors' norm3).
        Rename(r"^blocks\.(\d+)\.norm2\.", r"blocks.\1.norm3."),
        Rename(r"\.attn1\.", ".self_attn."),
        Rename(r"\.attn2\.", ".cross_attn."),
        Rename(r"\.to_([qkv])\.", r".\1."),
        Rename(r"\.to_out\.0\.", ".o."),
        Rename(r"\.add_([kv])_proj\.", r".\1_img."),
        Rename(r"\.norm_added_k\.", ".norm_k_img."),
        Rename(r"\.ffn\.net\.0\.proj\.", ".ffn.fc1."),
        Rename(r"\.ffn\.net\.2\.", ".ffn.fc2."),
    ),
)


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


_DIT_FILES = ("transformer/diffusion_pytorch_model.safetensors.index.json",
              "transformer/diffusion_pytorch_model*.safetensors")

register(ComponentSpec(
    model_type="wan2_1", component="dit", layout="diffusers",
    model="vidax.models.wan2_1.dit:WanDiT",
    config="vidax.translator.mappings.wan2_2_diffusers:WanDiTDiffusersConfigs",
    mapper="vidax.translator.mappings.wan2_2_diffusers:DIT",
    variants={"t2v-1.3b": "t2v_1_3b", "t2v-14b": "t2v_14b", "i2v-14b": "i2v_14b",
              "flf2v-14b": "flf2v_14b"},
    files=_DIT_FILES,
    description="Wan2.1 DiT in diffusers' layout (WanTransformer3DModel, Wan2.1-*-Diffusers)",
))
register(ComponentSpec(
    model_type="wan2_2", component="dit", layout="diffusers",
    model="vidax.models.wan2_1.dit:WanDiT",
    config="vidax.translator.mappings.wan2_2_diffusers:WanDiTDiffusersConfigs",
    mapper="vidax.translator.mappings.wan2_2_diffusers:DIT",
    variants={"ti2v-5b": "ti2v_5b", "t2v-a14b": "t2v_a14b", "i2v-a14b": "i2v_a14b"},
    files=_DIT_FILES,
    description="Wan2.2 DiTs in diffusers' layout (WanTransformer3DModel, Wan2.2-*-Diffusers; "
                "A14B: transformer/ and transformer_2/)",
))


# ----------------------------------------------------------------------------- VAE
def _residual_and_attention_rules() -> tuple:
    """Rules shared by both VAEs: the top-level convs, the encoder/decoder ends, the middle
    blocks, inside each residual block (diffusers already names its norms and convs as vidax
    does), the resample conv; RMS_norm ``gamma`` -> ``scale`` [C]. Attention (``norm``,
    ``to_qkv``, ``proj``) and ``time_conv`` keep their names."""
    return (
        Transform(r"\.gamma$", leaf="scale", reshape=lambda shape: (shape[0],)),
        Rename(r"^quant_conv\.", "conv1."),
        Rename(r"^post_quant_conv\.", "conv2."),
        Rename(r"^(encoder|decoder)\.conv_in\.", r"\1.conv1."),
        Rename(r"^(encoder|decoder)\.norm_out\.", r"\1.head_norm."),
        Rename(r"^(encoder|decoder)\.conv_out\.", r"\1.head_conv."),
        Rename(r"\.mid_block\.resnets\.0\.", ".mid_block1."),
        Rename(r"\.mid_block\.attentions\.0\.", ".mid_attn."),
        Rename(r"\.mid_block\.resnets\.1\.", ".mid_block2."),
        Rename(r"\.conv_shortcut\.", ".shortcut."),
        Rename(r"\.resample\.1\.", ".conv."),
    )


# Every release: num_res_blocks = 2, four levels. Wan2.1's decoder levels hold 3 residual
# blocks and (but the last) an upsampler: authors' flat index 4 * level + j.
_RES, _LEVELS = 2, 4
VAE2_1 = Mapper(
    name="wan2_2_diffusers.vae2_1",
    description="Wan2.1 VAE, diffusers' layout (AutoencoderKLWan, z 16)",
    rules=_residual_and_attention_rules() + (
        Rename(r"^encoder\.down_blocks\.(\d+)\.", r"encoder.downsamples.\1."),
        *(Rename(rf"^decoder\.up_blocks\.{i}\.resnets\.{j}\.",
                 f"decoder.upsamples.{(_RES + 2) * i + j}.")
          for i in range(_LEVELS) for j in range(_RES + 1)),
        *(Rename(rf"^decoder\.up_blocks\.{i}\.upsamplers\.0\.",
                 f"decoder.upsamples.{(_RES + 2) * i + _RES + 1}.")
          for i in range(_LEVELS - 1)),
    ),
)

VAE2_2 = Mapper(
    name="wan2_2_diffusers.vae2_2",
    description="Wan2.2 VAE, diffusers' layout (AutoencoderKLWan, z 48, is_residual)",
    rules=_residual_and_attention_rules() + (
        Rename(r"^encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.",
               r"encoder.downsamples.\1.downsamples.\2."),
        Rename(r"^encoder\.down_blocks\.(\d+)\.downsampler\.",
               rf"encoder.downsamples.\1.downsamples.{_RES}."),
        Rename(r"^decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.",
               r"decoder.upsamples.\1.upsamples.\2."),
        Rename(r"^decoder\.up_blocks\.(\d+)\.upsampler\.",
               rf"decoder.upsamples.\1.upsamples.{_RES + 1}."),
    ),
)

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


_VAE_FILES = ("vae/diffusion_pytorch_model.safetensors",)

register(ComponentSpec(
    model_type="wan2_1", component="vae", layout="diffusers",
    model="vidax.models.wan2_1.vae:WanVAE",
    config="vidax.translator.mappings.wan2_2_diffusers:WanVAEDiffusersConfigs",
    mapper="vidax.translator.mappings.wan2_2_diffusers:VAE2_1",
    variants={v: "wan2_1" for v in ("t2v-1.3b", "t2v-14b", "i2v-14b", "flf2v-14b")},
    files=_VAE_FILES,
    description="Wan2.1 VAE in diffusers' layout (AutoencoderKLWan z 16): Wan2.1-*-Diffusers, "
                "Wan2.2 A14B -Diffusers, Cosmos-Predict2.5 diffusers revision",
))
register(ComponentSpec(
    model_type="wan2_2", component="vae", layout="diffusers",
    model="vidax.models.wan2_2.vae:Wan22VAE",
    config="vidax.translator.mappings.wan2_2_diffusers:Wan22VAEDiffusersConfigs",
    mapper="vidax.translator.mappings.wan2_2_diffusers:VAE2_2",
    variants={"ti2v-5b": "wan2_2"},
    files=_VAE_FILES,
    description="Wan2.2 VAE in diffusers' layout (AutoencoderKLWan z 48): "
                "Wan2.2-TI2V-5B-Diffusers, Cosmos3",
))

# ----------------------------------------------------------------------------- aliases
# The manifests' wan2_2_diffusers family (the -Diffusers releases), and the same VAEs in other
# families' releases: Cosmos3 ships the Wan2.2 VAE, Cosmos-Predict2.5's diffusers revision the
# Wan2.1 VAE, both in diffusers' layout.
_DIFFUSERS = "diffusers"
for _name, _target in {
    ("wan2_2_diffusers", "t2v-1.3b", "dit"): ("wan2_1", "t2v-1.3b"),
    ("wan2_2_diffusers", "ti2v-5b", "dit"): ("wan2_2", "ti2v-5b"),
    ("wan2_2_diffusers", "t2v-1.3b", "vae"): ("wan2_1", "t2v-1.3b"),
    ("wan2_2_diffusers", "ti2v-5b", "vae"): ("wan2_2", "ti2v-5b"),
    ("wan2_2", "t2v-a14b", "vae"): ("wan2_1", "t2v-14b"),
    ("wan2_2", "i2v-a14b", "vae"): ("wan2_1", "t2v-14b"),
    ("cosmos2_5", "predict-2b", "vae"): ("wan2_1", "t2v-1.3b"),
    ("cosmos3", "edge", "vae"): ("wan2_2", "ti2v-5b"),
    ("cosmos3", "nano", "vae"): ("wan2_2", "ti2v-5b"),
}.items():
    alias(*_name, _DIFFUSERS, Alias(_target[0], _target[1], _name[2], _DIFFUSERS))
