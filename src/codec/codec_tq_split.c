/* codec_tq_split.c: a calibrated channel split of TurboQuant-MSE (the outlier-channel split of
 * Zandieh et al., arXiv 2504.19874, with the pairs chosen per layer and KV head as in per-head
 * pair allocation). Per layer and KV head, the calibration file (store key calib=FILE) ranks the
 * RoPE pairs by query x key energy Σ_g E‖q_g,p‖²·E‖k_p‖² (docs/calibration-format.md says why);
 * the `pairs` highest get `hi` bits per coordinate, the rest `lo` bits. Each subset has its own
 * random rotation, Lloyd-Max codebook (the law of a rotated unit vector of the subset's
 * dimension) and norm: x_S ≈ ‖x_S‖·Π_Sᵀ c_S[idx]. A pair's norm does not change under RoPE, so a
 * subset of whole pairs has a position-independent energy. On the V side the pairs are ranked by
 * E‖v_p‖² instead.
 * Block (one row): [‖x_hi‖ fp16][‖x_lo‖ fp16][n_hi codes, hi bits, packed][n_lo codes, lo bits].
 * Bits per element = (32 + n_hi·hi + n_lo·lo) / d, every byte counted.
 * Rotations: randomized Hadamard blocks (brot below). Attention on the codes: score = ‖x_hi‖ (Π_hi q_hi)·c_hi[idx] + ‖x_lo‖ (Π_lo q_lo)·c_lo[idx];
 * values are summed in the two rotated domains and rotated back once in finish.
 * One state per KV head (per_head = 1): every head has its own pair subset. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec/tq.h"
#include "codec/bitpack.h"
#include "codec/calib.h"
#include "codec/codec_vec.h"
#include "codec/tq_lanes.h"

/* A subset's rotation: a subset of n coordinates (a multiple of 8) is cut into power-of-two
 * blocks (48 = 32 + 16), each rotated by its own randomized Hadamard transform. A dense Haar
 * rotation of 48 would cost 2·48² floats per (layer, KV head) state — 0.5 bits per element of
 * SmolLM2's cache at ctx 2048 — where the blocks cost n floats. The codebook is still that of a
 * rotated unit vector of dimension n: exact when the subset's energy is spread evenly over its
 * blocks, an approximation otherwise (docs/lowbit-keys.md). */
#define SPLIT_MAX_BLK 12
typedef struct brot { int nb, off[SPLIT_MAX_BLK], len[SPLIT_MAX_BLK]; vq_rotation *r[SPLIT_MAX_BLK]; } brot;

static void brot_free(brot *b) {
    for (int i = 0; i < b->nb; i++) vq_rotation_free(b->r[i]);
    b->nb = 0;
}
static vq_status brot_make(brot *b, int n, vq_rng *rng, size_t *bytes, vq_err *err) {
    memset(b, 0, sizeof *b);
    for (int rest = n, off = 0; rest > 0;) {
        int len = 1;
        while (len * 2 <= rest) len *= 2;
        b->off[b->nb] = off;
        b->len[b->nb] = len;
        b->r[b->nb] = vq_rotation_create_kind(len, vq_rng_u64(rng), VQ_ROT_HADAMARD, err);
        if (!b->r[b->nb]) return err ? err->code : VQ_ERR_NOMEM;
        *bytes += sizeof(float) * (size_t)len;
        b->nb++;
        off += len;
        rest -= len;
    }
    return VQ_OK;
}
static void brot_apply(const brot *b, float *y) {
    for (int i = 0; i < b->nb; i++) vq_rotation_apply(b->r[i], y + b->off[i], y + b->off[i]);
}
static void brot_inverse(const brot *b, const float *y, float *x) {
    for (int i = 0; i < b->nb; i++) vq_rotation_apply_inverse(b->r[i], y + b->off[i], x + b->off[i]);
}

typedef struct split {
    int d, side, n[2], bits[2];   /* [0] = hi subset, [1] = lo subset: coordinates, bits */
    int lanes;                    /* keys: the lanes layout (below) */
    vq_isa isa;
    int16_t *ch[2];               /* channel of subset coordinate j (n[sub] entries) */
    brot rot[2];
    const vq_codebook *cb[2];     /* the process's shared codebooks (vq_lloydmax_shared) */
    const float *cent[2];         /* their centroids, padded with 0 to 256 (SIMD table loads) */
    size_t off[2];                /* code offsets in the block (lanes: each subset's 16 norms) */
} split;

