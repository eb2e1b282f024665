"""CUDA C layer norm via load_inline: one block per row, two-pass mean and biased variance in float32."""
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
__global__ void layernorm_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ weight,
                                 const scalar_t* __restrict__ bias, scalar_t* __restrict__ y,
                                 int64_t cols, float eps) {
    extern __shared__ float sh[];
    const int tid = threadIdx.x;
    const scalar_t* row = x + blockIdx.x * cols;
    scalar_t* out = y + blockIdx.x * cols;

    float s = 0.0f;
    for (int64_t j = tid; j < cols; j += blockDim.x) s += static_cast<float>(row[j]);
    const float mean = block_sum(s, sh) / cols;

    float sq = 0.0f;
    for (int64_t j = tid; j < cols; j += blockDim.x) {
        const float d = static_cast<float>(row[j]) - mean;
        sq += d * d;
    }
    const float rstd = rsqrtf(block_sum(sq, sh) / cols + eps);

    for (int64_t j = tid; j < cols; j += blockDim.x) {
        const float v = (static_cast<float>(row[j]) - mean) * rstd;
        out[j] = static_cast<scalar_t>(v * static_cast<float>(weight[j]) + static_cast<float>(bias[j]));
    }
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda(), "layernorm_forward: x must be a CUDA tensor");
    x = x.contiguous();
    weight = weight.to(x.scalar_type()).contiguous();
    bias = bias.to(x.scalar_type()).contiguous();
    auto y = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    if (x.numel() == 0) return y;
    const int64_t rows = x.numel() / cols;
    const int threads = 256;
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "layernorm_forward", [&] {
        layernorm_kernel<scalar_t><<<static_cast<unsigned int>(rows), threads, threads * sizeof(float),
                           c10::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
            cols, 1e-5f);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

CPP_SRC = (
    "torch::Tensor layernorm_forward(torch::Tensor x, "
    "torch::Tensor weight, torch::Tensor bias);"
)

_ext = load_inline(
    name="layernorm_cuda_" + hashlib.sha256((CPP_SRC + CUDA_SRC).encode()).hexdigest()[:16],
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["layernorm_forward"],
    extra_cuda_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        return _ext.layernorm_forward(x, self.weight, self.bias)
