"""Step caching (``vidax.nn.step_cache``) against diffusers' own cache hooks and the TeaCache
authors' rule, on a tiny Wan2.1 DiT.

Oracles (DESIGN.md §6): diffusers 0.42.1's ``WanTransformer3DModel`` (3 blocks, random
values in every tensor), written by its ``save_pretrained`` and read by vidax through the
diffusers layout; both sample the same noise for ``STEPS`` flow-matching Euler steps
(``x += (sigma_next - sigma) * v``) with classifier-free guidance. diffusers calls its model
twice a step, each call in its own ``cache_context`` ("cond", "uncond") as ``WanPipeline``
does; vidax calls its DiT once a step on the ``[cond, uncond]`` batch, jitted, inside
``step_cache.active`` (each row keeps its own state). The hooks are diffusers' own:

* ``apply_first_block_cache`` (``FirstBlockCacheConfig``) against ``first-block``;
* ``apply_mag_cache`` (``MagCacheConfig``, one ratio list for both contexts, of another
  length than the run: both resample it) against ``magcache``, and its calibration
  (``calibrate=True``: the ratios it prints) against vidax's measured ratios;
* ``apply_taylorseer_cache`` (``TaylorSeerCacheConfig``, orders 1 and 2, float32 factors)
  against ``taylorseer``. vidax predicts the output of the whole block stack; diffusers
  predicts the output of each module it hooks. Hooking the last block in Taylor mode
  (``cache_identifiers``) and every other block in skip mode (``skip_predict_identifiers``:
  on a predicted step they return zeros without computing) makes diffusers predict exactly
  the stack's output from the stack's outputs at the computed steps: the same rule.

The compute/skip decisions of every step and branch agree exactly (diffusers': did the last
block's FFN run in that call), and every case skips and computes; bound: float32 "highest",
final latents max |diff| <= 1e-4 x std(diffusers). Measured: 2.3e-6 - 3.0e-6 x std (diffusers
computes the sinusoidal timestep embedding in float32, vidax in float64); the calibration
ratios within 5e-7 relative. Negative controls (must fail the bound): each row handed the
other's state every step, 2.2e-2 - 5.8e-2 x std. vidax starts from zero states, as the
pipeline does (``PipelineBase._fresh_cache_states``); MagCache's fresh state once held a
ratio of 1, so zero states computed the first step past the retained ones where diffusers
skips: :func:`test_zero_states_are_fresh_states` holds every rule to it.

TeaCache has no diffusers hook: vidax's decisions are checked against a numpy float64
restatement of the authors' rule (ali-vilab/TeaCache@7c10efc4702c6b619f47805f7abe4a7a08085aa0
TeaCache4Wan2.1/teacache_generate.py lines 519-550 and 888-894), the time embedding ``e``
computed in numpy from the file's weights.

Also: threshold 0 is the uncached run bit for bit through the real pipeline (the demo
release); a skipped step runs no block past the first (counted at run time by a
``jax.debug.callback`` in every block: inside ``lax.cond`` it runs only when its branch
does); and a batch whose rows decide differently gives each row what it gets alone.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import functools
import io
import json
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity import assert_fails, assert_parity
from vidax import registry
from vidax.demo import wan2_1 as demo
from vidax.models.wan2_1.dit import WanAttentionBlock, WanDiTConfig
from vidax.nn import step_cache
from vidax.nn.step_cache import StepCache
from vidax.pipelines import step_cache as step_caching

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning",
                                        "ignore:CUDA is not available:UserWarning")

STEPS, GUIDANCE, LAYERS, TEXT_LEN = 12, 4.0, 3, 16
LATENT = (1, 3, 8, 12, 16)       # [B, T, H, W, C]: 3 x 4 x 6 = 72 tokens
_S = np.linspace(1.0, 0.0, STEPS + 1)
SIGMAS = (3.0 * _S / (1.0 + 2.0 * _S)).astype(np.float32)      # shift 3
TIMESTEPS = (SIGMAS * 1000).astype(np.float32)
#: The TeaCache polynomial the authors publish for Wan2.1 T2V-1.3B (teacache_generate.py:890)
TEA_COEFFICIENTS = (2.39676752e+03, -1.31110545e+03, 2.01331979e+02, -8.29855975e+00,
                    1.37887774e-01)
MAG_RATIOS = (1.0, 1.01, 0.99, 1.02, 0.98, 1.03, 0.97, 1.05, 0.92)   # resampled to STEPS


#: diffusers' WanTransformer3DModel, vidax's DiT split, the noise [1, T, H, W, C] and the
#: text [2, TEXT_LEN, text_dim] (cond, uncond)
Tiny = collections.namedtuple("Tiny", "ref graphdef params x0 context")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Tiny:
    """diffusers' tiny Wan DiT (3 blocks), saved by itself and loaded by vidax; the noise
    and the [cond, uncond] text."""
    import torch
    from diffusers import WanTransformer3DModel

    cfg = dataclasses.replace(WanDiTConfig.tiny(), num_layers=LAYERS)
    ref = WanTransformer3DModel(
        patch_size=cfg.patch_size, num_attention_heads=cfg.num_heads,
        attention_head_dim=cfg.head_dim, in_channels=cfg.in_dim, out_channels=cfg.out_dim,
        text_dim=cfg.text_dim, freq_dim=cfg.freq_dim, ffn_dim=cfg.ffn_dim,
        num_layers=LAYERS, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        eps=cfg.eps).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():   # every tensor random: N(0, 0.05), plus 1 on the norm scales (so
        # attention is not flat) and 2 on the time embedding's last bias (its step-to-step
        # change is then the few percent TeaCache's published polynomials are fitted on)
        for name, p in sorted(ref.named_parameters()):
            offset = (1.0 if p.ndim == 1 and "norm" in name and name.endswith("weight") else
                      2.0 if name == "condition_embedder.time_embedder.linear_2.bias" else 0.0)
            p.copy_(0.05 * torch.randn(p.shape, generator=gen) + offset)
    folder = tmp_path_factory.mktemp("wan_diffusers")
    ref.save_pretrained(folder)
    read = registry.get("wan2_1", "dit", "diffusers").make_config(
        overrides=json.loads((folder / "config.json").read_text()))
    assert read == cfg
    # text padded to TEXT_LEN (vidax pads to text_len, diffusers' pipeline pads its input)
    model = vidax.load("wan2_1", "dit", folder / "diffusion_pytorch_model.safetensors",
                       config=dataclasses.replace(cfg, text_len=TEXT_LEN), layout="diffusers")
    rng = np.random.default_rng(1)
    context = np.zeros((2, TEXT_LEN, cfg.text_dim), np.float32)
    context[0, :9] = rng.standard_normal((9, cfg.text_dim))
    context[1, :4] = rng.standard_normal((4, cfg.text_dim))
    return Tiny(ref, *nnx.split(model), rng.standard_normal(LATENT).astype(np.float32), context)


# ----------------------------------------------------------------------------- diffusers
def _diffusers(tiny: Tiny, apply=None):
    """diffusers' sampling with ``apply(model)`` (a hook) on a fresh copy of the model: the
    final latents and ``computed [STEPS, 2]`` (did the last block run, per step and branch)."""
    import torch

    model = copy.deepcopy(tiny.ref)
    if apply is not None:
        apply(model)
    ran = []
    model.blocks[-1].ffn.register_forward_hook(lambda *args: ran.append(1))
    x = torch.from_numpy(tiny.x0).permute(0, 4, 1, 2, 3)
    computed = np.zeros((STEPS, 2), bool)
    for i in range(STEPS):
        flows = []
        for row, name in enumerate(("cond", "uncond")):
            ran.clear()
            with torch.no_grad(), model.cache_context(name):
                flows.append(model(
                    hidden_states=x, timestep=torch.tensor(TIMESTEPS[i:i + 1]),
                    encoder_hidden_states=torch.from_numpy(tiny.context[row:row + 1]),
                    return_dict=False)[0])
            computed[i, row] = bool(ran)
        v = flows[1] + GUIDANCE * (flows[0] - flows[1])
        x = x + torch.tensor(SIGMAS[i + 1] - SIGMAS[i]) * v
    return x.permute(0, 2, 3, 4, 1).numpy(), computed


# ----------------------------------------------------------------------------- vidax
_BLOCK_RUNS: list[int] = []


def _counted(call):
    """``WanAttentionBlock.__call__`` that counts its runs (not its traces)."""
    def counted(self, *args, **kwargs):
        jax.debug.callback(lambda: _BLOCK_RUNS.append(1))
        return call(self, *args, **kwargs)
    return counted


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _step(graphdef, policy, guidance, params, x, t, context, index, states, dt):
    """One Euler step; with ``guidance``, of the ``[cond, uncond]`` pair of ``x [1, ...]``,
    else of every row of ``x`` on its own."""
    model = nnx.merge(graphdef, params)
    with step_cache.active(policy, states, index) as slot:
        if guidance is None:
            x = x + dt * model(x, t, context)
        else:
            flow = model(jnp.concatenate([x, x]), t, context)
            x = x + dt * (flow[1:] + guidance * (flow[:1] - flow[1:]))
    return x, None if slot is None else slot.outputs()


def _vidax(tiny: Tiny, policy: StepCache | None, *, x=None, context=None, t_scale=None,
           guidance=GUIDANCE, swap_rows=False):
    """vidax's sampling: the final latents, ``computed [STEPS, rows]``, the block runs of
    each step and the MagCache measurements ``[STEPS, rows]``. ``t_scale``: per row, a factor
    on the timesteps; ``swap_rows``: hand each row the other's state (a negative control)."""
    x = tiny.x0 if x is None else x
    context = tiny.context if context is None else context
    scale = np.ones(len(context), np.float32) if t_scale is None else np.float32(t_scale)
    policy = None if policy is None else policy.for_steps(STEPS)
    step = functools.partial(_step, tiny.graphdef, policy, guidance, tiny.params)
    states, computed, measured, runs = None, [], [], []
    with mock.patch.object(WanAttentionBlock, "__call__", _counted(WanAttentionBlock.__call__)):
        if policy is not None:   # zero states, as the pipeline starts them: one compile
            shapes = jax.eval_shape(step, x, scale, context, 0, None, 0.0)[1]["states"]
            states = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), shapes)
        for i in range(STEPS):
            _BLOCK_RUNS.clear()
            x, out = step(x, TIMESTEPS[i] * scale, context, jnp.int32(i), states,
                          SIGMAS[i + 1] - SIGMAS[i])
            jax.effects_barrier()
            runs.append(len(_BLOCK_RUNS))
            if out is not None:
                states = out["states"]
                if swap_rows:
                    states = jax.tree.map(lambda a: a[::-1], states)
                computed.append(np.asarray(out["computed"][0]))
                measured.append(np.asarray(out["measured"][0]))
    return (np.asarray(x), np.array(computed).reshape(STEPS, -1) if computed else None,
            np.array(runs), np.array(measured))


