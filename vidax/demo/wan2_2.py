"""The tiny Wan2.2 release of ``vidax demo wan2_2``: TI2V-5B-like (the one-DiT Wan2.2 release,
text-to-video here), in the authors' layout of Wan-AI/Wan2.2-TI2V-5B: the DiT as
``diffusion_pytorch_model.safetensors`` with its ``config.json`` (``model_type`` ti2v, 48
latent channels), the Wan2.2 VAE as ``Wan2.2_VAE.pth``, UMT5 as the bfloat16
``models_t5_umt5-xxl-enc-bf16.pth`` and the ``google/umt5-xxl/`` tokenizer folder. The configs
are ``vidax.pipelines.wan2_2.tiny_configs("ti2v")``, recorded in ``vidax/data/tiny/wan2_2.json``.
"""

from __future__ import annotations

from pathlib import Path

from vidax.demo import wan2_1

TITLE = "Wan2.2 TI2V-5B (text-to-video)"
FOLDER = "Wan2.2-TI2V-tiny"
SEED = 0
PROMPT = wan2_1.PROMPT
# TI2V sizes are multiples of 32 (the Wan2.2 VAE's 16 x 16 stride, 2 x 2 patches).
GENERATE = ("--prompt", PROMPT, "--frames", "9", "--size", "96x64", "--steps", "4",
            "--seed", str(SEED), "--fps", "24")
COMPONENTS = (("dit", "diffusion_pytorch_model.safetensors"),
              ("text_encoder", "models_t5_umt5-xxl-enc-bf16.pth"),
              ("vae", "Wan2.2_VAE.pth"))


def write(folder: Path) -> None:
    """The release folder, random weights."""
    wan2_1.write_wan(folder, "wan2_2", seed=SEED)
