"""Robustness sweep: corrupt inputs (blur, noise, brightness, contrast, jpeg, rotate, occlusion at
severities 1-5), run the model, and measure how far the outputs drift from the clean ones.

Corruptions work on HWC images: uint8 (0-255) or float arrays with a value range (e.g. 0-1 pixels);
both are mapped to [0, 1], corrupted, and mapped back to their dtype and range. Randomness is
seeded per (seed, corruption, severity, sample index), so a sweep is reproducible and a sample's
corruption does not depend on which other samples were swept. Pure NumPy: JPEG is emulated with
the codec's own lossy steps (YCbCr, 4:2:0 chroma subsampling, 8x8 DCT, IJG quality-scaled
quantisation tables), so no image codec is needed.

::

    from sdk.robustness import corrupt, sweep
    noisy = corrupt(image_u8, "noise", severity=3, seed=0)
    result = sweep(infer, images, prepare=to_batch, labels=y, corruptions=["blur", "noise"], severities=[1, 3, 5])
    print(result.worst("top1_drop"))
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import InputError
from .registry import Registry

__all__ = ["CORRUPTIONS", "corrupt", "corrupt_batch", "parse_severities", "parse_corruptions",
           "to_hwc", "from_hwc", "sweep", "RobustnessResult", "SEVERITIES"]

SEVERITIES = (1, 2, 3, 4, 5)
Corruption = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]
#: Corruption name -> ``fn(image01_hwc_float32, severity, rng) -> image01`` (plugins: entry-point
#: group ``edgesdk.corruptions``).
CORRUPTIONS: "Registry[Corruption]" = Registry("corruption", entry_points="edgesdk.corruptions")


def register_corruption(name: str) -> Callable[[Corruption], Corruption]:
    """Decorator: register ``fn(image01_hwc_float32, severity, rng) -> image01`` under ``name``."""
    return CORRUPTIONS.decorator(name)


def _size_scale(img: np.ndarray) -> float:
    """Pixel-sized parameters grow with the image: 1 for images up to 64 px, linear above."""
    return max(1.0, min(img.shape[:2]) / 64.0)


def _gauss_kernel(sigma: float) -> np.ndarray:
    radius = max(1, int(math.ceil(3 * sigma)))
    x = np.arange(-radius, radius + 1, dtype=np.float32)
    k = np.exp(-(x ** 2) / (2 * sigma ** 2))
    return k / k.sum()


def _convolve_axis(img: np.ndarray, k: np.ndarray, axis: int) -> np.ndarray:
    r = len(k) // 2
    pad = [(0, 0)] * img.ndim
    pad[axis] = (r, r)
    padded = np.pad(img, pad, mode="reflect" if img.shape[axis] > r else "edge")
    out = np.zeros_like(img)
    n = img.shape[axis]
    for i, w in enumerate(k):
        out += w * np.take(padded, np.arange(i, i + n), axis=axis)
    return out


@register_corruption("blur")
def _blur(img: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian blur, sigma 0.4-1.5 px (x image size / 64 above 64 px)."""
    sigma = (0.4, 0.6, 0.8, 1.0, 1.5)[severity - 1] * _size_scale(img)
    k = _gauss_kernel(sigma)
    return _convolve_axis(_convolve_axis(img, k, 0), k, 1)


