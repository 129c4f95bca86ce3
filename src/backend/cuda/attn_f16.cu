/* attn_f16.cu: the split kernel instantiated for VQ_CUDA_KV_F16 (one .cu per code type, so they compile in parallel) */
#include "backend/cuda/attn_kernel.cuh"
namespace vqc {
cudaError_t launch_split_f16(int D, int G, const Params &p, dim3 grid, cudaStream_t st) {
    return launch_type<VQ_CUDA_KV_F16>(D, G, p, grid, st);
}
}  // namespace vqc
