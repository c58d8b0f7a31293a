"""Quantized files in a pipeline: the Wan2.1 demo release with its DiT given as ComfyUI's
scaled-fp8 file (``--dit FILE``) and as a GGUF Q8_0 file.

The fp8 file is written the way ComfyUI's tools write one -- the legacy form, every key under
``model.diffusion_model.``, the root marker ``scaled_fp8``, each block Linear quantized by
comfy-kitchen's per-tensor fp8 quantizer with its own scale -- and the GGUF file by the
``gguf`` package (``GGUFWriter`` + ``gguf.quants.quantize``), as city96's converter writes
them. The reference for each is the same release with the DiT replaced by the *oracle's*
dequantized weights (comfy-kitchen's ``dequantize_per_tensor_fp8``; ``gguf.quants.dequantize``)
stored as plain float32: the videos must agree. The fp8 DiT is kept fp8 on the device
(``QArray``) and the memory estimate counts it at its stored size; the GGUF one is dequantized
(the default) or kept as Q8_0 blocks (``quantized="keep"``), both giving the same video.
Negative control: the unquantized demo DiT gives another video.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")


import shutil  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vidax  # noqa: E402
from tests.parity import assert_fails, assert_parity  # noqa: E402
from vidax.demo import wan2_1 as wan_demo  # noqa: E402
from vidax.nn.quant import QArray  # noqa: E402
from vidax.translator.io import open_checkpoint  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")]

RUN = dict(frames=1, size=(16, 16), steps=2, seed=0)
DIT = "diffusion_pytorch_model.safetensors"


def _quantized_block(key: str, shape) -> bool:
    return key.startswith("blocks.") and key.endswith(".weight") and len(shape) == 2


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """(the demo release folder, {name: DiT file}) -- the fp8 and GGUF files and their
    oracle-dequantized float32 twins."""
    import comfy_kitchen
    import gguf
    import safetensors.numpy
    import torch
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("wan21q")
    folder = root / "release"
    wan_demo.write(folder)
    with open_checkpoint(folder / DIT) as ckpt:
        weights = {k: np.array(v.read(), np.float32) for k, v in ckpt.items()}
    files = {}

    fp8 = {"model.diffusion_model.scaled_fp8": torch.empty(0, dtype=torch.float8_e4m3fn)}
    dequantized = {}
    for i, (key, w) in enumerate(weights.items()):
        t = torch.from_numpy(w)
        if _quantized_block(key, w.shape):
            scale = (t.abs().max() / 448 * (1.0 + 0.05 * (i % 9))).reshape(())
            q = comfy_kitchen.quantize_per_tensor_fp8(t, scale, torch.float8_e4m3fn)
            fp8[f"model.diffusion_model.{key}"] = q
            fp8[f"model.diffusion_model.{key[:-len('.weight')]}.scale_weight"] = scale
            dequantized[key] = comfy_kitchen.dequantize_per_tensor_fp8(
                q, scale, torch.float32).numpy()
        else:
            fp8[f"model.diffusion_model.{key}"] = t
            dequantized[key] = w
    files["fp8"] = root / "wan2.1_t2v_tiny_fp8_scaled.safetensors"
    save_file(fp8, files["fp8"])
    files["fp8-oracle"] = root / "fp8_oracle.safetensors"
    safetensors.numpy.save_file(dequantized, files["fp8-oracle"])

    files["gguf"] = root / "wan2.1-t2v-tiny-Q8_0.gguf"
    writer = gguf.GGUFWriter(str(files["gguf"]), arch="wan")
    oracle = {}
    for key, w in weights.items():
        qtype = (gguf.GGMLQuantizationType.Q8_0 if _quantized_block(key, w.shape)
                 else gguf.GGMLQuantizationType.F32)
        data = gguf.quants.quantize(w, qtype)
        writer.add_tensor(key, data, raw_dtype=qtype)
        oracle[key] = np.asarray(gguf.quants.dequantize(data, qtype), np.float32).reshape(
            w.shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    files["gguf-oracle"] = root / "gguf_oracle.safetensors"
    safetensors.numpy.save_file(oracle, files["gguf-oracle"])
    return folder, files


def _video(folder, precision="fp32", **kwargs):
    """The pipeline and its final latents (the frames' uint8 levels are too coarse to tell
    fp8 rounding apart at this size)."""
    pipe = vidax.pipeline("wan2_1", folder, precision=precision, **kwargs)
    with jax.default_matmul_precision("highest"):
        return pipe, pipe.sample(wan_demo.PROMPT, **RUN)


def test_fp8_dit_kept_fp8_equals_the_oracle(release, record_property):
    folder, files = release
    pipe, video = _video(folder, dit=files["fp8"])
    dit = pipe.dit
    kept = [v for v in jax.tree.leaves(dit, is_leaf=lambda x: isinstance(x, QArray))
            if isinstance(v, QArray)]
    assert len(kept) == 10 * 2          # 10 Linears per block, two blocks in the demo DiT
    _, reference = _video(folder, dit=files["fp8-oracle"])
    assert_parity("wan2_1_fp8_dit_pipeline", video, reference, record_property)
    _, plain = _video(folder)
    assert_fails("wan2_1_fp8_dit_vs_unquantized", plain, reference, record_property)


def test_fp8_dit_is_estimated_at_its_stored_size(release):
    from vidax.pipelines import family, overrides

    folder, files = release
    module = family("wan2_1")
    plain = module.inspect_folder(folder)
    request = module.make_request(plain.task, plain.variant, wan_demo.PROMPT, **RUN)
    bf16 = module.Pipeline.check_memory(plain, request, enforce=False)
    fp8 = module.Pipeline.check_memory(
        overrides.inspect(module, folder, components={"dit": files["fp8"]}), request,
        enforce=False)
    assert "20 quantized weights kept" in fp8.dtypes["dit"]
    assert fp8.weights["dit"] < 0.75 * bf16.weights["dit"]
    # GGUF: at the dequantized size by default, at its blocks' size when kept
    gguf = overrides.inspect(module, folder, components={"dit": files["gguf"]})
    dense = module.Pipeline.check_memory(gguf, request, enforce=False)
    kept = module.Pipeline.check_memory(gguf, request, enforce=False, quantized="keep")
    assert dense.weights["dit"] == bf16.weights["dit"]
    assert "20 quantized weights kept" in kept.dtypes["dit"]
    assert kept.weights["dit"] < 0.75 * dense.weights["dit"]


def test_gguf_dit_dequantized_or_kept_equals_the_oracle(release, record_property):
    folder, files = release
    _, video = _video(folder, dit=files["gguf"])
    pipe, kept = _video(folder, dit=files["gguf"], quantized="keep")
    blocks = [v for v in jax.tree.leaves(pipe.dit, is_leaf=lambda x: isinstance(x, QArray))
              if isinstance(v, QArray)]
    assert blocks and all(b.block == 32 for b in blocks)
    _, reference = _video(folder, dit=files["gguf-oracle"])
    assert_parity("wan2_1_gguf_dit_pipeline", video, reference, record_property)
    assert_parity("wan2_1_gguf_q8_0_kept_pipeline", kept, reference, record_property)


# ------------------------------------------------------------------- HunyuanVideo's fp8 pair
HV_DIT = "hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states"


@pytest.fixture(scope="module")
def hunyuan(tmp_path_factory):
    """The HunyuanVideo demo release with its DiT replaced by the authors' fp8 form
    (``..._fp8.pt`` holding the block Linears in float8 + ``..._fp8_map.pt`` beside it, scales
    as HunyuanVideo's ``fp8_optimization.py`` applies them), and a twin release whose DiT
    holds the same weights dequantized -- ``weight.float() * scale``, the authors' formula --
    in float32."""
    import torch

    from vidax.demo import hunyuan_video as hv_demo

    root = tmp_path_factory.mktemp("hvq")
    fp8, oracle = root / "fp8", root / "oracle"
    hv_demo.write(fp8)
    with open_checkpoint(fp8 / f"{HV_DIT}.pt") as ckpt:
        weights = {k: torch.from_numpy(np.array(v.read(), np.float32)) for k, v in ckpt.items()}
    quantized, scales, dequantized = {}, {}, {}
    for i, (key, w) in enumerate(weights.items()):
        if "_blocks." in key and key.endswith(".weight") and w.ndim == 2:
            scale = w.abs().max() / 448 * (1.0 + 0.05 * (i % 7))
            q = (w / scale).to(torch.float8_e4m3fn)
            quantized[key], scales[key[:-len(".weight")]] = q, scale.reshape(())
            dequantized[key] = q.float() * scale
        else:
            quantized[key] = dequantized[key] = w
    (fp8 / f"{HV_DIT}.pt").unlink()
    torch.save({"module": quantized}, fp8 / f"{HV_DIT}_fp8.pt")
    torch.save(scales, fp8 / f"{HV_DIT}_fp8_map.pt")
    shutil.copytree(fp8, oracle)
    for name in ("_fp8.pt", "_fp8_map.pt"):
        (oracle / f"{HV_DIT}{name}").unlink()
    torch.save({"module": dequantized}, oracle / f"{HV_DIT}.pt")
    return fp8, oracle, len(scales)


def test_hunyuan_fp8_release_equals_the_oracle(hunyuan, record_property):
    from vidax.demo import hunyuan_video as hv_demo

    fp8, oracle, n = hunyuan
    run = dict(frames=1, size=(16, 16), steps=2, seed=0)
    with jax.default_matmul_precision("highest"):
        pipe = vidax.pipeline("hunyuan_video", fp8, precision="fp32")
        got = pipe.sample(hv_demo.PROMPT, **run)
        want = vidax.pipeline("hunyuan_video", oracle, precision="fp32").sample(
            hv_demo.PROMPT, **run)
    kept = [v for v in jax.tree.leaves(pipe.dit, is_leaf=lambda x: isinstance(x, QArray))
            if isinstance(v, QArray)]
    assert len(kept) >= n        # a fused qkv becomes three kept kernels with one scale
    assert_parity("hunyuan_fp8_release", got, want, record_property)


def test_hunyuan_fp8_without_its_map_is_refused(hunyuan, tmp_path):
    from vidax.errors import VidaxError

    fp8, _, _ = hunyuan
    broken = tmp_path / "broken"
    shutil.copytree(fp8, broken)
    (broken / f"{HV_DIT}_fp8_map.pt").unlink()
    with pytest.raises(VidaxError, match=r"mp_rank_00_model_states_fp8_map\.pt"):
        vidax.pipeline("hunyuan_video", broken)
