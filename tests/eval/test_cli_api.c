/* test_cli_api.c: the lab's public face (lab/vqlab.h; lab/cli_api.c) and the runtime face (veloxquant.h)
 * on stories260K: every wrapper fills its result struct from the lab code it wraps, takes parsed
 * specs, and reports bad arguments. Only the public headers (veloxquant.h, lab/vqlab.h) are
 * included, as in tools/. */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include "lab/vqlab.h"
#include "../vq_test.h"

int main(void) {
    char mp[512], tp[512];
    vq_t_shared("data/stories260K.bin", mp, sizeof mp);
    vq_t_shared("data/tok512.bin", tp, sizeof tp);
    vq_err err;
    vq_model_params mpar = vq_model_default_params();
    mpar.tokenizer_path = tp;
    vq_model *m = vq_model_load(mp, &mpar, &err);
    if (!m) VQ_SKIP("stories260K does not load: %s", err.msg);
    vq_model_info mi = vq_model_get_info(m);

    /* machine, codecs, model details */
    char cpu[512];
    vq_cpu_description(cpu, sizeof cpu);
    CHECK(strlen(cpu) > 0);
    CHECK(vq_kernels_isa_name() && strlen(vq_kernels_isa_name()) > 0);
    CHECK(vq_max_threads() >= 1);
    CHECK(vq_codec_name(0) != NULL && vq_codec_name(-1) == NULL && vq_codec_name(100000) == NULL);
    int has_f16 = 0;
    for (int i = 0; vq_codec_name(i); i++) has_f16 |= !strcmp(vq_codec_name(i), "f16");
    CHECK(has_f16);
    vq_model_details d = vq_model_get_details(m);
    CHECKF(!strcmp(d.weight_type, "f32") && !strcmp(d.embd_type, "f32"), "%s %s", d.weight_type, d.embd_type);
    CHECK(d.rope_dim == mi.head_dim && d.norm_eps > 0);
    CHECK(vq_rss_now_bytes() > 0 && vq_rss_peak_bytes() >= vq_rss_now_bytes() / 2);

    /* tokens of a text */
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                       "One day, she saw a big red ball under a tree and ran to get it. Her mom smiled at her.";
    int tok[512];
    int n = vq_tokenize(m, text, strlen(text), 1, 0, tok, 512, &err);
    CHECK(n > 40);

    vq_kv_spec *f16 = vq_kv_spec_parse("f16", &err), *f32 = vq_kv_spec_parse("f32", &err);
    CHECK(f16 && f32);
    const vq_kv_spec *arms[2] = { f16, f32 };

    /* throughput: reps x ctxs x arms samples in run order, arms innermost */
    int ctxs[2] = { 8, 16 };
    vq_tput_params tp2 = { .ctxs = ctxs, .n_ctxs = 2, .specs = arms, .n_specs = 2, .reps = 2, .n_gen = 2, .batch = 8,
                           .text = tok, .n_text = n, .kv_seed = 1 };
    vq_tput_sample smp[8];
    CHECKF(vq_bench_throughput(m, &tp2, smp, NULL, NULL, &err) == VQ_OK, "%s", err.msg);
    for (int k = 0; k < 8; k++) {
        CHECK(smp[k].spec_index == k % 2 && smp[k].ctx_index == (k / 2) % 2 && smp[k].rep == k / 4);
        CHECK(smp[k].decode_tps > 0 && smp[k].prefill_tps > 0 && smp[k].kv_bytes > 0);
    }
    CHECK(smp[1].kv_bytes > smp[0].kv_bytes);   /* f32 holds more than f16 */
    tp2.n_text = 10;
    CHECK(vq_bench_throughput(m, &tp2, smp, NULL, NULL, &err) == VQ_ERR_RANGE);
    double bw[2];
    CHECK(vq_bench_read_bandwidth(1 << 20, 2, bw, &err) == VQ_OK && bw[0] > 0 && bw[1] > 0);
    CHECK(vq_bench_read_bandwidth(1 << 20, 0, bw, &err) == VQ_ERR_ARG);

    /* resident memory fill */
    vq_rss_point pts[2];
    vq_rss_result rr;
    CHECKF(vq_bench_rss(m, f16, tok, n, ctxs, 2, 8, 0, 1, pts, &rr, &err) == VQ_OK, "%s", err.msg);
    CHECK(pts[0].ctx == 8 && pts[1].ctx == 16 && pts[1].kv_bytes >= pts[0].kv_bytes && rr.rss_base > 0);

    /* kv fidelity: f32 is exact */
    vq_kvfid_capture *cap = vq_kv_fidelity_capture(m, tok, 32, &err);
    CHECKF(cap != NULL, "%s", err.msg);
    if (cap) {
        vq_kv_fidelity_result r;
        CHECKF(vq_kv_fidelity_eval(cap, f32, 1, &r, &err) == VQ_OK, "%s", err.msg);
        CHECK(r.ok && r.n_layers == mi.n_layers && r.layer);
        CHECK_NEAR(r.mean.key_cos, 1.0, 1e-9);
        CHECK(r.mean.kl < 1e-9 && r.mean.rel_err < 1e-5 && strlen(r.normalized) > 0);
        vq_kv_fidelity_result_free(&r);
        vq_kv_spec *q8 = vq_kv_spec_parse("q8_0", &err);   /* head_dim 8: q8_0's blocks of 32 do not fit */
        CHECK(q8 && vq_kv_fidelity_eval(cap, q8, 1, &r, &err) == VQ_OK && !r.ok && strstr(r.why, "q8_0"));
        vq_kv_fidelity_result_free(&r);
        vq_kv_spec_free(q8);
        vq_kv_fidelity_capture_free(cap);
    }
    char defs[64][96];
    CHECK(vq_kv_fidelity_default_specs(defs, 64) > 3 && !strcmp(defs[0], "f32"));

    /* bench-kernels: the labels as given, in order; an arm the store refuses is reported */
    vq_kv_spec *q8 = vq_kv_spec_parse("q8_0", &err);
    const vq_kv_spec *bk_specs[2] = { f16, q8 };
    const char *labels[2] = { "f16", "q8_0" };
    int ns = 64, dims[2] = { 32, 8 };
    vq_bench_kernels_params bp = { .ns = &ns, .n_ns = 1, .dims = dims, .n_dims = 2, .specs = bk_specs, .labels = labels,
                                   .n_specs = 2, .reps = 1, .threads = 1, .pool_bytes = 1 << 16, .seed = 3 };
    vq_bench_kernels_result br;
    CHECKF(vq_bench_kernels_run(&bp, &br, NULL, NULL, &err) == VQ_OK, "%s", err.msg);
    CHECK(br.n_arms == 4 && br.n_specs == 2 && br.reps == 1 && br.copy_bps && br.copy_bps[0] > 0);
    if (br.n_arms == 4) {
        CHECK(!strcmp(br.arms[0].label, "f16") && !strcmp(br.arms[1].label, "q8_0"));
        CHECK(br.arms[0].ok && br.arms[1].ok && br.arms[0].d == 32 && br.arms[0].attend_s[0] > 0);
        CHECK(br.arms[2].d == 8 && br.arms[2].ok && !br.arms[3].ok && strstr(br.arms[3].why, "q8_0"));
    }
    vq_bench_kernels_result_free(&br);
    vq_bench_kernels_result_free(&br);   /* a freed result frees again harmlessly */

    /* needle: arguments checked; the first prompt's counts */
    int nctx = 256;
    double depth = 0.5;
    vq_needle_config nc = { .ctxs = &nctx, .n_ctxs = 1, .depths = &depth, .n_depths = 1, .specs = arms, .n_specs = 1,
                            .trials = 1, .batch = 32, .digits = 3, .n_gen = 6, .seed = 5, .kv_seed = 1 };
    vq_needle_prompt_info pi;
    char *pr = vq_needle_first_prompt(m, &nc, &pi, &err);
    CHECKF(pr != NULL, "%s", err.msg);
    CHECK(pi.n == nctx - 6 && strlen(pi.number) == 3 && (pr && strstr(pr, pi.number)));
    vq_free(pr);
    vq_needle_outcome out[1];
    CHECKF(vq_needle(m, &nc, out, NULL, NULL, &err) == VQ_OK, "%s", err.msg);
    CHECK(out[0].ctx == nctx && out[0].n_prompt == nctx - 6 && !strcmp(out[0].number, pi.number));
    nc.trials = 0;
    CHECK(vq_needle(m, &nc, out, NULL, NULL, &err) == VQ_ERR_ARG);

    vq_kv_spec_free(q8);
    vq_kv_spec_free(f16);
    vq_kv_spec_free(f32);
    vq_model_free(m);
    return vq_t_done();
}
