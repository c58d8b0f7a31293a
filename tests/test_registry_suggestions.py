"""Misspelt registry names (issue #11): the error names the closest registered names and the
valid ones compactly, never a dump of the whole registry."""

from __future__ import annotations

import pytest

from vidax import registry
from vidax.errors import RegistryError

# The old message listed every registered (model_type, component, layout): ~1,400 characters.
COMPACT = 420


def _message(fn, *args) -> str:
    with pytest.raises(RegistryError) as info:
        fn(*args)
    return str(info.value)


@pytest.mark.parametrize("typed", ["wan21", "wan2.1", "Wan2_1", "WAN2-1", "wan2_1 "])
def test_misspelt_model_type_suggests_wan2_1(typed):
    msg = _message(registry.get, typed, "dit")
    assert "did you mean 'wan2_1'?" in msg, msg
    assert "'wan2_2'" not in msg.split(";")[0]  # one spelling away: that one alone
    assert len(msg) < COMPACT, msg
    # the valid names, listed once each, no per-component dump
    assert msg.count("wan2_2") == 1 and "text_encoder" not in msg


def test_unknown_model_type_far_from_everything_lists_the_types():
    msg = _message(registry.get, "nosuch", "dit")
    assert "did you mean" not in msg
    assert "no model registered for model_type 'nosuch'" in msg
    for name in ("wan2_1", "ltx_video", "cogvideox", "hunyuan_video1_5"):
        assert name in msg
    assert len(msg) < COMPACT


def test_close_model_type_by_difflib():
    msg = _message(registry.get, "cogvidex", "dit", "diffusers")
    assert "did you mean 'cogvideox'?" in msg


@pytest.mark.parametrize("component,layout,expected", [
    ("ditt", None, "did you mean 'dit'?"),
    ("Text-Encoder", None, "did you mean 'text_encoder'?"),
    ("vae_difusers", None, "'vae_diffusers'"),
])
def test_misspelt_component(component, layout, expected):
    msg = _message(registry.get, "wan2_1", component, layout)
    assert expected in msg, msg
    assert "its components (layouts): dit (original, diffusers); vae (original, diffusers)" in msg
    assert len(msg) < COMPACT


def test_misspelt_layout():
    msg = _message(registry.get, "wan2_1", "dit", "difusers")
    assert msg == ("wan2_1 dit has no layout 'difusers' (did you mean 'diffusers'?); its "
                   "layouts: original, diffusers")


@pytest.mark.parametrize("typed,expected", [
    ("t2v-1.3B", "'t2v-1.3b'"), ("t2v_1.3b", "'t2v-1.3b'"), ("t2v13b", "'t2v-1.3b'"),
    ("flf2v-14", "'flf2v-14b'"), ("Tiny", "'tiny'"),
])
def test_misspelt_variant(typed, expected):
    msg = _message(registry.get("wan2_1", "dit").make_config, typed)
    assert f"(did you mean {expected}" in msg, msg  # the closest first
    assert "its variants: t2v-1.3b, t2v-14b, i2v-14b, flf2v-14b (and 'tiny')" in msg


def test_resolve_counts_the_alias_table():
    # wan2_2's text encoder is Wan2.1's, registered only through the alias table
    spec, variant = registry.resolve("wan2_2", "ti2v-5b", "text_encoder")
    assert (spec.model_type, variant) == ("wan2_1", "t2v-14b")
    msg = _message(registry.resolve, "wan2_2", "ti2v-5b", "text_encodr")
    assert "did you mean 'text_encoder'?" in msg, msg
    # a component known only as an alias, for another variant than the one named
    msg = _message(registry.resolve, "cosmos2_5", "predict-2b-post", "vae")
    assert "cosmos2_5 vae (original) is known only for the variants predict-2b" in msg, msg
    assert "did you mean 'predict-2b'?" in msg
    msg = _message(registry.resolve, "wan2.2", "ti2v-5b", "dit")
    assert "did you mean 'wan2_2'?" in msg


def test_suggest():
    names = ["wan2_1", "wan2_2", "ltx_video"]
    assert registry.suggest("wan2.1", names) == ["wan2_1"]
    assert sorted(registry.suggest("wan2", names)) == ["wan2_1", "wan2_2"]
    assert registry.suggest("ltxvideo", names) == ["ltx_video"]
    assert registry.suggest("zzz", names) == []
    assert registry.did_you_mean("zzz", names) == ""
