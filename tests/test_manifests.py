"""The packaged manifests and release identification (vidax.manifests)."""

import gzip
import json
import time
from pathlib import Path

import pytest

from vidax.errors import RegistryError, VidaxError
from vidax.manifests import (DERIVED_FAMILIES, TensorSpec, all_manifests, get_manifest, identify,
                             load_manifest, shared_sets)

PACKAGED = Path(__file__).resolve().parents[1] / "vidax" / "data" / "manifests"
NAMES = [m.name for m in all_manifests()]

WAN_VAE = {"cosmos2_5/predict-2b__vae", "wan2_1/flf2v-14b__vae", "wan2_1/i2v-14b__vae",
           "wan2_1/t2v-1.3b__vae", "wan2_1/t2v-14b__vae", "wan2_2/i2v-a14b__vae",
           "wan2_2/t2v-a14b__vae"}
UMT5 = {f"wan2_1/{v}__text_encoder" for v in ("flf2v-14b", "i2v-14b", "t2v-1.3b", "t2v-14b")} | {
    f"wan2_2/{v}__text_encoder" for v in ("i2v-a14b", "t2v-a14b", "ti2v-5b")}


def _tensors(name):
    return dict(get_manifest(name).tensors)


def _names(part, *kinds):
    return [m.manifest.name for m in part.matches if m.kind in kinds]


# --- the packaged copy ---------------------------------------------------------------------

def test_packaged_copy_equals_shared_source(shared_manifests):
    """``shared_manifests`` (tests/conftest.py): ../shared absent fails unless
    VIDAX_NO_SHARED=1."""
    sources = {p.relative_to(shared_manifests).with_suffix("").as_posix(): p
               for p in shared_manifests.glob("*/*.json")}
    packaged = {p.relative_to(PACKAGED).as_posix().removesuffix(".json.gz"): p
                for p in PACKAGED.glob("*/*.json.gz")
                if p.parent.name not in DERIVED_FAMILIES}
    assert packaged.keys() == sources.keys(), "run scripts/sync_manifests.py"
    for name, src in sources.items():
        assert gzip.decompress(packaged[name].read_bytes()) == src.read_bytes(), name
    derived = [n for n in NAMES if n.split("/")[0] in DERIVED_FAMILIES]
    assert sorted(NAMES) == sorted([*sources, *derived])


def test_derived_manifests_say_how():
    derived = [m for m in all_manifests() if m.family in DERIVED_FAMILIES]
    assert len(derived) >= 10
    for m in derived:
        raw = json.loads(gzip.decompress((PACKAGED / f"{m.name}.json.gz").read_bytes()))
        assert raw.get("derived_from") and raw.get("confidence"), m.name


def test_load_manifest_reads_a_shared_file_like_the_packaged_copy(shared_manifests):
    m = load_manifest(shared_manifests / "wan2_1" / "t2v-14b__dit.json")
    assert m == get_manifest("wan2_1/t2v-14b__dit")
    assert m.tensors["patch_embedding.weight"] == TensorSpec((5120, 16, 1, 2, 2), "float32")


def test_every_manifest_is_consistent():
    assert len(NAMES) == len(set(NAMES)) > 100
    for m in all_manifests():
        assert m.name == f"{m.family}/{m.variant}__{m.component}"
        assert m.num_tensors == len(m.tensors)
        assert get_manifest(m.name) is m
        if m.prefix:
            assert all(k.startswith(m.prefix) for k in m.tensors)


def test_get_manifest_unknown_name_suggests():
    with pytest.raises(RegistryError, match="wan2_1/t2v-14b__dit"):
        get_manifest("wan2_1/t2v-14b_dit")


# --- load_manifest errors ------------------------------------------------------------------

