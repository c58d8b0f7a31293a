"""Regenerate vidax/data/tiny/*.json: the key layouts of the tiny demo checkpoints, taken
from the authors' own PyTorch classes at vidax's ``tiny()`` configs.

The demo (``vidax demo``) writes random-weight checkpoints with exactly these names and
shapes, so what it loads is laid out as the authors' code lays it out -- not by an inverse
of vidax's own mapping. Needs the test environment (torch, the authors' packages):

    python scripts/make_tiny_layouts.py          # rewrite
    python scripts/make_tiny_layouts.py --check  # exit 1 if stale (tests run this check)
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "vidax" / "data" / "tiny"


def _state_layout(module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def wan2_1() -> dict:
    from tests.reference import wan22
    from vidax.models.wan2_1 import WanDiTConfig

    dit_cfg = dataclasses.asdict(WanDiTConfig.tiny("t2v"))
    dit = wan22.model_module().WanModel(**dit_cfg)
    return {
        "dit": {"file": "diffusion_pytorch_model.safetensors", "config": dit_cfg,
                "tensors": _state_layout(dit)},
    }


LAYOUTS = {"wan2_1": wan2_1}


def main() -> int:
    check = "--check" in sys.argv
    stale = []
    for name, build in LAYOUTS.items():
        path = OUT / f"{name}.json"
        text = json.dumps(build(), indent=1, sort_keys=True) + "\n"
        if not path.exists() or path.read_text() != text:
            stale.append(path)
            if not check:
                OUT.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    if check and stale:
        print("stale tiny layouts: " + ", ".join(map(str, stale)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
