"""Images for the corpus models: the cached photos, seeded augmentations, rendered text and pages.

Everything is deterministic for a given seed. OpenCV decodes and draws (``edgesdk[vision]``).
"""
from __future__ import annotations

import string
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

__all__ = ["load_bgr", "photos_bgr", "augment", "photo_mosaics", "render_text_line", "render_char_scene",
           "render_document", "write_augmented", "TEXT_ALPHABET"]

TEXT_ALPHABET = string.ascii_letters + string.digits
_DECODED: Dict[Tuple[str, ...], List[np.ndarray]] = {}


def _cv2() -> Any:
    from . import _require_cv2

    return _require_cv2()


def load_bgr(path: Path) -> np.ndarray:
    """Decode an image file as uint8 BGR (grayscale photos are expanded to 3 channels)."""
    cv2 = _cv2()
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        from . import CorpusError

        raise CorpusError(f"{path}: not a readable image")
    return img


def photos_bgr() -> List[np.ndarray]:
    """Every corpus photo, decoded (sorted by file name; decoded once per process, read-only)."""
    from . import photos

    key = tuple(str(p) for p in photos())
    if key not in _DECODED:
        decoded = [load_bgr(Path(p)) for p in key]
        for a in decoded:
            a.setflags(write=False)
        _DECODED[key] = decoded
    return list(_DECODED[key])


def augment(img: np.ndarray, rng: np.random.Generator, flip: bool = True) -> np.ndarray:
    """A random crop (50-100% of each side), horizontal flip (unless ``flip`` is False: text) and
    brightness change."""
    h, w = img.shape[:2]
    ch, cw = int(h * rng.uniform(0.5, 1.0)), int(w * rng.uniform(0.5, 1.0))
    y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
    out = img[y:y + ch, x:x + cw]
    if rng.random() < 0.5 and flip:
        out = out[:, ::-1]
    gain = rng.uniform(0.75, 1.25)
    return np.clip(out.astype(np.float32) * gain, 0, 255).astype(np.uint8)


def photo_stream(n: int, seed: int) -> List[np.ndarray]:
    """``n`` photos: for seed 0 the originals first, then seeded augmentations of them; for any other
    seed augmentations only, so sets of different seeds share no image (an "unseen" set must not
    hold the calibration set's originals)."""
    base = photos_bgr()
    rng = np.random.default_rng(seed)
    out = list(base[:n]) if seed == 0 else []
    while len(out) < n:
        out.append(augment(base[int(rng.integers(len(base)))], rng))
    return out


def photo_mosaics(n: int, seed: int, people: Tuple[str, ...], size: int, grid: int = 2) -> List[np.ndarray]:
    """``n`` BGR mosaics ``size`` x ``size`` of ``grid`` x ``grid`` seeded augmentations: each cell a
    photo named in ``people`` (three cells in four) or any other corpus photo (a background), letterboxed
    into its cell. A detector metric needs many boxes (one box among 8 moves mAP by 12%); the
    corpus photos hold one or two each."""
    from . import photos

    names = [p.name for p in photos()]
    base = photos_bgr()
    fg = [i for i, nm in enumerate(names) if nm in people]
    bg = [i for i, nm in enumerate(names) if nm not in people]
    rng = np.random.default_rng(seed)
    cell = size // grid
    out = []
    for _ in range(n):
        canvas = np.zeros((size, size, 3), np.uint8)
        for a in range(grid):
            for b in range(grid):
                pool = fg if (rng.random() < 0.75 or not bg) else bg
                img = augment(base[pool[int(rng.integers(len(pool)))]], rng)
                canvas[a * cell:(a + 1) * cell, b * cell:(b + 1) * cell] = _fit(img, cell)
        out.append(canvas)
    return out


def _fit(img: np.ndarray, size: int) -> np.ndarray:
    """``img`` scaled to fit a ``size`` x ``size`` cell, centred on black."""
    cv2 = _cv2()
    h, w = img.shape[:2]
    r = min(size / h, size / w)
    nh, nw = max(1, int(h * r)), max(1, int(w * r))
    out = np.zeros((size, size, 3), np.uint8)
    y0, x0 = (size - nh) // 2, (size - nw) // 2
    out[y0:y0 + nh, x0:x0 + nw] = cv2.resize(np.ascontiguousarray(img), (nw, nh), interpolation=cv2.INTER_AREA)
    return out


