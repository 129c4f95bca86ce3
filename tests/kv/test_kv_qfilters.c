/* test_kv_qfilters.c: the calibrated eviction policies (evict.c) on a synthetic calibration:
 *   - the score of every row is sum over KV heads of k . f (f the calibration's filter of that
 *     layer and head), equal to a float64 reference within 1e-5, on an f32 cache;
 *   - an eviction step keeps exactly the highest-scored blocks (and every sink and recent row),
 *     at their true positions;
 *   - expected_attention: the score of a row is sum over KV heads of the softmax over the held
 *     rows of s_h(i) = log sum_g exp(mu_g . k / sqrt(d) + sum_j var_g,j k_j^2 / (2 d)), mu and
 *     var = q_sq - mu^2 of query head g = h * G + q, against float64 within 1e-5;
 *   - without calib=FILE, or with a file for other dims, the spec is refused with a message that
 *     names what is missing; the filters are counted in the cache's bytes (bytes == tally). */
#include "../vq_test.h"
#include "veloxquant.h"
#include "kv/kv.h"
#include "../calib_fixture.h"

int main(void) {
    vq_rng rng;
    vq_rng_seed(&rng, vq_t_seed(9191));
    enum { L = 2, NH = 4, H = 2, D = 16, N = 96 };
    char dir[] = "/tmp/vq_qfilters_XXXXXX", path[96], spec[200];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/s.vqc", dir);
    vq_calib cal;
    vq_t_calib_make(&cal, L, NH, H, D, &rng);
    vq_err e;
    CHECK(vq_calib_write(&cal, path, &e) == VQ_OK);

    vq_kv_dims dims = { L, NH, H, D, 128, NULL, 0, 0 };
    snprintf(spec, sizeof spec, "f32;evict=qfilters,budget=%d,sinks=4,recent=8;calib=%s", N, path);
    vq_kv *kv = vq_kv_create_str(spec, &dims, 5, &e);
    CHECKF(kv != NULL, "%s: %s", spec, kv ? "" : e.msg);
    if (!kv) return vq_t_done();
    const size_t w = (size_t)H * D;
    float *k = malloc(sizeof(float) * N * w), *v = malloc(sizeof(float) * N * w);
    for (size_t i = 0; i < N * w; i++) { k[i] = (float)vq_rng_gauss(&rng); v[i] = (float)vq_rng_gauss(&rng); }
    for (int l = 0; l < L; l++) CHECK(vq_kv_append(kv, l, 0, N, k, v, &e) == VQ_OK);
    CHECK(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv));

    /* scores against float64 */
    float sc[N];
    int32_t pos[N];
    double worst = 0;
    for (int l = 0; l < L; l++) {
        CHECK(vq_kv_evict_scores(kv, l, sc, pos, &e) == VQ_OK);
        for (int r = 0; r < N; r++) {
            double ref = 0;
            for (int h = 0; h < H; h++)
                for (int i = 0; i < D; i++)
                    ref += (double)k[(size_t)pos[r] * w + h * D + i] * cal.q_filter[((size_t)l * H + h) * D + i];
            worst = fmax(worst, fabs(ref - sc[r]));
        }
    }
    printf("scores vs float64: max |diff| %.3g\n", worst);
    CHECKF(worst < 1e-5, "qfilters scores differ from sum_h k.f by %.3g", worst);

    /* a step to 48 rows keeps the top-scored rows (f32: one row per block) besides sinks and recent */
    vq_kv_destroy(kv);
    snprintf(spec, sizeof spec, "f32;evict=qfilters,budget=48,sinks=4,recent=8;calib=%s", path);
    kv = vq_kv_create_str(spec, &dims, 5, &e);
    CHECKF(kv != NULL, "%s", kv ? "" : e.msg);
    for (int l = 0; l < L; l++) CHECK(vq_kv_append(kv, l, 0, N, k, v, &e) == VQ_OK);
    float all[L][N];
    for (int l = 0; l < L; l++) CHECK(vq_kv_evict_scores(kv, l, all[l], pos, &e) == VQ_OK);
    vq_kv_evict_now(kv, N);
    CHECK(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv));
    for (int l = 0; l < L; l++) {
        const int rows = vq_kv_rows(kv, l);
        float *kb = malloc(sizeof(float) * rows * w), *vb = malloc(sizeof(float) * rows * w);
        int32_t *pb = malloc(sizeof(int32_t) * rows);
        CHECK(vq_kv_read(kv, l, kb, vb, pb, &e) == VQ_OK);
        unsigned char held[N] = {0};
        for (int r = 0; r < rows; r++) {
            held[pb[r]] = 1;
            CHECK(!memcmp(kb + (size_t)r * w, k + (size_t)pb[r] * w, w * sizeof(float)));   /* true position */
        }
        /* the lowest-scored kept candidate scores at least the highest-scored dropped one */
        float kept_min = INFINITY, drop_max = -INFINITY;
        int prot = 0;
        for (int p = 0; p < N; p++) {
            int candidate = p >= 4 && p < N - 8;
            if (!candidate) { prot += held[p]; continue; }
            if (held[p]) kept_min = fminf(kept_min, all[l][p]);
            else drop_max = fmaxf(drop_max, all[l][p]);
        }
        printf("layer %d: %d rows kept, lowest kept score %.4f, highest dropped %.4f\n", l, rows, kept_min, drop_max);
        CHECKF(rows == 48 && prot == 12, "layer %d: %d rows, %d of 12 protected", l, rows, prot);
        CHECKF(kept_min >= drop_max, "layer %d: kept %.4f < dropped %.4f", l, kept_min, drop_max);
        free(kb); free(vb); free(pb);
    }
    vq_kv_destroy(kv);

    /* expected_attention against float64 */
    snprintf(spec, sizeof spec, "f32;evict=expected_attention,budget=%d;calib=%s", N, path);
    kv = vq_kv_create_str(spec, &dims, 5, &e);
    CHECKF(kv != NULL, "%s: %s", spec, kv ? "" : e.msg);
    for (int l = 0; kv && l < L; l++) CHECK(vq_kv_append(kv, l, 0, N, k, v, &e) == VQ_OK);
    CHECK(kv && vq_kv_bytes(kv) == vq_kv_bytes_tally(kv));
    worst = 0;
    double total = 0;
    const int G = NH / H;
    for (int l = 0; kv && l < L; l++) {
        CHECK(vq_kv_evict_scores(kv, l, sc, pos, &e) == VQ_OK);
        double ref[N] = {0};
        for (int h = 0; h < H; h++) {
            double lse[N], mx = -INFINITY, z = 0;
            for (int r = 0; r < N; r++) {
                const float *x = k + (size_t)pos[r] * w + h * D;
                double acc = 0;
                for (int q = 0; q < G; q++) {
                    const size_t o = ((size_t)l * NH + h * G + q) * D;
                    double t = 0;
                    for (int i = 0; i < D; i++) {
                        double mu = cal.q_mean[o + i], var = fmax(0.0, cal.q_sq[o + i] - mu * mu);
                        t += mu * x[i] / sqrt((double)D) + var * x[i] * x[i] / (2.0 * D);
                    }
                    acc += exp(t);
                }
                lse[r] = log(acc);
                mx = fmax(mx, lse[r]);
            }
            for (int r = 0; r < N; r++) z += exp(lse[r] - mx);
            for (int r = 0; r < N; r++) ref[r] += exp(lse[r] - mx) / z;
        }
        for (int r = 0; r < N; r++) { worst = fmax(worst, fabs(ref[r] - sc[r])); total += sc[r]; }
    }
    printf("expected_attention vs float64: max |diff| %.3g; scores sum to %.6f (= %d heads x %d layers)\n",
           worst, total, H, L);
    CHECKF(worst < 1e-5, "expected_attention scores differ from float64 by %.3g", worst);
    CHECK(fabs(total - H * L) < 1e-4);
    vq_kv_destroy(kv);
    kv = vq_kv_create_str("f16;evict=expected_attention,budget=32", &dims, 5, &e);
    CHECKF(!kv && e.code == VQ_ERR_ARG && strstr(e.msg, "calib=FILE"), "no calib: %s", kv ? "accepted" : e.msg);
    vq_kv_destroy(kv);
    snprintf(spec, sizeof spec, "f32;evict=qfilters,budget=48,sinks=4,recent=8;calib=%s", path);

    /* refusals */
    kv = vq_kv_create_str("f16;evict=qfilters,budget=32", &dims, 5, &e);
    CHECKF(!kv && e.code == VQ_ERR_ARG && strstr(e.msg, "calib=FILE"), "no calib: %s", kv ? "accepted" : e.msg);
    vq_kv_dims other = dims;
    other.head_dim = 32;
    kv = vq_kv_create_str(spec, &other, 5, &e);
    CHECKF(!kv && strstr(e.msg, "head_dim"), "other head_dim: %s", kv ? "accepted" : e.msg);
    vq_kv_destroy(kv);

    vq_calib_free(&cal);
    free(k); free(v);
    unlink(path);
    rmdir(dir);
    return vq_t_done();
}
