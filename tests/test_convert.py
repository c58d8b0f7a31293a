"""``vidax convert``: a Flax-layout folder that ``vidax.load`` takes without translating, written
atomically; nothing of the user's replaced or deleted, an impossible ``--out`` refused before a
weight is read, leftovers of killed runs cleaned up (``kill -9`` at every step, in
subprocesses)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flax import nnx

import vidax
from tests.sharding.common import small_config, write_authors_dit
from vidax import cli, convert, loading, sharding
from vidax.errors import NonFiniteWeightsError, VidaxError
from vidax.models.wan2_1.dit import WanDiTConfig
from vidax.translator.io import converted, open_checkpoint
from vidax.translator.mapping import Target
from vidax.translator.verify import flat_params


@pytest.fixture(scope="module")
def authors_file(tmp_path_factory):
    cfg = WanDiTConfig.tiny()
    path = tmp_path_factory.mktemp("convert") / "diffusion_pytorch_model.safetensors"
    return cfg, write_authors_dit(cfg, path)


def _arrays(model: nnx.Module) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in flat_params(model).items()}


def _cli_convert(path, out, *extra) -> int:
    return cli.main(["convert", "wan2_1", "--component", "dit", "--variant", "tiny",
                     "--checkpoint", str(path), "--out", str(out), *extra])


def test_convert_then_load_skips_translation(authors_file, tmp_path, monkeypatch, capsys):
    cfg, path = authors_file
    out = tmp_path / "wan_dit_flax"
    assert _cli_convert(path, out) == 0
    assert "vidax.load of this folder skips translation" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted([converted.MARKER, converted.WEIGHTS])
    info = json.loads((out / converted.MARKER).read_text())
    assert (info["model_type"], info["component"], info["variant"]) == ("wan2_1", "dit", "tiny")
    assert WanDiTConfig.from_dict(info["config"]) == cfg
    assert info["source"][0]["file"] == path.name and len(info["source"][0]["sha256"]) == 64
    with open_checkpoint(out / converted.WEIGHTS) as ckpt:
        assert "blocks.0.self_attn.q.kernel" in ckpt and ckpt.metadata["vidax"] == "flax-layout"

    want = _arrays(vidax.load("wan2_1", "dit", path, config=cfg))

    def no_mapper(*args, **kwargs):
        raise AssertionError("a converted folder must not go through the mapper")

    monkeypatch.setattr(loading, "verify_tensors", no_mapper)
    monkeypatch.setattr(loading, "_detect_config", no_mapper)
    got = _arrays(vidax.load("wan2_1", "dit", out))              # config from the marker
    assert got.keys() == want.keys()
    assert all(np.array_equal(got[k], want[k]) for k in want)
    mesh = sharding.make_mesh("fsdp=4,tp=2")
    sharded = _arrays(vidax.load("wan2_1", "dit", out, mesh=mesh))
    assert all(np.array_equal(sharded[k], want[k]) for k in want)


def test_convert_casts_on_the_host(authors_file, tmp_path):
    cfg, path = authors_file
    out = convert.convert("wan2_1", "dit", path, tmp_path / "bf16", config=cfg,
                          dtype="bfloat16")
    got = _arrays(vidax.load("wan2_1", "dit", out))
    want = _arrays(vidax.load("wan2_1", "dit", path, config=cfg, dtype="bfloat16"))
    assert {str(a.dtype) for a in got.values()} == {"bfloat16"}
    assert all(np.array_equal(got[k], want[k]) for k in want)
    # every spelling of the vocabulary (vidax.dtypes), the CLI's string included
    short = convert.convert("wan2_1", "dit", path, tmp_path / "short", config=cfg,
                            dtype="bf16")
    assert (short / converted.WEIGHTS).read_bytes() == (out / converted.WEIGHTS).read_bytes()
    assert _cli_convert(path, tmp_path / "cli16", "--dtype", "fp16") == 0
    assert {str(a.dtype) for a in _arrays(vidax.load("wan2_1", "dit",
                                                     tmp_path / "cli16")).values()} == {"float16"}


def test_the_marker_gives_back_the_exact_config_of_every_component():
    """Read back field by field (tuples, ``X | None``, nested dataclasses), not through the
    family's ``from_dict``, which reads the authors' keys: before, a converted LTX-Video,
    diffusers-layout Wan, SigLIP, Gemma, ... folder did not load back."""
    from vidax import registry

    checked = 0
    for spec in registry.specs():
        for variant in ("tiny", *spec.variants):
            cfg = spec.make_config(variant)
            info = json.loads(json.dumps(converted.config_record(cfg)))
            assert converted.stored_config("f", spec, info) == cfg, (spec.key, variant)
            checked += 1
    assert checked > 100
    spec = registry.get("wan2_1", "dit")
    info = converted.config_record(WanDiTConfig.tiny())
    with pytest.raises(VidaxError, match="f/vidax_convert.json: written for a config of class "
                                         "os.PathLike.*convert again"):
        converted.stored_config("f", spec, info | {"config_class": "os.PathLike"})
    with pytest.raises(VidaxError, match=r"does not fit this vidax's WanDiTConfig \(unknown "
                                         r"fields gone\); convert again"):
        converted.stored_config("f", spec, info | {"config": info["config"] | {"gone": 1}})
    with pytest.raises(VidaxError, match="does not fit"):
        converted.stored_config("f", spec, info | {"config": info["config"] | {
            "patch_size": [1, 2]}})
    old = {"config": info["config"]}                 # a marker written before config_class
    assert converted.stored_config("f", spec, old) == WanDiTConfig.tiny()


def test_a_bad_dtype_is_refused_before_anything(authors_file, tmp_path, monkeypatch, capsys):
    cfg, path = authors_file
    monkeypatch.setattr(convert, "open_checkpoint", _never)
    out = tmp_path / "new" / "out"
    for bad in ("float33", "int8", np.int64):
        with pytest.raises(VidaxError, match=r"is not one vidax accepts.*accepted: bf16 / "
                                             r"bfloat16; fp16"):
            convert.convert("wan2_1", "dit", path, out, config=cfg, dtype=bad)
    assert _cli_convert(path, out, "--dtype", "bf61") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'bf61' is not one vidax accepts" in err
    assert "accepted: bf16 / bfloat16" in err and "internal" not in err
    assert list(tmp_path.iterdir()) == []              # no parent made, nothing written


def test_a_converted_folder_is_checked(authors_file, tmp_path):
    cfg, path = authors_file
    out = convert.convert("wan2_1", "dit", path, tmp_path / "c", config=cfg)
    with pytest.raises(VidaxError, match=r"converted from a wan2_1 dit checkpoint \(original "
                                         r"layout\), not wan2_1 vae"):
        vidax.load("wan2_1", "vae", out)
    with pytest.raises(VidaxError, match="was converted at config"):
        vidax.load("wan2_1", "dit", out, config=small_config())
    with pytest.raises(VidaxError, match=r"exists \(a vidax cache folder\); pass overwrite"):
        convert.convert("wan2_1", "dit", path, out, config=cfg)
    assert convert.convert("wan2_1", "dit", path, out, config=cfg, overwrite=True) == out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]      # the old copy is gone


def _never(*args, **kwargs):
    raise AssertionError("no checkpoint may be opened before --out and --dtype are checked")


def test_non_finite_weights_are_refused_while_writing(authors_file, tmp_path):
    import safetensors.numpy

    cfg, path = authors_file
    tensors = safetensors.numpy.load_file(path)
    key = "blocks.1.ffn.0.weight"
    nan = dict(tensors)
    nan[key] = tensors[key].copy()
    nan[key][3, :5] = np.nan
    safetensors.numpy.save_file(nan, tmp_path / "nan.safetensors")
    with pytest.raises(NonFiniteWeightsError, match=rf"nan.safetensors: .*hold NaN or Inf "
                                                    rf"values.*{key} \(5 of 8,192 values\)"):
        convert.convert("wan2_1", "dit", tmp_path / "nan.safetensors", tmp_path / "out",
                        config=cfg)
    # finite as stored, Inf after the cast: said so
    big = dict(tensors)
    big[key] = tensors[key] * 1e6
    safetensors.numpy.save_file(big, tmp_path / "big.safetensors")
    with pytest.raises(NonFiniteWeightsError, match="after the cast to float16"):
        convert.convert("wan2_1", "dit", tmp_path / "big.safetensors", tmp_path / "out",
                        config=cfg, dtype="fp16")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.safetensors", "nan.safetensors"]


def _tree(path: Path) -> dict[str, str]:
    """Everything under ``path`` (itself included), links not followed: kind and bytes."""
    path = Path(path)
    found = {}
    if path.is_symlink() or not path.is_dir():
        todo = [(path, "")]
    else:
        todo = []
        found["."] = "dir"
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                full = Path(root) / name
                todo.append((full, str(full.relative_to(path))))
    for full, rel in todo:
        if full.is_symlink():
            found[rel] = "link:" + os.readlink(full)
        elif full.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = f"{oct(full.stat().st_mode)} " + hashlib.sha256(
                full.read_bytes()).hexdigest()
    return found


def _user_folder(path: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    (path / "sub").mkdir(parents=True)
    for name in ("notes.txt", "sub/data.bin", "sub/model.safetensors"):
        (path / name).write_bytes(rng.bytes(int(rng.integers(1, 5000))))
    return path


def _cases(tmp_path: Path, cache: Path) -> dict[str, Path]:
    """Things at --out that ``overwrite`` must not replace."""
    cases = {"user folder": _user_folder(tmp_path / "user")}
    (tmp_path / "file").write_bytes(os.urandom(300))
    cases["regular file"] = tmp_path / "file"
    weights_only = tmp_path / "weights_only"          # no marker: not known to be vidax's
    weights_only.mkdir()
    (weights_only / converted.WEIGHTS).write_bytes((cache / converted.WEIGHTS).read_bytes())
    cases["weights without a marker"] = weights_only
    mixed = tmp_path / "mixed"                        # a cache the user added a file to
    mixed.mkdir()
    for name in (converted.WEIGHTS, converted.MARKER):
        (mixed / name).write_bytes((cache / name).read_bytes())
    (mixed / "README").write_text("mine")
    cases["cache with a user file"] = mixed
    fake = tmp_path / "fake_marker"
    fake.mkdir()
    (fake / converted.MARKER).write_text("my own notes, not json")
    cases["a marker that is not one"] = fake
    (tmp_path / "link_to_cache").symlink_to(cache)
    cases["link to a cache"] = tmp_path / "link_to_cache"
    (tmp_path / "link_to_user").symlink_to(tmp_path / "user")
    cases["link to a user folder"] = tmp_path / "link_to_user"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    cases["dangling link"] = tmp_path / "dangling"
    return cases


def test_overwrite_replaces_only_a_vidax_folder(authors_file, tmp_path, capsys):
    cfg, path = authors_file
    cache = convert.convert("wan2_1", "dit", path, tmp_path / "cache", config=cfg)
    cases = _cases(tmp_path, cache)
    before = {name: _tree(p) for name, p in cases.items()}
    cache_before = _tree(cache)
    listing = sorted(os.listdir(tmp_path))
    for name, out in cases.items():
        with pytest.raises(VidaxError, match=r"not a folder vidax convert wrote, so it is left "
                                             r"untouched \(--overwrite replaces only those\)"):
            convert.convert("wan2_1", "dit", path, out, config=cfg, overwrite=True)
        with pytest.raises(VidaxError, match="left untouched"):
            convert.convert("wan2_1", "dit", path, out, config=cfg)
        assert _cli_convert(path, out, "--overwrite") == 1, name
        err = capsys.readouterr().err
        assert err.startswith("error: ") and str(out) in err and "internal" not in err, name
    assert {name: _tree(p) for name, p in cases.items()} == before       # byte for byte
    assert _tree(cache) == cache_before
    assert sorted(os.listdir(tmp_path)) == listing                       # nothing beside

    # what it does replace: an empty folder, and a cache (a stray lock file in it included)
    (tmp_path / "empty").mkdir()
    assert convert.convert("wan2_1", "dit", path, tmp_path / "empty", config=cfg,
                           overwrite=True) == tmp_path / "empty"
    (cache / converted.LOCK).touch()
    convert.convert("wan2_1", "dit", path, cache, config=cfg, overwrite=True, dtype="fp16")
    assert sorted(os.listdir(cache)) == sorted([converted.MARKER, converted.WEIGHTS])
    assert converted.read_info(cache)["dtype"] == "float16"
    assert sorted(os.listdir(tmp_path)) == sorted(listing + ["empty"])


def test_what_appears_at_out_while_converting_is_kept(authors_file, tmp_path, monkeypatch):
    cfg, path = authors_file
    out = convert.convert("wan2_1", "dit", path, tmp_path / "out", config=cfg)
    real = convert._write_safetensors

    def user_writes(where):
        def write(*args, **kwargs):
            real(*args, **kwargs)
            where()
        return write

    # a file put into the old cache after it was checked
    monkeypatch.setattr(convert, "_write_safetensors",
                        user_writes(lambda: (out / "mine.txt").write_text("keep me")))
    with pytest.raises(VidaxError, match=r"changed while converting: it is now a folder holding "
                                         r"1 entry vidax does not write \(mine.txt\).*left "
                                         r"untouched"):
        convert.convert("wan2_1", "dit", path, out, config=cfg, overwrite=True)
    assert (out / "mine.txt").read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["out"]      # our partial folder went, nothing else
    # a folder made at a free --out meanwhile
    fresh = tmp_path / "fresh"
    monkeypatch.setattr(convert, "_write_safetensors",
                        user_writes(lambda: _user_folder(fresh)))
    want = _tree(_user_folder(tmp_path / "same"))
    with pytest.raises(VidaxError, match=r"changed while converting: it is now a folder holding "
                                         r"2 entries vidax does not write \(notes.txt, sub/\)"):
        convert.convert("wan2_1", "dit", path, fresh, config=cfg)
    assert _tree(fresh) == want
    # another convert holds the old folder's lock
    (out / "mine.txt").unlink()
    monkeypatch.setattr(convert, "_write_safetensors", real)
    fd = os.open(out / converted.LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(VidaxError, match="another vidax convert is writing"):
            convert.convert("wan2_1", "dit", path, out, config=cfg, overwrite=True)
    finally:
        os.close(fd)
    assert sorted(os.listdir(tmp_path)) == ["fresh", "out", "same"]
    # a file put into the old folder after it was moved aside survives there, with a warning
    real_remove = convert._empty_and_remove

    def late_file(folder, lock):
        if ".old-" in folder.name:
            (folder / "late.txt").write_text("late")
        return real_remove(folder, lock)

    monkeypatch.setattr(convert, "_empty_and_remove", late_file)
    with pytest.warns(UserWarning, match="holds something vidax did not write, so it was kept"):
        convert.convert("wan2_1", "dit", path, out, config=cfg, overwrite=True)
    (old,) = [p for p in tmp_path.iterdir() if p.name.startswith(".out.old-")]
    assert (old / "late.txt").read_text() == "late" and converted.is_converted(out)


def test_stale_partial_folders_are_cleaned_up_safely(authors_file, tmp_path):
    cfg, path = authors_file
    out = tmp_path / "out"
    stale = {".out.partial-0badc0de": {converted.WEIGHTS: b"half a file"},
             ".out.partial-00000001": {},                       # killed right after mkdir
             ".out.partial-00000002": {converted.LOCK: b""},
             ".out.old-0123abcd": {converted.WEIGHTS: b"w", converted.MARKER: b'{"format_'
                                   b'version": 1}', converted.LOCK: b""}}
    kept = {".out.partial-11111111": {converted.WEIGHTS: b"w", "mine.txt": b"user"},
            ".out.partial-live0000": {},                        # not the pattern
            ".out.partial-22222222": {converted.WEIGHTS: b"being written"},   # locked below
            ".other.partial-33333333": {converted.WEIGHTS: b"another out's"},
            "out.partial-44444444": {converted.WEIGHTS: b"not hidden"}}
    for name, files in (stale | kept).items():
        (tmp_path / name).mkdir()
        for file, data in files.items():
            (tmp_path / name / file).write_bytes(data)
    (tmp_path / ".out.partial-55555555").symlink_to(tmp_path / ".out.partial-0badc0de")
    kept_trees = {name: _tree(tmp_path / name) for name in kept}
    live = tmp_path / ".out.partial-22222222" / converted.LOCK
    fd = os.open(live, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)      # as a convert writing it now would
        convert.convert("wan2_1", "dit", path, out, config=cfg)
        assert all(not (tmp_path / name).exists() for name in stale)
        kept_trees[".out.partial-22222222"][converted.LOCK] = _tree(live)[""]
        assert {name: _tree(tmp_path / name) for name in kept} == kept_trees
        assert (tmp_path / ".out.partial-55555555").is_symlink()        # a link: not ours
    finally:
        os.close(fd)
    # once its writer is gone (the lock free), the next convert removes it
    convert.convert("wan2_1", "dit", path, out, config=cfg, overwrite=True)
    assert not (tmp_path / ".out.partial-22222222").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out", ".out.partial-55555555"] + [n for n in kept if n != ".out.partial-22222222"])


def test_a_failed_convert_removes_only_the_parents_it_made(authors_file, tmp_path, capsys):
    cfg, path = authors_file
    (tmp_path / "had").mkdir()
    out = tmp_path / "had" / "new" / "deeper" / "out"
    with pytest.raises(VidaxError, match="is not a wan2_1 dit checkpoint at this config"):
        convert.convert("wan2_1", "dit", path, out, config=small_config())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["had"]
    assert list((tmp_path / "had").iterdir()) == []        # the folder that existed stays
    # interrupted mid-write: the same
    assert _cli_convert(tmp_path / "missing.safetensors", out) == 1
    assert list((tmp_path / "had").iterdir()) == []
    capsys.readouterr()
    # a parent something else wrote into meanwhile is kept
    def dies_midway(*args, **kwargs):
        (tmp_path / "had" / "new" / "theirs.txt").write_text("theirs")
        raise KeyboardInterrupt

    real = convert._write_safetensors
    convert._write_safetensors = dies_midway
    try:
        with pytest.raises(KeyboardInterrupt):
            convert.convert("wan2_1", "dit", path, out, config=cfg)
    finally:
        convert._write_safetensors = real
    assert sorted(p.name for p in (tmp_path / "had" / "new").iterdir()) == ["theirs.txt"]
    # success keeps them
    assert convert.convert("wan2_1", "dit", path, out, config=cfg) == out
    assert converted.is_converted(out)


def _impossible_outs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    (tmp_path / "file").write_text("x")
    cases = {
        "under a regular file": (tmp_path / "file" / "out", "is a regular file of 1 bytes, "
                                                              "not a folder"),
        "deeper under a regular file": (tmp_path / "file" / "a" / "b", "not a folder"),
        "a name too long": (tmp_path / ("n" * 300), "300 bytes long, and .* takes at most 255"),
        "a parent name too long": (tmp_path / ("p" * 256) / "out", "256 bytes long"),
        "the root": (Path("/"), "not a folder name"),
    }
    if Path("/proc/self").is_dir():      # Linux; root is told ENOENT, anyone else EACCES
        cases["in /proc"] = (Path("/proc/vidax_out"),
                             r"cannot write the converted folder /proc/vidax_out: "
                             r"/proc/.vidax_out.partial-\w+: (No such file or directory \(this "
                             r"filesystem does not let|Permission denied)")
    return cases


def test_an_impossible_out_is_refused_before_any_weight_is_read(authors_file, tmp_path,
                                                                 monkeypatch, capsys):
    cfg, path = authors_file
    monkeypatch.setattr(convert, "open_checkpoint", _never)
    monkeypatch.setattr(loading, "_detect_config", _never)
    for name, (out, why) in _impossible_outs(tmp_path).items():
        with pytest.raises(VidaxError, match=why):
            convert.convert("wan2_1", "dit", path, out, config=cfg)
        assert _cli_convert(path, out) == 1, name
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "internal error" not in err, (name, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    # a long name still gets a partial folder within NAME_MAX
    long = tmp_path / ("n" * 250)
    monkeypatch.undo()
    assert convert.convert("wan2_1", "dit", path, long, config=cfg) == long
    assert converted.is_converted(long)


def test_an_unwritable_out_is_refused_before_any_weight_is_read(authors_file, tmp_path,
                                                                monkeypatch, capsys):
    cfg, path = authors_file
    monkeypatch.setattr(convert, "open_checkpoint", _never)
    locked = tmp_path / "read_only"
    locked.mkdir()
    real_mkdir = os.mkdir

    def denied(where, *args, **kwargs):          # what a read-only folder answers (not root)
        if Path(where).parent == locked:
            raise PermissionError(13, "Permission denied", str(where))
        return real_mkdir(where, *args, **kwargs)

    monkeypatch.setattr(convert.os, "mkdir", denied)
    with pytest.raises(VidaxError, match=rf"cannot write the converted folder {locked}/out: "
                                         rf"{locked}/\.out\.partial-\w+: Permission denied"):
        convert.convert("wan2_1", "dit", path, locked / "out", config=cfg)
    with pytest.raises(VidaxError, match="Permission denied"):       # a parent to create
        convert.convert("wan2_1", "dit", path, locked / "a" / "out", config=cfg)
    monkeypatch.setattr(convert.os, "mkdir", real_mkdir)
    assert list(locked.iterdir()) == []
    if os.geteuid() != 0 and sys.platform != "win32":        # the real thing, where it is
        locked.chmod(0o555)
        try:
            assert _cli_convert(path, locked / "out") == 1
            assert "Permission denied" in capsys.readouterr().err
        finally:
            locked.chmod(0o755)
    if Path("/sys").is_dir():                                # a read-only filesystem
        with pytest.raises(VidaxError, match=r"cannot write the converted folder /sys/out"):
            convert.convert("wan2_1", "dit", path, "/sys/out", config=cfg)


def test_a_full_disk_is_refused_before_writing(authors_file, tmp_path, monkeypatch):
    cfg, path = authors_file
    real = os.statvfs

    class Full:
        def __init__(self, st):
            self.f_frsize, self.f_bavail = st.f_frsize, 1

    monkeypatch.setattr(convert.os, "statvfs", lambda p: Full(real(p)))
    with pytest.raises(VidaxError, match=r"GiB free, and the converted weights need"):
        convert.convert("wan2_1", "dit", path, tmp_path / "out", config=cfg)
    assert list(tmp_path.iterdir()) == []
    # and a write the OS refuses midway (ENOSPC) is one clear error too
    monkeypatch.setattr(convert.os, "statvfs", real)

    def enospc(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(convert.os, "fsync", enospc)
    with pytest.raises(VidaxError, match=r"model.safetensors failed: No space left on device"):
        convert.convert("wan2_1", "dit", path, tmp_path / "out", config=cfg)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_convert_leaves_nothing_that_looks_complete(authors_file, tmp_path,
                                                                   monkeypatch):
    cfg, path = authors_file
    out = tmp_path / "out"
    real = Target.materialize
    calls = []

    def dies_midway(self, *args, **kwargs):
        calls.append(self.path)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Target, "materialize", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        convert.convert("wan2_1", "dit", path, out, config=cfg)
    assert list(tmp_path.iterdir()) == []          # the partial folder was removed

    # Dying at the very last step (the rename) leaves no folder under the final name either.
    monkeypatch.setattr(Target, "materialize", real)
    monkeypatch.setattr(convert.os, "rename", lambda *a: (_ for _ in ()).throw(OSError(5, "I/O")))
    with pytest.raises(VidaxError, match="could not put the converted folder at .*nothing was "
                                         "replaced"):
        convert.convert("wan2_1", "dit", path, out, config=cfg)
    assert list(tmp_path.iterdir()) == []
    # ... and over an old folder, the old one is put back as it was
    monkeypatch.undo()
    convert.convert("wan2_1", "dit", path, out, config=cfg)
    before = _tree(out)
    real_rename = os.rename

    def install_fails(src, dst):
        if ".partial-" in str(src):
            raise (OSError(5, "Input/output error") if calls.pop() else KeyboardInterrupt)
        return real_rename(src, dst)

    monkeypatch.setattr(convert.os, "rename", install_fails)
    calls[:] = [False, True]
    with pytest.raises(VidaxError, match="Input/output error; nothing was replaced"):
        convert.convert("wan2_1", "dit", path, out, config=cfg, overwrite=True, dtype="fp16")
    with pytest.raises(KeyboardInterrupt):
        convert.convert("wan2_1", "dit", path, out, config=cfg, overwrite=True, dtype="fp16")
    assert _tree(out) == before and sorted(os.listdir(tmp_path)) == ["out"]


# ------------------------------------------------------------------------ kill -9
#: Run in a subprocess (JSON argument): imports vidax (no JAX backend yet, one thread), then
#: forks one child per run, so each run costs the convert and not the imports. A child is
#: killed with SIGKILL either by itself, just before its N-th change to the disk
#: (``kill_at``: every step of a convert in turn), or by this process ``delay`` seconds after
#: it starts converting; the next child converts again, unkilled. Prints one JSON line per run.
_KILLER = r"""
import hashlib, json, os, shutil, signal, sys, time
from pathlib import Path
args = json.loads(sys.argv[1])
from vidax import convert, loading  # noqa: F401  (imported before fork: no backend yet)
from vidax.models.wan2_1.config import WanDiTConfig
from vidax.translator.io import converted
cfg = WanDiTConfig.from_dict(args["config"])
base = Path(args["base"]); ckpt, ref, work = base / "ckpt.safetensors", base / "ref", base / "work"
out = work / "out"

