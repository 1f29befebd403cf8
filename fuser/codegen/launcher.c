/* One launcher for fuser's Triton kernels, whatever their signature (codegen/launcher.py).

   Triton 3.6 writes a C launcher for each kernel signature and builds it with the C compiler
   (0.1-0.3 s each, cold). This module is built once; `make_launch(codes)` returns a launch
   function for one signature, described by one character per kernel argument:

     p  pointer: an int, None (null) or an object with data_ptr()
     c  a constexpr: passed by the caller, not a kernel parameter
     b  i8 / i1     h  i16     i  i32     L  i64
     B  u8 / u1     H  u16     I  u32     K  u64
     e  fp16        g  bf16    f  fp32    d  fp64

   The launch function takes the arguments of Triton's own launch functions, in their order:
   grid x, y, z, stream, function, cooperative-grid flag, PDL flag, global scratch, profile
   scratch, (num_warps, num_ctas, shared memory), launch metadata, enter hook, exit hook, then
   the kernel's arguments; it checks them the same way and launches with cuLaunchKernelEx. Each
   parameter is stored in a 64-bit slot, whose first bytes hold it (little-endian hosts only;
   launcher.py checks). */
#include "cuda.h"
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define FIXED_ARGS 13
#define MAX_PARAMS 126 /* kernel parameters, the two scratch pointers not counted */

typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);

static PyObject *data_ptr_name = NULL;
static launch_ex_fn launch_ex = NULL;

static int cuda_failed(CUresult code) {
  if (code == CUDA_SUCCESS) return 0;
  const char *text = NULL;
  cuGetErrorString(code, &text);
  PyErr_Format(PyExc_RuntimeError, "Triton Error [CUDA]: %s", text ? text : "unknown error");
  return 1;
}

static int ensure_context(void) {
  CUcontext context = NULL;
  if (cuda_failed(cuCtxGetCurrent(&context))) return 1;
  if (context) return 0;
  CUdevice device;
  if (cuda_failed(cuDeviceGet(&device, 0))) return 1;
  if (cuda_failed(cuDevicePrimaryCtxRetain(&context, device))) return 1;
  return cuda_failed(cuCtxSetCurrent(context));
}

/* A device pointer from an int, None or a tensor; checked to be usable by the device. */
static int pointer_of(PyObject *obj, int index, uint64_t *out) {
  *out = 0;
  if (obj == Py_None) return 0;
  if (PyLong_Check(obj)) {
    *out = PyLong_AsUnsignedLongLong(obj);
    return PyErr_Occurred() ? 1 : 0;
  }
  PyObject *value = PyObject_CallMethodNoArgs(obj, data_ptr_name);
  if (!value) { /* a TypeError, as Triton's: the direct launches then take the JIT path */
    PyErr_Format(PyExc_TypeError, "argument %d: a pointer must be an int, None or have data_ptr()", index);
    return 1;
  }
  if (!PyLong_Check(value)) {
    Py_DECREF(value);
    PyErr_Format(PyExc_TypeError, "argument %d: data_ptr() did not return an int", index);
    return 1;
  }
  uint64_t address = PyLong_AsUnsignedLongLong(value);
  Py_DECREF(value);
  if (PyErr_Occurred()) return 1;
  if (address == 0) return 0;
  CUdeviceptr device_address = 0;
  CUresult status = cuPointerGetAttribute(&device_address, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, address);
  if (status == CUDA_ERROR_INVALID_VALUE) {
    PyErr_Format(PyExc_ValueError, "argument %d: pointer cannot be accessed from the GPU (a CPU tensor?)", index);
    return 1;
  }
  if (cuda_failed(status)) return 1;
  *out = (uint64_t)device_address;
  return 0;
}

static int integer_of(PyObject *obj, int index, long long low, long long high, uint64_t *out) {
  long long value = PyLong_AsLongLong(obj);
  if (value == -1 && PyErr_Occurred()) return 1;
  if (value < low || value > high) {
    PyErr_Format(PyExc_OverflowError, "argument %d: %lld does not fit the kernel's integer type", index, value);
    return 1;
  }
  *out = (uint64_t)value;
  return 0;
}

