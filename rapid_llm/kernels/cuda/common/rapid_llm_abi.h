/* The C ABI between a fast-path module and the precompiled call binding.
 *
 * A fast-path cell is built into a small shared object with no torch headers:
 * its launchers take rl_arg arrays, and the binding (fastcall.c, built once
 * per Python) turns torch tensors and Python numbers into them on each call.
 * Keep this file plain C. Both sides are compiled separately, against this
 * file: a change to a struct or a symbol bumps RL_ABI_VERSION, so a module and
 * a binding built from different versions refuse each other at load.
 */
#ifndef RAPID_LLM_ABI_H_
#define RAPID_LLM_ABI_H_

#include <stddef.h>
#include <stdint.h>

#define RL_ABI_VERSION 3

/* dtype codes, X(enum, code, name): the one list of them, for the enum and the names in messages
 * (rl::dtype_name). A name is spelled as rapid_llm's Python side spells it (platform.DTYPE_NAMES;
 * tests/unit/toolchain/test_abi_header.py holds the two together). */
#define RL_DTYPES(X)                                                                              \
  X(RL_FP32, 0, "fp32") X(RL_FP16, 1, "fp16") X(RL_BF16, 2, "bf16") X(RL_FP64, 3, "fp64")          \
  X(RL_INT8, 4, "int8") X(RL_INT16, 5, "int16") X(RL_INT32, 6, "int32") X(RL_INT64, 7, "int64")    \
  X(RL_UINT8, 8, "uint8") X(RL_BOOL, 9, "bool") X(RL_FP8_E4M3, 10, "fp8e4m3") X(RL_FP8_E5M2, 11, "fp8e5m2")

#define RL_DTYPE_ENUM_(e, code, name) e = code,
enum rl_dtype { RL_DTYPES(RL_DTYPE_ENUM_) RL_DTYPE_OTHER = 99 };
#undef RL_DTYPE_ENUM_

enum rl_device_type { RL_CPU = 1, RL_CUDA = 2, RL_DEVICE_OTHER = 99 };

/* A borrowed view of a tensor, valid for the duration of one call. */
typedef struct rl_tensor {
  void* data;             /* first element (storage offset applied) */
  const int64_t* shape;   /* ndim sizes */
  const int64_t* strides; /* ndim strides, in elements */
  int32_t ndim;
  int32_t dtype;          /* enum rl_dtype */
  int32_t device_type;    /* enum rl_device_type */
  int32_t device_id;
} rl_tensor;

/* Argument kinds, as the signature string spells them. */
#define RL_KIND_TENSOR 't'
#define RL_KIND_FLOAT 'f'
#define RL_KIND_INT 'i'
#define RL_KIND_BOOL 'b'
#define RL_KIND_VOID 'v'

typedef struct rl_arg {
  union {
    const rl_tensor* tensor;
    double f;
    int64_t i;
  } v;
} rl_arg;

/* What the binding knows about the call: the stream and device it runs on. */
typedef struct rl_call {
  void* stream;       /* torch's current stream on `device` (NULL: default stream or CPU call) */
  int32_t device;     /* the CUDA device of the first CUDA tensor, -1 if none */
  rl_arg result;      /* what a launcher that returns a number returned */
} rl_call;

/* rl_runtime.launch flags. DEPENDENT: a programmatic dependent launch (rl::launch_dependent). */
#define RL_LAUNCH_DEPENDENT 1u

/* Services the binding lends the module (the CUDA driver, reached through torch's process). */
typedef struct rl_runtime {
  /* Launch `kernel` (a CUkernel) on `stream` of CUDA device `device`; returns a CUresult. */
  int (*launch)(void* kernel, const unsigned grid[3], const unsigned block[3], unsigned smem,
                void* stream, void** args, int device, unsigned flags);
  /* "CUDA_ERROR_X: description" for a CUresult. */
  const char* (*error_string)(int result);
  /* cuDeviceGetAttribute: a CUdevice_attribute of CUDA device `device`; returns a CUresult. */
  int (*device_attribute)(int attribute, int device, int* value);
} rl_runtime;

