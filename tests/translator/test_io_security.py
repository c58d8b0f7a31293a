"""vidax.translator.io against hostile, truncated, corrupt and lying files.

Every hostile payload would create a sentinel file if any of its code ran: the sentinel must never
appear, and each file must be refused with a CheckpointError that names it.
"""

from __future__ import annotations

import builtins
import collections
import json
import os
import pickle
import struct
import subprocess
import sys
import types
import zipfile

import pytest
import safetensors.torch
import torch

from vidax.errors import CheckpointError
from vidax.translator.io import open_checkpoint


@pytest.fixture
def sentinel(tmp_path):
    path = tmp_path / "PWNED"
    yield path
    assert not path.exists(), "code from a checkpoint file was executed"


def refused(path, *words: str) -> str:
    """Open ``path`` (reading every tensor if it opens) and return the CheckpointError's message."""
    with pytest.raises(CheckpointError) as excinfo:
        with open_checkpoint(path) as ckpt:
            for ref in ckpt.values():
                ref.read()
    message = str(excinfo.value)
    assert str(path) in message
    for word in words:
        assert word in message, message
    assert "\n" not in message  # one paragraph
    return message


def torch_like_zip(path, pickle_bytes: bytes):
    """A zip laid out as torch.save writes one (stored entries), around a hand-made pickle."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle_bytes)
        archive.writestr("archive/byteorder", b"little")
        archive.writestr("archive/version", b"3\n")
    return path


def rewrite_zip(src, dst, change=lambda name, data: (name, data), compression=zipfile.ZIP_STORED):
    """Copy a zip entry by entry through ``change`` (returning None drops the entry)."""
    with zipfile.ZipFile(src) as old, zipfile.ZipFile(dst, "w", compression) as new:
        for info in old.infolist():
            changed = change(info.filename, old.read(info.filename))
            if changed is not None:
                new.writestr(changed[0], changed[1])
    return dst


class Call:
    """Pickles as ``func(*args)``: what an attacker's pickle asks the unpickler to run."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def payloads(sentinel) -> dict[str, bytes]:
    """Pickle streams that would each create ``sentinel`` if unpickled by pickle.load."""
    shell, text = f"touch {sentinel}", f"open({str(sentinel)!r}, 'w').close()"

    def stack_global_call(module: str, name: str, arg: str) -> bytes:
        def unicode(s: str) -> bytes:
            return b"\x8c" + bytes([len(s.encode())]) + s.encode()

        return b"\x80\x04" + unicode(module) + unicode(name) + b"\x93" + unicode(arg) + b"\x85R."

    found = {}
    for protocol in range(6):  # GLOBAL for protocols 0-3, STACK_GLOBAL for 4-5
        found[f"posix.system/p{protocol}"] = pickle.dumps(Call(os.system, shell), protocol=protocol)
    found |= {
        "builtins.eval": pickle.dumps(Call(builtins.eval, text), protocol=3),
        "builtins.exec": pickle.dumps(Call(builtins.exec, text), protocol=4),
        "subprocess.Popen": pickle.dumps(
            Call(subprocess.Popen, ["touch", str(sentinel)]), protocol=3
        ),
        "os.system/text": f"cos\nsystem\n(V{shell}\ntR.".encode(),
        "os.system/INST": f"(V{shell}\nios\nsystem\n.".encode(),
        "os.system/OBJ": f"(cos\nsystem\nV{shell}\no.".encode(),
        "__builtin__.eval/text": f"c__builtin__\neval\n(V{text}\ntR.".encode(),
        "builtins.getattr/gadget": (
            f"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(Vos\ntRVsystem\ntR(V{shell}\ntR.".encode()
        ),
        "os.system/STACK_GLOBAL": stack_global_call("os", "system", shell),
        "nt.system/STACK_GLOBAL": stack_global_call("nt", "system", shell),
        "dotted/STACK_GLOBAL": stack_global_call(
            "torch._utils", "_rebuild_tensor_v2.__globals__", shell
        ),
        "dotted-builtins/STACK_GLOBAL": stack_global_call(
            "collections", "OrderedDict.__init__.__globals__", shell
        ),
        "state-dict-with-gadget": pickle.dumps(
            {"w": 1, "evil": Call(os.system, shell)}, protocol=2
        ),
    }
    return found


