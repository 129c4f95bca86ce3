/* test_kv_codecs.c: for EVERY codec in the table (walked with vq_codec_at, so rows added later
 * are covered) and a few parameter sets: attention computed from the codes by the store equals
 * float64 naive attention over the decoded K_hat/V_hat (vq_kv_read decodes every block) to 1e-5
 * relative, with causal masking by position, GQA, windows and partial pages. Runs itself once
 * per SIMD variant (VQ_CODEC_ISA=scalar|avx2|avx512) so every code path is checked. */
#include <sys/wait.h>
#include "../vq_test.h"
#include "kv/kv.h"
#include "codec/codec.h"
#include "kv_ref.h"
#include "../calib_fixture.h"

/* codecs that need calib=FILE (tq_split): a synthetic calibration per shape, in a temp folder */
static char g_dir[] = "/tmp/vq_kv_codecs_XXXXXX";
static const char *calib_for(vq_rng *rng, int NH, int H, int d) {
    static char path[256];
    snprintf(path, sizeof path, "%s/c_%d_%d_%d.vqc", g_dir, NH, H, d);
    if (access(path, R_OK) != 0) vq_t_calib_file(path, 2, NH, H, d, rng);
    return path;
}

/* cap > 0: the cache soft-caps its scores (dims.softcap, Gemma 2); the reference does the same, and
 * the output must differ from uncapped attention (the cap is applied, not ignored) */
static int run_spec_cap(vq_rng *rng, const char *spec, int NH, int H, int d, int must, float cap) {
    vq_kv_dims dims = {.n_layers = 2, .n_heads = NH, .n_kv_heads = H, .head_dim = d, .max_ctx = 900,
                       .softcap = cap};
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, &dims, vq_rng_u64(rng), &err);
    if (!kv) {
        CHECKF(!must, "create '%s' d=%d: %s", spec, d, err.msg);
        CHECKF(err.code == VQ_ERR_ARG && strlen(err.msg) > 10, "'%s' d=%d: error without message", spec, d);
        return 0;
    }
    const int w = H * d, rows = 1 + (int)(vq_rng_u64(rng) % 500), n_q = 1 + (int)(vq_rng_u64(rng) % 24);
    float *K = malloc(sizeof(float) * (size_t)rows * w), *V = malloc(sizeof(float) * (size_t)rows * w);
    float *Kr = malloc(sizeof(float) * (size_t)rows * w), *Vr = malloc(sizeof(float) * (size_t)rows * w);
    int32_t *pr = malloc(sizeof(int32_t) * (size_t)rows);
    float *Q = malloc(sizeof(float) * (size_t)n_q * NH * d), *O = malloc(sizeof(float) * (size_t)n_q * NH * d);
    double *R = malloc(sizeof(double) * (size_t)n_q * NH * d);
    int *qp = malloc(sizeof(int) * (size_t)n_q);
    for (int l = 0; l < 2; l++) {
        fill_uniform(rng, K, (size_t)rows * w, 2.0f);
        fill_uniform(rng, V, (size_t)rows * w, 1.0f);
        int r = 0, p = 0, last = 0;
        while (r < rows) {
            int n = 1 + (int)(vq_rng_u64(rng) % 70);
            n = VQ_MIN(n, rows - r);
            CHECKF(vq_kv_append(kv, l, p, n, K + (size_t)r * w, V + (size_t)r * w, &err) == VQ_OK,
                   "%s: %s", spec, err.msg);
            last = p + n - 1;
            r += n;
            p += n + (vq_rng_u64(rng) % 5 == 0 ? 3 : 0);
        }
        CHECK(vq_kv_rows(kv, l) == rows);
        CHECK(vq_kv_read(kv, l, Kr, Vr, pr, &err) == VQ_OK);
        fill_uniform(rng, Q, (size_t)n_q * NH * d, 2.0f);
        for (int i = 0; i < n_q; i++) qp[i] = i == 0 ? last : (int)(vq_rng_u64(rng) % (last + 2));
        CHECK(vq_kv_attend(kv, l, n_q, qp, Q, O, &err) == VQ_OK);
        ref_attention_cap(rows, Kr, Vr, pr, H, NH, d, n_q, qp, Q, cap, R);
        double e = rel_err(n_q, NH, d, O, R);
        CHECKF(e < 1e-5, "'%s' (%s) NH%d H%d d%d rows %d cap %g: codes vs decoded rel err %.3g", spec,
               vq_kv_spec_str(kv), NH, H, d, rows, (double)cap, e);
        if (cap > 0) {
            /* the store's float64 reference path caps too */
            float *O2 = malloc(sizeof(float) * (size_t)n_q * NH * d);
            vq_kv_set_ref_attend(kv, 1);
            CHECK(vq_kv_attend(kv, l, n_q, qp, Q, O2, &err) == VQ_OK);
            vq_kv_set_ref_attend(kv, 0);
            double e3 = rel_err(n_q, NH, d, O2, R);
            CHECKF(e3 < 1e-6, "'%s' cap %g: the reference path vs float64 rel err %.3g", spec, (double)cap, e3);
            /* and uncapped attention is far from it: the cap matters at these scores */
            ref_attention(rows, Kr, Vr, pr, H, NH, d, n_q, qp, Q, R);
            double e4 = rel_err(n_q, NH, d, O, R);
            CHECKF(rows < 16 || e4 > 1e-3, "'%s' cap %g: capped output within %.3g of uncapped attention", spec, (double)cap, e4);
            free(O2);
        }
        int finite = 1;
        for (size_t i = 0; i < (size_t)n_q * NH * d; i++) finite &= isfinite(O[i]);
        CHECKF(finite, "'%s': non-finite output", spec);
    }
    CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "'%s': bytes %zu vs tally %zu", spec,
           vq_kv_bytes(kv), vq_kv_bytes_tally(kv));
    vq_kv_destroy(kv);
    free(K); free(V); free(Kr); free(Vr); free(pr); free(Q); free(O); free(R); free(qp);
    return 1;
}

