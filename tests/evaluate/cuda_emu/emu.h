// A tiny CPU emulation of the CUDA features the scripted kernels use (see tests/cuda_emu/__init__.py):
// one std::thread per CUDA thread, blocks one after another, __syncthreads a std::barrier, warp
// shuffles through per-warp slots and barriers.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>
#include <algorithm>
#include <cstring>
#include <memory>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct float2 { float x, y; };
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
typedef void* cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidConfiguration = 9 };
static inline int cudaGetLastError() { return 0; }
static inline const char* cudaGetErrorString(int) { return "no error (emulated)"; }
thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
static std::barrier<>* emu_bar = nullptr;
static float emu_dyn_smem[64 * 1024];
#define __syncthreads() emu_bar->arrive_and_wait()
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
// Warp shuffles (blocks of whole warps): each lane posts its value, the warp meets at its barrier,
// reads its source lane's value, and meets again before the slots can be reused.
thread_local unsigned emu_tid;
static std::vector<std::unique_ptr<std::barrier<>>> emu_warp_bars;
static uint64_t emu_shfl_slot[1024];
template <class T> static inline T emu_shfl(T v, unsigned src_lane) {
    static_assert(sizeof(T) <= sizeof(uint64_t));
    const unsigned warp = emu_tid / 32;
    std::memcpy(&emu_shfl_slot[emu_tid], &v, sizeof(T));
    emu_warp_bars[warp]->arrive_and_wait();
    T r;
    std::memcpy(&r, &emu_shfl_slot[warp * 32 + src_lane], sizeof(T));
    emu_warp_bars[warp]->arrive_and_wait();
    return r;
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int mask) { return emu_shfl(v, (emu_tid % 32) ^ mask); }
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned delta) {
    const unsigned lane = emu_tid % 32;
    return emu_shfl(v, lane + delta < 32 ? lane + delta : lane);
}
static void emu_launch(dim3 grid, dim3 block, size_t, std::function<void()> body) {
    const unsigned nt = block.x * block.y * block.z;
    for (unsigned bz = 0; bz < grid.z; ++bz) for (unsigned by = 0; by < grid.y; ++by) for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> bar(nt);
        emu_bar = &bar;
        emu_warp_bars.clear();
        for (unsigned w = 0; w * 32 < nt; ++w)
            emu_warp_bars.push_back(std::make_unique<std::barrier<>>(std::min(32u, nt - w * 32)));
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < nt; ++t)
            ts.emplace_back([&, t] {
                blockIdx = dim3(bx, by, bz); blockDim = block; gridDim = grid;
                threadIdx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
                emu_tid = t;
                body();
                bar.arrive_and_drop();
                emu_warp_bars[t / 32]->arrive_and_drop();
            });
        for (auto& th : ts) th.join();
    }
}
