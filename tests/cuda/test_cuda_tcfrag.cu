/* test_cuda_tcfrag.cu: the tensor-core kernel's fragment builders (attn_tc.cuh: tc_kfrag,
 * tc_vfrag, tc_qcoord, tc_vcoord and the lane -> row / coordinate maps the kernel uses) run on
 * the HOST, with mma.sync m16n8k16 emulated from the PTX fragment layout, against the codecs'
 * own decode: runs wherever VQ_CUDA builds (CI too), no GPU needed. One warp's share of a tile:
 * two key blocks (32 rows) and 32 value rows, encoded by the real codec table (the CPU cache's
 * bytes), 8 query heads.
 *
 * Scores: lane (g, t)'s accumulator c_e of n-tile j must be q_g . k_(8t + 4e + j) (times the row
 * norm for TQ4, as the kernel does). Values: with weights w[q][r] in the P^T fragments
 * (pb[i] = (w[8t + i], w[8t + i + 4]), times the row norm for TQ4), the O^T accumulators mapped
 * through tc_vcoord and rotated back must be sum_r w[q][r] v_r. One value row is marked unseen
 * (ok bit 0, weight 0) with NaN bytes in its scale or norm: it must contribute nothing.
 * Bounds (u_h = 2^-11, u = 2^-24): the fragment elements are fp16 roundings of q, of the key /
 * value element (|e| <= u_h each) and of the weight; the emulated products and sums are in
 * double; the codec decodes in float32 (a few u, 64u taken): scores
 * |S^ - S| <= (2 u_h + 64 u) ||q|| ||k_r||, values ||O^ - O|| <= (2 u_h + 64 u) sum_r w_r ||v_r||
 * + 32 eta sqrt(D) cmax (eta = 2^-25: a subnormal fp16 weight). A wrong lane map gives errors
 * of the size of the values themselves. Seed fixed (printed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/attn_tc.cuh"
extern "C" {
#include "../vq_test.h"
#include "core/core.h"
#include "codec/codec.h"
#include "../codec_params.h"
}

using namespace vqc;

static float frag_half(const uint32_t *reg, int h) { return h ? hhi(*reg) : hlo(*reg); }

/* D = A B + D for one m16n8k16: A from a[lane][4], B from b[lane][2], C in c[lane][4] (PTX layout) */
static void mma_emul(uint32_t a[32][4], uint32_t b[32][2], double c[32][4]) {
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            double s = 0;
            for (int kk = 0; kk < 16; kk++) {
                const int la = 4 * (m % 8) + (kk % 8) / 2, ra = (m >= 8 ? 1 : 0) + (kk >= 8 ? 2 : 0);
                const int lb = 4 * n + (kk % 8) / 2, rb = kk >= 8 ? 1 : 0;
                s += (double)frag_half(&a[la][ra], kk & 1) * frag_half(&b[lb][rb], kk & 1);
            }
            c[4 * (m % 8) + n / 2][(m >= 8 ? 2 : 0) + (n & 1)] += s;
        }
}

typedef struct { const char *codec, *params; } kcase;

static void hadamard(double *x, int D) {
    for (int len = 1; len < D; len <<= 1)
        for (int i = 0; i < D; i += 2 * len)
            for (int k = i; k < i + len; k++) {
                const double a = x[k], b = x[k + len];
                x[k] = a + b;
                x[k + len] = a - b;
            }
}

