/* test_cuda_attn.c: the CUDA decode-attention kernels against float64 attention over the rows
 * the CPU codecs decode. Rows are encoded by the real codec table (vq_codec_find + init/encode:
 * the bytes the CPU cache holds), laid out as vq_cuda.h says, with sinks, a window, a partial
 * block (fp16 rows), sliding-window spans, causal positions and GQA, for a batch of sequences
 * of different lengths. Every output element is poisoned (NaN) before each run and must come
 * back finite. Exits 77 when there is no CUDA device (CI has none).
 *
 * The bound (per output element i, then its 2-norm over the batch; u = 2^-24, p_r the float64
 * softmax weights, ref the float64 output):
 *   E_i = sum_r p_r [ gA |v_ri| + (d_r + 8u) |v_ri - ref_i| + gR ||v_r|| ]
 *   gA  = (m + 6) u, m = the longest float32 sum an accumulator sees: chunk / row groups (rows
 *         one thread adds) + chunk / 64 (alpha rescales) + log2(row groups) + splits + log2(D);
 *   d_r = (D + 2 log2 D + 8) u ||q|| ||k_r|| / sqrt(D): the score's float32 dot product (D terms),
 *         the query's rotation and the CPU decode's inverse rotation (log2 D levels each);
 *   gR  = 2 (log2 D + 2) u for values in a rotated domain (the CPU decode's and our output's
 *         inverse rotation), else 0; 8u: exp2f and the max subtraction.
 * First-order terms of the standard float error model (Higham, ch. 3); nothing is fitted. The
 * check is ||out - ref|| <= ||E||, and the relative error ||out - ref|| / ||ref|| is printed with
 * the bound's ||E|| / ||ref||.
 *
 * The tensor-core path (vq_cuda_attn_tc: q8_0, q4_0 and 4-bit TurboQuant with fp16 norms; opt-in with
 * VQ_CUDA_ATTN=tc until it has run on a GPU, which this test sets for itself;
 * every such case runs on both paths, "tc" and "f32", on the same rows). Its arithmetic: the
 * query (after scaling and rotation in float32), the key elements, the value elements and the
 * softmax weights are rounded to fp16 (u_h = 2^-11, round to nearest; below 2^-14 the spacing is
 * 2^-24, so an absolute error eta = 2^-25 where a weight is subnormal), products of fp16 are exact
 * in the fp32 accumulators, and the tensor cores' fp32 sums truncate (at most 2u per addition:
 * Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021).
 * Per head, the bound is B = ||E|| + T with E as above but
 *   gA  = (m' + 6) u, m' = 2 chunk/4 (the rows one warp's accumulators add, truncating)
 *         + chunk/128 (rescales) + 4 (the warps' merge) + splits + 1 + log2 D;
 *   d_r = [(2D + 2 log2 D + 8) u + 2 u_h] ||q|| ||k_r|| / sqrt(D): the score of row r is
 *         sum_c q^_c k^_c with q^ = q (1 + e), k^ = k (1 + e'), |e|, |e'| <= u_h (the key element
 *         in fp16: TQ4's centroid, q4_0's (n - 8) x scale, q8_0's n x scale), so |score^ - score| <= 2 u_h
 *         sum_c |q_c k_c| <= 2 u_h ||q|| ||k_r|| (Cauchy-Schwarz; the rotation is orthonormal),
 *         plus the truncating fp32 sums (TQ4's norm multiplies the fp32 score: u);
 *   T   = 2 u_h sum_r P_r ||v_r|| + eta sum_r (||v_r|| + sqrt(D) cmax) / den: the value sum is
 *         sum_r w^_r x^_r / l with the weight w_r (p_r, times the row norm for TQ4) rounded to fp16
 *         (u_h w_r + eta) and the value element x^ (TQ4 centroid, q4_0 (n - 8) x scale, q8_0 n x scale) rounded to
 *         fp16 (u_h), while l sums the fp32 weights; P_r = the softmax weight, den >= 1 the
 *         softmax denominator relative to the largest score, cmax the largest code value (TQ4:
 *         max |centroid|, q4_0: 8, q8_0: 128), norms because the rotation back is orthonormal.
 * The check is then ||out - ref|| <= sqrt(sum over heads of B^2) (first order, as above).
 * Arguments: --small (fewer, shorter cases: compute-sanitizer). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../vq_test.h"
#include "../codec_params.h"
#include "core/core.h"
#include "codec/codec.h"
#include "backend/cuda/vq_cuda.h"

typedef struct { const char *codec, *params; } kv_case;
static const kv_case CASES[] = {
    {"f16", ""}, {"q8_0", ""}, {"q8_0", "rotate=1"}, {"q4_0", ""}, {"q4_0", "rotate=1"},
    {"turboquant_mse", "bits=4"}, {"turboquant_mse", "bits=4,norm=f32"},
};

static double gauss(vq_rng *r) { return vq_rng_gauss(r); }

typedef struct {
    int T, S, n_coded, n_fp, pos0, q_pos, span;
    float *kd, *vd;            /* decoded rows, [row (storage order: coded, then fp)][Hkv][D] */
    int32_t *pos;              /* positions, same order */
    void *dk, *dv, *dfk, *dfv, *dfpos;
    int64_t kstride, vstride;
} seq_t;

