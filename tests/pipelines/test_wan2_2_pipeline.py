"""Wan2.2 pipelines end to end (DESIGN.md §6.3): vidax against the authors' sampling loops from
the same initial noise, the A14B expert switch, the experts' memory policies, the CLI.

Tiny releases are written in the authors' layout by their own classes (wan22 package: DiT
``WanModel`` with ``model_type`` ti2v / t2v / i2v, ``T5Encoder``, the Wan2.2 or Wan2.1
``WanVAE_``), random values in every tensor, each saved from its own ``state_dict()`` under
the release's file name: TI2V-5B's DiT at the top of the folder, the A14B experts in
``high_noise_model/`` and ``low_noise_model/`` (different random weights, so the experts are
distinguishable), each with its ``config.json``; the T5 file, the tokenizer folder and the
Wan2.1 pieces come from the Wan2.1 pipeline test's helpers. The component sizes are
``vidax.pipelines.wan2_2.tiny_configs``: vidax identifies such a folder as variant ``tiny``.

Oracles: the authors' loops themselves, called on a stand-in ``self`` holding the tiny models
(their ``__init__`` loads full-size files onto CUDA): ``WanTI2V.generate`` (t2v and i2v:
Lanczos resize and crop of a PIL image, the 48-channel first latent frame overwritten after
every step, per-token timesteps 0 on its tokens), ``WanT2V.generate`` and ``WanI2V.generate``
with the two experts and their boundaries. Each gets their T5 wrapper and tokenizer, their VAE
wrapper (whose ``decode`` records the final latents), and draws its own noise from the seed;
vidax starts from that noise.

Bound: final latents, float32 on both sides ("fp32" policy, matmul precision "highest"),
max |vidax - reference| <= 1e-4 x std(reference). The expert switch runs the authors' default
40 steps at their default shifts (t2v 12, i2v 5); the step at which the expert changes,
read from forward hooks on the authors' experts and from vidax's ``expert_log``, must be
the authors' rule ``t >= boundary * 1000``; the latents of those 40-step runs are held to
the same bound. Negative controls: I2V-A14B with vidax's mask and condition channels in the
opposite order; TI2V image-to-video with one timestep for all tokens (the first frame's t = 0
dropped); TI2V text-to-video with the prompt's last word dropped; A14B T2V with the two
experts exchanged. Each must fail the bound.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import dataclasses  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import safetensors.torch  # noqa: E402
import test_wan2_1_pipeline as w21  # noqa: E402  (the Wan2.1 test's release helpers)
import torch  # noqa: E402

import vidax  # noqa: E402
from tests.parity import assert_fails, compare
from tests.reference import wan22  # noqa: E402
from vidax import cli, video  # noqa: E402
from vidax.errors import VidaxError  # noqa: E402
from vidax.pipelines import wan2_1  # noqa: E402
from vidax.pipelines import wan2_2 as wan  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = [pytest.mark.filterwarnings("ignore:.*autocast.*:FutureWarning"),
              pytest.mark.filterwarnings("ignore:.*CUDA is not available.*:UserWarning"),
              pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")]

FRAMES, STEPS, SEED = 9, 4, 7
PROMPT = w21.PROMPT
TI2V_SIZE = (96, 64)  # latents 3 x 4 x 6 (48 channels), 3 x 2 x 3 DiT tokens
A14B_SIZE = (64, 48)  # latents 3 x 6 x 8 (16 channels), 3 x 3 x 4 DiT tokens


# ----------------------------------------------------------------------------- tiny releases
def _authors_dit(cfg, task: str, seed: int):
    model = wan22.model_module().WanModel(**dict(dataclasses.asdict(cfg), model_type=task))
    w21._randomize(model.named_parameters(), seed=seed)
    return model.eval()


def _write_dit(folder: Path, model, cfg, task: str) -> None:
    """The DiT file and its ``config.json`` (as ``WanModel.save_pretrained`` writes it, plus
    the keys it leaves out, whose tiny values differ from the release defaults)."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    safetensors.torch.save_file(state, folder / "diffusion_pytorch_model.safetensors")
    (folder / "config.json").write_text(json.dumps(
        {"_class_name": "WanModel", "_diffusers_version": "0.33.0",
         **dataclasses.asdict(cfg), "model_type": task}))


