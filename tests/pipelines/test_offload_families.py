"""``offload="model" | "block"`` (:mod:`vidax.pipelines.offload`) on every family's tiny demo
release, float32, against the same release loaded with every weight on the device.

Per family, sampling with the DiT's transformer blocks in host memory (``block``: streamed
onto the device inside each step by :func:`vidax.nn.offload.stream`) gives the resident
run's latents bit for bit: the transfers and barriers change where the weights are, not one
operation on them. ``model`` (every weight in host memory, each component copied onto the
device for its phase) is checked on the families whose DiT also runs outside the sampling
loop (LTX-2's text connectors, Cosmos3's prompt pass) and on Wan2.1 with its decode.

Where the weights are is checked too: under ``block`` the DiT's blocks lie in host memory and
its other weights on the device; the encoders and the VAE are not the pipeline's attributes
but held in host memory and copied in on use; after a generation no device copy is left.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

import vidax  # noqa: E402
from tests.host_memory import apart  # noqa: E402
from vidax import demo  # noqa: E402
from vidax.errors import VidaxError  # noqa: E402
from vidax.nn import offload  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore:Some donated buffers were not usable"),
              pytest.mark.filterwarnings("ignore:prompt .* tokens were dropped:UserWarning")]

#: Per family: the demo release's variant (None: the folder's), the sampling options (the
#: demo's frames and size, two steps where the family takes a count), whether ``model`` is
#: run too.
FAMILIES = {
    "wan2_1": (None, dict(steps=2), True),
    "wan2_2": (None, dict(steps=2), False),
    "cogvideox": (None, dict(frames=9, size=(64, 48), guidance_scale=6.0, steps=2), False),
    "cosmos2_5": (None, dict(frames=9, size=(64, 48), steps=2, guidance_scale=7.0), False),
    "cosmos3": (None, dict(frames=9, size=(64, 32), steps=2, guidance_scale=6.0), True),
    "hunyuan_video": (None, dict(frames=5, size=(64, 48), guidance_scale=6.0, steps=2), False),
    "hunyuan_video1_5": ("480p_t2v_distilled", dict(frames=5, size=(80, 48), steps=2), False),
    "ltx_video": (None, dict(frames=9, size=(64, 32)), False),
    "ltx2_5": (None, dict(frames=9, size=(64, 32), stages=1), True),
}


def _flat(latents) -> np.ndarray:
    if isinstance(latents, dict):
        latents = list(latents.values())
    if isinstance(latents, (tuple, list)):
        return np.concatenate([np.ravel(x) for x in latents])
    return np.ravel(latents)


def _load(name, folder, mode):
    variant = FAMILIES[name][0]
    return vidax.pipeline(name, folder, variant=variant, precision="fp32", offload=mode)


def _sample(name, module, pipe):
    return _flat(pipe.sample(module.PROMPT, seed=module.SEED, **FAMILIES[name][1]))


def _where(tree) -> set[bool]:
    return {offload.on_host(a) for a in jax.tree.leaves(tree)}


@apart
@pytest.mark.parametrize("name", list(FAMILIES))
def test_offloaded_sampling_is_the_resident_sampling(name, tmp_path):
    module = demo.family(name)
    folder = tmp_path / module.FOLDER
    module.write(folder)
    resident = _load(name, folder, "none")
    plain = _sample(name, module, resident)

    pipe = _load(name, folder, "block")
    dit = nnx.merge(*pipe.experts.params("dit")) if name == "wan2_2" else pipe.dit
    lists = offload.block_lists(dit)
    assert lists, "no transformer blocks found"
    for attr, value in vars(dit).items():
        if isinstance(value, (nnx.Module, nnx.List)):
            assert _where(nnx.state(value)) == {attr in lists}, attr
    held = pipe._offloaded
    assert held and "vae" in held and not set(held) & set(vars(pipe))
    for key, model in held.items():
        assert _where(nnx.state(model)) == {True}, key
    latents = _sample(name, module, pipe)
    assert np.array_equal(latents, plain), np.abs(latents - plain).max()
    assert not pipe._resident and pipe._dit_copy is None   # nothing left on the device
    if not FAMILIES[name][2]:
        return

    pipe = _load(name, folder, "model")
    assert _where(nnx.state(pipe.dit)) == {True}
    latents = _sample(name, module, pipe)
    assert np.array_equal(latents, plain), np.abs(latents - plain).max()
    assert not pipe._resident and pipe._dit_copy is None
    if name == "wan2_1":   # the decode: the VAE copied in, and dropped after
        shape = resident.request(module.PROMPT, **FAMILIES[name][1]).latent_shape
        frames = pipe.decode(latents.reshape(shape))
        assert not pipe._resident
        assert np.array_equal(frames, resident.decode(plain.reshape(shape)))


@apart
def test_unknown_offload_mode_is_one_error(tmp_path):
    module = demo.family("wan2_1")
    module.write(tmp_path / module.FOLDER)
    with pytest.raises(VidaxError, match="offload must be one of none, model, block"):
        vidax.pipeline("wan2_1", tmp_path / module.FOLDER, offload="disk")
