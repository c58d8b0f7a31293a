"""HunyuanVideo-1.5's glyph text: the quoted strings of a prompt, formatted and tokenized for the
byT5 encoder (Glyph-SDXL-v2's byT5 with color and font tokens), without transformers.

Sources: the authors' Tencent-Hunyuan/HunyuanVideo-1.5@60783e70
``hyvideo/pipelines/hunyuan_video_pipeline.py`` (``_extract_glyph_texts``,
``_process_single_byt5_prompt``, ``get_byt5_text_tokens``),
``hyvideo/models/text_encoders/byT5/format_prompt.py`` (``MultilingualPromptFormat.format_prompt``)
and ``byT5/__init__.py`` (``add_special_token``); transformers 5.24 ``ByT5Tokenizer`` and its
``PythonBackend`` base (the slow-tokenizer path the authors' ``AutoTokenizer`` gives for byT5).

* :func:`glyph_texts`: every ``"..."`` or ``“...”`` span of the prompt (non-greedy, a straight
  quote pair tried before a curly one at each position), de-duplicated in order when there is
  more than one; :func:`glyph_prompt`: those formatted as ``Text "a". Text "b". `` (the
  authors' format with no color and no font), ``None`` when the prompt quotes nothing -- the
  pipeline then feeds the DiT all-zero byT5 states and an all-zero mask.
* :class:`ByT5GlyphTokenizer`: byT5's vocabulary (pad 0, EOS 1, unk 2, the 256 UTF-8 bytes at
  +3, ``<extra_id_0..N-1>`` from 259) plus the tokens ``add_special_token`` adds after it:
  ``<color-{i}>`` for each entry of ``color_idx.json``, then ``<{code[:2]}-font-{idx}>`` for each
  entry of ``multilingual_10-lang_idx.json`` in file order (1510 ids in the release). Added
  tokens inside the text are matched as transformers' trie matches them (leftmost, longest
  first), with the strip flags of the folder's files; the rest is UTF-8 bytes. As the authors
  call it (``padding="max_length"``, ``max_length=256``, ``truncation=True``,
  ``add_special_tokens=True``): the ids cut to 255, the EOS appended unless the ids already end
  with one, right padding with ``<pad>``; the mask is 1 on the tokens and the EOS.

One deliberate difference: the authors truncate silently; vidax warns (as
:class:`vidax.text.Tokenizer` does) and reports the dropped tokens in :attr:`Tokens.dropped`.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vidax.errors import VidaxError
from vidax.text import Tokens

#: The authors' quote pattern: a straight-quoted span, else a curly-quoted one (non-greedy).
_QUOTED = re.compile(r"\"(.*?)\"|“(.*?)”")

#: byT5's fixed layout (transformers' ``ByT5Tokenizer``): three specials, then the bytes.
BYTE_OFFSET = 3
BYT5_SPECIALS = (("pad_token", "<pad>"), ("eos_token", "</s>"), ("unk_token", "<unk>"))
GLYPH_SEQ_LEN = 256
COLOR_FILE = "assets/color_idx.json"
FONT_FILE = "assets/multilingual_10-lang_idx.json"


def glyph_texts(prompt: str) -> list[str]:
    """The prompt's quoted strings (``"..."`` or ``“...”``), in order; de-duplicated (first
    occurrence kept) when there are two or more. An empty pair ``""`` counts as an empty
    string, as in the authors' ``_extract_glyph_texts``."""
    found = [straight or curly for straight, curly in _QUOTED.findall(prompt)]
    return list(dict.fromkeys(found)) if len(found) > 1 else found


def glyph_prompt(prompt: str) -> str | None:
    """The byT5 input of a prompt: ``Text "a". Text "b". `` for its quoted strings (the
    authors' ``format_prompt`` with color and font None), ``None`` when it quotes nothing."""
    texts = glyph_texts(prompt)
    if not texts:
        return None
    return "".join(f'Text "{text}". ' for text in texts)


