"""SIMULATED GPU for tests on machines without one: the real ``.cu`` kernels compiled as C++ with g++
and run on the CPU, one cooperative context per CUDA thread (``ucontext``), a block's threads run in
turn up to each ``__syncthreads`` (threads that returned count as arrived), blocks one after
another. Device memory is host memory. ``SimBackend`` is a :class:`CudaBackend`, so the real
wrappers (``GpuYoloPostprocessor``, ``GpuPreprocessor``) drive it unchanged.

What it proves: the CUDA C logic (indexing, barriers, block collectives, the launch arguments)
computes what the CPU reference computes. What it cannot: timing, memory-model races, warp
scheduling, the GPU's arithmetic (``--fmad=false`` is mirrored with ``-ffp-contract=off``).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from sdk.targets.cuda.base import (
    CudaBackend,
    CudaError,
    DeviceBuffer,
    Event,
    Kernel,
    Stream,
)

PRELUDE = r"""
#include <ucontext.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <vector>
#include <functional>
struct dim3 { unsigned int x, y, z; };
static dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline int __popc(unsigned int v) { return __builtin_popcount(v); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int atomicAdd(int* p, int v) { int old = *p; *p = old + v; return old; }
static inline unsigned short __sim_f2h(float f) { _Float16 h = (_Float16)f; unsigned short u; memcpy(&u, &h, 2); return u; }

/* the scheduler: one ucontext per thread of the running block */
static ucontext_t sim_main;
static std::vector<ucontext_t> sim_ctx;
static std::vector<char> sim_done;
static std::vector<std::vector<char>> sim_stacks;
static int sim_cur;
static std::function<void()> sim_body;
static void sim_yield() { swapcontext(&sim_ctx[sim_cur], &sim_main); }
static void __syncthreads() { sim_yield(); }
static int sim_acc, sim_warp_acc[64];
static int __syncthreads_count(int pred) {
    if (threadIdx.x == 0) sim_acc = 0;   /* thread 0 runs first in every round */
    sim_yield();
    sim_acc += pred != 0;
    sim_yield();
    return sim_acc;
}
static unsigned int __ballot_sync(unsigned int mask, int pred) {
    const int w = threadIdx.x / 32;
    if (threadIdx.x == 0) for (int i = 0; i < 64; ++i) sim_warp_acc[i] = 0;
    sim_yield();
    if (pred) sim_warp_acc[w] |= 1u << (threadIdx.x % 32);
    sim_yield();
    return (unsigned int)sim_warp_acc[w] & mask;
}
static void sim_entry() { sim_body(); sim_done[sim_cur] = 1; swapcontext(&sim_ctx[sim_cur], &sim_main); }
static void sim_run(dim3 grid, dim3 block, std::function<void()> body) {
    const int n = block.x * block.y * block.z;
    gridDim = grid; blockDim = block; sim_body = body;
    sim_ctx.assign(n, ucontext_t()); sim_done.assign(n, 0);
    if ((int)sim_stacks.size() < n) sim_stacks.resize(n, std::vector<char>(64 * 1024));
    for (unsigned bz = 0; bz < grid.z; ++bz) for (unsigned by = 0; by < grid.y; ++by) for (unsigned bx = 0; bx < grid.x; ++bx) {
        for (int t = 0; t < n; ++t) {
            getcontext(&sim_ctx[t]);
            sim_ctx[t].uc_stack.ss_sp = sim_stacks[t].data();
            sim_ctx[t].uc_stack.ss_size = sim_stacks[t].size();
            sim_ctx[t].uc_link = 0;
            makecontext(&sim_ctx[t], sim_entry, 0);
            sim_done[t] = 0;
        }
        int live = n;
        while (live > 0) {          /* one round = every live thread up to its next barrier */
            live = 0;
            for (int t = 0; t < n; ++t) {
                if (sim_done[t]) continue;
                sim_cur = t;
                threadIdx.x = t % block.x; threadIdx.y = (t / block.x) % block.y; threadIdx.z = t / (block.x * block.y);
                blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz;
                swapcontext(&sim_main, &sim_ctx[t]);
                live += !sim_done[t];
            }
        }
    }
}
"""

_ASM_F2H = re.compile(r'asm\("cvt\.rn\.f16\.f32 %0, %1;"\s*:\s*"=h"\((\w+)\)\s*:\s*"f"\((\w+)\)\);')
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\((.*?)\)\s*\{', re.S)


def _param_types(params: str) -> List[str]:
    text = re.sub(r"/\*.*?\*/", "", params, flags=re.S)
    types = []
    for p in text.split(","):
        p = " ".join(p.split())
        types.append(re.sub(r"\s*\b\w+$", "", p).replace("__restrict__", "").strip())
    return types


def translate(source: str) -> str:
    """The .cu source as C++ for the simulator, plus one ``sim_<kernel>(grid, block, params)`` per
    kernel (``params``: an array of pointers to each argument, as cuLaunchKernel takes)."""
    body = _ASM_F2H.sub(lambda m: f"{m.group(1)} = __sim_f2h({m.group(2)});", source)
    wrappers = []
    for m in _KERNEL.finditer(re.sub(r"/\*.*?\*/", "", source, flags=re.S)):
        name, types = m.group(1), _param_types(m.group(2))
        call = ", ".join(f"*({t}*)params[{i}]" for i, t in enumerate(types))
        wrappers.append(f'extern "C" void sim_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, '
                        f'unsigned bz, void** params) {{ sim_run(dim3{{gx, gy, gz}}, dim3{{bx, by, bz}}, '
                        f'[&] {{ {name}({call}); }}); }}')
    return PRELUDE + body + "\n" + "\n".join(wrappers) + "\n"


_BUILT: Dict[str, ctypes.CDLL] = {}


def build(source: str, options: List[str]) -> ctypes.CDLL:
    gxx = shutil.which("g++")
    if gxx is None:
        raise CudaError("g++ is needed for the simulated GPU")
    fmad_off = "--fmad=false" in options
    key = hashlib.sha256((PRELUDE + source + str(fmad_off)).encode()).hexdigest()[:16]
    if key not in _BUILT:
        lib = Path(tempfile.gettempdir()) / "edgesdk-simgpu" / f"{key}.so"  # one file per source version
        if not lib.is_file():
            lib.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=lib.parent) as d:
                cpp, so = Path(d) / "k.cpp", Path(d) / "k.so"
                cpp.write_text(translate(source))
                cmd = [gxx, "-std=c++17", "-ffp-contract=off" if fmad_off else "-ffp-contract=fast", "-O1",
                       "-shared", "-fPIC", "-w", "-o", str(so), str(cpp)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode:
                    raise CudaError(f"the simulated GPU could not compile the kernels:\n{proc.stderr[-3000:]}")
                os.replace(so, lib)
        _BUILT[key] = ctypes.CDLL(str(lib))
    return _BUILT[key]


class SimBackend(CudaBackend):
    """SIMULATED GPU: host memory, synchronous launches of the kernels compiled for the CPU."""

    name = "simulated GPU (CPU, not a GPU)"

    def __init__(self) -> None:
        super().__init__(0)
        self._mem: Dict[int, np.ndarray] = {}

    def _alloc(self, nbytes: int) -> DeviceBuffer:
        arr = np.full(nbytes, 0xA5, np.uint8)  # garbage, as fresh device memory
        self._mem[arr.ctypes.data] = arr
        return DeviceBuffer(self, arr.ctypes.data, nbytes, handle=arr.ctypes.data)

    def _free(self, buf: DeviceBuffer) -> None:
        self._mem.pop(buf._handle, None)

    def _pinned(self, shape, dtype) -> np.ndarray:
        return np.zeros(shape, dtype)

    def _register(self, arr: np.ndarray) -> Any:
        return arr.ctypes.data

    def _unregister(self, ptr: int) -> None:
        pass

    def _htod(self, dst: int, src: np.ndarray, stream: Optional[Stream]) -> None:
        ctypes.memmove(dst, src.ctypes.data, src.nbytes)

    def _dtoh(self, dst: np.ndarray, src: int, stream: Optional[Stream]) -> None:
        ctypes.memmove(dst.ctypes.data, src, dst.nbytes)

    def _memset_d32(self, dst: int, value: int, count: int, stream: Optional[Stream]) -> None:
        (ctypes.c_uint32 * count).from_address(dst)[:] = [value] * count

    def _stream(self) -> Stream:
        return Stream(self, None, 0)

    def _stream_sync(self, stream: Stream) -> None:
        pass

    def _stream_wait(self, stream: Stream, event: Event) -> None:
        pass

    def _event(self) -> Event:
        return Event(self, [0.0])

    def _event_record(self, event: Event, stream: Optional[Stream]) -> None:
        event.obj[0] = time.perf_counter()

    def _event_sync(self, event: Event) -> None:
        pass

    def _event_elapsed(self, start: Event, end: Event) -> float:
        return (end.obj[0] - start.obj[0]) * 1e3

    def _ctx_sync(self) -> None:
        pass

    def _compile(self, source: str, name: str, options: List[str]) -> Any:
        return build(source, options)

    def _function(self, module: Any, name: str) -> Kernel:
        fn = getattr(module, f"sim_{name}")
        fn.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_void_p]
        return Kernel(self, name, fn, module)

    def _launch(self, kernel: Kernel, grid, block, args, stream: Optional[Stream], shared_bytes: int) -> None:
        holders = [np.array([a]) for a in args]
        ptrs = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
        kernel.obj(*grid, *block, ptrs.ctypes.data)
