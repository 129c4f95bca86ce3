/* kivi.h: what the KIVI-family codec files share (codec_kivi.c: the kivi and kvquant rows, keys,
 * encode/decode; kivi_values.c: the per-token value kernels): the codec state, fp16 helpers and
 * the value kernels' entry points. Internal to the codec layer. */
#ifndef VQ_KIVI_H
#define VQ_KIVI_H
#include <immintrin.h>
#include <string.h>
#include "codec/codec.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

typedef struct kivi {
    int bits, G, d;
    int row_bytes;   /* packed codes of one row: d * bits / 8 */
    int hdr;         /* bytes before the codes: K: 4*d (per-channel scale, min); V: 4*d/G */
    int lanes;       /* keys in the lanes layout (layout=lanes, the default): see kcode_off */
    int n_out;       /* kvquant keys: exact sparse entries per block (0: none; kivi: always 0) */
    size_t sp_off;   /* their offset in a key block: u16 index r*d+c [n_out], then fp16 value [n_out] */
    size_t plane1;   /* bits=3 keys: offset from the codes of the high-bit plane (1 bit a code) */
    int dshift;      /* log2(d) when d is a power of two, else -1 (sparse index -> row, channel) */
    float *w;        /* kvquant qweight=1: per-channel weight of the outlier choice (d), or NULL */
} kivi;

static inline float h2f(const uint8_t *p) { vq_f16 h; memcpy(&h, p, 2); return vq_f16_to_f32(h); }
T2 static inline float h2f_hw(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return _cvtsh_ss(h); }
static inline void f2h(uint8_t *p, float f) { vq_f16 h = vq_f32_to_f16(f); memcpy(p, &h, 2); }

/* kvquant (kivi_outliers.c): the dense-and-sparse split of one key block x (G rows of d): picks
 * k->n_out elements to keep exact, greedily, shrinking the block's sum over channels of
 * w_c (max - min)^2 (w_c = 1, or k->w); gives each channel's min lo[c] and max hi[c] over
 * what is left, mark[r*d+c] = 1 for the picked and their indices r*d+c ascending in idx[].
 * Needs 2 <= G <= 256 and G*d <= VQ_KIVI_OUT_MAX (init checks). */
#define VQ_KIVI_OUT_MAX 16384
void vq_kivi_outliers(const kivi *k, const float *x, float *lo, float *hi, uint8_t *mark, uint16_t *idx);

/* values (kivi_values.c): the AVX-512 per-row loop (any d of the codec), and the folded loops
 * (AVX-512, d % 64 == 0; AVX2, d % 32 == 0) over n_rows consecutive one-row value blocks */
void vq_kivi_vacc_row512(const kivi *k, const uint8_t *B, int n_q, const float *w, size_t wstride,
                         float *const *acc);
void vq_kivi_vfold64_512(const kivi *k, const uint8_t *blocks, size_t bb, int n_q, const float *w,
                         int n_rows, float *const *acc);
void vq_kivi_vfold32_256(const kivi *k, const uint8_t *blocks, size_t bb, int n_q, const float *w,
                         int n_rows, float *const *acc);
#endif
