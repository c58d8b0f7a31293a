"""The memory plan of ``offload`` (:func:`vidax.pipelines.offload.plan`, the estimate's
``on_device``), from abstract shapes alone, for a GPU stand-in (``device_available``
patched: on the CPU, whose host memory is its device memory, offload saves nothing).

On the Wan2.1 demo release with a wider DiT of 8 blocks (so that its step, not the VAE's
decode, makes the peak): ``model`` holds one phase's weights at a
time, ``block`` the DiT's weights outside its blocks plus three blocks; ``auto`` picks the
first mode within ``max_device_memory``, and when none fits, one error gives each mode's
peak. On the CPU ``auto`` tries ``none`` alone.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from vidax import demo
from vidax.errors import MemoryEstimateError
from vidax.nn import offload as streaming
from vidax.pipelines import family, memory
from vidax.pipelines import offload as offloading
from vidax.translator.verify import abstract_params

GPU = (10 * 2**30, "a stand-in GPU", "gpu")


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    module = demo.family("wan2_1")
    folder = tmp_path_factory.mktemp("wan") / module.FOLDER
    module.write(folder)
    release = family("wan2_1").inspect_folder(folder)
    dit = dataclasses.replace(release.configs["dit"], num_layers=8, dim=256, ffn_dim=1024,
                              num_heads=4)
    # the abstract tree is all the plan reads: no file of this DiT is needed
    return dataclasses.replace(release, configs={**release.configs, "dit": dit},
                               files={k: v for k, v in release.files.items() if k != "dit"})


def _estimate(release, mode, **options):
    fam = family("wan2_1")
    request = fam.make_request(release.task, release.variant, "a cat", steps=2)
    pipe = fam.Pipeline(release, precision="bf16", offload=mode, **options)
    return memory.estimate(pipe, request, device=GPU)


def test_each_mode_holds_what_it_says(release):
    none, model, block = (_estimate(release, m) for m in offloading.MODES)
    assert none.on_device is None and none.weights == model.weights == block.weights
    weights = none.weights
    spec = release.specs["dit"]
    params = abstract_params(spec.model_class(), release.configs["dit"])
    itemsize = np.dtype(family("wan2_1").Pipeline(release).param_dtype("dit")).itemsize
    assert weights["dit"] == itemsize * sum(math.prod(a.shape) for a in params.values())
    assert model.on_device["DiT step"] == weights["dit"]
    assert model.on_device["prompt"] == weights["vae"] + weights["text_encoder"]
    assert model.on_device["VAE decode"] == weights["vae"]
    block_bytes = {}
    for name, a in params.items():
        if name.startswith("blocks."):
            key = ".".join(name.split(".")[:2])
            block_bytes[key] = block_bytes.get(key, 0) + itemsize * math.prod(a.shape)
    rest = weights["dit"] - sum(block_bytes.values())
    assert len(block_bytes) == 8
    assert block.on_device["DiT step"] == rest + (streaming.AHEAD + 2) * max(block_bytes.values())
    assert block.host == sum(block_bytes.values()) + weights["vae"] + weights["text_encoder"]
    assert none.peak > model.peak > block.peak
    assert "of which on the device" in block.summary() and "(block)" in block.summary()


def test_quantize_counts_the_dit_linears_at_one_byte(release):
    plain, fp8 = _estimate(release, "none"), _estimate(release, "none", quantize="fp8")
    assert fp8.weights["dit"] < plain.weights["dit"]
    assert fp8.weights["vae"] == plain.weights["vae"]
    assert "fp8-e4m3fn" in fp8.dtypes["dit"]
    blocked = _estimate(release, "block", quantize="int8")
    assert blocked.on_device["DiT step"] < _estimate(release, "block").on_device["DiT step"]


def test_auto_picks_the_first_mode_that_fits(release, monkeypatch):
    monkeypatch.setattr(memory, "device_available", lambda mesh=None: GPU)
    fam = family("wan2_1")
    request = fam.make_request(release.task, release.variant, "a cat", steps=2)
    peaks = {m: _estimate(release, m).peak for m in offloading.MODES}

    def plan(budget):
        return fam.Pipeline.check_memory(release, request, offload="auto",
                                         max_device_memory=budget)

    assert plan(peaks["none"]).offload == "none"
    assert plan(peaks["none"] - 1).offload == "model"
    assert plan(peaks["model"] - 1).offload == "block"
    with pytest.raises(MemoryEstimateError) as error:
        plan(peaks["block"] - 1)
    message = str(error.value)
    assert all(f"--offload {m}: " in message for m in ("none", "model")), message
    assert "capped by max_device_memory" in message and "Nothing was loaded" in message
    # a named mode is planned as it is: refused when it does not fit
    with pytest.raises(MemoryEstimateError):
        fam.Pipeline.check_memory(release, request, offload="model",
                                  max_device_memory=peaks["model"] - 1)


def test_on_the_cpu_auto_tries_none_alone(release):
    fam = family("wan2_1")
    request = fam.make_request(release.task, release.variant, "a cat", steps=2)
    estimate = fam.Pipeline.check_memory(release, request, offload="auto")
    assert estimate.offload == "none" and estimate.on_device is None
    with pytest.raises(MemoryEstimateError) as error:
        fam.Pipeline.check_memory(release, request, offload="auto", max_device_memory=1024)
    assert "--offload model" not in str(error.value)


@pytest.mark.parametrize("text,expected", [("24GiB", 24 * 2**30), ("24G", 24 * 2**30),
                                           ("80GB", 80 * 10**9), ("512 MiB", 512 * 2**20),
                                           ("1.5GiB", int(1.5 * 2**30)), (4096, 4096)])
def test_sizes(text, expected):
    assert offloading.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "-1G", "lots", "24 parsecs", "0"])
def test_bad_sizes(text):
    with pytest.raises(Exception, match="max_device_memory"):
        offloading.parse_bytes(text)


def test_unknown_mode():
    with pytest.raises(Exception, match="offload must be one of none, model, block"):
        offloading.check_mode("disk")
    assert offloading.check_mode("auto", auto=True) == "auto"
    assert np.isscalar(offloading.parse_bytes("1k"))
