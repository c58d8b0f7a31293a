"""vidax's Qwen2.5-VL language model (``vidax.models.reason1.model``) against transformers: the text
encoder of Cosmos-Predict2.5 (Cosmos-Reason1-7B) and of HunyuanVideo-1.5
(Qwen2.5-VL-7B-Instruct).

Oracle (DESIGN.md §6): transformers' ``Qwen2_5_VLForConditionalGeneration`` (vision tower,
language model and ``lm_head``, as the releases hold them) at a tiny config -- grouped-query
attention with 4 query heads on 2 key/value heads, unequal mRoPE chunks [2, 3, 3], theta 1e6,
eps 1e-6 -- with random values in every tensor, written by transformers' own
``save_pretrained`` in sharded safetensors (an index and several shards, as the releases),
in each of the three key layouts transformers writes: the legacy names of the release files
(``model.*``, ``visual.*``, ``lm_head.weight``; 5.x's default), 5.x's in-memory names
(``save_original_format=False``: ``model.language_model.*``, ``model.visual.*``), and a saved
``Qwen2_5_VLTextModel`` (bare names). vidax loads each through the registered ``reason1`` /
``text_encoder`` mapper, with the config read from the saved ``config.json``.

Measured: every hidden state (``output_hidden_states``: embeddings, each layer's output, the
last after the final norm), each against its own bound, float32, matmul precision "highest",
max |diff| <= 1e-4 x std(reference):

* Cosmos-Predict2.5's call: the whole model, input ids only (no mask: causal attention,
  trailing pads attend to everything before them);
* HunyuanVideo-1.5's call: the text model with its tokenizer's padding mask (right padding,
  and a left-padded row);
* explicit mRoPE positions ``[3, B, L]`` with t, h, w all different (each frequency chunk
  follows its own axis);
* Cosmos-Predict2.5's embedding (:func:`vidax.models.reason1.full_concat`) against diffusers'
  ``Cosmos2_5_PredictBasePipeline._get_prompt_embeds`` run on the transformers model.

Negative controls (each must fail the bound): k_proj/v_proj of one layer swapped in the file;
gate_proj/up_proj of one layer swapped; the embedding normalised with the biased std. q_proj
and k_proj cannot be swapped under grouped-query attention (their shapes differ): the load
must refuse that file.

Nothing comes from the hub: HF_HUB_OFFLINE=1 and every file is written here.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import safetensors.numpy  # noqa: E402

import vidax  # noqa: E402
from tests.parity import AbstractModel, DecoderLMCase, assert_fails, assert_parity  # noqa: E402
from vidax.errors import VerificationError, VidaxError  # noqa: E402
from vidax.loading import load_with_report, verify_manifest  # noqa: E402
from vidax.manifests import all_manifests, get_manifest  # noqa: E402
from vidax.models.reason1.model import (Reason1Config, Reason1TextModel,  # noqa: E402
                                        full_concat)

jax.config.update("jax_default_matmul_precision", "highest")

BATCH, SEQ_LEN = 3, 24
TEXT = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1e6,
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
VISION = dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
              fullatt_block_indexes=[0])
LAYOUTS = ("legacy", "language_model", "text_model")


def _pad(mask) -> None:
    mask[1, 15:] = 0          # right padding (HunyuanVideo-1.5's tokenizer call)
    mask[2, :5] = 0           # a left-padded row


# explicit mRoPE positions [3, B, L], t, h and w all different
POSITIONS = np.ascontiguousarray(np.broadcast_to(
    np.stack([np.arange(SEQ_LEN) // 6, np.arange(SEQ_LEN) % 6 + 3, np.arange(SEQ_LEN) % 4 * 2]
             )[:, None], (3, BATCH, SEQ_LEN)))


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> DecoderLMCase:
    """The saved reference in every layout, the inputs, and transformers' outputs: ``ids``
    (Cosmos-Predict2.5's call: the whole model, no mask), ``masked`` (HunyuanVideo-1.5's: the
    text model with the padding mask) and ``mrope`` (explicit positions)."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    def save(model, root):
        # sharded like the releases (5 shards + index there)
        model.save_pretrained(root / "legacy", max_shard_size="50KB")
        model.save_pretrained(root / "language_model", save_original_format=False)
        model.model.language_model.save_pretrained(root / "text_model")
        return model

    def calls(model, ids, mask):
        text_model = model.model.language_model
        return {"ids": model(input_ids=ids, output_hidden_states=True),
                "masked": text_model(input_ids=ids, attention_mask=mask,
                                     output_hidden_states=True),
                "mrope": text_model(input_ids=ids, position_ids=torch.from_numpy(POSITIONS),
                                    output_hidden_states=True)}

    return DecoderLMCase.build(
        tmp_path_factory.mktemp("qwen2_5_vl"), "reason1", Reason1Config,
        lambda: Qwen2_5_VLForConditionalGeneration(
            Qwen2_5_VLConfig(text_config=TEXT, vision_config=VISION)),
        save, num_layers=TEXT["num_hidden_layers"], vocab_size=TEXT["vocab_size"],
        batch=BATCH, seq_len=SEQ_LEN, padding=_pad, calls=calls, config_layout="legacy")


