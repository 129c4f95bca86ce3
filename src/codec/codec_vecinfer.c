/* codec_vecinfer.c: VecInfer (Yao et al., arXiv 2510.06175): product vector quantization of KV rows
 * with codebooks trained offline, keys made easy to quantize first by a per-channel smoothing and a
 * Hadamard rotation. Keys: k' = Π(k / λ) (λ_i = the channel's max |k| on the calibration text, Π the
 * seeded Hadamard rotation of the calibration file), split into M = d / sub sub-vectors, each coded
 * as the index of its nearest of 16 centroids in its own codebook; q·k̂ = (Π(q ⊙ λ))·ĉ, so a query
 * becomes a lookup table LUT[m][c] = q'_m · cb[m][c] and a score is M table lookups. Values: the
 * same product quantization of the raw rows, no transform. Codebooks and λ come from the
 * calibration file's VecInfer section (docs/calibration-format.md), never trained here.
 *
 * Layout (keys and values alike): blocks of 16 rows; for sub-vector pair p (M / 2 pairs), 16 bytes,
 * byte r = code[r][2p] | code[r][2p+1] << 4. A byte load of 16 codes widened to 16 lanes indexes a
 * 16-entry table held in one register (AVX-512: vpermps; AVX2: two vpermps and a blend), so
 *  - score: per query and pair, two permutes of the query's LUT rows and two adds give 16 rows'
 *    partial scores; no gather, no horizontal sum (bits 4/sub per element, no per-row metadata);
 *  - accumulate: per coordinate i a permute of the coordinate's 16-entry table (cb[i/sub][.][i%sub])
 *    gives the 16 rows' decoded values and one FMA per query adds w ⊙ them into that coordinate's
 *    16 lane partial sums (the codec domain: acc[i * 16 + lane], lane = row mod 16); finish sums
 *    the lanes. With 16 entries the bucket form (Σ w per (sub-vector, centroid), then one codebook
 *    product per head) needs a scalar scatter-add per row, sub-vector and query (96 per row at
 *    d 64, sub 2, GQA 3) against 12 FMAs and 4 permutes per row here; docs/codecs-vecinfer.md. */
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec/calib.h"
#include "codec/codec_vec.h"
#include "codec/rotation.h"
#include "codec/vecinfer.h"

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL inline __attribute__((always_inline))

typedef struct vi_state {
    int d, sub, M, side;
    int vnorm;                                  /* values: each row's fp16 norm after the codes */
    size_t nofs;                                /* its byte offset in the block (16 fp16) */
    vq_isa isa;
    vq_rotation *rot;                           /* keys only */
    float lam[VQ_VI_MAX_D];                     /* keys: λ (1 for values) */
    float cb[VQ_VI_MAX_D * VQ_VI_CB];           /* [M][16][sub] */
    float tab[VQ_VI_MAX_D * VQ_VI_CB];          /* [d][16]: tab[i][c] = cb[i / sub][c][i % sub] */
} vi_state;

static unsigned code_of(const uint8_t *blk, int r, int m) {
    return (blk[(size_t)(m / 2) * 16 + r] >> (4 * (m & 1))) & 15u;
}

/* row r's norm (vnorm), or 1 */
static float norm_of(const vi_state *t, const uint8_t *blk, int r) {
    if (!t->vnorm) return 1.0f;
    vq_f16 h;
    memcpy(&h, blk + t->nofs + (size_t)r * sizeof h, sizeof h);
    return vq_f16_to_f32(h);
}

/* ---------------- training (vq_vi_train_head) ---------------- */
static double d2(const float *a, const float *b, int s) {
    double t = 0;
    for (int i = 0; i < s; i++) { double e = (double)a[i] - b[i]; t += e * e; }
    return t;
}

