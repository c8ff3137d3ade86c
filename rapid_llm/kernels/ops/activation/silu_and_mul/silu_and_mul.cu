// rapid_llm row: {"name": "jit/silu_and_mul", "op": "silu_and_mul", "fn": "silu_and_mul", "dtypes": ["bf16", "fp16", "fp32"], "golden": {"verified": true, "max_abs_diff": 0.0, "baseline": "native/silu_and_mul", "per_dtype": [["bf16", 0.0], ["fp16", 0.0], ["fp32", 0.0]]}, "graph_safe": true, "description": "CTAs over (chunk of I, tokens), 128-bit loads of both halves, the native fp32 recipe", "out": "half_last_dim", "layouts": ["contiguous", "rows"]}
// silu_and_mul: out[..., i] = silu(x[..., i]) * x[..., I + i] for x [..., 2I], out [..., I]; fp16 / bf16 / fp32.
//
// Numerics: the native row's, bit for bit on CUDA. Both halves are upcast to
// fp32; silu(a) = a / (1 + expf(-a)) with the accurate expf (at most 2 ulp;
// the source is built without fast math, so expf is not __expf) and IEEE
// division; times b in fp32; rounded once (to nearest even) to the output type.
// That is exactly torch's silu kernel on the fp32 upcast followed by torch.mul,
// so this row and native/silu_and_mul agree exactly. __expf would have been
// within tolerance too (its error grows with |a|: ~1e-5 relative at |a| = 88),
// but the accurate expf costs a few FMAs per element, which a kernel this
// memory bound does not notice (measured: no difference on H200).
//
// Rows: x and out are each addressed at their own row stride (in elements), so
// x = randn(T, 4I)[:, :2I] (vLLM's and FlashInfer's strided case) runs without a
// copy; the last dim must be contiguous and the leading dims one uniform stride.
//
// Layout (silu_and_mul_wave_kernel, every token count up to gridDim.y's 65535 rows of at least one CTA of
// items): one item per thread, a row per blockIdx.y, a compile-time CTA width, where an item is 4, 8 or 16
// bytes (the narrowest whose count still fits one wave of thread slots, else 16) when I, both row strides
// and both pointers allow it. Measured on an H200 (bf16, I = 14336, cold L2): from T = 256 up, one 16-byte
// item a thread over as many CTAs as it takes is 3-9 % faster than the kernel below with two items a
// thread over half the CTAs (T = 16384: 324.4 against 336.6 us; Liger-Kernel 326.4), and likewise at
// I = 8192 and 28672.
//
// Anything else (a tail such as I = 4097, a view starting mid-vector, a row stride that leaves rows off
// the 16-byte grid, rows shorter than a CTA, more than 65535 rows): silu_and_mul_vec_kernel or
// silu_and_mul_scalar_kernel, CTAs of by rows x bx threads over (chunk of I, rows), numbered
// chunk-fastest so the CTAs in flight walk rows in address order; each thread issues the loads of all
// its items (both halves) before using any, kPerThreadDeep of them when the work overfills the GPU.
//
// Why one item per thread at few tokens too: a decode step is latency-bound, and on an H200 ncu showed
// where the time went (T = 1 and 16 bf16, against torch.compile's kernel: 3.39 against 2.37 us and 3.71
// against 2.82 us at base clocks, before this kernel): the same instructions per element spread over 4x
// fewer warps (16-byte items, 8 elements each with the accurate expf and an IEEE division), and stalls on
// kernel-parameter loads (immediate-constant misses) before the first load. So the item is as narrow as
// one wave allows (T = 1 at I = 14336 bf16: 56 CTAs of 4-byte items, where the general kernel had 14 of
// 16-byte ones), a thread finds its row from blockIdx.y and its item from the compile-time CTA width (no
// blockDim, no division), and the parameters fit one 64-byte constant line. What is left against
// torch.compile at T <= 128 is the division: Inductor's kernel divides with Triton's fp32 `/`, which
// lowers to an approximate division (ncu, T = 16: 258 K instructions against this kernel's 290 K), and
// this kernel with __fdividef measured level with it (4.38 against 4.37 us at T = 1, 7.52 against 8.06
// for the IEEE division at T = 128). This row keeps the IEEE division, so it stays bit for bit the
// native row. The wave kernel computes an item in two passes (silu_mul_item says why): bitwise the same,
// on an H200 1-3 % faster at T = 128 (Llama-3.2-1B, -8B, -70B shapes) and level elsewhere; the Triton row
// stayed ahead at -8B T = 128 (8.00 against 8.11 us; benchmarks/results/logs/launch_variants_silu_and_mul_two_pass.log).
#include "common/rapid_llm.cuh"

