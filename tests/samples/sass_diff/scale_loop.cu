template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i < n; i += (long)gridDim.x * blockDim.x) {
    out[i] = (T)((float)in[i] * factor);
  }
}
template __global__ void scale_kernel<float>(float*, const float*, float, long);