/* k-means of n points of s floats (stride ld) into 16 centroids cen[16][s], cen[0] = 0 fixed */
static void kmeans16(const float *x, size_t ld, int n, int s, vq_rng *rng, float *cen, double *dist,
                     int *asg, double *sum) {
    /* entry 0 is the zero vector, fixed (a zero row, or a sub-vector near 0 such as the attention
     * sink's small values, is coded exactly); k-means++ seeding of the other 15 from it */
    memset(cen, 0, sizeof(float) * (size_t)s);
    for (int i = 0; i < n; i++) dist[i] = d2(x + (size_t)i * ld, cen, s);
    for (int c = 1; c < VQ_VI_CB; c++) {
        double tot = 0;
        for (int i = 0; i < n; i++) tot += dist[i];
        int pick = 0;
        if (tot > 0) {
            double u = vq_rng_uniform(rng) * tot, acc = 0;
            for (pick = 0; pick < n - 1; pick++) { acc += dist[pick]; if (acc > u) break; }
        }
        memcpy(cen + (size_t)c * s, x + (size_t)pick * ld, sizeof(float) * (size_t)s);
        for (int i = 0; i < n; i++) dist[i] = fmin(dist[i], d2(x + (size_t)i * ld, cen + (size_t)c * s, s));
    }
    for (int it = 0; it < VQ_VI_ITERS; it++) {
        int cnt[VQ_VI_CB] = { 0 }, changed = 0;
        memset(sum, 0, sizeof(double) * VQ_VI_CB * (size_t)s);
        for (int i = 0; i < n; i++) {
            const float *p = x + (size_t)i * ld;
            int best = 0;
            double bd = d2(p, cen, s);
            for (int c = 1; c < VQ_VI_CB; c++) {
                double e = d2(p, cen + (size_t)c * s, s);
                if (e < bd) { bd = e; best = c; }
            }
            dist[i] = bd;
            if (asg[i] != best) changed++;
            asg[i] = best;
            cnt[best]++;
            for (int t = 0; t < s; t++) sum[best * s + t] += p[t];
        }
        for (int c = 1; c < VQ_VI_CB; c++) {   /* entry 0 stays the zero vector */
            if (cnt[c]) {
                for (int t = 0; t < s; t++) cen[c * s + t] = (float)(sum[c * s + t] / cnt[c]);
            } else {   /* empty: move it to the point worst served */
                int far = 0;
                for (int i = 1; i < n; i++) if (dist[i] > dist[far]) far = i;
                memcpy(cen + (size_t)c * s, x + (size_t)far * ld, sizeof(float) * (size_t)s);
                dist[far] = 0;
                changed++;
            }
        }
        if (!changed) break;
    }
}

vq_status vq_vi_train_head(const float *k, const float *v, int n, int d, int sub_k, int sub_v,
                           double alpha, int vnorm, uint64_t rot_seed, uint64_t seed, float *smooth, float *cb_k,
                           float *cb_v, vq_err *err) {
    if (!(alpha > 0 && alpha <= 1) || n < 1 || d < 16 || d % 16 || d > VQ_VI_MAX_D || sub_k < 1 || sub_v < 1 || d % (2 * sub_k) ||
        d % (2 * sub_v))
        return vq_err_set(err, VQ_ERR_ARG, "vecinfer training: n %d, d %d, sub %d/%d out of range", n, d,
                          sub_k, sub_v);
    vq_rotation *rot = vq_rotation_create(d, rot_seed, err);
    if (!rot) return err ? err->code : VQ_ERR_ARG;
    float *kt = malloc(sizeof(float) * (size_t)n * d), *vt = vnorm ? malloc(sizeof(float) * (size_t)n * d) : NULL;
    double *dist = malloc(sizeof(double) * (size_t)n), *sum = malloc(sizeof(double) * VQ_VI_CB * 8);
    int *asg = malloc(sizeof(int) * (size_t)n);
    if (!kt || !dist || !sum || !asg || (vnorm && !vt)) {
        free(kt); free(vt); free(dist); free(sum); free(asg);
        vq_rotation_free(rot);
        return vq_err_set(err, VQ_ERR_NOMEM, "vecinfer training: out of memory (%d rows)", n);
    }
    double mx = 0;
    for (int i = 0; i < d; i++) {
        double m = 0;
        for (int r = 0; r < n; r++) m = fmax(m, fabs((double)k[(size_t)r * d + i]));
        smooth[i] = (float)pow(m, alpha);
        mx = fmax(mx, (double)smooth[i]);
    }
    for (int i = 0; i < d; i++) smooth[i] = (float)fmax(fmax((double)smooth[i], mx * 1e-6), 1e-30);
    for (int r = 0; r < n; r++) {
        float *y = kt + (size_t)r * d;
        for (int i = 0; i < d; i++) y[i] = k[(size_t)r * d + i] / smooth[i];
        vq_rotation_apply(rot, y, y);
    }
    int nv = n;
    if (vnorm) {   /* unit rows; a zero row is coded as zero whatever the codebook, so left out */
        nv = 0;
        for (int r = 0; r < n; r++) {
            const float *x = v + (size_t)r * d;
            double s = 0;
            for (int i = 0; i < d; i++) s += (double)x[i] * x[i];
            if (!(s > 0)) continue;
            const double inv = 1.0 / sqrt(s);
            for (int i = 0; i < d; i++) vt[(size_t)nv * d + i] = (float)(x[i] * inv);
            nv++;
        }
        if (!nv) { memset(vt, 0, sizeof(float) * (size_t)d); nv = 1; }
    }
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    const float *src[2] = { kt, vnorm ? vt : v };
    const int rows[2] = { n, nv };
    const int sub[2] = { sub_k, sub_v };
    float *dst[2] = { cb_k, cb_v };
    for (int side = 0; side < 2; side++)
        for (int m = 0; m < d / sub[side]; m++) {
            for (int r = 0; r < n; r++) asg[r] = -1;
            kmeans16(src[side] + (size_t)m * sub[side], (size_t)d, rows[side], sub[side], &rng,
                     dst[side] + (size_t)m * VQ_VI_CB * sub[side], dist, asg, sum);
        }
    free(kt); free(vt); free(dist); free(sum); free(asg);
    vq_rotation_free(rot);
    return VQ_OK;
}

