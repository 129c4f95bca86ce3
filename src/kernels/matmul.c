/* matmul.c: Y = X·Wᵀ on weights in any table type, without a dequantized copy of W.
 * Activations are quantized once per call to 8-bit blocks (vq_q8act) so the inner loops are
 * integer dot products; the row-kernel table picks scalar / AVX2 / AVX-512 per type. Threads
 * split the rows into chunks; each chunk's weights are read once per tile of VQ_TILE tokens. */
#include "kernels/kernels_impl.h"
#include "kernels/gemm.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <stdatomic.h>

/* ---- activation quantization (one implementation for every ISA, so all see equal codes) ---- */
void vq_q8act_quantize(const float *x, int cols, void *base) {
    int nb = cols / VQ_QK;
    int8_t *qs = base;
    float *ds = (float *)((uint8_t *)base + (size_t)nb * VQ_QK);
    int32_t *isum = (int32_t *)(ds + 2 * nb);
    for (int b = 0; b < nb; b++) {
        const float *xb = x + (size_t)b * VQ_QK;
        float amax = 0.0f;
        for (int j = 0; j < VQ_QK; j++) {
            float a = fabsf(xb[j]);
            if (a > amax || a != a) amax = a;   /* NaN propagates into d */
        }
        float db = amax / 127.0f, id = db > 0.0f ? 1.0f / db : 0.0f;
        int sum = 0;
        for (int j = 0; j < VQ_QK; j++) {
            /* round half to even via the 1.5*2^23 trick: exact for |v| < 2^22, no libm call */
            float v = xb[j] * id;
            if (!(v >= -127.0f)) v = -127.0f;   /* also maps NaN, never cast NaN to int */
            if (v > 127.0f) v = 127.0f;
            v = (v + 12582912.0f) - 12582912.0f;
            int q = (int)v;
            qs[b * VQ_QK + j] = (int8_t)q;
            sum += q;
        }
        ds[2 * b] = db;
        ds[2 * b + 1] = db * (float)sum;
        isum[b] = sum;
    }
}

/* ---- scalar reference kernels ---- */
#define FOR_TILES(nt) for (int t0 = 0; t0 < (nt); t0 += VQ_TILE)
#define TILE_N(nt) VQ_MIN(VQ_TILE, (nt) - t0)

void vq_rows_f32_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                        int nt, int k, float *Y, int ldy) {
    for (int r = 0; r < nrows; r++) {
        const float *w = (const float *)(W + (size_t)r * ws);
        for (int t = 0; t < nt; t++) {
            const float *x = (const float *)((const uint8_t *)xa + (size_t)t * xs);
            float acc = 0.0f;
            for (int i = 0; i < k; i++) acc += w[i] * x[i];
            Y[(size_t)t * ldy + r] = acc;
        }
    }
}

static float f16_at(const uint8_t *p, int i) { vq_f16 h; memcpy(&h, p + 2 * i, 2); return vq_f16_to_f32(h); }
static float bf16_at(const uint8_t *p, int i) { vq_bf16 h; memcpy(&h, p + 2 * i, 2); return vq_bf16_to_f32(h); }

void vq_rows_f16_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                        int nt, int k, float *Y, int ldy) {
    for (int r = 0; r < nrows; r++) {
        const uint8_t *w = W + (size_t)r * ws;
        for (int t = 0; t < nt; t++) {
            const float *x = (const float *)((const uint8_t *)xa + (size_t)t * xs);
            float acc = 0.0f;
            for (int i = 0; i < k; i++) acc += f16_at(w, i) * x[i];
            Y[(size_t)t * ldy + r] = acc;
        }
    }
}

void vq_rows_bf16_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                         int nt, int k, float *Y, int ldy) {
    for (int r = 0; r < nrows; r++) {
        const uint8_t *w = W + (size_t)r * ws;
        for (int t = 0; t < nt; t++) {
            const float *x = (const float *)((const uint8_t *)xa + (size_t)t * xs);
            float acc = 0.0f;
            for (int i = 0; i < k; i++) acc += bf16_at(w, i) * x[i];
            Y[(size_t)t * ldy + r] = acc;
        }
    }
}