#define CK(x) do { vq_err e_ = {0}; vq_status s_ = (x); if (s_) { (void)e_; fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x); exit(1); } } while (0)

/* tc: 1 = the tensor-core path (skipped, returning 0, where the format has none), 0 = float32 */
static int run_case(const kv_case *kc, int D, int H, int Hkv, int n_seqs, int maxT, uint64_t seed, int tc,
                    double *worst_rel, double *worst_ratio) {
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    vq_err err = {0};
    const vq_codec *c = vq_codec_find(kc->codec);
    if (!c) { fprintf(stderr, "no codec %s\n", kc->codec); return 1; }
    vq_codec_param pk[8], pv[8];
    int npk = vq_t_codec_params(kc->params, pk, 8), npv = vq_t_codec_params(kc->params, pv, 8);
    vq_codec_state stk, stv;
    memset(&stk, 0, sizeof stk);
    memset(&stv, 0, sizeof stv);
    stk.codec = stv.codec = c;
    stk.side = VQ_SIDE_K;
    stv.side = VQ_SIDE_V;
    stk.ctx.n_kv_heads = stv.ctx.n_kv_heads = Hkv;
    stk.ctx.n_heads = stv.ctx.n_heads = H;
    if (c->init(&stk, D, VQ_SIDE_K, pk, npk, vq_rng_u64(&rng), &err) ||
        c->init(&stv, D, VQ_SIDE_V, pv, npv, vq_rng_u64(&rng), &err)) {
        fprintf(stderr, "init %s:%s: %s\n", kc->codec, kc->params, err.msg);
        return 1;
    }
    vq_cuda_kv_format f;
    if (vq_cuda_kv_format_init(&f, &stk, &stv, H, Hkv, &err)) {
        fprintf(stderr, "format %s:%s: %s\n", kc->codec, kc->params, err.msg);
        return 1;
    }
    f.f32_only = !tc;
    if (tc && !vq_cuda_attn_tc(&f)) {
        c->fini(&stk);
        c->fini(&stv);
        return 0;
    }
    const int rpb = stk.rows_per_block, G = H / Hkv;
    const size_t kbb = stk.block_bytes, vbb = stv.block_bytes;
    seq_t *sq = calloc((size_t)n_seqs, sizeof *sq);
    vq_cuda_seq *desc = calloc((size_t)n_seqs, sizeof *desc);
    int max_coded = 0;
    float *rows = malloc(sizeof(float) * 16 * D), *dec = malloc(sizeof(float) * 16 * D);
    uint8_t *blk = malloc(kbb > vbb ? kbb : vbb);
    for (int s = 0; s < n_seqs; s++) {
        seq_t *q = &sq[s];
        /* lengths: empty, tiny, and spread up to maxT; sinks and a window on some */
        q->T = s == 0 ? 0 : s == 1 ? 1 + (int)(vq_rng_u64(&rng) % 40) : 1 + (int)(vq_rng_u64(&rng) % (uint64_t)maxT);
        q->S = (vq_rng_u64(&rng) & 1) ? (int)VQ_MIN(4, q->T) : 0;
        const int R = (vq_rng_u64(&rng) & 1) ? 32 : 0;
        int rest = q->T - q->S - R;
        q->n_coded = rest > 0 ? rest / rpb * rpb : 0;
        q->pos0 = q->S;
        q->n_fp = q->T - q->n_coded;
        q->q_pos = q->T - 1;
        if (q->T > 50 && vq_rng_u64(&rng) % 3 == 0) q->q_pos = q->S + (int)(vq_rng_u64(&rng) % (uint64_t)(q->T - q->S));
        if (q->T < 1) q->q_pos = 0;
        q->span = vq_rng_u64(&rng) % 3 == 0 ? 1 + (int)(vq_rng_u64(&rng) % (uint64_t)(q->T + 1)) : 0;
        if (q->n_coded > max_coded) max_coded = q->n_coded;
        const int nr = q->T;
        q->kd = malloc(sizeof(float) * ((size_t)nr * Hkv * D + 1));
        q->vd = malloc(sizeof(float) * ((size_t)nr * Hkv * D + 1));
        q->pos = malloc(sizeof(int32_t) * ((size_t)nr + 1));
        /* coded rows, head by head, the CPU cache's block bytes */
        const int nblk = q->n_coded / rpb;
        q->kstride = ((int64_t)nblk * (int64_t)kbb + 15) / 16 * 16;
        q->vstride = ((int64_t)q->n_coded * (int64_t)vbb + 15) / 16 * 16;
        uint8_t *hk = calloc((size_t)(q->kstride * Hkv + 16), 1), *hv = calloc((size_t)(q->vstride * Hkv + 16), 1);
        const double kscale = 1.0 + 2.0 * vq_rng_uniform(&rng);
        for (int h = 0; h < Hkv; h++) {
            for (int b = 0; b < nblk; b++) {
                for (int i = 0; i < rpb * D; i++) rows[i] = (float)(kscale * gauss(&rng));
                c->encode(&stk, rows, blk);
                memcpy(hk + h * q->kstride + (size_t)b * kbb, blk, kbb);
                c->decode(&stk, blk, dec);
                for (int r = 0; r < rpb; r++)
                    memcpy(q->kd + ((size_t)(b * rpb + r) * Hkv + h) * D, dec + (size_t)r * D, sizeof(float) * D);
            }
            for (int r = 0; r < q->n_coded; r++) {
                for (int i = 0; i < D; i++) rows[i] = (float)(gauss(&rng) + 0.5 + 0.25 * sin(i));
                c->encode(&stv, rows, blk);
                memcpy(hv + h * q->vstride + (size_t)r * vbb, blk, vbb);
                c->decode(&stv, blk, dec);
                memcpy(q->vd + ((size_t)r * Hkv + h) * D, dec, sizeof(float) * D);
            }
        }
        for (int r = 0; r < q->n_coded; r++) q->pos[r] = q->pos0 + r;
        /* fp16 rows: the sinks (positions 0..S-1), then the tail after the coded rows */
        vq_f16 *fk = malloc(sizeof(vq_f16) * ((size_t)q->n_fp * Hkv * D + 1)), *fv = malloc(sizeof(vq_f16) * ((size_t)q->n_fp * Hkv * D + 1));
        int32_t *fpos = malloc(sizeof(int32_t) * ((size_t)q->n_fp + 1));
        for (int r = 0; r < q->n_fp; r++) {
            const int p = r < q->S ? r : q->S + q->n_coded + (r - q->S);
            fpos[r] = p;
            q->pos[q->n_coded + r] = p;
            for (int i = 0; i < Hkv * D; i++) {
                fk[(size_t)r * Hkv * D + i] = vq_f32_to_f16((float)(kscale * gauss(&rng)));
                fv[(size_t)r * Hkv * D + i] = vq_f32_to_f16((float)(gauss(&rng) + 0.5));
                q->kd[((size_t)q->n_coded + r) * Hkv * D + i] = vq_f16_to_f32(fk[(size_t)r * Hkv * D + i]);
                q->vd[((size_t)q->n_coded + r) * Hkv * D + i] = vq_f16_to_f32(fv[(size_t)r * Hkv * D + i]);
            }
        }
        CK(vq_cuda_malloc(&q->dk, (size_t)(q->kstride * Hkv + 16), &err));
        CK(vq_cuda_malloc(&q->dv, (size_t)(q->vstride * Hkv + 16), &err));
        CK(vq_cuda_memcpy_h2d(q->dk, hk, (size_t)(q->kstride * Hkv + 16), &err));
        CK(vq_cuda_memcpy_h2d(q->dv, hv, (size_t)(q->vstride * Hkv + 16), &err));
        if (q->n_fp > 0) {
            const size_t fb = sizeof(vq_f16) * (size_t)q->n_fp * Hkv * D;
            CK(vq_cuda_malloc(&q->dfk, fb, &err));
            CK(vq_cuda_malloc(&q->dfv, fb, &err));
            CK(vq_cuda_malloc(&q->dfpos, sizeof(int32_t) * (size_t)q->n_fp, &err));
            CK(vq_cuda_memcpy_h2d(q->dfk, fk, fb, &err));
            CK(vq_cuda_memcpy_h2d(q->dfv, fv, fb, &err));
            CK(vq_cuda_memcpy_h2d(q->dfpos, fpos, sizeof(int32_t) * (size_t)q->n_fp, &err));
        }
        free(hk); free(hv); free(fk); free(fv); free(fpos);
        desc[s] = (vq_cuda_seq){.k = q->dk, .v = q->dv, .k_head_stride = q->kstride, .v_head_stride = q->vstride,
                                .n_coded = q->n_coded, .pos0 = q->pos0, .fp_k = q->dfk, .fp_v = q->dfv,
                                .fp_pos = q->dfpos, .n_fp = q->n_fp, .q_pos = q->q_pos, .span = q->span};
    }
    free(rows); free(dec); free(blk);
    /* queries, the call */
    const size_t nq = (size_t)n_seqs * H * D;
    float *hq = malloc(sizeof(float) * nq), *ho = malloc(sizeof(float) * nq);
    for (size_t i = 0; i < nq; i++) hq[i] = (float)gauss(&rng);
    const vq_cuda_plan pl = vq_cuda_attn_plan(&f, n_seqs, max_coded);
    void *dseq, *dq, *dout, *ws;
    CK(vq_cuda_malloc(&dseq, sizeof(vq_cuda_seq) * n_seqs, &err));
    CK(vq_cuda_malloc(&dq, sizeof(float) * nq, &err));
    CK(vq_cuda_malloc(&dout, sizeof(float) * nq, &err));
    CK(vq_cuda_malloc(&ws, pl.workspace_bytes, &err));
    CK(vq_cuda_memcpy_h2d(dseq, desc, sizeof(vq_cuda_seq) * n_seqs, &err));
    CK(vq_cuda_memcpy_h2d(dq, hq, sizeof(float) * nq, &err));
    CK(vq_cuda_memset(dout, 0xFF, sizeof(float) * nq, &err));   /* NaN everywhere */
    CK(vq_cuda_memset(ws, 0xFF, pl.workspace_bytes, &err));
    if (vq_cuda_attn_decode(&f, dseq, n_seqs, max_coded, dq, dout, ws, pl.workspace_bytes, NULL, &err) ||
        vq_cuda_sync(&err)) {
        fprintf(stderr, "attn_decode: %s\n", err.msg);
        return 1;
    }
    CK(vq_cuda_memcpy_d2h(ho, dout, sizeof(float) * nq, &err));
    /* reference and bound */
    const double u = ldexp(1.0, -24), l2d = log2((double)D);
    const int nrg = 1024 / D;
    const double m_acc = (double)pl.chunk / nrg + pl.chunk / 64.0 + log2((double)nrg) + pl.n_splits + 1 + l2d;
    const double m_tc = 2.0 * pl.chunk / 4 + pl.chunk / 128.0 + 4 + pl.n_splits + 1 + l2d;
    const double uh = ldexp(1.0, -11), eta = ldexp(1.0, -25);
    const int tq = f.type == VQ_CUDA_KV_TQ4;
    double cmax = f.type == VQ_CUDA_KV_Q8_0 ? 128.0 : 8.0;
    if (tq) {
        cmax = 0;
        for (int i = 0; i < 16; i++) cmax = fmax(cmax, fabs(f.cent_v[i]));
    }
    const double gA = tc ? (m_tc + 6) * u : (m_acc + 6) * u;
    const double gS = tc ? (2 * D + 2 * l2d + 8) * u + 2 * uh : (D + 2 * l2d + 8) * u;
    const double gR = (f.rot_v ? 2 * (l2d + 2) * u : 0.0);
    double e2 = 0, r2 = 0, b2 = 0;
    int unwritten = 0;
    double *pr = malloc(sizeof(double) * ((size_t)maxT + 1)), *ref = malloc(sizeof(double) * D), *eb = malloc(sizeof(double) * D);
    for (int s = 0; s < n_seqs; s++) {
        const seq_t *q = &sq[s];
        for (int hq_ = 0; hq_ < H; hq_++) {
            const int h = hq_ / G;
            const float *qv = hq + ((size_t)s * H + hq_) * D;
            double qn = 0;
            for (int i = 0; i < D; i++) qn += (double)qv[i] * qv[i];
            qn = sqrt(qn);
            double mx = -INFINITY;
            for (int r = 0; r < q->T; r++) {
                const int p = q->pos[r];
                const int vis = p <= q->q_pos && (q->span <= 0 || p > q->q_pos - q->span);
                if (!vis) { pr[r] = -INFINITY; continue; }
                const float *k = q->kd + ((size_t)r * Hkv + h) * D;
                double d = 0;
                for (int i = 0; i < D; i++) d += (double)qv[i] * k[i];
                pr[r] = d / sqrt((double)D);
                if (pr[r] > mx) mx = pr[r];
            }
            double den = 0;
            for (int r = 0; r < q->T; r++) { pr[r] = pr[r] == -INFINITY ? 0.0 : exp(pr[r] - mx); den += pr[r]; }
            for (int i = 0; i < D; i++) { ref[i] = 0; eb[i] = 0; }
            double T = 0;   /* the tensor-core path's value terms (norm-wise) */
            if (den > 0) {
                for (int r = 0; r < q->T; r++) {
                    if (pr[r] == 0) continue;
                    pr[r] /= den;
                    const float *v = q->vd + ((size_t)r * Hkv + h) * D;
                    for (int i = 0; i < D; i++) ref[i] += pr[r] * v[i];
                }
                for (int r = 0; r < q->T; r++) {
                    if (pr[r] == 0) continue;
                    const float *k = q->kd + ((size_t)r * Hkv + h) * D, *v = q->vd + ((size_t)r * Hkv + h) * D;
                    double kn = 0, vn = 0;
                    for (int i = 0; i < D; i++) { kn += (double)k[i] * k[i]; vn += (double)v[i] * v[i]; }
                    const double dr = gS * qn * sqrt(kn) / sqrt((double)D) + 8 * u;
                    for (int i = 0; i < D; i++)
                        eb[i] += pr[r] * (gA * fabs(v[i]) + dr * fabs(v[i] - ref[i]) + gR * sqrt(vn));
                    if (tc) T += 2 * uh * pr[r] * sqrt(vn) + eta * (sqrt(vn) + sqrt((double)D) * cmax) / den;
                }
            }
            double bh2 = 0;
            const float *o = ho + ((size_t)s * H + hq_) * D;
            for (int i = 0; i < D; i++) {
                if (!isfinite(o[i])) { unwritten++; continue; }
                e2 += (o[i] - ref[i]) * (o[i] - ref[i]);
                r2 += ref[i] * ref[i];
                bh2 += eb[i] * eb[i];
            }
            b2 += (sqrt(bh2) + T) * (sqrt(bh2) + T);
        }
    }
    const double rel = sqrt(e2 / (r2 > 0 ? r2 : 1)), bnd = sqrt(b2 / (r2 > 0 ? r2 : 1));
    printf("  %-3s %-15s %-16s D=%3d H=%2d Hkv=%d seqs=%d max_coded=%5d chunk=%4d splits=%3d  rel %.3e  bound %.3e%s\n",
           tc ? "tc" : "f32", kc->codec, kc->params, D, H, Hkv, n_seqs, max_coded, pl.chunk, pl.n_splits, rel, bnd,
           unwritten ? "  UNWRITTEN" : "");
    CHECKF(unwritten == 0, "%s %s:%s D=%d: %d output elements not written", tc ? "tc" : "f32", kc->codec, kc->params, D,
           unwritten);
    CHECKF(sqrt(e2) <= sqrt(b2), "%s %s:%s D=%d H=%d Hkv=%d: error %.3e over the bound %.3e", tc ? "tc" : "f32", kc->codec,
           kc->params, D, H, Hkv, rel, bnd);
    if (rel > *worst_rel) *worst_rel = rel;
    if (bnd > 0 && rel / bnd > *worst_ratio) *worst_ratio = rel / bnd;
    free(pr); free(ref); free(eb); free(hq); free(ho);
    vq_cuda_free(dseq); vq_cuda_free(dq); vq_cuda_free(dout); vq_cuda_free(ws);
    for (int s = 0; s < n_seqs; s++) {
        vq_cuda_free(sq[s].dk); vq_cuda_free(sq[s].dv); vq_cuda_free(sq[s].dfk); vq_cuda_free(sq[s].dfv);
        vq_cuda_free(sq[s].dfpos);
        free(sq[s].kd); free(sq[s].vd); free(sq[s].pos);
    }
    free(sq); free(desc);
    c->fini(&stk);
    c->fini(&stv);
    return 0;
}

