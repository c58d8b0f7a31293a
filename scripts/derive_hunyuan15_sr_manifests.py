"""Derive manifests for HunyuanVideo-1.5's super-resolution stage (the SR DiTs
``transformer/{720p,1080p}_sr_distilled/`` and the latent upsamplers
``upsampler/{720p,1080p}_sr_distilled/``) from the authors' own classes, built on the meta
device at the best-established configs. Names and shapes only; no released config.json of
these four folders has been seen (none is reachable), so each manifest says in
``confidence`` which values were seen, which were inferred, and from what.

How:

* the classes: ``Tencent-Hunyuan/HunyuanVideo-1.5`` @60783e70 -- the SR DiT is the same
  ``HunyuanVideo_1_5_DiffusionTransformer`` as the base releases (the authors'
  ``HunyuanVideo_1_5_Pipeline.load_sr_transformer_upsampler`` loads
  ``transformer/<sr_version>`` with it), the upsamplers are ``SRTo720pUpsampler`` (for
  ``720p_sr_distilled``) and ``SRTo1080pUpsampler`` (otherwise) from
  ``hyvideo/models/transformers/modules/upsample.py``, loaded with
  ``ModelMixin.from_pretrained`` (file keys == ``state_dict()`` keys, no prefix). The
  checkout's files are checked against the git blob ids of that commit (:data:`BLOBS`).
* the configs (:data:`RELEASES`, evidence in each entry): the SR DiT is the base DiT (the
  ``480p_i2v_step_distilled`` release config, packaged with vidax) with a 98-channel
  ``img_in`` (the SR pipeline concatenates [noisy 32 | image condition 32 + task mask 1 |
  upsampled low-res latent 32 + ones 1]) and ``time_r_in`` (MeanFlow); the upsampler
  configs are fitted to third-party file listings (tensor counts, dtypes, sizes).
* the model: the class under ``torch.device("meta")``; the names are its ``state_dict()``
  (no buffers in these classes).

    git -C <mirror>/Tencent-Hunyuan+HunyuanVideo-1.5/repo archive 60783e70 | tar -x -C /tmp/hy15src
    python scripts/derive_hunyuan15_sr_manifests.py [--src /tmp/hy15src] [--out DIR]

``--src`` defaults to ``$HY15_SRC`` or ``/tmp/hy15src``. The only import stubbed is
``loguru`` (a logger the modules import and these constructors never call). Default output:
``tests/models/hunyuan_video1_5/manifests/<variant>__{dit,upsampler}.json``.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import logging
import math
import os
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "models" / "hunyuan_video1_5" / "manifests"
COMMIT = "60783e704160023913bee78f0b47036d393d4dfa"
REPO = "Tencent-Hunyuan/HunyuanVideo-1.5"
#: git blob ids at COMMIT of the files whose classes / rules are used here
BLOBS = {
    "hyvideo/models/transformers/hunyuanvideo_1_5_transformer.py":
        "0544e7bfd88151468fc89f8fd004371743dd426b",
    "hyvideo/models/transformers/modules/embed_layers.py":
        "017b6bf28619555a98ff48caaec51f3201f10cdb",
    "hyvideo/models/transformers/modules/upsample.py": "f4686b3305c22e8d27bbded7f44103f787e266ff",
    "hyvideo/models/autoencoders/hunyuanvideo_15_vae.py":
        "68d881289d02645373a5c373d9cd86cec72fe50f",
    "hyvideo/pipelines/hunyuan_video_sr_pipeline.py": "e03a8ac358e8bbaf969cd55b904029f8ba41d909",
    "hyvideo/pipelines/hunyuan_video_pipeline.py": "e29f82d5c5a03471f900e7587d2b04a17f77507c",
    "hyvideo/commons/__init__.py": "a59b44b6e3af75187f207821184375683fd8efaa",
}
BASE_RELEASE = "hunyuan_video1_5/480p_i2v_step_distilled__dit"
LATENT = 32
SR_IMG_IN = LATENT + (LATENT + 1) + (LATENT + 1)       # 98

# ------------------------------------------------------------------------------ evidence
_SR_PIPELINE = (
    f"{REPO}@{COMMIT[:8]} hyvideo/pipelines/hunyuan_video_sr_pipeline.py "
    "HunyuanVideo_1_5_SR_Pipeline.__call__: the DiT input is torch.concat([latents (32), "
    "cond_latents (32 image-condition + 1 task mask, _prepare_cond_latents), lq_cond_latents "
    "(32 upsampled + noised low-res latents + 1 ones, _prepare_lq_cond_latents)]) = 98 "
    "channels; the low-res part (and its ones channel) is zeroed once t < 1000 * 0.7. "
    "hunyuan_video_pipeline.py load_sr_transformer_upsampler builds transformer/<sr_version> "
    "with HunyuanVideo_1_5_DiffusionTransformer.from_pretrained")
_MEANFLOW = (
    "time_r_in (use_meanflow): ModelTC/LightX2V@f8aee98 registers time_r_in.mlp.{0,2} "
    "unconditionally for the SR DiT (lightx2v/models/networks/hunyuan_video/weights/"
    "pre_weights.py; a missing key raises in create_default_tensors) and its "
    "configs/hunyuan_video_15/vsr/hy15_i2v_480p.json runs 720p_sr_distilled with "
    "use_meanflow true; hao-ai-lab/FastVideo@2f3d407 fastvideo/pipelines/stages/"
    "sr_denoising.py always passes timestep_r (for both SR stages of its 480->720->1080 "
    "pipeline, whose DiT then needs its r-embedder); a third-party download table lists "
    "ComfyUI's fp16 repack of 1080p_sr_distilled at 16.66 GB next to 16.65 GB for the base "
    "720p_t2v (the 4,722,688 time_r_in parameters are 9.4 MB in fp16: 16.653 -> 16.662 GB; "
    "no room for a second extra embedder such as guidance_in); a third-party inventory "
    "counts 1932 tensors in the fp8_scaled 720p_sr_distilled repack vs 1926 for "
    "720p_i2v_distilled (= 4 time_r_in tensors + 2 fp8 scales)")
_IMG_IN_98 = (
    "img_in 98 channels, corroborated: ComfyUI's HunyuanVideo15SuperResolution node "
    "(comfy_extras/nodes_hunyuan.py as in the code index, commit not pinned) builds a "
    "2 x 32 + 2 = 66-channel condition (low-res latent at [33:65], ones at 65, noise "
    "augmentation 0.70 by default) beside the 32 noisy channels, and a third-party port of "
    "ComfyUI's model detection tells the SR model from the base by img_in.proj.weight "
    "in-channels == 98 with vision_in present")
_DIT_UNSEEN = (
    "NOT seen: the released config.json. in_channels 98 + concat_condition false + "
    "out_channels 32 is one config that builds this img_in (PatchEmbed adds no condition "
    "channels then); in_channels 65 with is_reshape_temporal_channels true (65 + 32 + 1) "
    "builds the identical tensor set, so the tensors do not tell them apart. ideal_task "
    "is unknown (set null; the SR pipeline takes t2v or i2v from reference_image); "
    "ideal_resolution must be 720p / 1080p (the pipeline's SizeMap[ideal_resolution]). "
    "Everything else (hidden 2048, 54 double blocks, byT5 mapper, SigLIP vision_in, "
    "cond_type_embedding, guidance_embed false) is the base releases' and is medium-high: "
    "the SR pipeline feeds the same text / byT5 / vision streams, the fp8 repacks of "
    "720p_sr_distilled and 720p_i2v_distilled are the same 7.76 GiB, and the fp16 sizes "
    "differ by exactly time_r_in. dtype: float32 as every other released DiT folder "
    "(not seen for these two)")

_UP720 = (
    "a third-party download manifest (safetensors headers parsed) lists ComfyUI's "
    "hunyuanvideo15_latent_upsampler_720p.safetensors (Comfy-Org/HunyuanVideo_1.5_repackaged; "
    "ComfyUI's LatentUpscaleModelLoader loads it strictly, with the authors' key names "
    "in_conv.conv.weight / blocks.N.block.M.conv.weight, into comfy/ldm/hunyuan_video/"
    "upsampler.py@18ae4006 SRModel3DV2) at 0.09 GB, 100 tensors, all F32: 100 = 4 + 6 x "
    "num_blocks -> num_blocks 16 exactly; 0.09 GB (decimal, as that table's 16.65 GB for "
    "the 8.33 B fp16 DiT) fits hidden_channels 124..133, and 128 / 16 are also the "
    "authors' UpsamplerConfig dataclass defaults (hidden_channels 128, num_blocks 16) in "
    "upsample.py; in/out 32: the 32-channel latents in, the pipeline's lq_latents (c = 32 "
    "in the DiT's 98) out. global_residual has no parameters: false is ComfyUI's hard-coded "
    "value (comfy_extras/nodes_hunyuan.py LatentUpscaleModelLoader), not seen in a config")
_UP1080 = (
    "num_res_blocks 2: ComfyUI's LatentUpscaleModelLoader infers only block_out_channels "
    "from the state dict and builds its 1080p Upsampler with the default 2, then loads "
    "strictly; z/out 32 as for 720p. block_out_channels NOT seen: [256, 512] is the "
    "simplest monotone fit to the sizes third parties list -- ComfyUI's repack at 0.20 GB "
    "(the table that lists the 720p file at 0.09 GB) or ~0.2 GB, and 287 MB for both "
    "tencent upsampler folders (with 720p's 85.85 MB: 1080p ~201 MB = ~50.3 M fp32 "
    "parameters; [256, 512] gives 50,350,112 = 201.4 MB). Other widths fit too "
    "([64, 64, 256, 512]: 50,202,016; [32, 64, 64, 256, 512]: 50,287,392); the dtype "
    "(float32, as the 720p file) and the width are fitted together. Comfy's loader "
    "renames nin_shortcut -> nin_shortcut.conv, which suggests a width change between "
    "levels (a nin_shortcut Conv3d), as [256, 512] has. is_residual is unused by forward")

RELEASES: dict[str, dict] = {
    "720p_sr_distilled__dit": dict(
        kind="dit", folder="transformer/720p_sr_distilled", resolution="720p",
        pipeline="SR_PIPELINE_CONFIGS['720p_sr_distilled']: base 480p, flow_shift 2, "
                 "6 steps, guidance 1; TRANSFORMER_VERSION_TO_SR_VERSION maps every 480p "
                 "base (t2v / i2v, distilled, sparse, step-distilled) here"),
    "1080p_sr_distilled__dit": dict(
        kind="dit", folder="transformer/1080p_sr_distilled", resolution="1080p",
        pipeline="SR_PIPELINE_CONFIGS['1080p_sr_distilled']: base 720p, flow_shift 2, "
                 "8 steps, guidance 1; every 720p base maps here"),
    "720p_sr_distilled__upsampler": dict(
        kind="upsampler", folder="upsampler/720p_sr_distilled", cls="SRTo720pUpsampler",
        config={"in_channels": LATENT, "out_channels": LATENT, "hidden_channels": 128,
                "num_blocks": 16, "global_residual": False},
        evidence=_UP720, confidence=(
            "medium-high for names/shapes (one third-party header listing: count, dtype and "
            "size fit only num_blocks 16 / hidden ~128; no config.json seen); high for the "
            "key naming (the authors' class, and ComfyUI's strict loader reads the same "
            "names); float32 from that listing")),
    "1080p_sr_distilled__upsampler": dict(
        kind="upsampler", folder="upsampler/1080p_sr_distilled", cls="SRTo1080pUpsampler",
        config={"z_channels": LATENT, "out_channels": LATENT, "block_out_channels": [256, 512],
                "num_res_blocks": 2, "is_residual": False},
        evidence=_UP1080, confidence=(
            "LOW for block_out_channels (size-fitted, not seen; see derived_from) and so for "
            "the shapes and count of up.*; high for the key pattern given a width list (the "
            "authors' class; ComfyUI's strict loader), num_res_blocks 2 and z/out 32; "
            "float32 assumed")),
}


# ------------------------------------------------------------------------------ helpers
def git_blob_id(data: bytes) -> str:
    """The git object id of a file's bytes (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_checkout(src: Path) -> None:
    """Refuse a checkout whose files differ from the commit the evidence is about."""
    for rel, blob in BLOBS.items():
        path = src / rel
        if not path.is_file():
            raise SystemExit(f"{path}: missing; --src must be a checkout of {REPO}@{COMMIT[:8]}")
        if git_blob_id(path.read_bytes()) != blob:
            raise SystemExit(f"{path}: not the file of {REPO}@{COMMIT[:8]} (blob {blob})")


