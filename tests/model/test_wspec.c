/* test_wspec.c: the --weights spec grammar (vq_wspec_parse, vq_wspec_type, vq_wspec_check_layers)
 * without a model: class and group items, per-layer items (blk.L.CLASS, blk.A-B.CLASS, groups)
 * and which item wins (the last one naming a matrix), the normalized text, and every refusal with
 * the part of the message that names what was wrong. */
#include "model/model.h"
#include "kernels/kernels.h"
#include "../vq_test.h"

enum { EMBD, OUTPUT, AQ, AK, AV, AO, FG, FU, FD };

static uint32_t T(const char *name) {
    for (uint32_t t = 0; t < 0x20000; t++) {
        const vq_wtype *w = vq_wtype_get(t);
        if (w && !strcmp(w->name, name)) return t;
    }
    return 0xdeadu;
}

int main(void) {
    vq_wspec w;
    vq_err e;
    const uint32_t Q8 = T("q8_0"), Q4 = T("q4_0"), W4 = T("tqw4"), W3 = T("tqw3");

    /* classes and groups, later items override earlier ones */
    CHECKF(vq_wspec_parse("q4_0,embd=q8_0,ffn=tqw4,ffn_up=keep", &w, &e) == VQ_OK, "%s", e.msg);
    CHECK(w.type[EMBD] == Q8 && w.type[OUTPUT] == Q4 && w.type[AQ] == Q4 && w.type[AO] == Q4);
    CHECK(w.type[FG] == W4 && w.type[FD] == W4 && w.type[FU] == VQ_WKEEP && w.n_items == 0);
    CHECK(!strcmp(w.text, "embd=q8_0,output=q4_0,attn_q=q4_0,attn_k=q4_0,attn_v=q4_0,attn_output=q4_0,"
                          "ffn_gate=tqw4,ffn_up=keep,ffn_down=tqw4"));
    CHECK(vq_wspec_type(&w, FD, 7) == W4 && vq_wspec_type(&w, EMBD, -1) == Q8 && vq_wspec_type(&w, -1, -1) == VQ_WKEEP);

    /* per-layer items: a single layer, a range, a group; the class type elsewhere */
    CHECKF(vq_wspec_parse("keep,blk.0-1.ffn_down=tqw4,blk.4.ffn_down=tqw3,blk.9.attn=q8_0", &w, &e) == VQ_OK, "%s", e.msg);
    CHECK(w.n_items == 6 && w.max_layer == 9);
    CHECK(vq_wspec_type(&w, FD, 0) == W4 && vq_wspec_type(&w, FD, 1) == W4 && vq_wspec_type(&w, FD, 2) == VQ_WKEEP);
    CHECK(vq_wspec_type(&w, FD, 4) == W3 && vq_wspec_type(&w, FU, 4) == VQ_WKEEP);
    CHECK(vq_wspec_type(&w, AQ, 9) == Q8 && vq_wspec_type(&w, AO, 9) == Q8 && vq_wspec_type(&w, AQ, 8) == VQ_WKEEP);
    CHECK(vq_wspec_type(&w, FD, -1) == VQ_WKEEP);   /* not a layer tensor: the class's type */
    CHECKF(strstr(w.text, "ffn_down=keep,blk.0-1.ffn_down=tqw4,blk.4.ffn_down=tqw3,blk.9.attn_q=q8_0,"
                          "blk.9.attn_k=q8_0,blk.9.attn_v=q8_0,blk.9.attn_output=q8_0") != NULL, "%s", w.text);

    /* the last item naming a matrix wins: a later class item drops the layer items it covers,
     * a later layer item overrides an earlier, wider one inside its layers only */
    CHECKF(vq_wspec_parse("keep,blk.3.ffn=q8_0,ffn_up=tqw4,blk.2-5.ffn_down=q4_0,blk.4.ffn_down=tqw3", &w, &e) == VQ_OK,
           "%s", e.msg);
    CHECK(vq_wspec_type(&w, FU, 3) == W4 && vq_wspec_type(&w, FG, 3) == Q8);
    CHECK(vq_wspec_type(&w, FD, 3) == Q4 && vq_wspec_type(&w, FD, 4) == W3 && vq_wspec_type(&w, FD, 5) == Q4);
    CHECK(vq_wspec_type(&w, FD, 6) == VQ_WKEEP);
    CHECKF(vq_wspec_parse("keep,blk.4.ffn_down=tqw3,blk.2-5.ffn_down=q4_0", &w, &e) == VQ_OK, "%s", e.msg);
    CHECK(w.n_items == 1 && vq_wspec_type(&w, FD, 4) == Q4);   /* covered, so dropped */

    /* layer checks against a model's layer count */
    CHECKF(vq_wspec_parse("keep,blk.28-29.ffn_down=tqw4", &w, &e) == VQ_OK, "%s", e.msg);
    CHECK(vq_wspec_check_layers(&w, 30, &e) == VQ_OK);
    CHECKF(vq_wspec_check_layers(&w, 18, &e) == VQ_ERR_ARG && strstr(e.msg, "blk.28-29.ffn_down names layer 29") &&
           strstr(e.msg, "18 layers"), "%s", e.msg);

    /* 32 per-layer items fit, with the longest names, in the normalized text; 33 are refused */
    char s[600];
    int o = snprintf(s, sizeof s, "keep");
    for (int i = 0; i < 8; i++) o += snprintf(s + o, sizeof s - o, ",blk.%d-%d.attn=tqw4", 10000 + i, 99990 + i);
    CHECKF(vq_wspec_parse(s, &w, &e) == VQ_OK && w.n_items == 32, "%s", e.msg);
    CHECK(strlen(w.text) < sizeof w.text - 1 && strstr(w.text, ",blk.10007-99997.attn_output=tqw4"));
    snprintf(s + o, sizeof s - o, ",blk.1.ffn_up=q8_0");
    CHECKF(vq_wspec_parse(s, &w, &e) == VQ_ERR_ARG && strstr(e.msg, "more than 32 per-layer items"), "%s", e.msg);

    /* refusals, each naming what was wrong */
    const char *bad[][2] = {
        { "keep,blk.3.embd=q8_0", "not per-layer" },          { "keep,blk.1.output=q8_0", "not per-layer" },
        { "keep,blk.3-1.ffn_down=q8_0", "A <= B" },            { "keep,blk.x.ffn_down=q8_0", "blk.L.CLASS" },
        { "keep,blk.123456.ffn_down=q8_0", "at most 5 digits" }, { "keep,blk.3ffn_down=q8_0", "blk.L.CLASS" },
        { "keep,blk..ffn_down=q8_0", "blk.L.CLASS" },           { "keep,blk.3-.ffn_down=q8_0", "blk.L.CLASS" },
        { "keep,blk.3.mlp=q8_0", "unknown tensor class 'mlp'" }, { "keep,blk.3.=q8_0", "unknown tensor class ''" },
        { "keep,blk.3.ffn_down=q4_K", "has no quantizer" },     { "keep,blk.3.ffn_down=zz", "unknown weight type 'zz'" },
        { "blk.3.ffn_down", "unknown weight type" },            { "keep,blk.3.ffn_down=q8_0,", "ends with ','" },
        { "q9_9", "unknown weight type 'q9_9'" },               { "", "empty" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vq_err_clear(&e);
        vq_status st = vq_wspec_parse(bad[i][0], &w, &e);
        CHECKF(st == VQ_ERR_ARG && strstr(e.msg, bad[i][1]), "'%s': %s", bad[i][0], e.msg);
    }
    memset(s, 'a', sizeof s - 1);
    s[sizeof s - 1] = 0;
    CHECKF(vq_wspec_parse(s, &w, &e) == VQ_ERR_ARG && strstr(e.msg, "longer than 511 bytes"), "%s", e.msg);
    return vq_t_done();
}
