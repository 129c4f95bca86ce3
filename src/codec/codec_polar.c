/* codec_polar.c: the `polar` KV codec (PolarQuant, Han et al., arXiv 2502.02617). A row is zero-padded
 * to D = 2^k, rotated (randomized Hadamard), then turned into polar form level by level: level 1 pairs
 * coordinates into angles in [0, 2pi) and radii, each further level pairs radii into angles in [0, pi/2].
 * After L levels, D/2^L radii remain (stored); each level's angles get their own codebook and bit budget. */
#include "codec/codec.h"
#include "codec/bitpack.h"
#include "codec/rotation.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Angle laws (for a uniformly random direction, which is what a rotated row looks like): level 1 is
 * uniform on [0, 2pi), so its codebook is the uniform one (cell centres); a level-l angle (l >= 2) is
 * atan(|b|/|a|) for two independent 2^(l-1)-dim Gaussian blocks, density ~ sin^(2^(l-1)-1)(2 psi) on
 * [0, pi/2], concentrating at pi/4 as l grows. Those get Lloyd-Max codebooks built here at init. */
#define POLAR_MAX_LEVELS 12
#define POLAR_MAX_D 4096

typedef struct polar_level {
    int bits, n_angles;          /* n_angles = D / 2^l */
    size_t off, bytes;           /* where its packed codes live in the block */
    float cs[256], sn[256];      /* cos / sin of each centroid */
    float cent[256], bnd[256];   /* centroids and the n-1 midpoint boundaries (l >= 2) */
} polar_level;

typedef struct polar_impl {
    vq_rotation *rot;
    int D, L, n_radii, b1, bdeep, scale_f32;
    size_t radii_off;
    polar_level lv[POLAR_MAX_LEVELS + 1];   /* lv[1..L] */
} polar_impl;

extern const vq_codec vq_codec_polar;

/* Lloyd-Max for density ~ sin(2 psi)^(n-1) on [0, pi/2], on a fine midpoint grid (weighted 1-D k-means
 * with prefix sums). Grid error: cell width pi/2/16384 ~ 1e-4 rad, far below any 8-bit cell. */
static int angle_codebook(int n, int bits, float *cent, float *bnd) {
    enum { G = 16384 };
    const int K = 1 << bits;
    double *W = malloc(sizeof(double) * (G + 1)), *M = malloc(sizeof(double) * (G + 1));
    double c[256];
    if (!W || !M) {
        free(W);
        free(M);
        return -1;
    }
    const double h = (M_PI / 2) / G;
    W[0] = M[0] = 0.0;
    for (int g = 0; g < G; g++) {
        double psi = (g + 0.5) * h, s = sin(2 * psi);
        double w = n == 1 ? 1.0 : exp((n - 1) * log(s));   /* underflows to 0 far from pi/4: fine */
        W[g + 1] = W[g] + w;
        M[g + 1] = M[g] + w * psi;
    }
    /* start at the quantiles */
    for (int k = 0, g = 0; k < K; k++) {
        double target = (k + 0.5) / K * W[G];
        while (g < G - 1 && W[g + 1] < target) g++;
        c[k] = (g + 0.5) * h;
    }
    for (int it = 0; it < 300; it++) {
        double moved = 0.0;
        int lo = 0;
        for (int k = 0; k < K; k++) {
            int hi = G;   /* cells [lo, hi) map to centroid k */
            if (k < K - 1) {
                double b = 0.5 * (c[k] + c[k + 1]);
                hi = (int)floor(b / h + 0.5);
                if (hi < lo) hi = lo;
                if (hi > G) hi = G;
            }
            double w = W[hi] - W[lo];
            if (w > 0) {
                double nc = (M[hi] - M[lo]) / w;
                moved = fmax(moved, fabs(nc - c[k]));
                c[k] = nc;
            }
            lo = hi;
        }
        if (moved < 1e-12) break;
    }
    for (int k = 0; k < K; k++) cent[k] = (float)c[k];
    for (int k = 0; k + 1 < K; k++) bnd[k] = (float)(0.5 * (c[k] + c[k + 1]));
    free(W);
    free(M);
    return 0;
}

