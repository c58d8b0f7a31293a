"""Prompt -> token ids for the text encoders: the tokenizer a release ships, and the authors'
prompt cleaning.

:class:`Tokenizer` reads a release's tokenizer folder (Wan: ``google/umt5-xxl/``, holding
``tokenizer.json``, ``spiece.model``, ``tokenizer_config.json``, ``special_tokens_map.json``)
with the ``tokenizers`` library -- no transformers, no hub -- and reproduces what the Wan
authors' ``wan.modules.tokenizers.HuggingfaceTokenizer(name, seq_len, clean='whitespace')``
returns through transformers' T5 tokenizer:

* the prompt is cleaned (:func:`clean_whitespace`, their ``clean='whitespace'``);
* the ``tokenizer.json`` normaliser, pre-tokeniser and Unigram model split it into ids;
* ``</s>`` (EOS) is appended, as transformers' T5 tokenizer's post-processor does
  (``$A </s>``); vidax appends it itself, so a ``tokenizer.json`` saved without that
  post-processor gives the same ids;
* right truncation to ``seq_len`` keeps the first ``seq_len - 1`` tokens and the EOS
  (transformers' ``truncation=True`` counts the special token), then right padding with
  ``<pad>`` to ``seq_len``; the attention mask is 1 on the tokens and the EOS, 0 on padding.

One deliberate difference: the authors truncate silently; vidax warns and reports, per
prompt, how many tokens were dropped (:attr:`Tokens.dropped`).

``Tokenizer(folder)`` reads ``tokenizer.json`` only. Release folders that ship just the
SentencePiece model (CogVideoX's ``tokenizer/``: ``spiece.model``, ``tokenizer_config.json``,
``special_tokens_map.json``, ``added_tokens.json``) go through :func:`load_tokenizer`, which
takes ``tokenizer.json`` when there is one and otherwise builds the same ``tokenizers``
pipeline from ``spiece.model`` (:func:`sentencepiece_tokenizer`) the way transformers' T5
tokenizer does when it meets that file, read by a small protobuf reader of our own
(:func:`read_sentencepiece`): neither sentencepiece nor protobuf is needed at run time.

LTX-2.5 keeps its tokenizer inside its text-encoder file (uint8 tensors next to the Gemma 4
weights): :func:`gemma_assets` reads the config, ``tokenizer.json`` and sidecar bytes from the
file's memory map, and :class:`GemmaTokenizer` (:func:`gemma_tokenizer`) tokenizes as the
authors' Gemma 4 path does (a forced BOS, left padding to 1024).
"""

from __future__ import annotations

import html
import json
import os
import re
import struct
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vidax.errors import VidaxError
from vidax.translator.io.base import regular_file

CLEANERS = (None, "whitespace")

# The authors collapse whitespace with the ``regex`` module, whose ``\s`` is Unicode's
# White_Space property. Python's ``re`` ``\s`` (str.isspace) also matches the four
# separators U+001C..U+001F; excluding them gives exactly ``regex``'s class.
_WHITESPACE = re.compile(r"[^\S\x1c-\x1f]+")


def clean_whitespace(text: str) -> str:
    """The authors' ``clean='whitespace'``: ``whitespace_clean(basic_clean(text))`` of
    ``wan/modules/tokenizers.py``: ftfy's ``fix_text`` (mojibake, odd quotes, control
    characters), HTML entities unescaped twice (``&amp;amp;`` -> ``&``), every whitespace run
    -> one space, ends stripped."""
    try:
        import ftfy
    except ImportError as e:
        raise VidaxError("the prompt cleaning the Wan authors apply needs the ftfy package: "
                         "pip install ftfy (or vidax[text])") from e
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return _WHITESPACE.sub(" ", text).strip()


