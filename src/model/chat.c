/* chat.c: the two template families we render, by their markers:
 *   ChatML: "<|im_start|>role\ncontent<|im_end|>\n" ... "<|im_start|>assistant\n"
 *           (the template's hard-coded default system prompt, if any, comes first);
 *   Gemma:  "<start_of_turn>user\ncontent<end_of_turn>\n" ... "<start_of_turn>model\n"
 *           (no system role: a system message's text and a blank line go before the next
 *           message's text, as Gemma 3's template does; the assistant role is "model"; BOS comes
 *           from the tokenizer, not from this text). */
#include "model/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FAM_CHATML = 1, FAM_GEMMA = 2 };

static int family(const char *tmpl, const char *what, vq_err *err) {
    if (!tmpl) {
        vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: the model file has no chat template", what);
        return 0;
    }
    if (strstr(tmpl, "<|im_start|>")) return FAM_CHATML;
    if (strstr(tmpl, "<start_of_turn>")) return FAM_GEMMA;
    vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: the model's chat template is not recognized (supported: ChatML, Gemma)",
               what);
    return 0;
}

/* the default system prompt a ChatML template hard-codes: "<|im_start|>system\n...<|im_end|>" */
static const char *chatml_default_system(const char *tmpl, size_t *len) {
    const char *mark = "<|im_start|>system\n", *p = strstr(tmpl, mark);
    if (!p) return NULL;
    p += strlen(mark);
    const char *e = strstr(p, "<|im_end|>");
    if (!e) return NULL;
    *len = (size_t)(e - p);
    return p;
}

static char *render(const char *tmpl, const vq_chat_message *msgs, int n, int add_assistant,
                    int add_default_system, const char *what, vq_err *err) {
    const int fam = family(tmpl, what, err);
    if (!fam) return NULL;
    if (n < 0 || (n > 0 && !msgs)) { vq_err_set(err, VQ_ERR_ARG, "%s: bad message list", what); return NULL; }
    size_t cap = 64;
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            vq_err_set(err, VQ_ERR_ARG, "%s: message %d has no role or content", what, i);
            return NULL;
        }
        if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") && strcmp(msgs[i].role, "assistant")) {
            vq_err_set(err, VQ_ERR_ARG, "%s: message %d: unknown role '%.40s' (system, user, assistant)", what, i,
                       msgs[i].role);
            return NULL;
        }
        if (fam == FAM_GEMMA && i > 0 && !strcmp(msgs[i].role, "system")) {
            vq_err_set(err, VQ_ERR_ARG, "%s: message %d: a Gemma conversation takes a system message only first",
                       what, i);
            return NULL;
        }
        cap += strlen(msgs[i].content) + 40;
    }
    const char *def = NULL;
    size_t def_len = 0;
    if (fam == FAM_CHATML && add_default_system && (n == 0 || strcmp(msgs[0].role, "system")))
        def = chatml_default_system(tmpl, &def_len);
    cap += def_len + 40;
    char *out = malloc(cap);
    if (!out) { vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); return NULL; }
    size_t o = 0;
    if (fam == FAM_CHATML) {
        if (def) o += (size_t)snprintf(out + o, cap - o, "<|im_start|>system\n%.*s<|im_end|>\n", (int)def_len, def);
        for (int i = 0; i < n; i++)
            o += (size_t)snprintf(out + o, cap - o, "<|im_start|>%s\n%s<|im_end|>\n", msgs[i].role, msgs[i].content);
        if (add_assistant) snprintf(out + o, cap - o, "<|im_start|>assistant\n");
        return out;
    }
    const char *sys = NULL;   /* Gemma 3's template: "system\n\n" before the next message's text */
    int i = 0;
    if (n > 0 && !strcmp(msgs[0].role, "system")) { sys = msgs[0].content; i = 1; }
    for (; i < n; i++) {
        o += (size_t)snprintf(out + o, cap - o, "<start_of_turn>%s\n%s%s%s<end_of_turn>\n",
                              strcmp(msgs[i].role, "user") ? "model" : "user", sys ? sys : "", sys ? "\n\n" : "",
                              msgs[i].content);
        sys = NULL;
    }
    if (add_assistant) snprintf(out + o, cap - o, "<start_of_turn>model\n");
    return out;
}

char *vq_chat_render(const char *tmpl, const char *system, const char *user, vq_err *err) {
    vq_chat_message m[2] = { { "system", system }, { "user", user } };
    return system ? render(tmpl, m, 2, 1, 0, "--chat", err) : render(tmpl, m + 1, 1, 1, 1, "--chat", err);
}

char *vq_chat_render_msgs(const char *tmpl, const vq_chat_message *msgs, int n, int add_assistant,
                          int add_default_system, vq_err *err) {
    return render(tmpl, msgs, n, add_assistant, add_default_system, "chat", err);
}
