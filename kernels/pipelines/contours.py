"""NumPy stand-ins for the OpenCV calls of the ``db_boxes`` glue step, for a board with only NumPy.

Board-safe: Python 3.8, NumPy only (no OpenCV, no SciPy). Each function mirrors one OpenCV call as
``db_boxes`` uses it, and tests/kernels/test_contours.py checks it against OpenCV:

==========================  ==============================================================================
:func:`dilate2x2`           ``cv2.dilate(bitmap, np.ones((2, 2)))`` (default anchor: ``out[y, x]`` is the
                            maximum of ``src[y-1:y+1, x-1:x+1]``); exact
:func:`region_points`       ``cv2.findContours(bitmap, RETR_LIST, ...)``: one point set per contour, in
                            OpenCV's order (last found first). A contour is reduced to points whose
                            convex hull is the contour's hull (all :func:`min_area_rect` needs): an
                            8-connected region gives each row's two end pixels; a hole (a 4-connected
                            background region not touching the image's edge, which RETR_LIST also
                            returns) gives its end pixels moved one pixel left, right, up and down
                            (the foreground pixels that border it)
:func:`min_area_rect`       ``cv2.minAreaRect``: ``((cx, cy), (w, h), angle)``, angle in [-90, 0) as in
                            OpenCV 5 (convex hull by monotone chain, then every hull edge's
                            rectangle: rotating calipers)
:func:`box_points`          ``cv2.boxPoints``: the same four corners in the same order
:func:`fill_quad_mask`      ``cv2.fillPoly(mask, [int32 points], 1)`` for a convex polygon, rasterised
                            as OpenCV does (edges as clipped 8-connected lines, rows filled in 16-bit
                            fixed point); exact
==========================  ==============================================================================

Regions are found by run lengths: each row's runs of foreground, runs of neighbouring rows joined
by a union-find (a Python loop over pairs of touching runs, not over pixels). Where rectangles of
equal area fit a hull, :func:`min_area_rect` takes the one OpenCV's rotating calipers meet first;
OpenCV's float32 arithmetic still picks another on rare ties (2 of 858 test contours, both
triangles); on the corpus page every box agrees (tests/kernels/test_contours.py).
"""
from __future__ import annotations

import math
from typing import List, Tuple

import numpy as np

__all__ = ["dilate2x2", "region_points", "min_area_rect", "box_points", "fill_quad_mask", "convex_hull"]

Rect = Tuple[Tuple[float, float], Tuple[float, float], float]


def dilate2x2(bitmap: np.ndarray) -> np.ndarray:
    """``cv2.dilate(bitmap, np.ones((2, 2), np.uint8))``: ``out[y, x] = max(src[y-1:y+1, x-1:x+1])``
    (outside the image counts as 0). Same dtype and shape as ``bitmap``."""
    b = np.asarray(bitmap)
    p = np.pad(b, ((1, 0), (1, 0)))
    return np.maximum(np.maximum(p[1:, 1:], p[:-1, 1:]), np.maximum(p[1:, :-1], p[:-1, :-1]))


