"""vidax's UMT5 text encoder and tokenizer against the Wan authors' (``wan.modules.t5`` /
``wan.modules.tokenizers`` of the wan22 package).

Oracles (DESIGN.md §6):

* Encoder: the authors' ``T5Encoder`` at a tiny UMT5 config (``shared_pos=False``: a relative
  bias per block) with random values in every tensor, its own ``state_dict()`` saved with
  ``torch.save`` as ``models_t5_umt5-xxl-enc-bf16.pth``; ``vidax.load`` reads that file through
  the registered mapper. Inputs are real prompts, tokenized, padded to 160 tokens (longer than
  ``max_distance`` 128, so the saturated log buckets are exercised), lengths from 2 to 160 in one
  batch. Bound: float32, matmul precision "highest", max |diff| <= 1e-4 x std(reference) on
  the real tokens and separately on the padded positions. Negative control: q and k of one
  block swapped in the file must fail the bound.
* Tokenizer: a SentencePiece Unigram model trained here (T5's ids: ``<pad>`` 0, ``</s>`` 1,
  ``<unk>`` 2), turned into a transformers folder (tokenizer.json, tokenizer_config.json,
  special_tokens_map.json, spiece.model, like ``google/umt5-xxl/``); vidax's ids and mask must
  equal the authors' ``HuggingfaceTokenizer(name=folder, seq_len, clean='whitespace')`` on messy
  prompts (HTML entities, mojibake, runs of whitespace, CJK, unknown characters, an empty
  prompt, one longer than ``seq_len``).

Nothing comes from the hub: HF_HUB_OFFLINE=1 and every file is written here.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import dataclasses  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

import vidax  # noqa: E402
from tests.parity import assert_fails, assert_parity, compare  # noqa: E402
from tests.reference import wan22  # noqa: E402
from vidax import manifests  # noqa: E402
from vidax.errors import VidaxError  # noqa: E402
from vidax.loading import verify_manifest  # noqa: E402
from vidax.models.t5.model import (T5Config, T5Encoder, fp16_clamp,  # noqa: E402
                             relative_position_buckets)
from vidax.text import Tokenizer, clean_whitespace  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
SEQ_LEN = 160
FILE_NAME = "models_t5_umt5-xxl-enc-bf16.pth"

# Messy on purpose: what the authors' cleaning exists for.
PROMPTS = (
    "A cat &amp;amp; a dog   run\tacross\n\nthe  field &lt;b&gt;at sunset&lt;/b&gt;",
    "cafÃ© naÃ¯ve rÃ©sumÃ© Ã¼ber die groÃŸe StraÃŸe",  # mojibake
    "猫在草地上奔跑　美丽的风景，日落",  # CJK, U+3000
    "",
    "xyz <extra_id_3> </s> q \u00a0rain\u2003clouds\u200b",
    "camera slowly pans across a golden field of wheat, " * 20,  # > SEQ_LEN tokens
    "  snowy   forest  ",
)


# ----------------------------------------------------------------------------- tokenizer folder
def _train_sentencepiece() -> bytes:
    """A small SentencePiece Unigram model with T5's special ids and NFKC normalisation."""
    import sentencepiece as spm

    words = ("a cat dog runs jumps over the lazy brown fox in snowy forest at sunset camera "
             "slowly pans across golden field of wheat cinematic lighting close up shot woman "
             "walking city street rain reflections neon signs night beautiful landscape "
             "mountains river flowing water birds flying sky clouds café naïve résumé über "
             "straße große grün château 猫 在 草地 上 奔跑 美丽 的 风景 日落"
             ).split()
    rng = random.Random(0)
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) for _ in range(3000)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="unigram",
        vocab_size=200, hard_vocab_limit=False, character_coverage=1.0,
        normalization_rule_name="nmt_nfkc", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        minloglevel=2, num_threads=1)
    return model.getvalue()


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory) -> Path:
    """A ``google/umt5-xxl``-style folder: transformers' T5 tokenizer converted from the trained
    SentencePiece model and saved (tokenizer.json, tokenizer_config.json), plus the
    special_tokens_map.json and spiece.model the release folder also holds."""
    from transformers import T5Tokenizer

    src = tmp_path_factory.mktemp("spiece")
    (src / "spiece.model").write_bytes(_train_sentencepiece())
    folder = tmp_path_factory.mktemp("tokenizer") / "umt5-xxl"
    T5Tokenizer.from_pretrained(src, extra_ids=10, local_files_only=True).save_pretrained(folder)
    (folder / "spiece.model").write_bytes((src / "spiece.model").read_bytes())
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}))
    return folder


