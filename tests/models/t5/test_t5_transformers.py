"""vidax's T5 encoder (``vidax.models.t5``, ``shared_pos=True``) in transformers' layout against
transformers' ``T5EncoderModel``: the T5-v1.1-XXL text encoder of LTX-Video (and CogVideoX,
PixArt, DeepFloyd IF).

Oracle (DESIGN.md §6): ``T5EncoderModel`` at a tiny T5-v1.1 config (gated GELU, relative
buckets 32 / max distance 128, ``num_heads * d_kv != d_model``) with random values in every
tensor, written by transformers' own ``save_pretrained`` (safetensors): the tied alias
``encoder.embed_tokens.weight`` is dropped by that save, and the relative-position table is
stored in block 0 only, as in the released ``text_encoder/`` folders. vidax loads the file
through the registered ``t5`` / ``encoder`` / ``transformers`` mapper with the config read
from the saved ``config.json``.

Inputs: real prompts tokenized as LTX-Video's pipeline does (transformers' T5 tokenizer,
``padding="max_length"``, ``truncation=True``), 140 tokens per row (longer than the 128
``max_distance``: the saturated log buckets are used), lengths from a few tokens to a
truncated row; vidax's tokenizer gives the same ids and mask from the folder's
``tokenizer.json``. The attention mask is applied. Bound: float32, matmul precision "highest",
max |diff| <= 1e-4 x std(reference) over every position (padded rows' queries included).
Negative control: q and k of one block swapped in the file must fail it.

Nothing comes from the hub: HF_HUB_OFFLINE=1 and every file is written here.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import io  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import safetensors.numpy  # noqa: E402

import vidax  # noqa: E402
from tests.parity import assert_fails, assert_parity  # noqa: E402
from vidax.loading import verify_manifest  # noqa: E402
from vidax.manifests import all_manifests, get_manifest  # noqa: E402
from vidax.models.t5.model import T5Config  # noqa: E402
from vidax.text import Tokenizer  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
SEQ_LEN = 140
PROMPTS = (
    "A cat runs across the field at sunset",
    "close up shot",
    "camera slowly pans across a golden field of wheat, cinematic lighting, " * 12,  # truncated
    "a woman walking down a city street in the rain, neon signs reflections at night",
    "birds",
)
TINY = dict(d_model=48, d_kv=16, num_heads=4, d_ff=96, num_layers=2,
            feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
            relative_attention_max_distance=128, dropout_rate=0.0)


def _train_sentencepiece() -> bytes:
    """A small SentencePiece Unigram model with T5's special ids."""
    import sentencepiece as spm

    words = ("a cat dog runs across the field at sunset camera slowly pans golden of wheat "
             "cinematic lighting close up shot woman walking down city street in rain neon "
             "signs reflections night birds flying sky").split()
    rng = random.Random(0)
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(2000)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="unigram",
        vocab_size=120, hard_vocab_limit=False, character_coverage=1.0, pad_id=0, eos_id=1,
        unk_id=2, bos_id=-1, minloglevel=2, num_threads=1)
    return model.getvalue()


@pytest.fixture(scope="module")
def t5_case(tmp_path_factory):
    """The tokenizer folder, the saved transformers encoder, the tokens and its output."""
    import torch
    from transformers import T5Config as HFT5Config
    from transformers import T5EncoderModel, T5Tokenizer

    root = tmp_path_factory.mktemp("t5")
    (root / "spiece.model").write_bytes(_train_sentencepiece())
    tokenizer = T5Tokenizer.from_pretrained(root, extra_ids=10, local_files_only=True)
    tokenizer.save_pretrained(root / "tokenizer")
    tokens = tokenizer(list(PROMPTS), padding="max_length", max_length=SEQ_LEN, truncation=True,
                       add_special_tokens=True, return_tensors="pt")

    torch.manual_seed(0)
    model = T5EncoderModel(HFT5Config(vocab_size=len(tokenizer), **TINY)).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("layer_norm.weight"):
                p.copy_(1 + 0.2 * noise)
            elif "embed" in name or name == "shared.weight" or "relative_attention_bias" in name:
                p.copy_(noise)
            else:
                p.copy_(noise / p.shape[1] ** 0.5)
    model.save_pretrained(root / "text_encoder")
    with torch.no_grad():
        expected = model(input_ids=tokens.input_ids,
                         attention_mask=tokens.attention_mask).last_hidden_state.numpy()
    path = root / "text_encoder" / "model.safetensors"
    config = T5Config.from_dict(json.loads((root / "text_encoder" / "config.json").read_text()))
    return root, path, config, tokens, expected


