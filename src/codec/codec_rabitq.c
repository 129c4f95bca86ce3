/* codec_rabitq.c: the `rabitq` KV codec (Gao & Long, arXiv 2405.12497; extended bits arXiv 2409.09913).
 * A row x is normalized (zero centroid: a KV head's mean is unknown when rows arrive), rotated, and
 * snapped to the B-bit grid ybar in {-(2^B-1)/2 .. (2^B-1)/2}^d at the rescaling that maximizes
 * cos(ybar, o'); <x, q> is estimated as |x| <ybar, Pq> / <ybar, o'>, unbiased over the random rotation. */
#include "codec/codec.h"
#include "codec/qjl.h"
#include "codec/rotation.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Block: B bit-planes of dp = roundup(d, 8) bits (plane b holds bit b of each code u_i, LSB-first
 * bytes), then the factor f = |x| / <ybar, o'> as fp16 (default) or fp32. The code u_i in [0, 2^B)
 * stands for ybar_i = u_i - (2^B - 1)/2 = sum_b 2^(b-1) (2 bit_b - 1), so every score and sum is a
 * weighted set of 1-bit sign dots: the same masked-sum kernels as qjl, B times. */
typedef struct rabitq_impl {
    vq_rotation *rot;
    int bits, dp, scale_f32;
    size_t plane_bytes;
    vq_masked_sum_fn ms;
    vq_signed_add_fn sa;
} rabitq_impl;

extern const vq_codec vq_codec_rabitq;

static void put_scale(uint8_t *p, int f32, double v) {
    if (f32) {
        float f = (float)v;
        memcpy(p, &f, 4);
    } else {
        if (v > 65504.0) v = 65504.0;   /* saturate rather than inf; scale=f32 keeps such rows exact */
        vq_f16 h = vq_f32_to_f16((float)v);
        memcpy(p, &h, 2);
    }
}

static float get_scale(const uint8_t *p, int f32) {
    if (f32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    vq_f16 h;
    memcpy(&h, p, 2);
    return vq_f16_to_f32(h);
}

/* bytes a rotation holds (rotation.c: Hadamard keeps d signs, dense keeps P and its transpose) */
static size_t rotation_bytes(const vq_rotation *r) {
    size_t d = (size_t)vq_rotation_dim(r);
    return vq_rotation_kind(r) == VQ_ROT_DENSE ? 2 * d * d * sizeof(float) : d * sizeof(float);
}

static vq_status rabitq_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                             uint64_t seed, vq_err *err) {
    const vq_codec *c = &vq_codec_rabitq;
    if (d <= 0 || d > 4096)
        return vq_err_set(err, VQ_ERR_ARG, "codec rabitq: row dimension d=%d out of range 1..4096", d);
    vq_status s = vq_codec_params_check(c, p, np, "bits,scale,rot", err);
    if (s) return s;
    int bits = 1;
    if ((s = vq_codec_param_int(c, p, np, "bits", 1, 8, 1, &bits, err))) return s;
    int f32 = 0;
    const char *sc = vq_codec_param_get(p, np, "scale");
    if (sc && !strcmp(sc, "f32")) f32 = 1;
    else if (sc && strcmp(sc, "f16"))
        return vq_err_set(err, VQ_ERR_ARG, "codec rabitq: scale=%s must be f16 or f32 (%s)", sc, c->params_help);
    vq_rot_kind kind = VQ_ROT_AUTO;
    const char *rk = vq_codec_param_get(p, np, "rot");
    if (rk && !strcmp(rk, "dense")) kind = VQ_ROT_DENSE;
    else if (rk && !strcmp(rk, "hadamard")) kind = VQ_ROT_HADAMARD;
    else if (rk && strcmp(rk, "auto"))
        return vq_err_set(err, VQ_ERR_ARG, "codec rabitq: rot=%s must be auto, hadamard or dense (%s)", rk,
                          c->params_help);
    rabitq_impl *im = calloc(1, sizeof *im);
    if (!im) return vq_err_set(err, VQ_ERR_NOMEM, "codec rabitq: out of memory");
    st->impl = im;
    im->rot = vq_rotation_create_kind(d, seed, kind, err);
    if (!im->rot) return err ? err->code : VQ_ERR_ARG;
    im->bits = bits;
    im->dp = (d + 7) / 8 * 8;
    im->plane_bytes = (size_t)im->dp / 8;
    im->scale_f32 = f32;
    im->ms = vq_masked_sum_best();
    im->sa = vq_signed_add_best();
    st->d = d;
    st->side = side;
    st->rows_per_block = 1;
    st->block_bytes = (size_t)bits * im->plane_bytes + (f32 ? 4 : 2);
    st->qstate_bytes = ((size_t)im->dp + 1) * sizeof(float);   /* P q (zero-padded to dp), sum of it */
    st->acc_floats = im->dp;                                   /* rotated coordinates */
    st->state_bytes = sizeof *im + rotation_bytes(im->rot);
    snprintf(st->params, sizeof st->params, "bits=%d,scale=%s,rot=%s", bits, f32 ? "f32" : "f16",
             kind == VQ_ROT_AUTO ? "auto" : kind == VQ_ROT_DENSE ? "dense" : "hadamard");
    return VQ_OK;
}

