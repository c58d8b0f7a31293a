"""Quantized weights (issue #16): the device bytes a Wan2.1-14B-shaped DiT holds after
``vidax.load`` and the load time, in fp32, bf16, ComfyUI scaled fp8, GGUF Q8_0 and GGUF Q4_K,
side by side in one run.

Two tables:

1. **Device bytes at full size** (exact, no file): the 40-layer ``t2v-14b`` DiT
   (``vidax.config("wan2_1", "dit", "t2v-14b")``, the keys and shapes of the packaged manifest
   ``wan2_1/t2v-14b__dit``, planned 1:1 onto the abstract model by the wan2_1 mapper), each
   parameter's bytes derived from its shape and what the format stores for its key:

   * ``fp32`` / ``bf16``: 4 / 2 bytes a weight.
   * ``fp8`` -- ComfyUI's legacy "scaled fp8" (``scaled_fp8`` root marker, per quantized Linear
     ``<layer>.scale_weight``, a 0-dim float32; ComfyUI ``comfy/utils.py``
     ``convert_old_quants``, read by ``vidax.translator.quant``): the 2-D ``.weight`` of every
     block Linear (self/cross attention q, k, v, o; ffn.0, ffn.2) float8_e4m3fn, the rest
     bf16. Loaded with ``quantized=None`` (keep fp8): a ``QArray`` of 1 byte a weight + its
     4-byte scale; the rest stays bf16. Also ``quantized="dequantize", dtype="bfloat16"``.
   * ``Q8_0`` / ``Q4_K`` -- city96/ComfyUI-GGUF's rules for the ``wan`` architecture
     (commit 795e45156ece99afbc3efef911e63fcb46e6a20d): llama.cpp quantizes only 2-D tensors
     and never ``modulation.``, ``patch_embedding.``, ``text_embedding.``,
     ``time_projection.``, ``time_embedding.``, ``img_emb.``, ``head.``
     (``tools/lcpp.patch``, ``llama_model_quantize_internal``), i.e. the block Linear
     weights; ``tools/convert.py`` stores the rest of an fp32 release as F16, but 1-D tensors,
     tensors of <= 1024 elements and ``.modulation`` (``keys_hiprec``) as F32, and the 5-D
     patch embedding is put back whole in F32 (``tools/fix_5d_tensors.py``). Q8_0 is 34 bytes
     a 32-weight block, Q4_K 144 bytes a 256-weight block (``gguf.GGML_QUANT_SIZES``). The
     file here is a pure Q4_K: city96's published Q4_K_S / Q4_K_M files put Q5_K/Q6_K into some
     ``.v`` and ``ffn.2`` weights (``img_tensor_get_type`` in ``lcpp.patch``), slightly more
     bytes. Loaded with ``dtype="bfloat16"``: dequantized (the default for GGUF) every weight
     holds 2 bytes; Q8_0 with ``quantized="keep"`` holds its int8 quants (1 byte a weight) and
     float16 block scales (2 bytes a 32-weight block), the rest cast to bf16.

   The same formula is CHECKED against real loads at the scaled-down depth below: the sum of
   the loaded model's leaves (``jax.tree.leaves(nnx.state(model))``, every device buffer of a
   ``QArray`` included) must equal it exactly, byte for byte.

2. **Load time beside the raw read** at a scaled-down depth that fits a 24 GiB machine: the
   14B's width (5120, ffn 13824, every non-block tensor at full size) with ``--layers`` of the
   40 blocks (default 2: 0.94 G parameters, 3.7 GB in fp32). One synthetic file per format is
   written to a temporary folder (random values: GGUF quant blocks are random bytes with finite
   float16 scales -- gguf 0.19 cannot quantize K types, and Q8_0 is written the same way to keep
   the write short; fp8 bytes are random with the two NaN codes removed), measured, and
   deleted before the next format's. Per format, ``--repeat`` rounds, each running the raw
   read and then every load of that file, each in a fresh process (imports and the JAX runtime
   up before the clock), the file's pages read through once before each run (warm cache):

   * ``raw read`` -- every byte of the file read once from the page cache into one buffer
     (``readinto``): the floor of any load that copies the weights out;
   * ``vidax.load`` -- verify 1:1, read, translate, dequantize / cast where asked, place on the
     (CPU) device, ``block_until_ready``;
   * ``host work`` (fp8 and GGUF files) -- the numpy part of those loads alone, on one thread:
     the dequantization of every quantized tensor to float32 through vidax's reader (GGUF:
     ``gguf.quants.dequantize``), then the cast to bfloat16 in the Flax layout of what a load
     with ``dtype="bfloat16"`` casts (the dequantized weights, and GGUF's F16/F32 tensors).

   Columns: best and median seconds, ``load / raw`` (> 1: slower than the raw read), GB/s of
   file bytes, the device bytes measured and the formula's, the ``QArray`` leaves kept, the
   peak RssAnon above the payload (sampled every millisecond), and the host work that load
   does (dequantize + cast seconds, best of the rounds) as a share of its best time. The load
   places with ``vidax.loading.PLACEMENT_THREADS`` threads, so on several cores it can overlap
   part of that work; the share is an estimate of what the numpy work costs, not a profile.

    python benchmarks/quantized_weights.py                    # both tables, ~6 min on 2 cores
    python benchmarks/quantized_weights.py --layers 1 --repeat 3
    python benchmarks/quantized_weights.py --formats fp8 q8_0 # a subset
    python benchmarks/quantized_weights.py --no-load          # the exact table only (~5 s)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import PeakAnonSampler, load_average, machine_line, table  # noqa: E402

MANIFEST, MODEL_TYPE, COMPONENT, VARIANT = "wan2_1/t2v-14b__dit", "wan2_1", "dit", "t2v-14b"

# Bytes a stored element takes, per stored kind (GGUF blocks: gguf.GGML_QUANT_SIZES).
STORED_BYTES = {"F32": 4.0, "BF16": 2.0, "F16": 2.0, "F8_E4M3": 1.0, "Q8_0": 34 / 32,
                "Q4_K": 144 / 256}
FLOAT_BYTES = {"F32": 4, "BF16": 2, "F16": 2}
# city96/ComfyUI-GGUF @ 795e451, tools/lcpp.patch (LLM_ARCH_WAN): names never quantized.
WAN_GGUF_KEEP = ("modulation.", "patch_embedding.", "text_embedding.", "time_projection.",
                 "time_embedding.", "img_emb.", "head.")
QUANTIZATION_THRESHOLD = 1024     # tools/convert.py: tensors this small stay F32
BLOCK_LINEAR = re.compile(r"blocks\.\d+\.(self_attn|cross_attn|ffn)\.[^.]+\.weight")


class Case(NamedTuple):
    """One load: the file format it reads and ``vidax.load``'s arguments."""

    fmt: str                      # a FORMATS key
    dtype: str | None             # vidax.load(dtype=...)
    quantized: str | None         # vidax.load(quantized=...)
    note: str


