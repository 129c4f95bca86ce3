/* cmd_info.c: `veloxquant info`: a model's configuration. */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"

int cmd_info(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    for (int i = 2; i < argc; i++) {
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: veloxquant info [-m FILE] [--tokenizer FILE]\nPrint the model's configuration.");
            finish_stdout();
            return 0;
        }
        die("info: unknown option '%s'", argv[i]);
    }
    vq_model *m = load_model(&o);
    vq_model_info c = vq_model_get_info(m);
    vq_model_details d = vq_model_get_details(m);
    char machine[512];
    vq_cpu_description(machine, sizeof machine);
    printf("model       %s (%zu bytes)\narch        %s\ndim         %d\nhidden      %d\nlayers      %d\n"
           "heads       %d (kv %d, head_dim %d)\nvocab       %d\ntrain ctx   %d\nrope        base %g, dims %d, %s\n"
           "rms eps     %g\nweights     %s (layer 0 q), embeddings %s\nmachine     %s\n",
           vq_model_path(m), c.file_bytes, c.arch, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
           c.head_dim, c.n_vocab, c.n_ctx_train, c.rope_base, d.rope_dim, d.rope_neox ? "neox" : "adjacent pairs",
           d.norm_eps, d.weight_type, d.embd_type, machine);
    /* the barrier wait OpenMP runs with (tools/main.c sets GOMP_SPINCOUNT when nothing is set) */
    const char *wp = getenv("OMP_WAIT_POLICY"), *sc = getenv("GOMP_SPINCOUNT");
    printf("omp wait    OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s\n", wp ? wp : "(unset)", sc ? sc : "(unset)");
    vq_model_free(m);
    finish_stdout();
    return 0;
}
