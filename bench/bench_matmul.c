/* bench_matmul.c: time vq_matmul on the SmolLM2-135M shapes at n tokens and report GFLOP/s and
 * weight GB/s per ISA and thread count, plus a whole decode step's matmuls over distinct weight
 * buffers (what one token really reads) and a plain read-bandwidth roof for comparison.
 * Build (not part of CMake):
 *   gcc -O2 -fopenmp -Iinclude -Isrc bench/bench_matmul.c build-kern/libvq_kernels.a \
 *       build-kern/libvq_core.a -lm -o build-kern/bench_matmul
 * Run: build-kern/bench_matmul [n_tokens] */
#include "kernels/kernels_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include <omp.h>

static void fill(void *p, size_t bytes, uint32_t type, vq_rng *rng) {
    uint8_t *b = p;
    for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)vq_rng_u64(rng);
    /* keep fp16 scales finite and small so no NaN/inf slows anything */
    const vq_wtype *t = vq_wtype_get(type);
    if (t->block == 32)
        for (size_t o = 0; o + t->block_bytes <= bytes; o += t->block_bytes) {
            vq_f16 h = vq_f32_to_f16(0.01f);
            memcpy(b + o, &h, 2);
            if (type == VQ_TYPE_Q4_1) memcpy(b + o + 2, &h, 2);
        }
}

