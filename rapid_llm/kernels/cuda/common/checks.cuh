// Helpers for TORCH_CHECK messages in sources built through torch's extension loader (they include torch
// headers; a fast-path source has rl::Tensor::describe() in rapid_llm.cuh instead). Such a source, a
// %%cuda_jit cell or benchmarks/jit/kernels/torch/scale.cu, includes it as "common/checks.cuh": the
// torch builder puts rapid_llm/kernels/cuda/ on the include path.
//
// Shapes are formatted with std::to_string rather than by streaming an
// IntArrayRef: on torch 2.11+cu130 with the system g++, streaming an integer
// from inside an extension crashed in libstdc++'s ostream (seen on an H200
// box), while plain strings and devices streamed fine.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

namespace rapid_llm {

inline std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(t.size(i));
  }
  return s + "]";
}

inline std::string describe(const at::Tensor& t) {
  return shape_str(t) + " " + c10::toString(t.scalar_type()) + " on " + t.device().str();
}

}  // namespace rapid_llm
