"""The tiny LTX-2.3 distilled release of ``vidax demo ltx2_5``, in the authors' layout
(Lightricks/LTX-2): ONE ``ltx-2.3-22b-distilled.safetensors`` holding ltx-core's ``LTXModel``
and text connectors under ``model.diffusion_model.``, the text projection under
``text_embedding_projection.``, the video VAE under ``vae.``, the audio VAE under ``audio_vae.``
and the vocoder (with its bandwidth extension) under ``vocoder.``, every section's config in the
file's metadata; the spatial upsampler's own file; the Gemma 3 folder as transformers writes it
(``model.safetensors``, ``config.json``, a tokenizer whose post-processor puts Gemma's ``<bos>``
first). bfloat16, as the releases store them. The run is the authors' default: two stages
(half size, the upsampler, full size), and the mp4 carries the vocoder's 48 kHz stereo track.
Configs and key layouts: ``vidax/data/tiny/ltx2_5.json`` (recorded from the authors' classes).
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np

from vidax.demo import common

TITLE = "LTX-2.3 distilled text-to-audio+video"
FOLDER = "LTX-2.3-tiny"
MODEL_TYPE = "ltx2_5"
SEED = 0
PROMPT = "a red fox barks in a snowy forest at dawn, wind in the trees"
WORDS = ("a an the red fox cat dog bird barks runs sings in on across snowy green forest "
         "river sky at dawn night wind rain trees music voice camera slowly close up").split()
#: Gemma's special tokens in id order (<pad> 0, <eos> 1, <bos> 2, <unk> 3).
SPECIALS = {"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>",
            "unk_token": "<unk>"}
#: The distilled release samples the authors' fixed sigma lists: no ``--steps``.
FIXED_SCHEDULE = True
GENERATE = ("--prompt", PROMPT, "--frames", "9", "--size", "128x64", "--seed", str(SEED),
            "--fps", "24")
SINGLE = "ltx-2.3-22b-distilled.safetensors"
COMPONENTS = (("dit", SINGLE), ("vae", SINGLE), ("audio_vae", SINGLE), ("vocoder", SINGLE),
              ("text_projection", SINGLE),
              ("upsampler", "ltx-2.3-spatial-upscaler-x2-1.0.safetensors"),
              ("text_encoder", "gemma-3-12b-it-qat-q4_0-unquantized/model.safetensors"))


def _layout() -> dict:
    return common.tiny_layout("ltx2_5")


def audio_buffers(tensors: dict, rng: np.random.Generator, bwe: dict) -> None:
    """The vocoder's stored buffers as a release holds them, not random: each anti-alias filter
    a normalised low-pass (a Kaiser-windowed sinc), the STFT bases a Hann-windowed DFT (real
    rows, then imaginary), the mel basis non-negative (random weights aside, a log of a
    negative mel would be NaN); the output convolutions scaled down, so that the random
    waveform stays well inside [-1, 1]."""
    n_fft = bwe["n_fft"]
    for key, value in tensors.items():
        if key.endswith(".filter"):
            taps = value.shape[-1]
            t = np.arange(taps) - (taps - 1) / 2
            f = np.sinc(t / 2) * np.kaiser(taps, 5.0)
            tensors[key] = (f / f.sum()).reshape(value.shape).astype(np.float32)
        elif key.endswith("mel_basis"):
            tensors[key] = (np.abs(rng.standard_normal(value.shape)) / value.shape[1]
                            ).astype(np.float32)
        elif key.endswith(("forward_basis", "inverse_basis")):
            k = np.arange(n_fft // 2 + 1)[:, None]
            n = np.arange(n_fft)[None]
            window = np.hanning(n_fft + 1)[:-1]
            angle = 2 * np.pi * k * n / n_fft
            basis = np.concatenate([np.cos(angle), -np.sin(angle)]) * window
            tensors[key] = basis[:, None, :].astype(np.float32)
        elif key.endswith("conv_post.weight"):    # quieter: random weights would clip at 1
            tensors[key] = (0.1 * value).astype(np.float32)


def positive_statistics(tensors: dict, rng: np.random.Generator) -> None:
    for key in tensors:
        if key.endswith("per_channel_statistics.std-of-means"):
            tensors[key] = (0.5 + rng.uniform(size=tensors[key].shape)).astype(np.float32)


def write(folder: Path) -> None:
    """The release folder, random weights in bfloat16."""
    layout = _layout()
    rng = np.random.default_rng(SEED)
    single = {}
    for component in ("dit", "vae", "audio_vae", "vocoder", "text_projection"):
        single.update(common.random_tensors(layout[component], rng, np.float32))
    positive_statistics(single, rng)
    audio_buffers(single, rng, layout["vocoder"]["config"]["bwe"])
    bf16 = {k: v.astype(ml_dtypes.bfloat16) for k, v in single.items()}
    config = {"transformer": layout["dit"]["config"], "vae": layout["vae"]["config"],
              "audio_vae": layout["audio_vae"]["config"],
              "vocoder": layout["vocoder"]["config"]}
    common.write_safetensors(folder / SINGLE, bf16, metadata={
        "config": json.dumps(config), "model_version": "2.3.0"})
    up = layout["upsampler"]
    common.write_safetensors(
        folder / up["file"], {k: v.astype(ml_dtypes.bfloat16) for k, v in
                              common.random_tensors(up, rng, np.float32).items()},
        metadata={"config": json.dumps(up["config"])})
    gemma = layout["text_encoder"]
    common.write_safetensors(
        folder / gemma["file"], {k: v.astype(ml_dtypes.bfloat16) for k, v in
                                 common.random_tensors(gemma, rng, np.float32).items()},
        metadata={"format": "pt"})
    gemma_dir = (folder / gemma["file"]).parent
    common.write_json(gemma_dir / "config.json", gemma["config"])
    common.word_tokenizer(gemma_dir, WORDS, SPECIALS, prepend=("<bos>",),
                          config={"model_max_length": 1024, "padding_side": "left",
                                  "tokenizer_class": "GemmaTokenizer"})
