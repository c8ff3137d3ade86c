/* The precompiled half of the fast path: Python call -> C launcher.
 *
 * Built once per Python (a few hundred ms of gcc) and reused by every fast-path
 * module. Per call it turns torch tensors into rl_tensor views through torch's
 * DLPack C exchange API (no Python-level calls), makes the device of the first
 * CUDA tensor current, asks torch for its current stream there, and calls the
 * module's launcher. It reaches the CUDA driver through libcuda, which torch
 * has already loaded; a module without kernels needs no driver at all.
 *
 * It also holds the two per-call steps that Python would otherwise add to
 * every op call: the dispatcher (tensor -> cached row, see dispatcher.py) and
 * the out-first wrapper of a JIT row (allocate out, call the launcher).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "rapid_llm_abi.h"

/* ---- DLPack (the stable C ABI torch exports through __dlpack_c_exchange_api__) ---- */
typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader* prev_api;
} DLPackExchangeAPIHeader;
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
typedef struct {
  DLPackExchangeAPIHeader header;
  int (*managed_tensor_allocator)(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                                  void (*set_error)(void* error_ctx, const char* kind, const char* message));
  void* managed_tensor_from_py_object_no_sync;
  int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned* tensor, void** out_py_object);
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
} DLPackExchangeAPI;
enum { kDLCPU = 1, kDLCUDA = 2 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6, kDLFloat8_e4m3fn = 10, kDLFloat8_e5m2 = 12 };

#define RL_MAX_ARGS 32
#define RL_ERR_LEN 2048

static PyTypeObject* tensor_type = NULL;
/* A tensor type besides torch.Tensor whose calls OutFirst may remember (torch.nn.Parameter, a model's weights). */
static PyTypeObject* plain_tensor_type = NULL;
static const DLPackExchangeAPI* dlpack = NULL;

/* ---- the CUDA driver, resolved from libcuda on first need ---- */
typedef int (*cu_init_t)(unsigned);
typedef int (*cu_device_get_t)(int*, int);
typedef int (*cu_primary_retain_t)(void**, int);
typedef int (*cu_ctx_get_t)(void**);
typedef int (*cu_ctx_set_t)(void*);
typedef int (*cu_ctx_get_device_t)(int*);
typedef int (*cu_launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                           void**, void**);
/* cuLaunchKernelEx's config, as cuda.h (CUDA 12.0+) lays it out; only the attribute it sets is named. */
typedef struct {
  int id; /* CUlaunchAttributeID */
  char pad[4];
  union { char pad[64]; int programmatic_stream_serialization_allowed; } value;
} cu_launch_attribute;
typedef struct {
  unsigned grid[3], block[3], smem;
  void* stream;
  cu_launch_attribute* attrs;
  unsigned n_attrs;
} cu_launch_config;
enum { CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75 };
typedef int (*cu_launch_ex_t)(const cu_launch_config*, void*, void**, void**);
typedef int (*cu_load_cubin_t)(void**, const void*, void*, void*, unsigned, void*, void*, unsigned);
typedef int (*cu_cubin_kernel_t)(void**, void*, const char*);
typedef int (*cu_kernel_set_attr_t)(int, int, void*, int);
typedef int (*cu_error_t)(int, const char**);
typedef int (*cu_device_attr_t)(int*, int, int);
typedef int (*cu_stream_capturing_t)(void*, int*);

static struct {
  int loaded;
  cu_init_t init;
  cu_device_get_t device_get;
  cu_primary_retain_t primary_retain;
  cu_ctx_get_t ctx_get;
  cu_ctx_set_t ctx_set;
  cu_ctx_get_device_t ctx_get_device;
  cu_launch_t launch;
  cu_launch_ex_t launch_ex;
  cu_load_cubin_t load_cubin;
  cu_cubin_kernel_t cubin_kernel;
  cu_kernel_set_attr_t kernel_set_attr;
  cu_error_t error_name;
  cu_error_t error_string;
  cu_device_attr_t device_attr;
  cu_stream_capturing_t stream_is_capturing;
  void* primary[64];
  signed char major[64]; /* compute capability major per device, 0 until asked */
} cu;

/* Whether rl::launch_dependent launches programmatically (set_dependent_launch; binding.py sets it at load). */
static int dependent_launch = 0;

static const char* load_driver(void) {
  if (cu.loaded) return NULL;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) return "the CUDA driver (libcuda.so.1) could not be loaded";
