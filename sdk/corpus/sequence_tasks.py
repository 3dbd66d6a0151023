"""Tasks of the corpus's sequence models: streaming VAD, log-mel front end, wake word, turn
detection (audio, :mod:`sdk.corpus.audio`) and table-structure recognition (rendered tables).

Metrics: VAD — share of chunks whose speech decision (probability >= 0.5) matches FP32;
log-mel — share of mel bins within 1 dB of FP32; wake word, turn detector — 1 - mean absolute
difference of the probability; embedding — mean cosine; table structure — 1 - token error rate of
the decoded HTML structure.

The VAD's feeds carry the recurrent state the FP32 model reached on the stream so far (so each feed
is one streaming step, runnable on its own); the wake-word model's feeds are the embeddings the
corpus's own front end and embedding model compute from the audio.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from . import CorpusModel
from . import audio as au
from ..metrics import one_minus_error_rate
from .tasks import Outputs, Task, register_task

Feed = Dict[str, np.ndarray]


def _session(name: str) -> Any:
    import onnxruntime as ort

    from . import path

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path(name)), so, providers=["CPUExecutionProvider"])


class _FirstOutput(Task):
    """Decodes to the first output, flattened (a probability, a spectrum, an embedding)."""

    def decode(self, outputs: Outputs) -> np.ndarray:
        return np.asarray(outputs[0], np.float64).ravel()


def _mean_abs_agreement(reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
    ref = np.concatenate([np.asarray(r[0], np.float64).ravel() for r in reference])
    cand = np.concatenate([np.asarray(c[0], np.float64).ravel() for c in candidate])
    return float(max(0.0, 1.0 - np.mean(np.abs(ref - cand)))) if len(ref) else 1.0


@register_task("vad-stream")
class VadStream(_FirstOutput):
    """Silero VAD v5: 512 new samples at 16 kHz with the previous chunk's last 64 as context
    (``input [1, 576]``), ``state [2, 1, 128]`` carried from ``stateN``, ``sr`` = 16000."""

    metric_name = "VAD decision agreement vs FP32"
    chunk, context, rate = 512, 64, 16000

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        sess = _session(model.name)
        stride = 3
        x = au.speech_like((n * stride + 2) * self.chunk / self.rate, seed)
        state = np.zeros((2, 1, 128), np.float32)
        sr = np.array(self.rate, np.int64)
        ctx = np.zeros(self.context, np.float32)
        feeds: List[Feed] = []
        for k in range(n * stride):
            new = x[k * self.chunk:(k + 1) * self.chunk]
            feed: Feed = {"input": np.concatenate([ctx, new])[None].astype(np.float32), "state": state, "sr": sr}
            if k % stride == stride - 1:
                feeds.append(feed)
            _, state = sess.run(None, feed)
            ctx = new[-self.context:]
        return feeds

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        ref = np.array([float(np.asarray(r[0]).ravel()[0]) >= 0.5 for r in reference])
        cand = np.array([float(np.asarray(c[0]).ravel()[0]) >= 0.5 for c in candidate])
        return float((ref == cand).mean()) if len(ref) else 1.0


def _mel_input(model: CorpusModel, n: int, seed: int) -> List[np.ndarray]:
    """Waveforms ``[1, samples]`` in int16 scale (as openWakeWord feeds its front end)."""
    samples = next(iter(model.input_shapes.values()))[-1]
    return [(au.speech_like(samples / au.RATE_HZ, seed * 1000 + i) * 32767.0)[None].astype(np.float32)
            for i in range(n)]


@register_task("log-mel")
class LogMel(_FirstOutput):
    """openWakeWord's mel front end: waveform ``[1, samples]`` -> dB mel ``[frames, 1, ?, 32]``."""

    metric_name = "mel bins within 1 dB vs FP32"

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        return [{"input": x} for x in _mel_input(model, n, seed)]

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        near = total = 0
        for r, c in zip(reference, candidate):
            a, b = np.asarray(r[0], np.float64), np.asarray(c[0], np.float64)
            near += int((np.abs(a - b) <= 1.0).sum())
            total += a.size
        return near / total if total else 1.0


def _embedding_windows(audio_int16: np.ndarray) -> np.ndarray:
    """openWakeWord's front end: dB mel -> ``/10 + 2`` -> windows of 76 frames every 8 ``[N, 76, 32, 1]``."""
    mel = _session("oww-melspectrogram").run(None, {"input": audio_int16})[0]
    mel = np.squeeze(mel) / 10.0 + 2.0                       # [frames, 32]
    starts = range(0, mel.shape[0] - 76 + 1, 8)
    return np.stack([mel[s:s + 76] for s in starts])[..., None].astype(np.float32)


