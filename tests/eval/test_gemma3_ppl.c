/* test_gemma3_ppl.c: Gemma 3 270M WikiText-2 perplexity against the independent numpy float64 forward
 * pass and llama.cpp on the same windows (tests/fixtures/gemma3_wikitext_ppl.txt; tests/fixtures/
 * README.md says how it was made). The windows are those of `veloxquant perplexity --ctx 1024
 * --max-tokens 2046 --bos-per-window --score second-half` (decode mode): BOS + 1023 text ids each, two
 * windows, predictions at positions 512..1022 scored (1022 in all). The bound: our perplexity
 * within 0.5 % of llama.cpp's with the same cache type. numpy keeps K/V exact, so it is compared with our
 * f32 cache; llama.cpp's f16 and q8_0 caches with ours. Measured (2026-12-02, AMD EPYC, AVX-512):
 * f32 +0.39 % vs numpy, f16 -0.22 % and q8_0 -0.25 % vs llama.cpp (llama.cpp's own f16 is +0.73 % vs
 * numpy). The kernel path moves our figures by about 0.2 % (VQ_ISA=avx2: f16 11.7370, -0.44 % vs
 * llama.cpp), so the bound has little room on other machines; a failure there is a finding, not a
 * tolerance to widen. About 60 s in a Release build; a sanitizer build leaves it to the Release run.
 * Skips (77) without the model or ../shared. */
#include "lab/eval.h"
#include "session/session_impl.h"
#include "../vq_test.h"

#define PPL_TOL 0.005
#define CTX 1024
#define N_IDS 2046

static uint64_t fnv1a64_ids(const int *ids, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) {
            h ^= (uint8_t)((uint32_t)ids[i] >> (8 * b));
            h *= 0x100000001b3ull;
        }
    return h;
}

typedef struct ref {
    long n_ids;
    unsigned long long ids_fnv;
    long np_n, f16_n, q8_n;
    double np_nll, f16_nll, q8_nll;  /* mean NLL over the scored predictions */
} ref;

static int read_ref(const char *path, ref *r) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    memset(r, 0, sizeof *r);
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "ids %ld fnv1a64 %llx", &r->n_ids, &r->ids_fnv);
        sscanf(line, "total half %ld %lf", &r->np_n, &r->np_nll);
        sscanf(line, "llamacpp_total f16 half %ld %lf", &r->f16_n, &r->f16_nll);
        sscanf(line, "llamacpp_total q8_0 half %ld %lf", &r->q8_n, &r->q8_nll);
    }
    fclose(f);
    return 1;
}

/* The first N_IDS ids of the whole text, from a prefix cut after a line end (the fixture's hash checks
 * them against the numpy tokenizer's ids of the whole text). */
static int text_ids(const vq_model *m, const char *path, int *ids) {
    FILE *f = fopen(path, "rb");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f) return 0;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    while (n > 0 && buf[n - 1] != '\n') n--;
    vq_err err;
    vq_err_clear(&err);
    static int all[32768];
    int got = vq_tokenize(m, buf, n, 0, 0, all, (int)VQ_ARRAY_LEN(all), &err);
    CHECKF(got > N_IDS + 64, "tokenize: %d ids (%s)", got, err.msg);
    if (got <= N_IDS + 64) return 0;
    memcpy(ids, all, N_IDS * sizeof(int));
    return 1;
}

int main(void) {
    char mp[1024], tp[1024], fx[1024];
    vq_t_gemma(mp, sizeof mp);
    vq_t_shared("data/wikitext-2-raw-test.txt", tp, sizeof tp);
    if (getenv("VQ_SANITIZER_BUILD")) {
        printf("sanitizer build: Gemma's perplexity is left to the Release run\n");
        return vq_t_done();
    }
    snprintf(fx, sizeof fx, "%s/tests/fixtures/gemma3_wikitext_ppl.txt", VQ_SOURCE_DIR);
    ref r;
    CHECKF(read_ref(fx, &r), "cannot open %s", fx);
    CHECKF(r.n_ids == N_IDS && r.np_n == 1022 && r.f16_n == 1022 && r.q8_n == 1022,
           "fixture: %ld ids, %ld / %ld / %ld scored", r.n_ids, r.np_n, r.f16_n, r.q8_n);
    vq_err err;
    vq_err_clear(&err);
    vq_model *m = vq_model_open(mp, NULL, &err);
    CHECKF(m != NULL, "load: %s", err.msg);
    int *ids = malloc(N_IDS * sizeof(int));
    if (!m || !ids || !text_ids(m, tp, ids)) {
        vq_model_free(m);
        free(ids);
        return vq_t_done();
    }
    CHECKF(fnv1a64_ids(ids, N_IDS) == r.ids_fnv, "our ids of the text differ from the reference's (hash %016llx vs %016llx)",
           (unsigned long long)fnv1a64_ids(ids, N_IDS), r.ids_fnv);
    const char *names[3] = { "f32", "f16", "q8_0" };
    vq_kv_spec *specs[3];
    for (int a = 0; a < 3; a++) specs[a] = vq_kv_spec_parse(names[a], &err);
    CHECK(specs[0] && specs[1] && specs[2]);
    vq_ppl_params pp = vq_ppl_default_params();
    pp.n_ctx = CTX;
    pp.mode = VQ_PPL_DECODE;
    pp.bos_per_window = 1;
    pp.score = VQ_PPL_SCORE_SECOND_HALF;
    pp.max_tokens = N_IDS;
    vq_ppl_result res[3];
    const vq_kv_spec *arms[3] = { specs[0], specs[1], specs[2] };
    vq_status st = specs[0] && specs[1] && specs[2] ? vq_perplexity(m, arms, 3, ids, N_IDS, &pp, NULL, NULL, res, &err)
                                                    : VQ_ERR_ARG;
    CHECKF(st == VQ_OK, "perplexity: %s", err.msg);
    if (st == VQ_OK) {
        const double want[3] = { r.np_nll, r.f16_nll, r.q8_nll };
        const char *who[3] = { "numpy f64", "llama.cpp f16", "llama.cpp q8_0" };
        for (int a = 0; a < 3; a++) {
            const double rel = res[a].ppl / exp(want[a]) - 1;
            printf("kv %-5s ppl %.4f vs %-14s %.4f (%+.3f%%), %ld scored, %.1f tok/s\n", names[a], res[a].ppl, who[a],
                   exp(want[a]), 100 * rel, res[a].n_scored, res[a].n_tokens / VQ_MAX(res[a].seconds, 1e-9));
            CHECK(res[a].n_scored == 1022);
            CHECKF(fabs(rel) <= PPL_TOL, "kv %s: ppl %.4f vs %s %.4f", names[a], res[a].ppl, who[a], exp(want[a]));
        }
    }
    for (int a = 0; a < 3; a++) vq_kv_spec_free(specs[a]);
    free(ids);
    vq_model_free(m);
    return vq_t_done();
}
