"""The tiny Cosmos3 (Nano-shaped) release of ``vidax demo cosmos3``, in the layout of the
diffusers folders NVIDIA publishes (``nvidia/Cosmos3-Nano``): ``model_index.json``;
``transformer/`` -- ``config.json`` and the state dict of ``Cosmos3OmniTransformer`` in bfloat16,
sharded (``diffusion_pytorch_model-0000N-of-00002.safetensors`` with its
``diffusion_pytorch_model.safetensors.index.json``), its action and sound heads included as the
release holds them; ``vae/`` (the Wan2.2-style ``AutoencoderKLWan``, float32, with its
``latents_mean`` / ``latents_std``); ``text_tokenizer/`` (a byte-level BPE ``tokenizer.json``
of Qwen2's structure with Qwen's special tokens and a ChatML chat template); and
``scheduler/scheduler_config.json`` (UniPC over Karras flow sigmas).

Key names, shapes and configs: ``vidax/data/tiny/cosmos3.json`` (``scripts/make_tiny_layouts.py``).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from vidax.demo import common
# Qwen2.5-VL's (and Qwen3-VL's) special tokens in id order, and the EOS / pad roles
from vidax.demo.cosmos2_5 import ROLES, SPECIAL_TOKENS

TITLE = "Cosmos3 (Nano-shaped) text-to-world"
FOLDER = "Cosmos3-Nano-tiny"
SEED = 0
PROMPT = "a robot arm stacks red cubes on a wooden table, the camera slowly pans"
GENERATE = ("--prompt", PROMPT, "--frames", "9", "--size", "64x32", "--steps", "3",
            "--guidance-scale", "6", "--seed", str(SEED), "--fps", "16")
COMPONENTS = (("dit", "transformer/diffusion_pytorch_model.safetensors.index.json"),)
#: Components registered under another model type: (model type, component, file).
ENCODERS = (("wan2_2", "vae", "vae/diffusion_pytorch_model.safetensors"),)
SHARDS = 2

#: A ChatML chat template (written for this demo, of Qwen3-VL's text format: an optional
#: system turn, user turns, the generation prompt); vidax renders the same turns itself
#: (``vidax.pipelines.cosmos3.chat_text``).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _texts() -> list[str]:
    """What the tokenizer is trained on: the turns the pipeline sends for the demo's prompt."""
    from vidax.pipelines import cosmos3

    cond, uncond = cosmos3.prompt_texts(PROMPT, "", frames=9, height=32, width=64, fps=16.0)
    return [cosmos3.chat_text(t) for t in (cond, uncond)]


def write_tokenizer(folder: Path, configs: dict) -> None:
    """``text_tokenizer/``; its vocabulary is checked to fit the DiT's embedding."""
    tok = common.byte_level_tokenizer(
        folder / "text_tokenizer", _texts(), ROLES, tokens=SPECIAL_TOKENS, qwen2=True,
        config={"bos_token": None, "model_max_length": 262144, "chat_template": CHAT_TEMPLATE,
                "clean_up_tokenization_spaces": False, "errors": "replace"})
    assert tok.get_vocab_size(with_added_tokens=True) <= configs["dit"]["vocab_size"]


def write_sharded(folder: Path, tensors: dict, shards: int = SHARDS) -> None:
    """``diffusion_pytorch_model-0000N-of-0000S.safetensors`` and its index, as diffusers'
    ``save_pretrained(max_shard_size=...)`` names them (keys in sorted order, split evenly)."""
    keys = sorted(tensors)
    weight_map, total = {}, 0
    for i in range(shards):
        name = f"diffusion_pytorch_model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k] for k in keys[i * len(keys) // shards:(i + 1) * len(keys) // shards]}
        common.write_safetensors(folder / name, part)
        weight_map.update(dict.fromkeys(part, name))
        total += sum(v.nbytes for v in part.values())
    common.write_json(folder / "diffusion_pytorch_model.safetensors.index.json",
                      {"metadata": {"total_size": total}, "weight_map": weight_map})


def write(folder: Path) -> None:
    """The release folder, random weights; each file written atomically."""
    import ml_dtypes

    layout = common.tiny_layout("cosmos3")
    configs = {key: copy.deepcopy(entry["config"]) for key, entry in layout.items()}
    write_tokenizer(folder, configs)
    rng = np.random.default_rng(SEED)
    dit = layout["dit"]
    write_sharded(folder / "transformer", common.random_tensors(dit, rng, ml_dtypes.bfloat16))
    common.write_json(folder / "transformer" / "config.json", configs["dit"])
    vae = layout["vae"]
    path = folder / vae["file"]
    common.write_safetensors(path, common.random_tensors(vae, rng, np.float32))
    common.write_json(path.parent / "config.json", configs["vae"])
    for name, config in dit["release_files"].items():
        common.write_json(folder / name, config)