constexpr int kVecBytes = 16;         // one 128-bit load or store
constexpr int kThreads = 128;         // threads per CTA (bx * by) of the general kernels
constexpr int kPerThreadDeep = 2;     // items per thread of the general kernels when the work fills the GPU

#if RL_DEVICE
// silu(a) * b in fp32: the native row's recipe (see the top of the file); the caller rounds once.
__device__ __forceinline__ float silu_mul_f32(float a, float b) { return a / (1.0f + expf(-a)) * b; }

template <typename T>
__device__ __forceinline__ T silu_mul(T a, T b) {
  return static_cast<T>(silu_mul_f32(static_cast<float>(a), static_cast<float>(b)));
}

// One 32-bit word of a and of b -> one word of out: one fp32, or two 16-bit values unpacked and
// packed (rounded to nearest) by one instruction each.
template <typename T>
__device__ __forceinline__ uint32_t silu_mul_word(uint32_t a, uint32_t b);
template <>
__device__ __forceinline__ uint32_t silu_mul_word<float>(uint32_t a, uint32_t b) {
  return __float_as_uint(silu_mul_f32(__uint_as_float(a), __uint_as_float(b)));
}
template <>
__device__ __forceinline__ uint32_t silu_mul_word<__half>(uint32_t a, uint32_t b) {
  const float2 fa = __half22float2(*reinterpret_cast<const __half2*>(&a));
  const float2 fb = __half22float2(*reinterpret_cast<const __half2*>(&b));
  const __half2 y = __floats2half2_rn(silu_mul_f32(fa.x, fb.x), silu_mul_f32(fa.y, fb.y));
  return *reinterpret_cast<const uint32_t*>(&y);
}
template <>
__device__ __forceinline__ uint32_t silu_mul_word<__nv_bfloat16>(uint32_t a, uint32_t b) {
  const float2 fa = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&a));
  const float2 fb = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&b));
  const __nv_bfloat162 y = __floats2bfloat162_rn(silu_mul_f32(fa.x, fb.x), silu_mul_f32(fa.y, fb.y));
  return *reinterpret_cast<const uint32_t*>(&y);
}

// Where a thread works: CTA blockIdx.x is chunk (blockIdx.x % chunks) of the row tile (blockIdx.x / chunks),
// and a tile is blockDim.y rows (several only when rows are shorter than a CTA). 32-bit: the launcher
// checks that I and the CTA count fit.
struct Tile {
  int64_t token;  // the row this thread works on
  int64_t first;  // its first item in that row
};
template <int kPerThread>
__device__ __forceinline__ Tile tile_of(int64_t row_items) {
  const unsigned span = blockDim.x * kPerThread;
  const unsigned chunks = (static_cast<unsigned>(row_items) + span - 1) / span;
  const unsigned tile = blockIdx.x / chunks;
  const unsigned chunk = blockIdx.x - tile * chunks;
  return {static_cast<int64_t>(tile) * blockDim.y + threadIdx.y, static_cast<int64_t>(chunk) * span + threadIdx.x};
}

// 16-byte items: both pointers aligned and I and the row strides multiples of kN, so every row's a, b and
// out start on a vector.
// Plain loads and stores: the streaming hint (__ldcs) measured 1-4 % slower on H200, and a plain store
// leaves out in L2 for the GEMM that reads it next.
template <typename T, int kPerThread>
__global__ void __launch_bounds__(kThreads) silu_and_mul_vec_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                                    int64_t tokens, int64_t inner,
                                                                    int64_t out_stride, int64_t x_stride) {
  static_assert(kVecBytes % sizeof(T) == 0, "the element size must divide 16 bytes");
  constexpr int kN = kVecBytes / static_cast<int>(sizeof(T));
  const int64_t row_vecs = inner / kN;
  const Tile tile = tile_of<kPerThread>(row_vecs);
  const int64_t t = tile.token;
  if (t >= tokens) return;
  rl::wait_for_prior_grids();
  const uint4* __restrict__ a_v = reinterpret_cast<const uint4*>(x + t * x_stride);
  const uint4* __restrict__ b_v = a_v + row_vecs;
  uint4* __restrict__ out_v = reinterpret_cast<uint4*>(out + t * out_stride);
  const int64_t first = tile.first;
  uint4 a[kPerThread], b[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {  // issue every load before using any
    const int64_t j = first + static_cast<int64_t>(u) * blockDim.x;
    if (j < row_vecs) {
      a[u] = a_v[j];
      b[u] = b_v[j];
    }
  }
  rl::allow_dependent_grids();
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int64_t j = first + static_cast<int64_t>(u) * blockDim.x;
    if (j < row_vecs) {
      out_v[j] = make_uint4(silu_mul_word<T>(a[u].x, b[u].x), silu_mul_word<T>(a[u].y, b[u].y),
                            silu_mul_word<T>(a[u].z, b[u].z), silu_mul_word<T>(a[u].w, b[u].w));
    }
  }
}