@dataclass(frozen=True)
class Tokens:
    """A tokenized batch, every row ``seq_len`` long.

    ``ids``: int32 ``[B, seq_len]``; ``mask``: int32 ``[B, seq_len]``, 1 on real tokens (EOS
    included), 0 on padding; ``dropped``: per prompt, the tokens truncation removed.
    """

    ids: np.ndarray
    mask: np.ndarray
    dropped: tuple[int, ...]

    @property
    def lengths(self) -> np.ndarray:
        """Real tokens per prompt (EOS included): what the authors' encoder keeps."""
        return self.mask.sum(axis=1)


#: How :class:`Tokenizer` adds special tokens (see its docstring).
SPECIAL_TOKENS = ("eos", "file", "none")


class Tokenizer:
    """A release's tokenizer folder, padding/truncating to ``seq_len`` (512 for Wan), right
    padding with the folder's pad token.

    ``clean``: ``"whitespace"`` (the authors' cleaning, the Wan default) or ``None``.
    ``special``: ``"eos"`` (T5 / UMT5: the text's ids, truncated to ``seq_len - 1``, then the
    EOS), ``"file"`` (the ``tokenizer.json``'s own post-processor adds its special tokens --
    Llama's BOS, CLIP's BOS and EOS -- and truncation keeps room for them, as transformers'
    fast tokenizer called with ``truncation=True, padding="max_length"``), or ``"none"`` (no
    special tokens: text already formatted, e.g. a chat template, cut to ``seq_len``).
    ``pad_token``: the padding token where the folder's JSON files name none (default T5's
    ``<pad>``). ``backend``: a ``tokenizers.Tokenizer`` built elsewhere
    (:func:`load_tokenizer` passes the one made from ``spiece.model``); by default the
    folder's ``tokenizer.json`` is read. The folder's JSON files name the EOS and padding
    tokens either way.
    """

    def __init__(self, folder: str | os.PathLike, *, seq_len: int,
                 clean: str | None = "whitespace", backend=None, special: str = "eos",
                 pad_token: str = "<pad>"):
        from tokenizers import Tokenizer as _Backend

        if clean not in CLEANERS:
            raise VidaxError(f"unknown prompt cleaning {clean!r}; choose one of {CLEANERS}")
        if special not in SPECIAL_TOKENS:
            raise VidaxError(f"unknown special-token mode {special!r}; choose one of "
                             f"{SPECIAL_TOKENS}")
        if seq_len < 1:
            raise VidaxError(f"seq_len must be at least 1 (room for the EOS), got {seq_len}")
        self.folder, self.seq_len, self.clean = Path(folder), seq_len, clean
        self.special = special
        path = self.folder / "tokenizer.json"
        if backend is not None:
            self._source, self._backend = self.folder, backend
        elif not path.is_file():
            found = sorted(p.name for p in self.folder.iterdir()) if self.folder.is_dir() else None
            raise VidaxError(
                f"{self.folder}: no tokenizer.json "
                + ("(the folder does not exist)" if found is None else
                   f"(the folder holds: {', '.join(found) or 'nothing'})")
                + ". vidax reads the tokenizers-library file a release ships (Wan: "
                "google/umt5-xxl/tokenizer.json); a folder with only spiece.model can be "
                "converted once with transformers: "
                "AutoTokenizer.from_pretrained(folder).save_pretrained(folder), or read "
                "directly with vidax.text.load_tokenizer(folder, ...)")
        else:
            self._source = path
            try:
                self._backend = _Backend.from_file(str(path))
            except Exception as e:  # the Rust side raises a bare Exception on a malformed file
                raise VidaxError(f"{path}: not a readable tokenizers file ({e})") from e
        self._backend.no_padding()
        if special == "eos":
            self._backend.no_truncation()
        else:
            self._backend.enable_truncation(seq_len)
        named = self._special_tokens()
        self.eos_id = (self._token_id(named.get("eos_token", "</s>"), "EOS")
                       if special == "eos" else None)
        self.pad_id = self._token_id(named.get("pad_token", pad_token), "padding")

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def _special_tokens(self) -> dict[str, str]:
        """The EOS / pad token strings as ``special_tokens_map.json`` and
        ``tokenizer_config.json`` name them (released folders name the same ones in both);
        T5's ``</s>`` / ``<pad>`` when neither does."""
        out: dict[str, str] = {}
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            path = self.folder / name
            if not path.is_file():
                continue
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise VidaxError(f"{path}: not readable JSON ({e})") from e
            for key in ("eos_token", "pad_token"):
                value = data.get(key)
                if isinstance(value, dict):       # a serialised AddedToken
                    value = value.get("content")
                if isinstance(value, str):
                    out[key] = value
        return out

    def _token_id(self, token: str, role: str) -> int:
        token_id = self._backend.token_to_id(token)
        if token_id is None:
            raise VidaxError(f"{self._source}: the {role} token {token!r} is not in the "
                             "vocabulary")
        return token_id

    def __call__(self, texts: str | Sequence[str]) -> Tokens:
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if self.clean == "whitespace":
            texts = [clean_whitespace(t) for t in texts]
        encodings = self._backend.encode_batch(texts, add_special_tokens=self.special == "file")
        ids = np.full((len(texts), self.seq_len), self.pad_id, np.int32)
        mask = np.zeros((len(texts), self.seq_len), np.int32)
        dropped = []
        for row, enc in enumerate(encodings):
            if self.special == "eos":
                tokens = enc.ids[: self.seq_len - 1] + [self.eos_id]
                dropped.append(len(enc.ids) + 1 - len(tokens))
            else:   # the backend truncated (its overflow repeats the post-processor's tokens)
                tokens = enc.ids
                dropped.append(sum(len(o.ids) - sum(o.special_tokens_mask)
                                   for o in enc.overflowing))
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        for row, n in enumerate(dropped):
            if n:
                warnings.warn(
                    f"prompt {row} is {n + self.seq_len} tokens long, more than the text "
                    f"encoder's {self.seq_len}: its last {n} tokens were dropped",
                    UserWarning, stacklevel=2)
        return Tokens(ids, mask, tuple(dropped))


