/* kv_policy.c: the policy tables (kv_policy.h has the contract). Eviction policies are rows of
 * POLICIES[] (what a policy observes and how it turns that into a score per row); the ways a
 * layer's budget is shared out across its KV heads are rows of ALLOCS[] (heads=shared: a row goes
 * for every head or none; heads=ada: AdaKV's per-head budgets, Feng et al., arXiv 2407.11550).
 * Every function here is pure: it reads its arguments and writes its outputs, nothing else of the
 * cache; the store and the eviction step call them. The keys rows take are declared here and
 * parsed by kv_spec.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"

#define ADA_MAX_HEADS 1024   /* vq_kv_create's bound on n_kv_heads */

/* ---- the keys ---- */
const vq_pol_key vq_pol_keys[VQ_PK_N] = {
    [VQ_PK_EVICT] = {"evict", 'p', 0, 0, NAN, ""},
    [VQ_PK_BUDGET] = {"budget", 'b', 1, 1 << 24, NAN, ""},
    [VQ_PK_SINKS] = {"sinks", 'i', 0, 1 << 20, 4, "0..1048576"},
    [VQ_PK_RECENT] = {"recent", 'i', 0, 1 << 20, 32, "0..1048576"},
    [VQ_PK_EVERY] = {"every", 'i', 1, 1 << 20, 16, "1..1048576"},
    [VQ_PK_OBS] = {"obs", 'i', 1, 1 << 20, 32, "1..1048576"},
    [VQ_PK_POOL] = {"pool", 'o', 1, 1025, 7, "an odd number 1..1025"},
    [VQ_PK_SLOPE] = {"slope", 'r', 0.0, 1.0, 0.5, "0..1"},
    [VQ_PK_TAU] = {"tau", 'r', 1e-3, 1e3, 1.0, "0.001..1000"},
    [VQ_PK_CHUNK] = {"chunk", 'i', 1, 1 << 16, 10, "1..65536"},
    [VQ_PK_SQUEEZE] = {"squeeze", 'r', 0.0, 1.0, 0.5, "0..1"},
    [VQ_PK_POOLFN] = {"poolfn", 'm', 0, 1, 0, "max|avg"},
    [VQ_PK_BETA] = {"beta", 'r', 1.0, 1e6, 0.0, "1..1000000"},
    [VQ_PK_NORM] = {"acc", 'm', 0, 1, 0, "sum|mean"},
    [VQ_PK_VNORM] = {"vnorm", 'm', 0, 1, 0, "on|off"},
};
const vq_pol_key vq_alloc_keys[VQ_AK_N] = {
    [VQ_AK_HEADS] = {"heads", 'a', 0, 0, NAN, ""},
    [VQ_AK_FLOOR] = {"floor", 'r', 0.0, 1.0, 0.2, "0..1: each head keeps at least floor x budget rows"},
};

/* ---- observe appended rows: the score a new row starts with, per KV head ---- */
static float key_norm(const float *x, int d, const float *cal, int G) {
    (void)cal; (void)G;
    double s = 0;
    for (int e = 0; e < d; e++) s += (double)x[e] * x[e];
    return (float)sqrt(s);
}
static float key_filter(const float *x, int d, const float *filt, int G) {   /* k . f */
    (void)G;
    double s = 0;
    for (int e = 0; e < d; e++) s += (double)x[e] * filt[e];
    return (float)s;
}
/* log sum_g exp(mu_g.k / sqrt d + k' diag(var_g) k / (2 d)); qs: the head's G x [E[q]/sqrt(d),
 * Var[q]/(2d)] */
static float key_expected(const float *x, int d, const float *qs, int G) {
    double mx = -INFINITY, z = 0;   /* an online log-sum-exp over the group */
    for (int q = 0; q < G; q++) {
        const float *a = qs + (size_t)q * 2 * d, *b = a + d;
        double t = 0;
        for (int e = 0; e < d; e++) t += (double)x[e] * a[e] + (double)x[e] * x[e] * b[e];
        if (t > mx) { z = z * exp(mx - t) + 1.0; mx = t; }
        else z += exp(t - mx);
    }
    return (float)(mx + log(z));
}