static vq_status polar_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                            uint64_t seed, vq_err *err) {
    const vq_codec *c = &vq_codec_polar;
    if (d < 2 || d > POLAR_MAX_D)
        return vq_err_set(err, VQ_ERR_ARG, "codec polar: row dimension d=%d out of range 2..%d", d, POLAR_MAX_D);
    vq_status s = vq_codec_params_check(c, p, np, "bits,deep,levels,scale", err);
    if (s) return s;
    int D = 1, lmax = 0;
    while (D < d) {
        D *= 2;
        lmax++;
    }
    int b1, bd, L;
    if ((s = vq_codec_param_int(c, p, np, "bits", 1, 8, 4, &b1, err))) return s;
    if ((s = vq_codec_param_int(c, p, np, "deep", 1, 8, 2, &bd, err))) return s;
    if ((s = vq_codec_param_int(c, p, np, "levels", 1, lmax, lmax < 4 ? lmax : 4, &L, err))) return s;
    int f32 = 0;
    const char *sc = vq_codec_param_get(p, np, "scale");
    if (sc && !strcmp(sc, "f32")) f32 = 1;
    else if (sc && strcmp(sc, "f16"))
        return vq_err_set(err, VQ_ERR_ARG, "codec polar: scale=%s must be f16 or f32 (%s)", sc, c->params_help);
    polar_impl *im = calloc(1, sizeof *im);
    if (!im) return vq_err_set(err, VQ_ERR_NOMEM, "codec polar: out of memory");
    st->impl = im;
    im->rot = vq_rotation_create_kind(D, seed, VQ_ROT_HADAMARD, err);
    if (!im->rot) return err ? err->code : VQ_ERR_ARG;
    im->D = D;
    im->L = L;
    im->b1 = b1;
    im->bdeep = bd;
    im->scale_f32 = f32;
    im->n_radii = D >> L;
    size_t off = 0;
    for (int l = 1; l <= L; l++) {
        polar_level *v = &im->lv[l];
        v->bits = l == 1 ? b1 : bd;
        v->n_angles = D >> l;
        v->off = off;
        v->bytes = vq_bitpack_bytes(v->bits, (size_t)v->n_angles);
        off += v->bytes;
        int K = 1 << v->bits;
        if (l == 1) {
            for (int k = 0; k < K; k++) v->cent[k] = (float)((k + 0.5) * 2 * M_PI / K);
        } else if (angle_codebook(1 << (l - 1), v->bits, v->cent, v->bnd)) {
            return vq_err_set(err, VQ_ERR_NOMEM, "codec polar: out of memory building level %d codebook", l);
        }
        for (int k = 0; k < K; k++) {
            v->cs[k] = (float)cos((double)v->cent[k]);
            v->sn[k] = (float)sin((double)v->cent[k]);
        }
    }
    im->radii_off = off;
    st->d = d;
    st->side = side;
    st->rows_per_block = 1;
    st->block_bytes = off + (size_t)im->n_radii * (f32 ? 4 : 2);
    /* qstate: rotated query (D floats), then the level-1 table T[i][k] = q'_2i cos t_k + q'_2i+1 sin t_k */
    st->qstate_bytes = ((size_t)D + (size_t)(D / 2) * (1u << b1)) * sizeof(float);
    st->acc_floats = D;   /* rotated coordinates */
    st->state_bytes = sizeof *im + (size_t)D * sizeof(float);   /* codebook tables + Hadamard signs */
    snprintf(st->params, sizeof st->params, "bits=%d,deep=%d,levels=%d,scale=%s", b1, bd, L, f32 ? "f32" : "f16");
    return VQ_OK;
}

static void polar_fini(vq_codec_state *st) {
    polar_impl *im = st->impl;
    if (im) {
        vq_rotation_free(im->rot);
        free(im);
    }
    st->impl = NULL;
}

static void put_radius(uint8_t *p, int f32, double v) {
    if (f32) {
        float f = (float)v;
        memcpy(p, &f, 4);
    } else {
        if (v > 65504.0) v = 65504.0;   /* saturate rather than inf; scale=f32 keeps such rows exact */
        vq_f16 h = vq_f32_to_f16((float)v);
        memcpy(p, &h, 2);
    }
}