PAYLOAD_NAMES = list(payloads("x"))


# Variants that plain pickle cannot run either (a dotted name resolving to a dict, Windows' nt):
# they check that no lookup path of the restricted unpickler differs from pickle's.
NOT_LIVE = {"nt.system/STACK_GLOBAL", "dotted/STACK_GLOBAL", "dotted-builtins/STACK_GLOBAL"}


def test_payloads_are_live(tmp_path):
    """Positive control: an unrestricted pickle.loads does create the sentinel for each payload."""
    for name in PAYLOAD_NAMES:
        sentinel = tmp_path / f"sentinel-{PAYLOAD_NAMES.index(name)}"
        (tmp_path / f"{sentinel.name}.pkl").write_bytes(payloads(sentinel)[name])
    script = (
        "import glob, pickle\n"
        f"for path in glob.glob({str(tmp_path / '*.pkl')!r}):\n"
        "    try:\n"
        "        getattr(pickle.loads(open(path, 'rb').read()), 'wait', lambda: None)()\n"
        "    except Exception:\n"
        "        pass\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    live = {name for i, name in enumerate(PAYLOAD_NAMES) if (tmp_path / f"sentinel-{i}").exists()}
    assert live == set(PAYLOAD_NAMES) - NOT_LIVE


def forbidden_global(name: str) -> str | None:
    """The global a payload names first, as the error must report it."""
    head = name.split("/")[0]
    return None if name in NOT_LIVE or head == "state-dict-with-gadget" else head


@pytest.mark.parametrize("name", PAYLOAD_NAMES)
def test_hostile_pickle_in_zip_is_refused(tmp_path, sentinel, name):
    path = torch_like_zip(tmp_path / "evil.pt", payloads(sentinel)[name])
    message = refused(path, "without running any of its code")
    if forbidden_global(name):
        assert forbidden_global(name) in message


@pytest.mark.parametrize("name", PAYLOAD_NAMES)
def test_hostile_raw_pickle_is_never_unpickled(tmp_path, sentinel, name):
    path = tmp_path / "evil.pth"
    path.write_bytes(payloads(sentinel)[name])
    refused(
        path,
        "legacy torch serialization format",
        "torch.save(torch.load(f, weights_only=True), out)",
    )


def test_hostile_global_inside_a_real_torch_archive(tmp_path, sentinel):
    torch.save(
        {"w": torch.zeros(2), "evil": Call(os.system, f"touch {sentinel}")}, tmp_path / "evil.pt"
    )
    refused(tmp_path / "evil.pt", "posix.system")


def test_extension_opcode_is_refused(tmp_path, sentinel):
    refused(torch_like_zip(tmp_path / "ext.pt", b"\x80\x02\x82\x01)R."), "EXT1")


@pytest.mark.parametrize(
    "stream, words",
    [
        (b"\x80\x02ctorch\nFloatStorage\n)R.", ["not callable"]),  # REDUCE on a stand-in
        (b"\x80\x02ctorch\nFloatStorage\n)\x81.", ["malformed"]),  # NEWOBJ on a stand-in
        (
            b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(Vstorage\nK\x00)))\x89}tR.",
            ["needs a typed storage"],
        ),
        (b"\x80\x02ctorch._utils\n_rebuild_parameter\n(K\x01\x89}tR.", ["needs a tensor"]),
        (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n)R.", ["malformed", "TypeError"]),
        (b"\x80\x02ccollections\nOrderedDict\n(K\x01tR.", ["malformed"]),
        (b"\x80\x02P0\n.", ["persistent id '0'"]),  # text PERSID
        (b"\x80\x05\x97.", ["malformed"]),  # NEXT_BUFFER without buffers
        (b"\x80\x02}(", ["malformed"]),  # truncated stream
        (b"\x80\x04\x95" + (2**62).to_bytes(8, "little") + b".", ["malformed"]),  # FRAME bomb
        (b"\x80\x04\x8d" + (2**62).to_bytes(8, "little") + b"x.", ["malformed"]),  # huge string
        (b"\xff\xfe", ["malformed"]),  # not a pickle
    ],
)
def test_allow_listed_callables_cannot_be_misused(tmp_path, sentinel, stream, words):
    refused(torch_like_zip(tmp_path / "gadget.pt", stream), *words)


