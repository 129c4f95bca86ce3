/* test_cuda_kvenc.cu: K/V rows encoded for the device's cache (backend/cuda/kv_encode.cuh) give
 * the CPU codec's bytes, EXACTLY (docs/cuda.md "Codes written on the GPU"): no bound, every byte
 * equal. Codecs q8_0, q8_0 rotate=1, q4_0, q4_0 rotate=1, turboquant_mse bits=4 (fp16 and f32
 * norms); head_dim 64 and 128; keys (a 16-row lanes block) and values (16 one-row blocks); rows
 * partly from an fp16 window (as the CPU store encodes rows that waited in its window: decoded
 * from fp16 first) and partly f32. Inputs: Gaussian rows at several scales, and hostile rows:
 * zeros, ties of |x| with opposite signs (q4_0 takes the first), values on the rounding midpoints
 * of the codes, ±65504, tiny values (subnormal fp16 scales), one huge coordinate.
 *
 *   test_cuda_kvenc            the steps run on the HOST (loops over the kernel's thread index,
 *                              the same functions): layout and order of operations; no GPU
 *   test_cuda_kvenc --device   the kernel on the GPU (exit 77 without one): the device's
 *                              arithmetic (the _rn intrinsics) gives the same bytes
 * Seed fixed (printed; VQ_TEST_SEED chooses another). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/kv_encode.cuh"
extern "C" {
#include "../vq_test.h"
#include "core/core.h"
#include "codec/codec.h"
#include "../codec_params.h"
}

typedef struct { const char *codec, *params; } kcase;

/* the kernel's steps, one "thread" index at a time, the barriers between them implicit */
static void host_encode(const vq_cuda_enc *e, int H, int rows, const uint16_t *win, int n_win, const float *src,
                        uint8_t *dst, size_t head_stride) {
    float x[VQ_CUDA_MAX_D], y[VQ_CUDA_MAX_D], gid[VQ_CUDA_MAX_D / 32];
    const int d = e->d;
    for (int h = 0; h < H; h++) {
        uint8_t *base = dst + (size_t)h * head_stride;
        for (int t = 0; t < rows; t++) {
            uint8_t *out = e->lanes ? base : base + (size_t)t * e->block_bytes;
            const int r = e->lanes ? t : 0;
            for (int i = 0; i < d; i++) x[i] = vqe::in_value(win, n_win, src, H, h, d, t, i);
            const double nrm = e->type == VQ_CUDA_KV_TQ4 ? vqe::tq_norm(x, d) : 0.0;
            const int deg = e->type == VQ_CUDA_KV_TQ4 && vqe::tq_degenerate(nrm);
            const double inv = e->type == VQ_CUDA_KV_TQ4 && !deg ? vqe::ddiv(1.0, nrm) : 0.0;
            for (int i = 0; i < d; i++) y[i] = vqe::step_in(e, x, i, inv, deg);
            if (e->rotate) {
                for (int st = 1; st < d; st *= 2)
                    for (int p = 0; p < d / 2; p++) vqe::step_fwht(y, p, st);
                if (e->type != VQ_CUDA_KV_TQ4)
                    for (int i = 0; i < d; i++) y[i] = vqe::step_scale(e, y[i]);
            }
            if (e->type == VQ_CUDA_KV_TQ4) vqe::tq_put_norm(e, nrm, r, out);
            else
                for (int g = 0; g < d / 32; g++) gid[g] = vqe::step_group(e, y, g, r, out);
            for (int b = 0; b < vqe::code_bytes(e); b++) vqe::step_code(e, y, gid, b, r, out);
        }
    }
}

/* row kinds: 0 Gaussian (scale s), 1 zeros, 2 ties of opposite sign, 3 code midpoints, 4 ±65504
 * mixed, 5 tiny, 6 one huge coordinate, 7 q4_0's half-integer trap */
