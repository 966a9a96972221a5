"""Speech features for the IST paper's Google Speech Commands models, in JAX and numpy.

The IST paper (Yuan et al., arXiv 1910.02120) trains MLPs on 4096 log-mel features per clip: a 1 s clip at 16 kHz
becomes a `[128 mels, 32 frames]` log-mel spectrogram, flattened. This module computes exactly that::

    waveform `[..., N]` --pad/crop--> `[..., 16000]` --STFT (Hann, n_fft 2048, hop 512, centred)--> power `[..., F, T]`
      --mel filterbank `[128, F]`--> `[..., 128, T]` --10 log10(max(., amin))--> crop to 32 frames --> `[..., 4096]`

``F = n_fft // 2 + 1 = 1025`` frequency bins. With ``center=True`` the signal is zero-padded by ``n_fft // 2`` on
both sides and framed every ``hop`` samples, giving ``1 + 16000 // 512 = 32`` frames, so the default settings give
the paper's 128 x 32 = 4096 features with no cropping (these are librosa's ``melspectrogram`` defaults at 16 kHz,
with zero padding; the paper used librosa).

The mel filterbank is written here (`mel_filterbank`), on either mel scale:

* ``"slaney"`` (default; Slaney's Auditory Toolbox, librosa's default): linear below 1 kHz,
  ``mel = 3 f / 200``, and logarithmic above, ``mel = 15 + 27 ln(f / 1000) / ln(6.4)``.
* ``"htk"`` (HTK, O'Shaughnessy): ``mel = 2595 log10(1 + f / 700)``.

Filter ``m`` is a triangle in Hz rising from mel point ``m`` to ``m + 1`` and falling to ``m + 2``, where the
``n_mels + 2`` mel points are evenly spaced on the mel scale between ``fmin`` and ``fmax``. With
``norm="slaney"`` each triangle is scaled by ``2 / (f[m + 2] - f[m])`` (constant energy per filter); with
``norm=None`` the triangles peak at 1.

Everything is a pure function; `log_mel_spectrogram` and `speech_features` are jit- and vmap-compatible and
accept any leading batch axes.

Example::

    >>> import numpy as np, istjax.data.audio as audio
    >>> t = np.arange(16000) / 16000
    >>> audio.speech_features(np.sin(2 * np.pi * 1000 * t)).shape
    (4096,)
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.errors import ArgError

__all__ = [
    "MEL_SCALES",
    "MelConfig",
    "PAPER",
    "frame",
    "hann_window",
    "hz_to_mel",
    "int16_to_float",
    "log_mel_spectrogram",
    "mel_filterbank",
    "mel_frequencies",
    "mel_to_hz",
    "num_frames",
    "pad_or_crop",
    "power_spectrogram",
    "speech_features",
]

MEL_SCALES = ("slaney", "htk")


class MelConfig(NamedTuple):
    """Settings of the log-mel pipeline; `PAPER` is the IST paper's (128 x 32 = 4096 features).

    Fields:
      sample_rate: samples per second of the input, Hz.
      num_samples: clip length the waveform is padded (zeros, at the end) or cropped (from the start) to.
      n_fft: STFT window and FFT length, samples; `F = n_fft // 2 + 1` frequency bins.
      hop_length: samples between frame starts.
      n_mels: mel filters `M`.
      num_frames: frames `T` kept (the first `T`); must be <= `1 + num_samples // hop_length`.
      fmin, fmax: frequency range of the filterbank, Hz (`fmax=None`: `sample_rate / 2`).
      scale: mel scale, `"slaney"` or `"htk"`.
      norm: `"slaney"` (area-normalised triangles) or None (peak 1).
      amin: floor of the power before the log (avoids `log(0)` on silence).
    """

    sample_rate: int = 16000
    num_samples: int = 16000
    n_fft: int = 2048
    hop_length: int = 512
    n_mels: int = 128
    num_frames: int = 32
    fmin: float = 0.0
    fmax: Optional[float] = None
    scale: str = "slaney"
    norm: Optional[str] = "slaney"
    amin: float = 1e-10

    @property
    def num_features(self) -> int:
        """`n_mels * num_frames` (4096 for `PAPER`)."""
        return self.n_mels * self.num_frames


PAPER = MelConfig()


def _validate(config: MelConfig) -> MelConfig:
    """Checks `config` in Python (before any tracing); returns it with `fmax` resolved."""
    for field in ("sample_rate", "num_samples", "n_fft", "hop_length", "n_mels", "num_frames"):
        v = getattr(config, field)
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ArgError(f"config.{field}", v, f"MelConfig.{field}={v!r} must be a positive integer.", "")
    if config.scale not in MEL_SCALES:
        raise ArgError("config.scale", config.scale, f"MelConfig.scale={config.scale!r} is not a mel scale;",
                       f"choose one of {list(MEL_SCALES)}.")
    if config.norm not in ("slaney", None):
        raise ArgError("config.norm", config.norm, f"MelConfig.norm={config.norm!r}:", "choose 'slaney' or None.")
    nyquist = config.sample_rate / 2
    fmax = nyquist if config.fmax is None else float(config.fmax)
    if not 0 <= config.fmin < fmax <= nyquist:
        raise ArgError(("config.fmin", "config.fmax"), config.fmin,
                       f"MelConfig.fmin={config.fmin}, fmax={config.fmax}:",
                       f"need 0 <= fmin < fmax <= sample_rate / 2 = {nyquist}.")
    available = num_frames(config.num_samples, config.hop_length)
    if config.num_frames > available:
        raise ArgError("config.num_frames", config.num_frames,
                       f"MelConfig.num_frames={config.num_frames} but a clip of num_samples={config.num_samples} "
                       f"with hop_length={config.hop_length} has only {available} frames;",
                       "lower num_frames or hop_length.")
    if not config.amin > 0:
        raise ArgError("config.amin", config.amin, f"MelConfig.amin={config.amin} must be > 0,", "e.g. 1e-10.")
    return config._replace(fmax=fmax)


# ----------------------------------------------------------------------------------------------------------------
# Mel scale and filterbank (numpy: static constants of the pipeline)
# ----------------------------------------------------------------------------------------------------------------

_SLANEY_F_SP = 200.0 / 3  # Hz per mel below the break
_SLANEY_BREAK_HZ = 1000.0
_SLANEY_BREAK_MEL = _SLANEY_BREAK_HZ / _SLANEY_F_SP  # 15 mels
_SLANEY_LOGSTEP = math.log(6.4) / 27.0  # ln(f / 1000) per mel above the break


def hz_to_mel(f_hz, scale: str = "slaney") -> np.ndarray:
    """Frequency in Hz to mels on `scale` (see the module docstring for both formulas).

    >>> float(hz_to_mel(1000.0, "htk"))  # doctest: +ELLIPSIS
    999.98...
    >>> round(float(hz_to_mel(1000.0, "slaney")), 6)
    15.0
    """
    f = np.asarray(f_hz, np.float64)
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    if scale == "slaney":
        linear = f / _SLANEY_F_SP
        log = _SLANEY_BREAK_MEL + np.log(np.maximum(f, _SLANEY_BREAK_HZ) / _SLANEY_BREAK_HZ) / _SLANEY_LOGSTEP
        return np.where(f >= _SLANEY_BREAK_HZ, log, linear)
    raise ArgError("scale", scale, f"scale={scale!r} is not a mel scale;", f"choose one of {list(MEL_SCALES)}.")


def mel_to_hz(mel, scale: str = "slaney") -> np.ndarray:
    """Inverse of `hz_to_mel`."""
    m = np.asarray(mel, np.float64)
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    if scale == "slaney":
        linear = m * _SLANEY_F_SP
        log = _SLANEY_BREAK_HZ * np.exp(_SLANEY_LOGSTEP * (np.maximum(m, _SLANEY_BREAK_MEL) - _SLANEY_BREAK_MEL))
        return np.where(m >= _SLANEY_BREAK_MEL, log, linear)
    raise ArgError("scale", scale, f"scale={scale!r} is not a mel scale;", f"choose one of {list(MEL_SCALES)}.")


def mel_frequencies(n_mels: int, fmin: float, fmax: float, scale: str = "slaney") -> np.ndarray:
    """The `n_mels + 2` filter edge frequencies, Hz, evenly spaced in mels; filter `m` peaks at `[m + 1]`."""
    mels = np.linspace(hz_to_mel(fmin, scale), hz_to_mel(fmax, scale), n_mels + 2)
    return mel_to_hz(mels, scale)


def mel_filterbank(config: MelConfig = PAPER) -> np.ndarray:
    """Triangular mel filters `[n_mels, n_fft // 2 + 1] float32`; row `m` weights the FFT bins of filter `m`.

    FFT bin `k` has frequency `k * sample_rate / n_fft`. Filter `m` is `max(0, min(rise, fall))` with
    `rise = (f - e[m]) / (e[m+1] - e[m])`, `fall = (e[m+2] - f) / (e[m+2] - e[m+1])` over the edges
    `e = mel_frequencies(...)`, times `2 / (e[m+2] - e[m])` when `norm="slaney"`.
    """
    config = _validate(config)
    return _mel_filterbank(config.sample_rate, config.n_fft, config.n_mels, float(config.fmin),
                           float(config.fmax), config.scale, config.norm)


@functools.lru_cache(maxsize=16)
def _mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax, scale, norm) -> np.ndarray:
    fft_hz = np.arange(n_fft // 2 + 1) * (sample_rate / n_fft)  # [F]
    edges = mel_frequencies(n_mels, fmin, fmax, scale)  # [M + 2]
    lower, center, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]  # [M, 1] each
    rise = (fft_hz[None, :] - lower) / (center - lower)
    fall = (upper - fft_hz[None, :]) / (upper - center)
    weights = np.maximum(0.0, np.minimum(rise, fall))  # [M, F]
    if norm == "slaney":
        weights *= 2.0 / (upper - lower)
    out = weights.astype(np.float32)
    out.flags.writeable = False
    return out


# ----------------------------------------------------------------------------------------------------------------
# Waveform -> STFT -> log-mel (jax.numpy: jit/vmap-able, any leading axes)
# ----------------------------------------------------------------------------------------------------------------


def int16_to_float(wave) -> jax.Array:
    """PCM `int16` samples to `float32` in `[-1, 1)` (divides by 32768)."""
    return jnp.asarray(wave).astype(jnp.float32) / jnp.float32(32768.0)


def pad_or_crop(wave_N, num_samples: int = 16000) -> jax.Array:
    """`[..., N] -> [..., num_samples]`: zeros appended to a short clip, a long one cut after `num_samples`."""
    wave_N = jnp.asarray(wave_N)
    n = wave_N.shape[-1]
    if n >= num_samples:
        return wave_N[..., :num_samples]
    pad = [(0, 0)] * (wave_N.ndim - 1) + [(0, num_samples - n)]
    return jnp.pad(wave_N, pad)


def num_frames(num_samples: int, hop_length: int) -> int:
    """Frames of a centred STFT of `num_samples` samples: `1 + num_samples // hop_length`."""
    return 1 + num_samples // hop_length


def hann_window(n: int) -> np.ndarray:
    """Periodic Hann window `[n] float32`: `0.5 - 0.5 cos(2 pi i / n)` (the DFT-even form STFTs use)."""
    return (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)).astype(np.float32)


def frame(wave_N, n_fft: int, hop_length: int) -> jax.Array:
    """Centred frames `[..., T, n_fft]` of `wave_N: [..., N]`: zero-pad `n_fft // 2` each side, frame `t` starts
    at padded sample `t * hop_length`, `T = 1 + N // hop_length`."""
    wave_N = jnp.asarray(wave_N)
    n = wave_N.shape[-1]
    half = n_fft // 2
    padded = jnp.pad(wave_N, [(0, 0)] * (wave_N.ndim - 1) + [(half, half)])
    t = num_frames(n, hop_length)
    idx_TxL = np.arange(t)[:, None] * hop_length + np.arange(n_fft)[None, :]
    return padded[..., idx_TxL]


def power_spectrogram(wave_N, n_fft: int = 2048, hop_length: int = 512) -> jax.Array:
    """`|STFT|^2` of `wave_N: [..., N]` with a periodic Hann window: `[..., n_fft // 2 + 1, T]`."""
    frames_TxL = frame(wave_N, n_fft, hop_length)
    window = jnp.asarray(hann_window(n_fft)).reshape((1,) * (frames_TxL.ndim - 1) + (n_fft,))
    frames_TxL = frames_TxL * window
    spec_TxF = jnp.fft.rfft(frames_TxL, n=n_fft, axis=-1)
    power_TxF = jnp.square(spec_TxF.real) + jnp.square(spec_TxF.imag)
    return jnp.swapaxes(power_TxF, -1, -2)


def log_mel_spectrogram(wave_N, config: MelConfig = PAPER) -> jax.Array:
    """Log-mel spectrogram `[..., n_mels, num_frames] float32` of `wave_N: [..., N]` (float samples).

    `10 log10(max(mel_power, amin))` (decibels, no reference level, no top-dB clipping) of the first
    `num_frames` frames, after `pad_or_crop` to `num_samples`.
    """
    config = _validate(config)
    wave = pad_or_crop(jnp.asarray(wave_N, jnp.float32), config.num_samples)
    power_FxT = power_spectrogram(wave, config.n_fft, config.hop_length)
    fbank_MxF = jnp.asarray(mel_filterbank(config))
    mel_MxT = jnp.einsum("mf,...ft->...mt", fbank_MxF, power_FxT, precision=jax.lax.Precision.HIGHEST)
    log_mel = 10.0 * jnp.log10(jnp.maximum(mel_MxT, jnp.float32(config.amin)))
    return log_mel[..., : config.num_frames]


def speech_features(wave_N, config: MelConfig = PAPER) -> jax.Array:
    """The paper's input: `log_mel_spectrogram` flattened mel-major, `[..., n_mels * num_frames]` (4096).

    Feature `m * num_frames + t` is mel `m` at frame `t`, the layout of `istjax.data.load_synthetic_speech`.
    """
    log_mel = log_mel_spectrogram(wave_N, config)
    return log_mel.reshape(*log_mel.shape[:-2], config.num_features)
