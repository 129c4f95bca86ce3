/* prompt.c: the prompt builders' shared pieces (lab/prompt.h). */
#include <stdlib.h>
#include <string.h>

#include "lab/prompt.h"
#include "session/lab_tap.h"   /* core.h: vq_err_set */

int vq_ivec_reserve(vq_ivec *a, int need) {
    if (need <= a->cap) return 0;
    int cap = a->cap ? a->cap : 64;
    while (cap < need) cap *= 2;
    int *v = realloc(a->v, (size_t)cap * sizeof(int));
    if (!v) return -1;
    a->v = v; a->cap = cap;
    return 0;
}

int vq_ivec_push(vq_ivec *a, const int *x, int n) {
    if (n <= 0) return 0;   /* nothing to copy (x may be NULL) */
    if (vq_ivec_reserve(a, a->n + n)) return -1;
    memcpy(a->v + a->n, x, (size_t)n * sizeof(int));
    a->n += n;
    return 0;
}

vq_status vq_tok_append(const vq_model *m, const char *text, size_t len, int special, vq_ivec *a, vq_err *err) {
    int need = vq_tokenize(m, text, len, 0, special, NULL, 0, err);
    if (need < 0) return err && err->code ? err->code : VQ_ERR_ARG;
    if (vq_ivec_reserve(a, a->n + need)) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory building a prompt");
    vq_tokenize(m, text, len, 0, special, a->v + a->n, need, err);
    a->n += need;
    return VQ_OK;
}

vq_status vq_tok_append_str(const vq_model *m, const char *text, int special, vq_ivec *a, vq_err *err) {
    return vq_tok_append(m, text, strlen(text), special, a, err);
}

void vq_sentences_start(vq_sentences *u, const char *text, uint64_t r) {
    memset(u, 0, sizeof *u);
    u->text = text;
    u->scan = text + r % strlen(text);
    const char *nl = strchr(u->scan, '\n');
    u->scan = nl ? nl + 1 : text;
    u->cur = u->end = u->scan;
}

int vq_sentences_next(vq_sentences *u, char *buf, size_t cap) {
    for (;;) {
        while (u->cur < u->end && *u->cur == ' ') u->cur++;
        if (u->cur < u->end) {
            const char *e = u->cur, *stop = u->end;
            for (; e + 2 < u->end; e++)
                if (e[0] == ' ' && e[1] == '.' && e[2] == ' ') { stop = e + 2; break; }
            size_t n = (size_t)(stop - u->cur);
            if (n > cap - 2) n = cap - 2;
            buf[0] = ' ';
            memcpy(buf + 1, u->cur, n);
            buf[n + 1] = 0;
            u->cur = stop;
            return 1;
        }
        if (!*u->scan) { u->scan = u->text; if (++u->wraps > 2) return 0; }
        const char *ls = u->scan, *le = strchr(ls, '\n');
        if (!le) le = ls + strlen(ls);
        u->scan = *le ? le + 1 : le;
        const char *a = ls, *b = le;
        while (a < b && (*a == ' ' || *a == '\t' || *a == '\r')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r')) b--;
        if (a == b || *a == '=') continue;
        u->cur = a; u->end = b;
    }
}
