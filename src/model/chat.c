/* chat.c: the chat template families we render, recognized by their markers, each written from the
 * real model's Jinja template (checked against it and llama.cpp: tests/fixtures/chat_templates.tsv):
 *   ChatML (SmolLM2, Qwen 2.5/3): "<|im_start|>role\ncontent<|im_end|>\n" ... "<|im_start|>assistant\n"
 *           (the template's hard-coded default system prompt, if any, comes first);
 *   Llama 3: "<|start_header_id|>role<|end_header_id|>\n\n" content (trimmed) "<|eot_id|>"; 3.1's
 *           template always opens with a system turn holding "Cutting Knowledge Date: December 2023\n
 *           Today Date: <its default date>\n\n" before the system text;
 *   Gemma:  "<start_of_turn>user\ncontent<end_of_turn>\n" ... "<start_of_turn>model\n" (content
 *           trimmed; no system role: the system text and a blank line go before the next message's
 *           text, as Gemma 3's template and llama.cpp do; the assistant role is "model");
 *   Phi-3:  "<|user|>\ncontent<|end|>\n" ... "<|assistant|>\n"; an empty system message is left out;
 *           without the assistant header the template ends with "<|endoftext|>".
 * BOS is never part of the text: the tokenizer adds it. Each piece of the output is marked as the
 * template's own text or as message content, so that the content can be tokenized as plain text. */
#include "model/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FAM_CHATML = 1, FAM_GEMMA = 2, FAM_LLAMA3 = 3, FAM_PHI3 = 4 };

static int family(const char *tmpl, const char *what, vq_err *err) {
    if (!tmpl) {
        vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: the model file has no chat template", what);
        return 0;
    }
    if (strstr(tmpl, "<|im_start|>")) return FAM_CHATML;
    if (strstr(tmpl, "<start_of_turn>")) return FAM_GEMMA;
    if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<|eot_id|>")) return FAM_LLAMA3;
    if (strstr(tmpl, "<|user|>") && strstr(tmpl, "<|end|>")) return FAM_PHI3;
    vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: the model's chat template is not recognized (supported: ChatML, "
               "Llama 3, Gemma, Phi-3)", what);
    return 0;
}

/* A literal text in the template between mark and end, or NULL: the template's own text, so it holds
 * no Jinja quote, brace or concatenation (which would mean an expression, not a default). */
static const char *literal_after(const char *tmpl, const char *mark, const char *end, size_t *len) {
    for (const char *p = strstr(tmpl, mark); p; p = strstr(p + 1, mark)) {
        const char *s = p + strlen(mark), *e = strstr(s, end);
        if (!e || e == s) continue;
        if (memchr(s, '\'', (size_t)(e - s)) || memchr(s, '"', (size_t)(e - s)) || memchr(s, '{', (size_t)(e - s)) ||
            memchr(s, '}', (size_t)(e - s)) || memchr(s, '+', (size_t)(e - s)) || memchr(s, '\\', (size_t)(e - s)))
            continue;
        *len = (size_t)(e - s);
        return s;
    }
    return NULL;
}

/* the default system prompt a ChatML template hard-codes: "<|im_start|>system\n...<|im_end|>", the
 * newline written as such or as the two characters \n inside a Jinja string */
static const char *chatml_default_system(const char *tmpl, size_t *len) {
    const char *p = literal_after(tmpl, "<|im_start|>system\n", "<|im_end|>", len);
    return p ? p : literal_after(tmpl, "<|im_start|>system\\n", "<|im_end|>", len);
}

/* output under construction: text plus, per byte, 1 for the template's own text, 0 for content */
typedef struct out_buf { char *s; unsigned char *mark; size_t n, cap; int oom; } out_buf;

static void put(out_buf *o, const char *s, size_t n, int tmpl) {
    if (o->oom) return;
    if (o->n + n + 1 > o->cap) {
        size_t cap = (o->n + n + 1) * 2;
        char *ns = realloc(o->s, cap);
        if (ns) o->s = ns;
        unsigned char *nm = realloc(o->mark, cap);
        if (nm) o->mark = nm;
        if (!ns || !nm) { o->oom = 1; return; }
        o->cap = cap;
    }
    memcpy(o->s + o->n, s, n);
    memset(o->mark + o->n, tmpl ? 1 : 0, n);
    o->n += n;
    o->s[o->n] = 0;
}
static void put_t(out_buf *o, const char *s) { put(o, s, strlen(s), 1); }

/* Jinja's trim on ASCII whitespace: the families that trim (Llama 3, Gemma) */
static void put_content(out_buf *o, const char *s, int trim) {
    size_t n = strlen(s);
    if (trim) {
        while (n && strchr(" \t\n\r\v\f", s[0])) { s++; n--; }
        while (n && strchr(" \t\n\r\v\f", s[n - 1])) n--;
    }
    put(o, s, n, 0);
}

