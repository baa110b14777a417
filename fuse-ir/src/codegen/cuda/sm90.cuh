// fuse's sm_90 header: the Hopper instructions more than one kernel source uses, exported as
// `fuse_ir::codegen::SM90_HEADER` (after `CUDA_PRELUDE`, in kernels built for sm_90 or sm_90a). It holds:
//   - mbarriers: init, arrive, arrive with an expected transaction count, arrive on a peer block's barrier,
//     try_wait / wait on a phase, inval;
//   - thread-block clusters: this block's rank, the cluster barrier, mapa (a peer block's shared memory) and
//     loads from it;
//   - bulk copies global -> shared completing on an mbarrier (plain and 2-D tensor maps, multicast), L2
//     prefetches, st.async into a peer block's shared memory, and the proxy fence that orders them after
//     ordinary accesses.
// Addresses: `bar`, `dst` and `addr` are 32-bit shared-memory addresses of this block (the prelude's
// fuse_smem_addr); `remote` ones are shared::cluster addresses (fuse_cluster_map). Call these only in code
// compiled for sm_90 (an unused inline function emits nothing, so a source built for sm_80 may include this).
//
// Global pointers reach the instructions unconverted (templates on the pointee), as in the prelude.
//
// Self-contained (it includes nothing). Naming as the prelude's: `fuse_<what>`, grouped by prefix
// (fuse_mbar_*, fuse_cluster_*, fuse_bulk_*, fuse_tma_*, fuse_st_async_*).
#ifndef FUSE_SM90_ONCE
#define FUSE_SM90_ONCE

// ---- mbarriers ----------------------------------------------------------------------------------------------

// A barrier whose phase completes after `count` arrivals (and, once armed, the transaction bytes it expects).
__device__ __forceinline__ void fuse_mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes this thread's barrier initialisations visible to the cluster (and to the async proxy) before any use.
__device__ __forceinline__ void fuse_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also expects `bytes` more of transactions (bulk copies, st.async) in the current phase.
__device__ __forceinline__ void fuse_mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void fuse_mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Whether the phase of parity `parity` has completed (a fresh barrier counts parity 1 as completed); returns
// after a bounded time either way.
__device__ __forceinline__ bool fuse_mbar_try_wait(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
}
// Ends a barrier's life (every phase it was armed for complete), so that its word may be initialised afresh:
// a task's barriers in static shared memory, set up again by the next task of the same kernel.
__device__ __forceinline__ void fuse_mbar_inval(unsigned bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// Returns once the phase of parity `parity` has completed.
__device__ __forceinline__ void fuse_mbar_wait(unsigned bar, unsigned parity) {
  while (!fuse_mbar_try_wait(bar, parity)) {
  }
}

// ---- thread-block clusters ----------------------------------------------------------------------------------

// This block's rank in its cluster.
__device__ __forceinline__ unsigned fuse_cluster_rank() {
  unsigned r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Every block of the cluster here; each one's memory operations before it visible to the others after it.
__device__ __forceinline__ void fuse_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The shared::cluster address of `addr` in the cluster's block `rank` (the same offset in its shared memory).
__device__ __forceinline__ unsigned fuse_cluster_map(unsigned addr, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  return remote;
}
__device__ __forceinline__ float fuse_cluster_load_f32(unsigned remote) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}
// One arrival (release at cluster scope) on the barrier at `bar`'s offset in the cluster's block `rank`.
__device__ __forceinline__ void fuse_mbar_arrive_remote(unsigned bar, unsigned rank) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(fuse_cluster_map(bar, rank))
               : "memory");
}

// ---- bulk copies and st.async -------------------------------------------------------------------------------

// Orders this thread's earlier ordinary accesses to shared memory before later bulk copies into it (the async
// proxy).
__device__ __forceinline__ void fuse_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared at `dst`, completing on `bar`
// (which expects them: fuse_mbar_expect_tx).
template <class T>
__device__ __forceinline__ void fuse_bulk_copy(unsigned dst, const T* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// `bytes` (a multiple of 16) of global memory towards L2; nothing to wait for.
template <class T>
__device__ __forceinline__ void fuse_bulk_prefetch_l2(const T* src, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
// The box at coordinates (c0, c1) of the 2-D tensor map at `map` (a CUtensorMap in global or parameter memory,
// as any 64-byte-aligned type) into shared memory at `dst`, completing on `bar`.
template <class Map>
__device__ __forceinline__ void fuse_tma_load_2d(unsigned dst, const Map* map, int c0, int c1, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// The same box into the same offset of every block of the cluster in the mask `blocks` (bit r: rank r),
// completing on each one's barrier at `bar`'s offset.
template <class Map>
__device__ __forceinline__ void fuse_tma_load_2d_multicast(unsigned dst, const Map* map, int c0, int c1, unsigned bar,
                                                           unsigned short blocks) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(blocks)
      : "memory");
}
// 16 bytes (x, y, z, w) or 4 bytes into a peer block's shared memory at `remote`, completing as transaction bytes
// on its barrier at `remote_bar` (both shared::cluster addresses: fuse_cluster_map).
__device__ __forceinline__ void fuse_st_async_v4(unsigned remote, unsigned x, unsigned y, unsigned z, unsigned w,
                                                 unsigned remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   remote),
               "r"(x), "r"(y), "r"(z), "r"(w), "r"(remote_bar)
               : "memory");
}
__device__ __forceinline__ void fuse_st_async_b32(unsigned remote, unsigned v, unsigned remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote), "r"(v),
               "r"(remote_bar)
               : "memory");
}

#endif  // FUSE_SM90_ONCE
