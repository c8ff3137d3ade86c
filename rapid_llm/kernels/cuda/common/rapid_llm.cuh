// rapid_llm's light header for fast-path CUDA sources: no torch headers.
//
// A fast-path source is compiled twice, in parallel with nothing in common:
// the device pass (NVRTC, else nvcc -cubin) sees what is under `#if RL_DEVICE`,
// the host pass (the host C++ compiler) sees what is under `#if RL_HOST`. The
// host pass declares the kernels it launches; the builder instantiates exactly
// those in the device pass and checks that both sides agree on each signature.
//
//   #include "common/rapid_llm.cuh"
//   #if RL_DEVICE
//   template <typename T> __global__ void scale_kernel(T* out, const T* in, float f, int64_t n) {...}
//   #endif
//   #if RL_HOST
//   template <typename T> __global__ void scale_kernel(T* out, const T* in, float f, int64_t n);
//   void scale(rl::Tensor out, rl::Tensor input, double factor) {
//     rl::check_same("scale", out, input); rl::check_cuda(...); ...   // 1. validate (the device last)
//     const int64_t n = input.numel(); if (n == 0) return;             // 2. extract
//     rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale", [&](auto tag) {
//       using T = typename decltype(tag)::type;                          // 3. launch
//       rl::launch(scale_kernel<T>, rl::cdiv(n, 256), 256, 0, out.data<T>(), input.data<T>(), float(factor), n);
//     });
//   }
//   RL_EXPORT(scale, "out = input * factor")
//   #endif
//
// What the fast path does for every launcher, so a source cannot forget it:
// the call runs with the device of its first CUDA tensor current, rl::launch
// uses torch's current stream on it (CUDA graph capture works), and every
// launch is checked. A failed RL_CHECK raises ValueError in Python with the
// message (as the op's native and Triton rows raise for the same bad input);
// nothing crashes and no CUDA error state is left behind.
#ifndef RAPID_LLM_CUH_
#define RAPID_LLM_CUH_

#if defined(__CUDACC__)
#define RL_DEVICE 1
#define RL_HOST 0
#else
#define RL_DEVICE 0
#define RL_HOST 1
#endif

#if RL_DEVICE
// ---------------------------------------------------------------- device pass
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#if defined(__CUDACC_RTC__)
// NVRTC has no <cstdint>; these are glibc's LP64 types, so kernel signatures
// mangle the same in the device pass as in the host pass (int64_t is long).
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
#else
#include <cstdint>
#endif

namespace rl {
// Programmatic dependent launch (sm_90 and newer). A kernel that rl::launch_dependent starts may begin
// while the kernel before it on the stream is still finishing, so its launch and prologue overlap that
// kernel's tail. It must call wait_for_prior_grids() before it reads or writes global memory: that
// returns once the kernel before has completed and its writes are visible. allow_dependent_grids(), once
// its own loads are issued, lets the next dependent launch begin in turn. Both do nothing below sm_90 and
// in a kernel launched the plain way.
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
}  // namespace rl

#else
// ------------------------------------------------------------------ host pass
// Only declarations and small templates live here: what is not a template is
// compiled once per machine (rapid_llm_runtime.cpp) and linked into every
// module, so a host pass parses little and generates little.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "rapid_llm_abi.h"

// Declarations of kernels are references the builder resolves to device code.
#define __global__ __attribute__((weak))
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)

// The CUDA types a host declaration can name; pointers to them need no definition.
struct __half;
struct __nv_bfloat16;
typedef struct CUstream_st* cudaStream_t;
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

namespace rl {

using fp32 = float;
using fp16 = __half;
using bf16 = __nv_bfloat16;
using fp64 = double;

namespace detail {
void append(std::string& s, const char* v);
void append(std::string& s, const std::string& v);
void append(std::string& s, char v);
void append(std::string& s, bool v);
void append(std::string& s, long long v);
void append(std::string& s, unsigned long long v);
void append(std::string& s, double v);
template <typename T, typename = std::enable_if_t<std::is_integral<T>::value>>
void append(std::string& s, T v) {
  if constexpr (std::is_signed<T>::value) append(s, static_cast<long long>(v));
  else append(s, static_cast<unsigned long long>(v));
}
inline void append(std::string& s, float v) { append(s, static_cast<double>(v)); }
[[noreturn]] void check_failed(const std::string& message);
template <typename... A>
[[noreturn]] void check_failed_with(const A&... parts) {
  std::string s;
  (append(s, parts), ...);
  check_failed(s);
}
}  // namespace detail

// RL_CHECK(cond, "op: message ", value, ...): raise ValueError(message) in Python when cond is false.
#define RL_CHECK(cond, ...)                                              \
  do {                                                                   \
    if (__builtin_expect(!(cond), 0)) ::rl::detail::check_failed_with(__VA_ARGS__); \
  } while (0)

const char* dtype_name(int32_t dtype);

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr int32_t value = RL_FP32; };
template <> struct dtype_of<__half> { static constexpr int32_t value = RL_FP16; };
template <> struct dtype_of<__nv_bfloat16> { static constexpr int32_t value = RL_BF16; };
template <> struct dtype_of<double> { static constexpr int32_t value = RL_FP64; };
template <> struct dtype_of<int8_t> { static constexpr int32_t value = RL_INT8; };
template <> struct dtype_of<int16_t> { static constexpr int32_t value = RL_INT16; };
template <> struct dtype_of<int32_t> { static constexpr int32_t value = RL_INT32; };
template <> struct dtype_of<int64_t> { static constexpr int32_t value = RL_INT64; };
template <> struct dtype_of<uint8_t> { static constexpr int32_t value = RL_UINT8; };
template <> struct dtype_of<bool> { static constexpr int32_t value = RL_BOOL; };