// A word-sized view of one item: kItemBytes / 4 32-bit words, loaded and stored as one access.
template <int kItemBytes>
struct alignas(kItemBytes) Words {
  uint32_t w[kItemBytes / 4];
};

// The elements of one 32-bit word as fp32, and back (rounded to nearest even): one fp32 or two 16-bit values.
template <typename T>
struct WordLanes;
template <>
struct WordLanes<float> {
  static constexpr int kN = 1;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) { f[0] = __uint_as_float(w); }
  static __device__ __forceinline__ uint32_t pack(const float* f) { return __float_as_uint(f[0]); }
};
template <>
struct WordLanes<__half> {
  static constexpr int kN = 2;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) {
    const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w));
    f[0] = v.x;
    f[1] = v.y;
  }
  static __device__ __forceinline__ uint32_t pack(const float* f) {
    const __half2 y = __floats2half2_rn(f[0], f[1]);
    return *reinterpret_cast<const uint32_t*>(&y);
  }
};
template <>
struct WordLanes<__nv_bfloat16> {
  static constexpr int kN = 2;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
    f[0] = v.x;
    f[1] = v.y;
  }
  static __device__ __forceinline__ uint32_t pack(const float* f) {
    const __nv_bfloat162 y = __floats2bfloat162_rn(f[0], f[1]);
    return *reinterpret_cast<const uint32_t*>(&y);
  }
};

// silu_mul_f32 over every element of an item, the same operations in two passes: every expf first, then every
// division. Element by element, each IEEE division's range check (FCHK and a branch to its slow path) closed a
// basic block, so the next element's expf could not start before it: one chain of about 20 dependent
// instructions and two MUFU round trips per element. ncu on an H200 (Llama-3-8B T = 128) had this kernel at 6.11 us
// against the Triton row's 5.34 with the same instruction count and 1.26 short-scoreboard stalls per issue against
// 0.52 (benchmarks/results/logs/profile_vs_compile_silu_and_mul_nvidia_h200.log). In two passes the expfs overlap.
template <typename T, int kWords>
__device__ __forceinline__ Words<kWords * 4> silu_mul_item(const Words<kWords * 4>& a, const Words<kWords * 4>& b) {
  using L = WordLanes<T>;
  constexpr int kE = kWords * L::kN;
  float fa[kE], fb[kE], d[kE];
#pragma unroll
  for (int k = 0; k < kWords; ++k) {
    L::unpack(a.w[k], fa + k * L::kN);
    L::unpack(b.w[k], fb + k * L::kN);
  }
#pragma unroll
  for (int i = 0; i < kE; ++i) {
    d[i] = 1.0f + expf(-fa[i]);
    asm volatile("" : "+f"(d[i]));  // every denominator now, before any division's branch (the compiler sank some)
  }
#pragma unroll
  for (int i = 0; i < kE; ++i) fa[i] = fa[i] / d[i] * fb[i];
  Words<kWords * 4> y;
#pragma unroll
  for (int k = 0; k < kWords; ++k) y.w[k] = L::pack(fa + k * L::kN);
  return y;
}

// Few tokens: kItems items per thread (kCta apart), a row per blockIdx.y, kCta * kItems items of it per CTA
// (see the file comment). Items are kItemBytes wide: I and both row strides are multiples of the item, both
// pointers aligned to it. The launcher takes one item a thread: on an H200 two (the Triton row's tile, in
// either grid order) measured 4-11 % slower at T = 128 (Llama-3.2-1B, -8B and -70B shapes), up to 8 % at
// T = 16-1024, 2-3 % at T = 1; plain loads (ld.global, not the read-only path) measured level
// (benchmarks/results/logs/launch_variants_silu_and_mul_items.log).
template <typename T, int kItemBytes, int kCta, int kItems>
__global__ void __launch_bounds__(kCta) silu_and_mul_wave_kernel(const T* __restrict__ x, T* __restrict__ out,
                                                                 int64_t x_stride, int64_t out_stride,
                                                                 int row_items) {
  using Item = Words<kItemBytes>;
  const int j0 = static_cast<int>(blockIdx.x) * (kCta * kItems) + static_cast<int>(threadIdx.x);
  if (j0 >= row_items) return;
  const int64_t t = blockIdx.y;
  const Item* __restrict__ a_v = reinterpret_cast<const Item*>(x + t * x_stride);
  Item* __restrict__ out_v = reinterpret_cast<Item*>(out + t * out_stride);
  rl::wait_for_prior_grids();
  Item a[kItems], b[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int j = j0 + i * kCta;
    if (i == 0 || j < row_items) {
      a[i] = a_v[j];
      b[i] = a_v[j + row_items];
    }
  }
  rl::allow_dependent_grids();
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int j = j0 + i * kCta;
    if (i > 0 && j >= row_items) break;
    out_v[j] = silu_mul_item<T, kItemBytes / 4>(a[i], b[i]);
  }
}

