"""The tiny CogVideoX text-to-video release of ``vidax demo cogvideox``, in the layout of
THUDM/CogVideoX-2b (a diffusers pipeline folder, what the authors publish):
``model_index.json``; ``transformer/``, ``vae/`` and ``text_encoder/``, each a ``config.json``
and a float16 safetensors file as ``save_pretrained`` writes them (the 2B release's dtype);
``scheduler/scheduler_config.json`` (the 2B's DDIM config); and a T5 ``tokenizer/`` folder as
the release ships it -- ``spiece.model`` (a SentencePiece unigram model over a small word list,
written here without sentencepiece), ``tokenizer_config.json``, ``special_tokens_map.json`` and
``added_tokens.json``, no ``tokenizer.json``. Key names, shapes and config files: recorded
from diffusers' and transformers' classes in ``vidax/data/tiny/cogvideox.json``.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from vidax.demo import common

TITLE = "CogVideoX-2b text-to-video"
FOLDER = "CogVideoX-2b-tiny"
SEED = 0
PROMPT = "a cat walks along a quiet beach at sunrise, the waves roll in slowly"
GENERATE = ("--prompt", PROMPT, "--frames", "9", "--size", "64x48", "--steps", "3",
            "--guidance-scale", "6", "--seed", str(SEED), "--fps", "8")
COMPONENTS = (("dit", "transformer/diffusion_pytorch_model.safetensors"),
              ("vae", "vae/diffusion_pytorch_model.safetensors"))
#: Components registered under another model type: (model type, component, file).
ENCODERS = (("t5", "encoder", "text_encoder/model.safetensors"),)

#: The SentencePiece model's words (each one piece, ``▁`` + word) and the letters (and two
#: punctuation marks) every other lower-case word falls back to; T5's control / unknown
#: pieces come first.
WORDS = ("a an the cat dog fox bird horse walks runs flies swims along across over through "
         "quiet busy beach field forest river city street sky at sunrise sunset night "
         "morning waves roll in slowly quickly camera pans zooms close up wide shot light "
         "golden snowy green").split()
LETTERS = tuple("abcdefghijklmnopqrstuvwxyz,.")
#: T5's tokenizer: ``<pad>`` 0, ``</s>`` 1, ``<unk>`` 2 (control, control, unknown) and, after
#: the pieces, ``EXTRA_IDS`` sentinels ``<extra_id_N>`` (the release: 100).
EXTRA_IDS = 10
_NORMAL, _UNKNOWN, _CONTROL = 1, 2, 3


def write(folder: Path) -> None:
    """The release folder, random weights; each file written atomically."""
    layout = common.tiny_layout("cogvideox")
    rng = np.random.default_rng(SEED)
    for key in ("dit", "vae", "text_encoder"):
        entry = layout[key]
        path = folder / entry["file"]
        common.write_safetensors(path, common.random_tensors(entry, rng, np.dtype(
            entry["dtype"])))
        common.write_json(path.parent / "config.json", entry["config"])
    for name, config in layout["dit"]["release_files"].items():
        common.write_json(folder / name, config)
    pieces = _write_tokenizer(folder / "tokenizer", layout["dit"]["config"]["max_text_seq_length"])
    vocab = layout["text_encoder"]["config"]["vocab_size"]
    assert pieces + EXTRA_IDS <= vocab, (pieces, vocab)


def _write_tokenizer(folder: Path, max_length: int) -> int:
    """``spiece.model`` and the three JSON files transformers' ``T5Tokenizer`` saves beside
    it; returns the piece count."""
    pieces = [("<pad>", 0.0, _CONTROL), ("</s>", 0.0, _CONTROL), ("<unk>", 0.0, _UNKNOWN)]
    pieces += [("\u2581" + w, -2.0 - 0.01 * i, _NORMAL) for i, w in enumerate(WORDS)]
    pieces += [("\u2581", -8.0, _NORMAL)] + [(c, -10.0, _NORMAL) for c in LETTERS]
    data = sentencepiece_model(pieces, unk_id=2, eos_id=1, pad_id=0)
    _write_bytes(folder / "spiece.model", data)
    sentinels = [f"<extra_id_{i}>" for i in range(EXTRA_IDS)]
    special = {"eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
               "additional_special_tokens": sentinels}
    common.write_json(folder / "special_tokens_map.json", special)
    common.write_json(folder / "tokenizer_config.json", {
        **special, "extra_ids": EXTRA_IDS, "legacy": True, "model_max_length": max_length,
        "clean_up_tokenization_spaces": True, "sp_model_kwargs": {},
        "tokenizer_class": "T5Tokenizer"})
    # the sentinels follow the pieces, <extra_id_0> last (transformers' T5Tokenizer)
    common.write_json(folder / "added_tokens.json",
                      {s: len(pieces) + EXTRA_IDS - 1 - i for i, s in enumerate(sentinels)})
    return len(pieces)


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    common._atomic(path, lambda tmp: Path(tmp).write_bytes(data))


# ----------------------------------------------------------------------------- spiece.model
def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1          # protobuf's int32 -1 is ten bytes of two's complement
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes | int) -> bytes:
    key = _varint(number << 3 | wire)
    if wire == 0:
        return key + _varint(payload)
    if wire == 5:
        return key + payload
    return key + _varint(len(payload)) + payload


def sentencepiece_model(pieces, *, unk_id: int, eos_id: int, pad_id: int,
                        bos_id: int = -1) -> bytes:
    """A SentencePiece ``ModelProto`` (the wire format of sentencepiece's
    ``sentencepiece_model.proto``): ``pieces`` ``(text, score, type)`` in id order; a unigram
    ``trainer_spec`` with the special ids; an ``identity`` ``normalizer_spec`` with the default
    whitespace handling (dummy prefix, extra whitespace removed, spaces escaped as ``▁``)."""
    out = b""
    for text, score, kind in pieces:
        out += _field(1, 2, _field(1, 2, text.encode()) + _field(2, 5, struct.pack("<f", score))
                      + _field(3, 0, kind))
    trainer = (_field(3, 0, 1) + _field(40, 0, unk_id) + _field(41, 0, bos_id)
               + _field(42, 0, eos_id) + _field(43, 0, pad_id))
    normalizer = (_field(1, 2, b"identity") + _field(3, 0, 1) + _field(4, 0, 1)
                  + _field(5, 0, 1))
    return out + _field(2, 2, trainer) + _field(3, 2, normalizer)
