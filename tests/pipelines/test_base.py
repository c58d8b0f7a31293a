"""The pipeline skeleton (``vidax.pipelines.base``) on its own, fast: the shared input checks
(one clear error each), the initial-noise layouts, release discovery (one error listing every
missing file), and the denoising loop with a toy family -- CFG through the ``guide`` hook,
per-step inputs, ``after_step``, a scheduler's extra step arguments, a mesh -- against the
same loop written out in numpy.

Bound: the loop against numpy float32 arithmetic, max |diff| <= 1e-5 x max |ref| (XLA may
fuse the elementwise steps differently); on a mesh against one device <= 1e-6 x max |ref|.
Negative control: the toy family with Wan's guidance convention where the reference uses
Cosmos' must miss the bound.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from vidax import errors, registry, sharding
from vidax.errors import VidaxError
from vidax.pipelines import base, inputs
from vidax.schedulers import FlowMatchEulerScheduler, RectifiedFlowScheduler, RectifiedFlowSteps

DEFAULTS = base.Defaults(steps=4, guidance_scale=5.0, size=(64, 48), frames=9, fps=16,
                         shift=5.0, negative_prompt="bad", sample_solver="unipc")
SHAPE = (3, 6, 8, 16)  # latent [T, h, w, C] of 9 frames at 64x48


# ----------------------------------------------------------------------------- inputs
def test_request_resolves_defaults_and_each_option():
    r = base.Request.resolve("t2v", DEFAULTS, "a cat", negative_prompt="", solvers=("unipc",))
    assert (r.frames, r.size, r.steps, r.guidance_scale, r.shift, r.fps) == (9, (64, 48), 4,
                                                                             5.0, 5.0, 16)
    assert r.negative_prompt == "bad" and r.sample_solver == "unipc" and r.seed == 0
    assert r.latent_shape == SHAPE
    r = base.Request.resolve("t2v", DEFAULTS, "a cat", size="96x64", frames=5, seed=3)
    assert (r.size, r.frames, r.seed, r.latent_shape) == ((96, 64), 5, 3, (2, 8, 12, 16))
    assert base.Request.resolve("t2v", dataclasses.replace(DEFAULTS, shift=None),
                                "a cat").shift is None
    for options, needle in (
            ({"frames": 8}, "frames 8: the frame count must be 4n+1 (1, 5, 9, ...)"),
            ({"frames": 8}, "e.g. 5 or 9"),
            ({"size": (100, 48)}, "nearest valid size is 96x48"),
            ({"size": "big"}, "WIDTHxHEIGHT"),
            ({"steps": 0}, "steps must be a positive integer"),
            ({"guidance_scale": "x"}, "guidance_scale must be a number"),
            ({"shift": -1}, "shift must be a positive number"),
            ({"sample_solver": "euler"}, "sample_solver must be one of unipc"),
            ({"fps": 0}, "fps must be a positive number"),
            ({"seed": -1}, "seed must be an integer from 0 to 2**64 - 1"),
            ({"seed": 2**64}, "seed must be an integer from 0 to 2**64 - 1 "
                              "(18446744073709551615), got 18446744073709551616"),
            ({"seed": True}, "seed must be an integer"),
            ({"seed": 1.5}, "seed must be an integer")):
        with pytest.raises(VidaxError) as e:
            base.Request.resolve("t2v", DEFAULTS, "a cat", solvers=("unipc",), **options)
        assert needle in str(e.value), (options, str(e.value))
    with pytest.raises(VidaxError, match="the prompt must be a string"):
        base.Request.resolve("t2v", DEFAULTS, None)
    with pytest.raises(VidaxError, match="multiples of 32"):
        base.Request.resolve("t2v", DEFAULTS, "a cat", vae_stride=(4, 16, 16))
    with pytest.raises(VidaxError, match="Foo takes no --last-image: no"):
        inputs.refuse("Foo", shift=(None, "-"), last_image=(1, "no"))


def test_noise_layouts_files_and_errors(tmp_path):
    ours = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    authors = ours.transpose(3, 0, 1, 2)
    for given in (ours, ours[None], authors, authors[None]):
        np.testing.assert_array_equal(inputs.noise_array(given, SHAPE), ours)
    tokens = {"the tokens'": "NC"}
    np.testing.assert_array_equal(inputs.noise_array(ours.reshape(-1, 16)[None], SHAPE, tokens),
                                  ours)
    np.save(tmp_path / "noise.npy", authors)
    request = base.Request.resolve("t2v", DEFAULTS, "a cat").with_noise(tmp_path / "noise.npy")
    np.testing.assert_array_equal(request.noise, ours)
    with pytest.raises(VidaxError, match=r"expected the authors' layout \[16, 3, 6, 8\] "
                                         r"\[C, T, H, W\] or vidax's \[3, 6, 8, 16\]"):
        inputs.noise_array(ours[:2], SHAPE)
    with pytest.raises(VidaxError, match="finite floating-point"):
        inputs.noise_array(np.full(SHAPE, np.nan, np.float32), SHAPE)
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    with pytest.raises(VidaxError, match="not a readable .npy array"):
        inputs.noise_array(tmp_path / "bad.npy", SHAPE)


def test_release_files_are_found_and_every_missing_one_listed(tmp_path):
    dit, vae = registry.get("wan2_1", "dit"), registry.get("wan2_1", "vae")
    parts = [base.Part("dit", dit, "the DiT", under="high"), base.Part("vae", vae, "the VAE")]
    need = base.Needed("tokenizer", "tok", ("tokenizer.json",), "the tokenizer")
    with pytest.raises(VidaxError) as e:
        base.find_files(tmp_path, parts, [need], what="Foo release", also_missing=["x (y)"])
    assert str(e.value) == (
        f"{tmp_path} is not a complete Foo release folder: missing "
        "high/diffusion_pytorch_model*.safetensors (the DiT); Wan2.1_VAE.pth (the VAE); "
        "tok/tokenizer.json (the tokenizer); x (y). Nothing was loaded.")
    (tmp_path / "high").mkdir()
    for name in ("diffusion_pytorch_model-00001-of-00002.safetensors",
                 "diffusion_pytorch_model.safetensors.index.json"):
        (tmp_path / "high" / name).write_text("{}")
    (tmp_path / "Wan2.1_VAE.pth").write_text("")
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    files = base.find_files(tmp_path, parts, [need], what="Foo release")
    assert files == {"dit": tmp_path / "high" / "diffusion_pytorch_model.safetensors.index.json",
                     "vae": tmp_path / "Wan2.1_VAE.pth", "tokenizer": tmp_path / "tok"}
    with pytest.raises(VidaxError, match="no such folder"):
        base.open_folder(tmp_path / "nope", "Foo", ("a",), None)
    with pytest.raises(VidaxError, match="unknown Foo variant 'b'; known: a"):
        base.open_folder(tmp_path, "Foo", ("a",), "b")


# ----------------------------------------------------------------------------- the loop
class Toy(nnx.Module):
    """A "DiT" whose flow is ``w * x + t / 1000 + context``: elementwise, so the numpy
    reference is exact arithmetic."""

    def __init__(self):
        self.w = nnx.Param(jnp.full((16,), 0.3, jnp.float32))

    def __call__(self, x, t, context):
        return self.w[...] * x + t.reshape(-1, 1, 1, 1, 1) / 1000 + context


class ToyPipeline(base.PipelineBase):
    """Cosmos' guidance convention, a per-step guidance scale, a frame kept after each step."""

    NAME = "Toy"

    def prepare(self, request):
        noise = self.initial_noise(request)
        context = self._place(np.asarray([0.1, -0.2], np.float32).reshape(2, 1, 1, 1, 1))
        return base.Run(noise, FlowMatchEulerScheduler(request.steps, request.shift),
                        {"context": context, "guidance_scale": jnp.float32(0.0),
                         "keep": jnp.float32(1.5)}, nnx.split(self.dit), "toy")

    def step_inputs(self, request, run, index, t):
        return run.model, jnp.float32(t), {"guidance_scale": jnp.float32(2.0 + index)}

    @staticmethod
    def predict(model, x, t, inputs, compute_dtype):
        return model(x, jnp.broadcast_to(t, x.shape[:1]), inputs["context"])

    @staticmethod
    def guide(cond, uncond, scale):
        return cond + scale * (cond - uncond)

    @staticmethod
    def after_step(latents, inputs):
        return latents.at[:, 0].set(inputs["keep"])


