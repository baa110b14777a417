// What a hand-off costs inside a thread-block cluster, for the persistent decode step's next design
// (docs/persistent-step.md): the fused design's all-to-all hand-offs go through L2 across 132 blocks and cost
// 1-2 us each; a cluster's blocks can hand values over in distributed shared memory instead.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a cluster_handoff.cu -o cluster_handoff
// Then how fast 16, 32, 66 and 132 blocks stream weights by bulk copies (a cluster of 16 would stream a layer),
// and a decode step's skeleton on 7 clusters of 16 (hand-offs and weight streaming, no arithmetic).
// Prints, for clusters of 2, 4, 8 and 16 blocks (one block a multiprocessor: ~200 KB of shared memory each):
// how many such clusters can be resident at once; a cluster barrier's cycles; an all-to-all hand-off's cycles
// (every block stores its share of a 576-wide bf16 vector into every block's copy, then the barrier), and, for
// comparison, the same share exchanged through global memory with tagged words among all blocks of the grid.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;

#include "check_cuda.h"

constexpr int THREADS = 256, HID = 576, ITERS = 200;
constexpr size_t SMEM = 200 * 1024;  // a block's dynamic shared memory: one block a multiprocessor

// A launch of `kernel` in clusters of `cs` blocks of THREADS threads with SMEM bytes each (grid: cs, one
// cluster, until the caller sets it); `attr` lives with the configuration that points to it.
struct ClusterLaunch {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    explicit ClusterLaunch(int cs) {
        cfg.blockDim = dim3(THREADS);
        cfg.dynamicSmemBytes = SMEM;
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = cs, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        cfg.gridDim = dim3(cs);
    }
    ClusterLaunch(const ClusterLaunch&) = delete;  // cfg.attrs points into this object
};

// kind 0: cluster barriers only; 1: DSMEM all-to-all of a HID-wide vector, then the barrier; 2: the same
// vector through global memory as tagged 32-bit words (bf16 + a 16-bit tag), every block polling all of it.
// cycles[block] = block's clock64 cycles for ITERS iterations (thread 0).
__global__ void __launch_bounds__(THREADS, 1) handoff(int kind, unsigned* words, unsigned long long* cycles) {
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16* vec = reinterpret_cast<__nv_bfloat16*>(smem);  // [2][HID]: this block's copy, double-buffered
    cg::cluster_group cluster = cg::this_cluster();
    const int cs = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const int t = threadIdx.x, grid = gridDim.x, blk = blockIdx.x;
    for (int e = t; e < 2 * HID; e += THREADS) vec[e] = __float2bfloat16(0.f);
    cluster.sync();
    const unsigned long long c0 = clock64();
    float sink = 0.f;
    for (int it = 0; it < ITERS; ++it) {
        __nv_bfloat16* buf = vec + (it & 1) * HID;
        if (kind == 1) {
            // This block's share of the vector, stored into every block of the cluster.
            const int r0 = rank * HID / cs, r1 = (rank + 1) * HID / cs;
            for (int e = t; e < (r1 - r0) * cs; e += THREADS) {
                const int peer = e / (r1 - r0), i = r0 + e % (r1 - r0);
                __nv_bfloat16* there = cluster.map_shared_rank(buf, peer);
                there[i] = __float2bfloat16((float)(it + i));
            }
        }
        if (kind == 2) {
            // The grid's blocks each own a share; everyone polls the whole vector's words for this tag. Two
            // buffers by parity: a block can be one iteration ahead of another, not two.
            const unsigned tag = (unsigned)(it + 1) & 0xffffu;
            unsigned* words_now = words + (it & 1) * HID;
            const int r0 = (int)((long long)blk * HID / grid), r1 = (int)((long long)(blk + 1) * HID / grid);
            for (int i = r0 + t; i < r1; i += THREADS)
                asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(words_now + i), "r"((tag << 16) | (unsigned)i) : "memory");
            for (int i = t; i < HID; i += THREADS) {
                unsigned w;
                do {
                    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(w) : "l"(words_now + i) : "memory");
                } while ((w >> 16) != tag);
                sink += (float)(w & 0xffffu);
            }
            __syncthreads();
        } else {
            cluster.sync();
            if (kind == 1) sink += __bfloat162float(buf[t]);
        }
    }
    const unsigned long long c1 = clock64();
    if (t == 0) cycles[blk] = c1 - c0;
    if (sink == -1.f) words[0] = 1;  // keeps the reads
}

