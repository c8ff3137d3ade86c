#include "common/rapid_llm.cuh"
#if RL_DEVICE
__global__ void hello_kernel(int n) {
  if (threadIdx.x < n) printf("hello from thread %d of block %d\n", static_cast<int>(threadIdx.x),
                              static_cast<int>(blockIdx.x));
}
#endif
#if RL_HOST
__global__ void hello_kernel(int n);
void say_hello(int64_t n) { rl::launch(hello_kernel, 1, 32, 0, static_cast<int>(n)); }
RL_EXPORT(say_hello)
#endif
