"""Tests that place arrays in JAX's CPU host memory (``pinned_host``) run in a process of their
own: :func:`run_apart` starts one pytest process over all of them
(tests/nn/test_offload.py::test_host_memory_tests_run_in_their_own_process), and in the
ordinary workers each is skipped (:data:`apart`). The CPU client's host-memory buffers have
coincided with segfaults in later, unrelated XLA compiles of the same pytest worker (three CI
runs of issue #19, each in another test), so no host-memory test shares a worker with the
others."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = "VIDAX_HOST_MEMORY_TESTS"
ROOT = Path(__file__).resolve().parents[1]
#: The tests that place arrays in host memory.
TESTS = ("tests/nn/test_offload.py", "tests/pipelines/test_offload_families.py",
         "tests/pipelines/test_offload_experts.py",
         "tests/sharding/test_pipeline_mesh.py::test_block_offload_on_a_mesh_is_the_resident_mesh_run")

apart = pytest.mark.skipif(
    os.environ.get(ENV) != "1",
    reason="places arrays in host memory: run in a process of its own "
           "(tests/host_memory.py)")


def run_apart() -> str:
    """Every test of :data:`TESTS` in one fresh pytest process; its output."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "ignore::pytest.PytestUnknownMarkWarning", *TESTS],
                          cwd=ROOT, env={**os.environ, ENV: "1"}, capture_output=True,
                          text=True, timeout=1200)
    out = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, out
    return out
