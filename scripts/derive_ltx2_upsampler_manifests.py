"""Derive the manifests of the released LTX-2 / 2.3 / 2.5 latent upscalers from ltx-core's own
class at each file's config -- names and shapes only, built on the meta device.

How:

* the files: the release tables of Lightricks/LTX-2's README over its history
  (@e5a15a4, Jan 2026: ``ltx-2-{spatial,temporal}-upscaler-x2-1.0``; @d230aec, Mar 2026:
  LTX-2.3's ``spatial-upscaler-x2-1.0``, ``-x1.5-1.0``, ``temporal-upscaler-x2-1.0``;
  @d887bbd, Apr 2026: ``spatial-upscaler-x2-1.1``; @2362161, Aug 2026: LTX-2.5's
  ``latent_upscale_models/ltx-2.5-latent-{spatial,temporal}-upscaler-x2-bf16-1.0``);
* the config: the file's ``__metadata__["config"]``, ltx-core's ``LatentUpsampler`` keys
  (what ``SafetensorsModelStateDictLoader.metadata`` returns and
  ``LatentUpsamplerConfigurator.from_config`` reads). Per file below (``CONFIGS``): which
  resampler each one has is the evidence recorded in its ``derived_from``;
* the model: ltx-core 1.0.0's ``LatentUpsamplerConfigurator.from_config(config)`` under
  ``torch.device("meta")``; the names are its ``state_dict()`` (parameters and the persistent
  ``upsampler.blur_down.kernel`` buffer of the rational resampler), bare (no prefix): ltx-pipelines
  loads the file with no key ops (``ModelLedger.upsampler_builder``);
* the dtypes and the check: where a file's exact byte count is known, the safetensors file
  this key set, these shapes, the candidate dtypes and ``{"config": json.dumps(config)}`` as
  the only metadata make is computed (header JSON as the safetensors writer lays it out, padded
  to 8 bytes, plus the data) and compared with it. An exact match establishes the key set, the
  dtypes (a float32 blur kernel would add 42 bytes to the x1.5 file) and the metadata string.

    python scripts/derive_ltx2_upsampler_manifests.py [--out DIR]

Default output: ``tests/models/ltx2_5/manifests/<variant>__upsampler.json`` (their place in the
shared manifests would be ``ltx2_5/`` under those names).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "models" / "ltx2_5" / "manifests"
KERNEL = "upsampler.blur_down.kernel"
_BYTES = {"BF16": 2, "F32": 4}
_NAMES = {"BF16": "bfloat16", "F32": "float32"}


def _config(mid: int, *, spatial: bool, scale: float, rational: bool) -> dict:
    """A file's metadata config, in the key order ltx-core's ``LatentUpsampler`` writes."""
    return {"_class_name": "LatentUpsampler", "in_channels": 128, "mid_channels": mid,
            "num_blocks_per_stage": 4, "dims": 3, "spatial_upsample": spatial,
            "temporal_upsample": not spatial, "spatial_scale": scale,
            "rational_resampler": rational}


_X2_RATIONAL = _config(1024, spatial=True, scale=2.0, rational=True)
_X2 = _config(1024, spatial=True, scale=2.0, rational=False)
_X1_5 = _config(1024, spatial=True, scale=1.5, rational=True)
_TEMPORAL = _config(512, spatial=False, scale=1.0, rational=True)

_DIFFUSERS_2_0 = (
    "huggingface/diffusers scripts/convert_ltx2_to_diffusers.py "
    "(get_ltx2_spatial_latent_upsampler_config('2.0'): 128 -> 1024 channels, 4 blocks, "
    "rational_spatial_scale 2.0, loaded with strict=True into LTX2LatentUpsamplerModel, "
    "which then builds SpatialRationalResampler: upsampler.conv.* + upsampler.blur_down.kernel)")
_PORT_V10_V11 = ("third-party ports of LTX-2.3 loading both x2 files (v1.0 with "
                 "upsampler.conv.* + upsampler.blur_down.kernel, v1.1 with upsampler.0.* and no "
                 "blur kernel)")
_TEMPORAL_HEADER = ("a third-party reading of the 2.5 temporal file's header (7608 header bytes, "
                    "72 tensors, all BF16, this metadata config verbatim)")

#: variant -> (repository, file, metadata config, exact bytes or None, evidence, blur kernel
#: dtype where established, extra metadata keys the file carries)
RELEASES: dict[str, dict] = {
    "2.0-spatial-x2": dict(
        repo="Lightricks/LTX-2", file="ltx-2-spatial-upscaler-x2-1.0.safetensors",
        config=_X2_RATIONAL, size=None, kernel=None,
        evidence=f"the resampler: {_DIFFUSERS_2_0}. Third-party listings give 995,765,578 "
                 "bytes: bf16 for the 73 tensors and ~22 KB of metadata beyond the config "
                 "(not established, so the blur kernel's dtype is not either)"),
    "2.0-temporal-x2": dict(
        repo="Lightricks/LTX-2", file="ltx-2-temporal-upscaler-x2-1.0.safetensors",
        config=_TEMPORAL, size=None, kernel=None,
        evidence="the config as LTX-2.3's and 2.5's temporal files carry it (the same class; "
                 "mid_channels 512 fits the 261,965,800 bytes third-party listings give, as "
                 "bf16 with ~22 KB of metadata beyond the config)"),
    "2.3-spatial-x2-1.0": dict(
        repo="Lightricks/LTX-2.3", file="ltx-2.3-spatial-upscaler-x2-1.0.safetensors",
        config=_X2_RATIONAL, size=None, kernel=None,
        evidence=f"the resampler: {_PORT_V10_V11}; the size third parties list (949.6 MiB) "
                 "fits bf16, not the 150 bytes that tell the two x2 layouts apart"),
    "2.3-spatial-x2-1.1": dict(
        repo="Lightricks/LTX-2.3", file="ltx-2.3-spatial-upscaler-x2-1.1.safetensors",
        config=_X2, size=995_743_560, kernel=None,
        evidence=f"the resampler: {_PORT_V10_V11}, and third-party code that checks this "
                 "metadata config verbatim; the byte count is from third-party download "
                 "listings"),
    "2.3-spatial-x1.5": dict(
        repo="Lightricks/LTX-2.3", file="ltx-2.3-spatial-upscaler-x1.5-1.0.safetensors",
        config=_X1_5, size=1_090_125_794, kernel="BF16",
        evidence="the x3 conv (9 x 1024 channels) and the stride-2 blur fit the byte count "
                 "(third-party download listings) exactly, the kernel in bf16 (float32 would "
                 "be 42 bytes more)"),
    "2.3-temporal-x2": dict(
        repo="Lightricks/LTX-2.3", file="ltx-2.3-temporal-upscaler-x2-1.0.safetensors",
        config=_TEMPORAL, size=261_944_000, kernel=None,
        evidence=f"{_TEMPORAL_HEADER}, whose byte count this file shares exactly (third-party "
                 "download listings)"),
    "2.5-spatial-x2": dict(
        repo="Lightricks/LTX-2.5",
        file="latent_upscale_models/ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0.safetensors",
        config=_X2, size=None, kernel=None,
        evidence="third-party code that loads it strict into the plain pixel-shuffle model; "
                 "its 995,778,752 bytes (a third-party listing) are LTX-2.3 x2-1.1's plus "
                 "35,192 bytes, as the other LTX-2.5 files carry model_version and license "
                 "metadata (not established here)"),
    "2.5-temporal-x2": dict(
        repo="Lightricks/LTX-2.5",
        file="latent_upscale_models/ltx-2.5-latent-temporal-upscaler-x2-bf16-1.0.safetensors",
        config=_TEMPORAL, size=261_944_000, kernel=None, evidence=_TEMPORAL_HEADER),
}


def file_bytes(shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str],
               metadata: dict[str, str]) -> int:
    """The byte count of the safetensors file holding these tensors: 8 (the header length),
    the header JSON (``__metadata__`` first, then the tensors ordered by dtype size, largest
    first, then name, compact separators) padded with spaces to a multiple of 8, the data."""
    order = sorted(shapes, key=lambda n: (-_BYTES[dtypes[n]], n))
    parts, offset = ['"__metadata__":' + json.dumps(metadata, separators=(",", ":"))], 0
    for name in order:
        size = math.prod(shapes[name]) * _BYTES[dtypes[name]]
        entry = {"dtype": dtypes[name], "shape": list(shapes[name]),
                 "data_offsets": [offset, offset + size]}
        parts.append(json.dumps(name) + ":" + json.dumps(entry, separators=(",", ":")))
        offset += size
    header = len(("{" + ",".join(parts) + "}").encode())
    return 8 + header + (-header) % 8 + offset


def _shapes(config: dict) -> dict[str, tuple[int, ...]]:
    import torch
    from ltx_core.model.upsampler import LatentUpsamplerConfigurator

    with torch.device("meta"):
        model = LatentUpsamplerConfigurator.from_config(config)
    state = model.state_dict()
    assert all(t.is_meta for t in state.values())
    return {k: tuple(v.shape) for k, v in state.items()}


def derive(variant: str) -> dict:
    from importlib import metadata

    r = RELEASES[variant]
    shapes = _shapes(r["config"])
    names = sorted(shapes)
    checked = ""
    if r["size"] is not None:
        dtypes = dict.fromkeys(names, "BF16")
        if KERNEL in shapes:
            assert r["kernel"] is not None, variant
            dtypes[KERNEL] = r["kernel"]
        size = file_bytes(shapes, dtypes, {"config": json.dumps(r["config"])})
        assert size == r["size"], (variant, size, r["size"])
        checked = (f" The file this key set, these shapes, bf16 and the metadata "
                   f"{{'config': json.dumps(config)}} alone make is {size:,} bytes: the "
                   "release's byte count exactly.")
    dtype = {k: "bfloat16" for k in names}
    if KERNEL in shapes:
        dtype[KERNEL] = _NAMES[r["kernel"]] if r["kernel"] else None
    tensors = {k: {"shape": list(shapes[k]), "dtype": dtype[k]} for k in names}
    num_params = sum(math.prod(s) for s in shapes.values())
    kind = ("rational resampler (x" + str(r["config"]["spatial_scale"]) + ")"
            if KERNEL in shapes else "temporal x2" if r["config"]["temporal_upsample"]
            else "2x pixel shuffle")
    kernel_note = ""
    if KERNEL in shapes:
        kernel_note = (f" {KERNEL} [1, 1, 5, 5] is the persistent buffer of ltx-core's "
                       "BlurDownsample (the normalised binomial 5x5), stored: ltx-core's "
                       "builder would otherwise leave it on the meta device; its dtype "
                       + ("bfloat16 (the byte count)." if r["kernel"] else
                          "is null: not established."))
    return {
        "family": "ltx2_5", "variant": variant, "component": "upsampler",
        "released_as": f"{r['repo']}: {r['file']}, its own file (bare LatentUpsampler keys, "
                       "the config in __metadata__['config'])",
        "layout": "original", "container": "safetensors", "wrapper": None, "prefix": None,
        "config": {
            "instantiated_with": r["config"],
            "safetensors_metadata": {"keys": ["config"] + (["model_version", "license"]
                                                           if variant.startswith("2.5") else []),
                                     "config_json": json.dumps(r["config"])},
            "notes": f"ltx-core LatentUpsampler, {kind}. Input: un-normalised video latents; "
                     "ltx-core's upsample_video un-normalises with the video VAE's "
                     "per_channel_statistics before and normalises after."},
        "derived_from": (
            f"ltx-core {metadata.version('ltx-core')} LatentUpsamplerConfigurator.from_config "
            "on the meta device at the metadata config (ltx_core/model/upsampler; "
            "Lightricks/LTX-2@400fd31 has the same classes, its configurator reading "
            "metadata['config']); names = state_dict() keys, bare (ltx-pipelines' ModelLedger "
            "loads the file without key ops); the file name from the LTX-2 README's release "
            f"table. Evidence for this file's config: {r['evidence']}.{checked}{kernel_note} "
            "scripts/derive_ltx2_upsampler_manifests.py."),
        "confidence": (
            ("high for names, shapes, dtypes and the metadata config (the exact byte count)"
             if r["size"] else
             "high for the shapes given the config; medium for the resampler choice (the "
             "evidence above, no header of this file read here); bulk bfloat16 by file size")
            + "; not checked against a real file's header here (none is reachable)."),
        "num_tensors": len(tensors), "num_params": num_params, "tensors": tensors,
    }


def derive_all() -> dict[str, dict]:
    return {variant: derive(variant) for variant in RELEASES}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for variant, manifest in derive_all().items():
        path = args.out / f"{variant}__upsampler.json"
        path.write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"wrote {path}: {manifest['num_tensors']} tensors, "
              f"{manifest['num_params']:,} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