def import_authors(src: Path):
    """The authors' modules, importable from ``src`` with ``loguru`` stubbed."""
    if "loguru" not in sys.modules:
        stub = types.ModuleType("loguru")
        stub.logger = logging.getLogger("hyvideo")
        sys.modules["loguru"] = stub
    sys.path.insert(0, str(src))
    try:
        from hyvideo.models.transformers import hunyuanvideo_1_5_transformer as dit
        from hyvideo.models.transformers.modules import upsample
    finally:
        sys.path.remove(str(src))
    return dit, upsample


def meta_state(cls, config: dict) -> tuple[dict[str, tuple[int, ...]], dict]:
    """``cls(**config)`` on the meta device: its state_dict shapes and its registered config."""
    import torch

    with torch.device("meta"):
        model = cls(**config)
    state = model.state_dict()
    assert all(t.is_meta for t in state.values())
    assert not list(model.buffers()), cls.__name__       # no buffers: keys == parameters
    registered = {k: v for k, v in dict(model.config).items() if not k.startswith("_")}
    return {k: tuple(v.shape) for k, v in state.items()}, registered


def safetensors_bytes(shapes: dict[str, tuple[int, ...]], itemsize: int = 4) -> int:
    """Bytes of a ``save_pretrained`` safetensors file (metadata ``{"format": "pt"}``) holding
    these shapes in one dtype: 8 + header JSON padded to 8 + data. The header length depends
    on the offsets' digits, not on the order of the tensors."""
    parts, offset = ['"__metadata__":{"format":"pt"}'], 0
    for name in sorted(shapes):
        size = math.prod(shapes[name]) * itemsize
        parts.append(json.dumps(name) + ':{"dtype":"F32","shape":'
                     + json.dumps(list(shapes[name]), separators=(",", ":"))
                     + f',"data_offsets":[{offset},{offset + size}]}}')
        offset += size
    header = len(("{" + ",".join(parts) + "}").encode())
    return 8 + header + (-header) % 8 + offset