def _vidax_output(path: Path, config: T5Config, tokens) -> np.ndarray:
    model = vidax.load("t5", "encoder", path, layout="transformers", config=config)
    return np.asarray(model(tokens.input_ids.numpy(), tokens.attention_mask.numpy()))


def test_saved_file_is_the_released_layout(t5_case):
    _, path, config, _, _ = t5_case
    keys = set(safetensors.numpy.load_file(path))
    assert "shared.weight" in keys and "encoder.embed_tokens.weight" not in keys
    assert [k for k in keys if "relative_attention_bias" in k] == [
        "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    assert config.shared_pos and config.dim_attn != config.dim


def test_vidax_tokenizer_matches_transformers(t5_case):
    root, _, _, tokens, _ = t5_case
    with pytest.warns(UserWarning, match="dropped"):
        ours = Tokenizer(root / "tokenizer", seq_len=SEQ_LEN, clean=None)(PROMPTS)
    np.testing.assert_array_equal(ours.ids, tokens.input_ids.numpy())
    np.testing.assert_array_equal(ours.mask, tokens.attention_mask.numpy())
    lengths = tokens.attention_mask.sum(1).tolist()
    assert min(lengths) < 10 and max(lengths) == SEQ_LEN   # short rows and a truncated one


def test_encoder_matches_transformers(t5_case, record_property):
    _, path, config, tokens, expected = t5_case
    assert_parity("t5", _vidax_output(path, config, tokens), expected, record_property)


def test_encoder_negative_control_swapped_q_k(t5_case, tmp_path, record_property):
    _, path, config, tokens, expected = t5_case
    tensors = safetensors.numpy.load_file(path)
    q, k = (f"encoder.block.1.layer.0.SelfAttention.{n}.weight" for n in "qk")
    tensors[q], tensors[k] = tensors[k], tensors[q]
    bad = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(tensors, bad)
    assert_fails("t5_negative", _vidax_output(bad, config, tokens), expected, record_property)


# ----------------------------------------------------------------------------- structure
T5_MANIFESTS = sorted(m.name for m in all_manifests()
                      if m.family == "t5" or (m.family in ("ltx_video", "cogvideox")
                                              and m.component == "text_encoder"))


def test_t5_manifests_are_all_listed():
    assert T5_MANIFESTS == sorted(
        ["t5/t5-v1_1-xxl__encoder", "ltx_video/t5-v1_1-xxl__text_encoder"]
        + [f"cogvideox/{v}__text_encoder" for v in ("2b", "5b", "5b-i2v", "1.5-5b",
                                                    "1.5-5b-i2v")])


@pytest.mark.parametrize("name", T5_MANIFESTS)
def test_manifest_verifies(name):
    """The released encoder-only files (219 tensors, ``shared.weight`` without its alias),
    1:1 against T5-v1.1-XXL; the LTX-Video and CogVideoX text encoders through the alias."""
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == report.num_tensors == manifest.num_tensors == 219
    assert report.num_params == manifest.num_params


def test_release_config():
    config = get_manifest("t5/t5-v1_1-xxl__encoder").config
    assert T5Config.from_dict(config) == T5Config.t5_v1_1_xxl()
    assert vidax.config("t5", "encoder", "t5-v1_1-xxl", layout="transformers") == \
        T5Config.t5_v1_1_xxl()


def test_encoder_decoder_checkpoint_keeps_the_encoder(t5_case, tmp_path):
    """google/t5-v1_1-xxl's own file is the whole T5ForConditionalGeneration (and a torch
    save may keep the tied alias): the decoder, lm_head and alias are ignored with reasons."""
    _, path, config, _, _ = t5_case
    tensors = safetensors.numpy.load_file(path)
    tensors["encoder.embed_tokens.weight"] = tensors["shared.weight"]
    tensors["decoder.final_layer_norm.weight"] = np.ones(config.dim, np.float32)
    tensors["lm_head.weight"] = np.zeros((config.vocab_size, config.dim), np.float32)
    full = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(tensors, full)
    _, report = vidax.loading.load_with_report("t5", "encoder", full, layout="transformers",
                                               config=config)
    assert report.ok and sorted(report.ignored) == [
        "decoder.final_layer_norm.weight", "encoder.embed_tokens.weight", "lm_head.weight"]
