"""LoRAs through the pipelines: ``vidax.pipeline(..., loras=)`` with ``@high`` / ``@low`` on
Wan2.2 A14B's experts, and the step-distillation preset their LoRAs come with.

Oracle: the same tiny A14B release (``tests/pipelines/test_wan2_2_pipeline.py``) with each
expert's DiT file replaced by its weights plus the LoRA's change, added by hand in the
authors' key names (``W + s (alpha / r) up @ down``): the pipeline with the LoRAs must make
that release's video. Bound 1e-4 x std; negative control: the experts' LoRAs swapped.
"""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import jax
import numpy as np
import pytest

import vidax
import vidax.lora
from tests.parity import assert_fails, assert_parity

sys.path.insert(0, str(Path(__file__).parents[1] / "pipelines"))  # as pytest imports them
from test_wan2_2_pipeline import A14B_SIZE, FRAMES, PROMPT, write_release  # noqa: E402
from vidax.errors import VidaxError  # noqa: E402
from vidax.pipelines import wan2_2 as wan  # noqa: E402
from vidax.schedulers import step_distill_sigmas  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = [pytest.mark.filterwarnings("ignore:.*CUDA is not available.*:UserWarning"),
              pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")]
RANK, ALPHA = 2, 4.0
MODULES = ("blocks.0.self_attn.q", "blocks.1.ffn.0", "blocks.0.cross_attn.v", "head.head")


def _lora(state, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    out = {}
    for m in MODULES:
        o, i = state[f"{m}.weight"].shape
        out[f"diffusion_model.{m}.lora_down.weight"] = torch.randn(RANK, i, generator=g) * .3
        out[f"diffusion_model.{m}.lora_up.weight"] = torch.randn(o, RANK, generator=g) * .3
        out[f"diffusion_model.{m}.alpha"] = torch.tensor(ALPHA)
    return out


def _merged(state, lora, strength):
    return {k: (v + strength * (ALPHA / RANK)
                * lora[f"diffusion_model.{k[:-7]}.lora_up.weight"]
                @ lora[f"diffusion_model.{k[:-7]}.lora_down.weight"]
                if k.endswith(".weight") and k[:-7] in MODULES else v).contiguous()
            for k, v in state.items()}


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    import safetensors.torch

    root = tmp_path_factory.mktemp("lora_pipe")
    release = write_release(root / "Wan2.2-t2v-tiny", "t2v")
    files, edited = {}, root / "Wan2.2-t2v-tiny-merged"
    shutil.copytree(release.folder, edited)
    for expert, name, seed, strength in (("high", wan.HIGH, 11, 0.8), ("low", wan.LOW, 12, 1.3)):
        state = {k: v.detach().clone() for k, v in release.experts[name].state_dict().items()}
        lora = _lora(state, seed)
        files[expert] = root / f"{expert}.safetensors"
        safetensors.torch.save_file(lora, files[expert])
        safetensors.torch.save_file(_merged(state, lora, strength),
                                    edited / name / "diffusion_pytorch_model.safetensors")
        files[f"{expert}_strength"] = strength
    return release, edited, files


def _video(folder, loras=(), **options):
    pipe = vidax.pipeline("wan2_2", folder, precision="fp32", loras=list(loras))
    out = pipe.sample(PROMPT, frames=FRAMES, size=A14B_SIZE, seed=3, distill="lightx2v",
                      **options)
    return np.asarray(out, np.float32), pipe


def test_expert_loras_with_the_distill_preset(case, record_property):
    release, edited, files = case
    ref, _ = _video(edited)
    loras = [f"{files['high']}:{files['high_strength']}@high",
             f"{files['low']}:{files['low_strength']}@low"]
    out, pipe = _video(release.folder, loras)
    assert_parity("wan22_expert_loras", out, ref, record_property)
    assert pipe.expert_log == [wan.HIGH, wan.HIGH, wan.LOW, wan.LOW]   # 4 steps, split 2 | 2
    swapped = [f"{files['high']}:{files['high_strength']}@low",
               f"{files['low']}:{files['low_strength']}@high"]
    assert_fails("wan22_expert_loras_swapped", _video(release.folder, swapped)[0], ref,
                 record_property)


def test_step_distill_schedule_is_lightx2vs():
    # LightX2V's formula at its configs' 4 steps / shift 5 (the timesteps it feeds the DiT:
    # 1000 x these): [1, 0.9375, 0.8333, 0.625], then 0
    sigmas = step_distill_sigmas(4, 5.0)
    full = np.linspace(1, 0, 1001)[:-1]
    full = 5 * full / (1 + 4 * full)
    np.testing.assert_allclose(sigmas[:-1], full[[0, 250, 500, 750]], rtol=1e-7)
    assert sigmas[-1] == 0 and sigmas[1] == np.float32(0.9375)


def test_expert_marks_need_two_experts():
    spec = types.SimpleNamespace(component="dit")
    release = types.SimpleNamespace(specs={"dit": spec}, configs={})
    with pytest.raises(VidaxError, match="one DiT"):
        vidax.lora.for_release(release, ["x.safetensors@high"])


def test_guidance_one_runs_one_pass_equal_to_the_guided_pair(case, record_property):
    """At guidance 1 the step runs the DiT once, on the prompt alone: equal to the guided
    ``[cond, uncond]`` pair at a scale a float32 ulp above 1 (two passes)."""
    release, _, _ = case
    one, pipe = _video(release.folder)
    run = pipe.prepare(pipe.resolve(pipe._request(PROMPT, None, dict(
        frames=FRAMES, size=A14B_SIZE, seed=3, distill="lightx2v")), None))
    assert run.inputs["guidance_scale"] is None
    above = float(np.nextafter(np.float32(1), np.float32(2)))
    two = np.asarray(pipe.sample(PROMPT, frames=FRAMES, size=A14B_SIZE, seed=3,
                                 distill="lightx2v", guidance_scale=(above, above)), np.float32)
    assert_parity("wan22_one_pass", one, two, record_property)