def _authors_tokenizer(folder: Path, seq_len: int | None):
    return wan22.tokenizers_module().HuggingfaceTokenizer(
        name=str(folder), seq_len=seq_len, clean="whitespace", local_files_only=True)


def _vidax_tokens(folder: Path, seq_len: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return Tokenizer(folder, seq_len=seq_len)(PROMPTS)


@pytest.mark.parametrize("seq_len", [16, SEQ_LEN])
def test_tokenizer_matches_authors(tokenizer_folder, seq_len):
    ids, mask = _authors_tokenizer(tokenizer_folder, seq_len)(
        list(PROMPTS), return_mask=True, add_special_tokens=True)
    tokens = _vidax_tokens(tokenizer_folder, seq_len)
    assert tokens.ids.dtype == np.int32 and tokens.ids.shape == (len(PROMPTS), seq_len)
    np.testing.assert_array_equal(tokens.ids, ids.numpy())
    np.testing.assert_array_equal(tokens.mask, mask.numpy())
    # dropped = what the authors' unpadded, untruncated encoding holds beyond seq_len
    unbounded = _authors_tokenizer(tokenizer_folder, None)
    full = [unbounded(p, add_special_tokens=True).shape[1] for p in PROMPTS]
    assert tokens.dropped == tuple(max(0, n - seq_len) for n in full)
    print(f"seq_len {seq_len}: lengths {tokens.lengths.tolist()}, dropped {tokens.dropped}")


def test_tokenizer_warns_on_truncation(tokenizer_folder):
    tokenizer = Tokenizer(tokenizer_folder, seq_len=SEQ_LEN)
    with pytest.warns(UserWarning, match=r"prompt 0 is \d+ tokens long.*last \d+ tokens"):
        tokens = tokenizer([PROMPTS[5]])
    assert tokens.dropped[0] > 0 and tokens.ids[0, -1] == tokenizer.eos_id
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tokenizer("a cat").dropped == (0,)


def test_tokenizer_needs_tokenizer_json(tmp_path, tokenizer_folder):
    (tmp_path / "spiece.model").write_bytes((tokenizer_folder / "spiece.model").read_bytes())
    with pytest.raises(VidaxError, match=rf"{tmp_path}: no tokenizer.json .*spiece.model"):
        Tokenizer(tmp_path, seq_len=8)
    with pytest.raises(VidaxError, match="does not exist"):
        Tokenizer(tmp_path / "missing", seq_len=8)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(VidaxError, match="not a readable tokenizers file"):
        Tokenizer(tmp_path, seq_len=8)


def test_cleaning_matches_authors():
    authors = wan22.tokenizers_module()
    for text in PROMPTS + ("\x1c\x1dA\x1e\x1fB\x85C\u2028D&amp;#39;E", "Â\xa0 x"):
        assert clean_whitespace(text) == authors.whitespace_clean(authors.basic_clean(text))


def test_whitespace_class_is_unicode_white_space():
    """vidax's ``re`` class equals the ``regex`` module's ``\\s`` the authors use, on every
    code point (they differ from Python's ``re`` ``\\s`` on U+001C..U+001F)."""
    import regex

    from vidax.text import _WHITESPACE

    chars = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    theirs = {m.start() for m in regex.finditer(r"\s", chars)}
    ours = {m.start() + i for m in _WHITESPACE.finditer(chars) for i in range(len(m[0]))}
    assert ours == theirs


# ----------------------------------------------------------------------------- encoder
def _authors_encoder(cfg: T5Config):
    return wan22.t5_module().T5Encoder(
        vocab=cfg.vocab_size, dim=cfg.dim, dim_attn=cfg.dim_attn, dim_ffn=cfg.dim_ffn,
        num_heads=cfg.num_heads, num_layers=cfg.num_layers, num_buckets=cfg.num_buckets,
        shared_pos=cfg.shared_pos).eval()


def _randomize(model, seed: int) -> None:
    """Random values in every tensor: norm scales around 1 (not ones), a position bias of
    O(1) (the authors' init makes it ~0.09, too small to expose a wrong bucket)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name:
                p.copy_(1 + 0.2 * noise)
            elif name.endswith("embedding.weight"):      # token and relative-bias tables
                p.copy_(noise)
            else:                                         # Linear [out, in]
                p.copy_(noise / p.shape[1] ** 0.5)


@nnx.jit
def _run(model, ids, mask):
    return model(ids, mask)


def _vidax_output(path: Path, cfg: T5Config, tokens, dtype=None) -> np.ndarray:
    model = vidax.load("wan2_1", "text_encoder", path, config=cfg, dtype=dtype)
    return np.asarray(_run(model, jnp.asarray(tokens.ids), jnp.asarray(tokens.mask)),
                      np.float32)


def _authors_output(model, tokens) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = model(torch.from_numpy(tokens.ids).long(), torch.from_numpy(tokens.mask).long())
    return out.float().numpy()


@pytest.fixture(scope="module")
def umt5_case(tmp_path_factory, tokenizer_folder):
    """The authors' tiny UMT5 encoder, its float32 file, the tokens and its output."""
    import torch

    cfg = T5Config.tiny()
    model = _authors_encoder(cfg)
    _randomize(model, seed=0)
    path = tmp_path_factory.mktemp("umt5") / FILE_NAME
    torch.save(model.state_dict(), path)
    tokens = _vidax_tokens(tokenizer_folder, SEQ_LEN)
    lengths = tokens.lengths
    assert lengths.min() <= 2 and lengths.max() == SEQ_LEN and len(set(lengths.tolist())) > 4
    return cfg, model, path, tokens, _authors_output(model, tokens)


def test_umt5_matches_authors(umt5_case, record_property):
    cfg, _, path, tokens, ref = umt5_case
    out = _vidax_output(path, cfg, tokens)
    valid = tokens.mask.astype(bool)
    stats = assert_parity("umt5_valid", out[valid], ref[valid], record_property)
    # Padded positions: computed the same way (queries attend to the valid keys only).
    pad = compare("umt5_padded", out[~valid], ref[~valid], record_property)
    assert pad["max_abs_diff"] <= stats["bound"], pad
    compare("umt5_all", out, ref, record_property)


def test_umt5_negative_control_swapped_q_k(umt5_case, tmp_path, record_property):
    import torch

    cfg, model, _, tokens, ref = umt5_case
    state = dict(model.state_dict())
    q, k = "blocks.1.attn.q.weight", "blocks.1.attn.k.weight"
    state[q], state[k] = state[k], state[q]
    bad = tmp_path / FILE_NAME
    torch.save(state, bad)
    valid = tokens.mask.astype(bool)
    assert_fails("umt5_negative", _vidax_output(bad, cfg, tokens)[valid], ref[valid],
                  record_property)


def test_umt5_bfloat16_file(umt5_case, tmp_path, record_property):
    """The released file is bfloat16: it loads as bfloat16 (the stored dtype) and runs in it;
    with ``dtype=float32`` it matches the authors' float32 encoder on the same rounded weights
    to the float32 bound."""
    import torch

    cfg, model, _, tokens, _ = umt5_case
    bf16 = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    path = tmp_path / FILE_NAME
    torch.save(bf16, path)
    valid = tokens.mask.astype(bool)

    rounded = _authors_encoder(cfg)
    rounded.load_state_dict({k: v.float() for k, v in bf16.items()})
    ref32 = _authors_output(rounded, tokens)
    assert_parity("umt5_bf16_file_fp32", _vidax_output(path, cfg, tokens, jnp.float32)[valid],
                   ref32[valid], record_property)

    loaded = vidax.load("wan2_1", "text_encoder", path, config=cfg)
    dtypes = {v.dtype for v in jax.tree.leaves(nnx.state(loaded, nnx.Param))}
    assert dtypes == {jnp.dtype(jnp.bfloat16)}
    out = _run(loaded, jnp.asarray(tokens.ids), jnp.asarray(tokens.mask))
    assert out.dtype == jnp.bfloat16
    # Both sides in bfloat16 round in different places (vidax keeps the attention logits in
    # float32, torch rounds them to bfloat16), so they cannot agree to the float32 bound.
    # Asked instead: vidax's bfloat16 error against float32 is no larger than the authors'
    # own (measured: mean |bf16 - fp32| 7.5e-3 vidax, 8.0e-3 authors).
    out16 = np.asarray(out, np.float32)[valid]
    ref16 = _authors_output(rounded.to(torch.bfloat16), tokens)[valid]
    stats = compare("umt5_bf16_compute", out16, ref16, record_property)
    assert stats["corr"] > 0.999, stats
    err_vidax, err_authors = (float(np.abs(o - ref32[valid]).mean()) for o in (out16, ref16))
    print(f"mean |bf16 - fp32|: vidax {err_vidax:.3e}, authors {err_authors:.3e}")
    assert err_vidax <= 1.25 * err_authors


def test_shared_position_bias_matches_authors(tmp_path, tokenizer_folder, record_property):
    """``shared_pos=True`` (T5-v1.1/byT5 structure: one top-level table), same mapper."""
    import torch

    cfg = dataclasses.replace(T5Config.tiny(), shared_pos=True)
    model = _authors_encoder(cfg)
    _randomize(model, seed=1)
    assert "pos_embedding.embedding.weight" in model.state_dict()
    path = tmp_path / FILE_NAME
    torch.save(model.state_dict(), path)
    tokens = _vidax_tokens(tokenizer_folder, SEQ_LEN)
    valid = tokens.mask.astype(bool)
    assert_parity("shared_pos", _vidax_output(path, cfg, tokens)[valid],
                   _authors_output(model, tokens)[valid], record_property)


# ----------------------------------------------------------------------------- pieces
@pytest.mark.parametrize("lq,lk", [(600, 600), (7, 300), (300, 7)])
def test_buckets_match_authors(lq, lk):
    import torch

    rel = wan22.t5_module().T5RelativeEmbedding(32, 4, bidirectional=True, max_dist=128)
    pos = torch.arange(lk)[None, :] - torch.arange(lq)[:, None]
    expected = rel._relative_position_bucket(pos).numpy()
    np.testing.assert_array_equal(relative_position_buckets(lq, lk, 32, 128), expected)


def test_fp16_clamp_matches_authors():
    """Only float16 with an inf is touched; float32 and bfloat16 pass through unchanged."""
    import torch

    authors = wan22.t5_module().fp16_clamp
    for values in ([1.0, -2.0, 65000.0], [1.0, float("inf"), -65000.0, float("-inf")]):
        for tdtype, jdtype in ((torch.float16, jnp.float16), (torch.float32, jnp.float32),
                               (torch.bfloat16, jnp.bfloat16)):
            expected = authors(torch.tensor(values, dtype=tdtype)).float().numpy()
            got = np.asarray(fp16_clamp(jnp.asarray(values, jdtype)), np.float32)
            np.testing.assert_array_equal(got, expected)


# ----------------------------------------------------------------------------- structure, config
UMT5_MANIFESTS = sorted(m.name for m in manifests.all_manifests()
                        if m.component == "text_encoder" and m.family in ("wan2_1", "wan2_2"))


def test_umt5_manifests_are_all_listed():
    assert len(UMT5_MANIFESTS) == 7, UMT5_MANIFESTS


@pytest.mark.parametrize("name", UMT5_MANIFESTS)
def test_manifest_verifies(name):
    manifest = manifests.get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, "\n".join(report.lines())
    assert report.matched == 242 == manifest.num_tensors
    assert T5Config.from_dict(manifest.config) == T5Config.umt5_xxl()


def test_full_size_forward_traces():
    """UMT5-XXL at Wan's 512 tokens, abstractly: bfloat16 in, [B, 512, 4096] bfloat16 out."""
    abstract = nnx.eval_shape(lambda: T5Encoder(T5Config.umt5_xxl(), param_dtype=jnp.bfloat16))
    graphdef, state = nnx.split(abstract)
    ids = jax.ShapeDtypeStruct((2, 512), jnp.int32)
    out = jax.eval_shape(lambda s, i, m: nnx.merge(graphdef, s)(i, m), state, ids, ids)
    assert out.shape == (2, 512, 4096) and out.dtype == jnp.bfloat16


def test_config_from_dict():
    t5 = manifests.get_manifest("t5/t5-v1_1-xxl__encoder").config   # transformers config.json
    assert T5Config.from_dict(t5) == T5Config.t5_v1_1_xxl()
    umt5_hf = dict(t5, model_type="umt5", vocab_size=256384)
    assert T5Config.from_dict(umt5_hf) == T5Config.umt5_xxl()
    with pytest.raises(VidaxError, match="feed_forward_proj 'relu'"):
        T5Config.from_dict(dict(t5, feed_forward_proj="relu"))
    with pytest.raises(VidaxError, match="unknown T5 encoder config keys"):
        T5Config.from_dict({"dim": 8, "window": 3})
    with pytest.raises(VidaxError, match="dim_attn"):
        T5Config(dim_attn=100, num_heads=64)


def test_shared_pos_tree():
    """T5-v1.1 structure: one relative table at the top, none per block."""
    tree = nnx.eval_shape(lambda: T5Encoder(T5Config.t5_v1_1_xxl()))
    names = {".".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(tree, nnx.Param))}
    assert "pos_embedding.embedding.embedding" in names
    assert not any(n.startswith("blocks.") and "pos_embedding" in n for n in names)
    # token table, shared table, final norm + 9 per block: the t5-v1_1-xxl manifest's 219
    assert len(names) == 3 + 24 * 9 == manifests.get_manifest("t5/t5-v1_1-xxl__encoder").num_tensors
