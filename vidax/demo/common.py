"""What every family's demo shares: the recorded tiny layouts, random weights scaled like an
initialisation, atomic writers for the authors' containers (safetensors, ``torch.save``'s zip
written without torch), JSON config files and a word-level tokenizer folder.

Nothing here imports torch, diffusers or transformers: the demo runs in the runtime
environment (``requirements/runtime.lock``). The layouts it writes were recorded from the
authors' classes by ``scripts/make_tiny_layouts.py`` in the test environment.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np


def tiny_layout(name: str) -> dict:
    """``vidax/data/tiny/<name>.json``: component -> {"file", "tensors": key -> shape, ...}."""
    return json.loads(resources.files("vidax").joinpath(f"data/tiny/{name}.json").read_text())


def random_tensors(entry: Mapping, rng: np.random.Generator, dtype) -> dict[str, np.ndarray]:
    """Random values in every tensor of a layout entry (``entry["tensors"]``: key -> shape),
    scaled like an initialisation: matrices and kernels ~ 1/sqrt(fan-in), norm scales near 1,
    small biases, O(1) modulation tables and embeddings. Keys are drawn in sorted order, so
    the values depend only on the layout and the generator's state."""
    out = {}
    for key, shape in sorted(entry["tensors"].items()):
        noise = rng.standard_normal(shape)
        if key.endswith(("modulation", "scale_shift_table")):
            value = 0.5 * noise
        elif len(shape) >= 2 and not key.endswith(("embedding.weight", "embed_tokens.weight",
                                                    "shared.weight", "token_embedding.weight")):
            value = noise / np.sqrt(np.prod(shape[1:]))
        elif len(shape) >= 2:
            value = noise
        elif key.endswith(("weight", "gamma", "scale")):
            value = 1 + 0.1 * noise
        else:
            value = 0.1 * noise
        out[key] = np.asarray(value).astype(dtype)   # 0-d too (CLIP logit_scale)
    return out


def _atomic(path: Path, write) -> None:
    """``write(tmp)`` to a temporary name in ``path``'s folder, fsync, then rename over
    ``path``: an interrupted write leaves nothing at ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_safetensors(path: Path, tensors: Mapping[str, np.ndarray],
                      metadata: Mapping[str, str] | None = None) -> None:
    """A safetensors file, atomically; ``metadata`` defaults to ``{"format": "pt"}`` as the
    authors' ``save_file``/``save_pretrained`` write it."""
    import safetensors.numpy

    meta = dict(metadata) if metadata is not None else {"format": "pt"}
    _atomic(path, lambda tmp: safetensors.numpy.save_file(dict(tensors), tmp, metadata=meta))


def write_pth(path: Path, tensors: Mapping[str, np.ndarray], **kwargs) -> None:
    """A ``torch.save(state_dict)`` zip, atomically (``vidax.translator.io.save_pth``; its
    ``wrapper=`` passes through)."""
    from vidax.translator.io import save_pth

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_pth(path, tensors, **kwargs)


def write_json(path: Path, obj: Any) -> None:
    """A JSON config file (indent 2, a final newline, as ``save_pretrained`` writes), atomically."""
    text = json.dumps(obj, indent=2) + "\n"
    _atomic(path, lambda tmp: Path(tmp).write_text(text))


