"""LTX-2's dev two-stage pipeline with its distilled LoRA against the authors'
``ltx_pipelines`` 1.0.0 ``TI2VidTwoStagesPipeline`` (``ti2vid_two_stages.py``).

What the authors run: stage 1 on the dev transformer at half the size, ``LTX2Scheduler``
sigmas, ``multi_modal_guider_factory_denoising_func`` with the negative context; the spatial
upsampler (``upsample_video``); stage 2 on ``stage_2_model_ledger`` -- the stage-1 ledger
``with_additional_loras(distilled_lora)``, i.e. the same weights with the distilled LoRA fused
-- with ``STAGE_2_DISTILLED_SIGMA_VALUES``, re-noised to their first sigma, positive context
only (``simple_denoising_func``). ``__call__`` hard-codes bfloat16 and builds its models from
checkpoint paths, so the oracle runs that call's body one level down at float32 (as
tests/reference/ltx2.py does for the other pipelines, whose ``GivenNoiser`` and helpers it
reuses), on the tiny release of tests/pipelines/test_ltx2_5_pipeline.py (its fixture and
builders); stage 2's transformer holds ltx-core's own LoRA delta (``_prepare_deltas``, as
tests/lora/test_lora_ltx.py's ``_ltx_core_fused``: ``apply_loras`` refuses float32 weights).

vidax keeps one DiT: the LoRA live at strength 0, set to its strength for stage 2 only.
Bound: 1e-4 x std of the reference, float32, "highest". The LoRA's effect on the final latents
is asserted >= 100x the bound; negative controls (must fail): the LoRA left at strength 0 in
stage 2; the LoRA at its strength in stage 1 too.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import jax
import numpy as np
import pytest

import vidax.lora
from tests.lora.test_lora_ltx import _ltx_core_fused, _save, make_lora
from tests.parity import REL_TOL, assert_fails, assert_parity
from tests.pipelines import test_ltx2_5_pipeline as tp
from tests.reference import ltx2 as ref
from vidax import loading, registry
from vidax.errors import VidaxError
from vidax.pipelines import ltx2_5 as ltx2

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = [pytest.mark.filterwarnings("ignore:torch.meshgrid:UserWarning"),
              pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")]
release = tp.release              # the tiny release files (a module-scoped fixture)
STRENGTH, STEPS = 0.8, 2
LORA_NAME = "ltx-2.3-22b-distilled-lora-384"


def _dev_release(release, lora) -> ltx2.Release:
    folder, single, up_file = release
    keys = {"dit": ("dit", single), "vae": ("vae", single), "upsampler": ("upsampler", up_file)}
    specs = {k: registry.get("ltx2_5", c) for k, (c, _) in keys.items()}
    configs = {k: loading.resolve_config(specs[k], path) for k, (_, path) in keys.items()}
    files = {k: path for k, (_, path) in keys.items()}
    variant = "2.3-22b-dev"
    return ltx2.Release(folder, "t2av", variant, ltx2.defaults_for(variant, True), configs,
                        files, specs, version="2.3")


@pytest.fixture(scope="module")
def case(release, tmp_path_factory):
    """The LoRA file (every Linear of the DiT), the authors' stage-2 transformer and the
    vidax pipeline loaded with ``distilled_lora="FILE:STRENGTH"``."""
    model = tp._references()[0]
    root = tmp_path_factory.mktemp("ltx2_distilled_lora")
    lora = _save(make_lora(model.state_dict(), seed=21), root / f"{LORA_NAME}.safetensors")
    fused = _ltx_core_fused(model, lora, STRENGTH)
    pipe = ltx2.Pipeline.from_release(_dev_release(release, lora), precision="fp32",
                                      distilled_lora=f"{lora}:{STRENGTH}")
    return lora, fused, pipe


def _authors(base_model, stage_2_model, contexts, draws, request, guiders):
    """``TI2VidTwoStagesPipeline.__call__``'s sampling at float32 (no image, given noise)."""
    ref.import_ltx_audio()
    import torch
    from ltx_core.components.diffusion_steps import EulerDiffusionStep
    from ltx_core.components.guiders import create_multimodal_guider_factory
    from ltx_core.components.schedulers import LTX2Scheduler
    from ltx_core.model.transformer.model import X0Model
    from ltx_core.model.upsampler import upsample_video
    from ltx_core.types import VideoPixelShape
    from ltx_pipelines.utils import (
        denoise_audio_video,
        euler_denoising_loop,
        multi_modal_guider_factory_denoising_func,
        simple_denoising_func,
    )
    from ltx_pipelines.utils.constants import STAGE_2_DISTILLED_SIGMA_VALUES
    from ltx_pipelines.utils.types import PipelineComponents

    _, encoder, upsampler, _ = tp._references()
    components = PipelineComponents(dtype=torch.float32, device=torch.device("cpu"))
    noiser, stepper = ref.GivenNoiser([torch.from_numpy(d) for d in draws]), EulerDiffusionStep()
    (v_p, a_p), (v_n, a_n) = [(torch.from_numpy(v), torch.from_numpy(a)) for v, a in contexts]
    (w1, h1), (w2, h2) = request.stage_sizes()
    common = dict(components=components, dtype=torch.float32, device=torch.device("cpu"))

    def shape(width, height):
        return VideoPixelShape(batch=1, frames=tp.FRAMES, width=width, height=height,
                               fps=tp.FPS)

    with torch.no_grad():
        stage_1 = X0Model(base_model).eval()

        def first_loop(sigmas, video_state, audio_state, stepper):
            return euler_denoising_loop(
                sigmas=sigmas, video_state=video_state, audio_state=audio_state,
                stepper=stepper, denoise_fn=multi_modal_guider_factory_denoising_func(
                    video_guider_factory=create_multimodal_guider_factory(
                        params=ref.guider_params(guiders[0]), negative_context=v_n),
                    audio_guider_factory=create_multimodal_guider_factory(
                        params=ref.guider_params(guiders[1]), negative_context=a_n),
                    v_context=v_p, a_context=a_p, transformer=stage_1))

        sigmas = LTX2Scheduler().execute(steps=request.steps).to(dtype=torch.float32)
        video_state, audio_state = denoise_audio_video(
            output_shape=shape(w1, h1), conditionings=[], noiser=noiser, sigmas=sigmas,
            stepper=stepper, denoising_loop_fn=first_loop, **common)
        upscaled = upsample_video(latent=video_state.latent[:1], video_encoder=encoder,
                                  upsampler=upsampler)
        stage_2 = X0Model(stage_2_model).eval()

        def second_loop(sigmas, video_state, audio_state, stepper):
            return euler_denoising_loop(
                sigmas=sigmas, video_state=video_state, audio_state=audio_state,
                stepper=stepper, denoise_fn=simple_denoising_func(
                    video_context=v_p, audio_context=a_p, transformer=stage_2))

        distilled = torch.Tensor(STAGE_2_DISTILLED_SIGMA_VALUES)
        video_state, audio_state = denoise_audio_video(
            output_shape=shape(w2, h2), conditionings=[], noiser=noiser, sigmas=distilled,
            stepper=stepper, denoising_loop_fn=second_loop, noise_scale=distilled[0],
            initial_video_latent=upscaled, initial_audio_latent=audio_state.latent, **common)
    return video_state.latent.numpy(), audio_state.latent.numpy()


