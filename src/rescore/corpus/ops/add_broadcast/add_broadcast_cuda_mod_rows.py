"""CUDA C bias add via load_inline: flat index over the (rows, cols) output, bias column = index % cols."""
import hashlib

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

template <typename scalar_t>
__global__ void add_bias_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ bias,
                                scalar_t* __restrict__ y, int64_t rows, int64_t cols) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        y[i] = static_cast<scalar_t>(static_cast<float>(x[i]) + static_cast<float>(bias[i % rows]));
    }
}

torch::Tensor add_bias_forward(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "add_bias_forward: CUDA tensors expected");
    TORCH_CHECK(x.dim() == 2 && bias.dim() == 1 && bias.size(0) == x.size(1), "add_bias_forward: shapes");
    x = x.contiguous();
    bias = bias.to(x.scalar_type()).contiguous();
    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0), cols = x.size(1);
    if (rows * cols == 0) return y;
    const int threads = 256;
    const int64_t blocks = (rows * cols + threads - 1) / threads;
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "add_bias_forward", [&] {
        add_bias_kernel<scalar_t><<<static_cast<unsigned int>(blocks), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), rows, cols);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

CPP_SRC = "torch::Tensor add_bias_forward(torch::Tensor x, torch::Tensor bias);"

_ext = load_inline(
    name="add_broadcast_cuda_" + hashlib.sha256((CPP_SRC + CUDA_SRC).encode()).hexdigest()[:16],
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["add_bias_forward"],
    extra_cuda_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        return _ext.add_bias_forward(x, bias)