/* ---------------- init / fini ---------------- */
static vq_status vi_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                         uint64_t seed, vq_err *err) {
    const vq_codec *c = st->codec;
    (void)seed;   /* the rotation is the calibration's: the codebooks were trained behind it */
    vq_status s = vq_codec_params_check(c, p, np, "bits,sub,vnorm", err);
    if (s) return s;
    const vq_calib *cal = st->ctx.calib;
    if (!cal)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s needs a calibration with a VecInfer section: add "
                          "calib=FILE to the KV spec (a file of `veloxquant calibrate --vecinfer K,V`), e.g. "
                          "\"vecinfer;calib=model.vqc\"", c->name);
    const char *cp = st->ctx.calib_path ? st->ctx.calib_path : "(calibration)";
    if (!cal->vi_sub_k)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: calibration '%.200s' has no VecInfer section (its "
                          "codebooks): rerun `veloxquant calibrate ... --vecinfer K,V`", c->name, cp);
    if (cal->head_dim != d || d % 16 || d > VQ_VI_MAX_D)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: calibration '%.200s' has head_dim %d (model '%s'), "
                          "this cache %d (and it must be a multiple of 16, at most %d)", c->name, cp,
                          cal->head_dim, cal->model, d, VQ_VI_MAX_D);
    const int layer = st->ctx.n_layers ? st->ctx.layer : 0, head = st->ctx.n_layers ? st->ctx.head : 0;
    if (layer < 0 || layer >= cal->n_layers || head < 0 || head >= cal->n_kv_heads)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: calibration '%.200s' has %d layers x %d KV heads, "
                          "asked for layer %d head %d", c->name, cp, cal->n_layers, cal->n_kv_heads, layer, head);
    const int sub = side == VQ_SIDE_K ? cal->vi_sub_k : cal->vi_sub_v;
    if (d % (2 * sub))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: sub-vector length %d of '%.200s' leaves an odd number "
                          "of sub-vectors in head_dim %d", c->name, sub, cp, d);
    int want = 0;
    s = vq_codec_param_int(c, p, np, "sub", 1, 8, sub, &want, err);
    if (s) return s;
    if (want != sub)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: sub=%d, but calibration '%.200s' holds %s codebooks "
                          "of sub-vectors of %d", c->name, want, cp, side == VQ_SIDE_K ? "key" : "value", sub);
    /* vnorm: the file says whether its value codebooks were trained on unit rows; the spec may
     * repeat it (either side: it is one spec for both) and must then agree */
    s = vq_codec_param_int(c, p, np, "vnorm", 0, 1, cal->vi_vnorm, &want, err);
    if (s) return s;
    if (want != cal->vi_vnorm)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: vnorm=%d, but the value codebooks of '%.200s' were "
                          "trained %s (rerun `veloxquant calibrate ... --vecinfer K,V%s`)", c->name, want, cp,
                          cal->vi_vnorm ? "on unit-norm rows (vnorm=1)" : "on raw rows (vnorm=0)",
                          want ? " --vecinfer-vnorm" : "");
    const char *bv = vq_codec_param_get(p, np, "bits");
    if (bv) {   /* the spec's k=/v=/bits=: must say what the codebooks give, 4 / sub bits */
        char want_b[16];
        snprintf(want_b, sizeof want_b, sub == 8 ? "0.5" : "%d", 4 / sub);
        if (strcmp(bv, want_b))
            return vq_err_set(err, VQ_ERR_ARG, "codec %s: %s bits=%s, but the %s codebooks of '%.200s' "
                              "(sub-vectors of %d, 16 entries) give %s bits per element", c->name,
                              side == VQ_SIDE_K ? "key" : "value", bv, side == VQ_SIDE_K ? "key" : "value",
                              cp, sub, want_b);
    }
    vi_state *t = vq_aligned_alloc(sizeof *t);
    if (!t) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", c->name);
    memset(t, 0, sizeof *t);
    st->impl = t;
    t->d = d;
    t->sub = sub;
    t->M = d / sub;
    t->side = side;
    t->vnorm = side == VQ_SIDE_V && cal->vi_vnorm;
    t->nofs = (size_t)VQ_VI_ROWS * (size_t)t->M / 2;
    t->isa = vq_cvec_isa();
    const size_t kh = (size_t)layer * cal->n_kv_heads + head;
    const float *cb = (side == VQ_SIDE_K ? cal->vi_cb_k : cal->vi_cb_v) + kh * vq_calib_vi_cb_floats(cal);
    memcpy(t->cb, cb, sizeof(float) * (size_t)d * VQ_VI_CB);
    for (int i = 0; i < d; i++)
        for (int e = 0; e < VQ_VI_CB; e++) t->tab[i * VQ_VI_CB + e] = t->cb[((i / sub) * VQ_VI_CB + e) * sub + i % sub];
    for (int i = 0; i < d; i++) t->lam[i] = side == VQ_SIDE_K ? cal->vi_smooth[kh * (size_t)d + i] : 1.0f;
    if (side == VQ_SIDE_K) {
        t->rot = vq_rotation_create(d, cal->vi_seed, err);
        if (!t->rot) return err ? err->code : VQ_ERR_NOMEM;
    }
    st->d = d;
    st->rows_per_block = VQ_VI_ROWS;
    st->block_bytes = t->nofs + (t->vnorm ? VQ_VI_ROWS * sizeof(vq_f16) : 0);
    st->qstate_bytes = sizeof(float) * (size_t)t->M * VQ_VI_CB;
    st->acc_floats = VQ_VI_ROWS * d;
    /* what a state holds: its codebook and λ (the tables are a copy of the codebook) and, for keys,
     * the rotation's d signs */
    st->state_bytes = sizeof(float) * (size_t)d * (VQ_VI_CB + (side == VQ_SIDE_K ? 2 : 0));
    if (t->vnorm) snprintf(st->params, sizeof st->params, "sub=%d,vnorm=1", sub);
    else snprintf(st->params, sizeof st->params, "sub=%d", sub);
    return VQ_OK;
}

