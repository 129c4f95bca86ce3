/* test_bitpack.c: bit-exact pack/unpack round trips for every width 1..8 and every length 0..300,
 * the AVX2 unpack against the scalar reference, the documented layout (3 bits: 8 codes in 3
 * bytes, LSB first), zeroed tail bits, masking of out-of-range codes and no reads past the end. */
#include <stdlib.h>
#include "codec/bitpack.h"
#include "core/core.h"
#include "../vq_test.h"

int main(void) {
    uint64_t seed = vq_t_seed(12345);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    uint8_t codes[300], back[300], back2[300];
    int bad_rt = 0, bad_simd = 0, bad_tail = 0, bad_get = 0, bad_size = 0;
    for (int bits = 1; bits <= 8; bits++) {
        for (size_t n = 0; n <= 300; n++) {
            size_t nb = vq_bitpack_bytes(bits, n);
            if (nb * 8 < n * bits || (nb > 0 && (nb - 1) * 8 >= n * bits)) bad_size++;
            /* exact-size heap buffers so ASan catches any read or write past the end */
            uint8_t *buf = malloc(nb ? nb : 1);
            for (size_t i = 0; i < n; i++) codes[i] = (uint8_t)(vq_rng_u64(&rng) & ((1u << bits) - 1));
            memset(buf, 0xAB, nb ? nb : 1);
            vq_bitpack_pack(bits, codes, n, buf);
            memset(back, 0xEE, sizeof back);
            memset(back2, 0xEE, sizeof back2);
            vq_bitpack_unpack(bits, buf, n, back);
            vq_bitpack_unpack_scalar(bits, buf, n, back2);
            if (memcmp(codes, back, n) != 0) bad_rt++;
            if (memcmp(back, back2, n) != 0) bad_simd++;
            if (n < 300 && (back[n] != 0xEE || back2[n] != 0xEE)) bad_rt++;   /* no overrun */
            if (nb && (n * bits) % 8 && (buf[nb - 1] >> ((n * bits) % 8)) != 0) bad_tail++;
            for (size_t i = 0; i < n; i++)
                if (vq_bitpack_get(bits, buf, i) != codes[i]) { bad_get++; break; }
            free(buf);
        }
    }
    CHECKF(bad_size == 0, "%d sizes wrong", bad_size);
    CHECKF(bad_rt == 0, "%d round trips failed", bad_rt);
    CHECKF(bad_simd == 0, "%d SIMD/scalar mismatches", bad_simd);
    CHECKF(bad_tail == 0, "%d tails not zero", bad_tail);
    CHECKF(bad_get == 0, "%d random-access mismatches", bad_get);

    /* layout: 3-bit codes 0..7 -> 8 codes in 3 bytes, code i at bits [3i, 3i+3) */
    uint8_t c8[8] = {0, 1, 2, 3, 4, 5, 6, 7}, p3[3];
    vq_bitpack_pack(3, c8, 8, p3);
    uint32_t w = 0;
    for (int i = 0; i < 8; i++) w |= (uint32_t)i << (3 * i);
    CHECK(p3[0] == (w & 0xff) && p3[1] == ((w >> 8) & 0xff) && p3[2] == ((w >> 16) & 0xff));
    CHECK(vq_bitpack_bytes(3, 8) == 3 && vq_bitpack_bytes(5, 8) == 5 && vq_bitpack_bytes(6, 4) == 3);
    /* out-of-range codes are masked, not spilled into neighbours */
    uint8_t big[4] = {0xff, 0, 0xff, 0}, pb[1], ub[4];
    vq_bitpack_pack(2, big, 4, pb);
    vq_bitpack_unpack(2, pb, 4, ub);
    CHECK(ub[0] == 3 && ub[1] == 0 && ub[2] == 3 && ub[3] == 0);
    /* a long row through the AVX2 path (4096 codes) */
    for (int bits = 2; bits <= 4; bits++) {
        enum { N = 4096 };
        static uint8_t lc[N], lb[N], lp[N];
        for (int i = 0; i < N; i++) lc[i] = (uint8_t)(vq_rng_u64(&rng) & ((1u << bits) - 1));
        vq_bitpack_pack(bits, lc, N, lp);
        vq_bitpack_unpack(bits, lp, N, lb);
        CHECKF(memcmp(lc, lb, N) == 0, "bits=%d long row", bits);
    }
    /* bad widths are ignored, not crashes */
    vq_bitpack_pack(0, c8, 8, p3);
    vq_bitpack_unpack(9, p3, 8, c8);
    return vq_t_done();
}
