/* bench_tqw.c: matvec time (one token, one thread) of tqw4 against q4_0 and q4_1 (tqw3, tqw2 and
 * q8_0 beside them) on SmolLM2's shapes: 1536x576 (gate/up), 576x1536 (down), 49152x576 (the
 * tied output). Built by CMake, not run by CTest (docs/weights-tqw.md has its figures).
 * Method (BENCHMARKING.md): arms interleaved within every repeat; each arm cycles through a pool
 * of distinct copies of its matrix larger than the last-level cache, so every call streams its
 * weights from memory as a decode step does; median, min and max over the repeats; the load
 * average printed before and after. Usage: bench_tqw [--reps N] [--pool-mib M] [--json]; VQ_ISA as
 * everywhere. The pool (default 96 MiB, 3x a 32 MiB L3) must exceed the machine's last-level cache. */
#include "kernels/kernels_impl.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const uint32_t TYPES[] = {VQ_TYPE_Q4_0, VQ_TYPE_Q4_1, VQ_TYPE_TQW4, VQ_TYPE_TQW3, VQ_TYPE_TQW2, VQ_TYPE_Q8_0};
enum { NT = 6, MAXREPS = 101 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static void loadavg(const char *when) {
    FILE *f = fopen("/proc/loadavg", "r");
    char buf[128] = "?";
    if (f) { if (!fgets(buf, sizeof buf, f)) buf[0] = 0; fclose(f); }
    buf[strcspn(buf, "\n")] = 0;
    printf("# load average %s: %s\n", when, buf);
}

int main(int argc, char **argv) {
    int reps = 9, json = 0, pool_mib = 96;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pool-mib") && i + 1 < argc) pool_mib = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else { fprintf(stderr, "usage: bench_tqw [--reps N] [--pool-mib M] [--json]\n"); return 2; }
    }
    if (reps < 1 || reps > MAXREPS) { fprintf(stderr, "--reps: 1..%d\n", MAXREPS); return 2; }
    if (pool_mib < 1 || pool_mib > 65536) { fprintf(stderr, "--pool-mib: 1..65536\n"); return 2; }
    const size_t POOL_BYTES = (size_t)pool_mib << 20;
    omp_set_num_threads(1);
    const uint64_t seed = 20261204;
    printf("# bench_tqw: 1 thread, ISA %s, %d interleaved repeats, weight pool %d MiB per arm, seed %llu\n",
           vq_isa_name(vq_kernels_isa()), reps, pool_mib, (unsigned long long)seed);
    loadavg("before");
    const int shapes[3][2] = {{1536, 576}, {576, 1536}, {49152, 576}};
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    if (json) printf("{\"isa\": \"%s\", \"reps\": %d, \"results\": [\n", vq_isa_name(vq_kernels_isa()), reps);
    for (int s = 0; s < 3; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        float *Wf = malloc(sizeof(float) * rows * cols), *X = malloc(sizeof(float) * cols), *Y = malloc(sizeof(float) * rows);
        for (size_t i = 0; i < (size_t)rows * cols; i++) Wf[i] = (float)vq_rng_gauss(&rng) * 0.05f;
        for (int i = 0; i < cols; i++) X[i] = (float)vq_rng_gauss(&rng);
        uint8_t *pool[NT];
        size_t mb[NT];
        int ncopy[NT];
        for (int k = 0; k < NT; k++) {
            mb[k] = vq_wtype_row_bytes(TYPES[k], cols) * rows;
            ncopy[k] = (int)((POOL_BYTES + mb[k] - 1) / mb[k]);
            if (ncopy[k] < 2) ncopy[k] = 2;
            pool[k] = vq_aligned_alloc(mb[k] * ncopy[k]);
            vq_wtype_get(TYPES[k])->from_float(Wf, pool[k], (int64_t)rows * cols);
            for (int c = 1; c < ncopy[k]; c++) memcpy(pool[k] + mb[k] * c, pool[k], mb[k]);
        }
        double t[NT][MAXREPS];
        int at[NT] = {0};
        for (int k = 0; k < NT; k++)   /* warm-up: one pass over each pool */
            for (int c = 0; c < ncopy[k]; c++) vq_matmul(Y, pool[k] + mb[k] * c, TYPES[k], X, 1, rows, cols);
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < NT; k++) {
                /* calls per repeat: a whole pool, and at least ~30 ms of work */
                int calls = ncopy[k];
                while ((double)calls * (double)mb[k] < 30e6 * 8) calls += ncopy[k];
                double t0 = now();
                for (int c = 0; c < calls; c++) {
                    vq_matmul(Y, pool[k] + mb[k] * at[k], TYPES[k], X, 1, rows, cols);
                    at[k] = (at[k] + 1) % ncopy[k];
                }
                t[k][r] = (now() - t0) / calls;
            }
        double med_q40 = 0;
        for (int k = 0; k < NT; k++) {
            double v[MAXREPS];
            memcpy(v, t[k], sizeof(double) * reps);
            qsort(v, reps, sizeof(double), cmpd);
            double med = v[reps / 2];
            if (k == 0) med_q40 = med;
            if (!json)
                printf("%5dx%-5d %-5s %6.3f bpw  median %8.1f us  min %8.1f  max %8.1f  %5.2f GB/s  %.3fx q4_0's time\n",
                       rows, cols, vq_wtype_get(TYPES[k])->name, mb[k] * 8.0 / ((double)rows * cols),
                       med * 1e6, v[0] * 1e6, v[reps - 1] * 1e6, mb[k] / med * 1e-9, med / med_q40);
            else {
                printf("  {\"rows\": %d, \"cols\": %d, \"type\": \"%s\", \"bytes\": %zu, \"seconds\": [", rows, cols,
                       vq_wtype_get(TYPES[k])->name, mb[k]);
                for (int r = 0; r < reps; r++) printf("%s%.9f", r ? ", " : "", t[k][r]);
                printf("]}%s\n", s == 2 && k == NT - 1 ? "" : ",");
            }
            vq_aligned_free(pool[k]);
        }
        free(Wf); free(X); free(Y);
    }
    if (json) printf("]}\n");
    loadavg("after");
    return 0;
}