int main(int argc, char **argv) {
    const int small = argc > 1 && !strcmp(argv[1], "--small");
    setenv("VQ_CUDA_ATTN", "tc", 1);   /* both paths: the tensor cores are opt-in in the library */
    if (vq_cuda_device_count() == 0) VQ_SKIP("no CUDA device (cudaGetDeviceCount gives none): GPU tests skipped");
    char name[256];
    vq_err err = {0};
    if (!vq_cuda_device_name(name, sizeof name, &err)) printf("device: %s\n", name);
    /* a fixed seed (printed; VQ_TEST_SEED chooses another) */
    uint64_t seed = vq_t_seed(32032);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    const int shapes[][3] = {{128, 32, 8}, {128, 12, 4}, {64, 8, 8}, {64, 16, 2}, {128, 4, 2}};
    double worst_rel = 0, worst_ratio = 0;
    for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            if (small && si > 1) continue;
            const int D = shapes[si][0], H = shapes[si][1], Hkv = shapes[si][2];
            const int n_seqs = small ? 3 : 6, maxT = small ? 300 : (si == 0 ? 5000 : 1500);
            const uint64_t cs = vq_rng_u64(&rng);   /* the same rows for both paths */
            for (int tc = 0; tc < 2; tc++)
                if (run_case(&CASES[ci], D, H, Hkv, n_seqs, maxT, cs, tc, &worst_rel, &worst_ratio)) return 1;
        }
    printf("worst relative error %.3e, worst error / bound %.3f\n", worst_rel, worst_ratio);
    return vq_t_done();
}
