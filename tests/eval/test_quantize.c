/* test_quantize.c: `veloxquant quantize` and reservoir files on the real SmolLM2 model.
 * - keep: the reservoir holds the same bytes, so logits are memcmp-equal to the GGUF's;
 * - q4_0,embd=q8_0: loading the reservoir gives logits memcmp-equal to re-coding the same model
 *   in memory at load (the same converter), and every re-coded tensor is page-aligned in the map;
 * - q8_0 re-coding of the Q4_1 weights is nearly lossless: WikiText-2 perplexity (512 tokens,
 *   one window) within 1 % of the GGUF's;
 * - sharing: 2 processes mapping the reservoir hold at most 1.1x its size in Pss of the mapping,
 *   the copying baseline at least 1.9x;
 * - per-layer items (blk.A-B.CLASS=TYPE): only the named matrices re-coded, file == in memory;
 * - refusals: bad specs (unknown type, class, a type with no quantizer, a stray comma, a layer
 *   the model lacks), a llama2.c checkpoint, a damaged reservoir (the message names the tensor). */
#include "lab/eval.h"
#include "session/session_impl.h"
#include "../vq_test.h"

#include <sys/stat.h>

static float *logits_of(const vq_model *m, const int *tok, int n) {
    vq_kv_spec *spec = vq_kv_spec_parse("f32", NULL);
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = 64;
    vq_err e;
    vq_session *s = vq_session_create(m, spec, &sp, &e);
    float *lg = malloc((size_t)m->cfg.vocab_size * (size_t)n * sizeof *lg);
    if (!s || vq_session_decode(s, tok, n, lg, 1, &e)) { free(lg); lg = NULL; }
    vq_session_free(s);
    vq_kv_spec_free(spec);
    return lg;
}

static double ppl_of(const vq_model *m, const int *tok, long n) {
    vq_kv_spec *spec = vq_kv_spec_parse("f32", NULL);
    vq_ppl_params pp = vq_ppl_default_params();
    pp.n_ctx = 512; pp.mode = VQ_PPL_PREFILL; pp.kv_seed = 1;
    vq_ppl_result r;
    vq_err e;
    const vq_kv_spec *sps[1] = { spec };
    vq_status s = vq_perplexity(m, sps, 1, tok, n, &pp, NULL, NULL, &r, &e);
    vq_kv_spec_free(spec);
    return s ? -1 : r.ppl;
}

static vq_model *load(const char *path, const char *weights) {
    vq_model_params p = vq_model_default_params();
    p.weights = weights;
    vq_err e;
    vq_model *m = vq_model_load(path, &p, &e);
    CHECKF(m != NULL, "%s: %s", path, e.msg);
    return m;
}