def test_build_cannot_poison_the_allow_list(tmp_path):
    """BUILD (dict or slot state) on any allow-listed global fails; later loads are unaffected."""
    from vidax.translator.io.torch_zip import _ALLOWED_GLOBALS

    for (module, name), _ in _ALLOWED_GLOBALS.items():
        head = b"\x80\x02c" + f"{module}\n{name}\n".encode()
        for state in (
            b"}Vname\nVx\ns",
            b"N}Vname\nVx\ns\x86",
            b"N}Vbuild\nVx\ns\x86",
            b"N}V__call__\nN\ns\x86",
        ):
            refused(torch_like_zip(tmp_path / "poison.pt", head + state + b"b."), "malformed")
    weight = torch.randn(3, 2, dtype=torch.bfloat16)
    torch.save({"w": weight.t(), "p": torch.nn.Parameter(torch.ones(1))}, tmp_path / "clean.pt")
    with open_checkpoint(tmp_path / "clean.pt") as ckpt:
        expected = weight.t().contiguous().view(torch.uint8).numpy()
        assert ckpt["w"].read().tobytes() == expected.tobytes()


# -------------------------------------------------------------------- hostile torch.save archives


class HostilePickler(pickle._Pickler):
    """torch.save's pickler with hooks that rewrite persistent ids and tensor rebuild arguments."""

    mutate_pid = staticmethod(lambda pid: pid)
    mutate_rebuild = staticmethod(lambda args: args)

    def save_pers(self, pid):
        super().save_pers(self.mutate_pid(pid))

    def reducer_override(self, obj):
        if type(obj) is torch.Tensor:
            func, args = obj.__reduce_ex__(2)
            return func, self.mutate_rebuild(args)
        return NotImplemented


def hostile_save(path, obj, mutate_pid=None, mutate_rebuild=None):
    pickler = type(
        "Pickler",
        (HostilePickler,),
        {
            "mutate_pid": staticmethod(mutate_pid or (lambda pid: pid)),
            "mutate_rebuild": staticmethod(mutate_rebuild or (lambda args: args)),
        },
    )
    torch.save(obj, path, pickle_module=types.SimpleNamespace(Pickler=pickler, __name__="hostile"))
    return path


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda pid: ("storage",), ["not a torch storage reference"]),
        (lambda pid: pid[:4], ["not a torch storage reference"]),
        (lambda pid: pid + ("extra",), ["not a torch storage reference"]),
        (lambda pid: ("module",) + pid[1:], ["not a torch storage reference"]),
        (lambda pid: "0", ["not a torch storage reference"]),
        (lambda pid: [*pid], ["not a torch storage reference"]),
        (lambda pid: (pid[0], "FloatStorage", *pid[2:]), ["names no storage class"]),
        (lambda pid: (pid[0], None, *pid[2:]), ["names no storage class"]),
        (lambda pid: pid[:2] + ("../../x",) + pid[3:], ["'../../x'", "not a decimal number"]),
        (lambda pid: pid[:2] + ("0/../../etc/passwd",) + pid[3:], ["not a decimal number"]),
        (lambda pid: pid[:2] + ("",) + pid[3:], ["not a decimal number"]),
        (lambda pid: pid[:2] + (0,) + pid[3:], ["not a decimal number"]),
        (lambda pid: pid[:2] + ("7",) + pid[3:], ["no entry 'archive/data/7'"]),
        (lambda pid: pid[:3] + (5,) + pid[4:], ["not a device name"]),
        (lambda pid: pid[:3] + ("x" * 1000,) + pid[4:], ["not a device name"]),
        (lambda pid: pid[:4] + (10**30,), ["truncated or corrupt"]),
        (lambda pid: pid[:4] + (-1,), ["not a non-negative int"]),
        (lambda pid: pid[:4] + (2.5,), ["not a non-negative int"]),
        (lambda pid: pid[:4] + (True,), ["not a non-negative int"]),
        # a FloatStorage's 4-byte elements read as 8-byte ones: twice the bytes the entry has
        (lambda pid: (pid[0], torch.DoubleStorage, *pid[2:]), ["truncated or corrupt"]),
    ],
)
def test_hostile_persistent_ids(tmp_path, mutate, words):
    path = hostile_save(tmp_path / "archive.pt", {"w": torch.zeros(4)}, mutate_pid=mutate)
    refused(path, *words)


