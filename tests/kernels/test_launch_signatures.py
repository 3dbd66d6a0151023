"""The Python wrappers launch each kernel with exactly the parameters its CUDA C signature declares
(count, and pointer / int / float kind, in order), with the block sizes the kernels are written
for. Checked without a GPU: the CUDA layer is replaced at its lowest level (memory, copies,
launches) by a recording backend, labelled as such; the kernels' results are checked on a GPU
(tests/kernels/test_gpu_kernels.py, scripts/gpu_check.py)."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from sdk.kernels.loader import KERNEL_DIR
from sdk.kernels.reference import PostprocessSpec, synthetic_yolo_output
from sdk.preprocess import PreprocessSpec
from sdk.targets.cuda.base import CudaBackend, DeviceBuffer, Event, Kernel, Stream


class RecordingBackend(CudaBackend):
    """SIMULATED CUDA layer: host memory stands in for device memory, launches are recorded, not run."""

    name = "recording (simulated, no GPU)"

    def __init__(self) -> None:
        super().__init__(0)
        self.launches: List[Tuple[str, Tuple[int, int, int], Tuple[int, int, int], List[np.generic]]] = []
        self._next = 0x10000
        self.ops: List[Tuple[Any, ...]] = []  # copies, event records, stream waits, launches in order
        self._streams = 0

    def _alloc(self, nbytes: int) -> DeviceBuffer:
        ptr, self._next = self._next, self._next + ((nbytes + 255) // 256) * 256
        return DeviceBuffer(self, ptr, nbytes, handle=ptr)

    def _free(self, buf: DeviceBuffer) -> None:
        pass

    def _pinned(self, shape, dtype) -> np.ndarray:
        return np.zeros(shape, dtype)

    def _register(self, arr: np.ndarray) -> Any:
        return int(arr.ctypes.data)

    def _unregister(self, ptr: int) -> None:
        pass

    def _htod(self, dst, src, stream) -> None:
        self.ops.append(("htod", dst, src.nbytes, stream))

    def _dtoh(self, dst, src, stream) -> None:
        pass

    def _memset_d32(self, dst, value, count, stream) -> None:
        pass

    def _stream(self) -> Stream:
        self._streams += 1
        return Stream(self, None, self._streams)

    def _stream_sync(self, stream) -> None:
        pass

    def _stream_wait(self, stream, event) -> None:
        self.ops.append(("wait", stream, event))

    def _event(self) -> Event:
        return Event(self, None)

    def _event_record(self, event, stream) -> None:
        self.ops.append(("record", event, stream))

    def _event_sync(self, event) -> None:
        self.ops.append(("event-sync", event))

    def _ctx_sync(self) -> None:
        pass

    def _compile(self, source: str, name: str, options: List[str]) -> Any:
        return name

    def _function(self, module: Any, name: str) -> Kernel:
        return Kernel(self, name, name, module)

    def _launch(self, kernel, grid, block, args, stream, shared_bytes) -> None:
        self.launches.append((kernel.name, grid, block, list(args)))
        self.ops.append(("launch", kernel.name, grid, list(args), stream))


def kernel_signatures(source: str) -> Dict[str, List[str]]:
    """kernel name -> parameter kinds ("ptr", "int", "float") from the .cu source."""
    text = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    out = {}
    for m in re.finditer(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\((.*?)\)\s*\{', text, flags=re.S):
        kinds = []
        for p in m.group(2).split(","):
            p = " ".join(p.split())
            kinds.append("ptr" if "*" in p else "float" if re.match(r"(const )?float\b", p) else "int")
        out[m.group(1)] = kinds
    return out


def _kind(arg: np.generic) -> str:
    if arg.dtype == np.uint64:
        return "ptr"
    return "float" if arg.dtype == np.float32 else "int" if arg.dtype == np.int32 else str(arg.dtype)


def _define(source: str, name: str) -> int:
    return int(re.search(rf"#define {name} (\d+)", source).group(1))


@pytest.mark.parametrize("n,transposed", [(8400, True), (1000, False), (1, False)])
def test_postprocess_launches_match_the_kernels(n, transposed):
    from sdk.kernels import postprocess as pp

    src = (KERNEL_DIR / "postprocess.cu").read_text()
    sigs = kernel_signatures(src)
    assert pp.THREADS == _define(src, "EDGESDK_THREADS") and pp.SCAN_THREADS == _define(src, "EDGESDK_SCAN_THREADS")
    assert 1 << pp.RADIX_BITS == _define(src, "EDGESDK_RADIX")
    b = RecordingBackend()
    spec = PostprocessSpec(has_objectness=False, transposed=transposed)
    pred = synthetic_yolo_output(n, 80, False, seed=1)
    with pp.GpuYoloPostprocessor(spec, n, pred.shape[1], backend=b) as post:
        post(np.ascontiguousarray(pred.T) if transposed else pred)
    names = [l[0] for l in b.launches]
    assert names == (["edgesdk_yolo_decode", "edgesdk_scan", "edgesdk_compact"]
                     + ["edgesdk_radix_hist", "edgesdk_scan", "edgesdk_radix_scatter"] * pp.RADIX_PASSES
                     + ["edgesdk_nms_mask", "edgesdk_nms_gather"])
    blocks = (n + pp.THREADS - 1) // pp.THREADS
    for name, grid, block, args in b.launches:
        assert [_kind(a) for a in args] == sigs[name], name
        want_block = {"edgesdk_scan": pp.SCAN_THREADS, "edgesdk_nms_mask": 64}.get(name, pp.THREADS)
        assert block == (want_block, 1, 1), name
        if name in ("edgesdk_yolo_decode", "edgesdk_compact", "edgesdk_radix_hist", "edgesdk_radix_scatter"):
            assert grid == (blocks, 1, 1), name  # the hist/scan/scatter layout assumes one grid size
    b.launches.clear()
    post.backend = b
    post.launch(0x7000)  # a raw device address (a TensorRT output binding): repacks the decode only
    post.launch(0x7000)
    post.launch(post._pred)
    decodes = [l for l in b.launches if l[0] == "edgesdk_yolo_decode"]
    assert [int(l[3][0]) for l in decodes] == [0x7000, 0x7000, post._pred.ptr]
    assert len(b.launches) == 3 * (5 + 3 * pp.RADIX_PASSES)
    words = pp.mask_words(min(spec.max_candidates, n))
    mask_launch = next(l for l in b.launches if l[0] == "edgesdk_nms_mask")
    assert mask_launch[1] == (words, words, 1)


def test_preprocess_launch_matches_the_kernel_and_zero_copy_skips_the_host_copy(monkeypatch):
    from sdk.kernels.preprocess import BLOCK, GpuPreprocessor

    src = (KERNEL_DIR / "preprocess.cu").read_text()
    sig = kernel_signatures(src)["edgesdk_preprocess"]
    b = RecordingBackend()
    spec = PreprocessSpec(size=(640, 640), resize="letterbox")
    frame = np.random.default_rng(0).integers(0, 256, size=(1080, 1920, 3), dtype=np.uint8)
    copies = []
    real_copyto = np.copyto
    monkeypatch.setattr(np, "copyto", lambda dst, s, **kw: (copies.append(dst.shape), real_copyto(dst, s, **kw)))
    with GpuPreprocessor(spec, backend=b) as pre:
        pre.to_device(frame)  # pageable: one host copy into the pinned staging buffer
        assert copies == [(1080, 1920, 3)]
        staging = pre.input_buffer(1080, 1920)
        assert b.is_pinned(staging) and not b.is_pinned(frame)
        pre.to_device(staging)  # zero-copy: straight from the staging buffer
        own = np.array(frame)
        b.register_host(own)
        pre.to_device(own)  # the caller's registered memory, as is
        assert copies == [(1080, 1920, 3)]
        b.unregister_host(own)
        assert not b.is_pinned(own)
        b.ops.clear()
        pre.to_device(frame)  # pageable again: the staging buffer is rewritten only once the last
        ops = [op[0] for op in b.ops]  # upload from it is done
        assert ops.index("event-sync") < ops.index("htod")
        assert b.ops[ops.index("event-sync")][1] is pre._uploaded
    assert len(b.launches) == 4
    for _name, grid, block, args in b.launches:
        assert [_kind(a) for a in args] == sig
        assert block == BLOCK and grid == ((640 + BLOCK[0] - 1) // BLOCK[0], (640 + BLOCK[1] - 1) // BLOCK[1], 1)
        assert (int(args[-2]), int(args[-1])) == (0, 640)


def _rows_read(spec, src_h, src_w, y0, y1):
    """Highest source row the kernel reads for output rows [y0, y1), in exact arithmetic (None: none)."""
    _, nh, _, top, _ = spec.letterbox_geometry(src_h, src_w) if spec.resize == "letterbox" else (0, spec.size[0], 0, 0, 0)
    ry = [y - top for y in range(y0, y1) if 0 <= y - top < nh]
    if not ry:
        return None
    fy = min(max((ry[-1] + 0.5) * src_h / nh - 0.5, 0), src_h - 1)
    return min(int(fy) + 1, src_h - 1)


@pytest.mark.parametrize("src_hw,size,mode", [((1080, 1920), (640, 640), "letterbox"), ((720, 1280), (384, 640), "resize"),
                                              ((37, 53), (640, 640), "letterbox"), ((2160, 3840), (320, 320), "resize")])
@pytest.mark.parametrize("bands", [2, 4, 7])
def test_banded_upload_covers_each_band_before_its_kernel(src_hw, size, mode, bands):
    """With bands, each band's kernel runs on the compute stream after an event recorded on the
    copy stream once every source row that band reads has been uploaded; the rows add up to one
    upload of the frame (at most), and the bands cover every output row once."""
    from sdk.kernels.preprocess import BLOCK, GpuPreprocessor

    b = RecordingBackend()
    spec = PreprocessSpec(size=size, resize=mode)
    h, w = src_hw
    frame = np.zeros((h, w, 3), np.uint8)
    with GpuPreprocessor(spec, backend=b, bands=bands) as pre:
        staging = pre.input_buffer(h, w)
        np.copyto(staging, frame)
        b.ops.clear()
        for _ in range(2):
            pre.to_device(staging)
        copy_stream, compute = pre._copy_stream, pre.stream
        src_ptr = pre._src.ptr
    ops = b.ops
    # the 2nd frame's uploads wait for the 1st frame's last kernel (they overwrite its source rows)
    second = [i for i, op in enumerate(ops) if op[0] == "wait" and op[1] is copy_stream]
    assert len(second) == 1
    assert ops[second[0] - 1][0] == "record" and ops[second[0] - 1][2] is compute
    uploaded, recorded, covered = 0, {}, []
    for op in ops[: second[0]]:
        if op[0] == "htod":
            assert op[3] is copy_stream and op[1] == src_ptr + uploaded * w * 3
            uploaded += op[2] // (w * 3)
        elif op[0] == "record" and op[2] is copy_stream:
            recorded[id(op[1])] = uploaded
        elif op[0] == "wait":
            assert op[1] is compute
            ready = recorded[id(op[2])]
        elif op[0] == "launch":
            assert op[4] is compute
            y0, y1 = int(op[3][-2]), int(op[3][-1])
            assert op[2][1] == (y1 - y0 + BLOCK[1] - 1) // BLOCK[1]
            top_row = _rows_read(spec, h, w, y0, y1)
            assert top_row is None or top_row < ready, (y0, y1, top_row, ready)
            covered.append((y0, y1))
    assert uploaded <= h
    assert covered[0][0] == 0 and covered[-1][1] == size[0] and len(covered) <= bands
    assert all(a[1] == b_[0] for a, b_ in zip(covered, covered[1:]))