static void split_fini(vq_codec_state *st) {
    split *t = st->impl;
    if (!t) return;
    for (int s = 0; s < 2; s++) { brot_free(&t->rot[s]); free(t->ch[s]); }
    free(t);
    st->impl = NULL;
}

static vq_status split_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                            uint64_t seed, vq_err *err) {
    const vq_codec *c = st->codec;
    vq_status s = vq_codec_params_check(c, p, np, "hi,lo,frac,pairs,bits,layout", err);
    if (s) return s;
    if (d < 16 || d % 16 || d > VQ_TQ_MAX_D)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: head_dim %d not supported (a multiple of 16, "
                          "16..%d)", c->name, d, VQ_TQ_MAX_D);
    int hi, lo;
    if ((s = vq_codec_param_int(c, p, np, "hi", 1, 8, 4, &hi, err))) return s;
    /* bits= (the spec's k=B) sets lo when lo= is absent, so "k=tq_split:..." reads naturally */
    int lo_def = 2;
    if (vq_codec_param_get(p, np, "bits") && (s = vq_codec_param_int(c, p, np, "bits", 1, 8, 2, &lo_def, err)))
        return s;
    if ((s = vq_codec_param_int(c, p, np, "lo", 1, 8, lo_def, &lo, err))) return s;
    const int npairs = d / 2;
    int nhp;   /* hi pairs: a multiple of 4 (subsets of whole bytes and 8-lane SIMD groups) */
    const char *fv = vq_codec_param_get(p, np, "frac"), *pv = vq_codec_param_get(p, np, "pairs");
    if (fv && pv)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: give frac= or pairs=, not both (%s)", c->name, c->params_help);
    if (pv) {
        if ((s = vq_codec_param_int(c, p, np, "pairs", 4, npairs - 4, npairs / 4, &nhp, err))) return s;
        if (nhp % 4)
            return vq_err_set(err, VQ_ERR_ARG, "codec %s: pairs=%d is not a multiple of 4 (%s)", c->name, nhp, c->params_help);
    } else {
        double f = 0.25;
        if (fv) {
            char *end;
            f = strtod(fv, &end);
            if (end == fv || *end || !(f > 0.0 && f < 1.0))
                return vq_err_set(err, VQ_ERR_ARG, "codec %s: frac=%s is not a number in (0, 1) (%s)",
                                  c->name, fv, c->params_help);
        }
        nhp = (int)(f * npairs / 4.0 + 0.5) * 4;
        nhp = VQ_MAX(4, VQ_MIN(npairs - 4, nhp));
    }
    const vq_calib *cal = st->ctx.calib;
    if (!cal)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s needs a calibration: add calib=FILE to the KV "
                          "spec (a file of `veloxquant calibrate`), e.g. \"k=tq_split:hi=4,lo=2;v=turboquant_mse:bits=4;"
                          "calib=model.vqc\"", c->name);
    const char *cp = st->ctx.calib_path ? st->ctx.calib_path : "(calibration)";
    if (cal->head_dim != d)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: calibration '%.200s' has head_dim %d (model '%s'), "
                          "this cache %d", c->name, cp, cal->head_dim, cal->model, d);
    const int layer = st->ctx.n_layers ? st->ctx.layer : 0, head = st->ctx.n_layers ? st->ctx.head : 0;
    if (layer < 0 || layer >= cal->n_layers || head < 0 || head >= cal->n_kv_heads)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: calibration '%.200s' has %d layers x %d KV heads, "
                          "asked for layer %d head %d", c->name, cp, cal->n_layers, cal->n_kv_heads, layer, head);

    split *t = calloc(1, sizeof *t);
    if (!t) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", c->name);
    st->impl = t;
    t->d = d;
    t->side = side;
    t->bits[0] = hi;
    t->bits[1] = lo;
    t->n[0] = 2 * nhp;
    t->n[1] = d - 2 * nhp;
    t->isa = vq_cvec_isa();
    t->ch[0] = malloc(sizeof(int16_t) * (size_t)t->n[0]);
    t->ch[1] = malloc(sizeof(int16_t) * (size_t)t->n[1]);
    if (!t->ch[0] || !t->ch[1]) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", c->name);
    /* rank the pairs: energy descending, ties to the lower pair (deterministic) */
    double e[VQ_TQ_MAX_D / 2];
    int order[VQ_TQ_MAX_D / 2];
    const size_t kh = (size_t)layer * cal->n_kv_heads + head;
    for (int q = 0; q < npairs; q++) {
        order[q] = q;
        if (side == VQ_SIDE_K) e[q] = cal->pair_energy[kh * npairs + q];
        else e[q] = (double)cal->v_sq[kh * d + vq_calib_pair_ch(cal, q, 0)] + cal->v_sq[kh * d + vq_calib_pair_ch(cal, q, 1)];
    }
    for (int i = 1; i < npairs; i++) {   /* insertion sort: stable, npairs <= 2048 */
        int o = order[i], j = i;
        while (j > 0 && e[order[j - 1]] < e[o]) { order[j] = order[j - 1]; j--; }
        order[j] = o;
    }
    /* each subset in ascending channel order (any fixed order works; this one is readable) */
    uint8_t is_hi[VQ_TQ_MAX_D / 2] = {0};
    for (int i = 0; i < nhp; i++) is_hi[order[i]] = 1;
    int k[2] = {0, 0};
    for (int q = 0; q < npairs; q++) {
        int sub = is_hi[q] ? 0 : 1;
        t->ch[sub][k[sub]++] = (int16_t)vq_calib_pair_ch(cal, q, 0);
        t->ch[sub][k[sub]++] = (int16_t)vq_calib_pair_ch(cal, q, 1);
    }
    vq_rng rng;
    vq_rng_seed(&rng, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(head + 1)));
    st->state_bytes = sizeof *t + sizeof(int16_t) * (size_t)d;
    for (int sub = 0; sub < 2; sub++) {
        if ((s = brot_make(&t->rot[sub], t->n[sub], &rng, &st->state_bytes, err))) return s;
        if (!(t->cb[sub] = vq_lloydmax_shared(VQ_LAW_SPHERE, t->n[sub], t->bits[sub], err)))
            return err ? err->code : VQ_ERR_NOMEM;
        t->cent[sub] = t->cb[sub]->c;
    }
    const char *lay = vq_codec_param_get(p, np, "layout");
    if (lay && strcmp(lay, "auto") && strcmp(lay, "lanes") && strcmp(lay, "rows"))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: layout=%s is not auto, lanes or rows (%s)", c->name, lay,
                          c->params_help);
    const int can = side == VQ_SIDE_K && vq_tql_key_supported(hi, t->n[0]) && vq_tql_key_supported(lo, t->n[1]);
    if (lay && !strcmp(lay, "lanes") && !can)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: layout=lanes needs the key side and each subset's "
                          "coordinates a multiple of 32 at 1 or 3 bits, of 16 at 2 bits (got %s side, hi=%d on %d, "
                          "lo=%d on %d coordinates)", c->name, side == VQ_SIDE_K ? "key" : "value", hi, t->n[0],
                          lo, t->n[1]);
    t->lanes = can && !(lay && !strcmp(lay, "rows"));
    st->d = d;
    if (t->lanes) {   /* 16 rows: [16 hi norms fp16][hi codes][16 lo norms fp16][lo codes] */
        t->off[0] = 0;
        t->off[1] = 2 * VQ_TQL_ROWS + (size_t)VQ_TQL_ROWS * (size_t)t->n[0] * (size_t)hi / 8;
        st->rows_per_block = VQ_TQL_ROWS;
        st->block_bytes = t->off[1] + 2 * VQ_TQL_ROWS + (size_t)VQ_TQL_ROWS * (size_t)t->n[1] * (size_t)lo / 8;
    } else {
        t->off[0] = 4;
        t->off[1] = 4 + vq_bitpack_bytes(hi, (size_t)t->n[0]);
        st->rows_per_block = 1;
        st->block_bytes = t->off[1] + vq_bitpack_bytes(lo, (size_t)t->n[1]);
    }
    st->qstate_bytes = sizeof(float) * (size_t)d;
    st->acc_floats = d;
    snprintf(st->params, sizeof st->params, "hi=%d,lo=%d,pairs=%d,layout=%s", hi, lo, nhp, t->lanes ? "lanes" : "rows");
    return VQ_OK;
}