FORMATS = {"fp32": "safetensors, F32", "bf16": "safetensors, BF16",
           "fp8": "safetensors, ComfyUI scaled fp8 (block Linears F8_E4M3, rest BF16)",
           "q8_0": "GGUF, block Linears Q8_0, rest F16/F32",
           "q4_k": "GGUF, block Linears Q4_K, rest F16/F32"}
CASES = {
    "fp32": Case("fp32", None, None, "as stored"),
    "bf16": Case("bf16", None, None, "as stored"),
    "fp8 (kept)": Case("fp8", None, None, "default: fp8 kept as QArray"),
    "fp8 -> bf16": Case("fp8", "bfloat16", "dequantize", 'quantized="dequantize"'),
    "Q8_0 -> bf16": Case("q8_0", "bfloat16", None, "default: GGUF dequantized"),
    "Q8_0 (kept)": Case("q8_0", "bfloat16", "keep", 'quantized="keep"'),
    "Q4_K -> bf16": Case("q4_k", "bfloat16", None, "default: GGUF dequantized"),
}


# ------------------------------------------------------------------------- what each stores


def stored_kind(fmt: str, key: str, shape: tuple[int, ...]) -> str:
    """What the file of ``fmt`` stores for ``key`` (a checkpoint key of the authors' DiT)."""
    if fmt == "fp32":
        return "F32"
    if fmt == "bf16":
        return "BF16"
    if fmt == "fp8":
        return "F8_E4M3" if BLOCK_LINEAR.fullmatch(key) and len(shape) == 2 else "BF16"
    # GGUF, city96's rules for an fp32 release (module docstring)
    quantized = len(shape) == 2 and not any(name in key for name in WAN_GGUF_KEEP)
    if quantized:
        return {"q8_0": "Q8_0", "q4_k": "Q4_K"}[fmt]
    if len(shape) == 1 or math.prod(shape) <= QUANTIZATION_THRESHOLD or ".modulation" in key \
            or len(shape) > 4:
        return "F32"
    return "F16"