// A borrowed tensor: shape, strides (in elements), dtype, device and data, valid during the call.
class Tensor {
 public:
  explicit Tensor(const rl_tensor* t) : t_(t) {}
  int64_t dim() const { return t_->ndim; }
  int64_t size(int64_t i) const { return t_->shape[i < 0 ? i + t_->ndim : i]; }
  int64_t stride(int64_t i) const { return t_->strides[i < 0 ? i + t_->ndim : i]; }
  int32_t dtype() const { return t_->dtype; }
  bool is_cuda() const { return t_->device_type == RL_CUDA; }
  int32_t device_index() const { return t_->device_id; }
  void* data_ptr() const { return t_->data; }
  int64_t numel() const;
  int64_t element_size() const;  // bytes per element
  bool is_contiguous() const;
  bool same_shape(const Tensor& other) const;
  std::string shape_str() const;   // "[4096, 128]"
  std::string device_str() const;  // "cuda:0"
  std::string describe() const;    // "[4096, 128] bf16 on cuda:0": what messages show
  // Typed data; raises if T is not this tensor's dtype.
  template <typename T>
  T* data() const {
    check_dtype(dtype_of<std::remove_cv_t<T>>::value);
    return static_cast<T*>(t_->data);
  }

 private:
  void check_dtype(int32_t wanted) const;
  const rl_tensor* t_;
};

// Common checks; each names the op in its message.
void check_cuda(const char* op, std::initializer_list<Tensor> tensors);        // CUDA, one device
void check_contiguous(const char* op, std::initializer_list<Tensor> tensors);  // row-major, no gaps
void check_same(const char* op, const Tensor& a, const Tensor& b);             // shape and dtype
// The distance in elements between the rows of t viewed as [rows, t.size(-1)]: the last dim contiguous,
// the leading dims (size-1 ones skipped) one uniform stride, rows not overlapping (x[:, :H] of [T, 2H]
// has 2H; a contiguous t has its last dim). Any other view raises, naming the op and the argument.
int64_t row_stride(const char* op, const char* name, const Tensor& t);

template <typename T> struct type_tag { using type = T; };

namespace detail {
[[noreturn]] void unsupported_dtype(const char* op, int32_t dtype, std::initializer_list<int32_t> supported);
}

// Run f(type_tag<T>{}) for the T in Ts matching t's dtype; any other dtype raises, naming the op.
template <typename... Ts, typename F>
void dispatch(const Tensor& t, const char* op, F&& f) {
  bool done = false;
  ((!done && dtype_of<Ts>::value == t.dtype() ? (f(type_tag<Ts>{}), done = true) : false), ...);
  if (!done) detail::unsupported_dtype(op, t.dtype(), {dtype_of<Ts>::value...});
}

constexpr int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

cudaStream_t current_stream();      // torch's current stream on the call's device
int device_attribute(int attribute);  // a CUdevice_attribute of the call's device
int sm_count();                       // streaming multiprocessors of the call's device
int resident_threads();               // threads the call's device holds at once: one wave of a launch

namespace detail {
void launch_raw(const void* host_symbol, dim3 grid, dim3 block, unsigned smem, void** args, unsigned flags);
template <typename... P>
void launch_with(unsigned flags, const void* kernel, dim3 grid, dim3 block, unsigned smem,
                 std::decay_t<P>... params) {
  void* argv[sizeof...(P) + 1] = {static_cast<void*>(&params)...};
  launch_raw(kernel, grid, block, smem, argv, flags);
}
}  // namespace detail

// Launch `kernel` on torch's current stream and check the launch; arguments convert to its parameters.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "rl::launch: the kernel takes a different number of arguments");
  detail::launch_with<P...>(0u, reinterpret_cast<const void*>(kernel), grid, block, static_cast<unsigned>(smem),
                            std::forward<A>(args)...);
}