def _authors_vae22(cfg):
    model = wan22.vae2_2_module().WanVAE_(
        dim=cfg.dim, dec_dim=cfg.dec_dim, z_dim=cfg.z_dim, dim_mult=list(cfg.dim_mult),
        num_res_blocks=cfg.num_res_blocks, attn_scales=[],
        temperal_downsample=list(cfg.temporal_downsample), dropout=0.0).eval()
    w21._randomize(model.named_parameters(), seed=3)
    return model


def write_release(folder: Path, task: str) -> types.SimpleNamespace:
    """A tiny Wan2.2 release folder in the authors' layout; returns the torch modules."""
    configs = wan.tiny_configs(task)
    folder.mkdir(parents=True)
    if task == "ti2v":
        experts = {"dit": _authors_dit(configs["dit"], task, seed=1)}
        _write_dit(folder, experts["dit"], configs["dit"], task)
        vae = _authors_vae22(configs["vae"])
        torch.save(vae.state_dict(), folder / "Wan2.2_VAE.pth")
    else:
        experts = {wan.HIGH: _authors_dit(configs["dit"], task, seed=1),
                   wan.LOW: _authors_dit(configs["dit"], task, seed=5)}
        for name, model in experts.items():
            _write_dit(folder / name, model, configs["dit"], task)
        vae = w21._authors_vae(configs["vae"])
        torch.save(vae.state_dict(), folder / "Wan2.1_VAE.pth")
    t5 = w21._authors_t5(configs["text_encoder"])
    torch.save({k: v.to(torch.bfloat16) for k, v in t5.state_dict().items()},
               folder / "models_t5_umt5-xxl-enc-bf16.pth")
    w21._write_tokenizer(folder / wan2_1.TOKENIZER_DIR)
    return types.SimpleNamespace(folder=folder, task=task, configs=configs, experts=experts,
                                 t5=t5, vae=vae)


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan2_2")
    return {task: write_release(root / f"Wan2.2-{task}-tiny", task)
            for task in ("ti2v", "t2v", "i2v")}


@pytest.fixture(scope="module")
def pipes(releases):
    return {task: vidax.pipeline("wan2_2", r.folder, precision="fp32")
            for task, r in releases.items()}


# ----------------------------------------------------------------------------- the authors' loops
def _vae_wrapper(release, recording: list):
    """The authors' VAE wrapper around the tiny model, its ``decode`` recording the final
    latents it receives."""
    if release.task == "ti2v":
        base = wan22.vae2_2_module().Wan2_2_VAE
    else:
        base = wan22.vae2_1_module().Wan2_1_VAE

    class Recording(base):
        def decode(self, zs):
            recording.append(zs[0].clone())
            return [torch.zeros(1)]  # the video is not compared here

    cfg = release.configs["vae"]
    vae = object.__new__(Recording)
    vae.dtype, vae.device, vae.model = torch.float32, torch.device("cpu"), release.vae
    vae.mean, vae.std = torch.tensor(cfg.latents_mean), torch.tensor(cfg.latents_std)
    vae.scale = [vae.mean, 1.0 / vae.std]
    return vae


