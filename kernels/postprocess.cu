/* YOLO-style detection post-processing for edgesdk: score threshold, box decode, class-aware NMS,
 * top-k cap. Three kernels, launched in order on one stream:
 *
 *   1. edgesdk_yolo_decode   one thread per prediction row. Row layout [4 + C] (cx, cy, w, h, class
 *                            scores) or [4 + 1 + C] (objectness first: score = obj * cls). Picks the
 *                            best class (first maximum), keeps the row when score > score_threshold,
 *                            decodes (cx, cy, w, h) -> (x1, y1, x2, y2) and appends the row to the
 *                            candidate list (atomic counter: unordered).
 *   2. edgesdk_rank          one thread per candidate: its rank in the order (score descending,
 *                            row index ascending), a deterministic sort (O(n^2) compares through
 *                            shared-memory tiles); candidates ranked past max_candidates are dropped.
 *   3. edgesdk_nms           one block: greedy NMS over the ranked candidates; a box is removed when
 *                            its IoU with a kept box OF THE SAME CLASS is > iou_threshold; stops after
 *                            max_detections kept boxes.
 *
 * Same semantics as sdk.kernels.reference.yolo_postprocess (bit-identical decisions: float32 with
 * explicit round-to-nearest intrinsics, no fused multiply-add). Plain CUDA C for CUDA 10.2 and later.
 */

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

extern "C" __global__ void edgesdk_yolo_decode(
    const float* __restrict__ pred,          /* element (row i, field k) at pred[i*row_stride + k*col_stride] */
    int num_rows, int num_classes, int has_objectness,
    int row_stride, int col_stride,
    float score_threshold,
    int* __restrict__ cand_count,            /* set to 0 before the launch */
    float* __restrict__ cand_score,          /* [num_rows] */
    int* __restrict__ cand_row,              /* [num_rows] */
    float* __restrict__ boxes,               /* [num_rows, 4] x1 y1 x2 y2 (written for kept rows) */
    int* __restrict__ classes)               /* [num_rows] */
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= num_rows) return;
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
    if (!(best > score_threshold)) return;
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
    const int slot = atomicAdd(cand_count, 1);
    cand_score[slot] = best;
    cand_row[slot] = i;
}

#define EDGESDK_RANK_TILE 256  /* edgesdk_rank must be launched with blockDim.x == EDGESDK_RANK_TILE */

extern "C" __global__ void edgesdk_rank(
    const float* __restrict__ cand_score, const int* __restrict__ cand_row,
    const int* __restrict__ cand_count, int max_candidates,
    float* __restrict__ sorted_score, int* __restrict__ sorted_row)
{
    __shared__ float tile_score[EDGESDK_RANK_TILE];
    __shared__ int tile_row[EDGESDK_RANK_TILE];
    const int n = *cand_count;
    if ((int)(blockIdx.x * blockDim.x) >= n) return;  /* uniform per block */
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float s = i < n ? cand_score[i] : 0.0f;
    const int r = i < n ? cand_row[i] : 0;
    int rank = 0;
    for (int base = 0; base < n; base += EDGESDK_RANK_TILE) {
        const int j = base + threadIdx.x;
        if (j < n) {
            tile_score[threadIdx.x] = cand_score[j];
            tile_row[threadIdx.x] = cand_row[j];
        }
        __syncthreads();
        const int m = min(EDGESDK_RANK_TILE, n - base);
        for (int t = 0; t < m; ++t) {
            const float sj = tile_score[t];
            rank += (sj > s || (sj == s && tile_row[t] < r)) ? 1 : 0;
        }
        __syncthreads();
    }
    if (i < n && rank < max_candidates) {
        sorted_score[rank] = s;
        sorted_row[rank] = r;
    }
}

extern "C" __global__ void edgesdk_nms(
    const float* __restrict__ boxes, const int* __restrict__ classes,
    const float* __restrict__ sorted_score, const int* __restrict__ sorted_row,
    const int* __restrict__ cand_count, int max_candidates,
    float iou_threshold, int max_detections,
    unsigned char* __restrict__ removed,     /* scratch [max_candidates] */
    float* __restrict__ out_boxes,           /* [max_detections, 4] */
    float* __restrict__ out_scores,          /* [max_detections] */
    int* __restrict__ out_classes,           /* [max_detections] */
    int* __restrict__ out_rows,              /* [max_detections] source row of each detection */
    int* __restrict__ out_count)
{
    const int k = min(*cand_count, max_candidates);
    for (int j = threadIdx.x; j < k; j += blockDim.x) removed[j] = 0;
    int kept = 0;
    for (int i = 0; i < k && kept < max_detections; ++i) {
        __syncthreads();
        if (removed[i]) continue;              /* same value in every thread after the barrier */
        const int ri = sorted_row[i];
        const float* bi = boxes + 4LL * ri;
        const int ci = classes[ri];
        if (threadIdx.x == 0) {
            out_boxes[4 * kept + 0] = bi[0];
            out_boxes[4 * kept + 1] = bi[1];
            out_boxes[4 * kept + 2] = bi[2];
            out_boxes[4 * kept + 3] = bi[3];
            out_scores[kept] = sorted_score[i];
            out_classes[kept] = ci;
            out_rows[kept] = ri;
        }
        ++kept;
        for (int j = i + 1 + threadIdx.x; j < k; j += blockDim.x) {
            if (removed[j]) continue;
            const int rj = sorted_row[j];
            if (classes[rj] != ci) continue;
            if (edgesdk_iou(bi, boxes + 4LL * rj) > iou_threshold) removed[j] = 1;
        }
    }
    if (threadIdx.x == 0) *out_count = kept;
}