/* subset sub of x: gathered, normalized, rotated; returns the norm */
static double subset_unit(const split *t, int sub, const float *x, float *y) {
    const int n = t->n[sub];
    double s = 0;
    for (int j = 0; j < n; j++) { y[j] = x[t->ch[sub][j]]; s += (double)y[j] * y[j]; }
    double nrm = sqrt(s);
    if (!(nrm > 0) || !isfinite(nrm)) { memset(y, 0, sizeof(float) * (size_t)n); return nrm > 0 ? nrm : 0; }
    for (int j = 0; j < n; j++) y[j] = (float)(y[j] / nrm);
    brot_apply(&t->rot[sub], y);
    return nrm;
}

/* ---------------- lanes layout (keys): each subset a turboquant_mse lanes key block ----------------
 * A block of 16 rows holds two key blocks of tq_lanes.h's layout one after the other, each with its
 * 16 fp16 norms: the hi subset (n_hi coordinates, hi bits) then the lo one. Scoring runs the lanes
 * kernels of turboquant_mse on each (16 rows interleaved by coordinate, the codebook in a register,
 * one shift + permute + FMA per coordinate and query) and adds the two partial scores. */
static size_t lanes_codes_bytes(const split *t, int sub) {
    return (size_t)VQ_TQL_ROWS * (size_t)t->n[sub] * (size_t)t->bits[sub] / 8;
}

