/* test_matmul.c: vq_matmul on every weight type against (1) the scalar reference, per ISA the
 * CPU has, within 1e-5 of sum|w*x| (float summation order is the only difference); (2) an exact
 * case (power-of-two scales, integer activations) where every ISA must give identical bits and
 * equal the exact integer dot; (3) a float64 dot of the dequantized weights with the original
 * activations, within the activation-quantization bound sum_b (d_b/2)*sum_j|w_bj| + 1e-5*sum|w*x|;
 * (4) 1 vs 2 threads bit-identical. Sizes include rows that are no multiple of the thread chunk
 * and n = 1, 3, 6, 17 tokens. */
#include "kernels/kernels_impl.h"
#include "../vq_test.h"
#include <omp.h>

static const uint32_t TYPES[] = {VQ_TYPE_F32, VQ_TYPE_F16, VQ_TYPE_BF16, VQ_TYPE_Q8_0, VQ_TYPE_Q4_0, VQ_TYPE_Q4_1,
                                 VQ_TYPE_Q5_0, VQ_TYPE_Q5_1, VQ_TYPE_IQ4_NL, VQ_TYPE_Q2_K, VQ_TYPE_Q3_K,
                                 VQ_TYPE_Q4_K, VQ_TYPE_Q5_K, VQ_TYPE_Q6_K, VQ_TYPE_IQ4_XS,
                                 VQ_TYPE_TQW4, VQ_TYPE_TQW3, VQ_TYPE_TQW2};
static int is_tqw(uint32_t t) { return t == VQ_TYPE_TQW4 || t == VQ_TYPE_TQW3 || t == VQ_TYPE_TQW2; }

/* Types tested on random blocks rather than quantized floats: every code and scale value is
 * reachable that way. Byte offsets of each type's fp16 fields (d, and dmin / m where present). */
/* For the exact case, byte ranges {at, len, and, or} that hold the sub-block scales are masked so
 * every scale is 0..3 (the integer sums then stay well inside float's 24 bits). */
typedef struct { int at, len; uint8_t and_, or_; } scale_mask;
typedef struct { uint32_t type; int f16_at[2]; scale_mask sm[2]; } rnd_type;
static const rnd_type RND[] = {
    {VQ_TYPE_Q5_0, {0, -1}, {{0}}}, {VQ_TYPE_Q5_1, {0, 2}, {{0}}}, {VQ_TYPE_IQ4_NL, {0, -1}, {{0}}},
    {VQ_TYPE_Q2_K, {80, 82}, {{0, 16, 0x33, 0}}},                     /* scale | min << 4 */
    {VQ_TYPE_Q3_K, {108, -1}, {{96, 8, 0x33, 0}, {104, 4, 0, 0xAA}}}, /* high pairs 2: +32 offset gone */
    {VQ_TYPE_Q4_K, {0, 2}, {{4, 12, 0x03, 0}}}, {VQ_TYPE_Q5_K, {0, 2}, {{4, 12, 0x03, 0}}},
    {VQ_TYPE_Q6_K, {208, -1}, {{192, 16, 0x03, 0}}},
    {VQ_TYPE_IQ4_XS, {0, -1}, {{2, 2, 0, 0xAA}, {4, 4, 0x33, 0}}},
    {VQ_TYPE_TQW4, {0, 2}, {{0}}}, {VQ_TYPE_TQW3, {0, 2}, {{0}}}, {VQ_TYPE_TQW2, {0, 2}, {{0}}},
};
static const rnd_type *rnd_type_of(uint32_t type) {
    for (size_t i = 0; i < VQ_ARRAY_LEN(RND); i++) if (RND[i].type == type) return &RND[i];
    return NULL;
}
/* nb random blocks; fp16 fields: exact = 0: d ~ 0.002 * 2^U(-2,2), second field a tenth of it;
 * exact = 1: powers of two (2^-4 .. 2^-8), so every product is exact in float */
