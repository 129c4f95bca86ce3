/* chat.c: ChatML rendering ("<|im_start|>role\ncontent<|im_end|>\n"). */
#include "model/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *fmt_alloc(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

char *vq_chat_render(const char *tmpl, const char *system, const char *user, vq_err *err) {
    if (!tmpl) {
        vq_err_set(err, VQ_ERR_UNSUPPORTED, "--chat: the model file has no chat template");
        return NULL;
    }
    if (!strstr(tmpl, "<|im_start|>")) {
        vq_err_set(err, VQ_ERR_UNSUPPORTED, "--chat: the model's chat template is not recognized (supported: ChatML)");
        return NULL;
    }
    /* the default system prompt a ChatML template hard-codes: "<|im_start|>system\n...<|im_end|>" */
    char *def = NULL;
    const char *mark = "<|im_start|>system\n";
    const char *p = strstr(tmpl, mark);
    if (!system && p) {
        p += strlen(mark);
        const char *e = strstr(p, "<|im_end|>");
        if (e) def = fmt_alloc("%.*s", (int)(e - p), p);
        system = def;
    }
    char *out = system ? fmt_alloc("<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n"
                                   "<|im_start|>assistant\n", system, user)
                       : fmt_alloc("<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", user);
    free(def);
    if (!out) vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
    return out;
}
