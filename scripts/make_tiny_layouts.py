"""Regenerate vidax/data/tiny/*.json: the key layouts of the tiny demo checkpoints, taken
from the authors' own PyTorch classes at vidax's ``tiny()`` configs.

The demo (``vidax demo``) writes random-weight checkpoints with exactly these names and
shapes, so what it loads is laid out as the authors' code lays it out -- not by an inverse
of vidax's own mapping. Needs the test environment (torch, the authors' packages):

    python scripts/make_tiny_layouts.py          # rewrite
    python scripts/make_tiny_layouts.py --check  # exit 1 if stale (tests run this check)
    python scripts/make_tiny_layouts.py wan2_2   # only the named layouts
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "vidax" / "data" / "tiny"

#: name -> builder of ``vidax/data/tiny/<name>.json`` (a dict: component -> {"file": the
#: file's path in the release folder, "tensors": key -> shape, and what else the demo needs,
#: such as "config"}). Builders register with :func:`layout`.
LAYOUTS: dict = {}


def layout(name: str):
    """Register the decorated builder as ``LAYOUTS[name]``."""
    def register(build):
        LAYOUTS[name] = build
        return build
    return register


def _state_layout(module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def _dump(layout: dict) -> str:
    """JSON with one line per tensor, so a diff shows which tensor changed."""
    lines = ["{"]
    for c, (component, entry) in enumerate(sorted(layout.items())):
        lines.append(f"  {json.dumps(component)}: {{")
        for key in sorted(k for k in entry if k != "tensors"):
            lines.append(f"    {json.dumps(key)}: {json.dumps(entry[key], sort_keys=True)},")
        lines.append('    "tensors": {')
        items = sorted(entry["tensors"].items())
        lines += [f"      {json.dumps(k)}: {json.dumps(v)}" + ("," if i < len(items) - 1 else "")
                  for i, (k, v) in enumerate(items)]
        lines.append("    }")
        lines.append("  }" + ("," if c < len(layout) - 1 else ""))
    return "\n".join(lines + ["}"]) + "\n"


def main() -> int:
    check = "--check" in sys.argv
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(LAYOUTS)
    stale = []
    for name in names:
        build = LAYOUTS[name]
        path = OUT / f"{name}.json"
        text = _dump(build())
        if not path.exists() or path.read_text() != text:
            stale.append(path)
            if not check:
                OUT.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    orphans = [] if names != list(LAYOUTS) else sorted(
        str(p) for p in OUT.glob("*.json") if p.stem not in LAYOUTS)
    if orphans:   # a layout nothing regenerates (its builder removed or renamed)
        print("tiny layouts without a builder in LAYOUTS: " + ", ".join(orphans))
        return 1
    if check and stale:
        print("stale tiny layouts: " + ", ".join(map(str, stale)))
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# Wan2.1, Wan2.2, LTX-Video
# ---------------------------------------------------------------------------------------------


def _wan_t5(t5):
    from tests.reference import wan22

    return wan22.t5_module().T5Encoder(
        vocab=t5.vocab_size, dim=t5.dim, dim_attn=t5.dim_attn, dim_ffn=t5.dim_ffn,
        num_heads=t5.num_heads, num_layers=t5.num_layers, num_buckets=t5.num_buckets,
        shared_pos=t5.shared_pos)


def _wan_entries(configs: dict, dit_spec: str, vae_spec: str, vae, dit_config: dict) -> dict:
    """The Wan release's three files: the DiT (``WanModel`` at ``dit_config``, its
    ``config.json`` keys), UMT5 (``T5Encoder``), the VAE module ``vae``."""
    from tests.reference import wan22

    return {
        "dit": {"file": "diffusion_pytorch_model.safetensors", "spec": [dit_spec, "dit",
                                                                         "original"],
                "config": dit_config,
                "tensors": _state_layout(wan22.model_module().WanModel(**dit_config))},
        "text_encoder": {"file": "models_t5_umt5-xxl-enc-bf16.pth",
                         "spec": ["wan2_1", "text_encoder", "original"],
                         "config": dataclasses.asdict(configs["text_encoder"]),
                         "tensors": _state_layout(_wan_t5(configs["text_encoder"]))},
        "vae": {"file": vae[0], "spec": [vae_spec, "vae", "original"],
                "config": dataclasses.asdict(configs["vae"]), "tensors": _state_layout(vae[1])},
    }


@layout("wan2_1")
def wan2_1() -> dict:
    """The tiny Wan2.1 text-to-video release (``vidax.pipelines.wan2_1.tiny_configs("t2v")``):
    the DiT as ``WanModel``, the UMT5 encoder as ``T5Encoder`` and the VAE as ``WanVAE_``
    lay out their state dicts."""
    from tests.reference import wan22
    from vidax.pipelines.wan2_1 import tiny_configs

    configs = tiny_configs("t2v")
    vae = configs["vae"]
    module = wan22.vae2_1_module().WanVAE_(
        dim=vae.dim, z_dim=vae.z_dim, dim_mult=list(vae.dim_mult),
        num_res_blocks=vae.num_res_blocks, attn_scales=[],
        temperal_downsample=list(vae.temporal_downsample), dropout=0.0)
    return _wan_entries(configs, "wan2_1", "wan2_1", ("Wan2.1_VAE.pth", module),
                        dataclasses.asdict(configs["dit"]))


@layout("wan2_2")
def wan2_2() -> dict:
    """The tiny Wan2.2 TI2V (5B-like) release (``vidax.pipelines.wan2_2.tiny_configs("ti2v")``):
    ``WanModel`` with ``model_type`` ti2v and 48 latent channels, UMT5, the Wan2.2 VAE
    (``wan.modules.vae2_2.WanVAE_``)."""
    from tests.reference import wan22
    from vidax.pipelines.wan2_2 import tiny_configs

    configs = tiny_configs("ti2v")
    vae = configs["vae"]
    module = wan22.vae2_2_module().WanVAE_(
        dim=vae.dim, dec_dim=vae.dec_dim, z_dim=vae.z_dim, dim_mult=list(vae.dim_mult),
        num_res_blocks=vae.num_res_blocks, attn_scales=[],
        temperal_downsample=list(vae.temporal_downsample), dropout=0.0)
    return _wan_entries(configs, "wan2_2", "wan2_2", ("Wan2.2_VAE.pth", module),
                        {**dataclasses.asdict(configs["dit"]), "model_type": "ti2v"})


#: The tiny LTX-Video 0.9.8 release: the Transformer3DModel and CausalVideoAutoencoder
#: configs the file's metadata carries (the pipeline test's, tests/pipelines/
#: test_ltx_video_pipeline.py), the scheduler section every 0.9.8 file has, a tiny T5 encoder.
LTX_FILE = "ltxv-tiny-0.9.8.safetensors"
LTX_T5 = {"vocab_size": 96, "d_model": 24, "d_kv": 8, "d_ff": 40, "num_layers": 2,
          "num_heads": 4, "feed_forward_proj": "gated-gelu",
          "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128}
LTX_DIT = {
    "_class_name": "Transformer3DModel", "activation_fn": "gelu-approximate",
    "attention_bias": True, "attention_head_dim": 16, "attention_type": "default",
    "caption_channels": LTX_T5["d_model"], "cross_attention_dim": 32,
    "double_self_attention": False, "dropout": 0.0, "in_channels": 16,
    "norm_elementwise_affine": False, "norm_eps": 1e-06, "norm_num_groups": 32,
    "num_attention_heads": 2, "num_embeds_ada_norm": 1000, "num_layers": 2,
    "num_vector_embeds": None, "only_cross_attention": False, "out_channels": 16,
    "project_to_2d_pos": True, "upcast_attention": False, "use_linear_projection": False,
    "qk_norm": "rms_norm", "standardization_norm": "rms_norm",
    "positional_embedding_type": "rope", "positional_embedding_theta": 10000.0,
    "positional_embedding_max_pos": [20, 2048, 2048], "timestep_scale_multiplier": 1000,
    "causal_temporal_positioning": True}
LTX_VAE = {
    "_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3,
    "latent_channels": 16,
    "encoder_blocks": [["res_x", {"num_layers": 1}], ["compress_space_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 1}], ["compress_time_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 1}], ["compress_all_res", {"multiplier": 2}],
                       ["res_x", {"num_layers": 1}]],
    "decoder_blocks": [["res_x", {"num_layers": 1, "inject_noise": False}],
                       ["compress_all", {"residual": True, "multiplier": 2}],
                       ["res_x", {"num_layers": 1, "inject_noise": False}],
                       ["compress_time", {}],
                       ["res_x", {"num_layers": 1, "inject_noise": False}],
                       ["compress_space", {}],
                       ["res_x", {"num_layers": 1, "inject_noise": False}]],
    "encoder_base_channels": 8, "decoder_base_channels": 16, "scaling_factor": 1.0,
    "norm_layer": "pixel_norm", "patch_size": 4, "latent_log_var": "uniform",
    "use_quant_conv": False, "causal_decoder": False, "timestep_conditioning": True}
LTX_SCHEDULER = {"_class_name": "RectifiedFlowScheduler", "_diffusers_version": "0.25.1",
                 "num_train_timesteps": 1000, "sampler": "LinearQuadratic"}


def _safetensors_layout(path: Path) -> dict[str, list[int]]:
    import safetensors

    with safetensors.safe_open(str(path), "np") as f:
        return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}


@layout("ltx_video")
def ltx_video() -> dict:
    """The tiny LTX-Video release: the single file as the authors' release writes it (their
    ``Transformer3DModel`` under ``model.diffusion_model.``, their ``CausalVideoAutoencoder``
    under ``vae.`` with the five ``per_channel_statistics``; written by
    ``tests.reference.ltx_video.write_release_file`` and read back), and the T5 encoder folder
    as transformers' ``T5EncoderModel.save_pretrained`` writes it (``config.json`` recorded
    as written, less ``transformers_version``)."""
    import copy
    import tempfile

    import torch
    from transformers import T5Config, T5EncoderModel

    from tests.reference import ltx_video as ref

    dit = ref.Transformer3DModel.from_config(copy.deepcopy(LTX_DIT))
    vae = ref.CausalVideoAutoencoder.from_config(copy.deepcopy(LTX_VAE))
    stats = {name: torch.zeros(LTX_VAE["latent_channels"]) for name in ref.STATISTICS}
    t5 = T5EncoderModel(T5Config(**LTX_T5))
    with tempfile.TemporaryDirectory() as tmp:
        single = ref.write_release_file(Path(tmp) / LTX_FILE, dit, LTX_DIT, vae, LTX_VAE, stats)
        tensors = _safetensors_layout(single)
        t5.save_pretrained(Path(tmp) / "text_encoder")
        t5_tensors = _safetensors_layout(Path(tmp) / "text_encoder" / "model.safetensors")
        t5_config = json.loads((Path(tmp) / "text_encoder" / "config.json").read_text())
    t5_config.pop("transformers_version", None)
    prefixes = {"dit": ref.DIT_PREFIX, "vae": ref.VAE_PREFIX}
    return {
        **{c: {"file": LTX_FILE, "spec": ["ltx_video", c, "original"], "prefix": prefix,
               "config": {"dit": LTX_DIT, "vae": LTX_VAE}[c],
               "tensors": {k: v for k, v in tensors.items() if k.startswith(prefix)}}
           for c, prefix in prefixes.items()},
        "scheduler": {"file": LTX_FILE, "config": LTX_SCHEDULER, "tensors": {}},
        "text_encoder": {"file": "text_encoder/model.safetensors",
                         "spec": ["t5", "encoder", "transformers"], "config": t5_config,
                         "tensors": t5_tensors},
    }


# ---------------------------------------------------------------------------------------------
# CogVideoX, Cosmos-Predict2.5, HunyuanVideo (their section; keep above the main guard)
# ---------------------------------------------------------------------------------------------


#: The tiny sizes of these three demos' text encoders (transformers' configs): each DiT reads
#: its encoder's width, each tokenizer's vocabulary fits in ``vocab_size``.
COGVIDEOX_T5 = dict(vocab_size=160, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                    feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
                    relative_attention_max_distance=128, decoder_start_token_id=0,
                    eos_token_id=1, pad_token_id=0, tie_word_embeddings=False)
COSMOS_TEXT = dict(vocab_size=1536, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                   rope_theta=1e6, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
                   bos_token_id=0, eos_token_id=0)  # replaced by _set_token_ids
COSMOS_VISION = dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2,
                     out_hidden_size=64, fullatt_block_indexes=[0])
HUNYUAN_LLAMA = dict(vocab_size=1024, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                     rope_theta=5e5, max_position_embeddings=512, tie_word_embeddings=False)
HUNYUAN_CLIP_TEXT = dict(vocab_size=160, hidden_size=24, intermediate_size=48,
                         num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=77,
                         projection_dim=24, bos_token_id=0, eos_token_id=0,
                         pad_token_id=0)  # replaced by _set_token_ids
HUNYUAN_CLIP_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, image_size=28, patch_size=14,
                           projection_dim=24)


def _saved(model, dtype, file: str, spec: list[str]) -> dict:
    """What ``save_pretrained`` writes for ``model`` cast to the release's ``dtype``: the file
    (its name inside the release), its ``config.json`` (the library's version keys kept: they
    are what the class writes), the safetensors header's key -> shape (one dtype per file) and
    the registry ``spec`` (model type, component, layout) that reads it."""
    import tempfile

    from safetensors import safe_open

    model = model.to(dtype).eval()
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        shards = sorted(Path(tmp).glob("*.safetensors"))
        assert len(shards) == 1, shards
        tensors, dtypes = {}, set()
        with safe_open(shards[0], "pt") as f:
            for key in f.keys():
                t = f.get_slice(key)
                tensors[key] = list(t.get_shape())
                dtypes.add(t.get_dtype())
        config = json.loads((Path(tmp) / "config.json").read_text())
    assert len(dtypes) == 1, dtypes
    names = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
    return {"file": file, "dtype": names[dtypes.pop()], "config": config, "spec": spec,
            "tensors": tensors}


def _set_token_ids(name: str, layout: dict) -> None:
    """The text encoders' configs with the token ids of the tokenizers the demo writes (its
    ``write_tokenizer(s)`` into a scratch folder), so the recorded config is the file's."""
    import importlib
    import tempfile

    module = importlib.import_module(f"vidax.demo.{name}")
    writer = getattr(module, "write_tokenizers", None) or module.write_tokenizer
    configs = {key: entry.get("config") for key, entry in layout.items()}
    with tempfile.TemporaryDirectory() as tmp:
        writer(Path(tmp), configs)


