"""The prepared accelerator check: every family's DiT at full width (``--blocks`` of its blocks)
and the Wan VAEs' decode of one latent chunk, at each release's default video size, in
bfloat16 with vidax's default attention -- compile time, time per block, TFLOP/s, MFU and peak
device memory, one JSON and one markdown table.

One script for a lent GPU (an H100/H200: jax[cuda], flax and torch there; not diffusers, not
the authors' packages), meant to finish in under 8 minutes at ``--blocks 2``:

* **DiTs** (table ``FAMILIES``): the released config of each family's flagship (the largest
  release) with its block count(s) set to ``--blocks`` (HunyuanVideo 1.0: that many double
  *and* single blocks), random weights from the model's own init (``KeyGen``), in the dtype
  the family's pipeline loads under ``--precision bf16`` (Cosmos-Predict2.5 keeps float32
  weights), bfloat16 compute. Inputs: batch 1 at the release's default size and frame count
  (``vidax.pipelines.<family>.defaults_for``), the latent grid rounded up to the DiT's patch,
  the text lengths of the family's pipeline. The timed call is the DiT's own ``__call__``
  (embeddings + blocks + head), so "per block" = time / blocks timed includes the
  embeddings' and head's share; "full depth" = per block x the released block count.
* **VAEs** (table ``VAES``): one later decode chunk (one latent frame -> 4 frames, the
  causal cache given) of the Wan2.1 and Wan2.2 VAEs at full width, bfloat16 weights and
  activations (the pipelines decode in float32: this is the bf16 figure), at the size of the
  Wan2.1 / Wan2.2 flagship. "Per video" = per chunk x latent frames.
* **FLOPs**: XLA's own count, generic across families: ``jit(f).lower(...).cost_analysis()``
  of the same forward with ``VIDAX_ATTENTION=xla`` (traced only, not compiled), so the
  attention matmuls are counted whatever kernel ran (a cuDNN flash-attention custom call is
  not in XLA's count: ``compile().cost_analysis()`` of the timed program is recorded too, as
  ``flops_compiled``). TFLOP/s = FLOPs / best time; MFU = that / the device's dense bf16 peak
  (``benchmarks.common.PEAK_BF16_TFLOPS``).
* **Attention**: the kernel ``vidax.nn.attention`` chose (its log lines) and the custom calls
  in the compiled program (``__cudnn$fmha*`` = cuDNN flash attention).
* **Memory**: ``jax.devices()[0].memory_stats()["peak_bytes_in_use"]`` (n/a on CPU), and
  XLA's ``memory_analysis()`` of the compiled program.
* **PyTorch**: for Wan2.1 only, the authors' ``WanAttentionBlock`` at the same config and
  tokens (``benchmarks/gpu_dit_blocks.py``: their source files, carried, SDPA for flash-attn,
  autocast bf16; blocks only, no embeddings/head); the other families have no reference on the
  device ("n/a").
* Once: ``jax.device_put`` of a transposed bf16 view equals the contiguous copy
  (``benchmarks.common.check_strided_placement``, what ``vidax.load`` relies on).

Each item runs in its own subprocess (its own peak memory; a crash or a hung compile costs
that item only), killed at ``--item-timeout-s`` or when ``--budget-s`` runs out; items not
started in time are listed as skipped. The JSON and the markdown are rewritten after every
item, so a run cut off keeps what it measured; a failed item records its error and stage.

Usage:
  python3 benchmarks/device_check.py --out DIR [--blocks 2] [--repeats 3] [--budget-s 450]
      [--families wan2_1,cosmos3] [--vaes wan2_1] [--no-torch] [--attention xla|cudnn]
  python3 benchmarks/device_check.py --smoke --out DIR   # tiny configs on a CPU, 45-60 s
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Configs only (no JAX): the parent process never touches the accelerator.
from vidax.models.cogvideox.config import CogVideoXDiTConfig  # noqa: E402
from vidax.models.cosmos2_5.config import CosmosDiTConfig  # noqa: E402
from vidax.models.cosmos3.config import Cosmos3DiTConfig  # noqa: E402
from vidax.models.hunyuan_video.config import HunyuanVideoDiTConfig  # noqa: E402
from vidax.models.hunyuan_video1_5.config import HunyuanVideo15DiTConfig  # noqa: E402
from vidax.models.ltx2_5.config import LTX2DiTConfig  # noqa: E402
from vidax.models.ltx_video.config import LTXVideoDiTConfig  # noqa: E402
from vidax.models.wan2_1.config import WanDiTConfig, WanVAEConfig  # noqa: E402
from vidax.models.wan2_2.config import Wan22DiTConfigs, Wan22VAEConfig  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "out" / "device_check"
#: --smoke: every family's tiny config on a 9-frame 64 x 64 video, text cut to 16 tokens.
SMOKE_VIDEO, SMOKE_TEXT = (9, 64, 64, 24.0), 16


# ----------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class Video:
    """The clip a DiT step is timed on: ``frames`` x ``height`` x ``width`` at ``fps``, and
    its latent ``grid`` (T, H, W) after the VAE, rounded up to the DiT's patch."""

    frames: int
    height: int
    width: int
    fps: float
    grid: tuple[int, int, int]


class Built(NamedTuple):
    """A DiT ready to time: ``make()`` builds the model (random weights; run under ``jit``),
    its inputs (numpy, batch 1), ``forward(model, inputs, compute_dtype)`` (the pipeline's call
    of it), a note of its context tokens, and ``prepare(graphdef, state, inputs) -> inputs``
    for what the pipeline computes once per prompt (untimed)."""

    make: Callable[[], Any]
    inputs: dict
    forward: Callable
    context: str
    prepare: Callable | None = None


