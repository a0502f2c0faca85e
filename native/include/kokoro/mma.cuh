// Tensor-core building blocks shared by the FP16 kernels (the tensor-core convs'
// implicit-GEMM convs, linear.cu's split-operand linear): 16-byte cp.async
// copies into shared memory, ldmatrix, and the m16n8k16 mma.sync (sm_80 and
// newer); Hopper's wgmma (sm_90a device code only) with its shared-memory
// descriptors, and its bulk tensor copies (TMA) with their mbarriers. Thin
// wrappers over one PTX instruction each.
#pragma once

#include <cstdint>

#include <cuda.h>  // CUtensorMap
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kokoro/check.h"

namespace kokoro::ops {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte cp.async, zero filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(__half* dst, const __half* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Four 8 x 8 FP16 matrices from shared memory; lane l gives the address of
// row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// acc += a (16 x 16, row) @ b (16 x 8, col), FP16 in, fp32 accumulate.
__device__ __forceinline__ void mma_f16(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Whether the current device runs this build's sm_90a kernels: SASS for
// sm_90a (CMake defines KOKORO_SM90A when the architectures include 90a)
// runs on compute capability 9.0 only.
inline bool device_runs_wgmma() {
#ifdef KOKORO_SM90A
    int device = 0, major = 0, minor = 0;
    KOKORO_CUDA_CHECK(cudaGetDevice(&device));
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    KOKORO_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return major == 9 && minor == 0;
#else
    return false;
#endif
}

// wgmma operand tiles in shared memory: K-major rows of 64 halves (128
// bytes) with the 128-byte swizzle (16-byte piece p of row r at slot
// p ^ (r % 8)), 8-row groups 1024 bytes apart, each tile's base 1024-byte
// aligned (where the swizzle pattern repeats).
constexpr int kSwizzleAlign = 1024;

// The first kSwizzleAlign-aligned address of a block's dynamic shared
// memory (which asks for kSwizzleAlign bytes more than its tiles need).
__device__ __forceinline__ __half* swizzle_aligned(uint4* smem) {
    char* const raw = reinterpret_cast<char*>(smem);
    return reinterpret_cast<__half*>(
        raw + (kSwizzleAlign - smem_addr(raw) % kSwizzleAlign) % kSwizzleAlign);
}

// Orders this thread's earlier shared-memory writes (cp.async copies land
// through the generic proxy) before reads through the async proxy (wgmma);
// a barrier after it publishes them to the whole block (sm_90 and newer).
__device__ __forceinline__ void fence_async_proxy() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The shared-memory descriptor of such a tile: start address, leading byte
// offset unused with swizzling (1), stride byte offset 1024 (between 8-row
// groups), 128-byte swizzle (mode 1 in bits 62-63); addresses in 16-byte
// units. Advancing K by 16 halves is +32 bytes inside the swizzled rows.
__device__ __forceinline__ uint64_t swizzled_descriptor(uint32_t addr) {
    return uint64_t((addr & 0x3FFFF) >> 4) | uint64_t(1) << 16 |
           uint64_t(kSwizzleAlign >> 4) << 32 | uint64_t(1) << 62;
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending committed wgmma groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator registers across the async
// wgmma window.
template <int kRegs>
__device__ __forceinline__ void fence_accumulators(float (&d)[kRegs]) {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The 64 accumulators of an m64n128 wgmma: their list in its asm text (as
// operands %0 .. %63) and their operands.
#define KOKORO_WGMMA_D64_LIST \
    "{%0, %1, %2, %3, %4, %5, %6, %7, " \
    "%8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, " \
    "%40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63}"
#define KOKORO_WGMMA_D64_OPERANDS(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
    "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
    "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
    "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
    "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
    "+f"(d[63])

// d (64 x 128 over the warpgroup) += a (64 x 16, registers) @ B (16 x 128,
// descriptor), FP16 in, fp32 accumulate; asynchronous until wgmma_wait.
// d[4 j + 2 h + e] of warp w, lane l: row 16 w + l / 4 + 8 h, column
// 8 j + 2 (l % 4) + e (every wgmma below).
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const uint32_t (&a)[4],
                                                 uint64_t b_desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " KOKORO_WGMMA_D64_LIST
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                 : KOKORO_WGMMA_D64_OPERANDS(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}

// The same with A (64 x 16, K-major in the 128-byte swizzle) from shared
// memory by descriptor too.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t a_desc,
                                                 uint64_t b_desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " KOKORO_WGMMA_D64_LIST
                 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : KOKORO_WGMMA_D64_OPERANDS(d)
                 : "l"(a_desc), "l"(b_desc), "r"(1));
}

#undef KOKORO_WGMMA_D64_OPERANDS
#undef KOKORO_WGMMA_D64_LIST

// The same with a 32-wide B.
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], const uint32_t (&a)[4],
                                                uint64_t b_desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15},"
        " {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}

// d (64 x 64) += A (64 x 16) @ B (16 x 64), both operands from shared
// memory by descriptor; d = A @ B where accumulate is false (d not read).
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t a_desc,
                                                uint64_t b_desc, bool accumulate = true) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31},"
        " %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)));
}

// Bulk tensor copies (TMA) into shared memory, completed on an mbarrier: one
// thread issues a whole tile, the barrier counts its bytes in.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals)
                 : "memory");
}
// Makes initialised barriers visible to the async proxy (the copies); a
// block barrier after it publishes them to the block's threads.
__device__ __forceinline__ void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// This thread's arrival, announcing `bytes` more to come through copies.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
// Waits until the barrier's phase of the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "wait:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait;\n}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}
// The box at coordinates (c0, c1, c2) of the 3-D tensor map into dst (as
// tma_load_4d).
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap& map, uint64_t* bar,
                                            int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(&map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}
// The box at coordinates (c0, c1, c2, c3) of the 4-D tensor map into dst,
// completing `bar`'s transaction bytes; the map a __grid_constant__ parameter.
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap& map, uint64_t* bar,
                                            int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(&map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2),
        "r"(c3)
        : "memory");
}
#endif

}  // namespace kokoro::ops
