"""Audio for the corpus's audio models: seeded speech-like signals and the front ends the models expect.

No wheel of the corpus ships recorded speech, so the signals are **synthetic** and labelled so:
voiced syllables (a glottal pulse train at 90-240 Hz through three formant resonators, with a
syllable envelope and pitch drift), unvoiced bursts (shaped noise), pauses and a little background
noise, 16 kHz mono. They exercise what the models see in use (speech-shaped spectra, onsets and
silences); they are not a word-accuracy test set. Everything is deterministic for a given seed.

:func:`whisper_log_mel` is the Whisper feature extractor (80 slaney mel bins, 400-sample Hann
window, hop 160, ``log10`` clamped 8 below the maximum, ``(x + 4) / 4``) in NumPy, which the
turn detector was trained on.
"""
from __future__ import annotations

from typing import List

import numpy as np

__all__ = ["RATE_HZ", "speech_like", "whisper_log_mel", "mel_filters"]

RATE_HZ = 16000

# formant centre frequencies (Hz) of a few vowels (adult averages)
_VOWELS = ((730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480), (570, 840, 2410))


def _resonator(x: np.ndarray, freq: float, bw: float, rate: int) -> np.ndarray:
    """A two-pole resonator at ``freq`` Hz with bandwidth ``bw`` Hz (direct form, in float64)."""
    r = np.exp(-np.pi * bw / rate)
    a1, a2 = -2 * r * np.cos(2 * np.pi * freq / rate), r * r
    y = np.zeros_like(x)
    y1 = y2 = 0.0
    for i in range(len(x)):
        v = x[i] - a1 * y1 - a2 * y2
        y[i] = v
        y2, y1 = y1, v
    return y * (1 - r)


def _syllable(rng: np.random.Generator, rate: int) -> np.ndarray:
    n = int(rate * rng.uniform(0.12, 0.32))
    t = np.arange(n) / rate
    f0 = rng.uniform(90, 240) * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(1, 4) * t))
    phase = np.cumsum(f0 / rate)
    pulses = (np.diff(np.floor(phase), prepend=0.0) > 0).astype(np.float64)
    src = pulses + 0.02 * rng.standard_normal(n)
    formants = _VOWELS[int(rng.integers(len(_VOWELS)))]
    voiced = sum(_resonator(src, f, 60 + 20 * k, rate) / (k + 1) for k, f in enumerate(formants))
    env = np.sin(np.pi * np.linspace(0, 1, n)) ** 0.6
    out = voiced * env
    if rng.random() < 0.4:  # an unvoiced consonant before the vowel
        m = int(rate * rng.uniform(0.03, 0.08))
        burst = np.diff(rng.standard_normal(m + 1)) * 0.15 * np.hanning(m)
        out = np.concatenate([burst, out])
    return out


def speech_like(seconds: float, seed: int, rate: int = RATE_HZ) -> np.ndarray:
    """``seconds`` of synthetic speech-like audio (float32 in [-1, 1]): phrases of syllables
    separated by pauses, over quiet background noise."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    parts: List[np.ndarray] = []
    total = 0
    while total < n:
        if rng.random() < 0.35:  # a pause
            seg = np.zeros(int(rate * rng.uniform(0.15, 0.6)))
        else:
            seg = _syllable(rng, rate)
            seg = seg / (np.abs(seg).max() + 1e-9) * rng.uniform(0.2, 0.8)
        parts.append(seg)
        total += len(seg)
    x = np.concatenate(parts)[:n] + 0.003 * rng.standard_normal(n)
    return np.clip(x, -1, 1).astype(np.float32)


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    f = np.asarray(f, np.float64)
    lin = f / (200.0 / 3)
    log = 15.0 + np.log(np.maximum(f, 1e-9) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log, lin)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), m * (200.0 / 3))


def mel_filters(n_mels: int = 80, n_fft: int = 400, rate: int = RATE_HZ) -> np.ndarray:
    """Slaney-scale, slaney-normalised triangular mel filters ``[n_mels, n_fft // 2 + 1]``."""
    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)
    pts = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(rate / 2)), n_mels + 2))
    fb = np.zeros((n_mels, len(freqs)))
    for i in range(n_mels):
        lo, c, hi = pts[i], pts[i + 1], pts[i + 2]
        fb[i] = np.maximum(0, np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)))
        fb[i] *= 2.0 / (hi - lo)
    return fb


def whisper_log_mel(audio: np.ndarray, frames: int = 800, rate: int = RATE_HZ) -> np.ndarray:
    """Whisper's log-mel features ``[80, frames]`` (float32) of 16 kHz ``audio``; the audio is
    padded with zeros (at the start, as the turn detector expects the latest speech last) or cut
    to ``frames * 160`` samples."""
    n = frames * 160
    x = np.asarray(audio, np.float64)[-n:]
    x = np.concatenate([np.zeros(n - len(x)), x])
    x = np.pad(x, (200, 200), mode="reflect")
    win = np.hanning(401)[:-1]
    idx = np.arange(400)[None, :] + 160 * np.arange(frames + 1)[:, None]
    spec = np.abs(np.fft.rfft(x[idx] * win, axis=1)) ** 2
    mel = mel_filters(80, 400, rate) @ spec[:-1].T
    logm = np.log10(np.maximum(mel, 1e-10))
    logm = np.maximum(logm, logm.max() - 8.0)
    return ((logm + 4.0) / 4.0).astype(np.float32)
