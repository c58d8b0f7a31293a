"""``vidax demo hunyuan_video1_5-i2v``: the tiny HunyuanVideo-1.5 release of
:mod:`vidax.demo.hunyuan_video1_5`, run image-to-video (``transformer/480p_i2v_distilled``)
from a first frame the demo draws (``first_frame.png``: a sunset gradient with a disc, 4:3,
so the authors' bucket of its aspect ratio sets the video size)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vidax.demo.hunyuan_video1_5 import COMPONENTS, ENCODERS, FOLDER, PROMPT, SEED  # noqa: F401
from vidax.demo.hunyuan_video1_5 import write as write_release

TITLE = "HunyuanVideo-1.5 image-to-video (CFG-distilled)"
MODEL_TYPE = "hunyuan_video1_5"
IMAGE = "first_frame.png"
GENERATE = ("--variant", "480p_i2v_distilled", "--prompt", PROMPT, "--image",
            "{folder}/" + IMAGE, "--frames", "9", "--size", "64x48", "--steps", "4",
            "--seed", str(SEED), "--fps", "24")


def first_frame(height: int = 96, width: int = 128) -> np.ndarray:
    """uint8 ``[H, W, 3]``: a vertical orange-to-violet gradient with a bright disc."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    t = (y / (height - 1))[..., None]
    image = (1 - t) * np.array([250, 150, 60], np.float32) + t * np.array([70, 40, 120],
                                                                          np.float32)
    disc = (x - 0.62 * width) ** 2 + (y - 0.45 * height) ** 2 < (0.18 * height) ** 2
    image[disc] = (255, 235, 180)
    return image.round().astype(np.uint8)


def write(folder: Path) -> None:
    """The release (:func:`vidax.demo.hunyuan_video1_5.write`) and the first frame."""
    from PIL import Image

    from vidax.demo import common

    write_release(folder)
    common._atomic(folder / IMAGE, lambda tmp: Image.fromarray(first_frame()).save(
        tmp, format="PNG"))