# ----------------------------------------------------------------------------- 1, 4. diffusers
# diffusers' hooks, applied to a model by the callables these make
def _first_block(threshold):
    def apply(model):
        from diffusers.hooks import FirstBlockCacheConfig, apply_first_block_cache
        apply_first_block_cache(model, FirstBlockCacheConfig(threshold=threshold))
    return apply


def _mag(threshold, max_skip, retention, calibrate=False):
    def apply(model):
        from diffusers.hooks import MagCacheConfig, apply_mag_cache
        apply_mag_cache(model, MagCacheConfig(
            threshold=threshold, max_skip_steps=max_skip, retention_ratio=retention,
            num_inference_steps=STEPS, mag_ratios=None if calibrate else list(MAG_RATIOS),
            calibrate=calibrate))
    return apply


def _taylor(interval, warmup, order):
    """The last block Taylor-predicted, the others skipped on predicted steps (see the
    module docstring)."""
    def apply(model):
        import torch
        from diffusers.hooks import TaylorSeerCacheConfig, apply_taylorseer_cache
        others = "|".join(str(i) for i in range(LAYERS - 1))
        apply_taylorseer_cache(model, TaylorSeerCacheConfig(
            cache_interval=interval, disable_cache_before_step=warmup, max_order=order,
            taylor_factors_dtype=torch.float32, cache_identifiers=[rf"blocks\.{LAYERS - 1}"],
            skip_predict_identifiers=[rf"blocks\.({others})"]))
    return apply


