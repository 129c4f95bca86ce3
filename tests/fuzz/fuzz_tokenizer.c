/* fuzz_tokenizer.c: libFuzzer target for both tokenizers on arbitrary bytes: SmolLM2's byte-level
 * BPE (from the GGUF) and tok512's SentencePiece BPE, with special-token parsing off and on. Every id
 * must be in range, decoding must stay within its buffer, and byte-level BPE must give printable ASCII
 * input back exactly. Files: VQ_FUZZ_GGUF / VQ_FUZZ_TOK512, or the defaults below (run from the
 * repository root); a tokenizer whose file is absent is skipped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "model/tokenizer.h"

static vq_tokenizer *bpe, *spm;
static vq_gguf *gguf;

static void init(void) {
    static int done;
    if (done) return;
    done = 1;
    const char *gp = getenv("VQ_FUZZ_GGUF"), *tp = getenv("VQ_FUZZ_TOK512");
    if (!gp) gp = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!tp) tp = "../shared/data/tok512.bin";
    vq_err err;
    vq_err_clear(&err);
    gguf = vq_gguf_open(gp, &err);
    if (gguf) bpe = vq_tokenizer_from_gguf(gguf, &err);
    spm = vq_tokenizer_from_llama2c(tp, 512, &err);
    if (!bpe && !spm) { fprintf(stderr, "fuzz_tokenizer: neither %s nor %s could be loaded\n", gp, tp); abort(); }
}

static void run(const vq_tokenizer *t, const uint8_t *data, size_t size, int bos, int special, int check_trip) {
    vq_err err;
    vq_err_clear(&err);
    int need = vq_tok_encode(t, (const char *)data, size, bos, special, NULL, 0, &err);
    if (need < 0) return;   /* an error with a message is a valid answer */
    int *ids = malloc(((size_t)need + 1) * sizeof(int));
    int got = vq_tok_encode(t, (const char *)data, size, bos, special, ids, need, &err);
    if (got != need) abort();
    int V = vq_tok_vocab_size(t);
    for (int i = 0; i < got; i++) if (ids[i] < 0 || ids[i] >= V) abort();
    size_t cap = size * 4 + 64;   /* detokenize returns the bytes it needs; it writes at most cap */
    char *buf = malloc(cap);
    size_t n = vq_tok_decode(t, ids + bos, got - bos, buf, cap);
    if (check_trip && (n != size || memcmp(buf, data, size) != 0)) abort();
    free(buf);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init();
    if (size > 4096) return 0;
    int printable = 1;
    for (size_t i = 0; i < size; i++)
        if (!((data[i] >= 0x20 && data[i] < 0x7f) || data[i] == '\n' || data[i] == '\t')) printable = 0;
    if (bpe) {
        run(bpe, data, size, 0, 0, printable);
        run(bpe, data, size, 1, 1, 0);
    }
    if (spm) run(spm, data, size, 1, 0, 0);
    return 0;
}