template <int KT, int D>
static void run(const kcase &kc, const vq_cuda_kv_format &f, const vq_codec *c, vq_codec_state *stk, vq_codec_state *stv,
                vq_rng *rng) {
    const int kblk = (int)f.k_block_bytes, vrb = (int)f.v_row_bytes;
    uint8_t *kbuf = (uint8_t *)calloc(2 * (size_t)kblk + 16, 1), *vbuf = (uint8_t *)calloc(32 * (size_t)vrb + 16, 1);
    float *rows = (float *)malloc(sizeof(float) * 16 * D), *dec = (float *)malloc(sizeof(float) * 16 * D);
    static double kd[32][D], vd[32][D], q[8][D], qt[8][D];
    const double kscale = 1.0 + 2.0 * vq_rng_uniform(rng);
    for (int blk = 0; blk < 2; blk++) {
        for (int i = 0; i < 16 * D; i++) rows[i] = (float)(kscale * vq_rng_gauss(rng));
        c->encode(stk, rows, kbuf + (size_t)blk * kblk);
        c->decode(stk, kbuf + (size_t)blk * kblk, dec);
        for (int r = 0; r < 16; r++)
            for (int i = 0; i < D; i++) kd[16 * blk + r][i] = dec[(size_t)r * D + i];
    }
    for (int r = 0; r < 32; r++) {
        for (int i = 0; i < D; i++) rows[i] = (float)(vq_rng_gauss(rng) + 0.5 + 0.25 * sin(i));
        c->encode(stv, rows, vbuf + (size_t)r * vrb);
        c->decode(stv, vbuf + (size_t)r * vrb, dec);
        for (int i = 0; i < D; i++) vd[r][i] = dec[i];
    }
    const int dead = 11;   /* an unseen value row: NaN in its scale / norm bytes */
    if (KT == VQ_CUDA_KV_TQ4) { vbuf[(size_t)dead * vrb] = 0xFF; vbuf[(size_t)dead * vrb + 1] = 0x7F; }
    else if (KT == VQ_CUDA_KV_Q4_0) for (int gi = 0; gi < D / 32; gi++) { vbuf[(size_t)dead * vrb + 18 * gi] = 0xFF; vbuf[(size_t)dead * vrb + 18 * gi + 1] = 0x7F; }
    else for (int gi = 0; gi < D / 32; gi++) { vbuf[(size_t)dead * vrb + 34 * gi] = 0xFF; vbuf[(size_t)dead * vrb + 34 * gi + 1] = 0x7F; }
    /* queries, and into the keys' codec domain as the kernel does: H (rk ⊙ q) */
    for (int j = 0; j < 8; j++) {
        for (int i = 0; i < D; i++) q[j][i] = vq_rng_gauss(rng);
        for (int i = 0; i < D; i++) qt[j][i] = q[j][i] * (f.rot_k ? f.rk[i] : 1.0f);
        if (f.rot_k) hadamard(qt[j], D);
    }
    static uint32_t lutk[256 * 8], lutv[256 * 8];
    for (int i = 0; i < 256 * 8; i++) {
        const int e = i >> 3;
        lutk[i] = pack_h2(f.cent_k[e & 15], f.cent_k[e >> 4]);
        lutv[i] = pack_h2(f.cent_v[e & 15], f.cent_v[e >> 4]);
    }
    const double uh = ldexp(1.0, -11), u = ldexp(1.0, -24), eta = ldexp(1.0, -25);
    /* ---- scores ---- */
    double sc[32][4];
    memset(sc, 0, sizeof sc);
    double cacc[4][32][4];
    memset(cacc, 0, sizeof cacc);
    for (int k = 0; k < D / 16; k++) {
        uint32_t a[32][4], bm[4][32][2];
        for (int lane = 0; lane < 32; lane++) {
            const int g = lane >> 2, t = lane & 3;
            for (int e = 0; e < 2; e++)
                a[lane][2 * e] = pack_h2((float)qt[g][tc_qcoord<KT>(k, t, e, 0)], (float)qt[g][tc_qcoord<KT>(k, t, e, 1)]);
            a[lane][1] = a[lane][3] = 0u;
            uint32_t ba[4], bb[4];
            tc_kfrag<KT, D>(kbuf, kblk, g, t, k, lutk, 4u * (lane & 7), ba, bb);
            for (int j = 0; j < 4; j++) { bm[j][lane][0] = ba[j]; bm[j][lane][1] = bb[j]; }
        }
        for (int j = 0; j < 4; j++) mma_emul(a, bm[j], cacc[j]);
    }
    int bad = 0;
    double worst = 0;
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int e = 0; e < 2; e++)
            for (int j = 0; j < 4; j++) {
                const int r = 8 * t + 4 * e + j, i = 4 * e + j;
                double s = cacc[j][lane][e];
                if (KT == VQ_CUDA_KV_TQ4) {   /* the kernel's rs[i]: the fp16 norm of row 8(t & 1) + i of block t >> 1 */
                    const uint8_t *kr = kbuf + (size_t)(t >> 1) * kblk;
                    s *= hlo(*(const uint16_t *)(kr + 16 * (t & 1) + 2 * i));
                }
                double ref = 0, qn = 0, kn = 0;
                for (int x = 0; x < D; x++) { ref += q[g][x] * kd[r][x]; qn += q[g][x] * q[g][x]; kn += kd[r][x] * kd[r][x]; }
                const double bound = (2 * uh + 64 * u) * sqrt(qn) * sqrt(kn);
                if (!(fabs(s - ref) <= bound)) bad++;
                if (fabs(s - ref) / bound > worst) worst = fabs(s - ref) / bound;
            }
    }
    CHECKF(bad == 0, "%s:%s D=%d scores: %d of 256 over the bound (worst error / bound %.2f)", kc.codec, kc.params, D, bad, worst);
    printf("  %-15s %-10s D=%3d scores: worst error / bound %.4f\n", kc.codec, kc.params, D, worst);
    /* ---- values ---- */
    static double w[8][32];
    for (int j = 0; j < 8; j++)
        for (int r = 0; r < 32; r++) w[j][r] = r == dead ? 0.0 : (double)__half2float(__float2half_rn((float)vq_rng_uniform(rng)));
    double oacc[D / 16][32][4];
    memset(oacc, 0, sizeof oacc);
    for (int mi = 0; mi < 2; mi++)
        for (int wq = 0; wq < D / 64; wq++) {
            uint32_t am[4][32][4], b[32][2];
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2, t = lane & 3;
                float pw[8];
                for (int i = 0; i < 8; i++) {
                    pw[i] = (float)w[g][8 * t + i];
                    if (KT == VQ_CUDA_KV_TQ4 && pw[i] != 0.0f) pw[i] *= hlo(*(const uint16_t *)(vbuf + (size_t)(8 * t + i) * vrb));
                }
                b[lane][0] = pack_h2(pw[2 * mi], pw[2 * mi + 4]);
                b[lane][1] = pack_h2(pw[2 * mi + 1], pw[2 * mi + 5]);
                const unsigned ok = 0xFFu & ~((dead >> 3) == t ? 1u << (dead & 7) : 0u);
                uint32_t va[2][8];
                tc_vfrag<KT, D>(vbuf + (size_t)(8 * t) * vrb, vrb, g, mi, wq, ok, lutv, 4u * (lane & 7), va);
                for (int mm = 0; mm < 4; mm++) {
                    am[mm][lane][0] = va[0][2 * mm];
                    am[mm][lane][1] = va[0][2 * mm + 1];
                    am[mm][lane][2] = va[1][2 * mm];
                    am[mm][lane][3] = va[1][2 * mm + 1];
                }
            }
            for (int mm = 0; mm < 4; mm++) mma_emul(am[mm], b, oacc[4 * wq + mm]);
        }
    static double oy[8][D];
    for (int j = 0; j < 8; j++)
        for (int x = 0; x < D; x++) oy[j][x] = NAN;
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int m = 0; m < D / 16; m++) {
            const int ca = tc_vcoord<KT, D>(g, 2 * m), cb = tc_vcoord<KT, D>(g, 2 * m + 1);
            oy[2 * t][ca] = oacc[m][lane][0];
            oy[2 * t + 1][ca] = oacc[m][lane][1];
            oy[2 * t][cb] = oacc[m][lane][2];
            oy[2 * t + 1][cb] = oacc[m][lane][3];
        }
    }
    double cmax = KT == VQ_CUDA_KV_Q8_0 ? 128 : 8;
    if (KT == VQ_CUDA_KV_TQ4) { cmax = 0; for (int i = 0; i < 16; i++) cmax = fmax(cmax, fabs(f.cent_v[i])); }
    double vworst = 0;
    int vbad = 0, unwritten = 0;
    for (int j = 0; j < 8; j++) {
        double o[D];
        for (int x = 0; x < D; x++) { o[x] = oy[j][x]; if (isnan(o[x])) unwritten++; }
        if (f.rot_v) {   /* back from the values' codec domain: rv ⊙ (H o) */
            hadamard(o, D);
            for (int x = 0; x < D; x++) o[x] *= f.rv[x];
        }
        double e2 = 0, wv = 0;
        for (int x = 0; x < D; x++) {
            double ref = 0;
            for (int r = 0; r < 32; r++) ref += w[j][r] * vd[r][x];
            e2 += (o[x] - ref) * (o[x] - ref);
        }
        for (int r = 0; r < 32; r++) {
            double vn = 0;
            for (int x = 0; x < D; x++) vn += vd[r][x] * vd[r][x];
            wv += w[j][r] * sqrt(vn);
        }
        const double bound = (2 * uh + 64 * u) * wv + 32 * eta * sqrt((double)D) * cmax;
        if (!(sqrt(e2) <= bound)) vbad++;
        if (sqrt(e2) / bound > vworst) vworst = sqrt(e2) / bound;
    }
    CHECKF(unwritten == 0, "%s:%s D=%d values: %d coordinates no lane holds", kc.codec, kc.params, D, unwritten);
    CHECKF(vbad == 0, "%s:%s D=%d values: %d of 8 queries over the bound (worst error / bound %.2f)", kc.codec, kc.params, D,
           vbad, vworst);
    printf("  %-15s %-10s D=%3d values: worst error / bound %.4f\n", kc.codec, kc.params, D, vworst);
    free(kbuf); free(vbuf); free(rows); free(dec);
}