#define RL_SYM(field, name)                                            \
  *(void**)(&cu.field) = dlsym(lib, name);                             \
  if (!cu.field) return "the CUDA driver lacks " name " (CUDA 12.0 or newer is needed)";
  RL_SYM(init, "cuInit");
  RL_SYM(device_get, "cuDeviceGet");
  RL_SYM(primary_retain, "cuDevicePrimaryCtxRetain");
  RL_SYM(ctx_get, "cuCtxGetCurrent");
  RL_SYM(ctx_set, "cuCtxSetCurrent");
  RL_SYM(ctx_get_device, "cuCtxGetDevice");
  RL_SYM(launch, "cuLaunchKernel");
  RL_SYM(launch_ex, "cuLaunchKernelEx");
  RL_SYM(load_cubin, "cuLibraryLoadData");
  RL_SYM(cubin_kernel, "cuLibraryGetKernel");
  RL_SYM(kernel_set_attr, "cuKernelSetAttribute");
  RL_SYM(error_name, "cuGetErrorName");
  RL_SYM(error_string, "cuGetErrorString");
  RL_SYM(device_attr, "cuDeviceGetAttribute");
  RL_SYM(stream_is_capturing, "cuStreamIsCapturing");
#undef RL_SYM
  if (cu.init(0) != 0) return "cuInit failed: no usable CUDA device";
  cu.loaded = 1;
  return NULL;
}

static const char* error_string(int result) {
  static _Thread_local char buf[256];
  const char* name = "CUDA_ERROR_UNKNOWN";
  const char* text = "unrecognized error code";
  if (cu.loaded) {
    cu.error_name(result, &name);
    cu.error_string(result, &text);
  }
  snprintf(buf, sizeof buf, "%s (%s)", name ? name : "?", text ? text : "?");
  return buf;
}

#define RL_MAX_DEFAULT_SMEM (48 * 1024)

static int device_attribute(int attribute, int device, int* value);

/* Programmatic dependent launch needs sm_90; below it a dependent launch is a plain one. */
static int takes_dependent_launch(int device) {
  if (!dependent_launch || device < 0 || device >= 64) return 0;
  if (cu.major[device] == 0) {
    int major = 0;
    if (device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device, &major) != 0) return 0;
    cu.major[device] = (signed char)major;
  }
  return cu.major[device] >= 9;
}

