/* gemm.c: which prefill GEMM kernel (gemm.h) serves a weight type on an ISA. */
#include "kernels/gemm.h"

static int cpu_has_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
}

vq_rows_fn vq_gemm_pick(uint32_t type, vq_isa isa) {
    if (isa == VQ_ISA_AVX512 && cpu_has_vnni()) {
        if (type == VQ_TYPE_Q4_0) return vq_gemm_q4_0_avx512vnni;
        if (type == VQ_TYPE_Q8_0) return vq_gemm_q8_0_avx512vnni;
        if (type == VQ_TYPE_Q4_K) return vq_gemm_q4_k_avx512vnni;
        if (type == VQ_TYPE_Q6_K) return vq_gemm_q6_k_avx512vnni;
    }
    if (isa >= VQ_ISA_AVX2) {   /* AVX2, or AVX-512 without VNNI */
        if (type == VQ_TYPE_Q4_0) return vq_gemm_q4_0_avx2;
        if (type == VQ_TYPE_Q4_K) return vq_gemm_q4_k_avx2;
        if (type == VQ_TYPE_Q6_K) return vq_gemm_q6_k_avx2;
    }
    return NULL;
}