def file_bytes(fmt: str, key: str, shape: tuple[int, ...]) -> float:
    """Payload bytes of ``key`` in the file (an fp8 weight's 4-byte scale_weight included)."""
    kind = stored_kind(fmt, key, shape)
    return math.prod(shape) * STORED_BYTES[kind] + (4 if kind == "F8_E4M3" else 0)


def device_bytes(case: Case, key: str, shape: tuple[int, ...]) -> int:
    """Bytes ``vidax.load`` places for the parameter fed by ``key`` under ``case``."""
    n = math.prod(shape)
    kind = stored_kind(case.fmt, key, shape)
    if kind == "F8_E4M3" and case.quantized != "dequantize":
        return n + 4                                   # float8 data + float32 scale
    if kind == "Q8_0" and case.quantized == "keep":
        return n + n // 32 * 2                         # int8 quants + float16 block scales
    if case.dtype is not None:
        return n * 2 if case.dtype == "bfloat16" else n * 4
    return n * FLOAT_BYTES[kind]


def shapes(layers: int | None) -> dict[str, tuple[int, ...]]:
    """The manifest's keys and shapes, only blocks ``< layers`` (all with None)."""
    from vidax.manifests import get_manifest

    out = {}
    for key, spec in get_manifest(MANIFEST).tensors.items():
        found = re.match(r"blocks\.(\d+)\.", key)
        if layers is not None and found and int(found.group(1)) >= layers:
            continue
        out[key] = tuple(spec.shape)
    return out


def model_config(layers: int | None):
    import vidax

    cfg = vidax.config(MODEL_TYPE, COMPONENT, VARIANT)
    return cfg if layers is None else dataclasses.replace(cfg, num_layers=layers)


def planned(layers: int | None) -> dict[str, tuple[str, tuple[int, ...]]]:
    """model parameter path -> (its checkpoint key, its shape), verified 1:1 against the
    abstract model (``nnx.eval_shape``) at the config of ``layers``."""
    from vidax import registry
    from vidax.loading import verify_tensors
    from vidax.translator.mapping import TensorInfo

    tensors = {k: TensorInfo(s, "float32") for k, s in shapes(layers).items()}
    spec = registry.get(MODEL_TYPE, COMPONENT)
    report, plan, _ = verify_tensors(spec, model_config(layers), tensors, source=MANIFEST)
    if not report.ok:
        sys.exit(f"the manifest does not map 1:1 onto the model:\n{report}")
    out = {}
    for path, target in plan.targets.items():
        (source,) = target.sources               # Wan's mapper: one key a parameter
        out[path] = (source.key, tuple(target.shape))
    return out


def formula(case: Case, params: dict[str, tuple[str, tuple[int, ...]]]) -> int:
    return sum(device_bytes(case, key, shape) for key, shape in params.values())


def kept_count(case: Case, params) -> int:
    """QArray parameters the load should keep."""
    keep = {"F8_E4M3": case.quantized != "dequantize", "Q8_0": case.quantized == "keep"}
    return sum(keep.get(stored_kind(case.fmt, k, s), False) for k, s in params.values())


# ------------------------------------------------------------------------------- the files