def _randn(rng, *shape, scale: float = 1.0):
    import numpy as np

    return (scale * rng.standard_normal(shape)).astype(np.float32)


def _wan(cfg, video, text, cd, pdt, rng):
    import numpy as np

    from vidax.models.wan2_1.dit import WanDiT

    inputs = {"x": _randn(rng, 1, *video.grid, cfg.in_dim), "t": np.array([500.0], np.float32),
              "context": _randn(rng, 1, text, cfg.text_dim)}
    fwd = lambda m, a, cd: m(a["x"], a["t"], a["context"], compute_dtype=cd)
    padded = f"; {text} given, zero-padded" if text < cfg.text_len else ""
    return Built(lambda: WanDiT(cfg, keys=0, param_dtype=pdt), inputs, fwd,
                 f"{cfg.text_len} text (cross-attn{padded})")


def _cosmos2_5(cfg, video, text, cd, pdt, rng):
    import numpy as np

    from vidax.models.cosmos2_5.dit import CosmosDiT

    inputs = {"x": _randn(rng, 1, *video.grid, cfg.in_channels),
              "t": np.array([500.0], np.float32),
              "context": _randn(rng, 1, text, cfg.crossattn_proj_in_channels)}
    fwd = lambda m, a, cd: m(a["x"], a["t"], a["context"], compute_dtype=cd)
    return Built(lambda: CosmosDiT(cfg, keys=0, param_dtype=pdt), inputs, fwd,
                 f"{text} text (cross-attn)")


def _cosmos3(cfg, video, text, cd, pdt, rng):
    import jax
    import numpy as np
    from flax import nnx

    from vidax.models.cosmos3.dit import Cosmos3DiT

    inputs = {"latents": _randn(rng, 1, *video.grid, cfg.latent_channel),
              "t": np.array([500.0], np.float32),
              "ids": rng.integers(0, cfg.vocab_size, (1, text)).astype(np.int32)}

    def prepare(graphdef, state, a):
        """The prompt's keys/values (``prompt_kv=``): the pipeline computes them once per
        prompt; random values of their shapes here (no compile)."""
        shapes = jax.eval_shape(lambda s, ids: nnx.merge(graphdef, s).encode_prompt(
            ids, compute_dtype=cd), state, a["ids"])
        k, v = (jax.random.normal(jax.random.key(i), x.shape, x.dtype)
                for i, x in enumerate(shapes))
        return {"latents": a["latents"], "t": a["t"], "k": k, "v": v}

    fwd = lambda m, a, cd: m(a["latents"], a["t"], prompt_kv=(a["k"], a["v"]), compute_dtype=cd)
    return Built(lambda: Cosmos3DiT(cfg, keys=0, param_dtype=pdt), inputs, fwd,
                 f"{text} prompt (keys beside the video's)", prepare)


def _ltx_video(cfg, video, text, cd, pdt, rng):
    import numpy as np

    from vidax.models.ltx_video.dit import LTXVideoDiT

    inputs = {"latents": _randn(rng, 1, *video.grid, cfg.in_channels),
              "t": np.array([0.5], np.float32),
              "context": _randn(rng, 1, text, cfg.caption_channels),
              "mask": np.ones((1, text), np.int32)}
    fwd = lambda m, a, cd: m(a["latents"].astype(cd), a["t"], a["context"].astype(cd),
                             a["mask"], frame_rate=video.fps)
    return Built(lambda: LTXVideoDiT(cfg, keys=0, param_dtype=pdt), inputs, fwd,
                 f"{text} text (cross-attn, masked)")


def _ltx2(cfg, video, text, cd, pdt, rng):
    import numpy as np

    from vidax.models.ltx2_5.dit import LTX2DiT, Modality, audio_positions, video_positions
    from vidax.pipelines.ltx2_5_request import AUDIO_LATENTS_PER_SECOND

    n_video = math.prod(video.grid)
    n_audio = round(video.frames / video.fps * AUDIO_LATENTS_PER_SECOND)
    # 19B: the DiT projects the caption features; 2.3+: the contexts come projected
    projected = cfg.caption_proj_before_connector
    v_ctx = cfg.cross_attention_dim if projected else cfg.caption_channels
    a_ctx = cfg.audio_cross_attention_dim if projected else cfg.caption_channels
    inputs = {"v": _randn(rng, 1, n_video, cfg.in_channels), "sigma": np.array([0.5], np.float32),
              "v_pos": video_positions(*video.grid, video.fps),
              "v_ctx": _randn(rng, 1, text, v_ctx),
              "a": _randn(rng, 1, n_audio, cfg.audio_in_channels),
              "a_pos": audio_positions(n_audio), "a_ctx": _randn(rng, 1, text, a_ctx)}

    def fwd(m, a, cd):
        v = Modality(a["v"].astype(cd), a["sigma"], a["sigma"], a["v_pos"], a["v_ctx"].astype(cd))
        au = Modality(a["a"].astype(cd), a["sigma"], a["sigma"], a["a_pos"],
                      a["a_ctx"].astype(cd))
        return m(v, au)

    return Built(lambda: LTX2DiT(cfg, keys=0, param_dtype=pdt), inputs, fwd,
                 f"{n_audio} audio tokens; {text} text (cross-attn, each stream)")


def _hunyuan(cfg, video, text, cd, pdt, rng):
    import numpy as np

    from vidax.models.hunyuan_video.dit import HunyuanVideoDiT

    inputs = {"x": _randn(rng, 1, *video.grid, cfg.in_channels),
              "t": np.array([500.0], np.float32),
              "text": _randn(rng, 1, text, cfg.text_states_dim),
              "mask": np.ones((1, text), np.int32),
              "pooled": _randn(rng, 1, cfg.text_states_dim_2),
              "guidance": np.array([6000.0], np.float32)}
    fwd = lambda m, a, cd: m(a["x"], a["t"], a["text"], a["mask"], a["pooled"], a["guidance"],
                             compute_dtype=cd)
    return Built(lambda: HunyuanVideoDiT(cfg, keys=0, param_dtype=pdt), inputs, fwd,
                 f"{text} text (joint attention)")


