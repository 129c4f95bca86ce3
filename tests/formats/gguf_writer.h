/* gguf_writer.h: a tiny GGUF writer for tests and the fuzz seed generator. It writes one fixed
 * file (every metadata type, string and nested arrays, one tensor of each type we compute with)
 * and records where each field landed, so tests can corrupt exactly one field. */
#ifndef VQ_TEST_GGUF_WRITER_H
#define VQ_TEST_GGUF_WRITER_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct tw_buf { uint8_t *p; size_t n, cap; } tw_buf;

static inline void tw_put(tw_buf *b, const void *d, size_t k) {
    if (b->n + k > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + k) c *= 2;
        uint8_t *np = realloc(b->p, c);
        if (!np) abort();
        b->p = np;
        b->cap = c;
    }
    if (k) memcpy(b->p + b->n, d, k);
    b->n += k;
}
static inline void tw_le(tw_buf *b, uint64_t v, int bytes) {
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    tw_put(b, t, (size_t)bytes);
}
static inline void tw_u8(tw_buf *b, uint8_t v) { tw_le(b, v, 1); }
static inline void tw_u16(tw_buf *b, uint16_t v) { tw_le(b, v, 2); }
static inline void tw_u32(tw_buf *b, uint32_t v) { tw_le(b, v, 4); }
static inline void tw_u64(tw_buf *b, uint64_t v) { tw_le(b, v, 8); }
static inline void tw_f32(tw_buf *b, float f) { uint32_t u; memcpy(&u, &f, 4); tw_u32(b, u); }
static inline void tw_f64(tw_buf *b, double f) { uint64_t u; memcpy(&u, &f, 8); tw_u64(b, u); }
static inline void tw_strn(tw_buf *b, const char *s, size_t n) { tw_u64(b, n); tw_put(b, s, n); }
static inline void tw_str(tw_buf *b, const char *s) { tw_strn(b, s, strlen(s)); }
static inline void tw_key(tw_buf *b, const char *k, uint32_t type) { tw_str(b, k); tw_u32(b, type); }

/* the tensors of the test file: name, ggml type, dims, bytes (from the ggml block layouts) */
#define TW_NT 6
typedef struct tw_tensor { const char *name; uint32_t type, n_dims; uint64_t ne[4]; uint64_t nbytes; } tw_tensor;
static const tw_tensor TW_T[TW_NT] = {
    {"t.f32", 0, 2, {8, 3, 1, 1}, 8 * 3 * 4},
    {"t.f16", 1, 2, {16, 2, 1, 1}, 16 * 2 * 2},
    {"t.bf16", 30, 1, {4, 1, 1, 1}, 4 * 2},
    {"t.q8_0", 8, 2, {64, 2, 1, 1}, 4 * 34},
    {"t.q4_0", 2, 2, {32, 3, 1, 1}, 3 * 18},
    {"t.q4_1", 3, 4, {32, 1, 2, 1}, 2 * 20},
};

typedef struct tw_opts {
    uint32_t version;      /* 2 or 3 */
    uint32_t alignment;    /* 0: no general.alignment key (default 32 applies) */
    int reverse;           /* place tensor data in the reverse order of the infos */
    int n_tensors;         /* how many of TW_T to write (<= TW_NT) */
} tw_opts;

typedef struct tw_layout {
    size_t version, n_tensors, n_kv, align_val;
    size_t key_u8, key_i8, val_bool, arr_type_u8, arr_len_str, nested_type;
    size_t name[TW_NT], n_dims[TW_NT], ne[TW_NT], type[TW_NT], offset[TW_NT];
    uint64_t data_off, t_off[TW_NT];
    uint64_t n_kv_written;
} tw_layout;

/* byte i of tensor t's data: a pattern that differs per tensor and per position */
static inline uint8_t tw_pattern(int t, uint64_t i) { return (uint8_t)(31 * t + 7 * i + 1); }