static int render(const char *tmpl, const vq_chat_message *msgs, int n, int add_assistant,
                  int add_default_system, const char *what, out_buf *o, vq_err *err) {
    const int fam = family(tmpl, what, err);
    if (!fam) return -1;
    if (n < 0 || (n > 0 && !msgs)) return vq_err_set(err, VQ_ERR_ARG, "%s: bad message list", what), -1;
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return vq_err_set(err, VQ_ERR_ARG, "%s: message %d has no role or content", what, i), -1;
        if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") && strcmp(msgs[i].role, "assistant"))
            return vq_err_set(err, VQ_ERR_ARG, "%s: message %d: unknown role '%.40s' (system, user, assistant)", what,
                              i, msgs[i].role), -1;
        if (fam == FAM_GEMMA && i > 0 && !strcmp(msgs[i].role, "system"))
            return vq_err_set(err, VQ_ERR_ARG, "%s: message %d: a Gemma conversation takes a system message only "
                              "first", what, i), -1;
    }
    put(o, "", 0, 1);
    if (fam == FAM_CHATML) {
        size_t def_len = 0;
        const char *def = NULL;
        if (add_default_system && (n == 0 || strcmp(msgs[0].role, "system")))
            def = chatml_default_system(tmpl, &def_len);
        if (def) { put_t(o, "<|im_start|>system\n"); put(o, def, def_len, 1); put_t(o, "<|im_end|>\n"); }
        for (int i = 0; i < n; i++) {
            put_t(o, "<|im_start|>"); put_t(o, msgs[i].role); put_t(o, "\n");
            put_content(o, msgs[i].content, 0);
            put_t(o, "<|im_end|>\n");
        }
        if (add_assistant) put_t(o, "<|im_start|>assistant\n");
    } else if (fam == FAM_LLAMA3) {
        int i = 0;
        size_t date_len = 0;
        const char *date = strstr(tmpl, "Cutting Knowledge Date: December 2023")
                         ? literal_after(tmpl, "set date_string = \"", "\"", &date_len) : NULL;
        /* Llama 3.1's template: a system turn always, the dates before its text (with
         * add_default_system off, as for the later turns of a chat, only before a system message) */
        if (date && (add_default_system || (n > 0 && !strcmp(msgs[0].role, "system")))) {
            put_t(o, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
            put(o, date, date_len, 1);
            put_t(o, "\n\n");
            if (n > 0 && !strcmp(msgs[0].role, "system")) { put_content(o, msgs[0].content, 1); i = 1; }
            put_t(o, "<|eot_id|>");
        }
        for (; i < n; i++) {
            put_t(o, "<|start_header_id|>"); put_t(o, msgs[i].role); put_t(o, "<|end_header_id|>\n\n");
            put_content(o, msgs[i].content, 1);
            put_t(o, "<|eot_id|>");
        }
        if (add_assistant) put_t(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else if (fam == FAM_PHI3) {
        for (int i = 0; i < n; i++) {
            if (!strcmp(msgs[i].role, "system") && !msgs[i].content[0]) continue;
            put_t(o, !strcmp(msgs[i].role, "system") ? "<|system|>\n" : !strcmp(msgs[i].role, "user") ? "<|user|>\n"
                                                                                                    : "<|assistant|>\n");
            put_content(o, msgs[i].content, 0);
            put_t(o, "<|end|>\n");
        }
        put_t(o, add_assistant ? "<|assistant|>\n" : "<|endoftext|>");
    } else {
        const char *sys = NULL;   /* Gemma 3's template: "system\n\n" before the next message's text */
        int i = 0;
        if (n > 0 && !strcmp(msgs[0].role, "system")) { sys = msgs[0].content; i = 1; }
        for (; i < n; i++) {
            put_t(o, "<start_of_turn>"); put_t(o, strcmp(msgs[i].role, "user") ? "model" : "user"); put_t(o, "\n");
            if (sys && sys[0]) { put_content(o, sys, 0); put(o, "\n\n", 2, 0); }   /* empty: none (llama.cpp) */
            put_content(o, msgs[i].content, 1);
            put_t(o, "<end_of_turn>\n");
            sys = NULL;
        }
        if (add_assistant) put_t(o, "<start_of_turn>model\n");
    }
    if (o->oom) return vq_err_set(err, VQ_ERR_NOMEM, "%s: out of memory", what), -1;
    return 0;
}

char *vq_chat_render(const char *tmpl, const char *system, const char *user, vq_err *err) {
    vq_chat_message m[2] = { { "system", system }, { "user", user } };
    out_buf o = { 0 };
    int rc = system ? render(tmpl, m, 2, 1, 0, "--chat", &o, err) : render(tmpl, m + 1, 1, 1, 1, "--chat", &o, err);
    free(o.mark);
    if (rc) { free(o.s); return NULL; }
    return o.s;
}

char *vq_chat_render_msgs(const char *tmpl, const vq_chat_message *msgs, int n, int add_assistant,
                          int add_default_system, vq_err *err) {
    unsigned char *mark = NULL;
    char *s = vq_chat_render_marked(tmpl, msgs, n, add_assistant, add_default_system, &mark, NULL, err);
    free(mark);
    return s;
}

char *vq_chat_render_marked(const char *tmpl, const vq_chat_message *msgs, int n, int add_assistant,
                            int add_default_system, unsigned char **mark, size_t *len, vq_err *err) {
    out_buf o = { 0 };
    if (render(tmpl, msgs, n, add_assistant, add_default_system, "chat", &o, err)) {
        free(o.s); free(o.mark);
        return NULL;
    }
    if (mark) *mark = o.mark; else free(o.mark);
    if (len) *len = o.n;
    return o.s;
}
