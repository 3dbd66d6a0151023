/* YOLO-style detection post-processing for edgesdk: score threshold, box decode, class-aware NMS,
 * top-k cap. Every stage runs on as many blocks as its data needs (nothing is single-block except
 * two short scans and the final greedy walk over 64-bit masks). Kernels, in launch order on one
 * stream (sdk.kernels.postprocess.GpuYoloPostprocessor; sdk.kernels.postprocess.emulate is the
 * same algorithm in NumPy):
 *
 *   1. edgesdk_yolo_decode    one thread per prediction row. Row layout [4 + C] (cx, cy, w, h, class
 *                             scores) or [4 + 1 + C] (objectness first: score = obj * cls). Picks the
 *                             best class (first maximum); a row is a candidate when score >
 *                             score_threshold: its box (x1, y1, x2, y2), class and sort key are
 *                             written at its row index; each block writes its candidate count.
 *   2. edgesdk_scan           exclusive prefix sum (one block): block counts -> block offsets and
 *                             the candidate count.
 *   3. edgesdk_compact        candidates -> a dense list (key, row) in row order (stable).
 *   4. edgesdk_radix_hist /   four passes of a stable LSD radix sort on the 32-bit key, 8 bits a
 *      edgesdk_scan /         pass: per-block digit histograms, their prefix sum (digit-major), a
 *      edgesdk_radix_scatter  stable scatter. The key orders score descending; stability keeps
 *                             row order among equal scores: the order (score desc, row asc).
 *   5. edgesdk_nms_mask       the IoU bitmask (as torchvision's CUDA NMS): block (col, row) of 64x64
 *                             ranked candidates; bit j of mask[i][col] is set when candidate col*64+j
 *                             ranks after i, has i's class and IoU(i, j) > iou_threshold.
 *   6. edgesdk_nms_gather     one block: greedy walk 64 candidates at a time (thread 0 resolves a
 *                             64-bit word in registers, all threads OR the kept rows into the later
 *                             words); writes at most max_detections detections.
 *
 * Same semantics as sdk.kernels.reference.yolo_postprocess (bit-identical decisions: float32 with
 * explicit round-to-nearest intrinsics, no fused multiply-add). Plain CUDA C for CUDA 10.2 and later
 * (nvcc or NVRTC, no headers); all blocks are launched with EDGESDK_THREADS threads.
 */

#define EDGESDK_THREADS 256      /* blockDim.x of every kernel but edgesdk_nms_mask (64) */
#define EDGESDK_SCAN_THREADS 1024 /* blockDim.x of edgesdk_scan */
#define EDGESDK_RADIX 256

__device__ __forceinline__ float edgesdk_iou(const float* a, const float* b)
{
    const float ix1 = fmaxf(a[0], b[0]);
    const float iy1 = fmaxf(a[1], b[1]);
    const float ix2 = fminf(a[2], b[2]);
    const float iy2 = fminf(a[3], b[3]);
    const float iw = fmaxf(__fsub_rn(ix2, ix1), 0.0f);
    const float ih = fmaxf(__fsub_rn(iy2, iy1), 0.0f);
    const float inter = __fmul_rn(iw, ih);
    const float area_a = __fmul_rn(fmaxf(__fsub_rn(a[2], a[0]), 0.0f), fmaxf(__fsub_rn(a[3], a[1]), 0.0f));
    const float area_b = __fmul_rn(fmaxf(__fsub_rn(b[2], b[0]), 0.0f), fmaxf(__fsub_rn(b[3], b[1]), 0.0f));
    const float uni = __fsub_rn(__fadd_rn(area_a, area_b), inter);
    return uni > 0.0f ? __fdiv_rn(inter, uni) : 0.0f;
}

/* Sort key: ascending key order = descending score. -0.0 counts as 0.0 (they compare equal). */
__device__ __forceinline__ unsigned int edgesdk_score_key(float s)
{
    unsigned int u = __float_as_uint(__fadd_rn(s, 0.0f));
    u ^= (u & 0x80000000u) ? 0xFFFFFFFFu : 0x80000000u;  /* ascending-orderable */
    return ~u;
}