def _hunyuan15(cfg, video, text, cd, pdt, rng):
    import numpy as np

    from vidax.pipelines.hunyuan_video1_5 import BYT5_LEN, TEXT_LEN
    from vidax.models.hunyuan_video1_5.dit import HunyuanVideo15DiT

    n_byt5 = max(1, round(text * BYT5_LEN / TEXT_LEN))
    inputs = {"x": _randn(rng, 1, *video.grid, cfg.img_in_channels),
              "t": np.array([500.0], np.float32),
              "text": _randn(rng, 1, text, cfg.text_states_dim),
              "mask": np.ones((1, text), np.int32),
              "byt5": _randn(rng, 1, n_byt5, cfg.byt5_states_dim),
              "byt5_mask": np.ones((1, n_byt5), np.int32)}
    fwd = lambda m, a, cd: m(a["x"], a["t"], a["text"], a["mask"], a["byt5"], a["byt5_mask"],
                             compute_dtype=cd)   # text-to-video: no vision states
    return Built(lambda: HunyuanVideo15DiT(cfg, keys=0, param_dtype=pdt), inputs, fwd,
                 f"{text} text + {n_byt5} byT5 (joint attention)")


def _cogvideox(cfg, video, text, cd, pdt, rng):
    import numpy as np

    from vidax.models.cogvideox.dit import CogVideoXDiT

    inputs = {"x": _randn(rng, 1, *video.grid, cfg.in_channels),
              "context": _randn(rng, 1, text, cfg.text_embed_dim),
              "t": np.array([500.0], np.float32)}
    fwd = lambda m, a, cd: m(a["x"], a["context"], a["t"], compute_dtype=cd)
    return Built(lambda: CogVideoXDiT(cfg, keys=0, param_dtype=pdt), inputs, fwd,
                 f"{text} text (joint attention)")


def _pipeline(family: str):
    return importlib.import_module(f"vidax.pipelines.{family}")


@dataclass(frozen=True)
class Family:
    """One family's flagship DiT: its released and tiny configs, the config fields holding its
    block counts, its pipeline's defaults (size, frames, fps), the VAE's (t, h, w) strides,
    the DiT's patch, its text length, the weights' dtype under ``--precision bf16``, and the
    builder of the model and its inputs."""

    release: str
    config: Callable[[], Any]
    tiny: Callable[[], Any]
    depth: tuple[str, ...]
    defaults: Callable[[], Any]
    stride: tuple[int, int, int]
    patch: Callable[[Any], tuple[int, int, int]]
    text: Callable[[Any], int]
    build: Callable[..., Built]
    param_dtype: str = "bfloat16"
    trim: dict = dataclasses.field(default_factory=dict)   # fields the timed call never uses


FAMILIES: dict[str, Family] = {
    "wan2_1": Family(
        "t2v-14b", WanDiTConfig.t2v_14b, WanDiTConfig.tiny, ("num_layers",),
        lambda: _pipeline("wan2_1").defaults_for("t2v-14b", "t2v"), (4, 8, 8),
        lambda c: c.patch_size, lambda c: c.text_len, _wan),
    # TI2V-5B: the A14B experts are Wan2.1 T2V-14B's config at its size (the row above)
    "wan2_2": Family(
        "ti2v-5b", Wan22DiTConfigs.ti2v_5b, lambda: Wan22DiTConfigs.tiny("t2v"), ("num_layers",),
        lambda: _pipeline("wan2_2").defaults_for("ti2v-5b", "ti2v"), (4, 16, 16),
        lambda c: c.patch_size, lambda c: c.text_len, _wan),
    "cosmos2_5": Family(
        "predict-14b-post-trained", CosmosDiTConfig.predict_14b, CosmosDiTConfig.tiny,
        ("num_blocks",), lambda: _pipeline("cosmos2_5").defaults_for("predict-14b-post-trained"),
        (4, 8, 8),
        lambda c: c.patch_size, lambda c: _pipeline("cosmos2_5").TEXT_LEN, _cosmos2_5,
        param_dtype="float32"),
    # 256 prompt tokens: a typical chat-templated prompt (the pipeline's length varies)
    "cosmos3": Family(
        "nano", Cosmos3DiTConfig.nano, Cosmos3DiTConfig.tiny, ("num_hidden_layers",),
        lambda: _pipeline("cosmos3").defaults_for("nano"), (4, 16, 16),
        lambda c: (1, c.latent_patch_size, c.latent_patch_size), lambda c: 256, _cosmos3),
    "ltx_video": Family(
        "0.9.8-13b-dev", LTXVideoDiTConfig.ltxv_13b_0_9_8_dev, LTXVideoDiTConfig.tiny,
        ("num_layers",), lambda: _pipeline("ltx_video").defaults_for("0.9.8-13b-dev"),
        (8, 32, 32), lambda c: (1, 1, 1), lambda c: _pipeline("ltx_video").TEXT_LEN, _ltx_video),
    # the two-stage default's output size (stage 2's DiT runs at it; stage 1 at half)
    "ltx2_5": Family(
        "2.5-22b-dev", LTX2DiTConfig.ltx2_5_22b, LTX2DiTConfig.tiny, ("num_layers",),
        lambda: _pipeline("ltx2_5").defaults_for("2.5-22b-dev", True), (8, 32, 32),
        lambda c: (1, 1, 1), lambda c: _pipeline("ltx2_5").TEXT_LEN, _ltx2,
        trim={"connector_num_layers": 1, "audio_connector_num_layers": 1}),
    "hunyuan_video": Family(
        "t2v-720p", HunyuanVideoDiTConfig.t2v_720p, HunyuanVideoDiTConfig.tiny,
        ("mm_double_blocks_depth", "mm_single_blocks_depth"),
        lambda: _pipeline("hunyuan_video").defaults_for("t2v-720p"), (4, 8, 8),
        lambda c: c.patch_size, lambda c: _pipeline("hunyuan_video").TEXT_LEN, _hunyuan),
    "hunyuan_video1_5": Family(
        "720p_t2v", HunyuanVideo15DiTConfig.t2v_720p, HunyuanVideo15DiTConfig.tiny,
        ("mm_double_blocks_depth",),
        lambda: _pipeline("hunyuan_video1_5").defaults_for("720p_t2v"), (4, 16, 16),
        lambda c: c.patch_size, lambda c: _pipeline("hunyuan_video1_5").TEXT_LEN, _hunyuan15),
    "cogvideox": Family(
        "1.5-5b", CogVideoXDiTConfig.cogvideox1_5_5b, lambda: CogVideoXDiTConfig.tiny("1.5-5b"),
        ("num_layers",), lambda: _pipeline("cogvideox").DEFAULTS["1.5-5b"], (4, 8, 8),
        lambda c: (c.patch_size_t or 1, c.patch_size, c.patch_size),
        lambda c: c.max_text_seq_length, _cogvideox),
}


