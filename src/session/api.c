/* api.c: the public face of the model and tokenizer layers (veloxquant.h): version, model load
 * with params and accessors, tokenizer wrappers, chat templates. Everything here forwards to the
 * layer that owns the work. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "session/session_impl.h"

unsigned vq_version_number(void) { return VQ_VERSION_NUMBER; }
const char *vq_version_string(void) { return VQ_VERSION_STRING; }
void vq_free(void *p) { free(p); }

vq_model_params vq_model_default_params(void) { return (vq_model_params){ 0 }; }

vq_model *vq_model_load(const char *path, const vq_model_params *p, vq_err *err) {
    vq_err_clear(err);
    vq_model_params d = vq_model_default_params();
    if (!p) p = &d;
    if (!path || !*path) { vq_err_set(err, VQ_ERR_ARG, "vq_model_load: no model path"); return NULL; }
    if (p->n_threads < 0 || p->n_threads > 1024) {
        vq_err_set(err, VQ_ERR_ARG, "vq_model_load: n_threads %d out of range 0..1024", p->n_threads);
        return NULL;
    }
    if (p->n_threads > 0) omp_set_num_threads(p->n_threads);
    vq_wspec ws;
    if (p->weights && vq_wspec_parse(p->weights, &ws, err)) return NULL;
    {   /* a device this build or machine lacks is refused before the file is read */
        const vq_device *d;
        int ix;
        if (vq_device_find(p->device, &d, &ix, err)) return NULL;
    }
    vq_model *m = vq_model_open_ex(path, p->tokenizer_path, p->copy_weights != 0, err);
    if (m && p->weights && vq_model_requantize(m, &ws, err)) { vq_model_free(m); return NULL; }
    if (m && vq_model_to_device(m, p->device, err)) { vq_model_free(m); return NULL; }   /* last: the weights as run */
    return m;
}

vq_model_info vq_model_get_info(const vq_model *m) {
    vq_model_info i;
    memset(&i, 0, sizeof i);
    if (!m) return i;
    const vq_model_config *c = &m->cfg;
    memcpy(i.arch, c->arch, sizeof i.arch);
    i.n_layers = c->n_layers;
    i.n_heads = c->n_heads;
    i.n_kv_heads = c->n_kv_heads;
    i.head_dim = c->head_dim;
    i.dim = c->dim;
    i.hidden_dim = c->hidden_dim;
    i.n_vocab = c->vocab_size;
    i.n_ctx_train = c->train_ctx;
    i.rope_base = c->rope_base;
    i.file_bytes = m->file_bytes;
    i.has_chat_template = m->chat_template != NULL;
    return i;
}
int vq_model_n_layers(const vq_model *m) { return m ? m->cfg.n_layers : 0; }
int vq_model_n_vocab(const vq_model *m) { return m ? m->cfg.vocab_size : 0; }
int vq_model_n_ctx_train(const vq_model *m) { return m ? m->cfg.train_ctx : 0; }
const char *vq_model_chat_template(const vq_model *m) { return m ? m->chat_template : NULL; }
const char *vq_model_path(const vq_model *m) { return m ? m->path : ""; }
const char *vq_model_device(const vq_model *m) { return m && m->dev ? m->dev_name : "cpu"; }

int vq_tokenize(const vq_model *m, const char *text, size_t len, int add_bos, int parse_special,
                int *out, int max_out, vq_err *err) {
    if (!m || (!text && len)) { vq_err_set(err, VQ_ERR_ARG, "vq_tokenize: no model or text"); return -1; }
    if (add_bos < 0) add_bos = vq_tok_add_bos_default(m->tok);
    return vq_tok_encode(m->tok, text ? text : "", len, add_bos, parse_special, out, max_out, err);
}
size_t vq_token_piece(const vq_model *m, int prev, int id, int show_special, char *buf, size_t cap) {
    if (!m || id < 0 || id >= m->cfg.vocab_size) return 0;
    return vq_tok_piece(m->tok, prev, id, show_special, buf, cap);
}
size_t vq_detokenize(const vq_model *m, const int *ids, int n, char *buf, size_t cap) {
    if (!m || n < 0 || (n && !ids)) return 0;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size) return 0;
    return vq_tok_decode(m->tok, ids, n, buf, cap);
}
int vq_token_bos(const vq_model *m) { return m ? vq_tok_bos(m->tok) : -1; }
int vq_token_eos(const vq_model *m) { return m ? vq_tok_eos(m->tok) : -1; }
int vq_token_is_eog(const vq_model *m, int id) { return m ? vq_tok_is_eog(m->tok, id) : 0; }
int vq_token_add_bos(const vq_model *m) { return m ? vq_tok_add_bos_default(m->tok) : 0; }

char *vq_chat_apply(const vq_model *m, const vq_chat_message *msgs, int n, int add_assistant,
                    int add_default_system, vq_err *err) {
    if (!m) { vq_err_set(err, VQ_ERR_ARG, "vq_chat_apply: no model"); return NULL; }
    return vq_chat_render_msgs(m->chat_template, msgs, n, add_assistant, add_default_system, err);
}

int vq_chat_tokenize(const vq_model *m, const vq_chat_message *msgs, int n, int add_assistant,
                     int add_default_system, int add_bos, int content_special, int *out, int max_out,
                     vq_err *err) {
    if (!m) { vq_err_set(err, VQ_ERR_ARG, "vq_chat_tokenize: no model"); return -1; }
    unsigned char *mark = NULL;
    size_t len = 0;
    char *text = vq_chat_render_marked(m->chat_template, msgs, n, add_assistant, add_default_system, &mark, &len,
                                       err);
    if (!text) return -1;
    if (add_bos < 0) add_bos = vq_tok_add_bos_default(m->tok);
    int k = content_special ? vq_tok_encode(m->tok, text, len, add_bos, 1, out, max_out, err)
                            : vq_tok_encode_masked(m->tok, text, len, add_bos, mark, out, max_out, err);
    free(text);
    free(mark);
    return k;
}