static void random_blocks(vq_rng *rng, const rnd_type *rt, int nb, uint8_t *dst, int exact) {
    size_t bb = vq_wtype_get(rt->type)->block_bytes;
    for (size_t i = 0; i < bb * (size_t)nb; i++) dst[i] = (uint8_t)vq_rng_u64(rng);
    for (int b = 0; b < nb; b++)
        for (int f = 0; f < 2; f++) {
            if (rt->f16_at[f] < 0) continue;
            float v = exact ? ldexpf(1.0f, -(int)(vq_rng_u64(rng) % 5) - 4)
                            : 0.002f * exp2f(4.0f * vq_rng_uniformf(rng) - 2.0f) * (f && !is_tqw(rt->type) ? 0.1f : 1.0f);
            vq_f16 h = vq_f32_to_f16(v);
            memcpy(dst + bb * b + rt->f16_at[f], &h, 2);
        }
    for (int b = 0; b < nb && exact; b++)
        for (int m = 0; m < 2; m++)
            for (int i = 0; i < rt->sm[m].len; i++) {
                uint8_t *p = dst + bb * b + rt->sm[m].at + i;
                *p = (uint8_t)((*p & rt->sm[m].and_) | rt->sm[m].or_);
            }
}

/* the test's own quantizers (ggml's recipes), independent of the library */
static void quantize_row(uint32_t type, const float *x, int n, uint8_t *dst) {
    for (int b = 0; b < n / 32 || (b == 0 && type <= VQ_TYPE_F16) || (type == VQ_TYPE_BF16 && b == 0); b++) {
        if (type == VQ_TYPE_F32) { memcpy(dst, x, (size_t)n * 4); return; }
        if (type == VQ_TYPE_F16) { for (int i = 0; i < n; i++) ((vq_f16 *)dst)[i] = vq_f32_to_f16(x[i]); return; }
        if (type == VQ_TYPE_BF16) { for (int i = 0; i < n; i++) ((vq_bf16 *)dst)[i] = vq_f32_to_bf16(x[i]); return; }
        const float *v = x + b * 32;
        if (type == VQ_TYPE_Q8_0) {
            vq_block_q8_0 *o = (vq_block_q8_0 *)dst + b;
            float amax = 0; for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
            float d = amax / 127, id = d ? 1 / d : 0;
            o->d = vq_f32_to_f16(d);
            for (int j = 0; j < 32; j++) o->qs[j] = (int8_t)roundf(v[j] * id);
        } else if (type == VQ_TYPE_Q4_0) {
            vq_block_q4_0 *o = (vq_block_q4_0 *)dst + b;
            float mx = 0, amax = 0;
            for (int j = 0; j < 32; j++) if (fabsf(v[j]) > amax) { amax = fabsf(v[j]); mx = v[j]; }
            float d = mx / -8, id = d ? 1 / d : 0;
            o->d = vq_f32_to_f16(d);
            for (int j = 0; j < 16; j++) {
                int a = (int)fminf(15, v[j] * id + 8.5f), c = (int)fminf(15, v[j + 16] * id + 8.5f);
                o->qs[j] = (uint8_t)(a | (c << 4));
            }
        } else {
            vq_block_q4_1 *o = (vq_block_q4_1 *)dst + b;
            float mn = v[0], mx = v[0];
            for (int j = 1; j < 32; j++) { mn = fminf(mn, v[j]); mx = fmaxf(mx, v[j]); }
            float d = (mx - mn) / 15, id = d ? 1 / d : 0;
            o->d = vq_f32_to_f16(d); o->m = vq_f32_to_f16(mn);
            for (int j = 0; j < 16; j++) {
                int a = (int)fminf(15, (v[j] - mn) * id + 0.5f), c = (int)fminf(15, (v[j + 16] - mn) * id + 0.5f);
                o->qs[j] = (uint8_t)(a | (c << 4));
            }
        }
    }
}

static int isa_ok(vq_isa isa) { return isa <= vq_cpu_best_isa(); }