// Any I and alignment: one element per item, the same tiling (consecutive threads, consecutive elements).
template <typename T, int kPerThread>
__global__ void __launch_bounds__(kThreads) silu_and_mul_scalar_kernel(T* __restrict__ out,
                                                                       const T* __restrict__ x, int64_t tokens,
                                                                       int64_t inner, int64_t out_stride,
                                                                       int64_t x_stride) {
  const Tile tile = tile_of<kPerThread>(inner);
  const int64_t t = tile.token;
  if (t >= tokens) return;
  rl::wait_for_prior_grids();
  const T* __restrict__ a_row = x + t * x_stride;
  const T* __restrict__ b_row = a_row + inner;
  T* __restrict__ out_row = out + t * out_stride;
  const int64_t first = tile.first;
  T a[kPerThread], b[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int64_t j = first + static_cast<int64_t>(u) * blockDim.x;
    if (j < inner) {
      a[u] = a_row[j];
      b[u] = b_row[j];
    }
  }
  rl::allow_dependent_grids();
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int64_t j = first + static_cast<int64_t>(u) * blockDim.x;
    if (j < inner) out_row[j] = silu_mul(a[u], b[u]);
  }
}
#endif

#if RL_HOST
#include <algorithm>

// The kernels this launcher starts, declared (the device pass defines them).
template <typename T, int kPerThread>
__global__ void silu_and_mul_vec_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t tokens, int64_t inner,
                                        int64_t out_stride, int64_t x_stride);
template <typename T, int kPerThread>
__global__ void silu_and_mul_scalar_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t tokens,
                                           int64_t inner, int64_t out_stride, int64_t x_stride);
template <typename T, int kItemBytes, int kCta, int kItems>
__global__ void silu_and_mul_wave_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t x_stride,
                                         int64_t out_stride, int row_items);

// One launch of silu_and_mul_wave_kernel: kCta threads of kItems items a CTA, a row per blockIdx.y.
template <typename T, int kItemBytes, int kCta, int kItems>
void launch_wave_cta(const T* x, T* out, int64_t x_stride, int64_t out_stride, int row_items, int64_t tokens) {
  const dim3 grid(static_cast<unsigned>(rl::cdiv(row_items, kCta * kItems)), static_cast<unsigned>(tokens));
  rl::launch_dependent(silu_and_mul_wave_kernel<T, kItemBytes, kCta, kItems>, grid, dim3(kCta), 0, x, out,
                       x_stride, out_stride, row_items);
}

// CTA width of silu_and_mul_wave_kernel: 256 threads once there are items for a full CTA on every SM, else
// 128, so few items still spread over many SMs (the shapes Inductor's launch heuristics choose here: at
// I = 14336 bf16, 56 CTAs of 128 at T = 1, 448 of 256 at T = 16).
template <typename T, int kItemBytes>
void launch_wave(const T* x, T* out, int64_t x_stride, int64_t out_stride, int row_items, int64_t tokens) {
  if (tokens * row_items >= int64_t{256} * rl::sm_count()) {
    launch_wave_cta<T, kItemBytes, 256, 1>(x, out, x_stride, out_stride, row_items, tokens);
  } else {
    launch_wave_cta<T, kItemBytes, 128, 1>(x, out, x_stride, out_stride, row_items, tokens);
  }
}

inline bool aligned_to(const void* p, int64_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }
inline bool aligned16(const void* p) { return aligned_to(p, kVecBytes); }

// The item width (4, 8 or 16 bytes) of silu_and_mul_wave_kernel for this call, or 0 where it does not apply:
// the narrowest width that I, both row strides and both pointers allow whose items, over all rows, fit in one
// wave of thread slots, else 16 bytes; rows of at least one CTA of items, and few enough for gridDim.y.
inline int wave_item_bytes(const void* x, const void* out, int64_t inner, int64_t x_stride, int64_t out_stride,
                           int64_t tokens, int64_t esize, int64_t thread_slots) {
  if (tokens > 65535) return 0;
  for (int bytes = 4; bytes <= kVecBytes; bytes *= 2) {
    if (bytes < esize) continue;
    const int64_t n = bytes / esize;  // elements per item
    if (inner % n || x_stride % n || out_stride % n || !aligned_to(x, bytes) || !aligned_to(out, bytes)) return 0;
    const int64_t row_items = inner / n;
    if (row_items < kThreads || row_items > INT32_MAX) return 0;
    if (tokens * row_items <= thread_slots || bytes == kVecBytes) return bytes;
  }
  return 0;
}