def run(target, kill_at=None, signal_start=None):
    pid = os.fork()
    if pid:
        return pid
    try:
        if kill_at is not None:
            count = [0]
            def step(fn, flagged=lambda *a: True):
                def wrapped(*a, **k):
                    if str(a[0]).startswith(str(work)) and flagged(*a):
                        count[0] += 1
                        if count[0] == kill_at:
                            os.kill(os.getpid(), signal.SIGKILL)
                    return fn(*a, **k)
                return wrapped
            for name in ("mkdir", "rename", "unlink", "rmdir"):
                setattr(os, name, step(getattr(os, name)))
            os.open = step(os.open, lambda p, flags, *a: flags & os.O_CREAT)
            convert.open = step(open)
        if signal_start is not None and not kill_at:
            os.write(signal_start, b"s")
        convert.convert("wan2_1", "dit", ckpt, target, config=cfg, overwrite=True)
        if kill_at == 0:                   # counted the steps
            os.write(signal_start, f"steps {count[0]}".encode())
        os._exit(0)
    except BaseException as e:
        print(json.dumps({"child_error": repr(e)}), flush=True)
        os._exit(3)

def wait(pid):
    status = os.waitpid(pid, 0)[1]
    return "killed" if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None

def look():
    complete = converted.is_converted(out)
    return {"names": sorted(os.listdir(work)), "complete": complete,
            "files": sorted(os.listdir(out)) if out.is_dir() else None,
            "same": complete and all(sha(out / n) == sha(ref / n)
                                     for n in (converted.WEIGHTS, converted.MARKER))}

