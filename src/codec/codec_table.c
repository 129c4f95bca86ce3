/* codec_table.c: the one constant table of KV codecs. Adding a codec = one extern line and one
 * table entry here, plus its own file; nothing else in the tree switches on codec names. */
#include <string.h>
#include "codec/codec.h"

extern const vq_codec vq_codec_f32;
extern const vq_codec vq_codec_f16;
extern const vq_codec vq_codec_turboquant_mse;
extern const vq_codec vq_codec_turboquant_prod;
extern const vq_codec vq_codec_turboquant_rvq;
extern const vq_codec vq_codec_q8_0;
extern const vq_codec vq_codec_q4_0;
extern const vq_codec vq_codec_kivi;
extern const vq_codec vq_codec_kvquant;
extern const vq_codec vq_codec_qjl;
extern const vq_codec vq_codec_rabitq;
extern const vq_codec vq_codec_polar;
extern const vq_codec vq_codec_tq_split;
extern const vq_codec vq_codec_vecinfer;
extern const vq_codec vq_codec_lowrank;
extern const vq_codec vq_codec_gear;

static const vq_codec *const table[] = {
    &vq_codec_f32,
    &vq_codec_f16,
    &vq_codec_turboquant_mse,
    &vq_codec_turboquant_prod,
    &vq_codec_turboquant_rvq,
    &vq_codec_q8_0,
    &vq_codec_q4_0,
    &vq_codec_kivi,
    &vq_codec_kvquant,
    &vq_codec_qjl,
    &vq_codec_rabitq,
    &vq_codec_polar,
    &vq_codec_tq_split,
    &vq_codec_vecinfer,
    &vq_codec_lowrank,
    &vq_codec_gear,
};

const vq_codec *vq_codec_at(int i) {
    return (i >= 0 && i < (int)VQ_ARRAY_LEN(table)) ? table[i] : NULL;
}

int vq_codec_count(void) { return (int)VQ_ARRAY_LEN(table); }

const vq_codec *vq_codec_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < (int)VQ_ARRAY_LEN(table); i++)
        if (strcmp(table[i]->name, name) == 0) return table[i];
    return NULL;
}