@register_corruption("noise")
def _noise(img: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Additive Gaussian noise, std 0.04-0.26 of the full range."""
    std = (0.04, 0.08, 0.12, 0.18, 0.26)[severity - 1]
    return img + rng.standard_normal(img.shape).astype(np.float32) * std


@register_corruption("brightness")
def _brightness(img: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Brighter by 0.1-0.5 of the full range."""
    return img + (0.1, 0.2, 0.3, 0.4, 0.5)[severity - 1]


@register_corruption("contrast")
def _contrast(img: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Contrast scaled to 0.4-0.05 around the per-channel mean."""
    c = (0.4, 0.3, 0.2, 0.1, 0.05)[severity - 1]
    mean = img.mean(axis=(0, 1), keepdims=True)
    return (img - mean) * c + mean


@register_corruption("rotate")
def _rotate(img: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Rotation by 5-30 degrees about the centre (random direction), bilinear, black corners."""
    deg = (5.0, 10.0, 15.0, 20.0, 30.0)[severity - 1] * (1 if rng.random() < 0.5 else -1)
    h, w = img.shape[:2]
    t = math.radians(deg)
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    # inverse map: output pixel -> source position
    sy = math.cos(t) * (yy - cy) - math.sin(t) * (xx - cx) + cy
    sx = math.sin(t) * (yy - cy) + math.cos(t) * (xx - cx) + cx
    inside = (sy >= -0.5) & (sy <= h - 0.5) & (sx >= -0.5) & (sx <= w - 0.5)
    sy, sx = np.clip(sy, 0, h - 1), np.clip(sx, 0, w - 1)
    y0, x0 = np.floor(sy).astype(int), np.floor(sx).astype(int)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    wy, wx = (sy - y0)[..., None], (sx - x0)[..., None]
    out = (img[y0, x0] * (1 - wx) * (1 - wy) + img[y0, x1] * wx * (1 - wy)
           + img[y1, x0] * (1 - wx) * wy + img[y1, x1] * wx * wy)
    return out * inside[..., None]


@register_corruption("occlusion")
def _occlusion(img: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """A mid-grey square covering 5-40 % of the area at a random position."""
    frac = (0.05, 0.1, 0.2, 0.3, 0.4)[severity - 1]
    h, w = img.shape[:2]
    side_h = max(1, int(round(h * math.sqrt(frac))))
    side_w = max(1, int(round(w * math.sqrt(frac))))
    top = int(rng.integers(0, h - side_h + 1))
    left = int(rng.integers(0, w - side_w + 1))
    out = img.copy()
    out[top:top + side_h, left:left + side_w] = 0.5
    return out


# -- JPEG (the codec's lossy step, in NumPy) ------------------------------------------------------
_Q_LUMA = np.array([
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
    14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99], np.float32).reshape(8, 8)
_Q_CHROMA = np.full((8, 8), 99.0, np.float32)
_Q_CHROMA[:4, :4] = np.array([17, 18, 24, 47, 18, 21, 26, 66, 24, 26, 56, 99, 47, 66, 99, 99], np.float32).reshape(4, 4)


def _dct_matrix() -> np.ndarray:
    k = np.arange(8)[:, None]
    n = np.arange(8)[None, :]
    d = np.cos(np.pi * (2 * n + 1) * k / 16.0) * math.sqrt(2 / 8.0)
    d[0] /= math.sqrt(2.0)
    return d.astype(np.float32)


_DCT = _dct_matrix()


def _quality_table(base: np.ndarray, quality: int) -> np.ndarray:
    scale = 5000.0 / quality if quality < 50 else 200.0 - 2 * quality
    return np.clip(np.floor((base * scale + 50) / 100), 1, 255)


def _jpeg_plane(plane: np.ndarray, table: np.ndarray) -> np.ndarray:
    h, w = plane.shape
    ph, pw = -h % 8, -w % 8
    p = np.pad(plane, ((0, ph), (0, pw)), mode="edge") - 128.0
    bh, bw = p.shape[0] // 8, p.shape[1] // 8
    blocks = p.reshape(bh, 8, bw, 8).transpose(0, 2, 1, 3)
    coef = _DCT @ blocks @ _DCT.T
    coef = np.round(coef / table) * table
    back = (_DCT.T @ coef @ _DCT).transpose(0, 2, 1, 3).reshape(bh * 8, bw * 8) + 128.0
    return np.clip(np.round(back[:h, :w]), 0, 255)


def _downsample2(plane: np.ndarray) -> np.ndarray:
    """4:2:0 chroma: the mean of each 2x2 block (edge-padded to even size)."""
    p = np.pad(plane, ((0, plane.shape[0] % 2), (0, plane.shape[1] % 2)), mode="edge")
    return p.reshape(p.shape[0] // 2, 2, p.shape[1] // 2, 2).mean(axis=(1, 3))


def _upsample2(plane: np.ndarray, h: int, w: int) -> np.ndarray:
    """Back to full size with libjpeg's "fancy" upsampling (a 3/4, 1/4 triangle filter)."""
    def axis(a: np.ndarray, ax: int) -> np.ndarray:
        n = a.shape[ax]
        prev = np.take(a, np.maximum(np.arange(n) - 1, 0), axis=ax)
        nxt = np.take(a, np.minimum(np.arange(n) + 1, n - 1), axis=ax)
        even, odd = 0.75 * a + 0.25 * prev, 0.75 * a + 0.25 * nxt
        out = np.stack([even, odd], axis=ax + 1)
        shape = list(a.shape)
        shape[ax] = 2 * n
        return out.reshape(shape)

    return axis(axis(plane, 0), 1)[:h, :w]


@register_corruption("jpeg")
def _jpeg(img: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """JPEG compression at quality 50, 30, 20, 12, 7 (YCbCr 4:2:0, DCT quantisation)."""
    q = (50, 30, 20, 12, 7)[severity - 1]
    x = np.clip(np.round(img * 255.0), 0, 255).astype(np.float32)
    if x.shape[2] == 3:
        r, g, b = x[..., 0], x[..., 1], x[..., 2]
        y = 0.299 * r + 0.587 * g + 0.114 * b
        cb = -0.168736 * r - 0.331264 * g + 0.5 * b + 128
        cr = 0.5 * r - 0.418688 * g - 0.081312 * b + 128
        h, w = y.shape
        y = _jpeg_plane(y, _quality_table(_Q_LUMA, q))
        cb = _upsample2(_jpeg_plane(_downsample2(cb), _quality_table(_Q_CHROMA, q)), h, w)
        cr = _upsample2(_jpeg_plane(_downsample2(cr), _quality_table(_Q_CHROMA, q)), h, w)
        out = np.stack([y + 1.402 * (cr - 128), y - 0.344136 * (cb - 128) - 0.714136 * (cr - 128),
                        y + 1.772 * (cb - 128)], axis=-1)
    else:
        out = np.stack([_jpeg_plane(x[..., c], _quality_table(_Q_LUMA, q)) for c in range(x.shape[2])], axis=-1)
    return np.clip(out, 0, 255) / 255.0


# -- applying corruptions -----------------------------------------------------------------------
def parse_severities(value: Union[str, int, Sequence[int]]) -> List[int]:
    """``"1-5"``, ``"1,3,5"``, ``3`` or ``[1, 3]`` -> sorted unique severities, each 1..5."""
    items: List[int] = []
    try:
        if isinstance(value, int):
            items = [value]
        elif isinstance(value, str):
            for part in value.split(","):
                part = part.strip()
                if not part:
                    continue
                lo, sep, hi = part.partition("-")
                items.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        else:
            items = [int(v) for v in value]
    except (TypeError, ValueError) as exc:
        raise InputError(f"bad severities '{value}'", "write e.g. 1-5 or 1,3,5") from exc
    bad = [s for s in items if s not in SEVERITIES]
    if bad or not items:
        raise InputError(f"bad severities '{value}'", "severities are 1 to 5, e.g. 1-5 or 1,3,5")
    return sorted(set(items))


def parse_corruptions(value: Union[None, str, Sequence[str]]) -> List[str]:
    """``"blur,noise"`` or a list -> names, checked against :data:`CORRUPTIONS` (None: all)."""
    if value is None:
        return list(CORRUPTIONS)
    names = [v.strip() for v in (value.split(",") if isinstance(value, str) else value) if v.strip()]
    for n in names:
        CORRUPTIONS.canonical(n)  # unknown: an UnknownNameError (a ConfigError) listing the known ones
    if not names:
        raise InputError("no corruptions given", f"known corruptions: {', '.join(CORRUPTIONS)}")
    return names


def _rng(seed: int, name: str, severity: int, index: int) -> np.random.Generator:
    code = sum((i + 1) * ord(c) for i, c in enumerate(name))  # stable across runs (hash() is not)
    return np.random.default_rng([int(seed), code, int(severity), int(index)])


def corrupt(image: np.ndarray, name: str, severity: int, seed: int = 0, index: int = 0,
            value_range: Optional[Tuple[float, float]] = None) -> np.ndarray:
    """One corrupted copy of an HWC image (uint8, or float with ``value_range`` (lo, hi), default
    (0, 1)). Same shape and dtype out. ``index`` (the sample's position) enters the seed."""
    fn = CORRUPTIONS.load(name)
    if severity not in SEVERITIES:
        raise InputError(f"severity {severity} is not in 1-5")
    img = np.asarray(image)
    if img.ndim != 3:
        raise InputError(f"corruptions need an HWC image, got shape {img.shape}")
    if img.dtype == np.uint8:
        lo, hi = 0.0, 255.0
    elif np.issubdtype(img.dtype, np.floating):
        lo, hi = value_range or (0.0, 1.0)
    else:
        raise InputError(f"corruptions need uint8 or float images, got {img.dtype}")
    span = (hi - lo) or 1.0
    x = (img.astype(np.float32) - lo) / span
    y = fn(x, int(severity), _rng(seed, name, severity, index))
    y = np.clip(y, 0.0, 1.0) * span + lo
    if img.dtype == np.uint8:
        return np.clip(np.round(y), 0, 255).astype(np.uint8)
    return y.astype(img.dtype)


def corrupt_batch(images: Sequence[np.ndarray], name: str, severity: int, seed: int = 0,
                  value_range: Optional[Tuple[float, float]] = None) -> List[np.ndarray]:
    """:func:`corrupt` applied to every image; image ``i`` is seeded with index ``i``."""
    return [corrupt(img, name, severity, seed, i, value_range) for i, img in enumerate(images)]


def to_hwc(x: np.ndarray, layout: Optional[str] = None) -> Tuple[np.ndarray, str]:
    """A batch of model inputs [N,C,H,W] / [N,H,W,C] / [N,H,W] -> [N,H,W,C] images and the layout
    found (NCHW when dim 1 is 1 or 3 and the last is not)."""
    x = np.asarray(x)
    if x.ndim == 3:
        return x[..., None], "NHW"
    if x.ndim != 4:
        raise InputError(f"a robustness sweep needs image-shaped inputs (N,C,H,W or N,H,W,C), got {x.shape}")
    if layout is None:
        layout = "NCHW" if x.shape[1] in (1, 3) and x.shape[3] not in (1, 3) else "NHWC"
    return (x.transpose(0, 2, 3, 1) if layout == "NCHW" else x), layout


def from_hwc(x: np.ndarray, layout: str) -> np.ndarray:
    """Inverse of :func:`to_hwc`."""
    if layout == "NHW":
        return x[..., 0]
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2) if layout == "NCHW" else x)


# -- the sweep ------------------------------------------------------------------------------------
@dataclass
class RobustnessResult:
    """Rows of the sweep: per (corruption, severity) the mean ``cosine`` and ``snr_db`` of the
    outputs vs the clean outputs (per output tensor, then the worst tensor), ``agreement`` (argmax
    equal to the clean argmax, fraction), and with labels ``top1`` and ``top1_drop`` (clean minus
    corrupted, fraction). ``clean`` holds the clean top-1 when labels were given."""

    rows: List[Dict[str, Any]]
    clean: Dict[str, Any]
    settings: Dict[str, Any] = field(default_factory=dict)

    def worst(self, key: str, severities: Optional[Sequence[int]] = None) -> Optional[Dict[str, Any]]:
        """The row with the worst ``key`` (largest for drops, smallest otherwise) among
        ``severities`` (default: all), or None when no row has it."""
        rows = [r for r in self.rows if r.get(key) is not None and (not severities or r["severity"] in severities)]
        if not rows:
            return None
        return (max if key.endswith("drop") else min)(rows, key=lambda r: r[key])

    def to_dict(self) -> Dict[str, Any]:
        return {"clean": dict(self.clean), "settings": dict(self.settings), "rows": [dict(r) for r in self.rows]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RobustnessResult":
        return cls(rows=list(data["rows"]), clean=dict(data.get("clean", {})), settings=dict(data.get("settings", {})))


def _argmax_output(outputs: Mapping[str, np.ndarray]) -> Optional[np.ndarray]:
    for arr in outputs.values():
        if np.ndim(arr) == 2 and np.shape(arr)[1] > 1:
            return np.argmax(arr, axis=1)
    return None


def _drift(clean: Mapping[str, np.ndarray], out: Mapping[str, np.ndarray]) -> Dict[str, float]:
    from .metrics import cosine_similarity, snr_db

    cos, snr = [], []
    for name, ref in clean.items():
        r, o = np.asarray(ref), np.asarray(out[name])
        if r.shape != o.shape:
            raise InputError(f"output '{name}' changed shape under corruption: {r.shape} -> {o.shape}")
        # per sample, then the mean; the worst output tensor counts
        cos.append(float(np.mean([cosine_similarity(r[i], o[i]) for i in range(len(r))])))
        vals = [snr_db(r[i], o[i]) for i in range(len(r))]
        finite = [v for v in vals if math.isfinite(v)]
        snr.append(float(np.mean(finite)) if finite else (math.inf if all(v > 0 for v in vals) else -math.inf))
    return {"cosine": min(cos), "snr_db": min(snr)}


def sweep(
    infer: Callable[[np.ndarray], Mapping[str, np.ndarray]],
    images: Sequence[np.ndarray],
    *,
    prepare: Optional[Callable[[List[np.ndarray]], np.ndarray]] = None,
    labels: Optional[Union[Sequence[int], np.ndarray]] = None,
    corruptions: Optional[Sequence[str]] = None,
    severities: Union[str, Sequence[int]] = SEVERITIES,
    seed: int = 0,
    value_range: Optional[Tuple[float, float]] = None,
    group_bytes: int = 64 << 20,
) -> RobustnessResult:
    """Run the sweep. ``images``: the clean HWC images. ``prepare(list_of_images) -> batch`` turns
    them into one model input batch (default: stack). ``infer(batch) -> {output: array}`` runs the
    model with samples along axis 0; variants are concatenated into calls of about ``group_bytes``
    so a remote board sees few round trips. ``labels``: class ids for the task metric (top-1)."""
    images = list(images)
    if not images:
        raise InputError("the robustness sweep got no input images")
    if labels is not None and len(labels) != len(images):
        raise InputError(f"{len(labels)} labels for {len(images)} inputs", "give one label per input")
    names = parse_corruptions(corruptions)
    sevs = parse_severities(severities)
    prepare = prepare or (lambda imgs: np.stack(imgs))
    variants: List[Tuple[Optional[str], int]] = [(None, 0)] + [(c, s) for c in names for s in sevs]
    batches: Dict[Tuple[Optional[str], int], np.ndarray] = {}
    outputs: Dict[Tuple[Optional[str], int], Dict[str, np.ndarray]] = {}
    pending: List[Tuple[Optional[str], int]] = []

    def flush() -> None:
        if not pending:
            return
        big = np.concatenate([batches[v] for v in pending], axis=0)
        res = {k: np.asarray(v) for k, v in infer(big).items()}
        start = 0
        for v in pending:
            n = len(batches[v])
            outputs[v] = {k: a[start:start + n] for k, a in res.items()}
            start += n
            del batches[v]
        pending.clear()

    size = 0
    for v in variants:
        imgs = images if v[0] is None else corrupt_batch(images, v[0], v[1], seed, value_range)
        batches[v] = np.asarray(prepare(imgs))
        pending.append(v)
        size += batches[v].nbytes
        if size >= group_bytes:
            flush()
            size = 0
    flush()

    clean_out = outputs[(None, 0)]
    clean_pred = _argmax_output(clean_out)
    y = None if labels is None else np.asarray(labels).astype(np.int64).reshape(-1)
    clean: Dict[str, Any] = {"samples": len(images)}
    if y is not None and clean_pred is not None:
        clean["top1"] = float(np.mean(clean_pred == y))
    rows = []
    for c, s in variants[1:]:
        out = outputs[(c, s)]
        row: Dict[str, Any] = {"corruption": c, "severity": s, **_drift(clean_out, out)}
        pred = _argmax_output(out)
        if pred is not None and clean_pred is not None:
            row["agreement"] = float(np.mean(pred == clean_pred))
        if y is not None and pred is not None:
            row["top1"] = float(np.mean(pred == y))
            row["top1_drop"] = clean["top1"] - row["top1"]
        rows.append(row)
    return RobustnessResult(rows=rows, clean=clean,
                            settings={"corruptions": names, "severities": sevs, "seed": seed,
                                      "samples": len(images), "value_range": list(value_range) if value_range else None})
