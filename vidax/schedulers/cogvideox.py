"""CogVideoX's two samplers: DDIM and the authors' stochastic DPM-Solver++ (2M), both
v-prediction over the SNR-shifted, zero-terminal-SNR schedule of the releases.

Mirrors diffusers' ``CogVideoXDDIMScheduler`` (``schedulers/scheduling_ddim_cogvideox.py``,
what every release's ``scheduler/scheduler_config.json`` names) and ``CogVideoXDPMScheduler``
(``schedulers/scheduling_dpm_cogvideox.py``, what the authors' ``inference/cli_demo.py``
swaps in, ``from_config(..., timestep_spacing="trailing")``). The released configs (written by
diffusers' ``scripts/convert_cogvideox_to_diffusers.py``): scaled-linear betas
0.00085 .. 0.012 over 1000 steps, ``snr_shift_scale`` 3.0 (2B) or 1.0 (5B models),
``rescale_betas_zero_snr``, ``set_alpha_to_one``, ``prediction_type="v_prediction"``,
``timestep_spacing="trailing"``.

The schedule (``__init__`` of both): ``alphas_cumprod`` in float64, shifted to
``a / (s + (1 - s) a)`` and then rescaled to zero terminal SNR (so ``alphas_cumprod[999] = 0``).
Both schedulers evaluate their per-step coefficients as float64 0-d tensors and multiply the
float32 latents by them, i.e. by the coefficients rounded to float32; vidax computes the same
float64 scalars on the host (:class:`_Schedule`) and hands the float32 roundings to a pure,
jit-able ``step``.

Per step ``k`` with ``t = timesteps[k]``, ``t' = t - 1000 // N`` (``alpha_prev = 1`` once
``t' < 0``), ``x0 = sqrt(a_t) x - sqrt(1 - a_t) v``:

* DDIM (eta 0): ``x' = sqrt((1 - a_t') / (1 - a_t)) x + (sqrt(a_t') - sqrt(a_t) c) x0`` with
  ``c`` that first square root.
* DPM: ``lambda = log sqrt(a / (1 - a))``, ``h = lambda_t' - lambda_t``;
  ``x' = sqrt((1 - a_t') / (1 - a_t)) e^{-h} x - (e^{-2h} - 1) sqrt(a_t') D
  + sqrt(1 - a_t') sqrt(1 - e^{-2h}) noise`` with ``D = x0`` on the first and the last step,
  otherwise ``D = (1 + 1 / 2r) x0 - (1 / 2r) x0_prev``, ``r = h_prev / h``. It draws fresh
  standard-normal noise every step (their ``randn_tensor`` with the pipeline's generator;
  where they draw twice in a step, the second draw is the one used): vidax takes that noise
  as an input of ``step``.

Two float64 details make vidax's coefficients those of torch bit for bit: torch's CPU
``linspace`` computes every point as a fused multiply-add (``start + i * step``, from the
end for the second half), reproduced exactly with rational arithmetic here; square roots are
torch's ``** 0.5`` (a correctly rounded ``sqrt``), logarithms and exponentials glibc's
(``math``), as torch evaluates 0-d float64 tensors.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import VidaxError

#: The released ``scheduler/scheduler_config.json`` values (2B: ``snr_shift_scale`` 3.0).
RELEASED_CONFIG = {
    "num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012,
    "beta_schedule": "scaled_linear", "snr_shift_scale": 3.0, "rescale_betas_zero_snr": True,
    "set_alpha_to_one": True, "prediction_type": "v_prediction", "timestep_spacing": "trailing",
    "steps_offset": 0,
}
#: Config keys the two step rules never read (clipping and thresholding are not implemented
#: in diffusers' CogVideoX schedulers either).
_INERT_KEYS = ("clip_sample", "clip_sample_range", "sample_max_value", "trained_betas")
_SPACINGS = ("trailing", "leading", "linspace")


def _torch_linspace(start: float, end: float, steps: int) -> np.ndarray:
    """float64 ``torch.linspace`` on CPU: ``fma(step, i, start)`` for the first half,
    ``fma(-step, steps - 1 - i, end)`` for the rest, each rounded once."""
    step = (end - start) / (steps - 1)
    s, e, d = Fraction(start), Fraction(end), Fraction(step)
    half = steps // 2
    return np.array([float(s + d * i) if i < half else float(e - d * (steps - 1 - i))
                     for i in range(steps)], np.float64)


def alphas_cumprod(config: dict) -> np.ndarray:
    """float64 ``alphas_cumprod [num_train_timesteps]`` as both schedulers' ``__init__``
    leaves it (scaled-linear betas, SNR shift, zero-terminal-SNR rescale)."""
    n = config["num_train_timesteps"]
    betas = _torch_linspace(config["beta_start"] ** 0.5, config["beta_end"] ** 0.5, n) ** 2
    a = np.cumprod(1.0 - betas)
    s = config["snr_shift_scale"]
    a = a / (s + (1 - s) * a)
    if config["rescale_betas_zero_snr"]:
        root = np.sqrt(a)
        first, last = root[0], root[-1]
        root = (root - last) * (first / (first - last))
        a = root ** 2
    return a


def _log(x: float) -> float:
    """glibc's log with IEEE limits (``log 0 = -inf``), as torch's float64 ``log``."""
    if x == 0:
        return -math.inf
    return math.inf if x == math.inf else math.log(x)


def _div(a: float, b: float) -> float:
    """IEEE float64 division (``x / 0 = inf`` for x > 0), as torch's."""
    return a / b if b else (math.inf if a > 0 else math.nan)