# name -> (diffusers hook, vidax policy); taylorseer order 1 in CI (``-m slow``)
CASES = {
    "first-block": (_first_block(0.2), StepCache("first-block", threshold=0.2)),
    "magcache": (_mag(0.06, 2, 0.2), StepCache("magcache", threshold=0.06, max_skip_steps=2,
                                                retention_ratio=0.2, mag_ratios=(MAG_RATIOS,))),
    **{f"taylorseer-{k}": (_taylor(3, 3, k), StepCache("taylorseer", interval=3,
                                                       warmup_steps=3, order=k)) for k in (1, 2)},
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if n == "taylorseer-1" else n for n in CASES])
def test_matches_diffusers_hooks(tiny, name, record_property):
    hook, policy = CASES[name]
    expected, decided = _diffusers(tiny, hook)
    latents, computed, runs, _ = _vidax(tiny, policy)
    print(f"{name}: computed (cond) {computed[:, 0].astype(int).tolist()}, "
          f"(uncond) {computed[:, 1].astype(int).tolist()}")
    np.testing.assert_array_equal(computed, decided)
    assert computed.all(1).any() and (~computed).all(1).any()   # steps computed, steps skipped
    assert_parity(name, latents, expected, record_property)
    # 4. a skipped step runs no block but first-block's first; a computed one runs them all
    head = int(policy.kind == "first-block")
    np.testing.assert_array_equal(runs, np.where(computed.any(1), LAYERS, head))
    # the negative control: each row (cond, uncond) handed the other's state every step
    assert_fails(f"{name}_rows_swapped", _vidax(tiny, policy, swap_rows=True)[0], expected,
                 record_property)


