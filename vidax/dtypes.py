"""One dtype vocabulary for every place a user names a dtype: ``vidax convert --dtype``,
``vidax generate --precision`` and ``vidax.load(dtype=)``.

A user may type the short names (``bf16``, ``fp16``, ``fp32``), numpy's and PyTorch's
(``bfloat16``, ``float16``, ``float32``, ``torch.bfloat16``), or the common synonyms
(``half``, ``float``); each means one floating dtype. Anything else is refused at once, with
the accepted names, before a file is opened. Importable without JAX.
"""

from __future__ import annotations

import difflib

import ml_dtypes
import numpy as np

from vidax.errors import VidaxError

#: canonical short name -> numpy dtype: the floating dtypes a parameter may be cast to.
DTYPES: dict[str, np.dtype] = {
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "fp16": np.dtype(np.float16),
    "fp32": np.dtype(np.float32),
    "fp64": np.dtype(np.float64),
}

#: every accepted spelling -> its canonical short name.
ALIASES: dict[str, str] = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "f16": "fp16", "float16": "fp16", "half": "fp16",
    "fp32": "fp32", "f32": "fp32", "float32": "fp32", "float": "fp32",
    "fp64": "fp64", "f64": "fp64", "float64": "fp64", "double": "fp64",
}


def accepted() -> str:
    """The accepted spellings, grouped by dtype, for an error message."""
    groups: dict[str, list[str]] = {}
    for spelling, short in ALIASES.items():
        groups.setdefault(short, []).append(spelling)
    return "; ".join(" / ".join(names) for names in groups.values())


def canonical(name, *, what: str = "dtype", allowed=None) -> str:
    """The canonical short name (``bf16``, ``fp16``, ``fp32``, ``fp64``) of ``name``: any
    spelling of :data:`ALIASES`, ``torch.<name>``, or a numpy floating dtype. ``allowed``:
    the short names this use takes (``generate --precision``: bf16, fp32); ``what`` names the
    option in the error."""
    short = None
    if isinstance(name, str):
        short = ALIASES.get(_key(name))
    elif name is not None and not isinstance(name, bool):   # np.dtype(None) is float64
        try:
            dtype = np.dtype(name)
        except (TypeError, ValueError):
            dtype = None
        if dtype is not None:
            short = next((s for s, d in DTYPES.items() if d == dtype), None)
        elif str(name).startswith("torch."):      # a torch.dtype, without importing torch
            short = ALIASES.get(_key(str(name)))
    choices = tuple(allowed) if allowed is not None else tuple(DTYPES)
    if short is None or short not in choices:
        spellings = {a: s for a, s in ALIASES.items() if s in choices}
        hint = ""
        if short is not None:
            hint = f" ({short} is a dtype, but not one {what} takes)"
        elif isinstance(name, str):
            close = difflib.get_close_matches(name.strip().lower(), spellings, n=1)
            if close:
                hint = f" (did you mean {close[0]!r}?)"
        groups: dict[str, list[str]] = {}
        for spelling, s in spellings.items():
            groups.setdefault(s, []).append(spelling)
        listed = "; ".join(" / ".join(v) for v in groups.values())
        raise VidaxError(f"{what} {name!r} is not one vidax accepts{hint}; accepted: {listed}")
    return short


def _key(spelling: str) -> str:
    key = spelling.strip().lower()
    for prefix in ("torch.", "jnp.", "jax.numpy.", "np.", "numpy.", "ml_dtypes."):
        key = key.removeprefix(prefix)
    return key


def parse(name, *, what: str = "dtype", allowed=None) -> np.dtype:
    """The numpy dtype of ``name`` (see :func:`canonical`)."""
    return DTYPES[canonical(name, what=what, allowed=allowed)]