static void vi_fini(vq_codec_state *st) {
    vi_state *t = st->impl;
    if (t) vq_rotation_free(t->rot);
    vq_aligned_free(t);
    st->impl = NULL;
}

void vq_vi_force_isa(vq_codec_state *st, vq_isa isa) {
    vi_state *t = st->impl;
    t->isa = isa > vq_cpu_best_isa() ? vq_cpu_best_isa() : isa;
}

/* ---------------- encode / decode ---------------- */
static void vi_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const vi_state *t = st->impl;
    const int d = t->d, s = t->sub;
    memset(block, 0, st->block_bytes);
    float y[VQ_VI_MAX_D];
    for (int r = 0; r < VQ_VI_ROWS; r++) {
        const float *xr = x + (size_t)r * d;
        if (t->side == VQ_SIDE_K) {
            for (int i = 0; i < d; i++) y[i] = xr[i] / t->lam[i];
            vq_rotation_apply(t->rot, y, y);
        } else if (t->vnorm) {   /* v / n with n the stored fp16 norm, so that decode's c·n is its best */
            double s2 = 0;
            for (int i = 0; i < d; i++) s2 += (double)xr[i] * xr[i];
            vq_f16 h = vq_f32_to_f16((float)fmin(sqrt(s2), 65504.0));   /* the largest finite fp16 */
            const float n = vq_f16_to_f32(h);
            memcpy(block + t->nofs + (size_t)r * sizeof(vq_f16), &h, sizeof h);
            for (int i = 0; i < d; i++) y[i] = n > 0 ? xr[i] / n : 0.0f;
        } else {
            memcpy(y, xr, sizeof(float) * (size_t)d);
        }
        for (int m = 0; m < t->M; m++) {
            const float *cb = t->cb + (size_t)m * VQ_VI_CB * s;
            int best = 0;
            double bd = d2(y + m * s, cb, s);
            for (int c = 1; c < VQ_VI_CB; c++) {
                double e = d2(y + m * s, cb + c * s, s);
                if (e < bd) { bd = e; best = c; }
            }
            block[(size_t)(m / 2) * 16 + r] |= (uint8_t)(best << (4 * (m & 1)));
        }
    }
}