def word_tokenizer(folder: Path, words, specials: Mapping[str, Any], *,
                   specials_first: bool = True, extra_tokens=(), lowercase: bool = True,
                   append: tuple[str, ...] = (), prepend: tuple[str, ...] = (),
                   config: Mapping[str, Any] | None = None):
    """A release's tokenizer folder with a word-level vocabulary: ``tokenizer.json``,
    ``special_tokens_map.json`` and ``tokenizer_config.json``. Returns the Tokenizer.

    ``specials``: role -> token (or a list of tokens for ``additional_special_tokens``), in id
    order, e.g. T5's ``{"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}``
    (ids 0, 1, 2), Llama's ``{"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}``;
    ``specials_first=False`` puts them after the words, as Qwen's ``<|endoftext|>``,
    ``<|im_start|>``, ``<|im_end|>`` follow its vocabulary. ``extra_tokens``: more special
    tokens with ids but no role (placed with the specials). ``prepend``/``append``: special
    tokens the post-processor puts around every sequence (T5 appends ``</s>``, Llama prepends
    ``<s>``). ``config``: further ``tokenizer_config.json`` keys (``model_max_length``,
    ``chat_template``, ``tokenizer_class``, ...). Unknown words map to ``unk_token`` when
    there is one.
    """
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, processors

    special_tokens: list[str] = []
    for value in specials.values():
        for tok in ([value] if isinstance(value, str) else value):
            if tok not in special_tokens:
                special_tokens.append(tok)
    special_tokens += [t for t in extra_tokens if t not in special_tokens]
    plain = [w for w in dict.fromkeys(words) if w not in special_tokens]
    ordered = [*special_tokens, *plain] if specials_first else [*plain, *special_tokens]
    vocab = {tok: i for i, tok in enumerate(ordered)}
    unk = specials.get("unk_token")
    tok = Tokenizer(models.WordLevel(vocab, unk_token=unk) if unk else models.WordLevel(vocab))
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in special_tokens])
    if prepend or append:
        single = [*prepend, "$A", *append]
        pair = [*prepend, "$A", *append, "$B:1", *append]
        tok.post_processor = processors.TemplateProcessing(
            single=" ".join(single), pair=" ".join(pair),
            special_tokens=[(t, vocab[t]) for t in dict.fromkeys((*prepend, *append))])
    return _save_tokenizer(tok, folder, specials, config)


#: Qwen2's pre-tokenizer split (the ``Split`` regex of Qwen2 / Qwen2.5-VL's ``tokenizer.json``,
#: which transformers' ``Qwen2Tokenizer`` rebuilds: models/qwen2/tokenization_qwen2.py).
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
               r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def byte_level_tokenizer(folder: Path, texts, specials: Mapping[str, Any], *,
                         tokens=(), prepend: tuple[str, ...] = (),
                         config: Mapping[str, Any] | None = None, qwen2: bool = False):
    """A release's tokenizer folder with a byte-level BPE ``tokenizer.json`` (the kind
    Llama-3's and Qwen2's are: any text encodes, nothing is unknown), ``special_tokens_map.json``
    and ``tokenizer_config.json``. Returns the Tokenizer.

    The vocabulary is the 256 byte symbols and the merges the ``tokenizers`` library's BPE
    trainer learns from ``texts`` (those a pipeline sends: trained to the end, each of their
    words becomes one token), then the special tokens, after the vocabulary as those releases
    place them: ``tokens`` (the special tokens in id order), then any of ``specials`` (role ->
    token) not among them. The special tokens are cut out of ``texts`` before training.
    ``prepend``: special tokens the post-processor puts before every sequence (Llama-3's
    ``<|begin_of_text|>``). ``config``: further ``tokenizer_config.json`` keys
    (``chat_template``, ...). ``qwen2``: Qwen2's normalizer (NFC) and pre-tokenizer
    (:data:`QWEN2_SPLIT`, then bytes), the structure of Qwen2.5-VL's file. Deterministic:
    the same texts give the same file (the trainer breaks ties by pair, not by hash order)."""
    import re

    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from tokenizers import trainers

    special_tokens = list(dict.fromkeys([*tokens, *specials.values()]))
    cut = re.compile("|".join(re.escape(t) for t in special_tokens))
    pieces = [p for t in texts for p in cut.split(t) if p]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if qwen2:
        from tokenizers import Regex, normalizers

        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(pieces, trainers.BpeTrainer(
        vocab_size=1 << 20, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in special_tokens])
    if prepend:
        tok.post_processor = processors.TemplateProcessing(
            single=" ".join([*prepend, "$A"]), pair=" ".join([*prepend, "$A", *prepend, "$B:1"]),
            special_tokens=[(t, tok.token_to_id(t)) for t in dict.fromkeys(prepend)])
    return _save_tokenizer(tok, folder, specials, config)


def _save_tokenizer(tok, folder, specials: Mapping[str, Any], config) -> Any:
    """``tokenizer.json`` (atomically) with the ``special_tokens_map.json`` and
    ``tokenizer_config.json`` that name its special tokens; returns ``tok``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    text = tok.to_str(pretty=True)
    _atomic(folder / "tokenizer.json", lambda tmp: Path(tmp).write_text(text))
    write_json(folder / "special_tokens_map.json", dict(specials))
    write_json(folder / "tokenizer_config.json", {**dict(specials), **dict(config or {})})
    return tok
