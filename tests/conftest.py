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
import shutil
import tempfile

import pytest

_DEVICES_FLAG = "--xla_force_host_platform_device_count"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICES_FLAG}=8".strip()




def pytest_configure(config):
    """One persistent JAX compilation cache per test run, shared by the pytest-xdist workers
    and the subprocesses the tests start (``JAX_COMPILATION_CACHE_DIR``, inherited): the two
    workers and every ``vidax generate`` a test runs in a new process compile many of the same
    tiny programs, and XLA's compile is most of a tiny model's test time. Programs are cached
    whatever their compile time or size. A run's cache starts empty (its folder is named by
    the run: pytest-xdist's ``testrunuid``, else this process), so no test depends on an
    earlier run, and the process that made it deletes it when the run ends;
    ``VIDAX_TEST_JAX_CACHE=0`` turns it off, and a cache folder the environment already names
    is used as it is (and kept). Set here, before any test module imports jax; the workers,
    started after the controller's configure, inherit its folder."""
    if os.environ.get("VIDAX_TEST_JAX_CACHE", "1") == "0" or os.environ.get(
            "JAX_COMPILATION_CACHE_DIR"):
        return
    run = getattr(config, "workerinput", {}).get("testrunuid") or f"pid{os.getpid()}"
    folder = os.path.join(tempfile.gettempdir(), f"vidax-test-jax-cache-{run}")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = folder
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    config._vidax_jax_cache = folder


def pytest_unconfigure(config):
    folder = getattr(config, "_vidax_jax_cache", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


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
