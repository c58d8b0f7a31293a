"""Derive the manifests of ComfyUI's repackaged files (Comfy-Org's Hugging Face repositories)
whose key set no existing manifest has: the transformers-named encoders and the scaled-fp8
files. No weights are read or downloaded; every manifest says how it was derived and how sure.

Two ways, by what ComfyUI's own module class is (docs/checkpoints_comfyui.md has the table):

* ComfyUI's class keeps another manifest's names (the Wan DiT: ``comfy/ldm/wan/model.py`` is the
  authors' ``WanModel`` tree; Llama: ``comfy/text_encoders/llama.py`` ``Llama2`` is transformers'
  ``LlamaModel`` under ``model.``; CLIP-L: ``comfy/clip_model.py`` ``CLIPTextModel``): the
  manifest is that one, with the keys ComfyUI's class does not have removed and the file's
  dtypes applied.
* ComfyUI's class is written to transformers' names (UMT5: ``comfy/text_encoders/t5.py`` ``T5``;
  CLIP-vision-H: ``comfy/clip_model.py`` ``CLIPVisionModelProjection``): transformers' class
  at the released config on the meta device, its ``state_dict()`` names and shapes, less what
  ComfyUI's class lacks (the tied ``encoder.embed_tokens``), plus what ComfyUI adds (the
  tokenizer tensor ``spiece_model``).

A third way, for the files in ComfyUI's *own* module names (the HunyuanVideo DiTs and 1.0 VAE,
the glyph byT5, LTX-2's Gemma 3): the authors' manifest put through ComfyUI's own renaming as
its source writes it (``process_unet_state_dict``, ``convert_vae_state_dict``, the module
attributes of ``T5`` / ``Gemma3_12B``), shapes unchanged but where ComfyUI reshapes (the VAE
attention's 1x1x1 kernels) or fuses (HunyuanVideo-1.5's q/k/v). The Gemma 3 source manifest is
the repository's tests/models/gemma/ one (no packaged Gemma 3 manifest exists).

Scaled fp8 (ComfyUI's legacy form, ``comfy/utils.py`` ``convert_old_quants``): a root marker
``scaled_fp8`` whose dtype is the fp8 kind (shape not established: ComfyUI reads only its dtype
and whether it has 2 elements), each quantized Linear's ``weight`` in float8_e4m3fn with a
float32 scalar ``<layer>.scale_weight`` (and ``<layer>.scale_input`` where the file has one).
Which Linears a file quantizes is the producer's choice, not ComfyUI's (``comfy/ops.py``
quantizes whatever carries a scale); the sets used here are each documented beside them. Where
a tensor's stored dtype in such a file is not established, the manifest says null.

    python scripts/derive_comfyui_manifests.py            # write the packaged .gz
    python scripts/derive_comfyui_manifests.py --check    # exit 1 if a written file differs

Needs torch and transformers (5.x; the venv has them) for the two meta-device derivations.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "manifests"   # the authors' manifests it derives from
PACKAGED = ROOT / "vidax" / "data" / "manifests"

COMFY = "comfyanonymous/ComfyUI"
#: The ComfyUI sources read (repository path @ the commit the stored index holds).
SRC = {
    "t5": f"{COMFY}@04e411c32ec80c5d51e0b9342f34584767c0d17f:comfy/text_encoders/t5.py",
    "wan_te": f"{COMFY}@3c67f6155a19bfcae4cad4f62375d16157473ceb:comfy/text_encoders/wan.py",
    "umt5_json": f"{COMFY}@bcd1b1c11e8b0bab917f24e460a55add0b56bf83:"
                 "comfy/text_encoders/umt5_config_xxl.json",
    "clip_model": f"{COMFY}@00728eb20fce05955f89ef1ccf5f6167416e94cf:comfy/clip_model.py",
    "clip_vision": f"{COMFY}@00728eb20fce05955f89ef1ccf5f6167416e94cf:comfy/clip_vision.py",
    "utils": f"{COMFY}:comfy/utils.py convert_old_quants",
    "llama": f"{COMFY}:comfy/text_encoders/llama.py (class Llama2: self.model = Llama2_, "
             "no lm_head)",
    "wan_dit": f"{COMFY}:comfy/ldm/wan/model.py WanModel (the authors' module names)",
}
HF = "https://huggingface.co/Comfy-Org"
SCALE_NOTE = (
    "Scaled-fp8 keys from ComfyUI's legacy form (" + SRC["utils"] + "): root marker "
    "'scaled_fp8' (its dtype is the fp8 kind; shape not established, null), "
    "'<layer>.scale_weight' float32 scalars beside float8_e4m3fn weights. ")

F8, F32 = "float8_e4m3fn", "float32"
#: The manifests' family: one folder of their own (``comfyui/<file>__<component>``), so no
#: family's list of the authors' releases changes; the registry's aliases
#: (``vidax.translator.mappings.comfyui.COMFYUI_RELEASES``) name the vidax family implementing
#: each.
FAMILY = "comfyui"


# ---------------------------------------------------------------------------- helpers
def source(name: str) -> dict:
    return json.loads((SHARED / f"{name}.json").read_text())


def spec(shape, dtype) -> dict:
    return {"dtype": dtype, "shape": None if shape is None else list(shape)}


def with_dtype(tensors: dict, dtype) -> dict:
    return {k: spec(v["shape"], dtype) for k, v in tensors.items()}


def scaled_fp8(tensors: dict, quantized, *, input_scale: bool) -> dict:
    """ComfyUI's legacy scaled-fp8 form of ``tensors``: each key matching ``quantized`` (a
    regex over ``<layer>.weight``) in float8_e4m3fn with its scalar scale(s); the rest keep
    the dtype given (null where not established); plus the root marker."""
    out = {}
    for k, v in tensors.items():
        if re.fullmatch(quantized, k):
            layer = k[: -len(".weight")]
            out[k] = spec(v["shape"], F8)
            out[f"{layer}.scale_weight"] = spec((), F32)
            if input_scale:
                out[f"{layer}.scale_input"] = spec((), F32)
        else:
            out[k] = spec(v["shape"], v["dtype"])
    out["scaled_fp8"] = spec(None, F8)
    return out


def manifest(*, family, variant, component, layout, config, tensors, released_as,
             derived_from, confidence) -> dict:
    params = sum(math.prod(t["shape"]) for k, t in tensors.items()
                 if t["shape"] is not None and not k.endswith((".scale_weight", ".scale_input"))
                 and k not in ("scaled_fp8", "spiece_model"))
    return {"family": family, "variant": variant, "component": component, "layout": layout,
            "container": "safetensors", "wrapper": None, "config": config,
            "tensors": dict(sorted(tensors.items())), "num_params": params,
            "num_tensors": len(tensors), "released_as": released_as,
            "derived_from": derived_from, "confidence": confidence}


def meta_state(model_cls, config) -> dict:
    import torch

    with torch.device("meta"):
        model = model_cls(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


# ---------------------------------------------------------------------------- Wan
def umt5(dtype_name: str) -> dict:
    import transformers
    from transformers import UMT5Config, UMT5EncoderModel

    comfy_cfg = {"d_ff": 10240, "d_kv": 64, "d_model": 4096, "dense_act_fn": "gelu_pytorch_tanh",
                 "is_gated_act": True, "layer_norm_epsilon": 1e-06, "model_type": "umt5",
                 "num_heads": 64, "num_layers": 24, "relative_attention_num_buckets": 32,
                 "vocab_size": 256384}  # = SRC["umt5_json"] (the fields ComfyUI's T5 reads)
    cfg = UMT5Config(d_model=4096, d_kv=64, d_ff=10240, num_heads=64, num_layers=24,
                     vocab_size=256384, relative_attention_num_buckets=32,
                     feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6)
    shapes = meta_state(UMT5EncoderModel, cfg)
    shapes.pop("encoder.embed_tokens.weight")   # tied alias; ComfyUI's T5 has only `shared`
    authors = source("wan2_1/t2v-14b__text_encoder")["tensors"]
    assert len(shapes) == len(authors), (len(shapes), len(authors))
    tensors = {k: spec(s, "float16") for k, s in shapes.items()}
    tensors["spiece_model"] = spec(None, "uint8")
    common = (f"transformers {transformers.__version__} UMT5EncoderModel at ComfyUI's "
              f"umt5_config_xxl.json ({SRC['umt5_json']}) on the meta device: state_dict() names "
              f"and shapes, less encoder.embed_tokens.weight (tied to shared; ComfyUI's class "
              f"{SRC['t5']} T5 has only 'shared', its T5Stack the same block/layer/SelfAttention/"
              f"DenseReluDense names, relative_attention_bias in every block since model_type is "
              f"umt5), plus 'spiece_model' (uint8 bytes of the SentencePiece model, length not "
              f"established): {SRC['wan_te']} UMT5XXlTokenizer takes "
              f"tokenizer_data['spiece_model'], "
              f"which comfy/sd.py fills from the text-encoder file itself. Shapes equal the "
              f"authors' models_t5_umt5-xxl-enc-bf16.pth tensor for tensor (242 + spiece_model).")
    if dtype_name == "fp16":
        return manifest(
            family=FAMILY, variant="umt5-xxl-fp16", component="text_encoder",
            layout="transformers", config=comfy_cfg, tensors=tensors,
            released_as=f"{HF}/Wan_2.1_ComfyUI_repackaged split_files/text_encoders/"
                        "umt5_xxl_fp16.safetensors (Wan2.1 and Wan2.2 ComfyUI workflows)",
            derived_from=common + " dtype float16 from the file name.",
            confidence="high for names/shapes (ComfyUI's class loads this file with these names); "
                       "medium for every tensor being float16 (file name) and for spiece_model "
                       "being in the file (ComfyUI cannot tokenize without it).")
    quantized = (r"encoder\.block\.\d+\.layer\.\d\."
                 r"(SelfAttention\.[qkvo]|DenseReluDense\.w\w+)\.weight")
    tensors = scaled_fp8({k: spec(v["shape"], None) if k != "spiece_model" else v
                          for k, v in tensors.items()}, quantized, input_scale=False)
    n = sum(k.endswith(".scale_weight") for k in tensors)
    assert n == 168, n
    return manifest(
        family=FAMILY, variant="umt5-xxl-fp8-scaled", component="text_encoder",
        layout="transformers", config=comfy_cfg, tensors=tensors,
        released_as=f"{HF}/Wan_2.1_ComfyUI_repackaged split_files/text_encoders/"
                    "umt5_xxl_fp8_e4m3fn_scaled.safetensors",
        derived_from=common + " " + SCALE_NOTE + "Quantized: every Linear of the 24 blocks "
                     "(q, k, v, o, wi_0, wi_1, wo: 168 scale_weight keys, the count "
                     "leejet/stable-diffusion.cpp#1898 reports for this file); 'shared', the "
                     "norms and the position tables not.",
        confidence="high for names/shapes of the weights; medium for the quantized set (168 "
                   "matches a third-party count of this file's scale_weight keys); the stored "
                   "dtype of the unquantized tensors is not established (null); no scale_input "
                   "keys assumed (not established).")


def clip_vision_h() -> dict:
    import transformers
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    cfg = CLIPVisionConfig(hidden_size=1280, intermediate_size=5120, num_attention_heads=16,
                           num_hidden_layers=32, patch_size=14, image_size=224,
                           projection_dim=1024, hidden_act="gelu", layer_norm_eps=1e-5)
    shapes = meta_state(CLIPVisionModelWithProjection, cfg)
    shapes.pop("vision_model.embeddings.position_ids", None)   # a buffer, not in ComfyUI's class
    authors = source("wan2_1/i2v-14b__image_encoder")["tensors"]
    assert shapes["vision_model.embeddings.position_embedding.weight"] == tuple(
        authors["visual.pos_embedding"]["shape"][1:])
    assert shapes["visual_projection.weight"] == tuple(authors["visual.head"]["shape"][::-1])
    return manifest(
        family=FAMILY, variant="clip-vision-h", component="image_encoder",
        layout="transformers",
        config={"hidden_size": 1280, "intermediate_size": 5120, "num_attention_heads": 16,
                "num_hidden_layers": 32, "patch_size": 14, "image_size": 224,
                "projection_dim": 1024, "hidden_act": "gelu", "layer_norm_eps": 1e-5},
        tensors={k: spec(s, "float16") for k, s in shapes.items()},
        released_as=f"{HF}/Wan_2.1_ComfyUI_repackaged split_files/clip_vision/"
                    "clip_vision_h.safetensors (Wan2.1 I2V/FLF2V; also Comfy-Org's other "
                    "repackaged repositories)",
        derived_from=f"transformers {transformers.__version__} CLIPVisionModelWithProjection at "
                     "the ViT-H/14 dims (those of the authors' visual tower: 1280 wide, 32 "
                     "blocks, 16 heads, 14 px patches, 224 px, projection 1024) on the meta "
                     "device: state_dict() names and shapes. ComfyUI's class "
                     f"{SRC['clip_model']} CLIPVisionModelProjection has exactly these names "
                     "(vision_model.embeddings.{class_embedding, patch_embedding, "
                     "position_embedding}, pre_layrnorm, encoder.layers.N.*, post_layernorm, "
                     f"visual_projection) and no position_ids buffer; {SRC['clip_vision']} "
                     "selects clip_vision_config_h.json by the presence of "
                     "vision_model.encoder.layers.30.layer_norm1.weight.",
        confidence="high for names/shapes; medium for float16 (the file's size, ~1.26 GB, is "
                   "two bytes per parameter; not read here); whether the file also carries a "
                   "legacy vision_model.embeddings.position_ids is not established (the mapper "
                   "ignores it either way).")


#: The Linears of a Wan DiT block (kijai/ComfyUI-WanVideoWrapper#1027 logs scale_weight for
#: exactly self_attn.{q,k,v,o}, cross_attn.{q,k,v,o}, ffn.0, ffn.2 of each block of a
#: ComfyUI fp8_scaled Wan file); k_img / v_img are the same kind of Linear in I2V blocks.
WAN_QUANTIZED = r"blocks\.\d+\.((self|cross)_attn\.([qkvo]|k_img|v_img)|ffn\.[02])\.weight"


def wan_dit(family, variant, authors, files, *, input_scale, note) -> dict:
    base = source(authors)
    tensors = scaled_fp8({k: spec(v["shape"], None) for k, v in base["tensors"].items()},
                         WAN_QUANTIZED, input_scale=input_scale)
    return manifest(
        family=family, variant=variant, component="dit", layout="original",
        config=base["config"], tensors=tensors,
        released_as=", ".join(files),
        derived_from=f"the authors' manifest {authors} (ComfyUI's {SRC['wan_dit']} keeps every "
                     "name, so ComfyUI loads the authors' file and its own repackaging alike), "
                     "scaled-fp8 form applied. " + SCALE_NOTE + "Quantized: the block Linears "
                     "(self_attn/cross_attn q, k, v, o, k_img, v_img; ffn.0, ffn.2), the set "
                     "kijai/ComfyUI-WanVideoWrapper#1027's log shows for a ComfyUI fp8_scaled "
                     "Wan file. " + note,
        confidence="high for the weight names/shapes (the authors' manifest); medium-low for "
                   "the quantized set (one third-party log; the embeddings, time projection and "
                   "head are assumed unquantized) and for scale_input; the stored dtype of the "
                   "unquantized tensors is not established (null); the file is assumed to have "
                   "no model.diffusion_model. prefix (vidax strips one where present).")


def wan() -> list[dict]:
    out = [umt5("fp16"), umt5("fp8"), clip_vision_h()]
    r21 = f"{HF}/Wan_2.1_ComfyUI_repackaged split_files/diffusion_models/"
    r22 = f"{HF}/Wan_2.2_ComfyUI_Repackaged split_files/diffusion_models/"
    no_input = ("No scale_input keys assumed (not established for the Wan2.1 files).")
    with_input = ("scale_input scalars included: tdrussell/diffusion-pipe#381 reports "
                  "scale_weight and scale_input keys in wan2.2_i2v_high_noise_14B_fp8_scaled.")
    out.append(wan_dit(FAMILY, "wan2.1-t2v-14b-fp8-scaled", "wan2_1/t2v-14b__dit",
                       [r21 + "wan2.1_t2v_14B_fp8_scaled.safetensors"],
                       input_scale=False, note=no_input))
    out.append(wan_dit(FAMILY, "wan2.1-i2v-14b-fp8-scaled", "wan2_1/i2v-14b__dit",
                       [r21 + "wan2.1_i2v_480p_14B_fp8_scaled.safetensors",
                        r21 + "wan2.1_i2v_720p_14B_fp8_scaled.safetensors"],
                       input_scale=False, note=no_input))
    out.append(wan_dit(FAMILY, "wan2.2-t2v-a14b-fp8-scaled", "wan2_2/t2v-a14b__dit",
                       [r22 + "wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors",
                        r22 + "wan2.2_t2v_low_noise_14B_fp8_scaled.safetensors"],
                       input_scale=True, note=with_input))
    out.append(wan_dit(FAMILY, "wan2.2-i2v-a14b-fp8-scaled", "wan2_2/i2v-a14b__dit",
                       [r22 + "wan2.2_i2v_high_noise_14B_fp8_scaled.safetensors",
                        r22 + "wan2.2_i2v_low_noise_14B_fp8_scaled.safetensors"],
                       input_scale=True, note=with_input))
    return out


# ---------------------------------------------------------------------------- HunyuanVideo
LLAMA_QUANTIZED = r"model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight"


def hunyuan() -> list[dict]:
    base = source("hunyuan_video/llava-llama-3-8b-v1_1__text_encoder")
    lm = {k: v for k, v in base["tensors"].items() if k.startswith("model.")}
    assert len(lm) == len(base["tensors"]) - 1      # only lm_head.weight left out
    repo = f"{HF}/HunyuanVideo_repackaged split_files/text_encoders/"
    why = (f"the authors' manifest hunyuan_video/llava-llama-3-8b-v1_1__text_encoder less "
           f"lm_head.weight: ComfyUI's {SRC['llama']} holds transformers' LlamaModel names under "
           "'model.' and has no head, so its files have none.")
    out = [manifest(
        family=FAMILY, variant="llava-llama3-fp16", component="text_encoder",
        layout="transformers", config=base["config"], tensors=with_dtype(lm, "float16"),
        released_as=repo + "llava_llama3_fp16.safetensors",
        derived_from=why + " dtype float16 from the file name.",
        confidence="high for names/shapes (ComfyUI loads the file into these names); medium "
                   "for every tensor float16 and for the absence of lm_head (ComfyUI's class "
                   "would ignore one).")]
    tensors = scaled_fp8(with_dtype(lm, None), LLAMA_QUANTIZED, input_scale=False)
    assert sum(k.endswith(".scale_weight") for k in tensors) == 224
    out.append(manifest(
        family=FAMILY, variant="llava-llama3-fp8-scaled",
        component="text_encoder", layout="transformers", config=base["config"], tensors=tensors,
        released_as=repo + "llava_llama3_fp8_scaled.safetensors",
        derived_from=why + " " + SCALE_NOTE + "Quantized: every Linear of the 32 decoder layers "
                     "(q/k/v/o_proj, gate/up/down_proj: 224), by analogy with ComfyUI's other "
                     "scaled text encoders (umt5: every block Linear; qwen_2.5_vl_7b: 358 "
                     "scale_weight keys, leejet/stable-diffusion.cpp#1898).",
        confidence="high for weight names/shapes; low for the quantized set (analogy, not "
                   "observed); unquantized dtypes not established (null)."))
    clip = source("hunyuan_video/clip-vit-large-patch14__text_encoder_2")
    text = {k: v for k, v in clip["tensors"].items()
            if k.startswith("text_model.") and not k.endswith("position_ids")}
    out.append(manifest(
        family=FAMILY, variant="clip-l", component="text_encoder",
        layout="transformers", config=clip["config"], tensors=with_dtype(text, "float16"),
        released_as=f"{HF}/HunyuanVideo_repackaged split_files/text_encoders/clip_l.safetensors "
                    "(the same clip_l.safetensors as comfyanonymous/flux_text_encoders)",
        derived_from="the authors' manifest hunyuan_video/clip-vit-large-patch14__text_encoder_2 "
                     "(openai CLIPModel), its text_model.* tensors only, less the position_ids "
                     f"buffer: ComfyUI's {SRC['clip_model']} CLIPTextModel_ has these names under "
                     "text_model. (embeddings.token_embedding / position_embedding, "
                     "encoder.layers.N.*, final_layer_norm). dtype float16.",
        confidence="high for the text_model names/shapes; medium for float16; whether the file "
                   "also stores text_projection.weight is not established (ComfyUI's "
                   "CLIPTextModel has one, initialised to the identity; a ~246 MB file is the "
                   "text tower alone in fp16; the mapper ignores a projection either way)."))
    return out


# ---------------------------------------------------------------------------- HunyuanVideo DiTs
#: ComfyUI's own renaming of the authors' HunyuanVideo DiT names into its Flux-style module
#: names, in ComfyUI's order (comfy/supported_models.py class HunyuanVideo,
#: process_unet_state_dict; HunyuanVideo15 inherits it): plain substring replacements.
HY_SRC = (f"{COMFY} comfy/supported_models.py (stored as Comfy-Org/ComfyUI@"
          "01f03bbdc7df9462d3fc4c0918f80049333450f3) class HunyuanVideo: "
          "process_unet_state_dict (the renaming) and process_unet_state_dict_for_saving "
          "(prefix 'model.model.'); comfy/ldm/hunyuan_video/model.py (@040a3243 for 1.0, "
          "yzkee/ComfyUI@8d534945 for 1.5: DoubleStreamBlock with a fused img_attn.qkv, "
          "vision_in = Wan's MLPProj, byt5_in, cond_type_embedding)")
HY_COMFY_CHAIN = (
    ("txt_in.t_embedder.mlp.0.", "txt_in.t_embedder.in_layer."),
    ("txt_in.t_embedder.mlp.2.", "txt_in.t_embedder.out_layer."),
    ("txt_in.c_embedder.linear_1.", "txt_in.c_embedder.in_layer."),
    ("txt_in.c_embedder.linear_2.", "txt_in.c_embedder.out_layer."),
    ("_mod.linear.", "_mod.lin."), ("_attn_qkv.", "_attn.qkv."),
    ("mlp.fc1.", "mlp.0."), ("mlp.fc2.", "mlp.2."),
    ("_attn_q_norm.weight", "_attn.norm.query_norm.weight"),
    ("_attn_k_norm.weight", "_attn.norm.key_norm.weight"),
    (".q_norm.weight", ".norm.query_norm.weight"), (".k_norm.weight", ".norm.key_norm.weight"),
    ("_attn_proj.", "_attn.proj."), (".modulation.linear.", ".modulation.lin."),
    ("_in.mlp.2.", "_in.out_layer."), ("_in.mlp.0.", "_in.in_layer."),
)
HY_PREFIX = "model.model."


def comfy_hunyuan_name(key: str, *, norm_leaf: str = "weight") -> str:
    for a, b in HY_COMFY_CHAIN:
        key = key.replace(a, b)
    if norm_leaf != "weight" and key.endswith("_norm.weight"):
        key = key[: -len("weight")] + norm_leaf
    return key


def fuse_qkv(tensors: dict) -> dict:
    """HunyuanVideo-1.5's split double-block q/k/v as ComfyUI's DoubleStreamBlock holds them:
    one ``{img,txt}_attn_qkv`` with rows [q | k | v] (the model.py 1.5 tree has no separate
    q/k/v Linears)."""
    out = {}
    for k, v in tensors.items():
        m = re.fullmatch(r"(double_blocks\.\d+\.(?:img|txt)_attn)_([qkv])\.(weight|bias)", k)
        if m is None:
            out[k] = v
        elif m.group(2) == "q":
            shape = [3 * v["shape"][0], *v["shape"][1:]]
            out[f"{m.group(1)}_qkv.{m.group(3)}"] = spec(shape, v["dtype"])
    return out


def hunyuan_dits() -> list[dict]:
    base = source("hunyuan_video/t2v-720p__dit")
    tensors = {HY_PREFIX + comfy_hunyuan_name(k, norm_leaf="scale"): spec(v["shape"], "bfloat16")
               for k, v in base["tensors"].items()}
    assert len(tensors) == len(base["tensors"]) == 856
    out = [manifest(
        family=FAMILY, variant="hunyuan-video-t2v-720p-bf16", component="dit", layout="comfyui",
        config=base["config"], tensors=tensors,
        released_as=f"{HF}/HunyuanVideo_repackaged split_files/diffusion_models/"
                    "hunyuan_video_t2v_720p_bf16.safetensors",
        derived_from="the authors' manifest hunyuan_video/t2v-720p__dit, every name put "
                     f"through ComfyUI's own renaming ({HY_SRC}): the names ComfyUI's "
                     "HunyuanVideo module holds, under ComfyUI's save prefix 'model.model.'; "
                     "the RMSNorm parameters as '.scale' (ComfyUI's Flux RMSNorm of late 2024, "
                     "when the file was published; today's ComfyUI holds '.weight' and maps "
                     "'.scale' onto it). Shapes unchanged (the renaming reshapes nothing). "
                     "dtype bfloat16 from the file name.",
        confidence="high that ComfyUI-saved HunyuanVideo files have these names (ComfyUI's "
                   "source); medium that the Comfy-Org file is one, with the 'model.model.' "
                   "prefix and '.scale' leaves (third-party reports: HartsyInference's "
                   "HunyuanVideo converter notes the repackaged file has every key under "
                   "model.model., in Flux-style names; kijai's ComfyUI-format loader reads "
                   "'.norm.query_norm.scale'); vidax reads '.weight' leaves and no prefix as "
                   "well (the comfyui layout accepts both).")]
    repo15 = f"{HF}/HunyuanVideo_1.5_repackaged split_files/diffusion_models/"
    for variant, files in (
            ("720p_t2v", ["hunyuanvideo1.5_720p_t2v_fp16.safetensors"]),
            ("480p_i2v_step_distilled",
             ["hunyuanvideo1.5_480p_i2v_step_distilled_fp16.safetensors"])):
        base = source(f"hunyuan_video1_5/{variant}__dit")
        tensors = {k: spec(v["shape"], "float16") for k, v in fuse_qkv(base["tensors"]).items()}
        out.append(manifest(
            family=FAMILY, variant=f"hunyuanvideo1.5-{variant.replace('_', '-')}-fp16",
            component="dit", layout="comfyui", config=base["config"], tensors=tensors,
            released_as=", ".join(repo15 + f for f in files),
            derived_from=f"the authors' manifest hunyuan_video1_5/{variant}__dit with the "
                         "double blocks' split q/k/v fused into HunyuanVideo 1.0's "
                         "'{img,txt}_attn_qkv' (rows [q | k | v]), every other name the authors', "
                         "no prefix: kohya-ss/musubi-tuner src/musubi_tuner/hunyuan_video_1_5/"
                         "hunyuan_video_1_5_models.py (@6a1b064a) loads Comfy-Org's repackaged "
                         "1.5 DiTs strictly into the authors' names after splitting only "
                         "img_attn_qkv / txt_attn_qkv (its comment: the repackaged files keep the "
                         "double blocks' q/k/v packed). That is the form ComfyUI's renaming "
                         f"({HY_SRC}) turns into its module's fused img_attn.qkv. dtype float16 "
                         "from the file name.",
            confidence="medium-high: a third-party loader that reads these files with "
                       "strict=True, consistent with ComfyUI's module (one qkv Linear) and "
                       "renaming (_attn_qkv -> _attn.qkv); not read from a file here. The "
                       "t2v / i2v and 480p / 720p files share this key set (as the authors' "
                       "do), so identify cannot tell them apart."))
    return out


# ---------------------------------------------------------------------------- HunyuanVideo VAE,
# -------------------------------------------------------------------- 1.5 byT5 and Qwen2.5-VL
VAE_SRC = (f"{COMFY}@06a5766dd7c150fe577c584b8478f642a235094f:comfy/diffusers_convert.py "
           "convert_vae_state_dict (vae_conversion_map, vae_conversion_map_attn, "
           "reshape_weight_for_sd with conv3d), which comfy/sd.py VAE applies to a file with "
           "decoder.up_blocks.0.resnets.0.norm1.weight before building the ldm AutoencoderKL "
           "(the branch keyed on decoder.conv_in.conv.weight)")


def comfy_vae_name(key: str) -> str:
    """ComfyUI's renaming of the authors' (= diffusers') HunyuanVideo VAE names (VAE_SRC)."""
    table = [("conv_shortcut", "nin_shortcut"), ("conv_norm_out", "norm_out"),
             ("mid_block.attentions.0.", "mid.attn_1.")]
    for i in range(4):
        table += [(f"encoder.down_blocks.{i}.resnets.{j}.", f"encoder.down.{i}.block.{j}.")
                  for j in range(2)]
        if i < 3:
            table += [(f"down_blocks.{i}.downsamplers.0.", f"down.{i}.downsample."),
                      (f"up_blocks.{i}.upsamplers.0.", f"up.{3 - i}.upsample.")]
        table += [(f"decoder.up_blocks.{i}.resnets.{j}.", f"decoder.up.{3 - i}.block.{j}.")
                  for j in range(3)]
    table += [(f"mid_block.resnets.{i}.", f"mid.block_{i + 1}.") for i in range(2)]
    new = key
    for a, b in table:
        new = new.replace(a, b)
    if "attentions" in key:
        for a, b in (("group_norm.", "norm."), ("to_q.", "q."), ("to_k.", "k."),
                     ("to_v.", "v."), ("to_out.0.", "proj_out.")):
            new = new.replace(a, b)
    return new


#: The Linears of ComfyUI's Qwen2.5-VL (comfy/text_encoders/llama.py Qwen25_7BVLI: the LM's 7
#: per layer; comfy/text_encoders/qwen_vl.py: each vision block's attn.qkv, attn.proj,
#: mlp.{gate,up,down}_proj and the merger's mlp.0 / mlp.2): 28 x 7 + 32 x 5 + 2 = 358, the
#: scale_weight count leejet/stable-diffusion.cpp#1898 reports for qwen_2.5_vl_7b_fp8_scaled.
QWEN_QUANTIZED = (r"(model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)"
                  r"|visual\.blocks\.\d+\.(attn\.(qkv|proj)|mlp\.(gate|up|down)_proj)"
                  r"|visual\.merger\.mlp\.[02])\.weight")


def hunyuan_encoders() -> list[dict]:
    out = []
    base = source("hunyuan_video/t2v-720p__vae")
    tensors = {}
    for k, v in base["tensors"].items():
        shape = list(v["shape"])
        new = comfy_vae_name(k)
        if re.search(r"mid\.attn_1\.(q|k|v|proj_out)\.weight$", new):
            shape += [1, 1, 1]
        tensors[new] = spec(shape, "bfloat16")
    assert len(tensors) == len(base["tensors"]) == 248
    out.append(manifest(
        family=FAMILY, variant="hunyuan-video-vae-bf16", component="vae", layout="comfyui",
        config=base["config"], tensors=tensors,
        released_as=f"{HF}/HunyuanVideo_repackaged split_files/vae/"
                    "hunyuan_video_vae_bf16.safetensors",
        derived_from="the authors' manifest hunyuan_video/t2v-720p__vae (diffusers' "
                     f"AutoencoderKLHunyuanVideo names) renamed as ComfyUI renames it ({VAE_SRC}): "
                     "ldm names, up levels in reverse, the mid attention's q/k/v/proj_out "
                     "weights as [C, C, 1, 1, 1]. dtype bfloat16 from the file name.",
        confidence="high for what ComfyUI's module holds; medium-high that the Comfy-Org file "
                   "has these names: kijai/ComfyUI-HunyuanVideoWrapper#483 (the maintainer: "
                   "the Comfy-Org VAE does not load into the authors' class) and #338 (its "
                   "unexpected keys: decoder.mid.attn_1.q, decoder.up.0.block.0.nin_shortcut."
                   "conv, encoder.norm_out, ...); the stored dtype is the file name's."))
    glyph = source("hunyuan_video1_5/glyph-sdxl-v2__byt5")
    names = {"embed_tokens.weight": "shared.weight",
             "final_layer_norm.weight": "encoder.final_layer_norm.weight"}
    tensors = {names.get(k, "encoder." + k): spec(v["shape"], "float16")
               for k, v in glyph["tensors"].items()}
    assert all(k in names or k.startswith("block.") for k in glyph["tensors"])
    out.append(manifest(
        family=FAMILY, variant="byt5-small-glyphxl-fp16", component="byt5", layout="comfyui",
        config=glyph["config"], tensors=tensors,
        released_as=f"{HF}/HunyuanVideo_1.5_repackaged split_files/text_encoders/"
                    "byt5_small_glyphxl_fp16.safetensors",
        derived_from="the authors' manifest hunyuan_video1_5/glyph-sdxl-v2__byt5 (a bare "
                     f"T5Stack: embed_tokens, block.N.*, final_layer_norm) in the names of "
                     f"ComfyUI's {SRC['t5']} T5 (self.shared, self.encoder = T5Stack) at "
                     f"{COMFY}@d7c3a3f2:comfy/text_encoders/byt5_config_small_glyph.json "
                     "(vocab_size 1510, model_type t5: relative_attention_bias in block 0 "
                     "only), which comfy/text_encoders/hunyuan_image.py ByT5SmallModel loads. "
                     "dtype float16 from the file name.",
        confidence="high for ComfyUI's module names and the shapes; medium that the Comfy-Org "
                   "file is saved from it (not observed; ComfyUI's loader is strict=False, "
                   "so a file in other names would silently not load)."))
    qwen = source("hunyuan_video1_5/qwen2.5-vl-7b-instruct__text_encoder")
    lm = {k: v for k, v in qwen["tensors"].items() if k != "lm_head.weight"}
    tensors = scaled_fp8(with_dtype(lm, None), QWEN_QUANTIZED, input_scale=False)
    assert sum(k.endswith(".scale_weight") for k in tensors) == 358
    out.append(manifest(
        family=FAMILY, variant="qwen-2.5-vl-7b-fp8-scaled", component="text_encoder",
        layout="transformers", config=qwen["config"], tensors=tensors,
        released_as=f"{HF}/HunyuanVideo_1.5_repackaged split_files/text_encoders/"
                    "qwen_2.5_vl_7b_fp8_scaled.safetensors (the same file as "
                    "Comfy-Org/Qwen-Image_ComfyUI's)",
        derived_from="the authors' manifest hunyuan_video1_5/qwen2.5-vl-7b-instruct__"
                     "text_encoder (transformers 4.x Qwen2_5_VLForConditionalGeneration names: "
                     "model.*, visual.*) less lm_head.weight: ComfyUI's "
                     f"{COMFY}:comfy/text_encoders/llama.py Qwen25_7BVLI holds self.model = "
                     "Llama2_ and self.visual = qwen_vl.Qwen2VLVisionTransformer (patch_embed."
                     "proj, blocks.N.{norm1,norm2,attn.qkv,attn.proj,mlp.*_proj}, merger."
                     "{ln_q,mlp.0,mlp.2}: the same older transformers names) and no lm_head (it "
                     "is commented out). " + SCALE_NOTE + "Quantized: every Linear of the LM "
                     "(196) and of the vision tower (162) = 358 scale_weight keys, the count "
                     "leejet/stable-diffusion.cpp#1898 reports for this file; embeddings, norms "
                     "and the Conv3d patch embedding not.",
        confidence="high for the weight names/shapes (ComfyUI's classes); medium for the "
                   "quantized set (the count matches a third-party report exactly); the stored "
                   "dtype of the unquantized tensors is not established (null)."))
    return out


# ---------------------------------------------------------------------------- LTX-2's Gemma 3
def ltx2_gemma() -> list[dict]:
    """Comfy-Org/ltx-2's gemma_3_12B_it.safetensors in ComfyUI's Gemma3_12B names."""
    base = json.loads((ROOT / "tests" / "models" / "gemma" /
                       "gemma-3-12b-it-qat-q4_0-unquantized__text_encoder.json").read_text())
    renames = (("language_model.model.", "model."), ("vision_tower.vision_model.", "vision_model."),
               ("multi_modal_projector.", "multi_modal_projector."))
    tensors = {}
    for k, v in base["tensors"].items():
        old, new = next((a, b) for a, b in renames if k.startswith(a))
        tensors[new + k[len(old):]] = spec(v["shape"], None)
    tensors["spiece_model"] = spec(None, "uint8")
    return [manifest(
        family=FAMILY, variant="gemma-3-12b-it-bf16", component="text_encoder", layout="comfyui",
        config=base["config"], tensors=tensors,
        released_as=f"{HF}/ltx-2 split_files/text_encoders/gemma_3_12B_it.safetensors (LTX-2's "
                    "ComfyUI text encoder; its _fp8_scaled / _fp4_mixed siblings quantize it)",
        derived_from="the Gemma 3 12B release manifest (tests/models/gemma/gemma-3-12b-it-qat-"
                     "q4_0-unquantized__text_encoder.json: transformers' saved names) in the "
                     f"names of ComfyUI's {COMFY}:comfy/text_encoders/llama.py Gemma3_12B "
                     "(self.model = Llama2_ with transformers' layer names, "
                     "self.multi_modal_projector, self.vision_model = comfy.clip_model."
                     "CLIPVision; no lm_head), plus 'spiece_model' (uint8 bytes of the "
                     "SentencePiece model: comfy/text_encoders/lt.py Gemma3_12BTokenizer reads "
                     "tokenizer_data['spiece_model'] and saves it under that name; length not "
                     "established). Stored dtypes not established (null).",
        confidence="high for the language model's names/shapes (ComfyUI's class); medium for "
                   "the vision tower and projector being in the file (city96/ComfyUI-GGUF#402: "
                   "a commenter notes the ComfyUI safetensors file carries the vision part) and "
                   "low for "
                   "their exact names (ComfyUI's CLIPVision / Gemma3MultiModalProjector names "
                   "assumed equal to transformers'; vidax ignores both either way); whether "
                   "Comfy-Org's weights are the QAT-unquantized or the plain -it release is not "
                   "established (same shapes).")]


# ---------------------------------------------------------------------------- main
def derive() -> list[dict]:
    return wan() + hunyuan() + hunyuan_dits() + hunyuan_encoders() + ltx2_gemma()


def text_of(m: dict) -> str:
    return json.dumps(m, indent=1, sort_keys=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a derived manifest differs on disk")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from vidax.manifests import load_manifest

    stale = 0
    for m in derive():
        rel = f"{m['family']}/{m['variant']}__{m['component']}"
        text = text_of(m)
        packaged = PACKAGED / f"{rel}.json.gz"
        data = gzip.compress(text.encode(), compresslevel=9, mtime=0)
        if args.check:
            same = packaged.is_file() and packaged.read_bytes() == data
            stale += not same
            print(f"{'ok' if same else 'out of date'}: {rel}")
            continue
        packaged.parent.mkdir(parents=True, exist_ok=True)
        packaged.write_bytes(data)
        load_manifest(packaged)                   # validates the schema
        print(f"wrote {rel} ({m['num_tensors']} tensors)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
