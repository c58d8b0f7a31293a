"""Step caching on this CPU: every cache kind beside the uncached run, in one process, on one
Wan2.1 DiT and one real sampling schedule (``vidax.nn.step_cache``; docs/benchmarks.md).

What runs:

* The DiT: Wan2.1-T2V-1.3B's width (dim 1536, 12 heads of 128, ffn 8960, text_dim 4096) at
  reduced depth (``--blocks``, default 2 of 30) and a short text context (``--text-len``,
  default 32 of 512 tokens: the text projection runs outside the blocks on every step and is
  never skipped; at full size it is ~0.01 % of a step, at 2 blocks and 512 tokens it would be
  a quarter). Random weights at the library's init (N(0, 1/fan_in)), with one change so the
  output is a smooth function of the timestep as a trained model's is: the time embedding
  reads only the 57 slowest of its 128 sinusoid frequencies (at most one period over the
  0..1000 timestep range; the fast ones, which jump between sampling steps, get zero weight). Random
  weights do not reproduce a trained model's step-to-step similarity: the skip counts of the
  data-driven kinds (first-block, TeaCache) are not predictive of a real run, and the errors
  of all kinds are those of this toy model, not of Wan. MagCache's and TaylorSeer's skip
  counts are fixed by their settings (MagCache's by the published ratios), so those are the
  real ones.
* The schedule: the Wan2.1 t2v pipeline's, UniPC (bh2, order 2) over the shifted flow
  schedule, shift 5, ``--steps`` (default 50) steps; CFG on the ``[cond, uncond]`` batch of 2
  (two random text contexts) with guidance 5; float32 compute; a ``--frames x --height x
  --width`` latent (default 3 x 12 x 12: 108 tokens a row, 9 frames at 96x96; 3 x 16 x 16
  takes about twice as long).
* The step: the pipelines' own jitted sampling step (``vidax.pipelines.base._sampling_step``
  with the Wan2.1 pipeline as the family: CFG, the scheduler update, the cache states
  threaded and donated), driven by a loop that waits on each step as
  ``PipelineBase.denoise`` does.
* The policies: none; first-block at two thresholds; MagCache with the published
  Wan2.1-T2V-1.3B ratios at the authors' settings (0.12, K 2, retention 0.2) and at
  diffusers' defaults (0.06, K 3); TaylorSeer at diffusers' defaults (interval 5, warmup 3,
  order 1) and at order 2; TeaCache with the published 1.3B polynomial at 0.05 and 0.2.
* Measured: the sampling loop's wall time, warm (every policy's step compiled first), over
  ``--repeats`` rounds. A round runs a fresh loop of every policy, all advanced in lockstep --
  step i of each, then step i + 1 (``benchmarks.common.time_interleaved`` with the steps as
  its rounds) -- because load from other processes on this shared VM comes and goes within
  seconds: interleaving whole loops let one loop run on an idle machine and the next on a
  busy one (a first version measured the uncached loop at half the per-step time of every
  cached one). A loop's time is the sum of its steps' (each step waited on, as
  ``PipelineBase.denoise`` does); best and median over the rounds; the speedup over the
  uncached loop (best / best); DiT evaluations made and skipped (a step counts as made when
  any CFG row ran the blocks); the median seconds of a step that ran the blocks and of one
  that skipped them; the relative L2 of the final latents against the
  uncached ones; the PSNR of the decoded frames (a tiny-width Wan2.1 VAE, random weights,
  output in [-1, 1], peak 2) against the uncached run's decoded frames. "ideal x" is what
  the counts alone allow at the full 30 blocks (steps / evaluations; first-block's skipped
  steps still run 1 of the 30 blocks), for comparison with the measured speedup.
* The overhead check (``--overhead-steps``, default 6; 0 skips it): the first steps with each
  kind set never to skip, beside the uncached loop, ``--repeats`` + 1 rounds interleaved the
  same way: what a cache costs on a step that runs the blocks (its bookkeeping, the
  ``lax.cond``, the state traffic).

Run: ``.venv/bin/python benchmarks/step_cache.py`` (about 5 minutes on 2 cores at the
defaults); ``--smoke``: tiny widths, 8 steps, under 30 s (checks the script, not a
measurement). The load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import load_average, table, time_interleaved  # noqa: E402
from vidax.models.wan2_1.config import (WAN2_1_LATENTS_MEAN, WAN2_1_LATENTS_STD,  # noqa: E402
                                        WanDiTConfig, WanVAEConfig)
from vidax.models.wan2_1.dit import WanDiT  # noqa: E402
from vidax.models.wan2_1.vae import WanVAE  # noqa: E402
from vidax.nn.step_cache import StepCache  # noqa: E402
from vidax.pipelines import step_cache as step_caching  # noqa: E402
from vidax.pipelines.base import _sampling_step  # noqa: E402
from vidax.pipelines.wan2_1 import WanPipeline  # noqa: E402
from vidax.schedulers import WAN_SOLVERS  # noqa: E402

#: The published calibration the MagCache and TeaCache rows use.
CALIBRATION = "wan2_1/t2v-1.3b"
#: First-block skips still run this share of the full model's 30 blocks ("ideal x").
FULL_DEPTH = 30


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true",
                   help="tiny widths, 8 steps, 1 timed round: checks the script (< 30 s)")
    p.add_argument("--blocks", type=int, default=2, help="DiT blocks (Wan2.1-1.3B has 30)")
    p.add_argument("--text-len", type=int, default=32, help="text context tokens (512 in Wan)")
    p.add_argument("--frames", type=int, default=3, help="latent frames")
    p.add_argument("--height", type=int, default=12, help="latent height (even)")
    p.add_argument("--width", type=int, default=12, help="latent width (even)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--shift", type=float, default=5.0)
    p.add_argument("--guidance", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=2, help="timed rounds")
    p.add_argument("--overhead-steps", type=int, default=6,
                   help="steps of the overhead check (each kind never skipping); 0: none")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.smoke:
        args.steps, args.repeats, args.frames, args.height, args.width = 8, 1, 2, 8, 8
        args.text_len, args.overhead_steps = 16, min(args.overhead_steps, 2)
    return args


def policies(steps: int) -> dict[str, StepCache | None]:
    """The runs, by label: None is the uncached one."""
    mag = step_caching.published()["magcache"][CALIBRATION]["ratios"]
    tea = step_caching.published()["teacache"][CALIBRATION]["coefficients"]
    runs = {
        "none": None,
        "first-block 0.05": step_caching.parse("first-block", threshold=0.05),
        "first-block 0.1": step_caching.parse("first-block", threshold=0.1),
        "magcache 0.12 K2 (authors')": step_caching.parse(
            "magcache", mag_ratios=mag, threshold=0.12, max_skip_steps=2, retention_ratio=0.2),
        "magcache 0.06 K3 (diffusers')": step_caching.parse(
            "magcache", mag_ratios=mag, threshold=0.06, max_skip_steps=3, retention_ratio=0.2),
        "taylorseer i5 w3 o1": step_caching.parse("taylorseer", interval=5, warmup_steps=3,
                                                  order=1),
        "taylorseer i5 w3 o2": step_caching.parse("taylorseer", interval=5, warmup_steps=3,
                                                  order=2),
        "teacache 0.05": step_caching.parse("teacache", coefficients=tea, threshold=0.05),
        "teacache 0.2": step_caching.parse("teacache", coefficients=tea, threshold=0.2),
    }
    return {k: None if v is None else v.for_steps(steps) for k, v in runs.items()}


def always_computing(steps: int) -> dict[str, StepCache | None]:
    """Each kind set so it never skips (the overhead check): its bookkeeping, ``lax.cond``
    and state traffic on every step, the blocks run every time."""
    mag = step_caching.published()["magcache"][CALIBRATION]["ratios"]
    tea = step_caching.published()["teacache"][CALIBRATION]["coefficients"]
    runs = {"none": None,
            "first-block": step_caching.parse("first-block", threshold=-1.0),
            "magcache": step_caching.parse("magcache", mag_ratios=mag, threshold=-1.0),
            "taylorseer o2": step_caching.parse("taylorseer", interval=1, order=2),
            "teacache": step_caching.parse("teacache", coefficients=tea,
                                           threshold=float("-inf"))}
    return {k: None if v is None else v.for_steps(steps) for k, v in runs.items()}


def random_init(make, seed: int):
    """The module ``make()`` builds, with the random values ``vidax.nn.layers`` would give it
    (kernels N(0, 1/fan_in), Wan's modulations N(0, 1/dim), norm scales 1, biases 0), drawn
    with numpy into the abstract tree: eager init compiles a random draw per distinct
    shape, which takes a minute for the VAE on a busy 2-core machine."""
    graphdef, state = nnx.split(nnx.eval_shape(make))
    rng = np.random.default_rng(seed)

    def draw(path, x):
        name = next(k.key for k in reversed(path) if isinstance(k, jax.tree_util.DictKey))
        if name == "kernel":
            std = float(np.prod(x.shape[:-1])) ** -0.5
        elif name == "modulation":
            std = x.shape[-1] ** -0.5
        elif name in ("scale", "bias"):
            return jnp.full(x.shape, 1.0 if name == "scale" else 0.0, x.dtype)
        else:
            raise ValueError(f"no init rule for parameter {jax.tree_util.keystr(path)}")
        return jnp.asarray(rng.standard_normal(x.shape, np.float32) * np.float32(std), x.dtype)

    return nnx.merge(graphdef, jax.tree_util.tree_map_with_path(draw, state))


def smooth_time_path(model: WanDiT) -> None:
    """Zero the time embedding's weights on the sinusoidal features faster than one period
    over t in [0, 1000] (they change by radians between sampling steps, which a trained
    model's embedding does not follow), and scale the rest to keep its variance."""
    half = model.config.freq_dim // 2
    freqs = np.power(10000.0, -np.arange(half) / half)
    slow = freqs * 1000.0 <= 2 * np.pi
    mask = np.concatenate([slow, slow]).astype(np.float32) * np.sqrt(half / slow.sum())
    kernel = model.time_embedding.fc1.kernel
    kernel[...] = kernel[...] * jnp.asarray(mask)[:, None]


class Sampler:
    """The Wan2.1 t2v sampling loop over one DiT: :meth:`loop` makes one loop, a :class:`Loop`."""

    def __init__(self, model, scheduler, noise, context, guidance):
        self.graphdef, self.params = nnx.split(model)
        self.scheduler, self.noise = scheduler, noise
        self.inputs = {"context": context, "guidance_scale": jnp.float32(guidance)}

    def loop(self, cache: StepCache | None) -> Loop:
        return Loop(self, cache)

    def run(self, cache: StepCache | None, steps: int | None = None) -> Loop:
        """A whole loop (``steps``: stop after that many, e.g. 1 to compile the step)."""
        loop = self.loop(cache)
        for _ in self.scheduler.timesteps[:steps]:
            loop()
        return loop


class Loop:
    """One sampling loop, advanced one step per call (waiting on it, as ``PipelineBase.denoise``
    does): several loops called in turn run interleaved step by step. Then :meth:`result`:
    the final latents and the :class:`~vidax.pipelines.step_cache.SamplingReport`."""

    def __init__(self, sampler: Sampler, cache: StepCache | None):
        self.sampler, self.cache, self.index = sampler, cache, 0
        self.latents = jnp.array(sampler.noise)       # a fresh buffer: the step donates it
        self.state = sampler.scheduler.init(self.latents.shape)
        self.states, self.seconds, self.flags = None, [], []

    def __call__(self) -> None:
        start = time.perf_counter()
        sampler, index = self.sampler, self.index
        t = sampler.scheduler.timesteps[index]
        args = (WanPipeline, sampler.scheduler.step, sampler.graphdef, jnp.float32, self.cache,
                sampler.params, self.latents, self.state, jnp.int32(index), jnp.float32(t),
                sampler.inputs)
        if self.cache is not None and self.states is None:
            # zero states of the step's shapes, as PipelineBase._fresh_cache_states makes them
            shapes = jax.eval_shape(lambda *a: _sampling_step(*args[:5], *a, None), *args[5:])
            self.states = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                                       shapes[3]["states"])
        self.latents, self.state, finite, cached = _sampling_step(*args, self.states)
        self.latents.block_until_ready()
        if not bool(finite):
            raise FloatingPointError(f"non-finite latents at step {index}")
        if cached is not None:
            self.states = cached["states"]
        self.flags.append(cached)
        self.index += 1
        self.seconds.append(time.perf_counter() - start)

    def result(self):
        report = step_caching.SamplingReport(self.cache, len(self.sampler.scheduler.timesteps))
        for seconds, cached in zip(self.seconds, self.flags):   # read back after the loop
            report.step(seconds, cached)
        return np.asarray(self.latents), report


def interleaved_rounds(sampler: Sampler, runs: dict, rounds: int, steps: int) -> dict:
    """``rounds`` times, a fresh loop of every policy in ``runs``, all advanced in lockstep
    (``time_interleaved``'s rounds are the steps: step i of every loop, then step i + 1):
    load from other processes, which on this VM comes and goes within seconds, then falls on
    every policy's steps alike. Per label: ``[(seconds per step, latents, report)]``."""
    out: dict[str, list] = {label: [] for label in runs}
    for _ in range(rounds):
        loops = {label: sampler.loop(cache) for label, cache in runs.items()}
        timing = time_interleaved(loops, repeats=steps, warmup=0)
        for label, loop in loops.items():
            out[label].append((np.asarray(timing[label].times), *loop.result()))
    return out


def decoder(latent_channels: int, seed: int) -> WanVAE:
    """A tiny-width Wan2.1 VAE (the released block structure at width 8), random weights,
    the released latent statistics."""
    cfg = dataclasses.replace(WanVAEConfig.tiny(), z_dim=latent_channels,
                              latents_mean=WAN2_1_LATENTS_MEAN[:latent_channels],
                              latents_std=WAN2_1_LATENTS_STD[:latent_channels])
    return random_init(lambda: WanVAE(cfg), seed)


def machine() -> str:
    """CPU model, core count, jax/flax versions (``benchmarks.common.machine_line`` without
    its torch import, seconds this benchmark does not need)."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores; jax {jax.__version__}, flax {flax.__version__}"


def rel_l2(x: np.ndarray, ref: np.ndarray) -> float:
    x, ref = x.astype(np.float64), ref.astype(np.float64)
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def psnr(x: np.ndarray, ref: np.ndarray, peak: float = 2.0) -> float:
    mse = float(np.mean((x.astype(np.float64) - ref.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(peak ** 2 / mse)


def overhead(sampler: Sampler, args) -> None:
    """The first ``--overhead-steps`` steps with each kind set never to skip, beside the
    uncached loop: what the caching costs on a step that runs the blocks."""
    runs = always_computing(args.steps)
    for cache in runs.values():
        sampler.run(cache, steps=1)
    rounds = args.repeats + 1
    done = interleaved_rounds(sampler, runs, rounds, args.overhead_steps)
    loop_s = {label: [r[0].sum() for r in results] for label, results in done.items()}
    rows = []
    for label, results in done.items():
        assert results[0][2].skipped == 0, label
        per_step = np.stack([r[0] for r in results])
        rows.append([label, f"{min(loop_s[label]):.2f}", f"{np.median(loop_s[label]):.2f}",
                     f"{min(loop_s[label]) / min(loop_s['none']):.3f}",
                     f"{per_step.min() * 1e3:.0f}", f"{np.median(per_step) * 1e3:.0f}"])
    print(f"\nOverhead check: the first {args.overhead_steps} steps, every kind set never to skip "
          f"(first-block and MagCache threshold -1, TaylorSeer interval 1, TeaCache threshold "
          f"-inf), {rounds} rounds interleaved step by step; load average {load_average()}\n")
    print(table(["policy (never skips)", "best s", "median s", "x uncached (best)",
                 "ms/step min", "ms/step median"], rows))


def main():
    args = parse_args()
    t_start = time.perf_counter()
    base = WanDiTConfig.tiny() if args.smoke else WanDiTConfig.t2v_1_3b()
    cfg = dataclasses.replace(base, num_layers=args.blocks, text_len=args.text_len)
    grid = (args.frames, args.height // 2, args.width // 2)
    tokens = int(np.prod(grid))
    print(f"# Step caching, Wan2.1 DiT, CPU, float32 -- {time.strftime('%Y-%m-%d %H:%M')}"
          f"{' (smoke: not a measurement)' if args.smoke else ''}")
    print(f"machine: {machine()}")
    print(f"load average at start: {load_average()}")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"DiT: dim {cfg.dim}, {cfg.num_heads} heads, ffn {cfg.ffn_dim}, text_dim "
          f"{cfg.text_dim}, {cfg.num_layers} blocks, text {cfg.text_len} tokens; random weights "
          f"(seed {args.seed}), time embedding on the slow sinusoidal features")
    print(f"sampling: UniPC shift {args.shift:g}, {args.steps} steps, CFG [cond, uncond] "
          f"guidance {args.guidance:g}; latent {args.frames}x{args.height}x{args.width}x"
          f"{cfg.in_dim} -> {tokens} tokens a row; {args.repeats} timed round(s)\n")

    model = random_init(lambda: WanDiT(cfg), args.seed)
    smooth_time_path(model)
    rng = np.random.default_rng(args.seed)
    noise = rng.standard_normal((1, args.frames, args.height, args.width, cfg.in_dim),
                                np.float32)
    context = jnp.asarray(rng.standard_normal((2, cfg.text_len, cfg.text_dim), np.float32))
    scheduler = WAN_SOLVERS["unipc"](args.steps, args.shift)
    sampler = Sampler(model, scheduler, noise, context, args.guidance)
    runs = policies(args.steps)
    print(f"set up in {time.perf_counter() - t_start:.1f} s (imports not counted)", flush=True)

    # Compile each policy's step (one step of the loop), then the timed rounds.
    start = time.perf_counter()
    for cache in runs.values():
        sampler.run(cache, steps=1)
    print(f"compiled {len(runs)} sampling steps in {time.perf_counter() - start:.0f} s; timing "
          f"{args.repeats} round(s) interleaved step by step; load average {load_average()}",
          flush=True)

    done = interleaved_rounds(sampler, runs, args.repeats, args.steps)
    loop_s = {label: [r[0].sum() for r in results] for label, results in done.items()}
    for label, results in done.items():   # the same program on the same inputs each round
        if any(not np.array_equal(r[1], results[0][1]) for r in results[1:]):
            print(f"warning: {label}: the rounds' latents differ")
        report = results[0][2]
        rows = "/".join(str(int(r)) for r in report.computed.sum((0, 1)))
        print(f"  {label}: DiT evaluations {report.evaluations} made, {report.skipped} "
              f"skipped; per CFG row (cond/uncond) computed {rows}; loop "
              f"{' / '.join(f'{v:.2f}' for v in loop_s[label])} s")
    first = {label: (results[0][1], results[0][2]) for label, results in done.items()}

    vae = decoder(cfg.out_dim, args.seed)
    print(f"timed at {time.perf_counter() - t_start:.0f} s", flush=True)
    decoded = vae.decode(jnp.asarray(np.concatenate([first[label][0] for label in runs])))
    frames = dict(zip(runs, decoded))
    ref_latents, ref_frames = first["none"][0], frames["none"]
    print(f"decoded {len(frames)} runs' latents at {time.perf_counter() - t_start:.0f} s",
          flush=True)

    rows = []
    for label, cache in runs.items():
        report = first[label][1]
        computed = report.computed.any(-1)[:, 0]               # [steps]: the blocks ran
        per_step = np.stack([r[0] for r in done[label]])       # [rounds, steps]
        ran = per_step[:, computed]
        skipped = per_step[:, ~computed]
        share = 1 / FULL_DEPTH if cache is not None and cache.kind == "first-block" else 0.0
        ideal = args.steps / (report.evaluations + report.skipped * share)
        best, median = min(loop_s[label]), float(np.median(loop_s[label]))
        rows.append([
            label, f"{best:.2f}", f"{median:.2f}",
            f"{min(loop_s['none']) / best:.2f}", f"{ideal:.2f}",
            f"{report.evaluations}/{report.skipped}",
            f"{np.median(ran) * 1e3:.0f}" if ran.size else "-",
            f"{np.median(skipped) * 1e3:.0f}" if skipped.size else "-",
            "0" if cache is None else f"{rel_l2(first[label][0], ref_latents):.2e}",
            "inf" if cache is None else f"{psnr(frames[label], ref_frames):.1f}"])
    print()
    print(table(["policy", "best s", "median s", "speedup", "ideal x (30 blocks)",
                 "evals made/skipped", "ms/step ran", "ms/step skipped", "rel L2 latents",
                 "PSNR dB frames"], rows))
    if args.overhead_steps:
        overhead(sampler, args)
    print(f"\ndecoded frames: {ref_frames.shape[0]} x {ref_frames.shape[1]}x"
          f"{ref_frames.shape[2]}, std {ref_frames.std():.3f} (uncached); final latents std "
          f"{ref_latents.std():.3f}")
    print(f"load average at end: {load_average()}; total {time.perf_counter() - t_start:.0f} s "
          f"(os.getloadavg: {tuple(round(v, 2) for v in os.getloadavg())})")


if __name__ == "__main__":
    main()
