/* Text-line crops for edgesdk's pipelines, fused: perspective crop of each quad, 90-degree turn of a
 * tall crop, resize to the recogniser's height, colour order, (x - mean) / std, padding. One launch
 * covers every crop of a frame (grid z = the crop).
 *
 * Semantics match the CPU glue steps on a board without OpenCV, step for step, with the
 * intermediate crop rounded to uint8 as they round it (sdk.kernels.crops.emulate is the NumPy model):
 *   - crop_quads (glue.perspective_crop_reference): crop pixel (cx, cy) samples the source at
 *     hinv * (cx, cy, 1) (float64), clamped to the image, bilinear, rint, clipped to 0..255;
 *     a crop at least rotate_ratio times taller than wide is np.rot90'd: turned pixel (i, j) is
 *     crop pixel (j, crop_w - 1 - i);
 *   - resize_pad (glue.resize_bilinear): half-pixel centres in float32, clamped, bilinear weights
 *     and blend in float64; then (v - mean) / std in float64, stored as float32; outside the
 *     resized width: pad_value (output units).
 *
 * Plain CUDA C: builds with CUDA 10.2 (JetPack 4) and current CUDA, with nvcc or NVRTC. Compiled
 * with --fmad=false so the float64 sums round as NumPy's do.
 */

/* per crop, int32: turned_h, turned_w, crop_w, turned, resized_w, out_w, left, unused */
#define EDGESDK_CROP_INTS 8

__device__ __forceinline__ double edgesdk_crop_pixel(
    const unsigned char* __restrict__ src, int src_h, int src_w, int src_pitch,
    const double* __restrict__ h, int crop_w, int turned, int gy, int gx, int c)
{
    /* (gy, gx) is a pixel of the (possibly turned) crop: back to the crop's own pixel (cy, cx) */
    const int cy = turned ? gx : gy;
    const int cx = turned ? (crop_w - 1 - gy) : gx;
    const double px = (double)cx, py = (double)cy;
    const double sz = h[6] * px + h[7] * py + h[8];
    double sx = (h[0] * px + h[1] * py + h[2]) / sz;
    double sy = (h[3] * px + h[4] * py + h[5]) / sz;
    sx = fmin(fmax(sx, 0.0), (double)(src_w - 1));
    sy = fmin(fmax(sy, 0.0), (double)(src_h - 1));
    const int x0 = (int)floor(sx), y0 = (int)floor(sy);
    const int x1 = min(x0 + 1, src_w - 1), y1 = min(y0 + 1, src_h - 1);
    const double fx = sx - (double)x0, fy = sy - (double)y0;
    const double f00 = (double)src[y0 * src_pitch + x0 * 3 + c];
    const double f01 = (double)src[y0 * src_pitch + x1 * 3 + c];
    const double f10 = (double)src[y1 * src_pitch + x0 * 3 + c];
    const double f11 = (double)src[y1 * src_pitch + x1 * 3 + c];
    const double v = f00 * (1.0 - fx) * (1.0 - fy) + f01 * fx * (1.0 - fy) + f10 * (1.0 - fx) * fy + f11 * fx * fy;
    return fmin(fmax(rint(v), 0.0), 255.0);
}

extern "C" __global__ void edgesdk_crop_resize(
    const unsigned char* __restrict__ src,  /* src_h x src_w x 3 uint8, row pitch src_pitch bytes */
    int src_h, int src_w, int src_pitch,
    const double* __restrict__ hinv,        /* per crop: 3x3 crop pixel -> source point */
    const int* __restrict__ ints,           /* per crop: EDGESDK_CROP_INTS values (above) */
    const float* __restrict__ scales,       /* per crop: scale_y, scale_x (float32, as NumPy's) */
    float* __restrict__ dst,                /* crops x 3 x out_h x out_stride (NCHW) or crops x out_h x out_stride x 3 */
    int out_h, int out_stride,
    float pad_value,
    float mean0, float mean1, float mean2,  /* per output channel, 0-255 units */
    float std0, float std1, float std2,
    int swap_rb, int out_nchw)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int k = blockIdx.z;
    const int* p = ints + k * EDGESDK_CROP_INTS;
    const int turned_h = p[0], turned_w = p[1], crop_w = p[2], turned = p[3];
    const int resized_w = p[4], out_w = p[5], left = p[6];
    if (x >= out_w || y >= out_h) return;

    float* out = dst + (size_t)k * 3 * out_h * out_stride;
    const double mean[3] = {(double)mean0, (double)mean1, (double)mean2};
    const double sd[3] = {(double)std0, (double)std1, (double)std2};
    const int rx = x - left;
    double v[3];
    const int inside = rx >= 0 && rx < resized_w;
    if (inside) {
        const float sy = scales[2 * k], sx = scales[2 * k + 1];
        float fy = ((float)y + 0.5f) * sy - 0.5f;
        float fx = ((float)rx + 0.5f) * sx - 0.5f;
        fy = fminf(fmaxf(fy, 0.0f), (float)(turned_h - 1));
        fx = fminf(fmaxf(fx, 0.0f), (float)(turned_w - 1));
        const int y0 = (int)floorf(fy), x0 = (int)floorf(fx);
        const int y1 = min(y0 + 1, turned_h - 1), x1 = min(x0 + 1, turned_w - 1);
        const double wy = (double)fy - (double)y0, wx = (double)fx - (double)x0;
        const double* h = hinv + 9 * k;
        for (int c = 0; c < 3; ++c) {
            const double a = edgesdk_crop_pixel(src, src_h, src_w, src_pitch, h, crop_w, turned, y0, x0, c);
            const double b = edgesdk_crop_pixel(src, src_h, src_w, src_pitch, h, crop_w, turned, y0, x1, c);
            const double d = edgesdk_crop_pixel(src, src_h, src_w, src_pitch, h, crop_w, turned, y1, x0, c);
            const double e = edgesdk_crop_pixel(src, src_h, src_w, src_pitch, h, crop_w, turned, y1, x1, c);
            const double top = a * (1.0 - wx) + b * wx;
            const double bot = d * (1.0 - wx) + e * wx;
            v[c] = top * (1.0 - wy) + bot * wy;
        }
    }
    for (int c = 0; c < 3; ++c) {
        const int from = swap_rb ? 2 - c : c;   /* output channel c reads input channel `from` */
        const float o = inside ? (float)((v[from] - mean[c]) / sd[c]) : pad_value;
        if (out_nchw)
            out[((size_t)c * out_h + y) * out_stride + x] = o;
        else
            out[((size_t)y * out_stride + x) * 3 + c] = o;
    }
}
