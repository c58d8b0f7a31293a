"""The tiny LTX-2.5 distilled release of ``vidax demo ltx2_5-2.5``, in the authors' split layout
(Lightricks/LTX-2.5): the transformer alone, ``ltx-2.5-22b-distilled-transformer-bf16``
(bfloat16, its scale/shift tables float32 as released; the metadata names the Gemma it was
trained with, ``gemma_source_checkpoint``); the video VAE twice, ``vae/ltx-2.5-video-vae-bf16``
(the diffusion decoder, the default) and ``vae/ltx-2.5-video-vae-conv-bf16`` (bare
``encoder.`` / ``decoder.`` / ``per_channel_statistics.`` keys); ``vae/ltx-2.5-audio-vae-bf16``
(``audio_vae.`` and ``vocoder.``); ``text_encoders/gemma4-12b-with-proj-ltx-2.5-bf16``: Gemma 4
in ComfyUI names, ``text_embedding_projection.``, and the tokenizer and HF files as uint8
tensors (``tokenizer_json``, ``hf_asset__*``) with the HF config, stamped with LTX's
``gemma_version``, in the metadata; and the spatial upsampler. No other file is needed: the
tokenizer comes out of the text-encoder file. Layouts: ``vidax/data/tiny/ltx2_5-2.5.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np

from vidax.demo import common
from vidax.demo.ltx2_5 import PROMPT, SEED, WORDS, audio_buffers, positive_statistics

TITLE = "LTX-2.5 distilled text-to-audio+video"
FOLDER = "LTX-2.5-tiny"
MODEL_TYPE = "ltx2_5"
FIXED_SCHEDULE = True
GEMMA_VERSION = "gemma4-12b-ltx-v1"
GENERATE = ("--prompt", PROMPT, "--frames", "9", "--size", "128x64", "--seed", str(SEED),
            "--fps", "24")
DIT = "ltx-2.5-22b-distilled-transformer-bf16.safetensors"
AUDIO = "vae/ltx-2.5-audio-vae-bf16.safetensors"
TEXT = "text_encoders/gemma4-12b-with-proj-ltx-2.5-bf16.safetensors"
COMPONENTS = (("dit", DIT), ("video_vae", "vae/ltx-2.5-video-vae-bf16.safetensors"),
              ("video_vae_conv", "vae/ltx-2.5-video-vae-conv-bf16.safetensors"),
              ("audio_vae", AUDIO), ("vocoder", AUDIO), ("text_encoder", TEXT),
              ("text_projection", TEXT),
              ("upsampler", "ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0.safetensors"))
_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]


def _layout() -> dict:
    return common.tiny_layout("ltx2_5-2.5")


def gemma4_assets() -> dict[str, bytes]:
    """The text-encoder file's byte tensors: a word-level ``tokenizer.json`` (Gemma's special
    tokens first; no post-processor: LTX's tokenizer forces the ``<bos>``) and the HF sidecar
    files, as the authors' packer stores them."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(_SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in _SPECIALS])
    config = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
              "unk_token": "<unk>", "tokenizer_class": "GemmaTokenizer",
              "padding_side": "left", "model_max_length": 1024}
    return {"tokenizer_json": tok.to_str().encode(),
            "hf_asset__tokenizer_config.json": json.dumps(config).encode(),
            "hf_asset__generation_config.json": b'{"bos_token_id": 2, "eos_token_id": 1}',
            "hf_asset__processor_config.json": b'{"processor_class": "Gemma4UnifiedProcessor"}',
            "hf_asset__chat_template.jinja": b"{{ messages }}"}


def _bf16(tensors: dict, keep_float32=()) -> dict:
    return {k: v if k.endswith(keep_float32) else v.astype(ml_dtypes.bfloat16)
            for k, v in tensors.items()}


def write(folder: Path) -> None:
    """The release folder, random weights."""
    layout = _layout()
    rng = np.random.default_rng(SEED)
    dit = layout["dit"]
    common.write_safetensors(
        folder / dit["file"],
        _bf16(common.random_tensors(dit, rng, np.float32), keep_float32=("scale_shift_table",
                                                                         "_ca_audio",
                                                                         "_ca_video")),
        metadata={"config": json.dumps({"transformer": dit["config"]}),
                  "model_version": "2.5.0",
                  "gemma_source_checkpoint": json.dumps({"gemma_version": GEMMA_VERSION})})
    for key in ("video_vae", "video_vae_conv"):
        vae = layout[key]
        tensors = common.random_tensors(vae, rng, np.float32)
        positive_statistics(tensors, rng)
        common.write_safetensors(folder / vae["file"], _bf16(tensors),
                                 metadata={"config": json.dumps({"vae": vae["config"]})})
    audio = {**common.random_tensors(layout["audio_vae"], rng, np.float32),
             **common.random_tensors(layout["vocoder"], rng, np.float32)}
    positive_statistics(audio, rng)
    audio_buffers(audio, rng, layout["vocoder"]["config"]["bwe"])
    common.write_safetensors(folder / AUDIO, _bf16(audio), metadata={"config": json.dumps({
        "audio_vae": layout["audio_vae"]["config"], "vocoder": layout["vocoder"]["config"]})})
    assets = gemma4_assets()
    text = layout["text_encoder"]
    weights = {k: v for k, v in text["tensors"].items() if k not in assets}
    tensors = {**_bf16(common.random_tensors({"tensors": weights}, rng, np.float32)),
               **_bf16(common.random_tensors(layout["text_projection"], rng, np.float32)),
               **{k: np.frombuffer(v, np.uint8) for k, v in assets.items()}}
    for key in tensors:                       # Gemma 4's per-layer output scale, near 1
        if key.endswith("layer_scalar"):
            tensors[key] = np.ones(tensors[key].shape, ml_dtypes.bfloat16)
    common.write_safetensors(folder / TEXT, tensors, metadata={
        "format": "pt", "gemma_config": json.dumps(text["config"])})
    up = layout["upsampler"]
    common.write_safetensors(folder / up["file"],
                             _bf16(common.random_tensors(up, rng, np.float32)),
                             metadata={"config": json.dumps(up["config"])})