int main(void) {
    char mp[1024], dir[] = "/tmp/vq_test_quantize_XXXXXX", out[1200];
    vq_t_model(mp, sizeof mp);
    if (!mkdtemp(dir)) VQ_SKIP("cannot make a temporary folder");
    vq_model *g = load(mp, NULL);
    if (!g) return vq_t_done();
    const char *text = "The capital of France is Paris. It has been a centre of art and science for";
    int tok[64];
    vq_err e;
    int n = vq_tokenize(g, text, strlen(text), 1, 0, tok, 64, &e);
    CHECK(n > 8);
    float *ref = logits_of(g, tok, n);
    size_t lb = (size_t)g->cfg.vocab_size * (size_t)n * sizeof(float);

    /* keep: the same bytes */
    vq_quantize_info qi;
    snprintf(out, sizeof out, "%s/keep.vqr", dir);
    CHECKF(vq_quantize(mp, out, "keep", &qi, &e) == VQ_OK, "%s", e.msg);
    CHECK(qi.n_converted == 0 && qi.n_kept == qi.n_tensors && qi.out_bytes == qi.src_bytes);
    vq_quantize_info_free(&qi);
    vq_model *k = load(out, NULL);
    float *lk = k ? logits_of(k, tok, n) : NULL;
    CHECK(ref && lk && !memcmp(ref, lk, lb));
    CHECK(k && k->reservoir && !k->copied);
    free(lk);
    vq_model_free(k);

    /* q4_0 with q8_0 embeddings: file == in memory, bit for bit */
    snprintf(out, sizeof out, "%s/q40.vqr", dir);
    CHECKF(vq_quantize(mp, out, "q4_0,embd=q8_0", &qi, &e) == VQ_OK, "%s", e.msg);
    /* SmolLM2 ties its output to the embedding; output's type (q4_0) differs from embd's, so the
     * output gets a tensor of its own: 272 + 1 */
    CHECKF(qi.n_tensors == 273 && qi.n_converted == 211, "%d tensors, %d converted", qi.n_tensors, qi.n_converted);
    double worst = 0;
    for (int i = 0; i < qi.n_tensors; i++) {
        if (!strcmp(qi.t[i].dst_type, "q4_0")) worst = fmax(worst, qi.t[i].rel_rms);
    }
    CHECKF(worst > 0.01 && worst < 0.2, "q4_0 relative RMS error %.4f", worst);   /* re-coded, not copied */
    vq_quantize_info_free(&qi);
    vq_model *q = load(out, NULL), *qm = load(mp, "q4_0,embd=q8_0");
    float *lq = q ? logits_of(q, tok, n) : NULL, *lm = qm ? logits_of(qm, tok, n) : NULL;
    CHECK(lq && lm && !memcmp(lq, lm, lb));
    CHECK(lq && ref && memcmp(lq, ref, lb));   /* and not the source's */
    if (q) {
        const vq_wmat *w[3] = { &q->layers[0].wq, &q->layers[29].w_down, &q->output };
        for (int i = 0; i < 3; i++)
            CHECKF(w[i]->type == 2 && (uintptr_t)w[i]->data % 4096 == 0, "matrix %d: type %u", i, w[i]->type);
        CHECK(q->output.data != q->tok_embd.data && q->tok_embd.type == 8);
    }
    CHECK(qm && qm->output.data != qm->tok_embd.data && qm->output.type == 2 && qm->tok_embd.type == 8);
    free(lq);
    free(lm);
    vq_model_free(qm);
    vq_model_free(q);   /* before the sharing check: a third mapping would take a third of the Pss */

    /* per-layer items: exactly the named matrices are re-coded (the rest keep the source's bytes),
     * and the file equals the same spec applied in memory, bit for bit */
    const char *lspec = "keep,blk.2-3.ffn_down=tqw4,blk.5.attn=q8_0,blk.3.ffn_down=q4_0";
    snprintf(out, sizeof out, "%s/layers.vqr", dir);
    CHECKF(vq_quantize(mp, out, lspec, &qi, &e) == VQ_OK, "%s", e.msg);
    int ok = qi.n_converted == 6 && qi.n_tensors == 272;
    for (int i = 0; i < qi.n_tensors; i++) {
        const char *nm = qi.t[i].name, *want = "";
        if (!strcmp(nm, "blk.2.ffn_down.weight")) want = "tqw4";
        else if (!strcmp(nm, "blk.3.ffn_down.weight")) want = "q4_0";
        else if (!strncmp(nm, "blk.5.attn_", 11) && !strstr(nm, "norm")) want = "q8_0";
        if (*want ? strcmp(qi.t[i].dst_type, want) : strcmp(qi.t[i].dst_type, qi.t[i].src_type)) {
            ok = 0;
            fprintf(stderr, "%s: %s -> %s, expected %s\n", nm, qi.t[i].src_type, qi.t[i].dst_type, *want ? want : "kept");
        }
    }
    CHECKF(ok, "%d converted", qi.n_converted);
    CHECKF(strstr(qi.weights, "ffn_down=keep,blk.2-3.ffn_down=tqw4,blk.5.attn_q=q8_0") != NULL, "%s", qi.weights);
    vq_quantize_info_free(&qi);
    vq_model *lf = load(out, NULL), *lmem = load(mp, lspec);
    float *l1 = lf ? logits_of(lf, tok, n) : NULL, *l2 = lmem ? logits_of(lmem, tok, n) : NULL;
    CHECK(l1 && l2 && !memcmp(l1, l2, lb));
    CHECK(l1 && ref && memcmp(l1, ref, lb));
    CHECK(lf && lf->layers[3].w_down.type == 2 && lf->layers[2].w_down.type == 0x10004 && lf->layers[4].w_down.type == 3);
    free(l1);
    free(l2);
    vq_model_free(lmem);
    vq_model_free(lf);
    /* a layer the model lacks: refused by both paths, nothing written */
    snprintf(out, sizeof out, "%s/bad.vqr", dir);
    CHECKF(vq_quantize(mp, out, "keep,blk.30.ffn_down=q8_0", NULL, &e) == VQ_ERR_ARG &&
           strstr(e.msg, "names layer 30") && strstr(e.msg, "30 layers"), "%s", e.msg);
    struct stat lsb;
    CHECK(stat(out, &lsb) != 0);
    vq_model_params lp = vq_model_default_params();
    lp.weights = "keep,blk.29-31.attn_q=q8_0";
    CHECKF(vq_model_load(mp, &lp, &e) == NULL && e.code == VQ_ERR_ARG && strstr(e.msg, "names layer 31"), "%s", e.msg);

    /* q8_0 of Q4_1 values: nearly lossless */
    char wp[1024];
    vq_t_shared("data/wikitext-2-raw-test.txt", wp, sizeof wp);
    size_t tl;
    char *wt = vq_read_file(wp, &tl, &e);
    int *wtok = malloc(4096 * sizeof *wtok);
    int nw = wt ? vq_tokenize(g, wt, VQ_MIN(tl, (size_t)20000), 0, 0, wtok, 4096, &e) : -1;
    CHECK(nw >= 512);
    snprintf(out, sizeof out, "%s/q8.vqr", dir);
    CHECKF(vq_quantize(mp, out, "q8_0", NULL, &e) == VQ_OK, "%s", e.msg);
    vq_model *q8 = load(out, NULL);
    double p0 = ppl_of(g, wtok, 512), p8 = q8 ? ppl_of(q8, wtok, 512) : -1;
    printf("WikiText-2, 512 tokens: GGUF (Q4_1) ppl %.4f, reservoir q8_0 %.4f (%+.3f %%)\n", p0, p8, 100 * (p8 / p0 - 1));
    CHECKF(p0 > 0 && p8 > 0 && fabs(p8 / p0 - 1) < 0.01, "ppl %.4f vs %.4f", p8, p0);
    vq_model_free(q8);
    free(wt);
    free(wtok);

    /* sharing: the reservoir's pages are held once by two processes that map it */
    snprintf(out, sizeof out, "%s/q40.vqr", dir);
    for (int copy = 0; copy <= 1; copy++) {
        vq_bench_share_params sp = { out, NULL, 2, 4, copy };
        vq_bench_share_result r;
        CHECKF(vq_bench_share(&sp, &r, &e) == VQ_OK, "%s", e.msg);
        double ratio = (double)r.total_map_pss_kb * 1024 / (double)r.file_bytes;
        printf("bench-share, 2 processes, %s: weights Pss %.1f MB = %.3fx the file (%.1f MB)\n",
               copy ? "copied" : "mapped", r.total_map_pss_kb / 1024.0, ratio, r.file_bytes / 1048576.0);
        CHECKF(copy ? ratio >= 1.9 : ratio >= 0.9 && ratio <= 1.1, "%s: %.3fx", copy ? "copy" : "mmap", ratio);
    }

    /* refusals */
    const char *bad[][2] = {
        { "q9_9", "unknown weight type 'q9_9'" }, { "q8_0,mlp=q4_0", "unknown tensor class 'mlp'" },
        { "q4_K", "has no quantizer" },            { "q8_0,", "ends with ','" },
        { "embd=q8_0,q4_0", "has no class" },      { "", "empty" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(out, sizeof out, "%s/bad.vqr", dir);
        vq_status s = vq_quantize(mp, out, bad[i][0], NULL, &e);
        CHECKF(s == VQ_ERR_ARG && strstr(e.msg, bad[i][1]), "'%s': %s", bad[i][0], e.msg);
        struct stat sb;
        CHECK(stat(out, &sb) != 0);   /* nothing written */
        vq_model_params p = vq_model_default_params();
        p.weights = bad[i][0];
        CHECK(vq_model_load(mp, &p, &e) == NULL && e.code == VQ_ERR_ARG);
    }
    char sm[1024];
    vq_t_shared("data/stories260K.bin", sm, sizeof sm);
    CHECKF(vq_quantize(sm, out, "q8_0", NULL, &e) == VQ_ERR_UNSUPPORTED && strstr(e.msg, "llama2.c"), "%s", e.msg);
    /* a damaged reservoir: one byte of blk.3.ffn_up */
    snprintf(out, sizeof out, "%s/keep.vqr", dir);
    k = load(out, NULL);
    const vq_gguf_tensor *t = k ? vq_gguf_find_tensor(k->gguf, "blk.3.ffn_up.weight") : NULL;
    /* its file offset: the header page, then the body's data section, then the tensor's offset */
    long at = t ? (long)(4096 + vq_gguf_data_offset(k->gguf) + t->offset) : -1;
    vq_model_free(k);
    FILE *f = fopen(out, "r+b");
    int c = -1;
    if (f && at > 0 && !fseek(f, at + 100, SEEK_SET)) c = fgetc(f);
    if (c >= 0 && !fseek(f, at + 100, SEEK_SET)) fputc(c ^ 0x10, f);
    if (f) fclose(f);
    vq_model *d = vq_model_open(out, NULL, &e);
    CHECKF(!d && e.code == VQ_ERR_FORMAT && strstr(e.msg, "blk.3.ffn_up.weight") && strstr(e.msg, "checksum"),
           "%s", d ? "opened" : e.msg);
    vq_model_free(d);

    free(ref);
    vq_model_free(g);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return vq_t_done();
}