def _toy(mesh=None) -> ToyPipeline:
    release = base.Release("/nowhere", "t2v", "tiny", DEFAULTS, {}, {}, {})
    pipe = ToyPipeline(release, mesh=mesh, precision="fp32")
    pipe.adopt("dit", Toy())
    return pipe


def _reference(request, wan_guidance: bool = False) -> np.ndarray:
    sched = FlowMatchEulerScheduler(request.steps, request.shift)
    x = request.noise[None]
    for k, t in enumerate(sched.timesteps):
        cond, uncond = (np.float32(0.3) * x + t / np.float32(1000) + np.float32(c)
                        for c in (0.1, -0.2))
        g = np.float32(2.0 + k)
        v = uncond + g * (cond - uncond) if wan_guidance else cond + g * (cond - uncond)
        x = x + (sched.sigmas[k + 1] - sched.sigmas[k]) * v
        x[:, 0] = 1.5
    return x[0]


def test_denoising_loop_runs_the_hooks():
    request = base.Request.resolve("t2v", DEFAULTS, "a cat").with_noise(
        np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32))
    ours = _toy().sample(request=request)
    ref = _reference(request)
    assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max()
    wrong = _reference(request, wan_guidance=True)
    assert np.abs(ours - wrong).max() > 1e-2 * np.abs(ref).max()
    on_mesh = _toy(sharding.make_mesh("dp=2,fsdp=4")).sample(request=request)
    assert np.abs(on_mesh - ours).max() <= 1e-6 * np.abs(ref).max()
    with pytest.raises(VidaxError, match="either a request or a prompt"):
        _toy().sample("a cat", request=request)