/* Integer block dots, the definition the SIMD kernels must reproduce exactly. */
void vq_rows_q8_0_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                         int nt, int nb, float *Y, int ldy) {
    for (int r = 0; r < nrows; r++) {
        const vq_block_q8_0 *w = (const vq_block_q8_0 *)(W + (size_t)r * ws);
        for (int t = 0; t < nt; t++) {
            const void *xb = (const uint8_t *)xa + (size_t)t * xs;
            const int8_t *q = xb;
            const float *ds = vq_q8act_ds(xb, nb);
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                int sumi = 0;
                for (int j = 0; j < VQ_QK; j++) sumi += w[b].qs[j] * q[b * VQ_QK + j];
                acc += (vq_f16_to_f32(w[b].d) * ds[2 * b]) * (float)sumi;
            }
            Y[(size_t)t * ldy + r] = acc;
        }
    }
}

void vq_rows_q4_0_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                         int nt, int nb, float *Y, int ldy) {
    for (int r = 0; r < nrows; r++) {
        const vq_block_q4_0 *w = (const vq_block_q4_0 *)(W + (size_t)r * ws);
        for (int t = 0; t < nt; t++) {
            const void *xb = (const uint8_t *)xa + (size_t)t * xs;
            const int8_t *q = xb;
            const float *ds = vq_q8act_ds(xb, nb);
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                int sumi = 0;
                for (int j = 0; j < VQ_QK / 2; j++) {
                    sumi += ((w[b].qs[j] & 0x0f) - 8) * q[b * VQ_QK + j];
                    sumi += ((w[b].qs[j] >> 4) - 8) * q[b * VQ_QK + j + VQ_QK / 2];
                }
                acc += (vq_f16_to_f32(w[b].d) * ds[2 * b]) * (float)sumi;
            }
            Y[(size_t)t * ldy + r] = acc;
        }
    }
}

void vq_rows_q4_1_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                         int nt, int nb, float *Y, int ldy) {
    for (int r = 0; r < nrows; r++) {
        const vq_block_q4_1 *w = (const vq_block_q4_1 *)(W + (size_t)r * ws);
        for (int t = 0; t < nt; t++) {
            const void *xb = (const uint8_t *)xa + (size_t)t * xs;
            const int8_t *q = xb;
            const float *ds = vq_q8act_ds(xb, nb);
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                int sumi = 0;
                for (int j = 0; j < VQ_QK / 2; j++) {
                    sumi += (w[b].qs[j] & 0x0f) * q[b * VQ_QK + j];
                    sumi += (w[b].qs[j] >> 4) * q[b * VQ_QK + j + VQ_QK / 2];
                }
                acc += (vq_f16_to_f32(w[b].d) * ds[2 * b]) * (float)sumi + vq_f16_to_f32(w[b].m) * ds[2 * b + 1];
            }
            Y[(size_t)t * ldy + r] = acc;
        }
    }
}