def render_text_line(text: str, height: int = 64, width: int = 256, seed: int = 0) -> np.ndarray:
    """A grayscale uint8 line of ``text`` (dark on light, slight noise), ``height`` x ``width``."""
    cv2 = _cv2()
    rng = np.random.default_rng(seed)
    scale = 1.6
    thick = 2 + int(rng.integers(0, 2))
    font = [cv2.FONT_HERSHEY_SIMPLEX, cv2.FONT_HERSHEY_DUPLEX, cv2.FONT_HERSHEY_COMPLEX][int(rng.integers(3))]
    (tw, th), base = cv2.getTextSize(text, font, scale, thick)
    canvas = np.full((th + base + 16, tw + 16), int(rng.integers(200, 256)), np.uint8)
    cv2.putText(canvas, text, (8, th + 8), font, scale, int(rng.integers(0, 60)), thick, cv2.LINE_AA)
    h = height
    w = max(1, int(round(canvas.shape[1] * h / canvas.shape[0])))
    line = cv2.resize(canvas, (w, h), interpolation=cv2.INTER_AREA)
    out = np.full((height, width), int(line[0, 0]), np.uint8)
    out[:, :min(width, w)] = line[:, :width]
    noise = rng.normal(0, 4, out.shape)
    return np.clip(out + noise, 0, 255).astype(np.uint8)


def random_text(rng: np.random.Generator, lo: int = 4, hi: int = 8) -> str:
    return "".join(rng.choice(list(TEXT_ALPHABET), int(rng.integers(lo, hi + 1))))


def render_char_scene(seed: int, size: int = 416) -> np.ndarray:
    """A photo crop with 4-6 large characters drawn on it (a click-captcha-like scene), BGR."""
    cv2 = _cv2()
    rng = np.random.default_rng(seed)
    photos = photos_bgr()
    base = photos[seed % len(photos)]
    img = cv2.resize(augment(base, rng), (size, size), interpolation=cv2.INTER_AREA)
    for _ in range(int(rng.integers(4, 7))):
        ch = str(rng.choice(list(string.ascii_uppercase + string.digits)))
        x, y = int(rng.integers(10, size - 70)), int(rng.integers(70, size - 10))
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        cv2.putText(img, ch, (x, y), cv2.FONT_HERSHEY_DUPLEX, float(rng.uniform(1.8, 2.6)), color, 5, cv2.LINE_AA)
    return img


def render_document(seed: int, size: Tuple[int, int] = (800, 608)) -> np.ndarray:
    """A synthetic document page (title, text blocks, a table, a figure), BGR, ``size`` = (h, w)."""
    cv2 = _cv2()
    rng = np.random.default_rng(seed)
    h, w = size
    page = np.full((h, w, 3), 255, np.uint8)
    y = 40
    cv2.putText(page, random_text(rng, 8, 14).upper(), (40, y + 20), cv2.FONT_HERSHEY_DUPLEX, 1.0, (0, 0, 0), 2)
    y += 60
    photos = photos_bgr()
    while y < h - 120:
        kind = rng.random()
        if kind < 0.55:                        # a paragraph
            for _ in range(int(rng.integers(3, 7))):
                words = " ".join(random_text(rng, 2, 8) for _ in range(6))
                cv2.putText(page, words, (40, y), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (20, 20, 20), 1, cv2.LINE_AA)
                y += 18
            y += 20
        elif kind < 0.8:                       # a table
            rows, cols, rh = int(rng.integers(3, 6)), int(rng.integers(3, 5)), 22
            x0, x1 = 40, w - 40
            for r in range(rows + 1):
                cv2.line(page, (x0, y + r * rh), (x1, y + r * rh), (0, 0, 0), 1)
            for c in range(cols + 1):
                xc = x0 + c * (x1 - x0) // cols
                cv2.line(page, (xc, y), (xc, y + rows * rh), (0, 0, 0), 1)
            y += rows * rh + 30
        else:                                  # a figure
            fh = min(int(rng.integers(100, 180)), h - y)   # near the page's end: a shorter figure
            fig = cv2.resize(photos[int(rng.integers(len(photos)))], (w - 160, fh))
            page[y:y + fh, 80:w - 80] = fig
            y += fh + 30
    return page


def write_augmented(folder: Path, n: int, *, seed: int = 0, size: int = 640) -> List[Path]:
    """Write ``n`` photos (:func:`photo_stream`) resized to ``size`` on the long side."""
    cv2 = _cv2()
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, img in enumerate(photo_stream(n, seed)):
        s = size / max(img.shape[:2])
        img = cv2.resize(img, (max(1, round(img.shape[1] * s)), max(1, round(img.shape[0] * s))),
                         interpolation=cv2.INTER_AREA)
        p = folder / f"corpus_{seed}_{i:05d}.png"
        cv2.imwrite(str(p), img)
        out.append(p)
    return out


def text_photos(seed: int) -> List[np.ndarray]:
    """The corpus's two text photos (page.png, text.png): as they are for seed 0, else seeded crops
    and brightness changes of them (not mirrored), so other seeds' sets do not repeat them."""
    from . import photos

    pages = [load_bgr(p) for p in photos() if p.name in ("page.png", "text.png")]
    if seed == 0:
        return pages
    rng = np.random.default_rng(seed)
    return [augment(p, rng, flip=False) for p in pages]