def test_scheduler_extra_step_arguments_reach_the_step():
    """``inputs["solver"]``: a scheduler's per-step keywords (here the rectified flow's
    per-token timesteps: tokens at 0 stay put)."""

    class Frozen(ToyPipeline):
        def prepare(self, request):
            run = super().prepare(request)
            run.scheduler = RectifiedFlowSteps(RectifiedFlowScheduler().timesteps(3))
            return run

        def step_inputs(self, request, run, index, t):
            frozen = jnp.full((1, *SHAPE[:3]), t).at[:, 1].set(0.0)
            return run.model, jnp.float32(t), {"solver": {"timestep": frozen}}

    request = base.Request.resolve("t2v", DEFAULTS, "a cat").with_noise(
        np.ones(SHAPE, np.float32))
    out = Frozen(_toy().release, precision="fp32")
    out.adopt("dit", Toy())
    latents = out.sample(request=request)
    np.testing.assert_array_equal(latents[1], request.noise[1])
    assert not np.allclose(latents[2], request.noise[2])


def test_tokenize_warns_once_for_each_cut_prompt():
    """A prompt past the text encoder's length: one warning naming it, its length and the cut
    (the tokenizer's own warning replaced); an uncut prompt: none."""
    import types
    import warnings

    class Tokenizer:
        seq_len = 8

        def __call__(self, prompts):
            warnings.warn("the tokenizer's own", UserWarning, stacklevel=2)
            return types.SimpleNamespace(dropped=[0, 3])

    with pytest.warns(UserWarning) as record:
        inputs.tokenize(Tokenizer(), ["short", "long"])
    assert [str(w.message) for w in record] == [
        "the negative prompt is 11 tokens long, more than the text encoder's 8: its last 3 "
        "tokens were dropped (the authors truncate the same way)"]


# ----------------------------------------------------------------------------- issue #11
def test_seeds_use_all_64_bits():
    """Seeds below 2**32 draw as ``jax.random.key`` always did; above, all 64 bits count
    (``jax.random.key`` without x64 keeps the low 32: 2**32 drew what 0 draws)."""
    import jax

    def draw(seed):
        return np.asarray(jax.random.normal(inputs.seed_key(seed), (4,)))

    np.testing.assert_array_equal(draw(7), np.asarray(jax.random.normal(jax.random.key(7), (4,))))
    assert not np.array_equal(draw(2**32), draw(0))
    assert not np.array_equal(draw(2**32 + 7), draw(7))
    assert draw(2**64 - 1).shape == (4,)
    request = base.Request.resolve("t2v", DEFAULTS, "a cat", seed=2**64 - 1)
    assert request.seed == 2**64 - 1
    assert _toy().initial_noise(request).shape == (1, *SHAPE)


