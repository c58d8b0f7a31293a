"""Regenerate vidax/data/tiny/*.json: the key layouts of the tiny demo checkpoints, taken
from the authors' own PyTorch classes at vidax's ``tiny()`` configs.

The demo (``vidax demo``) writes random-weight checkpoints with exactly these names and
shapes, so what it loads is laid out as the authors' code lays it out -- not by an inverse
of vidax's own mapping. Needs the test environment (torch, the authors' packages):

    python scripts/make_tiny_layouts.py          # rewrite
    python scripts/make_tiny_layouts.py --check  # exit 1 if stale (tests run this check)
    python scripts/make_tiny_layouts.py wan2_2   # only the named layouts
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "vidax" / "data" / "tiny"

#: name -> builder of ``vidax/data/tiny/<name>.json`` (a dict: component -> {"file": the
#: file's path in the release folder, "tensors": key -> shape, and what else the demo needs,
#: such as "config"}). Builders register with :func:`layout`.
LAYOUTS: dict = {}


def layout(name: str):
    """Register the decorated builder as ``LAYOUTS[name]``."""
    def register(build):
        LAYOUTS[name] = build
        return build
    return register


def _state_layout(module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def _dump(layout: dict) -> str:
    """JSON with one line per tensor, so a diff shows which tensor changed."""
    lines = ["{"]
    for c, (component, entry) in enumerate(sorted(layout.items())):
        lines.append(f"  {json.dumps(component)}: {{")
        for key in sorted(k for k in entry if k != "tensors"):
            lines.append(f"    {json.dumps(key)}: {json.dumps(entry[key], sort_keys=True)},")
        lines.append('    "tensors": {')
        items = sorted(entry["tensors"].items())
        lines += [f"      {json.dumps(k)}: {json.dumps(v)}" + ("," if i < len(items) - 1 else "")
                  for i, (k, v) in enumerate(items)]
        lines.append("    }")
        lines.append("  }" + ("," if c < len(layout) - 1 else ""))
    return "\n".join(lines + ["}"]) + "\n"


def main() -> int:
    check = "--check" in sys.argv
    names = [a for a in sys.argv[1:] if not a.startswith("-")] or list(LAYOUTS)
    stale = []
    for name in names:
        build = LAYOUTS[name]
        path = OUT / f"{name}.json"
        text = _dump(build())
        if not path.exists() or path.read_text() != text:
            stale.append(path)
            if not check:
                OUT.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    if check and stale:
        print("stale tiny layouts: " + ", ".join(map(str, stale)))
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# Wan2.1, Wan2.2, LTX-Video
# ---------------------------------------------------------------------------------------------


@layout("wan2_1")
def wan2_1() -> dict:
    """The tiny text-to-video release the demo writes (``vidax.pipelines.wan2_1.tiny_configs``):
    the DiT as ``WanModel``, the UMT5 encoder as ``T5Encoder`` and the VAE as ``WanVAE_``
    lay out their state dicts."""
    from tests.reference import wan22
    from vidax.pipelines.wan2_1 import tiny_configs

    configs = tiny_configs("t2v")
    dit_cfg = dataclasses.asdict(configs["dit"])
    t5, vae = configs["text_encoder"], configs["vae"]
    return {
        "dit": {"file": "diffusion_pytorch_model.safetensors", "config": dit_cfg,
                "tensors": _state_layout(wan22.model_module().WanModel(**dit_cfg))},
        "text_encoder": {"file": "models_t5_umt5-xxl-enc-bf16.pth", "tensors": _state_layout(
            wan22.t5_module().T5Encoder(
                vocab=t5.vocab_size, dim=t5.dim, dim_attn=t5.dim_attn, dim_ffn=t5.dim_ffn,
                num_heads=t5.num_heads, num_layers=t5.num_layers, num_buckets=t5.num_buckets,
                shared_pos=t5.shared_pos))},
        "vae": {"file": "Wan2.1_VAE.pth", "tensors": _state_layout(
            wan22.vae2_1_module().WanVAE_(
                dim=vae.dim, z_dim=vae.z_dim, dim_mult=list(vae.dim_mult),
                num_res_blocks=vae.num_res_blocks, attn_scales=[],
                temperal_downsample=list(vae.temporal_downsample), dropout=0.0))},
    }


# ---------------------------------------------------------------------------------------------
# CogVideoX, Cosmos-Predict2.5, HunyuanVideo (their section; keep above the main guard)
# ---------------------------------------------------------------------------------------------


if __name__ == "__main__":
    sys.exit(main())
