"""The tiny HunyuanVideo-1.5 release of ``vidax demo hunyuan_video1_5`` (text-to-video) and
``vidax demo hunyuan_video1_5-i2v`` (image-to-video from an image the demo draws), in the
layout of the authors' ``ckpts/`` folder (tencent/HunyuanVideo-1.5, as their
checkpoints-download.md lays it out):

* ``transformer/480p_t2v_distilled/`` and ``transformer/480p_i2v_distilled/``: the DiT, one
  float32 ``diffusion_pytorch_model.safetensors`` each (the authors' key names, random weights
  drawn per folder) with its ``config.json`` in the authors' keys (only ``ideal_task``
  differs);
* ``vae/diffusion_pytorch_model.safetensors`` (float32, the authors' names) + ``config.json``;
* ``text_encoder/llm/``: Qwen2.5-VL (``Qwen2_5_VLForConditionalGeneration.save_pretrained``,
  bfloat16) with a byte-level BPE ``tokenizer.json`` of Qwen2's structure (NFC, its split
  regex) carrying Qwen's special tokens;
* ``text_encoder/byt5-small/`` (byT5's ``config.json`` and tokenizer settings) and
  ``text_encoder/Glyph-SDXL-v2/`` (``checkpoints/byt5_model.pt``: the bare ``T5Stack``
  state dict; ``assets/color_idx.json``, ``assets/multilingual_10-lang_idx.json``: 4 colors
  and 2 fonts in the real files' format);
* ``vision_encoder/siglip/``: ``image_encoder/`` (SigLIP, bfloat16) and
  ``feature_extractor/preprocessor_config.json`` (SigLIP's processor at 28 px).

Key names, shapes and configs: ``vidax/data/tiny/hunyuan_video1_5.json``
(``scripts/make_tiny_layouts.py``).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from vidax.demo import common

TITLE = "HunyuanVideo-1.5 text-to-video (CFG-distilled)"
FOLDER = "HunyuanVideo-1.5-tiny"
SEED = 0
PROMPT = 'a neon sign that reads "OPEN" flickers above a rainy street at night'
GENERATE = ("--variant", "480p_t2v_distilled", "--prompt", PROMPT, "--frames", "9",
            "--size", "80x48", "--steps", "4", "--seed", str(SEED), "--fps", "24")
COMPONENTS = (("dit", "transformer/480p_t2v_distilled/diffusion_pytorch_model.safetensors"),
              ("vae", "vae/diffusion_pytorch_model.safetensors"))
#: Components registered under another model type: (model type, component, file).
ENCODERS = (("reason1", "text_encoder", "text_encoder/llm/model.safetensors"),
            ("t5", "encoder", "text_encoder/Glyph-SDXL-v2/checkpoints/byt5_model.pt"),
            ("siglip", "vision_encoder", "vision_encoder/siglip/image_encoder/model.safetensors"))
DIT_FOLDERS = {"480p_t2v_distilled": "t2v", "480p_i2v_distilled": "i2v"}

#: The demo's Glyph-SDXL-v2 style tables (the real files map 1126 names: colors, then fonts by
#: language code).
COLORS = {"white": 0, "black": 1, "red": 2, "blue": 3}
FONTS = {"en-Montserrat-Regular": 0, "zh-SourceHanSansCN-Regular": 1}
#: Qwen2.5-VL's special tokens in id order (after its vocabulary).
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
ROLES = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
#: google/byt5-small's tokenizer settings (three specials, 125 sentinel ids).
BYT5_TOKENS = {"eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
#: SigLIP's image processor (FLUX.1-Redux-dev's ``feature_extractor``) at the tiny 28 px.
PREPROCESSOR = {"do_convert_rgb": None, "do_normalize": True, "do_rescale": True,
                "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
                "image_processor_type": "SiglipImageProcessor", "image_std": [0.5, 0.5, 0.5],
                "resample": 3, "rescale_factor": 1 / 255, "size": {"height": 28, "width": 28}}


def _texts() -> list[str]:
    """What the Qwen tokenizer is trained on: the turns the pipeline sends."""
    from vidax.pipelines import hunyuan_video1_5 as hp

    return [hp.chat_text(p) for p in (PROMPT, "", hp.CROP_PROBE)] + [hp.USER_MARKER]


def write_tokenizers(folder: Path, configs: dict) -> None:
    """``text_encoder/llm/``'s tokenizer, byt5-small's settings and the glyph tables, and the
    token ids of ``configs["text_encoder"]`` set to the tokenizer's."""
    llm = folder / "text_encoder" / "llm"
    tok = common.byte_level_tokenizer(
        llm, _texts(), ROLES, tokens=SPECIAL_TOKENS, qwen2=True,
        config={"bos_token": None, "model_max_length": 131072,
                "clean_up_tokenization_spaces": False, "errors": "replace"})
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    text = configs["text_encoder"]
    text["text_config"].update(bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
    text.update(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                vision_start_token_id=ids["<|vision_start|>"],
                vision_end_token_id=ids["<|vision_end|>"])
    assert tok.get_vocab_size(with_added_tokens=True) <= text["text_config"]["vocab_size"]
    small = folder / "text_encoder" / "byt5-small"
    common.write_json(small / "special_tokens_map.json", BYT5_TOKENS)
    common.write_json(small / "tokenizer_config.json",
                      {**BYT5_TOKENS, "extra_ids": 125, "tokenizer_class": "ByT5Tokenizer"})
    glyph = folder / "text_encoder" / "Glyph-SDXL-v2" / "assets"
    common.write_json(glyph / "color_idx.json", COLORS)
    common.write_json(glyph / "multilingual_10-lang_idx.json", FONTS)


def write(folder: Path) -> None:
    """The release folder, random weights; each file written atomically."""
    import ml_dtypes

    layout = common.tiny_layout("hunyuan_video1_5")
    configs = {key: copy.deepcopy(entry["config"]) for key, entry in layout.items()}
    write_tokenizers(folder, configs)
    rng = np.random.default_rng(SEED)
    dtypes = {"bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
    for variant, task in DIT_FOLDERS.items():
        dit = folder / "transformer" / variant
        entry = layout["dit"]
        common.write_safetensors(dit / Path(entry["file"]).name,
                                 common.random_tensors(entry, rng, np.float32))
        common.write_json(dit / "config.json", dict(configs["dit"], ideal_task=task))
    for key in ("vae", "text_encoder", "image_encoder"):
        entry = layout[key]
        path = folder / entry["file"]
        common.write_safetensors(path, common.random_tensors(entry, rng, dtypes[entry["dtype"]]))
        common.write_json(path.parent / "config.json", configs[key])
    byt5 = layout["byt5"]
    common.write_pth(folder / byt5["file"], common.random_tensors(byt5, rng, np.float32))
    common.write_json(folder / "text_encoder" / "byt5-small" / "config.json",
                      dict(configs["byt5"], vocab_size=384))
    common.write_json(folder / "vision_encoder" / "siglip" / "feature_extractor"
                      / "preprocessor_config.json", PREPROCESSOR)
