"""The tiny Wan2.1 text-to-video release of ``vidax demo wan2_1``, in the authors' layout: the
DiT as ``diffusion_pytorch_model.safetensors`` with its ``config.json`` (as ``WanModel``'s
``save_pretrained`` writes them), the UMT5 encoder as a bfloat16 ``torch.save`` file
``models_t5_umt5-xxl-enc-bf16.pth``, the VAE as ``Wan2.1_VAE.pth`` and a ``google/umt5-xxl/``
tokenizer folder (file names: the Wan-AI/Wan2.1-T2V-1.3B release). The configs are
``vidax.pipelines.wan2_1.tiny_configs("t2v")``, recorded in ``vidax/data/tiny/wan2_1.json``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vidax.demo import common

TITLE = "Wan2.1 text-to-video"
FOLDER = "Wan2.1-T2V-tiny"
SEED = 0
PROMPT = "a red fox runs across a snowy field at sunset, the camera slowly pans"
#: The demo tokenizer's words (a word-level vocabulary; a real release ships UMT5's).
WORDS = ("a an the red fox cat dog bird runs walks flies across over through snowy golden "
         "green field forest river sky at sunset night morning camera slowly quickly pans "
         "zooms close up wide shot cinematic light").split()
#: T5's special tokens in id order: <pad> 0, </s> 1, <unk> 2.
SPECIALS = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
GENERATE = ("--prompt", PROMPT, "--frames", "9", "--size", "64x48", "--steps", "4",
            "--seed", str(SEED), "--fps", "8")
COMPONENTS = (("dit", "diffusion_pytorch_model.safetensors"),
              ("text_encoder", "models_t5_umt5-xxl-enc-bf16.pth"),
              ("vae", "Wan2.1_VAE.pth"))


def write_wan(folder: Path, name: str, seed: int = SEED) -> None:
    """A Wan release folder from the tiny layout ``name``: the DiT (float32 safetensors) and
    its ``config.json``, UMT5 in bfloat16 and the VAE in float32 as ``torch.save`` files, the
    tokenizer folder. Each file is written atomically."""
    import ml_dtypes

    layout = common.tiny_layout(name)
    rng = np.random.default_rng(seed)
    dit = layout["dit"]
    common.write_safetensors(folder / dit["file"], common.random_tensors(dit, rng, np.float32))
    common.write_json(folder / "config.json", {"_class_name": "WanModel", **dit["config"]})
    t5 = layout["text_encoder"]   # the releases store UMT5 in bfloat16
    common.write_pth(folder / t5["file"], common.random_tensors(t5, rng, ml_dtypes.bfloat16))
    vae = layout["vae"]
    common.write_pth(folder / vae["file"], common.random_tensors(vae, rng, np.float32))
    common.word_tokenizer(folder / "google" / "umt5-xxl", WORDS, SPECIALS)


def write(folder: Path) -> None:
    """The release folder, random weights."""
    write_wan(folder, "wan2_1")
