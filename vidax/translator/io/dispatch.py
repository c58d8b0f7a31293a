"""``open_checkpoint``: a path (file, folder or shard index) handed to the reader of its
container, told apart by the file's first bytes rather than its name."""

from __future__ import annotations

import os

from vidax.errors import CheckpointError
from vidax.translator.io.base import Checkpoint, _MappedFile, _ReadCounter
from vidax.translator.io.gguf import GGUF_MAGIC, check_wrapper, open_gguf
from vidax.translator.io.safetensors import _open_safetensors_index, _safetensors_tensors
from vidax.translator.io.torch_zip import _open_pth


def open_checkpoint(path: str | os.PathLike, *, wrapper: str | None = "auto") -> Checkpoint:
    """Open a checkpoint lazily: a safetensors file, a sharded ``*.safetensors.index.json``, a
    folder holding exactly one of those, a zip ``.pth``/``.pt`` written by ``torch.save``, or a
    GGUF file (told by its magic bytes ``GGUF``; :mod:`vidax.translator.io.gguf`).

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
            return _with_scale_map(_open_pth(given, source, wrapper, counter), target)
        if head[:4] == GGUF_MAGIC:
            check_wrapper(target, wrapper)
            return open_gguf(target, counter, source=source, given=given)
        if target.endswith(".gguf"):
            raise CheckpointError(target, "the name says GGUF, but the file does not start with "
                                  "the GGUF magic bytes b'GGUF': it is corrupt or not GGUF.")
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
    ggufs = [n for n in names if n.endswith(".gguf")]
    if not indexes and not files and len(ggufs) == 1:
        return os.path.join(folder, ggufs[0])
    found = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    raise CheckpointError(
        folder,
        "a checkpoint folder must hold exactly one *.safetensors.index.json or exactly one "
        f"*.safetensors file; found {len(indexes)} index files and {len(files)} safetensors "
        f"files among: {found or 'nothing'}.",
    )


def _with_scale_map(ckpt: Checkpoint, target: str) -> Checkpoint:
    """HunyuanVideo's own fp8 release: ``X_fp8.pt`` holds the block Linear weights as
    float8 and ``X_fp8_map.pt`` beside it the per-tensor scale of each (a flat dict, module
    name -> scale; Tencent-Hunyuan/HunyuanVideo ``hyvideo/modules/fp8_optimization.py``
    ``convert_fp8_linear``, which finds the map by replacing ``.pt`` with ``_map.pt``). The
    map's tensors join the checkpoint as ``<module>.fp8_map_scale`` (consumed by
    ``vidax.translator.quant``'s rule). A float8 ``.pt`` file whose map is not beside it is
    refused: its weights would be read without their scales."""
    stem, ext = os.path.splitext(target)
    companion = f"{stem}_map{ext}"
    if stem.endswith("_map") or not any(str(r.dtype).startswith("float8")
                                         for r in ckpt.values()):
        return ckpt
    if not os.path.isfile(companion):
        if stem.endswith("_fp8"):
            ckpt.close()
            raise CheckpointError(
                target, f"its float8 weights are scaled by the map {os.path.basename(companion)}"
                ", which is not beside it (HunyuanVideo's fp8 release ships the two files "
                "together); put the map next to the weights.")
        return ckpt
    try:
        scales = open_checkpoint(companion)
    except CheckpointError:
        ckpt.close()
        raise
    clash = [k for k in scales if f"{k}.fp8_map_scale" in ckpt]
    if clash:
        ckpt.close()
        scales.close()
        raise CheckpointError(companion, f"names {clash[0]} twice")
    tensors = dict(ckpt.items())
    tensors.update({f"{k}.fp8_map_scale": ref for k, ref in scales.items()})
    return Checkpoint(ckpt.path, ckpt.format, tensors,
                      sources=[*ckpt._sources, *scales._sources], counter=ckpt._counter,
                      metadata={**ckpt.metadata, "vidax.fp8_map": companion},
                      extras=ckpt.extras)