def setup(i):
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    if i % 2:              # over an old complete folder, beside a half-written partial one
        shutil.copytree(ref, out)
        (work / ".out.partial-0badc0de").mkdir()
        (work / ".out.partial-0badc0de" / converted.WEIGHTS).write_bytes(b"half")
    else:                  # a fresh --out, beside an old folder a killed overwrite moved aside
        shutil.copytree(ref, work / ".out.old-0123abcd")

start = time.perf_counter()
assert wait(run(ref)) == 0
took = time.perf_counter() - start
plans = []
for i in (0, 1) if args["every_step"] else ():
    setup(i)
    r, w = os.pipe()
    assert wait(run(out, kill_at=0, signal_start=w)) == 0
    steps = int(os.read(r, 64).decode().split()[-1])
    os.close(r); os.close(w)
    print(json.dumps({"setup": i, "steps": steps}), flush=True)
    plans += [(i, "kill_at", n) for n in range(1, steps + 1)]
plans += [(i, "delay", d * took) for i, d in enumerate(args["delays"])]
for i, how, when in plans:
    setup(i)
    if how == "kill_at":
        ended = wait(run(out, kill_at=when))
    else:
        r, w = os.pipe()
        pid = run(out, signal_start=w)
        os.read(r, 1)
        time.sleep(when)
        os.kill(pid, signal.SIGKILL)
        ended = wait(pid)
        os.close(r); os.close(w)
    after = look()
    again = wait(run(out))
    print(json.dumps({"how": how, "when": when, "took": took, "ended": ended, "after": after,
                      "again": again, "then": look()}), flush=True)