static void make_row(vq_rng *rng, int kind, int d, float *x) {
    const double s = pow(10.0, (double)vq_rng_uniform(rng) * 4 - 2);
    for (int i = 0; i < d; i++) x[i] = (float)(vq_rng_gauss(rng) * s);
    switch (kind) {
    case 1: for (int i = 0; i < d; i++) x[i] = 0.0f; break;
    case 2: for (int g = 0; g < d / 32; g++) { x[32 * g + 3] = 2.5f; x[32 * g + 7] = -2.5f; x[32 * g + 20] = 2.5f; } break;
    case 3: for (int i = 0; i < d; i++) x[i] = (float)((int)(vq_rng_uniform(rng) * 254) - 127) * 0.5f / 127.0f * 8; break;
    case 4: for (int i = 0; i < d; i += 5) x[i] = (i & 1) ? -65504.0f : 65504.0f; break;
    case 5: for (int i = 0; i < d; i++) x[i] *= 1e-7f; break;
    case 6: x[d / 3] = 3.0e4f; break;
    case 7:   /* q4_0's trap: largest 7 (scale -0.875), the others (k + 0.5) * 0.875, so x * id lands
                 next to a half-integer and x * id + 8.5 next to an integer: a fused multiply-add
                 (one rounding) truncates to another code than the encoder's two roundings */
        for (int i = 0; i < d; i++) x[i] = (float)(((int)(vq_rng_uniform(rng) * 15) - 8) + 0.5) * 0.875f * (1.0f + (float)(i % 3) * 1e-7f);
        for (int g = 0; g < d / 32; g++) x[32 * g] = 7.0f;
        break;
    default: break;
    }
}

static int run_case(const kcase &kc, int D, int side, vq_rng *rng, int device) {
    const vq_codec *c = vq_codec_find(kc.codec);
    vq_codec_param p[8];
    const int np = vq_t_codec_params(kc.params, p, 8);
    vq_codec_state st;
    memset(&st, 0, sizeof st);
    st.codec = c;
    st.side = side;
    st.ctx.n_kv_heads = 2;
    st.ctx.n_heads = 8;
    vq_err err;
    memset(&err, 0, sizeof err);
    vq_cuda_enc e;
    if (c->init(&st, D, side, p, np, vq_rng_u64(rng), &err) || vq_cuda_enc_init(&e, &st, &err)) {
        fprintf(stderr, "%s:%s d=%d: %s\n", kc.codec, kc.params, D, err.msg);
        CHECK(0);
        return 1;
    }
    const int H = 2, rows = 16, rpb = st.rows_per_block;
    const size_t head_bytes = (size_t)(rows / rpb) * st.block_bytes;
    int bad = 0;
    for (int trial = 0; trial < 34; trial++) {
        const int n_win = trial % 17;   /* 0..16 rows from the fp16 window */
        float *x = (float *)malloc(sizeof(float) * rows * H * D);     /* the floats the CPU encodes */
        uint16_t *win = (uint16_t *)malloc(2 * (size_t)rows * H * D);
        float *src = (float *)malloc(sizeof(float) * rows * H * D);
        uint8_t *want = (uint8_t *)calloc(H, head_bytes), *got = (uint8_t *)calloc(H, head_bytes);
        for (int t = 0; t < rows; t++)
            for (int h = 0; h < H; h++) {
                float *row = x + ((size_t)t * H + h) * D;
                make_row(rng, (trial + 3 * t + h) % 8 == 0 ? 0 : (trial + t * 5 + h) % 8, D, row);
                for (int i = 0; i < D; i++) {
                    if (t < n_win) {   /* through the window: what the CPU store's get_row returns */
                        win[((size_t)t * H + h) * D + i] = vq_f32_to_f16(row[i]);
                        row[i] = vq_f16_to_f32(win[((size_t)t * H + h) * D + i]);
                    } else {
                        src[((size_t)(t - n_win) * H + h) * D + i] = row[i];
                    }
                }
            }
        /* the CPU codec: per head, 16 rows (lanes: one block; values: one block a row) */
        for (int h = 0; h < H; h++) {
            float tmp[16 * 128];
            for (int t = 0; t < rows; t++) memcpy(tmp + (size_t)t * D, x + ((size_t)t * H + h) * D, sizeof(float) * D);
            for (int t = 0; t < rows; t += rpb) c->encode(&st, tmp + (size_t)t * D, want + h * head_bytes + (size_t)(t / rpb) * st.block_bytes);
        }
        if (!device) {
            host_encode(&e, H, rows, win, n_win, src, got, head_bytes);
        } else {
            void *dw = NULL, *ds = NULL, *dd = NULL;
            if (vq_cuda_malloc(&dw, 2 * (size_t)rows * H * D, &err) || vq_cuda_malloc(&ds, sizeof(float) * rows * H * D, &err) ||
                vq_cuda_malloc(&dd, H * head_bytes, &err) ||
                vq_cuda_memcpy_h2d(dw, win, 2 * (size_t)rows * H * D, &err) ||
                vq_cuda_memcpy_h2d(ds, src, sizeof(float) * rows * H * D, &err) || vq_cuda_memset(dd, 0xA5, H * head_bytes, &err) ||
                vq_cuda_kv_encode(&e, H, rows, dw, n_win, (const float *)ds, dd, head_bytes, NULL, &err) ||
                vq_cuda_sync(&err) || vq_cuda_memcpy_d2h(got, dd, H * head_bytes, &err)) {
                fprintf(stderr, "device: %s\n", err.msg);
                CHECK(0);
                bad++;
            }
            vq_cuda_free(dw); vq_cuda_free(ds); vq_cuda_free(dd);
        }
        size_t first = (size_t)-1, ndiff = 0;
        for (size_t b = 0; b < H * head_bytes; b++)
            if (want[b] != got[b]) { if (first == (size_t)-1) first = b; ndiff++; }
        CHECKF(ndiff == 0, "%s:%s d=%d %s trial %d (%d window rows): %zu of %zu bytes differ, first at %zu (cpu %02x, %s %02x)",
               kc.codec, kc.params, D, side ? "V" : "K", trial, n_win, ndiff, H * head_bytes, first,
               ndiff ? want[first] : 0, device ? "gpu" : "host", ndiff ? got[first] : 0);
        bad += ndiff != 0;
        free(x); free(win); free(src); free(want); free(got);
    }
    c->fini(&st);
    return bad;
}

