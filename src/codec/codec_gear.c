/* codec_gear.c: GEAR (Kang et al., arXiv 2403.05527): any quantizer of the table (base=), plus a
 * low-rank approximation of its error, plus a sparse residual of the largest errors left.
 * Per block of B rows (group=B) of one KV head: X̂_base = the base codec's decode of its codes
 * of X; E = X − X̂_base; E ≈ A Fᵀ, rank R (rank=R): F the top R right singular directions of
 * this block's E, A = E F (power iteration with deflation, in double, on the factors as stored:
 * fp16); then per row the k = round(sparse·d) entries of largest |E − A Fᵀ| are stored exactly
 * (fp16) with their channel. x̂ = x̂_base + A_t Fᵀ + sparse_t.
 * This is GEAR's streaming variant at its simplest: the factors are computed when a block of B
 * rows fills (the store keeps the newest rows exact until then, like KIVI's keys), once, from
 * that block alone; nothing is trained, nothing is recomputed later. (The paper orders the
 * outlier filter before the quantizer; here the sparse part is a residual after both, so every
 * stored entry lowers the error: docs/codecs-lowrank.md.)
 * Block: [B/rb base blocks][A: B x R fp16][F: R x d fp16][per row: k u8 channels][per row: k
 * fp16 values]; every byte counted, bits = block bytes · 8 / (B·d).
 * Attention on the codes: score = the base codec's score (its own kernels) + Σ_k A_tk (q·F_k) +
 * Σ_sparse q_c·e; values: the base accumulates in its domain, the rest in a d-float tail of the
 * accumulator (Σ_t w_t A_t, mapped by F once per block, plus the sparse entries); finish = the
 * base's finish + the tail. One state per KV head (per_head = 1): a calibrated base gets its head. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec/codec.h"

#define GEAR_MAX_D 256   /* sparse channels are one byte */
#define GEAR_MAX_R 16

typedef struct gear {
    vq_codec_state base;
    int d, B, R, k, nbb;        /* rows per block, rank, sparse per row, base blocks per block */
    size_t off_a, off_f, off_i, off_v;
    size_t q_off;               /* the raw query's offset in the qstate (after the base's) */
    int acc0;                   /* the base's accumulator floats (the tail starts there) */
} gear;

static float ld16(const uint8_t *p) { vq_f16 h; memcpy(&h, p, 2); return vq_f16_to_f32(h); }
static float r16(double x) { return vq_f16_to_f32(vq_f32_to_f16((float)fmax(-65504.0, fmin(65504.0, x)))); }
static void st16(uint8_t *p, float x) { vq_f16 h = vq_f32_to_f16(x); memcpy(p, &h, 2); }

static void gear_fini(vq_codec_state *st) {
    gear *t = st->impl;
    if (!t) return;
    if (t->base.codec) t->base.codec->fini(&t->base);
    free(t);
    st->impl = NULL;
}