// ---- weight streaming by a few multiprocessors: can a 16-block cluster pull a layer's weights fast enough? --
constexpr int SLOTS = 4, SLOT = 32768;
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// Thread 0: `bytes` from `from` through the ring's SLOTS slots (bulk copies, one mbarrier a slot), waiting for
// every chunk; n counts the ring's chunks so far (the slot and parity of the next).
__device__ void stream_share(unsigned char* slots, unsigned long long* bars, const unsigned char* from, size_t bytes, unsigned& n) {
    const int chunks = (int)((bytes + SLOT - 1) / SLOT);
    auto issue = [&](int c) {
        const unsigned k = n + c, size = (unsigned)min((size_t)SLOT, bytes - (size_t)c * SLOT);
        const unsigned bar = smem_u32(bars + k % SLOTS);
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(bar), "r"(size) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(smem_u32(slots + (k % SLOTS) * SLOT)), "l"(from + (size_t)c * SLOT), "r"(size), "r"(bar) : "memory");
    };
    for (int c = 0; c < SLOTS && c < chunks; ++c) issue(c);
    for (int c = 0; c < chunks; ++c) {
        const unsigned k = n + c, bar = smem_u32(bars + k % SLOTS), parity = (k / SLOTS) & 1u;
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(bar), "r"(parity) : "memory");
        if (c + SLOTS < chunks) issue(c + SLOTS);
    }
    n += chunks;
}

// Thread 0: the ring's mbarriers (SLOTS, after the slots in shared memory).
__device__ void init_ring(unsigned long long* bars) {
    for (int i = 0; i < SLOTS; ++i) asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_u32(bars + i)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Each block copies `bytes` from src + block * bytes through the ring (thread 0; nothing reads the data).
__global__ void __launch_bounds__(THREADS, 1) stream(const unsigned char* src, size_t bytes) {
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + SLOTS * SLOT);
    if (threadIdx.x != 0) return;
    init_ring(bars);
    unsigned n = 0;
    stream_share(smem, bars, src + (size_t)blockIdx.x * bytes, bytes, n);
}

// GB/s of `blocks` blocks each streaming `bytes`: from DRAM (a region not read before) and then the same
// region again (L2, where it fits).
static void stream_rates(unsigned char* buf, size_t cap) {
    const size_t smem = SLOTS * SLOT + SLOTS * 8;
    CK(cudaFuncSetAttribute(stream, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    size_t offset = 0;
    printf("weight streaming (bulk copies through %d slots of %d KB, thread 0 only):\n", SLOTS, SLOT / 1024);
    for (int blocks : {16, 32, 66, 132})
        for (size_t bytes : {(size_t)448 << 10, (size_t)2 << 20}) {  // a 7 MB layer over 16 blocks; more
            const size_t total = bytes * blocks;
            if (offset + total > cap) offset = 0;
            float ms[2];
            for (int pass = 0; pass < 2; ++pass) {
                CK(cudaEventRecord(e0));
                stream<<<blocks, THREADS, smem>>>(buf + offset, bytes);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms[pass], e0, e1));
            }
            offset += total;
            printf("  %3d blocks x %4zu KB: first %6.1f us (%5.0f GB/s, %4.0f a block), again %6.1f us (%5.0f GB/s, %4.0f a block)\n", blocks,
                   bytes >> 10, ms[0] * 1e3, total / (ms[0] * 1e6), total / (ms[0] * 1e6) / blocks, ms[1] * 1e3, total / (ms[1] * 1e6),
                   total / (ms[1] * 1e6) / blocks);
        }
}

// ---- a decode step's skeleton on clusters: is a layer on one 16-block cluster fast enough? ---------------
// Layer l runs on cluster l % 7 (7 clusters of 16 resident). Its stages are trivial but its data movement is a
// SmolLM2 layer's: each block streams its 1/16 of the stage's weights (QKV, output projection, gate/up, down:
// 7.08 MB a layer) through the ring, and the stages hand over in distributed shared memory (QKV's 960 values,
// attention + o-proj's 576, gate/up's 1536); the down projection's 576 values go to the next layer's cluster
// as tagged words through L2. `mode`: 0 hand-offs only, 1 the weights from memory as they come, 2 the active
// cluster also prefetching layer l + 2's weights into L2 (cp.async.bulk.prefetch) as it starts layer l.
// `per_mille`: the part of each share streamed (the rest as if preloaded into shared memory while the cluster
// waited for its turn, or as if the weights were smaller: Q4_1's are 281 per mille of bf16's).
constexpr int STEP_CLUSTER = 16, STEP_CLUSTERS = 7, STEP_LAYERS = 30;
// A stage's weight bytes (QKV, output projection, gate/up, down) and the values its in-cluster hand-off carries.
__host__ __device__ constexpr size_t stage_bytes(int k) {
    return k == 0 ? 960ull * 576 * 2 : k == 1 ? 576ull * 576 * 2 : k == 2 ? 2ull * 1536 * 576 * 2 : 576ull * 1536 * 2;
}
__host__ __device__ constexpr int stage_out(int k) { return k == 0 ? 960 : k == 1 ? 576 : 1536; }