int main(int argc, char **argv) {
    const int device = argc > 1 && !strcmp(argv[1], "--device");
    if (device && vq_cuda_device_count() < 1) VQ_SKIP("no CUDA device: the kernel's half of this test needs one");
    const uint64_t seed = vq_t_seed(32034);
    printf("test_cuda_kvenc: %s, seed %llu\n", device ? "kernel on the GPU" : "steps on the host", (unsigned long long)seed);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    const kcase cases[] = {{"q8_0", ""}, {"q8_0", "rotate=1"}, {"q4_0", ""}, {"q4_0", "rotate=1"},
                           {"turboquant_mse", "bits=4"}, {"turboquant_mse", "bits=4,norm=f32"}};
    for (const kcase &kc : cases)
        for (int D : {64, 128})
            for (int side : {VQ_SIDE_K, VQ_SIDE_V}) {
                const int bad = run_case(kc, D, side, &rng, device);
                printf("  %-15s %-16s d=%-3d %s: %s\n", kc.codec, kc.params, D, side ? "V" : "K", bad ? "DIFFER" : "bytes equal");
            }
    /* what no encoder writes is refused by name */
    {
        vq_codec_state st;
        memset(&st, 0, sizeof st);
        const vq_codec *c = vq_codec_find("turboquant_mse");
        st.codec = c;
        st.side = VQ_SIDE_K;
        vq_codec_param p[2];
        const int np = vq_t_codec_params("bits=3", p, 8);
        vq_err err;
        memset(&err, 0, sizeof err);
        vq_cuda_enc e;
        CHECK(c->init(&st, 128, VQ_SIDE_K, p, np, 1, &err) == VQ_OK);
        CHECK(vq_cuda_enc_init(&e, &st, &err) == VQ_ERR_ARG && strstr(err.msg, "bits=4"));
        c->fini(&st);
    }
    return vq_t_done();
}
