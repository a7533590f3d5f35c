// ktree's header for the CUDA sources of load_inline extensions (the "mini" build lever of
// engine/evaluate/harness/fastbuild.py): what a KernelBench-style host function in a .cu file uses --
// the Tensor class and its methods, the usual factories, TORCH_CHECK, the AT_DISPATCH macros
// and the torch:: names of the dtypes -- without <torch/types.h>, which brings every ATen
// operator and the autograd factories through nvcc's front ends twice. A source that needs
// more fails to build and is built again with <torch/types.h> (the "slim" lever), then with
// the full headers, so no valid source is lost.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

namespace torch {
using namespace at;  // torch::Tensor, torch::empty_like, torch::TensorOptions, ...
using Dtype = at::ScalarType;
constexpr auto kUInt8 = at::kByte;
constexpr auto kInt8 = at::kChar;
constexpr auto kInt16 = at::kShort;
constexpr auto kInt32 = at::kInt;
constexpr auto kInt64 = at::kLong;
constexpr auto kFloat16 = at::kHalf;
constexpr auto kFloat32 = at::kFloat;
constexpr auto kFloat64 = at::kDouble;
}  // namespace torch