// w: [layers][4 stages][16 shares] of each stage's bytes / 16; words: [HID] tagged (tag << 16 | value).
__global__ void __launch_bounds__(THREADS, 1) cluster_step(const unsigned char* w, unsigned* words, unsigned step, int mode, int per_mille) {
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* slots = smem;                                                       // SLOTS x SLOT
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + SLOTS * SLOT);
    __nv_bfloat16* vec = reinterpret_cast<__nv_bfloat16*>(bars + SLOTS);               // [1536], the hand-offs
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank(), me = blockIdx.x / STEP_CLUSTER, t = threadIdx.x;
    unsigned n = 0;
    if (t == 0) init_ring(bars);
    __syncthreads();
    size_t layer_bytes = 0;
    for (int k = 0; k < 4; ++k) layer_bytes += stage_bytes(k);
    auto share = [&](int l, int k) {  // block `rank`'s share of stage k of layer l
        size_t at = (size_t)l * layer_bytes;
        for (int j = 0; j < k; ++j) at += stage_bytes(j);
        return w + at + (size_t)rank * (stage_bytes(k) / STEP_CLUSTER);
    };
    float sink = 0.f;
    for (int l = me; l < STEP_LAYERS; l += STEP_CLUSTERS) {
        const unsigned tag = (step * STEP_LAYERS + (unsigned)l) & 0xffffu;  // the words layer l - 1 wrote
        if (l > 0)
            for (int i = t; i < HID; i += THREADS) {
                unsigned v;
                for (;;) {
                    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(words + i) : "memory");
                    if ((v >> 16) == tag) break;
                    __nanosleep(64);
                }
                sink += (float)(v & 0xffffu);
            }
        if (mode == 2 && t == 0 && l + 2 < STEP_LAYERS)
            for (int k = 0; k < 4; ++k)
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(share(l + 2, k)), "r"((unsigned)(stage_bytes(k) / STEP_CLUSTER)) : "memory");
        for (int k = 0; k < 4; ++k) {
            if (mode && t == 0) stream_share(slots, bars, share(l, k), stage_bytes(k) / STEP_CLUSTER * per_mille / 1000 / 16 * 16, n);
            __syncthreads();
            if (k < 3) {  // this block's part of the stage's output into every block of the cluster
                const int out = stage_out(k), r0 = rank * out / STEP_CLUSTER, r1 = (rank + 1) * out / STEP_CLUSTER;
                for (int e = t; e < (r1 - r0) * STEP_CLUSTER; e += THREADS) {
                    const int peer = e / (r1 - r0), i = r0 + e % (r1 - r0);
                    cluster.map_shared_rank(vec, peer)[i] = __float2bfloat16((float)(l + i));
                }
                cluster.sync();
                sink += __bfloat162float(vec[t]);
            }
        }
        // The down projection's rows of this block to the next layer's cluster.
        const unsigned next = (step * STEP_LAYERS + (unsigned)l + 1) & 0xffffu;
        const int r0 = rank * HID / STEP_CLUSTER, r1 = (rank + 1) * HID / STEP_CLUSTER;
        for (int i = r0 + t; i < r1; i += THREADS)
            asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(words + i), "r"((next << 16) | (unsigned)i) : "memory");
    }
    if (sink == -1.f) words[0] = 0;
}