def test_storages_saved_from_a_gpu_read_normally(tmp_path):
    weight = torch.randn(3, 4)
    path = hostile_save(
        tmp_path / "gpu.pt", {"w": weight}, mutate_pid=lambda p: (*p[:3], "cuda:3", p[4])
    )
    with open_checkpoint(path) as ckpt:
        assert ckpt["w"].read().tobytes() == weight.numpy().tobytes()


def test_storage_referenced_as_two_types(tmp_path):
    seen = []

    def mutate(pid):
        seen.append(pid)
        return pid if len(seen) == 1 else (pid[0], torch.IntStorage, *pid[2:])

    base = torch.zeros(4)
    path = hostile_save(tmp_path / "archive.pt", {"a": base, "b": base[1:]}, mutate_pid=mutate)
    refused(path, "two different types")


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda a: (a[0], a[1], (5,), a[3], *a[4:]), ["past the end of storage"]),
        (lambda a: (a[0], 3, a[2], a[3], *a[4:]), ["past the end of storage"]),
        (lambda a: (a[0], -1, *a[2:]), ["storage offset -1"]),
        (lambda a: (a[0], a[1], (2, 2), (1,), *a[4:]), ["does not match size"]),
        (lambda a: (a[0], a[1], a[2], (-1,), *a[4:]), ["does not match size"]),
        (lambda a: (a[0], a[1], [4], *a[3:]), ["not a tuple of non-negative ints"]),
        (lambda a: (a[0], a[1], (-4,), *a[3:]), ["not a tuple of non-negative ints"]),
        (lambda a: (a[0], a[1], (2**70,), (0,), *a[4:]), ["impossibly large"]),
        (lambda a: (a[0], 1.5, *a[2:]), ["storage offset 1.5"]),
        (lambda a: (*a[:4], 1, a[5]), ["requires_grad"]),
        (lambda a: (*a[:5], {"hook": 1}), ["backward hooks"]),
        (lambda a: (*a, {"conj": True}), ["conjugate/negative-bit"]),
        (lambda a: (*a, {}, "extra"), ["malformed", "TypeError"]),
    ],
)
def test_hostile_tensor_descriptions(tmp_path, mutate, words):
    path = hostile_save(tmp_path / "archive.pt", {"w": torch.zeros(4)}, mutate_rebuild=mutate)
    refused(path, *words)


# ---------------------------------------------------------------------- truncated, corrupt, empty


@pytest.fixture(scope="module")
def valid_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("valid")
    tensors = {
        "a": torch.randn(8, 4),
        "b": torch.randn(3, dtype=torch.float64).to(torch.bfloat16),
        "c": torch.arange(5),
    }
    torch.save({**tensors, "t": tensors["a"].t()}, folder / "m.pt")
    safetensors.torch.save_file(tensors, folder / "m.safetensors")
    return folder


