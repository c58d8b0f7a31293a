"""vidax's tokenizer built from a SentencePiece ``spiece.model`` (no tokenizer.json) against
transformers' T5 tokenizers and SentencePiece itself.

The model file: a SentencePiece Unigram model trained here with T5's layout (``<pad>`` 0,
``</s>`` 1, ``<unk>`` 2, no BOS, ``nmt_nfkc`` normalisation, so the file carries a
precompiled character map), in a folder laid out like a CogVideoX hub release's
``tokenizer/``: ``spiece.model``, ``tokenizer_config.json`` (100 ``extra_ids``,
``model_max_length`` 226, written here in the transformers-4 layout those folders have),
``special_tokens_map.json``, ``added_tokens.json``.

Oracles:

* the file reader: every field vidax reads equals what protobuf's generated
  ``sentencepiece_model_pb2`` parses from the same bytes;
* ids and attention masks: equal to transformers' ``T5TokenizerFast`` and ``T5Tokenizer``
  loaded from the folder and called as diffusers' CogVideoX pipeline calls them
  (``padding="max_length"``, ``truncation=True``, ``</s>`` appended), at 226 and at a short
  length that truncates; the assembled ``tokenizers`` pipeline is also compared piece by piece
  (normaliser, pre-tokeniser, model, added tokens, post-processor);
* segmentation: equal to ``SentencePieceProcessor.encode`` + ``</s>`` on every prompt that holds
  no literal special token (SentencePiece reads ``</s>`` in text as characters; transformers
  and vidax read it as the token);
* negative controls: without the character map, or without the whitespace split, the ids
  differ from transformers' on these prompts, so the prompts exercise both.

Plus the CogVideoX pipeline reading a release folder whose ``tokenizer/`` has no
tokenizer.json, and bad input (truncated file, BPE model, other whitespace flags, an
``added_tokens.json`` that disagrees).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import io  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from vidax.errors import VidaxError  # noqa: E402
from vidax.text import (  # noqa: E402
    Tokenizer,
    load_tokenizer,
    read_sentencepiece,
    sentencepiece_tokenizer,
)

EXTRA_IDS = 100
PROMPTS = (
    "A cat, a dog; and 3 birds!!! (in 2024)... \"quoted\" 'single' [x]",
    "   leading and trailing spaces   ",
    "many     repeated\t\tspaces\nand\n\nnewlines\r\nhere",
    "café naïve Straße résumé 東京の夜 ｶﾀｶﾅ ＡＢＣ ①② ﬁne",
    "numbers 1234567890 3.14159 -42 1e10 50% $7",
    "",
    "literal specials <extra_id_3> </s> <unk> <pad>x<extra_id_0>",
    "emoji 🎬 zero\u200bwidth, nbsp\u00a0and em\u2003space, ideographic\u3000space",
    "golden wheat field sways under the setting sun, " * 20,   # > 226 tokens
)
SPECIALS = ("<extra_id_", "</s>", "<unk>", "<pad>")


def _train(**overrides) -> bytes:
    import sentencepiece as spm

    words = ("a cat dog runs across the snowy golden wheat field under setting sun camera "
             "slowly pans city street at night neon rain reflections spaces many repeated "
             "leading trailing numbers birds café naïve straße résumé 東京 夜 123 2024 3.14 "
             "emoji width and space").split()
    rng = random.Random(0)
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
             + rng.choice((".", ",", "!", "?", "")) for _ in range(2000)]
    model = io.BytesIO()
    options = dict(model_type="unigram", vocab_size=300, hard_vocab_limit=False,
                   character_coverage=1.0, normalization_rule_name="nmt_nfkc", pad_id=0,
                   eos_id=1, unk_id=2, bos_id=-1, minloglevel=2, num_threads=1)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model,
                                   **{**options, **overrides})
    return model.getvalue()


def _write_release_files(folder: Path, n_pieces: int, extra_ids: int) -> None:
    """The JSON files a CogVideoX hub ``tokenizer/`` folder holds beside ``spiece.model``
    (transformers 4's T5Tokenizer.save_pretrained layout), for ``n_pieces`` pieces."""
    sentinels = {f"<extra_id_{i}>": n_pieces + extra_ids - 1 - i for i in range(extra_ids)}
    added = {str(i): t for i, t in enumerate(("<pad>", "</s>", "<unk>"))}
    added.update({str(i): t for t, i in sentinels.items()})
    config = {
        "added_tokens_decoder": {
            i: {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True} for i, t in added.items()},
        "additional_special_tokens": list(sentinels),
        "clean_up_tokenization_spaces": True, "eos_token": "</s>", "extra_ids": extra_ids,
        "legacy": True, "model_max_length": 226, "pad_token": "<pad>", "sp_model_kwargs": {},
        "tokenizer_class": "T5Tokenizer", "unk_token": "<unk>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"additional_special_tokens": list(sentinels), "eos_token": "</s>",
         "pad_token": "<pad>", "unk_token": "<unk>"}))
    (folder / "added_tokens.json").write_text(json.dumps(sentinels))


