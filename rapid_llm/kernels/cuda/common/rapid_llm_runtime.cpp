// The host-side runtime of fast-path modules: everything in rapid_llm.cuh that
// is not a template. Compiled once per machine and linked into every module,
// so a cell's host pass compiles only the cell.
#include <cxxabi.h>

#include <cstdlib>
#include <stdexcept>

#include "rapid_llm.cuh"

// rl_kernel_count, rl_kernel_symbols, rl_kernel_names, rl_kernel_handles and rl_runtime_slot are declared in
// rapid_llm_abi.h and defined by each module's kernel table; the binding fills the handles at load.

namespace rl {
namespace {

// A failed RL_CHECK: ValueError in Python with this message.
struct CheckError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A CUDA call that failed: RuntimeError, its message starting with "CUDA error".
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

thread_local const rl_call* current_call = nullptr;

std::string demangle(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && out ? out : name;
  std::free(out);
  return s;
}

int call_device(const char* what) {
  const int device = current_call ? current_call->device : -1;
  if (device < 0 || device >= 64) detail::check_failed(std::string(what) + ": the call has no CUDA tensor");
  return device;
}

int fail(int code, const char* what, char* err, size_t len) {
  if (len) {
    size_t n = 0;
    for (; what[n] && n + 1 < len; ++n) err[n] = what[n];
    err[n] = '\0';
  }
  return code;
}

const rl_export* export_head = nullptr;

}  // namespace

namespace detail {
void append(std::string& s, const char* v) { s += v ? v : "(null)"; }
void append(std::string& s, const std::string& v) { s += v; }
void append(std::string& s, char v) { s += v; }
void append(std::string& s, bool v) { s += v ? "true" : "false"; }
void append(std::string& s, long long v) { s += std::to_string(v); }
void append(std::string& s, unsigned long long v) { s += std::to_string(v); }
void append(std::string& s, double v) {
  std::string t = std::to_string(v);
  while (t.size() > 1 && t.back() == '0' && t[t.size() - 2] != '.') t.pop_back();
  s += t;
}
void check_failed(const std::string& message) { throw CheckError(message); }

void unsupported_dtype(const char* op, int32_t dtype, std::initializer_list<int32_t> supported) {
  std::string ok;
  for (int32_t d : supported) ok += (ok.empty() ? "" : ", ") + std::string(dtype_name(d));
  check_failed(std::string(op) + ": dtype " + dtype_name(dtype) + " is not supported (supported: " + ok + ")");
}

void launch_raw(const void* host_symbol, dim3 grid, dim3 block, unsigned smem, void** args, unsigned flags) {
  int i = 0;
  while (i < rl_kernel_count && rl_kernel_symbols[i] != host_symbol) ++i;
  if (i == rl_kernel_count)
    throw std::logic_error("rl::launch: not a kernel of this module (declare it with __global__ in the host code)");
  if (!(grid.x && grid.y && grid.z && block.x && block.y && block.z))
    throw std::logic_error("launching " + demangle(rl_kernel_names[i]) +  // the launcher's bug, not the input's
                           ": empty grid or block (return before launching on empty inputs)");
  if (rl_runtime_slot == nullptr || rl_kernel_handles[i] == nullptr)
    throw CudaError("CUDA error: the kernels of this module are not loaded (no CUDA driver in this process)");
  const unsigned g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
  const int result = rl_runtime_slot->launch(rl_kernel_handles[i], g, b, smem,
                                             current_call ? current_call->stream : nullptr, args,
                                             current_call ? current_call->device : -1, flags);
  if (result != 0)  // names are demangled only on the error path: the launch path stays allocation-free
    throw CudaError("CUDA error launching " + demangle(rl_kernel_names[i]) + ": " +
                    rl_runtime_slot->error_string(result));
}

int guarded_call(void (*body)(const rl_arg*, void*, rl_call*), const rl_arg* args, void* fn, rl_call* call,
                 char* err, size_t err_len) {
  const rl_call* saved = current_call;
  current_call = call;
  int status = RL_OK;
  try {
    body(args, fn, call);
  } catch (const CheckError& e) {
    status = fail(RL_CHECK_FAILED, e.what(), err, err_len);
  } catch (const CudaError& e) {
    status = fail(RL_CUDA_FAILED, e.what(), err, err_len);
  } catch (const std::exception& e) {
    status = fail(RL_INTERNAL, e.what(), err, err_len);
  } catch (...) {
    status = fail(RL_INTERNAL, "unknown C++ exception", err, err_len);
  }
  current_call = saved;
  return status;
}

Registrar::Registrar(const char* name, const char* sig, char result, const char* doc, rl_fn fn)
    : entry{name, sig, result, doc, fn, export_head} {
  export_head = &entry;
}
}  // namespace detail

const char* dtype_name(int32_t dtype) {
  switch (dtype) {
#define RL_DTYPE_CASE_(e, code, name) \
  case e:                             \
    return name;
    RL_DTYPES(RL_DTYPE_CASE_)
#undef RL_DTYPE_CASE_
    default: return "an unsupported dtype";
  }
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int32_t i = 0; i < t_->ndim; ++i) n *= t_->shape[i];
  return n;
}

