"""CUDA C RMS norm via load_inline: one block per row, mean of squares reduced in float32."""
import hashlib

import torch
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
__global__ void rmsnorm_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ weight,
                               scalar_t* __restrict__ y, int64_t cols) {
    extern __shared__ float sh[];
    const int tid = threadIdx.x;
    const scalar_t* row = x + blockIdx.x * cols;
    scalar_t* out = y + blockIdx.x * cols;

    float sq = 0.0f;
    for (int64_t j = tid; j < cols; j += blockDim.x) {
        const float v = static_cast<float>(row[j]);
        sq += v * v;
    }
    const float inv_rms = 1.0f / (sqrtf(block_sum(sq, sh) / cols) + 1e-5f);

    for (int64_t j = tid; j < cols; j += blockDim.x) {
        out[j] = static_cast<scalar_t>(static_cast<float>(row[j]) * inv_rms * static_cast<float>(weight[j]));
    }
}

torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight) {
    TORCH_CHECK(x.is_cuda(), "rmsnorm_forward: x must be a CUDA tensor");
    x = x.contiguous();
    weight = weight.to(x.scalar_type()).contiguous();
    auto y = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    if (x.numel() == 0) return y;
    const int64_t rows = x.numel() / cols;
    const int threads = 256;
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "rmsnorm_forward", [&] {
        rmsnorm_kernel<scalar_t><<<static_cast<unsigned int>(rows), threads, threads * sizeof(float),
                           c10::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), cols);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

CPP_SRC = "torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight);"

_ext = load_inline(
    name="rmsnorm_cuda_" + hashlib.sha256((CPP_SRC + CUDA_SRC).encode()).hexdigest()[:16],
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["rmsnorm_forward"],
    extra_cuda_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        return _ext.rmsnorm_forward(x, self.weight)
