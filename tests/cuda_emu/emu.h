// A tiny CPU emulation of the CUDA features the scripted kernels use (see tests/cuda_emu/__init__.py):
// one std::thread per CUDA thread, blocks one after another, __syncthreads a std::barrier.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>
#include <algorithm>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
typedef void* cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidConfiguration = 9 };
static inline int cudaGetLastError() { return 0; }
thread_local dim3 threadIdx, blockIdx, blockDim;
static std::barrier<>* emu_bar = nullptr;
static float emu_dyn_smem[64 * 1024];
#define __syncthreads() emu_bar->arrive_and_wait()
template <class T> static inline T __ldg(const T* p) { return *p; }
static void emu_launch(dim3 grid, dim3 block, size_t, std::function<void()> body) {
    const unsigned nt = block.x * block.y * block.z;
    for (unsigned bz = 0; bz < grid.z; ++bz) for (unsigned by = 0; by < grid.y; ++by) for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> bar(nt);
        emu_bar = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < nt; ++t)
            ts.emplace_back([&, t] {
                blockIdx = dim3(bx, by, bz); blockDim = block;
                threadIdx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
                body();
                bar.arrive_and_drop();
            });
        for (auto& th : ts) th.join();
    }
}
