"""The speech feature pipeline (istjax.data.audio) against hand-computed values and a plain numpy loop."""

import jax
import numpy as np
import pytest

from istjax.data import audio


def tone(freq_hz, n=16000, sr=16000, amp=0.5):
    return (amp * np.sin(2 * np.pi * freq_hz * np.arange(n) / sr)).astype(np.float32)


def test_mel_scales_hand_computed():
    # HTK: 2595 log10(1 + 700/700) = 2595 log10 2; Slaney: linear 3f/200 below 1 kHz, 15 + 27 at 6.4 kHz.
    assert float(audio.hz_to_mel(700.0, "htk")) == pytest.approx(2595 * np.log10(2))
    assert float(audio.hz_to_mel(500.0, "slaney")) == pytest.approx(7.5)
    assert float(audio.hz_to_mel(6400.0, "slaney")) == pytest.approx(42.0)
    f = np.array([0.0, 123.0, 999.0, 1000.0, 4321.0, 8000.0])
    for scale in audio.MEL_SCALES:
        np.testing.assert_allclose(audio.mel_to_hz(audio.hz_to_mel(f, scale), scale), f, atol=1e-6)


def _reference_filterbank(sr, n_fft, n_mels, scale):
    """Independent filterbank: a loop over filters and FFT bins with the triangle written out."""
    if scale == "htk":
        to_mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
        to_hz = lambda m: 700 * (10 ** (m / 2595) - 1)  # noqa: E731
    else:
        to_mel = lambda f: f * 3 / 200 if f < 1000 else 15 + 27 * np.log(f / 1000) / np.log(6.4)  # noqa: E731
        to_hz = lambda m: m * 200 / 3 if m < 15 else 1000 * 6.4 ** ((m - 15) / 27)  # noqa: E731
    top = to_mel(sr / 2)
    edges = [to_hz(top * i / (n_mels + 1)) for i in range(n_mels + 2)]
    out = np.zeros((n_mels, n_fft // 2 + 1))
    for m in range(n_mels):
        lo, c, hi = edges[m], edges[m + 1], edges[m + 2]
        for k in range(n_fft // 2 + 1):
            f = k * sr / n_fft
            if lo < f <= c:
                w = (f - lo) / (c - lo)
            elif c < f < hi:
                w = (hi - f) / (hi - c)
            else:
                w = 0.0
            out[m, k] = w * 2 / (hi - lo)
    return out


def _reference_log_mel(wave, sr=16000, n_fft=2048, hop=512, n_mels=128, frames=32, scale="slaney"):
    """Direct computation: pad, loop over frames, np.fft.rfft, |.|^2, filterbank, dB."""
    wave = np.concatenate([wave, np.zeros(max(0, sr - len(wave)))])[:sr].astype(np.float64)
    padded = np.concatenate([np.zeros(n_fft // 2), wave, np.zeros(n_fft // 2)])
    window = np.hanning(n_fft + 1)[:-1]  # periodic Hann
    fb = _reference_filterbank(sr, n_fft, n_mels, scale)
    cols = []
    for t in range(frames):
        seg = padded[t * hop : t * hop + n_fft] * window
        cols.append(np.abs(np.fft.rfft(seg)) ** 2)
    power = np.stack(cols, axis=1)  # [F, T]
    return 10 * np.log10(np.maximum(fb @ power, 1e-10))


@pytest.mark.parametrize("scale", audio.MEL_SCALES)
def test_filterbank_matches_loop(scale):
    cfg = audio.MelConfig(n_fft=256, n_mels=20, scale=scale)
    np.testing.assert_allclose(audio.mel_filterbank(cfg), _reference_filterbank(16000, 256, 20, scale),
                               rtol=1e-5, atol=1e-9)


def test_paper_shape_and_frames():
    assert audio.num_frames(16000, 512) == 32 and audio.PAPER.num_features == 4096
    wave = tone(1000.0)
    assert audio.log_mel_spectrogram(wave).shape == (128, 32)
    assert audio.speech_features(wave).shape == (4096,)
    batch = np.stack([tone(300.0), tone(1000.0), tone(3000.0)])
    feats = jax.jit(audio.speech_features)(batch)
    assert feats.shape == (3, 4096) and feats.dtype == np.float32
    # A short clip is zero-padded at the end, a long one cut after 16000 samples.
    short, long = tone(1000.0, n=12000), tone(1000.0, n=20000)
    padded = np.concatenate([short, np.zeros(4000, np.float32)])
    np.testing.assert_array_equal(np.asarray(audio.speech_features(short)),
                                  np.asarray(audio.speech_features(padded)))
    np.testing.assert_allclose(np.asarray(audio.speech_features(long)), np.asarray(feats[1]), atol=1e-4)
    # Flattening is mel-major: feature m * 32 + t is mel m, frame t.
    np.testing.assert_array_equal(np.asarray(audio.speech_features(batch[1])).reshape(128, 32),
                                  np.asarray(audio.log_mel_spectrogram(batch[1])))


@pytest.mark.parametrize("freq", [440.0, 1000.0, 3000.0, 6000.0])
def test_tone_peaks_in_its_mel_bin(freq):
    log_mel = np.asarray(audio.log_mel_spectrogram(tone(freq)))  # [128, 32]
    centers = audio.mel_frequencies(128, 0.0, 8000.0)[1:-1]
    expected = int(np.argmin(np.abs(centers - freq)))
    # Every interior frame (the edge frames see the zero padding) peaks at the tone's filter.
    assert set(np.argmax(log_mel[:, 2:-2], axis=0).tolist()) == {expected}


@pytest.mark.parametrize("scale", audio.MEL_SCALES)
def test_pipeline_matches_direct_numpy(scale):
    rng = np.random.default_rng(0)
    wave = (tone(523.0) + tone(2100.0, amp=0.2) + 0.01 * rng.standard_normal(16000)).astype(np.float32)
    wave[:3000] *= np.linspace(0, 1, 3000, dtype=np.float32)  # an onset, so frames differ
    got = np.asarray(audio.log_mel_spectrogram(wave, audio.PAPER._replace(scale=scale)))
    want = _reference_log_mel(wave, scale=scale)
    np.testing.assert_allclose(got, want, atol=2e-2)  # dB; float32 FFT vs float64 loop


def test_int16_and_silence():
    pcm = np.array([-32768, 0, 16384], np.int16)
    np.testing.assert_allclose(np.asarray(audio.int16_to_float(pcm)), [-1.0, 0.0, 0.5])
    silent = np.asarray(audio.speech_features(np.zeros(16000, np.float32)))
    np.testing.assert_allclose(silent, -100.0)  # 10 log10(amin = 1e-10)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="num_frames=40"):
        audio.log_mel_spectrogram(np.zeros(16000, np.float32), audio.PAPER._replace(num_frames=40))
    with pytest.raises(ValueError, match="scale='bark'"):
        audio.mel_filterbank(audio.PAPER._replace(scale="bark"))
