/* chat.h: turns a conversation into the prompt text a chat model expects. The model file's
 * Jinja template is not executed; we recognize the template family by its markers and render that
 * family's fixed layout, taking the default system prompt the template hard-codes, if any.
 * Families: ChatML ("<|im_start|>": SmolLM2, Qwen 2.5/3), Llama 3 ("<|start_header_id|>"),
 * Gemma ("<start_of_turn>") and Phi-3 ("<|user|>" ... "<|end|>").
 * Gemma files often carry no template at all: the loader then names the Gemma family itself
 * (VQ_CHAT_GEMMA). */
#ifndef VQ_CHAT_H
#define VQ_CHAT_H
#include "core/core.h"

/* The template text a Gemma 3 model without tokenizer.chat_template is given: its markers are
 * what vq_chat_render* recognize (the text is not a Jinja template). */
#define VQ_CHAT_GEMMA "<start_of_turn>user\n{content}<end_of_turn>\n<start_of_turn>model\n"

/* Render one user turn plus the assistant header. system may be NULL (template default).
 * Returns a malloc'd string, or NULL with err set (unknown template family). */
char *vq_chat_render(const char *tmpl, const char *system, const char *user, vq_err *err);

/* Render a conversation (vq_chat_apply in veloxquant.h): every message in the template's layout;
 * the template's default system prompt first when add_default_system and msgs[0] is not
 * "system"; the assistant header last when add_assistant. Roles: system, user, assistant. */
char *vq_chat_render_msgs(const char *tmpl, const vq_chat_message *msgs, int n, int add_assistant,
                          int add_default_system, vq_err *err);
/* The same, and *mark (malloc'd, one byte per byte of the text) says which bytes are the template's
 * own text (1) and which are message content (0); *len is the text's length. Either may be NULL. */
char *vq_chat_render_marked(const char *tmpl, const vq_chat_message *msgs, int n, int add_assistant,
                            int add_default_system, unsigned char **mark, size_t *len, vq_err *err);
#endif