/* one random problem: compare every ISA with scalar and with float64 */
static void check_case(vq_rng *rng, uint32_t type, int rows, int cols, int n) {
    const vq_wtype *wt = vq_wtype_get(type);
    size_t rb = vq_wtype_row_bytes(type, cols);
    uint8_t *W = malloc(rb * rows);
    float *Wf = malloc(sizeof(float) * rows * cols), *X = malloc(sizeof(float) * n * cols);
    float *tmp = malloc(sizeof(float) * cols);
    float *Y0 = malloc(sizeof(float) * n * rows), *Y1 = malloc(sizeof(float) * n * rows);
    const rnd_type *rt = rnd_type_of(type);
    for (int r = 0; r < rows; r++) {
        if (is_tqw(type) && (r & 1)) {   /* odd rows: the library's from_float of float weights */
            for (int c = 0; c < cols; c++) tmp[c] = (float)vq_rng_gauss(rng) * 0.05f + (c % 7 == 0 ? 0.02f : 0.0f);
            wt->from_float(tmp, W + rb * r, cols);
        } else if (rt) {
            random_blocks(rng, rt, cols / wt->block, W + rb * r, 0);
        } else {
            for (int c = 0; c < cols; c++) tmp[c] = (float)vq_rng_gauss(rng) * 0.05f + (c % 7 == 0 ? 0.02f : 0.0f);
            quantize_row(type, tmp, cols, W + rb * r);
        }
        wt->to_float(W + rb * r, Wf + (size_t)r * cols, cols);
    }
    for (int i = 0; i < n * cols; i++) X[i] = (float)vq_rng_gauss(rng) * (i % 13 == 0 ? 3.0f : 1.0f);

    float *WR = NULL, *XR = NULL;   /* tqw: R applied to the float weights and activations */
    if (is_tqw(type)) {
        WR = malloc(sizeof(float) * rows * cols); XR = malloc(sizeof(float) * n * cols);
        memcpy(WR, Wf, sizeof(float) * rows * cols); vq_tqw_rotate(WR, (int64_t)rows * cols);
        memcpy(XR, X, sizeof(float) * n * cols); vq_tqw_rotate(XR, (int64_t)n * cols);
    }
    vq_matmul_isa(VQ_ISA_SCALAR, Y0, W, type, X, n, rows, cols);
    int quant = wt->block > 1;
    int bad_ref = 0, bad_isa = 0;
    double worst_ref = 0, worst_isa = 0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            const float *w = Wf + (size_t)r * cols, *x = X + (size_t)t * cols;
            double ref = 0, mag = 0, qbound = 0;
            for (int c = 0; c < cols; c++) { ref += (double)w[c] * x[c]; mag += fabs((double)w[c] * x[c]); }
            /* tqw: the activations are quantized after the rotation, so the bound is in the rotated
             * domain, on Rx and Rw (w.x = Rw.Rx), and the kernel's float sums run over Rw*Rx */
            if (is_tqw(type)) {
                w = WR + (size_t)r * cols; x = XR + (size_t)t * cols;
                double mr = 0;
                for (int c = 0; c < cols; c++) mr += fabs((double)w[c] * x[c]);
                mag = fmax(mag, mr);
            }
            if (quant)
                for (int b = 0; b < cols / 32; b++) {
                    double amax = 0, sw = 0;
                    for (int j = 0; j < 32; j++) { amax = fmax(amax, fabs(x[b * 32 + j])); sw += fabs(w[b * 32 + j]); }
                    /* |x - d*q| <= d/2 per element, and d's own float rounding */
                    qbound += (amax / 127.0 / 2.0) * sw * (1 + 1e-6);
                }
            double e = fabs(Y0[(size_t)t * rows + r] - ref), tol = qbound + 1e-5 * mag + 1e-30;
            if (e > tol) bad_ref++;
            if (e / tol > worst_ref) worst_ref = e / tol;
        }
    CHECKF(bad_ref == 0, "%s %dx%d n=%d: %d outputs off the float64 reference beyond bound (worst %.2f of bound)",
           wt->name, rows, cols, n, bad_ref, worst_ref);

    /* K-quants: AVX2 (maddubs+madd) and AVX-512 VNNI (vpdpbusd+mullo) form the same integer
     * lanes and sum them alike, so their bits must agree */
    __builtin_cpu_init();
    if (wt->block == 256 && isa_ok(VQ_ISA_AVX512) && __builtin_cpu_supports("avx512vnni")) {
        vq_matmul_isa(VQ_ISA_AVX2, Y1, W, type, X, n, rows, cols);
        float *Y2 = malloc(sizeof(float) * n * rows);
        vq_matmul_isa(VQ_ISA_AVX512, Y2, W, type, X, n, rows, cols);
        CHECKF(memcmp(Y1, Y2, sizeof(float) * n * rows) == 0, "%s %dx%d n=%d: AVX2 and AVX-512 VNNI bits differ",
               wt->name, rows, cols, n);
        free(Y2);
    }
    for (int isa = VQ_ISA_AVX2; isa <= VQ_ISA_AVX512; isa++) {
        if (!isa_ok((vq_isa)isa)) continue;
        vq_matmul_isa((vq_isa)isa, Y1, W, type, X, n, rows, cols);
        for (int t = 0; t < n; t++)
            for (int r = 0; r < rows; r++) {
                const float *w = Wf + (size_t)r * cols, *x = X + (size_t)t * cols;
                double mag = 0;
                /* scalar and SIMD see the same quantized activations; bound by sum|w*x| */
                for (int c = 0; c < cols; c++) mag += fabs((double)w[c] * x[c]);
                if (is_tqw(type)) {   /* tqw kernels sum over the rotated domain */
                    w = WR + (size_t)r * cols; x = XR + (size_t)t * cols;
                    double mr = 0;
                    for (int c = 0; c < cols; c++) mr += fabs((double)w[c] * x[c]);
                    mag = fmax(mag, mr);
                }
                double e = fabs((double)Y1[(size_t)t * rows + r] - Y0[(size_t)t * rows + r]);
                double tol = 1e-5 * mag * (quant ? 1.1 : 1.0) + 1e-30;
                if (e > tol) bad_isa++;
                if (e / tol > worst_isa) worst_isa = e / tol;
            }
        CHECKF(bad_isa == 0, "%s %s %dx%d n=%d: %d outputs differ from scalar beyond 1e-5*sum|wx| (worst %.2f)",
               vq_isa_name((vq_isa)isa), wt->name, rows, cols, n, bad_isa, worst_isa);
    }
    /* threads: 1 vs 2 must give identical bits (chunks never split a row's sum) */
    omp_set_num_threads(1);
    vq_matmul(Y0, W, type, X, n, rows, cols);
    omp_set_num_threads(2);
    vq_matmul(Y1, W, type, X, n, rows, cols);
    CHECKF(memcmp(Y0, Y1, sizeof(float) * n * rows) == 0, "%s %dx%d n=%d: 1 and 2 threads differ", wt->name, rows, cols, n);
    free(W); free(Wf); free(X); free(tmp); free(WR); free(XR); free(Y0); free(Y1);
}

