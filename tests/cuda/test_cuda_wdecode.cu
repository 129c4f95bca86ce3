/* test_cuda_wdecode.cu: the CUDA kernels' decoding of GGUF weight blocks (wdecode.cuh: the unit
 * dot of 32 weights and the single weight, the code ops.cu's matvec and embedding kernels run),
 * executed on the host, against the CPU weight-type table's to_float. Needs no GPU: it runs
 * wherever VQ_CUDA builds (CI included), so the block layouts are checked even where the GPU tests
 * skip. Bounds as in test_cuda_ops.c (u = 2^-24; w = A - B, A the scaled code, B the min part):
 *   elem: |w_cuda - w| <= 5u (|w| + 2|B|);
 *   unit dot: |dot - sum w x| <= (gamma_40 + 2u) sum (|w| + 2|B|) |x|. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "../vq_test.h"
#include "core/core.h"
#include "kernels/kernels.h"
}
#include "backend/cuda/wdecode.cuh"

static const double U = 1.0 / 16777216.0;

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

static double min_part(uint32_t type, const uint8_t *row, int c) {
    if (type == VQ_TYPE_Q4_1) return fabs(vq_f16_to_f32(rd16(row + (size_t)(c / 32) * 20 + 2)));
    if (type == VQ_TYPE_Q4_K) {
        const uint8_t *b = row + (size_t)(c / 256) * 144, *sc = b + 4;
        const int j = (c % 256) / 32;
        const int m6 = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        return fabs((double)vq_f16_to_f32(rd16(b + 2)) * m6);
    }
    return 0.0;
}

template <int T> static int check_type(int cols, vq_rng *rng) {
    const vq_wtype *t = vq_wtype_get(T);
    const size_t rb = vq_wtype_row_bytes(T, cols);
    uint8_t *w = (uint8_t *)malloc(rb);
    if (t->from_float) {
        float *f = (float *)malloc((size_t)cols * sizeof(float));
        for (int i = 0; i < cols; i++) f[i] = (float)(0.05 * vq_rng_gauss(rng));
        t->from_float(f, w, cols);
        free(f);
    } else {   /* K-quants: random code bytes, sane fp16 scales */
        for (size_t i = 0; i < rb; i++) w[i] = (uint8_t)vq_rng_u64(rng);
        for (int b = 0; b < cols / 256; b++) {
            uint8_t *blk = w + (size_t)b * t->block_bytes;
            if (T == VQ_TYPE_Q4_K) {
                wr16(blk, vq_f32_to_f16((float)(0.002 * (0.5 + vq_rng_uniform(rng)))));
                wr16(blk + 2, vq_f32_to_f16((float)(0.001 * (0.5 + vq_rng_uniform(rng)))));
            } else {
                wr16(blk + 208, vq_f32_to_f16((float)(0.0005 * (0.5 + vq_rng_uniform(rng)))));
            }
        }
    }
    float *wf = (float *)malloc((size_t)cols * sizeof(float)), *x = (float *)malloc((size_t)cols * sizeof(float));
    t->to_float(w, wf, cols);
    for (int i = 0; i < cols; i++) x[i] = (float)vq_rng_gauss(rng);
    int bad_e = 0, bad_d = 0;
    double worst = 0;
    const int per = vqw::unit<T>::per_block, units = cols / 32;
    const double gam = 40 * U / (1 - 40 * U) + 2 * U;
    for (int u = 0; u < units; u++) {
        const uint8_t *b = w + (size_t)(u / per) * vqw::unit<T>::bytes;
        double ref = 0, mag = 0;
        for (int l = 0; l < 32; l++) {
            const int c = 32 * u + l;
            const double bm = min_part(T, w, c), e = fabs((double)vqw::elem<T>(b, u % per, l) - wf[c]);
            if (!(e <= 5 * U * (fabs(wf[c]) + 2 * bm)) && bad_e++ < 3)
                fprintf(stderr, "  %s elem %d: %.9g vs to_float %.9g\n", t->name, c, (double)vqw::elem<T>(b, u % per, l), (double)wf[c]);
            ref += (double)wf[c] * x[c];
            mag += (fabs(wf[c]) + 2 * bm) * fabs(x[c]);
        }
        const double d = vqw::unit<T>::dot(b, u % per, x + 32 * u), err = fabs(d - ref);
        if (!(err <= gam * mag) && bad_d++ < 3) fprintf(stderr, "  %s unit %d: dot %.9g vs %.9g\n", t->name, u, d, ref);
        if (mag > 0 && err / (gam * mag) > worst) worst = err / (gam * mag);
    }
    CHECKF(bad_e == 0, "%s: %d weights differ from to_float beyond the bound", t->name, bad_e);
    CHECKF(bad_d == 0, "%s: %d unit dots outside the bound", t->name, bad_d);
    printf("%-5s %5d columns: weights as to_float, unit dots within bound (worst error / bound %.4f)\n", t->name, cols, worst);
    free(w); free(wf); free(x);
    return 0;
}

int main(void) {
    const uint64_t seed = vq_t_seed(32036);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    for (int rep = 0; rep < 8; rep++) {
        check_type<VQ_TYPE_Q8_0>(1024, &rng);
        check_type<VQ_TYPE_Q4_0>(1024, &rng);
        check_type<VQ_TYPE_Q4_1>(1024, &rng);
        check_type<VQ_TYPE_Q4_K>(4096, &rng);
        check_type<VQ_TYPE_Q6_K>(4096, &rng);
    }
    return vq_t_done();
}