# ----------------------------------------------------------------------------- layouts
def test_saved_layouts(case):
    """What transformers 5.24 writes: the release's legacy names by default (sharded here),
    the v5 names on request, bare names for the text model."""
    legacy = json.loads((case.root / "legacy" / "model.safetensors.index.json").read_text())
    keys = set(legacy["weight_map"])
    assert len(set(legacy["weight_map"].values())) > 1
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= keys
    assert any(k.startswith("visual.") for k in keys)
    assert not any(k.startswith("model.language_model.") for k in keys)
    v5 = set(safetensors.numpy.load_file(case.root / "language_model" / "model.safetensors"))
    assert "model.language_model.embed_tokens.weight" in v5
    assert any(k.startswith("model.visual.") for k in v5)
    bare = set(safetensors.numpy.load_file(case.root / "text_model" / "model.safetensors"))
    assert {"embed_tokens.weight", "norm.weight", "layers.0.self_attn.q_proj.bias"} <= bare


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_loads_and_ignores_vision(case, layout):
    _, report = load_with_report("reason1", "text_encoder", case.root / layout,
                                 config=case.config)
    assert report.ok and report.matched == 12 * TEXT["num_hidden_layers"] + 2
    if layout == "text_model":
        assert not report.ignored
    else:
        assert "lm_head.weight" in report.ignored
        assert all("visual." in k for k in report.ignored if k != "lm_head.weight")


# ----------------------------------------------------------------------------- parity
# The release (legacy) layout in the fast lane; the other two in CI (``-m slow``).
@pytest.mark.parametrize("layout", [layout if layout == "legacy" else
                                    pytest.param(layout, marks=pytest.mark.slow)
                                    for layout in LAYOUTS])
def test_hidden_states_match_transformers(case, layout, record_property):
    """Cosmos-Predict2.5's call (ids only, no mask), from each layout."""
    case.check_all(f"reason1_{layout}", case.load(layout)(case.ids), "ids", record_property)


def test_padding_mask_matches_transformers(case, record_property):
    """HunyuanVideo-1.5's call: the padding mask (right- and left-padded rows); every
    position, padded queries included."""
    model = case.load("legacy")
    case.check_all("reason1_masked", model(case.ids, case.mask), "masked", record_property)


def test_mrope_positions_match_transformers(case, record_property):
    model = case.load("legacy")
    case.check_all("reason1_mrope", model(case.ids, position_ids=POSITIONS), "mrope",
                   record_property)


def _diffusers_embedding(case) -> np.ndarray:
    """diffusers' ``Cosmos2_5_PredictBasePipeline._get_prompt_embeds`` on the transformers
    model, with a stand-in tokenizer whose chat template returns our token rows."""
    import torch
    from diffusers.pipelines.cosmos.pipeline_cosmos2_5_predict import (
        Cosmos2_5_PredictBasePipeline,
    )

    rows = iter(case.ids.tolist())
    tokenizer = SimpleNamespace(apply_chat_template=lambda *a, **k: next(rows))
    pipe = SimpleNamespace(_execution_device=torch.device("cpu"), text_encoder=case.model,
                           tokenizer=tokenizer)
    with torch.no_grad():
        embeds = Cosmos2_5_PredictBasePipeline._get_prompt_embeds(
            pipe, prompt=["prompt"] * BATCH, max_sequence_length=SEQ_LEN)
    return embeds.numpy()


