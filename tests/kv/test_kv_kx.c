/* test_kv_kx.c: the key pre-transform of the KV store (store keys kmean= / kscale=, kv.c): coded
 * keys are k' = a ⊙ (k − c) with c and a from the calibration, queries are scored as (q ⊘ a)·k' +
 * q·c. Beyond the contract checks of test_kv_codecs (which runs transformed specs over several
 * codecs against float64 attention over the decoded rows):
 *  - it is exact for attention: an f32 cache with the transform attends as one without it (1e-5),
 *    and reads back the rows it was given (the inverse is right), windows and sinks included;
 *  - c and a are the calibration's: c = the mean key, a ∝ (query energy / key variance)^A with
 *    Σ a² σ² = Σ σ² (checked against a float64 recomputation);
 *  - it does what it is for: keys with a large common offset (as real keys have) coded at 3 bits
 *    about their mean give scores several times closer to the exact ones than coded as given;
 *  - the normalized spec names it and reparses to itself; its bytes are counted (tally == layout);
 *  - refusals with a message: no calib=, kmean=2, kscale outside 0..1 or not a number, a key
 *    given twice, a key whose transformed value leaves the fp16 range (at append). */
#include <unistd.h>
#include "../vq_test.h"
#include "veloxquant.h"
#include "kv/kv.h"
#include "codec/calib.h"
#include "kv_ref.h"
#include "../calib_fixture.h"

static char g_cal[128];

static vq_kv *make(const char *spec, const vq_kv_dims *dims, vq_err *err) {
    return vq_kv_create_str(spec, dims, 7, err);
}

/* attention of n_q random queries over rows appended in chunks (windows, sinks as the spec says) */
static void run(vq_kv *kv, const vq_kv_dims *D, const float *K, const float *V, int rows, const float *Q,
                int n_q, const int *qp, float *O) {
    const size_t w = (size_t)D->n_kv_heads * D->head_dim;
    vq_err err;
    for (int l = 0; l < D->n_layers; l++) {
        for (int p = 0; p < rows;) {
            int n = VQ_MIN(1 + (p * 7) % 37, rows - p);
            CHECKF(vq_kv_append(kv, l, p, n, K + (size_t)p * w, V + (size_t)p * w, &err) == VQ_OK, "%s", err.msg);
            p += n;
        }
        CHECKF(vq_kv_attend(kv, l, n_q, qp, Q, O + (size_t)l * n_q * D->n_heads * D->head_dim, &err) == VQ_OK,
               "%s", err.msg);
    }
}