class Poisoned(ToyPipeline):
    """A guidance scale of NaN from step 3 on: its latents are non-finite."""

    def step_inputs(self, request, run, index, t):
        scale = jnp.float32(np.nan if index == 2 else 2.0)
        return run.model, jnp.float32(t), {"guidance_scale": scale}


def test_non_finite_latents_stop_the_loop_at_their_step():
    request = base.Request.resolve("t2v", DEFAULTS, "a cat")
    pipe = Poisoned(_toy().release, precision="bf16")
    pipe.adopt("dit", Toy())
    with pytest.raises(errors.NumericalError) as e:
        pipe.sample(request=request)
    message = " ".join(str(e.value).split())
    timestep = FlowMatchEulerScheduler(4, 5.0).timesteps[2]
    for needle in (f"the latents of sampling step 3 of 4 (timestep {float(timestep):g})",
                   "became non-finite (NaN or Inf) with Toy tiny (t2v) from /nowhere",
                   "no video was written", "--precision fp32"):
        assert needle in message, message
    assert isinstance(e.value, VidaxError)


class ToyVAE:
    """Latent frame ``i`` -> one frame of value ``x``; ``on_chunk`` per latent frame."""

    def decode(self, latents, on_chunk=None):
        frames = []
        for i in range(latents.shape[1]):
            frames.append(np.repeat(np.asarray(latents[:, i:i + 1, :, :, :3]), 2, axis=2))
            if on_chunk is not None:
                on_chunk(i + 1, latents.shape[1])
        return np.concatenate(frames, axis=1)


def test_decode_refuses_non_finite_latents_and_frames():
    pipe = _toy()
    pipe.adopt("vae", ToyVAE())
    latents = np.zeros(SHAPE, np.float32)
    assert pipe.decode(latents).shape == (3, 12, 8, 3)
    latents[1, 2, 3, 0] = np.inf
    with pytest.raises(errors.NumericalError, match="the final latents became non-finite"):
        pipe.decode(latents)

    class Broken(ToyVAE):
        def decode(self, latents, on_chunk=None):
            return super().decode(latents, on_chunk) * np.float32(np.nan)

    pipe.adopt("vae", Broken())
    with pytest.raises(errors.NumericalError, match="the decoded video became non-finite"):
        pipe.decode(np.zeros(SHAPE, np.float32))


def _log_console():
    import io

    from rich.console import Console

    return Console(file=io.StringIO(), force_terminal=False, width=200)


def test_progress_into_a_log_prints_steps_and_chunks():
    """No terminal: a line per step when few, about ten a phase when many; per decoded chunk;
    a phase that counts nothing (loading) prints its closing line only."""
    assert [base.log_every(n) for n in (None, 4, 10, 11, 50, 1000)] == [1, 1, 1, 2, 5, 100]
    console = _log_console()
    pipe = ToyPipeline(_toy().release, precision="fp32", console=console)
    pipe.adopt("dit", Toy())
    pipe.adopt("vae", ToyVAE())
    for steps, shown in ((4, [1, 2, 3, 4]), (25, [3, 6, 9, 12, 15, 18, 21, 24, 25])):
        console.file.truncate(0), console.file.seek(0)
        pipe.decode(pipe.sample(request=base.Request.resolve("t2v", DEFAULTS, "a cat",
                                                             steps=steps)))
        lines = console.file.getvalue().splitlines()
        steps_shown = [line for line in lines if ": step " in line]
        assert [int(line.split(": step ")[1].split("/")[0]) for line in steps_shown] == shown
        assert all(f"/{steps}, " in line and " s elapsed, " in line and " s/step" in line
                   for line in steps_shown), lines
        assert [line.split(": chunk ")[1].split(",")[0] for line in lines
                if ": chunk " in line] == ["1/3", "2/3", "3/3"], lines
        assert lines[-1].startswith("decoding 3 latent frames: done in ")
    quiet = base.Progress(console)
    console.file.truncate(0), console.file.seek(0)
    with quiet.phase("loading dit") as advance:
        for _ in range(30):
            advance(total=30)
    assert console.file.getvalue().splitlines()[0].startswith("loading dit: done in ")
    assert len(console.file.getvalue().splitlines()) == 1