extern "C" __global__ void edgesdk_yolo_decode(
    const float* __restrict__ pred,          /* element (row i, field k) at pred[i*row_stride + k*col_stride] */
    int num_rows, int num_classes, int has_objectness,
    int row_stride, int col_stride,
    float score_threshold,
    unsigned char* __restrict__ flags,       /* [num_rows] 1 = candidate */
    unsigned int* __restrict__ keys,         /* [num_rows] sort key (written for candidates) */
    float* __restrict__ scores,              /* [num_rows] score (written for candidates) */
    float* __restrict__ boxes,               /* [num_rows, 4] x1 y1 x2 y2 (written for candidates) */
    int* __restrict__ classes,               /* [num_rows] (written for candidates) */
    int* __restrict__ block_counts)          /* [gridDim.x] candidates per block */
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    int keep = 0;
    if (i < num_rows) {
        const float* p = pred + (long long)i * row_stride;
        const int first = has_objectness ? 5 : 4;
        float best = p[(long long)first * col_stride];
        int best_c = 0;
        for (int c = 1; c < num_classes; ++c) {
            const float s = p[(long long)(first + c) * col_stride];
            if (s > best) {
                best = s;
                best_c = c;
            }
        }
        if (has_objectness) best = __fmul_rn(p[4LL * col_stride], best);
        keep = best > score_threshold;
        if (keep) {
            const float cx = p[0];
            const float cy = p[(long long)col_stride];
            const float hw = __fmul_rn(p[2LL * col_stride], 0.5f);
            const float hh = __fmul_rn(p[3LL * col_stride], 0.5f);
            float* b = boxes + 4LL * i;
            b[0] = __fsub_rn(cx, hw);
            b[1] = __fsub_rn(cy, hh);
            b[2] = __fadd_rn(cx, hw);
            b[3] = __fadd_rn(cy, hh);
            classes[i] = best_c;
            scores[i] = best;
            keys[i] = edgesdk_score_key(best);
        }
        flags[i] = (unsigned char)keep;
    }
    const int count = __syncthreads_count(keep);
    if (threadIdx.x == 0) block_counts[blockIdx.x] = count;
}

/* Exclusive prefix sum of data[0..len) in place, one block of EDGESDK_SCAN_THREADS threads; the sum
 * of all goes to *total when total is not NULL. */
extern "C" __global__ void edgesdk_scan(int* __restrict__ data, int len, int* __restrict__ total)
{
    __shared__ int sums[EDGESDK_SCAN_THREADS];
    const int t = threadIdx.x;
    const int chunk = (len + EDGESDK_SCAN_THREADS - 1) / EDGESDK_SCAN_THREADS;
    const int begin = min(t * chunk, len);
    const int end = min(begin + chunk, len);
    int s = 0;
    for (int k = begin; k < end; ++k) s += data[k];
    sums[t] = s;
    __syncthreads();
    for (int off = 1; off < EDGESDK_SCAN_THREADS; off <<= 1) {  /* inclusive Hillis-Steele */
        const int v = t >= off ? sums[t - off] : 0;
        __syncthreads();
        sums[t] += v;
        __syncthreads();
    }
    int run = t > 0 ? sums[t - 1] : 0;
    for (int k = begin; k < end; ++k) {
        const int v = data[k];
        data[k] = run;
        run += v;
    }
    if (t == EDGESDK_SCAN_THREADS - 1 && total != 0) *total = sums[t];
}

/* Position of this thread among the block's threads with pred != 0 (exclusive), and their total. */
__device__ __forceinline__ int edgesdk_block_rank(int pred, int* total)
{
    __shared__ int warp_base[EDGESDK_THREADS / 32 + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned int ballot = __ballot_sync(0xFFFFFFFFu, pred);
    if (lane == 0) warp_base[warp] = __popc(ballot);
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int w = 0; w < EDGESDK_THREADS / 32; ++w) {
            const int c = warp_base[w];
            warp_base[w] = run;
            run += c;
        }
        warp_base[EDGESDK_THREADS / 32] = run;
    }
    __syncthreads();
    *total = warp_base[EDGESDK_THREADS / 32];
    return warp_base[warp] + __popc(ballot & ((1u << lane) - 1u));
}

extern "C" __global__ void edgesdk_compact(
    const unsigned char* __restrict__ flags, const unsigned int* __restrict__ keys, int num_rows,
    const int* __restrict__ block_offsets,   /* edgesdk_scan of the decode's block counts */
    unsigned int* __restrict__ out_keys, int* __restrict__ out_rows)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int keep = i < num_rows ? (int)flags[i] : 0;
    int total;
    const int pos = edgesdk_block_rank(keep, &total);
    if (keep) {
        const int slot = block_offsets[blockIdx.x] + pos;
        out_keys[slot] = keys[i];
        out_rows[slot] = i;
    }
}

extern "C" __global__ void edgesdk_radix_hist(
    const unsigned int* __restrict__ keys, const int* __restrict__ count, int shift,
    int* __restrict__ hist)                  /* [EDGESDK_RADIX, gridDim.x] digit-major */
{
    __shared__ int bins[EDGESDK_RADIX];
    const int n = *count;
    for (int d = threadIdx.x; d < EDGESDK_RADIX; d += blockDim.x) bins[d] = 0;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[(keys[i] >> shift) & (EDGESDK_RADIX - 1)], 1);
    __syncthreads();
    for (int d = threadIdx.x; d < EDGESDK_RADIX; d += blockDim.x) hist[d * gridDim.x + blockIdx.x] = bins[d];
}

extern "C" __global__ void edgesdk_radix_scatter(
    const unsigned int* __restrict__ keys, const int* __restrict__ vals, const int* __restrict__ count,
    int shift,
    const int* __restrict__ offsets,         /* edgesdk_scan of edgesdk_radix_hist's output */
    unsigned int* __restrict__ out_keys, int* __restrict__ out_vals)
{
    __shared__ int digits[EDGESDK_THREADS];
    const int n = *count;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int d = i < n ? (int)((keys[i] >> shift) & (EDGESDK_RADIX - 1)) : EDGESDK_RADIX;
    digits[threadIdx.x] = d;
    __syncthreads();
    if (i >= n) return;
    int before = 0;  /* stable: earlier items of this block with the same digit */
    for (int j = 0; j < (int)threadIdx.x; ++j) before += digits[j] == d;
    const int slot = offsets[d * gridDim.x + blockIdx.x] + before;
    out_keys[slot] = keys[i];
    out_vals[slot] = vals[i];
}

