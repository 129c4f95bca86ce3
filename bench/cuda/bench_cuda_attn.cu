/* bench_cuda_attn.cu: times the CUDA decode-attention kernels (vq_cuda.h) on the 8B shape
 * (32 query heads, 8 KV heads, head_dim 128) at contexts 32k and 128k, batch 1 and 64, for f16,
 * q8_0, q4_0 (rotate=1) and turboquant_mse (4 bits) codes, against the device-to-device copy
 * bandwidth measured in the same run. Not a test and not part of any library.
 *
 * Method (/work/.library/device/METHOD.md): CUDA events around each call, warm-up calls first,
 * the median of many; inputs rotate among copies whose total is at least 3x the L2 cache, so a
 * small case is not timed out of L2. Bytes = what must be read (every key and value byte of the
 * rows, the queries) plus the outputs written; GB/s = bytes / median time; % copy = that over the
 * copy's bandwidth (bytes read + written by cudaMemcpy device to device, 1 GiB, median of 20).
 * Codes are random 16-bit halves of moderate magnitude (so every scale and norm is finite);
 * timing does not depend on the values. Block formats come from the real codec table.
 *
 * usage: bench_cuda_attn [--csv FILE] [--quick] [--no-sweep] */
#include <cuda_runtime.h>
#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "backend/cuda/vq_cuda.h"
extern "C" {
#include "codec/codec.h"
}

