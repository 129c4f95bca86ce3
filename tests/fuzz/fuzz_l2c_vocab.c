/* fuzz_l2c_vocab.c: libFuzzer entry for the llama2.c tokenizer reader. Reads the input with
 * vocab_size 0 (all tokens); when that works, reading again with the count found must give the
 * same pieces and with one more must fail; every piece is touched. */
#include "formats/llama2c.h"

#include <stdlib.h>
#include <string.h>

static volatile size_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vq_err err;
    vq_l2c_vocab *v = vq_l2c_vocab_from_mem(data, size, "fuzz", 0, &err);
    if (!v) {
        if (err.code != VQ_ERR_FORMAT || strncmp(err.msg, "fuzz: ", 6) != 0) abort();
        return 0;
    }
    for (int i = 0; i < v->n; i++) {
        if ((int)strlen(v->pieces[i]) > v->lens[i] || v->lens[i] > v->max_token_length) abort();
        sink += (size_t)v->lens[i] + (v->lens[i] ? (unsigned char)v->pieces[i][v->lens[i] - 1] : 0);
    }
    vq_l2c_vocab *w = vq_l2c_vocab_from_mem(data, size, "fuzz", v->n, &err);
    if (!w || w->n != v->n) abort();
    for (int i = 0; i < v->n; i++)
        if (w->lens[i] != v->lens[i] || memcmp(w->pieces[i], v->pieces[i], (size_t)v->lens[i]) != 0) abort();
    vq_l2c_vocab_free(w);
    w = vq_l2c_vocab_from_mem(data, size, "fuzz", v->n + 1, &err);
    if (w) abort();
    vq_l2c_vocab_free(v);
    return 0;
}
