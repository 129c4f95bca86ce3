/* gen_fuzz_seeds.c: writes the fuzzers' starting corpora: small valid GGUF files (the test
 * writer's file in each version, alignment, data order and tensor count) into <gguf dir>, and
 * small llama2.c tokenizer files into <vocab dir>. */
#include "../formats/gguf_writer.h"

#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s <gguf dir> <vocab dir>\n", argv[0]); return 2; }
    const uint32_t versions[2] = {2, 3}, aligns[3] = {0, 32, 64};
    int n = 0;
    for (int v = 0; v < 2; v++)
        for (int a = 0; a < 3; a++)
            for (int nt = 0; nt <= TW_NT; nt += (v == 1 && a == 0) ? 1 : 3)
                for (int rev = 0; rev < 2; rev++) {
                    tw_opts o = {versions[v], aligns[a], rev, nt};
                    tw_layout L;
                    tw_buf b = tw_build(&o, &L);
                    char path[4096];
                    snprintf(path, sizeof path, "%s/seed_v%u_a%u_t%d_r%d.gguf", argv[1], o.version, o.alignment, nt, rev);
                    FILE *f = fopen(path, "wb");
                    if (!f || fwrite(b.p, 1, b.n, f) != b.n || fclose(f)) { perror(path); return 1; }
                    free(b.p);
                    n++;
                }
    printf("%d seeds written to %s\n", n, argv[1]);
    /* tokenizers: max_token_length, then (score, len, bytes) per token */
    static const char *pieces[] = {"<unk>", "\n<s>\n", "\n</s>\n", "<0x00>", " t", "he", "", " the"};
    for (int k = 1; k <= (int)(sizeof pieces / sizeof pieces[0]); k += 3) {
        tw_buf b = {0};
        tw_u32(&b, 6);
        for (int i = 0; i < k; i++) { tw_f32(&b, -(float)i); tw_u32(&b, (uint32_t)strlen(pieces[i])); tw_put(&b, pieces[i], strlen(pieces[i])); }
        char path[4096];
        snprintf(path, sizeof path, "%s/seed_vocab%d.bin", argv[2], k);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(b.p, 1, b.n, f) != b.n || fclose(f)) { perror(path); return 1; }
        free(b.p);
    }
    return 0;
}
