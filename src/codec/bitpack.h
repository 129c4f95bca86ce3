/* bitpack.h: b-bit codes (1 <= b <= 8) packed with no waste into a little-endian bit stream:
 * code i occupies bits [i*b, i*b+b) of the stream, bit k of the stream is bit (k%8) of byte k/8.
 * So 8 codes of b bits are exactly b bytes (3-bit: 8 codes in 3 bytes), and a row of n codes takes
 * ceil(n*b/8) bytes; unused high bits of the last byte are written as 0. */
#ifndef VQ_BITPACK_H
#define VQ_BITPACK_H
#include <stddef.h>
#include <stdint.h>

static inline size_t vq_bitpack_bytes(int bits, size_t n) { return (n * (size_t)bits + 7) / 8; }

/* codes[i] must be < 2^bits (higher bits are masked off). out: vq_bitpack_bytes(bits, n) bytes. */
void vq_bitpack_pack(int bits, const uint8_t *codes, size_t n, uint8_t *out);
/* Reads exactly vq_bitpack_bytes(bits, n) bytes; writes n codes. AVX2 for bits 2,3,4 when the CPU
 * has it, scalar otherwise; both give identical output. */
void vq_bitpack_unpack(int bits, const uint8_t *in, size_t n, uint8_t *codes);
void vq_bitpack_unpack_scalar(int bits, const uint8_t *in, size_t n, uint8_t *codes);

/* One code, for random access. */
static inline unsigned vq_bitpack_get(int bits, const uint8_t *in, size_t i) {
    size_t bit = i * (size_t)bits, byte = bit / 8;
    unsigned sh = (unsigned)(bit % 8);
    unsigned v = in[byte];
    if (sh + (unsigned)bits > 8) v |= (unsigned)in[byte + 1] << 8;
    return (v >> sh) & ((1u << bits) - 1u);
}
#endif