@layout("cogvideox")
def cogvideox() -> dict:
    """THUDM/CogVideoX-2b at tiny widths, as diffusers' ``CogVideoXPipeline.save_pretrained``
    writes it (the release is that): ``CogVideoXTransformer3DModel`` (the 2b structure: sincos
    positions, DDIM) reading T5's width, ``AutoencoderKLCogVideoX`` at the tiny VAE config
    (4 latent channels), transformers' ``T5EncoderModel``; every file float16 (the 2b
    release's dtype, vidax/data/manifests/cogvideox/2b__*). ``release_files``: the pipeline's
    ``model_index.json`` and ``scheduler/scheduler_config.json`` (the released DDIM config of
    the 2B: SNR shift 3)."""
    import diffusers
    import torch
    from diffusers import (AutoencoderKLCogVideoX, CogVideoXDDIMScheduler,
                           CogVideoXTransformer3DModel)
    from transformers import T5Config, T5EncoderModel

    from vidax.models.cogvideox.config import CogVideoXDiTConfig, CogVideoXVAEConfig
    from vidax.schedulers.cogvideox import RELEASED_CONFIG

    vae_cfg = CogVideoXVAEConfig.tiny()
    dit_cfg = dataclasses.replace(CogVideoXDiTConfig.tiny("2b"), text_embed_dim=COGVIDEOX_T5[
        "d_model"], in_channels=vae_cfg.latent_channels, out_channels=vae_cfg.latent_channels,
        max_text_seq_length=32)
    torch.manual_seed(0)
    dit = CogVideoXTransformer3DModel(**dataclasses.asdict(dit_cfg))
    vae = AutoencoderKLCogVideoX(block_out_channels=vae_cfg.block_out_channels,
                                 latent_channels=vae_cfg.latent_channels,
                                 norm_num_groups=vae_cfg.norm_num_groups,
                                 scaling_factor=CogVideoXVAEConfig.cogvideox_2b().scaling_factor)
    t5 = T5EncoderModel(T5Config(**COGVIDEOX_T5))
    scheduler = CogVideoXDDIMScheduler.from_config(dict(RELEASED_CONFIG, clip_sample=False))
    half = torch.float16
    return {
        "dit": {**_saved(dit, half, "transformer/diffusion_pytorch_model.safetensors",
                         ["cogvideox", "dit", "diffusers"]),
                "release_files": {
                    "model_index.json": {
                        "_class_name": "CogVideoXPipeline",
                        "_diffusers_version": diffusers.__version__,
                        "scheduler": ["diffusers", "CogVideoXDDIMScheduler"],
                        "text_encoder": ["transformers", "T5EncoderModel"],
                        "tokenizer": ["transformers", "T5Tokenizer"],
                        "transformer": ["diffusers", "CogVideoXTransformer3DModel"],
                        "vae": ["diffusers", "AutoencoderKLCogVideoX"]},
                    "scheduler/scheduler_config.json": {
                        "_class_name": "CogVideoXDDIMScheduler",
                        "_diffusers_version": diffusers.__version__,
                        **{k: v for k, v in scheduler.config.items()
                           if not k.startswith("_")}}}},
        "vae": _saved(vae, half, "vae/diffusion_pytorch_model.safetensors",
                      ["cogvideox", "vae", "diffusers"]),
        "text_encoder": _saved(t5, half, "text_encoder/model.safetensors",
                               ["t5", "encoder", "transformers"]),
    }