@pytest.mark.parametrize("name", ["m.pt", "m.safetensors"])
def test_truncated_files(tmp_path, valid_files, name):
    data = (valid_files / name).read_bytes()
    n = len(data)
    for cut in sorted({1, 4, 7, 8, 9, 40, n // 3, n // 2, n - 200, n - 22, n - 1}):
        path = tmp_path / f"cut{cut}-{name}"
        path.write_bytes(data[:cut])
        refused(path)


@pytest.mark.parametrize("name", ["m.pt", "m.safetensors"])
def test_every_byte_flipped_fails_cleanly_or_reads_consistently(tmp_path, valid_files, name):
    """Flip a bit (the lowest or the highest, alternately) of every byte of a small file: opening
    either fails with CheckpointError or yields tensors that read back with their declared shape and
    dtype, never another exception."""
    data = bytearray((valid_files / name).read_bytes())
    positions = range(len(data))
    path = tmp_path / f"flipped-{name}"
    outcomes = collections.Counter()
    for position in positions:
        mask = 0x01 if position % 2 else 0x80
        data[position] ^= mask
        path.write_bytes(data)
        data[position] ^= mask
        try:
            with open_checkpoint(path) as ckpt:
                for ref in ckpt.values():
                    array = ref.read()
                    assert array.shape == ref.shape and array.dtype == ref.dtype
            outcomes["read"] += 1
        except CheckpointError as e:
            assert str(path) in str(e)
            outcomes["refused"] += 1
    assert outcomes["refused"] > len(positions) // 4 and outcomes["read"] > 0  # both paths taken


@pytest.mark.parametrize("name", ["empty.pth", "empty.pt", "empty.safetensors", "empty"])
def test_empty_files(tmp_path, name):
    (tmp_path / name).write_bytes(b"")
    refused(tmp_path / name, "empty")


def test_unrecognised_file(tmp_path):
    (tmp_path / "notes.txt").write_bytes(b"hello, this is not a checkpoint at all")
    refused(tmp_path / "notes.txt", "neither a safetensors file nor a zip archive")


def test_legacy_torch_format(tmp_path):
    torch.save({"w": torch.zeros(2)}, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    refused(tmp_path / "old.pt", "legacy torch serialization format", "weights_only=True")


# ------------------------------------------------------------------------------ lying safetensors


def write_safetensors(
    path, header: object, data: bytes = b"", *, raw_header: bytes | None = None, length=None
):
    blob = raw_header if raw_header is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob) if length is None else length) + blob + data)
    return path


def entry(shape, offsets, dtype="F32") -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": offsets}


@pytest.mark.parametrize(
    "header, data_bytes, words",
    [
        ({"w": entry([2], [0, 8])}, 4, ["'w'", "past the end"]),
        ({"w": entry([2], [0, 12])}, 12, ["'w'", "needs 8"]),
        ({"a": entry([2], [0, 8]), "b": entry([2], [4, 12])}, 12, ["'a'", "'b'", "overlap"]),
        ({"w": entry([-1, 2], [0, 8])}, 8, ["'w'", "non-negative"]),
        ({"w": entry([2.5], [0, 8])}, 8, ["'w'", "non-negative"]),
        ({"w": entry([True], [0, 4])}, 4, ["'w'", "non-negative"]),
        ({"w": entry("2", [0, 8])}, 8, ["'w'", "shape"]),
        ({"w": entry([2], [8, 0])}, 8, ["'w'", "begin <= end"]),
        ({"w": entry([2], [-8, 0])}, 8, ["'w'", "begin <= end"]),
        ({"w": entry([2], [0])}, 8, ["'w'", "data_offsets"]),
        ({"w": entry([2], [0, 8], dtype=["F32"])}, 8, ["'w' (['F32'])", "does not support"]),
        (
            {"w": {"dtype": "F32", "shape": [2]}},
            8,
            ["'w'", "exactly dtype, shape and data_offsets"],
        ),
        ({"w": {**entry([2], [0, 8]), "x": 1}}, 8, ["exactly"]),
        ({"w": [1, 2]}, 0, ["'w'"]),
        ([1, 2], 0, ["JSON list"]),
        ({"__metadata__": {"n": 1}}, 0, ["__metadata__"]),
        ({"__metadata__": ["x"]}, 0, ["__metadata__"]),
    ],
)
def test_lying_safetensors_headers(tmp_path, header, data_bytes, words):
    path = write_safetensors(tmp_path / "lying.safetensors", header, b"\0" * data_bytes)
    refused(path, *words)


@pytest.mark.parametrize(
    "raw_header, length, words",
    [
        (b"{not json", None, ["not valid JSON"]),
        (b'{"a": 1, "a": 2}', None, ["duplicate keys"]),
        (b'{"w": "\xff\xfe"}', None, ["not valid JSON"]),
        (b"{}", 10**6, ["runs past the end of the file"]),
        (b"{}", 2**64 - 1, ["runs past the end of the file"]),
        (b"[" * 100_000, None, ["not valid JSON"]),
    ],
)
def test_corrupt_safetensors_headers(tmp_path, raw_header, length, words):
    refused(
        write_safetensors(tmp_path / "bad.safetensors", None, raw_header=raw_header, length=length),
        *words,
    )