static vq_status gear_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                           uint64_t seed, vq_err *err) {
    const vq_codec *c = st->codec;
    const char *bn = vq_codec_param_get(p, np, "base");
    if (!bn) bn = "q4_0";
    const vq_codec *bc = vq_codec_find(bn);
    if (!bc || bc == c)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: base=%s is not a codec of the table (any codec but gear; %s)",
                          c->name, bn, c->params_help);
    int R, B, k;
    vq_status s;
    if ((s = vq_codec_param_int(c, p, np, "rank", 0, GEAR_MAX_R, 2, &R, err))) return s;
    if ((s = vq_codec_param_int(c, p, np, "group", 1, 1024, 64, &B, err))) return s;
    double sp = 0.02;
    const char *sv = vq_codec_param_get(p, np, "sparse");
    if (sv) {
        char *end;
        sp = strtod(sv, &end);
        if (end == sv || *end || !(sp >= 0.0 && sp <= 0.5))
            return vq_err_set(err, VQ_ERR_ARG, "codec %s: sparse=%s is not a fraction in 0..0.5 (%s)", c->name, sv, c->params_help);
    }
    if (d > GEAR_MAX_D)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: head_dim %d above %d (sparse channels are one byte)", c->name, d, GEAR_MAX_D);
    if (R > d) return vq_err_set(err, VQ_ERR_ARG, "codec %s: rank=%d above head_dim %d", c->name, R, d);
    k = (int)floor(sp * d + 0.5);
    /* the base's parameters: every one but gear's own */
    vq_codec_param bp[16];
    int nb = 0;
    for (int i = 0; i < np; i++) {
        if (!strcmp(p[i].key, "base") || !strcmp(p[i].key, "rank") || !strcmp(p[i].key, "group") ||
            !strcmp(p[i].key, "sparse"))
            continue;
        if (nb == 16) return vq_err_set(err, VQ_ERR_ARG, "codec %s: too many base parameters", c->name);
        bp[nb++] = p[i];
    }
    gear *t = calloc(1, sizeof *t);
    if (!t) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", c->name);
    st->impl = t;
    t->base.codec = bc;
    t->base.side = side;
    t->base.ctx = st->ctx;
    vq_err e2;
    vq_err_clear(&e2);
    if ((s = bc->init(&t->base, d, side, bp, nb, seed ^ 0x9e3779b97f4a7c15ull, &e2)))
        return vq_err_set(err, s, "codec %s, base=%s: %s", c->name, bn, e2.msg);
    const int rb = t->base.rows_per_block;
    if (B % rb)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: group=%d is not a multiple of base=%s's %d rows per block",
                          c->name, B, bn, rb);
    t->d = d;
    t->B = B;
    t->R = R;
    t->k = k;
    t->nbb = B / rb;
    t->off_a = (size_t)t->nbb * t->base.block_bytes;
    t->off_f = t->off_a + 2 * (size_t)B * R;
    t->off_i = t->off_f + 2 * (size_t)R * d;
    t->off_v = t->off_i + (size_t)B * k;
    t->q_off = (t->base.qstate_bytes + 63) / 64 * 64;
    t->acc0 = t->base.acc_floats;
    st->d = d;
    st->rows_per_block = B;
    st->block_bytes = t->off_v + 2 * (size_t)B * k;
    st->qstate_bytes = t->q_off + sizeof(float) * (size_t)d;
    st->acc_floats = t->acc0 + d;
    st->fp_window = t->base.fp_window;
    st->state_bytes = sizeof *t + t->base.state_bytes;
    char txt[320];
    const int n = snprintf(txt, sizeof txt, "base=%s,rank=%d,group=%d,sparse=%g%s%s", bn, R, B, sp,
                           t->base.params[0] ? "," : "", t->base.params);
    if (n < 0 || n >= (int)sizeof st->params)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: parameters too long (%s)", c->name, txt);
    memcpy(st->params, txt, (size_t)n + 1);
    return VQ_OK;
}