@layout("cosmos2_5")
def cosmos2_5() -> dict:
    """nvidia/Cosmos-Predict2.5-2B's diffusers revision (``diffusers/base/post-trained``) at
    tiny widths, each component as its class's ``save_pretrained`` writes it:
    ``CosmosTransformer3DModel`` (bfloat16, projecting Reason1's 3 x 64 concatenated states),
    ``AutoencoderKLWan`` (float32, 16 latent channels: the Wan2.1 VAE's config at base width 8)
    and transformers' ``Qwen2_5_VLForConditionalGeneration`` (bfloat16; vision tower and
    ``lm_head`` included, as the release holds them). ``release_files``: ``model_index.json``
    and the UniPC ``scheduler/scheduler_config.json`` diffusers' converter writes."""
    import diffusers
    import torch
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel, UniPCMultistepScheduler
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(0)
    width = COSMOS_TEXT["hidden_size"] * COSMOS_TEXT["num_hidden_layers"]
    dit = CosmosTransformer3DModel(
        in_channels=17, out_channels=16, num_attention_heads=4, attention_head_dim=16,
        num_layers=2, mlp_ratio=4.0, text_embed_dim=32, adaln_lora_dim=16,
        max_size=(128, 240, 240), patch_size=(1, 2, 2), rope_scale=(1.0, 3.0, 3.0),
        concat_padding_mask=True, extra_pos_embed_type=None, use_crossattn_projection=True,
        crossattn_proj_in_channels=width, encoder_hidden_states_channels=32)
    vae = AutoencoderKLWan(base_dim=8, z_dim=16)
    text = Qwen2_5_VLForConditionalGeneration(
        Qwen2_5_VLConfig(text_config=COSMOS_TEXT, vision_config=COSMOS_VISION))
    scheduler = UniPCMultistepScheduler(use_karras_sigmas=True, use_flow_sigmas=True,
                                        prediction_type="flow_prediction", sigma_max=200.0,
                                        sigma_min=0.01)
    version = diffusers.__version__
    layout = {
        "dit": {**_saved(dit, torch.bfloat16, "transformer/diffusion_pytorch_model.safetensors",
                         ["cosmos2_5", "dit", "diffusers"]),
                "release_files": {
                    "model_index.json": {
                        "_class_name": "Cosmos2_5_PredictBasePipeline",
                        "_diffusers_version": version,
                        "safety_checker": [None, None],
                        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
                        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
                        "tokenizer": ["transformers", "Qwen2TokenizerFast"],
                        "transformer": ["diffusers", "CosmosTransformer3DModel"],
                        "vae": ["diffusers", "AutoencoderKLWan"]},
                    "scheduler/scheduler_config.json": {
                        "_class_name": "UniPCMultistepScheduler", "_diffusers_version": version,
                        **{k: v for k, v in scheduler.config.items()
                           if not k.startswith("_")}}}},
        "vae": _saved(vae, torch.float32, "vae/diffusion_pytorch_model.safetensors",
                      ["wan2_1", "vae", "diffusers"]),
        "text_encoder": _saved(text, torch.bfloat16, "text_encoder/model.safetensors",
                               ["reason1", "text_encoder", "transformers"]),
    }
    _set_token_ids("cosmos2_5", layout)
    return layout