@pytest.fixture(scope="module")
def model_bytes() -> bytes:
    return _train()


@pytest.fixture(scope="module")
def folder(tmp_path_factory, model_bytes) -> Path:
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_bytes)
    out = tmp_path_factory.mktemp("cogvideox") / "tokenizer"
    out.mkdir()
    (out / "spiece.model").write_bytes(model_bytes)
    _write_release_files(out, len(proto.pieces), EXTRA_IDS)
    return out


def _vidax(folder: Path, seq_len: int, backend=None):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "prompt .* tokens were dropped", UserWarning)
        if backend is None:
            return load_tokenizer(folder, seq_len=seq_len, clean=None)(PROMPTS)
        return Tokenizer(folder, seq_len=seq_len, clean=None, backend=backend)(PROMPTS)


def _transformers(cls_name: str, folder: Path, seq_len: int):
    import transformers

    tokenizer = getattr(transformers, cls_name).from_pretrained(folder, local_files_only=True)
    out = tokenizer(list(PROMPTS), padding="max_length", max_length=seq_len, truncation=True,
                    add_special_tokens=True, return_attention_mask=True)
    return np.array(out["input_ids"]), np.array(out["attention_mask"])


# ----------------------------------------------------------------------------- the file reader
def test_reader_matches_protobuf(model_bytes, folder):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_bytes)
    ours = read_sentencepiece(folder / "spiece.model")
    assert ours.pieces == tuple((p.piece, p.score, p.type) for p in proto.pieces)
    assert len(ours.pieces) > 50 and {t for _, _, t in ours.pieces} == {1, 2, 3}
    spec, trainer = proto.normalizer_spec, proto.trainer_spec
    assert len(spec.precompiled_charsmap) > 1000      # nmt_nfkc's map is in the file
    assert ours.precompiled_charsmap == spec.precompiled_charsmap
    assert (ours.add_dummy_prefix, ours.remove_extra_whitespaces, ours.escape_whitespaces) == (
        spec.add_dummy_prefix, spec.remove_extra_whitespaces, spec.escape_whitespaces)
    assert (ours.model_type, ours.unk_id, ours.byte_fallback) == (
        trainer.model_type, trainer.unk_id, trainer.byte_fallback)


# ----------------------------------------------------------------------------- against transformers
def test_pipeline_equals_transformers(folder):
    from transformers import T5TokenizerFast

    theirs = json.loads(T5TokenizerFast.from_pretrained(folder)._tokenizer.to_str())
    ours = json.loads(sentencepiece_tokenizer(folder / "spiece.model",
                                              extra_ids=EXTRA_IDS).to_str())
    for part in ("normalizer", "pre_tokenizer", "model", "added_tokens", "post_processor",
                 "decoder"):
        assert ours[part] == theirs[part], part


@pytest.mark.parametrize("seq_len", [226, 12])
@pytest.mark.parametrize("cls_name", ["T5TokenizerFast", "T5Tokenizer"])
def test_ids_and_mask_match_transformers(folder, cls_name, seq_len):
    ids, mask = _transformers(cls_name, folder, seq_len)
    tokens = _vidax(folder, seq_len)
    np.testing.assert_array_equal(tokens.ids, ids)
    np.testing.assert_array_equal(tokens.mask, mask)
    lengths = mask.sum(1)
    assert lengths[PROMPTS.index("")] == 1
    if seq_len == 226:
        assert lengths.max() == 226 and tokens.dropped[-1] > 0    # the long prompt truncates
        assert (ids[np.arange(len(ids)), lengths - 1] == 1).all()     # </s> ends each row


def test_segmentation_matches_sentencepiece(folder):
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=str(folder / "spiece.model"))
    backend = sentencepiece_tokenizer(folder / "spiece.model", extra_ids=EXTRA_IDS)
    checked = 0
    for prompt in PROMPTS:
        if any(s in prompt for s in SPECIALS):
            continue
        assert backend.encode(prompt).ids == processor.encode(prompt) + [1], prompt
        checked += 1
    assert checked == len(PROMPTS) - 1


def test_negative_controls_change_the_ids(folder):
    """The prompts exercise the character map and the whitespace split: dropping either
    makes vidax disagree with transformers."""
    from tokenizers import pre_tokenizers

    ids, _ = _transformers("T5TokenizerFast", folder, 226)
    no_map = sentencepiece_tokenizer(folder / "spiece.model", extra_ids=EXTRA_IDS)
    no_map.normalizer = None
    no_split = sentencepiece_tokenizer(folder / "spiece.model", extra_ids=EXTRA_IDS)
    no_split.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    for backend in (no_map, no_split):
        assert (_vidax(folder, 226, backend).ids != ids).any(axis=1).sum() >= 2


