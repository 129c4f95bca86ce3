/* test_tqw_quality.c: the tqw weight types on real weights, against q8_0 / q4_1 / q4_0 quantized
 * from the same floats. The floats are the models' own tensors decoded with to_float (SmolLM2: Q4_1
 * and Q8_0; Gemma 3: Q5_0, Q4_K, Q6_K, Q8_0). Printed per matrix: bits per weight (every byte of a
 * row), relative RMS reconstruction error, and relative RMS error of the matvec output (through
 * vq_matmul, int8 activations included) on activation-like random vectors against a float64
 * product with the float weights. Checked: tqw4 beats q4_0 and each tqw width beats the narrower
 * one, on every matrix. Not timed. Skips when neither model file is present.
 * docs/weights-tqw.md holds the figures this printed. */
#include "formats/gguf.h"
#include "kernels/kernels_impl.h"
#include "../vq_test.h"

static const uint32_t TYPES[] = {VQ_TYPE_Q8_0, VQ_TYPE_Q4_1, VQ_TYPE_Q4_0, VQ_TYPE_TQW4, VQ_TYPE_TQW3, VQ_TYPE_TQW2};
enum { NTYPES = 6, NX = 4 };

typedef struct { double rec_e, rec_s, mv_e, mv_s; } acc4;

/* activation-like: Gaussian, with a few channels ten times larger (the outlier channels that
 * residual-stream activations show) */
static void activations(vq_rng *rng, float *X, int cols) {
    int out[6];
    for (int k = 0; k < 6; k++) out[k] = (int)(vq_rng_u64(rng) % (uint64_t)cols);
    for (int t = 0; t < NX; t++)
        for (int c = 0; c < cols; c++) X[(size_t)t * cols + c] = (float)vq_rng_gauss(rng);
    for (int t = 0; t < NX; t++)
        for (int k = 0; k < 6; k++) X[(size_t)t * cols + out[k]] *= 10.0f;
}

static void one_matrix(vq_gguf *g, const char *model, const char *name, int row_step, vq_rng *rng,
                       acc4 *tot) {
    const vq_gguf_tensor *t = vq_gguf_find_tensor(g, name);
    CHECKF(t != NULL, "%s: no tensor %s", model, name);
    if (!t) return;
    const vq_wtype *src = vq_wtype_get(t->type);
    CHECKF(src != NULL, "%s: type %u unknown", name, t->type);
    if (!src) return;
    int cols = (int)t->ne[0], rows_all = (int)t->ne[1], rows = (rows_all + row_step - 1) / row_step;
    size_t srb = vq_wtype_row_bytes(t->type, cols);
    float *W = malloc(sizeof(float) * rows * cols), *R = malloc(sizeof(float) * rows * cols);
    for (int r = 0; r < rows; r++)
        src->to_float((const uint8_t *)t->data + (size_t)r * row_step * srb, W + (size_t)r * cols, cols);
    float *X = malloc(sizeof(float) * NX * cols), *Y = malloc(sizeof(float) * NX * rows);
    double *Yref = malloc(sizeof(double) * NX * rows);
    activations(rng, X, cols);
    for (int t2 = 0; t2 < NX; t2++)
        for (int r = 0; r < rows; r++) {
            double s = 0;
            for (int c = 0; c < cols; c++) s += (double)W[(size_t)r * cols + c] * X[(size_t)t2 * cols + c];
            Yref[(size_t)t2 * rows + r] = s;
        }
    double rec[NTYPES], mv[NTYPES];
    printf("%-8s %-26s %5dx%-5d %-5s", model, name, rows, cols, src->name);
    for (int k = 0; k < NTYPES; k++) {
        const vq_wtype *wt = vq_wtype_get(TYPES[k]);
        size_t rb = vq_wtype_row_bytes(TYPES[k], cols);
        uint8_t *Q = malloc(rb * rows);
        wt->from_float(W, Q, (int64_t)rows * cols);   /* rows are contiguous: one call */
        wt->to_float(Q, R, (int64_t)rows * cols);
        double e = 0, s = 0;
        for (size_t i = 0; i < (size_t)rows * cols; i++) {
            e += ((double)R[i] - W[i]) * ((double)R[i] - W[i]);
            s += (double)W[i] * W[i];
        }
        vq_matmul(Y, Q, TYPES[k], X, NX, rows, cols);
        double me = 0, ms = 0;
        for (size_t i = 0; i < (size_t)NX * rows; i++) {
            me += (Y[i] - Yref[i]) * (Y[i] - Yref[i]);
            ms += Yref[i] * Yref[i];
        }
        rec[k] = sqrt(e / s); mv[k] = sqrt(me / ms);
        tot[k].rec_e += e; tot[k].rec_s += s; tot[k].mv_e += me; tot[k].mv_s += ms;
        printf(" %7.4f %7.4f", rec[k], mv[k]);
        free(Q);
    }
    printf("\n");
    CHECKF(rec[3] < rec[2], "%s %s: tqw4 reconstruction %.4f not below q4_0's %.4f", model, name, rec[3], rec[2]);
    CHECKF(rec[3] < rec[4] && rec[4] < rec[5], "%s %s: tqw errors not ordered by width", model, name);
    CHECKF(mv[3] < mv[2], "%s %s: tqw4 matvec error %.4f not below q4_0's %.4f", model, name, mv[3], mv[2]);
    free(W); free(R); free(X); free(Y); free(Yref);
}