def authors_generate(release, *, image=None, size, steps=STEPS, shift=None,
                     guide_scale=None) -> types.SimpleNamespace:
    """The authors' loop of the release's task on a stand-in ``self``: final latents
    (channels-last), the noise it drew, and the expert each DiT call used."""
    from PIL import Image
    from wan.configs import WAN_CONFIGS

    module, cls, config = {
        "ti2v": (wan22.textimage2video_module, "WanTI2V", "ti2v-5B"),
        "t2v": (wan22.text2video_module, "WanT2V", "t2v-A14B"),
        "i2v": (wan22.image2video_module, "WanI2V", "i2v-A14B")}[release.task]
    cfg = WAN_CONFIGS[config]
    self = object.__new__(getattr(module(), cls))
    recorded, calls, noise = [], [], []
    experts = {name: m for name, m in release.experts.items()}
    self.__dict__.update(
        device=torch.device("cpu"), rank=0, t5_cpu=False, init_on_cpu=False, sp_size=1,
        num_train_timesteps=1000, param_dtype=torch.bfloat16, lightning=False,
        vae_stride=cfg.vae_stride, patch_size=cfg.patch_size,
        text_encoder=w21._authors_text_encoder(release),
        vae=_vae_wrapper(release, recorded), sample_neg_prompt=cfg.sample_neg_prompt)
    if release.task == "ti2v":
        self.model = experts["dit"]
    else:
        self.boundary = cfg.boundary
        self.high_noise_model, self.low_noise_model = experts[wan.HIGH], experts[wan.LOW]
    hooks = []
    for name, model in experts.items():
        def hook(m, args, kwargs, name=name):
            calls.append(name)
            if not noise:
                noise.append(args[0][0].clone())
        hooks.append(model.register_forward_pre_hook(hook, with_kwargs=True))
    kwargs = dict(frame_num=FRAMES, shift=cfg.sample_shift if shift is None else shift,
                  sample_solver="unipc", sampling_steps=steps,
                  guide_scale=cfg.sample_guide_scale if guide_scale is None else guide_scale,
                  n_prompt="", seed=SEED, offload_model=False)
    pil = None if image is None else Image.fromarray(image)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            if release.task == "ti2v":
                self.generate(PROMPT, img=pil, size=size, max_area=size[0] * size[1], **kwargs)
            elif release.task == "t2v":
                self.generate(PROMPT, size=size, **kwargs)
            else:
                self.generate(PROMPT, pil, max_area=size[0] * size[1], **kwargs)
    finally:
        for h in hooks:
            h.remove()
    print(f"authors' {cls}.generate ({release.task}, {steps} steps): "
          f"{time.perf_counter() - start:.1f} s")
    # Each step calls the DiT twice (cond, uncond): one expert per step.
    steps_experts = calls[::2]
    assert calls[1::2] == steps_experts
    drawn = noise[0].numpy()
    if release.task == "i2v":
        drawn = drawn[:16]  # their model input is [noise | y]; the noise is the first 16
    return types.SimpleNamespace(latents=recorded[0].numpy().transpose(1, 2, 3, 0),
                                 noise=drawn, experts=steps_experts,
                                 negative_prompt=cfg.sample_neg_prompt)


def _authors_noise(release, request) -> np.ndarray:
    """The generator's first draw, as their ``generate`` makes it (``[C, T, h, w]``)."""
    return w21._authors_noise(request.latent_shape, SEED)


# ----------------------------------------------------------------------------- TI2V-5B
@pytest.fixture(scope="module")
def ti2v_image_case(releases, pipes):
    release, pipe = releases["ti2v"], pipes["ti2v"]
    image = w21._image(80, 112, seed=10)  # resized (Lanczos) and cropped to 96 x 64
    ref = authors_generate(release, image=image, size=TI2V_SIZE)
    request = pipe.request(PROMPT, image=image, frames=FRAMES, size=TI2V_SIZE, steps=STEPS)
    assert request.size == TI2V_SIZE
    request = dataclasses.replace(
        request, noise=wan.noise_array(_authors_noise(release, request), request.latent_shape))
    return types.SimpleNamespace(pipe=pipe, request=request, ref=ref)