static int unsigned_of(PyObject *obj, uint64_t mask, uint64_t *out) {
  unsigned long long value = PyLong_AsUnsignedLongLongMask(obj);
  if (value == (unsigned long long)-1 && PyErr_Occurred()) return 1;
  *out = (uint64_t)value & mask;
  return 0;
}

static int float_of(PyObject *obj, char code, uint64_t *out) {
  double value = PyFloat_AsDouble(obj);
  if (value == -1.0 && PyErr_Occurred()) return 1;
  if (code == 'd') {
    memcpy(out, &value, sizeof value);
  } else if (code == 'e') {
    uint16_t half;
#if PY_VERSION_HEX < 0x030B00A2
    if (_PyFloat_Pack2(value, (unsigned char *)&half, 1) < 0) return 1;
#else
    if (PyFloat_Pack2(value, (char *)&half, 1) < 0) return 1;
#endif
    *out = half;
  } else {
    float single = (float)value;
    uint32_t bits;
    memcpy(&bits, &single, sizeof bits);
    *out = code == 'g' ? (bits >> 16) : bits; /* bf16: the high half, as Triton packs it */
  }
  return 0;
}

static int slot_of(char code, PyObject *obj, int index, uint64_t *out) {
  switch (code) {
    case 'p': return pointer_of(obj, index, out);
    case 'b': return integer_of(obj, index, INT8_MIN, UINT8_MAX, out);
    case 'h': return integer_of(obj, index, INT16_MIN, INT16_MAX, out);
    case 'i': return integer_of(obj, index, INT32_MIN, INT32_MAX, out);
    case 'L': return integer_of(obj, index, INT64_MIN, INT64_MAX, out);
    case 'B': return unsigned_of(obj, 0xffu, out);
    case 'H': return unsigned_of(obj, 0xffffu, out);
    case 'I': return unsigned_of(obj, 0xffffffffu, out);
    case 'K': return unsigned_of(obj, ~(uint64_t)0, out);
    default: return float_of(obj, code, out);
  }
}

static int call_hook(PyObject *hook, PyObject *metadata) {
  if (hook == Py_None) return 0;
  PyObject *result = PyObject_CallOneArg(hook, metadata);
  if (!result) return 1;
  Py_DECREF(result);
  return 0;
}

/* a C int, or OverflowError (never truncated: a grid cut down would launch too few programs) */
static int int_of(PyObject *obj, int *out) {
  long long value = PyLong_AsLongLong(obj);
  if (value == -1 && PyErr_Occurred()) return 1;
  if (value < INT_MIN || value > INT_MAX) {
    PyErr_Format(PyExc_OverflowError, "launch: %lld does not fit a C int", value);
    return 1;
  }
  *out = (int)value;
  return 0;
}

static int int_item(PyObject *tuple, Py_ssize_t k, int *out) { return int_of(PyTuple_GET_ITEM(tuple, k), out); }

