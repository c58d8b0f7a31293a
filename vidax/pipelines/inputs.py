"""What a user gives a pipeline, checked with one clear error each: sizes, frame counts, seeds,
numbers, images, initial noise (``--noise FILE.npy``), config files, another family's release
folder (:func:`recognise`), prompts past the text encoder's length.
:mod:`vidax.pipelines.base` builds its :class:`~vidax.pipelines.base.Request` from these; a
family calls them for its own options."""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

import numpy as np

from vidax.errors import VidaxError
from vidax.translator.io.base import regular_file


def parse_size(text: str) -> tuple[int, int]:
    """``"WxH"`` (or the authors' ``"W*H"``) -> (width, height)."""
    for sep in ("x", "*", "X"):
        parts = text.split(sep)
        if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
            return int(parts[0]), int(parts[1])
    raise VidaxError(f"--size {text!r}: give the size as WIDTHxHEIGHT, e.g. 1280x720")


def load_image(image) -> np.ndarray:
    """An image as uint8 ``[H, W, 3]``: a path (read with Pillow, converted to RGB as the
    authors' ``Image.open(...).convert("RGB")``), a PIL image, or a uint8 array."""
    if isinstance(image, (str, os.PathLike)):
        path = regular_file(image, "image file")
        try:
            from PIL import Image
        except ImportError as e:
            raise VidaxError("reading images needs Pillow: pip install 'vidax[video]'") from e
        try:
            with Image.open(path) as img:
                return np.asarray(img.convert("RGB"))
        except OSError as e:
            raise VidaxError(f"{path}: not a readable image ({e})") from e
    if hasattr(image, "convert") and hasattr(image, "size"):  # a PIL image
        return np.asarray(image.convert("RGB"))
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] != 3:
        raise VidaxError(f"an image must be a file, a PIL image or a uint8 [H, W, 3] array; "
                         f"got {array.dtype} {list(array.shape)}")
    return array


def to_unit_range(image: np.ndarray) -> np.ndarray:
    """uint8 -> float32 in [-1, 1]: ``TF.to_tensor(img).sub_(0.5).div_(0.5)``."""
    x = image.astype(np.float32) / np.float32(255)
    return (x - np.float32(0.5)) / np.float32(0.5)


def number(name: str, value, *, positive: bool = True) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError) as e:
        raise VidaxError(f"{name} must be a number, got {value!r}") from e
    if not math.isfinite(value) or (positive and value <= 0):
        raise VidaxError(f"{name} must be a {'positive' if positive else 'finite'} number, "
                         f"got {value!r}")
    return value


def check_count(name: str, value, *, minimum: int = 1) -> int:
    if not isinstance(value, (int, np.integer)) or value < minimum:
        what = "positive" if minimum == 1 else "non-negative"
        raise VidaxError(f"{name} must be a {what} integer, got {value!r}")
    return int(value)


#: Seeds are 64-bit unsigned integers (what ``torch.manual_seed`` and a threefry key hold).
SEED_LIMIT = 2**64


def check_seed(seed) -> int:
    """A seed: an integer in [0, 2**64) (a bool is not one)."""
    if (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))
            or not 0 <= seed < SEED_LIMIT):
        raise VidaxError(f"seed must be an integer from 0 to 2**64 - 1 "
                         f"({SEED_LIMIT - 1}), got {seed!r}")
    return int(seed)


def seed_key(seed: int):
    """The JAX PRNG key of a seed, all 64 bits of it: ``jax.random.key(seed)`` below 2**32
    (unchanged draws); above, the threefry key ``[seed >> 32, seed & 0xffffffff]`` that
    ``jax.random.key`` makes with 64-bit integers enabled -- without them it keeps the low
    32 bits only, so 2**32 would draw what 0 draws."""
    import jax

    seed = check_seed(seed)
    if seed < 2**32:
        return jax.random.key(seed)
    data = np.asarray([seed >> 32, seed & 0xFFFFFFFF], np.uint32)
    return jax.random.wrap_key_data(data, impl="threefry2x32")