// rl::launch as a programmatic dependent launch (see rl::wait_for_prior_grids, which `kernel` must call
// first) while the binding has them turned on (binding.set_dependent_launch; on by default); a plain launch
// otherwise, and below sm_90.
template <typename... P, typename... A>
void launch_dependent(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "rl::launch_dependent: the kernel takes a different number of arguments");
  detail::launch_with<P...>(RL_LAUNCH_DEPENDENT, reinterpret_cast<const void*>(kernel), grid, block,
                            static_cast<unsigned>(smem), std::forward<A>(args)...);
}

// ------------------------------------------------------------------ exports
namespace detail {

template <typename T> struct kind_of {
  static_assert(sizeof(T) == 0, "RL_EXPORT: a launcher parameter must be rl::Tensor, double, an integer or bool");
};
template <> struct kind_of<Tensor> { static constexpr char value = RL_KIND_TENSOR; };
template <> struct kind_of<double> { static constexpr char value = RL_KIND_FLOAT; };
template <> struct kind_of<float> { static constexpr char value = RL_KIND_FLOAT; };
template <> struct kind_of<bool> { static constexpr char value = RL_KIND_BOOL; };
template <> struct kind_of<int64_t> { static constexpr char value = RL_KIND_INT; };
template <> struct kind_of<int32_t> { static constexpr char value = RL_KIND_INT; };

template <typename T> using bare = std::remove_cv_t<std::remove_reference_t<T>>;

template <typename T>
bare<T> unpack(const rl_arg& a) {
  using B = bare<T>;
  if constexpr (std::is_same<B, Tensor>::value) return Tensor(a.v.tensor);
  else if constexpr (std::is_floating_point<B>::value) return static_cast<B>(a.v.f);
  else if constexpr (std::is_same<B, bool>::value) return a.v.i != 0;
  else return static_cast<B>(a.v.i);
}

// Runs a launcher body with the call's context set, turning C++ exceptions into a status and message.
int guarded_call(void (*body)(const rl_arg*, void*, rl_call*), const rl_arg* args, void* fn, rl_call* call,
                 char* err, size_t err_len);

template <typename R> struct result_kind { static constexpr char value = kind_of<R>::value; };
template <> struct result_kind<void> { static constexpr char value = RL_KIND_VOID; };

inline void store(rl_arg& out, double v) { out.v.f = v; }
inline void store(rl_arg& out, float v) { out.v.f = v; }
inline void store(rl_arg& out, bool v) { out.v.i = v; }
inline void store(rl_arg& out, int64_t v) { out.v.i = v; }
inline void store(rl_arg& out, int32_t v) { out.v.i = v; }

template <typename Sig> struct Launcher;
template <typename R, typename... P>
struct Launcher<R (*)(P...)> {
  static_assert(!std::is_same<R, Tensor>::value, "RL_EXPORT: a launcher writes into tensors it is given; "
                                                 "it returns void or a number");
  static constexpr char result = result_kind<R>::value;
  static constexpr char signature[sizeof...(P) + 1] = {kind_of<bare<P>>::value..., '\0'};
  template <size_t... I>
  static void invoke(R (*fn)(P...), const rl_arg* args, rl_call* c, std::index_sequence<I...>) {
    if constexpr (std::is_void<R>::value) fn(unpack<P>(args[I])...);
    else store(c->result, fn(unpack<P>(args[I])...));
  }
  static void body(const rl_arg* args, void* fn, rl_call* c) {
    invoke(reinterpret_cast<R (*)(P...)>(fn), args, c, std::index_sequence_for<P...>{});
  }
  template <R (*F)(P...)>
  static int call(const rl_arg* args, int32_t, rl_call* c, char* err, size_t len) {
    return guarded_call(&body, args, reinterpret_cast<void*>(F), c, err, len);
  }
};

struct Registrar {
  rl_export entry;
  Registrar(const char* name, const char* sig, char result, const char* doc, rl_fn fn);
};

}  // namespace detail
}  // namespace rl

// RL_EXPORT(fn[, "doc"]): make `fn(...)` callable from Python as module.fn(...); fn returns void or a number.
#define RL_EXPORT(fn, ...)                                                             \
  static ::rl::detail::Registrar rl_registrar_##fn(                                   \
      #fn, ::rl::detail::Launcher<decltype(&fn)>::signature,                          \
      ::rl::detail::Launcher<decltype(&fn)>::result, "" __VA_ARGS__,                   \
      &::rl::detail::Launcher<decltype(&fn)>::template call<&fn>);

#endif  // RL_HOST
#endif  // RAPID_LLM_CUH_