# ----------------------------------------------------------------------------- spiece.model
SENTENCEPIECE_FILE = "spiece.model"

# sentencepiece_model.proto's SentencePiece.Type and TrainerSpec.ModelType values
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED = 1, 2, 3, 4
_UNIGRAM = 1
_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


@dataclass(frozen=True)
class SentencePieceModel:
    """What vidax reads of a SentencePiece ``ModelProto`` (``sentencepiece_model.proto``).

    ``pieces``: ``(piece, score, type)`` in id order. Unset fields keep the proto2 defaults
    the file format declares (a missing ``add_dummy_prefix`` means true, ``unk_id`` 0, ...).
    """

    pieces: tuple[tuple[str, float, int], ...]
    model_type: int = _UNIGRAM
    unk_id: int = 0
    byte_fallback: bool = False
    precompiled_charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True


class _Proto:
    """The protobuf wire format, just enough of it to walk one message's fields."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, problem: str):
        raise VidaxError(f"{self.path}: not a readable SentencePiece model ({problem})")

    def varint(self, buf: bytes, pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            if pos >= len(buf):
                self.fail("a number runs past the end of its message: the file is truncated")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7
            if shift > 63:
                self.fail("a number is longer than 10 bytes")

    def fields(self, buf: bytes):
        """``(field number, wire type, value)`` of each field: an int for varints, bytes for
        length-delimited and fixed-width fields."""
        pos = 0
        while pos < len(buf):
            key, pos = self.varint(buf, pos)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, pos = self.varint(buf, pos)
            elif wire in (1, 2, 5):
                if wire == 2:
                    size, pos = self.varint(buf, pos)
                else:
                    size = 8 if wire == 1 else 4
                if pos + size > len(buf):
                    self.fail(f"field {number} runs past the end of its message: the file "
                              "is truncated")
                value, pos = buf[pos:pos + size], pos + size
            else:  # 3/4: groups, which sentencepiece_model.proto never uses; 6/7 do not exist
                self.fail(f"field {number} has wire type {wire}")
            yield number, wire, value

    def check(self, message: str, number: int, wire: int, expected: int):
        if wire != expected:
            self.fail(f"{message} field {number} has wire type {wire}, expected {expected}")


def _int32(value: int) -> int:
    """A varint read as protobuf's int32: negatives are sign-extended to 64 bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


