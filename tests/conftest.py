"""Session setup shared by every test module.

Eight simulated CPU devices (``--xla_force_host_platform_device_count=8``): the sharding tests
(``tests/sharding/``) need a multi-device mesh, and XLA reads the flag once, when JAX first
initialises its CPU backend. pytest imports this file before any test module (in every
pytest-xdist worker too), so the flag is in place before anything imports jax. Tests without
a mesh keep placing everything on device 0, as on one device; subprocesses the tests start
inherit the flag.
"""

import os
import pathlib

import pytest

_DEVICES_FLAG = "--xla_force_host_platform_device_count"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICES_FLAG}=8".strip()


# ---------------------------------------------------------------------------- ../shared
#: ``shared/`` beside the repository (shared/README.md: every developer and CI run has it
#: at ``../shared``): the source of the packaged manifests.
SHARED_MANIFESTS = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "manifests"
#: ``VIDAX_NO_SHARED=1`` skips the checks against ``../shared`` (docs/development.md).
NO_SHARED_ENV = "VIDAX_NO_SHARED"


@pytest.fixture
def shared_manifests() -> pathlib.Path:
    """``../shared/manifests``. Absent, the test fails saying so, unless ``VIDAX_NO_SHARED=1``
    is set, which skips it: a missing checkout must not silently pass the sync checks."""
    if SHARED_MANIFESTS.is_dir():
        return SHARED_MANIFESTS
    if os.environ.get(NO_SHARED_ENV) == "1":
        pytest.skip(f"{NO_SHARED_ENV}=1: the checks against ../shared/manifests are skipped")
    pytest.fail(f"../shared/manifests is missing (looked for {SHARED_MANIFESTS}): the packaged "
                f"manifests' sync checks need shared/ beside the repository; set "
                f"{NO_SHARED_ENV}=1 to skip them deliberately", pytrace=False)