__attribute__((target("avx512f"))) static double read_bw(const uint8_t *p, size_t bytes, int reps) {
    double t0 = vq_now_s();
    float sink = 0;
    for (int r = 0; r < reps; r++) {
        float part = 0;
        #pragma omp parallel reduction(+:part)
        {
            __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
            #pragma omp for schedule(static)
            for (size_t i = 0; i < bytes; i += 128) {
                a = _mm512_add_ps(a, _mm512_load_ps((const float *)(p + i)));
                b = _mm512_add_ps(b, _mm512_load_ps((const float *)(p + i + 64)));
            }
            part += _mm512_reduce_add_ps(_mm512_add_ps(a, b));
        }
        sink += part;
    }
    double dt = vq_now_s() - t0;
    if (sink == 12345.678f) printf(" ");
    return (double)bytes * reps / dt / 1e9;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    vq_rng rng; vq_rng_seed(&rng, 1);
    struct { int rows, cols; uint32_t type; const char *what; } shapes[] = {
        {576, 576, VQ_TYPE_Q4_1, "attn_q/o"}, {192, 576, VQ_TYPE_Q4_1, "attn_k/v"},
        {1536, 576, VQ_TYPE_Q4_1, "ffn_gate/up"}, {576, 1536, VQ_TYPE_Q4_1, "ffn_down"},
        {49152, 576, VQ_TYPE_Q8_0, "output"}, {576, 576, VQ_TYPE_Q8_0, "q8_0 576"},
        {1536, 576, VQ_TYPE_Q4_0, "q4_0 1536"}, {576, 576, VQ_TYPE_F32, "f32 576"},
    };
    char cpu[512]; vq_cpu_describe(cpu, sizeof cpu);
    printf("%s\nn = %d tokens\n", cpu, n);
    float *X = vq_aligned_alloc(sizeof(float) * 1536 * (size_t)n);
    float *Y = vq_aligned_alloc(sizeof(float) * 49152 * (size_t)n);
    for (int i = 0; i < 1536 * n; i++) X[i] = (float)vq_rng_gauss(&rng);
    printf("%-12s %-6s %12s %4s %4s %10s %9s %9s\n", "shape", "type", "rows x cols", "isa", "thr", "us/call", "GFLOP/s", "GB/s(W)");
    for (size_t s = 0; s < VQ_ARRAY_LEN(shapes); s++) {
        size_t wb = vq_wtype_row_bytes(shapes[s].type, shapes[s].cols) * shapes[s].rows;
        void *W = vq_aligned_alloc(wb);
        fill(W, wb, shapes[s].type, &rng);
        for (int isa = 0; isa <= (int)vq_cpu_best_isa(); isa++)
            for (int th = 1; th <= 2; th++) {
                if (isa == 0 && shapes[s].rows > 2000) continue;
                omp_set_num_threads(th);
                vq_matmul_isa((vq_isa)isa, Y, W, shapes[s].type, X, n, shapes[s].rows, shapes[s].cols);
                int reps = 1;
                double dt = 0;
                for (;;) {   /* reps per trial: about 5 ms */
                    double t0 = vq_now_s();
                    for (int r = 0; r < reps; r++)
                        vq_matmul_isa((vq_isa)isa, Y, W, shapes[s].type, X, n, shapes[s].rows, shapes[s].cols);
                    dt = vq_now_s() - t0;
                    if (dt > 0.005) break;
                    reps *= 2;
                }
                for (int trial = 0; trial < 20; trial++) {   /* best of 20: the machine is shared */
                    double t0 = vq_now_s();
                    for (int r = 0; r < reps; r++)
                        vq_matmul_isa((vq_isa)isa, Y, W, shapes[s].type, X, n, shapes[s].rows, shapes[s].cols);
                    dt = VQ_MIN(dt, vq_now_s() - t0);
                }
                double per = dt / reps;
                printf("%-12s %-6s %5d x %-5d %6s %3d %10.2f %9.1f %9.2f\n", shapes[s].what,
                       vq_wtype_get(shapes[s].type)->name, shapes[s].rows, shapes[s].cols,
                       vq_isa_name((vq_isa)isa), th, per * 1e6,
                       2.0 * shapes[s].rows * shapes[s].cols * n / per / 1e9, wb / per / 1e9);
            }
        vq_aligned_free(W);
    }

    /* one SmolLM2 decode step's matmuls: 30 layers x 7 matrices + output, distinct buffers */
    const int L = 30;
    struct { int rows, cols; } lm[7] = {{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}};
    void *Wl[30][7];
    size_t total = 0;
    for (int l = 0; l < L; l++)
        for (int m = 0; m < 7; m++) {
            size_t wb = vq_wtype_row_bytes(VQ_TYPE_Q4_1, lm[m].cols) * lm[m].rows;
            Wl[l][m] = vq_aligned_alloc(wb);
            fill(Wl[l][m], wb, VQ_TYPE_Q4_1, &rng);
            total += wb;
        }
    size_t ob = vq_wtype_row_bytes(VQ_TYPE_Q8_0, 576) * 49152;
    void *Wo = vq_aligned_alloc(ob);
    fill(Wo, ob, VQ_TYPE_Q8_0, &rng);
    total += ob;
    float *Y2 = vq_aligned_alloc(sizeof(float) * 1536 * (size_t)n), *Y3 = vq_aligned_alloc(sizeof(float) * 1536 * (size_t)n);
    for (int many = 0; many < 2; many++)
        for (int th = 1; th <= 2; th++) {
            omp_set_num_threads(th);
            double per = 1e9;
            for (int r = 0; r < 30; r++) {   /* best of 30 steps */
                double t0 = vq_now_s();
                for (int l = 0; l < L; l++) {
                    if (many) {   /* q,k,v in one call; gate,up in one call */
                        vq_matmul_job qkv[3] = {{Y, Wl[l][0], VQ_TYPE_Q4_1, 576}, {Y2, Wl[l][1], VQ_TYPE_Q4_1, 192},
                                                {Y3, Wl[l][2], VQ_TYPE_Q4_1, 192}};
                        vq_matmul_many(qkv, 3, X, n, 576);
                        vq_matmul(Y, Wl[l][3], VQ_TYPE_Q4_1, X, n, 576, 576);
                        vq_matmul_job gu[2] = {{Y2, Wl[l][4], VQ_TYPE_Q4_1, 1536}, {Y3, Wl[l][5], VQ_TYPE_Q4_1, 1536}};
                        vq_matmul_many(gu, 2, X, n, 576);
                        vq_matmul(Y, Wl[l][6], VQ_TYPE_Q4_1, X, n, 576, 1536);
                    } else {
                        for (int m = 0; m < 7; m++) vq_matmul(Y, Wl[l][m], VQ_TYPE_Q4_1, X, n, lm[m].rows, lm[m].cols);
                    }
                }
                vq_matmul(Y, Wo, VQ_TYPE_Q8_0, X, n, 49152, 576);
                per = VQ_MIN(per, vq_now_s() - t0);
            }
            printf("decode-step matmuls%s (%d thr): %.3f ms for %.1f MB of weights = %.2f GB/s, %.0f steps/s\n",
                   many ? " with matmul_many" : "", th, per * 1e3, total / 1e6, total / per / 1e9, 1.0 / per);
        }
    vq_aligned_free(Y2); vq_aligned_free(Y3);
    uint8_t *big = vq_aligned_alloc(total);
    memset(big, 1, total);
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        double bw = 0;
        for (int r = 0; r < 10; r++) bw = VQ_MAX(bw, read_bw(big, total, 2));
        printf("plain read of %.1f MB (%d thr): %.2f GB/s (best of 10)\n", total / 1e6, th, bw);
    }
    vq_aligned_free(big);
    for (int l = 0; l < L; l++)
        for (int m = 0; m < 7; m++) vq_aligned_free(Wl[l][m]);
    vq_aligned_free(Wo); vq_aligned_free(X); vq_aligned_free(Y);
    return 0;
}