/* ---- dispatch ---- */
static const vq_kern_row kern_rows[] = {
    {VQ_TYPE_F32, 0, {vq_rows_f32_scalar, vq_rows_f32_avx2, vq_rows_f32_avx512}, NULL, 0},
    {VQ_TYPE_F16, 0, {vq_rows_f16_scalar, vq_rows_f16_avx2, vq_rows_f16_avx512}, NULL, 0},
    {VQ_TYPE_BF16, 0, {vq_rows_bf16_scalar, vq_rows_bf16_avx2, vq_rows_bf16_avx512}, NULL, 0},
    {VQ_TYPE_Q8_0, 1, {vq_rows_q8_0_scalar, vq_rows_q8_0_avx2, NULL}, vq_rows_q8_0_avx512vnni, 0},
    {VQ_TYPE_Q4_0, 1, {vq_rows_q4_0_scalar, vq_rows_q4_0_avx2, NULL}, vq_rows_q4_0_avx512vnni, 0},
    {VQ_TYPE_Q4_1, 1, {vq_rows_q4_1_scalar, vq_rows_q4_1_avx2, NULL}, vq_rows_q4_1_avx512vnni, 0},
    {VQ_TYPE_Q5_0, 1, {vq_rows_q5_0_scalar, vq_rows_q5_0_avx2, NULL}, vq_rows_q5_0_avx512vnni, 0},
    {VQ_TYPE_Q5_1, 1, {vq_rows_q5_1_scalar, vq_rows_q5_1_avx2, NULL}, vq_rows_q5_1_avx512vnni, 0},
    {VQ_TYPE_IQ4_NL, 1, {vq_rows_iq4_nl_scalar, vq_rows_iq4_nl_avx2, NULL}, vq_rows_iq4_nl_avx512vnni, 0},
    {VQ_TYPE_Q2_K, 1, {vq_rows_q2_k_scalar, vq_rows_q2_k_avx2, NULL}, vq_rows_q2_k_avx512vnni, 0},
    {VQ_TYPE_Q3_K, 1, {vq_rows_q3_k_scalar, vq_rows_q3_k_avx2, NULL}, vq_rows_q3_k_avx512vnni, 0},
    {VQ_TYPE_Q4_K, 1, {vq_rows_q4_k_scalar, vq_rows_q4_k_avx2, NULL}, vq_rows_q4_k_avx512z, 0},
    {VQ_TYPE_Q5_K, 1, {vq_rows_q5_k_scalar, vq_rows_q5_k_avx2, NULL}, vq_rows_q5_k_avx512vnni, 0},
    {VQ_TYPE_Q6_K, 1, {vq_rows_q6_k_scalar, vq_rows_q6_k_avx2, NULL}, vq_rows_q6_k_avx512z, 0},
    {VQ_TYPE_IQ4_XS, 1, {vq_rows_iq4_xs_scalar, vq_rows_iq4_xs_avx2, NULL}, vq_rows_iq4_xs_avx512vnni, 0},
    {VQ_TYPE_TQW4, 1, {vq_rows_tqw4_scalar, vq_rows_tqw4_avx2, NULL}, vq_rows_tqw4_avx512vnni, VQ_TQW_BLOCK},
    {VQ_TYPE_TQW3, 1, {vq_rows_tqw3_scalar, vq_rows_tqw3_avx2, NULL}, vq_rows_tqw3_avx512vnni, VQ_TQW_BLOCK},
    {VQ_TYPE_TQW2, 1, {vq_rows_tqw2_scalar, vq_rows_tqw2_avx2, NULL}, vq_rows_tqw2_avx512vnni, VQ_TQW_BLOCK},
    {VQ_TYPE_Q4_0X16, 1, {vq_rows_q4_0x16_scalar, NULL, NULL}, vq_rows_q4_0x16_avx512vnni, 0},
    {VQ_TYPE_Q4_KX16, 1, {vq_rows_q4_kx16_scalar, NULL, NULL}, vq_rows_q4_kx16_avx512vnni, 0},
    {VQ_TYPE_Q6_KX16, 1, {vq_rows_q6_kx16_scalar, NULL, NULL}, vq_rows_q6_kx16_avx512vnni, 0},
};

/* The best ISA the CPU has, or a lower one named by the environment variable VQ_ISA
 * (scalar | avx2 | avx512) for A/B runs; decided on first use and read-only after (an atomic,
 * so racing first calls agree: both compute the same value). */
vq_isa vq_kernels_isa(void) {
    static _Atomic int chosen = -1;
    int v = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (v >= 0) return (vq_isa)v;
    vq_isa best = vq_cpu_best_isa(), isa = best;
    const char *e = getenv("VQ_ISA");
    if (e) {
        for (int i = 0; i <= (int)VQ_ISA_AVX512; i++)
            if (strcmp(e, vq_isa_name((vq_isa)i)) == 0) isa = (vq_isa)i;
        if (isa > best) isa = best;
    }
    atomic_store_explicit(&chosen, (int)isa, memory_order_relaxed);
    return isa;
}

static int cpu_has_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
}

static vq_rows_fn pick(const vq_kern_row *k, vq_isa isa) {
    if (isa == VQ_ISA_AVX512 && k->vnni && cpu_has_vnni()) return k->vnni;
    for (int i = (int)isa; i >= 0; i--)
        if (k->rows[i]) return k->rows[i];
    return NULL;
}

/* Rows per chunk: small enough that every thread gets several chunks, large enough that the
 * chunk's weights are worth streaming past a tile of tokens; a multiple of 16 rows. */
static int chunk_rows(int rows, int nthreads) {
    int c = rows / (nthreads * 8);
    c = (c + 15) & ~15;
    return VQ_MAX(16, VQ_MIN(c, 256));
}

int vq_matmul_supported(uint32_t type, int cols) {
    if (cols <= 0) return 0;
    /* only where its kernel is the fast one (it exists to be) */
    if (vq_wtype_interleaved(type) && !(vq_kernels_isa() == VQ_ISA_AVX512 && cpu_has_vnni())) return 0;
    for (size_t i = 0; i < VQ_ARRAY_LEN(kern_rows); i++)
        if (kern_rows[i].type == type) return vq_wtype_row_bytes(type, cols) != 0;
    return 0;
}

