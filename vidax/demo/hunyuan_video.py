"""The tiny HunyuanVideo text-to-video release of ``vidax demo hunyuan_video``, in the layout of
the authors' ``ckpts/`` folder (tencent/HunyuanVideo, as their README lays it out):

* ``hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt``: the DiT, a
  ``torch.save`` zip of ``{"module": state_dict}`` in bfloat16 (written without torch), with the
  authors' ``HYVideoDiffusionTransformer`` key names; beside it a ``config.json`` of the tiny
  sizes in the authors' argument names -- not part of the release, whose DiT has one size;
  vidax reads it for any other;
* ``hunyuan-video-t2v-720p/vae/pytorch_model.pt`` (float32, no wrapper) and its
  ``config.json`` (the authors' ``AutoencoderKLCausal3D`` keys);
* ``text_encoder/``: the LLaVA-Llama-3 language model as the authors' preprocessing script
  saves it (``LlamaForCausalLM``: ``model.*`` and ``lm_head.weight``, float16) with a
  byte-level BPE tokenizer carrying Llama-3's header tokens, LLaVA's ``<pad>`` and a Llama-3
  chat template;
* ``text_encoder_2/``: openai/clip-vit-large-patch14 (``CLIPModel``, both towers, float32)
  with a word-level tokenizer carrying CLIP's start / end-of-text tokens.

Key names, shapes and configs: ``vidax/data/tiny/hunyuan_video.json``
(``scripts/make_tiny_layouts.py``).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from vidax.demo import common

TITLE = "HunyuanVideo text-to-video"
FOLDER = "HunyuanVideo-tiny"
SEED = 0
PROMPT = "a paper boat drifts down a rainy street, the camera follows it slowly"
GENERATE = ("--prompt", PROMPT, "--frames", "9", "--size", "64x48", "--steps", "3",
            "--guidance-scale", "6", "--seed", str(SEED), "--fps", "24")
COMPONENTS = (("dit", "hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt"),
              ("vae", "hunyuan-video-t2v-720p/vae/pytorch_model.pt"))
#: Components registered under another model type: (model type, component, file).
ENCODERS = (("llama", "text_encoder", "text_encoder/model.safetensors"),
            ("clip", "text_encoder", "text_encoder_2/model.safetensors"))

#: Llama-3's special tokens the prompt template uses, in id order, and the padding token
#: LLaVA-Llama-3 adds after them.
LLAMA_TOKENS = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>", "<pad>")
LLAMA_ROLES = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
               "pad_token": "<pad>"}
#: A Llama-3 chat template (written for this demo): each turn a header, two newlines, the
#: stripped content and ``<|eot_id|>``, after the BOS.
LLAMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{% endif %}")
#: CLIP's tokens: start and end of text (which is also its unknown and padding token), after
#: the vocabulary.
CLIP_ROLES = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
              "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
CLIP_WORDS = ("a an the boat paper ship car cat dog bird drifts floats sails runs flies down "
              "up along across through rainy snowy sunny street river sea city forest at night "
              "camera follows it slowly quickly pans close wide shot light , .").split()


def _texts() -> list[str]:
    """What the Llama tokenizer is trained on: the prompt in the pipeline's template."""
    from vidax.pipelines import hunyuan_video

    return [hunyuan_video.PROMPT_TEMPLATE.format(PROMPT)]


def write_tokenizers(folder: Path, configs: dict) -> None:
    """``text_encoder/``'s and ``text_encoder_2/``'s tokenizer files, and the token ids of their
    ``configs`` set to theirs (``scripts/make_tiny_layouts.py`` records the configs so set)."""
    llama = common.byte_level_tokenizer(
        folder / "text_encoder", _texts(), LLAMA_ROLES, tokens=LLAMA_TOKENS,
        prepend=("<|begin_of_text|>",),
        config={"model_max_length": 8192, "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": LLAMA_CHAT_TEMPLATE, "clean_up_tokenization_spaces": True})
    configs["text_encoder"].update({f"{role[:-6]}_token_id": llama.token_to_id(token)
                                    for role, token in LLAMA_ROLES.items()})
    clip = common.word_tokenizer(
        folder / "text_encoder_2", CLIP_WORDS, CLIP_ROLES, specials_first=False,
        prepend=("<|startoftext|>",), append=("<|endoftext|>",),
        # not "CLIPTokenizer": transformers would rebuild CLIP's BPE instead of reading this
        # word-level tokenizer.json
        config={"model_max_length": 77, "tokenizer_class": "PreTrainedTokenizerFast",
                "do_lower_case": True})
    configs["text_encoder_2"]["text_config"].update(
        {f"{role[:-6]}_token_id": clip.token_to_id(token) for role, token in CLIP_ROLES.items()
         if role != "unk_token"})
    for key, tok in (("text_encoder", llama), ("text_encoder_2", clip)):
        vocab = configs[key].get("text_config", configs[key])["vocab_size"]
        assert tok.get_vocab_size(with_added_tokens=True) <= vocab, (key, vocab)


def write(folder: Path) -> None:
    """The release folder, random weights; each file written atomically."""
    import ml_dtypes

    layout = common.tiny_layout("hunyuan_video")
    configs = {key: copy.deepcopy(entry.get("config")) for key, entry in layout.items()}
    write_tokenizers(folder, configs)

    rng = np.random.default_rng(SEED)
    dtypes = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
    dit = layout["dit"]
    common.write_pth(folder / dit["file"], common.random_tensors(dit, rng, dtypes[dit["dtype"]]),
                     wrapper=dit["wrapper"])
    common.write_json((folder / dit["file"]).parent / "config.json", configs["dit"])
    vae = layout["vae"]
    common.write_pth(folder / vae["file"], common.random_tensors(vae, rng, dtypes[vae["dtype"]]))
    common.write_json((folder / vae["file"]).parent / "config.json", configs["vae"])
    for key in ("text_encoder", "text_encoder_2"):
        entry = layout[key]
        path = folder / entry["file"]
        tensors = common.random_tensors(entry, rng, dtypes[entry["dtype"]])
        # CLIP's logit_scale is 0-d: random_tensors gives it as a numpy scalar
        common.write_safetensors(path, {k: np.asarray(v) for k, v in tensors.items()})
        common.write_json(path.parent / "config.json", configs[key])