/* exact case: all float arithmetic exact, so every ISA gives the integer result bit for bit */
static void check_exact(vq_rng *rng, uint32_t type, int rows, int cols, int n) {
    int nb = cols / 32;
    size_t rb = vq_wtype_row_bytes(type, cols);
    uint8_t *W = calloc(rows, rb);
    float *X = malloc(sizeof(float) * n * cols);
    double *ref = malloc(sizeof(double) * n * rows);
    float *Y[3] = {malloc(sizeof(float) * n * rows), malloc(sizeof(float) * n * rows), malloc(sizeof(float) * n * rows)};
    for (int i = 0; i < n * cols; i++) {
        int v = (int)(vq_rng_u64(rng) % 255) - 127;
        X[i] = (float)((i % 32 == 5) ? ((vq_rng_u64(rng) & 1) ? 127 : -127) : v);   /* max|x| = 127: d = 1 */
    }
    const rnd_type *rt = rnd_type_of(type);
    for (int r = 0; r < rows && rt; r++) random_blocks(rng, rt, cols / vq_wtype_get(type)->block, W + rb * r, 1);
    for (int r = 0; r < rows && !rt; r++) {
        uint8_t *row = W + rb * r;
        for (int b = 0; b < nb; b++) {
            int e = -(int)(vq_rng_u64(rng) % 5) - 4;              /* d = 2^-4 .. 2^-8 */
            vq_f16 d = vq_f32_to_f16(ldexpf(1.0f, e));
            if (type == VQ_TYPE_Q8_0) {
                vq_block_q8_0 *o = (vq_block_q8_0 *)row + b;
                o->d = d;
                for (int j = 0; j < 32; j++) o->qs[j] = (int8_t)((int)(vq_rng_u64(rng) % 256) - 128);   /* -128 too */
            } else if (type == VQ_TYPE_Q4_0) {
                vq_block_q4_0 *o = (vq_block_q4_0 *)row + b;
                o->d = d;
                for (int j = 0; j < 16; j++) o->qs[j] = (uint8_t)vq_rng_u64(rng);
            } else {
                vq_block_q4_1 *o = (vq_block_q4_1 *)row + b;
                o->d = d;
                o->m = vq_f32_to_f16(ldexpf((float)((int)(vq_rng_u64(rng) % 17) - 8), -6));
                for (int j = 0; j < 16; j++) o->qs[j] = (uint8_t)vq_rng_u64(rng);
            }
        }
    }
    float *wf = malloc(sizeof(float) * cols);
    for (int r = 0; r < rows; r++) {
        vq_get_row(W, type, cols, r, wf);
        for (int t = 0; t < n; t++) {
            double s = 0;
            for (int c = 0; c < cols; c++) s += (double)wf[c] * X[(size_t)t * cols + c];
            ref[(size_t)t * rows + r] = s;
        }
    }
    for (int isa = 0; isa <= VQ_ISA_AVX512; isa++) {
        if (!isa_ok((vq_isa)isa)) continue;
        vq_matmul_isa((vq_isa)isa, Y[isa], W, type, X, n, rows, cols);
        int bad = 0;
        for (int i = 0; i < n * rows; i++) bad += (double)Y[isa][i] != ref[i];
        CHECKF(bad == 0, "exact %s %s %dx%d n=%d: %d outputs differ from the exact integer dot",
               vq_isa_name((vq_isa)isa), vq_wtype_get(type)->name, rows, cols, n, bad);
    }
    free(W); free(X); free(ref); free(wf);
    for (int i = 0; i < 3; i++) free(Y[i]);
}

