"""Quantizing at load (issue #19; ``vidax.load(..., quantize="int8" | "fp8")``,
``vidax.translator.quantize``): the bytes a DiT's parameters hold and its output error
against the unquantized model, per family, side by side in one run.

Two tables:

1. **Small random DiTs, measured.** Each family's DiT at a small config whose block Linears
   reach the quantizer's 2**14-value minimum (the configs of tests/sharding/
   test_family_models.py, Wan2.1 at tests/sharding/common.py's), with its own random
   initialisation (``vidax.nn.layers``: kernels N(0, 1/fan_in), zero biases, unit norms),
   run in float32 (matmul precision "highest") on random inputs. The quantized model is the
   float one with every eligible Linear kernel replaced by ``quantize_kernel``'s ``QArray``:
   the function ``vidax.load`` calls on each weight. The ``wan2_1 (file)`` row goes through
   ``vidax.load`` itself, from an authors'-layout file of PyTorch's ``WanModel`` with random
   values (tests/reference), and checks that its codes equal the in-memory route's, bit for
   bit. Columns: Linear kernels quantized of all Linear kernels; bytes held (the sum of the
   parameters' ``nbytes``: 1 byte a quantized value + a float32 scale per output channel,
   the rest float32; it must equal ``quantized_bytes`` from the abstract tree, checked);
   the output's relative L2 error ``|out - ref| / |ref|`` and max abs error, beside the
   reference output's std.

   Tiny random weights are NOT a quality measurement of the released models: their weights
   are Gaussian with no outlier channels (int8's per-channel absmax scale suffers from
   outliers; e4m3's does much less), the models have 1-2 blocks where a release has 30-60,
   and the output of one DiT call is not a video. What the numbers show is the size of the
   rounding each format makes and that it stays in proportion through every family's
   layers; the error on a real release is to be measured on its weights (an accelerator
   check: the prepared script runs a 14B-shaped block).

2. **Full size, from the abstract trees** (``quantized_bytes``, no file): the GB each
   family's largest released DiT holds in bf16, and with ``quantize`` int8 / fp8 (the rest
   bf16), and how many Linear kernels that quantizes.

    python benchmarks/quantize_at_load.py            # ~1 min on 2 cores
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks.common import load_average, machine_line, table  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
MODES = ("int8", "fp8")


# ----------------------------------------------------------------------------- the models
def _wan():
    from vidax.models.wan2_1.dit import WanDiT, WanDiTConfig

    cfg = dataclasses.replace(WanDiTConfig.tiny(), dim=256, ffn_dim=1024, num_heads=8,
                              text_dim=64)
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((1, 3, 8, 12, 16)).astype(np.float32),
              "t": np.asarray([700.0], np.float32),
              "context": rng.standard_normal((1, 12, cfg.text_dim)).astype(np.float32)}
    return ("wan2_1", cfg, WanDiT(cfg, keys=2), inputs, lambda m, a: m(a["x"], a["t"],
                                                                      a["context"]))


def _cogvideox():
    from vidax.models.cogvideox.dit import CogVideoXDiT, CogVideoXDiTConfig

    cfg = dataclasses.replace(CogVideoXDiTConfig.tiny("5b"), num_attention_heads=8)
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((1, 2, 8, 12, cfg.in_channels)).astype(np.float32),
              "context": rng.standard_normal(
                  (1, cfg.max_text_seq_length, cfg.text_embed_dim)).astype(np.float32),
              "t": np.array([900.0], np.float32)}
    return ("cogvideox", cfg, CogVideoXDiT(cfg, keys=4), inputs,
            lambda m, a: m(a["x"], a["context"], a["t"]))


def _cosmos2_5():
    from vidax.models.cosmos2_5.dit import CosmosDiT, CosmosDiTConfig

    cfg = dataclasses.replace(CosmosDiTConfig.tiny(), model_channels=128, num_heads=8)
    rng = np.random.default_rng(0)
    grid = (2, 8, 12)
    condition = np.zeros((1, *grid, 1), np.float32)
    condition[:, 0] = 1.0
    inputs = {"x": rng.standard_normal((1, *grid, cfg.in_channels)).astype(np.float32),
              "timesteps": np.array([[0.1, 800.0]], np.float32),
              "context": rng.standard_normal(
                  (1, 10, cfg.crossattn_proj_in_channels)).astype(np.float32),
              "condition_mask": condition}
    return ("cosmos2_5", cfg, CosmosDiT(cfg, keys=3), inputs,
            lambda m, a: m(a["x"], a["timesteps"], a["context"],
                           condition_mask=a["condition_mask"]))


def _hunyuan_video():
    from vidax.models.hunyuan_video.dit import HunyuanVideoDiT, HunyuanVideoDiTConfig

    cfg = dataclasses.replace(HunyuanVideoDiTConfig.tiny(), hidden_size=256, heads_num=8)
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((1, 2, 8, 12, cfg.in_channels)).astype(np.float32),
              "t": np.array([900.0], np.float32),
              "text_states": rng.standard_normal((1, 8, cfg.text_states_dim)).astype(np.float32),
              "text_mask": np.ones((1, 8), np.int32),
              "text_states_2": rng.standard_normal((1, cfg.text_states_dim_2)
                                                   ).astype(np.float32),
              "guidance": np.array([6000.0], np.float32)}
    return ("hunyuan_video", cfg, HunyuanVideoDiT(cfg, keys=7), inputs,
            lambda m, a: m(a["x"], a["t"], a["text_states"], a["text_mask"],
                           a["text_states_2"], a["guidance"]))


def _ltx_video():
    from vidax.models.ltx_video.dit import LTXVideoDiT, LTXVideoDiTConfig

    cfg = dataclasses.replace(LTXVideoDiTConfig.tiny(), num_attention_heads=8,
                              attention_head_dim=16, cross_attention_dim=128)
    rng = np.random.default_rng(0)
    inputs = {"latents": rng.standard_normal((1, 2, 4, 6, cfg.in_channels)).astype(np.float32),
              "timestep": np.array([0.9], np.float32),
              "context": rng.standard_normal((1, 8, cfg.caption_channels)).astype(np.float32),
              "context_mask": np.ones((1, 8), np.int32)}
    return ("ltx_video", cfg, LTXVideoDiT(cfg, keys=1), inputs,
            lambda m, a: m(a["latents"], a["timestep"], a["context"], a["context_mask"],
                           frame_rate=25.0))


FAMILIES = (_wan, _cogvideox, _cosmos2_5, _hunyuan_video, _ltx_video)


# ----------------------------------------------------------------------------- measuring
def quantized_copy(model: nnx.Module, mode: str) -> nnx.Module:
    """``model`` with every eligible Linear kernel replaced by the ``QArray`` ``vidax.load``
    would place for it (``quantize_kernel`` of its float32 values)."""
    from vidax.nn.quant import QArray
    from vidax.translator import quantize as qz

    graphdef, state = nnx.split(model)
    chosen = qz.eligible(model)
    leaves = []
    for path, var in nnx.to_flat_state(state):
        name = ".".join(str(p) for p in path)
        if name in chosen:
            data, scale = qz.quantize_kernel(np.asarray(var.get_value()), mode)
            var = var.replace(QArray(jax.device_put(np.asarray(data)), jax.device_put(scale),
                                     None, qz.FORMATS[mode]))
        leaves.append((path, var))
    return nnx.merge(graphdef, nnx.from_flat_state(leaves))


def held(model: nnx.Module) -> int:
    from vidax.translator.verify import flat_params

    return sum(v.nbytes for v in flat_params(model).values())


def _run(call, model, inputs) -> np.ndarray:
    return np.asarray(nnx.jit(call)(model, inputs), np.float64)


def _spec(model_type: str):
    """The model type's DiT spec (its first registered layout: the model is the same)."""
    from vidax import registry

    return next(s for s in registry.specs() if (s.model_type, s.component) == (model_type,
                                                                              "dit"))