def _runs(mask: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's runs of True: ``(row, x0, x1)`` (x1 exclusive), in raster order."""
    h, w = mask.shape
    padded = np.zeros((h, w + 2), np.int8)
    padded[:, 1:-1] = mask
    d = np.diff(padded, axis=1)                          # [h, w + 1]: +1 a run starts, -1 it ends
    at = np.flatnonzero(d)
    step = d.ravel()[at]
    starts, ends = at[step == 1], at[step == -1]
    return starts // (w + 1), starts % (w + 1), ends % (w + 1)


def _gaps(row: np.ndarray, x0: np.ndarray, x1: np.ndarray, h: int, w: int
          ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs of the complement (each row's gaps between the runs ``row, x0, x1``), raster order."""
    first = np.ones(len(row), bool)
    first[1:] = row[1:] != row[:-1]
    last = np.ones(len(row), bool)
    last[:-1] = row[1:] != row[:-1]
    before_x0 = np.where(first, 0, np.roll(x1, 1))       # the gap before each run
    empty_rows = np.setdiff1d(np.arange(h), row)
    rows = np.concatenate([row, row[last], empty_rows])
    g0 = np.concatenate([before_x0, x1[last], np.zeros(len(empty_rows), np.int64)])
    g1 = np.concatenate([x0, np.full(int(last.sum()), w), np.full(len(empty_rows), w)])
    keep = g1 > g0
    rows, g0, g1 = rows[keep], g0[keep], g1[keep]
    order = np.lexsort((g0, rows))
    return rows[order], g0[order], g1[order]


def _label_runs(row: np.ndarray, x0: np.ndarray, x1: np.ndarray, width: int, reach: int) -> np.ndarray:
    """A region label per run: runs in neighbouring rows join when they overlap (``reach`` 0:
    4-connected) or touch diagonally (``reach`` 1: 8-connected). Labels are the index of the
    region's first run (raster order)."""
    n = len(row)
    parent = list(range(n))
    if n == 0:
        return np.zeros((0,), np.int64)
    stride = width + 4                                   # one row's keys never reach the next row's
    starts, ends = row * stride + x0, row * stride + x1
    lo = np.searchsorted(ends, (row + 1) * stride + x0 - reach, side="right")
    hi = np.searchsorted(starts, (row + 1) * stride + x1 + reach, side="left")
    count = np.maximum(hi - lo, 0)
    a = np.repeat(np.arange(n), count)
    b = (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count) + np.repeat(lo, count))
    for i, j in zip(a.tolist(), b.tolist()):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        while parent[j] != j:
            parent[j] = parent[parent[j]]
            j = parent[j]
        if i != j:
            if i < j:
                parent[j] = i
            else:
                parent[i] = j
    labels = np.asarray(parent, np.int64)
    while True:                                          # flatten: every run points at its root
        nxt = labels[labels]
        if (nxt == labels).all():
            return labels
        labels = nxt


def _grouped(labels: np.ndarray) -> List[np.ndarray]:
    """Run indices per region, regions in the order of their first run."""
    order = np.argsort(labels, kind="stable")
    roots, first = np.unique(labels[order], return_index=True)
    return np.split(order, first[1:]) if len(roots) else []


def region_points(bitmap: np.ndarray) -> List[np.ndarray]:
    """The contours ``cv2.findContours(bitmap, cv2.RETR_LIST, ...)`` finds, each as ``[N, 2]`` int32
    points (x, y) with the same convex hull, in OpenCV's order: by the pixel where the raster
    scan meets the contour, last first."""
    mask = np.asarray(bitmap) != 0
    h, w = mask.shape
    found: List[Tuple[int, np.ndarray]] = []
    row, x0, x1 = _runs(mask)
    for idx in _grouped(_label_runs(row, x0, x1, w, 1)):
        r, a, b = row[idx], x0[idx], x1[idx] - 1
        pts = np.concatenate([np.stack([a, r], 1), np.stack([b, r], 1)])
        found.append((int(r[0]) * w + int(a[0]), pts))   # the region's first pixel
    brow, bx0, bx1 = _gaps(row, x0, x1, h, w)
    for idx in _grouped(_label_runs(brow, bx0, bx1, w, 0)):
        r, a, b = brow[idx], bx0[idx], bx1[idx] - 1
        if r[0] == 0 or r[-1] == h - 1 or a.min() == 0 or b.max() == w - 1:
            continue                                     # background joined to the outside: no hole
        ends = np.concatenate([np.stack([a, r], 1), np.stack([b, r], 1)])
        pts = np.concatenate([ends + s for s in ((-1, 0), (1, 0), (0, -1), (0, 1))])
        found.append((int(r[0]) * w + int(a[0]) - 1, pts))   # the pixel left of the hole's first
    found.sort(key=lambda kv: -kv[0])
    return [p.astype(np.int32) for _, p in found]


def convex_hull(points: np.ndarray) -> np.ndarray:
    """Convex hull ``[M, 2]`` float64 of points ``[N, 2]`` (Andrew's monotone chain,
    counter-clockwise in x-right/y-up terms, collinear points dropped)."""
    pts = np.asarray(points, np.float64).reshape(-1, 2)
    if len(pts) > 16:                                    # drop what lies inside the extreme octagon
        dirs = np.array([[-1, 0], [-1, -1], [0, -1], [1, -1], [1, 0], [1, 1], [0, 1], [-1, 1]], np.float64)
        octagon = pts[np.argmax(pts @ dirs.T, axis=0)]   # counter-clockwise (x right, y up)
        edge = np.roll(octagon, -1, axis=0) - octagon
        keep = edge.any(1)
        if keep.sum() >= 3:
            o, e = octagon[keep], edge[keep]
            cross = e[:, 0, None] * (pts[None, :, 1] - o[:, 1, None]) - e[:, 1, None] * (pts[None, :, 0] - o[:, 0, None])
            pts = pts[~(cross > 0).all(0)]
    pts = pts[np.lexsort((pts[:, 1], pts[:, 0]))]       # sorted by x, then y; duplicates dropped
    pts = pts[np.concatenate([[True], (pts[1:] != pts[:-1]).any(1)])]
    if len(pts) <= 2:
        return pts
    p = pts.tolist()

    def half(seq: List[List[float]]) -> List[List[float]]:
        out: List[List[float]] = []
        for q in seq:
            while len(out) >= 2 and ((out[-1][0] - out[-2][0]) * (q[1] - out[-2][1])
                                     - (out[-1][1] - out[-2][1]) * (q[0] - out[-2][0])) <= 0:
                out.pop()
            out.append(q)
        return out

    lower, upper = half(p), half(p[::-1])
    return np.asarray(lower[:-1] + upper[:-1], np.float64)


def min_area_rect(points: np.ndarray) -> Rect:
    """``cv2.minAreaRect(points)``: the smallest rotated rectangle around the points,
    ``((cx, cy), (w, h), angle_deg)`` with the angle in [-90, 0) (OpenCV 5's convention; ``w``
    lies along the angle's direction). One of its sides lies on a hull edge (rotating calipers)."""
    hull = convex_hull(points)
    if len(hull) == 1:
        return (float(hull[0, 0]), float(hull[0, 1])), (0.0, 0.0), -90.0
    edges = np.roll(hull, -1, axis=0) - hull
    lengths = np.hypot(edges[:, 0], edges[:, 1])
    keep = lengths > 0
    u = edges[keep] / lengths[keep, None]                # [E, 2] unit directions
    v = np.stack([-u[:, 1], u[:, 0]], 1)
    pu, pv = u @ hull.T, v @ hull.T                      # [E, M] projections
    wu, wv = pu.max(1) - pu.min(1), pv.max(1) - pv.min(1)
    area = wu * wv
    # equal areas (a tie): the side OpenCV's calipers meet first, the largest angle mod 90 here
    tied = np.flatnonzero(area <= area.min() * (1 + 1e-6) + 1e-9)
    k = int(tied[np.argmax(np.degrees(np.arctan2(u[tied, 1], u[tied, 0])) % 90.0)])
    cu, cv = (pu[k].max() + pu[k].min()) / 2, (pv[k].max() + pv[k].min()) / 2
    centre = u[k] * cu + v[k] * cv
    phi = math.degrees(math.atan2(u[k, 1], u[k, 0]))     # the direction of the side of length wu
    theta = (phi % 90.0) - 90.0                          # in [-90, 0)
    turns = int(round((phi - theta) / 90.0)) % 2         # odd: that side is the height
    w, h = (float(wu[k]), float(wv[k])) if turns == 0 else (float(wv[k]), float(wu[k]))
    return (float(centre[0]), float(centre[1])), (w, h), float(theta)


def box_points(rect: Rect) -> np.ndarray:
    """``cv2.boxPoints(rect)``: the rectangle's four corners ``[4, 2]`` float32, in OpenCV's order."""
    (cx, cy), (w, h), angle = rect
    a = math.radians(angle)
    b, s = math.cos(a) * 0.5, math.sin(a) * 0.5
    p0 = (cx - s * h - b * w, cy + b * h - s * w)
    p1 = (cx + s * h - b * w, cy - b * h - s * w)
    return np.array([p0, p1, (2 * cx - p0[0], 2 * cy - p0[1]), (2 * cx - p1[0], 2 * cy - p1[1])], np.float32)


def _clip_line(size: Tuple[int, int], p: List[int], q: List[int]) -> bool:
    """OpenCV's ``clipLine`` (integer Cohen-Sutherland, its rounding) of ``p``-``q`` to an
    ``(h, w)`` image, in place; False when the line misses it."""
    right, bottom = size[1] - 1, size[0] - 1

    def code(x: int, y: int, with_y: bool = True) -> int:
        return (x < 0) + (x > right) * 2 + ((y < 0) * 4 + (y > bottom) * 8 if with_y else 0)

    c1, c2 = code(p[0], p[1]), code(q[0], q[1])
    if (c1 & c2) == 0 and (c1 | c2) != 0:
        if c1 & 12:
            a = 0 if c1 < 8 else bottom
            p[0] += int((a - p[1]) * (q[0] - p[0]) / (q[1] - p[1]))
            p[1] = a
            c1 = code(p[0], 0, False)
        if c2 & 12:
            a = 0 if c2 < 8 else bottom
            q[0] += int((a - q[1]) * (q[0] - p[0]) / (q[1] - p[1]))
            q[1] = a
            c2 = code(q[0], 0, False)
        if (c1 & c2) == 0 and (c1 | c2) != 0:
            if c1:
                a = 0 if c1 == 1 else right
                p[1] += int((a - p[0]) * (q[1] - p[1]) / (q[0] - p[0]))
                p[0] = a
                c1 = 0
            if c2:
                a = 0 if c2 == 1 else right
                q[1] += int((a - q[0]) * (q[1] - p[1]) / (q[0] - p[0]))
                q[0] = a
                c2 = 0
    return (c1 | c2) == 0


def _line_pixels(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The pixels ``[K, 2]`` (x, y) of the 8-connected line between two integer points as OpenCV
    draws a polygon's edge: Bresenham from the left end, a half step rounded towards that end."""
    if p[0] > q[0]:
        p, q = q, p
    d = q - p
    n = int(max(abs(d[0]), abs(d[1])))
    if n == 0:
        return p[None].copy()
    major = 0 if abs(d[0]) >= abs(d[1]) else 1
    i = np.arange(n + 1, dtype=np.int64)
    out = np.empty((n + 1, 2), np.int64)
    out[:, major] = p[major] + np.sign(d[major]) * i
    out[:, 1 - major] = p[1 - major] + np.sign(d[1 - major]) * ((2 * i * abs(int(d[1 - major])) + n - 1) // (2 * n))
    return out


def _trunc_div(a: int, b: int) -> int:
    """C's integer division (towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def fill_quad_mask(shape: Tuple[int, int], points: np.ndarray) -> np.ndarray:
    """``cv2.fillPoly(np.zeros(shape, np.uint8), [points], 1)`` for a convex polygon with integer
    vertices ``[K, 2]`` (x, y), the way OpenCV rasterises it: each edge drawn as an 8-connected
    line (clipped to the image first), then each row filled between the edges' crossings (16-bit
    fixed point, the edges' clipped ends). uint8, 1 inside."""
    h, w = shape
    pts = np.asarray(points, np.int64).reshape(-1, 2).tolist()
    mask = np.zeros((h, w), np.uint8)
    one = 1 << 16
    rows: List[np.ndarray] = []
    xs: List[np.ndarray] = []
    for i in range(len(pts)):
        p0, p1 = pts[i - 1], pts[i]                      # OpenCV's edge order: v[i-1] -> v[i]
        t0, t1 = list(p0), list(p1)
        if _clip_line((h, w), t0, t1):
            line = _line_pixels(np.array(t0, np.int64), np.array(t1, np.int64))
            mask[line[:, 1], line[:, 0]] = 1
        if p0[1] == p1[1]:
            continue
        c0, c1 = list(p0), list(p1)                      # the row-filling edge: clipped ends
        t0, t1 = list(p0), list(p1)
        if not (0 <= t0[0] < w and 0 <= t1[0] < w and 0 <= t0[1] < h and 0 <= t1[1] < h):
            _clip_line((h, w), t0, t1)
            if t0[1] != t1[1]:
                c0[1], c1[1] = t0[1], t1[1]
        x0f, x1f = t0[0] * one, t1[0] * one
        dx = _trunc_div(x1f - x0f, c1[1] - c0[1])
        if p0[1] < p1[1]:
            y_top, y_end, x_top = p0[1], p1[1], x0f + (p0[1] - c0[1]) * dx
        else:
            y_top, y_end, x_top = p1[1], p0[1], x1f + (p1[1] - c1[1]) * dx
        ys = np.arange(y_top, y_end, dtype=np.int64)    # the edge is active on rows [top, end)
        rows.append(ys)
        xs.append(x_top + (ys - y_top) * dx)
    if len(rows) >= 2:
        lo = np.full(h, (w + 1) * one, np.int64)         # rows no edge crosses: lo > hi, nothing filled
        hi = np.full(h, -2 * one, np.int64)
        for ys, xf in zip(rows, xs):                     # rows are unique within one edge
            ok = (ys >= 0) & (ys < h)
            ys, xf = ys[ok], xf[ok]
            lo[ys] = np.minimum(lo[ys], xf)
            hi[ys] = np.maximum(hi[ys], xf)
        a = np.maximum((lo + one - 1) >> 16, 0)
        b = np.minimum(hi >> 16, w - 1)
        cols = np.arange(w)[None, :]
        mask |= ((cols >= a[:, None]) & (cols <= b[:, None])).astype(np.uint8)
    return mask