static void vi_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const vi_state *t = st->impl;
    const int d = t->d;
    for (int r = 0; r < VQ_VI_ROWS; r++) {
        float *xr = x + (size_t)r * d;
        for (int i = 0; i < d; i++) xr[i] = t->tab[i * VQ_VI_CB + code_of(block, r, i / t->sub)];
        if (t->vnorm) {
            const float n = norm_of(t, block, r);
            for (int i = 0; i < d; i++) xr[i] *= n;
        }
        if (t->side == VQ_SIDE_K) {
            vq_rotation_apply_inverse(t->rot, xr, xr);
            for (int i = 0; i < d; i++) xr[i] *= t->lam[i];
        }
    }
}

/* LUT[m][c] = (Π(q ⊙ λ))_m · cb[m][c] */
static void vi_prep(const vq_codec_state *st, const float *q, void *qs) {
    const vi_state *t = st->impl;
    const int d = t->d, s = t->sub;
    float y[VQ_VI_MAX_D], *lut = qs;
    for (int i = 0; i < d; i++) y[i] = q[i] * t->lam[i];
    if (t->rot) vq_rotation_apply(t->rot, y, y);
    for (int m = 0; m < t->M; m++)
        for (int c = 0; c < VQ_VI_CB; c++) {
            float a = 0;
            for (int u = 0; u < s; u++) a += y[m * s + u] * t->cb[((size_t)m * VQ_VI_CB + c) * s + u];
            lut[m * VQ_VI_CB + c] = a;
        }
}

/* ---------------- scalar references ---------------- */
static void score_scalar(const vi_state *t, int nq, const float *const *lut, const uint8_t *blocks,
                         int n_blocks, size_t bb, float *scores) {
    const size_t n_rows = (size_t)n_blocks * VQ_VI_ROWS;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb;
        for (int r = 0; r < VQ_VI_ROWS; r++)
            for (int j = 0; j < nq; j++) {
                float s = 0;
                for (int m = 0; m < t->M; m++) s += lut[j][m * VQ_VI_CB + code_of(blk, r, m)];
                scores[(size_t)j * n_rows + (size_t)b * VQ_VI_ROWS + r] = t->vnorm ? s * norm_of(t, blk, r) : s;
            }
    }
}

static void acc_scalar(const vi_state *t, int nq, const float *w, const uint8_t *blocks, int n_blocks,
                       size_t bb, float *const *acc) {
    const size_t n_rows = (size_t)n_blocks * VQ_VI_ROWS;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb;
        for (int r = 0; r < VQ_VI_ROWS; r++)
            for (int j = 0; j < nq; j++) {
                const float wj = w[(size_t)j * n_rows + (size_t)b * VQ_VI_ROWS + r] * norm_of(t, blk, r);
                if (wj == 0.0f) continue;
                for (int i = 0; i < t->d; i++)
                    acc[j][i * VQ_VI_ROWS + r] += wj * t->tab[i * VQ_VI_CB + code_of(blk, r, i / t->sub)];
            }
    }
}

