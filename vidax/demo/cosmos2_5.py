"""The tiny Cosmos-Predict2.5 release of ``vidax demo cosmos2_5``, in the layout of
nvidia/Cosmos-Predict2.5-2B's diffusers revision (``diffusers/base/post-trained``: the layout
that carries its sizes in ``config.json`` files; the authors' own ``base/*_ema_bf16.pt``
layout holds only the released 2B / 14B networks): ``model_index.json``; ``transformer/``
(``CosmosTransformer3DModel``, bfloat16), ``vae/`` (the Wan2.1 ``AutoencoderKLWan``, float32)
and ``text_encoder/`` (Cosmos-Reason1, a ``Qwen2_5_VLForConditionalGeneration`` with its vision
tower, bfloat16), each a ``config.json`` and a safetensors file as ``save_pretrained`` writes
them; ``scheduler/scheduler_config.json`` (UniPC over Karras flow sigmas); a Qwen2.5-VL
``tokenizer/`` folder -- a byte-level BPE ``tokenizer.json`` with Qwen's special tokens (and
its ``vocab.json`` / ``merges.txt``), a ``tokenizer_config.json`` holding a chat template that
renders Qwen2.5-VL's format. Key
names, shapes and configs: recorded from diffusers' and transformers' classes in
``vidax/data/tiny/cosmos2_5.json``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

from vidax.demo import common

TITLE = "Cosmos-Predict2.5 text-to-world"
FOLDER = "Cosmos-Predict2.5-2B-tiny"
SEED = 0
PROMPT = "a red bus drives through a snowy city street at night, its lights glowing"
GENERATE = ("--prompt", PROMPT, "--frames", "9", "--size", "64x48", "--steps", "3",
            "--guidance-scale", "7", "--seed", str(SEED), "--fps", "16")
COMPONENTS = (("dit", "transformer/diffusion_pytorch_model.safetensors"),)
#: Components registered under another model type: (model type, component, file).
ENCODERS = (("wan2_1", "vae_diffusers", "vae/diffusion_pytorch_model.safetensors"),
            ("reason1", "text_encoder", "text_encoder/model.safetensors"))

#: Qwen2.5-VL's special tokens in id order (they follow its vocabulary); the pipeline pads
#: with ``<|endoftext|>`` and the chat format uses ``<|im_start|>`` / ``<|im_end|>``.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                  "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                  "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                  "<|image_pad|>", "<|video_pad|>")
ROLES = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
#: A chat template of Qwen2.5-VL's text format (written for this demo; vidax renders the
#: same turns itself, ``vidax.pipelines.cosmos2_5.chat_text``): a default system turn when
#: the messages bring none, each turn ``<|im_start|>role\\n...<|im_end|>\\n``, text parts of a
#: content list joined, an image or video part as its vision tokens.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if loop.first and m['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'text' %}{{ c['text'] }}"
    "{% elif c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _texts() -> list[str]:
    """What the tokenizer is trained on: the turns the pipeline sends (its system turn and
    default negative prompt, the demo's prompt, in the chat format)."""
    from vidax.pipelines import cosmos2_5

    return [cosmos2_5.chat_text(p) for p in (cosmos2_5.NEGATIVE_PROMPT, PROMPT)]


def write(folder: Path) -> None:
    """The release folder, random weights; each file written atomically."""
    layout = common.tiny_layout("cosmos2_5")
    rng = np.random.default_rng(SEED)
    configs = {key: copy.deepcopy(entry["config"]) for key, entry in layout.items()}
    write_tokenizer(folder, configs)
    for key in ("dit", "vae", "text_encoder"):
        entry = layout[key]
        path = folder / entry["file"]
        common.write_safetensors(path, common.random_tensors(entry, rng, _dtype(entry)))
        common.write_json(path.parent / "config.json", configs[key])
    for name, config in layout["dit"]["release_files"].items():
        common.write_json(folder / name, config)


def write_tokenizer(folder: Path, configs: dict) -> None:
    """``folder/tokenizer/``, and the token ids of ``configs["text_encoder"]`` set to its
    (``scripts/make_tiny_layouts.py`` records the config so set)."""
    tok = common.byte_level_tokenizer(
        folder / "tokenizer", _texts(), ROLES, tokens=SPECIAL_TOKENS,
        config={"bos_token": None, "unk_token": None, "model_max_length": 131072,
                "tokenizer_class": "Qwen2Tokenizer", "chat_template": CHAT_TEMPLATE,
                "clean_up_tokenization_spaces": False, "errors": "replace"})
    _write_vocab_and_merges(folder / "tokenizer", tok)
    text = configs["text_encoder"]
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    text["text_config"].update(bos_token_id=ids["<|endoftext|>"],
                               eos_token_id=ids["<|im_end|>"])
    text.update(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                vision_start_token_id=ids["<|vision_start|>"],
                vision_end_token_id=ids["<|vision_end|>"])
    size = tok.get_vocab_size(with_added_tokens=True)
    assert size <= text["text_config"]["vocab_size"], size


def _write_vocab_and_merges(folder: Path, tok) -> None:
    """``vocab.json`` and ``merges.txt``: the BPE's vocabulary and merges in the files a
    Qwen2 tokenizer folder also ships (the slow tokenizer's), from ``tokenizer.json``."""
    model = json.loads(tok.to_str())["model"]
    common.write_json(folder / "vocab.json", model["vocab"])
    lines = "".join(f"{a} {b}\n" for a, b in model["merges"])
    common._atomic(folder / "merges.txt",
                   lambda tmp: Path(tmp).write_text("#version: 0.2\n" + lines))


def _dtype(entry) -> np.dtype:
    import ml_dtypes

    return ml_dtypes.bfloat16 if entry["dtype"] == "bfloat16" else np.dtype(entry["dtype"])