def _sorted_config(cls_name: str, config: dict) -> dict:
    out = {"_class_name": cls_name}
    out.update(sorted(config.items()))
    return out


# ------------------------------------------------------------------------------ derivation
def sr_dit_config(resolution: str) -> dict:
    """The authors' DiT kwargs for an SR release: the step-distilled base release's
    config.json with a 98-channel img_in and ``ideal_resolution``."""
    from vidax.manifests import get_manifest

    base = copy.deepcopy(get_manifest(BASE_RELEASE).config)
    base.pop("_class_name")
    assert base["use_meanflow"] is True and base["in_channels"] == LATENT
    base.update(in_channels=SR_IMG_IN, concat_condition=False, out_channels=LATENT,
                ideal_resolution=resolution, ideal_task=None)
    return base


def derive(name: str, dit_mod, up_mod) -> dict:
    from vidax.manifests import get_manifest

    r = RELEASES[name]
    variant, component = name.split("__")
    if r["kind"] == "dit":
        kwargs = sr_dit_config(r["resolution"])
        shapes, registered = meta_state(dit_mod.HunyuanVideo_1_5_DiffusionTransformer, kwargs)
        assert shapes["img_in.proj.weight"] == (2048, SR_IMG_IN, 1, 1, 1)
        # the tensor set is the step-distilled base release's, img_in aside
        base = get_manifest(BASE_RELEASE).tensors
        assert set(shapes) == set(base), set(shapes) ^ set(base)
        differ = sorted(k for k in shapes if shapes[k] != tuple(base[k].shape))
        assert differ == ["img_in.proj.weight"], differ
        config = _sorted_config("HunyuanVideo_1_5_DiffusionTransformer", registered)
        derived_from = (
            f"{REPO}@{COMMIT}:hyvideo/models/transformers/hunyuanvideo_1_5_transformer.py "
            "HunyuanVideo_1_5_DiffusionTransformer on the meta device at the config here "
            f"(the {BASE_RELEASE.split('/')[1].split('__')[0]} release config.json with "
            f"in_channels {SR_IMG_IN}, concat_condition false, out_channels 32, "
            f"ideal_resolution {r['resolution']}); names = state_dict() keys, no prefix "
            f"(ModelMixin.from_pretrained). Same {len(shapes)} tensors as that release "
            f"except img_in.proj.weight [2048, {SR_IMG_IN}, 1, 1, 1] (vs [2048, 65, 1, 1, 1]). "
            f"Evidence: {_SR_PIPELINE}. {_IMG_IN_98}. {_MEANFLOW}. {r['pipeline']}. "
            "scripts/derive_hunyuan15_sr_manifests.py.")
        confidence = (
            "medium-high for names/shapes: the class is certain (authors' loader), the 98 "
            "img_in channels are certain from the pipeline, time_r_in is inferred from two "
            "third-party implementations and two size/count listings (none is the file's "
            f"header). {_DIT_UNSEEN}.")
        dtype = "float32"
        released_as = (f"tencent/HunyuanVideo-1.5: {r['folder']}/"
                       "diffusion_pytorch_model.safetensors (+ config.json, not seen)")
    else:
        cls = getattr(up_mod, r["cls"])
        shapes, registered = meta_state(cls, r["config"])
        plain = {k: list(v) if isinstance(v, tuple) else v for k, v in registered.items()}
        assert plain == r["config"], registered
        config = _sorted_config(r["cls"], r["config"])
        size = safetensors_bytes(shapes)
        derived_from = (
            f"{REPO}@{COMMIT}:hyvideo/models/transformers/modules/upsample.py {r['cls']} on "
            "the meta device at the config here; names = state_dict() keys, no prefix "
            "(hunyuan_video_pipeline.py load_sr_transformer_upsampler: "
            f"{r['cls']}.from_pretrained(upsampler/{variant}); SRTo720pUpsampler when "
            "'720p' is in the version name, else SRTo1080pUpsampler). CausalConv3d wraps "
            "nn.Conv3d as .conv (replicate padding, causal in time); RMS_norm(images=False) "
            "stores gamma [C, 1, 1, 1]; ResnetBlock's width-changing shortcut is a plain "
            f"Conv3d nin_shortcut. Evidence for the config: {r['evidence']}. As a float32 "
            f"save_pretrained safetensors this is {size:,} bytes. "
            "scripts/derive_hunyuan15_sr_manifests.py.")
        confidence = (f"{r['confidence']}; the released config.json not seen; not checked "
                      "against a real file's header here (none is reachable).")
        dtype = "float32"
        released_as = (f"tencent/HunyuanVideo-1.5: {r['folder']}/"
                       "diffusion_pytorch_model.safetensors (+ config.json, not seen)")
    names = sorted(shapes)
    return {
        "family": "hunyuan_video1_5", "variant": variant, "component": component,
        "released_as": released_as, "layout": "original", "container": "safetensors",
        "wrapper": None, "config": config, "derived_from": derived_from,
        "confidence": confidence, "num_tensors": len(names),
        "num_params": sum(math.prod(s) for s in shapes.values()),
        "tensors": {k: {"shape": list(shapes[k]), "dtype": dtype} for k in names},
    }


def derive_all(src: Path) -> dict[str, dict]:
    check_checkout(src)
    dit_mod, up_mod = import_authors(src)
    return {name: derive(name, dit_mod, up_mod) for name in RELEASES}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path,
                        default=Path(os.environ.get("HY15_SRC", "/tmp/hy15src")))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, manifest in derive_all(args.src).items():
        path = args.out / f"{name}.json"
        path.write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"wrote {path}: {manifest['num_tensors']} tensors, "
              f"{manifest['num_params']:,} parameters")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
