"""The Llama language model as a text encoder (``vidax.models.llama.model``): HunyuanVideo 1.0's
LLaVA-Llama-3-8B.

Oracle (DESIGN.md §6): transformers 5.24's ``LlavaForConditionalGeneration`` (a Llama
language model, a CLIP vision tower and the projector, as the LLaVA release holds them) at a
tiny config -- grouped-query attention with 4 query heads on 2 key/value heads, the release's
theta 5e5 and eps 1e-5 -- with random values in every tensor. Its files are written by
transformers' own ``save_pretrained`` in the three layouts the mapper reads:

* ``mllm``: the LLaVA model itself, sharded (``language_model.model.*``,
  ``language_model.lm_head.weight``, ``vision_tower.*``, ``multi_modal_projector.*``);
* ``text_encoder``: a ``LlamaForCausalLM`` holding the same language-model weights, which is
  what the authors' ``preprocess_text_encoder_tokenizer_utils.py`` saves (``model.*`` +
  ``lm_head.weight``);
* ``llama_model``: the bare ``LlamaModel`` (the diffusers community conversion's names).

vidax loads each through ``vidax.load("llama", "text_encoder", ...)`` with the config read
from the saved ``config.json``. Measured: every hidden state (``output_hidden_states`` of the
``LlamaModel``: embeddings, each layer's output, the last after the final norm), float32,
matmul precision "highest", each within max |diff| <= 1e-4 x std(reference); once with input
ids only and once with HunyuanVideo's padding mask (a right-padded row, plus a left-padded
row for the fully masked query case).

Negative controls (each must fail the bound): k_proj/v_proj of one layer swapped in the
file; gate_proj/up_proj swapped. q_proj and k_proj differ in shape under grouped-query
attention: that file must be refused.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import safetensors.numpy  # noqa: E402

import vidax  # noqa: E402
from tests.parity import AbstractModel, DecoderLMCase  # noqa: E402
from vidax.errors import VerificationError, VidaxError  # noqa: E402
from vidax.loading import load_with_report, verify_manifest  # noqa: E402
from vidax.manifests import all_manifests, get_manifest  # noqa: E402
from vidax.models.llama.model import LlamaConfig, LlamaModel  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

BATCH, SEQ_LEN = 3, 24
TEXT = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=5e5)
VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
              image_size=28, patch_size=14, projection_dim=16)
LAYOUTS = ("mllm", "text_encoder", "llama_model")


def _pad(mask) -> None:
    mask[1, 15:] = 0          # right padding (HunyuanVideo's tokenizer call)
    mask[2, :5] = 0           # a left-padded row: queries with no key to attend to


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> DecoderLMCase:
    """The saved reference in every layout, the inputs, and transformers' outputs."""
    from transformers import (
        LlamaConfig as HFLlamaConfig,
    )
    from transformers import (
        LlamaForCausalLM,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    def save(llava, root):
        llava.save_pretrained(root / "mllm", max_shard_size="50KB")     # sharded, as released
        causal = LlamaForCausalLM(HFLlamaConfig(**TEXT)).eval()
        causal.model.load_state_dict(llava.model.language_model.state_dict())
        causal.lm_head.load_state_dict(llava.lm_head.state_dict())
        causal.save_pretrained(root / "text_encoder")
        llava.model.language_model.save_pretrained(root / "llama_model")
        return causal.model

    return DecoderLMCase.build(
        tmp_path_factory.mktemp("llava_llama"), "llama", LlamaConfig,
        lambda: LlavaForConditionalGeneration(LlavaConfig(
            text_config=HFLlamaConfig(**TEXT), vision_config=VISION, image_token_index=250)),
        save, num_layers=TEXT["num_hidden_layers"], vocab_size=TEXT["vocab_size"],
        batch=BATCH, seq_len=SEQ_LEN, padding=_pad, config_layout="mllm",
        calls=lambda text, ids, mask: {
            "ids": text(input_ids=ids, output_hidden_states=True),
            "masked": text(input_ids=ids, attention_mask=mask, output_hidden_states=True)})


# ----------------------------------------------------------------------------- layouts
def test_saved_layouts(case):
    """What transformers 5.24 writes: the LLaVA release's names (sharded here), the
    LlamaForCausalLM names of the authors' preprocessed folder, bare LlamaModel names."""
    index = json.loads((case.root / "mllm" / "model.safetensors.index.json").read_text())
    keys = set(index["weight_map"])
    assert len(set(index["weight_map"].values())) > 1
    assert {"language_model.model.embed_tokens.weight", "language_model.lm_head.weight",
            "multi_modal_projector.linear_1.weight"} <= keys
    assert any(k.startswith("vision_tower.") for k in keys)
    causal = set(safetensors.numpy.load_file(case.root / "text_encoder" / "model.safetensors"))
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= causal
    bare = set(safetensors.numpy.load_file(case.root / "llama_model" / "model.safetensors"))
    assert {"embed_tokens.weight", "norm.weight", "layers.0.self_attn.q_proj.weight"} <= bare


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_loads_and_ignores_the_rest(case, layout):
    _, report = load_with_report("llama", "text_encoder", case.root / layout,
                                 config=case.config)
    assert report.ok and report.matched == 9 * TEXT["num_hidden_layers"] + 2
    ignored = set(report.ignored)
    if layout == "llama_model":
        assert not ignored
    elif layout == "text_encoder":
        assert ignored == {"lm_head.weight"}
    else:
        assert "language_model.lm_head.weight" in ignored
        assert all(k.startswith(("vision_tower.", "multi_modal_projector."))
                   for k in ignored - {"language_model.lm_head.weight"})


# ----------------------------------------------------------------------------- parity
# The LLaVA release layout in the fast lane; the two other layouts in CI (``-m slow``).
@pytest.mark.parametrize("layout", [layout if layout == "mllm" else
                                    pytest.param(layout, marks=pytest.mark.slow)
                                    for layout in LAYOUTS])
def test_hidden_states_match_transformers(case, layout, record_property):
    case.check_all(f"llama_{layout}", case.load(layout)(case.ids), "ids", record_property)


def test_padding_mask_matches_transformers(case, record_property):
    """HunyuanVideo's call (the tokenizer's mask); every position, padded queries included."""
    model = case.load("text_encoder")
    case.check_all("llama_masked", model(case.ids, case.mask), "masked", record_property)


@pytest.mark.parametrize("pair", [("self_attn.k_proj", "self_attn.v_proj"),
                                  ("mlp.gate_proj", "mlp.up_proj")])
def test_negative_control_swapped_tensors(case, pair, tmp_path, record_property):
    case.check_negative(tmp_path, "text_encoder",
                        [tuple(f"model.layers.1.{name}.weight" for name in pair)],
                        f"llama_negative_{pair[0]}", record_property)


def test_swapped_q_k_is_refused(case, tmp_path):
    bad = case.swapped_file(tmp_path, "llama_model",
                            tuple(f"layers.0.self_attn.{n}_proj.weight" for n in "qk"))
    with pytest.raises(VerificationError, match="q_proj"):
        case.load(bad)


def test_bad_inputs():
    model = AbstractModel(lambda: LlamaModel(LlamaConfig.tiny()))
    ids, mask = np.zeros((BATCH, SEQ_LEN), np.int32), np.ones((BATCH, SEQ_LEN), np.int32)
    with pytest.raises(VidaxError, match="input_ids"):
        model(ids[0])
    with pytest.raises(VidaxError, match="attention_mask"):
        model(ids, mask[:, :5])


# ----------------------------------------------------------------------------- structure
MANIFESTS = sorted(m.name for m in all_manifests()
                   if m.family == "hunyuan_video" and m.variant == "llava-llama-3-8b-v1_1")


def test_manifests_are_all_listed():
    assert MANIFESTS == ["hunyuan_video/llava-llama-3-8b-v1_1__mllm",
                         "hunyuan_video/llava-llama-3-8b-v1_1__text_encoder"]


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_verifies(name):
    """290 language-model tensors (7,505,186,816 parameters: the manifests' 8,030,785,536
    less lm_head's 128320 x 4096) 1:1; lm_head, and in the LLaVA file the vision tower and
    projector, ignored with their reasons."""
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == 290 and report.num_params == 7_505_186_816
    assert len(report.ignored) == manifest.num_tensors - 290
    assert all(k.endswith("lm_head.weight")
               or k.startswith(("vision_tower.", "multi_modal_projector."))
               for k in report.ignored)


def test_release_configs():
    preset = LlamaConfig.llava_llama_3_8b_v1_1()
    for name in MANIFESTS:
        assert LlamaConfig.from_dict(get_manifest(name).config) == preset
    assert (preset.head_dim, preset.rope_theta, preset.rms_norm_eps) == (128, 5e5, 1e-5)
    assert (vidax.config("llama", "text_encoder", "llava-llama-3-8b-v1_1",
                         layout="transformers") == preset)


def test_config_from_saved_json(case):
    assert case.config == LlamaConfig.tiny()
    saved = json.loads((case.root / "text_encoder" / "config.json").read_text())
    assert LlamaConfig.from_dict(saved) == LlamaConfig.tiny()
    llama3_1 = {"rope_type": "llama3", "factor": 8.0, "rope_theta": 5e5}
    with pytest.raises(VidaxError, match="llama3"):
        LlamaConfig.from_dict({**saved, "rope_parameters": llama3_1})
    with pytest.raises(VidaxError, match="mlp_bias"):
        LlamaConfig.from_dict({**saved, "mlp_bias": True})