def test_another_familys_release_is_named(tmp_path):
    """A folder holding what only one family's releases hold is named as that family's,
    with the command to run (before: Wan2.2 on a Wan2.1 folder spoke of A14B experts)."""
    import json

    def folder(name, *files, config=None):
        f = tmp_path / name
        for rel in files:
            (f / rel).parent.mkdir(parents=True, exist_ok=True)
            (f / rel).write_bytes(b"")
        if config:
            (f / "transformer").mkdir(parents=True, exist_ok=True)
            (f / "transformer" / "config.json").write_text(json.dumps({"_class_name": config}))
        return f

    cases = {"Wan2.1": folder("w21", "Wan2.1_VAE.pth", "config.json"),
             "Wan2.2": folder("w22", "Wan2.1_VAE.pth", "high_noise_model/config.json"),
             "CogVideoX": folder("cog", config="CogVideoXTransformer3DModel"),
             "Cosmos-Predict2.5": folder("cosmos", config="CosmosTransformer3DModel"),
             "HunyuanVideo": folder("hy", "hunyuan-video-t2v-720p/vae/pytorch_model.pt"),
             "LTX-Video": folder("ltx", "ltxv-2b-0.9.8-distilled.safetensors")}
    for name, f in cases.items():
        assert base.recognise(f) == [name]
        assert base.open_folder(f, name, ("a",), None) == f
    with pytest.raises(VidaxError) as e:
        base.open_folder(cases["Wan2.1"], "Wan2.2", ("a",), None)
    assert str(e.value) == (f"{cases['Wan2.1']} is a Wan2.1 release, not a Wan2.2 one: run "
                            f"vidax generate wan2_1 --checkpoint-dir {cases['Wan2.1']} (in "
                            "Python: vidax.pipeline('wan2_1', ...)). Nothing was loaded.")
    with pytest.raises(VidaxError, match="is a Wan2.2 release, not a Wan2.1 one: run vidax "
                                         "generate wan2_2"):
        base.open_folder(cases["Wan2.2"], "Wan2.1", ("a",), None)
    with pytest.raises(VidaxError, match="is a LTX-Video release, not a CogVideoX one"):
        base.open_folder(cases["LTX-Video"], "CogVideoX", ("a",), None)
    assert base.recognise(folder("empty", "notes.txt")) == []


def test_memory_reads_accelerators_and_the_host(monkeypatch):
    """An accelerator's ``memory_stats()`` (the fullest device of the mesh); host RAM where
    the backend reports none (the CPU); on a mesh the activations split over ``dp``/``sp``."""
    import types

    from vidax.pipelines import memory

    def device(free, limit=80 * 2**30):
        return types.SimpleNamespace(platform="gpu", memory_stats=lambda: {
            "bytes_limit": limit, "bytes_in_use": limit - free})

    mesh = types.SimpleNamespace(devices=np.array([device(30 * 2**30), device(20 * 2**30)]))
    assert memory.device_available(mesh) == (20 * 2**30, "2 gpu device(s), memory_stats()",
                                             "gpu")
    available, where, platform = memory.device_available()
    assert platform == "cpu" and where.startswith("host RAM") and available > 2**20
    g = memory.DiTGeometry(batch=2, tokens=4096, dim=512, heads=8, ffn=2048, context=64)
    whole = memory.dit_step(g, jnp.float32, "cpu")
    assert memory.dit_step(g, jnp.float32, "cpu", dp=2).bytes < whole.bytes
    assert memory.dit_step(g, jnp.float32, "cpu", sp=4).bytes < whole.bytes
    flash = memory.dit_step(g, jnp.bfloat16, "gpu")   # cuDNN: no logits materialised
    assert flash.bytes < whole.bytes and "cudnn" in flash.note
    assert "logits" in memory.dit_step(g, jnp.float32, "gpu").largest[0]   # fp32: XLA's