/* the SIMD activation quantizers must give the scalar one's bytes, ties and specials included */
static void check_quantizers(vq_rng *rng) {
    enum { COLS = 12 * 32 };
    float x[COLS];
    int nb = COLS / 32;
    size_t st = vq_q8act_stride(nb);
    uint8_t *ref = vq_aligned_alloc(st), *got = vq_aligned_alloc(st);
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < COLS; i++) {
            int b = i / 32;
            float scale = ldexpf(1.0f, (int)(vq_rng_u64(rng) % 40) - 20);
            x[i] = (float)vq_rng_gauss(rng) * scale;
            if (b == 0) x[i] = (float)((int)(vq_rng_u64(rng) % 255) - 127) + 0.5f;   /* exact ties: d = 1 */
            if (b == 1) x[i] = 0.0f;
            if (b == 2) x[i] = 1e-40f * (float)(i % 5);                           /* subnormals */
        }
        x[5] = 127.0f;   /* block 0: max|x| = 127 so d = 1 and x*id = k + 0.5 exactly */
        if (trial % 4 == 1) x[3 * 32 + 7] = INFINITY;
        if (trial % 4 == 2) x[4 * 32 + 9] = NAN;
        vq_q8act_quantize(x, COLS, ref);
        for (int isa = VQ_ISA_AVX2; isa <= VQ_ISA_AVX512; isa++) {
            if (!isa_ok((vq_isa)isa)) continue;
            memset(got, 0x55, st);
            (isa == VQ_ISA_AVX2 ? vq_q8act_quantize_avx2 : vq_q8act_quantize_avx512)(x, COLS, got);
            int bad = memcmp(ref, got, (size_t)nb * 32) != 0;
            bad |= memcmp(vq_q8act_isum(ref, nb), vq_q8act_isum(got, nb), (size_t)nb * 4) != 0;
            const float *a = vq_q8act_ds(ref, nb), *b = vq_q8act_ds(got, nb);
            for (int i = 0; i < 2 * nb; i++) bad |= !(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])));
            CHECKF(!bad, "trial %d: %s activation quantizer differs from scalar", trial, vq_isa_name((vq_isa)isa));
        }
    }
    /* the ties rounded half to even: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2 */
    float t[32] = {0.5f, 1.5f, -2.5f, 127.0f};
    vq_q8act_quantize(t, 32, ref);
    CHECK(((int8_t *)ref)[0] == 0 && ((int8_t *)ref)[1] == 2 && ((int8_t *)ref)[2] == -2 && ((int8_t *)ref)[3] == 127);
    vq_aligned_free(ref); vq_aligned_free(got);
}

