"""CLIP's text tower (``vidax.models.clip.CLIPTextModel``): HunyuanVideo 1.0's
``text_encoder_2`` (openai/clip-vit-large-patch14, ``pooler_output``).

Oracle (DESIGN.md §6): transformers 5.24 at a tiny config (3 layers of 4 heads x 16,
quick_gelu, 16 positions), random values in every tensor, written by transformers' own
``save_pretrained``:

* ``clip_model``: a whole ``CLIPModel`` (text and vision towers, projections,
  ``logit_scale``), as the OpenAI release holds it, with the release's legacy
  ``eos_token_id = 2`` (pooled token = the largest id). The reference is what HunyuanVideo
  runs: ``CLIPTextModel.from_pretrained`` on that folder.
* ``text_model``: a saved ``CLIPTextModel`` (5.x writes it without the ``text_model.``
  prefix) with ``eos_token_id = 50`` (pooled token = the first 50), on ids where the two
  pooling rules pick different tokens.

vidax loads each through ``vidax.load("clip", "text_encoder", ...)`` with the config read
from the saved ``config.json``. Measured, float32, matmul precision "highest", each within
max |diff| <= 1e-4 x std(reference): ``last_hidden_state`` and ``pooler_output``, with the
tokenizer's padding mask and without. Negative control: q_proj/k_proj of one layer swapped in
the file must fail the bound on ``pooler_output``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import dataclasses  # noqa: E402
import json  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import safetensors.numpy  # noqa: E402

import vidax  # noqa: E402
from tests.parity import (AbstractModel, assert_fails, assert_parity, edited_copy,  # noqa: E402
                          randomize, swap)
from vidax.errors import VidaxError  # noqa: E402
from vidax.loading import load_with_report, verify_manifest  # noqa: E402
from vidax.manifests import get_manifest  # noqa: E402
from vidax.models.clip.model import CLIPTextConfig, CLIPTextModel  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

TEXT = dict(vocab_size=99, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, max_position_embeddings=16, hidden_act="quick_gelu",
            layer_norm_eps=1e-5, bos_token_id=97, pad_token_id=98)
VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
              image_size=28, patch_size=14)
BOS, EOT, SEQ_LEN = 97, 98, 16
MANIFEST = "hunyuan_video/clip-vit-large-patch14__text_encoder_2"


def _tokens(lengths, gen):
    """Rows as CLIP's tokenizer pads them (torch ``ids``, ``mask``): BOS, words, EOT, then EOT
    as padding; the mask covers BOS .. the first EOT."""
    import torch

    ids = torch.full((len(lengths), SEQ_LEN), EOT)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, 0] = BOS
        ids[row, 1:n + 1] = torch.randint(0, BOS, (n,), generator=gen)
        mask[row, :n + 2] = 1
    return ids, mask


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    import torch
    from transformers import CLIPConfig, CLIPModel
    from transformers import CLIPTextModel as HFCLIPTextModel

    root = tmp_path_factory.mktemp("clip_text")
    torch.manual_seed(0)
    full = CLIPModel(CLIPConfig(text_config={**TEXT, "eos_token_id": 2},
                                vision_config=VISION, projection_dim=16)).eval()
    randomize(full.named_parameters(), seed=1)
    full.save_pretrained(root / "clip_model")
    legacy = HFCLIPTextModel.from_pretrained(root / "clip_model").eval()   # HunyuanVideo's load

    text = HFCLIPTextModel(HFCLIPTextModel.config_class(**TEXT, eos_token_id=50)).eval()
    randomize(text.named_parameters(), seed=3)
    text.save_pretrained(root / "text_model")

    gen = torch.Generator().manual_seed(2)
    ids, mask = _tokens([5, 14, 0], gen)          # a short, a full-length and an empty prompt
    ids2 = ids.clone()
    ids2[0, 2], ids2[1, 3], ids2[1, 9] = 50, 50, 96   # the pooling rules now differ (row 1)
    ref = {}
    with torch.no_grad():
        for key, model, x in (("legacy", legacy, ids), ("first_eos", text, ids2)):
            for masked in (False, True):
                out = model(input_ids=x, attention_mask=mask if masked else None)
                ref[key, masked] = (out.last_hidden_state.numpy(), out.pooler_output.numpy())
    configs = {name: CLIPTextConfig.from_dict(
        json.loads((root / name / "config.json").read_text())) for name in ("clip_model",
                                                                            "text_model")}
    return SimpleNamespace(root=root, ids=ids.numpy(), ids2=ids2.numpy(), mask=mask.numpy(),
                           ref=ref, configs=configs)


def _load(case, name, path=None):
    return vidax.load("clip", "text_encoder", path or case.root / name,
                      config=case.configs[name])


def _check(name, ours, ref, record_property) -> None:
    for part, o, r in zip(("last_hidden_state", "pooler_output"), ours, ref):
        assert_parity(f"{name}_{part}", np.asarray(o), r, record_property)


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("masked", [False, True], ids=["ids_only", "padding_mask"])
def test_release_layout_matches_transformers(case, masked, record_property):
    """The whole CLIPModel file, legacy eos_token_id 2 (pool at the largest id)."""
    model = _load(case, "clip_model")
    _check(f"clip_text_legacy_{masked}", model(case.ids, case.mask if masked else None),
           case.ref["legacy", masked], record_property)


@pytest.mark.parametrize("masked", [False, True], ids=["ids_only", "padding_mask"])
def test_text_model_layout_matches_transformers(case, masked, record_property):
    """A saved CLIPTextModel (bare names), eos_token_id 50: pool at the first 50, where the
    largest id would pick another token."""
    assert np.argmax(case.ids2[1]) != np.argmax(case.ids2[1] == 50)
    model = _load(case, "text_model")
    _check(f"clip_text_first_eos_{masked}", model(case.ids2, case.mask if masked else None),
           case.ref["first_eos", masked], record_property)


def test_negative_control_swapped_q_k(case, tmp_path, record_property):
    bad = edited_copy(case.root / "clip_model" / "model.safetensors",
                      tmp_path / "model.safetensors",
                      swap(tuple(f"text_model.encoder.layers.1.self_attn.{n}_proj.weight"
                                 for n in "qk")))
    _, pooled = _load(case, "clip_model", bad)(case.ids)
    assert_fails("clip_text_negative_q_k", pooled, case.ref["legacy", False][1],
                 record_property)


# ----------------------------------------------------------------------------- layouts
def test_layouts_load_and_ignore_the_rest(case):
    keys = set(safetensors.numpy.load_file(case.root / "text_model" / "model.safetensors"))
    assert "embeddings.token_embedding.weight" in keys          # 5.x: no text_model. prefix
    _, report = load_with_report("clip", "text_encoder", case.root / "clip_model",
                                 config=case.configs["clip_model"])
    assert report.ok and report.matched == 16 * TEXT["num_hidden_layers"] + 4
    assert {"logit_scale", "text_projection.weight", "visual_projection.weight"} <= set(
        report.ignored)
    assert all(k.startswith("vision_model.") for k in report.ignored
               if k not in ("logit_scale", "text_projection.weight",
                            "visual_projection.weight"))
    _, report = load_with_report("clip", "text_encoder", case.root / "text_model",
                                 config=case.configs["text_model"])
    assert report.ok and not report.ignored


def test_too_long_input_is_refused():
    model = AbstractModel(lambda: CLIPTextModel(CLIPTextConfig.tiny()))
    with pytest.raises(VidaxError, match="input_ids"):
        model(np.zeros((1, SEQ_LEN + 1), np.int32))


# ----------------------------------------------------------------------------- structure
def test_manifest_verifies():
    """196 text-tower tensors (123,060,480 parameters) 1:1; the vision tower, both
    projections, logit_scale and both position_ids buffers ignored with their reasons."""
    manifest = get_manifest(MANIFEST)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == 196 and report.num_params == 123_060_480
    assert len(report.ignored) == manifest.num_tensors - 196
    assert "text_model.embeddings.position_ids" in report.ignored


def test_release_config(case):
    preset = CLIPTextConfig.vit_l_14()
    # the manifest's config (transformers defaults) has no eos_token_id; the release's
    # config.json says 2
    assert (dataclasses.replace(CLIPTextConfig.from_dict(get_manifest(MANIFEST).config),
                                eos_token_id=2) == preset)
    assert vidax.config("clip", "text_encoder", "clip-vit-large-patch14",
                        layout="transformers") == preset
    assert case.configs["clip_model"] == dataclasses.replace(CLIPTextConfig.tiny(),
                                                             eos_token_id=2)