/* self: the signature's codes (bytes) */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  const char *codes = PyBytes_AS_STRING(self);
  Py_ssize_t count = PyBytes_GET_SIZE(self);
  if (nargs != FIXED_ARGS + count) {
    PyErr_Format(PyExc_TypeError, "launch takes %zd arguments for this kernel, got %zd", FIXED_ARGS + count, nargs);
    return NULL;
  }
  if (ensure_context()) return NULL;
  int grid[3], warps, ctas, shared;
  for (int k = 0; k < 3; k++)
    if (int_of(args[k], &grid[k])) return NULL;
  uint64_t stream = PyLong_AsUnsignedLongLong(args[3]);
  uint64_t function = PyLong_AsUnsignedLongLong(args[4]);
  if (PyErr_Occurred()) return NULL;
  int cooperative = PyObject_IsTrue(args[5]), pdl = PyObject_IsTrue(args[6]);
  if (cooperative < 0 || pdl < 0) return NULL;
  PyObject *metadata = args[9];
  if (!PyTuple_Check(metadata) || PyTuple_GET_SIZE(metadata) != 3) {
    PyErr_SetString(PyExc_TypeError, "kernel metadata must be a tuple (num_warps, num_ctas, shared memory)");
    return NULL;
  }
  if (int_item(metadata, 0, &warps) || int_item(metadata, 1, &ctas) || int_item(metadata, 2, &shared)) return NULL;
  PyObject *launch_metadata = args[10], *enter = args[11], *exit_hook = args[12];
  if (call_hook(enter, launch_metadata)) return NULL;

  uint64_t slots[MAX_PARAMS + 2];
  void *params[MAX_PARAMS + 2];
  int used = 0;
  for (Py_ssize_t k = 0; k < count; k++) {
    if (codes[k] == 'c') continue;
    if (slot_of(codes[k], args[FIXED_ARGS + k], (int)k, &slots[used])) return NULL;
    params[used] = &slots[used];
    used++;
  }
  for (int k = 7; k <= 8; k++) { /* global and profile scratch: the last two parameters */
    if (pointer_of(args[k], -1, &slots[used])) return NULL;
    params[used] = &slots[used];
    used++;
  }

  if (grid[0] > 0 && grid[1] > 0 && grid[2] > 0) {
    CUlaunchAttribute attributes[4];
    memset(attributes, 0, sizeof attributes);
    unsigned attribute_count = 0;
    if (pdl) {
      attributes[attribute_count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attributes[attribute_count++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (cooperative) {
      attributes[attribute_count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attributes[attribute_count++].value.cooperative = 1;
    }
    if (ctas != 1) {
      attributes[attribute_count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attributes[attribute_count].value.clusterDim.x = ctas;
      attributes[attribute_count].value.clusterDim.y = 1;
      attributes[attribute_count++].value.clusterDim.z = 1;
      attributes[attribute_count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
      attributes[attribute_count++].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    }
    CUlaunchConfig config;
    config.gridDimX = grid[0] * ctas;
    config.gridDimY = grid[1];
    config.gridDimZ = grid[2];
    config.blockDimX = 32 * warps;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = shared;
    config.hStream = (CUstream)stream;
    config.attrs = attributes;
    config.numAttrs = attribute_count;
    CUresult status = CUDA_SUCCESS;
    Py_BEGIN_ALLOW_THREADS;
    if (ctas == 16) status = cuFuncSetAttribute((CUfunction)function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
    if (status == CUDA_SUCCESS) status = launch_ex(&config, (CUfunction)function, params, NULL);
    Py_END_ALLOW_THREADS;
    if (cuda_failed(status)) return NULL;
  }
  if (call_hook(exit_hook, launch_metadata)) return NULL;
  Py_RETURN_NONE;
}

static PyMethodDef launch_method = {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
                                    "Launch a kernel of this signature (see make_launch)."};

static PyObject *make_launch(PyObject *module, PyObject *codes) {
  if (!PyBytes_Check(codes)) {
    PyErr_SetString(PyExc_TypeError, "make_launch takes the signature's codes as bytes");
    return NULL;
  }
  const char *text = PyBytes_AS_STRING(codes);
  Py_ssize_t count = PyBytes_GET_SIZE(codes), params = 0;
  for (Py_ssize_t k = 0; k < count; k++) {
    if (!strchr("pcbhiLBHIKegfd", text[k]) || text[k] == '\0') {
      PyErr_Format(PyExc_ValueError, "make_launch: unknown argument code %c", text[k]);
      return NULL;
    }
    params += text[k] != 'c';
  }
  if (params > MAX_PARAMS) {
    PyErr_Format(PyExc_ValueError, "make_launch: %zd parameters, at most %d", params, MAX_PARAMS);
    return NULL;
  }
  return PyCFunction_NewEx(&launch_method, codes, NULL);
}

static PyMethodDef module_methods[] = {
    {"make_launch", make_launch, METH_O, "The launch function of one kernel signature."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "fuser_launch", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit_fuser_launch(void) {
  data_ptr_name = PyUnicode_InternFromString("data_ptr");
  if (!data_ptr_name) return NULL;
  void *library = dlopen("libcuda.so.1", RTLD_LAZY);
  if (library) launch_ex = (launch_ex_fn)dlsym(library, "cuLaunchKernelEx");
  if (!launch_ex) {
    PyErr_SetString(PyExc_ImportError, "fuser_launch: cuLaunchKernelEx not found in libcuda.so.1");
    return NULL;
  }
  return PyModule_Create(&module_def);
}
