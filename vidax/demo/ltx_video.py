"""The tiny LTX-Video 0.9.8 release of ``vidax demo ltx_video``, in the authors' layout
(Lightricks/LTX-Video): ONE ``ltxv-*.safetensors`` holding their ``Transformer3DModel`` under
``model.diffusion_model.`` and their ``CausalVideoAutoencoder`` under ``vae.`` (with its five
``per_channel_statistics``), the models' and the scheduler's JSON config in the file's
metadata; ``text_encoder/`` as transformers' ``T5EncoderModel.save_pretrained`` writes it
(``model.safetensors``, ``config.json``); ``tokenizer/`` with T5's special tokens. Configs and
key layouts: ``vidax/data/tiny/ltx_video.json`` (recorded from the authors' classes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vidax.demo import common

TITLE = "LTX-Video 0.9.8 text-to-video"
FOLDER = "LTX-Video-tiny"
SEED = 0
PROMPT = "a red fox runs across a snowy field at sunset, the camera slowly pans"
WORDS = ("a an the red fox cat dog bird runs walks jumps across over through snowy golden "
         "green field forest river sky at sunset night camera slowly pans zooms close up "
         "wide shot cinematic light blurry jittery worst quality distorted").split()
#: T5's special tokens in id order (<pad> 0, </s> 1, <unk> 2); its tokenizer appends </s>.
SPECIALS = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
# A release file of no known name gets the dev model's settings, whose schedule skips its final
# steps (4 asked, 1 runs); each further guidance kind (STG's skipped blocks) costs a compile.
GENERATE = ("--prompt", PROMPT, "--frames", "9", "--size", "64x32", "--steps", "4",
            "--seed", str(SEED), "--fps", "24")


def _layout() -> dict:
    return common.tiny_layout("ltx_video")


COMPONENTS = (("dit", "ltxv-tiny-0.9.8.safetensors"), ("vae", "ltxv-tiny-0.9.8.safetensors"),
              ("text_encoder", "text_encoder/model.safetensors"))


def write(folder: Path) -> None:
    """The release folder, random weights (float32, as the 0.9.8 files store them)."""
    layout = _layout()
    rng = np.random.default_rng(SEED)
    dit, vae, t5 = layout["dit"], layout["vae"], layout["text_encoder"]
    tensors = {**common.random_tensors(dit, rng, np.float32),
               **common.random_tensors(vae, rng, np.float32)}
    for key in tensors:
        if key.endswith("timestep_scale_multiplier"):   # the authors' 1000
            tensors[key] = np.full(tensors[key].shape, 1000, np.float32)
        elif key.endswith("per_channel_statistics.std-of-means"):   # a positive scale
            tensors[key] = (0.5 + rng.uniform(size=tensors[key].shape)).astype(np.float32)
    config = {"transformer": dit["config"], "vae": vae["config"],
              "scheduler": layout["scheduler"]["config"]}
    common.write_safetensors(folder / dit["file"], tensors,
                             metadata={"config": json.dumps(config)})
    common.write_safetensors(folder / t5["file"], common.random_tensors(t5, rng, np.float32))
    common.write_json(folder / "text_encoder" / "config.json", t5["config"])
    common.word_tokenizer(folder / "tokenizer", WORDS, SPECIALS, append=("</s>",),
                          config={"model_max_length": 512, "tokenizer_class": "T5Tokenizer"})