def _guiders():
    video_g, audio_g = ltx2.default_guiders("2.3")
    return (dataclasses.replace(video_g, stg_blocks=(1,)),     # the tiny DiT has 2 blocks
            dataclasses.replace(audio_g, stg_blocks=(0,)))


def test_dev_two_stage_matches_the_authors(case, monkeypatch, record_property):
    lora, fused, pipe = case
    assert vidax.lora.live_strengths(pipe.dit) == {LORA_NAME: 0.0}
    guiders = _guiders()
    request = tp._request(pipe, steps=STEPS, video_guider=guiders[0], audio_guider=guiders[1])
    assert request.stages == 2 and request.mode == "dev"       # two stages by default
    draws, contexts = tp._draws(2, request.stage_sizes(), seed=8), tp._contexts(2, seed=9)
    base_model = tp._references()[0]
    ref_v, ref_a = _authors(base_model, fused, contexts, draws, request, guiders)
    out_v, out_a = tp._vidax(pipe, request, draws, contexts, monkeypatch)
    assert vidax.lora.live_strengths(pipe.dit) == {LORA_NAME: 0.0}   # back after stage 2
    assert_parity("ltx2 dev two-stage video", out_v, ref_v, record_property)
    assert_parity("ltx2 dev two-stage audio", out_a, ref_a, record_property)
    # negative control 1: stage 2 without the LoRA (its strength left at 0); also the
    # LoRA's effect, which must dwarf the bound
    zero = dataclasses.replace(pipe.release.distilled_lora, strength=0.0)
    monkeypatch.setattr(pipe, "release", dataclasses.replace(pipe.release, distilled_lora=zero))
    bad_v, bad_a = tp._vidax(pipe, request, draws, contexts, monkeypatch)
    for name, bad, good in (("video", bad_v, ref_v), ("audio", bad_a, ref_a)):
        assert np.abs(bad - good).max() / good.std() > 100 * REL_TOL, name
        assert_fails(f"ltx2 dev two-stage, no LoRA in stage 2, {name}", bad, good,
                     record_property)
    # negative control 2: the LoRA at its strength in both stages
    monkeypatch.undo()
    monkeypatch.setattr(pipe, "_stage_lora", lambda request, stage: contextlib.nullcontext())
    vidax.lora.set_strengths(pipe.dit, {LORA_NAME: STRENGTH})
    try:
        bad_v, bad_a = tp._vidax(pipe, request, draws, contexts, monkeypatch)
    finally:
        vidax.lora.set_strengths(pipe.dit, {LORA_NAME: 0.0})
    assert_fails("ltx2 dev two-stage, LoRA in stage 1 too, video", bad_v, ref_v, record_property)
    assert_fails("ltx2 dev two-stage, LoRA in stage 1 too, audio", bad_a, ref_a, record_property)


