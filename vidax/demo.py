"""``vidax demo``: the whole loading path on tiny random-weight checkpoints, offline.

It writes a tiny Wan2.1 text-to-video DiT release in the authors' own layout -- their file
name, their key names and shapes (recorded from their code in ``vidax/data/tiny/``), a
``config.json`` as they write it -- then loads it the way a user loads the real one:
the file is read lazily, translated by the Wan2.1 mapper, verified 1:1 against the model,
and run for one denoising forward pass. Every step says what it did.
"""

from __future__ import annotations

import json
import os
import time
from importlib import resources
from pathlib import Path

import numpy as np

SEED = 0


def _tiny_layout(family: str) -> dict:
    return json.loads(resources.files("vidax").joinpath(f"data/tiny/{family}.json").read_text())


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vidax" / "demo"


def write_tiny_wan2_1(folder: Path) -> Path:
    """A tiny Wan2.1 T2V release folder (DiT only for now): ``config.json`` and
    ``diffusion_pytorch_model.safetensors`` with random float32 values in every tensor,
    written atomically (a temporary name, then a rename)."""
    import safetensors.numpy

    layout = _tiny_layout("wan2_1")["dit"]
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    tensors = {}
    for key, shape in sorted(layout["tensors"].items()):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        scale = 0.5 if key.endswith("modulation") else fan_in ** -0.5
        tensors[key] = (rng.standard_normal(shape) * scale).astype(np.float32)
    path = folder / layout["file"]
    tmp = path.with_suffix(".tmp")
    safetensors.numpy.save_file(tensors, tmp, metadata={"format": "pt"})
    os.replace(tmp, path)
    config = {"_class_name": "WanModel", **layout["config"]}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return path


def run(out: str | None = None, cache_dir: str | None = None, console=None) -> np.ndarray:
    """Write, load, verify and run the tiny release; returns the DiT's output."""
    from rich.console import Console
    from rich.progress import Progress

    import jax

    from vidax.loading import load_with_report
    from vidax.models.wan2_1 import WanDiTConfig

    con = console or Console(highlight=False)
    folder = Path(cache_dir) if cache_dir else default_cache_dir() / "Wan2.1-T2V-tiny"
    t0 = time.perf_counter()
    path = write_tiny_wan2_1(folder)
    con.print(f"[bold]1.[/] wrote a tiny Wan2.1 T2V DiT in the authors' layout: {path} "
              f"({path.stat().st_size / 2**20:.1f} MiB, random weights)")

    config = WanDiTConfig.from_dict(json.loads((folder / "config.json").read_text()))
    con.print(f"[bold]2.[/] read its config.json: dim {config.dim}, {config.num_layers} layers, "
              f"{config.num_heads} heads")

    with Progress(transient=True, console=con) as bar:
        task = bar.add_task("loading", total=None)
        dit, report = load_with_report(
            "wan2_1", "dit", path, config=config,
            progress=lambda done, total, name: bar.update(task, completed=done, total=total))
    con.print(f"[bold]3.[/] translated and verified: {report.headline()}; loaded onto "
              f"{jax.devices()[0].platform}")

    rng = np.random.default_rng(SEED + 1)
    latents = rng.standard_normal((1, 3, 8, 8, config.in_dim)).astype(np.float32)
    context = rng.standard_normal((1, 12, config.text_dim)).astype(np.float32)
    velocity = np.asarray(jax.jit(lambda x, c: dit(x, np.array([500.0]), c))(latents, context))
    con.print(f"[bold]4.[/] one DiT forward at t=500 on latents {list(latents.shape)}: velocity "
              f"{list(velocity.shape)}, mean {velocity.mean():+.4f}, std {velocity.std():.4f}")
    if out:
        np.save(out, velocity)
        con.print(f"    wrote it to {out}")
    con.print(f"done in {time.perf_counter() - t0:.1f} s")
    return velocity