static inline tw_buf tw_build(const tw_opts *o, tw_layout *L) {
    tw_buf b = {0};
    memset(L, 0, sizeof *L);
    uint64_t align = o->alignment ? o->alignment : 32;
    int nt = o->n_tensors;
    tw_put(&b, "GGUF", 4);
    L->version = b.n; tw_u32(&b, o->version);
    L->n_tensors = b.n; tw_u64(&b, (uint64_t)nt);
    L->n_kv = b.n; tw_u64(&b, 0);    /* patched below */
    uint64_t nkv = 0;
    L->key_u8 = b.n; tw_key(&b, "k.u8", 0); tw_u8(&b, 200); nkv++;
    L->key_i8 = b.n; tw_key(&b, "k.i8", 1); tw_u8(&b, (uint8_t)-100); nkv++;
    tw_key(&b, "k.u16", 2); tw_u16(&b, 60000); nkv++;
    tw_key(&b, "k.i16", 3); tw_u16(&b, (uint16_t)-30000); nkv++;
    tw_key(&b, "k.u32", 4); tw_u32(&b, 4000000000u); nkv++;
    tw_key(&b, "k.i32", 5); tw_u32(&b, (uint32_t)-2000000000); nkv++;
    tw_key(&b, "k.f32", 6); tw_f32(&b, 1.5f); nkv++;
    tw_key(&b, "k.bool", 7); L->val_bool = b.n; tw_u8(&b, 1); nkv++;
    tw_key(&b, "k.str", 8); tw_str(&b, "hello, gguf"); nkv++;
    if (o->alignment) { tw_key(&b, "general.alignment", 4); L->align_val = b.n; tw_u32(&b, o->alignment); nkv++; }
    tw_key(&b, "k.u64", 10); tw_u64(&b, (1ull << 63) + 5); nkv++;
    tw_key(&b, "k.i64", 11); tw_u64(&b, (uint64_t)-(1ll << 62)); nkv++;
    tw_key(&b, "k.f64", 12); tw_f64(&b, -2.25e100); nkv++;
    tw_key(&b, "k.empty", 8); tw_str(&b, ""); nkv++;
    tw_key(&b, "a.u8", 9); L->arr_type_u8 = b.n; tw_u32(&b, 0); tw_u64(&b, 3);
    tw_u8(&b, 1); tw_u8(&b, 2); tw_u8(&b, 255); nkv++;
    tw_key(&b, "a.i8", 9); tw_u32(&b, 1); tw_u64(&b, 2); tw_u8(&b, (uint8_t)-128); tw_u8(&b, 127); nkv++;
    tw_key(&b, "a.u16", 9); tw_u32(&b, 2); tw_u64(&b, 1); tw_u16(&b, 65535); nkv++;
    tw_key(&b, "a.i16", 9); tw_u32(&b, 3); tw_u64(&b, 2); tw_u16(&b, (uint16_t)-1); tw_u16(&b, 2); nkv++;
    tw_key(&b, "a.u32", 9); tw_u32(&b, 4); tw_u64(&b, 1); tw_u32(&b, 4294967295u); nkv++;
    tw_key(&b, "a.i32", 9); tw_u32(&b, 5); tw_u64(&b, 3);
    tw_u32(&b, (uint32_t)-5); tw_u32(&b, 7); tw_u32(&b, (uint32_t)INT32_MIN); nkv++;
    tw_key(&b, "a.f32", 9); tw_u32(&b, 6); tw_u64(&b, 2); tw_f32(&b, 0.5f); tw_f32(&b, -1e30f); nkv++;
    tw_key(&b, "a.bool", 9); tw_u32(&b, 7); tw_u64(&b, 3); tw_u8(&b, 1); tw_u8(&b, 0); tw_u8(&b, 1); nkv++;
    tw_key(&b, "a.str", 9); tw_u32(&b, 8); L->arr_len_str = b.n; tw_u64(&b, 4);
    tw_str(&b, "alpha"); tw_str(&b, ""); tw_strn(&b, "g\0x", 3); tw_str(&b, "\xce\xb3"); nkv++;
    tw_key(&b, "a.u64", 9); tw_u32(&b, 10); tw_u64(&b, 2); tw_u64(&b, UINT64_MAX); tw_u64(&b, 0); nkv++;
    tw_key(&b, "a.i64", 9); tw_u32(&b, 11); tw_u64(&b, 1); tw_u64(&b, (uint64_t)INT64_MIN); nkv++;
    tw_key(&b, "a.f64", 9); tw_u32(&b, 12); tw_u64(&b, 2); tw_f64(&b, 3.25); tw_f64(&b, -0.0); nkv++;
    tw_key(&b, "a.empty", 9); tw_u32(&b, 4); tw_u64(&b, 0); nkv++;
    /* array of 2 arrays: [u16: 1, 2], [string: "x"] */
    tw_key(&b, "a.nested", 9); L->nested_type = b.n; tw_u32(&b, 9); tw_u64(&b, 2);
    tw_u32(&b, 2); tw_u64(&b, 2); tw_u16(&b, 1); tw_u16(&b, 2);
    tw_u32(&b, 8); tw_u64(&b, 1); tw_str(&b, "x"); nkv++;
    L->n_kv_written = nkv;
    for (int i = 0; i < 8; i++) b.p[L->n_kv + (size_t)i] = (uint8_t)(nkv >> (8 * i));

    /* data offsets: sequential (or reversed), each aligned, no padding after the last */
    uint64_t off = 0;
    for (int k = 0; k < nt; k++) {
        int t = o->reverse ? nt - 1 - k : k;
        off = (off + align - 1) / align * align;
        L->t_off[t] = off;
        off += TW_T[t].nbytes;
    }
    for (int t = 0; t < nt; t++) {
        L->name[t] = b.n; tw_str(&b, TW_T[t].name);
        L->n_dims[t] = b.n; tw_u32(&b, TW_T[t].n_dims);
        L->ne[t] = b.n;
        for (uint32_t d = 0; d < TW_T[t].n_dims; d++) tw_u64(&b, TW_T[t].ne[d]);
        L->type[t] = b.n; tw_u32(&b, TW_T[t].type);
        L->offset[t] = b.n; tw_u64(&b, L->t_off[t]);
    }
    while (b.n % align) tw_u8(&b, 0);
    L->data_off = b.n;
    uint8_t zero = 0;
    for (uint64_t i = 0; i < off; i++) tw_put(&b, &zero, 1);
    for (int t = 0; t < nt; t++)
        for (uint64_t i = 0; i < TW_T[t].nbytes; i++) b.p[L->data_off + L->t_off[t] + i] = tw_pattern(t, i);
    return b;
}

