"""The synthesised keyword set (`istjax.data.keywords`): espeak-ng voices, clips, the held-out-voice split, errors."""

from __future__ import annotations

import numpy as np
import pytest

from istjax.data import keywords as K
from istjax.data import registry

pytest.importorskip("espeakng_loader", reason="espeakng-loader not installed (pip install -e '.[speech]')")


def test_every_voice_speaks():
    synth = K.Synthesiser()
    assert synth.sample_rate == 22050
    for voice in K._voices(False) + K._voices(True):
        wave = synth.speak("sheila", voice, 170, 50)
        assert wave.dtype == np.int16 and 2000 < len(wave) < 22050 and np.abs(wave).max() > 1000, voice
    with pytest.raises(ValueError, match="no voice 'xx-nowhere'"):
        synth.speak("yes", "xx-nowhere", 170, 50)


def test_test_voices_are_held_out():
    train, test = set(K._voices(False)), set(K._voices(True))
    assert not train & test and len(train) == 8 * 16 and len(test) == 8 * 4
    assert len(K.WORDS) == 35 and len(set(K.WORDS)) == 35


def test_a_clips_choices_follow_its_seed():
    """Same seed: the same word placement and noise level up to espeak-ng's own small variations; another seed: a
    different clip."""
    synth = K.Synthesiser()
    a = K._clip(synth, "marvin", "en-us+f2", np.random.default_rng([0, 16, 3]))
    b = K._clip(synth, "marvin", "en-us+f2", np.random.default_rng([0, 16, 3]))
    c = K._clip(synth, "marvin", "en-us+f2", np.random.default_rng([0, 16, 4]))
    assert a.shape == (16000,) and a.dtype == np.float32 and np.isfinite(a).all()
    assert abs(np.std(a) / np.std(b) - 1) < 0.1  # same speed, pitch, offset and SNR
    assert np.corrcoef(a, b)[0, 1] > np.corrcoef(a, c)[0, 1]


def test_dataset_split_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path))
    d = registry.load_dataset("spoken_keywords", per_word=4, test_fraction=0.25)
    assert d.train_x.shape == (35 * 3, 4096) and d.test_x.shape == (35, 4096) and d.num_classes == 35
    assert np.bincount(d.test_y).tolist() == [1] * 35 and np.bincount(d.train_y).tolist() == [3] * 35
    assert len(list(tmp_path.glob("keywords-*.npz"))) == 1
    again = K.load_spoken_keywords(per_word=4, test_fraction=0.25)
    np.testing.assert_array_equal(again.test_x, d.test_x)


@pytest.mark.parametrize("kwargs,match", [({"per_word": 1}, "per_word=1"), ({"test_fraction": 0.0}, "test_fraction"),
                                          ({"per_word": 3, "test_fraction": 0.01}, "test_fraction"),
                                          ({"seed": -1}, "seed=-1")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        K.load_spoken_keywords(cache=False, **kwargs)