/* vq_matmul_many gives each job exactly vq_matmul's bits, mixed types (plain and rotated
 * activations in one call), misuse per job */
static void check_many(vq_rng *rng) {
    const int cols = 576;
    enum { NJ = 7, BAD = 6 };   /* job BAD has an unknown type */
    const uint32_t types[NJ] = {VQ_TYPE_Q4_1, VQ_TYPE_TQW4, VQ_TYPE_Q4_1, VQ_TYPE_Q8_0, VQ_TYPE_F32,
                                VQ_TYPE_TQW2, 12345};
    const int rows[NJ] = {200, 150, 67, 33, 19, 41, 5};
    void *W[NJ]; float *Ya[NJ], *Yb[NJ];
    const int n = 41;   /* 41 tokens' activations outgrow the stack buffer: the heap copies too */
    float *X = malloc(sizeof(float) * n * cols);
    for (int i = 0; i < n * cols; i++) X[i] = (float)vq_rng_gauss(rng);
    vq_matmul_job jobs[NJ + 1];
    for (int j = 0; j < NJ; j++) {
        size_t rb = j < BAD ? vq_wtype_row_bytes(types[j], cols) : 64;
        W[j] = malloc(rb * rows[j]);
        for (size_t i = 0; i < rb * rows[j]; i++) ((uint8_t *)W[j])[i] = (uint8_t)vq_rng_u64(rng);
        if (types[j] != VQ_TYPE_F32 && j < BAD)   /* finite, modest scales */
            for (size_t o = 0; o < rb * rows[j]; o += vq_wtype_get(types[j])->block_bytes) {
                vq_f16 h = vq_f32_to_f16(0.01f);
                memcpy((uint8_t *)W[j] + o, &h, 2);
                if (types[j] == VQ_TYPE_Q4_1 || is_tqw(types[j])) memcpy((uint8_t *)W[j] + o + 2, &h, 2);
            }
        if (types[j] == VQ_TYPE_F32)
            for (int i = 0; i < rows[j] * cols; i++) ((float *)W[j])[i] = (float)vq_rng_gauss(rng);
        Ya[j] = malloc(sizeof(float) * n * rows[j]);
        Yb[j] = malloc(sizeof(float) * n * rows[j]);
        jobs[j] = (vq_matmul_job){Yb[j], W[j], types[j], rows[j]};
    }
    jobs[NJ] = (vq_matmul_job){NULL, NULL, VQ_TYPE_Q4_1, 0};   /* empty job: ignored */
    for (int th = 1; th <= 2; th++)
        for (int nn = 1; nn <= n; nn += 20) {
            omp_set_num_threads(th);
            for (int j = 0; j < NJ; j++) vq_matmul(Ya[j], W[j], types[j], X, nn, rows[j], cols);
            vq_matmul_many(jobs, NJ + 1, X, nn, cols);
            for (int j = 0; j < BAD; j++)
                CHECKF(memcmp(Ya[j], Yb[j], sizeof(float) * nn * rows[j]) == 0,
                       "matmul_many job %d (%s) n=%d threads=%d differs from vq_matmul", j,
                       vq_wtype_get(types[j])->name, nn, th);
            CHECK(isnan(Yb[BAD][0]) && isnan(Yb[BAD][nn * rows[BAD] - 1]));
        }
    for (int j = 0; j < NJ; j++) { free(W[j]); free(Ya[j]); free(Yb[j]); }
    free(X);
}