def test_distilled_lora_is_found_and_required(case, tmp_path):
    """The folder's file name pattern (not mistaken for a DiT), ``FILE:STRENGTH``, and the
    refusals: dev two stages without the LoRA, a missing file, a distilled release."""
    lora, _, pipe = case
    spec = pipe.release.distilled_lora
    assert (spec.path, spec.strength, spec.name) == (lora, STRENGTH, LORA_NAME)
    for name in ("ltx-2-19b-distilled-lora-384.safetensors", f"{LORA_NAME}.safetensors"):
        (tmp_path / name).touch()
        assert ltx2._one(tmp_path, [ltx2.DISTILLED_LORA], "distilled LoRA").name == name
        (tmp_path / name).unlink()
    assert Path(f"{LORA_NAME}.safetensors").match(ltx2.DISTILLED_LORA)
    assert not Path("ltx-2.3-22b-distilled.safetensors").match(ltx2.DISTILLED_LORA)
    plain = dataclasses.replace(pipe.release, distilled_lora=None)
    assert ltx2.make_request("t2av", plain.variant, "x", release=plain).stages == 1
    with pytest.raises(VidaxError, match="distilled-lora"):
        ltx2.make_request("t2av", plain.variant, "x", release=plain, stages=2)
    with pytest.raises(VidaxError, match="no such file"):
        ltx2.with_distilled_lora(plain, str(tmp_path / "missing.safetensors"))
    distilled = dataclasses.replace(plain, variant="2.3-22b-distilled")
    with pytest.raises(VidaxError, match="distilled release already"):
        ltx2.with_distilled_lora(distilled, lora)


def test_cli_distilled_lora_is_checked_before_loading(tmp_path, capsys):
    """``vidax generate ltx2_5 --distilled-lora FILE[:S]``: a dev folder (the demo's files
    under a dev DiT name) finds it, the LoRA is mapped onto the DiT before any weight is read
    (a LoRA that does not fit is refused naming its key); other families and distilled
    releases refuse the option."""
    from vidax import cli
    from vidax.demo import ltx2_5 as demo
    from vidax.demo.common import write_safetensors

    written = tmp_path / "distilled"
    demo.write(written)
    dev = tmp_path / "dev"
    dev.mkdir()
    for item in written.iterdir():
        name = "ltx-2.3-22b-dev.safetensors" if item.name == demo.SINGLE else item.name
        (dev / name).symlink_to(item)
    bad = tmp_path / "bad-lora.safetensors"
    write_safetensors(bad, {
        "diffusion_model.transformer_blocks.0.attn1.to_q.lora_A.weight":
            np.zeros((2, 7), np.float32),
        "diffusion_model.transformer_blocks.0.attn1.to_q.lora_B.weight":
            np.zeros((7, 2), np.float32)})
    out = tmp_path / "x.mp4"

    def run(folder, *extra, model="ltx2_5"):
        argv = ["generate", model, "--checkpoint-dir", str(folder), "--prompt", "a fox",
                "--out", str(out), *extra]
        assert cli.main(argv) == 1
        return " ".join(capsys.readouterr().err.split())

    err = run(dev, "--distilled-lora", f"{bad}:0.5")
    assert "transformer_blocks.0.attn1.to_q" in err and "loading dit" not in err, err
    assert "distilled release already" in run(written, "--distilled-lora", str(bad))
    assert "no such file" in run(dev, "--distilled-lora", str(tmp_path / "none.safetensors"))
    assert "no dev two-stage" in run(tmp_path, "--distilled-lora", str(bad), model="wan2_1")
    assert not out.exists()