def read_sentencepiece(path: str | os.PathLike) -> SentencePieceModel:
    """Read a SentencePiece model file (``spiece.model``) without sentencepiece or protobuf.

    Reads ``ModelProto.pieces`` (1), and of ``trainer_spec`` (2) the model type, ``unk_id``
    and ``byte_fallback``, of ``normalizer_spec`` (3) the precompiled character map and the
    whitespace flags; every other field is skipped.
    """
    path = regular_file(path, "SentencePiece model")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise VidaxError(f"{path}: cannot read the SentencePiece model ({e})") from e
    proto = _Proto(path)
    pieces, trainer, normalizer = [], {}, {}
    for number, wire, value in proto.fields(data):
        if number == 1:
            proto.check("ModelProto", number, wire, 2)
            piece, score, kind = None, 0.0, _NORMAL
            for n, w, v in proto.fields(value):
                if n == 1:
                    proto.check("SentencePiece", n, w, 2)
                    try:
                        piece = v.decode("utf-8")
                    except UnicodeDecodeError:
                        proto.fail(f"piece {len(pieces)} is not UTF-8")
                elif n == 2:
                    proto.check("SentencePiece", n, w, 5)
                    score = struct.unpack("<f", v)[0]
                elif n == 3:
                    proto.check("SentencePiece", n, w, 0)
                    kind = v
            if piece is None:
                proto.fail(f"piece {len(pieces)} has no text")
            pieces.append((piece, score, kind))
        elif number == 2:
            proto.check("ModelProto", number, wire, 2)
            for n, w, v in proto.fields(value):
                if n in (3, 35, 40):  # model_type, byte_fallback, unk_id
                    proto.check("TrainerSpec", n, w, 0)
                    trainer[n] = v
        elif number == 3:
            proto.check("ModelProto", number, wire, 2)
            for n, w, v in proto.fields(value):
                if n == 2:  # precompiled_charsmap
                    proto.check("NormalizerSpec", n, w, 2)
                    normalizer[n] = v
                elif n in (3, 4, 5):  # add_dummy_prefix, remove_extra_whitespaces, escape_...
                    proto.check("NormalizerSpec", n, w, 0)
                    normalizer[n] = v
    if not pieces:
        proto.fail("it holds no pieces")
    model = SentencePieceModel(
        pieces=tuple(pieces), model_type=trainer.get(3, _UNIGRAM),
        unk_id=_int32(trainer.get(40, 0)), byte_fallback=bool(trainer.get(35, 0)),
        precompiled_charsmap=normalizer.get(2, b""),
        add_dummy_prefix=bool(normalizer.get(3, 1)),
        remove_extra_whitespaces=bool(normalizer.get(4, 1)),
        escape_whitespaces=bool(normalizer.get(5, 1)))
    if not 0 <= model.unk_id < len(pieces):
        proto.fail(f"unk_id {model.unk_id} is outside its {len(pieces)} pieces")
    return model