static int launch(void* kernel, const unsigned grid[3], const unsigned block[3], unsigned smem, void* stream,
                  void** args, int device, unsigned flags) {
  if (smem > RL_MAX_DEFAULT_SMEM) { /* opt in to large dynamic shared memory, as <<<>>> users must */
    int dev = 0;
    int r = cu.ctx_get_device(&dev);
    if (r == 0) r = cu.kernel_set_attr(8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */, (int)smem, kernel, dev);
    if (r != 0) return r;
  }
  if ((flags & RL_LAUNCH_DEPENDENT) && takes_dependent_launch(device)) {
    cu_launch_attribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmatic_stream_serialization_allowed = 1;
    const cu_launch_config config = {{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, smem, stream,
                                     &attr, 1};
    return cu.launch_ex(&config, kernel, args, NULL);
  }
  return cu.launch(kernel, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream, args, NULL);
}

static int device_attribute(int attribute, int device, int* value) {
  if (!cu.loaded && load_driver() != NULL) return 3; /* CUDA_ERROR_NOT_INITIALIZED */
  int dev = 0;
  int r = cu.device_get(&dev, device);
  return r != 0 ? r : cu.device_attr(value, attribute, dev);
}

static const rl_runtime runtime = {launch, error_string, device_attribute};

/* ---- per-call conversion ---- */
static int dtype_code(DLDataType t) {
  if (t.lanes != 1) return RL_DTYPE_OTHER;
  switch (t.code) {
    case kDLFloat: return t.bits == 32 ? RL_FP32 : t.bits == 16 ? RL_FP16 : t.bits == 64 ? RL_FP64 : RL_DTYPE_OTHER;
    case kDLBfloat: return t.bits == 16 ? RL_BF16 : RL_DTYPE_OTHER;
    case kDLInt:
      return t.bits == 8 ? RL_INT8 : t.bits == 16 ? RL_INT16 : t.bits == 32 ? RL_INT32 : t.bits == 64 ? RL_INT64
                                                                                         : RL_DTYPE_OTHER;
    case kDLUInt: return t.bits == 8 ? RL_UINT8 : RL_DTYPE_OTHER;
    case kDLBool: return RL_BOOL;
    case kDLFloat8_e4m3fn: return RL_FP8_E4M3;
    case kDLFloat8_e5m2: return RL_FP8_E5M2;
    default: return RL_DTYPE_OTHER;
  }
}

typedef struct {
  PyObject_HEAD
  PyMethodDef def;
  rl_fn fn;
  const char* signature;
  char result;
  Py_ssize_t nargs;
  PyObject* module; /* keeps the shared object's owner alive */
} Launcher;

static void launcher_dealloc(Launcher* self) {
  Py_XDECREF(self->module);
  PyObject_Free(self);
}

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rapid_llm.fastcall.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

static const char* kind_word(char kind) {
  switch (kind) {
    case RL_KIND_TENSOR: return "a torch.Tensor";
    case RL_KIND_FLOAT: return "a float";
    case RL_KIND_INT: return "an int";
    default: return "a bool";
  }
}

static PyObject* wrong_arg(const Launcher* self, Py_ssize_t i, PyObject* got) {
  PyErr_Format(PyExc_TypeError, "%s(): argument %zd must be %s, not %.100s", self->def.ml_name, i + 1,
               kind_word(self->signature[i]), Py_TYPE(got)->tp_name);
  return NULL;
}

/* The device guard: make CUDA device `device`'s primary context current (*switched: *previous is to be restored
 * after the launch); -1 when the device is not usable. Without a driver there is nothing to switch. */
static int enter_device(int device, void** previous, int* switched) {
  *switched = 0;
  if (!cu.loaded || device < 0 || device >= 64) return 0;
  if (cu.primary[device] == NULL) {
    int dev = 0;
    if (cu.device_get(&dev, device) != 0 || cu.primary_retain(&cu.primary[device], dev) != 0) return -1;
  }
  cu.ctx_get(previous);
  if (*previous != cu.primary[device]) {
    cu.ctx_set(cu.primary[device]);
    *switched = 1;
  }
  return 0;
}

static PyObject* launcher_call(PyObject* owner, PyObject* const* args, Py_ssize_t nargs) {
  Launcher* self = (Launcher*)owner;
  if (nargs != self->nargs) {
    PyErr_Format(PyExc_TypeError, "%s() takes %zd positional arguments (%s) but %zd were given", self->def.ml_name,
                 self->nargs, self->signature, nargs);
    return NULL;
  }
  DLTensor dl[RL_MAX_ARGS];
  rl_tensor views[RL_MAX_ARGS];
  rl_arg values[RL_MAX_ARGS];
  rl_call call;
  memset(&call, 0, sizeof call);
  call.device = -1;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    PyObject* a = args[i];
    switch (self->signature[i]) {
      case RL_KIND_TENSOR: {
        if (!PyObject_TypeCheck(a, tensor_type)) return wrong_arg(self, i, a);
        if (dlpack->dltensor_from_py_object_no_sync(a, &dl[i]) != 0) return NULL;
        rl_tensor* v = &views[i];
        v->data = (char*)dl[i].data + dl[i].byte_offset;
        v->shape = dl[i].shape;
        v->strides = dl[i].strides;
        v->ndim = dl[i].ndim;
        v->dtype = dtype_code(dl[i].dtype);
        v->device_type = dl[i].device.device_type == kDLCUDA ? RL_CUDA
                         : dl[i].device.device_type == kDLCPU ? RL_CPU : RL_DEVICE_OTHER;
        v->device_id = dl[i].device.device_id;
        if (v->strides == NULL && v->ndim > 0) {
          PyErr_Format(PyExc_ValueError, "%s(): argument %zd came without strides", self->def.ml_name, i + 1);
          return NULL;
        }
        if (call.device < 0 && v->device_type == RL_CUDA) call.device = v->device_id;
        values[i].v.tensor = v;
        break;
      }
      case RL_KIND_FLOAT:
        if (PyObject_TypeCheck(a, tensor_type) || !(PyFloat_Check(a) || PyLong_Check(a) || PyNumber_Check(a)))
          return wrong_arg(self, i, a);
        values[i].v.f = PyFloat_AsDouble(a);
        if (values[i].v.f == -1.0 && PyErr_Occurred()) return NULL;
        break;
      case RL_KIND_INT:
        if (PyFloat_Check(a) || PyObject_TypeCheck(a, tensor_type)) return wrong_arg(self, i, a);
        values[i].v.i = PyLong_AsLongLong(a);
        if (values[i].v.i == -1 && PyErr_Occurred()) return NULL;
        break;
      default: /* bool */
        if (!PyBool_Check(a)) return wrong_arg(self, i, a);
        values[i].v.i = a == Py_True;
        break;
    }
  }
  void* previous = NULL;
  int switched = 0;
  if (call.device >= 0) {
    if (dlpack->current_work_stream(kDLCUDA, call.device, &call.stream) != 0) return NULL;
    if (enter_device(call.device, &previous, &switched) != 0) {
      PyErr_Format(PyExc_RuntimeError, "%s(): CUDA device %d is not usable", self->def.ml_name, call.device);
      return NULL;
    }
  }
  char err[RL_ERR_LEN];
  err[0] = '\0';
  int status = self->fn(values, (int32_t)nargs, &call, err, sizeof err);
  if (switched) cu.ctx_set(previous);
  if (status != RL_OK) {
    if (status == RL_INTERNAL)
      PyErr_Format(PyExc_RuntimeError, "%s(): internal error in the launcher: %s", self->def.ml_name, err);
    else  /* a failed RL_CHECK is bad input, as the op's other rows say it; a CUDA error is not */
      PyErr_SetString(status == RL_CHECK_FAILED ? PyExc_ValueError : PyExc_RuntimeError, err);
    return NULL;
  }
  switch (self->result) {
    case RL_KIND_INT: return PyLong_FromLongLong(call.result.v.i);
    case RL_KIND_FLOAT: return PyFloat_FromDouble(call.result.v.f);
    case RL_KIND_BOOL: return PyBool_FromLong((long)call.result.v.i);
    default: Py_RETURN_NONE;
  }
}