def check_frames(frames, temporal: int = 4) -> int:
    """The frame count must be ``temporal * n + 1`` (the VAE turns those into n + 1 latent
    frames)."""
    if not isinstance(frames, (int, np.integer)) or frames < 1 or (frames - 1) % temporal:
        example = ""
        if isinstance(frames, (int, np.integer)):
            lower = max(1, (int(frames) - 1) // temporal * temporal + 1)
            example = f"; e.g. {lower} or {lower + temporal}"
        raise VidaxError(f"frames {frames!r}: the frame count must be {temporal}n+1 (1, "
                         f"{temporal + 1}, {2 * temporal + 1}, ...), because the VAE turns "
                         f"{temporal}n+1 frames into n+1 latent frames{example}")
    return int(frames)


def check_size(size, multiple: int = 16, why: str | None = None) -> tuple[int, int]:
    """Width and height must be positive multiples of ``multiple`` (by default the VAE's
    downsampling times the DiT's 2x2 patches)."""
    width, height = (int(s) for s in size)
    if width < multiple or height < multiple or width % multiple or height % multiple:
        def nearest(n):
            return max(multiple, multiple * round(n / multiple))
        why = why or f"the VAE's {multiple // 2}x downsampling times the DiT's 2x2 patches"
        raise VidaxError(f"size {width}x{height}: width and height must be multiples of "
                         f"{multiple} ({why}); the nearest valid size is "
                         f"{nearest(width)}x{nearest(height)}")
    return width, height


def refuse(family: str, **options) -> None:
    """One error for the first given option a family does not take: ``name=(value, why)``,
    ``name`` as the CLI spells it (``last_image`` -> ``--last-image``)."""
    for name, (value, why) in options.items():
        if value is not None:
            raise VidaxError(f"{family} takes no --{name.replace('_', '-')}: {why}")


def noise_array(noise, latent_shape: tuple[int, int, int, int],
                layouts: dict[str, str] | None = None) -> np.ndarray:
    """Initial noise as float32 ``[T, h, w, C]`` (vidax's layout), from an array or a
    ``.npy`` path (``--noise FILE.npy``).

    ``layouts``: the other layouts accepted, ``name -> axes`` over ``T H W C`` (``N``: the
    ``T*H*W`` tokens), tried first, so where several fit the first wins; default the
    authors' ``{"the authors'": "CTHW"}`` (what ``torch.randn(C, T, h, w)`` draws). Each may
    carry a leading batch axis of 1.
    """
    given = read_noise(noise)
    layouts = {"the authors'": "CTHW"} if layouts is None else layouts
    t, h, w, c = latent_shape
    sizes = {"T": t, "H": h, "W": w, "C": c, "N": t * h * w}
    for axes in (*layouts.values(), "THWC"):
        array = _read_layout(given, axes, sizes)
        if array is not None:
            break
    else:
        expected = [f"{name} layout {[sizes[x] for x in axes]} [{', '.join(axes)}] or "
                    for name, axes in layouts.items()]
        raise VidaxError(f"noise of shape {list(given.shape)} does not fit this video: "
                         f"expected {''.join(expected)}vidax's {[t, h, w, c]} [T, H, W, C] "
                         "(H, W: the latent size)")
    return np.ascontiguousarray(array, dtype=np.float32)


def read_noise(noise) -> np.ndarray:
    """Noise given as an array or a ``.npy`` path, checked to be finite floating-point
    numbers (in whatever layout it comes)."""
    if isinstance(noise, (str, os.PathLike)):
        path = regular_file(noise, "noise file")
        try:
            noise = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise VidaxError(f"{path}: not a readable .npy array ({e})") from e
    array = np.asarray(noise)
    if not np.issubdtype(array.dtype, np.floating) or not np.isfinite(array).all():
        raise VidaxError("noise must be finite floating-point numbers")
    return array


def _read_layout(array: np.ndarray, axes: str, sizes: dict) -> np.ndarray | None:
    """``array`` (optionally with a batch axis of 1) read as ``axes``, as ``[T, H, W, C]``;
    None where its shape does not fit."""
    for a in (array, array[0]) if array.ndim > 1 and array.shape[0] == 1 else (array,):
        if a.shape == tuple(sizes[x] for x in axes):
            if "N" in axes:  # tokens: T*H*W in row-major order
                i = axes.index("N")
                a = a.reshape(*a.shape[:i], sizes["T"], sizes["H"], sizes["W"], *a.shape[i + 1:])
                axes = axes.replace("N", "THW")
            return a.transpose([axes.index(x) for x in "THWC"])
    return None


# ----------------------------------------------------------------------------- releases
def _class_name(path: Path) -> str:
    """A diffusers ``config.json``'s ``_class_name`` ("" where there is none)."""
    try:
        return str(json.loads(regular_file(path, "config").read_text(encoding="utf-8"))
                   .get("_class_name", ""))
    except (OSError, ValueError, AttributeError, VidaxError):   # none, or not a regular file
        return ""


#: The family name in messages -> (model_type, whether a folder is that family's release,
#: by what only its releases hold: file and folder names, a diffusers ``_class_name``).
RELEASES = {
    "Wan2.1": ("wan2_1", lambda f: (f / "Wan2.1_VAE.pth").is_file() and not any(
        (f / d).exists() for d in ("high_noise_model", "low_noise_model", "Wan2.2_VAE.pth"))),
    "Wan2.2": ("wan2_2", lambda f: any((f / d).exists() for d in (
        "high_noise_model", "low_noise_model", "Wan2.2_VAE.pth"))),
    "Cosmos-Predict2.5": ("cosmos2_5", lambda f: any(f.glob("base/*/*_ema_bf16.pt"))
                          or _class_name(f / "transformer" / "config.json")
                          == "CosmosTransformer3DModel"),
    "Cosmos3": ("cosmos3", lambda f: "Cosmos3" in _class_name(f / "transformer" / "config.json")),
    "CogVideoX": ("cogvideox",
                  lambda f: "CogVideoX" in _class_name(f / "transformer" / "config.json")),
    "HunyuanVideo": ("hunyuan_video", lambda f: (f / "hunyuan-video-t2v-720p").is_dir()),
    "HunyuanVideo-1.5": ("hunyuan_video1_5", lambda f: (f / "text_encoder" / "Glyph-SDXL-v2")
                         .is_dir() or any("HunyuanVideo_1_5" in _class_name(c) for c in
                                          (f / "transformer").glob("*/config.json"))),
    "LTX-Video": ("ltx_video", lambda f: any(f.glob("ltxv-*.safetensors"))),
}


def recognise(folder: Path) -> list[str]:
    """The families (names as :data:`RELEASES` spells them) whose release ``folder`` looks
    like, from its file names alone (no weight, at most a ``config.json`` read)."""
    return [name for name, (_, looks) in RELEASES.items() if looks(Path(folder))]


def read_json_config(path: Path) -> dict:
    """A ``config.json`` as a dict (one clear error if it is not one)."""
    try:
        data = json.loads(regular_file(path, "config file").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise VidaxError(f"{path}: not a readable JSON file ({e})") from e
    if not isinstance(data, dict):
        raise VidaxError(f"{path}: expected a JSON object of settings")
    return data


def tokenize(tokenizer, prompts: list[str]):
    """``prompts`` (the prompt, then the negative prompt) through a :class:`vidax.text.Tokenizer`,
    with one warning for each prompt longer than the text encoder takes: its tail is cut, as
    the authors' tokenizers cut it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # replaced by the warning below
        tokens = tokenizer(prompts)
    for i, dropped in enumerate(tokens.dropped):
        if dropped:
            name = ("prompt", "negative prompt")[i] if i < 2 else f"prompt {i}"
            warnings.warn(f"the {name} is {dropped + tokenizer.seq_len} tokens long, more than "
                          f"the text encoder's {tokenizer.seq_len}: its last {dropped} tokens "
                          "were dropped (the authors truncate the same way)", UserWarning,
                          stacklevel=4)
    return tokens


# ----------------------------------------------------------------------------- outputs
def check_out(out: Path, suffix: str = ".mp4") -> None:
    """``generate --out`` (``--audio-out``: ``suffix`` ".wav"): a file that can be written,
    checked before anything loads: its folder exists and takes a new file (tried, as the
    permission bits do not tell for root or a read-only mount), and the name is not a folder or
    something else than a file."""
    option, article = {".mp4": ("--out", "an"), ".wav": ("--audio-out", "a"),
                       ".json": ("--step-cache-calibrate", "a")}[suffix]
    if out.suffix.lower() != suffix:
        raise VidaxError(f"{option} {out}: the output must be {article} {suffix} file")
    try:
        try_out(out, option, suffix)
    except OSError as e:  # a name too long, a folder nobody may write in, ...
        raise VidaxError(f"{option} {out}: cannot write there ({e.strerror or e}); name "
                         f"{article} {suffix} in a folder you can write to") from None


def try_out(out: Path, option: str, suffix: str) -> None:
    import tempfile

    if out.is_dir():
        raise VidaxError(f"{option} {out}: that is a folder; name the {suffix} file to write")
    if out.exists() and not out.is_file():
        raise VidaxError(f"{option} {out}: exists and is not a regular file; name a {suffix} "
                         "file")
    folder = out.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise VidaxError(f"{option} {out}: the folder {folder} {what}")
    if out.exists():
        # Replaced or rewritten in place: the folder and the file must both take it.
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".vidax-write-check-")
        os.close(fd)
        os.unlink(probe)
        if not os.access(out, os.W_OK):
            raise PermissionError(13, "the file is read-only")
    else:
        with open(out, "xb"):  # the very name: too long, not allowed there, ...
            pass
        out.unlink()