static float get_radius(const uint8_t *p, int f32) {
    if (f32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    vq_f16 h;
    memcpy(&h, p, 2);
    return vq_f16_to_f32(h);
}

static void polar_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const polar_impl *im = st->impl;
    const int d = st->d, D = im->D;
    memset(block, 0, st->block_bytes);
    double n2 = 0.0;
    for (int i = 0; i < d; i++) n2 += (double)x[i] * x[i];
    double nrm = sqrt(n2);
    if (!isfinite(nrm)) {   /* NaN/inf row (the store rejects these): zero codes, NaN radii */
        for (int i = 0; i < im->n_radii; i++)
            put_radius(block + im->radii_off + (size_t)i * (im->scale_f32 ? 4 : 2), im->scale_f32, NAN);
        return;
    }
    float y[POLAR_MAX_D], r[POLAR_MAX_D / 2];
    uint8_t codes[POLAR_MAX_D / 2];
    double inv = nrm > 0.0 ? 1.0 / nrm : 0.0;   /* work on the unit vector: no overflow, no underflow */
    for (int i = 0; i < D; i++) y[i] = i < d ? (float)(x[i] * inv) : 0.0f;
    vq_rotation_apply(im->rot, y, y);
    /* level 1: coordinates -> angles in [0, 2pi), uniform cells */
    const polar_level *v = &im->lv[1];
    const int K1 = 1 << v->bits;
    for (int i = 0; i < D / 2; i++) {
        double a = y[2 * i], b = y[2 * i + 1];
        double t = atan2(b, a);
        if (t < 0) t += 2 * M_PI;
        int k = (int)(t * (K1 / (2 * M_PI)));
        codes[i] = (uint8_t)(k < 0 ? 0 : k >= K1 ? K1 - 1 : k);
        r[i] = (float)sqrt(a * a + b * b);
    }
    vq_bitpack_pack(v->bits, codes, (size_t)v->n_angles, block + v->off);
    /* deeper levels: radii -> angles in [0, pi/2], Lloyd-Max cells */
    for (int l = 2; l <= im->L; l++) {
        v = &im->lv[l];
        const int K = 1 << v->bits;
        for (int i = 0; i < v->n_angles; i++) {
            double a = r[2 * i], b = r[2 * i + 1];
            float t = (float)atan2(b, a);   /* both >= 0: t in [0, pi/2] */
            int k = 0;
            while (k < K - 1 && t > v->bnd[k]) k++;
            codes[i] = (uint8_t)k;
            r[i] = (float)sqrt(a * a + b * b);
        }
        vq_bitpack_pack(v->bits, codes, (size_t)v->n_angles, block + v->off);
    }
    for (int i = 0; i < im->n_radii; i++)
        put_radius(block + im->radii_off + (size_t)i * (im->scale_f32 ? 4 : 2), im->scale_f32, r[i] * nrm);
}

/* One code of a level (bit stream as in bitpack.h); the common widths without the generic path. */
static inline unsigned code_at(int bits, const uint8_t *p, int i) {
    if (bits == 2) return (p[i >> 2] >> ((i & 3) * 2)) & 3u;
    if (bits == 4) return (p[i >> 1] >> ((i & 1) * 4)) & 15u;
    if (bits == 8) return p[i];
    return vq_bitpack_get(bits, p, (size_t)i);
}

/* From the block, the level-1 radii (D/2 of them) and level-1 codes: walk the angle tree top-down. */
static void level1(const polar_impl *im, const uint8_t *block, float *r, uint8_t *c1) {
    float buf[2][POLAR_MAX_D / 2];
    const int rb = im->scale_f32 ? 4 : 2;
    float *cur = im->L >= 2 ? buf[im->L & 1] : r;
    for (int i = 0; i < im->n_radii; i++) cur[i] = get_radius(block + im->radii_off + (size_t)i * rb, im->scale_f32);
    for (int l = im->L; l >= 2; l--) {
        const polar_level *v = &im->lv[l];
        const uint8_t *p = block + v->off;
        float *nxt = l == 2 ? r : buf[(l - 1) & 1];
        for (int i = 0; i < v->n_angles; i++) {
            unsigned c = code_at(v->bits, p, i);
            nxt[2 * i] = cur[i] * v->cs[c];
            nxt[2 * i + 1] = cur[i] * v->sn[c];
        }
        cur = nxt;
    }
    const polar_level *v1 = &im->lv[1];
    for (int i = 0; i < v1->n_angles; i++) c1[i] = (uint8_t)code_at(v1->bits, block + v1->off, i);
}