@dataclass(frozen=True)
class Vae:
    """A VAE decoded one chunk at a time: its released and tiny configs, the model class
    (``module:Class``) and the DiT family whose flagship's size it decodes."""

    name: str
    config: Callable[[], Any]
    tiny: Callable[[], Any]
    model: str
    size_of: str


VAES: dict[str, Vae] = {
    "wan2_1": Vae("Wan2.1 VAE", WanVAEConfig.wan2_1, WanVAEConfig.tiny,
                  "vidax.models.wan2_1.vae:WanVAE", "wan2_1"),
    "wan2_2": Vae("Wan2.2 VAE", Wan22VAEConfig.wan2_2, Wan22VAEConfig.tiny,
                  "vidax.models.wan2_2.vae:Wan22VAE", "wan2_2"),
}


def release_video(family: Family, cfg, smoke: bool) -> Video:
    """The release's default clip (``smoke``: 9 frames at 64 x 64) and its latent grid."""
    if smoke:
        frames, height, width, fps = SMOKE_VIDEO
    else:
        d = family.defaults()
        (width, height), frames, fps = d.size, d.frames, d.fps
    st, ss = family.stride[0], family.stride[1]
    latent = ((frames - 1) // st + 1, height // ss, width // ss)
    grid = tuple(-(-n // p) * p for n, p in zip(latent, family.patch(cfg)))
    return Video(frames, height, width, fps, grid)


# ----------------------------------------------------------------------------- worker
def _cost(analysis) -> dict:
    """``cost_analysis()``'s dict (older JAX: a one-element list of it)."""
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else {}
    return dict(analysis or {})


def _device_info() -> dict:
    import flax
    import jax

    from benchmarks.common import peak_tflops

    device = jax.devices()[0]
    name = getattr(device, "device_kind", str(device))
    return {"device": name, "platform": device.platform, "jax": jax.__version__,
            "flax": flax.__version__, "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "peak_bf16_tflops": peak_tflops(name) if device.platform == "gpu" else None}


def _peak_memory() -> int | None:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def capture_attention_log() -> list[str]:
    """A list that collects the ``vidax.attention`` log lines (which kernel each kind of call
    got) from now on, replacing the previous item's."""
    import logging

    attention = importlib.import_module("vidax.nn.attention")
    # each kind of call is logged once per process: again for each item of a worker
    getattr(attention._log_once, "cache_clear", lambda: None)()
    lines: list[str] = []
    logger = logging.getLogger("vidax.attention")
    for old in [h for h in logger.handlers if getattr(h, "device_check", False)]:
        logger.removeHandler(old)
    handler = logging.Handler(logging.INFO)
    handler.device_check = True
    handler.emit = lambda record: lines.append(record.getMessage())
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return lines


def _custom_calls(hlo_text: str) -> dict[str, int]:
    return dict(Counter(re.findall(r'custom_call_target="([^"]+)"', hlo_text)))


def _model_flops(make_step, *call_args) -> float | None:
    """XLA's FLOP count of a freshly traced ``make_step()`` with XLA's attention (the
    matmuls of every attention visible to the cost analysis), lowered but not compiled."""
    saved = os.environ.get("VIDAX_ATTENTION")
    os.environ["VIDAX_ATTENTION"] = "xla"
    try:
        return _cost(make_step().lower(*call_args).cost_analysis()).get("flops")
    finally:
        if saved is None:
            os.environ.pop("VIDAX_ATTENTION", None)
        else:
            os.environ["VIDAX_ATTENTION"] = saved


def measure(row: dict, save: Callable[[], None], make_step, call_args, repeats: int) -> None:
    """Compile ``make_step()`` for ``call_args``, time it (one warm-up call, then
    ``repeats``), count its FLOPs; fills ``row`` stage by stage, calling ``save`` after each."""
    import jax

    from benchmarks.common import timed

    row["stage"] = "compile"
    start = time.perf_counter()
    lowered = make_step().lower(*call_args)
    row["lower_s"] = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile()
    row["compile_s"] = time.perf_counter() - start
    row["flops_compiled"] = _cost(compiled.cost_analysis()).get("flops")
    mem = compiled.memory_analysis()
    if mem is not None:
        row["xla_temp_bytes"] = int(mem.temp_size_in_bytes)
        row["xla_argument_bytes"] = int(mem.argument_size_in_bytes)
    row["custom_calls"] = _custom_calls(compiled.as_text())
    save()

    row["stage"] = "run"
    start = time.perf_counter()
    jax.block_until_ready(compiled(*call_args))
    row["first_call_s"] = time.perf_counter() - start
    row["times"] = timed(lambda: compiled(*call_args), jax.block_until_ready, repeats, warmup=0)
    row["peak_bytes"] = _peak_memory()
    save()

    row["stage"] = "flops"
    try:
        row["flops"] = _model_flops(make_step, *call_args)
    except Exception as err:  # then TFLOP/s falls back to the compiled program's count
        row["flops_error"] = f"{type(err).__name__}: {err}"[:500]
    row["stage"] = "done"


def init(make):
    """``(graphdef, state)`` of ``make()``: the model's own init, run eagerly (each
    parameter's program compiles once per shape and process; on a CPU that took half the
    compile time of one jitted init program)."""
    import jax
    from flax import nnx

    graphdef, state = nnx.split(make())
    return graphdef, jax.block_until_ready(state)


def _step_factory(graphdef, call):
    """A new jitted ``(state, *args) -> call(model, *args)`` on each call: a fresh function,
    so each lowering traces again (the attention kernel is chosen at trace time)."""
    import jax
    from flax import nnx

    def make_step():
        return jax.jit(lambda state, *args: call(nnx.merge(graphdef, state), *args))
    return make_step


def run_dit(name: str, args, row: dict, save) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    family = FAMILIES[name]
    base = family.tiny() if args.smoke else family.config()
    cfg = dataclasses.replace(base, **{f: args.blocks for f in family.depth}, **family.trim)
    video = release_video(family, cfg, args.smoke)
    text = family.text(cfg)
    text = min(text, SMOKE_TEXT) if args.smoke else text
    cd, pdt = jnp.bfloat16, jnp.dtype(family.param_dtype)
    patch = family.patch(cfg)
    row.update(release=family.release, video=[video.frames, video.height, video.width],
               latent_grid=list(video.grid),
               tokens=math.prod(n // p for n, p in zip(video.grid, patch)),
               blocks_timed=args.blocks * len(family.depth),
               blocks_released=sum(getattr(base, f) for f in family.depth),
               param_dtype=str(pdt), compute_dtype="bfloat16", stage="build")
    print(f"[{name}] {family.release}: {video.frames} frames {video.height}x{video.width} -> "
          f"latent {video.grid}, {row['tokens']} video tokens, {row['blocks_timed']} of "
          f"{row['blocks_released']} blocks", flush=True)
    save()
    start = time.perf_counter()
    built = family.build(cfg, video, text, cd, pdt, np.random.default_rng(0))
    graphdef, state = init(built.make)
    row["init_s"] = time.perf_counter() - start
    row["params"] = int(sum(x.size for x in jax.tree.leaves(state)))
    row["context"] = built.context
    inputs = jax.device_put(built.inputs)
    if built.prepare is not None:
        inputs = built.prepare(graphdef, state, inputs)
    save()
    make_step = _step_factory(graphdef, lambda m, a: built.forward(m, a, cd))
    measure(row, save, make_step, (state, inputs), args.repeats)


def run_vae(name: str, args, row: dict, save) -> None:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    spec = VAES[name]
    cfg = spec.tiny() if args.smoke else spec.config()
    family = FAMILIES[spec.size_of]
    video = release_video(family, family.tiny() if args.smoke else family.config(), args.smoke)
    h, w = video.height // cfg.spatial_stride, video.width // cfg.spatial_stride
    latent_frames = (video.frames - 1) // cfg.temporal_stride + 1
    module, cls = spec.model.split(":")
    row.update(release=f"{spec.name} ({family.release}'s size)",
               video=[video.frames, video.height, video.width], latent_grid=[1, h, w],
               chunks=latent_frames, param_dtype="bfloat16", compute_dtype="bfloat16",
               stage="build")
    print(f"[vae {name}] one chunk: latent 1x{h}x{w} -> {cfg.temporal_stride} frames "
          f"{h * cfg.spatial_stride}x{w * cfg.spatial_stride}", flush=True)
    save()
    start = time.perf_counter()
    model = getattr(importlib.import_module(module), cls)
    graphdef, state = init(lambda: model(cfg, keys=0, param_dtype=jnp.bfloat16))
    row["init_s"] = time.perf_counter() - start
    row["params"] = int(sum(x.size for x in jax.tree.leaves(state)))
    z = jax.random.normal(jax.random.key(0), (1, 1, h, w, cfg.z_dim), jnp.bfloat16)
    # a later chunk: the cache the first chunk leaves (its shapes; the values do not matter)
    shapes = jax.eval_shape(lambda s, z: nnx.merge(graphdef, s).decode_chunk(z, None)[1],
                            state, z)
    cache = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
    save()
    make_step = _step_factory(graphdef, lambda m, z, c: m.decode_chunk(z, c)[0])
    measure(row, save, make_step, (state, z, cache), args.repeats)


def run_torch_wan(args, row: dict, save) -> None:
    """The authors' WanAttentionBlock x blocks at the Wan2.1 row's config and tokens."""
    import numpy as np
    import torch

    from benchmarks.gpu_dit_blocks import authors_model_module, run_torch

    family = FAMILIES["wan2_1"]
    cfg = dataclasses.replace(family.tiny() if args.smoke else family.config(),
                              num_layers=args.blocks)
    video = release_video(family, cfg, args.smoke)
    grid = [n // p for n, p in zip(video.grid, cfg.patch_size)]
    text = min(cfg.text_len, SMOKE_TEXT) if args.smoke else cfg.text_len
    # bf16 weights as the JAX side; CPU autocast has no bf16 path there: float32 on CPU
    pdt = "bfloat16" if torch.cuda.is_available() else "float32"
    row.update(release=family.release, tokens=math.prod(grid), blocks_timed=args.blocks,
               param_dtype=pdt, torch=torch.__version__,
               device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
               stage="load")
    save()
    wan = authors_model_module(None)
    row["stage"] = "run"
    save()
    ns = argparse.Namespace(param_dtype=pdt, repeats=args.repeats)
    row["times"] = run_torch(cfg, args.blocks, grid, ns, text, wan)["times"]
    if torch.cuda.is_available():
        row["peak_bytes"] = int(torch.cuda.max_memory_allocated())
    row["per_block_ms"] = float(np.min(row["times"])) / args.blocks * 1e3
    row["stage"] = "done"


def run_placement(args, row: dict, save) -> None:
    from benchmarks.common import check_strided_placement

    row["stage"] = "run"
    # the 14B FFN weight, [ffn, dim]; a small one on the smoke run
    row.update(check_strided_placement((256, 128) if args.smoke else (13824, 5120),
                                       max(args.repeats, 2)))
    row["stage"] = "done"


def run_one(item: str, args, path: Path) -> None:
    """Run one item, writing its row to ``path`` after each stage."""
    row: dict = {"item": item}

    def save():
        path.write_text(json.dumps(row, default=str))

    kind, _, name = item.partition(":")
    start = time.perf_counter()
    try:
        row["attention"] = capture_attention_log()   # filled as the models trace
        if kind != "torch":
            row.update(_device_info())
        save()
        if kind == "dit":
            run_dit(name, args, row, save)
        elif kind == "vae":
            run_vae(name, args, row, save)
        elif kind == "torch":
            run_torch_wan(args, row, save)
        elif kind == "placement":
            run_placement(args, row, save)
        elif kind == "offload":   # benchmarks/offload.py: Wan2.1-14B blocks streamed or not
            from benchmarks import offload

            row["stage"] = "run"
            save()
            row.update(offload.run_mode(name, offload.parse_args(
                (["--smoke"] if args.smoke else ["--blocks", str(args.offload_blocks)])
                + ["--repeats", str(args.repeats)])))
            row["stage"] = "done"
        else:
            raise ValueError(f"unknown item {item!r}")
    except Exception as err:  # recorded in the row; the parent carries on with the next item
        import traceback

        traceback.print_exc()
        row["error"] = f"{type(err).__name__}: {err}"[:2000]
    row["wall_s"] = time.perf_counter() - start
    save()


def worker(items: list[str], args) -> None:
    """The ``--worker`` process: its items in turn, item ``i``'s row in ``--row-dir/i.json``."""
    import jax

    # Random weights only: the PRNG whose programs compile fastest (one RngBitGenerator op).
    jax.config.update("jax_default_prng_impl", "unsafe_rbg")
    for i, item in enumerate(items):
        run_one(item, args, Path(args.row_dir) / f"{i}.json")


# ----------------------------------------------------------------------------- parent
def plan(args) -> list[str]:
    """The items in order: the placement check, Wan2.1 (with the authors' block and its VAE:
    what must be there if the budget runs short), the other DiTs, the other VAEs."""
    families = [f for f in args.families.split(",") if f]
    vaes = [v for v in args.vaes.split(",") if v]
    unknown = sorted(set(families) - set(FAMILIES)) + sorted(set(vaes) - set(VAES))
    if unknown:
        raise SystemExit(f"unknown families/VAEs {unknown}; known: DiTs {', '.join(FAMILIES)}, "
                         f"VAEs {', '.join(VAES)}")
    items = ["placement"]
    if "wan2_1" in families:
        items += ["dit:wan2_1"] + ([] if args.no_torch else ["torch:wan2_1"])
    items += [f"vae:{v}" for v in vaes if v == "wan2_1"]
    if "wan2_1" in families and not args.no_offload:
        items += ["offload:none", "offload:block"]
    items += [f"dit:{f}" for f in FAMILIES if f in families and f != "wan2_1"]
    items += [f"vae:{v}" for v in VAES if v in vaes and v != "wan2_1"]
    return items


def batches(items: list[str], size: int):
    """Runs of up to ``size`` items (0: any number) for one worker process each; the authors'
    PyTorch block always alone (beside JAX's CPU threads in one process it ran ~30x slower on
    the smoke run)."""
    batch: list[str] = []
    for item in items:
        if item.startswith("torch:"):
            yield from ([batch] if batch else [])
            yield [item]
            batch = []
            continue
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    yield from ([batch] if batch else [])


def run_batch(items: list[str], args, timeout: float) -> list[dict]:
    """``items`` in one subprocess (this script with ``--worker``), their rows back from
    files; an item the process did not finish (killed at ``timeout``, crashed) gets an
    error naming the stage it was in."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", ",".join(items),
               "--row-dir", tmp, "--blocks", str(args.blocks), "--repeats", str(args.repeats)]
        cmd += ["--smoke"] if args.smoke else []
        cmd += ["--attention", args.attention] if args.attention else []
        env = dict(os.environ)
        flags = env.get("XLA_FLAGS", "")
        if args.smoke and "xla_backend_optimization_level" not in flags:
            # tiny programs on a CPU: XLA's cheapest compile (~40 % less time)
            env["XLA_FLAGS"] = (f"{flags} --xla_backend_optimization_level=0 "
                                "--xla_llvm_disable_expensive_passes=true").strip()
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, timeout=timeout, cwd=ROOT, env=env)
            failure = None if proc.returncode == 0 else f"worker exited with {proc.returncode}"
        except subprocess.TimeoutExpired:
            failure = f"cut off at its time limit ({timeout:.0f} s)"
        wall = time.perf_counter() - start
        rows = []
        for i, item in enumerate(items):
            try:
                row = json.loads((Path(tmp) / f"{i}.json").read_text())
            except (OSError, ValueError):
                row = {"item": item}
            if "wall_s" not in row:   # not finished
                row["error"] = (f"{failure or 'worker stopped'} during stage "
                                f"{row.get('stage', 'start')!r}")
                row["wall_s"] = wall
            rows.append(row)
    return rows


def summarise(rows: list[dict]) -> None:
    """Derived figures of each timed row: best/median, per block, full depth, TFLOP/s, MFU."""
    import statistics

    for r in rows:
        times = r.get("times")
        if not times or r["item"].startswith(("torch", "placement", "offload")):
            continue
        r["best_s"], r["median_s"] = min(times), statistics.median(times)
        if r["item"].startswith("dit"):
            r["per_block_ms"] = r["best_s"] / r["blocks_timed"] * 1e3
            r["median_per_block_ms"] = r["median_s"] / r["blocks_timed"] * 1e3
            r["full_depth_s"] = r["best_s"] / r["blocks_timed"] * r["blocks_released"]
        else:
            r["per_video_s"] = r["best_s"] * r["chunks"]
        if not r.get("flops") and r.get("flops_compiled"):
            r["flops"], r["flops_source"] = r["flops_compiled"], "compiled program"
        if r.get("flops"):
            r.setdefault("flops_source", "traced with XLA attention")
            r["tflops"] = r["flops"] / r["best_s"] / 1e12
            peak = r.get("peak_bf16_tflops")
            r["mfu"] = r["tflops"] / peak if peak else None


def _fmt(v, spec: str = ".1f", none: str = "n/a") -> str:
    return none if v is None else format(v, spec)


def _attention(r: dict) -> str:
    kernels = sorted({m.split(":", 1)[1].split(";")[0].strip() for m in r.get("attention", [])
                      if m.startswith("attention kernel:")})
    fmha = sum(n for t, n in r.get("custom_calls", {}).items() if "fmha" in t)
    return (", ".join(kernels) or "?") + (f"; {fmha} cuDNN fMHA calls" if fmha else "")


def markdown(report: dict) -> str:
    rows, by_item = report["rows"], {r["item"]: r for r in report["rows"]}
    head = [f"# Accelerator check -- {report['started']}", "",
            f"Device: {report.get('device', '?')} ({report.get('platform', '?')}), dense bf16 "
            f"peak {_fmt(report.get('peak_bf16_tflops'))} TFLOP/s; jax "
            f"{report.get('jax', '?')}; {report['blocks']} blocks, best/median of "
            f"{report['repeats']}{'; SMOKE (tiny configs)' if report['smoke'] else ''}.", ""]
    place = by_item.get("placement")
    if place:
        head += [("Strided placement: FAILED " + place["error"]) if "error" in place else
                 f"Strided placement (transposed {place['shape'][1]}x{place['shape'][0]} bf16 "
                 f"view): equal {place['equal']}, {place['strided_gb_s']:.1f} GB/s vs "
                 f"{place['plain_gb_s']:.1f} GB/s plain.", ""]
    torch_row = by_item.get("torch:wan2_1")
    dit = ["| family | release | video (frames x H x W) | video tokens; context | blocks | "
           "compile s | ms/block best (median) | full depth s | TFLOP/fwd | TFLOP/s | MFU | "
           "peak mem GiB | attention | PyTorch |", "|" + "---|" * 14]
    vae = ["| VAE | video | latent chunk | compile s | ms/chunk best (median) | s/video | "
           "TFLOP/chunk | TFLOP/s | MFU | peak mem GiB |", "|" + "---|" * 10]
    errors = []
    for r in rows:
        kind, _, name = r["item"].partition(":")
        if kind not in ("dit", "vae"):
            continue
        if "error" in r:
            errors.append(f"* {r['item']}: {r['error']}")
        if "best_s" not in r:
            continue
        mem = _fmt(r["peak_bytes"] / 2**30 if r.get("peak_bytes") else None, ".2f")
        mfu = _fmt(r.get("mfu"), ".1%")
        tflop = _fmt(r["flops"] / 1e12 if r.get("flops") else None, ".3g")
        tflops = _fmt(r.get("tflops"), ".3g")
        compile_s = r["lower_s"] + r["compile_s"]
        video = "x".join(map(str, r["video"]))
        if kind == "dit":
            torch = "n/a (no reference on the device)"
            if name == "wan2_1" and torch_row:
                torch = (f"{torch_row['per_block_ms']:.1f} ms/block (authors' block, blocks "
                         "only)" if "per_block_ms" in torch_row else
                         f"failed: {torch_row.get('error', '?')[:80]}")
            dit.append(
                f"| {name} | {r['release']} | {video} | {r['tokens']}; {r.get('context', '')} | "
                f"{r['blocks_timed']} of {r['blocks_released']} | {compile_s:.1f} | "
                f"{r['per_block_ms']:.2f} ({r['median_per_block_ms']:.2f}) | "
                f"{r['full_depth_s']:.2f} | {tflop} | {tflops} | {mfu} | {mem} | "
                f"{_attention(r)} | {torch} |")
        else:
            vae.append(
                f"| {r['release']} | {video} | 1x{r['latent_grid'][1]}x{r['latent_grid'][2]} | "
                f"{compile_s:.1f} | {r['best_s'] * 1e3:.1f} ({r['median_s'] * 1e3:.1f}) | "
                f"{r['per_video_s']:.2f} | {tflop} | {tflops} | {mfu} | {mem} |")
    offloaded = {r["item"].split(":")[1]: r for r in rows
                 if r["item"].startswith("offload:") and "best_s" in r}
    if len(offloaded) == 2:
        from benchmarks.offload import compare

        c = compare(offloaded)
        table = ["", "Weight offload (benchmarks/offload.py): Wan2.1-14B blocks streamed from "
                 "host memory (--offload block) vs resident, one DiT call.", "",
                 "| mode | blocks | tokens | best s (median) | peak mem GiB | XLA temp GiB | "
                 "device args GiB | host args GiB |", "|" + "---|" * 8]
        for mode, r in offloaded.items():
            table.append(
                f"| {mode} | {r['blocks']} | {r['tokens']} | {r['best_s']:.3f} "
                f"({r['median_s']:.3f}) | "
                f"{_fmt(r['peak_bytes'] / 2**30 if r.get('peak_bytes') else None, '.2f')} | "
                f"{r.get('temp_bytes', 0) / 2**30:.2f} | {r.get('argument_bytes', 0) / 2**30:.2f}"
                f" | {r.get('host_argument_bytes', 0) / 2**30:.2f} |")
        table.append("")
        table.append(f"Offloaded / resident step time {c['overhead']:.3f}; one block "
                     f"{offloaded['block']['block_bytes'] / 2**30:.3f} GiB; blocks' bytes on the "
                     "device during the step: "
                     f"{_fmt(c.get('blocks_on_device_from_peaks'), '.2f')} (from the peaks), "
                     f"{_fmt(c.get('blocks_on_device_from_xla'), '.2f')} (from XLA's temps).")
        head += table + [""]
    notes = ["", "Compile = trace and lowering + XLA's compile. Per block = the DiT's whole call "
             "(embeddings + blocks + head) / blocks timed; full depth = per block x the released "
             "block count. FLOPs: XLA's count of the "
             "forward traced with XLA attention (JSON `flops`; `flops_compiled` is the compiled "
             "program's own count). PyTorch: the authors' blocks alone, no embeddings/head."]
    if report.get("per_process") != 1:
        notes.append("Several items per worker process: peak memory is the process's so far.")
    skipped = [f"* {s}" for s in report.get("skipped", [])]
    return "\n".join(head + dit + [""] + vae + notes
                     + (["", "Errors:"] + errors if errors else [])
                     + (["", "Skipped:"] + skipped if skipped else [])) + "\n"


def write(report: dict, out: Path) -> None:
    summarise(report["rows"])
    first = next((r for r in report["rows"] if "device" in r and "platform" in r), {})
    for key in ("device", "platform", "jax", "peak_bf16_tflops"):
        report[key] = first.get(key)
    (out / "device_check.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "device_check.md").write_text(markdown(report))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(DEFAULT_OUT), help="folder for the JSON and markdown")
    p.add_argument("--smoke", action="store_true", help="tiny configs and sizes (CPU check)")
    p.add_argument("--blocks", type=int, default=2, choices=(1, 2, 3, 4),
                   help="blocks of each kind timed (2-4 at full width)")
    p.add_argument("--repeats", type=int, default=None, help="timed calls (default 3; smoke 1)")
    p.add_argument("--budget-s", type=float, default=450.0,
                   help="no item starts after this many seconds; running ones are cut there")
    p.add_argument("--item-timeout-s", type=float, default=150.0)
    p.add_argument("--min-start-s", type=float, default=20.0,
                   help="an item needs at least this much budget left to start")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--vaes", default=",".join(VAES))
    p.add_argument("--no-torch", action="store_true", help="skip the authors' Wan block")
    p.add_argument("--no-offload", action="store_true",
                   help="skip the offloaded-vs-resident Wan2.1-14B blocks (benchmarks/offload.py)")
    p.add_argument("--offload-blocks", type=int, default=6,
                   help="Wan2.1-14B blocks the offload items time (default 6)")
    p.add_argument("--attention", default=None, help="xla | cudnn (default: vidax's choice)")
    p.add_argument("--per-process", type=int, default=None,
                   help="items per worker process (default 1; --smoke: 0 = any number); "
                        "the authors' PyTorch block always runs alone")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--row-dir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.smoke else 3
    if args.per_process is None:
        args.per_process = 0 if args.smoke else 1
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.attention:
        os.environ["VIDAX_ATTENTION"] = args.attention
    if args.worker:
        worker(args.worker.split(","), args)
        return
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    items = plan(args)
    report = {"script": "benchmarks/device_check.py", "started": time.strftime("%Y-%m-%d %H:%M"),
              "smoke": args.smoke, "blocks": args.blocks, "repeats": args.repeats,
              "per_process": args.per_process,
              "budget_s": args.budget_s, "attention": args.attention or "auto",
              "items": items, "rows": [], "skipped": []}
    print(f"# device check: {len(items)} items, budget {args.budget_s:.0f} s -> {out}",
          flush=True)
    for batch in batches(items, args.per_process):
        left = args.budget_s - (time.perf_counter() - t0)
        if left < args.min_start_s:
            report["skipped"] += [f"{item}: the budget ({args.budget_s:.0f} s) ran out"
                                  for item in batch]
            print(f"-- {', '.join(batch)}: skipped, {left:.0f} s of the budget left", flush=True)
        else:
            for row in run_batch(batch, args, min(args.item_timeout_s * len(batch), left)):
                report["rows"].append(row)
                print(f"-- {row['item']}: "
                      f"{'FAILED ' + row['error'] if 'error' in row else 'done'} "
                      f"({row['wall_s']:.1f} s)", flush=True)
        report["elapsed_s"] = time.perf_counter() - t0
        write(report, out)
    print(markdown(report))


if __name__ == "__main__":
    main()
