/* kernels.h: the numeric kernels of the forward pass.
 * Weight types are rows of one table (block size, bytes per block, to_float, dot product);
 * products are computed directly on the quantized blocks, never on a dequantized copy.
 * Each hot kernel has a scalar reference and AVX2 / AVX-512 variants; the best one the CPU
 * supports is chosen once at start-up, and the _isa entry points let tests pin a variant. */
#ifndef VQ_KERNELS_H
#define VQ_KERNELS_H
#include "core/core.h"
#include "kernels/wtype_ids.h"   /* vq_ggml_type numbering */

typedef struct vq_wtype {
    uint32_t type;            /* vq_ggml_type */
    const char *name;         /* "q4_1" ... */
    int block;                /* elements per block */
    size_t block_bytes;       /* bytes per block */
    void (*to_float)(const void *src, float *dst, int64_t n);   /* n multiple of block */
    /* quantize n floats (n multiple of block) into n/block blocks; NULL where the type has no
     * quantizer of ours. Non-finite inputs are coded as 0; scales saturate at fp16's largest
     * finite value, so finite input never decodes to NaN or inf. */
    void (*from_float)(const float *src, void *dst, int64_t n);
} vq_wtype;

const vq_wtype *vq_wtype_get(uint32_t type);        /* NULL when unsupported */
size_t vq_wtype_row_bytes(uint32_t type, int64_t n); /* 0 when n is not a multiple of block */

/* q4_0x16 (VQ_TYPE_Q4_0X16, repack.c): a Q4_0 matrix of rows % VQ_Q4X16_ROWS == 0 with its rows
 * interleaved 16 at a time, same size; the products are Q4_0's bit for bit. Made at load by
 * a --weights spec (quantize.c), only where vq_matmul_supported says its kernel runs here.
 * Returns 0, or -1 for a shape it cannot hold. */
#define VQ_Q4X16_ROWS 16
static inline int vq_wtype_interleaved(uint32_t t) {
    return t == VQ_TYPE_Q4_0X16 || t == VQ_TYPE_Q4_KX16 || t == VQ_TYPE_Q6_KX16;
}
int vq_q4_0x16_repack(const void *src, void *dst, int rows, int cols);
/* q4_Kx16 (VQ_TYPE_Q4_KX16): Q4_K alike, 148 bytes a row per 256 columns (Q4_K: 144) */
int vq_q4_kx16_repack(const void *src, void *dst, int rows, int cols);
/* q6_Kx16 (VQ_TYPE_Q6_KX16): Q6_K alike, 210 bytes a row per 256 columns (as Q6_K) */
int vq_q6_kx16_repack(const void *src, void *dst, int rows, int cols);

/* Y[t*rows + r] = sum_c W[r, c] * X[t*cols + c], for t < n, r < rows.
 * W: rows x cols in weight type `type`, row-major, rows contiguous (ggml layout ne0 = cols).
 * Parallel over rows with OpenMP (omp_set_num_threads controls it). */
void vq_matmul(float *Y, const void *W, uint32_t type, const float *X, int n, int rows, int cols);
void vq_matmul_isa(vq_isa isa, float *Y, const void *W, uint32_t type, const float *X,
                   int n, int rows, int cols);
vq_isa vq_kernels_isa(void);   /* the variant chosen at start-up; env VQ_ISA=scalar|avx2|avx512
                                  * may lower it (never above what the CPU has) */

/* Several products of the same X (q/k/v, or gate/up): Yj = X·Wjᵀ for every job, X quantized
 * once and all jobs' rows shared out among the threads in one parallel region. Each job
 * computes exactly what vq_matmul would (same bits). Y layout as vq_matmul: Y[t*rows + r]. */
typedef struct vq_matmul_job {
    float *Y;
    const void *W;
    uint32_t type;            /* vq_ggml_type; jobs may mix types */
    int rows;
} vq_matmul_job;
void vq_matmul_many(const vq_matmul_job *jobs, int njobs, const float *X, int n, int cols);
void vq_matmul_many_isa(vq_isa isa, const vq_matmul_job *jobs, int njobs, const float *X,
                        int n, int cols);
/* 1 when vq_matmul handles (type, cols): a type with a row kernel and cols a multiple of its
 * block. vq_matmul fills Y with NaN for anything else rather than reading out of bounds. */
int vq_matmul_supported(uint32_t type, int cols);

/* one row of a weight matrix as floats (embedding lookup) */
void vq_get_row(const void *W, uint32_t type, int cols, int row, float *out);

void  vq_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
void  vq_softmax(float *x, int n);                  /* in place, max-subtracted */
void  vq_swiglu(float *gate, const float *up, int n); /* gate = silu(gate) * up */
/* gate = gelu(gate) * up, gelu in its tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * (Gemma's GeGLU; HF gelu_pytorch_tanh) */
void  vq_geglu(float *gate, const float *up, int n);
float vq_dot_f32(const float *a, const float *b, int n);
void  vq_axpy_f32(float *y, float a, const float *x, int n);   /* y += a*x */

/* Rotary embedding in place on n_heads heads of head_dim, rotating the first rot_dim dims, at
 * absolute position pos: pair i (neox = 0: (x[2i], x[2i+1]), llama2.c and GGUF llama; neox = 1:
 * (x[i], x[i + rot_dim/2])) turns by pos * inv_freq[i]; cos and sin are multiplied by mscale
 * (YaRN's magnitude scale; 1 leaves them as they are). inv_freq holds rot_dim/2 values. */
void vq_rope(float *x, int n_heads, int head_dim, int rot_dim, int pos, const float *inv_freq, float mscale,
             int neox);
/* llama2.c's frequencies, bit for bit: inv_freq[i] = 1 / base^(2i/rot_dim) in float. */
void vq_rope_freqs(float *inv_freq, int rot_dim, float base);

/* fast Walsh-Hadamard transform, in place, n a power of two, unnormalized */
void vq_fwht(float *x, int n);
#endif