def sentencepiece_tokenizer(path: str | os.PathLike, *, extra_ids: int = 100,
                            eos_token: str = "</s>"):
    """A ``tokenizers.Tokenizer`` equal to transformers' T5 tokenizer built from the
    SentencePiece model ``path`` (``T5Tokenizer.from_pretrained`` on a folder holding only
    ``spiece.model``: transformers' ``SentencePieceExtractor`` + ``T5Converter.convert_from_spm``
    + ``T5Tokenizer.__init__``).

    * Unigram over the file's pieces and scores, then ``extra_ids`` sentinels
      ``<extra_id_{extra_ids-1}> ... <extra_id_0>`` (score 0) after them;
    * the normaliser is the file's precompiled character map (NFKC and friends), nothing else;
    * pre-tokeniser: split on whitespace, then each word gets the ``▁`` prefix (Metaspace).
      For a model with SentencePiece's default whitespace flags (dummy prefix, extra
      whitespace removed, spaces escaped -- T5's, UMT5's) this segments like SentencePiece;
      files with other flags are refused, as T5's tokenizer would silently ignore them;
    * the unknown and control pieces (``<unk>``, ``<pad>``, ``</s>``) and the sentinels are
      special tokens matched in the raw text; user-defined pieces are matched as plain added
      tokens;
    * post-processor ``$A </s>`` (``$A </s> $B </s>`` for pairs);
    * byte fallback is off, as in transformers' T5 tokenizer, even where the file turns it on.
    """
    from tokenizers import AddedToken, Tokenizer as _Backend, decoders, normalizers
    from tokenizers import pre_tokenizers, processors
    from tokenizers.models import Unigram

    path = Path(path)
    model = read_sentencepiece(path)
    if model.model_type != _UNIGRAM:
        raise VidaxError(
            f"{path}: a SentencePiece {_MODEL_TYPES.get(model.model_type, model.model_type)} "
            "model; vidax builds T5-style tokenizers, which are Unigram models")
    flags = {"add_dummy_prefix": model.add_dummy_prefix,
             "remove_extra_whitespaces": model.remove_extra_whitespaces,
             "escape_whitespaces": model.escape_whitespaces}
    off = [name for name, on in flags.items() if not on]
    if off:
        raise VidaxError(
            f"{path}: the SentencePiece normaliser has {', '.join(off)} turned off; vidax's "
            "T5-style tokenizer splits on whitespace and prefixes every word with '▁', which "
            "only reproduces SentencePiece with these flags on")
    if extra_ids < 0:
        raise VidaxError(f"extra_ids must be >= 0, got {extra_ids}")
    sentinels = [f"<extra_id_{i}>" for i in reversed(range(extra_ids))]
    vocab = [(piece, score) for piece, score, _ in model.pieces] + [(s, 0.0) for s in sentinels]
    backend = _Backend(Unigram(vocab, unk_id=model.unk_id, byte_fallback=False))
    if model.precompiled_charsmap:
        backend.normalizer = normalizers.Precompiled(model.precompiled_charsmap)
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)])
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    special = [p for p, _, kind in model.pieces if kind in (_UNKNOWN, _CONTROL)] + sentinels
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    backend.add_tokens([AddedToken(p, normalized=False) for p, _, kind in model.pieces
                        if kind == _USER_DEFINED])
    eos_id = backend.token_to_id(eos_token)
    if eos_id is None:
        raise VidaxError(f"{path}: the EOS token {eos_token!r} is not one of its pieces")
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {eos_token}", pair=f"$A {eos_token} $B {eos_token}",
        special_tokens=[(eos_token, eos_id)])
    return backend


