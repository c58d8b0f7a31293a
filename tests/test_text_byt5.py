"""HunyuanVideo-1.5's glyph text path (``vidax.glyph``) against its oracles.

* Extraction and formatting: diffusers 0.42.1's ``extract_glyph_texts``
  (``pipelines/hunyuan_video1_5/pipeline_hunyuan_video1_5.py``, compiled from that file alone
  so that the test does not pay for importing the pipeline module), which formats the same string
  as the authors' ``_extract_glyph_texts`` + ``MultilingualPromptFormat.format_prompt`` with
  color and font None (read side by side: same regex, same de-duplication, same text).
* Tokens: transformers' ``ByT5Tokenizer`` (5.x, the slow Python tokenizer the authors'
  ``AutoTokenizer`` returns for byT5), with the color / font tokens added as the authors'
  ``add_special_token`` adds them (``add_tokens(..., special_tokens=True)``), called as their
  ``get_byt5_text_tokens`` calls it (``padding="max_length"``, ``max_length=256``,
  ``truncation=True``, ``add_special_tokens=True``). Three tokenizer folders: the constructor's
  defaults (plain-string specials, which ByT5Tokenizer strips around), google/byt5-small's own
  format (specials as AddedToken objects with the strip flags off, read by ``from_pretrained``)
  and a ``save_pretrained`` copy (``added_tokens_decoder`` with every id). The color / font
  tables are tiny files in the release's format (name -> index), one font index repeated so
  that a duplicate token is skipped. Ids and masks must be equal, every prompt.

Negative controls: a byte offset of 4 instead of 3, and de-duplication off, each make the
comparison fail. ~1 s.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from vidax import glyph
from vidax.errors import VidaxError
from vidax.glyph import ByT5GlyphTokenizer, glyph_prompt

COLORS = {"white": 0, "black": 1, "darkslategray": 2, "dimgray": 3}
FONTS = {"en-Montserrat-Regular": 0, "zh-SourceHanSansCN-Bold": 1, "jp-NotoSansJP-Regular": 2,
         "en-Montserrat-Bold": 0, "ko-NanumGothic": 5}   # <en-font-0> again: skipped
EXTRA = [f"<extra_id_{i}>" for i in range(125)]
LONG = "x" * 300

PROMPTS = [
    'A neon sign reading "OPEN 24H" above a door with "No Parking" painted on it.',
    'Write "Hi" on the wall, then “Hello” and "Hi" again, and “Hello”, and "Bye".',
    '海报上写着“欢迎光临”，下面一行"🎉 Party 时间 🎉" and the café "Crème Brûlée".',
    'A label "<color-1> red <en-font-0>text<ko-font-5>" and "a </s> b  <pad>c" here.',
    'A cat sleeping on a sofa, no text at all.',
    f'A scroll with "{LONG}" written on it.',
    f'A banner "{"y" * 248}</s>tail" (EOS at the cut).',
    'An empty sign "" in the rain.',
    '“curly only”',
    'Tags "<<color-0>><color-2><extra_id_7> </s></s> <unk>" and "<color-9><color->".',
]


def _write_glyph(folder):
    (folder / "assets").mkdir(parents=True)
    (folder / "assets" / "color_idx.json").write_text(json.dumps(COLORS))
    (folder / "assets" / "multilingual_10-lang_idx.json").write_text(json.dumps(FONTS))


def _style_tokens():
    """The token list as the authors' ``add_special_token(multilingual=True)`` builds it."""
    return ([f"<color-{i}>" for i in range(len(COLORS))]
            + [f"<{code[:2]}-font-{idx}>" for code, idx in FONTS.items()])


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from transformers import ByT5Tokenizer

    root = tmp_path_factory.mktemp("byt5")
    _write_glyph(root / "Glyph-SDXL-v2")
    cases = {}
    plain = root / "plain"
    plain.mkdir()
    (plain / "tokenizer_config.json").write_text(json.dumps(
        {"extra_ids": 125, "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}))
    cases["plain"] = (plain, ByT5Tokenizer(extra_ids=125))
    release = root / "byt5-small"
    release.mkdir()

    def added(c):
        return {"content": c, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": True}

    (release / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": added("</s>"), "unk_token": added("<unk>"), "pad_token": added("<pad>"),
         "additional_special_tokens": EXTRA}))
    (release / "tokenizer_config.json").write_text(json.dumps(
        {"extra_ids": 125, "additional_special_tokens": EXTRA}))
    cases["release"] = (release, ByT5Tokenizer.from_pretrained(str(release)))
    for oracle in (cases["plain"][1], cases["release"][1]):
        oracle.add_tokens(_style_tokens(), special_tokens=True)
    saved = root / "saved"
    cases["release"][1].save_pretrained(str(saved))
    cases["saved"] = (saved, ByT5Tokenizer.from_pretrained(str(saved)))
    return root / "Glyph-SDXL-v2", cases


@functools.cache
def _extract_glyph_texts():
    """diffusers' ``extract_glyph_texts``, compiled from its source file alone (importing the
    pipeline module costs ~6-13 s of torch / transformers imports; the function needs ``re``)."""
    spec = importlib.util.find_spec("diffusers")
    path = Path(spec.origin).parent / "pipelines/hunyuan_video1_5/pipeline_hunyuan_video1_5.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in tree.body
                if isinstance(n, ast.FunctionDef) and n.name == "extract_glyph_texts")
    namespace = {"re": re}
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)
    return namespace["extract_glyph_texts"]


