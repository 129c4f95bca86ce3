/* kv_impl.h: the KV store's private layout, shared by kv.c (create, append, accounting),
 * kv_spec.c (spec parsing) and kv_attend.c (attention from codes). Not a public header. */
#ifndef VQ_KV_IMPL_H
#define VQ_KV_IMPL_H
#include "kv/kv.h"
#include "codec/codec.h"

#define VQ_KV_MAX_PARAMS 16
#define VQ_KV_ABS_MAX 65504.0f   /* largest |x| append accepts (the fp16 range) */

/* A parsed spec: one codec and its parameters per side, plus the store's own keys. */
typedef struct vq_kv_parsed {
    const vq_codec *codec[2];             /* [VQ_SIDE_K], [VQ_SIDE_V] */
    vq_codec_param p[2][VQ_KV_MAX_PARAMS];
    int np[2];
    int window;                           /* -1: not given (codec's fp_window or 0) */
    int wprec;                            /* 16 or 32 */
    int page;                             /* rows per page (rounded up to a multiple of rpb) */
    int side_bits[2];                     /* k= / v= seen (parser bookkeeping) */
} vq_kv_parsed;

vq_status vq_kv_spec_parse(const char *spec, vq_kv_parsed *out, vq_err *err);

/* One layer: pages of codes plus a ring of the most recent rows in full precision.
 * Page layout (page_bytes, 64-byte aligned sections):
 *   int32 pos[P] | for each KV head h: K blocks (P / rpb_k blocks) | V blocks (P / rpb_v) */
typedef struct vq_kv_layer {
    uint8_t **pages;       /* page_cap pointers; [0, n_pages) allocated */
    int32_t *page_minpos;  /* smallest position in each page (page skipping under causality) */
    int n_pages;
    int n_coded;           /* rows held as codes */
    void *win_k, *win_v;   /* ring of win_cap rows x (H*d) elements, fp16 or fp32 */
    int32_t *win_pos;
    int win_start, win_count;
} vq_kv_layer;

struct vq_kv {
    vq_kv_dims dims;
    char spec[512];
    int H, G, d;           /* KV heads, query heads per KV head, head_dim */
    int rpb[2];            /* rows per block, K and V */
    int rpb_store;         /* rows leave the window in multiples of this (lcm of rpb[]) */
    int R;                 /* full-precision window (rows) */
    int wprec;             /* 16 or 32 */
    int P;                 /* rows per page */
    int win_cap;           /* ring capacity: R + rpb_store - 1 (0 when no window needed) */
    int page_cap;          /* page pointers per layer */
    size_t page_bytes, *off_k, *off_v;   /* page size; per-head section offsets in a page */
    size_t bytes;          /* tally of every allocation the store made (and still holds) */
    vq_codec_state *st[2]; /* per layer: st[side][layer] */
    vq_kv_layer *layers;
};

static inline size_t vq_kv_win_elem(const vq_kv *kv) { return kv->wprec == 16 ? 2 : 4; }
#endif
