/* test_kv_spec_value.c: specs made from specs by the parser (veloxquant.h), so that no code
 * outside src/kv/ cuts or composes spec text: vq_kv_spec_with_layers (the CLI's --kv-layers) and
 * vq_kv_spec_with_eviction (evict-corr's truth), with the queries beside them (given, n_overrides,
 * evicts), and vq_kv_spec_layers_text (calib-layers' --kv-layers value). Each result equals the spec parsed from the text one would have written by hand, and
 * bad input gets a message naming it. */
#include "../vq_test.h"
#include "veloxquant.h"

static vq_kv_spec *P(const char *t) {
    vq_err err;
    vq_kv_spec *s = vq_kv_spec_parse(t, &err);
    CHECKF(s != NULL, "'%s': %s", t, err.msg);
    return s;
}

/* with_layers(base, ovr) equals parse(want) and its given text is base@ovr */
static void layers_ok(const char *base, const char *ovr, const char *want) {
    vq_err err;
    vq_kv_spec *b = P(base), *w = P(want);
    vq_kv_spec *s = b ? vq_kv_spec_with_layers(b, ovr, &err) : NULL;
    CHECKF(s != NULL, "'%s' + '%s': %s", base, ovr, err.msg);
    if (s && w) {
        CHECKF(vq_kv_spec_equal(s, w), "'%s' + '%s' = '%s', want '%s'", base, ovr, vq_kv_spec_text(s),
               vq_kv_spec_text(w));
        char given[4096];
        snprintf(given, sizeof given, "%s@%s", base, ovr);
        CHECKF(!strcmp(vq_kv_spec_given(s), given), "given '%s', want '%s'", vq_kv_spec_given(s), given);
        CHECK(vq_kv_spec_n_overrides(s) == vq_kv_spec_n_overrides(w));
    }
    vq_kv_spec_free(s);
    vq_kv_spec_free(w);
    vq_kv_spec_free(b);
}

static void layers_bad(const char *base, const char *ovr, const char *m1, const char *m2) {
    vq_err err;
    vq_kv_spec *b = P(base);
    vq_kv_spec *s = vq_kv_spec_with_layers(b, ovr, &err);
    CHECKF(s == NULL, "'%s' + '%s' accepted as '%s'", base, ovr ? ovr : "(null)", vq_kv_spec_text(s));
    CHECKF(s || err.code == VQ_ERR_ARG, "'%s' + '%s': code %d", base, ovr ? ovr : "(null)", err.code);
    CHECKF(s || (strstr(err.msg, m1) && (!m2 || strstr(err.msg, m2))), "'%s' + '%s': message '%s' lacks '%s' / '%s'",
           base, ovr ? ovr : "(null)", err.msg, m1, m2 ? m2 : "");
    vq_kv_spec_free(s);
    vq_kv_spec_free(b);
}

/* with_eviction(s, policy, budget) equals parse(want) */
static void evict_ok(const char *spec, const char *policy, int budget, const char *want) {
    vq_err err;
    vq_kv_spec *s = P(spec), *w = P(want);
    vq_kv_spec *r = s ? vq_kv_spec_with_eviction(s, policy, budget, &err) : NULL;
    CHECKF(r != NULL, "'%s' with %s: %s", spec, policy ? policy : "no eviction", err.msg);
    if (r && w)
        CHECKF(vq_kv_spec_equal(r, w), "'%s' with %s,%d = '%s', want '%s'", spec, policy ? policy : "none", budget,
               vq_kv_spec_text(r), vq_kv_spec_text(w));
    if (r) CHECK(vq_kv_spec_evicts(r) == (policy != NULL));
    vq_kv_spec_free(r);
    vq_kv_spec_free(w);
    vq_kv_spec_free(s);
}