/* the row in rotated coordinates (D floats) */
static void rotated_row(const polar_impl *im, const uint8_t *block, float *y) {
    float r[POLAR_MAX_D / 2];
    uint8_t c1[POLAR_MAX_D / 2];
    level1(im, block, r, c1);
    const polar_level *v = &im->lv[1];
    for (int i = 0; i < im->D / 2; i++) {
        y[2 * i] = r[i] * v->cs[c1[i]];
        y[2 * i + 1] = r[i] * v->sn[c1[i]];
    }
}

static void polar_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const polar_impl *im = st->impl;
    float y[POLAR_MAX_D];
    rotated_row(im, block, y);
    vq_rotation_apply_inverse(im->rot, y, y);
    memcpy(x, y, sizeof(float) * (size_t)st->d);
}

static void polar_prep_query(const vq_codec_state *st, const float *q, void *qstate) {
    const polar_impl *im = st->impl;
    float *y = qstate, *T = y + im->D;
    const polar_level *v = &im->lv[1];
    const int K1 = 1 << v->bits;
    for (int i = 0; i < im->D; i++) y[i] = i < st->d ? q[i] : 0.0f;
    vq_rotation_apply(im->rot, y, y);
    for (int i = 0; i < im->D / 2; i++)
        for (int k = 0; k < K1; k++) T[i * K1 + k] = y[2 * i] * v->cs[k] + y[2 * i + 1] * v->sn[k];
}

/* score = sum_i r_i T[i][c1_i]: the tree gives the level-1 radii, one table read per pair */
static void polar_score(const vq_codec_state *st, int n_q, const void *const *qstates, const uint8_t *blocks,
                        int n_blocks, float *scores) {
    const polar_impl *im = st->impl;
    const int half = im->D / 2, K1 = 1 << im->lv[1].bits;
    float r[POLAR_MAX_D / 2];
    uint8_t c1[POLAR_MAX_D / 2];
    for (int b = 0; b < n_blocks; b++) {
        level1(im, blocks + (size_t)b * st->block_bytes, r, c1);
        for (int j = 0; j < n_q; j++) {
            const float *T = (const float *)qstates[j] + im->D;
            float s = 0.0f;
            for (int i = 0; i < half; i++) s += r[i] * T[i * K1 + c1[i]];
            scores[(size_t)j * n_blocks + b] = s;
        }
    }
}

static void polar_accumulate(const vq_codec_state *st, int n_q, const float *w, const uint8_t *blocks,
                             int n_blocks, float *const *acc) {
    const polar_impl *im = st->impl;
    float y[POLAR_MAX_D];
    for (int b = 0; b < n_blocks; b++) {
        int any = 0;
        for (int j = 0; j < n_q; j++) any |= w[(size_t)j * n_blocks + b] != 0.0f;
        if (!any) continue;
        rotated_row(im, blocks + (size_t)b * st->block_bytes, y);
        for (int j = 0; j < n_q; j++) {
            float wj = w[(size_t)j * n_blocks + b];
            if (wj == 0.0f) continue;
            float *a = acc[j];
            for (int i = 0; i < im->D; i++) a[i] += wj * y[i];
        }
    }
}

static void polar_finish(const vq_codec_state *st, const float *acc, float *out) {
    const polar_impl *im = st->impl;
    float y[POLAR_MAX_D];
    vq_rotation_apply_inverse(im->rot, acc, y);
    memcpy(out, y, sizeof(float) * (size_t)st->d);
}

const vq_codec vq_codec_polar = {
    .name = "polar",
    .params_help = "bits=1..8 level-1 angle bits (default 4), deep=1..8 bits of deeper-level angles (default 2), "
                   "levels=1..log2(D) polar levels (default 4; D = d rounded up to 2^k, D/2^levels radii stored), "
                   "scale=f16|f32 radius storage (default f16)",
    .init = polar_init,
    .fini = polar_fini,
    .encode = polar_encode,
    .decode = polar_decode,
    .prep_query = polar_prep_query,
    .score = polar_score,
    .accumulate = polar_accumulate,
    .finish = polar_finish,
};