def test_tokenizer_json_is_preferred(folder, tmp_path):
    """A folder with both files is read from tokenizer.json, as before."""
    from tokenizers import Tokenizer as Backend

    both = tmp_path / "both"
    shutil.copytree(folder, both)
    backend = sentencepiece_tokenizer(folder / "spiece.model", extra_ids=EXTRA_IDS)
    backend.add_special_tokens(["<only-in-json>"])
    backend.save(str(both / "tokenizer.json"))
    assert Backend.from_file(str(both / "tokenizer.json")).token_to_id("<only-in-json>")
    assert load_tokenizer(both, seq_len=8).vocab_size == load_tokenizer(folder, seq_len=8) \
        .vocab_size + 1


# ----------------------------------------------------------------------------- bad input
def _copy(folder: Path, tmp_path: Path, model: bytes | None = None) -> Path:
    out = tmp_path / "tokenizer"
    shutil.copytree(folder, out)
    if model is not None:
        (out / "spiece.model").write_bytes(model)
    return out


def test_bad_files_are_one_error(folder, tmp_path, model_bytes):
    from sentencepiece import sentencepiece_model_pb2

    bad = _copy(folder, tmp_path, model_bytes[: len(model_bytes) // 2])
    with pytest.raises(VidaxError, match=rf"{bad / 'spiece.model'}: not a readable "
                                         "SentencePiece model .*truncated"):
        load_tokenizer(bad, seq_len=8)
    (bad / "spiece.model").write_bytes(b"\x0f\xff")
    with pytest.raises(VidaxError, match="not a readable SentencePiece model"):
        load_tokenizer(bad, seq_len=8)

    def edited(edit) -> bytes:
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(model_bytes)
        edit(proto)
        return proto.SerializeToString()

    (bad / "spiece.model").write_bytes(edited(lambda p: setattr(p.trainer_spec, "model_type",
                                                                2)))
    with pytest.raises(VidaxError, match="SentencePiece bpe model"):
        load_tokenizer(bad, seq_len=8)
    (bad / "spiece.model").write_bytes(edited(
        lambda p: setattr(p.normalizer_spec, "add_dummy_prefix", False)))
    with pytest.raises(VidaxError, match="add_dummy_prefix turned off"):
        load_tokenizer(bad, seq_len=8)

    bad = _copy(folder, tmp_path / "ids")
    config = json.loads((bad / "tokenizer_config.json").read_text())
    (bad / "tokenizer_config.json").write_text(json.dumps(dict(config, extra_ids=10)))
    with pytest.raises(VidaxError, match=r"added_tokens.json: '<extra_id_\d+>' has id"):
        load_tokenizer(bad, seq_len=8)


# ----------------------------------------------------------------------------- CogVideoX
def test_cogvideox_release_reads_spiece_model(tmp_path):
    """A tiny CogVideoX release (diffusers-saved, as in the pipeline tests) whose
    ``tokenizer/`` holds only spiece.model and the hub's JSON files loads, and its prompts
    tokenize as transformers' T5 tokenizer on that folder does."""
    from tests.pipelines.test_cogvideox_pipeline import build_release
    from transformers import T5TokenizerFast

    from vidax.pipelines import cogvideox as cog

    release = tmp_path / "release"
    build_release("2b", release)            # its T5 has a vocabulary of 100
    tokenizer = release / "tokenizer"
    shutil.rmtree(tokenizer)
    tokenizer.mkdir()
    model = _train(vocab_size=90)
    (tokenizer / "spiece.model").write_bytes(model)
    n_pieces = len(read_sentencepiece(tokenizer / "spiece.model").pieces)
    _write_release_files(tokenizer, n_pieces, 100 - n_pieces)
    pipe = cog.Pipeline.from_release(cog.inspect_folder(release), precision="fp32")
    seq_len = pipe.dit.config.max_text_seq_length
    prompts = ["a cat runs across the snowy field at sunset", ""]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "prompt .* tokens were dropped", UserWarning)
        tokens = pipe.tokenizer(prompts)
        states = pipe.encode_text(prompts)
    theirs = T5TokenizerFast.from_pretrained(tokenizer)(
        prompts, padding="max_length", max_length=seq_len, truncation=True)
    np.testing.assert_array_equal(tokens.ids, theirs["input_ids"])
    assert states.shape[:2] == (2, seq_len)

    (tokenizer / "spiece.model").unlink()
    with pytest.raises(VidaxError, match=r"missing tokenizer/spiece.model or "
                                         r"tokenizer/tokenizer.json"):
        cog.inspect_folder(release)