class _Schedule:
    """What both schedulers share: config, ``alphas_cumprod``, timesteps."""

    name = "CogVideoX scheduler"

    def __init__(self, num_inference_steps: int, config: dict | None = None):
        cfg = dict(RELEASED_CONFIG)
        for key, value in (config or {}).items():
            if key.startswith("_") or key in _INERT_KEYS:
                continue
            if key not in cfg:
                raise VidaxError(f"{self.name}: unknown scheduler config key {key!r} (known: "
                                 f"{', '.join(sorted(cfg))})")
            cfg[key] = value
        if cfg["beta_schedule"] != "scaled_linear":
            raise VidaxError(f"{self.name}: beta_schedule {cfg['beta_schedule']!r} is not "
                             "implemented (every CogVideoX release uses 'scaled_linear')")
        if cfg["prediction_type"] != "v_prediction":
            raise VidaxError(f"{self.name}: prediction_type {cfg['prediction_type']!r} is not "
                             "implemented (every CogVideoX release predicts v)")
        if cfg["timestep_spacing"] not in _SPACINGS:
            raise VidaxError(f"{self.name}: timestep_spacing {cfg['timestep_spacing']!r}; "
                             f"one of {_SPACINGS}")
        n_train = cfg["num_train_timesteps"]
        if (not isinstance(num_inference_steps, (int, np.integer))
                or not 1 <= num_inference_steps <= n_train):
            raise VidaxError(f"{self.name}: num_inference_steps must be an integer in "
                             f"1..{n_train}, got {num_inference_steps!r}")
        self.config = cfg
        self.num_inference_steps = int(num_inference_steps)
        self.alphas_cumprod = alphas_cumprod(cfg)
        self.final_alpha_cumprod = 1.0 if cfg["set_alpha_to_one"] else self.alphas_cumprod[0]
        self.timesteps = self._timesteps()

    def _timesteps(self) -> np.ndarray:
        """int64 ``[N]``: ``set_timesteps``, for each spacing."""
        n, n_train = self.num_inference_steps, self.config["num_train_timesteps"]
        spacing = self.config["timestep_spacing"]
        if spacing == "linspace":
            return np.linspace(0, n_train - 1, n).round()[::-1].copy().astype(np.int64)
        if spacing == "leading":
            ratio = n_train // n
            steps = (np.arange(0, n) * ratio).round()[::-1].copy().astype(np.int64)
            return steps + self.config["steps_offset"]
        return np.round(np.arange(n_train, 0, -n_train / n)).astype(np.int64) - 1

    def _alphas(self, k: int) -> tuple[float, float]:
        """``(alpha_prod_t, alpha_prod_t_prev)`` of step ``k``, as python floats."""
        t = int(self.timesteps[k])
        prev = t - self.config["num_train_timesteps"] // self.num_inference_steps
        a_prev = self.alphas_cumprod[prev] if prev >= 0 else self.final_alpha_cumprod
        return float(self.alphas_cumprod[t]), float(a_prev)

    @staticmethod
    def _x0_coefficients(a_t: float) -> tuple[float, float]:
        """``x0 = sqrt(a_t) x - sqrt(1 - a_t) v`` (v-prediction)."""
        return math.sqrt(a_t), math.sqrt(1 - a_t)