static void step_skeleton() {
    size_t layer_bytes = 0;
    for (int k = 0; k < 4; ++k) layer_bytes += stage_bytes(k);
    unsigned char* w;
    unsigned* words;
    CK(cudaMalloc(&w, layer_bytes * STEP_LAYERS));
    CK(cudaMemset(w, 1, layer_bytes * STEP_LAYERS));
    CK(cudaMalloc(&words, HID * 4));
    CK(cudaMemset(words, 0, HID * 4));
    static_assert(SLOTS * SLOT + SLOTS * 8 + 1536 * 2 <= SMEM, "the ring, its mbarriers and the hand-off vector fit");
    CK(cudaFuncSetAttribute(cluster_step, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
    CK(cudaFuncSetAttribute(cluster_step, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    ClusterLaunch launch(STEP_CLUSTER);
    cudaLaunchConfig_t& cfg = launch.cfg;
    int clusters = 0;
    CK(cudaOccupancyMaxActiveClusters(&clusters, cluster_step, &cfg));
    if (clusters < STEP_CLUSTERS) {
        printf("step skeleton: only %d clusters of %d resident, it needs %d\n", clusters, STEP_CLUSTER, STEP_CLUSTERS);
        return;
    }
    cfg.gridDim = dim3(STEP_CLUSTERS * STEP_CLUSTER);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    unsigned step = 0;
    const char* modes[] = {"hand-offs only", "+ each layer's weights streamed (7.08 MB over 16 blocks)", "+ layer l + 2 prefetched into L2"};
    printf("step skeleton: %d layers, layer l on cluster l %% %d (%d blocks each), us a step (mean of 20 launches after 3):\n",
           STEP_LAYERS, STEP_CLUSTERS, STEP_CLUSTER);
    // The part of each share streamed: all; all but 96 KB or 200 KB of a block's 442 KB (preloaded into shared
    // memory: beside a 128 KB ring, or with a smaller one); Q4_1's bytes (4.5 bits a weight).
    const int parts[] = {1000, 1000, 1000, 783, 548, 281};
    for (int row = 0; row < 6; ++row) {
        const int mode = row < 3 ? row : 1, per_mille = parts[row];
        for (int i = 0; i < 3; ++i) CK(cudaLaunchKernelEx(&cfg, cluster_step, (const unsigned char*)w, words, step++, mode, per_mille));
        CK(cudaEventRecord(e0));
        for (int i = 0; i < 20; ++i) CK(cudaLaunchKernelEx(&cfg, cluster_step, (const unsigned char*)w, words, step++, mode, per_mille));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        char name[96];
        if (row < 3) snprintf(name, sizeof name, "%s", modes[row]);
        else snprintf(name, sizeof name, "+ %d per mille of each share streamed", per_mille);
        printf("  %-60s %7.1f us (%.2f a layer)\n", name, ms * 1e3 / 20, ms * 1e3 / 20 / STEP_LAYERS);
    }
}

int main() {
    int sms = 0, khz = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    CK(cudaFuncSetAttribute(handoff, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
    CK(cudaFuncSetAttribute(handoff, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    unsigned* words;
    unsigned long long* cycles;
    CK(cudaMalloc(&words, 2 * HID * 4));
    CK(cudaMalloc(&cycles, sms * 8));
    printf("SMs %d, %.2f GHz nominal; %d iterations each; cycles an iteration, median over blocks (max)\n", sms, khz * 1e-6, ITERS);
    const char* kinds[] = {"cluster barrier", "DSMEM all-to-all of 576 bf16 + barrier", "global tagged words, 576, all blocks of the grid"};
    for (int cs : {2, 4, 8, 16}) {
        ClusterLaunch launch(cs);
        cudaLaunchConfig_t& cfg = launch.cfg;
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, handoff, &cfg) != cudaSuccess || clusters < 1) {
            printf("clusters of %2d: cannot be resident (%s)\n", cs, cudaGetErrorString(cudaGetLastError()));
            continue;
        }
        cfg.gridDim = dim3(clusters * cs);
        printf("clusters of %2d: %d resident at once (%d blocks)\n", cs, clusters, clusters * cs);
        for (int kind = 0; kind < 3; ++kind) {
            CK(cudaMemset(words, 0, 2 * HID * 4));
            CK(cudaLaunchKernelEx(&cfg, handoff, kind, words, cycles));
            CK(cudaDeviceSynchronize());
            std::vector<unsigned long long> c(clusters * cs);
            CK(cudaMemcpy(c.data(), cycles, c.size() * 8, cudaMemcpyDeviceToHost));
            std::sort(c.begin(), c.end());
            const double med = (double)c[c.size() / 2] / ITERS, most = (double)c.back() / ITERS;
            printf("  %-50s %7.0f cycles (%5.0f ns at nominal), max %7.0f\n", kinds[kind], med, med / (khz * 1e-6), most);
        }
    }
    const size_t cap = (size_t)4 << 30;  // 4 GB, read a region at a time so that the first pass comes from DRAM
    unsigned char* buf;
    CK(cudaMalloc(&buf, cap));
    CK(cudaMemset(buf, 1, cap));
    stream_rates(buf, cap);
    CK(cudaFree(buf));
    step_skeleton();
    return 0;
}