#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__global__ void fill_halves(uint16_t *p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29;
        const uint16_t sign = (uint16_t)((x >> 8) & 0x8000u), expo = (uint16_t)(11 + (x >> 20) % 6), mant = (uint16_t)(x & 0x3FF);
        p[i] = sign | (uint16_t)(expo << 10) | mant;   /* +-[2^-4, 2^2) */
    }
}
__global__ void fill_floats(float *p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t x = (i + 7) * 0xD1B54A32D192ED03ull ^ seed;
        x ^= x >> 33; x *= 0xFF51AFD7ED558CCDull; x ^= x >> 33;
        p[i] = (float)((double)(x >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
}

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

static double copy_bw(size_t bytes, int reps, float *med_ms) {
    void *a, *b;
    CU(cudaMalloc(&a, bytes));
    CU(cudaMalloc(&b, bytes));
    fill_halves<<<1024, 256>>>((uint16_t *)a, bytes / 2, 1);
    CU(cudaGetLastError());
    std::vector<cudaEvent_t> e0(reps), e1(reps);
    for (int i = 0; i < reps; i++) { CU(cudaEventCreate(&e0[i])); CU(cudaEventCreate(&e1[i])); }
    for (int i = 0; i < 3; i++) CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    for (int i = 0; i < reps; i++) {
        CU(cudaEventRecord(e0[i]));
        CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        CU(cudaEventRecord(e1[i]));
    }
    CU(cudaDeviceSynchronize());
    std::vector<float> t(reps);
    for (int i = 0; i < reps; i++) { CU(cudaEventElapsedTime(&t[i], e0[i], e1[i])); cudaEventDestroy(e0[i]); cudaEventDestroy(e1[i]); }
    CU(cudaFree(a));
    CU(cudaFree(b));
    *med_ms = median(t);
    return 2.0 * bytes / (*med_ms * 1e-3) / 1e9;
}

struct Kind { const char *label, *codec, *params; int f32_only; };
/* q8_0 and the 4-bit codes run on the tensor-core kernel by default (vq_cuda_attn_tc); "f32" rows time the
 * float32 kernel on the same codes */
static const Kind KINDS[] = {
    {"f16", "f16", "", 0}, {"q8_0", "q8_0", "", 0}, {"q4_0:rotate=1", "q4_0", "rotate=1", 0},
    {"turboquant_mse:bits=4", "turboquant_mse", "bits=4", 0},
    {"q8_0 f32", "q8_0", "", 1}, {"q4_0:rotate=1 f32", "q4_0", "rotate=1", 1}, {"turboquant_mse:bits=4 f32", "turboquant_mse", "bits=4", 1},
};

static vq_cuda_kv_format make_format(const Kind &k, int D, int H, int Hkv, vq_codec_state *sk, vq_codec_state *sv) {
    const vq_codec *c = vq_codec_find(k.codec);
    vq_codec_param p[4];
    int np = 0;
    if (!strcmp(k.params, "rotate=1")) { snprintf(p[0].key, sizeof p[0].key, "rotate"); snprintf(p[0].val, sizeof p[0].val, "1"); np = 1; }
    if (!strcmp(k.params, "bits=4")) { snprintf(p[0].key, sizeof p[0].key, "bits"); snprintf(p[0].val, sizeof p[0].val, "4"); np = 1; }
    memset(sk, 0, sizeof *sk);
    memset(sv, 0, sizeof *sv);
    sk->codec = sv->codec = c;
    sk->side = VQ_SIDE_K;
    sv->side = VQ_SIDE_V;
    vq_err err;
    memset(&err, 0, sizeof err);
    if (c->init(sk, D, VQ_SIDE_K, p, np, 11, &err) || c->init(sv, D, VQ_SIDE_V, p, np, 12, &err)) {
        fprintf(stderr, "codec %s: %s\n", k.codec, err.msg);
        exit(1);
    }
    vq_cuda_kv_format f;
    if (vq_cuda_kv_format_init(&f, sk, sv, H, Hkv, &err)) { fprintf(stderr, "format: %s\n", err.msg); exit(1); }
    f.f32_only = k.f32_only;
    return f;
}

struct Result { double us, us_min, gbs; };

/* one (format, ctx, batch): copies rotate; returns the median */
static Result time_case(const vq_cuda_kv_format &f, int ctx, int batch, size_t l2, int quick) {
    const int H = f.n_heads, Hkv = f.n_kv_heads, D = f.head_dim;
    const size_t kh = (vq_cuda_kv_bytes(&f, ctx) - (size_t)ctx * f.v_row_bytes + 15) / 16 * 16;
    const size_t vh = ((size_t)ctx * f.v_row_bytes + 15) / 16 * 16;
    const size_t seq_bytes = (kh + vh) * Hkv, kv_bytes = seq_bytes * batch;
    size_t free_b, total_b;
    CU(cudaMemGetInfo(&free_b, &total_b));
    int copies = (int)std::max<size_t>(1, (3 * l2 + kv_bytes - 1) / kv_bytes);
    while (copies > 1 && copies * kv_bytes > free_b * 8 / 10) copies--;
    const size_t qn = (size_t)batch * H * D;
    const vq_cuda_plan pl = vq_cuda_attn_plan(&f, batch, ctx);
    std::vector<void *> buf(copies), dseq(copies), dq(copies), dout(copies);
    void *ws;
    CU(cudaMalloc(&ws, pl.workspace_bytes));
    for (int c = 0; c < copies; c++) {
        CU(cudaMalloc(&buf[c], kv_bytes));
        fill_halves<<<4096, 256>>>((uint16_t *)buf[c], kv_bytes / 2, 1000 + c);
        CU(cudaGetLastError());
        CU(cudaMalloc(&dq[c], qn * sizeof(float)));
        CU(cudaMalloc(&dout[c], qn * sizeof(float)));
        fill_floats<<<256, 256>>>((float *)dq[c], qn, 77 + c);
        std::vector<vq_cuda_seq> sq(batch);
        for (int s = 0; s < batch; s++) {
            memset(&sq[s], 0, sizeof sq[s]);
            uint8_t *base = (uint8_t *)buf[c] + (size_t)s * seq_bytes;
            sq[s].k = base;
            sq[s].v = base + kh * Hkv;
            sq[s].k_head_stride = (int64_t)kh;
            sq[s].v_head_stride = (int64_t)vh;
            sq[s].n_coded = ctx;
            sq[s].pos0 = 0;
            sq[s].q_pos = ctx - 1;
        }
        CU(cudaMalloc(&dseq[c], sizeof(vq_cuda_seq) * batch));
        CU(cudaMemcpy(dseq[c], sq.data(), sizeof(vq_cuda_seq) * batch, cudaMemcpyHostToDevice));
    }
    CU(cudaDeviceSynchronize());
    vq_err err;
    memset(&err, 0, sizeof err);
    auto call = [&](int c) {
        if (vq_cuda_attn_decode(&f, (const vq_cuda_seq *)dseq[c], batch, ctx, (const float *)dq[c], (float *)dout[c], ws,
                                pl.workspace_bytes, NULL, &err)) { fprintf(stderr, "decode: %s\n", err.msg); exit(1); }
    };
    for (int i = 0; i < 3 + copies; i++) call(i % copies);
    CU(cudaDeviceSynchronize());
    const double est_s = kv_bytes / 2.0e12 + 10e-6;
    int reps = (int)std::min(300.0, std::max(15.0, (quick ? 0.1 : 0.35) / est_s));
    std::vector<cudaEvent_t> e0(reps), e1(reps);
    for (int i = 0; i < reps; i++) { CU(cudaEventCreate(&e0[i])); CU(cudaEventCreate(&e1[i])); }
    for (int i = 0; i < reps; i++) {
        CU(cudaEventRecord(e0[i]));
        call(i % copies);
        CU(cudaEventRecord(e1[i]));
    }
    CU(cudaDeviceSynchronize());
    std::vector<float> t(reps);
    for (int i = 0; i < reps; i++) { CU(cudaEventElapsedTime(&t[i], e0[i], e1[i])); cudaEventDestroy(e0[i]); cudaEventDestroy(e1[i]); }
    /* every output finite (the codes are random but valid) */
    std::vector<float> ho(qn);
    CU(cudaMemcpy(ho.data(), dout[0], qn * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < qn; i++)
        if (!isfinite(ho[i])) { fprintf(stderr, "non-finite output at %zu\n", i); exit(1); }
    for (int c = 0; c < copies; c++) { cudaFree(buf[c]); cudaFree(dseq[c]); cudaFree(dq[c]); cudaFree(dout[c]); }
    cudaFree(ws);
    const double bytes = (double)kv_bytes + 2.0 * qn * sizeof(float);
    Result r;
    r.us = median(t) * 1e3;
    r.us_min = *std::min_element(t.begin(), t.end()) * 1e3;
    r.gbs = bytes / (r.us * 1e-6) / 1e9;
    return r;
}

int main(int argc, char **argv) {
    const char *csv = NULL;
    int quick = 0, sweep = 1;
    setenv("VQ_CUDA_ATTN", "tc", 1);   /* time both paths: the tensor cores are opt-in in the library */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-sweep")) sweep = 0;
        else { fprintf(stderr, "usage: %s [--csv FILE] [--quick] [--no-sweep]\n", argv[0]); return 2; }
    }
    if (vq_cuda_device_count() == 0) { fprintf(stderr, "no CUDA device\n"); return 77; }
    cudaDeviceProp pr;
    CU(cudaGetDeviceProperties(&pr, 0));
    char name[256];
    vq_err err;
    memset(&err, 0, sizeof err);
    vq_cuda_device_name(name, sizeof name, &err);
    printf("device: %s\n", name);
    float cms;
    const double cbw = copy_bw((size_t)1 << 30, 20, &cms);
    printf("copy (device to device, 1 GiB, read + write): %.1f GB/s (median %.3f ms)\n", cbw, cms);
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (out) fprintf(out, "device,kind,ctx,batch,us_median,us_min,GBps,pct_copy,copy_GBps,bytes_per_token_head\n");
    const int D = 128, H = 32, Hkv = 8;
    const int ctxs[] = {32768, 131072}, batches[] = {1, 64};
    printf("%-26s %7s %5s %11s %11s %9s %7s\n", "kind", "ctx", "batch", "median_us", "min_us", "GB/s", "%copy");
    for (const Kind &k : KINDS) {
        vq_codec_state sk, sv;
        const vq_cuda_kv_format f = make_format(k, D, H, Hkv, &sk, &sv);
        const double bpt = (double)vq_cuda_kv_bytes(&f, 16) / 16;
        for (int ctx : ctxs)
            for (int b : batches) {
                const Result r = time_case(f, ctx, b, (size_t)pr.l2CacheSize, quick);
                printf("%-26s %7d %5d %11.1f %11.1f %9.1f %6.1f%%\n", k.label, ctx, b, r.us, r.us_min, r.gbs, 100 * r.gbs / cbw);
                fflush(stdout);
                if (out) fprintf(out, "\"%s\",%s,%d,%d,%.2f,%.2f,%.1f,%.2f,%.1f,%.2f\n", pr.name, k.label, ctx, b, r.us, r.us_min,
                                 r.gbs, 100 * r.gbs / cbw, cbw, bpt);
            }
        sk.codec->fini(&sk);
        sv.codec->fini(&sv);
    }
    /* the split plan's one knob, on the 4-bit codes: blocks per multiprocessor it aims at */
    if (sweep) {
        vq_codec_state sk, sv;
        const vq_cuda_kv_format f = make_format(KINDS[3], D, H, Hkv, &sk, &sv);
        printf("split sweep (turboquant_mse:bits=4), VQ_CUDA_BLOCKS_PER_SM:\n");
        for (int ctx : ctxs)
            for (int b : batches)
                for (int per : {2, 8, 16}) {
                    char v[16];
                    snprintf(v, sizeof v, "%d", per);
                    setenv("VQ_CUDA_BLOCKS_PER_SM", v, 1);
                    const Result r = time_case(f, ctx, b, (size_t)pr.l2CacheSize, 1);
                    printf("  ctx %6d batch %2d per_sm %2d: %9.1f us %8.1f GB/s %5.1f%%\n", ctx, b, per, r.us, r.gbs, 100 * r.gbs / cbw);
                    if (out) fprintf(out, "\"%s\",tq4_sweep_per_sm_%d,%d,%d,%.2f,%.2f,%.1f,%.2f,%.1f,0\n", pr.name, per, ctx, b, r.us,
                                     r.us_min, r.gbs, 100 * r.gbs / cbw, cbw);
                }
        unsetenv("VQ_CUDA_BLOCKS_PER_SM");
        sk.codec->fini(&sk);
        sv.codec->fini(&sv);
    }
    if (out) fclose(out);
    return 0;
}
