/* bitpack.c: pack/unpack b-bit codes in a dense little-endian bit stream (see bitpack.h).
 * Groups of 8 codes are exactly b bytes, so both directions work on 8-code groups through a
 * 64-bit word and finish the tail code by code; unpack has AVX2 paths for the hot widths 2, 3, 4. */
#include <string.h>
#include <immintrin.h>
#include "codec/bitpack.h"
#include "core/core.h"

void vq_bitpack_pack(int bits, const uint8_t *codes, size_t n, uint8_t *out) {
    if (bits < 1 || bits > 8) return;
    const uint64_t mask = (1u << bits) - 1u;
    size_t g = n / 8, i;
    for (i = 0; i < g; i++) {                      /* 8 codes -> exactly `bits` bytes */
        uint64_t w = 0;
        for (int k = 0; k < 8; k++) w |= ((uint64_t)codes[i * 8 + k] & mask) << (k * bits);
        for (int k = 0; k < bits; k++) out[i * bits + k] = (uint8_t)(w >> (8 * k));
    }
    size_t rest = n - g * 8;
    if (!rest) return;
    uint64_t w = 0;
    for (size_t k = 0; k < rest; k++) w |= ((uint64_t)codes[g * 8 + k] & mask) << (k * bits);
    size_t nb = (rest * (size_t)bits + 7) / 8;
    for (size_t k = 0; k < nb; k++) out[g * bits + k] = (uint8_t)(w >> (8 * k));
}

void vq_bitpack_unpack_scalar(int bits, const uint8_t *in, size_t n, uint8_t *codes) {
    if (bits < 1 || bits > 8) return;
    const uint64_t mask = (1u << bits) - 1u;
    size_t g = n / 8, i;
    for (i = 0; i < g; i++) {
        uint64_t w = 0;
        for (int k = 0; k < bits; k++) w |= (uint64_t)in[i * bits + k] << (8 * k);
        for (int k = 0; k < 8; k++) codes[i * 8 + k] = (uint8_t)((w >> (k * bits)) & mask);
    }
    size_t rest = n - g * 8;
    if (!rest) return;
    uint64_t w = 0;
    size_t nb = (rest * (size_t)bits + 7) / 8;
    for (size_t k = 0; k < nb; k++) w |= (uint64_t)in[g * bits + k] << (8 * k);
    for (size_t k = 0; k < rest; k++) codes[g * 8 + k] = (uint8_t)((w >> (k * bits)) & mask);
}

/* AVX2, bits in {2,3,4}: 32 codes = 4*bits bytes per step. Each 32-bit lane gets the 4 bytes
 * that start its 8-code group broadcast, shifted by (0, b, .., 7b) per lane, masked, narrowed. */
__attribute__((target("avx2")))
static size_t unpack_avx2(int bits, const uint8_t *in, size_t n, uint8_t *codes) {
    const __m256i sh = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 4 * bits, 5 * bits,
                                         6 * bits, 7 * bits);
    const __m256i m = _mm256_set1_epi32((1 << bits) - 1);
    const __m256i pack = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    size_t i = 0;
    /* groups of 32 codes; the 4-byte load of the last group must stay inside the input */
    size_t nbytes = vq_bitpack_bytes(bits, n);
    for (; i + 32 <= n && (i / 8 + 3) * (size_t)bits + 4 <= nbytes; i += 32) {
        const uint8_t *p = in + (i / 8) * (size_t)bits;
        uint32_t w[4];
        for (int k = 0; k < 4; k++) memcpy(&w[k], p + k * bits, 4);
        __m256i r[4];
        for (int k = 0; k < 4; k++)
            r[k] = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w[k]), sh), m);
        /* each r[k] holds 8 codes in 32-bit lanes: pick byte 0 of each lane */
        for (int k = 0; k < 4; k++) {
            __m256i b = _mm256_shuffle_epi8(r[k], pack);          /* lanes 0-3 in low 4 bytes of each half */
            uint32_t lo = (uint32_t)_mm256_extract_epi32(b, 0);
            uint32_t hi = (uint32_t)_mm256_extract_epi32(b, 4);
            memcpy(codes + i + 8 * k, &lo, 4);
            memcpy(codes + i + 8 * k + 4, &hi, 4);
        }
    }
    return i;
}

void vq_bitpack_unpack(int bits, const uint8_t *in, size_t n, uint8_t *codes) {
    if (bits < 1 || bits > 8) return;
    size_t done = 0;
    if ((bits == 2 || bits == 3 || bits == 4) && vq_cpu_best_isa() >= VQ_ISA_AVX2)
        done = unpack_avx2(bits, in, n, codes);
    /* done is a multiple of 8, so the rest starts on a byte boundary */
    vq_bitpack_unpack_scalar(bits, in + done / 8 * (size_t)bits, n - done, codes + done);
}