/* ---------------- AVX-512 ---------------- */
/* m queries (constant after inlining); the two nibbles of a pair feed separate sums */
T_AVX512 static INL void score_512_m(const vi_state *t, const int m, const float *const *lut,
                                     const uint8_t *blocks, int n_blocks, size_t bb, float *scores,
                                     size_t stride) {
    const int np = t->M / 2;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *c = blocks + (size_t)b * bb;
        for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)(c + 4 * bb + o), _MM_HINT_T0);
        __m512 a0[4], a1[4];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) a0[j] = a1[j] = _mm512_setzero_ps();
        for (int p = 0; p < np; p++) {
            __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + (size_t)p * 16)));
            __m512i hi = _mm512_srli_epi32(raw, 4);
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) {
                a0[j] = _mm512_add_ps(a0[j], _mm512_permutexvar_ps(raw, _mm512_loadu_ps(lut[j] + (2 * p) * VQ_VI_CB)));
                a1[j] = _mm512_add_ps(a1[j], _mm512_permutexvar_ps(hi, _mm512_loadu_ps(lut[j] + (2 * p + 1) * VQ_VI_CB)));
            }
        }
        const __m512 nv = t->vnorm ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(c + t->nofs)))
                                   : _mm512_set1_ps(1.0f);
#pragma GCC unroll 4
        for (int j = 0; j < m; j++)
            _mm512_storeu_ps(scores + (size_t)j * stride + (size_t)b * VQ_VI_ROWS,
                             _mm512_mul_ps(_mm512_add_ps(a0[j], a1[j]), nv));
    }
}

T_AVX512 static void score_512(const vi_state *t, int nq, const float *const *lut, const uint8_t *blocks,
                               int n_blocks, size_t bb, float *scores) {
    const size_t stride = (size_t)n_blocks * VQ_VI_ROWS;
    for (int j0 = 0; j0 < nq; j0 += 4) {
        float *s = scores + (size_t)j0 * stride;
        switch (VQ_MIN(4, nq - j0)) {
        case 1: score_512_m(t, 1, lut + j0, blocks, n_blocks, bb, s, stride); break;
        case 2: score_512_m(t, 2, lut + j0, blocks, n_blocks, bb, s, stride); break;
        case 3: score_512_m(t, 3, lut + j0, blocks, n_blocks, bb, s, stride); break;
        default: score_512_m(t, 4, lut + j0, blocks, n_blocks, bb, s, stride); break;
        }
    }
}

/* m queries x 8 coordinates i0..i0+7 held in registers over every block: per block and coordinate
 * one permute (the coordinate's 16-entry table is the permute's memory operand), per query one FMA
 * into the coordinate's 16 lane sums; the 16 codes of a sub-vector are widened once per block */
T_AVX512 static INL void acc_512_m(const vi_state *t, const int m, const float *w, size_t wstride,
                                   const uint8_t *blocks, int n_blocks, size_t bb, float *const *acc,
                                   int i0) {
    __m512 a[3][8];
#pragma GCC unroll 3
    for (int j = 0; j < m; j++)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) a[j][k] = _mm512_loadu_ps(acc[j] + (size_t)(i0 + k) * VQ_VI_ROWS);
    const int s = t->sub;
    const float *tab = t->tab + (size_t)i0 * VQ_VI_CB;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *c = blocks + (size_t)b * bb;
        __m512 wv[3];
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) wv[j] = _mm512_loadu_ps(w + (size_t)j * wstride + (size_t)b * VQ_VI_ROWS);
        int last = -1;
        __m512i idx = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const int sv = (i0 + k) / s;
            if (sv != last) {
                idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + (size_t)(sv / 2) * 16)));
                if (sv & 1) idx = _mm512_srli_epi32(idx, 4);
                last = sv;
            }
            __m512 v = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(tab + k * VQ_VI_CB));
#pragma GCC unroll 3
            for (int j = 0; j < m; j++) a[j][k] = _mm512_fmadd_ps(wv[j], v, a[j][k]);
        }
    }
#pragma GCC unroll 3
    for (int j = 0; j < m; j++)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) _mm512_storeu_ps(acc[j] + (size_t)(i0 + k) * VQ_VI_ROWS, a[j][k]);
}

