"""The error types vidax raises.

Every error a user can cause (a bad file, a wrong model type, a mismatched tree) is a
``VidaxError``: the CLI prints its message as one paragraph and exits non-zero.
"""

from __future__ import annotations


class VidaxError(Exception):
    """Base class of every error vidax raises on purpose."""


class CheckpointError(VidaxError):
    """A checkpoint file cannot be read safely: missing, empty, truncated, corrupt,
    hostile (a pickle naming a forbidden global) or of an unsupported format/dtype.

    The message names the file and the problem in one paragraph.
    """

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class MappingError(VidaxError):
    """A checkpoint's tensors cannot be translated: a key no rule accounts for, a
    split whose sizes do not fit, two keys landing on one parameter, ..."""


class VerificationError(VidaxError):
    """A translated tree does not match the model's abstract tree 1:1."""

    def __init__(self, message: str, report=None):
        self.report = report
        super().__init__(message)


class RegistryError(VidaxError):
    """An unknown model type, variant, component or layout."""


class NumericalError(VidaxError):
    """A computation made non-finite numbers (NaN or Inf): a sampling step's latents, a
    decoded video. The message names the step and what to try; nothing is written."""


class MemoryEstimateError(VidaxError):
    """A generation request whose estimated memory exceeds what the devices have, refused
    before any weight is read; ``estimate`` holds the breakdown."""

    def __init__(self, message: str, estimate=None):
        self.estimate = estimate
        super().__init__(message)


class NonFiniteWeightsError(VerificationError):
    """A checkpoint whose weights hold NaN or Inf values, refused at load (or convert) with
    the checkpoint and the first bad keys named; ``bad`` maps each bad stored key to its
    count of non-finite values."""

    def __init__(self, message: str, bad: dict | None = None):
        self.bad = dict(bad or {})
        super().__init__(message)
