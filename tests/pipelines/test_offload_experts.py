"""Offload where weights change after loading: Wan2.2 A14B's two experts (tiny T2V release in
the authors' layout, tests/pipelines/test_wan2_2_pipeline.py) -- under ``model`` each expert's
weights stay in host memory and one device copy exists at a time (made when the schedule
switches expert); under ``block`` both experts' blocks stream -- and a LoRA merged into, or
kept live beside, weights that lie in host memory (the Wan2.1 demo release). Either way the
latents are the resident run's, bit for bit."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.host_memory import apart
from vidax.nn import offload
from vidax.pipelines import wan2_2 as wan

sys.path.insert(0, str(Path(__file__).parent))  # as pytest imports the family tests
from test_wan2_2_pipeline import A14B_SIZE, FRAMES, PROMPT, write_release  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:Some donated buffers were not usable"),
              pytest.mark.filterwarnings("ignore:.*CUDA is not available.*:UserWarning")]
OPTIONS = dict(frames=FRAMES, size=A14B_SIZE, steps=4, seed=3)


@apart
def test_experts_offloaded_sample_the_resident_latents(tmp_path, monkeypatch):
    release = write_release(tmp_path / "Wan2.2-t2v-tiny", "t2v")
    resident = vidax.pipeline("wan2_2", release.folder, precision="fp32")
    plain = resident.sample(PROMPT, **OPTIONS)
    assert set(resident.expert_log) == {wan.HIGH, wan.LOW}   # both experts run

    pipe = vidax.pipeline("wan2_2", release.folder, precision="fp32", offload="model")
    assert pipe.experts.policy == "resident"    # the offload, not the expert swap, moves them
    for name in (wan.HIGH, wan.LOW):
        leaves = jax.tree.leaves(pipe.experts.params(name)[1])
        assert all(offload.on_host(a) for a in leaves), name
    copies = []
    real = pipe.dit_on_device

    def watch(params):
        out = real(params)
        copies.append(out)   # kept: each copy's identity stays its own
        return out

    monkeypatch.setattr(pipe, "dit_on_device", watch)
    latents = pipe.sample(PROMPT, **OPTIONS)
    assert np.array_equal(latents, plain), float(np.abs(latents - plain).max())
    assert pipe.expert_log == resident.expert_log
    # one copy per expert, made when the schedule reaches it, dropped after the loop
    switches = sum(a != b for a, b in zip(pipe.expert_log, pipe.expert_log[1:]))
    assert len(copies) == OPTIONS["steps"] and switches == 1
    assert len({id(c) for c in copies}) == 2 and all(
        (a is b) == (x == y) for a, b, x, y in zip(copies, copies[1:], pipe.expert_log,
                                                    pipe.expert_log[1:]))
    assert pipe._dit_copy is None

    pipe = vidax.pipeline("wan2_2", release.folder, precision="fp32", offload="block")
    for name in (wan.HIGH, wan.LOW):
        dit = nnx.merge(*pipe.experts.params(name))
        assert offload.held_on_host(dit.blocks) and not offload.held_on_host(dit.head), name
    latents = pipe.sample(PROMPT, **OPTIONS)
    assert np.array_equal(latents, plain), float(np.abs(latents - plain).max())


@apart
@pytest.mark.parametrize("lora_mode", ["merge", "live"])
def test_loras_on_offloaded_weights(tmp_path, lora_mode):
    """A merge of a host-resident weight runs on the device and goes back to host memory
    (``vidax.lora``); a live adapter keeps its base there and streams with its block."""
    import safetensors.torch

    from tests.lora.test_lora_wan import make_lora
    from vidax import demo

    module = demo.family("wan2_1")
    folder = tmp_path / module.FOLDER
    module.write(folder)
    state = safetensors.torch.load_file(folder / "diffusion_pytorch_model.safetensors")
    lora = tmp_path / "lora.safetensors"
    safetensors.torch.save_file(make_lora(state, seed=4), lora)

    def sample(offload_mode, loras=(f"{lora}:0.7",)):
        pipe = vidax.pipeline("wan2_1", folder, precision="fp32", loras=list(loras),
                              lora_mode=lora_mode, offload=offload_mode)
        return pipe, pipe.sample(module.PROMPT, steps=2, seed=module.SEED)

    _, plain = sample("none")
    pipe, latents = sample("block")
    assert offload.held_on_host(pipe.dit.blocks)
    assert np.array_equal(latents, plain), float(np.abs(latents - plain).max())
    _, base = sample("none", loras=())
    assert not np.allclose(plain, base)   # the LoRA changed the video
