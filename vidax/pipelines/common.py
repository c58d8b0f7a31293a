"""Pieces every family's pipeline shares: precision policies, progress reporting, the
component check before loading, and the user inputs (sizes, images, numbers) validated with
one clear error each."""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import VerificationError, VidaxError


# ----------------------------------------------------------------------------- precision
@dataclass(frozen=True)
class Precision:
    """Compute dtypes per component, and the matmul precision of float32 work."""

    name: str
    dit_compute: object
    text_encoder: object
    image_encoder: object
    vae: object
    matmul: str | None  # None: JAX's default (bf16 operands are bf16 either way)


PRECISIONS = {
    "bf16": Precision("bf16", jnp.bfloat16, jnp.bfloat16, jnp.float32, jnp.float32, None),
    "fp32": Precision("fp32", jnp.float32, jnp.float32, jnp.float32, jnp.float32, "highest"),
}


def precision_policy(name: str) -> Precision:
    if name not in PRECISIONS:
        raise VidaxError(f"precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
    return PRECISIONS[name]


# ----------------------------------------------------------------------------- inputs
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
        path = Path(image)
        if not path.is_file():
            raise VidaxError(f"{path}: no such image file")
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



# ----------------------------------------------------------------------------- progress
class Progress:
    """Progress bars and one line per finished phase, on a rich console; silent without."""

    def __init__(self, console):
        self.console = console

    def line(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, soft_wrap=True)  # paths stay whole, copy-pastable

    @contextlib.contextmanager
    def phase(self, description: str, total: int | None = None):
        """Yields ``advance(n=1, total=None)``; prints ``description: done in X s`` at the
        end."""
        start = time.perf_counter()
        if self.console is None or not self.console.is_terminal:
            # no live bar into logs and pipes: the closing line alone
            yield lambda n=1, total=None: None
            self.line(f"{description}: done in {time.perf_counter() - start:.1f} s")
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                   TextColumn, TimeElapsedColumn)

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=self.console,
                      transient=True) as bar:
            task = bar.add_task(description, total=total)

            def advance(n=1, total=None):
                if total is not None:
                    bar.update(task, total=total)
                bar.advance(task, n)

            yield advance
        self.line(f"{description}: done in {time.perf_counter() - start:.1f} s")


# ----------------------------------------------------------------------------- components
def verify_component(spec, path: str | os.PathLike, config) -> None:
    """A component file's names and shapes against its model (``spec``: a
    ``vidax.registry.ComponentSpec``) at ``config``, before any weight of any component is
    read: the error ``vidax.load`` would raise, naming the file."""
    from vidax import loading
    from vidax.translator.io import open_checkpoint

    with open_checkpoint(path) as ckpt:
        report, _, _ = loading.verify_tensors(spec, config, ckpt, source=str(path))
    if not report.ok:
        raise VerificationError(
            f"{path} is not a {spec.model_type} {spec.component} checkpoint ({spec.layout} "
            "layout) at this config (no weights were loaded): "
            + "; ".join(report.lines(5)[1:]), report)


# ----------------------------------------------------------------------------- pipeline class
class PipelineBase:
    """What every family's pipeline class shares. The family sets ``self.precision`` (a
    :class:`Precision`) and ``self.defaults`` (with the release's ``fps``) and defines
    ``sample`` and ``decode``."""

    def _matmul_precision(self):
        """The precision policy's matmul precision as a context (none: JAX's default)."""
        if self.precision.matmul is None:
            return contextlib.nullcontext()
        return jax.default_matmul_precision(self.precision.matmul)

    def __call__(self, prompt: str | None = None, *, request=None, **options) -> np.ndarray:
        """uint8 frames ``[F, H, W, 3]``."""
        return self.decode(self.sample(prompt, request=request, **options))

    def write(self, frames, path: str | os.PathLike, *, fps: float | None = None) -> Path:
        """Write frames as an H.264 mp4 at ``fps`` (default: the release's), atomically."""
        from vidax.video import write_mp4

        return write_mp4(path, frames, fps=fps or self.defaults.fps)