int main(void) {
    /* per-layer overrides: one, several in one value, one after another */
    layers_ok("q4_0", "0,-1=f16", "q4_0@0,-1=f16");
    layers_ok("turboquant_mse:k=4,v=4", "0,1=q8_0@-1=f16", "turboquant_mse:k=4,v=4@0,1=q8_0@-1=f16");
    layers_ok("q4_0@0=f16", "-1=q8_0", "q4_0@0=f16@-1=q8_0");
    layers_ok("k=q8_0;v=q4_0;window=8", "0..2=k=q8_0;v=f16;window=32", "k=q8_0;v=q4_0;window=8@0..2=k=q8_0;v=f16;window=32");
    {   /* chained: the second override on the first's result; the given text grows */
        vq_err err;
        vq_kv_spec *b = P("q4_0"), *a = vq_kv_spec_with_layers(b, "0=f16", &err);
        vq_kv_spec *c = a ? vq_kv_spec_with_layers(a, "-1=q8_0", &err) : NULL, *w = P("q4_0@0=f16@-1=q8_0");
        CHECKF(c && vq_kv_spec_equal(c, w), "%s", c ? vq_kv_spec_text(c) : err.msg);
        CHECK(c && !strcmp(vq_kv_spec_given(c), "q4_0@0=f16@-1=q8_0") && vq_kv_spec_n_overrides(c) == 2);
        vq_kv_spec_free(a); vq_kv_spec_free(b); vq_kv_spec_free(c); vq_kv_spec_free(w);
    }
    layers_bad("q4_0", "", "none given", NULL);
    layers_bad("q4_0", "   ", "none given", NULL);
    layers_bad("q4_0", NULL, "none given", NULL);
    layers_bad("q4_0", "f16", "layer overrides 'f16' on 'q4_0'", "no '='");
    layers_bad("q4_0", "@0=f16", "'@0=f16'", NULL);
    layers_bad("q4_0", "0=nosuchcodec", "nosuchcodec", "'0=nosuchcodec'");
    layers_bad("q4_0", "0,x=f16", "'0,x=f16'", NULL);
    {   /* longer than a spec may be */
        char big[3000];
        size_t o = 0;
        while (o < 2400) o += (size_t)snprintf(big + o, sizeof big - o, "%s%zu=f16", o ? "@" : "", o % 7);
        layers_bad("q4_0", big, "longer than", NULL);
    }
    vq_err err;
    CHECK(vq_kv_spec_with_layers(NULL, "0=f16", &err) == NULL && err.code == VQ_ERR_ARG);

    /* eviction replaced, added, removed; the rest of the spec kept */
    evict_ok("q4_0;evict=snapkv,budget=32", "h2o", 100, "q4_0;evict=h2o,budget=100");
    evict_ok("f16;evict=knorm,budget=1.0", "h2o", 64, "f16;evict=h2o,budget=64");
    evict_ok("q4_0", "h2o", 64, "q4_0;evict=h2o,budget=64");
    evict_ok("q4_0;evict=tova,budget=0.5,sinks=8,recent=16,every=4", NULL, 0, "q4_0");
    evict_ok("turboquant_mse:k=4,v=4;window=8;evict=keyformer,budget=0.5,tau=0.5;demote=turboquant_mse:k=2,v=2",
             NULL, 0, "turboquant_mse:k=4,v=4;window=8");   /* the demoted tier goes with eviction */
    evict_ok("q4_0;evict=h2o,budget=0.25;demote=q4_0", "tova", 64, "q4_0;evict=tova,budget=64;demote=q4_0");
    evict_ok("q4_0;kmean=0;evict=knorm,budget=16,every=4", "h2o", 16, "q4_0;evict=h2o,budget=16");
    evict_ok("q4_0;evict=h2o,budget=64@0=f16;evict=tova,budget=32", NULL, 0, "q4_0@0=f16");
    evict_ok("q4_0;evict=h2o,budget=64,heads=ada", "h2o", 80, "q4_0;evict=h2o,budget=80");
    {
        vq_kv_spec *s = P("q4_0;evict=h2o,budget=64@0=f16"), *f = P("f16");
        CHECK(vq_kv_spec_evicts(s) && vq_kv_spec_n_overrides(s) == 1);
        CHECK(!vq_kv_spec_evicts(f) && vq_kv_spec_n_overrides(f) == 0);
        CHECK(!strcmp(vq_kv_spec_given(s), "q4_0;evict=h2o,budget=64@0=f16"));
        CHECK(vq_kv_spec_with_eviction(f, "", 4, &err) == NULL && err.code == VQ_ERR_ARG);
        CHECK(vq_kv_spec_with_eviction(f, "h2o", 0, &err) == NULL && err.code == VQ_ERR_ARG);
        CHECK(vq_kv_spec_with_eviction(f, "h2o;window=4", 8, &err) == NULL && err.code == VQ_ERR_ARG);
        CHECK(vq_kv_spec_with_eviction(f, "nosuchpolicy", 8, &err) == NULL && strstr(err.msg, "nosuchpolicy"));
        CHECK(vq_kv_spec_with_eviction(NULL, NULL, 0, &err) == NULL && err.code == VQ_ERR_ARG);
        CHECK(vq_kv_spec_n_overrides(NULL) == 0 && !vq_kv_spec_evicts(NULL) && !strcmp(vq_kv_spec_given(NULL), ""));
        vq_kv_spec_free(s);
        vq_kv_spec_free(f);
    }
    {   /* vq_kv_spec_layers_text: calib-layers' --kv-layers value, composed by the parser's side */
        vq_err err;
        char buf[256];
        const int lay[3] = {1, 4, 7}, neg[2] = {0, -1};
        vq_kv_spec *q = P("k=q8_0;v=q4_0;window=8"), *o = P("q4_0@0=f16");
        const size_t need = vq_kv_spec_layers_text(q, lay, 3, NULL, 0);
        CHECKF(need == strlen("1,4,7=k=q8_0;v=q4_0;window=8"), "layers_text: needs %zu", need);
        CHECK(vq_kv_spec_layers_text(q, lay, 3, buf, sizeof buf) == need && !strcmp(buf, "1,4,7=k=q8_0;v=q4_0;window=8"));
        CHECK(vq_kv_spec_layers_text(q, lay, 3, buf, 6) == need && strlen(buf) < 6);   /* cut, terminated */
        CHECK(vq_kv_spec_layers_text(NULL, lay, 2, buf, sizeof buf) == 8 && !strcmp(buf, "1,4=SPEC"));
        CHECK(vq_kv_spec_layers_text(q, lay, 0, buf, sizeof buf) == 0 && !buf[0]);
        CHECK(vq_kv_spec_layers_text(q, neg, 2, buf, sizeof buf) == 0 && !buf[0]);
        CHECK(vq_kv_spec_layers_text(o, lay, 3, buf, sizeof buf) == 0);   /* a spec with overrides */
        /* the value is one vq_kv_spec_with_layers takes, and builds what the hand-written spec does */
        vq_kv_spec_layers_text(q, lay, 3, buf, sizeof buf);
        vq_kv_spec *b = P("f16"), *w = vq_kv_spec_with_layers(b, buf, &err), *h = P("f16@1,4,7=k=q8_0;v=q4_0;window=8");
        CHECKF(w && vq_kv_spec_equal(w, h), "with_layers(f16, '%s'): %s", buf, w ? vq_kv_spec_text(w) : err.msg);
        vq_kv_spec_free(q);
        vq_kv_spec_free(o);
        vq_kv_spec_free(b);
        vq_kv_spec_free(w);
        vq_kv_spec_free(h);
    }
    return vq_t_done();
}