int main(void) {
    uint64_t seed = vq_t_seed(20261129);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    vq_isa best = vq_cpu_best_isa();
    __builtin_cpu_init();
    printf("ISAs tested: scalar%s%s; skipped:%s%s; int8 AVX-512 path uses %s\n",
           best >= VQ_ISA_AVX2 ? " avx2" : "", best >= VQ_ISA_AVX512 ? " avx512" : "",
           best < VQ_ISA_AVX2 ? " avx2" : "", best < VQ_ISA_AVX512 ? " avx512" : " none",
           __builtin_cpu_supports("avx512vnni") ? "vpdpbusd (VNNI)" : "maddubs (AVX2 kernels)");

    check_quantizers(&rng);
    check_many(&rng);
    const int ns[] = {1, 3, 6, 17};   /* 6: a tile of 4 then one of 2 */
    for (size_t ti = 0; ti < VQ_ARRAY_LEN(TYPES); ti++) {
        uint32_t type = TYPES[ti];
        int blk = vq_wtype_get(type)->block, quant = blk > 1;
        const int qcols[] = {32, 64, 96, 576, 1536}, fcols[] = {1, 7, 16, 37, 100, 576};
        const int kcols[] = {256, 768, 2304}, rcols[] = {32, 96, 576}, tcols[] = {64, 192, 640};
        const int *cols = blk == 256 ? kcols : blk == 64 ? tcols : rnd_type_of(type) ? rcols : quant ? qcols : fcols;
        int ncols = rnd_type_of(type) ? 3 : quant ? 5 : 6;
        for (int ci = 0; ci < ncols; ci++)
            for (size_t ni = 0; ni < VQ_ARRAY_LEN(ns); ni++) {
                int rows = 1 + (int)(vq_rng_u64(&rng) % (rnd_type_of(type) ? 150 : 300));
                if (ci == 0) rows = 1;
                check_case(&rng, type, rows, cols[ci], ns[ni]);
            }
        if (quant && !is_tqw(type)) {   /* tqw's exact case: test_tqw.c, on the row kernels */
            check_exact(&rng, type, 37, blk == 256 ? 512 : 576, 5);
            check_exact(&rng, type, 3, blk, 1);
            check_exact(&rng, type, 130, blk == 256 ? 768 : 96, 17);
        }
    }
    /* the default entry point is the best ISA */
    if (!getenv("VQ_ISA")) CHECK(vq_kernels_isa() == vq_cpu_best_isa());
    else CHECK(vq_kernels_isa() <= vq_cpu_best_isa());
    /* larger and threaded: SmolLM2 FFN shape at 2 threads, rows not a multiple of the chunk */
    check_case(&rng, VQ_TYPE_Q4_1, 1536 + 5, 576, 3);
    check_case(&rng, VQ_TYPE_Q8_0, 1001, 576, 1);
    check_case(&rng, VQ_TYPE_TQW4, 1536 + 5, 576, 3);
    check_case(&rng, VQ_TYPE_TQW4, 576, 1536, 1);
    /* Q6_K rows wider than the 512-bit kernel's stack buffer (16384) take the 256-bit kernel */
    check_case(&rng, VQ_TYPE_Q6_K, 9, 16384 + 256, 5);
    check_case(&rng, VQ_TYPE_Q6_K, 9, 16384, 5);
    return vq_t_done();
}