@register_task("embedding")
class Embedding(_FirstOutput):
    """openWakeWord's speech embedding: 76 mel frames ``[1, 76, 32, 1]`` -> ``[1, 1, 1, 96]``."""

    metric_name = "embedding cosine vs FP32"

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        audio = (au.speech_like(1.0 + 0.08 * n, seed) * 32767.0)[None].astype(np.float32)
        wins = _embedding_windows(audio)
        return [{"input_1": wins[i % len(wins)][None]} for i in range(n)]

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        cos = []
        for r, c in zip(reference, candidate):
            a, b = np.asarray(r[0], np.float64).ravel(), np.asarray(c[0], np.float64).ravel()
            cos.append(float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12)))
        return float(np.mean(cos)) if cos else 1.0


@register_task("wake-word")
class WakeWord(_FirstOutput):
    """An openWakeWord head: 16 embeddings ``[1, 16, 96]`` -> probability ``[1, 1]``."""

    metric_name = "1 - mean |score difference| vs FP32"

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        emb = _session("oww-embedding")
        feeds = []
        for i in range(n):
            audio = (au.speech_like(2.0, seed * 1000 + i) * 32767.0)[None].astype(np.float32)
            wins = _embedding_windows(audio)[-16:]
            e = emb.run(None, {"input_1": wins})[0].reshape(1, 16, 96)
            feeds.append({"input_1": e.astype(np.float32)})
        return feeds

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        return _mean_abs_agreement(reference, candidate)


@register_task("turn-detect")
class TurnDetect(_FirstOutput):
    """Smart Turn v3 (a Whisper-tiny encoder with a classifier): 8 s of Whisper log-mel
    ``[1, 80, 800]`` -> probability that the speaker's turn is complete ``[1, 1]``."""

    metric_name = "1 - mean |probability difference| vs FP32"

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        return [{"input_features": au.whisper_log_mel(au.speech_like(3.0 + (i % 5), seed * 1000 + i))[None]}
                for i in range(n)]

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        return _mean_abs_agreement(reference, candidate)


def render_table(seed: int, size: int = 488) -> np.ndarray:
    """A rendered table (uint8 BGR): a header row and 2-7 body rows of 2-5 columns with ruled
    cells and short words or numbers, on a page margin."""
    from . import images as im

    cv2 = im._cv2()
    rng = np.random.default_rng(seed)
    rows, cols = int(rng.integers(3, 9)), int(rng.integers(2, 6))
    cw, ch = int(rng.integers(90, 150)), int(rng.integers(28, 44))
    w, h = cols * cw + 40, rows * ch + 40
    img = np.full((h, w, 3), 255, np.uint8)
    for r in range(rows + 1):
        cv2.line(img, (20, 20 + r * ch), (20 + cols * cw, 20 + r * ch), (0, 0, 0), 2 if r in (0, 1) else 1)
    for c in range(cols + 1):
        cv2.line(img, (20 + c * cw, 20), (20 + c * cw, 20 + rows * ch), (0, 0, 0), 1)
    for r in range(rows):
        for c in range(cols):
            text = im.random_text(rng, 3, 8) if r == 0 or rng.random() < 0.5 else f"{rng.uniform(0, 999):.1f}"
            cv2.putText(img, text[: max(3, cw // 14)], (26 + c * cw, 20 + r * ch + ch * 2 // 3),
                        cv2.FONT_HERSHEY_SIMPLEX, 0.5, (20, 20, 20), 2 if r == 0 else 1, cv2.LINE_AA)
    return img


@register_task("table-structure")
class TableStructure(Task):
    """PP-Structure SLANet: a table image, long side 488, padded to ``[1, 3, 488, 488]`` ->
    structure token probabilities ``[1, 501, 30]`` (decoded up to ``eos``) and cell boxes."""

    metric_name = "1 - structure token error rate vs FP32"
    size = 488
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)

    def sample_inputs(self, model: CorpusModel, n: int, seed: int) -> List[Feed]:
        from . import images as im

        cv2 = im._cv2()
        feeds = []
        for i in range(n):
            img = render_table(seed * 1000 + i)
            h, w = img.shape[:2]
            r = self.size / max(h, w)
            img = cv2.resize(img, (int(w * r), int(h * r)))
            x = (img.astype(np.float32) / 255.0 - self.mean) / self.std
            pad = np.zeros((self.size, self.size, 3), np.float32)
            pad[:x.shape[0], :x.shape[1]] = x
            feeds.append({"x": np.ascontiguousarray(pad.transpose(2, 0, 1)[None])})
        return feeds

    def decode(self, outputs: Outputs) -> List[int]:
        probs = np.asarray(outputs[1])[0]
        eos = probs.shape[-1] - 1
        out: List[int] = []
        for k, t in enumerate(probs.argmax(-1).tolist()):
            if k > 0 and t == eos:
                break
            if t not in (0, eos):
                out.append(t)
        return out

    def agreement(self, reference: Sequence[Outputs], candidate: Sequence[Outputs]) -> float:
        return one_minus_error_rate((self.decode(r), self.decode(c)) for r, c in zip(reference, candidate))