T_AVX512 static void acc_512(const vi_state *t, int nq, const float *w, const uint8_t *blocks,
                             int n_blocks, size_t bb, float *const *acc) {
    const size_t stride = (size_t)n_blocks * VQ_VI_ROWS;
    /* the call's codes (a page: 16 blocks, 4 KiB at d 64 and sub 2) are read once per pass of 8
     * coordinates: ask for all of them first, so the first pass does not stall block by block */
    for (size_t o = 0; o < (size_t)n_blocks * bb; o += 64) _mm_prefetch((const char *)(blocks + o), _MM_HINT_T0);
    if (!t->vnorm) {
        for (int j0 = 0; j0 < nq; j0 += 3)
            for (int i0 = 0; i0 < t->d; i0 += 8) {
                const float *wj = w + (size_t)j0 * stride;
                switch (VQ_MIN(3, nq - j0)) {
                case 1: acc_512_m(t, 1, wj, stride, blocks, n_blocks, bb, acc + j0, i0); break;
                case 2: acc_512_m(t, 2, wj, stride, blocks, n_blocks, bb, acc + j0, i0); break;
                default: acc_512_m(t, 3, wj, stride, blocks, n_blocks, bb, acc + j0, i0); break;
                }
            }
        return;
    }
    /* vnorm: the softmax weights times the rows' norms, formed once per chunk of up to 16 blocks
     * (not once per coordinate pass), then the same loop; each lane's FMA chain still runs block by
     * block in order, so the sums are those of the unchunked loop */
    __attribute__((aligned(64))) float wn[3][16 * VQ_VI_ROWS];
    for (int j0 = 0; j0 < nq; j0 += 3) {
        const int m = VQ_MIN(3, nq - j0);
        for (int b0 = 0; b0 < n_blocks; b0 += 16) {
            const int nb = VQ_MIN(16, n_blocks - b0);
            const uint8_t *cb0 = blocks + (size_t)b0 * bb;
            for (int b = 0; b < nb; b++) {
                const __m512 nv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(cb0 + (size_t)b * bb + t->nofs)));
                for (int j = 0; j < m; j++)
                    _mm512_store_ps(wn[j] + b * VQ_VI_ROWS,
                                    _mm512_mul_ps(_mm512_loadu_ps(w + (size_t)(j0 + j) * stride + (size_t)(b0 + b) * VQ_VI_ROWS), nv));
            }
            for (int i0 = 0; i0 < t->d; i0 += 8) {
                switch (m) {
                case 1: acc_512_m(t, 1, wn[0], 16 * VQ_VI_ROWS, cb0, nb, bb, acc + j0, i0); break;
                case 2: acc_512_m(t, 2, wn[0], 16 * VQ_VI_ROWS, cb0, nb, bb, acc + j0, i0); break;
                default: acc_512_m(t, 3, wn[0], 16 * VQ_VI_ROWS, cb0, nb, bb, acc + j0, i0); break;
                }
            }
        }
    }
}

/* ---------------- AVX2: 8 lanes, the 16-entry table as two permutes and a blend on bit 3 ------ */
T_AVX2 static INL __m256 look16_256(__m256i idx, __m256 lo, __m256 hi) {
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                            _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

T_AVX2 static void score_256(const vi_state *t, int nq, const float *const *lut, const uint8_t *blocks,
                             int n_blocks, size_t bb, float *scores) {
    const size_t stride = (size_t)n_blocks * VQ_VI_ROWS;
    const int np = t->M / 2;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *c = blocks + (size_t)b * bb;
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < nq; j++) {
                const float *L = lut[j];
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
                for (int p = 0; p < np; p++) {
                    __m256i raw = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(c + (size_t)p * 16 + 8 * h)));
                    __m256i hi = _mm256_srli_epi32(raw, 4);
                    const float *l0 = L + (2 * p) * VQ_VI_CB, *l1 = l0 + VQ_VI_CB;
                    a0 = _mm256_add_ps(a0, look16_256(raw, _mm256_loadu_ps(l0), _mm256_loadu_ps(l0 + 8)));
                    a1 = _mm256_add_ps(a1, look16_256(hi, _mm256_loadu_ps(l1), _mm256_loadu_ps(l1 + 8)));
                }
                __m256 s = _mm256_add_ps(a0, a1);
                if (t->vnorm) s = _mm256_mul_ps(s, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(c + t->nofs + 16 * h))));
                _mm256_storeu_ps(scores + (size_t)j * stride + (size_t)b * VQ_VI_ROWS + 8 * h, s);
            }
    }
}