@dataclass(frozen=True)
class AddedToken:
    """A token matched whole inside the text. ``lstrip`` / ``rstrip``: the whitespace before /
    after it is removed (transformers' ``AddedToken`` flags)."""

    content: str
    id: int
    lstrip: bool = False
    rstrip: bool = False


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise VidaxError(f"{path}: cannot read the {what} ({e})") from e
    except ValueError as e:
        raise VidaxError(f"{path}: the {what} is not valid JSON ({e})") from e


def _named_token(value, path: Path, key: str) -> tuple[str, bool | None, bool | None]:
    """``(content, lstrip, rstrip)`` of a special token as a tokenizer JSON file names it: a
    plain string (flags None: the class decides) or a serialised ``AddedToken``."""
    if isinstance(value, str):
        return value, None, None
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        if value.get("single_word"):
            raise VidaxError(f"{path}: {key} is single_word, which vidax's byT5 tokenizer does "
                             "not implement")
        return value["content"], bool(value.get("lstrip", False)), bool(value.get("rstrip", False))
    raise VidaxError(f"{path}: {key} is {value!r}, expected a token string or an AddedToken "
                     "object with a 'content' string")


def byt5_added_tokens(byt5_dir: str | os.PathLike) -> list[AddedToken]:
    """The added tokens of a byT5 tokenizer folder (``google/byt5-small``:
    ``tokenizer_config.json``, ``special_tokens_map.json``) as transformers' ``ByT5Tokenizer``
    builds them: pad / EOS / unk at 0 / 1 / 2 (a plain string gets ``lstrip=rstrip=True``, as
    the class forces), then ``additional_special_tokens`` (default ``<extra_id_i>`` for
    ``extra_ids``, 125) from id 259. ``special_tokens_map.json`` overrides
    ``tokenizer_config.json`` key by key; a saved ``added_tokens_decoder`` fixes every id."""
    folder = Path(byt5_dir)
    if not folder.is_dir():
        raise VidaxError(f"{folder}: no byT5 tokenizer folder (expected the release's "
                         "text_encoder/byt5-small/ with tokenizer_config.json)")
    config_path, map_path = folder / "tokenizer_config.json", folder / "special_tokens_map.json"
    if not config_path.is_file() and not map_path.is_file():
        raise VidaxError(f"{folder}: neither tokenizer_config.json nor special_tokens_map.json "
                         "(google/byt5-small ships both)")
    settings = _read_json(config_path, "tokenizer config") if config_path.is_file() else {}
    if not isinstance(settings, dict):
        raise VidaxError(f"{config_path}: expected a JSON object")
    if "added_tokens_decoder" in settings:
        return _saved_decoder(settings["added_tokens_decoder"], config_path)
    if map_path.is_file():
        named = _read_json(map_path, "special tokens map")
        if not isinstance(named, dict):
            raise VidaxError(f"{map_path}: expected a JSON object")
        settings = {**settings, **named}
    tokens = []
    for i, (key, default) in enumerate(BYT5_SPECIALS):
        content, lstrip, rstrip = _named_token(settings.get(key, default), config_path, key)
        tokens.append(AddedToken(content, i, lstrip is not False, rstrip is not False))
    extra_ids = settings.get("extra_ids", 125)
    extra = settings.get("additional_special_tokens")
    if not isinstance(extra_ids, int) or extra_ids < 0:
        raise VidaxError(f"{config_path}: extra_ids is {extra_ids!r}, expected a count")
    if not extra:
        extra = [f"<extra_id_{i}>" for i in range(extra_ids)]
    elif extra_ids and len({str(t) for t in extra if "extra_id" in str(t)}) != extra_ids:
        raise VidaxError(f"{config_path}: additional_special_tokens holds a different number "
                         f"of <extra_id_*> tokens than extra_ids ({extra_ids}), which "
                         "ByT5Tokenizer refuses")
    vocab = _vocab(tokens)
    for value in extra:
        content, lstrip, rstrip = _named_token(value, config_path, "additional_special_tokens")
        _add(tokens, vocab, content, bool(lstrip), bool(rstrip))
    return tokens


