/* attn_q4.cu: the split kernel instantiated for VQ_CUDA_KV_Q4_0 (one .cu per code type, so they compile in parallel) */
#include "backend/cuda/attn_tc.cuh"
namespace vqc {
cudaError_t launch_split_q4(int D, int G, const Params &p, dim3 grid, cudaStream_t st) {
    return launch_type<VQ_CUDA_KV_Q4_0>(D, G, p, grid, st);
}
cudaError_t launch_tc_q4(int D, int G, const Params &p, dim3 grid, cudaStream_t st) {
    return launch_tc_type<VQ_CUDA_KV_Q4_0>(D, G, p, grid, st);
}
}  // namespace vqc
