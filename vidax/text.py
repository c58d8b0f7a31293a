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

Only ``tokenizer.json`` is read. A folder with just ``spiece.model`` needs a one-time
conversion with transformers (``AutoTokenizer.from_pretrained(folder).save_pretrained(folder)``):
reimplementing that SentencePiece -> ``tokenizers`` conversion here would be a second
tokenizer to keep equal to the first.
"""

from __future__ import annotations

import html
import json
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vidax.errors import VidaxError

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


class Tokenizer:
    """A release's tokenizer folder, padding/truncating to ``seq_len`` (512 for Wan).

    ``clean``: ``"whitespace"`` (the authors' cleaning, the Wan default) or ``None``.
    """

    def __init__(self, folder: str | os.PathLike, *, seq_len: int,
                 clean: str | None = "whitespace"):
        from tokenizers import Tokenizer as _Backend

        if clean not in CLEANERS:
            raise VidaxError(f"unknown prompt cleaning {clean!r}; choose one of {CLEANERS}")
        if seq_len < 1:
            raise VidaxError(f"seq_len must be at least 1 (room for the EOS), got {seq_len}")
        self.folder, self.seq_len, self.clean = Path(folder), seq_len, clean
        path = self.folder / "tokenizer.json"
        if not path.is_file():
            found = sorted(p.name for p in self.folder.iterdir()) if self.folder.is_dir() else None
            raise VidaxError(
                f"{self.folder}: no tokenizer.json "
                + ("(the folder does not exist)" if found is None else
                   f"(the folder holds: {', '.join(found) or 'nothing'})")
                + ". vidax reads the tokenizers-library file a release ships (Wan: "
                "google/umt5-xxl/tokenizer.json); a folder with only spiece.model can be "
                "converted once with transformers: "
                "AutoTokenizer.from_pretrained(folder).save_pretrained(folder)")
        try:
            self._backend = _Backend.from_file(str(path))
        except Exception as e:  # the Rust side raises a bare Exception on a malformed file
            raise VidaxError(f"{path}: not a readable tokenizers file ({e})") from e
        self._backend.no_truncation()
        self._backend.no_padding()
        special = self._special_tokens()
        self.eos_id = self._token_id(special.get("eos_token", "</s>"), "EOS")
        self.pad_id = self._token_id(special.get("pad_token", "<pad>"), "padding")

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
            raise VidaxError(f"{self.folder / 'tokenizer.json'}: the {role} token {token!r} "
                             "is not in the vocabulary")
        return token_id

    def __call__(self, texts: str | Sequence[str]) -> Tokens:
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if self.clean == "whitespace":
            texts = [clean_whitespace(t) for t in texts]
        encodings = self._backend.encode_batch(texts, add_special_tokens=False)
        ids = np.full((len(texts), self.seq_len), self.pad_id, np.int32)
        mask = np.zeros((len(texts), self.seq_len), np.int32)
        dropped = []
        for row, enc in enumerate(encodings):
            tokens = enc.ids[: self.seq_len - 1] + [self.eos_id]
            dropped.append(len(enc.ids) + 1 - len(tokens))
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        for row, n in enumerate(dropped):
            if n:
                warnings.warn(
                    f"prompt {row} is {n + self.seq_len} tokens long, more than the text "
                    f"encoder's {self.seq_len}: its last {n} tokens were dropped",
                    UserWarning, stacklevel=2)
        return Tokens(ids, mask, tuple(dropped))
