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

char *vq_chat_render_msgs(const char *tmpl, const vq_chat_message *msgs, int n, int add_assistant,
                          int add_default_system, vq_err *err) {
    if (!tmpl) {
        vq_err_set(err, VQ_ERR_UNSUPPORTED, "chat: the model file has no chat template");
        return NULL;
    }
    if (!strstr(tmpl, "<|im_start|>")) {
        vq_err_set(err, VQ_ERR_UNSUPPORTED, "chat: the model's chat template is not recognized (supported: ChatML)");
        return NULL;
    }
    if (n < 0 || (n > 0 && !msgs)) { vq_err_set(err, VQ_ERR_ARG, "chat: bad message list"); return NULL; }
    size_t cap = 64;
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            vq_err_set(err, VQ_ERR_ARG, "chat: message %d has no role or content", i);
            return NULL;
        }
        if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") && strcmp(msgs[i].role, "assistant")) {
            vq_err_set(err, VQ_ERR_ARG, "chat: message %d: unknown role '%.40s' (system, user, assistant)", i,
                       msgs[i].role);
            return NULL;
        }
        cap += strlen(msgs[i].content) + 40;
    }
    const char *def = NULL;
    size_t def_len = 0;
    const char *mark = "<|im_start|>system\n", *p = strstr(tmpl, mark);
    if (add_default_system && (n == 0 || strcmp(msgs[0].role, "system")) && p) {
        p += strlen(mark);
        const char *e = strstr(p, "<|im_end|>");
        if (e) { def = p; def_len = (size_t)(e - p); cap += def_len + 40; }
    }
    char *out = malloc(cap);
    if (!out) { vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); return NULL; }
    size_t o = 0;
    if (def) o += (size_t)snprintf(out + o, cap - o, "<|im_start|>system\n%.*s<|im_end|>\n", (int)def_len, def);
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, cap - o, "<|im_start|>%s\n%s<|im_end|>\n", msgs[i].role, msgs[i].content);
    if (add_assistant) snprintf(out + o, cap - o, "<|im_start|>assistant\n");
    return out;
}