class _Pool:
    """Cheap synthetic values: a 1 Mi-element random pool, tiled from a per-tensor offset."""

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.normal = (rng.standard_normal(1 << 20, np.float32) * 0.05).astype(np.float32)
        self.bytes = rng.integers(0, 256, 1 << 22, dtype=np.uint8)
        self.rng = rng

    def floats(self, shape, dtype) -> np.ndarray:
        start = int(self.rng.integers(0, 1 << 20))
        return np.resize(np.roll(self.normal, start), shape).astype(dtype, copy=False)

    def raw(self, shape) -> np.ndarray:
        start = int(self.rng.integers(0, 1 << 22))
        return np.resize(np.roll(self.bytes, start), shape)


def _fp8(pool: _Pool, shape) -> np.ndarray:
    import ml_dtypes

    raw = pool.raw(shape)
    raw[(raw & 0x7F) == 0x7F] ^= 1              # 0x7F / 0xFF: float8_e4m3fn's NaNs
    return raw.view(ml_dtypes.float8_e4m3fn)


def _blocks(pool: _Pool, qtype: str, shape) -> np.ndarray:
    """Random quant blocks of a [rows, cols] tensor, as the uint8 rows GGUF stores, with
    finite float16 scale fields (Q8_0: d at byte 0; Q4_K: d, dmin at bytes 0, 2)."""
    rows, cols = shape
    block, size = {"Q8_0": (32, 34), "Q4_K": (256, 144)}[qtype]
    raw = pool.raw((rows, cols // block, size))
    for at in ((0,) if qtype == "Q8_0" else (0, 2)):
        scale = pool.rng.uniform(0.001, 0.01, (rows, cols // block, 1)).astype(np.float16)
        raw[..., at:at + 2] = scale.view(np.uint8)
    return raw.reshape(rows, -1)


def write_safetensors(path: pathlib.Path, fmt: str, keys: dict[str, tuple[int, ...]]) -> None:
    """``fmt`` (fp32 / bf16 / fp8) as safetensors, written tensor by tensor."""
    import ml_dtypes

    pool = _Pool()
    entries = []                                   # (key, tag, shape, make)
    for key, shape in keys.items():
        kind = stored_kind(fmt, key, shape)
        if kind == "F8_E4M3":
            entries.append((key, kind, shape, lambda s=shape: _fp8(pool, s)))
            layer = key[: -len(".weight")]
            scale = np.float32(0.001 + 0.0005 * (len(entries) % 7))
            entries.append((f"{layer}.scale_weight", "F32", (), lambda v=scale: np.array(v)))
        else:
            dtype = np.float32 if kind == "F32" else ml_dtypes.bfloat16
            entries.append((key, kind, shape, lambda s=shape, d=dtype: pool.floats(s, d)))
    if fmt == "fp8":                               # the marker: its dtype names the fp8 kind
        entries.append(("scaled_fp8", "F8_E4M3", (0,), lambda: np.zeros(0, np.uint8)))
    itemsize = {"F32": 4, "BF16": 2, "F8_E4M3": 1}
    header, offset = {}, 0
    for key, tag, shape, _ in entries:
        size = math.prod(shape) * itemsize[tag]
        header[key] = {"dtype": tag, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        for *_, make in entries:
            f.write(make().tobytes())


def write_gguf(path: pathlib.Path, fmt: str, keys: dict[str, tuple[int, ...]]) -> None:
    """``fmt`` (q8_0 / q4_k) as city96 writes a Wan DiT (``arch="wan"``), streamed with
    ``gguf.GGUFWriter``: tensor infos first, then each tensor's data in turn."""
    import gguf

    pool = _Pool()
    w = gguf.GGUFWriter(str(path), arch="wan")
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if fmt == "q8_0"
                    else gguf.LlamaFileType.MOSTLY_Q4_K_S)
    makers = []
    for key, shape in keys.items():
        kind = stored_kind(fmt, key, shape)
        qtype = gguf.GGMLQuantizationType[kind]
        if kind in ("Q8_0", "Q4_K"):
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            byte_shape = (shape[0], shape[1] // block * size)
            w.add_tensor_info(key, byte_shape, np.dtype(np.uint8), math.prod(byte_shape), qtype)
            makers.append(lambda s=shape, k=kind: _blocks(pool, k, s))
        else:
            dtype = np.dtype(np.float32 if kind == "F32" else np.float16)
            w.add_tensor_info(key, shape, dtype, math.prod(shape) * dtype.itemsize, qtype)
            makers.append(lambda s=shape, d=dtype: pool.floats(s, d))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for make in makers:
        w.write_tensor_data(make())
    w.close()


def write_file(folder: pathlib.Path, fmt: str, layers: int) -> pathlib.Path:
    keys = shapes(layers)
    if fmt.startswith("q"):
        path = folder / f"wan2.1-t2v-14b-{layers}layers-{fmt.upper()}.gguf"
        write_gguf(path, fmt, keys)
    else:
        path = folder / f"wan2.1-t2v-14b-{layers}layers-{fmt}.safetensors"
        write_safetensors(path, fmt, keys)
    return path


# ------------------------------------------------------------------------------ the children

WARM_IMPORTS = ("jax", "flax.nnx", "gguf", "ml_dtypes", "vidax", "vidax.loading",
                "vidax.models.wan2_1.dit", "vidax.translator.mappings.wan2_1",
                "vidax.translator.io.gguf", "vidax.translator.quant", "vidax.nn.quant")


def run_child(name: str, path: str, layers: int) -> dict:
    """In the subprocess: imports and the device first, then one timed, memory-sampled run."""
    import importlib

    import jax
    from flax import nnx

    for module in WARM_IMPORTS:
        importlib.import_module(module)
    jax.device_put(np.zeros(8)).block_until_ready()
    cfg = model_config(layers)
    if name == "raw read":
        buffer = bytearray(os.path.getsize(path))      # allocated (and touched) before
        memoryview(buffer)[::4096] = b"\1" * len(range(0, len(buffer), 4096))
    with PeakAnonSampler(interval=0.001) as memory:
        base = memory.peak_kib
        start = time.perf_counter()
        if name == "dequantize":
            host = _host_work(path)
            seconds, payload, kept = host.pop("dequantize"), 0, 0
        elif name == "raw read":
            with open(path, "rb", buffering=0) as f:
                view, done = memoryview(buffer), 0
                while done < len(buffer):
                    done += f.readinto(view[done:])
            seconds = time.perf_counter() - start
            payload, kept = len(buffer), 0
            base = memory.peak_kib                     # the buffer was resident before
        else:
            from vidax.loading import load_with_report

            case = CASES[name]
            model, report = load_with_report(MODEL_TYPE, COMPONENT, path, config=cfg,
                                             dtype=case.dtype, quantized=case.quantized)
            leaves = jax.tree.leaves(nnx.state(model))
            jax.block_until_ready(leaves)
            seconds = time.perf_counter() - start
            payload = sum(s.data.nbytes for a in leaves for s in a.addressable_shards)
            kept = report.kept_quantized
    return {"seconds": seconds, "payload": payload, "kept": kept,
            "peak_anon": (memory.peak_kib - base) * 1024, **(host if name == "dequantize"
                                                             else {})}


def _host_work(path: str) -> dict:
    """The load's host-side numpy work alone, one thread, nothing kept: ``dequantize`` --
    every quantized tensor of the file to float32 through vidax's reader (GGUF:
    ``gguf.quants.dequantize``; fp8: ``weight.astype(float32) * scale_weight``); ``cast_q`` --
    those float32 arrays to bfloat16 in the Flax layout (a 2-D weight transposed, as the
    load's ``astype`` of the strided ``[in, out]`` view does); ``cast_rest`` -- the same cast of
    the file's other tensors that are not stored bfloat16 (GGUF's F16/F32)."""
    import ml_dtypes

    from vidax.translator.io import open_checkpoint

    times = {"dequantize": 0.0, "cast_q": 0.0, "cast_rest": 0.0}

    def cast(array, what):
        start = time.perf_counter()
        (array.T if array.ndim == 2 else array).astype(ml_dtypes.bfloat16)
        times[what] += time.perf_counter() - start

    with open_checkpoint(path) as ckpt:
        for key, ref in ckpt.items():
            start = time.perf_counter()
            if getattr(ref, "quant", None):
                value = ref.read()
            elif str(ref.dtype).startswith("float8") and ref.shape != (0,):
                scale = ckpt[key[: -len(".weight")] + ".scale_weight"].read()
                value = ref.read().astype(np.float32) * scale
            else:
                if ref.dtype != ml_dtypes.bfloat16 and ref.shape != () and not key.endswith(
                        ".scale_weight"):
                    cast(ref.read_view(), "cast_rest")
                continue
            times["dequantize"] += time.perf_counter() - start
            cast(value, "cast_q")
            del value
    return times


def prepare_cache(path: pathlib.Path) -> None:
    """Read the file through once: its pages in the page cache before the run."""
    buffer = bytearray(1 << 24)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def run_in_subprocess(name: str, path: pathlib.Path, layers: int) -> dict:
    prepare_cache(path)
    env_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, __file__, "--child", name, "--file", str(path), "--layers",
         str(layers)], capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": env_path, "HF_HUB_OFFLINE": "1",
             "JAX_PLATFORMS": "cpu"})
    if done.returncode:
        sys.exit(f"{name!r} on {path.name} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -------------------------------------------------------------------------------- the parent


def gb(n: float) -> str:
    return f"{n / 1e9:.2f}"


def full_size_table() -> str:
    params = planned(None)
    n = sum(math.prod(s) for _, s in params.values())
    fp32 = formula(CASES["fp32"], params)
    bf16 = formula(CASES["bf16"], params)
    files = {fmt: sum(file_bytes(fmt, k, s) for k, s in params.values()) for fmt in FORMATS}
    rows = []
    for name, case in CASES.items():
        held = formula(case, params)
        quant = sum(math.prod(s) for k, s in params.values()
                    if stored_kind(case.fmt, k, s) in ("F8_E4M3", "Q8_0", "Q4_K"))
        rows.append([name, case.note, f"{quant / n * 100:.1f}%" if quant else "-",
                     gb(files[case.fmt]), gb(held), f"{held / 2**30:.2f}",
                     f"{held / bf16:.3f}", f"{held / fp32:.3f}",
                     kept_count(case, params) or "-"])
    head = (f"Device bytes held after vidax.load, {MANIFEST} ({len(params)} parameters, "
            f"{n:,} weights, 40 layers), exact from the shapes:")
    return head + "\n" + _fp8_set_check(params) + "\n\n" + table(
        ["load", "how", "weights quantized", "file GB", "device GB", "device GiB",
         "x bf16", "x fp32", "QArrays kept"], rows)


def _fp8_set_check(params) -> str:
    """Whether the fp8 rule picks the weights ComfyUI's file stores fp8, per the packaged
    manifest derived for ``wan2.1_t2v_14B_fp8_scaled.safetensors`` (where it is packaged)."""
    from vidax.errors import VidaxError
    from vidax.manifests import get_manifest

    name = "comfyui/wan2.1-t2v-14b-fp8-scaled__dit"
    try:
        tensors = get_manifest(name).tensors
    except (VidaxError, KeyError, OSError):
        return f"({name} is not packaged: the fp8 set is not cross-checked)"
    theirs = {k for k, t in tensors.items() if str(t.dtype).startswith("float8")
              and k != "scaled_fp8"}
    ours = {k for k, s in params.values() if stored_kind("fp8", k, s) == "F8_E4M3"}
    verdict = "agree with" if ours == theirs else "DIFFER from"
    return (f"The fp8 rule's {len(ours)} weights {verdict} the {len(theirs)} float8 weights of "
            f"the packaged manifest {name} (derived from ComfyUI's file layout).")


def measure(args) -> str:
    params = planned(args.layers)
    n = sum(math.prod(s) for _, s in params.values())
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(f"\nScaled-down depth: the 14B's width with {args.layers} of 40 layers "
          f"({len(params)} parameters, {n / 1e9:.3f} G weights); {time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} CPUs, {memory_gib:.1f} GiB RAM, jax CPU backend; {machine_line()}."
          f"\nWarm page cache, {args.repeat} rounds per format; load average "
          f"{load_average()} at the start.", flush=True)
    results: dict[str, list[dict]] = {}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="vidax-quantized-") as tmp:
        for fmt in args.formats:
            start = time.perf_counter()
            path = write_file(pathlib.Path(tmp), fmt, args.layers)
            sizes[fmt] = path.stat().st_size
            print(f"{fmt}: wrote {path.name}, {gb(sizes[fmt])} GB in "
                  f"{time.perf_counter() - start:.1f} s", flush=True)
            names = ["raw read " + fmt] + [c for c, case in CASES.items() if case.fmt == fmt]
            if fmt in ("fp8", "q8_0", "q4_k"):
                names.append("dequantize " + fmt)
            for round_ in range(args.repeat):
                for name in names:
                    child = name.rsplit(" ", 1)[0] if name.startswith(("raw read",
                                                                   "dequantize")) else name
                    results.setdefault(name, []).append(
                        run_in_subprocess(child, path, args.layers))
                print(f"  round {round_ + 1} (s): " + ", ".join(
                    f"{name} {results[name][-1]['seconds']:.2f}" for name in names), flush=True)
            path.unlink()
    print(f"load average {load_average()} at the end\n")

    rows, failures = [], []
    for fmt in args.formats:
        raw = min(r["seconds"] for r in results["raw read " + fmt])
        want_file = sum(file_bytes(fmt, k, s) for k, s in params.values())
        rows.append([f"raw read ({fmt})", FORMATS[fmt], gb(sizes[fmt]), f"{raw:.2f}",
                     f"{statistics.median(r['seconds'] for r in results['raw read ' + fmt]):.2f}",
                     "1.00", f"{sizes[fmt] / 1e9 / raw:.2f}", "-",
                     f"(payload {gb(want_file)} GB)", "-", "-", "-"])
        deq = results.get("dequantize " + fmt)
        host = ({k: min(r[k] for r in deq) for k in ("seconds", "cast_q", "cast_rest")}
                if deq else None)
        for name, case in CASES.items():
            if case.fmt != fmt:
                continue
            done = results[name]
            best = min(r["seconds"] for r in done)
            held = {r["payload"] for r in done}
            want = formula(case, params)
            kept = {r["kept"] for r in done}
            ok = held == {want} and kept == {kept_count(case, params)}
            if not ok:
                failures.append(f"{name}: measured {sorted(held)} B, {sorted(kept)} kept; "
                                f"formula {want} B, {kept_count(case, params)} kept")
            overhead = max(r["peak_anon"] - r["payload"] for r in done)
            share = "-"
            if host is not None:
                dequantizes = case.quantized == "dequantize" or (
                    case.fmt.startswith("q") and case.quantized != "keep")
                parts = ((host["seconds"], host["cast_q"]) if dequantizes else (0.0, 0.0)) + (
                    (host["cast_rest"],) if case.dtype == "bfloat16" else (0.0,))
                if sum(parts):
                    share = (f"{parts[0]:.2f} + {parts[1] + parts[2]:.2f} "
                             f"({sum(parts) / best:.0%})")
            rows.append([name, case.note, gb(sizes[fmt]), f"{best:.2f}",
                         f"{statistics.median(r['seconds'] for r in done):.2f}",
                         f"{best / raw:.2f}", f"{sizes[fmt] / 1e9 / best:.2f}",
                         f"{max(held) / 2**20:.0f}", f"{want / 2**20:.0f} "
                         f"({'exact' if ok else 'MISMATCH'})", max(kept) or "-",
                         f"{overhead / 2**20:.0f}", share])
    out = table(["load", "how", "file GB", "best s", "median s", "load / raw", "GB/s",
                 "device MiB", "formula MiB", "QArrays", "peak RssAnon - payload MiB",
                 "host numpy s: dequantize + cast (of load)"], rows)
    if failures:
        out += "\n\nFORMULA MISMATCH:\n" + "\n".join(failures)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=2, help="blocks of the scaled-down DiT")
    parser.add_argument("--repeat", type=int, default=2, help="rounds per format")
    parser.add_argument("--formats", nargs="+", choices=list(FORMATS), default=list(FORMATS))
    parser.add_argument("--dir", default=None, help="where the temporary files go")
    parser.add_argument("--no-load", action="store_true", help="the exact table only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child, args.file, args.layers)))
        return
    print(full_size_table(), flush=True)
    if not args.no_load:
        result = measure(args)
        print(result)
        if "MISMATCH" in result:
            sys.exit(1)


if __name__ == "__main__":
    main()