@layout("cosmos3")
def cosmos3() -> dict:
    """nvidia/Cosmos3-Nano's diffusers folder at tiny widths, as ``Cosmos3OmniPipeline
    .save_pretrained`` writes it: ``Cosmos3OmniTransformer`` at the Nano-shaped tiny config
    (bfloat16, the release's dtype; its action and sound heads included, as the release holds
    them; the demo shards it with an index), the Wan2.2-style ``AutoencoderKLWan`` of the
    pipeline tests (float32, 8 latent channels) and ``release_files``: ``model_index.json`` and
    the UniPC ``scheduler/scheduler_config.json`` (Karras flow sigmas 200 -> 0.147)."""
    import diffusers
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler

    from tests.models.cosmos3.test_cosmos3_dit import _reference
    from vidax.models.cosmos3.config import Cosmos3DiTConfig

    latent = 8
    cfg = dataclasses.replace(Cosmos3DiTConfig.tiny("nano"), vocab_size=1024,
                              latent_channel=latent)
    torch.manual_seed(0)
    dit = _reference(cfg, "nano")    # the DiT tests' reference: action and sound heads too
    vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=12, z_dim=latent, is_residual=True,
                           in_channels=12, out_channels=12, patch_size=2, scale_factor_spatial=16,
                           latents_mean=[0.1 * (i - 3.5) for i in range(latent)],
                           latents_std=[0.6 + 0.2 * i for i in range(latent)])
    scheduler = UniPCMultistepScheduler(use_karras_sigmas=True, use_flow_sigmas=True,
                                        prediction_type="flow_prediction", sigma_max=200.0,
                                        sigma_min=0.147)
    version = diffusers.__version__
    return {
        "dit": {**_saved(dit, torch.bfloat16, "transformer/diffusion_pytorch_model.safetensors",
                         ["cosmos3", "dit", "diffusers"]),
                "release_files": {
                    "model_index.json": {
                        "_class_name": "Cosmos3OmniPipeline", "_diffusers_version": version,
                        "enable_safety_checker": False,
                        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
                        "text_tokenizer": ["transformers", "Qwen2TokenizerFast"],
                        "transformer": ["diffusers", "Cosmos3OmniTransformer"],
                        "vae": ["diffusers", "AutoencoderKLWan"]},
                    "scheduler/scheduler_config.json": {
                        "_class_name": "UniPCMultistepScheduler", "_diffusers_version": version,
                        **{k: v for k, v in scheduler.config.items()
                           if not k.startswith("_")}}}},
        "vae": _saved(vae, torch.float32, "vae/diffusion_pytorch_model.safetensors",
                      ["wan2_2", "vae", "diffusers"]),
    }


@layout("hunyuan_video")
def hunyuan_video() -> dict:
    """tencent/HunyuanVideo's ``ckpts/`` at tiny widths: the DiT as the authors'
    ``HYVideoDiffusionTransformer`` names it (vidax's tests' record of it,
    ``authors_state``: the authors' package is not installable; its key set is checked here
    against the release manifest's, block indices aside), bfloat16, saved as
    ``{"module": state_dict}``, plus the ``transformers/config.json`` vidax reads for a
    non-release size; the VAE as diffusers' ``AutoencoderKLHunyuanVideo`` (the release's names)
    in float32 with the authors' ``config.json`` keys (the release manifest's) at tiny widths;
    the Llama text encoder as transformers' ``LlamaForCausalLM.save_pretrained`` (``model.*``
    and ``lm_head.weight``, float16: what the authors' preprocessing script writes), and
    openai/clip-vit-large-patch14's ``CLIPModel`` (both towers, float32)."""
    import re

    import torch
    from diffusers import AutoencoderKLHunyuanVideo
    from transformers import CLIPConfig, CLIPModel, LlamaConfig, LlamaForCausalLM

    from tests.models.hunyuan_video.test_hunyuan_video_dit import authors_state
    from vidax.manifests import get_manifest
    from vidax.models.hunyuan_video.config import HunyuanVideoDiTConfig

    dit_cfg = dataclasses.replace(HunyuanVideoDiTConfig.tiny(),
                                  text_states_dim=HUNYUAN_LLAMA["hidden_size"],
                                  text_states_dim_2=HUNYUAN_CLIP_TEXT["hidden_size"])
    dit_tensors = {k: list(v.shape) for k, v in authors_state(dit_cfg).items()}

    def pattern(key):
        return re.sub(r"\.\d+\.", ".N.", key)

    release = get_manifest("hunyuan_video/t2v-720p__dit").tensors
    assert {pattern(k) for k in dit_tensors} == {pattern(k) for k in release}
    torch.manual_seed(0)
    vae_widths, vae_groups = [8, 16, 32, 32], 4
    vae = AutoencoderKLHunyuanVideo(block_out_channels=tuple(vae_widths),
                                    latent_channels=dit_cfg.in_channels,
                                    norm_num_groups=vae_groups)
    vae_config = dict(get_manifest("hunyuan_video/t2v-720p__vae").config,
                      block_out_channels=vae_widths, norm_num_groups=vae_groups,
                      latent_channels=dit_cfg.in_channels)
    llama = LlamaForCausalLM(LlamaConfig(**HUNYUAN_LLAMA))
    clip = CLIPModel(CLIPConfig(text_config=HUNYUAN_CLIP_TEXT,
                                vision_config=HUNYUAN_CLIP_VISION, projection_dim=24))
    layout = {
        "dit": {"file": "hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt",
                "dtype": "bfloat16", "wrapper": "module",
                "spec": ["hunyuan_video", "dit", "original"],
                "config": dataclasses.asdict(dit_cfg), "tensors": dit_tensors},
        "vae": {"file": "hunyuan-video-t2v-720p/vae/pytorch_model.pt", "dtype": "float32",
                "config": vae_config, "spec": ["hunyuan_video", "vae", "original"],
                "tensors": _state_layout(vae)},
        "text_encoder": _saved(llama, torch.float16, "text_encoder/model.safetensors",
                               ["llama", "text_encoder", "transformers"]),
        "text_encoder_2": _saved(clip, torch.float32, "text_encoder_2/model.safetensors",
                                 ["clip", "text_encoder", "transformers"]),
    }
    _set_token_ids("hunyuan_video", layout)
    return layout


