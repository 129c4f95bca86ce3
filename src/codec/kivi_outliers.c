/* kivi_outliers.c: the dense-and-sparse split of a KVQuant-style key block (Hooper et al., arXiv
 * 2401.18079: a small fraction of the elements kept exact, apart, so that the per-channel range the
 * rest is quantized over shrinks). A block holds G rows of d channels, each channel quantized
 * uniformly over [min, max] of the block (KIVI's per-channel keys), so an element's error is about
 * (max - min) / (2^b - 1) / sqrt(12) and the block's summed squared error is proportional to
 * sum_c (max_c - min_c)^2; with qweight=1 each channel's term is weighted by the query energy
 * that reads it (codec_kivi.c), which makes the sum the expected squared score error. The n_out
 * exact elements are picked greedily against that sum: at each step, over every channel, each end (largest or smallest) and t = 1 .. (count left), the t most
 * extreme elements of that end whose removal lowers w_c (max_c - min_c)^2 the most per element
 * removed. Taking t > 1 at once matters: two outliers of about the same value at one end shrink
 * the range only together (one at a time, neither looks worth it). A fixed count per block, so
 * the block has a fixed size. Ties go to the smaller t, the lower channel, the top end before the
 * bottom; sorting keeps rows in order: every byte is deterministic. */
#include "codec/kivi.h"

/* X(c, s): the s-th smallest value of channel c (ord holds the rows, per channel, sorted) */
#define X(c, s) x[(size_t)ord[(size_t)(c) * G + (s)] * d + (c)]

void vq_kivi_outliers(const kivi *k, const float *x, float *lo, float *hi, uint8_t *mark, uint16_t *idx) {
    const int G = k->G, d = k->d;
    uint8_t ord[VQ_KIVI_OUT_MAX], li[4096], hj[4096];   /* G <= 256, G*d <= VQ_KIVI_OUT_MAX (init) */
    for (int c = 0; c < d; c++) {   /* insertion sort of the rows by value: G is small */
        uint8_t *o = ord + (size_t)c * G;
        for (int r = 0; r < G; r++) {
            const float v = x[(size_t)r * d + c];
            int s = r;
            while (s > 0 && x[(size_t)o[s - 1] * d + c] > v) { o[s] = o[s - 1]; s--; }
            o[s] = (uint8_t)r;
        }
        li[c] = 0;
        hj[c] = (uint8_t)(G - 1);
    }
    for (int left = k->n_out; left > 0;) {
        float best = -1.0f;
        int bc = -1, top = 0, bt = 0;
        for (int c = 0; c < d; c++) {
            const int l = li[c], h = hj[c], T = VQ_MIN(left, h - l);   /* keep one element */
            if (T < 1) continue;
            const float vl = X(c, l), vh = X(c, h), r2 = (vh - vl) * (vh - vl);
            for (int t = 1; t <= T; t++) {
                const float dh = X(c, h - t) - vl, dl = vh - X(c, l + t);
                float gh = (r2 - dh * dh) / (float)t, gl = (r2 - dl * dl) / (float)t;
                if (k->w) { gh *= k->w[c]; gl *= k->w[c]; }
                if (gh > best) { best = gh; bc = c; top = 1; bt = t; }
                if (gl > best) { best = gl; bc = c; top = 0; bt = t; }
            }
        }
        if (bc < 0) break;   /* not reached: init keeps n_out <= (G - 1) * d */
        if (top) hj[bc] = (uint8_t)(hj[bc] - bt);
        else li[bc] = (uint8_t)(li[bc] + bt);
        left -= bt;
    }
    memset(mark, 0, (size_t)G * d);
    for (int c = 0; c < d; c++) {
        for (int s = 0; s < li[c]; s++) mark[(size_t)ord[(size_t)c * G + s] * d + c] = 1;
        for (int s = hj[c] + 1; s < G; s++) mark[(size_t)ord[(size_t)c * G + s] * d + c] = 1;
        lo[c] = X(c, li[c]);
        hi[c] = X(c, hj[c]);
    }
    int n = 0;
    for (int i = 0; i < G * d && n < k->n_out; i++)
        if (mark[i]) idx[n++] = (uint16_t)i;
}
#undef X