typedef void (*quantize_fn)(const float *, int, void *);

/* One row rotated (vq_tqw_rotate) and quantized, 64 elements at a time through a small buffer:
 * the quantizers treat each 32-block on its own, so this gives the bytes quantizing a rotated
 * copy of the whole row would, without a row-sized buffer. */
static void quantize_rotated(quantize_fn quantize, const float *x, int cols, void *base) {
    int nb = cols / VQ_QK;
    int8_t *qs = base;
    float *ds = (float *)vq_q8act_ds(base, nb);
    int32_t *isum = (int32_t *)vq_q8act_isum(base, nb);
    _Alignas(64) float v[VQ_TQW_BLOCK];
    _Alignas(64) uint8_t tmp[128];
    for (int c = 0; c < cols; c += VQ_TQW_BLOCK) {
        memcpy(v, x + c, sizeof v);
        vq_tqw_rotate(v, VQ_TQW_BLOCK);
        quantize(v, VQ_TQW_BLOCK, tmp);
        memcpy(qs + c, tmp, VQ_TQW_BLOCK);
        memcpy(ds + c / 16, vq_q8act_ds(tmp, 2), 4 * sizeof(float));
        memcpy(isum + c / 32, vq_q8act_isum(tmp, 2), 2 * sizeof(int32_t));
    }
}

#define STACK_ACT 32768
#define MAX_JOBS 16

/* One call of any number of jobs sharing X: X is quantized once, and all jobs' row chunks are
 * shared out in one parallel region (one fork/join instead of one per matrix). */