# ---------------------------------------------------------------------------------------------
# HunyuanVideo-1.5
# ---------------------------------------------------------------------------------------------
HY15_QWEN = dict(vocab_size=1024, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                 rope_theta=1e6, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
                 bos_token_id=0, eos_token_id=0)  # replaced by _set_token_ids
HY15_BYT5 = dict(d_model=32, d_kv=16, d_ff=48, num_layers=2, num_heads=2,
                 feed_forward_proj="gated-gelu", is_encoder_decoder=False, vocab_size=384)
HY15_SIGLIP = dict(hidden_size=24, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=2, image_size=28, patch_size=7)


@layout("hunyuan_video1_5")
def hunyuan_video1_5() -> dict:
    """tencent/HunyuanVideo-1.5's ``ckpts/`` at tiny widths: the DiT as the authors'
    ``HunyuanVideo_1_5_DiffusionTransformer`` names it (the DiT tests' ``authors_state``; its
    key set is checked here against the release manifest's, block indices aside), float32 as
    released, with its ``config.json`` in the authors' keys (the demo writes it for the
    480p_t2v_distilled and 480p_i2v_distilled folders); the VAE in the authors' names (diffusers'
    ``AutoencoderKLHunyuanVideo15`` through the VAE tests' conversion table) with the authors'
    ``config.json`` keys; Qwen2.5-VL as transformers' ``Qwen2_5_VLForConditionalGeneration``
    saves it (bfloat16), byT5 as the bare ``T5Stack`` state dict Glyph-SDXL-v2's
    ``byt5_model.pt`` is (float32, the vocabulary widened by the demo's 4 color and 2 font
    tokens; ``config`` is byt5-small's ``config.json`` at that width), SigLIP as
    ``SiglipVisionModel.save_pretrained`` writes it (bfloat16)."""
    import torch
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                              SiglipVisionConfig, SiglipVisionModel, T5Config, T5EncoderModel)

    from tests.models.hunyuan_video1_5.test_hunyuan_video1_5_dit import authors_state
    from tests.models.hunyuan_video1_5.test_hunyuan_video1_5_vae import (_authors_keys,
                                                                        _diffusers_vae)
    from vidax.demo.hunyuan_video1_5 import COLORS, FONTS
    from vidax.manifests import get_manifest
    from vidax.models.hunyuan_video1_5.config import (HunyuanVideo15DiTConfig,
                                                      HunyuanVideo15VAEConfig)

    vae_cfg = HunyuanVideo15VAEConfig.tiny()
    dit_cfg = dataclasses.replace(
        HunyuanVideo15DiTConfig.tiny(), in_channels=vae_cfg.latent_channels,
        out_channels=vae_cfg.latent_channels, text_states_dim=HY15_QWEN["hidden_size"],
        byt5_states_dim=HY15_BYT5["d_model"], vision_states_dim=HY15_SIGLIP["hidden_size"],
        ideal_resolution="480p", ideal_task="t2v")
    dit_tensors = {k: list(v.shape) for k, v in authors_state(dit_cfg).items()}
    release = get_manifest("hunyuan_video1_5/480p_t2v__dit")
    assert ({re.sub(r"\.\d+\.", ".N.", k) for k in dit_tensors}
            == {re.sub(r"\.\d+\.", ".N.", k) for k in release.tensors})
    dit_config = {**{k: v for k, v in release.config.items()
                     if k not in {f.name for f in dataclasses.fields(dit_cfg)}},
                  **{f.name: getattr(dit_cfg, f.name) for f in dataclasses.fields(dit_cfg)}}
    dit_config = {k: list(v) if isinstance(v, tuple) else v for k, v in dit_config.items()}
    torch.manual_seed(0)
    vae = _diffusers_vae(vae_cfg)
    shapes = {k: list(v.shape) for k, v in vae.state_dict().items()}
    vae_tensors = {old: shapes[new] for old, new in _authors_keys(vae_cfg, shapes).items()}
    vae_config = dict(get_manifest("hunyuan_video1_5/base__vae").config,
                      block_out_channels=list(vae_cfg.block_out_channels),
                      latent_channels=vae_cfg.latent_channels)
    qwen = Qwen2_5_VLForConditionalGeneration(
        Qwen2_5_VLConfig(text_config=HY15_QWEN, vision_config=COSMOS_VISION, **HY15_QWEN))
    widened = dict(HY15_BYT5, vocab_size=HY15_BYT5["vocab_size"] + len(COLORS) + len(FONTS))
    byt5 = T5EncoderModel(T5Config(**widened)).encoder
    siglip = SiglipVisionModel(SiglipVisionConfig(**HY15_SIGLIP))
    layout = {
        "dit": {"file": "transformer/480p_t2v_distilled/diffusion_pytorch_model.safetensors",
                "dtype": "float32", "spec": ["hunyuan_video1_5", "dit", "original"],
                "config": dit_config, "tensors": dit_tensors},
        "vae": {"file": "vae/diffusion_pytorch_model.safetensors", "dtype": "float32",
                "spec": ["hunyuan_video1_5", "vae", "original"], "config": vae_config,
                "tensors": vae_tensors},
        "text_encoder": _saved(qwen, torch.bfloat16, "text_encoder/llm/model.safetensors",
                               ["reason1", "text_encoder", "transformers"]),
        "byt5": {"file": "text_encoder/Glyph-SDXL-v2/checkpoints/byt5_model.pt",
                 "dtype": "float32", "spec": ["t5", "encoder", "t5stack"],
                 "config": T5Config(**widened).to_dict(), "tensors": _state_layout(byt5)},
        "image_encoder": _saved(siglip, torch.bfloat16,
                                "vision_encoder/siglip/image_encoder/model.safetensors",
                                ["siglip", "vision_encoder", "transformers"]),
    }
    _set_token_ids("hunyuan_video1_5", layout)
    return layout