@pytest.mark.slow
def test_ti2v_image_to_video_matches_authors(ti2v_image_case, record_property, monkeypatch):
    case = ti2v_image_case
    start = time.perf_counter()
    latents = case.pipe.sample(request=case.request)
    print(f"vidax ti2v i2v sample (compile included): {time.perf_counter() - start:.1f} s")
    stats = compare("ti2v_i2v_latents", latents, case.ref.latents, record_property)
    assert stats["max_abs_diff"] <= stats["bound"], stats
    # The first latent frame is the encoded image, untouched by sampling.
    z = np.asarray(case.pipe.vae.encode(case.request.image[None, None]))[0, 0]
    np.testing.assert_array_equal(latents[0], z)

    # Negative control: one timestep for every token (the first frame's t = 0 dropped).
    monkeypatch.setattr(wan, "first_frame_tokens", lambda shape: np.ones(
        np.prod(np.asarray(shape[:3]) // np.asarray(wan2_1.PATCH)), np.float32))
    bad = case.pipe.sample(request=case.request)
    stats = compare("ti2v_i2v_negative_per_sample_t", bad, case.ref.latents, record_property)
    assert stats["max_abs_diff"] > stats["bound"], stats


@pytest.mark.slow
def test_ti2v_text_to_video_matches_authors(releases, pipes, record_property):
    release, pipe = releases["ti2v"], pipes["ti2v"]
    ref = authors_generate(release, size=TI2V_SIZE)
    assert ref.negative_prompt == wan.NEGATIVE_PROMPT
    latents = pipe.sample(PROMPT, frames=FRAMES, size=TI2V_SIZE, steps=STEPS,
                          noise=ref.noise)
    assert pipe.expert_log == ["dit"] * STEPS
    stats = compare("ti2v_t2v_latents", latents, ref.latents, record_property)
    assert stats["max_abs_diff"] <= stats["bound"], stats
    # Negative control: the prompt's last word dropped (one more vidax run of the same shapes,
    # against the same reference).
    dropped = pipe.sample(PROMPT.rsplit(" ", 1)[0], frames=FRAMES, size=TI2V_SIZE, steps=STEPS,
                          noise=ref.noise)
    assert_fails("ti2v_t2v_negative_dropped_word", dropped, ref.latents, record_property)


# ----------------------------------------------------------------------------- A14B
@pytest.fixture(scope="module")
def i2v_case(releases, pipes):
    """I2V-A14B at the authors' defaults (40 steps, shift 5, guidance 3.5 / 3.5)."""
    release, pipe = releases["i2v"], pipes["i2v"]
    image = w21._image(48, 64, seed=11)
    ref = authors_generate(release, image=image, size=A14B_SIZE, steps=40)
    request = pipe.request(PROMPT, image=image, frames=FRAMES, size=A14B_SIZE, steps=40)
    assert (request.shift, request.boundary) == (5.0, 0.9)  # the tiny release: i2v-a14b's
    assert request.size == A14B_SIZE
    request = dataclasses.replace(request, noise=wan.noise_array(ref.noise,
                                                                 request.latent_shape))
    return types.SimpleNamespace(pipe=pipe, request=request, ref=ref)


@pytest.fixture(scope="module")
def t2v_case(releases, pipes):
    """T2V-A14B at the authors' defaults (40 steps, shift 12, guidance 3 / 4)."""
    release, pipe = releases["t2v"], pipes["t2v"]
    ref = authors_generate(release, size=A14B_SIZE, steps=40)
    request = pipe.request(PROMPT, frames=FRAMES, size=A14B_SIZE, steps=40, noise=ref.noise)
    assert (request.shift, request.boundary) == (12.0, 0.875)  # t2v-a14b's
    assert (request.guidance_scale, request.guidance_scale_high) == (3.0, 4.0)
    return types.SimpleNamespace(pipe=pipe, request=request, ref=ref)


def _switch_step(experts: list[str]) -> int:
    """The first step run by the low-noise expert; high-noise before it, low-noise after."""
    n = experts.index(wan.LOW)
    assert experts == [wan.HIGH] * n + [wan.LOW] * (len(experts) - n), experts
    return n


def _authors_rule(shift: float, boundary: float, steps: int = 40) -> int:
    """The switch step by the authors' rule on their own scheduler's timesteps."""
    unipc, _ = wan22.fm_solvers()
    sched = unipc.FlowUniPCMultistepScheduler(num_train_timesteps=1000, shift=1,
                                              use_dynamic_shifting=False)
    sched.set_timesteps(steps, device="cpu", shift=shift)
    return sum(int(t.item() >= boundary * 1000) for t in sched.timesteps)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["t2v", "i2v"])
def test_expert_switch_is_the_authors_rule(task, t2v_case, i2v_case, record_property):
    case = t2v_case if task == "t2v" else i2v_case
    shift, boundary = (12.0, 0.875) if task == "t2v" else (5.0, 0.9)
    latents = case.pipe.sample(request=case.request)
    ours, theirs = _switch_step(case.pipe.expert_log), _switch_step(case.ref.experts)
    print(f"{task}: the low-noise expert takes over at step {ours} of 40 (authors: {theirs})")
    record_property(f"{task}_switch_step", ours)
    assert ours == theirs == _authors_rule(shift, boundary)
    assert ours == {"t2v": 26, "i2v": 15}[task]  # wan.md's recomputation of the schedule
    stats = compare(f"{task}_a14b_latents", latents, case.ref.latents, record_property)
    assert stats["max_abs_diff"] <= stats["bound"], stats


@pytest.mark.slow
def test_i2v_negative_channel_order(i2v_case, record_property, monkeypatch):
    monkeypatch.setattr(wan2_1, "condition_channels",
                        lambda mask, latent: jnp.concatenate(
                            [jnp.asarray(latent), jnp.asarray(mask, jnp.float32)], axis=-1))
    bad = i2v_case.pipe.sample(request=i2v_case.request)
    stats = compare("i2v_a14b_negative_channel_order", bad, i2v_case.ref.latents,
                     record_property)
    assert stats["max_abs_diff"] > stats["bound"], stats


@pytest.mark.slow
def test_t2v_negative_experts_exchanged(t2v_case, record_property, monkeypatch):
    monkeypatch.setattr(wan, "expert_for", lambda t, boundary: wan.LOW if t >= boundary * 1000
                        else wan.HIGH)
    bad = t2v_case.pipe.sample(request=t2v_case.request)
    stats = compare("t2v_a14b_negative_experts_exchanged", bad, t2v_case.ref.latents,
                     record_property)
    assert stats["max_abs_diff"] > stats["bound"], stats


@pytest.mark.slow
def test_swap_policy_places_each_expert_once(releases, t2v_case):
    """``swap``: one expert on the device at a time, each placed once per run, and the
    same latents as with both resident."""
    pipe = wan.Pipeline.from_release(wan.inspect_folder(releases["t2v"].folder),
                                     precision="fp32", expert_policy="swap")
    assert pipe.experts.policy == "swap" and pipe.experts.placements == 0
    request = dataclasses.replace(t2v_case.request, steps=8)
    latents = pipe.sample(request=request)
    assert pipe.experts.placements == 2
    assert len(pipe.experts._device) == 1
    np.testing.assert_array_equal(latents, t2v_case.pipe.sample(request=request))
    assert t2v_case.pipe.experts.policy == "resident"  # auto on a CPU


# ----------------------------------------------------------------------------- defaults, inputs
def test_defaults_are_the_authors():
    wan22.textimage2video_module()  # wan.configs importable (the wan package's stubs set up)
    from wan.configs import MAX_AREA_CONFIGS, SIZE_CONFIGS, SUPPORTED_SIZES, WAN_CONFIGS

    for variant, config in (("ti2v-5b", "ti2v-5B"), ("t2v-a14b", "t2v-A14B"),
                            ("i2v-a14b", "i2v-A14B")):
        cfg, d = WAN_CONFIGS[config], wan.DEFAULTS[variant]
        assert (d.steps, d.shift, d.frames, d.fps) == (cfg.sample_steps, cfg.sample_shift,
                                                        cfg.frame_num, cfg.sample_fps)
        assert d.negative_prompt == cfg.sample_neg_prompt
        size = f"{d.size[0]}*{d.size[1]}"
        assert size in SUPPORTED_SIZES[config] and SIZE_CONFIGS[size] == d.size
        assert MAX_AREA_CONFIGS[size] == d.size[0] * d.size[1]
        if variant == "ti2v-5b":
            assert d.guidance_scale == cfg.sample_guide_scale and d.boundary is None
        else:
            assert (d.guidance_scale, d.guidance_scale_high) == cfg.sample_guide_scale
            assert d.boundary == cfg.boundary


def test_best_output_size_is_the_authors():
    theirs = wan22.textimage2video_module().best_output_size
    rng = np.random.default_rng(0)
    for w, h in [(1280, 704), (832, 1104), (1024, 1024), (1920, 1080),
                 *rng.integers(64, 2000, (40, 2))]:
        for area in (1280 * 704, 96 * 64, 512 * 512):
            try:
                expected = theirs(int(w), int(h), 32, 32, area)
            except (AssertionError, ZeroDivisionError):
                continue
            assert wan.best_output_size(int(w), int(h), 32, 32, area) == expected


def test_requests_refuse_bad_input():
    image = np.zeros((64, 96, 3), np.uint8)
    with pytest.raises(VidaxError, match="multiples of 32"):
        wan.make_request("ti2v", "ti2v-5b", PROMPT, size=(1280, 720))
    with pytest.raises(VidaxError, match="i2v needs the first frame"):
        wan.make_request("i2v", "i2v-a14b", PROMPT)
    with pytest.raises(VidaxError, match="takes no image"):
        wan.make_request("t2v", "t2v-a14b", PROMPT, image=image)
    with pytest.raises(VidaxError, match="no --last-image"):
        wan.make_request("ti2v", "ti2v-5b", PROMPT, image=image, last_image=image)
    with pytest.raises(VidaxError, match="TI2V-5B takes one number"):
        wan.make_request("ti2v", "ti2v-5b", PROMPT, guidance_scale=(3.0, 4.0))
    r = wan.make_request("t2v", "t2v-a14b", PROMPT, guidance_scale=(2.0, 6.0))
    assert (r.guidance_scale, r.guidance_scale_high) == (2.0, 6.0)
    r = wan.make_request("t2v", "t2v-a14b", PROMPT, guidance_scale=5.0)
    assert (r.guidance_scale, r.guidance_scale_high) == (5.0, 5.0)


# ----------------------------------------------------------------------------- the CLI
def test_generate_writes_the_mp4(releases, tmp_path, capsys):
    out = tmp_path / "video.mp4"
    img = tmp_path / "first.png"
    from PIL import Image

    Image.fromarray(w21._image(64, 96, seed=3)).save(img)
    rc = cli.main(["generate", "wan2_2", "--checkpoint-dir", str(releases["ti2v"].folder),
                   "--prompt", PROMPT, "--image", str(img), "--frames", str(FRAMES),
                   "--size", "96x64", "--steps", "2", "--out", str(out)])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    assert f"wrote {out.resolve()}: 9 frames, 96x64, 24 fps" in printed.out
    frames, fps = video.read_video(out)
    assert frames.shape == (9, 64, 96, 3) and fps == 24


def test_generate_refuses_a_missing_expert(releases, tmp_path, capsys):
    folder = tmp_path / "incomplete"
    shutil.copytree(releases["t2v"].folder, folder)
    (folder / wan.LOW / "diffusion_pytorch_model.safetensors").unlink()
    rc = cli.main(["generate", "wan2_2", "--checkpoint-dir", str(folder), "--prompt", PROMPT,
                   "--out", str(tmp_path / "a.mp4")])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 1
    assert "low_noise_model/diffusion_pytorch_model.safetensors (the DiT)" in err, err
    assert not (tmp_path / "a.mp4").exists()


def test_memory_is_checked_before_loading(releases, monkeypatch):
    from tests.pipelines.memory_checks import check_before_loading

    for task, size in (("ti2v", TI2V_SIZE), ("t2v", A14B_SIZE)):
        def make(release, given, frames, size=size):
            return wan.make_request(release.task, release.variant, PROMPT,
                                    frames=frames or FRAMES, size=given or size)

        check_before_loading(wan, releases[task].folder, make, monkeypatch)


# ----------------------------------------------------------------------------- step caching
def test_a_step_cache_starts_afresh_on_the_other_expert(pipes):
    """The low-noise expert's first step computes (its own cache states, as diffusers keeps
    one state per transformer); a threshold no change reaches skips every other step; at
    threshold 0 the run is the uncached one bit for bit."""
    from vidax.pipelines import step_cache

    pipe = pipes["t2v"]
    options = dict(frames=FRAMES, size=A14B_SIZE, steps=8, seed=0)
    plain = pipe.sample(PROMPT, **options)
    switch = pipe.expert_log.index(wan.LOW)
    assert 0 < switch < 8
    skipping = pipe.sample(PROMPT, step_cache=step_cache.parse("first-block", threshold=1e9),
                           **options)
    ran = pipe.sampling_reports[-1].computed.any((1, 2)).tolist()
    assert ran == [i in (0, switch) for i in range(8)], (ran, switch)
    assert np.isfinite(skipping).all() and not np.array_equal(skipping, plain)
    exact = pipe.sample(PROMPT, step_cache=step_cache.parse("first-block", threshold=0.0),
                        **options)
    assert pipe.sampling_reports[-1].computed.all() and np.array_equal(exact, plain)