T_AVX2 static void acc_256(const vi_state *t, int nq, const float *w, const uint8_t *blocks, int n_blocks,
                           size_t bb, float *const *acc) {
    const size_t stride = (size_t)n_blocks * VQ_VI_ROWS;
    for (size_t o = 0; o < (size_t)n_blocks * bb; o += 64) _mm_prefetch((const char *)(blocks + o), _MM_HINT_T0);
    for (int j = 0; j < nq; j++)
        for (int i0 = 0; i0 < t->d; i0 += 2)
            for (int h = 0; h < 2; h++) {
                __m256 tl[2], th[2], a[2];
                for (int k = 0; k < 2; k++) {
                    tl[k] = _mm256_loadu_ps(t->tab + (size_t)(i0 + k) * VQ_VI_CB);
                    th[k] = _mm256_loadu_ps(t->tab + (size_t)(i0 + k) * VQ_VI_CB + 8);
                    a[k] = _mm256_loadu_ps(acc[j] + (size_t)(i0 + k) * VQ_VI_ROWS + 8 * h);
                }
                for (int b = 0; b < n_blocks; b++) {
                    const uint8_t *c = blocks + (size_t)b * bb;
                    __m256 wv = _mm256_loadu_ps(w + (size_t)j * stride + (size_t)b * VQ_VI_ROWS + 8 * h);
                    if (t->vnorm) wv = _mm256_mul_ps(wv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(c + t->nofs + 16 * h))));
                    for (int k = 0; k < 2; k++) {
                        const int sv = (i0 + k) / t->sub;
                        __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(c + (size_t)(sv / 2) * 16 + 8 * h)));
                        if (sv & 1) idx = _mm256_srli_epi32(idx, 4);
                        a[k] = _mm256_fmadd_ps(wv, look16_256(idx, tl[k], th[k]), a[k]);
                    }
                }
                for (int k = 0; k < 2; k++) _mm256_storeu_ps(acc[j] + (size_t)(i0 + k) * VQ_VI_ROWS + 8 * h, a[k]);
            }
}

/* ---------------- the row's entry points ---------------- */
static void vi_score(const vq_codec_state *st, int n_q, const void *const *qs, const uint8_t *blocks,
                     int n_blocks, float *scores) {
    const vi_state *t = st->impl;
    const float *const *lut = (const float *const *)qs;
    if (t->isa >= VQ_ISA_AVX512) score_512(t, n_q, lut, blocks, n_blocks, st->block_bytes, scores);
    else if (t->isa == VQ_ISA_AVX2) score_256(t, n_q, lut, blocks, n_blocks, st->block_bytes, scores);
    else score_scalar(t, n_q, lut, blocks, n_blocks, st->block_bytes, scores);
}

static void vi_accumulate(const vq_codec_state *st, int n_q, const float *w, const uint8_t *blocks,
                          int n_blocks, float *const *acc) {
    const vi_state *t = st->impl;
    if (t->isa >= VQ_ISA_AVX512) acc_512(t, n_q, w, blocks, n_blocks, st->block_bytes, acc);
    else if (t->isa == VQ_ISA_AVX2) acc_256(t, n_q, w, blocks, n_blocks, st->block_bytes, acc);
    else acc_scalar(t, n_q, w, blocks, n_blocks, st->block_bytes, acc);
}

/* the codec domain: 16 lane sums per coordinate (lane = row mod 16) of the codewords; keys (the
 * contract's accumulate serves either side) go back through Πᵀ and λ as decode does */
static void vi_finish(const vq_codec_state *st, const float *acc, float *out) {
    const vi_state *t = st->impl;
    for (int i = 0; i < t->d; i++) {
        float s = 0;
        for (int l = 0; l < VQ_VI_ROWS; l++) s += acc[i * VQ_VI_ROWS + l];
        out[i] = s;
    }
    if (t->side == VQ_SIDE_K) {
        vq_rotation_apply_inverse(t->rot, out, out);
        for (int i = 0; i < t->d; i++) out[i] *= t->lam[i];
    }
}

const vq_codec vq_codec_vecinfer = {
    .name = "vecinfer",
    .params_help = "sub=1|2|4|8 (default and only allowed value: the calibration's sub-vector length "
                   "of this side), bits (k=/v=/bits=: must be 4/sub), vnorm=0|1 (default and only allowed "
                   "value: the file's; 1: values keep an fp16 norm a row, +16/d bits); needs calib=FILE with a VecInfer "
                   "section (`veloxquant calibrate --vecinfer K,V`); head_dim a multiple of 16",
    .per_head = 1, .needs_calib = 1,
    .init = vi_init, .fini = vi_fini, .encode = vi_encode, .decode = vi_decode,
    .prep_query = vi_prep, .score = vi_score, .accumulate = vi_accumulate, .finish = vi_finish,
};