static void lanes_encode(const split *t, const float *x, uint8_t *block) {
    float y[VQ_TQ_MAX_D];
    uint8_t idx[VQ_TQ_MAX_D];
    for (int sub = 0; sub < 2; sub++) {
        uint8_t *b = block + t->off[sub], *codes = b + 2 * VQ_TQL_ROWS;
        memset(codes, 0, lanes_codes_bytes(t, sub));
        for (int r = 0; r < VQ_TQL_ROWS; r++) {
            double nrm = subset_unit(t, sub, x + (size_t)r * t->d, y);
            vq_tq_put_h((float)nrm, b + 2 * r);
            vq_lloydmax_quantize(t->cb[sub], y, 1.0f, t->n[sub], idx);
            for (int i = 0; i < t->n[sub]; i++) vq_tql_key_set(t->bits[sub], codes, r, i, idx[i]);
        }
    }
}

/* y = ‖x_S‖ c[idx] of row r's subset sub (the rotated domain) */
static void lanes_row(const split *t, int sub, const uint8_t *block, int r, float scale, float *y) {
    const uint8_t *b = block + t->off[sub], *codes = b + 2 * VQ_TQL_ROWS;
    const float nrm = vq_tq_get_h(b + 2 * r) * scale;
    for (int i = 0; i < t->n[sub]; i++) y[i] = nrm * t->cent[sub][vq_tql_key_get(t->bits[sub], codes, r, i)];
}

static void lanes_decode(const split *t, const uint8_t *block, float *x) {
    float y[VQ_TQ_MAX_D];
    for (int r = 0; r < VQ_TQL_ROWS; r++)
        for (int sub = 0; sub < 2; sub++) {
            lanes_row(t, sub, block, r, 1.0f, y);
            brot_inverse(&t->rot[sub], y, y);
            for (int j = 0; j < t->n[sub]; j++) x[(size_t)r * t->d + t->ch[sub][j]] = y[j];
        }
}