static void rabitq_fini(vq_codec_state *st) {
    rabitq_impl *im = st->impl;
    if (im) {
        vq_rotation_free(im->rot);
        free(im);
    }
    st->impl = NULL;
}

typedef struct ev { float t; int i; } ev;
static int ev_cmp(const void *a, const void *b) {
    const ev *x = a, *y = b;
    if (x->t < y->t) return -1;
    if (x->t > y->t) return 1;
    return x->i - y->i;
}

/* Per coordinate magnitude index k_i in [0, K) (|ybar_i| = k_i + 1/2) maximizing
 * sum (k_i + 1/2) a_i / sqrt(sum (k_i + 1/2)^2), a_i = |o'_i|. The code for a rescaling t is
 * k_i = min(K-1, floor(t a_i)); it changes only at t = k / a_i, so walking those events in order
 * visits every distinct code (arXiv 2409.09913, the critical-value enumeration). */
static void best_grid(const float *a, int d, int K, uint8_t *k) {
    memset(k, 0, (size_t)d);
    if (K == 1) return;
    size_t ne = 0, cap = (size_t)d * (size_t)(K - 1);
    ev *e = malloc(cap * sizeof *e);
    if (!e) return;   /* out of memory: fall back to the 1-bit code (still a valid, unbiased code) */
    for (int i = 0; i < d; i++)
        if (a[i] > 0.0f)
            for (int j = 1; j < K; j++) e[ne++] = (ev){(float)j / a[i], i};
    qsort(e, ne, sizeof *e, ev_cmp);
    double dot = 0.0, nn = 0.25 * d;
    for (int i = 0; i < d; i++) dot += 0.5 * a[i];
    double best = dot / sqrt(nn);
    size_t best_n = 0;
    for (size_t n = 0; n < ne; n++) {
        int i = e[n].i;
        dot += a[i];
        nn += 2.0 * k[i] + 2.0;   /* (k + 3/2)^2 - (k + 1/2)^2 */
        k[i]++;
        double cs = dot / sqrt(nn);
        if (cs > best) {
            best = cs;
            best_n = n + 1;
        }
    }
    memset(k, 0, (size_t)d);
    for (size_t n = 0; n < best_n; n++) k[e[n].i]++;
    free(e);
}

static void rabitq_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const rabitq_impl *im = st->impl;
    const int d = st->d, B = im->bits, K = 1 << (B - 1);
    uint8_t *sc = block + (size_t)B * im->plane_bytes;
    memset(block, 0, st->block_bytes);
    double n2 = 0.0;
    for (int i = 0; i < d; i++) n2 += (double)x[i] * x[i];
    double nrm = sqrt(n2);
    if (!isfinite(nrm)) {   /* NaN/inf row (the store rejects these): zero codes, NaN factor */
        put_scale(sc, im->scale_f32, NAN);
        return;
    }
    if (nrm == 0.0) {   /* zero row: any code with factor 0 decodes to exactly 0 */
        put_scale(sc, im->scale_f32, 0.0);
        return;
    }
    float o[4096], a[4096];
    uint8_t k[4096];
    for (int i = 0; i < d; i++) o[i] = (float)(x[i] / nrm);
    vq_rotation_apply(im->rot, o, o);
    for (int i = 0; i < d; i++) a[i] = fabsf(o[i]);
    best_grid(a, d, K, k);
    double ip = 0.0;   /* <ybar, o'> = sum (k_i + 1/2) |o'_i| > 0 */
    for (int i = 0; i < d; i++) {
        ip += (k[i] + 0.5) * a[i];
        unsigned u = o[i] >= 0.0f ? (unsigned)(K + k[i]) : (unsigned)(K - 1 - k[i]);
        for (int b = 0; b < B; b++)
            if ((u >> b) & 1) block[(size_t)b * im->plane_bytes + (i >> 3)] |= (uint8_t)(1u << (i & 7));
    }
    put_scale(sc, im->scale_f32, ip > 0.0 ? nrm / ip : 0.0);
}