/* ---- module loading ---- */
static PyObject* fastcall_init(PyObject* m, PyObject* args) {
  PyObject *type, *capsule, *plain = NULL;
  if (!PyArg_ParseTuple(args, "O!O|O!", &PyType_Type, &type, &capsule, &PyType_Type, &plain)) return NULL;
  const DLPackExchangeAPI* api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
  if (!api) return NULL;
  if (api->header.version.major != 1) {
    PyErr_Format(PyExc_RuntimeError, "torch's DLPack exchange API is version %u; rapid_llm needs 1",
                 api->header.version.major);
    return NULL;
  }
  Py_INCREF(type);
  tensor_type = (PyTypeObject*)type;
  if (plain != NULL) {
    Py_INCREF(plain);
    plain_tensor_type = (PyTypeObject*)plain;
  }
  dlpack = api;
  Py_RETURN_NONE;
}

/* A module's symbols (rapid_llm_abi.h's list), each a pointer to what the module defines. */
typedef struct {
#define RL_FIELD_(type, name, array) type* name;
  RL_MODULE_SYMBOLS(RL_FIELD_)
#undef RL_FIELD_
  const rl_export* (*exports)(void);
} module_symbols;

/* Every symbol of the list looked up by its name; 0 when one is missing (not a fast-path module). */
static int find_symbols(void* lib, module_symbols* s) {
#define RL_FIND_(type, name, array) \
  if (!(s->name = (type*)dlsym(lib, #name))) return 0;
  RL_MODULE_SYMBOLS(RL_FIND_)
#undef RL_FIND_
  *(void**)(&s->exports) = dlsym(lib, RL_STR(RL_EXPORTS_FN));
  return s->exports != NULL;
}

static PyObject* fastcall_load(PyObject* m, PyObject* args) {
  const char* path;
  PyObject* owner;
  if (!PyArg_ParseTuple(args, "sO", &path, &owner)) return NULL;
  if (dlpack == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "fastcall.init() was not called");
    return NULL;
  }
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    PyErr_Format(PyExc_ImportError, "cannot load %s: %s", path, dlerror());
    return NULL;
  }
  module_symbols sym;
  if (!find_symbols(lib, &sym)) {
    PyErr_Format(PyExc_ImportError, "%s is not a rapid_llm fast-path module", path);
    return NULL;
  }
  if (*sym.rl_abi_version != RL_ABI_VERSION) {
    PyErr_Format(PyExc_ImportError, "%s was built for fast-path ABI %d, this binding speaks %d", path,
                 *sym.rl_abi_version, RL_ABI_VERSION);
    return NULL;
  }
  const int* count = sym.rl_kernel_count;
  const char* const* names = sym.rl_kernel_names;
  void** handles = sym.rl_kernel_handles;
  const rl_runtime** slot = sym.rl_runtime_slot;
  const char* cubin = sym.rl_cubin_data;
  /* Without a driver (a CPU-only machine) the launchers still load; launching a kernel then raises. */
  if (*count > 0 && load_driver() == NULL) {
    void* image = NULL; /* the cubin, loaded into every context on first use */
    int r = cu.load_cubin(&image, cubin, NULL, NULL, 0, NULL, NULL, 0);
    if (r != 0) {
      PyErr_Format(PyExc_RuntimeError, "loading the kernels of %s: %s", path, error_string(r));
      return NULL;
    }
    for (int i = 0; i < *count; ++i) {
      r = cu.cubin_kernel(&handles[i], image, names[i]);
      if (r != 0) {
        PyErr_Format(PyExc_RuntimeError, "kernel %s is not in the device code: %s", names[i], error_string(r));
        return NULL;
      }
    }
  }
  *slot = &runtime;
  PyObject* out = PyList_New(0);
  if (!out) return NULL;
  for (const rl_export* e = sym.exports(); e; e = e->next) {
    Launcher* l = PyObject_New(Launcher, &LauncherType);
    if (!l) goto fail;
    l->def.ml_name = e->name;
    l->def.ml_meth = (PyCFunction)(void (*)(void))launcher_call;
    l->def.ml_flags = METH_FASTCALL;
    l->def.ml_doc = e->doc;
    l->fn = e->fn;
    l->signature = e->signature;
    l->result = e->result;
    l->nargs = (Py_ssize_t)strlen(e->signature);
    Py_INCREF(owner);
    l->module = owner;
    if (l->nargs > RL_MAX_ARGS) {
      Py_DECREF(l);
      PyErr_Format(PyExc_ImportError, "%s takes more than %d arguments", e->name, RL_MAX_ARGS);
      goto fail;
    }
    PyObject* fn = PyCFunction_NewEx(&l->def, (PyObject*)l, NULL);
    Py_DECREF(l);
    if (!fn) goto fail;
    PyObject* item = Py_BuildValue("(ssN)", e->name, e->signature, fn);
    if (!item || PyList_Append(out, item) != 0) {
      Py_XDECREF(item);
      goto fail;
    }
    Py_DECREF(item);
  }
  return out;
fail:
  Py_DECREF(out);
  return NULL;
}

#include "fastcall_checked.inc"
#include "fastcall_dispatch.inc"
#include "fastcall_torch.inc"

static PyObject* fastcall_set_dependent_launch(PyObject* self, PyObject* arg) {
  (void)self;
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  const int was = dependent_launch;
  dependent_launch = on;
  return PyBool_FromLong(was);
}

static PyMethodDef methods[] = {
    {"set_dependent_launch", fastcall_set_dependent_launch, METH_O,
     "set_dependent_launch(on) -> bool: whether rl::launch_dependent launches programmatically; returns the old"},
    {"init", fastcall_init, METH_VARARGS,
     "init(torch.Tensor, torch.Tensor.__dlpack_c_exchange_api__[, torch.nn.Parameter]): the last, a tensor type "
     "whose calls OutFirst may remember as it does torch.Tensor's"},
    {"load", fastcall_load, METH_VARARGS, "load(path, owner) -> [(name, signature, launcher)]"},
    RL_TORCH_METHODS
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rapid_llm_fastcall", NULL, -1, methods};

PyMODINIT_FUNC PyInit__rapid_llm_fastcall(void) {
  if (PyType_Ready(&LauncherType) < 0 || PyType_Ready(&DispatcherType) < 0 || PyType_Ready(&OutFirstType) < 0)
    return NULL;
  PyObject* m = PyModule_Create(&module);
  if (!m) return NULL;
  Py_INCREF(&DispatcherType);
  Py_INCREF(&OutFirstType);
  if (PyModule_AddObject(m, "Dispatcher", (PyObject*)&DispatcherType) < 0 ||
      PyModule_AddObject(m, "OutFirst", (PyObject*)&OutFirstType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