static void gear_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const gear *t = st->impl;
    const int d = t->d, B = t->B, R = t->R, k = t->k, rb = t->base.rows_per_block;
    const size_t bb = t->base.block_bytes;
    float *xh = malloc(sizeof(float) * (size_t)B * d);
    double *E = malloc(sizeof(double) * (size_t)B * d), u[1024], v[GEAR_MAX_D];
    if (!xh || !E) {   /* no memory for the correction: the base's codes alone, a valid block
                        * whose factors and sparse values are zero (it decodes to the base) */
        free(xh);
        free(E);
        for (int b = 0; b < t->nbb; b++)
            t->base.codec->encode(&t->base, x + (size_t)b * rb * d, block + (size_t)b * bb);
        memset(block + t->off_a, 0, st->block_bytes - t->off_a);
        return;
    }
    for (int b = 0; b < t->nbb; b++) {
        t->base.codec->encode(&t->base, x + (size_t)b * rb * d, block + (size_t)b * bb);
        t->base.codec->decode(&t->base, block + (size_t)b * bb, xh + (size_t)b * rb * d);
    }
    for (size_t i = 0; i < (size_t)B * d; i++) E[i] = (double)x[i] - xh[i];
    for (int r = 0; r < R; r++) {   /* the top singular pair of E, then E -= a fᵀ (as stored) */
        int best = 0;
        double bn = -1;
        for (int ti = 0; ti < B; ti++) {
            double n2 = 0;
            for (int i = 0; i < d; i++) n2 += E[(size_t)ti * d + i] * E[(size_t)ti * d + i];
            if (n2 > bn) { bn = n2; best = ti; }
        }
        for (int i = 0; i < d; i++) v[i] = E[(size_t)best * d + i];   /* start: the largest row */
        for (int it = 0; it < 30; it++) {
            double nv = 0;
            for (int i = 0; i < d; i++) nv += v[i] * v[i];
            if (nv <= 0) break;
            nv = 1.0 / sqrt(nv);
            for (int i = 0; i < d; i++) v[i] *= nv;
            for (int ti = 0; ti < B; ti++) {
                double a = 0;
                for (int i = 0; i < d; i++) a += E[(size_t)ti * d + i] * v[i];
                u[ti] = a;
            }
            for (int i = 0; i < d; i++) v[i] = 0;
            for (int ti = 0; ti < B; ti++)
                for (int i = 0; i < d; i++) v[i] += u[ti] * E[(size_t)ti * d + i];
        }
        double nv = 0;
        for (int i = 0; i < d; i++) nv += v[i] * v[i];
        nv = nv > 0 ? 1.0 / sqrt(nv) : 0.0;
        for (int i = 0; i < d; i++) {
            v[i] = r16(v[i] * nv);
            st16(block + t->off_f + 2 * ((size_t)r * d + i), (float)v[i]);
        }
        double fn = 0;
        for (int i = 0; i < d; i++) fn += v[i] * v[i];
        for (int ti = 0; ti < B; ti++) {
            double a = 0;
            for (int i = 0; i < d; i++) a += E[(size_t)ti * d + i] * v[i];
            const float af = r16(fn > 0 ? a / fn : 0.0);
            st16(block + t->off_a + 2 * ((size_t)ti * R + r), af);
            for (int i = 0; i < d; i++) E[(size_t)ti * d + i] -= (double)af * v[i];
        }
    }
    for (int ti = 0; ti < B; ti++) {   /* the k largest |E| of the row, exactly (fp16), in channel order */
        double *e = E + (size_t)ti * d;
        uint8_t *ix = block + t->off_i + (size_t)ti * k;
        int n = 0;
        for (int j = 0; j < k; j++) {
            int bi = -1;
            for (int i = 0; i < d; i++) {
                int used = 0;
                for (int m = 0; m < n; m++) used |= ix[m] == i;
                if (!used && (bi < 0 || fabs(e[i]) > fabs(e[bi]))) bi = i;
            }
            ix[n++] = (uint8_t)bi;
        }
        for (int a = 1; a < k; a++)   /* sort the channels ascending */
            for (int b = a; b > 0 && ix[b - 1] > ix[b]; b--) { uint8_t tmp = ix[b]; ix[b] = ix[b - 1]; ix[b - 1] = tmp; }
        for (int j = 0; j < k; j++) st16(block + t->off_v + 2 * ((size_t)ti * k + j), r16(e[ix[j]]));
    }
    free(xh);
    free(E);
}

/* the correction of row ti (low rank + sparse) added to y (d floats) */
static void add_corr(const gear *t, const uint8_t *block, int ti, float *y) {
    const int d = t->d, R = t->R, k = t->k;
    for (int r = 0; r < R; r++) {
        const float a = ld16(block + t->off_a + 2 * ((size_t)ti * R + r));
        for (int i = 0; i < d; i++) y[i] += a * ld16(block + t->off_f + 2 * ((size_t)r * d + i));
    }
    for (int j = 0; j < k; j++)
        y[block[t->off_i + (size_t)ti * k + j]] += ld16(block + t->off_v + 2 * ((size_t)ti * k + j));
}

static void gear_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const gear *t = st->impl;
    const int d = t->d, rb = t->base.rows_per_block;
    for (int b = 0; b < t->nbb; b++)
        t->base.codec->decode(&t->base, block + (size_t)b * t->base.block_bytes, x + (size_t)b * rb * d);
    for (int ti = 0; ti < t->B; ti++) add_corr(t, block, ti, x + (size_t)ti * d);
}

static void gear_prep(const vq_codec_state *st, const float *q, void *qs) {
    const gear *t = st->impl;
    t->base.codec->prep_query(&t->base, q, qs);
    memcpy((uint8_t *)qs + t->q_off, q, sizeof(float) * (size_t)t->d);
}