static void run_jobs(vq_isa isa, const vq_matmul_job *jobs, int njobs, const float *X, int n, int cols) {
    if (n <= 0 || njobs <= 0) return;
    if (njobs > MAX_JOBS) {
        run_jobs(isa, jobs, MAX_JOBS, X, n, cols);
        run_jobs(isa, jobs + MAX_JOBS, njobs - MAX_JOBS, X, n, cols);
        return;
    }
    if (isa > vq_cpu_best_isa()) isa = vq_cpu_best_isa();   /* never run what the CPU lacks */
    int nthreads = omp_get_max_threads();
    vq_rows_fn fn[MAX_JOBS];
    size_t wstride[MAX_JOBS];
    int quant[MAX_JOBS], rot[MAX_JOBS], ch[MAX_JOBS], first[MAX_JOBS + 1];
    int any_quant = 0, any_rot = 0, nchunks = 0;
    for (int j = 0; j < njobs; j++) {
        const vq_kern_row *k = NULL;
        for (size_t i = 0; i < VQ_ARRAY_LEN(kern_rows); i++)
            if (kern_rows[i].type == jobs[j].type) k = &kern_rows[i];
        int rows = jobs[j].rows;
        wstride[j] = vq_wtype_row_bytes(jobs[j].type, cols);
        first[j] = nchunks;
        fn[j] = NULL; quant[j] = 0; rot[j] = 0; ch[j] = 1;
        if (rows <= 0) continue;
        if (!k || wstride[j] == 0 || cols <= 0) {   /* misuse: make it visible, never crash */
            for (size_t i = 0; i < (size_t)n * rows; i++) jobs[j].Y[i] = NAN;
            continue;
        }
        fn[j] = pick(k, isa);
        if (n >= VQ_GEMM_MIN_TOKENS) {   /* prefill: the panel GEMM where the type has one (same bits) */
            vq_rows_fn g = vq_gemm_pick(jobs[j].type, isa);
            if (g) fn[j] = g;
        }
        quant[j] = k->quantized;
        rot[j] = k->rotate_block > 0;   /* always VQ_TQW_BLOCK, which divides cols here */
        any_quant |= k->quantized && !rot[j];   /* a plain quantized copy of X is needed */
        any_rot |= rot[j];                      /* and / or a rotated one */
        int c = chunk_rows(rows, nthreads);
        if ((rows + c - 1) / c < nthreads && rows >= 2 * nthreads)   /* small: use every thread */
            c = (rows + nthreads - 1) / nthreads;
        if (vq_wtype_interleaved(jobs[j].type)) {   /* whole groups of interleaved rows */
            c = (c + VQ_Q4X16_ROWS - 1) / VQ_Q4X16_ROWS * VQ_Q4X16_ROWS;
            if (rows % VQ_Q4X16_ROWS) {   /* not a repacked shape: misuse, made visible */
                for (size_t i = 0; i < (size_t)n * rows; i++) jobs[j].Y[i] = NAN;
                fn[j] = NULL;
                continue;
            }
        }
        ch[j] = c;
        nchunks += (rows + c - 1) / c;
    }
    first[njobs] = nchunks;
    if (nchunks == 0) return;

    int nb = cols / VQ_QK;
    size_t qstride = vq_q8act_stride(nb);
    /* jobs may mix types: one quantized copy of X for the plain types, one of the rotated X
     * for the tqw types, each only when some job reads it */
    _Alignas(64) uint8_t stack_buf[STACK_ACT], stack_rot[STACK_ACT];
    void *heap = NULL, *heap_rot = NULL;
    uint8_t *qa = stack_buf, *qr = stack_rot;
    int big = qstride * (size_t)n > sizeof stack_buf;
    if (big && any_quant) heap = vq_aligned_alloc(qstride * (size_t)n);
    if (big && any_rot) heap_rot = vq_aligned_alloc(qstride * (size_t)n);
    if (big && ((any_quant && !heap) || (any_rot && !heap_rot))) {
        /* out of memory: token by token with the stack buffers */
        vq_aligned_free(heap);
        vq_aligned_free(heap_rot);
        vq_matmul_job one[MAX_JOBS];
        for (int t = 0; t < n; t++) {
            for (int j = 0; j < njobs; j++) {
                one[j] = jobs[j];
                one[j].Y = jobs[j].Y + (size_t)t * jobs[j].rows;
            }
            run_jobs(isa, one, njobs, X + (size_t)t * cols, 1, cols);
        }
        return;
    }
    if (heap) qa = heap;
    if (heap_rot) qr = heap_rot;
    quantize_fn quantize =
        isa == VQ_ISA_AVX512 ? vq_q8act_quantize_avx512 :
        isa == VQ_ISA_AVX2 ? vq_q8act_quantize_avx2 : vq_q8act_quantize;
    #pragma omp parallel if (nchunks > 1 || ((any_quant || any_rot) && n > 8))
    {
        if (any_quant || any_rot) {
            #pragma omp for schedule(static)
            for (int t = 0; t < n; t++) {
                if (any_quant) quantize(X + (size_t)t * cols, cols, qa + (size_t)t * qstride);
                if (any_rot) quantize_rotated(quantize, X + (size_t)t * cols, cols, qr + (size_t)t * qstride);
            }
        }
        #pragma omp for schedule(static)
        for (int c = 0; c < nchunks; c++) {
            int j = 0;
            while (c >= first[j + 1]) j++;
            int r0 = (c - first[j]) * ch[j], nr = VQ_MIN(ch[j], jobs[j].rows - r0);
            const void *xa = rot[j] ? (const void *)qr : quant[j] ? (const void *)qa : (const void *)X;
            size_t xs = quant[j] ? qstride : (size_t)cols * sizeof(float);
            fn[j]((const uint8_t *)jobs[j].W + (size_t)r0 * wstride[j], wstride[j], nr, xa, xs, n,
                  quant[j] ? nb : cols, jobs[j].Y + r0, jobs[j].rows);
        }
    }
    vq_aligned_free(heap);
    vq_aligned_free(heap_rot);
}

void vq_matmul_isa(vq_isa isa, float *Y, const void *W, uint32_t type, const float *X,
                   int n, int rows, int cols) {
    vq_matmul_job job = {Y, W, type, rows};
    run_jobs(isa, &job, 1, X, n, cols);
}

void vq_matmul(float *Y, const void *W, uint32_t type, const float *X, int n, int rows, int cols) {
    vq_matmul_isa(vq_kernels_isa(), Y, W, type, X, n, rows, cols);
}

void vq_matmul_many(const vq_matmul_job *jobs, int njobs, const float *X, int n, int cols) {
    run_jobs(vq_kernels_isa(), jobs, njobs, X, n, cols);
}
void vq_matmul_many_isa(vq_isa isa, const vq_matmul_job *jobs, int njobs, const float *X, int n, int cols) {
    run_jobs(isa, jobs, njobs, X, n, cols);
}