def test_full_concat_matches_diffusers(case, record_property):
    expected = _diffusers_embedding(case)
    assert expected.shape == (BATCH, SEQ_LEN, TEXT["num_hidden_layers"] * TEXT["hidden_size"])
    hidden = case.load("legacy")(case.ids)
    assert_parity("reason1_full_concat", full_concat(hidden), expected, record_property)
    # negative control: the biased std (ddof=0) must not pass
    biased = jnp.concatenate([(h - h.mean(-1, keepdims=True)) / (h.std(-1, keepdims=True) + 1e-8)
                              for h in hidden[1:]], -1)
    assert_fails("reason1_full_concat_negative", biased, expected, record_property)


@pytest.mark.parametrize("pair", [("self_attn.k_proj", "self_attn.v_proj"),
                                  ("mlp.gate_proj", "mlp.up_proj")])
def test_negative_control_swapped_tensors(case, pair, tmp_path, record_property):
    """The weights, and the biases where the layer has them (q/k/v do, the MLP does not)."""
    case.check_negative(tmp_path, "language_model",
                        [tuple(f"model.language_model.layers.1.{name}.{leaf}" for name in pair)
                         for leaf in ("weight", "bias")],
                        f"reason1_negative_{pair[0]}", record_property)


def test_swapped_q_k_is_refused(case, tmp_path):
    """Under grouped-query attention q_proj [hidden, hidden] and k_proj [kv, hidden] differ in
    shape: a file with them swapped fails verification before any weight is read."""
    bad = case.swapped_file(tmp_path, "text_model",
                            tuple(f"layers.0.self_attn.{n}_proj.weight" for n in "qk"))
    with pytest.raises(VerificationError, match="q_proj"):
        case.load(bad)


def test_bad_position_ids():
    model = AbstractModel(lambda: Reason1TextModel(Reason1Config.tiny()))
    with pytest.raises(VidaxError, match="position_ids"):
        model(np.zeros((BATCH, SEQ_LEN), np.int32),
              position_ids=np.zeros((2, BATCH, SEQ_LEN), np.int32))


# ----------------------------------------------------------------------------- structure
MANIFESTS = sorted(m.name for m in all_manifests()
                   if m.family in ("cosmos2_5", "hunyuan_video1_5")
                   and m.component == "text_encoder")


def test_manifests_are_all_listed():
    assert MANIFESTS == ["cosmos2_5/reason1-7b__text_encoder",
                         "hunyuan_video1_5/qwen2.5-vl-7b-instruct__text_encoder"]


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_verifies(name):
    """338 language-model tensors (7,070,619,136 parameters) 1:1; the Qwen2.5-VL manifest's
    390 vision-tower tensors and lm_head are ignored with their reasons."""
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == 338 and report.num_params == 7_070_619_136
    assert len(report.ignored) == manifest.num_tensors - 338
    assert all(k == "lm_head.weight" or k.startswith("visual.") for k in report.ignored)


def test_release_configs():
    reason1 = get_manifest("cosmos2_5/reason1-7b__text_encoder").config
    qwen = get_manifest("hunyuan_video1_5/qwen2.5-vl-7b-instruct__text_encoder").config
    assert Reason1Config.from_dict(reason1) == Reason1Config.reason1_7b()
    assert Reason1Config.from_dict(qwen) == Reason1Config.qwen2_5_vl_7b_instruct()
    assert Reason1Config.reason1_7b() == Reason1Config.qwen2_5_vl_7b_instruct()
    assert (vidax.config("reason1", "text_encoder", "reason1-7b", layout="transformers")
            == Reason1Config.reason1_7b())
    # transformers 4.x kept the text fields at the top level, RoPE in rope_scaling
    flat = {**qwen["text_config"], "vision_config": qwen["vision_config"]}
    assert Reason1Config.from_dict(flat) == Reason1Config.qwen2_5_vl_7b_instruct()


def test_config_from_saved_json(case):
    assert case.config == Reason1Config.tiny()
    text = json.loads((case.root / "text_model" / "config.json").read_text())
    assert Reason1Config.from_dict(text) == Reason1Config.tiny()
    with pytest.raises(VidaxError, match="sliding"):
        Reason1Config.from_dict({**text, "use_sliding_window": True})
    with pytest.raises(VidaxError, match="head_dim"):
        Reason1Config.from_dict({**text, "head_dim": 8})