def _oracle_tokens(oracle, prompts):
    extract_glyph_texts = _extract_glyph_texts()
    ids = np.full((len(prompts), 256), -1, np.int64)
    mask = np.zeros((len(prompts), 256), np.int64)
    for row, prompt in enumerate(prompts):
        text = extract_glyph_texts(prompt)
        if text is None:            # the authors feed zero states and a zero mask
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = oracle(text, padding="max_length", max_length=256, truncation=True,
                         add_special_tokens=True, return_tensors="np")
        ids[row], mask[row] = out["input_ids"][0], out["attention_mask"][0]
    return ids, mask


def _mismatches(ours, ids, mask):
    """Rows whose ids or mask differ (ids compared where the oracle tokenized)."""
    rows = []
    for row in range(len(ids)):
        if not np.array_equal(ours.mask[row], mask[row]):
            rows.append(row)
        elif mask[row].any() and not np.array_equal(ours.ids[row], ids[row]):
            rows.append(row)
    return rows


def test_glyph_prompt_is_diffusers_extract_glyph_texts():
    extract_glyph_texts = _extract_glyph_texts()
    for prompt in PROMPTS:
        assert glyph_prompt(prompt) == extract_glyph_texts(prompt), prompt
    assert glyph_prompt(PROMPTS[1]) == 'Text "Hi". Text "Hello". Text "Bye". '
    assert glyph_prompt("nothing quoted") is None


@pytest.mark.parametrize("case", ["plain", "release", "saved"])
def test_byt5_tokens_are_transformers(folders, case):
    glyph_dir, cases = folders
    folder, oracle = cases[case]
    tok = ByT5GlyphTokenizer.from_folders(folder, glyph_dir)
    assert tok.vocab_size == len(oracle) == 384 + 8        # 4 colors + 4 distinct fonts
    with pytest.warns(UserWarning, match="dropped"):
        ours = tok(PROMPTS)
    ids, mask = _oracle_tokens(oracle, PROMPTS)
    assert ours.ids.shape == ours.mask.shape == (len(PROMPTS), 256)
    assert ours.ids.dtype == np.int32
    assert _mismatches(ours, ids, mask) == []
    assert list(tok.has_glyph(ours)) == [row.any() for row in mask]
    assert not ours.mask[4].any() and (ours.ids[4] == 0).all()     # no quote: zero row
    assert ours.dropped[5] == len(f'Text "{LONG}". ') - 255 and ours.mask[5].all()
    assert ours.ids[5, -1] == 1                                      # EOS kept at the cut
    assert ours.lengths[6] == 255 and ours.ids[6, 254] == 1         # no second EOS
    print(case, "rows equal:", len(PROMPTS), "lengths", ours.lengths.tolist())


def test_byt5_negative_controls(folders, monkeypatch):
    glyph_dir, cases = folders
    folder, oracle = cases["release"]
    ids, mask = _oracle_tokens(oracle, PROMPTS)
    monkeypatch.setattr(glyph, "BYTE_OFFSET", 4)
    with pytest.warns(UserWarning):
        bad = ByT5GlyphTokenizer.from_folders(folder, glyph_dir)(PROMPTS)
    assert len(_mismatches(bad, ids, mask)) == int(mask.any(1).sum())   # every tokenized row
    monkeypatch.undo()
    monkeypatch.setattr(glyph, "glyph_texts",
                        lambda p: [a or b for a, b in glyph._QUOTED.findall(p)])
    with pytest.warns(UserWarning):
        bad = ByT5GlyphTokenizer.from_folders(folder, glyph_dir)(PROMPTS)
    assert _mismatches(bad, ids, mask) == [1]       # the prompt with duplicates


def test_byt5_bad_folders(tmp_path, folders):
    glyph_dir, cases = folders
    with pytest.raises(VidaxError, match="no byT5 tokenizer folder"):
        ByT5GlyphTokenizer.from_folders(tmp_path / "missing", glyph_dir)
    with pytest.raises(VidaxError, match="color_idx.json: missing"):
        ByT5GlyphTokenizer.from_folders(cases["plain"][0], tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(VidaxError, match="tokenizer_config.json: the tokenizer config is not"):
        ByT5GlyphTokenizer.from_folders(bad, glyph_dir)
