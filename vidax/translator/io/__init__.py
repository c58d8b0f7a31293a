"""Lazy, torch-free readers for PyTorch checkpoint files.

``open_checkpoint(path)`` returns a :class:`Checkpoint`: a read-only mapping from the file's tensor
names to :class:`TensorRef` objects that know where each tensor's bytes lie but have not read them.
Reading one gives a numpy array in its exact stored dtype (bf16 and fp8 through ``ml_dtypes``): a
zero-copy, read-only view on a memory map of the file whenever the stored layout is contiguous, so
only the pages a caller touches are ever read, and nothing stays resident that it does not keep.

Formats:

* safetensors (:mod:`.safetensors`): one file, a folder holding one, or a sharded
  ``*.safetensors.index.json``. The header is parsed and every entry validated here; the data is
  memory-mapped.
* ``.pth`` / ``.pt`` zip archives written by ``torch.save`` (:mod:`.torch_zip`). ``data.pkl`` goes
  through a restricted unpickler whose only reachable callables are the inert stand-ins in
  ``torch_zip._ALLOWED_GLOBALS`` for what ``torch.save`` writes for a state dict: no code from a
  file ever runs and torch is never imported. Storages are memory-mapped straight out of their zip
  entries, which ``torch.save`` stores uncompressed (a compressed entry is refused rather than
  inflated).

Only regular files are read (symbolic links are followed): a named pipe, device, socket or folder
where a file is expected is refused at once. Reading any file is bounded in work and memory
(a pickle's opcodes, objects and shared references; JSON headers and indexes; a zip's directory),
each limit far above what real checkpoints need.

Every problem caused by a file raises :class:`vidax.errors.CheckpointError` naming the file.

``save_pth(path, tensors)`` (:mod:`.pth_writer`) writes the same zip format, again without torch:
the bytes ``torch.save(state_dict, path)`` would write, so that tiny checkpoints in the authors'
``.pth`` layout can be made on machines that have no torch (the demo, tests).

The other modules: :mod:`.base` (dtype tables, memory-mapped files, ``TensorRef``, ``Checkpoint``),
:mod:`.dispatch` (``open_checkpoint``: which reader a path goes to) and :mod:`.converted` (the
Flax-layout folders ``vidax convert`` writes: their format, recognised and opened; import it by
name, it is not re-exported here).
"""

from __future__ import annotations

from vidax.translator.io.base import Checkpoint, TensorRef
from vidax.translator.io.dispatch import open_checkpoint
from vidax.translator.io.pth_writer import save_pth

__all__ = ["Checkpoint", "TensorRef", "open_checkpoint", "save_pth"]