#define LANES_CHUNK 64   /* blocks per pass: both subsets' partial scores of 4 queries stay in L1 */
static void lanes_score(const split *t, size_t bb, int n_q, const void *const *qs, const uint8_t *blocks,
                        int n_blocks, float *scores) {
    vq_tq v[2];   /* the fields the lanes kernels read: d, bits, norm32, isa, cent1 */
    for (int sub = 0; sub < 2; sub++) {
        v[sub].d = t->n[sub];
        v[sub].bits = t->bits[sub];
        v[sub].norm32 = 0;
        v[sub].isa = t->isa;
        v[sub].cent1 = t->cent[sub];
    }
    const size_t n_rows = (size_t)n_blocks * VQ_TQL_ROWS;
    float part[2][4 * LANES_CHUNK * VQ_TQL_ROWS];
    for (int j0 = 0; j0 < n_q; j0 += 4) {
        const int m = VQ_MIN(4, n_q - j0);
        const float *q[2][4];
        for (int j = 0; j < m; j++) {
            q[0][j] = (const float *)qs[j0 + j];
            q[1][j] = q[0][j] + t->n[0];
        }
        for (int b0 = 0; b0 < n_blocks; b0 += LANES_CHUNK) {
            const int nb = VQ_MIN(LANES_CHUNK, n_blocks - b0);
            const size_t nr = (size_t)nb * VQ_TQL_ROWS;
            for (int sub = 0; sub < 2; sub++)
                vq_tql_score(&v[sub], VQ_SIDE_K, m, q[sub], blocks + (size_t)b0 * bb + t->off[sub], nb, bb, part[sub]);
            for (int j = 0; j < m; j++) {
                float *o = scores + (size_t)(j0 + j) * n_rows + (size_t)b0 * VQ_TQL_ROWS;
                const float *ph = part[0] + (size_t)j * nr, *pl = part[1] + (size_t)j * nr;
                for (size_t r = 0; r < nr; r++) o[r] = ph[r] + pl[r];
            }
        }
    }
}

/* keys summed as values (the contract allows it; the store never does): scalar */
static void lanes_accumulate(const split *t, size_t bb, int n_q, const float *w, const uint8_t *blocks,
                             int n_blocks, float *const *acc) {
    const size_t n_rows = (size_t)n_blocks * VQ_TQL_ROWS;
    float y[VQ_TQ_MAX_D];
    for (int b = 0; b < n_blocks; b++)
        for (int r = 0; r < VQ_TQL_ROWS; r++)
            for (int sub = 0; sub < 2; sub++) {
                lanes_row(t, sub, blocks + (size_t)b * bb, r, 1.0f, y);
                for (int j = 0; j < n_q; j++) {
                    const float wj = w[(size_t)j * n_rows + (size_t)b * VQ_TQL_ROWS + r];
                    float *a = acc[j] + (sub ? t->n[0] : 0);
                    if (wj != 0.0f)
                        for (int i = 0; i < t->n[sub]; i++) a[i] += wj * y[i];
                }
            }
}

static void split_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const split *t = st->impl;
    if (t->lanes) { lanes_encode(t, x, block); return; }
    float y[VQ_TQ_MAX_D];
    uint8_t idx[VQ_TQ_MAX_D];
    for (int sub = 0; sub < 2; sub++) {
        double nrm = subset_unit(t, sub, x, y);
        vq_tq_put_h((float)nrm, block + 2 * sub);
        vq_lloydmax_quantize(t->cb[sub], y, 1.0f, t->n[sub], idx);
        vq_bitpack_pack(t->bits[sub], idx, (size_t)t->n[sub], block + t->off[sub]);
    }
}

static void split_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const split *t = st->impl;
    if (t->lanes) { lanes_decode(t, block, x); return; }
    float y[VQ_TQ_MAX_D];
    for (int sub = 0; sub < 2; sub++) {
        vq_tq_expand_isa(t->isa, block + t->off[sub], t->bits[sub], t->cent[sub], t->n[sub],
                         vq_tq_get_h(block + 2 * sub), 0, y);
        brot_inverse(&t->rot[sub], y, y);
        for (int j = 0; j < t->n[sub]; j++) x[t->ch[sub][j]] = y[j];
    }
}

/* qstate: [Π_hi q_hi (n_hi floats) | Π_lo q_lo (n_lo floats)] */
static void split_prep(const vq_codec_state *st, const float *q, void *qs) {
    const split *t = st->impl;
    float *o = qs;
    for (int sub = 0; sub < 2; sub++) {
        float *y = o + (sub ? t->n[0] : 0);
        for (int j = 0; j < t->n[sub]; j++) y[j] = q[t->ch[sub][j]];
        brot_apply(&t->rot[sub], y);
    }
}

