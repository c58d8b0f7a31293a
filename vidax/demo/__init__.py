"""``vidax demo``: the whole path from the authors' files to a video, offline, in seconds.

It writes a tiny Wan2.1 text-to-video release in the authors' own layout -- their file
names, their containers (a safetensors DiT with its ``config.json``, a bfloat16 ``.pth``
UMT5 encoder, a ``.pth`` VAE written in ``torch.save``'s format without torch), their key
names and shapes (recorded from their code in ``vidax/data/tiny/wan2_1.json``), a
``google/umt5-xxl/`` tokenizer folder -- with random weights, then runs the real
``vidax generate`` on it: every file read lazily, translated, verified 1:1, loaded, a
prompt encoded, a few sampling steps, the VAE decode, an mp4 written. The weights are
random, so the video is coloured noise; what it shows is that every step works.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import numpy as np

SEED = 0
PROMPT = "a red fox runs across a snowy field at sunset, the camera slowly pans"
#: The demo tokenizer's words (a word-level vocabulary; a real release ships UMT5's).
WORDS = ("a an the red fox cat dog bird runs walks flies across over through snowy golden "
         "green field forest river sky at sunset night morning camera slowly quickly pans "
         "zooms close up wide shot cinematic light").split()


def _tiny_layout() -> dict:
    return json.loads(resources.files("vidax").joinpath("data/tiny/wan2_1.json").read_text())


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vidax" / "demo"


def _random_tensors(layout: dict, rng: np.random.Generator, dtype) -> dict[str, np.ndarray]:
    """Random values in every tensor, scaled like an initialisation: weights ~ 1/sqrt(fan-in),
    norm scales near 1, small biases, O(1) modulation tables."""
    out = {}
    for key, shape in sorted(layout["tensors"].items()):
        noise = rng.standard_normal(shape)
        if key.endswith("modulation"):
            value = 0.5 * noise
        elif len(shape) >= 2 and not key.endswith("embedding.weight"):
            value = noise / np.sqrt(np.prod(shape[1:]))
        elif key.endswith(("weight", "gamma")):
            value = 1 + 0.1 * noise
        else:
            value = 0.1 * noise
        out[key] = value.astype(dtype)
    return out


def _write_tokenizer(folder: Path) -> None:
    """A word-level ``tokenizer.json`` with T5's special tokens (``<pad>`` 0, ``</s>`` 1,
    ``<unk>`` 2) and the files naming them, as a release's tokenizer folder holds."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(["<pad>", "</s>", "<unk>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    special = {"eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps(special, indent=2))


def write_tiny_wan2_1(folder: Path) -> Path:
    """A tiny Wan2.1 T2V release folder in the authors' layout, random weights. Each file is
    written atomically (a temporary name, then a rename)."""
    import ml_dtypes
    import safetensors.numpy

    from vidax.translator.io import save_pth

    layout = _tiny_layout()
    rng = np.random.default_rng(SEED)
    folder.mkdir(parents=True, exist_ok=True)

    dit = layout["dit"]
    tmp = folder / (dit["file"] + ".tmp")
    safetensors.numpy.save_file(_random_tensors(dit, rng, np.float32), tmp,
                                metadata={"format": "pt"})
    os.replace(tmp, folder / dit["file"])
    config = {"_class_name": "WanModel", **dit["config"]}
    (folder / "config.json").write_text(json.dumps(config, indent=2))

    t5 = layout["text_encoder"]   # the release stores UMT5 in bfloat16
    save_pth(folder / t5["file"], _random_tensors(t5, rng, ml_dtypes.bfloat16))
    vae = layout["vae"]
    save_pth(folder / vae["file"], _random_tensors(vae, rng, np.float32))
    _write_tokenizer(folder / "google" / "umt5-xxl")
    return folder


def run(out: str | None = None, cache_dir: str | None = None, console=None) -> Path:
    """Write the tiny release and run ``vidax generate`` on it; returns the video's path."""
    from rich.console import Console

    from vidax import cli
    from vidax.errors import VidaxError

    con = console or Console(highlight=False)
    folder = Path(cache_dir) if cache_dir else default_cache_dir() / "Wan2.1-T2V-tiny"
    write_tiny_wan2_1(folder)
    files = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    con.print(f"[bold]vidax demo[/]: wrote a tiny Wan2.1 text-to-video release in the authors' "
              f"layout, random weights, to {folder}:", soft_wrap=True)
    for f in files:
        con.print(f"  {f} ({(folder / f).stat().st_size / 1024:.0f} KiB)", soft_wrap=True)
    video = Path(out) if out else folder / "demo.mp4"
    con.print(f"running: vidax generate wan2_1 --checkpoint-dir {folder} "
              f"--prompt {PROMPT!r} --frames 9 --size 64x48 --steps 4 --out {video}",
              soft_wrap=True, markup=False)
    rc = cli.main(["generate", "wan2_1", "--checkpoint-dir", str(folder), "--prompt", PROMPT,
                   "--frames", "9", "--size", "64x48", "--steps", "4", "--seed", str(SEED),
                   "--fps", "8", "--out", str(video)])
    if rc:
        raise VidaxError(f"the demo's vidax generate run failed (exit {rc}); see above")
    con.print(f"[bold]done[/]: {video} -- random weights, so the frames are coloured noise; "
              "the same command on a real Wan2.1 release folder makes a real video.",
              soft_wrap=True)
    return video