def _saved_decoder(decoder, path: Path) -> list[AddedToken]:
    if not isinstance(decoder, dict):
        raise VidaxError(f"{path}: added_tokens_decoder must map ids to tokens")
    tokens = []
    for key, value in decoder.items():
        content, lstrip, rstrip = _named_token(value, path, f"added_tokens_decoder[{key}]")
        try:
            tokens.append(AddedToken(content, int(key), bool(lstrip), bool(rstrip)))
        except ValueError as e:
            raise VidaxError(f"{path}: added_tokens_decoder key {key!r} is not an id") from e
    return sorted(tokens, key=lambda t: t.id)


def _vocab(tokens: list[AddedToken]) -> dict[str, int]:
    """transformers' ``ByT5Tokenizer.get_vocab()``: the ids below the bytes' end by their token
    string (an added token there, else the byte's character), then every added token."""
    by_id = {t.id: t.content for t in tokens}
    vocab = {by_id.get(i, chr(i - BYTE_OFFSET) if i >= BYTE_OFFSET else ""): i
             for i in range(256 + BYTE_OFFSET)}
    vocab.update({t.content: t.id for t in tokens})
    return vocab


def _add(tokens: list[AddedToken], vocab: dict[str, int], content: str, lstrip=False,
         rstrip=False) -> None:
    """``add_tokens([content], special_tokens=True)``: skipped when already an added token,
    else the next id (the vocabulary's size) unless the string is in the vocabulary."""
    if not content or any(t.content == content for t in tokens):
        return
    token_id = vocab.get(content)
    if token_id is None:
        token_id = vocab[content] = len(vocab)
    tokens.append(AddedToken(content, token_id, lstrip, rstrip))


def glyph_style_tokens(glyph_dir: str | os.PathLike) -> list[str]:
    """The tokens the authors' ``add_special_token`` (multilingual, color and font on) adds for
    a Glyph-SDXL-v2 folder: ``<color-{i}>`` for i in range(len(color_idx.json)), then
    ``<{code[:2]}-font-{idx}>`` for each ``code: idx`` of ``multilingual_10-lang_idx.json``."""
    folder = Path(glyph_dir)
    tables = []
    for name in (COLOR_FILE, FONT_FILE):
        path = folder / name
        if not path.is_file():
            raise VidaxError(f"{path}: missing (the Glyph-SDXL-v2 folder ships {COLOR_FILE} "
                             f"and {FONT_FILE})")
        table = _read_json(path, "glyph style table")
        if not isinstance(table, dict):
            raise VidaxError(f"{path}: expected a JSON object of name -> index")
        tables.append(table)
    colors, fonts = tables
    return ([f"<color-{i}>" for i in range(len(colors))]
            + [f"<{code[:2]}-font-{idx}>" for code, idx in fonts.items()])


