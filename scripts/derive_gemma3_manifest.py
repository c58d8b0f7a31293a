"""Derive the manifest of LTX-2 / LTX-2.3's text encoder, Gemma 3 12B
(``google/gemma-3-12b-it-qat-q4_0-unquantized``, a ``Gemma3ForConditionalGeneration`` folder),
from transformers' own classes at the released config -- shapes only, nothing allocated.

How:

* the config: ltx-core's ``GEMMA3_CONFIG_FOR_LTX`` (``ltx_core/text_encoders/gemma/config.py``,
  the release's ``config.json`` as ltx-core carries it; ltx-core builds the model from it in
  ``encoders/encoder_configurator.py``), through ``Gemma3Config.from_dict``;
* the model: transformers' ``Gemma3ForConditionalGeneration`` built under
  ``torch.device("meta")`` (parameters have shapes and no storage);
* the names: the model's ``state_dict()`` through transformers' ``revert_weight_conversion``,
  what ``save_pretrained`` writes (the release's ``language_model.model.*``,
  ``multi_modal_projector.*``), the vision tower's under ``vision_tower.vision_model.*`` (the
  prefix transformers' loading mapping strips for this model), less ``lm_head.weight``, tied
  to ``embed_tokens`` and not stored (``save_pretrained`` drops tied copies; ltx-core's
  ``GEMMA_LLM_KEY_OPS`` recreates lm_head from embed_tokens when loading). Every name is
  checked to fall under one of ltx-core's three loader prefixes;
* the dtype: bfloat16, the config's ``torch_dtype`` (the "unquantized" QAT export).

    python scripts/derive_gemma3_manifest.py [--out PATH]

Default output: ``tests/models/gemma/gemma-3-12b-it-qat-q4_0-unquantized__text_encoder.json``
(its place in the shared manifests would be ``gemma/`` under that name).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANT = "gemma-3-12b-it-qat-q4_0-unquantized"
DEFAULT_OUT = ROOT / "tests" / "models" / "gemma" / f"{VARIANT}__text_encoder.json"
#: The prefixes ltx-core's GEMMA_LLM_KEY_OPS maps (ltx_core/text_encoders/gemma/encoders/
#: encoder_configurator.py): every stored key falls under one.
LOADER_PREFIXES = ("language_model.model.", "vision_tower.", "multi_modal_projector.")


def derive() -> dict:
    from importlib import metadata

    import torch
    import transformers
    from ltx_core.text_encoders.gemma.config import GEMMA3_CONFIG_FOR_LTX
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import PrefixChange, revert_weight_conversion

    config_dict = GEMMA3_CONFIG_FOR_LTX.to_dict()
    config = Gemma3Config.from_dict(config_dict)
    with torch.device("meta"):
        model = Gemma3ForConditionalGeneration(config)
    state = model.state_dict()
    assert all(t.is_meta for t in state.values())
    tied = model.lm_head.weight is model.model.language_model.embed_tokens.weight
    assert tied, "lm_head is not tied to embed_tokens at this config"
    state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    saved = revert_weight_conversion(model, state)
    # The vision tower: transformers 5.x keeps SigLIP's modules directly under vision_tower
    # and strips the release's "vision_model." when loading (a PrefixChange scoped to
    # vision_tower in its conversion mapping); save_pretrained does not put it back. The
    # release (written by transformers 4.x, where the tower was a SiglipVisionModel) has it.
    legacy = [c for c in get_model_conversion_mapping(model, add_legacy=True)
              if isinstance(c, PrefixChange) and c.scope_prefix == "vision_tower"]
    assert [c.source_patterns for c in legacy] == [[r"^vision_model\.(.+)"]], legacy
    saved = {(k.replace("vision_tower.", "vision_tower.vision_model.", 1)
              if k.startswith("vision_tower.") else k): v for k, v in saved.items()}
    names = sorted(saved)
    outside = [k for k in names if not k.startswith(LOADER_PREFIXES)]
    assert not outside, outside
    dtype = str(config_dict["torch_dtype"])
    tensors = {k: {"shape": list(saved[k].shape), "dtype": dtype} for k in names}
    num_params = sum(math.prod(t["shape"]) for t in tensors.values())
    counts = {p: sum(k.startswith(p) for k in names) for p in LOADER_PREFIXES}
    return {
        "family": "gemma", "variant": VARIANT, "component": "text_encoder",
        "released_as": f"google/{VARIANT}: the sharded transformers folder (model-*.safetensors "
                       "with model.safetensors.index.json, config.json, tokenizer) that LTX-2 "
                       "and LTX-2.3 load as their text encoder (--gemma-root)",
        "layout": "transformers", "container": "safetensors", "wrapper": None,
        "config": config_dict,
        "derived_from": (
            f"transformers {transformers.__version__} Gemma3ForConditionalGeneration built on "
            f"the meta device (shapes only) at ltx-core {metadata.version('ltx-core')}'s "
            "GEMMA3_CONFIG_FOR_LTX "
            "(ltx_core/text_encoders/gemma/config.py; ltx-core builds the model from it in "
            "encoders/encoder_configurator.py); names from transformers' "
            "revert_weight_conversion (what save_pretrained writes), the vision tower's with "
            "the vision_model. prefix that transformers' conversion mapping strips on load "
            "(PrefixChange scoped to vision_tower), lm_head.weight dropped "
            "(tied to embed_tokens; ltx-core's GEMMA_LLM_KEY_OPS recreates it), every key "
            "under ltx-core's loader prefixes ("
            + ", ".join(f"{p}*: {n}" for p, n in counts.items())
            + "). scripts/derive_gemma3_manifest.py."),
        "confidence": (
            "high for the language model's names and shapes (transformers' own class and "
            "save-time renaming at the config ltx-core ships, the prefixes ltx-core's loader "
            "maps); medium-high for the vision tower's vision_model. prefix (from the load "
            "mapping, as families/ltx.md records the folder); medium-high for "
            "bfloat16 (the config's torch_dtype; no release header was read); not checked "
            "against a real file's header (none is reachable here)."),
        "num_tensors": len(tensors), "num_params": num_params, "tensors": tensors,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    manifest = derive()
    args.out.write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {args.out}: {manifest['num_tensors']} tensors, "
          f"{manifest['num_params']:,} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