static int run_spec(vq_rng *rng, const char *spec, int NH, int H, int d, int must) {
    return run_spec_cap(rng, spec, NH, H, d, must, 0.0f);
}

static int run_all(uint64_t seed) {
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    const int shapes[][3] = {{9, 3, 64}, {4, 4, 128}, {8, 2, 32}, {3, 1, 48}};
    for (int i = 0; vq_codec_at(i); i++) {
        const vq_codec *c = vq_codec_at(i);
        char spec[400];   /* name + ";window=7" + cal (300) */
        int ok = 0;
        for (size_t s = 0; s < VQ_ARRAY_LEN(shapes); s++) {
            char cal[300] = "";
            if (c->needs_calib)   /* the store's per-head states, each with its own pairs */
                snprintf(cal, sizeof cal, ";calib=%s", calib_for(&rng, shapes[s][0], shapes[s][1], shapes[s][2]));
            snprintf(spec, sizeof spec, "%s%s", c->name, cal);
            ok += run_spec(&rng, spec, shapes[s][0], shapes[s][1], shapes[s][2], 0);
            if (s < 2)   /* attention soft-capping (Gemma 2) on every codec: scores of std ~1.3, cap 2 */
                run_spec_cap(&rng, spec, shapes[s][0], shapes[s][1], shapes[s][2], 0, 2.0f);
            if (s >= 2) continue;
            snprintf(spec, sizeof spec, "%s;window=7%s", c->name, cal);
            run_spec(&rng, spec, shapes[s][0], shapes[s][1], shapes[s][2], 0);
            if (s == 0) run_spec_cap(&rng, spec, shapes[s][0], shapes[s][1], shapes[s][2], 0, 2.0f);
        }
        CHECKF(ok > 0, "codec %s: no shape accepted (64 and 128 should be)", c->name);
        printf("codec %-18s checked (%d shapes accepted)\n", c->name, ok);
    }
    /* parameter variants of the llama.cpp arms and KIVI, and mixed K/V codecs */
    const char *extra[] = {"q8_0:rotate=1", "q4_0:rotate=1", "q4_0:rotate=1;window=33,wprec=32",
                           /* window and sink rows in q8_0 blocks (wprec=8), lanes and row layouts */
                           "turboquant_mse:bits=4;window=16,sink=4,wprec=8", "q4_0:rotate=1,layout=rows;window=9,wprec=8",
                           "k=turboquant_mse:bits=3,layout=packed;v=q8_0;window=40,sink=2,wprec=8,page=32",
                           "k=q8_0;v=q4_0:rotate=1", "kivi:bits=2,group=32,residual=16",
                           "kivi:bits=4,group=16,residual=0", "kivi:k=2,v=4,group=64,residual=40",
                           "k=kivi:bits=2,group=32,residual=0;v=f16", "k=f16;v=kivi:bits=2,group=32",
                           "kivi:bits=2,group=16,residual=5;page=20",
                           "k=kivi:bits=4,group=8,residual=3;v=q8_0;page=20",
                           /* turboquant_mse's lanes at 2 and 3 bits (16-row keys), packed, mixed */
                           "turboquant_mse:bits=3", "turboquant_mse:bits=2;window=5,sink=3",
                           "turboquant_mse:k=2,v=3,norm=f32;page=20", "turboquant_mse:bits=3,layout=packed",
                           "k=turboquant_mse:bits=2;v=turboquant_mse:bits=4,layout=packed",
                           /* 3-bit kivi keys; kvquant's sparse outliers with windows, sinks, pages
                            * that are not a multiple of the group, mixed values, a short tile */
                           "kivi:k=3,v=2,residual=0", "k=kivi:bits=3,group=24,residual=9;v=turboquant_mse:bits=4",
                           "kvquant:k=3,v=4,outliers=0.02;sink=4", "kvquant:k=2,v=4,group=16,outliers=0.05;window=3,page=20",
                           "k=kvquant:bits=3,outliers=0.01;v=turboquant_mse:bits=3;sink=2",
                           "k=kvquant:bits=4,group=24,outliers=0.03;v=q8_0", "kvquant:bits=2,layout=rows,outliers=0.125"};
    for (size_t s = 0; s < VQ_ARRAY_LEN(extra); s++) {
        if ((!vq_codec_find("kivi") && strstr(extra[s], "kivi")) || (!vq_codec_find("kvquant") && strstr(extra[s], "kvquant"))) continue;
        run_spec(&rng, extra[s], 9, 3, 64, 1);
        run_spec(&rng, extra[s], 8, 4, 128, 1);
    }
    if (vq_codec_find("tq_split") && vq_codec_find("kvquant")) {   /* calibrated keys (tq_split, kvquant qweight=1) with
                                                                       * other values, windows, sinks, overrides */
        const char *sx[] = {"k=tq_split:hi=4,lo=2;v=turboquant_mse:bits=4", "k=tq_split:hi=3,lo=2,frac=0.125;v=q8_0;window=5,sink=3",
                            "k=tq_split:hi=4,lo=1;v=f16;page=20", "tq_split:hi=4,lo=2@1=f16",
                            "k=kvquant:bits=3,outliers=0.02,qweight=1;v=turboquant_mse:bits=4;sink=2",
                            "kvquant:k=2,v=4,group=16,outliers=0.05,qweight=1;window=3,page=20",
                            /* the key pre-transform (kscale= / kmean=) on every key layout: lanes
                             * (2-4-bit turboquant_mse, q4_0, q8_0, kivi, tq_split), packed, rows */
                            "turboquant_mse:bits=3;kscale=0.25", "turboquant_mse:k=2,v=4;kmean=1,kscale=0.25;window=5,sink=3",
                            "turboquant_mse:bits=4,layout=packed;kscale=0.5;page=20", "q4_0:rotate=1;kscale=0.25",
                            "q8_0;kmean=1", "q4_0:rotate=1,layout=rows;kmean=1,kscale=0.25;sink=4",
                            "k=kivi:bits=3,residual=0;v=turboquant_mse:bits=4;kscale=0.25",
                            "k=tq_split:hi=4,lo=1,frac=0.5;v=turboquant_mse:bits=4;kmean=1,kscale=0.25",
                            "k=kvquant:bits=2,outliers=0.02,qweight=1;v=turboquant_mse:bits=4;kscale=0.25;sink=4",
                            "turboquant_mse:bits=4;kscale=0.25@1=f16"};
        for (size_t s = 0; s < VQ_ARRAY_LEN(sx); s++) {
            char spec[600];
            const char *at = strchr(sx[s], '@');
            int shapes2[2][3] = {{9, 3, 64}, {8, 4, 128}};
            for (int k = 0; k < 2; k++) {
                const char *cal = calib_for(&rng, shapes2[k][0], shapes2[k][1], shapes2[k][2]);
                if (at) snprintf(spec, sizeof spec, "%.*s;calib=%s%s", (int)(at - sx[s]), sx[s], cal, at);
                else snprintf(spec, sizeof spec, "%s;calib=%s", sx[s], cal);
                run_spec(&rng, spec, shapes2[k][0], shapes2[k][1], shapes2[k][2], 1);
            }
        }
    }
    return vq_t_done();
}

int main(int argc, char **argv) {
    if (argc > 2) {   /* child: one ISA */
        if (!mkdtemp(g_dir)) VQ_SKIP("cannot make a temp folder");
        int rc = run_all(strtoull(argv[2], NULL, 0));
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
        return rc;
    }
    uint64_t seed = test_seed();
    const char *isas[] = {"scalar", "avx2", "avx512"};
    char self[4000];
    ssize_t ln = readlink("/proc/self/exe", self, sizeof self - 1);
    if (ln <= 0) VQ_SKIP("cannot read /proc/self/exe");
    self[ln] = 0;
    for (int i = 0; i <= (int)vq_cpu_best_isa(); i++) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "VQ_CODEC_ISA=%s '%s' %s %llu", isas[i], self, isas[i],
                 (unsigned long long)seed);
        printf("--- %s ---\n", isas[i]);
        fflush(stdout);
        int rc = system(cmd);
        CHECKF(rc == 0, "variant %s failed (rc %d)", isas[i], rc);
    }
    return vq_t_done();
}
