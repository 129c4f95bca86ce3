/* cmd_tokenize.c: `veloxquant tokenize`: token ids of a text, one per line with its piece. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "json.h"

int cmd_tokenize(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    int special = 0, bos = -1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: veloxquant tokenize [-m FILE] (-p TEXT | -f FILE) [--special] [--bos|--no-bos]\n"
                 "Print the token ids of a text, one per line with its piece.");
            finish_stdout();
            return 0;
        }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!v) die("%s needs text", a); o.prompt = v; i++; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "--bos")) bos = 1;
        else if (!strcmp(a, "--no-bos")) bos = 0;
        else die("tokenize: unknown option '%s'", a);
    }
    size_t len = 0;
    char *text = o.prompt ? strdup(o.prompt) : o.file ? read_text(o.file, "text file", &len) : NULL;
    if (!text) die("tokenize: use -p TEXT or -f FILE");
    len = strlen(text);
    vq_model *m = load_model(&o);
    if (bos < 0) bos = vq_token_add_bos(m);
    int n;
    int *ids = tokenize_all(m, text, len, bos, special, &n);
    json j;   /* each piece as a JSON string: escapes and valid UTF-8 whatever the bytes */
    json_init(&j, stdout);
    for (int i = 0; i < n; i++) {
        char buf[256];
        size_t nb = vq_token_piece(m, i ? ids[i - 1] : -1, ids[i], 1, buf, sizeof buf - 1);
        if (nb > sizeof buf - 1) nb = sizeof buf - 1;
        if (printf("%d\t", ids[i]) < 0) break;
        json_strn(&j, buf, nb);
        if (putchar('\n') == EOF || j.failed) break;
    }
    free(ids);
    free(text);
    vq_model_free(m);
    finish_stdout();
    return 0;
}