def test_too_short_for_a_header(tmp_path):
    (tmp_path / "short.safetensors").write_bytes(b"\x02\0\0")
    refused(tmp_path / "short.safetensors", "too few")


@pytest.mark.parametrize("dtype", ["F8_E8M0", "F4", "F6_E2M3", "C64", "Q4"])
def test_unknown_safetensors_dtypes(tmp_path, dtype):
    header = {"ok": entry([1], [0, 4]), "odd": entry([4], [4, 8], dtype=dtype)}
    refused(
        write_safetensors(tmp_path / "new.safetensors", header, b"\0" * 8),
        f"'odd' ({dtype})",
        "does not support",
    )


# ----------------------------------------------------------------------------- lying pth archives


@pytest.fixture
def small_pt(tmp_path):
    torch.save({"w": torch.arange(6.0)}, tmp_path / "src.pt")
    return tmp_path / "src.pt"


def test_compressed_entries_are_refused(tmp_path, small_pt):
    path = rewrite_zip(small_pt, tmp_path / "deflated.pt", compression=zipfile.ZIP_DEFLATED)
    refused(path, "compressed")


def test_restored_zip_without_alignment_still_reads(tmp_path, small_pt):
    path = rewrite_zip(small_pt, tmp_path / "unaligned.pt")
    with open_checkpoint(path) as ckpt:
        assert ckpt["w"].read().tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda n, d: None if n == "src/data/0" else (n, d), ["no entry 'src/data/0'"]),
        (
            lambda n, d: (n, d[:-4]) if n == "src/data/0" else (n, d),
            ["zip entry has 20 bytes", "truncated"],
        ),
        (lambda n, d: None if n == "src/data.pkl" else (n, d), ["holds 0"]),
        (lambda n, d: ("other/data.pkl", d) if n == "src/version" else (n, d), ["holds 2"]),
        (lambda n, d: (n, b"big") if n == "src/byteorder" else (n, d), ["big-endian"]),
    ],
)
def test_inconsistent_archives(tmp_path, small_pt, change, words):
    refused(rewrite_zip(small_pt, tmp_path / "changed.pt", change), *words)


def test_local_header_that_lies(tmp_path, small_pt):
    data = bytearray(small_pt.read_bytes())
    with zipfile.ZipFile(small_pt) as archive:
        offset = archive.getinfo("src/data/0").header_offset
    data[offset : offset + 4] = b"XXXX"
    (tmp_path / "lying.pt").write_bytes(data)
    refused(tmp_path / "lying.pt", "no valid local header")


def test_unsupported_torch_dtypes(tmp_path):
    tensors = {
        "ok": torch.zeros(2),
        "scale": torch.zeros(2, dtype=torch.float8_e8m0fnu),
        "z": torch.zeros(2, dtype=torch.complex64),
    }
    torch.save(tensors, tmp_path / "new.pt")
    refused(
        tmp_path / "new.pt",
        "'scale' (torch.float8_e8m0fnu)",
        "'z' (torch.complex64)",
        "does not support",
    )


def nested_tuples(depth: int) -> bytes:
    return b"(" * depth + b")" + b"t" * depth


@pytest.mark.parametrize(
    "stream, words",
    [
        (b"\x80\x02}Vx\n" + nested_tuples(100_000) + b"s.", ["'x'", "nested more than"]),
        (b"\x80\x02}" + nested_tuples(100_000) + b"Vv\ns.", ["a tuple as a dict key"]),
        (b"\x80\x02]q\x00h\x00a.", ["list, not a dict"]),
        (b"\x80\x02}q\x00Vself\nh\x00s.", ["'self'", "contains itself"]),
    ],
)
def test_deep_and_cyclic_structures(tmp_path, stream, words):
    refused(torch_like_zip(tmp_path / "deep.pt", stream), *words)