inline int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

void silu_and_mul(rl::Tensor out, rl::Tensor x) {
  // Step 1: validate. The shape facts come first: they hold on any device (a CPU build tests them).
  RL_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0,
           "silu_and_mul: the input's last dim must be even ([..., 2I]), got ", x.shape_str());
  const int64_t inner = x.size(-1) / 2;
  bool halved = out.dim() == x.dim() && out.size(-1) == inner;
  for (int64_t d = 0; halved && d + 1 < x.dim(); ++d) halved = out.size(d) == x.size(d);
  RL_CHECK(halved, "silu_and_mul: out must be x's shape with the last dim halved, got out ", out.describe(),
           " for x ", x.describe());
  RL_CHECK(out.dtype() == x.dtype(), "silu_and_mul: out and x must have one dtype, got out ", out.describe(),
           " and x ", x.describe());
  const int64_t x_stride = rl::row_stride("silu_and_mul", "x", x);  // an empty tensor passes: torch calls it contiguous
  const int64_t out_stride = rl::row_stride("silu_and_mul", "out", out);
  rl::check_cuda("silu_and_mul", {out, x});

  // Step 2: extract. An empty tensor launches nothing.
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t tokens = n / inner;
  const int64_t thread_slots = rl::resident_threads();

  // Step 3: launch on torch's current stream; rl::launch_dependent checks every launch.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, "silu_and_mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x_p = x.data<T>();
    T* out_p = out.data<T>();
    const int64_t esize = x.element_size();  // T is incomplete in the host pass
    const int item_bytes = wave_item_bytes(x_p, out_p, inner, x_stride, out_stride, tokens, esize, thread_slots);
    if (item_bytes) {
      const int row_items = static_cast<int>(inner * esize / item_bytes);
      if (item_bytes == 4) launch_wave<T, 4>(x_p, out_p, x_stride, out_stride, row_items, tokens);
      else if (item_bytes == 8) launch_wave<T, 8>(x_p, out_p, x_stride, out_stride, row_items, tokens);
      else launch_wave<T, kVecBytes>(x_p, out_p, x_stride, out_stride, row_items, tokens);
      return;
    }
    const int64_t vec_n = kVecBytes / esize;
    const bool vec = inner % vec_n == 0 && x_stride % vec_n == 0 && out_stride % vec_n == 0 && aligned16(x_p) &&
                     aligned16(out_p);
    const int64_t row_items = vec ? inner / vec_n : inner;
    // A row shorter than a CTA shares it with the next rows: bx threads along a row, by rows.
    const int64_t bx = std::min<int64_t>(next_pow2(row_items), kThreads);
    const int64_t by = kThreads / bx;
    // Deep (several items per thread) only when one item per thread would overfill the GPU.
    const bool deep = tokens * row_items > thread_slots && row_items > bx;
    const int64_t per_thread = deep ? kPerThreadDeep : 1;
    const int64_t ctas = rl::cdiv(tokens, by) * rl::cdiv(row_items, bx * per_thread);
    RL_CHECK(ctas < (int64_t{1} << 31) && inner < (int64_t{1} << 31), "silu_and_mul: x ", x.describe(),
             " needs ", ctas, " CTAs, more than one CUDA grid holds");
    const dim3 grid(static_cast<unsigned>(ctas));
    const dim3 block(static_cast<unsigned>(bx), static_cast<unsigned>(by));
    auto go = [&](auto kernel) {
      rl::launch_dependent(kernel, grid, block, 0, out_p, x_p, tokens, inner, out_stride, x_stride);
    };
    if (vec && deep) {
      go(silu_and_mul_vec_kernel<T, kPerThreadDeep>);
    } else if (vec) {
      go(silu_and_mul_vec_kernel<T, 1>);
    } else if (deep) {
      go(silu_and_mul_scalar_kernel<T, kPerThreadDeep>);
    } else {
      go(silu_and_mul_scalar_kernel<T, 1>);
    }
  });
}
RL_EXPORT(silu_and_mul, "out[..., i] = silu(x[..., i]) * x[..., I + i], x [..., 2I] (out-first launcher)")
#endif
