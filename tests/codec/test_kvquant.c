/* test_kvquant.c: the kvquant key codec's dense-and-sparse split, against references written
 * here: the block size (every byte counted: header, codes, ceil(F*G*d) sparse entries); the
 * greedy choice of one outlier is the best single removal found by brute force (the smallest sum
 * over channels of (max - min)^2); the choice of several equals a float64 re-implementation of
 * the greedy (per channel and end, the t most extreme, best drop per element); planted outliers are all picked and decode to
 * their exact fp16 values; every other element is within half a quantization step of its channel;
 * on heavy-tailed blocks the squared error falls against the same codes without outliers; 3-bit
 * codes fall between 2 and 4 bits. */
#include "../vq_test.h"
#include "codec/codec.h"
#include "core/core.h"
#include "../calib_fixture.h"

typedef struct { vq_codec_state st; } cs;

/* frac NULL: no outliers= (kivi) */
static int make(cs *s, const char *name, int bits, int G, const char *frac, int d, int side) {
    memset(s, 0, sizeof *s);
    s->st.codec = vq_codec_find(name);
    s->st.side = side;
    vq_codec_param p[4] = {{"bits", ""}, {"group", ""}, {"residual", "0"}, {"outliers", ""}};
    snprintf(p[0].val, sizeof p[0].val, "%d", bits);
    snprintf(p[1].val, sizeof p[1].val, "%d", G);
    if (frac) snprintf(p[3].val, sizeof p[3].val, "%s", frac);
    vq_err err;
    vq_status st = s->st.codec->init(&s->st, d, side, p, frac ? 4 : 3, 1, &err);
    CHECKF(st == VQ_OK, "%s bits=%d group=%d outliers=%s d=%d: %s", name, bits, G, frac ? frac : "-", d, err.msg);
    return st == VQ_OK;
}

/* sum over channels of (max - min)^2 over the elements not in del[] (G x d, row-major) */
static double range_obj(const float *x, const uint8_t *del, int G, int d) {
    double s = 0;
    for (int c = 0; c < d; c++) {
        double lo = INFINITY, hi = -INFINITY;
        for (int r = 0; r < G; r++)
            if (!del[r * d + c]) { lo = fmin(lo, x[r * d + c]); hi = fmax(hi, x[r * d + c]); }
        if (hi >= lo) s += (hi - lo) * (hi - lo);
    }
    return s;
}

static void sparse_idx(const cs *s, const uint8_t *B, int *idx, int n) {
    const int d = s->st.d, G = s->st.rows_per_block, b = atoi(strstr(s->st.params, "bits=") + 5);
    const size_t off = 4 * (size_t)d + (size_t)G * d * b / 8;
    for (int e = 0; e < n; e++) {
        uint16_t v;
        memcpy(&v, B + off + 2 * e, 2);
        idx[e] = v;
    }
}

static void test_bytes(void) {
    const int d = 64;
    struct { int bits, G; const char *f; size_t want; } t[] = {
        {2, 32, "0.01", 4 * 64 + 32 * 64 * 2 / 8 + 4 * 21},   /* ceil(20.48) = 21 */
        {3, 32, "0.01", 4 * 64 + 32 * 64 * 3 / 8 + 4 * 21},
        {4, 16, "0.02", 4 * 64 + 16 * 64 * 4 / 8 + 4 * 21},   /* ceil(20.48) */
        {2, 64, "0.125", 4 * 64 + 64 * 64 * 2 / 8 + 4 * 512},
        {3, 16, "0", 4 * 64 + 16 * 64 * 3 / 8},
    };
    for (size_t i = 0; i < VQ_ARRAY_LEN(t); i++) {
        cs s;
        if (!make(&s, "kvquant", t[i].bits, t[i].G, t[i].f, d, VQ_SIDE_K)) continue;
        CHECKF(s.st.block_bytes == t[i].want && s.st.rows_per_block == t[i].G,
               "bits=%d G=%d outliers=%s: block %zu bytes, want %zu", t[i].bits, t[i].G, t[i].f,
               s.st.block_bytes, t[i].want);
        s.st.codec->fini(&s.st);
    }
    cs v;   /* values: kivi's per-token rows, no outliers */
    if (make(&v, "kvquant", 4, 32, "0.05", d, VQ_SIDE_V)) {
        CHECK(v.st.block_bytes == 4 * 2 + 64 * 4 / 8 && v.st.rows_per_block == 1);
        v.st.codec->fini(&v.st);
    }
}

