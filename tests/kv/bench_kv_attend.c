/* bench_kv_attend.c: decode-step attention speed per codec (one query row, GQA group of the
 * SmolLM2 shape: 9 q heads / 3 kv heads, head_dim 64) at several context lengths (thread CPU time), with the
 * bytes of codes each step reads. Not a CTest test; build and run:
 *   cc -O2 -fopenmp -Iinclude -Isrc tests/kv/bench_kv_attend.c -Lbuild-kv -lvq_kv -lvq_codec \
 *      -lvq_kernels -lvq_core -lm -o /tmp/bench_kv && OMP_NUM_THREADS=1 /tmp/bench_kv [specs...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kv/kv.h"
#include "codec/codec.h"

/* thread CPU time: robust on a loaded machine (time spent descheduled is not counted) */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const char *def[] = {"f32", "f16", "q8_0", "q4_0", "q4_0:rotate=1", "kivi:residual=0",
                         "kivi:bits=4,residual=0", "turboquant_mse:bits=4", "turboquant_mse:bits=3"};
    const char **specs = argc > 1 ? (const char **)argv + 1 : def;
    const int nspec = argc > 1 ? argc - 1 : (int)(sizeof def / sizeof *def);
    const int ctxs[] = {1024, 4096, 16384};
    const int NH = 9, H = 3, d = 64, w = H * d;
    vq_rng rng;
    vq_rng_seed(&rng, 1);
    float *k = malloc(sizeof(float) * 16384 * w), *v = malloc(sizeof(float) * 16384 * w);
    for (size_t i = 0; i < (size_t)16384 * w; i++) {
        k[i] = (float)vq_rng_gauss(&rng);
        v[i] = (float)vq_rng_gauss(&rng);
    }
    float q[9 * 64], o[9 * 64];
    for (int i = 0; i < NH * d; i++) q[i] = (float)vq_rng_gauss(&rng);
    printf("%-26s %6s %10s %12s %10s %8s\n", "spec", "ctx", "us/step", "code bytes", "GB/s", "bits/el");
    for (int s = 0; s < nspec; s++)
        for (size_t c = 0; c < sizeof ctxs / sizeof *ctxs; c++) {
            vq_kv_dims dims = {1, NH, H, d, ctxs[c], NULL, 0, 0};
            vq_err err;
            vq_kv *kv = vq_kv_create_str(specs[s], &dims, 1, &err);
            if (!kv) { printf("%s: %s\n", specs[s], err.msg); break; }
            vq_kv_append(kv, 0, 0, ctxs[c], k, v, &err);
            const vq_codec_state *sk = vq_kv_codec_state(kv, 0, 0), *sv = vq_kv_codec_state(kv, 0, 1);
            double row_bytes = H * ((double)sk->block_bytes / sk->rows_per_block +
                                    (double)sv->block_bytes / sv->rows_per_block);
            int pos = ctxs[c];
            int reps = 0;
            double t0 = cpu_s(), t;
            do {
                vq_kv_attend(kv, 0, 1, &pos, q, o, &err);
                reps++;
                t = cpu_s() - t0;
            } while (t < 0.3);
            double us = t / reps * 1e6, bytes = row_bytes * ctxs[c];
            printf("%-26s %6d %10.1f %12.0f %10.2f %8.2f\n", specs[s], ctxs[c], us, bytes,
                   bytes / (us * 1e3), vq_kv_bits_per_elem(kv));
            vq_kv_destroy(kv);
        }
    free(k);
    free(v);
    return 0;
}
