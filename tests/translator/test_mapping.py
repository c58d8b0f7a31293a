"""The declarative mapper framework: every rule kind on small in-memory state dicts."""

import numpy as np
import pytest

from vidax.errors import MappingError
from vidax.translator.mapping import (
    Dequantize,
    Ignore,
    Mapper,
    Merge,
    PrefixView,
    Rename,
    Split,
    Tie,
    Transform,
)


def _sd(**shapes):
    rng = np.random.default_rng(0)
    return {
        k.replace("__", "."): rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()
    }


def _materialize(mapper, sd):
    plan = mapper.plan(sd)
    return plan, {p: t.materialize(sd) for p, t in plan.targets.items()}


def test_rename_and_auto_layout():
    sd = _sd(
        ffn__0__weight=(8, 4),
        ffn__0__bias=(8,),
        norm__weight=(4,),
        conv__weight=(6, 4, 1, 2, 2),
        blocks__0__modulation=(1, 6, 4),
    )
    m = Mapper("t", (Rename(r"^ffn\.0\.", "ffn.fc1."),))
    plan, out = _materialize(m, sd)
    assert set(out) == {
        "ffn.fc1.kernel",
        "ffn.fc1.bias",
        "norm.scale",
        "conv.kernel",
        "blocks.0.modulation",
    }
    np.testing.assert_array_equal(out["ffn.fc1.kernel"], sd["ffn.0.weight"].T)
    np.testing.assert_array_equal(out["conv.kernel"], sd["conv.weight"].transpose(2, 3, 4, 1, 0))
    assert plan.targets["conv.kernel"].shape == (1, 2, 2, 4, 6)
    assert plan.consumed == set(sd)


def test_renames_apply_in_order():
    m = Mapper("t", (Rename(r"a", "b"), Rename(r"b", "c")))
    assert m.rename("a.weight") == "c.weight"


def test_split_fused_qkv():
    sd = _sd(attn__qkv__weight=(12, 4), attn__qkv__bias=(12,))
    m = Mapper("t", (Split(r"(.*)\.qkv\.(weight|bias)", (r"\1.q.\2", r"\1.k.\2", r"\1.v.\2")),))
    plan, out = _materialize(m, sd)
    for i, part in enumerate("qkv"):
        np.testing.assert_array_equal(
            out[f"attn.{part}.kernel"], sd["attn.qkv.weight"][4 * i : 4 * i + 4].T
        )
        np.testing.assert_array_equal(
            out[f"attn.{part}.bias"], sd["attn.qkv.bias"][4 * i : 4 * i + 4]
        )


def test_split_uneven_and_bad_sizes():
    sd = _sd(lin1__weight=(10, 4))
    m = Mapper("t", (Split(r"lin1\.weight", ("a.weight", "b.weight"), sizes=(3, 7)),))
    _, out = _materialize(m, sd)
    np.testing.assert_array_equal(out["b.kernel"], sd["lin1.weight"][3:].T)
    bad = Mapper("t", (Split(r"lin1\.weight", ("a.weight", "b.weight"), sizes=(3, 3)),))
    with pytest.raises(MappingError, match="lin1.weight"):
        bad.plan(sd)


def test_merge_and_missing_part():
    sd = _sd(to_q__weight=(4, 4), to_k__weight=(4, 4), to_v__weight=(4, 4))
    m = Mapper("t", (Merge(r"to_(?P<part>[qkv])\.weight", "qkv.weight", ("q", "k", "v")),))
    _, out = _materialize(m, sd)
    np.testing.assert_array_equal(
        out["qkv.kernel"],
        np.concatenate([sd["to_q.weight"], sd["to_k.weight"], sd["to_v.weight"]]).T,
    )
    del sd["to_k.weight"]
    with pytest.raises(MappingError, match="needs parts"):
        m.plan(sd)


def test_tie_feeds_two_parameters():
    sd = _sd(shared__weight=(10, 4))
    m = Mapper(
        "t",
        (
            Tie(r"shared\.weight", "encoder.embed_tokens.weight"),
            Transform(r"(shared|embed_tokens)\.weight$", layout="embedding", leaf="embedding"),
        ),
    )
    plan, out = _materialize(m, sd)
    assert set(out) == {"shared.embedding", "encoder.embed_tokens.embedding"}
    np.testing.assert_array_equal(out["encoder.embed_tokens.embedding"], sd["shared.weight"])
    assert plan.consumed == {"shared.weight"}