/* ybar_i from the planes */
static float ybar(const uint8_t *block, size_t plane_bytes, int B, int i) {
    unsigned u = 0;
    for (int b = 0; b < B; b++) u |= (unsigned)((block[(size_t)b * plane_bytes + (i >> 3)] >> (i & 7)) & 1) << b;
    return (float)u - 0.5f * (float)((1 << B) - 1);
}

static void rabitq_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const rabitq_impl *im = st->impl;
    float f = get_scale(block + (size_t)im->bits * im->plane_bytes, im->scale_f32);
    float y[4096];
    for (int i = 0; i < st->d; i++) y[i] = f * ybar(block, im->plane_bytes, im->bits, i);
    vq_rotation_apply_inverse(im->rot, y, x);
}

static void rabitq_prep_query(const vq_codec_state *st, const float *q, void *qstate) {
    const rabitq_impl *im = st->impl;
    float *y = qstate;
    vq_rotation_apply(im->rot, q, y);
    float t = 0.0f;
    for (int i = st->d; i < im->dp; i++) y[i] = 0.0f;
    for (int i = 0; i < st->d; i++) t += y[i];
    y[im->dp] = t;
}

static void rabitq_score(const vq_codec_state *st, int n_q, const void *const *qstates, const uint8_t *blocks,
                         int n_blocks, float *scores) {
    const rabitq_impl *im = st->impl;
    const int B = im->bits, dp = im->dp;
    for (int r = 0; r < n_blocks; r++) {
        const uint8_t *b = blocks + (size_t)r * st->block_bytes;
        float f = get_scale(b + (size_t)B * im->plane_bytes, im->scale_f32);
        for (int j = 0; j < n_q; j++) {
            const float *y = qstates[j];
            float s = 0.0f;
            for (int p = 0; p < B; p++)
                s += (float)(1 << p) * vq_sign_dot(im->ms, y, y[dp], b + (size_t)p * im->plane_bytes, dp);
            scores[(size_t)j * n_blocks + r] = 0.5f * f * s;
        }
    }
}

static void rabitq_accumulate(const vq_codec_state *st, int n_q, const float *w, const uint8_t *blocks,
                              int n_blocks, float *const *acc) {
    const rabitq_impl *im = st->impl;
    const int B = im->bits;
    for (int r = 0; r < n_blocks; r++) {
        const uint8_t *b = blocks + (size_t)r * st->block_bytes;
        float f = get_scale(b + (size_t)B * im->plane_bytes, im->scale_f32);
        for (int j = 0; j < n_q; j++) {
            float wf = w[(size_t)j * n_blocks + r] * f;
            if (wf == 0.0f) continue;
            for (int p = 0; p < B; p++)
                im->sa(acc[j], 0.5f * (float)(1 << p) * wf, b + (size_t)p * im->plane_bytes, im->dp);
        }
    }
}

static void rabitq_finish(const vq_codec_state *st, const float *acc, float *out) {
    const rabitq_impl *im = st->impl;
    vq_rotation_apply_inverse(im->rot, acc, out);   /* reads acc[0..d): padding lanes carry no signal */
}

const vq_codec vq_codec_rabitq = {
    .name = "rabitq",
    .params_help = "bits=1..8 code bits per coordinate (default 1), scale=f16|f32 factor storage (default f16), "
                   "rot=auto|hadamard|dense rotation (default auto: Hadamard for d = 2^k, dense Haar otherwise)",
    .init = rabitq_init,
    .fini = rabitq_fini,
    .encode = rabitq_encode,
    .decode = rabitq_decode,
    .prep_query = rabitq_prep_query,
    .score = rabitq_score,
    .accumulate = rabitq_accumulate,
    .finish = rabitq_finish,
};
