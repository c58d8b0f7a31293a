"""``open_checkpoint``: a path (file, folder or shard index) handed to the reader of its
container, told apart by the file's first bytes rather than its name."""

from __future__ import annotations

import os

from vidax.errors import CheckpointError
from vidax.translator.io.base import Checkpoint, _MappedFile, _ReadCounter
from vidax.translator.io.safetensors import _open_safetensors_index, _safetensors_tensors
from vidax.translator.io.torch_zip import _open_pth


def open_checkpoint(path: str | os.PathLike, *, wrapper: str | None = "auto") -> Checkpoint:
    """Open a checkpoint lazily: a safetensors file, a sharded ``*.safetensors.index.json``, a
    folder holding exactly one of those, or a zip ``.pth``/``.pt`` written by ``torch.save``.

    ``wrapper`` chooses the state dict inside a pth file: "auto" (see
    ``torch_zip._select_state_dict``), a key path such as "ema" or "model/module", or None for
    "the top-level object is the state dict".
    Only regular files are read (a symbolic link is followed to one): a named pipe, device or
    socket -- given, found in the folder or named by an index -- is refused at once rather than
    read (``base._open_regular_file``).
    Raises CheckpointError for any problem with the file(s).
    """
    given = os.fspath(path)
    if not os.path.exists(given):
        if os.path.islink(given):
            target = os.path.realpath(given)
            raise CheckpointError(
                given, f"it is a symbolic link to {target!r}, which does not exist."
            )
        raise CheckpointError(given, "no such file or folder.")
    target = _file_in_folder(given) if os.path.isdir(given) else given
    counter = _ReadCounter()
    if target.endswith(".json"):
        _check_flat_wrapper(target, wrapper)
        return _open_safetensors_index(given, target, counter)
    source = _MappedFile(target)
    try:
        head = source.read(0, 16)
        # A safetensors header starts at byte 8 with "{"; a zip's byte 8 is its compression method.
        is_safetensors = head[8:9] == b"{"
        if not is_safetensors and head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
            return _open_pth(given, source, wrapper, counter)
        if is_safetensors or target.endswith(".safetensors"):
            _check_flat_wrapper(target, wrapper)
            tensors, metadata = _safetensors_tensors(source, counter)
            return Checkpoint(
                given, "safetensors", tensors, sources=[source], counter=counter, metadata=metadata
            )
        if head[:1] == b"\x80":  # the PROTO opcode that starts every binary pickle
            raise CheckpointError(
                target, "this is a raw pickle stream, not a zip archive: " + _LEGACY
            )
        if target.endswith((".pt", ".pth", ".bin", ".ckpt")):
            raise CheckpointError(
                target, "this is not a zip archive written by torch.save; " + _LEGACY
            )
        raise CheckpointError(
            target, "this is neither a safetensors file nor a zip archive written by torch.save."
        )
    except BaseException:
        source.close()
        raise


_LEGACY = (
    "if torch wrote it, it is in the legacy torch serialization format (torch < 1.6, or "
    "_use_new_zipfile_serialization=False). vidax does not unpickle such files, because unpickling "
    "them can run arbitrary code. Re-save it in the zip format, in an environment with torch: "
    "`torch.save(torch.load(f, weights_only=True), out)`."
)


def _check_flat_wrapper(path: str, wrapper: str | None) -> None:
    if wrapper not in ("auto", None):
        raise CheckpointError(
            path,
            f"wrapper={wrapper!r} selects a state dict inside a .pth file, but this is a "
            "safetensors checkpoint, one flat dict of tensors; pass wrapper='auto' or None.",
        )


def _file_in_folder(folder: str) -> str:
    """The one ``*.safetensors.index.json``, else the one ``*.safetensors``, in ``folder``."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as e:
        raise CheckpointError(folder, f"the folder cannot be listed: {e}.") from None
    indexes = [n for n in names if n.endswith(".safetensors.index.json")]
    files = [n for n in names if n.endswith(".safetensors")]
    if len(indexes) == 1:
        return os.path.join(folder, indexes[0])
    if not indexes and len(files) == 1:
        return os.path.join(folder, files[0])
    found = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    raise CheckpointError(
        folder,
        "a checkpoint folder must hold exactly one *.safetensors.index.json or exactly one "
        f"*.safetensors file; found {len(indexes)} index files and {len(files)} safetensors "
        f"files among: {found or 'nothing'}.",
    )