static int run_model(const char *path, const char *model, vq_rng *rng) {
    if (access(path, R_OK) != 0) { printf("%s: %s absent, skipped\n", model, path); return 0; }
    vq_err err;
    vq_gguf *g = vq_gguf_open(path, &err);
    CHECKF(g != NULL, "%s: %s", path, err.msg);
    if (!g) return 0;
    static const char *mats[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    static const int layers[] = {0, 15};
    acc4 tot[NTYPES] = {{0}};
    for (size_t l = 0; l < VQ_ARRAY_LEN(layers); l++)
        for (size_t m = 0; m < VQ_ARRAY_LEN(mats); m++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", layers[l], mats[m]);
            one_matrix(g, model, name, 1, rng, tot);
        }
    one_matrix(g, model, "token_embd.weight", 16, rng, tot);   /* every 16th row */
    printf("%-8s %-26s %11s %-5s", model, "all of the above", "", "");
    for (int k = 0; k < NTYPES; k++)
        printf(" %7.4f %7.4f", sqrt(tot[k].rec_e / tot[k].rec_s), sqrt(tot[k].mv_e / tot[k].mv_s));
    printf("\n");
    vq_gguf_close(g);
    return 1;
}

int main(void) {
    uint64_t seed = vq_t_seed(20261203);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    printf("bits per weight (bytes of a 576-wide row x 8 / 576):");
    for (int k = 0; k < NTYPES; k++)
        printf(" %s %.3f", vq_wtype_get(TYPES[k])->name, vq_wtype_row_bytes(TYPES[k], 576) * 8.0 / 576);
    printf("\ncolumns per type: relative RMS error of the weights, then of the matvec output (%d vectors)\n", NX);
    printf("%-8s %-26s %11s %-5s", "model", "tensor", "rows x cols", "from");
    for (int k = 0; k < NTYPES; k++) printf(" %7s %7s", vq_wtype_get(TYPES[k])->name, "mv");
    printf("\n");
    int ran = run_model(VQ_MODELS_DIR "/SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2", &rng);
    ran += run_model(VQ_MODELS_DIR "/gemma-3-270m-q4_k_m.gguf", "gemma3", &rng);
    if (!ran) VQ_SKIP("no model file in %s (scripts/fetch_model.sh, scripts/fetch_gemma.sh)", VQ_MODELS_DIR);
    return vq_t_done();
}