int main(void) {
    const uint64_t seed = vq_t_seed(32033);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    const kcase cases[] = {{"q8_0", ""}, {"q8_0", "rotate=1"}, {"q4_0", ""}, {"q4_0", "rotate=1"}, {"turboquant_mse", "bits=4"}};
    for (const kcase &kc : cases)
        for (int D : {64, 128}) {
            const vq_codec *c = vq_codec_find(kc.codec);
            vq_codec_param pk[4], pv[4];
            const int np = vq_t_codec_params(kc.params, pk, 4);
            vq_t_codec_params(kc.params, pv, 4);
            vq_codec_state stk, stv;
            memset(&stk, 0, sizeof stk);
            memset(&stv, 0, sizeof stv);
            stk.codec = stv.codec = c;
            stk.side = VQ_SIDE_K;
            stv.side = VQ_SIDE_V;
            stk.ctx.n_kv_heads = stv.ctx.n_kv_heads = 1;
            stk.ctx.n_heads = stv.ctx.n_heads = 8;
            vq_err err;
            memset(&err, 0, sizeof err);
            vq_cuda_kv_format f;
            if (c->init(&stk, D, VQ_SIDE_K, pk, np, vq_rng_u64(&rng), &err) ||
                c->init(&stv, D, VQ_SIDE_V, pv, np, vq_rng_u64(&rng), &err) ||
                vq_cuda_kv_format_init(&f, &stk, &stv, 8, 1, &err)) {
                fprintf(stderr, "%s:%s: %s\n", kc.codec, kc.params, err.msg);
                return 1;
            }
            switch (f.type * 1000 + D) {
            case VQ_CUDA_KV_Q8_0 * 1000 + 64: run<VQ_CUDA_KV_Q8_0, 64>(kc, f, c, &stk, &stv, &rng); break;
            case VQ_CUDA_KV_Q8_0 * 1000 + 128: run<VQ_CUDA_KV_Q8_0, 128>(kc, f, c, &stk, &stv, &rng); break;
            case VQ_CUDA_KV_Q4_0 * 1000 + 64: run<VQ_CUDA_KV_Q4_0, 64>(kc, f, c, &stk, &stv, &rng); break;
            case VQ_CUDA_KV_Q4_0 * 1000 + 128: run<VQ_CUDA_KV_Q4_0, 128>(kc, f, c, &stk, &stv, &rng); break;
            case VQ_CUDA_KV_TQ4 * 1000 + 64: run<VQ_CUDA_KV_TQ4, 64>(kc, f, c, &stk, &stv, &rng); break;
            default: run<VQ_CUDA_KV_TQ4, 128>(kc, f, c, &stk, &stv, &rng); break;
            }
            c->fini(&stk);
            c->fini(&stv);
        }
    return vq_t_done();
}