def load_tokenizer(folder: str | os.PathLike, *, seq_len: int,
                   clean: str | None = "whitespace") -> Tokenizer:
    """The folder's :class:`Tokenizer`: from ``tokenizer.json`` when the folder has one, else
    from ``spiece.model`` (:func:`sentencepiece_tokenizer`), with the sentinel count of
    ``tokenizer_config.json``'s ``extra_ids`` (default 100, as transformers' T5 tokenizer) and,
    where the folder has ``added_tokens.json``, every id it lists checked against the result."""
    folder = Path(folder)
    model_file = folder / SENTENCEPIECE_FILE
    if (folder / "tokenizer.json").is_file() or not model_file.is_file():
        return Tokenizer(folder, seq_len=seq_len, clean=clean)
    config_file = folder / "tokenizer_config.json"
    extra_ids = 100
    if config_file.is_file():
        config = _read_json(config_file)
        extra_ids = config.get("extra_ids", extra_ids)
        if not isinstance(extra_ids, int) or isinstance(extra_ids, bool):
            raise VidaxError(f"{config_file}: extra_ids must be an integer, got {extra_ids!r}")
    backend = sentencepiece_tokenizer(model_file, extra_ids=extra_ids)
    added_file = folder / "added_tokens.json"
    if added_file.is_file():
        for token, token_id in _read_json(added_file).items():
            if backend.token_to_id(token) != token_id:
                raise VidaxError(
                    f"{added_file}: {token!r} has id {token_id}, but {model_file} with "
                    f"{extra_ids} sentinels (tokenizer_config.json's extra_ids) gives it "
                    f"{backend.token_to_id(token)}")
    return Tokenizer(folder, seq_len=seq_len, clean=clean, backend=backend)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(regular_file(path, "JSON file").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise VidaxError(f"{path}: not readable JSON ({e})") from e
    if not isinstance(data, dict):
        raise VidaxError(f"{path}: expected a JSON object")
    return data


# ----------------------------------------------------------------------------- LTX-2.5's Gemma 4
#: Where LTX-2.5's text-encoder file keeps its tokenizer and Hugging Face files (the authors'
#: packer, Lightricks/LTX-2@400fd31 ltx_core/text_encoders/gemma/gemma_assets.py):
#: ``__metadata__["gemma_config"]`` the HF config JSON, the uint8 tensor ``tokenizer_json``
#: the ``tokenizer.json`` bytes, ``hf_asset__<name>`` each sidecar file's bytes.
GEMMA_TOKENIZER_KEY = "tokenizer_json"
GEMMA_ASSET_PREFIX = "hf_asset__"
#: ltx-core's ``TOKENIZER_MAX_LENGTH``: LTX-2.5 prompts are padded to 1024 tokens.
GEMMA_SEQ_LEN = 1024
#: Sidecars older packs may keep as metadata strings instead (ltx-core's fallback).
_GEMMA_METADATA_SIDECARS = ("tokenizer_config.json", "processor_config.json",
                            "chat_template.jinja", "generation_config.json")


@dataclass(frozen=True)
class GemmaAssets:
    """What LTX-2.5's text-encoder file carries besides weights (:func:`gemma_assets`):
    ``config`` the HF config dict (``gemma_config``), ``tokenizer_json`` the bytes of
    ``tokenizer.json``, ``sidecars`` file name -> bytes (``tokenizer_config.json``, ...)."""

    source: str
    config: dict
    tokenizer_json: bytes
    sidecars: dict

    def sidecar_json(self, name: str) -> dict:
        if name not in self.sidecars:
            raise VidaxError(f"{self.source}: no {name} (tensor {GEMMA_ASSET_PREFIX}{name}); "
                             f"the file holds {sorted(self.sidecars) or 'no sidecar files'}")
        try:
            data = json.loads(self.sidecars[name])
        except ValueError as e:
            raise VidaxError(f"{self.source}: {GEMMA_ASSET_PREFIX}{name} is not valid JSON "
                             f"({e})") from e
        if not isinstance(data, dict):
            raise VidaxError(f"{self.source}: {GEMMA_ASSET_PREFIX}{name} is not a JSON object")
        return data


def _asset_bytes(ref, source: str, key: str) -> bytes:
    if len(ref.shape) != 1 or str(ref.dtype) not in ("uint8", "int8"):
        raise VidaxError(f"{source}: tensor {key!r} should hold file bytes (1-D uint8), found "
                         f"{ref.dtype} of shape {list(ref.shape)}")
    return ref.read().view(np.uint8).tobytes()    # int8 (some Comfy packs): the same bytes


def gemma_assets(path: str | os.PathLike) -> GemmaAssets:
    """Read the config, tokenizer and sidecar files of an LTX-2.5 text-encoder file
    (``gemma4-12b-with-proj-ltx-2.5-bf16.safetensors``) from its memory map: only those
    tensors' pages are read. A missing ``gemma_config`` or ``tokenizer_json``, unreadable JSON
    or a tensor that is not bytes is a ``VidaxError`` naming the file and the key (as
    ltx-core's ``GemmaAssets.from_single_file`` refuses them)."""
    from vidax.models.gemma.config import GEMMA_CONFIG_KEY, gemma_config_json
    from vidax.translator.io import open_checkpoint

    source = str(path)
    with open_checkpoint(path) as ckpt:
        metadata = dict(ckpt.metadata)
        config = gemma_config_json(metadata, source)
        if config is None:
            raise VidaxError(f"{source}: no safetensors metadata {GEMMA_CONFIG_KEY!r} (the HF "
                             "config JSON an LTX-2.5 text-encoder file carries); is this the "
                             "gemma4-12b-with-proj-ltx-2.5 file?")
        if GEMMA_TOKENIZER_KEY not in ckpt:
            raise VidaxError(f"{source}: no tensor {GEMMA_TOKENIZER_KEY!r} (the tokenizer.json "
                             "bytes an LTX-2.5 text-encoder file carries)")
        tokenizer_json = _asset_bytes(ckpt[GEMMA_TOKENIZER_KEY], source, GEMMA_TOKENIZER_KEY)
        sidecars = {key[len(GEMMA_ASSET_PREFIX):]: _asset_bytes(ckpt[key], source, key)
                    for key in ckpt if key.startswith(GEMMA_ASSET_PREFIX)}
    for name in _GEMMA_METADATA_SIDECARS:
        if name not in sidecars and isinstance(metadata.get(name), str):
            sidecars[name] = metadata[name].encode()
    return GemmaAssets(source, config, tokenizer_json, sidecars)


class GemmaTokenizer:
    """LTX-2.5's prompt tokenization, from the tokenizer in its text-encoder file, without
    transformers: what ltx-core's ``LTXGemmaTokenizer.tokenize_with_weights`` returns for each
    prompt (Lightricks/LTX-2@400fd31 ltx_core/text_encoders/gemma/tokenizer.py, the tokenizer
    built by ``build_gemma_hf_tokenizer``: transformers' fast tokenizer over the file's
    ``tokenizer.json`` with ``tokenizer_config.json``'s settings).

    * the prompt's ends are stripped (``str.strip``), it is encoded with the special tokens
      of the post-processor -- the ``tokenizer.json``'s own, or, where
      ``tokenizer_config.json`` sets ``add_bos_token`` / ``add_eos_token`` or the file has
      none, the one transformers builds from those flags -- truncated to ``seq_len``
      (transformers' ``truncation=True``, on ``truncation_side``);
    * a ``<bos>`` is put first unless the ids already start with it (Gemma 4's
      post-processor adds none), the ids cut to ``seq_len`` again;
    * left padding to ``seq_len`` (1024) with the pad token (the EOS where none is named);
      the mask is 1 on the tokens, 0 on the padding.

    ``ltx-core`` 1.0.0 (Gemma 3, ``LTXVGemmaTokenizer``) relied on the post-processor for the
    BOS; the Gemma 4 path forces it. ``__call__(texts)`` returns :class:`Tokens` (``dropped``:
    per prompt, the tokens truncation removed, with a warning, where the authors drop them
    silently); ``seq_len``, ``pad_id``, ``bos_id``, ``vocab_size`` as :class:`Tokenizer`'s.
    """

    def __init__(self, assets: GemmaAssets | str | os.PathLike, *,
                 seq_len: int = GEMMA_SEQ_LEN):
        from tokenizers import Tokenizer as _Backend, processors

        if not isinstance(assets, GemmaAssets):
            assets = gemma_assets(assets)
        if seq_len < 1:
            raise VidaxError(f"seq_len must be at least 1 (room for the BOS), got {seq_len}")
        self.assets, self.seq_len = assets, seq_len
        where = f"{assets.source}: tensor {GEMMA_TOKENIZER_KEY!r}"
        try:
            backend = _Backend.from_buffer(assets.tokenizer_json)
        except Exception as e:  # the Rust side raises a bare Exception on malformed bytes
            raise VidaxError(f"{where} is not a readable tokenizer.json ({e})") from e
        settings = assets.sidecar_json("tokenizer_config.json")
        named = {}
        for role in ("bos_token", "eos_token", "pad_token", "unk_token"):
            value = settings.get(role)
            if isinstance(value, dict):           # a serialised AddedToken
                value = value.get("content")
            if isinstance(value, str):
                if backend.token_to_id(value) is None:
                    raise VidaxError(f"{where}: tokenizer_config.json's {role} {value!r} is "
                                     "not in the vocabulary")
                named[role] = value
        if "bos_token" not in named:
            raise VidaxError(f"{assets.source}: tokenizer_config.json names no bos_token; "
                             "LTX-2.5's prompts start with one")
        pad = named.get("pad_token", named.get("eos_token"))
        if pad is None:
            raise VidaxError(f"{assets.source}: tokenizer_config.json names neither a "
                             "pad_token nor an eos_token to pad with")
        self.bos_id, self.pad_id = backend.token_to_id(named["bos_token"]), backend.token_to_id(pad)
        flags = {k: bool(settings.get(k, False)) for k in ("add_bos_token", "add_eos_token")}
        if backend.post_processor is None or {"add_bos_token", "add_eos_token"} & settings.keys():
            # transformers' TokenizersBackend.update_post_processor
            bos, eos = named.get("bos_token"), named.get("eos_token")
            use_bos, use_eos = flags["add_bos_token"], flags["add_eos_token"] and eos is not None
            single = " ".join([f"{bos}:0"] * use_bos + ["$A:0"] + [f"{eos}:0"] * use_eos)
            pair = single + "".join([f" {bos}:1"] * use_bos + [" $B:1"] + [f" {eos}:1"] * use_eos)
            backend.post_processor = processors.TemplateProcessing(
                single=single, pair=pair,
                special_tokens=[(t, backend.token_to_id(t)) for t, on in
                                ((bos, use_bos), (eos, use_eos)) if on])
        side = settings.get("truncation_side", "right")
        if side not in ("left", "right"):
            raise VidaxError(f"{assets.source}: tokenizer_config.json truncation_side {side!r}")
        backend.no_padding()
        backend.enable_truncation(seq_len, direction=side)
        backend.encode_special_tokens = bool(settings.get("split_special_tokens", False))
        self._backend = backend

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def __call__(self, texts: str | Sequence[str]) -> Tokens:
        if isinstance(texts, str):
            texts = [texts]
        texts = [t.strip() for t in texts]
        encodings = self._backend.encode_batch(texts, add_special_tokens=True)
        ids = np.full((len(texts), self.seq_len), self.pad_id, np.int32)
        mask = np.zeros((len(texts), self.seq_len), np.int32)
        dropped = []
        for row, enc in enumerate(encodings):
            tokens = list(enc.ids)
            lost = sum(len(o.ids) - sum(o.special_tokens_mask) for o in enc.overflowing)
            if not tokens or tokens[0] != self.bos_id:
                lost += max(0, len(tokens) + 1 - self.seq_len)
                tokens = [self.bos_id, *tokens][: self.seq_len]
            ids[row, self.seq_len - len(tokens):] = tokens          # left padding
            mask[row, self.seq_len - len(tokens):] = 1
            dropped.append(lost)
        for row, n in enumerate(dropped):
            if n:
                warnings.warn(f"prompt {row} is {n + self.seq_len} tokens long, more than the "
                              f"text encoder's {self.seq_len}: {n} tokens were dropped",
                              UserWarning, stacklevel=2)
        return Tokens(ids, mask, tuple(dropped))


def gemma_tokenizer(path: str | os.PathLike, *, seq_len: int = GEMMA_SEQ_LEN) -> GemmaTokenizer:
    """The :class:`GemmaTokenizer` of an LTX-2.5 text-encoder file (:func:`gemma_assets`)."""
    return GemmaTokenizer(gemma_assets(path), seq_len=seq_len)
