"""The Gemma 3 language model as a text encoder (``vidax.models.gemma.model``): LTX-2 / LTX-2.3's
Gemma 3 12B.

Oracle (DESIGN.md §6): transformers 5.24's ``Gemma3ForConditionalGeneration`` (the language
model, a SigLIP vision tower and the projector, as the release holds them) at a tiny config
-- grouped-query attention with 4 query heads on 2 key/value heads, ``head_dim`` apart from
hidden / heads, ``query_pre_attn_scalar`` apart from ``head_dim``, local layers with a
window (5) shorter than the sequence around a global layer, the release's RoPE thetas and
linear factor 8 -- with random values in every tensor. Its files are written by
transformers' own ``save_pretrained``: the whole model, sharded (the release's
``language_model.model.*`` names), and the bare ``Gemma3TextModel``.

vidax loads each through ``vidax.load("gemma", "text_encoder", ...)`` with the config read
from the saved ``config.json``. Measured: every hidden state (``output_hidden_states``:
scaled embeddings, each layer's output, the last after the final norm), float32, matmul
precision "highest", each within max |diff| <= 1e-4 x std(reference); once with input ids
only and once with a padding mask that pads on the left, as LTX-2's tokenizer does (fully
masked queries included).

Negative controls (each must fail the bound): q_norm/k_norm of one layer swapped in the
file; gate_proj/up_proj swapped.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import safetensors.numpy  # noqa: E402

import vidax  # noqa: E402
from tests.parity import AbstractModel, DecoderLMCase  # noqa: E402
from vidax.errors import VidaxError  # noqa: E402
from vidax.loading import load_with_report, verify_manifest  # noqa: E402
from vidax.manifests import load_manifest  # noqa: E402
from vidax.models.gemma.model import FULL, SLIDING, GemmaConfig, GemmaModel  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

BATCH, SEQ_LEN = 3, 12
TEXT = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=24, query_pre_attn_scalar=32,
            sliding_window=5, sliding_window_pattern=2, rope_theta=1e6,
            rope_local_base_freq=1e4, rope_scaling={"rope_type": "linear", "factor": 8.0})
VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
              image_size=28, patch_size=14)
LAYOUTS = ("release", "text_model")


def _pad(mask) -> None:
    mask[1, :7] = 0           # LTX-2 pads on the left: queries with no key to attend to
    mask[2, :1] = 0


def reference():
    """transformers' tiny Gemma 3 (text model, vision tower, projector), as released."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    return Gemma3ForConditionalGeneration(Gemma3Config(
        text_config=TEXT, vision_config=VISION, mm_tokens_per_image=4,
        image_token_index=250, boi_token_index=251, eoi_token_index=252))


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> DecoderLMCase:
    """The saved reference in both layouts, the inputs, and transformers' outputs."""

    def save(model, root):
        model.save_pretrained(root / "release", max_shard_size="50KB")   # sharded, as released
        text_model = model.model.language_model
        text_model.save_pretrained(root / "text_model")
        return text_model

    return DecoderLMCase.build(
        tmp_path_factory.mktemp("gemma3"), "gemma", GemmaConfig, reference, save,
        num_layers=TEXT["num_hidden_layers"], vocab_size=TEXT["vocab_size"],
        batch=BATCH, seq_len=SEQ_LEN, padding=_pad, config_layout="release",
        calls=lambda text, ids, mask: {
            "ids": text(input_ids=ids, output_hidden_states=True),
            "masked": text(input_ids=ids, attention_mask=mask, output_hidden_states=True)})


# ----------------------------------------------------------------------------- layouts
def test_saved_layouts(case):
    index = json.loads((case.root / "release" / "model.safetensors.index.json").read_text())
    keys = set(index["weight_map"])
    assert len(set(index["weight_map"].values())) > 1
    assert {"language_model.model.embed_tokens.weight",
            "language_model.model.layers.0.self_attn.q_norm.weight",
            "language_model.model.layers.0.pre_feedforward_layernorm.weight"} <= keys
    assert any(k.startswith("vision_tower.") for k in keys)   # 5.x drops .vision_model
    assert any(k.startswith("multi_modal_projector.") for k in keys)
    bare = set(safetensors.numpy.load_file(case.root / "text_model" / "model.safetensors"))
    assert {"embed_tokens.weight", "norm.weight", "layers.2.self_attn.k_norm.weight"} <= bare


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_loads_and_ignores_the_rest(case, layout):
    _, report = load_with_report("gemma", "text_encoder", case.root / layout,
                                 config=case.config)
    assert report.ok and report.matched == 13 * TEXT["num_hidden_layers"] + 2
    assert all(k.startswith(("vision_tower.", "multi_modal_projector."))
               for k in report.ignored)
    assert bool(report.ignored) == (layout == "release")