static void split_score(const vq_codec_state *st, int n_q, const void *const *qs,
                        const uint8_t *blocks, int n_blocks, float *scores) {
    const split *t = st->impl;
    if (t->lanes) { lanes_score(t, st->block_bytes, n_q, qs, blocks, n_blocks, scores); return; }
    const float *qh[64], *ql[64];
    float rh[64], rl[64];
    for (int j0 = 0; j0 < n_q; j0 += 64) {   /* one pass over the codes per 64 queries */
        int m = VQ_MIN(64, n_q - j0);
        for (int j = 0; j < m; j++) {
            qh[j] = (const float *)qs[j0 + j];
            ql[j] = qh[j] + t->n[0];
        }
        for (int r = 0; r < n_blocks; r++) {
            const uint8_t *b = blocks + (size_t)r * st->block_bytes;
            float nh = vq_tq_get_h(b), nl = vq_tq_get_h(b + 2);
            vq_tq_dot_codes(t->isa, b + t->off[0], t->bits[0], t->cent[0], NULL, 0.0f, t->cent[0],
                            t->n[0], qh, m, rh);
            vq_tq_dot_codes(t->isa, b + t->off[1], t->bits[1], t->cent[1], NULL, 0.0f, t->cent[1],
                            t->n[1], ql, m, rl);
            for (int j = 0; j < m; j++) scores[(size_t)(j0 + j) * n_blocks + r] = nh * rh[j] + nl * rl[j];
        }
    }
}

static void split_accumulate(const vq_codec_state *st, int n_q, const float *w,
                             const uint8_t *blocks, int n_blocks, float *const *acc) {
    const split *t = st->impl;
    if (t->lanes) { lanes_accumulate(t, st->block_bytes, n_q, w, blocks, n_blocks, acc); return; }
    float c[2][VQ_TQ_MAX_D] __attribute__((aligned(64)));
    for (int r = 0; r < n_blocks; r++) {
        int any = 0;
        for (int j = 0; j < n_q; j++) any |= w[(size_t)j * n_blocks + r] != 0.0f;
        if (!any) continue;
        const uint8_t *b = blocks + (size_t)r * st->block_bytes;
        float nrm[2] = { vq_tq_get_h(b), vq_tq_get_h(b + 2) };
        for (int sub = 0; sub < 2; sub++)
            vq_tq_expand_isa(t->isa, b + t->off[sub], t->bits[sub], t->cent[sub], t->n[sub], 1.0f, 0, c[sub]);
        for (int j = 0; j < n_q; j++) {
            float wj = w[(size_t)j * n_blocks + r];
            if (wj == 0.0f) continue;
            vq_cvec_axpy_isa(t->isa, acc[j], wj * nrm[0], c[0], t->n[0]);
            vq_cvec_axpy_isa(t->isa, acc[j] + t->n[0], wj * nrm[1], c[1], t->n[1]);
        }
    }
}

static void split_finish(const vq_codec_state *st, const float *acc, float *out) {
    const split *t = st->impl;
    float y[VQ_TQ_MAX_D];
    for (int sub = 0; sub < 2; sub++) {
        brot_inverse(&t->rot[sub], acc + (sub ? t->n[0] : 0), y);
        for (int j = 0; j < t->n[sub]; j++) out[t->ch[sub][j]] = y[j];
    }
}

const vq_codec vq_codec_tq_split = {
    .name = "tq_split",
    .params_help = "hi=1..8 (default 4: bits of the high-energy pairs), lo=1..8 (default 2, or the "
                   "spec's k=/bits=), frac=0..1 (default 0.25: share of RoPE pairs at hi bits, rounded "
                   "to a multiple of 4 pairs) or pairs=N (a multiple of 4), layout=auto|lanes|rows (default "
                   "auto: keys in 16-row lanes blocks when each subset allows it); needs calib=FILE in the "
                   "KV spec; head_dim a multiple of 16",
    .per_head = 1, .needs_calib = 1,
    .init = split_init, .fini = split_fini, .encode = split_encode, .decode = split_decode,
    .prep_query = split_prep, .score = split_score, .accumulate = split_accumulate,
    .finish = split_finish,
};
