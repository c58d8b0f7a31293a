"""Pipelines: a release folder laid out as its authors publish it -> video frames.

``vidax.pipeline(model_type, checkpoint_dir, ...)`` (DESIGN.md §4) returns the family's
pipeline: calling it with a prompt returns uint8 frames ``[F, H, W, 3]`` (numpy), and its
``write`` method writes them as an mp4.

Each family module (``vidax.pipelines.<model_type>``) offers the same three names, which
``vidax generate`` drives so that every input error surfaces before any weight is read:

* ``inspect_folder(folder, variant=None)``: which release the folder is and where each
  component file lies, without reading a weight (one error listing every missing file);
* ``make_request(task, variant, prompt, **options)``: every generation option validated and
  resolved against the release's defaults (images and noise files read here);
* ``Pipeline.from_release(release, ...)``: the loaded pipeline.

They are built on the skeleton in :mod:`vidax.pipelines.base` (its docstring lists the hooks
a family implements; docs/development.md, "Adding a family pipeline").
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from vidax.errors import VidaxError

#: model_type -> the module that implements its pipeline.
PIPELINES = {"wan2_1": "vidax.pipelines.wan2_1", "wan2_2": "vidax.pipelines.wan2_2",
             "ltx_video": "vidax.pipelines.ltx_video", "cogvideox": "vidax.pipelines.cogvideox",
             "cosmos2_5": "vidax.pipelines.cosmos2_5",
             "hunyuan_video": "vidax.pipelines.hunyuan_video"}

#: The precision policies every pipeline accepts (see each family's module docstring).
PRECISIONS = ("bf16", "fp32")


def family(model_type: str) -> ModuleType:
    """The pipeline module of ``model_type``."""
    if model_type not in PIPELINES:
        raise VidaxError(f"no pipeline for model_type {model_type!r}; pipelines exist for: "
                         f"{', '.join(PIPELINES)}")
    return importlib.import_module(PIPELINES[model_type])


def pipeline(model_type: str, checkpoint_dir: str | os.PathLike, *, variant: str | None = None,
             mesh=None, precision: str = "bf16", console=None):
    """The generation pipeline of a release folder (DESIGN.md §4).

    Args:
      model_type: one of :data:`PIPELINES`.
      checkpoint_dir: the folder as the authors release it (their file names).
      variant: the release (e.g. wan2_1: ``t2v-1.3b``, ``t2v-14b``, ``i2v-14b``,
        ``flf2v-14b``; wan2_2: ``ti2v-5b``, ``t2v-a14b``, ``i2v-a14b``); default: read from
        the folder (the DiT's ``config.json``, ...).
      mesh: a ``jax.sharding.Mesh`` to place the weights on (replicated for now).
      precision: ``"bf16"`` (the authors' mixed precision, the default) or ``"fp32"``.
      console: a ``rich.console.Console`` for progress; ``None`` is quiet.

    Every component file is found and verified against its model before any weight is read;
    a missing file, or a file that is not the component it stands for, is one clear error.
    """
    module = family(model_type)
    release = module.inspect_folder(checkpoint_dir, variant=variant)
    return module.Pipeline.from_release(release, mesh=mesh, precision=precision,
                                        console=console)
