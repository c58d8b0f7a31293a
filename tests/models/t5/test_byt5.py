"""HunyuanVideo-1.5's glyph-text encoder: byT5 (``vidax.models.t5.model``, ``shared_pos=True``) read
from the bare ``T5Stack`` layout of Glyph-SDXL-v2's ``byt5_model.pt``, against transformers.

Oracle (DESIGN.md §6): transformers' ``T5EncoderModel`` at a tiny byT5-like config (gated
GELU, relative buckets 32 / max distance 128, ``num_heads * d_kv != d_model``, 3 layers so
blocks past 0 reuse block 0's bias table, a vocabulary of the 259 byte/special ids plus extra
color/font-like tokens) with random values in every tensor. Its ``encoder`` -- the
``T5Stack`` the authors load the file into -- is written by ``torch.save(encoder.state_dict())``,
the release's form (bare names, ``embed_tokens.weight``, no wrapper). vidax loads that file
through ``vidax.load`` (``t5`` / ``encoder`` / ``t5stack``; the layout is also detected).

Inputs: byT5 ids as its tokenizer makes them (UTF-8 bytes + 3, ``</s>`` = 1, pad = 0) with
extra-token ids mixed in, right-padded to 140 (past ``max_distance``: the saturated log
buckets are used), lengths from 6 to 140; the attention mask is applied. Bound: float32,
matmul precision "highest", max |diff| <= 1e-4 x std(reference) over every position.
Negative control: q and k of block 1 swapped in the file must fail it.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vidax  # noqa: E402
from tests.parity import assert_fails, assert_parity, randomize  # noqa: E402
from vidax import registry  # noqa: E402
from vidax.loading import verify_manifest  # noqa: E402
from vidax.manifests import DERIVED_FAMILIES, all_manifests, get_manifest  # noqa: E402
from vidax.models.t5.model import T5Config  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
SEQ_LEN = 140
VOCAB = 300          # 3 specials + 256 bytes + 41 stand-ins for the color/font tokens
TEXTS = ("Hello", "“VIDAX” in red neon letters over a rainy street", "x" * 200, "字形 glyph")
TINY = dict(vocab_size=VOCAB, d_model=48, d_kv=16, num_heads=4, d_ff=96, num_layers=3,
            feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
            relative_attention_max_distance=128, dropout_rate=0.0)


def _byt5_ids() -> tuple[np.ndarray, np.ndarray]:
    """byT5-tokenized rows (bytes + 3, ``</s>``, right padding), with a color and a font
    token id (>= 259) in front of the second and fourth rows, as Glyph-SDXL-v2 prompts have."""
    rows = []
    for i, text in enumerate(TEXTS):
        row = [b + 3 for b in text.encode()]
        if i % 2:
            row = [259 + i, 290 + i] + row
        rows.append(row[:SEQ_LEN - 1] + [1])
    ids = np.zeros((len(rows), SEQ_LEN), np.int64)
    mask = np.zeros((len(rows), SEQ_LEN), np.int64)
    for i, row in enumerate(rows):
        ids[i, :len(row)], mask[i, :len(row)] = row, 1
    return ids, mask


@pytest.fixture(scope="module")
def byt5_case(tmp_path_factory):
    """The saved bare-T5Stack file, its config, the tokens and the reference output."""
    import torch
    from transformers import T5Config as HFT5Config
    from transformers import T5EncoderModel

    torch.manual_seed(0)
    hf_config = HFT5Config(**TINY)
    stack = T5EncoderModel(hf_config).eval().encoder
    randomize(stack.named_parameters(), seed=1)
    path = tmp_path_factory.mktemp("byt5") / "byt5_model.pt"
    torch.save(stack.state_dict(), path)
    ids, mask = _byt5_ids()
    with torch.no_grad():
        expected = stack(input_ids=torch.from_numpy(ids),
                         attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    config = T5Config.from_dict(hf_config.to_dict())
    return path, config, ids, mask, expected


def _vidax_output(path, config, ids, mask, layout="t5stack") -> np.ndarray:
    model = vidax.load("t5", "encoder", path, layout=layout, config=config)
    return np.asarray(model(ids, mask))


def test_saved_file_is_the_released_layout(byt5_case):
    import torch

    path, config, ids, mask, _ = byt5_case
    keys = set(torch.load(path, weights_only=True))
    assert {"embed_tokens.weight", "final_layer_norm.weight"} <= keys
    assert not any(k.startswith(("encoder.", "shared.")) for k in keys)
    assert [k for k in keys if "relative_attention_bias" in k] == [
        "block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    assert config.shared_pos and config.dim_attn != config.dim and config.vocab_size == VOCAB
    lengths = mask.sum(1)
    assert lengths.min() < 10 and lengths.max() == SEQ_LEN and ids.max() >= 259


def test_encoder_matches_transformers(byt5_case, record_property):
    path, config, ids, mask, expected = byt5_case
    assert_parity("byt5", _vidax_output(path, config, ids, mask), expected, record_property)


def test_layout_is_detected(byt5_case):
    """``t5`` / ``encoder`` has two layouts now; the bare stack is told apart by its keys."""
    path, config, _, _, _ = byt5_case
    assert vidax.loading._detect_layout("t5", "encoder", path, config) == "t5stack"


def test_encoder_negative_control_swapped_q_k(byt5_case, tmp_path, record_property):
    import torch

    path, config, ids, mask, expected = byt5_case
    state = torch.load(path, weights_only=True)
    q, k = (f"block.1.layer.0.SelfAttention.{n}.weight" for n in "qk")
    state[q], state[k] = state[k], state[q]
    bad = tmp_path / "byt5_model.pt"
    torch.save(state, bad)
    assert_fails("byt5_negative", _vidax_output(bad, config, ids, mask), expected,
                 record_property)


# ----------------------------------------------------------------------------- structure
def test_byt5_manifests_are_all_listed():
    """The authors' releases (ComfyUI's repackaged copy, a derived manifest, is checked in
    tests/translator/test_comfyui_hunyuan.py)."""
    assert sorted(m.name for m in all_manifests()
                  if m.component == "byt5" and m.family not in DERIVED_FAMILIES) == [
        "hunyuan_video1_5/glyph-sdxl-v2__byt5"]


def test_manifest_verifies():
    """The released ``byt5_model.pt`` (111 tensors), 1:1 against the preset through the
    HunyuanVideo-1.5 alias."""
    manifest = get_manifest("hunyuan_video1_5/glyph-sdxl-v2__byt5")
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == report.num_tensors == manifest.num_tensors == 111
    assert report.num_params == manifest.num_params and not report.ignored


def test_release_config():
    """The preset against the manifest's byt5-small config plus the resized vocabulary (that
    dict has no plain ``vocab_size``, so it is compared field by field)."""
    c = get_manifest("hunyuan_video1_5/glyph-sdxl-v2__byt5").config
    preset = T5Config.glyph_sdxl_v2()
    assert (preset.vocab_size, preset.dim, preset.dim_attn, preset.dim_ffn, preset.num_heads,
            preset.num_layers, preset.num_buckets, preset.max_distance, preset.eps) == (
        c["vocab_size_after_special_tokens"], c["d_model"], c["num_heads"] * c["d_kv"],
        c["d_ff"], c["num_heads"], c["num_layers"], c["relative_attention_num_buckets"],
        c["relative_attention_max_distance"], c["layer_norm_epsilon"])
    assert preset.shared_pos and c["feed_forward_proj"] == "gated-gelu"
    spec, variant = registry.resolve("hunyuan_video1_5", "glyph-sdxl-v2", "byt5", "transformers")
    assert spec.key == ("t5", "encoder", "t5stack") and spec.make_config(variant) == preset