def _column(rows) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(col, np.float64).astype(np.float32) for col in zip(*rows))


def _check_shapes(name: str, v: jax.Array, x: jax.Array) -> None:
    if v.shape != x.shape:
        raise VidaxError(f"{name}.step: model_output {v.shape} and sample {x.shape} differ "
                         "in shape.")


class DDIMCoefficients(NamedTuple):
    """Per-step float32 scalars (``[N]`` each): ``x0 = c_sample x - c_model v``, then
    ``x' = a x + b x0``."""

    c_sample: np.ndarray
    c_model: np.ndarray
    a: np.ndarray
    b: np.ndarray


class CogVideoXDDIMScheduler(_Schedule):
    """Deterministic DDIM (eta 0) over CogVideoX's schedule (``CogVideoXDDIMScheduler``).

    ``config``: a ``scheduler_config.json`` dict (default: :data:`RELEASED_CONFIG`, the 2B's;
    the 5B releases set ``snr_shift_scale`` 1.0). Attributes (host numpy): ``timesteps``
    (int64 ``[N]``, what the DiT is called with), ``coefficients``
    (:class:`DDIMCoefficients`), ``alphas_cumprod`` (float64).

    Usage: ``state = sched.init(shape)``, then per step
    ``latents, state = jax.jit(sched.step)(v, k, latents, state)``.
    """

    name = "CogVideoXDDIMScheduler"

    def __init__(self, num_inference_steps: int, config: dict | None = None):
        super().__init__(num_inference_steps, config)
        rows = []
        for k in range(self.num_inference_steps):
            a_t, a_prev = self._alphas(k)
            c_sample, c_model = self._x0_coefficients(a_t)
            a = math.sqrt((1 - a_prev) / (1 - a_t))
            rows.append((c_sample, c_model, a, math.sqrt(a_prev) - c_sample * a))
        self.coefficients = DDIMCoefficients(*_column(rows))

    def init(self, shape=None, sharding=None) -> DDIMCoefficients:
        """The state: just the coefficient table (DDIM carries nothing between steps)."""
        del shape, sharding
        return DDIMCoefficients(*(jnp.asarray(c) for c in self.coefficients))

    @staticmethod
    def step(model_output: jax.Array, step_index, sample: jax.Array,
             state: DDIMCoefficients, noise=None) -> tuple[jax.Array, DDIMCoefficients]:
        """One step: the float32 sample at the next timestep, and the state. ``noise`` is
        accepted for a common signature with the DPM scheduler and ignored."""
        del noise
        c = jax.tree.map(lambda column: column[step_index], state)
        v = jnp.asarray(model_output, jnp.float32)
        x = jnp.asarray(sample, jnp.float32)
        _check_shapes("CogVideoXDDIMScheduler", v, x)
        x0 = c.c_sample * x - c.c_model * v
        return c.a * x + c.b * x0, state


class DPMCoefficients(NamedTuple):
    """Per-step float32 scalars: ``x0 = c_sample x - c_model v``,
    ``D = m3 x0 - m4 x0_prev`` (``m3 = 1, m4 = 0`` on first-order steps),
    ``x' = m1 x - m2 D + m_noise noise``."""

    c_sample: np.ndarray
    c_model: np.ndarray
    m1: np.ndarray
    m2: np.ndarray
    m3: np.ndarray
    m4: np.ndarray
    m_noise: np.ndarray


