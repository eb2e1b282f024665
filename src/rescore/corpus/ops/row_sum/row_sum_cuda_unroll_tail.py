"""CUDA C row sum via load_inline: one block per row, 4-wide unrolled strided loads plus a scalar tail."""
import hashlib

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

// Tree sum over the block through shared memory; every thread gets the total.
__device__ float block_sum(float v, float* sh) {
    const int tid = threadIdx.x;
    sh[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sh[tid] += sh[tid + s];
        __syncthreads();
    }
    const float total = sh[0];
    __syncthreads();
    return total;
}

template <typename scalar_t>
__global__ void row_sum_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t cols) {
    extern __shared__ float sh[];
    const int tid = threadIdx.x;
    const scalar_t* row = x + blockIdx.x * cols;

    const int64_t vec_end = cols;
    float acc = 0.0f;
    for (int64_t j = 4 * (int64_t)tid; j < vec_end; j += 4 * (int64_t)blockDim.x) {
        acc += static_cast<float>(row[j]) + static_cast<float>(row[j + 1])
             + static_cast<float>(row[j + 2]) + static_cast<float>(row[j + 3]);
    }
    for (int64_t j = vec_end + tid; j < cols; j += blockDim.x) acc += static_cast<float>(row[j]);

    const float total = block_sum(acc, sh);
    if (tid == 0) y[blockIdx.x] = static_cast<scalar_t>(total);
}

torch::Tensor row_sum_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "row_sum_forward: x must be a CUDA tensor");
    x = x.contiguous();
    const int64_t cols = x.size(-1);
    auto sizes = x.sizes().vec();
    sizes.pop_back();
    auto y = torch::empty(sizes, x.options());
    if (x.numel() == 0) return y;
    const int64_t rows = x.numel() / cols;
    const int threads = 256;
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "row_sum_forward", [&] {
        row_sum_kernel<scalar_t><<<static_cast<unsigned int>(rows), threads, threads * sizeof(float),
                           c10::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), cols);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

CPP_SRC = "torch::Tensor row_sum_forward(torch::Tensor x);"

_ext = load_inline(
    name="row_sum_cuda_" + hashlib.sha256((CPP_SRC + CUDA_SRC).encode()).hexdigest()[:16],
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["row_sum_forward"],
    extra_cuda_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.row_sum_forward(x)