/* one outlier: the best single removal (brute force over every element) */
static void test_one(vq_rng *rng) {
    const int d = 64, G = 16;
    cs s;
    if (!make(&s, "kvquant", 2, G, "0.0005", d, VQ_SIDE_K)) return;   /* ceil(0.512) = 1 */
    float x[16 * 64];
    uint8_t *B = malloc(s.st.block_bytes), del[16 * 64];
    for (int it = 0; it < 50; it++) {
        for (int i = 0; i < G * d; i++) x[i] = (float)vq_rng_gauss(rng) * (1.0f + (float)(i % d) / 16.0f);
        s.st.codec->encode(&s.st, x, B);
        int got;
        sparse_idx(&s, B, &got, 1);
        double best = INFINITY;
        for (int i = 0; i < G * d; i++) {
            memset(del, 0, sizeof del);
            del[i] = 1;
            best = fmin(best, range_obj(x, del, G, d));
        }
        memset(del, 0, sizeof del);
        del[got] = 1;
        const double o = range_obj(x, del, G, d);
        CHECKF(got >= 0 && got < G * d && o <= best * (1 + 1e-6), "iteration %d: picked %d, objective %.9g, best %.9g",
               it, got, o, best);
    }
    free(B);
    s.st.codec->fini(&s.st);
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
/* the float64 greedy: del[] = the n elements it keeps exact (w: channel weights, or NULL) */
static void ref_greedy(const float *x, int G, int d, int n, const double *w, uint8_t *del) {
    int lo[256], hi[256], left = n;   /* kept: sorted positions lo..hi of each channel */
    double *v = malloc(sizeof(double) * (size_t)G * d);
    for (int c = 0; c < d; c++) {
        for (int r = 0; r < G; r++) v[c * G + r] = x[r * d + c];
        qsort(v + c * G, (size_t)G, sizeof(double), cmp_d);
        lo[c] = 0;
        hi[c] = G - 1;
    }
    while (left > 0) {
        double bg = -1;
        int bc = -1, bt = 0, btop = 0;
        for (int c = 0; c < d; c++) {
            const double *u = v + c * G, wc = w ? w[c] : 1.0;
            const double r2 = (u[hi[c]] - u[lo[c]]) * (u[hi[c]] - u[lo[c]]);
            for (int t = 1; t <= left && t <= hi[c] - lo[c]; t++) {
                const double a = u[hi[c] - t] - u[lo[c]], b = u[hi[c]] - u[lo[c] + t];
                if (wc * (r2 - a * a) / t > bg) { bg = wc * (r2 - a * a) / t; bc = c; bt = t; btop = 1; }
                if (wc * (r2 - b * b) / t > bg) { bg = wc * (r2 - b * b) / t; bc = c; bt = t; btop = 0; }
            }
        }
        if (btop) hi[bc] -= bt;
        else lo[bc] += bt;
        left -= bt;
    }
    memset(del, 0, (size_t)G * d);   /* the values outside [v[lo], v[hi]] of each channel */
    for (int c = 0; c < d; c++)
        for (int r = 0; r < G; r++)
            del[r * d + c] = x[r * d + c] < v[c * G + lo[c]] || x[r * d + c] > v[c * G + hi[c]];
    free(v);
}

/* several: the same choices as a float64 re-implementation (qsort per channel; every channel, end
 * and count t up to what is left; the best drop of w_c (max - min)^2 per element removed); with
 * qweight=1 the weights are the GQA group's query energy per channel from a calibration */
static void greedy_arm(vq_rng *rng, int weighted) {
    const int d = 64, G = 16, n = 11;   /* ceil(0.01 * 1024) = 11 */
    cs s;
    vq_calib cal;
    double w[64];
    memset(&s, 0, sizeof s);
    s.st.codec = vq_codec_find("kvquant");
    if (weighted) {   /* layer 1, KV head 1 of 2, GQA group of 3: channels 3c+1 get no query energy */
        vq_t_calib_make(&cal, 2, 6, 2, d, rng);
        double sum = 0;
        for (int c = 0; c < d; c++) {
            w[c] = 0;
            for (int g = 3; g < 6; g++) {
                float *q = &cal.q_sq[((size_t)1 * 6 + g) * d + c];
                if (c % 3 == 1) *q = 0;
                w[c] += *q;
            }
            sum += w[c];
        }
        for (int c = 0; c < d; c++) w[c] = w[c] * d / sum;
        s.st.ctx = (vq_codec_ctx){.layer = 1, .n_layers = 2, .head = 1, .n_kv_heads = 2, .n_heads = 6,
                                  .calib = &cal, .calib_path = "synthetic"};
    }
    vq_codec_param p[4] = {{"bits", "3"}, {"group", "16"}, {"outliers", "0.01"}, {"qweight", "1"}};
    vq_err err;
    CHECKF(s.st.codec->init(&s.st, d, VQ_SIDE_K, p, weighted ? 4 : 3, 1, &err) == VQ_OK, "%s", err.msg);
    float x[16 * 64];
    uint8_t *B = malloc(s.st.block_bytes), del[16 * 64];
    int got[16], same = 0, zero_w = 0;
    for (int it = 0; it < 40; it++) {
        for (int i = 0; i < G * d; i++) x[i] = (float)(vq_rng_gauss(rng) * exp(vq_rng_gauss(rng)));
        if (it % 2)   /* clusters: a few near-equal values at one end of a channel */
            for (int k = 0; k < 3; k++) {
                const int c = (int)(vq_rng_u64(rng) % (uint64_t)d), r0 = (int)(vq_rng_u64(rng) % (uint64_t)(G - 3));
                for (int r = r0; r < r0 + 3; r++) x[r * d + c] = 30.0f + 0.01f * (float)r;
            }
        s.st.codec->encode(&s.st, x, B);
        sparse_idx(&s, B, got, n);
        ref_greedy(x, G, d, n, weighted ? w : NULL, del);
        int nd = 0;
        for (int i = 0; i < G * d; i++) nd += del[i];
        int ok = nd == n, asc = 1;
        for (int k = 0; k < n; k++) {
            ok &= got[k] >= 0 && got[k] < G * d && del[got[k]];
            if (k) asc &= got[k] > got[k - 1];
            zero_w += got[k] % d % 3 == 1;
        }
        CHECKF(asc, "iteration %d: sparse indices not strictly ascending", it);
        same += ok;
    }
    CHECKF(same == 40, "weighted %d: the codec's outliers equal the float64 greedy's in %d of 40 blocks", weighted, same);
    if (weighted) {
        CHECKF(zero_w == 0, "%d outliers in channels no query reads", zero_w);
        CHECK(s.st.state_bytes > (size_t)d * sizeof(float));   /* the weights are counted */
        vq_calib_free(&cal);
    }
    free(B);
    s.st.codec->fini(&s.st);
}
static void test_greedy(vq_rng *rng) {
    greedy_arm(rng, 0);
    greedy_arm(rng, 1);
}

/* planted outliers are found and exact; the rest within half a step of their channel's range */
static void test_planted(vq_rng *rng) {
    const int d = 128, G = 32, n = 41;   /* ceil(0.01 * 4096) = 41 */
    for (int bits = 2; bits <= 4; bits++) {
        cs s;
        if (!make(&s, "kvquant", bits, G, "0.01", d, VQ_SIDE_K)) continue;
        float *x = malloc(sizeof(float) * G * d), *y = malloc(sizeof(float) * G * d);
        uint8_t *B = malloc(s.st.block_bytes), *pl = calloc((size_t)G * d, 1);
        for (int i = 0; i < G * d; i++) x[i] = (float)vq_rng_gauss(rng) + 0.1f * (float)(i % d);
        for (int k = 0; k < n;) {
            const int i = (int)(vq_rng_u64(rng) % (uint64_t)(G * d));
            if (pl[i]) continue;
            pl[i] = 1;
            x[i] += (vq_rng_u64(rng) & 1 ? 1.0f : -1.0f) * (20.0f + 10.0f * vq_rng_uniformf(rng));
            k++;
        }
        s.st.codec->encode(&s.st, x, B);
        s.st.codec->decode(&s.st, B, y);
        int idx[64], found = 0, exact = 0, within = 0;
        sparse_idx(&s, B, idx, n);
        for (int e = 0; e < n; e++) {
            found += pl[idx[e]];
            exact += y[idx[e]] == vq_f16_to_f32(vq_f32_to_f16(x[idx[e]]));
        }
        for (int c = 0; c < d; c++) {
            double lo = INFINITY, hi = -INFINITY;
            for (int r = 0; r < G; r++)
                if (!pl[r * d + c]) { lo = fmin(lo, x[r * d + c]); hi = fmax(hi, x[r * d + c]); }
            const double step = (hi - lo) / ((1 << bits) - 1);
            for (int r = 0; r < G; r++)
                if (!pl[r * d + c])
                    within += fabs(y[r * d + c] - x[r * d + c]) <= 0.5 * step * 1.002 + 1e-3 * (fabs(lo) + fabs(hi));
        }
        CHECKF(found == n && exact == n, "bits=%d: %d of %d planted outliers picked, %d exact", bits, found, n, exact);
        CHECKF(within == G * d - n, "bits=%d: %d of %d other elements within half a step", bits, within, G * d - n);
        free(x); free(y); free(B); free(pl);
        s.st.codec->fini(&s.st);
    }
}

static double block_mse(const char *name, int bits, const char *frac, const float *x, int G, int d) {
    cs s;
    if (!make(&s, name, bits, G, frac, d, VQ_SIDE_K)) return INFINITY;
    float *y = malloc(sizeof(float) * G * d);
    uint8_t *B = malloc(s.st.block_bytes);
    s.st.codec->encode(&s.st, x, B);
    s.st.codec->decode(&s.st, B, y);
    double e = 0;
    for (int i = 0; i < G * d; i++) e += (double)(y[i] - x[i]) * (y[i] - x[i]);
    free(y); free(B);
    s.st.codec->fini(&s.st);
    return e / (G * d);
}

/* heavy tails (1 % of elements x 8): 1 % outliers cut the squared error; 3 bits lie between 2 and
 * 4; kvquant with outliers=0 is kivi's codes */
static void test_mse(vq_rng *rng) {
    const int d = 64, G = 32;
    float *x = malloc(sizeof(float) * G * d);
    double e[5] = {0};
    for (int it = 0; it < 20; it++) {
        for (int i = 0; i < G * d; i++)
            x[i] = (float)vq_rng_gauss(rng) * (vq_rng_uniform(rng) < 0.01 ? 8.0f : 1.0f);
        e[0] += block_mse("kvquant", 2, "0", x, G, d);
        e[1] += block_mse("kvquant", 2, "0.01", x, G, d);
        e[2] += block_mse("kvquant", 3, "0.01", x, G, d);
        e[3] += block_mse("kvquant", 4, "0.01", x, G, d);
        e[4] += block_mse("kivi", 2, NULL, x, G, d);
    }
    printf("mse 2-bit: %.5f no outliers, %.5f 1 %% outliers; 3-bit %.5f, 4-bit %.5f; kivi %.5f\n",
           e[0] / 20, e[1] / 20, e[2] / 20, e[3] / 20, e[4] / 20);
    CHECKF(e[1] < 0.5 * e[0], "1 %% outliers: mse %.5f, without %.5f", e[1] / 20, e[0] / 20);
    CHECKF(e[3] < e[2] && e[2] < e[1], "mse not falling with bits: %.5f %.5f %.5f", e[1], e[2], e[3]);
    CHECKF(e[4] == e[0], "kvquant outliers=0 (%.9g) differs from kivi (%.9g)", e[0], e[4]);
    free(x);
}

int main(void) {
    uint64_t seed = vq_t_seed(2401);
    printf("seed %llu\n", (unsigned long long)seed);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    if (!vq_codec_find("kvquant")) VQ_SKIP("no kvquant codec in this build");
    test_bytes();
    test_one(&rng);
    test_greedy(&rng);
    test_planted(&rng);
    test_mse(&rng);
    return vq_t_done();
}