@pytest.mark.parametrize("content, problem", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "a JSON object is expected"),
    (json.dumps({"family": "x"}), "field 'variant' is missing"),
])
def test_load_manifest_rejects_malformed_files(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(VidaxError, match=problem) as err:
        load_manifest(path)
    assert str(path) in str(err.value)


def test_load_manifest_names_bad_tensor_entries(tmp_path):
    data = {"family": "f", "variant": "v", "component": "c", "layout": "original",
            "container": "pth", "wrapper": None, "config": {}, "num_params": 1,
            "num_tensors": 3, "released_as": "r",
            "tensors": {"a": {"shape": [2, -1], "dtype": "float32"},
                        "b": {"shape": [2]}, "c": {"shape": [1], "dtype": "float32"}}}
    path = tmp_path / "f" / "v__c.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    with pytest.raises(VidaxError) as err:
        load_manifest(path)
    message = str(err.value)
    assert str(path) in message and "'a'" in message and "'b'" in message and "'c'" not in message
    data["tensors"] = {"c": {"shape": [1], "dtype": "float32"}}
    path.write_text(json.dumps(data))
    with pytest.raises(VidaxError, match="num_tensors is 3 but 'tensors' holds 1"):
        load_manifest(path)


def test_load_manifest_missing_file(tmp_path):
    with pytest.raises(VidaxError, match="cannot read"):
        load_manifest(tmp_path / "absent.json")


# --- identification: exact and shared sets ---------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_every_manifest_identifies_as_itself(name):
    ident = identify(get_manifest(name).tensors)
    assert len(ident.parts) == 1 and ident.kind == "exact"
    part = ident.parts[0]
    assert name in _names(part, "exact")
    group = next((set(g) for g in shared_sets() if name in g), {name})
    same_prefix = {m.manifest.name for m in part.matches if m.prefix_change is None}
    assert same_prefix == group
    assert get_manifest(name).release in ident.releases


def test_known_shared_sets():
    groups = [set(g) for g in shared_sets()]
    assert {"wan2_1/t2v-14b__dit", "wan2_2/t2v-a14b__dit"} in groups
    assert WAN_VAE in groups
    assert UMT5 in groups
    assert not any("wan2_1/i2v-14b__dit" in g for g in groups)


def test_wan_t2v_14b_dit_is_also_each_a14b_expert():
    ident = identify(_tensors("wan2_1/t2v-14b__dit"))
    assert _names(ident.parts[0], "exact") == ["wan2_1/t2v-14b__dit", "wan2_2/t2v-a14b__dit"]
    # the I2V expert has the same keys but a 36-channel patch embedding: not listed
    assert "wan2_2/i2v-a14b__dit" not in ident.summary()
    assert ident.releases == ("wan2_1/t2v-14b", "wan2_2/t2v-a14b")


def test_i2v_14b_is_one_manifest_for_480p_and_720p():
    ident = identify(_tensors("wan2_1/i2v-14b__dit"))
    (match,) = ident.parts[0].matches
    assert match.kind == "exact"
    assert "480P" in match.manifest.released_as and "720P" in match.manifest.released_as


def test_vae_aliases_are_grouped():
    ident = identify(_tensors("wan2_1/t2v-14b__vae"))
    assert set(_names(ident.parts[0], "exact")) == WAN_VAE
    assert "cosmos2_5/predict-2b__vae" in ident.summary()
    assert "exact match, original layout (7 releases share these tensors)" in ident.summary()


# --- identification: repacks and near matches ---------------------------------------------

def test_dtype_only_repack():
    tensors = {k: (s.shape, "float16") for k, s in _tensors("wan2_1/t2v-14b__dit").items()}
    ident = identify(tensors)
    assert ident.kind == "dtype"
    match = ident.parts[0].matches[0]
    assert match.dtype_changes == (("float32", "float16", 1095),)
    assert "another dtype" in ident.summary() and "float16 here" in ident.summary()


def test_safetensors_dtype_codes_are_understood():
    tensors = {k: (s.shape, "F32") for k, s in _tensors("wan2_1/t2v-14b__dit").items()}
    assert identify(tensors).kind == "exact"


def test_one_tensor_removed_names_it():
    tensors = _tensors("wan2_1/t2v-14b__dit")
    del tensors["blocks.3.ffn.0.bias"]
    ident = identify(tensors)
    assert ident.kind == "near" and ident.releases == () and ident.candidates() == []
    best = ident.parts[0].matches[0]
    assert best.manifest.name == "wan2_1/t2v-14b__dit"
    assert best.missing == ("blocks.3.ffn.0.bias",) and not best.unexpected
    assert "wan2_1/t2v-14b__dit, wan2_2/t2v-a14b__dit (99.9% of keys): 1 tensor missing: " \
           "blocks.3.ffn.0.bias" in ident.summary()


def test_one_tensor_added_names_it():
    tensors = _tensors("wan2_1/t2v-14b__dit")
    tensors["blocks.3.ffn.extra.weight"] = ((4, 4), "float32")
    best = identify(tensors).parts[0].matches[0]
    assert best.kind == "near" and best.unexpected == ("blocks.3.ffn.extra.weight",)
    assert not best.missing and not best.mis_shaped


def test_one_tensor_reshaped_names_it():
    tensors = _tensors("wan2_1/t2v-1.3b__dit")
    tensors["head.head.weight"] = ((128, 1536), "float32")
    ident = identify(tensors)
    best = ident.parts[0].matches[0]
    assert best.manifest.name == "wan2_1/t2v-1.3b__dit"
    assert best.mis_shaped == (("head.head.weight", (128, 1536), (64, 1536)),)
    assert ("1 tensor mis-shaped: head.head.weight [128, 1536] (release [64, 1536])"
            in ident.summary())


def test_unrelated_tensors_are_unknown():
    ident = identify({"foo.weight": ((3, 3), "float32")})
    assert ident.kind == "unknown" and not ident.parts[0].matches
    assert identify({}).kind == "unknown"


# --- identification: several components in one file ---------------------------------------

def _single_file(release, components):
    tensors = {}
    for c in components:
        tensors.update(_tensors(f"{release}__{c}"))
    return tensors


def test_ltx2_single_file_reports_every_component(tmp_path):
    tensors = _single_file("ltx2_5/2.0-19b-dev",
                           ("dit", "text_projection", "vae", "audio_vae", "vocoder"))
    path = tmp_path / "Lightricks" / "LTX-2" / "ltx-2-19b-dev.safetensors"
    ident = identify(tensors, path=str(path))
    assert ident.kind == "exact"
    assert {p.prefix: p.matches[0].manifest.name for p in ident.parts} == {
        "model.diffusion_model.": "ltx2_5/2.0-19b-dev__dit",
        "text_embedding_projection.": "ltx2_5/2.0-19b-dev__text_projection",
        "vae.": "ltx2_5/2.0-19b-dev__vae",
        "audio_vae.": "ltx2_5/2.0-19b-dev__audio_vae",
        "vocoder.": "ltx2_5/2.0-19b-dev__vocoder"}
    # dev and distilled share every key; the file name puts dev first
    assert ident.releases == ("ltx2_5/2.0-19b-dev", "ltx2_5/2.0-19b-distilled")
    assert ident.parts[0].matches[0].likely
    assert "5 components in one file" in ident.summary()
    # the audio VAE alone is in five releases; the other components narrow it to this one
    audio = next(p for p in ident.parts if p.prefix == "audio_vae.")
    assert len(audio.matches) == 5
    assert [m.manifest.variant for m in audio.matches if m.likely] == ["2.0-19b-dev",
                                                                        "2.0-19b-distilled"]
    # "Lightricks/LTX-2.5" in the 2.5 release does not count for a path ".../Lightricks/LTX-2/"
    assert not any(m.reasons for m in audio.matches if m.manifest.variant == "2.5")


def test_ltx_video_single_file_with_one_vae_tensor_missing():
    tensors = _single_file("ltx_video/0.9.8-13b-dev", ("dit", "vae"))
    del tensors["vae.decoder.conv_in.conv.bias"]
    ident = identify(tensors)
    dit, vae = ident.parts
    assert dit.kind == "exact" and vae.kind == "near" and ident.kind == "near"
    assert vae.matches[0].missing == ("vae.decoder.conv_in.conv.bias",)
    assert vae.matches[0].manifest.variant in ("0.9.8-13b-dev", "0.9.8-13b-distilled")


def test_component_under_another_prefix():
    tensors = {"model.diffusion_model." + k: v for k, v in _tensors("wan2_1/t2v-14b__dit").items()}
    ident = identify(tensors)
    assert ident.kind == "exact"
    match = ident.parts[0].matches[0]
    assert match.prefix_change == ("model.diffusion_model.", "")
    assert "released without a prefix" in ident.summary()


def test_extracted_ltx_vae_matches_the_standalone_release():
    vae = get_manifest("ltx2_5/2.3-22b-dev__vae")
    ident = identify({k.removeprefix(vae.prefix): v for k, v in vae.tensors.items()})
    first = ident.parts[0].matches[0]
    assert first.manifest.name == "ltx2_5/2.5__video_vae_conv" and first.prefix_change is None
    assert {m.manifest.name for m in ident.parts[0].matches if m.prefix_change} == {
        "ltx2_5/2.3-22b-dev__vae", "ltx2_5/2.3-22b-distilled__vae"}


# --- identification: folder context ----------------------------------------------------------

def test_high_noise_model_folder_prefers_wan22_a14b(tmp_path):
    folder = tmp_path / "high_noise_model"
    folder.mkdir()
    tensors = _tensors("wan2_1/t2v-14b__dit")
    plain = identify(tensors)
    assert _names(plain.parts[0], "exact")[0] == "wan2_1/t2v-14b__dit"
    ident = identify(tensors, path=str(folder / "diffusion_pytorch_model.safetensors.index.json"))
    first, second = ident.parts[0].matches
    assert first.manifest.name == "wan2_2/t2v-a14b__dit" and first.likely
    assert any("high_noise_model/" in r for r in first.reasons)
    assert second.manifest.name == "wan2_1/t2v-14b__dit" and second.kind == "exact"
    assert ident.releases[0] == "wan2_2/t2v-a14b"
    assert [m.name for m in ident.candidates()] == ["wan2_2/t2v-a14b__dit", "wan2_1/t2v-14b__dit"]


def test_file_name_narrows_the_vae_aliases(tmp_path):
    ident = identify(_tensors("wan2_1/t2v-14b__vae"), path=str(tmp_path / "tokenizer.pth"))
    first = ident.parts[0].matches[0]
    assert first.manifest.name == "cosmos2_5/predict-2b__vae" and first.likely
    assert len(ident.parts[0].matches) == len(WAN_VAE)


def test_config_json_beside_the_file_narrows(tmp_path):
    target = get_manifest("hunyuan_video1_5/720p_t2v__dit")
    (tmp_path / "config.json").write_text(json.dumps(target.config))
    ident = identify(target.tensors, path=str(tmp_path / "diffusion_pytorch_model.safetensors"))
    matches = ident.parts[0].matches
    assert len(matches) == 8 and all(m.kind == "exact" for m in matches)
    assert matches[0].manifest is target and matches[0].likely
    assert all(m.conflicts for m in matches[1:])
    assert any("ideal_task='t2v'" in c for m in matches for c in m.conflicts)


def test_config_json_of_another_component_is_ignored(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(get_manifest("wan2_1/t2v-14b__dit").config))
    ident = identify(_tensors("wan2_1/t2v-14b__vae"), path=str(tmp_path / "Wan2.1_VAE.pth"))
    assert not any(m.conflicts for m in ident.parts[0].matches)


def test_unreadable_config_json_is_noted(tmp_path):
    (tmp_path / "config.json").write_text("{oops")
    ident = identify(_tensors("wan2_1/t2v-14b__vae"), path=str(tmp_path / "Wan2.1_VAE.pth"))
    assert ident.kind == "exact" and "unreadable" in ident.context[0]


# --- output and speed -------------------------------------------------------------------------

def test_to_json_is_serialisable():
    tensors = _single_file("ltx_video/0.9.8-13b-dev", ("dit", "vae"))
    del tensors["model.diffusion_model.scale_shift_table"]
    ident = identify(tensors, path="x/ltxv-13b-0.9.8-dev.safetensors")
    data = json.loads(json.dumps(ident.to_json()))
    assert data["kind"] == "near" and len(data["parts"]) == 2
    near = data["parts"][0]["matches"][0]
    assert near["missing"] == ["model.diffusion_model.scale_shift_table"] and near["likely"]


def test_identify_is_fast():
    tensors = _tensors("ltx2_5/2.3-22b-dev__dit")
    tensors.popitem()
    identify(tensors)  # warm the index
    start = time.perf_counter()
    for _ in range(5):
        identify(tensors)
    assert (time.perf_counter() - start) / 5 < 0.25