class DPMState(NamedTuple):
    """The carry: the previous step's ``x0`` (zeros before the first) and the table."""

    x0_prev: jax.Array
    coefficients: DPMCoefficients


class CogVideoXDPMScheduler(_Schedule):
    """The authors' stochastic DPM-Solver++ (2M) over CogVideoX's schedule
    (``CogVideoXDPMScheduler``); the same schedule and config as
    :class:`CogVideoXDDIMScheduler`. ``step`` takes each step's standard-normal ``noise``."""

    name = "CogVideoXDPMScheduler"

    def __init__(self, num_inference_steps: int, config: dict | None = None):
        super().__init__(num_inference_steps, config)
        lam = [self._lambda(float(a)) for a in self.alphas_cumprod]
        rows = []
        for k in range(self.num_inference_steps):
            a_t, a_prev = self._alphas(k)
            c_sample, c_model = self._x0_coefficients(a_t)
            t = int(self.timesteps[k])
            lam_t, lam_prev = lam[t], self._lambda(a_prev)
            h = lam_prev - lam_t
            m1 = math.sqrt((1 - a_prev) / (1 - a_t)) * math.exp(-h)
            m2 = math.expm1(-2 * h) * math.sqrt(a_prev)
            m_noise = math.sqrt(1 - a_prev) * math.sqrt(1 - math.exp(-2 * h))
            m3, m4 = 1.0, 0.0
            # get_mult's 1 + 1/(2r), 1/(2r): used from the second step on, except on a step
            # that lands on alpha_prev = final_alpha_cumprod (their ``prev_timestep < 0``)
            prev_t = t - self.config["num_train_timesteps"] // self.num_inference_steps
            if k > 0 and prev_t >= 0:
                back = int(self.timesteps[k - 1])
                r = _div(lam_t - lam[back], h)
                m4 = _div(1.0, 2 * r)
                m3 = 1 + m4
            rows.append((c_sample, c_model, m1, m2, m3, m4, m_noise))
        self.coefficients = DPMCoefficients(*_column(rows))

    @staticmethod
    def _lambda(a: float) -> float:
        """``log(sqrt(a / (1 - a)))``: -inf at a = 0, +inf at a = 1."""
        return _log(math.sqrt(_div(a, 1 - a)))

    def init(self, shape, sharding=None) -> DPMState:
        """The state before step 0 for latents of ``shape`` (float32 zeros, placed like the
        latents when given their ``sharding``)."""
        return DPMState(jnp.zeros(shape, jnp.float32, device=sharding),
                        DPMCoefficients(*(jnp.asarray(c) for c in self.coefficients)))

    @staticmethod
    def step(model_output: jax.Array, step_index, sample: jax.Array, state: DPMState,
             noise: jax.Array) -> tuple[jax.Array, DPMState]:
        """One step with its standard-normal ``noise`` (the sample's shape): the float32
        sample at the next timestep and the next state (this step's ``x0``)."""
        c = jax.tree.map(lambda column: column[step_index], state.coefficients)
        v = jnp.asarray(model_output, jnp.float32)
        x = jnp.asarray(sample, jnp.float32)
        _check_shapes("CogVideoXDPMScheduler", v, x)
        x0 = c.c_sample * x - c.c_model * v
        d = c.m3 * x0 - c.m4 * state.x0_prev
        x_next = c.m1 * x - c.m2 * d + c.m_noise * jnp.asarray(noise, jnp.float32)
        return x_next, DPMState(x0, state.coefficients)


#: Solver names (``sample_solver``): DDIM, and the authors' DPM-Solver++ (``"dpm++"``,
#: the name ``vidax generate --sample-solver`` uses for the Wan DPM-Solver++ too).
SAMPLE_SOLVERS = {"ddim": CogVideoXDDIMScheduler, "dpm++": CogVideoXDPMScheduler}