def _row(name, model_type, cfg, models: dict, inputs, call) -> list:
    from vidax.translator import quantize as qz

    spec = _spec(model_type)
    ref = _run(call, models[None], inputs)
    kernels = len(qz.linear_kernels(models[None]))
    row = [name, f"{len(qz.eligible(models[None]))}/{kernels}", held(models[None])]
    errors = []
    for mode in MODES:
        got = held(models[mode])
        assert got == qz.quantized_bytes(spec, cfg, None, mode)[0], (name, mode)
        row.append(f"{got} ({got / row[2]:.3f})")
        out = _run(call, models[mode], inputs)
        errors += [f"{np.linalg.norm(out - ref) / np.linalg.norm(ref):.2e}",
                   f"{np.abs(out - ref).max():.2e}"]
    return row + errors + [f"{ref.std():.3f}"]


def small_table() -> str:
    rows = []
    for build in FAMILIES:
        start = time.perf_counter()
        name, cfg, model, inputs, call = build()
        models = {None: model, **{m: quantized_copy(model, m) for m in MODES}}
        rows.append(_row(name, name, cfg, models, inputs, call))
        print(f"  {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    rows.append(_wan_file_row())
    headers = ["DiT", "Linear quantized", "float32 bytes", "int8 bytes (ratio)",
               "fp8 bytes (ratio)", "int8 rel L2", "int8 max abs", "fp8 rel L2",
               "fp8 max abs", "ref std"]
    return table(headers, rows)


def _wan_file_row() -> list:
    """Wan2.1 through ``vidax.load(..., quantize=)`` from an authors'-layout file; its codes
    checked equal to :func:`quantized_copy` of the float load."""
    import vidax
    from tests.sharding.common import write_authors_dit
    from vidax.translator.verify import flat_params

    name, cfg, _, inputs, call = _wan()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_authors_dit(cfg, pathlib.Path(tmp) / "wan.safetensors")
        models = {m: vidax.load("wan2_1", "dit", path, config=cfg, quantize=m)
                  for m in (None, *MODES)}
    for mode in MODES:
        loaded, copied = flat_params(models[mode]), flat_params(quantized_copy(models[None],
                                                                               mode))
        for key, value in loaded.items():
            if hasattr(value, "data"):
                assert np.array_equal(np.asarray(value.data).view(np.uint8),
                                      np.asarray(copied[key].data).view(np.uint8)), key
    return _row("wan2_1 (file)", "wan2_1", cfg, models, inputs, call)


def full_size_table() -> str:
    from vidax.translator import quantize as qz
    from vidax.translator.verify import abstract_model

    rows = []
    for key, variant in (("wan2_1", "t2v-14b"), ("wan2_2", "t2v-a14b"), ("cogvideox", "5b"),
                         ("cosmos2_5", "predict-14b"), ("hunyuan_video", "t2v-720p"),
                         ("ltx_video", "0.9.8-13b-dev"), ("hunyuan_video1_5", "720p_t2v"),
                         ("ltx2_5", "2.3-22b-dev")):
        spec = _spec(key)
        cfg = spec.make_config(variant)
        bf16, _ = qz.quantized_bytes(spec, cfg, "bf16", None)
        row = [f"{key} {variant}", f"{bf16 / 1e9:.2f}"]
        for mode in MODES:
            total, _ = qz.quantized_bytes(spec, cfg, "bf16", mode)
            row.append(f"{total / 1e9:.2f} ({total / bf16:.3f})")
        model = abstract_model(spec.model_class(), cfg)
        row.append(f"{len(qz.eligible(model))}/{len(qz.linear_kernels(model))}")
        rows.append(row)
    return table(["DiT (released config)", "bf16 GB", "int8 GB (ratio)", "fp8 GB (ratio)",
                  "Linear quantized"], rows)


def main() -> None:
    print(f"# quantize at load -- {machine_line()}; load average {load_average()}\n")
    print("Small random DiTs (float32 compute, one call; not a quality measurement):\n")
    print(small_table(), flush=True)
    print("\nReleased configs, from the abstract trees (rest of the parameters bf16):\n")
    print(full_size_table())
    print(f"\nload average {load_average()} at the end")


if __name__ == "__main__":
    main()
