"""``vidax demo [MODEL_TYPE]``: the whole path from the authors' files to a video, offline, in
seconds, for every family that has a pipeline.

Each family's module (:data:`DEMOS`) writes a tiny release in that family's authors' own
layout -- their file names, their containers (safetensors, ``torch.save`` zips written
without torch), their key names and shapes (recorded from their classes in
``vidax/data/tiny/<name>.json`` by ``scripts/make_tiny_layouts.py``), their config files and
a tokenizer folder -- with random weights, then :func:`run` runs the real ``vidax generate`` on
it: every file read lazily, translated, verified 1:1, loaded, a prompt encoded, a few sampling
steps, the VAE decode, an mp4 written. The weights are random, so the video is coloured
noise; what it shows is that every step works. The printed command is the one that ran
(every option that determines the video), so running it again writes the same mp4 byte for
byte; ``vidax verify`` and ``vidax convert`` accept each file the demo writes.

A family module has ``TITLE`` (what the release is), ``FOLDER`` (its folder name under the
cache folder), ``write(folder)``, ``GENERATE`` (the ``vidax generate`` options after
``--checkpoint-dir``; ``{folder}`` in one stands for the release folder, for a file the demo
writes there), optionally ``MODEL_TYPE`` (the pipeline it runs, default its key) and
``COMPONENTS`` ((component, file relative to the folder) pairs).
"""

from __future__ import annotations

import importlib
import os
import shlex
from pathlib import Path

#: model type -> the module that writes its tiny release (imported when used).
DEMOS: dict[str, str] = {
    "wan2_1": "vidax.demo.wan2_1",
    "wan2_2": "vidax.demo.wan2_2",
    "ltx_video": "vidax.demo.ltx_video",
    "cogvideox": "vidax.demo.cogvideox",
    "cosmos2_5": "vidax.demo.cosmos2_5",
    "cosmos3": "vidax.demo.cosmos3",
    "hunyuan_video": "vidax.demo.hunyuan_video",
    "hunyuan_video1_5": "vidax.demo.hunyuan_video1_5",
    "ltx2_5": "vidax.demo.ltx2_5",
    "ltx2_5-2.5": "vidax.demo.ltx2_5_split",
    "hunyuan_video1_5-i2v": "vidax.demo.hunyuan_video1_5_i2v",
}


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/vidax/demo`` (``~/.cache/vidax/demo`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vidax" / "demo"


def family(model_type: str):
    """The demo module of ``model_type``; a VidaxError naming the ones there are (and the
    nearest) otherwise."""
    from vidax.errors import VidaxError

    if model_type not in DEMOS:
        import difflib

        near = difflib.get_close_matches(model_type.replace(".", "_").replace("-", "_"),
                                         DEMOS, n=1, cutoff=0.6)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise VidaxError(f"vidax demo: there is no demo of {model_type!r}{hint} "
                         f"Demos: {', '.join(DEMOS)}.")
    return importlib.import_module(DEMOS[model_type])


def generate_argv(model_type: str, folder: Path, video: Path) -> list[str]:
    """The ``vidax generate`` arguments the demo runs: every option that determines the video."""
    mod = family(model_type)
    options = [a.replace("{folder}", str(folder)) for a in mod.GENERATE]
    return ["generate", getattr(mod, "MODEL_TYPE", model_type), "--checkpoint-dir", str(folder),
            *options,
            "--out", str(video)]


def run(model_type: str = "wan2_1", *, out: str | None = None, cache_dir: str | None = None,
        console=None) -> Path:
    """Write ``model_type``'s tiny release to ``cache_dir/<FOLDER>`` (default
    :func:`default_cache_dir`) and run ``vidax generate`` on it; returns the video's path
    (``out``, default ``demo.mp4`` in the release folder)."""
    from rich.console import Console

    from vidax import cli
    from vidax.errors import VidaxError

    mod = family(model_type)
    con = console or Console(highlight=False)
    folder = Path(cache_dir or default_cache_dir()) / mod.FOLDER
    try:
        mod.write(folder)
    except OSError as e:   # each file is written atomically: nothing is left half-written
        raise VidaxError(f"vidax demo: cannot write the tiny release to {folder} "
                         f"({e.strerror or e}); pass --cache-dir with a writable folder") from e
    files = sorted(p.relative_to(folder) for p in folder.rglob("*")
                   if p.is_file() and p.suffix != ".mp4")
    con.print(f"[bold]vidax demo[/]: wrote a tiny {mod.TITLE} release in the authors' "
              f"layout, random weights, to {folder}:", soft_wrap=True)
    for f in files:
        con.print(f"  {f} ({(folder / f).stat().st_size / 1024:.0f} KiB)", soft_wrap=True,
                  markup=False)
    video = Path(out) if out else folder / "demo.mp4"
    argv = generate_argv(model_type, folder, video)
    con.print("running: " + shlex.join(["vidax", *argv]), soft_wrap=True, markup=False)
    rc = cli.main(argv)
    if rc:
        raise VidaxError(f"the demo's vidax generate run failed (exit {rc}); see above")
    con.print(f"[bold]done[/]: {video} -- random weights, so the frames are coloured noise; "
              f"the same command on a real {mod.TITLE} release folder makes a real video. "
              "Each weights file above passes vidax verify and vidax convert, e.g. "
              + shlex.join(["vidax", *verify_argv(model_type, *mod.COMPONENTS[0], folder)]),
              soft_wrap=True)
    return video


def verify_argv(model_type: str, component: str, file: str, folder: Path) -> list[str]:
    """The ``vidax verify`` arguments of a demo's component file, under the registered model
    that implements it (Wan2.2's UMT5 is ``wan2_1`` ``text_encoder``, LTX-Video's T5 is
    ``t5`` ``encoder``)."""
    from vidax.demo.layouts import demo_spec

    target, comp, _ = demo_spec(model_type, component) or (model_type, component, None)
    return ["verify", target, "--component", comp, "--checkpoint", str(Path(folder) / file)]