class ByT5GlyphTokenizer:
    """Glyph-SDXL-v2's byT5 tokenizer (see the module docstring). ``added``: the added tokens
    with their ids (:func:`byt5_added_tokens` plus the style tokens); ``seq_len``: 256.

    ``__call__(prompts)`` takes raw prompts and tokenizes each one's :func:`glyph_prompt`; a
    prompt without quoted text gets an all-pad row with an all-zero mask (the authors feed
    zero byT5 states and a zero mask there: use ``tokens.lengths > 0`` / :meth:`has_glyph`).
    :meth:`tokenize` takes text already formatted.
    """

    def __init__(self, added: Sequence[AddedToken], *, seq_len: int = GLYPH_SEQ_LEN):
        if seq_len < 1:
            raise VidaxError(f"seq_len must be at least 1 (room for the EOS), got {seq_len}")
        self.added, self.seq_len = tuple(added), seq_len
        self._by_content = {t.content: t for t in self.added}
        if "</s>" not in self._by_content or "<pad>" not in self._by_content:
            raise VidaxError("the byT5 tokenizer has no </s> or <pad> token")
        self.eos_id, self.pad_id = self._by_content["</s>"].id, self._by_content["<pad>"].id
        ordered = sorted(self._by_content, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self.vocab_size = len(_vocab(list(self.added)))

    @classmethod
    def from_folders(cls, byt5_dir: str | os.PathLike, glyph_dir: str | os.PathLike, *,
                     seq_len: int = GLYPH_SEQ_LEN) -> ByT5GlyphTokenizer:
        """From the release's ``text_encoder/byt5-small/`` and ``text_encoder/Glyph-SDXL-v2/``."""
        tokens = byt5_added_tokens(byt5_dir)
        vocab = _vocab(tokens)
        for content in glyph_style_tokens(glyph_dir):
            _add(tokens, vocab, content)
        return cls(tokens, seq_len=seq_len)

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` without special tokens: transformers' ``tokenize`` (split on the
        added tokens, their strip flags applied to the neighbouring pieces) then the bytes."""
        pieces, pos = [], 0
        for m in self._pattern.finditer(text) if self._pattern else ():
            pieces += [text[pos:m.start()], m.group()]
            pos = m.end()
        pieces = [p for p in (*pieces, text[pos:]) if p]
        added = [p in self._by_content for p in pieces]
        for i, piece in enumerate(pieces):
            if not added[i]:
                continue
            token = self._by_content[piece]
            if token.rstrip and i + 1 < len(pieces) and pieces[i + 1]:
                pieces[i + 1] = pieces[i + 1].lstrip()
            if token.lstrip and i > 0 and pieces[i - 1]:
                pieces[i - 1] = pieces[i - 1].rstrip()
        ids = []
        for piece, is_added in zip(pieces, added, strict=True):
            if is_added:
                ids.append(self._by_content[piece].id)
            else:
                ids.extend(b + BYTE_OFFSET for b in piece.encode("utf-8"))
        return ids

    def tokenize(self, texts: str | Sequence[str | None]) -> Tokens:
        """Formatted glyph texts -> :class:`Tokens` ``[B, seq_len]`` (``None``: a zero row)."""
        if isinstance(texts, str):
            texts = [texts]
        ids = np.full((len(texts), self.seq_len), self.pad_id, np.int32)
        mask = np.zeros((len(texts), self.seq_len), np.int32)
        dropped = []
        for row, text in enumerate(texts):
            if text is None:
                dropped.append(0)
                continue
            tokens = self.encode(text)
            kept = tokens[: self.seq_len - 1]
            if not kept or kept[-1] != self.eos_id:   # ByT5Tokenizer's _add_eos_if_not_present
                kept.append(self.eos_id)
            dropped.append(len(tokens) - min(len(tokens), self.seq_len - 1))
            ids[row, : len(kept)] = kept
            mask[row, : len(kept)] = 1
        for row, n in enumerate(dropped):
            if n:
                warnings.warn(f"glyph text {row} is {n + self.seq_len - 1} byT5 tokens long, more "
                              f"than the {self.seq_len - 1} the encoder takes before its EOS: its "
                              f"last {n} tokens were dropped", UserWarning, stacklevel=2)
        return Tokens(ids, mask, tuple(dropped))

    def __call__(self, prompts: str | Sequence[str]) -> Tokens:
        """Raw prompts -> the byT5 tokens of their glyph text (:func:`glyph_prompt`)."""
        if isinstance(prompts, str):
            prompts = [prompts]
        return self.tokenize([glyph_prompt(p) for p in prompts])

    @staticmethod
    def has_glyph(tokens: Tokens) -> np.ndarray:
        """bool ``[B]``: the rows that hold glyph text (the others take zero byT5 states)."""
        return tokens.mask.any(axis=1)
