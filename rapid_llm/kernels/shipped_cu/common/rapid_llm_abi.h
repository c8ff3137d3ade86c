/* The C ABI between a fast-path module and the precompiled call binding.
 *
 * A fast-path cell is built into a small shared object with no torch headers:
 * its launchers take rl_arg arrays, and the binding (fastcall.c, built once
 * per Python) turns torch tensors and Python numbers into them on each call.
 * Keep this file plain C and append-only: both sides are compiled separately.
 */
#ifndef RAPID_LLM_ABI_H_
#define RAPID_LLM_ABI_H_

#include <stddef.h>
#include <stdint.h>

#define RL_ABI_VERSION 1

/* dtype codes: the names match rapid_llm's dtype names. */
enum rl_dtype {
  RL_FP32 = 0, RL_FP16 = 1, RL_BF16 = 2, RL_FP64 = 3,
  RL_INT8 = 4, RL_INT16 = 5, RL_INT32 = 6, RL_INT64 = 7,
  RL_UINT8 = 8, RL_BOOL = 9, RL_FP8_E4M3 = 10, RL_FP8_E5M2 = 11,
  RL_DTYPE_OTHER = 99
};

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

/* Services the binding lends the module (the CUDA driver, reached through torch's process). */
typedef struct rl_runtime {
  int32_t abi_version;
  /* Launch `kernel` (a CUkernel) on `stream`; returns a CUresult. */
  int (*launch)(void* kernel, const unsigned grid[3], const unsigned block[3], unsigned smem,
                void* stream, void** args);
  /* "CUDA_ERROR_X: description" for a CUresult. */
  const char* (*error_string)(int result);
  /* cuDeviceGetAttribute: a CUdevice_attribute of CUDA device `device`; returns a CUresult. */
  int (*device_attribute)(int attribute, int device, int* value);
} rl_runtime;

/* Return codes of an exported function. */
enum rl_status { RL_OK = 0, RL_CHECK_FAILED = 1, RL_CUDA_FAILED = 2, RL_INTERNAL = 3 };

typedef int (*rl_fn)(const rl_arg* args, int32_t nargs, rl_call* call, char* err, size_t err_len);

/* One exported launcher; the module's list is reached through rl_exports(). */
typedef struct rl_export {
  const char* name;
  const char* signature; /* one kind character per parameter, e.g. "ttf" */
  char result;           /* 'v' (None), or the kind of the number it returns */
  const char* doc;
  rl_fn fn;
  const struct rl_export* next;
} rl_export;

#endif /* RAPID_LLM_ABI_H_ */