static inline void tw_patch(uint8_t *p, size_t at, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}
/* A llama GGUF of metadata only: the architecture and the sizes the model loader reads first,
 * plus the float hyperparameter fkey (GGUF type ftype: 6 float32, 12 float64) set to val when fkey
 * is non-NULL; no tensors. A loader that accepts every hyperparameter goes on to look for tensors
 * and stops at "tensor 'token_embd.weight' is missing": that is the file's "valid" outcome. */
static inline tw_buf tw_llama_hparams(const char *fkey, uint32_t ftype, double val) {
    tw_buf b = {0};
    tw_put(&b, "GGUF", 4);
    tw_u32(&b, 3);
    tw_u64(&b, 0);                        /* tensors */
    tw_u64(&b, fkey ? 6 : 5);             /* metadata keys */
    tw_key(&b, "general.architecture", 8); tw_str(&b, "llama");
    tw_key(&b, "llama.embedding_length", 4); tw_u32(&b, 64);
    tw_key(&b, "llama.block_count", 4); tw_u32(&b, 2);
    tw_key(&b, "llama.feed_forward_length", 4); tw_u32(&b, 128);
    tw_key(&b, "llama.attention.head_count", 4); tw_u32(&b, 8);
    if (fkey) {
        tw_key(&b, fkey, ftype);
        if (ftype == 12) tw_f64(&b, val);
        else tw_f32(&b, (float)val);
    }
    return b;
}
#endif