# ----------------------------------------------------------------------------- parity
# The sharded release layout in the fast lane; the bare text model in CI (``-m slow``).
@pytest.mark.parametrize("layout", [layout if layout == "release" else
                                    pytest.param(layout, marks=pytest.mark.slow)
                                    for layout in LAYOUTS])
def test_hidden_states_match_transformers(case, layout, record_property):
    case.check_all(f"gemma_{layout}", case.load(layout)(case.ids), "ids", record_property)


def test_left_padding_mask_matches_transformers(case, record_property):
    """LTX-2's call (left-padded tokens and their mask); every position, padded queries
    included."""
    model = case.load("release")
    case.check_all("gemma_masked", model(case.ids, case.mask), "masked", record_property)


@pytest.mark.parametrize("pair", [("self_attn.q_norm", "self_attn.k_norm"),
                                  ("mlp.gate_proj", "mlp.up_proj")])
def test_negative_control_swapped_tensors(case, pair, tmp_path, record_property):
    case.check_negative(tmp_path, "text_model",
                        [tuple(f"layers.1.{name}.weight" for name in pair)],
                        f"gemma_negative_{pair[0]}", record_property)


def test_bad_inputs():
    model = AbstractModel(lambda: GemmaModel(GemmaConfig.tiny()))
    ids, mask = np.zeros((BATCH, SEQ_LEN), np.int32), np.ones((BATCH, SEQ_LEN), np.int32)
    with pytest.raises(VidaxError, match="input_ids"):
        model(ids[0])
    with pytest.raises(VidaxError, match="attention_mask"):
        model(ids, mask[:, :5])


# ----------------------------------------------------------------------------- configs
def test_config_from_saved_json(case):
    assert case.config == GemmaConfig.tiny()
    assert case.config.layer_types == (SLIDING, FULL, SLIDING)
    saved = json.loads((case.root / "text_model" / "config.json").read_text())
    assert GemmaConfig.from_dict(saved) == GemmaConfig.tiny()
    with pytest.raises(VidaxError, match="attn_logit_softcapping"):
        GemmaConfig.from_dict({**saved, "attn_logit_softcapping": 50.0})


def test_release_config_is_ltx_cores():
    """The 12B preset equals what ltx-core builds (its transformers 4.x-style dict), and the
    registry's variant names resolve to it."""
    from ltx_core.text_encoders.gemma.config import GEMMA3_CONFIG_FOR_LTX

    preset = GemmaConfig.gemma_3_12b()
    assert GemmaConfig.from_dict(GEMMA3_CONFIG_FOR_LTX.to_dict()) == preset
    assert preset.layer_types.count(FULL) == 8 and preset.layer_types[5] == FULL
    assert vidax.config("gemma", "text_encoder", "gemma-3-12b-it-qat-q4_0-unquantized",
                        layout="transformers") == preset


#: The release folder's manifest, derived by scripts/derive_gemma3_manifest.py from
#: transformers' Gemma3ForConditionalGeneration on the meta device at ltx-core's config (its
#: "derived_from" and "confidence" fields say how and how sure). Kept here: the packaged
#: manifests are copies of ../shared/manifests, which does not hold it yet.
MANIFEST = Path(__file__).with_name("gemma-3-12b-it-qat-q4_0-unquantized__text_encoder.json")


def test_release_manifest_verifies():
    """The derived manifest of the 12B folder through vidax's mapper against the model at the
    registry's preset: the 626 language-model tensors (11,766,034,176 parameters: embeddings
    262208 x 3840, 48 layers, the final norm) 1:1, the SigLIP tower (437) and the projector
    (2) ignored with their reasons, nothing missing or mis-shaped."""
    manifest = load_manifest(MANIFEST)
    assert (manifest.family, manifest.variant, manifest.component) == \
        ("gemma", "gemma-3-12b-it-qat-q4_0-unquantized", "text_encoder")
    assert GemmaConfig.from_dict(manifest.config) == GemmaConfig.gemma_3_12b()
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == 626 and report.num_params == 11_766_034_176
    assert len(report.ignored) == manifest.num_tensors - 626 == 439
    assert all(k.startswith(("vision_tower.vision_model.", "multi_modal_projector."))
               for k in report.ignored)
    assert {t.dtype for t in manifest.tensors.values()} == {"bfloat16"}


def test_release_manifest_is_transformers_at_the_release_config():
    """The manifest file is what the derivation script builds now (transformers' classes on
    the meta device: shapes only, no 12B allocation)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "derive_gemma3_manifest",
        Path(__file__).resolve().parents[3] / "scripts" / "derive_gemma3_manifest.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.derive() == json.loads(MANIFEST.read_text())