static void gear_score(const vq_codec_state *st, int n_q, const void *const *qs, const uint8_t *blocks,
                       int n_blocks, float *scores) {
    const gear *t = st->impl;
    const int d = t->d, B = t->B, R = t->R, k = t->k;
    const size_t n_rows = (size_t)n_blocks * B;
    float F[GEAR_MAX_R * GEAR_MAX_D], qf[GEAR_MAX_R];
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * st->block_bytes;
        for (int i = 0; i < R * d; i++) F[i] = ld16(blk + t->off_f + 2 * (size_t)i);
        for (int j = 0; j < n_q; j++) {
            float *sc = scores + (size_t)j * n_rows + (size_t)b * B;
            t->base.codec->score(&t->base, 1, &qs[j], blk, t->nbb, sc);   /* the base's kernels */
            const float *q = (const float *)(const void *)((const uint8_t *)qs[j] + t->q_off);
            for (int r = 0; r < R; r++) {
                float a = 0;
                for (int i = 0; i < d; i++) a += q[i] * F[r * d + i];
                qf[r] = a;
            }
            for (int ti = 0; ti < B; ti++) {
                float a = 0;
                for (int r = 0; r < R; r++) a += ld16(blk + t->off_a + 2 * ((size_t)ti * R + r)) * qf[r];
                for (int m = 0; m < k; m++)
                    a += q[blk[t->off_i + (size_t)ti * k + m]] * ld16(blk + t->off_v + 2 * ((size_t)ti * k + m));
                sc[ti] += a;
            }
        }
    }
}

static void gear_accumulate(const vq_codec_state *st, int n_q, const float *w, const uint8_t *blocks,
                            int n_blocks, float *const *acc) {
    const gear *t = st->impl;
    const int d = t->d, B = t->B, R = t->R, k = t->k;
    const size_t n_rows = (size_t)n_blocks * B;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * st->block_bytes;
        for (int j = 0; j < n_q; j++) {
            const float *wj = w + (size_t)j * n_rows + (size_t)b * B;
            int any = 0;
            for (int ti = 0; ti < B; ti++) any |= wj[ti] != 0.0f;
            if (!any) continue;
            float *const aj[1] = { acc[j] };
            t->base.codec->accumulate(&t->base, 1, wj, blk, t->nbb, aj);
            float *tail = acc[j] + t->acc0, c[GEAR_MAX_R] = {0};
            for (int ti = 0; ti < B; ti++) {
                const float wt = wj[ti];
                if (wt == 0.0f) continue;
                for (int r = 0; r < R; r++) c[r] += wt * ld16(blk + t->off_a + 2 * ((size_t)ti * R + r));
                for (int m = 0; m < k; m++)
                    tail[blk[t->off_i + (size_t)ti * k + m]] += wt * ld16(blk + t->off_v + 2 * ((size_t)ti * k + m));
            }
            for (int r = 0; r < R; r++)
                if (c[r] != 0.0f)
                    for (int i = 0; i < d; i++) tail[i] += c[r] * ld16(blk + t->off_f + 2 * ((size_t)r * d + i));
        }
    }
}

static void gear_finish(const vq_codec_state *st, const float *acc, float *out) {
    const gear *t = st->impl;
    t->base.codec->finish(&t->base, acc, out);
    for (int i = 0; i < t->d; i++) out[i] += acc[t->acc0 + i];
}

const vq_codec vq_codec_gear = {
    .name = "gear",
    .params_help = "base=CODEC any codec of the table but gear (q4_0), rank=0..16 low-rank factors of the "
                   "base's error per block (2), group=B rows per block, a multiple of the base's block rows "
                   "(64), sparse=0..0.5 fraction of each row's largest remaining errors kept exactly (0.02: "
                   "round(sparse*d) per row); every other parameter (bits=, rotate=, ...) goes to the base; "
                   "head_dim <= 256",
    .per_head = 1,
    .init = gear_init, .fini = gear_fini, .encode = gear_encode, .decode = gear_decode,
    .prep_query = gear_prep, .score = gear_score, .accumulate = gear_accumulate, .finish = gear_finish,
};