extern "C" __global__ void edgesdk_nms_mask(
    const float* __restrict__ boxes, const int* __restrict__ classes,
    const int* __restrict__ sorted_row, const int* __restrict__ count, int max_candidates,
    float iou_threshold,
    unsigned long long* __restrict__ mask,   /* [max_candidates, words] */
    int words)                               /* ceil(max_candidates / 64) */
{
    __shared__ float col_boxes[64 * 4];
    __shared__ int col_class[64];
    const int k = min(*count, max_candidates);
    const int row_block = blockIdx.y, col_block = blockIdx.x;
    if (col_block < row_block || row_block * 64 >= k || col_block * 64 >= k) return;
    const int rows = min(k - row_block * 64, 64);
    const int cols = min(k - col_block * 64, 64);
    if ((int)threadIdx.x < cols) {
        const int r = sorted_row[col_block * 64 + threadIdx.x];
        col_boxes[threadIdx.x * 4 + 0] = boxes[4LL * r + 0];
        col_boxes[threadIdx.x * 4 + 1] = boxes[4LL * r + 1];
        col_boxes[threadIdx.x * 4 + 2] = boxes[4LL * r + 2];
        col_boxes[threadIdx.x * 4 + 3] = boxes[4LL * r + 3];
        col_class[threadIdx.x] = classes[r];
    }
    __syncthreads();
    if ((int)threadIdx.x >= rows) return;
    const int i = row_block * 64 + threadIdx.x;
    const int r = sorted_row[i];
    const float* bi = boxes + 4LL * r;
    const int ci = classes[r];
    unsigned long long bits = 0ULL;
    for (int j = col_block == row_block ? (int)threadIdx.x + 1 : 0; j < cols; ++j) {
        if (col_class[j] == ci && edgesdk_iou(bi, col_boxes + 4 * j) > iou_threshold) bits |= 1ULL << j;
    }
    mask[(long long)i * words + col_block] = bits;
}

extern "C" __global__ void edgesdk_nms_gather(
    const unsigned long long* __restrict__ mask, int words,
    const float* __restrict__ boxes, const int* __restrict__ classes, const float* __restrict__ scores,
    const int* __restrict__ sorted_row, const int* __restrict__ count, int max_candidates,
    int max_detections,
    unsigned long long* __restrict__ removed, /* scratch [words] */
    float* __restrict__ out_boxes,           /* [max_detections, 4] */
    float* __restrict__ out_scores,          /* [max_detections] */
    int* __restrict__ out_classes,           /* [max_detections] */
    int* __restrict__ out_rows,              /* [max_detections] source row of each detection */
    int* __restrict__ out_count)
{
    __shared__ unsigned long long diag[64];
    __shared__ int kept_idx[64];
    __shared__ int kept_now;
    const int k = min(*count, max_candidates);
    const int nwords = (k + 63) / 64;
    for (int w = threadIdx.x; w < nwords; w += blockDim.x) removed[w] = 0ULL;
    int kept = 0;
    for (int b = 0; b < nwords && kept < max_detections; ++b) {
        const int size = min(k - b * 64, 64);
        if ((int)threadIdx.x < size) diag[threadIdx.x] = mask[(long long)(b * 64 + threadIdx.x) * words + b];
        __syncthreads();  /* also orders the previous round's writes to removed[] */
        if (threadIdx.x == 0) {
            unsigned long long w = removed[b];
            int nk = 0;
            for (int q = 0; q < size && kept + nk < max_detections; ++q) {
                if (!((w >> q) & 1ULL)) {
                    kept_idx[nk++] = b * 64 + q;
                    w |= diag[q];
                }
            }
            kept_now = nk;
        }
        __syncthreads();
        const int nk = kept_now;
        if ((int)threadIdx.x < nk) {
            const int i = kept_idx[threadIdx.x];
            const int r = sorted_row[i];
            const int slot = kept + threadIdx.x;
            out_boxes[4 * slot + 0] = boxes[4LL * r + 0];
            out_boxes[4 * slot + 1] = boxes[4LL * r + 1];
            out_boxes[4 * slot + 2] = boxes[4LL * r + 2];
            out_boxes[4 * slot + 3] = boxes[4LL * r + 3];
            out_scores[slot] = scores[r];
            out_classes[slot] = classes[r];
            out_rows[slot] = r;
        }
        for (int w = b + 1 + threadIdx.x; w < nwords; w += blockDim.x) {
            unsigned long long acc = 0ULL;
            for (int q = 0; q < nk; ++q) acc |= mask[(long long)kept_idx[q] * words + w];
            removed[w] |= acc;
        }
        kept += nk;
        __syncthreads();  /* kept_idx / kept_now / diag are rewritten next round */
    }
    if (threadIdx.x == 0) *out_count = kept;
}