/* Return codes of an exported function. */
enum rl_status { RL_OK = 0, RL_CHECK_FAILED = 1, RL_CUDA_FAILED = 2, RL_INTERNAL = 3 };

typedef int (*rl_fn)(const rl_arg* args, int32_t nargs, rl_call* call, char* err, size_t err_len);

/* One exported launcher; the module's list is reached through rapid_llm_exports() (RL_EXPORTS_FN). */
typedef struct rl_export {
  const char* name;
  const char* signature; /* one kind character per parameter, e.g. "ttf" */
  char result;           /* 'v' (None), or the kind of the number it returns */
  const char* doc;
  rl_fn fn;
  const struct rl_export* next;
} rl_export;

/* ---- What a module defines, by name ----
 * The symbols the binding looks up in a module (dlsym) besides its launchers, X(type, name, array).
 * The module's kernel table (below; the builder's generated stub expands it) defines them, the host
 * runtime reads them, the binding finds them by these names: this list is the one spelling of each. */
#define RL_MODULE_SYMBOLS(X)                                                          \
  X(const int, rl_abi_version, )                /* the RL_ABI_VERSION the module was built with */ \
  X(const int, rl_kernel_count, )               /* kernels the host code launches */               \
  X(const char* const, rl_kernel_names, [])     /* their mangled names, as the cubin has them */  \
  X(const void* const, rl_kernel_symbols, [])   /* their host-side symbols (what rl::launch gets) */ \
  X(void*, rl_kernel_handles, [])               /* their CUkernels, filled in by the binding */    \
  X(const rl_runtime*, rl_runtime_slot, )       /* the binding's services, set at load */          \
  X(const char, rl_cubin_data, [])              /* the device code, embedded */

/* The function that lists a module's launchers (defined by the host runtime), visible to dlsym. */
#define RL_EXPORTS_FN rapid_llm_exports
#define RL_ABI_VISIBLE __attribute__((visibility("default")))
#define RL_STR_(x) #x
#define RL_STR(x) RL_STR_(x)

#ifdef __cplusplus
extern "C" {
#endif
#define RL_DECLARE_(type, name, array) extern type name array;
RL_MODULE_SYMBOLS(RL_DECLARE_)
#undef RL_DECLARE_
RL_ABI_VISIBLE const rl_export* RL_EXPORTS_FN(void);
#ifdef __cplusplus
}
#endif

/* The module's kernel table, for a stub that defines RL_TABLE_KERNELS(K) (K(symbol) per launched
 * kernel, the symbol as the host object references it) and RL_TABLE_CUBIN (the cubin's path, a
 * string) and then includes this file: host stubs with the kernels' names, and the symbols above. */
#if defined(RL_TABLE_KERNELS) && defined(RL_TABLE_CUBIN)
#define RL_TABLE_STUB_(s) __attribute__((visibility("hidden"), noinline)) void s(void) { __asm__ volatile(""); }
#define RL_TABLE_ONE_(s) +1
#define RL_TABLE_NAME_(s) #s,
#define RL_TABLE_ADDR_(s) (const void*)&s,
RL_TABLE_KERNELS(RL_TABLE_STUB_)
const int rl_abi_version = RL_ABI_VERSION;
const int rl_kernel_count = 0 RL_TABLE_KERNELS(RL_TABLE_ONE_);
const char* const rl_kernel_names[] = {RL_TABLE_KERNELS(RL_TABLE_NAME_) 0};
const void* const rl_kernel_symbols[] = {RL_TABLE_KERNELS(RL_TABLE_ADDR_) 0};
void* rl_kernel_handles[1 RL_TABLE_KERNELS(RL_TABLE_ONE_)];
const rl_runtime* rl_runtime_slot;
__asm__(".section .rodata\n.balign 64\n.globl rl_cubin_data\n.type rl_cubin_data, @object\n"
        "rl_cubin_data:\n.incbin \"" RL_TABLE_CUBIN "\"\n.byte 0\n.previous\n");
#endif

#endif /* RAPID_LLM_ABI_H_ */