"""


def _kill_runs(tmp_path: Path, cfg: WanDiTConfig, ckpt: Path, *, every_step=False,
               delays=()):
    import dataclasses

    if ckpt != tmp_path / "ckpt.safetensors":
        shutil.copyfile(ckpt, tmp_path / "ckpt.safetensors")
    args = {"base": str(tmp_path), "config": dataclasses.asdict(cfg),
            "every_step": every_step, "delays": list(delays)}
    proc = subprocess.run([sys.executable, "-c", _KILLER, json.dumps(args)], cwd=Path.cwd(),
                          capture_output=True, text=True, timeout=600,
                          env=os.environ | {"PYTHONPATH": str(Path(__file__).parent.parent)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert not [r for r in lines if "child_error" in r], lines
    return [r for r in lines if "how" in r], {r["setup"]: r["steps"] for r in lines
                                              if "steps" in r}


def _check_kill_runs(runs):
    vidax_files = {converted.WEIGHTS, converted.MARKER, converted.LOCK}
    for r in runs:
        after, then = r["after"], r["then"]
        # killed at any moment: the folder under the final name is absent or complete, with
        # exactly the reference bytes (the old folder, or the new one)
        assert after["files"] is None or (after["complete"] and after["same"]
                                          and set(after["files"]) <= vidax_files), r
        # the next run succeeds and cleans up every leftover
        assert r["again"] == 0, r
        assert then == {"names": ["out"], "complete": True, "same": True,
                        "files": sorted([converted.MARKER, converted.WEIGHTS])}, r


@pytest.mark.slow
def test_kill_9_at_every_step_of_a_convert(authors_file, tmp_path):
    cfg, path = authors_file
    runs, steps = _kill_runs(tmp_path, cfg, path, every_step=True)
    # every change a convert makes to the disk, in turn, in two setups: over an old folder
    # beside a stale partial one (clean-up, write, move aside, install, remove), and a fresh
    # --out beside a stale old one
    assert steps[0] >= 8 and steps[1] >= 14, steps
    assert len(runs) == steps[0] + steps[1] and {r["ended"] for r in runs} == {"killed"}
    assert {r["after"]["complete"] for r in runs} == {True, False}
    _check_kill_runs(runs)
    got = _arrays(vidax.load("wan2_1", "dit", tmp_path / "work" / "out"))
    want = _arrays(vidax.load("wan2_1", "dit", path, config=cfg))
    assert all(np.array_equal(got[k], want[k]) for k in want)


def _big_authors_dit(cfg: WanDiTConfig, path: Path) -> Path:
    """An authors'-layout file of ``cfg`` with uniform random weights, written without
    building the model (its names and shapes from one on PyTorch's meta device)."""
    import dataclasses

    import safetensors.numpy
    import torch

    from tests.reference import wan22

    with torch.device("meta"):
        model = wan22.model_module().WanModel(**dataclasses.asdict(cfg))
    rng = np.random.default_rng(0)
    safetensors.numpy.save_file({k: rng.random(tuple(v.shape), dtype=np.float32) - 0.5
                                 for k, v in model.state_dict().items()}, path)
    return path


@pytest.mark.slow
def test_kill_9_at_random_moments_of_a_big_convert(tmp_path):
    import dataclasses

    # ~180 MB: a convert of a second or two, so a kill lands while the weights are written
    cfg = dataclasses.replace(WanDiTConfig.tiny(), dim=512, ffn_dim=2048, num_heads=8,
                              text_dim=64, num_layers=10)
    ckpt = _big_authors_dit(cfg, tmp_path / "ckpt.safetensors")
    delays = np.random.default_rng(11).uniform(0.0, 1.0, 5)       # fractions of a convert
    runs, _ = _kill_runs(tmp_path, cfg, ckpt, delays=delays.tolist())
    assert len(runs) == 5 and runs[0]["took"] > 0
    _check_kill_runs(runs)