# ---------------------------------------------------------------------------------------------
# LTX-2.x
# ---------------------------------------------------------------------------------------------
#: The tiny LTX-2.3 release of ``vidax demo ltx2_5``: ltx-core 1.0.0's classes at these
#: configs, as the 2.3 single file's metadata sections carry them. The DiT streams are 128
#: wide as in the releases (ltx-pipelines fixes the audio latent at 8 x 16 and vidax samples
#: both streams as one token array); the video VAE compresses 8 x 32 x 32 at 128 channels;
#: the audio VAE's ``ch`` is its statistics' width (8 x 16 = 128), every level 128 wide; the
#: vocoders keep the releases' samples per mel frame (160 at 16 kHz, x3 by the BWE: 48 kHz).
LTX2_FILE = "ltx-2.3-22b-distilled.safetensors"
LTX2_UPSAMPLER_FILE = "ltx-2.3-spatial-upscaler-x2-1.0.safetensors"
LTX2_GEMMA_DIR = "gemma-3-12b-it-qat-q4_0-unquantized"
LTX2_GEMMA_TEXT = dict(vocab_size=256, hidden_size=32, intermediate_size=48,
                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                       head_dim=16, query_pre_attn_scalar=16, sliding_window=16,
                       sliding_window_pattern=2, rope_theta=1e6, rope_local_base_freq=1e4,
                       rope_scaling={"rope_type": "linear", "factor": 8.0})
LTX2_GEMMA_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, image_size=28, patch_size=14)
def _ltx2_dit() -> dict:
    """The DiT section: the DiT tests' tiny 2.3 structure (tests/models/ltx2_5/
    test_ltx2_dit.py) with 128-wide streams and the V2 text-projection keys of a 2.3 file."""
    from tests.models.ltx2_5.test_ltx2_dit import CONFIG_2_3

    return {**CONFIG_2_3, "in_channels": 128, "out_channels": 128, "audio_in_channels": 128,
            "audio_out_channels": 128, "caption_channels": 3840,
            "caption_projection_first_linear": False, "caption_proj_input_norm": False,
            "caption_projection_second_linear": False}


LTX2_VAE = {
    "_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3,
    "latent_channels": 128, "decoder_base_channels": 4, "patch_size": 4,
    "encoder_blocks": [["res_x", {"num_layers": 1}], ["compress_space_res", {"multiplier": 1}],
                       ["compress_time_res", {"multiplier": 1}],
                       ["compress_all_res", {"multiplier": 1}],
                       ["compress_all_res", {"multiplier": 1}], ["res_x", {"num_layers": 1}]],
    "decoder_blocks": [["res_x", {"num_layers": 1}], ["compress_all", {"multiplier": 1}],
                       ["compress_all", {"multiplier": 1}], ["compress_time", {"multiplier": 1}],
                       ["compress_space", {"multiplier": 1}], ["res_x", {"num_layers": 1}]],
    "scaling_factor": 1.0, "norm_layer": "pixel_norm", "latent_log_var": "uniform",
    "use_quant_conv": False, "causal_decoder": False, "timestep_conditioning": False,
    "normalize_latent_channels": False, "spatial_padding_mode": "zeros"}
LTX2_AUDIO_VAE = {"model": {"params": {"ddconfig": {
    "double_z": True, "mel_bins": 64, "z_channels": 8, "resolution": 256, "in_channels": 2,
    "out_ch": 2, "ch": 128, "ch_mult": [1, 1, 1], "num_res_blocks": 1, "attn_resolutions": [],
    "dropout": 0.0, "mid_block_add_attention": False, "norm_type": "pixel",
    "causality_axis": "height"}, "sampling_rate": 16000}}}
