"""HunyuanVideo-1.5 VAE decode: the compiled program's memory, tiled vs one pass, at 720p.

What it measures: XLA's own buffer accounting (``Compiled.memory_analysis()``: arguments,
outputs, temporaries; no execution, no weights read) of the decoder programs that
``HunyuanVideo15VAE.decode`` runs for a 121-frame 720 x 1280 video (31 x 45 x 80 latents, 32
channels) with the released ``HunyuanVideo15VAEConfig.base()``:

* ``tile``: one spatial tile of the authors' pipeline setting (``AUTHORS_TILES``: 256 px,
  overlap 0.125 -> 16 x 16 latent tiles, 24 of them, every one over all 31 frames; the
  largest tile shape -- the others are 16 x 10, 3 x 16 and 3 x 10). ``decode(tiled=True)``
  runs these programs one after another, so the device peak is one tile program's plus the
  weights; the blend runs on the host.
* ``tile_128px``: the largest tile of the authors' small-GPU setting (128 px, overlap 0.25:
  8 x 8 latents, 112 of them).
* ``tile_attn`` / ``untiled_attn``: the decoder's mid-block attention block alone (RMS_norm,
  q/k/v, frame-causal one-head attention over ``T*h*w`` positions of 1024 channels, output
  projection, residual) at the tile's / the whole latent's size: how much of the peak it is.
* ``untiled``: the whole latent in one program (``decode()``, the default); ``--untiled``
  adds it and ``untiled_attn``.
* Parameters and latents in float32 (what ``decode`` runs), and in bfloat16 (the model's
  activations follow the input dtype, so a bf16 state with bf16 latents is what a half-precision
  decode would cost; ``decode`` itself casts the latents to float32).

Abstract everything: the model from ``nnx.eval_shape``, the latents a
``jax.ShapeDtypeStruct``; ``jax.jit(...).lower(...).compile()`` on this machine's default
backend (CPU here: its numbers are the CPU compiler's buffer assignment, a proxy for a GPU's;
the masked one-head attention takes XLA's kernel on both, materialising the logits).

Run: ``.venv/bin/python benchmarks/bench_hunyuan15_vae_tiling.py [--untiled] [--json OUT]``
(each compile takes minutes on a small CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GIB = 2 ** 30
LATENT = (31, 45, 80)      # 121 frames, 720 x 1280


def measure(dtype_name: str, latent_hw: tuple[int, int], attention_only: bool = False) -> dict:
    """One decoder program (or, ``attention_only``, just its mid-block attention block) on
    ``[1, 31, h, w, 32]`` latents (``[1, 31, h, w, 1024]`` features)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.hunyuan_video1_5.vae import (HunyuanVideo15VAE, HunyuanVideo15VAEConfig,
                                                   _reconstruct)

    dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[dtype_name]
    cfg = HunyuanVideo15VAEConfig.base()
    model = nnx.eval_shape(lambda: HunyuanVideo15VAE(cfg, param_dtype=dtype))
    if attention_only:
        model = model.decoder.mid.attn_1
    graphdef, state = nnx.split(model)
    channels = cfg.block_out_channels[-1] if attention_only else cfg.latent_channels
    z = jax.ShapeDtypeStruct((1, LATENT[0], *latent_hw, channels), dtype)
    start = time.perf_counter()
    if attention_only:
        run = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))
        compiled = run.lower(state, z).compile()
    else:
        compiled = _reconstruct.lower(graphdef, state, z).compile()
    seconds = time.perf_counter() - start
    m = compiled.memory_analysis()
    return {"dtype": dtype_name, "input": [1, LATENT[0], *latent_hw, channels],
            "argument_bytes": m.argument_size_in_bytes, "output_bytes": m.output_size_in_bytes,
            "temp_bytes": m.temp_size_in_bytes, "alias_bytes": m.alias_size_in_bytes,
            "generated_code_bytes": m.generated_code_size_in_bytes,
            "compile_s": round(seconds, 1), "backend": jax.default_backend()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--untiled", action="store_true", help="also the one-pass program")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()

    from vidax.models.hunyuan_video1_5.vae import AUTHORS_SMALL_GPU_TILES, tile_geometry

    geometry = tile_geometry(LATENT, tiled=True)
    small = tile_geometry(LATENT, tiled=AUTHORS_SMALL_GPU_TILES)
    print(f"720p 121 frames, authors' tiles: {geometry.count} decoder passes, shapes "
          f"{geometry.shapes}; small-GPU tiles: {small.count} passes, largest {small.latent}")
    cases = [("tile", geometry.latent[1:], False), ("tile_128px", small.latent[1:], False),
             ("tile_attn", geometry.latent[1:], True)]
    if args.untiled:
        cases += [("untiled", LATENT[1:], False), ("untiled_attn", LATENT[1:], True)]
    rows = []
    for name, hw, attention_only in cases:
        for dtype in args.dtypes.split(","):
            row = {"program": name, **measure(dtype, hw, attention_only)}
            rows.append(row)
            peak = row["argument_bytes"] + row["output_bytes"] + row["temp_bytes"]
            print(f"{name:12s} {dtype:9s} input {row['input']}: arguments "
                  f"{row['argument_bytes'] / GIB:.2f} GiB, output {row['output_bytes'] / GIB:.2f}"
                  f" GiB, temp {row['temp_bytes'] / GIB:.2f} GiB, sum {peak / GIB:.2f} GiB "
                  f"(compile {row['compile_s']} s, {row['backend']})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