int main(void) {
    vq_rng rng;
    vq_rng_seed(&rng, vq_t_seed(777));
    const vq_kv_dims D = {.n_layers = 2, .n_heads = 6, .n_kv_heads = 2, .head_dim = 64, .max_ctx = 600};
    const int d = D.head_dim, H = D.n_kv_heads, NH = D.n_heads, w = H * d;
    vq_t_tmpfile("vq_kv_kx", g_cal, sizeof g_cal);
    vq_calib cal;
    vq_t_calib_make(&cal, D.n_layers, NH, H, d, &rng);
    /* a large common offset in the keys (layer 1, head 0), and query energy very uneven */
    for (int i = 0; i < d; i++) {
        float mu = i % 5 == 0 ? 6.0f : 0.3f;
        cal.k_mean[((size_t)1 * H + 0) * d + i] = mu;
        cal.k_sq[((size_t)1 * H + 0) * d + i] = mu * mu + 1.0f / 3.0f;   /* uniform noise of amplitude 1 */
        for (int g = 0; g < 3; g++) cal.q_sq[((size_t)1 * NH + g) * d + i] = i < 16 ? 4.0f : 0.05f;
    }
    vq_err err;
    CHECKF(vq_calib_write(&cal, g_cal, &err) == VQ_OK, "%s", err.msg);

    /* c and a against a float64 recomputation */
    {
        float c[64], a[64];
        vq_calib_key_affine(&cal, 1, 0, 1, 0.25, c, a);
        double e0 = 0, e1 = 0, ratio_ok = 1;
        for (int i = 0; i < d; i++) {
            double var = (double)cal.k_sq[((size_t)1 * H) * d + i] - (double)c[i] * c[i];
            CHECK_NEAR(c[i], cal.k_mean[((size_t)1 * H) * d + i], 0);
            e0 += var;
            e1 += (double)a[i] * a[i] * var;
            double wq = 0;
            for (int g = 0; g < 3; g++) wq += cal.q_sq[((size_t)1 * NH + g) * d + i];
            double wq0 = 0, var0 = (double)cal.k_sq[((size_t)1 * H) * d] - (double)c[0] * c[0];
            for (int g = 0; g < 3; g++) wq0 += cal.q_sq[((size_t)1 * NH + g) * d];
            /* a_i / a_0 = ((w_i/var_i) / (w_0/var_0))^0.25 */
            double want = pow((wq / var) / (wq0 / var0), 0.25);
            ratio_ok = ratio_ok && fabs(a[i] / a[0] - want) <= 1e-4 * want;
        }
        CHECKF(fabs(e1 - e0) <= 1e-4 * e0, "energy kept: %g vs %g", e1, e0);
        CHECK(ratio_ok);
        vq_calib_key_affine(&cal, 1, 0, 0, 0.0, c, a);   /* neither: the identity */
        int id = 1;
        for (int i = 0; i < d; i++) id = id && c[i] == 0.0f && fabsf(a[i] - 1.0f) < 1e-6f;
        CHECK(id);
    }
    vq_calib_free(&cal);

    const int rows = 300, n_q = 9;
    float *K = malloc(sizeof(float) * (size_t)rows * w), *V = malloc(sizeof(float) * (size_t)rows * w);
    float *Kr = malloc(sizeof(float) * (size_t)rows * w), *Vr = malloc(sizeof(float) * (size_t)rows * w);
    float *Q = malloc(sizeof(float) * (size_t)n_q * NH * d);
    float *O0 = malloc(sizeof(float) * 2 * n_q * NH * d), *O1 = malloc(sizeof(float) * 2 * n_q * NH * d);
    int32_t *pos = malloc(sizeof(int32_t) * rows);
    int qp[9];
    fill_uniform(&rng, K, (size_t)rows * w, 1.0f);
    fill_uniform(&rng, V, (size_t)rows * w, 1.0f);
    for (int r = 0; r < rows; r++)   /* the offset the calibration says, on layer 1's head 0 keys */
        for (int i = 0; i < d; i++) K[(size_t)r * w + i] += i % 5 == 0 ? 6.0f : 0.3f;
    fill_uniform(&rng, Q, (size_t)n_q * NH * d, 2.0f);
    for (int j = 0; j < n_q; j++) qp[j] = j == 0 ? rows - 1 : (int)(vq_rng_u64(&rng) % rows);

    /* exact for attention: f32 with and without, windows and sinks */
    const char *base[] = {"f32", "f32;window=20,sink=3,wprec=32", "f32;page=16"};
    for (size_t b = 0; b < VQ_ARRAY_LEN(base); b++) {
        char s1[400];
        snprintf(s1, sizeof s1, "%s;kmean=1,kscale=0.25;calib=%s", base[b], g_cal);
        vq_kv *a = make(base[b], &D, &err), *t = make(s1, &D, &err);
        CHECKF(a && t, "%s: %s", s1, err.msg);
        if (!a || !t) continue;
        run(a, &D, K, V, rows, Q, n_q, qp, O0);
        run(t, &D, K, V, rows, Q, n_q, qp, O1);
        double e = 0, m = 0;
        for (size_t i = 0; i < (size_t)2 * n_q * NH * d; i++) { e = fmax(e, fabs(O0[i] - O1[i])); m = fmax(m, fabs(O0[i])); }
        CHECKF(e <= 1e-5 * m, "%s: attention differs from %s by %g (max %g)", s1, base[b], e, m);
        for (int l = 0; l < 2; l++) {   /* read-back: the rows given */
            CHECK(vq_kv_read(t, l, Kr, Vr, pos, &err) == VQ_OK);
            double ek = 0;
            for (int r = 0; r < rows; r++)
                for (int i = 0; i < w; i++) ek = fmax(ek, fabs(Kr[(size_t)r * w + i] - K[(size_t)pos[r] * w + i]));
            CHECKF(ek <= 1e-5, "%s layer %d: read-back key error %g", s1, l, ek);
        }
        /* the bytes: the transform's 2 layers x 2 heads x 3 x d floats, counted and tallied */
        CHECKF(vq_kv_bytes(t) == vq_kv_bytes(a) + 2 * 2 * 3 * 64 * sizeof(float),
               "%s: %zu bytes vs %zu without", s1, vq_kv_bytes(t), vq_kv_bytes(a));
        CHECK(vq_kv_bytes(t) == vq_kv_bytes_tally(t));
        vq_kv_destroy(a);
        vq_kv_destroy(t);
    }

    /* what it is for: 3-bit keys with a common offset, coded about the mean: score errors smaller */
    {
        const vq_kv_dims D1 = {.n_layers = 2, .n_heads = 6, .n_kv_heads = 2, .head_dim = 64, .max_ctx = 600};
        const char *sp[2] = {"k=turboquant_mse:bits=3,layout=packed;v=f32", "k=turboquant_mse:bits=3,layout=packed;v=f32;kmean=1"};
        double err2[2];
        for (int k = 0; k < 2; k++) {
            char s1[400];
            snprintf(s1, sizeof s1, "%s%s%s", sp[k], k ? ";calib=" : "", k ? g_cal : "");
            vq_kv *t = make(s1, &D1, &err);
            CHECKF(t != NULL, "%s: %s", s1, t ? "" : err.msg);
            if (!t) { err2[k] = INFINITY; continue; }
            for (int p = 0; p < rows; p += 50)
                CHECK(vq_kv_append(t, 1, p, 50, K + (size_t)p * w, V + (size_t)p * w, &err) == VQ_OK);
            CHECK(vq_kv_read(t, 1, Kr, Vr, pos, &err) == VQ_OK);
            double se = 0;   /* head 0's score errors q·(k_hat − k) over every row and query */
            for (int j = 0; j < n_q; j++)
                for (int r = 0; r < rows; r++) {
                    double e = 0;
                    for (int i = 0; i < d; i++)
                        e += (double)Q[(size_t)j * NH * d + i] * (Kr[(size_t)r * w + i] - K[(size_t)pos[r] * w + i]);
                    se += e * e;
                }
            err2[k] = se;
            vq_kv_destroy(t);
        }
        printf("3-bit keys with an offset: squared score error %.4g as given, %.4g about the mean (%.2fx)\n",
               err2[0], err2[1], err2[0] / err2[1]);
        CHECKF(err2[1] * 3.0 < err2[0], "kmean=1 did not cut the score error 3x: %g vs %g", err2[1], err2[0]);
    }

    /* the normalized spec names the transform and reparses to itself */
    {
        char s1[400];
        snprintf(s1, sizeof s1, "turboquant_mse:bits=4;kscale=0.25,kmean=1;calib=%s", g_cal);
        vq_kv *t = make(s1, &D, &err);
        CHECKF(t != NULL, "%s", t ? "" : err.msg);
        if (t) {
            const char *n = vq_kv_spec_str(t);
            CHECKF(strstr(n, "kmean=1,kscale=0.25") != NULL, "normalized: %s", n);
            vq_kv *t2 = make(n, &D, &err);
            CHECKF(t2 && !strcmp(vq_kv_spec_str(t2), n), "reparse of %s", n);
            if (t2) vq_kv_destroy(t2);
            vq_kv_destroy(t);
        }
    }

    /* refusals */
    {
        char s1[400];
        const char *bad[] = {"f16;kmean=1", "f16;kscale=0.25", "f16;kmean=2;calib=%s", "f16;kscale=1.5;calib=%s",
                             "f16;kscale=-0.1;calib=%s", "f16;kscale=x;calib=%s", "f16;kmean=1,kmean=1;calib=%s",
                             "f16;kscale=0.2,kscale=0.3;calib=%s", "f16;kmean=1;calib=/nonexistent/x.vqc"};
        const char *what[] = {"calib", "calib", "kmean", "kscale", "kscale", "kscale", "twice", "twice", "x.vqc"};
        for (size_t i = 0; i < VQ_ARRAY_LEN(bad); i++) {
            snprintf(s1, sizeof s1, bad[i], g_cal);
            vq_kv *t = make(s1, &D, &err);
            CHECKF(t == NULL && err.code != VQ_OK && strstr(err.msg, what[i]), "'%s' should be refused naming %s: %s",
                   s1, what[i], t ? "(accepted)" : err.msg);
            if (t) vq_kv_destroy(t);
        }
        /* another head_dim than the calibration's */
        const vq_kv_dims D2 = {.n_layers = 2, .n_heads = 6, .n_kv_heads = 2, .head_dim = 128, .max_ctx = 64};
        snprintf(s1, sizeof s1, "f16;kmean=1;calib=%s", g_cal);
        vq_kv *t = make(s1, &D2, &err);
        CHECKF(t == NULL && strstr(err.msg, "head_dim"), "head_dim mismatch: %s", t ? "(accepted)" : err.msg);
        if (t) vq_kv_destroy(t);
        /* a key the transform would take past +-65504: refused at append, nothing stored */
        snprintf(s1, sizeof s1, "q8_0;kmean=1;calib=%s", g_cal);
        t = make(s1, &D, &err);
        if (t) {
            float *k1 = calloc((size_t)w, sizeof(float)), *v1 = calloc((size_t)w, sizeof(float));
            k1[0] = -65504.0f;   /* c_0 = 6 on layer 1 head 0: -65510 after the shift */
            vq_status rc = vq_kv_append(t, 1, 0, 1, k1, v1, &err);
            CHECKF(rc == VQ_ERR_ARG && strstr(err.msg, "pre-transform"), "out-of-range key: %s", rc ? err.msg : "(accepted)");
            CHECK(vq_kv_rows(t, 1) == 0);
            free(k1); free(v1);
            vq_kv_destroy(t);
        }
    }
    unlink(g_cal);
    free(K); free(V); free(Kr); free(Vr); free(Q); free(O0); free(O1); free(pos);
    return vq_t_done();
}