_LTX2_AMP = {"resblock": "AMP1", "stereo": True, "activation": "snakebeta",
             "use_tanh_at_final": False, "use_bias_at_final": False,
             "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1, 3, 5]]}
LTX2_VOCODER = {
    "vocoder": {**_LTX2_AMP, "upsample_initial_channel": 32, "upsample_rates": [5, 4, 8],
                "upsample_kernel_sizes": [11, 8, 16]},
    "bwe": {**_LTX2_AMP, "upsample_initial_channel": 16, "upsample_rates": [6, 5, 8],
            "upsample_kernel_sizes": [12, 11, 16], "apply_final_activation": False,
            "input_sampling_rate": 16000, "output_sampling_rate": 48000, "hop_length": 80,
            "n_fft": 512, "win_size": 512, "num_mels": 64}}
LTX2_UPSAMPLER = {"in_channels": 128, "mid_channels": 32, "num_blocks_per_stage": 1, "dims": 3,
                  "spatial_upsample": True, "temporal_upsample": False, "spatial_scale": 2.0,
                  "rational_resampler": False}


def _prefixed(prefix: str, module, drop: str | None = None) -> dict[str, list[int]]:
    return {prefix + k: list(v.shape) for k, v in module.state_dict().items()
            if drop is None or not k.startswith(drop)}


@layout("ltx2_5")
def ltx2_5() -> dict:
    """Lightricks/LTX-2.3's distilled release at tiny widths: ONE single file holding ltx-core's
    ``LTXModel`` and both ``Embeddings1DConnector``s under ``model.diffusion_model.``, the
    ``FeatureExtractorV2`` under ``text_embedding_projection.``, the video ``VideoEncoder`` /
    ``VideoDecoder`` under ``vae.``, the ``AudioEncoder`` / ``AudioDecoder`` under ``audio_vae.``
    (statistics shared), ``VocoderWithBWE`` under ``vocoder.`` (every section's config in the
    metadata); the ``LatentUpsampler`` file; and the Gemma 3 folder as transformers'
    ``Gemma3ForConditionalGeneration.save_pretrained`` writes it (bfloat16)."""
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    from tests.reference.ltx2 import import_ltx_audio

    import_ltx_audio()
    from ltx_core.model import video_vae as vv
    from ltx_core.model.audio_vae import (AudioDecoderConfigurator, AudioEncoderConfigurator,
                                          VocoderConfigurator)
    from ltx_core.model.transformer.model_configurator import LTXModelConfigurator
    from ltx_core.model.upsampler.model_configurator import LatentUpsamplerConfigurator
    from ltx_core.text_encoders.gemma.embeddings_connector import (
        AudioEmbeddings1DConnectorConfigurator, Embeddings1DConnectorConfigurator)
    from ltx_core.text_encoders.gemma.feature_extractor import FeatureExtractorV2

    dit_config = _ltx2_dit()
    full = {"transformer": dit_config}
    with torch.device("meta"):
        dit = LTXModelConfigurator.from_config(full)
        video_connector = Embeddings1DConnectorConfigurator.from_config(full)
        audio_connector = AudioEmbeddings1DConnectorConfigurator.from_config(full)
        vae = {"vae": LTX2_VAE}
        encoder = vv.VideoEncoderConfigurator.from_config(vae)
        decoder = vv.VideoDecoderConfigurator.from_config(vae)
        audio = {"audio_vae": LTX2_AUDIO_VAE}
        audio_encoder = AudioEncoderConfigurator.from_config(audio)
        audio_decoder = AudioDecoderConfigurator.from_config(audio)
        vocoder = VocoderConfigurator.from_config({"vocoder": LTX2_VOCODER})
        upsampler = LatentUpsamplerConfigurator.from_config(LTX2_UPSAMPLER)
        flat = LTX2_GEMMA_TEXT["hidden_size"] * (LTX2_GEMMA_TEXT["num_hidden_layers"] + 1)
        inner = dit_config["num_attention_heads"] * dit_config["attention_head_dim"]
        audio_inner = (dit_config["audio_num_attention_heads"]
                       * dit_config["audio_attention_head_dim"])
        projection = FeatureExtractorV2(torch.nn.Linear(flat, inner),
                                        LTX2_GEMMA_TEXT["hidden_size"],
                                        torch.nn.Linear(flat, audio_inner))
    single = {**_prefixed("model.diffusion_model.", dit),
              **_prefixed("model.diffusion_model.video_embeddings_connector.", video_connector),
              **_prefixed("model.diffusion_model.audio_embeddings_connector.", audio_connector)}
    stats = "per_channel_statistics."
    video_vae = {**_prefixed("vae.encoder.", encoder, stats),
                 **_prefixed("vae.decoder.", decoder, stats),
                 **_prefixed("vae.per_channel_statistics.", encoder.per_channel_statistics)}
    audio_vae = {**_prefixed("audio_vae.encoder.", audio_encoder, stats),
                 **_prefixed("audio_vae.decoder.", audio_decoder, stats),
                 **_prefixed("audio_vae.per_channel_statistics.",
                             audio_encoder.per_channel_statistics)}
    gemma = Gemma3ForConditionalGeneration(Gemma3Config(
        text_config=LTX2_GEMMA_TEXT, vision_config=LTX2_GEMMA_VISION, mm_tokens_per_image=4,
        image_token_index=250, boi_token_index=251, eoi_token_index=252))

    def entry(component, tensors, config=None, prefix=None, file=LTX2_FILE):
        return {"file": file, "spec": ["ltx2_5", component, "original"], "prefix": prefix,
                "config": config, "tensors": tensors}

    layout = {
        "dit": entry("dit", single, dit_config, "model.diffusion_model."),
        "vae": entry("vae", video_vae, LTX2_VAE, "vae."),
        "audio_vae": entry("audio_vae", audio_vae, LTX2_AUDIO_VAE, "audio_vae."),
        "vocoder": entry("vocoder", _prefixed("vocoder.", vocoder), LTX2_VOCODER, "vocoder."),
        "text_projection": entry("text_projection",
                                 _prefixed("text_embedding_projection.", projection),
                                 None, "text_embedding_projection."),
        "upsampler": entry("upsampler", _prefixed("", upsampler), LTX2_UPSAMPLER,
                           file=LTX2_UPSAMPLER_FILE),
        "text_encoder": _saved(gemma, torch.bfloat16, f"{LTX2_GEMMA_DIR}/model.safetensors",
                               ["gemma", "text_encoder", "transformers"]),
    }
    layout["text_projection"]["config"] = {
        "version": 2, "embedding_dim": LTX2_GEMMA_TEXT["hidden_size"],
        "num_layers": LTX2_GEMMA_TEXT["num_hidden_layers"] + 1, "video_dim": inner,
        "audio_dim": audio_inner}
    return layout


#: LTX-2.5's split release at the same widths: the transformer alone (2.3's tiny model with
#: 2.5's differences, as between the released manifests: no video FFN biases, the keyframe
#: embedding; its scale/shift tables float32), the conv video VAE file (bare keys), the audio
#: file (audio VAE + vocoder, both prefixes), and the text-encoder file: a tiny Gemma 4
#: (``Gemma4UnifiedForConditionalGeneration``, flattened to ComfyUI names as the authors'
#: packer does) with the projection, the tokenizer and HF files as uint8 tensors.
LTX2_5_GEMMA = dict(vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                    global_head_dim=32, num_global_key_value_heads=1, sliding_window=16,
                    attention_k_eq_v=True, layer_types=["sliding_attention", "full_attention"],
                    final_logit_softcapping=30.0)
LTX2_5_GEMMA_TOP = dict(image_token_id=250, video_token_id=252, audio_token_id=251,
                        boi_token_id=253, eoi_token_id=254, boa_token_id=255,
                        eoa_token_index=249)


#: The 2.5 diffusion VAE at the demo's widths: the conv file's encoder (128 latent channels),
#: the released decoder's strides (32 x 32 spatial, 8 temporal) at tiny stage widths.
LTX2_5_DIFFUSION_DECODER = {
    "_class_name": "NADiffusionDecoder", "in_channels": 128, "out_channels": 3,
    "patch_size": 4, "head_dim": 8, "stage_channels": [64, 32, 16, 16, 8],
    "stage_depths": [1, 1, 1, 1, 1],
    "stage_kernels": [[3, 3, 3], [3, 3, 3], [3, 3, 3], [3, 3, 3], [3, 5, 5]],
    "upsamples": [[[1, 2, 2], 2], [[2, 1, 1], 2], [[2, 2, 2], 1], [[2, 2, 2], 2]],
    "spatial_padding_mode": "zeros", "resampler_kind": "linear", "stage5_kernel": [3, 5, 5],
    "t_emb_dim": 48, "timestep_scale_multiplier": 1000.0, "default_num_inference_steps": 1}


def _ltx2_5_diffusion_vae() -> dict:
    """``vae/ltx-2.5-video-vae-bf16``: diffusers' ``LTX2VideoDiffusionDecoderModel`` at
    ``LTX2_5_DIFFUSION_DECODER`` renamed to the authors' keys (tests/models/ltx2_5/
    test_ltx2_diffusion_decoder.py: fused ``qkv``, ``attn.proj``, ``t_embedder.mlp``) beside
    the conv encoder."""
    from diffusers.models.autoencoders.ltx2_diffusion_decoder import (
        LTX2VideoDiffusionDecoderModel)

    from tests.models.ltx2_5.test_ltx2_diffusion_decoder import authors_decoder_state

    d = LTX2_5_DIFFUSION_DECODER
    decoder = LTX2VideoDiffusionDecoderModel(
        out_channels=3, latent_channels=128, patch_size=4, decoder_head_dim=d["head_dim"],
        decoder_stage_channels=tuple(d["stage_channels"]),
        decoder_stage_depths=tuple(d["stage_depths"]),
        decoder_stage_kernels=tuple(tuple(k) for k in d["stage_kernels"][:4]),
        decoder_upsample_strides=tuple(tuple(st) for st, _ in d["upsamples"]),
        decoder_upsample_channel_reductions=tuple(r for _, r in d["upsamples"]),
        decoder_stage5_kernel=tuple(d["stage5_kernel"]), decoder_t_emb_dim=d["t_emb_dim"],
        decoder_timestep_scale_multiplier=1000.0, decoder_model_output_type="x0",
        decoder_num_inference_steps=1, temporal_compression_ratio=8)
    return {k: list(v.shape) for k, v in authors_decoder_state(decoder.state_dict()).items()}


@layout("ltx2_5-2.5")
def ltx2_5_split() -> dict:
    """Lightricks/LTX-2.5's distilled release at tiny widths (see the comment above)."""
    import torch
    from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration

    from ltx_core.text_encoders.gemma.feature_extractor import FeatureExtractorV2
    from tests.models.gemma.test_gemma4 import _flatten_for_comfy   # the authors' packer's names
    from vidax.demo.ltx2_5_split import gemma4_assets

    base = ltx2_5()
    dit = {k: v for k, v in base["dit"]["tensors"].items()
           if not re.search(r"transformer_blocks\.\d+\.ff\.net\.\d+\.(proj\.)?bias$", k)}
    dit_config = {**base["dit"]["config"], "ff_bias": False,
                  "use_keyframes_abs_pos_embedding": True}
    width = dit_config["num_attention_heads"] * dit_config["attention_head_dim"]
    dit["model.diffusion_model.keyframes_abs_pos_embedding"] = [1, width]
    hf = Gemma4UnifiedConfig(
        text_config=LTX2_5_GEMMA, **LTX2_5_GEMMA_TOP,
        vision_config=dict(patch_size=2, pooling_kernel_size=1, mm_embed_dim=32,
                           mm_posemb_size=8, output_proj_dims=32),
        audio_config=dict(audio_embed_dim=8))
    gemma = _saved(Gemma4UnifiedForConditionalGeneration(hf), torch.bfloat16, "x",
                   ["ltx2_5", "text_encoder", "transformers"])
    flat = LTX2_5_GEMMA["hidden_size"] * (LTX2_5_GEMMA["num_hidden_layers"] + 1)
    audio_inner = (dit_config["audio_num_attention_heads"]
                   * dit_config["audio_attention_head_dim"])
    with torch.device("meta"):
        projection = FeatureExtractorV2(torch.nn.Linear(flat, width),
                                        LTX2_5_GEMMA["hidden_size"],
                                        torch.nn.Linear(flat, audio_inner))
    te_file = "text_encoders/gemma4-12b-with-proj-ltx-2.5-bf16.safetensors"
    config = dict(gemma["config"], gemma_version="gemma4-12b-ltx-v1")
    te = {_flatten_for_comfy(k): v for k, v in gemma["tensors"].items()}
    te.update({name: [len(data)] for name, data in gemma4_assets().items()})
    audio_file = "vae/ltx-2.5-audio-vae-bf16.safetensors"
    vae = {k[len("vae."):]: v for k, v in base["vae"]["tensors"].items()}
    return {
        "dit": {**base["dit"], "file": "ltx-2.5-22b-distilled-transformer-bf16.safetensors",
                "config": dit_config, "tensors": dit},
        "video_vae_conv": {**base["vae"], "file": "vae/ltx-2.5-video-vae-conv-bf16.safetensors",
                "spec": ["ltx2_5", "video_vae_conv", "original"], "prefix": None,
                "tensors": vae},
        "video_vae": {"file": "vae/ltx-2.5-video-vae-bf16.safetensors",
                      "spec": ["ltx2_5", "video_vae", "original"], "prefix": None,
                      "config": {"_class_name": "CausalDiffusionVAE", "dims": 3,
                                 "model_output_type": "x0", "spatial_padding_mode": "zeros",
                                 "encoder": {"_class_name": "Encoder", "dims": 3,
                                             "in_channels": 3, "out_channels": 128,
                                             "blocks": LTX2_VAE["encoder_blocks"],
                                             "patch_size": 4, "latent_log_var": "uniform",
                                             "norm_layer": "pixel_norm",
                                             "spatial_padding_mode": "zeros"},
                                 "decoder": LTX2_5_DIFFUSION_DECODER},
                      "tensors": {**{k: v for k, v in vae.items() if k.startswith("encoder.")},
                                  **_ltx2_5_diffusion_vae()}},
        "audio_vae": {**base["audio_vae"], "file": audio_file},
        "vocoder": {**base["vocoder"], "file": audio_file},
        "text_projection": {**base["text_projection"], "file": te_file,
                            "config": dict(base["text_projection"]["config"],
                                           embedding_dim=LTX2_5_GEMMA["hidden_size"],
                                           num_layers=LTX2_5_GEMMA["num_hidden_layers"] + 1),
                            "tensors": _prefixed("text_embedding_projection.", projection)},
        "text_encoder": {**gemma, "file": te_file, "config": config, "tensors": te},
        "upsampler": {**base["upsampler"],
                      "file": "ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0.safetensors"},
    }


if __name__ == "__main__":
    sys.exit(main())
