"""Shared helpers of the compute benchmarks (``bench_dit.py``, ``bench_vae.py``,
``gpu_dit_blocks.py``, ``device_check.py``): wall-clock timing of warm calls, memory readings
from ``/proc/self/status``, the machine line, plain-text tables, and for the accelerator
scripts the dense bf16 peak table and the strided-placement check.

Not a test module: benchmarks print tables for a person to read (DESIGN.md §10).
"""

from __future__ import annotations

import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Seconds of ``n`` warm calls (after ``warmup`` untimed ones)."""

    times: tuple[float, ...]

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def __str__(self) -> str:
        return (f"best {self.best * 1e3:.0f} ms, median {self.median * 1e3:.0f} ms "
                f"(n={len(self.times)})")


def proc_status_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmHWM``: peak RSS; ``RssAnon``: current
    anonymous resident memory, i.e. not file-backed pages)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class PeakAnonSampler:
    """Samples ``RssAnon`` every ``interval`` seconds on a thread and keeps its maximum.

    The kernel reports a peak only for the whole RSS (``VmHWM``, which counts memory-mapped
    file pages too); anonymous memory has no high-water mark, so it is sampled. A peak
    shorter than the interval can be missed: read it as a lower bound (within ~interval of
    allocation churn).
    """

    def __init__(self, interval: float = 0.01):
        self.interval = interval
        self.peak_kib = proc_status_kib("RssAnon")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, proc_status_kib("RssAnon"))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakAnonSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_kib = max(self.peak_kib, proc_status_kib("RssAnon"))


def machine_line() -> str:
    """CPU model, core count and the library versions the numbers depend on."""
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    versions = []
    for name in ("jax", "jaxlib", "flax", "torch"):
        try:
            versions.append(f"{name} {__import__(name).__version__}")
        except ImportError:
            pass
    return f"{cpu}, {os.cpu_count()} cores; {', '.join(versions)}"


def table(headers: list[str], rows: list[list[object]]) -> str:
    """A GitHub-markdown table (readable as plain text too)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *(line(r) for r in cells[1:])])


def time_interleaved(fns: dict[str, Callable[[], object]], *, repeats: int = 3,
                     warmup: int = 1) -> dict[str, Timing]:
    """Time every ``fn`` ``repeats`` times in rounds (each round calls each fn once), after
    ``warmup`` rounds. On a shared machine, load from other processes then touches every
    measurement alike instead of whichever ran during a busy spell; report the best."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: Timing(tuple(t)) for name, t in times.items()}


def load_average() -> str:
    """The 1/5/15-minute load averages: other processes on a shared machine skew timings."""
    return " / ".join(f"{v:.2f}" for v in os.getloadavg())


# ----------------------------------------------------------------------------- accelerators
#: Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s, by a substring of the device name
#: (first match wins, so the more specific names come first). From NVIDIA's data sheets.
PEAK_BF16_TFLOPS = (
    ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("GH200", 989.5), ("H200", 989.5),
    ("H100", 989.5), ("H800", 989.5), ("B200", 2250.0), ("A100", 312.0), ("A800", 312.0),
    ("L40S", 362.0), ("L40", 181.0), ("L4", 121.0), ("A10", 125.0), ("RTX 4090", 165.2),
    ("RTX 6000 Ada", 364.0),
)


def peak_tflops(device_name: str) -> float | None:
    """The dense bf16 peak of a device by its name (``device_kind``), None if not listed."""
    return next((p for key, p in PEAK_BF16_TFLOPS if key.lower() in device_name.lower()), None)


def timed(fn, sync, repeats: int, warmup: int = 2) -> list[float]:
    """Seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones, each call
    followed by ``sync(result)`` (``jax.block_until_ready``, ``torch.cuda.synchronize``)."""
    for _ in range(warmup):
        sync(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sync(fn())
        times.append(time.perf_counter() - start)
    return times


def check_strided_placement(shape: tuple[int, int], repeats: int) -> dict:
    """What ``vidax.load`` relies on: ``jax.device_put`` of a transposed numpy view (a Linear
    weight's ``[in, out]`` kernel seen on the stored ``[out, in]`` bytes) places the
    transposed array, the transfer doing the transpose. Checked for equality against the
    contiguous copy, and timed beside the plain transfer of the stored bytes (GB/s)."""
    import jax
    import ml_dtypes
    import numpy as np

    stored = np.random.default_rng(0).standard_normal(shape, np.float32).astype(
        ml_dtypes.bfloat16)
    view = stored.T
    placed = jax.device_put(view)
    equal = bool(np.array_equal(np.asarray(placed), np.ascontiguousarray(view)))
    sync = jax.block_until_ready
    plain = min(timed(lambda: jax.device_put(stored), sync, repeats))
    strided = min(timed(lambda: jax.device_put(view), sync, repeats))
    result = {"shape": list(shape), "equal": equal, "plain_gb_s": stored.nbytes / plain / 1e9,
              "strided_gb_s": stored.nbytes / strided / 1e9}
    print(f"placement of a transposed {shape[1]}x{shape[0]} bf16 view: equal {equal}; "
          f"{result['strided_gb_s']:.1f} GB/s strided vs {result['plain_gb_s']:.1f} GB/s "
          "for the stored bytes as they are", flush=True)
    return result
