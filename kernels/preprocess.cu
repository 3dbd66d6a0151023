/* Fused image preprocessing for edgesdk: one kernel, one pass.
 *
 * uint8 HWC image (BGR or RGB) -> bilinear resize (or letterbox: resize into a region of the output,
 * the rest filled with pad_value) -> optional R/B swap -> (x - mean) / std -> NCHW or NHWC, float32
 * or float16.
 *
 * Semantics match sdk.preprocess.preprocess_reference():
 *   - bilinear with half-pixel centres (OpenCV INTER_LINEAR): sy = (y + 0.5) * scale_y - 0.5,
 *     clamped to [0, src_h - 1]; scale_y = src_h / region_h (region = whole output, or the
 *     letterbox's resized area);
 *   - letterbox geometry (top, left, region_h, region_w) comes from
 *     PreprocessSpec.letterbox_geometry() on the host;
 *   - mean / inv_std are per OUTPUT channel (the model's colour order).
 *
 * One launch may cover a band of output rows [y_begin, y_end) (the grid's y covers the band): the
 * host then overlaps the upload of the source rows of the next band with this band's kernel.
 *
 * Plain CUDA C: builds with CUDA 10.2 (JetPack 4) and current CUDA, with nvcc or NVRTC. No headers:
 * float16 is written as its bit pattern through the PTX cvt.rn.f16.f32 instruction.
 */

__device__ __forceinline__ unsigned short edgesdk_f2h_bits(float f)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

extern "C" __global__ void edgesdk_preprocess(
    const unsigned char* __restrict__ src,  /* src_h x src_w x 3, row pitch src_pitch bytes */
    int src_h, int src_w, int src_pitch,
    void* __restrict__ dst,                  /* 3 x dst_h x dst_w (NCHW) or dst_h x dst_w x 3 (NHWC) */
    int dst_h, int dst_w,
    int top, int left, int region_h, int region_w,  /* resized region inside dst */
    float scale_y, float scale_x,            /* src_h / region_h, src_w / region_w */
    float pad_value,                         /* 0-255 units, before normalisation */
    float mean0, float mean1, float mean2,   /* per output channel */
    float inv_std0, float inv_std1, float inv_std2,
    int swap_rb, int out_nchw, int out_half,
    int y_begin, int y_end)                  /* output rows [y_begin, y_end) (a band; 0, dst_h: all) */
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = y_begin + blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= dst_w || y >= y_end) return;

    float v[3];
    const int ry = y - top;
    const int rx = x - left;
    if (ry < 0 || rx < 0 || ry >= region_h || rx >= region_w) {
        v[0] = v[1] = v[2] = pad_value;
    } else {
        float fy = ((float)ry + 0.5f) * scale_y - 0.5f;
        float fx = ((float)rx + 0.5f) * scale_x - 0.5f;
        fy = fminf(fmaxf(fy, 0.0f), (float)(src_h - 1));
        fx = fminf(fmaxf(fx, 0.0f), (float)(src_w - 1));
        const int y0 = (int)floorf(fy);
        const int x0 = (int)floorf(fx);
        const int y1 = min(y0 + 1, src_h - 1);
        const int x1 = min(x0 + 1, src_w - 1);
        const float wy = fy - (float)y0;
        const float wx = fx - (float)x0;
        const unsigned char* r0 = src + (long long)y0 * src_pitch;
        const unsigned char* r1 = src + (long long)y1 * src_pitch;
        const int c00 = x0 * 3, c01 = x1 * 3;
        for (int c = 0; c < 3; ++c) {
            const float top_v = (float)r0[c00 + c] * (1.0f - wx) + (float)r0[c01 + c] * wx;
            const float bot_v = (float)r1[c00 + c] * (1.0f - wx) + (float)r1[c01 + c] * wx;
            v[c] = top_v * (1.0f - wy) + bot_v * wy;
        }
    }
    if (swap_rb) {
        const float t = v[0];
        v[0] = v[2];
        v[2] = t;
    }
    const float o0 = (v[0] - mean0) * inv_std0;
    const float o1 = (v[1] - mean1) * inv_std1;
    const float o2 = (v[2] - mean2) * inv_std2;

    const long long plane = (long long)dst_h * dst_w;
    const long long pix = (long long)y * dst_w + x;
    long long i0, i1, i2;
    if (out_nchw) {
        i0 = pix; i1 = plane + pix; i2 = 2 * plane + pix;
    } else {
        i0 = pix * 3; i1 = i0 + 1; i2 = i0 + 2;
    }
    if (out_half) {
        unsigned short* d = (unsigned short*)dst;
        d[i0] = edgesdk_f2h_bits(o0);
        d[i1] = edgesdk_f2h_bits(o1);
        d[i2] = edgesdk_f2h_bits(o2);
    } else {
        float* d = (float*)dst;
        d[i0] = o0;
        d[i1] = o1;
        d[i2] = o2;
    }
}