int64_t Tensor::element_size() const {
  switch (t_->dtype) {
    case RL_FP64: case RL_INT64: return 8;
    case RL_FP32: case RL_INT32: return 4;
    case RL_FP16: case RL_BF16: case RL_INT16: return 2;
    case RL_INT8: case RL_UINT8: case RL_BOOL: case RL_FP8_E4M3: case RL_FP8_E5M2: return 1;
    default: return 0;
  }
}

bool Tensor::is_contiguous() const {  // torch's rule: size-1 dims and empty tensors are contiguous whatever the strides
  for (int32_t i = 0; i < t_->ndim; ++i)
    if (t_->shape[i] == 0) return true;
  int64_t expected = 1;
  for (int32_t i = t_->ndim - 1; i >= 0; --i) {
    if (t_->shape[i] != 1 && t_->strides[i] != expected) return false;
    expected *= t_->shape[i];
  }
  return true;
}

bool Tensor::same_shape(const Tensor& o) const {
  if (t_->ndim != o.t_->ndim) return false;
  for (int32_t i = 0; i < t_->ndim; ++i)
    if (t_->shape[i] != o.t_->shape[i]) return false;
  return true;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int32_t i = 0; i < t_->ndim; ++i) s += (i ? ", " : "") + std::to_string(t_->shape[i]);
  return s + "]";
}

std::string Tensor::device_str() const {
  if (t_->device_type == RL_CUDA) return "cuda:" + std::to_string(t_->device_id);
  return t_->device_type == RL_CPU ? "cpu" : "another device";
}

std::string Tensor::describe() const { return shape_str() + " " + dtype_name(t_->dtype) + " on " + device_str(); }

void Tensor::check_dtype(int32_t wanted) const {
  if (wanted != t_->dtype)
    detail::check_failed(std::string("data<") + dtype_name(wanted) + ">() of a " + dtype_name(t_->dtype) +
                         " tensor " + describe());
}

void check_cuda(const char* op, std::initializer_list<Tensor> tensors) {
  int32_t device = -1;
  for (const Tensor& t : tensors) {
    RL_CHECK(t.is_cuda(), op, ": CUDA tensors only, got ", t.describe());
    RL_CHECK(device < 0 || t.device_index() == device, op, ": tensors on different devices (cuda:", device,
             " and ", t.device_str(), ")");
    device = t.device_index();
  }
}

void check_contiguous(const char* op, std::initializer_list<Tensor> tensors) {
  for (const Tensor& t : tensors)
    RL_CHECK(t.is_contiguous(), op, ": contiguous tensors only, got a strided view ", t.describe());
}

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  RL_CHECK(a.same_shape(b) && a.dtype() == b.dtype(), op, ": shapes/dtypes differ: ", a.describe(), " vs ",
           b.describe());
}

int64_t row_stride(const char* op, const char* name, const Tensor& t) {
  const int64_t last = t.dim() - 1;
  const int64_t width = t.size(last);
  if (t.is_contiguous()) return width;
  bool uniform = width == 1 || t.stride(last) == 1;
  int64_t row = -1, expected = 0;
  for (int64_t d = last - 1; uniform && d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (row < 0) row = t.stride(d);
    else uniform = t.stride(d) == expected;
    expected = t.stride(d) * t.size(d);
  }
  std::string strides;
  for (int64_t d = 0; d <= last; ++d) strides += (d ? ", " : "") + std::to_string(t.stride(d));
  RL_CHECK(uniform && row >= width, op, ": ", name, " must have a contiguous last dim and one row stride, got ",
           t.describe(), " with strides [", strides, "]");
  return row;
}

cudaStream_t current_stream() {
  return current_call ? static_cast<cudaStream_t>(current_call->stream) : nullptr;
}

int device_attribute(int attribute) {
  const int device = call_device("rl::device_attribute");
  if (rl_runtime_slot == nullptr) throw CudaError("CUDA error: no CUDA driver in this process");
  int value = 0;
  const int result = rl_runtime_slot->device_attribute(attribute, device, &value);
  if (result != 0)
    throw CudaError("CUDA error reading device attribute " + std::to_string(attribute) + ": " +
                    rl_runtime_slot->error_string(result));
  return value;
}

int sm_count() {
  static thread_local int cached[64] = {};
  const int device = call_device("rl::sm_count");
  if (cached[device] == 0) cached[device] = device_attribute(16);  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  return cached[device];
}

int resident_threads() {
  static thread_local int cached[64] = {};
  const int device = call_device("rl::resident_threads");
  // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: 2048 on sm_80 and sm_90, 1536 on sm_86 and sm_89
  if (cached[device] == 0) cached[device] = sm_count() * device_attribute(39);
  return cached[device];
}

}  // namespace rl

// rapid_llm_exports(), under the name rapid_llm_abi.h gives the binding.
extern "C" RL_ABI_VISIBLE const rl_export* RL_EXPORTS_FN(void) { return rl::export_head; }