def test_transform_reshape_and_cast():
    sd = _sd(res__gamma=(8, 1, 1, 1))
    m = Mapper(
        "t", (Transform(r"\.gamma$", reshape=lambda s: (s[0],), leaf="scale", cast="bfloat16"),)
    )
    plan, out = _materialize(m, sd)
    assert out["res.scale"].shape == (8,) and str(out["res.scale"].dtype) == "bfloat16"
    assert plan.targets["res.scale"].dtype == "bfloat16"


def test_ignore_records_reason():
    sd = _sd(a__weight=(2, 2), a___extra_state=(1,))
    m = Mapper("t", (Ignore(r".*\._extra_state", "TE metadata"),))
    plan = m.plan(sd)
    assert plan.ignored == {"a._extra_state": "TE metadata"}
    assert set(plan.targets) == {"a.kernel"}


def test_collision_is_an_error():
    sd = _sd(a__weight=(2, 2), b__weight=(2, 2))
    m = Mapper("t", (Rename(r"^b\.", "a."),))
    with pytest.raises(MappingError, match="both map to a.kernel"):
        m.plan(sd)


def test_prefix_view():
    sd = _sd(vae__conv__weight=(2, 2, 3), model__diffusion_model__x__weight=(2, 2))
    view = PrefixView(sd, "vae.")
    assert list(view) == ["conv.weight"] and view.outside == ["model.diffusion_model.x.weight"]
    plan = Mapper("t", ()).plan(view)
    np.testing.assert_array_equal(
        plan.targets["conv.kernel"].materialize(view), sd["vae.conv.weight"].transpose(2, 1, 0)
    )


def test_materialize_is_a_view_until_cast():
    sd = _sd(lin__weight=(4, 3))
    plan = Mapper("t", ()).plan(sd)
    out = plan.targets["lin.kernel"].materialize(sd)
    assert np.shares_memory(out, sd["lin.weight"])
    assert plan.targets["lin.kernel"].materialize(sd, dtype="float16").dtype == np.float16


def test_copies_on_host_says_whether_materialize_copies():
    """``vidax.load`` lets one copying target at a time hold a host buffer: the prediction
    must never miss a copy materialize makes, for any rule kind."""
    sd = _sd(lin__weight=(4, 3), qkv__weight=(6, 3), to_q__weight=(4, 4), to_k__weight=(4, 4),
             res__gamma=(4, 1, 1, 1), conv__weight=(2, 3, 1, 2, 2))
    sd["f32.weight"] = sd.pop("lin.weight")
    m = Mapper("t", (Split(r"qkv\.weight", ("a.weight", "b.weight"), axis=0),
                     Merge(r"to_(?P<part>[qk])\.weight", "qk.weight", ("q", "k")),
                     Transform(r"\.gamma$", reshape=lambda s: (s[0],), leaf="scale")))
    plan = m.plan(sd)
    for dtype in (None, "float32", "bfloat16"):
        for path, target in plan.targets.items():
            out = target.materialize(sd, dtype=dtype)
            copied = not any(np.shares_memory(out, sd[k]) for k in target.keys)
            predicted = target.copies_on_host(sd, dtype)
            assert predicted or not copied, (path, dtype)      # never misses a copy
            if target.reshape is None:                          # and is exact but for reshapes
                assert predicted == copied, (path, dtype)
    assert not plan.targets["conv.kernel"].copies_on_host(sd)      # a permutation is a view
    assert plan.targets["qk.kernel"].copies_on_host(sd)             # a merge concatenates


def test_dequantize_fp8_with_scale():
    import ml_dtypes

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(ml_dtypes.float8_e4m3fn)
    sd = {
        "lin.weight": w,
        "lin.scale_weight": np.array(0.5, np.float32),
        "norm.weight": np.ones(3, np.float32),
    }
    m = Mapper("t", (Dequantize(r"(.*)\.weight", r"\1.scale_weight", "float32"),))
    plan, out = _materialize(m, sd)
    assert set(out) == {"lin.kernel", "norm.scale"}
    np.testing.assert_array_equal(out["lin.kernel"], (w.astype(np.float32) * 0.5).T)
    assert plan.consumed == set(sd)
    del sd["lin.scale_weight"]
    with pytest.raises(MappingError, match="lin.scale_weight"):
        m.plan(sd)