@pytest.mark.slow
def test_magcache_calibration_matches_diffusers(tiny):
    """``calibrate=True``: nothing skipped, and per row the ratios diffusers prints for each
    context (``mean |r_t| / |r_t-1|`` over tokens of the stack's residual r; 1 first)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _, decided = _diffusers(tiny, _mag(0.06, 2, 0.2, calibrate=True))
    printed = [json.loads(line) for line in out.getvalue().splitlines()
               if line.startswith("[") and not line.startswith("[MagCache]")]
    assert decided.all() and len(printed) == 2               # cond's, then uncond's
    _, computed, _, measured = _vidax(tiny, StepCache("magcache", calibrate=True))
    assert computed.all()
    rel = np.abs(measured.T / np.array(printed) - 1).max()
    print(f"magcache calibration: {np.round(measured[:, 0], 5).tolist()}, max rel diff {rel:.2e}")
    assert rel <= 1e-4
    assert not np.allclose(measured[1:], 1.0, atol=1e-3)        # measured, not a constant


# ----------------------------------------------------------------------------- 2. TeaCache
def _teacache_reference(ref, coefficients, threshold):
    """The authors' TeaCache4Wan2.1 rule in numpy float64 (teacache_generate.py lines
    519-550; ``use_ret_steps`` False, lines 888-894: ``ret_steps = 1*2``, ``cutoff_steps =
    sample_steps*2 - 2``): one counter ``cnt`` over the calls, even = cond, odd = uncond,
    each branch with its own accumulator and previous ``e``. Returns ``computed [STEPS, 2]``
    and the accumulated values compared with the threshold."""
    w = {k: v.double().numpy() for k, v in ref.state_dict().items()}
    emb = "condition_embedder.time_embedder.linear_"
    half = ref.config.freq_dim // 2

    def time_embedding(t):   # sinusoidal_embedding_1d (float64), then Linear, SiLU, Linear
        sinusoid = np.outer([t], np.power(10000.0, -np.arange(half) / half))
        h = np.concatenate([np.cos(sinusoid), np.sin(sinusoid)], 1)
        h = h @ w[emb + "1.weight"].T + w[emb + "1.bias"]
        return (h / (1 + np.exp(-h))) @ w[emb + "2.weight"].T + w[emb + "2.bias"]

    ret_steps, cutoff_steps = 1 * 2, STEPS * 2 - 2
    acc, previous, computed, seen = [0.0, 0.0], [None, None], np.zeros((STEPS, 2), bool), []
    for cnt in range(2 * STEPS):
        step, branch = divmod(cnt, 2)
        e = time_embedding(float(TIMESTEPS[step]))
        if cnt < ret_steps or cnt >= cutoff_steps:
            calc, acc[branch] = True, 0.0
        else:
            rel = np.abs(e - previous[branch]).mean() / np.abs(previous[branch]).mean()
            acc[branch] += np.poly1d(coefficients)(rel)
            seen.append(acc[branch])
            calc = not acc[branch] < threshold
            if calc:
                acc[branch] = 0.0
        previous[branch] = e
        computed[step, branch] = calc
    return computed, np.array(seen)


def test_teacache_follows_the_authors_rule(tiny):
    threshold = 0.2   # the authors' default
    expected, seen = _teacache_reference(tiny.ref, TEA_COEFFICIENTS, threshold)
    # no accumulated value so near the threshold that float32 could decide otherwise
    assert np.abs(seen - threshold).min() > 1e-3 * threshold, seen
    _, computed, runs, _ = _vidax(tiny, StepCache("teacache", threshold=threshold,
                                                  coefficients=TEA_COEFFICIENTS,
                                                  compute_first=1, compute_last=1))
    print(f"teacache: computed {computed.astype(int).tolist()}")
    np.testing.assert_array_equal(computed, expected)
    assert computed.all(1).any() and (~computed).all(1).any()
    np.testing.assert_array_equal(runs, np.where(computed.any(1), LAYERS, 0))
    # the negative control: the rule at another threshold decides otherwise
    assert (_teacache_reference(tiny.ref, TEA_COEFFICIENTS, 0.25)[0] != computed).any()


# ----------------------------------------------------------------------------- 3. threshold 0
@pytest.fixture(scope="module")
def demo_pipe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wan2_1_demo")
    demo.write(folder)
    pipe = vidax.pipeline("wan2_1", folder, precision="fp32")
    options = dict(frames=9, size=(64, 48), steps=4, seed=0)
    return pipe, options, pipe.sample(demo.PROMPT, **options)


# first-block in the fast lane; teacache and magcache (its ratios != 1, no retained steps) in
# CI (``-m slow``)
@pytest.mark.parametrize("kind, settings", [
    ("first-block", {}),
    pytest.param("teacache", {"coefficients": TEA_COEFFICIENTS}, marks=pytest.mark.slow),
    pytest.param("magcache", {"mag_ratios": MAG_RATIOS, "retention_ratio": 0.0},
                 marks=pytest.mark.slow)])
def test_threshold_zero_is_the_uncached_run(demo_pipe, kind, settings):
    pipe, options, plain = demo_pipe
    cached = pipe.sample(demo.PROMPT, step_cache=step_caching.parse(kind, threshold=0.0,
                                                                    **settings), **options)
    report = pipe.sampling_reports[-1]
    assert report.cache.kind == kind and report.computed.shape == (4, 1, 2)
    assert report.computed.all(), report.computed
    assert np.array_equal(cached, plain)


# ----------------------------------------------------------------------------- 5. rows
def test_each_row_gets_what_it_gets_alone(tiny, record_property):
    """Two independent rows (no guidance; other noise, other text, timesteps x 1 and x 0.6)
    under first-block, decided differently at some step: each row's latents and decisions
    are those of the row run alone (a batch of 1, its own state)."""
    policy = StepCache("first-block", threshold=0.2)
    x = np.concatenate([tiny.x0, 0.5 * tiny.x0[:, ::-1]])
    scale = (1.0, 0.6)
    latents, computed, _, _ = _vidax(tiny, policy, x=x, t_scale=scale, guidance=None)
    print(f"rows: computed {computed.astype(int).tolist()}")
    assert (computed[:, 0] != computed[:, 1]).any()
    for row in range(2):
        alone, decided, _, _ = _vidax(tiny, policy, x=x[row:row + 1], guidance=None,
                                      context=tiny.context[row:row + 1], t_scale=scale[row:row + 1])
        np.testing.assert_array_equal(computed[:, row], decided[:, 0])
        assert_parity(f"row{row}", latents[row:row + 1], alone, record_property)
    # the negative control: each row given the other's state
    assert_fails("rows_swapped", _vidax(tiny, policy, x=x, t_scale=scale, guidance=None,
                                        swap_rows=True)[0], latents, record_property)


# ----------------------------------------------------------------------------- zero states
@pytest.mark.parametrize("kind", step_cache.KINDS)
def test_zero_states_are_fresh_states(kind):
    """The pipeline starts the states as zeros of their shapes (``_fresh_cache_states``): the
    same run as the rule's own fresh states (``active`` given None), on toy blocks."""
    policy = StepCache(kind, threshold=0.5, retention_ratio=0.2, mag_ratios=((1.0, 0.99),),
                       coefficients=(1.0, 0.0), interval=2, warmup_steps=1).for_steps(6)
    blocks = ([0.5, -0.3, 0.2], lambda b, x: x + b * jnp.tanh(x))

    def step(states, x, i):
        with step_cache.active(policy, states, i) as slot:
            x = step_cache.run_blocks(x, blocks, signal=jnp.full((2, 1, 3), 5.0 + i))
        return x, slot.outputs()["states"], slot.outputs()["computed"][0]

    runs = []
    for states in (None, jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype),
                                      jax.eval_shape(step, None, jnp.ones((2, 4, 3)), 0)[1])):
        x, computed = jnp.ones((2, 4, 3)), []
        for i in range(6):
            x, states, done = step(states, x * 0.9, i)
            computed.append(np.asarray(done))
        runs.append((np.asarray(x), np.array(computed)))
    assert not runs[0][1].all() and runs[0][1].any(), runs[0][1]
    np.testing.assert_array_equal(runs[1][1], runs[0][1])   # decisions, then the outputs
    np.testing.assert_array_equal(runs[1][0], runs[0][0])