/* ---- observe attention: keyformer's noise ---- */
/* a Gumbel sample from a hash of (seed, layer, query position, head, row) */
static float gumbel(uint64_t seed, int layer, int qp, int hq, int idx) {
    uint64_t z = seed ^ ((uint64_t)(uint32_t)layer << 48) ^ ((uint64_t)(uint32_t)qp << 20) ^
                 ((uint64_t)(uint32_t)hq << 8) ^ ((uint64_t)(uint32_t)idx * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double u = ((double)(z >> 11) + 0.5) / 9007199254740992.0;
    return (float)-log(-log(u));
}
/* softmax((log w + g) / tau) over the rows this query saw */
static void reweight_gumbel(const vq_pol_attn *a, float *raw, const int *b0, const int *bn, int nblk) {
    const float itau = (float)(1.0 / a->tau);
    float mx = -INFINITY;
    double sum = 0;
    for (int b = 0; b < nblk; b++)
        for (int r = 0; r < bn[b]; r++) {
            float *w = raw + b0[b] + r;
            *w = *w > 0.0f ? (logf(*w) + gumbel(a->seed, a->layer, a->qp, a->hq, b0[b] + r)) * itau : -INFINITY;
            mx = *w > mx ? *w : mx;
        }
    for (int b = 0; b < nblk; b++)
        for (int r = 0; r < bn[b]; r++) {
            float *w = raw + b0[b] + r;
            *w = *w == -INFINITY ? 0.0f : expf(*w - mx);
            sum += *w;
        }
    const float is = sum > 0 ? (float)(1.0 / sum) : 0.0f;
    for (int b = 0; b < nblk; b++)
        for (int r = 0; r < bn[b]; r++) raw[b0[b] + r] *= is;
}

/* ---- step: one score per row (higher = kept) ---- */
static void rows_by_position(const vq_pol_view *v, float *rs) {   /* the most recent rows win */
    for (int i = 0; i < v->nr; i++) rs[i] = (float)v->pos[i];
}
static void rows_sum(const vq_pol_view *v, float *rs) {   /* summed over the KV heads */
    for (int i = 0; i < v->nr; i++) {
        double s = 0;
        for (int h = 0; h < v->H; h++) s += v->sc[(size_t)h * v->cap + i];
        rs[i] = (float)s;
    }
}
static void rows_neg_sum(const vq_pol_view *v, float *rs) {   /* knorm: LOW-norm keys are kept */
    for (int i = 0; i < v->nr; i++) {
        double s = 0;
        for (int h = 0; h < v->H; h++) s += v->sc[(size_t)h * v->cap + i];
        rs[i] = (float)-s;
    }
}
static void rows_softmax(const vq_pol_view *v, float *rs) {   /* per KV head: softmax over the rows */
    for (int i = 0; i < v->nr; i++) rs[i] = 0;
    for (int h = 0; h < v->H; h++) {
        const float *sc = v->sc + (size_t)h * v->cap;
        double mx = -INFINITY, z = 0;
        for (int i = 0; i < v->nr; i++) mx = fmax(mx, sc[i]);
        for (int i = 0; i < v->nr; i++) z += exp(sc[i] - mx);
        for (int i = 0; i < v->nr; i++) rs[i] += (float)(exp(sc[i] - mx) / z);
    }
}

/* chunkkv (Liu et al., arXiv 2502.00299): the rows of a chunk (positions c*C .. c*C+C-1, C =
 * chunk=) share one score, the sum over the chunk's held rows of the rows' summed attention
 * (snapkv's observation), so a step keeps or drops whole chunks (only the chunk at the budget's
 * edge can be cut). Rows come in position order (coded rows, then the window), so a chunk's rows
 * are one run. */
static void rows_chunk(const vq_pol_view *v, float *rs) {
    const int C = v->ev->chunk;
    rows_sum(v, rs);
    for (int i = 0; i < v->nr;) {
        const int32_t c = v->pos[i] / C;
        int j = i;
        double s = 0;
        while (j < v->nr && v->pos[j] / C == c) s += rs[j++];
        for (; i < j; i++) rs[i] = (float)s;
    }
}

void vq_pool_scores(const float *rs, int nr, int nw, int pool, int fn, float *out) {
    const int k = pool / 2;
    if (fn == 0) {   /* max over every row */
        for (int i = 0; i < nr; i++) {
            float m = rs[i];
            for (int j = VQ_MAX(0, i - k); j <= VQ_MIN(nr - 1, i + k); j++) m = rs[j] > m ? rs[j] : m;
            out[i] = m;
        }
        return;
    }
    for (int i = 0; i < nw; i++) {   /* avg over rows 0..nw-1, zero-padded: the sum / pool */
        double m = 0;
        for (int j = VQ_MAX(0, i - k); j <= VQ_MIN(nw - 1, i + k); j++) m += rs[j];
        out[i] = (float)(m / pool);
    }
    for (int i = nw; i < nr; i++) out[i] = rs[i];
}

void vq_pol_rope(float *x, int d, int rot, int neox, const float *inv, double pos, double mscale) {
    rot = VQ_MIN(rot, d) & ~1;
    const int half = rot / 2;
    for (int i = 0; i < half; i++) {
        const int a = neox ? i : 2 * i, b = neox ? i + half : a + 1;
        const double t = pos * inv[i], c = cos(t) * mscale, s = sin(t) * mscale, x0 = x[a], x1 = x[b];
        x[a] = (float)(x0 * c - x1 * s);
        x[b] = (float)(x0 * s + x1 * c);
    }
}

void vq_pol_avg_rope(float *R, int d, int rot, int neox, const float *inv, double mscale, int p0, int np) {
    memset(R, 0, (size_t)d * d * sizeof(float));
    for (int e = 0; e < d; e++) R[(size_t)e * d + e] = 1.0f;   /* the dims RoPE leaves alone */
    rot = VQ_MIN(rot, d) & ~1;
    const int half = rot / 2;
    for (int i = 0; i < half; i++) {   /* each pair: the mean of mscale * [[c, -s], [s, c]] */
        const int a = neox ? i : 2 * i, b = neox ? i + half : a + 1;
        double c = 0, s = 0;
        for (int p = p0; p < p0 + np; p++) { c += cos((double)p * inv[i]); s += sin((double)p * inv[i]); }
        c *= mscale / np;
        s *= mscale / np;
        R[(size_t)a * d + a] = (float)c;
        R[(size_t)a * d + b] = (float)-s;
        R[(size_t)b * d + a] = (float)s;
        R[(size_t)b * d + b] = (float)c;
    }
}

/* expected_attention_prompt (kvpress's ExpectedAttentionPress, Devoto et al.): per KV head h and
 * query head g of its group, the prompt's queries before RoPE have mean m and covariance S (over
 * the positions >= sinks); the future query is R m, covariance R S R' (R: RoPE averaged over the
 * next positions, v->rbar); a row's expected logit is z = (R m).k / sqrt(d) + k' R S R' k / (2 d);
 * the head's score is softmax_rows(z) over the rows at positions >= sinks, averaged over g, times
 * ||v|| (vnorm=on); summed over the KV heads (rows are shared by a layer's heads). Rows before
 * sinks get the largest score + 1 (kvpress pads them so; here they are never candidates anyway). */
static void rows_expected_prompt(const vq_pol_view *v, float *rs) {
    const int d = v->d, G = v->G, nr = v->nr;
    const size_t per = 1 + (size_t)d + (size_t)d * d;
    double *mu = v->work, *m0 = mu + d, *S = m0 + d, *T = S + (size_t)d * d, *z = T + (size_t)d * d, *kr = z + nr;
    const double isd = 1.0 / sqrt((double)d);
    for (int i = 0; i < nr; i++) rs[i] = 0;
    for (int h = 0; h < v->H; h++)
        for (int g = 0; g < G; g++) {
            const double *st = v->qs + ((size_t)h * G + g) * per;
            const double n = st[0];
            if (!(n > 0)) continue;
            for (int e = 0; e < d; e++) m0[e] = st[1 + e] / n;
            for (int a = 0; a < d; a++)   /* S = E[q q'] - m m' (kvpress: centred, divided by n) */
                for (int b = 0; b < d; b++) S[(size_t)a * d + b] = st[1 + d + (size_t)a * d + b] / n - m0[a] * m0[b];
            for (int a = 0; a < d; a++) {   /* mu = R m; T = R S */
                double t = 0;
                for (int b = 0; b < d; b++) t += v->rbar[(size_t)a * d + b] * m0[b];
                mu[a] = t;
                for (int c = 0; c < d; c++) {
                    double u = 0;
                    for (int b = 0; b < d; b++) u += v->rbar[(size_t)a * d + b] * S[(size_t)b * d + c];
                    T[(size_t)a * d + c] = u;
                }
            }
            for (int a = 0; a < d; a++)   /* S <- T R' = R S R' */
                for (int c = 0; c < d; c++) {
                    double u = 0;
                    for (int b = 0; b < d; b++) u += T[(size_t)a * d + b] * v->rbar[(size_t)c * d + b];
                    S[(size_t)a * d + c] = u;
                }
            double mx = -INFINITY, zs = 0;
            for (int i = 0; i < nr; i++) {
                if (v->pos[i] < v->ev->sinks) { z[i] = -INFINITY; continue; }
                const float *k = v->k + ((size_t)i * v->H + h) * d;
                double lin = 0, quad = 0;
                for (int a = 0; a < d; a++) {
                    double t = 0;
                    for (int b = 0; b < d; b++) t += S[(size_t)a * d + b] * k[b];
                    kr[a] = t;
                    lin += mu[a] * k[a];
                }
                for (int a = 0; a < d; a++) quad += k[a] * kr[a];
                z[i] = lin * isd + quad / (2.0 * d);
                mx = fmax(mx, z[i]);
            }
            for (int i = 0; i < nr; i++) zs += z[i] == -INFINITY ? 0 : exp(z[i] - mx);
            for (int i = 0; i < nr; i++)
                if (z[i] != -INFINITY) {
                    const double w = exp(z[i] - mx) / zs / G;
                    rs[i] += (float)(v->ev->vnorm ? w : w * v->vn[(size_t)i * v->H + h]);
                }
        }
    float top = 0;
    for (int i = 0; i < nr; i++) top = fmaxf(top, rs[i]);
    for (int i = 0; i < nr; i++)
        if (v->pos[i] < v->ev->sinks) rs[i] = top + 1.0f;
}

/* h2o with acc=mean (kvpress's observed attention): the accumulated attention divided by the
 * number of queries that saw the row, every position from the row's to the newest held (h2o
 * observes every query since the row arrived, and the newest rows are never evicted) */
static void rows_h2o(const vq_pol_view *v, float *rs) {
    rows_sum(v, rs);
    if (!v->ev->norm) return;
    int32_t top = 0;
    for (int i = 0; i < v->nr; i++) top = v->pos[i] > top ? v->pos[i] : top;
    for (int i = 0; i < v->nr; i++) rs[i] = (float)(rs[i] / (double)(top + 1 - v->pos[i]));
}

/* pyramidkv. beta = 0: budget * (1 + slope * (1 - 2 l / (L - 1))), more rows low. beta >= 1:
 * PyramidKV's published schedule (Cai et al., arXiv 2406.02069, as kvpress 0.5.5 computes it from
 * the context length n and the observation window W = obs): a line from max rows in layer 0 to
 * min in the last, min = B / beta, max = 2 B - min (the mean is B); max capped at n - W (min then
 * 2 B - max); when that gives no n >= max >= min >= W, every layer keeps B (kvpress falls back to
 * snapkv: at n = 1024, W = 64, beta = 20 that is any budget below 1280 / 3.9 = 329 rows). */
static double budget_pyramid(const vq_evict_cfg *ev, double B, int n, int l, int Lc) {
    if (Lc <= 1) return B;
    if (!(ev->beta >= 1)) return floor(B * (1.0 + ev->slope * (1.0 - 2.0 * l / (Lc - 1))) + 0.5);
    const double W = ev->obs;
    double mn = B / ev->beta, mx = 2 * B - mn;
    if (mx >= n - W) { mx = n - W; mn = 2 * B - mx; }
    if (!(n >= mx && mx >= mn && mn >= W)) return B;
    return floor(mx - l * (mx - mn) / (Lc - 1) + 0.5);
}
static double min_pyramid(const vq_evict_cfg *ev) {   /* the top layer's */
    return ev->beta >= 1 ? 1.0 / ev->beta : 1.0 - ev->slope;
}

/* squeeze: the layer's factor of the budget (from the calibration's attention cosines) */
static double budget_squeeze(const vq_evict_cfg *ev, double B, int n, int l, int Lc) {
    (void)n;
    return ev->layer_w && l >= 0 && l < Lc ? floor(B * ev->layer_w[l] + 0.5) : B;
}
static double min_squeeze(const vq_evict_cfg *ev) { return ev->squeeze; }   /* the squeezed group's */

void vq_squeeze_factors(const float *cos, int L, double p, double cap, float *w) {
    for (int l = 0; l < L; l++) w[l] = 1.0f;
    if (L < 2) return;
    double lo = cos[0], hi = cos[0];
    for (int l = 1; l < L; l++) { lo = fmin(lo, cos[l]); hi = fmax(hi, cos[l]); }
    if (!(hi > lo)) return;
    int n_hi = 0;
    for (int it = 0; it < 100; it++) {   /* 1-D 2-means: assign to the nearer centre (ties: low), move */
        double s_lo = 0, s_hi = 0;
        int c_lo = 0, c_hi = 0;
        for (int l = 0; l < L; l++) {
            if (fabs(cos[l] - hi) < fabs(cos[l] - lo)) { s_hi += cos[l]; c_hi++; }
            else { s_lo += cos[l]; c_lo++; }
        }
        const double nlo = c_lo ? s_lo / c_lo : lo, nhi = c_hi ? s_hi / c_hi : hi;
        n_hi = c_hi;
        if (nlo == lo && nhi == hi) break;
        lo = nlo;
        hi = nhi;
    }
    if (n_hi == 0 || n_hi == L) return;
    double up = 1.0 + (1.0 - p) * n_hi / (double)(L - n_hi), down = p;
    if (cap > 0 && up > cap) {   /* the low group cannot use it all: the rest back to the high group */
        up = fmax(1.0, cap);
        down = (L - (L - n_hi) * up) / n_hi;
    }
    for (int l = 0; l < L; l++) w[l] = (float)(fabs(cos[l] - hi) < fabs(cos[l] - lo) ? down : up);
}

#define K(x) (1u << VQ_PK_##x)
static const vq_kv_policy POLICIES[] = {
    {"streaming_llm", VQ_POL_POS, 0, VQ_POL_CAL_NONE, "the sinks and the most recent rows (score = position)",
     NULL, NULL, rows_by_position, NULL, NULL},
    {"h2o", VQ_POL_ATTN | VQ_POL_POS, K(NORM), VQ_POL_CAL_NONE,
     "attention accumulated over every query since the row arrived (heavy hitters); acc=mean: "
     "divided by the number of those queries (kvpress's observed attention)", NULL, NULL, rows_h2o, NULL, NULL},
    {"tova", VQ_POL_ATTN | VQ_POL_RESET, 0, VQ_POL_CAL_NONE, "the latest query's attention",
     NULL, NULL, rows_sum, NULL, NULL},
    {"knorm", 0, 0, VQ_POL_CAL_NONE,
     "key L2 norm: score = -sum over KV heads of ||k||, so LOW-norm keys are kept", key_norm, NULL, rows_neg_sum,
     NULL, NULL},
    {"snapkv", VQ_POL_ATTN | VQ_POL_WINDOWED | VQ_POL_POOL, K(OBS) | K(POOL) | K(POOLFN), VQ_POL_CAL_NONE,
     "attention of the last obs prompt queries (in decode: of the queries since the last step), "
     "pooled over pool rows (poolfn=max over every row; avg: kvpress's, over the rows before the "
     "window, zero-padded)", NULL, NULL, rows_sum, NULL, NULL},
    {"pyramidkv", VQ_POL_ATTN | VQ_POL_WINDOWED | VQ_POL_POOL, K(OBS) | K(POOL) | K(SLOPE) | K(POOLFN) | K(BETA),
     VQ_POL_CAL_NONE, "snapkv with a per-layer budget: budget * (1 + slope * (1 - 2 l / (L - 1))), more rows "
     "low; beta=B: PyramidKV's published schedule (kvpress: beta=20, obs=64)",
     NULL, NULL, rows_sum, budget_pyramid, min_pyramid},
    {"keyformer", VQ_POL_ATTN, K(TAU), VQ_POL_CAL_NONE,
     "accumulated softmax((logit + Gumbel noise) / tau) (seeded by the cache seed)", NULL, reweight_gumbel, rows_sum,
     NULL, NULL},
    {"chunkkv", VQ_POL_ATTN | VQ_POL_WINDOWED | VQ_POL_POS, K(OBS) | K(CHUNK), VQ_POL_CAL_NONE,
     "snapkv's attention (last obs prompt queries) summed over chunks of chunk consecutive positions; "
     "a step keeps or drops whole chunks (ChunkKV)", NULL, NULL, rows_chunk, NULL, NULL},
    {"squeeze", VQ_POL_ATTN | VQ_POL_WINDOWED | VQ_POL_POOL, K(OBS) | K(POOL) | K(SQUEEZE) | K(POOLFN), VQ_POL_CAL_LAYERS,
     "snapkv with per-layer budgets from calib=FILE (SqueezeAttention): layers split in two groups by "
     "the cosine of the hidden state before and after attention; the group attention changes least "
     "keeps squeeze x budget, the other the rest (the mean is the budget)",
     NULL, NULL, rows_sum, budget_squeeze, min_squeeze},
    {"expected_attention", 0, 0, VQ_POL_CAL_QSTATS,
     "sum over KV heads of the softmax over rows of log sum_g E[exp(q_g . k / sqrt(d))], q_g ~ "
     "N(mean, diag var) of query head g from calib=FILE (kvpress's expected attention, stationary)",
     key_expected, NULL, rows_softmax, NULL, NULL},
    {"expected_attention_prompt", VQ_POL_QSTATS | VQ_POL_POS, K(VNORM), VQ_POL_CAL_NONE,
     "kvpress's expected attention: per KV head, the softmax over rows of E[q . k / sqrt(d)] under the "
     "prompt's own query mean and covariance (before RoPE, positions >= sinks), rotated by RoPE averaged "
     "over the next 512 positions, averaged over the group, times ||v|| (vnorm=on); summed over KV heads",
     NULL, NULL, rows_expected_prompt, NULL, NULL},
    {"qfilters", 0, 0, VQ_POL_CAL_FILTER,
     "score = sum over KV heads of k . f, f the head's Q-Filter from calib=FILE (the top direction "
     "of its queries, signed so that a higher score means more attention)", key_filter, NULL, rows_sum, NULL, NULL},
};
#undef K
#define N_POLICIES (int)(sizeof POLICIES / sizeof POLICIES[0])

const vq_kv_policy *vq_kv_policy_at(int i) { return i >= 0 && i < N_POLICIES ? &POLICIES[i] : NULL; }
const vq_kv_policy *vq_kv_policy_find(const char *name) {
    const vq_kv_policy *p = NULL;
    for (int i = 0; i < N_POLICIES; i++)
        if (!strcmp(name, POLICIES[i].name)) p = &POLICIES[i];
    return p;
}

/* ---- the allocators ---- */
/* heads=shared: a layer's rows are shared by its heads (H is 1); candidates sorted by score, ties
 * by block index (the older block goes first); the lowest go until the layer holds B rows */
static int cmp_blk(const void *a, const void *b) {
    const vq_ada_cand *x = a, *y = b;
    if (x->s < y->s) return -1;
    if (x->s > y->s) return 1;
    return x->b < y->b ? -1 : x->b > y->b;
}
static int select_shared(vq_ada_cand *c, int n, int H, const int *prot, int rpb, int B, double floor,
                         int *kept_rows) {
    (void)H; (void)floor;
    qsort(c, (size_t)n, sizeof *c, cmp_blk);
    const int rows = prot[0] + n * rpb, want = VQ_MIN(n, (rows - B + rpb - 1) / rpb);
    for (int i = 0; i < n; i++) c[i].keep = i >= want;
    kept_rows[0] = rows - want * rpb;
    return n - want;
}

/* heads=ada. Higher score first; ties: the newer block (so the older goes first, as in the shared
 * layout's step), then the lower head (equal scores in every head, e.g. streaming_llm's
 * positions, then share the budget evenly instead of favouring head 0). */
static int cmp_cand(const void *a, const void *b) {
    const vq_ada_cand *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    if (x->b != y->b) return x->b > y->b ? -1 : 1;
    return x->h < y->h ? -1 : x->h > y->h;
}

/* A layer of H heads, budget B rows per head (H * B in all). c[0..n): the candidate blocks of
 * every head (rpb rows each: scored, not protected); prot[h]: the rows head h keeps whatever
 * happens (sinks, recent, window, sink=S rows, candidates' blocks that hold a protected row).
 * Sorts c by cmp_cand and sets c[i].keep: first each head's best blocks until it holds
 * F = ceil(floor * B) rows (the safeguard; in whole blocks, never past B: a head then holds at
 * least min(F, the most rows <= B its blocks allow)), then the best of the rest while the layer
 * holds at most H * B rows (AdaKV's top-k across heads, at block granularity). kept_rows[h] gets
 * the rows head h then holds. Returns the blocks kept. */
int vq_ada_alloc(vq_ada_cand *c, int n, int H, const int *prot, int rpb, int B, double floor, int *kept_rows) {
    if (n > 1) qsort(c, (size_t)n, sizeof *c, cmp_cand);
    const long F = (long)ceil(floor * B);
    long total = 0;
    int kept = 0, forced[ADA_MAX_HEADS];
    for (int h = 0; h < H; h++) {
        const long up = F > prot[h] ? (F - prot[h] + rpb - 1) / rpb : 0, cap = B > prot[h] ? (B - prot[h]) / rpb : 0;
        forced[h] = (int)VQ_MIN(up, cap);
        kept_rows[h] = prot[h];
    }
    for (int i = 0; i < n; i++) {
        c[i].keep = forced[c[i].h] > 0;
        if (c[i].keep) { forced[c[i].h]--; kept_rows[c[i].h] += rpb; kept++; }
    }
    for (int h = 0; h < H; h++) total += kept_rows[h];
    long room = (long)H * B > total ? ((long)H * B - total) / rpb : 0;
    for (int i = 0; i < n && room > 0; i++)
        if (!c[i].keep) {
            c[i].keep = 1;
            kept_rows[c[i].h] += rpb;
            kept++;
            room--;
        }
    return kept;
}

static const vq_kv_alloc ALLOCS[] = {
    {"shared", 0, 0, "a row is kept for every KV head of a layer or for none (the default)", select_shared},
    {"ada", 1, 1u << VQ_AK_FLOOR,
     "rows per KV head; an eviction step keeps the top heads x budget (block, head) pairs of a layer "
     "by the policy's score, each head at least floor x budget rows (AdaKV)", vq_ada_alloc},
};
#define N_ALLOCS (int)(sizeof ALLOCS / sizeof ALLOCS[0])

const vq_kv_alloc *vq_kv_alloc_at(int i) { return i >= 0 && i < N_ALLOCS ? &ALLOCS[i] : NULL; }
const vq_kv_alloc *vq_kv_alloc_find(const char *name) {
    for (int i = 0; i < N_ALLOCS; i++)
        if (!strcmp(name, ALLOCS[i].name)) return &ALLOCS[i];
    return NULL;
}
