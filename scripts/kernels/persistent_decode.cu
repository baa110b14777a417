// Prototype: a whole SmolLM2-135M decode step as ONE persistent kernel (issue 15's aim), to measure what
// that design reaches on the H200 before fuse generates it from a model's #[fuse] code.
//
// Built and run by scripts/kernels/run-persistent.sh on the GPU machine (PERSISTENT_NCU=1: under ncu):
//   nvcc -O3 -std=c++17 -Xcompiler -fopenmp -gencode=arch=compute_90a,code=sm_90a persistent_decode.cu -o persistent_decode
//   ./persistent_decode [check|bench|phases|sanitize|profile|all]   (default all: check, phases)
//   decode_step_fused in processes of its own: check-fused, phases-fused (with every block's trace),
//   sanitize-fused, profile-fused (for ncu), stages-alone (each stage in a one-block kernel), ablate (each
//   stage made trivial in turn, then all of them: what the hand-offs alone cost; the grid's size; the down
//   projection's sums in copies).
// check:  batch 1, 3, 4 and 16 at 100 and 1024 cached positions (and 2 layers at batch 3), mostly
//         decode_step_flow, some cases of the other two: the step's logits, the tokens, the residual stream
//         and every cache row it appends, against an f32 reference on the host with the same bf16 rounding
//         points; two launches bit-identical.
// bench:  us per step (CUDA graph of the one launch, replayed) at batch 1, 4, 16 with 128 and 1024 cached
//         positions, flow against the first design, and the weight bytes' floor at the copy bandwidth
//         measured in the same run; the parts alone (an empty launch, grid barriers, the weight stream).
// phases: bench, and block 0's clock at each phase's end (and inside flow's attention item and down
//         projection): the average time of each phase of a layer, the LM head's.
// sanitize: small checks (2 layers) of each design for compute-sanitizer.
// profile:  decode_step_flow at batch 1, 128 cached, 5 launches (for ncu).
//
// Shapes are SmolLM2-135M's (hidden 576, 9 query heads, 3 kv heads, head dim 64, FFN 1536, 30 layers, vocab
// 49152), weights random, bf16. Common to the three designs:
// - One block per multiprocessor (all co-resident: a cooperative launch), 256 threads. Each GEMV (QKV, output
//   projection, gate/up, down, LM head) gives each block a contiguous range of output rows, so that its
//   weight rows are one contiguous range of bytes.
// - Weights stream through a ring of shared-memory slots by bulk copies (cp.async.bulk, one mbarrier a
//   slot): the block knows its whole sequence of weight chunks for the step, so it keeps NSLOT chunks (about
//   two layers) in flight across phases; a GEMV waits only for its slot, and refills it once done.
// - Five phases a layer: QKV (rms_norm recomputed by every block) | attention (rope and the cache append
//   fused in, keys split across blocks) | output projection + residual | rms_norm + gate/up + silu | down +
//   residual. LM head: rms_norm, logits, argmax (each block its rows' best, the last block merges).
// decode_step (the first design): grid barriers between phases (a monotonic counter, or a counter and a
//   generation word), the residual stream in global memory, attention's splits merged by the last split block.
// decode_step_lean: every block keeps the residual stream in shared memory; splits merged while staging.
// decode_step_flow: lean without grid barriers, the values between phases tagged (see its section).
// decode_step_fused: flow with three hand-offs a layer (attention + output projection; gate/up + the down
//   projection split over the FFN rows into integer sums); batch <= 3, fewer than 256 cached. Options: a
//   producer warp refilling the ring (Params::producer), attention in one pass over the keys (attn_pass).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#include "check_cuda.h"

// ---- the model's shapes -------------------------------------------------------------------------------
constexpr int HID = 576, NH = 9, NKV = 3, HD = 64, FFN = 1536, VOCAB = 49152, MAX_LAYERS = 30;
constexpr int GROUP = NH / NKV;            // query heads a kv head
constexpr int QKV = (NH + 2 * NKV) * HD;   // 960
constexpr float EPS = 1e-5f;

// ---- the kernel's geometry ----------------------------------------------------------------------------
constexpr int THREADS = 256, WARPS = THREADS / 32;
constexpr int NSLOT = 8;                   // weight chunks in flight a block
constexpr int SLOT_BYTES = 16384;          // a chunk: at most this many bytes (checked on the host)
constexpr int LM_ROWS = SLOT_BYTES / (HID * 2);  // LM-head rows a chunk: 14
constexpr int SPLIT_KEYS = 256;            // most keys an attention split holds (its scores in shared memory)
constexpr int KINDS = 5;                   // chunks a layer: qkv, o, gate, up, down
constexpr int KV_STAGE_KEYS = 64;
constexpr int TRACE = 20;                  // decode_step_fused's clock notes a block a layer (phases mode)
constexpr int FLOW_CLOCKS = 7;             // decode_step_flow's extra clock notes a layer (phases mode)          // cached keys (and values) of its first attention item a block copies early

// The step's kernels: decode_step (grid barriers), decode_step_lean (a private residual stream a block, one
// trip to L2 a phase), decode_step_flow (no grid barrier: tagged values), decode_step_fused (three hand-offs
// a layer).
enum Design { FIRST = 0, LEAN = 1, FLOW = 2, FUSED = 3 };

struct Params {
    int batch, layers, pos, cap, splits, grid, record;
    int stage_kv;                          // copy each block's first item's cached k/v rows to shared memory early
    int mono;                              // grid barriers: 1 a monotonic counter (arrive without a reply,
                                           // poll), 0 an arrival counter and a generation word
    int design;                            // which kernel runs the step (Design)
    const __nv_bfloat16 *wqkv, *wo, *wg, *wu, *wd, *norm1, *norm2, *norm_out, *lm;  // [layers][rows][k]
    const __nv_bfloat16 *cos, *sin;        // [cap][HD/2]
    __nv_bfloat16 *kc, *vc;                // [layers][batch][NKV][cap][HD]
    __nv_bfloat16 *x;                      // [batch][HID], the residual stream, in place
    __nv_bfloat16 *qkv, *attn, *h, *logits; // [batch][QKV], [batch][HID], [batch][FFN], [batch][VOCAB]
    __nv_bfloat16* dn;                     // [batch][HID]: lean, the down projection's output (attn: the
                                           // output projection's)
    unsigned *fqkv, *fo, *fh, *fdn;        // flow: tagged words, [batch][QKV], [batch][HID], [batch][FFN], [batch][HID]
    unsigned long long* fpart;             // flow: tagged partials, [batch][NKV][splits][GROUP][HD + 2]
    unsigned* step;                        // flow: steps done (the tags' source), advanced by the last block
    unsigned poll_ns;                      // flow: nanosleep between two polls of words not yet written
    int head_prefetch;                     // flow, fused: LM-head chunks a block prefetches to L2 three layers early
    int fused_c;                           // fused: blocks a (sequence, kv head), each its output-projection rows
    int producer;                          // fused: 1 a producer warp (threads THREADS ..) refills the ring
    int lean_code;                         // fused: 1 the LEAN build (tensor-core attention, no clock notes)
    int attn_pass;                         // fused: 1 attention in one pass over the keys (attention_one_pass),
                                           // 2 on tensor cores where the rows are staged (attention_mma)
    int stage_keys;                        // fused: cached k/v rows the staging buffer holds
    int ablate;                            // fused, timing only (wrong results): stages made trivial (Ablate)
    const __nv_bfloat16* wdT;              // fused: [layers][FFN][HID], the down projection transposed
    const __nv_bfloat16* wo_heads;         // fused: [layers][NKV][HID][GROUP * HD], the output projection's
                                           // columns by kv head (a unit's rows are one contiguous copy)
    long long* acc;                        // fused: [2][sum_groups][layers][batch][HID] down projection sums (add_fixed)
    int sum_groups;                        // fused: copies of the sums (block b adds into copy b % sum_groups: fewer
                                           // adds an address; the readers add the copies); 0 means 1
    unsigned long long* fop;               // fused: [NKV][batch][HID] output-projection partials, tagged
    float* partials;                       // [batch][NKV][splits][GROUP][HD + 2]
    unsigned* counters;                    // [batch][NKV] attention merges, then 1 for the argmax
    float* best_v;                         // [grid][batch]
    int* best_i;                           // [grid][batch]
    int* tokens;                           // [batch]
    unsigned* barrier;                     // [3]: arrivals, generation; the monotonic counter
    unsigned long long* times;             // [layers * 5 + 1] when record
    unsigned long long* trace;             // fused: [grid][layers][TRACE] every block's clocks when record, then
                                           // the same notes' SM cycle counts
    size_t trace_n;                        // grid * layers * TRACE
};

// decode_step_fused's ablations (Params::ablate; not in the LEAN build): each bit makes a stage trivial while
// its hand-offs still run (tags and counts written as before), so a row's time shows what the stage costs the
// step. The results are wrong; only the timing rows use them.
enum Ablate {
    ABL_ATTN = 1,    // attention: its output is q (after the poll, rope and the cache append)
    ABL_NORM = 2,    // both rms_norms: act = xs
    ABL_QKV = 4,     // the QKV GEMV: its rows stored as a constant (the weights still waited for)
    ABL_OPROJ = 8,   // the output projection's GEMV: likewise
    ABL_GATEUP = 16, // gate/up's GEMV: h a constant
    ABL_DOWN = 32,   // the down projection's FMAs (its integer adds kept)
    ABL_ALL = 63,
    ABL_ADDS = 64    // the down projection's sums added by block 0 alone, counted as every block's (contention;
                     // with one copy of the sums only: the other copies' counts would never complete)
};

// ---- small helpers ------------------------------------------------------------------------------------
// A clock note: the global timer (comparable across blocks, in steps of up to 0.5 us on the H200) and, for
// a note of fused's trace, the SM's cycle counter beside it (exact, but this multiprocessor's only).
__device__ __forceinline__ unsigned long long global_ns();
__device__ __forceinline__ void stamp_at(const Params& p, unsigned long long* at) {
    *at = global_ns();
    if (p.trace && at >= p.trace && at < p.trace + p.trace_n) at[p.trace_n] = clock64();
}
// The barrier of the block's THREADS compute threads (named barrier 1): decode_step_fused's producer warp
// (threads THREADS ..) never takes part; in the other designs it is the whole block.
__device__ __forceinline__ void sync_block() { asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory"); }

__device__ __forceinline__ float bf(float v) { return __bfloat162float(__float2bfloat16(v)); }

// x = bf16(x + v), the residual stream's rounding point (v rounded where the reference rounds it); returns x.
__device__ __forceinline__ float add_residual(__nv_bfloat16& x, float v) {
    const float y = bf(__bfloat162float(x) + v);
    x = __float2bfloat16(y);
    return y;
}

// 32-bit (i * n stays under 2^32 here: 132 x 49,152 at most): a 64-bit division costs ~10x more, and thread 0
// computes chunk bounds between phases.
__device__ __forceinline__ int row_begin(int i, int n, int parts) { return (int)((unsigned)i * (unsigned)n / (unsigned)parts); }

__device__ __forceinline__ void unpack8(uint4 u, float* f) {
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 t = __bfloat1622float2(p[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// A wait that cannot end (a bug, or blocks not all resident) traps after PATIENCE tries (seconds) instead
// of hanging the GPU.
constexpr unsigned PATIENCE = 1u << 22;

// Grid barrier: arrivals counted in b[0]; the last one resets them and bumps the generation b[1] that the
// others wait on. Release/acquire at gpu scope around it; data other blocks wrote is then read with __ldcg.
__device__ void grid_sync(unsigned* b, int grid) {
    sync_block();
    if (threadIdx.x == 0) {
        volatile unsigned* gen = b + 1;
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(b, 1u) == (unsigned)grid - 1) {
            b[0] = 0;
            __threadfence();
            atomicAdd(b + 1, 1u);
        } else {
            for (unsigned tries = 0; *gen == g; ++tries) {
                if (tries > PATIENCE) __trap();
                __nanosleep(20);
            }
        }
        __threadfence();
    }
    sync_block();
}

// Grid barrier number `index` (0, 1, ..) of a launch on a monotonic counter: each block adds 1 without
// waiting for a reply and polls until every block has added its `index + 1`-th. The launch's last block
// sets the counter back to 0 after the last barrier (`mono_reset`).
__device__ void grid_sync_mono(unsigned* counter, int grid, int index) {
    sync_block();
    if (threadIdx.x == 0) {
        __threadfence();
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
        const unsigned target = (unsigned)(index + 1) * grid;
        unsigned v;
        for (unsigned tries = 0;; ++tries) {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
            if (v >= target) break;
            if (tries > PATIENCE) __trap();
            __nanosleep(20);
        }
    }
    sync_block();
}

// ---- the weight ring: mbarriers and bulk copies -------------------------------------------------------
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    for (unsigned tries = 0;; ++tries) {
        unsigned done;
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity)
                     : "memory");
        if (done) return;
        if (tries > PATIENCE) __trap();
    }
}

// Chunk c of block `blk`'s sequence: layer c / KINDS's qkv, o, gate, up, down rows, then the LM head's rows
// LM_ROWS at a time. Sets the source, the bytes and (for the caller) the first row and row count.
struct Chunk {
    const __nv_bfloat16* src;
    int row0, rows, k;
};

__device__ Chunk chunk_of(const Params& p, int blk, int c) {
    const int layer_chunks = p.layers * KINDS;
    if (c < layer_chunks) {
        const int l = c / KINDS, kind = c % KINDS;
        int n = HID, k = HID;
        const __nv_bfloat16* w = nullptr;
        if (p.design == FUSED && kind == 1) {
            // decode_step_fused: its unit's rows of the output projection, its kv head's 192 columns.
            const int units = p.batch * NKV * p.fused_c;
            if (blk >= units) return {p.wo_heads, 0, 0, GROUP * HD};
            const int g = (blk / p.fused_c) % NKV, c = blk % p.fused_c;
            const int r0 = row_begin(c, HID, p.fused_c), r1 = row_begin(c + 1, HID, p.fused_c);
            return {p.wo_heads + (((size_t)l * NKV + g) * HID + r0) * (GROUP * HD), r0, r1 - r0, GROUP * HD};
        }
        if (p.design == FUSED && kind == 4) {
            // decode_step_fused: the transposed down projection's rows at this block's FFN rows (gate/up's).
            const int r0 = row_begin(blk, FFN, p.grid), r1 = row_begin(blk + 1, FFN, p.grid);
            return {p.wdT + ((size_t)l * FFN + r0) * HID, r0, r1 - r0, HID};
        }
        switch (kind) {
            case 0: n = QKV; w = p.wqkv + (size_t)l * QKV * HID; break;
            case 1: n = HID; w = p.wo + (size_t)l * HID * HID; break;
            case 2: n = FFN; w = p.wg + (size_t)l * FFN * HID; break;
            case 3: n = FFN; w = p.wu + (size_t)l * FFN * HID; break;
            default: n = HID; k = FFN; w = p.wd + (size_t)l * HID * FFN; break;
        }
        const int r0 = row_begin(blk, n, p.grid), r1 = row_begin(blk + 1, n, p.grid);
        return {w + (size_t)r0 * k, r0, r1 - r0, k};
    }
    const int j = c - layer_chunks;
    const int v0 = row_begin(blk, VOCAB, p.grid), v1 = row_begin(blk + 1, VOCAB, p.grid);
    const int r0 = v0 + j * LM_ROWS, r1 = min(v1, r0 + LM_ROWS);
    if (r0 >= v1) return {p.lm, v1, 0, HID};
    return {p.lm + (size_t)r0 * HID, r0, r1 - r0, HID};
}

__device__ int total_chunks(const Params& p, int blk) {
    const int v0 = row_begin(blk, VOCAB, p.grid), v1 = row_begin(blk + 1, VOCAB, p.grid);
    return p.layers * KINDS + (v1 - v0 + LM_ROWS - 1) / LM_ROWS;
}

struct Ring {
    unsigned char* slots;          // NSLOT * SLOT_BYTES
    unsigned long long* bars;      // NSLOT: a slot's chunk is in
    int total;
    unsigned long long* empty;     // NSLOT: a slot is free again (decode_step_fused's producer warp refills
                                   // it); null: thread 0 refills a slot as it frees it

    // Thread 0: chunk c into its slot (a chunk of no rows still completes the slot's phase).
    __device__ void issue(const Params& p, int c) const {
        if (c >= total) return;
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the slot's earlier reads first
        const Chunk ch = chunk_of(p, blockIdx.x, c);
        const unsigned bytes = (unsigned)ch.rows * ch.k * 2;
        unsigned long long* bar = bars + c % NSLOT;
        mbar_expect(bar, bytes);
        unsigned char* dst = slots + (size_t)(c % NSLOT) * SLOT_BYTES;
        if (bytes) bulk_copy(dst, ch.src, bytes, bar);  // every chunk's rows are contiguous in memory
    }
    __device__ const __nv_bfloat16* wait(int c) const {
        mbar_wait(bars + c % NSLOT, (unsigned)(c / NSLOT) & 1u);
        return reinterpret_cast<const __nv_bfloat16*>(slots + (size_t)(c % NSLOT) * SLOT_BYTES);
    }
    // Every thread done with chunk c's slot (the caller synchronised): refill it with chunk c + NSLOT, or
    // tell the producer warp that it may.
    __device__ void release(const Params& p, int c) const {
        if (threadIdx.x != 0) return;
        if (empty) mbar_arrive(empty + c % NSLOT);
        else issue(p, c + NSLOT);
    }
    // The producer warp's lane 0: every chunk past the first NSLOT, each once its slot is free.
    __device__ void produce(const Params& p) const {
        for (int c = NSLOT; c < total; ++c) {
            mbar_wait(empty + c % NSLOT, (unsigned)(c / NSLOT - 1) & 1u);
            issue(p, c);
        }
    }
};

// ---- GEMV on a chunk: out[b][row] for the block's rows, activations [NB][k] bf16 in shared memory -------
// A warp a row (rows w, w + 8, ..), lanes across k in 8-element vectors; `two` adds a second weight chunk
// at the same rows (gate and up). At batch <= 4 a warp takes two of its rows at once (w and w + 8, then
// w + 16 and w + 24, ..): a pass is a chain of dependent loads, FMAs and shuffles, and two rows' chains
// interleave at the cost of one. The epilogue gets (row index in the chunk, b, acc, acc2) on lane 0.
template <int NB, bool TWO, typename Epi>
__device__ void gemv(const __nv_bfloat16* w, const __nv_bfloat16* w2, int rows, int k, const __nv_bfloat16* act, int batch, Epi epi) {
    constexpr int R = NB <= 4 ? 2 : 1;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, k8 = k / 8;
    for (int r0 = warp; r0 < rows; r0 += R * WARPS) {
        float acc[R][NB], acc2[R][NB];
#pragma unroll
        for (int q = 0; q < R; ++q)
#pragma unroll
            for (int b = 0; b < NB; ++b) acc[q][b] = acc2[q][b] = 0.f;
        int row[R];
#pragma unroll
        for (int q = 0; q < R; ++q) row[q] = min(r0 + q * WARPS, rows - 1);  // a row past the chunk: computed, never stored
        for (int v = lane; v < k8; v += 32) {
            float wf[R][8], wf2[R][8];
#pragma unroll
            for (int q = 0; q < R; ++q) {
                unpack8(reinterpret_cast<const uint4*>(w + (size_t)row[q] * k)[v], wf[q]);
                if (TWO) unpack8(reinterpret_cast<const uint4*>(w2 + (size_t)row[q] * k)[v], wf2[q]);
            }
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                if (b >= batch) break;
                float af[8];
                unpack8(reinterpret_cast<const uint4*>(act + (size_t)b * k)[v], af);
#pragma unroll
                for (int q = 0; q < R; ++q)
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        acc[q][b] = fmaf(wf[q][i], af[i], acc[q][b]);
                        if (TWO) acc2[q][b] = fmaf(wf2[q][i], af[i], acc2[q][b]);
                    }
            }
        }
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            if (b >= batch) break;
            float s[R], s2[R];
#pragma unroll
            for (int q = 0; q < R; ++q) {
                s[q] = warp_sum(acc[q][b]);
                s2[q] = TWO ? warp_sum(acc2[q][b]) : 0.f;
            }
#pragma unroll
            for (int q = 0; q < R; ++q)
                if (lane == 0 && r0 + q * WARPS < rows) epi(r0 + q * WARPS, b, s[q], s2[q]);
        }
    }
}

// act[b][i] = bf16(norm[i] * bf16(x[b][i] * rsqrt(mean(x[b]^2) + eps))), from the residual stream (L2).
__device__ void rms_norm_rows(const Params& p, const __nv_bfloat16* norm, __nv_bfloat16* act, float* scale) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int b = warp; b < p.batch; b += WARPS) {
        float ss = 0.f;
        for (int i = lane; i < HID; i += 32) {
            const float v = __bfloat162float(__ldcg(p.x + (size_t)b * HID + i));
            ss += v * v;
        }
        ss = warp_sum(ss);
        if (lane == 0) scale[b] = rsqrtf(ss / HID + EPS);
    }
    sync_block();
    for (int e = threadIdx.x; e < p.batch * HID; e += THREADS) {
        const int b = e / HID, i = e % HID;
        const float v = __bfloat162float(__ldcg(p.x + e));
        act[e] = __float2bfloat16(__bfloat162float(norm[i]) * bf(v * scale[b]));
    }
    sync_block();
}

// Activations [batch][k] from global (written by other blocks) into shared memory.
__device__ void load_rows(const __nv_bfloat16* src, int n, __nv_bfloat16* act) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(act);
    for (int e = threadIdx.x; e < n / 8; e += THREADS) d[e] = __ldcg(s + e);
    sync_block();
}

// ---- attention: item (b, g, split) -----------------------------------------------------------------
struct __align__(16) AttnSmem {
    __nv_bfloat16 k[KV_STAGE_KEYS][HD], v[KV_STAGE_KEYS][HD];  // the staged cached rows (keys k0 ..)
    unsigned long long kv_bar;
    float q[GROUP][HD];
    float kn[HD], vn[HD];
    float sc[GROUP][SPLIT_KEYS];
    float m[GROUP], l[GROUP];
    float raw[(GROUP + 2) * HD];  // decode_step_flow: q, k and v as polled
    int last;
};

// Item `item`'s sequence, kv head, split and key range [k0, k1) (keys = pos + 1: the new one last).
struct Item {
    int b, g, split, k0, k1;
};

__device__ Item item_of(const Params& p, int item) {
    const int split = item % p.splits, g = (item / p.splits) % NKV, b = item / (p.splits * NKV);
    const int keys = p.pos + 1;
    return {b, g, split, row_begin(split, keys, p.splits), row_begin(split + 1, keys, p.splits)};
}

// Thread 0, at the start of layer `layer`: the cached rows (positions before pos) of the block's first
// attention item into shared memory, when they fit; returns whether it issued (the item then waits).
__device__ bool stage_kv(const Params& p, int layer, AttnSmem& s) {
    if (!p.stage_kv || (int)blockIdx.x >= p.batch * NKV * p.splits) return false;
    const Item it = item_of(p, blockIdx.x);
    const int cached = min(it.k1, p.pos) - it.k0;
    if (cached <= 0 || it.k1 - it.k0 > KV_STAGE_KEYS) return false;
    const size_t head = (((size_t)layer * p.batch + it.b) * NKV + it.g) * p.cap + it.k0;
    const unsigned bytes = (unsigned)cached * HD * 2;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the last item's reads of s.k, s.v first
    mbar_expect(&s.kv_bar, 2 * bytes);
    bulk_copy(&s.k[0][0], p.kc + head * HD, bytes, &s.kv_bar);
    bulk_copy(&s.v[0][0], p.vc + head * HD, bytes, &s.kv_bar);
    return true;
}

__device__ float rope_at(const __nv_bfloat16* row, int d, const Params& p) {
    const int half = HD / 2, i = d % half;
    const float c = __bfloat162float(p.cos[(size_t)p.pos * half + i]), s = __bfloat162float(p.sin[(size_t)p.pos * half + i]);
    const float a = __bfloat162float(__ldcg(row + i)), b = __bfloat162float(__ldcg(row + i + half));
    return bf(d < half ? a * c - b * s : b * c + a * s);
}

// ---- attention's pieces and the steps' common parts ----------------------------------------------------------
// Channels 8 oct .. 8 oct + 7 of cache row `key`: from `fresh` (shared memory) at pos, else from rows.
__device__ __forceinline__ void row8(const Params& p, const __nv_bfloat16* rows, const float* fresh, int key, int oct, float (&f)[8]) {
    if (key == p.pos) {
#pragma unroll
        for (int i = 0; i < 8; ++i) f[i] = fresh[8 * oct + i];
    } else {
        unpack8(reinterpret_cast<const uint4*>(rows + (size_t)key * HD)[oct], f);
    }
}

// Scores of the GROUP query rows in s.q against keys k0 .. k0 + n - 1 into s.sc: 8 lanes a key, 8 channels a
// lane, 32 keys a pass (the key at pos is s.kn, the others rows of kc). Ends with a barrier.
__device__ void attention_scores(const Params& p, AttnSmem& s, const __nv_bfloat16* kc, int k0, int n) {
    const int t = threadIdx.x, kq = t / 8, oct = t % 8;
    for (int j0 = 0; j0 < n; j0 += THREADS / 8) {
        const int j = j0 + kq, key = k0 + j;
        float dots[GROUP];
#pragma unroll
        for (int r = 0; r < GROUP; ++r) dots[r] = 0.f;
        if (j < n) {
            float kf[8];
            row8(p, kc, s.kn, key, oct, kf);
#pragma unroll
            for (int r = 0; r < GROUP; ++r)
#pragma unroll
                for (int i = 0; i < 8; ++i) dots[r] = fmaf(s.q[r][8 * oct + i], kf[i], dots[r]);
        }
#pragma unroll
        for (int r = 0; r < GROUP; ++r)
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) dots[r] += __shfl_xor_sync(0xffffffffu, dots[r], o);
        if (j < n && oct == 0)
#pragma unroll
            for (int r = 0; r < GROUP; ++r) s.sc[r][j] = dots[r];
    }
    sync_block();
}

// Each row's n scores in s.sc become softmax numerators; their maxima and sums go to s.m, s.l. Ends with a
// barrier.
__device__ void attention_softmax(AttnSmem& s, int n) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp < GROUP) {
        float m = -INFINITY;
        for (int j = lane; j < n; j += 32) m = fmaxf(m, s.sc[warp][j]);
        for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float l = 0.f;
        for (int j = lane; j < n; j += 32) {
            const float e = __expf(s.sc[warp][j] - m);
            s.sc[warp][j] = e;
            l += e;
        }
        l = warp_sum(l);
        if (lane == 0) s.m[warp] = m, s.l[warp] = l;
    }
    sync_block();
}

// Row r, channel d of the numerators' weighted sum of the values k0 .. k0 + n - 1 (the one at pos is s.vn).
__device__ float attention_values(const Params& p, const AttnSmem& s, const __nv_bfloat16* vc, int k0, int n, int r, int d) {
    float acc = 0.f;
#pragma unroll 4
    for (int j = 0; j < n; ++j) {
        const int key = k0 + j;
        const float v = key == p.pos ? s.vn[d] : __bfloat162float(vc[(size_t)key * HD + d]);
        acc = fmaf(s.sc[r][j], v, acc);
    }
    return acc;
}

// The new key and value rows (s.kn, s.vn) into the cache at pos, `head` the (layer, b, g) rows' first.
__device__ __forceinline__ void append_kv(const Params& p, const AttnSmem& s, size_t head) {
    if (threadIdx.x < HD) {
        p.kc[(head + p.pos) * HD + threadIdx.x] = __float2bfloat16(s.kn[threadIdx.x]);
        p.vc[(head + p.pos) * HD + threadIdx.x] = __float2bfloat16(s.vn[threadIdx.x]);
    }
}

// Thread 0: the ring's mbarriers and its first NSLOT chunks, and attention's staging mbarrier.
__device__ void start_ring(const Params& p, const Ring& ring, unsigned long long* kv_bar) {
    if (threadIdx.x != 0) return;
    for (int i = 0; i < 2 * NSLOT; ++i) mbar_init(ring.bars + i, 1);  // full, then empty
    mbar_init(kv_bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int c = 0; c < NSLOT; ++c) ring.issue(p, c);
}

// decode_step and lean: grid barrier number `stage` (then the next), block 0 noting the clock when timing.
__device__ void grid_barrier(const Params& p, int& stage) {
    if (p.mono) grid_sync_mono(p.barrier + 2, p.grid, stage);
    else grid_sync(p.barrier, p.grid);
    if (p.record && blockIdx.x == 0 && threadIdx.x == 0) p.times[stage] = global_ns();
    ++stage;
}

// The lean, flow and fused kernels' shared memory: the ring's slots and mbarriers, the GEMV's left operand
// [NB][FFN], every block's copy of the residual stream [NB][HID], rms_norm's scales, attention's buffers;
// and the block's ring of weight chunks.
template <int NB>
struct StepSmem {
    unsigned char* slots;
    unsigned long long* bars;
    __nv_bfloat16 *act, *xs;
    float* scale;
    AttnSmem* as;
    Ring ring;
    __device__ StepSmem(unsigned char* smem, const Params& p)
        : slots(smem), bars(reinterpret_cast<unsigned long long*>(smem + NSLOT * SLOT_BYTES)),
          act(reinterpret_cast<__nv_bfloat16*>(bars + 2 * NSLOT)), xs(act + NB * FFN),
          scale(reinterpret_cast<float*>(xs + NB * HID)), as(reinterpret_cast<AttnSmem*>(scale + 16)),
          ring{slots, bars, total_chunks(p, blockIdx.x), p.producer ? bars + NSLOT : nullptr} {}

    // The ring's mbarriers and first NSLOT chunks, attention's staging mbarrier (thread 0), every block's copy
    // of the residual stream. Ends with a barrier of every thread (the producer warp's too: it waits on the
    // mbarriers).
    __device__ void start(const Params& p) const {
        start_ring(p, ring, &as->kv_bar);
        for (int e = threadIdx.x; e < p.batch * HID / 8; e += THREADS)
            reinterpret_cast<uint4*>(xs)[e] = __ldcg(reinterpret_cast<const uint4*>(p.x) + e);
        __syncthreads();
        if (p.record && blockIdx.x == 0 && threadIdx.x == 0) p.times[p.layers * KINDS] = global_ns();
    }
};

// Block 0 writes the residual stream after the step (every block holds the same).
__device__ __forceinline__ void keep_residual(const Params& p, const __nv_bfloat16* xs) {
    if (blockIdx.x == 0)
        for (int e = threadIdx.x; e < p.batch * HID / 8; e += THREADS)
            reinterpret_cast<uint4*>(p.x)[e] = reinterpret_cast<const uint4*>(xs)[e];
}

// Thread 0, three layers before the end (flow, fused): the first p.head_prefetch of the block's LM-head
// chunks toward L2 (bulk prefetches, no shared memory): the head streams 429 KB a block through the ring
// at ~25 GB/s, and its first chunks then come from L2.
__device__ __forceinline__ void prefetch_head(const Params& p, int layer) {
    if (threadIdx.x != 0 || p.head_prefetch == 0 || layer != max(0, p.layers - 3)) return;
    for (int j = 0; j < p.head_prefetch; ++j) {
        const Chunk ch = chunk_of(p, blockIdx.x, p.layers * KINDS + j);
        if (ch.rows)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(ch.src), "r"((unsigned)ch.rows * HID * 2) : "memory");
    }
}

// A GEMV of chunk c's rows against `act` (k wide): store(b, row, value) on lane 0 of each; `notes` (block 0
// timing phases): the clock once the weights are in, the rows written, the next chunk issued.
template <int NB, typename Store>
__device__ void projection(const Params& p, const Ring& ring, int c, int k, const __nv_bfloat16* act, Store store,
                           unsigned long long* notes = nullptr) {
    const Chunk ch = chunk_of(p, blockIdx.x, c);
    const __nv_bfloat16* w = ring.wait(c);
    if (notes && threadIdx.x == 0) stamp_at(p, &notes[0]);
    gemv<NB, false>(w, nullptr, ch.rows, k, act, p.batch, [&](int r, int b, float a, float) { store(b, ch.row0 + r, a); });
    sync_block();
    if (notes && threadIdx.x == 0) stamp_at(p, &notes[1]);
    ring.release(p, c);
    if (notes && threadIdx.x == 0) stamp_at(p, &notes[2]);
}

// Gate and up (chunks c and c + 1) against `act`, silu(gate) * up rounded as the reference does:
// store(b, row in the chunk, row, h) on lane 0 of each. Returns the gate chunk.
// `notes` (fused, timing phases): the clock once the weights are in, once the rows are made.
template <int NB, typename Store>
__device__ Chunk gate_up(const Params& p, const Ring& ring, int c, const __nv_bfloat16* act, Store store,
                         unsigned long long* notes = nullptr) {
    const Chunk ch = chunk_of(p, blockIdx.x, c);
    const __nv_bfloat16* wg = ring.wait(c);
    const __nv_bfloat16* wu = ring.wait(c + 1);
    if (notes && threadIdx.x == 0) stamp_at(p, &notes[0]);
    gemv<NB, true>(wg, wu, ch.rows, HID, act, p.batch, [&](int r, int b, float g, float u) {
        const float gs = bf(g), silu = bf(gs / (1.f + __expf(-gs)));
        store(b, r, ch.row0 + r, bf(silu * bf(u)));
    });
    sync_block();
    if (notes && threadIdx.x == 0) stamp_at(p, &notes[1]);
    ring.release(p, c);
    ring.release(p, c + 1);
    return ch;
}

// An attention item's keys and where its rows are: `head` the cache's first row of (layer, b, g); kc, vc the
// rows by key (staged rows, from key k0, in s.k / s.v).
struct ItemView {
    Item it;
    size_t head;
    const __nv_bfloat16 *kc, *vc;
};

__device__ ItemView view_item(const Params& p, int layer, int item, AttnSmem& s, bool staged) {
    const Item it = item_of(p, item);
    const size_t head = (((size_t)layer * p.batch + it.b) * NKV + it.g) * p.cap;
    return {it, head, staged ? &s.k[0][0] - (size_t)it.k0 * HD : p.kc + head * HD,
            staged ? &s.v[0][0] - (size_t)it.k0 * HD : p.vc + head * HD};
}

// decode_step and lean: item `item`'s view; its q, k and v from p.qkv (bf16), rotated into s.q (scaled),
// s.kn, s.vn; the staged rows waited for; the new rows appended when the item's keys hold pos. Ends with a
// barrier.
__device__ ItemView begin_item(const Params& p, int layer, int item, AttnSmem& s, bool staged, unsigned kv_parity) {
    const ItemView v = view_item(p, layer, item, s, staged);
    const __nv_bfloat16* qkv = p.qkv + (size_t)v.it.b * QKV;
    const int t = threadIdx.x, g = v.it.g;
    if (t < GROUP * HD) s.q[t / HD][t % HD] = rope_at(qkv + (g * GROUP + t / HD) * HD, t % HD, p) * 0.125f;
    else if (t < GROUP * HD + HD) s.kn[t % HD] = rope_at(qkv + (NH + g) * HD, t % HD, p);
    if (t < HD) s.vn[t] = __bfloat162float(__ldcg(qkv + (NH + NKV + g) * HD + t));
    if (staged) mbar_wait(&s.kv_bar, kv_parity);
    sync_block();
    if (v.it.k0 <= p.pos && p.pos < v.it.k1) append_kv(p, s, v.head);  // staged rows stop before pos
    return v;
}

// `staged`: the block's rows of this item are in s.k / s.v (stage_kv), once `kv_parity`'s phase completes.
__device__ void attention_item(const Params& p, int layer, int item, AttnSmem& s, bool staged, unsigned kv_parity) {
    const ItemView view = begin_item(p, layer, item, s, staged, kv_parity);
    const int split = view.it.split, g = view.it.g, b = view.it.b, k0 = view.it.k0, n = view.it.k1 - k0;
    const __nv_bfloat16 *kc = view.kc, *vc = view.vc;
    const int t = threadIdx.x;
    // Scores: a warp a key, a lane two channels.
    const int warp = t / 32, lane = t % 32;
    for (int j = warp; j < n; j += WARPS) {
        const int key = k0 + j;
        float k2[2];
        if (key == p.pos) {
            k2[0] = s.kn[2 * lane];
            k2[1] = s.kn[2 * lane + 1];
        } else {
            const float2 f = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(kc + (size_t)key * HD)[lane]);
            k2[0] = f.x;
            k2[1] = f.y;
        }
#pragma unroll
        for (int r = 0; r < GROUP; ++r) {
            const float d = warp_sum(s.q[r][2 * lane] * k2[0] + s.q[r][2 * lane + 1] * k2[1]);
            if (lane == 0) s.sc[r][j] = d;
        }
    }
    sync_block();
    attention_softmax(s, n);
    float acc = 0.f;
    const int r = t / HD, d = t % HD;
    if (t < GROUP * HD) {
        for (int j = 0; j < n; ++j) {
            const int key = k0 + j;
            const float v = key == p.pos ? s.vn[d] : __bfloat162float(vc[(size_t)key * HD + d]);
            acc = fmaf(s.sc[r][j], v, acc);
        }
    }
    __nv_bfloat16* out = p.attn + (size_t)b * HID + g * GROUP * HD;
    if (p.splits == 1) {
        if (t < GROUP * HD) out[r * HD + d] = __float2bfloat16(acc / s.l[r]);
        sync_block();
        return;
    }
    float* part = p.partials + (((size_t)b * NKV + g) * p.splits) * GROUP * (HD + 2);
    if (t < GROUP * HD) {
        float* mine = part + ((size_t)split * GROUP + r) * (HD + 2);
        mine[d] = acc;
        if (d == 0) mine[HD] = s.m[r], mine[HD + 1] = s.l[r];
    }
    __threadfence();
    sync_block();
    if (t == 0) {
        unsigned* c = p.counters + b * NKV + g;
        s.last = atomicAdd(c, 1u) == (unsigned)p.splits - 1;
        if (s.last) *c = 0;
        __threadfence();
    }
    sync_block();
    if (s.last && t < GROUP * HD) {
        float mx = -INFINITY;
        for (int j = 0; j < p.splits; ++j) mx = fmaxf(mx, __ldcg(part + ((size_t)j * GROUP + r) * (HD + 2) + HD));
        float l = 0.f, a = 0.f;
        for (int j = 0; j < p.splits; ++j) {
            const float* o = part + ((size_t)j * GROUP + r) * (HD + 2);
            const float w = __expf(__ldcg(o + HD) - mx);
            l += w * __ldcg(o + HD + 1);
            a += w * __ldcg(o + d);
        }
        out[r * HD + d] = __float2bfloat16(a / l);
    }
    sync_block();
}

// LM head on the normed rows in `act`: logits, each lane 0's best a row, then the block's, then the grid's
// (the last block to finish merges the blocks' and resets the counters for the next launch).
template <int NB>
__device__ void lm_head_argmax(const Params& p, const Ring& ring, const __nv_bfloat16* act) {
    __shared__ float red_v[WARPS][NB];
    __shared__ int red_i[WARPS][NB];
    __shared__ int last_block;
    const int blk = blockIdx.x;
    float best_v[NB];
    int best_i[NB];
#pragma unroll
    for (int b = 0; b < NB; ++b) best_v[b] = -INFINITY, best_i[b] = 0x7fffffff;
    // HEAD_GROUP chunks a round (one barrier for their rows, the warps over all of them): a chunk a round
    // left 6 of 8 warps idle in its second pass and took a barrier every 14 rows.
    constexpr int HEAD_GROUP = NSLOT / 2;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, k8 = HID / 8;
    for (int c0 = p.layers * KINDS; c0 < ring.total; c0 += HEAD_GROUP) {
        const int chunks = min(HEAD_GROUP, ring.total - c0);
        for (int i = 0; i < chunks; ++i) ring.wait(c0 + i);
        const Chunk last = chunk_of(p, blk, c0 + chunks - 1);
        const int rows = (chunks - 1) * LM_ROWS + last.rows;
        const int row0 = chunk_of(p, blk, c0).row0;
        for (int j = warp; j < rows; j += WARPS) {
            const int c = c0 + j / LM_ROWS;  // its chunk, in slot c % NSLOT
            const __nv_bfloat16* wr =
                reinterpret_cast<const __nv_bfloat16*>(ring.slots + (size_t)(c % NSLOT) * SLOT_BYTES) + (size_t)(j % LM_ROWS) * HID;
            float acc[NB];
#pragma unroll
            for (int b = 0; b < NB; ++b) acc[b] = 0.f;
            for (int v = lane; v < k8; v += 32) {
                float wf[8];
                unpack8(reinterpret_cast<const uint4*>(wr)[v], wf);
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    if (b >= p.batch) break;
                    float af[8];
                    unpack8(reinterpret_cast<const uint4*>(act + (size_t)b * HID)[v], af);
#pragma unroll
                    for (int i = 0; i < 8; ++i) acc[b] = fmaf(wf[i], af[i], acc[b]);
                }
            }
            const int idx = row0 + j;
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                if (b >= p.batch) break;
                const float a = warp_sum(acc[b]);
                if (lane == 0) {
                    const __nv_bfloat16 v = __float2bfloat16(a);
                    p.logits[(size_t)b * VOCAB + idx] = v;
                    const float f = __bfloat162float(v);
                    if (f > best_v[b] || (f == best_v[b] && idx < best_i[b])) best_v[b] = f, best_i[b] = idx;
                }
            }
        }
        sync_block();
        for (int i = 0; i < chunks; ++i) ring.release(p, c0 + i);
    }
    if (p.record && blk == 0 && threadIdx.x == 0) p.times[p.layers * KINDS + 1] = global_ns();  // block 0's logits done
    if (lane == 0)
#pragma unroll
        for (int b = 0; b < NB; ++b) red_v[warp][b] = best_v[b], red_i[warp][b] = best_i[b];
    sync_block();
    if (threadIdx.x < p.batch) {
        const int b = threadIdx.x;
        float v = red_v[0][b];
        int i = red_i[0][b];
        for (int w = 1; w < WARPS; ++w)
            if (red_v[w][b] > v || (red_v[w][b] == v && red_i[w][b] < i)) v = red_v[w][b], i = red_i[w][b];
        p.best_v[(size_t)blk * p.batch + b] = v;
        p.best_i[(size_t)blk * p.batch + b] = i;
    }
    __threadfence();
    sync_block();
    if (threadIdx.x == 0) {
        unsigned* c = p.counters + p.batch * NKV;
        last_block = atomicAdd(c, 1u) == (unsigned)p.grid - 1;
        if (last_block) {
            *c = 0, p.barrier[2] = 0;  // every block is past its last grid barrier
            if (p.step) *p.step += 1;  // and has read the step's count
        }
        __threadfence();
    }
    sync_block();
    if (last_block && threadIdx.x < p.batch) {
        const int b = threadIdx.x;
        float v = -INFINITY;
        int i = 0x7fffffff;
        for (int g = 0; g < p.grid; ++g) {
            const float gv = __ldcg(p.best_v + (size_t)g * p.batch + b);
            const int gi = __ldcg(p.best_i + (size_t)g * p.batch + b);
            if (gv > v || (gv == v && gi < i)) v = gv, i = gi;
        }
        p.tokens[b] = i;
    }
}

// ---- the step ---------------------------------------------------------------------------------------
template <int NB>
__global__ void __launch_bounds__(THREADS, 1) decode_step(const Params p) {
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* slots = smem;
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + NSLOT * SLOT_BYTES);
    __nv_bfloat16* act = reinterpret_cast<__nv_bfloat16*>(bars + NSLOT);  // [NB][FFN]
    float* scale = reinterpret_cast<float*>(act + NB * FFN);               // [NB]
    AttnSmem& as = *reinterpret_cast<AttnSmem*>(scale + 16);

    const int blk = blockIdx.x;
    Ring ring{slots, bars, total_chunks(p, blk)};
    start_ring(p, ring, &as.kv_bar);
    sync_block();
    int stage = 0;
    auto barrier = [&]() { grid_barrier(p, stage); };
    if (p.record && blk == 0 && threadIdx.x == 0) p.times[p.layers * KINDS] = global_ns();

    // A projection whose output adds to the residual stream: rows of `src` (k wide) against chunk `c`'s weights.
    auto residual_phase = [&](const __nv_bfloat16* src, int k, int c) {
        load_rows(src, p.batch * k, act);
        const Chunk ch = chunk_of(p, blk, c);
        const __nv_bfloat16* w = ring.wait(c);
        gemv<NB, false>(w, nullptr, ch.rows, k, act, p.batch, [&](int r, int b, float a, float) {
            __nv_bfloat16* x = p.x + (size_t)b * HID + ch.row0 + r;
            add_residual(*x, bf(a));
        });
        sync_block();
        ring.release(p, c);
    };

    __shared__ int staged;
    unsigned kv_phases = 0;  // phases of as.kv_bar completed before this layer's
    for (int l = 0; l < p.layers; ++l) {
        const int c = l * KINDS;
        if (threadIdx.x == 0) staged = stage_kv(p, l, as);  // read after the QKV phase's barriers
        // QKV with rms_norm.
        rms_norm_rows(p, p.norm1 + (size_t)l * HID, act, scale);
        {
            const Chunk ch = chunk_of(p, blk, c);
            const __nv_bfloat16* w = ring.wait(c);
            gemv<NB, false>(w, nullptr, ch.rows, HID, act, p.batch, [&](int r, int b, float a, float) {
                p.qkv[(size_t)b * QKV + ch.row0 + r] = __float2bfloat16(a);
            });
            sync_block();
            ring.release(p, c);
        }
        barrier();
        // Attention with rope and the append.
        for (int item = blk; item < p.batch * NKV * p.splits; item += p.grid)
            attention_item(p, l, item, as, item == blk && staged, kv_phases & 1u);
        kv_phases += staged;
        barrier();
        // Output projection and the residual.
        residual_phase(p.attn, HID, c + 1);
        barrier();
        // rms_norm, gate and up, silu.
        rms_norm_rows(p, p.norm2 + (size_t)l * HID, act, scale);
        gate_up<NB>(p, ring, c + 2, act, [&](int b, int, int row, float h) { p.h[(size_t)b * FFN + row] = __float2bfloat16(h); });
        barrier();
        // Down projection and the residual.
        residual_phase(p.h, FFN, c + 4);
        barrier();
    }
    rms_norm_rows(p, p.norm_out, act, scale);
    lm_head_argmax<NB>(p, ring, act);
}

// ---- the lean step: one trip to L2 a phase -------------------------------------------------------------
// decode_step spends 3-7 us a phase where the grid barrier is 1 us: each of its phases makes two or three
// round trips to L2 in a row (the residual read back before it is written, rms_norm's two passes over the
// residual stream, attention's split merge through a counter and a last block). Here:
// - every block keeps the whole residual stream itself (xs, bf16 in shared memory, the same values in every
//   block): a residual projection writes only its output rows, and each block adds them to its own copy as it
//   stages the next phase; rms_norm then reads shared memory, its weights loaded before the barrier;
// - attention leaves each split's (max, sum, weighted values) and every block merges the splits as it stages
//   the output projection's input: no counter, no last block, no trip of its own;
// - scores take 8 lanes a key (a pass covers 32 keys) instead of a warp a key.
// Rounding points are decode_step's (the same reference checks both).

// Thread t's elements of a row of HID: t, t + THREADS, t + 2 THREADS (those below HID).
constexpr int PER_THREAD = (HID + THREADS - 1) / THREADS;

// The norm's weights for this thread's elements (issued before a barrier: their latency hides in its wait).
__device__ __forceinline__ void norm_weights(const __nv_bfloat16* norm, float (&nv)[PER_THREAD]) {
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) {
        const int e = threadIdx.x + j * THREADS;
        nv[j] = e < HID ? __bfloat162float(norm[e]) : 0.f;
    }
}

// xs[b] = bf16(xs[b] + add[b]) for the rows `add` (written by other blocks before the barrier; may be null),
// then act[b] = bf16(nv * bf16(xs[b] * rsqrt(mean(xs[b]^2) + eps))).
template <int NB>
__device__ void add_and_norm(const Params& p, const __nv_bfloat16* add, const float (&nv)[PER_THREAD],
                             __nv_bfloat16* xs, __nv_bfloat16* act, float* scale) {
    __shared__ float part[WARPS][NB];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float v[NB][PER_THREAD];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int e = threadIdx.x + j * THREADS;
            v[b][j] = 0.f;
            if (b < p.batch && e < HID && add) v[b][j] = __bfloat162float(__ldcg(add + (size_t)b * HID + e));
        }
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int e = threadIdx.x + j * THREADS;
            if (b < p.batch && e < HID) {
                const float x = add ? add_residual(xs[b * HID + e], v[b][j]) : __bfloat162float(xs[b * HID + e]);
                v[b][j] = x;
                ss += x * x;
            }
        }
        ss = warp_sum(ss);
        if (lane == 0) part[warp][b] = ss;
    }
    sync_block();
    if (threadIdx.x < NB) {
        float ss = 0.f;
        for (int w = 0; w < WARPS; ++w) ss += part[w][threadIdx.x];
        scale[threadIdx.x] = rsqrtf(ss / HID + EPS);
    }
    sync_block();
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int e = threadIdx.x + j * THREADS;
            if (b < p.batch && e < HID) act[b * HID + e] = __float2bfloat16(nv[j] * bf(v[b][j] * scale[b]));
        }
    sync_block();
}

// The output projection's input: each attention row merged from its splits' partials (one pass, the loads
// of every split independent of the running merge).
__device__ void merge_splits(const Params& p, __nv_bfloat16* act) {
    for (int e = threadIdx.x; e < p.batch * HID; e += THREADS) {
        const int b = e / HID, c = e % HID, g = c / (GROUP * HD), r = (c / HD) % GROUP, d = c % HD;
        const float* part = p.partials + (((size_t)b * NKV + g) * p.splits * GROUP + r) * (HD + 2);
        float mx = -INFINITY, l = 0.f, a = 0.f;
#pragma unroll 4
        for (int j = 0; j < p.splits; ++j) {
            const float* o = part + (size_t)j * GROUP * (HD + 2);
            const float mj = __ldcg(o + HD), lj = __ldcg(o + HD + 1), aj = __ldcg(o + d);
            if (mj > mx) {
                const float down = __expf(mx - mj);
                l *= down;
                a *= down;
                mx = mj;
            }
            const float w = __expf(mj - mx);
            l += w * lj;
            a += w * aj;
        }
        act[e] = __float2bfloat16(a / l);
    }
    sync_block();
}

// Attention item `item` (see attention_item), leaving its split's partials for merge_splits.
__device__ void attention_item_lean(const Params& p, int layer, int item, AttnSmem& s, bool staged, unsigned kv_parity) {
    const ItemView view = begin_item(p, layer, item, s, staged, kv_parity);
    const int split = view.it.split, g = view.it.g, b = view.it.b, k0 = view.it.k0, n = view.it.k1 - k0;
    const __nv_bfloat16 *kc = view.kc, *vc = view.vc;
    const int t = threadIdx.x;
    attention_scores(p, s, kc, k0, n);
    attention_softmax(s, n);
    if (t < GROUP * HD) {
        const int r = t / HD, d = t % HD;
        float* mine = p.partials + ((((size_t)b * NKV + g) * p.splits + split) * GROUP + r) * (HD + 2);
        mine[d] = attention_values(p, s, vc, k0, n, r, d);
        if (d == 0) mine[HD] = s.m[r], mine[HD + 1] = s.l[r];
    }
    sync_block();  // the next item rewrites s
}

template <int NB>
__global__ void __launch_bounds__(THREADS, 1) decode_step_lean(const Params p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const StepSmem<NB> m(smem, p);
    m.start(p);
    const int blk = blockIdx.x;
    int stage = 0;
    auto barrier = [&]() { grid_barrier(p, stage); };
    // A GEMV of chunk c's rows against `m.act` (k wide), bf16(result) to out[b][n] at its row.
    auto project = [&](int k, int c, __nv_bfloat16* out, int n) {
        projection<NB>(p, m.ring, c, k, m.act, [&](int b, int row, float a) { out[(size_t)b * n + row] = __float2bfloat16(a); });
    };

    __shared__ int staged;
    unsigned kv_phases = 0;
    float nv[PER_THREAD];
    norm_weights(p.norm1, nv);
    for (int l = 0; l < p.layers; ++l) {
        const int c = l * KINDS;
        if (threadIdx.x == 0) staged = stage_kv(p, l, *m.as);
        // The previous layer's down projection into the residual stream, rms_norm, QKV.
        add_and_norm<NB>(p, l > 0 ? p.dn : nullptr, nv, m.xs, m.act, m.scale);
        project(HID, c, p.qkv, QKV);
        barrier();
        for (int item = blk; item < p.batch * NKV * p.splits; item += p.grid)
            attention_item_lean(p, l, item, *m.as, item == blk && staged, kv_phases & 1u);
        kv_phases += staged;
        barrier();
        // The splits merged, the output projection.
        merge_splits(p, m.act);
        project(HID, c + 1, p.attn, HID);
        norm_weights(p.norm2 + (size_t)l * HID, nv);
        barrier();
        // Its output into the residual stream, rms_norm, gate and up, silu.
        add_and_norm<NB>(p, p.attn, nv, m.xs, m.act, m.scale);
        gate_up<NB>(p, m.ring, c + 2, m.act, [&](int b, int, int row, float h) { p.h[(size_t)b * FFN + row] = __float2bfloat16(h); });
        barrier();
        // The down projection.
        load_rows(p.h, p.batch * FFN, m.act);
        project(FFN, c + 4, p.dn, HID);
        norm_weights(l + 1 < p.layers ? p.norm1 + (size_t)(l + 1) * HID : p.norm_out, nv);
        barrier();
    }
    add_and_norm<NB>(p, p.layers > 0 ? p.dn : nullptr, nv, m.xs, m.act, m.scale);
    keep_residual(p, m.xs);
    lm_head_argmax<NB>(p, m.ring, m.act);
}

// ---- the flow step: no grid barrier --------------------------------------------------------------------
// In decode_step and decode_step_lean a phase costs 3-4 us where its work is well under 1: the writes must
// reach L2 before the barrier's arrival (a round trip), the arrival and the poll that sees the last one (one
// to two more), then the phase reads its input (one more). Here every value one phase hands to the next
// carries the tag of the layer that wrote it (a bf16 in the low half of a 32-bit word, the tag's low 16 bits
// in the high half; attention's f32 partials as 64-bit words with the whole tag), stored and loaded relaxed
// at gpu scope (each word single-copy atomic). A phase polls its input words until each carries this
// layer's tag: no fence, no counter, no barrier, and a block starts a phase as soon as the rows it reads
// are written. A word's previous value is the previous layer's (tag - 1) or, for the first layer, the last
// layer's of the step before (the same), so a stale word never passes; the tags come from a step counter in
// memory that the last block to finish advances. Reuse is safe without barriers: a buffer is written again
// only after the next layer's inputs, which need every block's reads of it, are complete.
// Otherwise decode_step_lean (the residual stream in every block, merge while staging).

__device__ __forceinline__ void st_relaxed(unsigned* p, unsigned v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed64(unsigned long long* p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint4 ld_relaxed4(const void* p) {
    uint4 v;
    asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    return v;
}
// Two 64-bit words (value and tag, or a counted sum, each single-copy atomic as a whole: a vector of four
// 32-bit loads could pair one half of a word with a later write's other half), as (lo0, hi0, lo1, hi1).
__device__ __forceinline__ uint4 ld_relaxed_pairs(const void* p) {
    unsigned long long a, b;
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
    return make_uint4((unsigned)a, (unsigned)(a >> 32), (unsigned)b, (unsigned)(b >> 32));
}
__device__ __forceinline__ unsigned tag_word(float v, unsigned tag16) {
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16(v)) | (tag16 << 16);
}
__device__ __forceinline__ float word_value(unsigned w) { return __bfloat162float(__ushort_as_bfloat16((unsigned short)(w & 0xffffu))); }
__device__ __forceinline__ bool words_tagged(const uint4& v, unsigned tag16) {
    return (v.x >> 16) == tag16 && (v.y >> 16) == tag16 && (v.z >> 16) == tag16 && (v.w >> 16) == tag16;
}
__device__ __forceinline__ unsigned long long tag_pair(float v, unsigned tag) {
    return ((unsigned long long)tag << 32) | __float_as_uint(v);
}

// Loads the 16-byte vectors at(0) .. at(count - 1) (count <= K; 64-bit pairs with PAIRS) into v, all in
// flight at once, again for those not yet ready(v[i]), until each is (sleeping sleep_ns between tries).
template <int K, bool PAIRS, typename At, typename Ready>
__device__ __forceinline__ void poll_set(uint4 (&v)[K], int count, unsigned sleep_ns, At at, Ready ready) {
    unsigned pending = 0;
#pragma unroll
    for (int i = 0; i < K; ++i)
        if (i < count) pending |= 1u << i;
    for (unsigned tries = 0; pending; ++tries) {
#pragma unroll
        for (int i = 0; i < K; ++i)
            if (pending >> i & 1u) v[i] = PAIRS ? ld_relaxed_pairs(at(i)) : ld_relaxed4(at(i));
#pragma unroll
        for (int i = 0; i < K; ++i)
            if ((pending >> i & 1u) && ready(v[i])) pending &= ~(1u << i);
        if (pending) {
            if (tries > PATIENCE) __trap();
            if (sleep_ns) __nanosleep(sleep_ns);
        }
    }
}

// Whether both 64-bit (value, tag) words of a pair carry `tag`.
__device__ __forceinline__ bool pairs_tagged(const uint4& v, unsigned tag) { return v.y == tag && v.w == tag; }

// Polls the 16-byte vectors at(0) .. at(n - 1), the block's threads taking every THREADS-th, ROUND of a
// thread's in flight at once, until ready(v) for each (sleeping sleep_ns between tries); then use(i, v) on each.
template <int ROUND, bool PAIRS = false, typename At, typename Ready, typename Use>
__device__ __forceinline__ void poll_vectors(int n, unsigned sleep_ns, At at, Ready ready, Use use) {
    for (int base = threadIdx.x; base < n; base += ROUND * THREADS) {
        uint4 v[ROUND];
        const int count = (n - base + THREADS - 1) / THREADS;
        poll_set<ROUND, PAIRS>(v, count, sleep_ns, [&](int i) { return at(base + i * THREADS); }, ready);
#pragma unroll
        for (int i = 0; i < ROUND; ++i)
            if (i < count) use(base + i * THREADS, v[i]);
    }
}

// Rows of tagged words (n words a row, `rows` rows) as bf16 into act[r][n].
__device__ void take_rows(const unsigned* src, int rows, int n, unsigned tag16, unsigned sleep_ns, __nv_bfloat16* act) {
    poll_vectors<4>(
        rows * n / 4, sleep_ns, [&](int i) { return src + 4 * i; }, [&](const uint4& v) { return words_tagged(v, tag16); },
        [&](int i, const uint4& v) {
            act[4 * i] = __ushort_as_bfloat16((unsigned short)(v.x & 0xffffu));
            act[4 * i + 1] = __ushort_as_bfloat16((unsigned short)(v.y & 0xffffu));
            act[4 * i + 2] = __ushort_as_bfloat16((unsigned short)(v.z & 0xffffu));
            act[4 * i + 3] = __ushort_as_bfloat16((unsigned short)(v.w & 0xffffu));
        });
    sync_block();
}

// xs[b] = bf16(xs[b] + add[b]) (tagged words; none for the first layer), then rms_norm into act (as
// add_and_norm).
template <int NB>
__device__ void add_words_and_norm(const Params& p, const unsigned* add, unsigned tag16, const float (&nv)[PER_THREAD],
                                   __nv_bfloat16* xs, __nv_bfloat16* act, float* scale) {
    if (add)
        poll_vectors<4>(
            p.batch * HID / 4, p.poll_ns, [&](int i) { return add + 4 * i; }, [&](const uint4& v) { return words_tagged(v, tag16); },
            [&](int i, const uint4& v) {
                const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    add_residual(xs[4 * i + j], word_value(w[j]));
            });
    sync_block();
    add_and_norm<NB>(p, nullptr, nv, xs, act, scale);
}

// The partials of attention's splits merged into act[b][HID], 4 channels a thread (a thread a unit at batch
// 1: 2 channels a thread gave some threads two units, two round trips in a row): each split's two pairs of
// weighted sums and its (max, sum) polled together, 4 splits in flight, merged online (rescaling by the
// running max): one round trip to L2 where a row has at most 4 splits.
__device__ void merge_flow(const Params& p, unsigned tag, __nv_bfloat16* act) {
    const int S = p.splits, rows = p.batch * NH;
    auto row_words = [&](int row, int j) {  // partials of query row `row` (b, head) for split j
        const int b = row / NH, hq = row % NH, g = hq / GROUP, r = hq % GROUP;
        return p.fpart + ((((size_t)b * NKV + g) * S + j) * GROUP + r) * (HD + 2);
    };
    constexpr int ROUND = 4;
    for (int u = threadIdx.x; u < rows * HD / 4; u += THREADS) {
        const int row = u / (HD / 4), quad = u % (HD / 4);
        float mx = -INFINITY, total = 0.f, a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
        for (int j0 = 0; j0 < S; j0 += ROUND) {
            // Each split's two pairs of weighted sums (channels 4 quad ..) and its (max, sum).
            uint4 v[3 * ROUND];
            poll_set<3 * ROUND, true>(
                v, 3 * min(ROUND, S - j0), p.poll_ns,
                [&](int i) { return row_words(row, j0 + i / 3) + (i % 3 == 2 ? HD : 4 * quad + 2 * (i % 3)); },
                [&](const uint4& x) { return pairs_tagged(x, tag); });
#pragma unroll
            for (int i = 0; i < ROUND; ++i)
                if (j0 + i < S) {
                    const uint4 &sums = v[3 * i], &sums2 = v[3 * i + 1], &st = v[3 * i + 2];
                    const float mj = __uint_as_float(st.x), lj = __uint_as_float(st.z);
                    if (mj > mx) {
                        const float down = __expf(mx - mj);
                        total *= down, a0 *= down, a1 *= down, a2 *= down, a3 *= down;
                        mx = mj;
                    }
                    const float w = __expf(mj - mx);
                    total = fmaf(w, lj, total);
                    a0 = fmaf(w, __uint_as_float(sums.x), a0);
                    a1 = fmaf(w, __uint_as_float(sums.z), a1);
                    a2 = fmaf(w, __uint_as_float(sums2.x), a2);
                    a3 = fmaf(w, __uint_as_float(sums2.z), a3);
                }
        }
        const int b = row / NH, hq = row % NH;
        __nv_bfloat16* out = act + (size_t)b * HID + hq * HD + 4 * quad;
        out[0] = __float2bfloat16(a0 / total);
        out[1] = __float2bfloat16(a1 / total);
        out[2] = __float2bfloat16(a2 / total);
        out[3] = __float2bfloat16(a3 / total);
    }
    sync_block();
}

// The rotation (cos, sin) at pos of this thread's channel t % (HD / 2): loaded once a step.
__device__ __forceinline__ float2 rotation(const Params& p) {
    const size_t i = (size_t)p.pos * (HD / 2) + threadIdx.x % (HD / 2);
    return make_float2(__bfloat162float(p.cos[i]), __bfloat162float(p.sin[i]));
}

// flow and fused: q (GROUP heads), k and v of (b, g) polled from the tagged QKV words (5 x HD, 4 a vector),
// rotated into s.q (scaled by 1/sqrt(HD)), s.kn, s.vn; `cs`, `sn` the rotation at this thread's channel.
// `arrived`: where to note the clock once they are in. Ends with a barrier.
__device__ void take_qkv(const Params& p, int b, int g, unsigned tag16, float cs, float sn, AttnSmem& s,
                         unsigned long long* arrived) {
    const unsigned* row = p.fqkv + (size_t)b * QKV;
    const int t = threadIdx.x, half = HD / 2;
    poll_vectors<1>(
        (GROUP + 2) * HD / 4, p.poll_ns,
        [&](int i) {
            const int w = 4 * i;
            return w < GROUP * HD ? row + g * GROUP * HD + w
                 : w < (GROUP + 1) * HD ? row + (NH + g) * HD + (w - GROUP * HD)
                                        : row + (NH + NKV + g) * HD + (w - (GROUP + 1) * HD);
        },
        [&](const uint4& v) { return words_tagged(v, tag16); },
        [&](int i, const uint4& v) {
            s.raw[4 * i] = word_value(v.x), s.raw[4 * i + 1] = word_value(v.y);
            s.raw[4 * i + 2] = word_value(v.z), s.raw[4 * i + 3] = word_value(v.w);
        });
    sync_block();
    if (arrived && t == 0) stamp_at(p, arrived);
    auto rope = [&](const float* x, int d) {
        const int i = d % half;
        return bf(d < half ? x[i] * cs - x[i + half] * sn : x[i + half] * cs + x[i] * sn);
    };
    if (t < GROUP * HD) s.q[t / HD][t % HD] = rope(s.raw + (t / HD) * HD, t % HD) * 0.125f;
    else if (t < GROUP * HD + HD) s.kn[t % HD] = rope(s.raw + GROUP * HD, t % HD);
    if (t < HD) s.vn[t] = s.raw[(GROUP + 1) * HD + t];
    sync_block();
}

// Attention item `item` (as attention_item_lean), its q, k and v polled from the tagged QKV words, its
// partials written tagged.
// `cs`, `sn`: the rotation's cos and sin at this thread's channel (t % (HD / 2)), loaded once a step.
// `arrived`: where to note the clock once q, k and v are in (block 0's first item when timing phases);
// `clocks`: 4 more notes: the staged rows in, the scores, the softmax, the partials written.
__device__ void attention_item_flow(const Params& p, int layer, int item, AttnSmem& s, bool staged, unsigned kv_parity,
                                    unsigned tag, float cs, float sn, unsigned long long* arrived, unsigned long long* clocks) {
    const ItemView view = view_item(p, layer, item, s, staged);
    const int split = view.it.split, g = view.it.g, b = view.it.b, k0 = view.it.k0, n = view.it.k1 - k0;
    const __nv_bfloat16 *kc = view.kc, *vc = view.vc;
    const int t = threadIdx.x;
    take_qkv(p, b, g, tag & 0xffffu, cs, sn, s, arrived);
    if (staged) mbar_wait(&s.kv_bar, kv_parity);
    sync_block();
    if (clocks && t == 0) clocks[0] = global_ns();
    if (k0 <= p.pos && p.pos < view.it.k1) append_kv(p, s, view.head);
    attention_scores(p, s, kc, k0, n);
    if (clocks && t == 0) clocks[1] = global_ns();
    attention_softmax(s, n);
    if (clocks && t == 0) clocks[2] = global_ns();
    if (t < GROUP * HD) {
        const int r = t / HD, d = t % HD;
        unsigned long long* mine = p.fpart + ((((size_t)b * NKV + g) * p.splits + split) * GROUP + r) * (HD + 2);
        st_relaxed64(mine + d, tag_pair(attention_values(p, s, vc, k0, n, r, d), tag));
        if (d == 0) {
            st_relaxed64(mine + HD, tag_pair(s.m[r], tag));
            st_relaxed64(mine + HD + 1, tag_pair(s.l[r], tag));
        }
    }
    sync_block();
    if (clocks && t == 0) clocks[3] = global_ns();
}

template <int NB>
__global__ void __launch_bounds__(THREADS, 1) decode_step_flow(const Params p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const StepSmem<NB> m(smem, p);
    m.start(p);
    const int blk = blockIdx.x;
    const unsigned first_tag = (__ldcg(p.step) + 1u) * (unsigned)p.layers;
    // Block 0's clock when each phase's input has arrived (the phase before it has ended).
    int stage = 0;
    auto stamp = [&]() {
        if (p.record && blk == 0 && threadIdx.x == 0) p.times[stage] = global_ns();
        ++stage;
    };
    // A GEMV of chunk c's rows against `m.act` (k wide), its results tagged to out[b][n].
    auto project = [&](int k, int c, unsigned* out, int n, unsigned tag16, unsigned long long* notes) {
        projection<NB>(p, m.ring, c, k, m.act, [&](int b, int row, float a) { st_relaxed(out + (size_t)b * n + row, tag_word(a, tag16)); },
                       notes);
    };

    // Each layer's cached rows are staged as soon as the layer before is done with the staging buffers.
    __shared__ int staged;
    if (threadIdx.x == 0) staged = stage_kv(p, 0, *m.as);
    unsigned kv_phases = 0;
    float nv[PER_THREAD];
    norm_weights(p.norm1, nv);
    const float2 rot = rotation(p);
    for (int l = 0; l < p.layers; ++l) {
        const int c = l * KINDS;
        const unsigned tag = first_tag + l, tag16 = tag & 0xffffu, before16 = (tag - 1) & 0xffffu;
        prefetch_head(p, l);
        add_words_and_norm<NB>(p, l > 0 ? p.fdn : nullptr, before16, nv, m.xs, m.act, m.scale);
        if (l > 0) stamp();
        project(HID, c, p.fqkv, QKV, tag16, nullptr);
        const int items = p.batch * NKV * p.splits;
        // Block 0 notes when its first item's q, k and v are in: the QKV phase's end.
        unsigned long long* arrived = p.record && blk == 0 ? p.times + stage : nullptr;
        unsigned long long* clocks = p.record && blk == 0 ? p.times + p.layers * KINDS + 2 + FLOW_CLOCKS * l : nullptr;
        for (int item = blk; item < items; item += p.grid)
            attention_item_flow(p, l, item, *m.as, item == blk && staged, kv_phases & 1u, tag, rot.x, rot.y, item == 0 ? arrived : nullptr,
                                item == 0 ? clocks : nullptr);
        ++stage;
        kv_phases += staged;
        sync_block();  // every thread has read `staged`
        if (threadIdx.x == 0 && l + 1 < p.layers) staged = stage_kv(p, l + 1, *m.as);
        merge_flow(p, tag, m.act);
        stamp();
        project(HID, c + 1, p.fo, HID, tag16, nullptr);
        norm_weights(p.norm2 + (size_t)l * HID, nv);
        add_words_and_norm<NB>(p, p.fo, tag16, nv, m.xs, m.act, m.scale);
        stamp();
        gate_up<NB>(p, m.ring, c + 2, m.act, [&](int b, int, int row, float h) { st_relaxed(p.fh + (size_t)b * FFN + row, tag_word(h, tag16)); });
        take_rows(p.fh, p.batch, FFN, tag16, p.poll_ns, m.act);
        stamp();
        project(FFN, c + 4, p.fdn, HID, tag16, clocks ? clocks + 4 : nullptr);
        norm_weights(l + 1 < p.layers ? p.norm1 + (size_t)(l + 1) * HID : p.norm_out, nv);
    }
    add_words_and_norm<NB>(p, p.layers > 0 ? p.fdn : nullptr, (first_tag + p.layers - 1) & 0xffffu, nv, m.xs, m.act, m.scale);
    stamp();
    keep_residual(p, m.xs);
    lm_head_argmax<NB>(p, m.ring, m.act);
}

// ---- the fused step: three hand-offs a layer ---------------------------------------------------------
// flow's five phases a layer cost 2-5 us each, most of it the hand-off (a store, a poll that sees it) and
// the chain of a few warps' work behind it. Here a layer has three:
// 1. QKV (as flow), its words tagged.
// 2. Attention and the output projection in one phase: the blocks are units (sequence b, kv head g, part c),
//    fused_c a (b, g); every unit of (b, g) computes (b, g)'s whole attention (all keys, no splits: its
//    cached rows staged a layer ahead) and then the output projection's rows of part c against g's 192
//    columns, a partial sum each kv head writes tagged (fop[g]); no merge.
// 3. The three partials summed into the residual stream, rms_norm, gate/up (the block's FFN rows, h kept in
//    shared memory), then the down projection split over those rows: each block adds its rows' share of all
//    576 outputs to 64-bit integer sums (2^-32 units: an integer sum is the same in any order, so the step
//    stays deterministic). Each add also counts itself in the sum's low 8 bits (the value sits above them),
//    so a sum says when every block's share is in: the next layer polls the sums themselves, with no fence
//    and no counter (grid < 256).
// The sums come in two sets, one a step (by the step's parity): each step zeroes the other set.
// Needs batch <= 3 (a part's rows of the output projection fit a slot) and pos < SPLIT_KEYS.

// A share `s` of a down-projection sum: added as an integer of 2^-32 units above 8 bits that count the adds
// (exact for |s| < 2^23; the count's carries never reach the value).
__device__ __forceinline__ void add_fixed(long long* at, float s, unsigned adds = 1) {
    const unsigned long long units = (unsigned long long)__float2ll_rn(s * 4294967296.f);
    atomicAdd(reinterpret_cast<unsigned long long*>(at), (units << 8) + adds);
}
// A counted sum's adds so far, and its value.
__device__ __forceinline__ unsigned fixed_count(unsigned low) { return low & 0xffu; }
__device__ __forceinline__ float fixed_value(unsigned low, unsigned high) {
    const long long v = (long long)(((unsigned long long)high << 32) | low) >> 8;
    return __ll2float_rn(v) * 2.3283064365386963e-10f;
}

// Thread 0: the cached rows (positions before pos) of (b, g) at `layer` into the staging buffers.
__device__ bool stage_kv_fused(const Params& p, int layer, int b, int g, __nv_bfloat16* ks, __nv_bfloat16* vs,
                               unsigned long long* bar) {
    if (p.pos == 0 || p.pos > p.stage_keys) return false;
    const size_t head = (((size_t)layer * p.batch + b) * NKV + g) * p.cap;
    const unsigned bytes = (unsigned)p.pos * HD * 2;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    mbar_expect(bar, 2 * bytes);
    bulk_copy(ks, p.kc + head * HD, bytes, bar);
    bulk_copy(vs, p.vc + head * HD, bytes, bar);
    return true;
}

// The warps' attention states merged in the fixed order 0..7 (after each wrote its rows' unnormalised sums
// to red[warp][GROUP][HD], then its maxima and sums to red's next [WARPS][GROUP] and [WARPS][GROUP]): attn's
// GROUP rows, bf16. Starts and ends with a barrier.
__device__ void merge_warps(const float* red, __nv_bfloat16* attn) {
    const float* wm = red + WARPS * GROUP * HD;
    const float* wl = wm + WARPS * GROUP;
    const int t = threadIdx.x;
    sync_block();
    if (t < GROUP * HD) {
        const int r = t / HD, d = t % HD;
        float most = -INFINITY;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) most = fmaxf(most, wm[w * GROUP + r]);
        float a = 0.f, l = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            const float m = wm[w * GROUP + r], weight = m == -INFINITY ? 0.f : __expf(m - most);
            a = fmaf(weight, red[(w * GROUP + r) * HD + d], a);
            l = fmaf(weight, wl[w * GROUP + r], l);
        }
        attn[r * HD + d] = __float2bfloat16(a / l);
    }
    sync_block();
}

// Attention of the GROUP rows in s.q over keys 0 .. n - 1 (kc, vc; the key at pos is s.kn / s.vn) into
// attn[GROUP][HD] (bf16), in one pass over the keys: warp w takes the w-th eighth of them, a key's 8 lanes
// its 8-channel octets, 4 keys a step, each group of 8 lanes an online softmax of its own (running max, sum,
// p * v in its channels); the groups merge by shuffles, the warps through shared memory (red: [WARPS][GROUP]
// [HD] sums, then [WARPS][GROUP] maxima and sums) in the fixed order 0..7. No barrier between scores,
// softmax and P.V, as attention_scores / attention_softmax / the P.V loop have.
__device__ void attention_one_pass(const Params& p, const AttnSmem& s, const __nv_bfloat16* kc, const __nv_bfloat16* vc, int n,
                                   float* red, __nv_bfloat16* attn) {
    const int t = threadIdx.x, warp = t / 32, lane = t % 32, kq = lane / 8, oct = lane % 8;
    float q[GROUP][8], acc[GROUP][8], mx[GROUP], sum[GROUP];
#pragma unroll
    for (int r = 0; r < GROUP; ++r) {
#pragma unroll
        for (int i = 0; i < 8; ++i) q[r][i] = s.q[r][8 * oct + i], acc[r][i] = 0.f;
        mx[r] = -INFINITY, sum[r] = 0.f;
    }
    const int k0 = row_begin(warp, n, WARPS), k1 = row_begin(warp + 1, n, WARPS);
#pragma unroll 2
    for (int j0 = k0; j0 < k1; j0 += 4) {
        const int j = j0 + kq;
        const bool valid = j < k1;
        float kf[8], vf[8];
        if (valid) {
            row8(p, kc, s.kn, j, oct, kf);
            row8(p, vc, s.vn, j, oct, vf);
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) kf[i] = vf[i] = 0.f;
        }
#pragma unroll
        for (int r = 0; r < GROUP; ++r) {
            float dot = 0.f;
#pragma unroll
            for (int i = 0; i < 8; ++i) dot = fmaf(q[r][i], kf[i], dot);
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
            const float sc = valid ? dot : -INFINITY;
            const float most = fmaxf(mx[r], sc);
            const float keep = mx[r] == -INFINITY ? 0.f : __expf(mx[r] - most);
            const float e = sc == -INFINITY ? 0.f : __expf(sc - most);
            mx[r] = most;
            sum[r] = sum[r] * keep + e;
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[r][i] = fmaf(e, vf[i], acc[r][i] * keep);
        }
    }
    // The warp's 4 key groups merge (lanes 8 and 16 apart).
#pragma unroll
    for (int o = 8; o < 32; o <<= 1)
#pragma unroll
        for (int r = 0; r < GROUP; ++r) {
            const float om = __shfl_xor_sync(0xffffffffu, mx[r], o), os = __shfl_xor_sync(0xffffffffu, sum[r], o);
            const float most = fmaxf(mx[r], om);
            const float mine = mx[r] == -INFINITY ? 0.f : __expf(mx[r] - most), theirs = om == -INFINITY ? 0.f : __expf(om - most);
            mx[r] = most;
            sum[r] = sum[r] * mine + os * theirs;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float oa = __shfl_xor_sync(0xffffffffu, acc[r][i], o);
                acc[r][i] = acc[r][i] * mine + oa * theirs;
            }
        }
    float* wm = red + WARPS * GROUP * HD;
    float* wl = wm + WARPS * GROUP;
    if (lane < 8)
#pragma unroll
        for (int r = 0; r < GROUP; ++r) {
#pragma unroll
            for (int i = 0; i < 8; ++i) red[(warp * GROUP + r) * HD + 8 * oct + i] = acc[r][i];
            if (lane == 0) wm[warp * GROUP + r] = mx[r], wl[warp * GROUP + r] = sum[r];
        }
    merge_warps(red, attn);
}

// ---- attention on tensor cores (decode_step_fused, attn_pass 2) -------------------------------------
// mma.sync m16n8k16 (bf16 in, f32 accumulators): lane = 4 g + c (g = lane / 4, c = lane % 4); an A fragment
// holds rows g and g + 8, columns 2c, 2c + 1 and 2c + 8, 2c + 9; B (k x n, "col": n's k values contiguous)
// k = 2c, 2c + 1 and 2c + 8, 2c + 9 at n = g; C rows g, g + 8 at columns 2c, 2c + 1.
__device__ __forceinline__ void ldsm_x4(const void* at, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(at)));
}
__device__ __forceinline__ void ldsm_x4_trans(const void* at, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(at)));
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
}

// attention_one_pass's result from the rows staged in ks / vs (keys 0 .. n - 2; the new row at pos = n - 1 is
// written there first, and rows n .. up to the next 16 zeroed, so no block of 16 keys reads stale rows): the
// GROUP query rows are rows 0 .. 2 of a 16-row A operand (the others zero). Warp w takes the 16-key blocks w,
// w + 8, ..: S = Q K^T (two 8-key tiles x 4 k-steps: 8 MMAs, K's fragments by ldmatrix), an online softmax
// over its blocks (a row's 16 scores are in the 4 lanes of its g), P (rounded to bf16, as flash attention's)
// straight from S's accumulators as the A operand of P V (8 dimension tiles: 8 MMAs, V's fragments by
// ldmatrix.trans). The warps merge through shared memory as attention_one_pass's do.
__device__ void attention_mma(const Params& p, const AttnSmem& s, __nv_bfloat16* ks, __nv_bfloat16* vs, int n, float* red,
                              __nv_bfloat16* attn) {
    const int t = threadIdx.x, warp = t / 32, lane = t % 32, g = lane / 4, c = lane % 4;
    const int n16 = (n + 15) & ~15;
    for (int e = t; e < (n16 - p.pos) * HD; e += THREADS) {
        const int row = p.pos + e / HD, d = e % HD;
        ks[(size_t)row * HD + d] = __float2bfloat16(row == p.pos ? s.kn[d] : 0.f);
        vs[(size_t)row * HD + d] = __float2bfloat16(row == p.pos ? s.vn[d] : 0.f);
    }
    // Q's A fragments for the 4 k-steps (rows g < GROUP real; rows g + 8 zero).
    unsigned qa[4][2];
#pragma unroll
    for (int kstep = 0; kstep < 4; ++kstep) {
        const int d = kstep * 16 + 2 * c;
        qa[kstep][0] = g < GROUP ? pack_bf16(s.q[g][d], s.q[g][d + 1]) : 0u;
        qa[kstep][1] = g < GROUP ? pack_bf16(s.q[g][d + 8], s.q[g][d + 9]) : 0u;
    }
    sync_block();  // the new row and the zeros in
    float o[8][4], mx = -INFINITY, sum = 0.f;  // row g's state (rows g + 8 are padding)
#pragma unroll
    for (int dt = 0; dt < 8; ++dt)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[dt][i] = 0.f;
    for (int blk = warp; blk * 16 < n; blk += WARPS) {
        const int k0 = blk * 16;
        float sc[2][4];
#pragma unroll
        for (int tile = 0; tile < 2; ++tile) {
            // K's B fragments: lane l addresses key k0 + 8 tile + l % 8 at dims 8 (l / 8) (+ 32 for the second load).
            unsigned kb[2][4];
            const __nv_bfloat16* row = ks + (size_t)(k0 + tile * 8 + lane % 8) * HD + (lane / 8) * 8;
            ldsm_x4(row, kb[0]);
            ldsm_x4(row + 32, kb[1]);
#pragma unroll
            for (int i = 0; i < 4; ++i) sc[tile][i] = 0.f;
#pragma unroll
            for (int kstep = 0; kstep < 4; ++kstep)
                mma_bf16(sc[tile], qa[kstep][0], 0u, qa[kstep][1], 0u, kb[kstep / 2][2 * (kstep % 2)], kb[kstep / 2][2 * (kstep % 2) + 1]);
        }
        // Row g's 4 scores in this lane (keys k0 + 8 tile + 2c + j), the keys past n masked.
        float most = mx;
#pragma unroll
        for (int tile = 0; tile < 2; ++tile)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                if (k0 + tile * 8 + 2 * c + j >= n) sc[tile][j] = -INFINITY;
                most = fmaxf(most, sc[tile][j]);
            }
        most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, 1));
        most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, 2));
        const float keep = mx == -INFINITY ? 0.f : __expf(mx - most);
        mx = most;
        float e[2][2];
#pragma unroll
        for (int tile = 0; tile < 2; ++tile)
#pragma unroll
            for (int j = 0; j < 2; ++j) e[tile][j] = sc[tile][j] == -INFINITY ? 0.f : __expf(sc[tile][j] - most);
        sum = sum * keep + (e[0][0] + e[0][1]) + (e[1][0] + e[1][1]);
        const unsigned pa0 = pack_bf16(e[0][0], e[0][1]), pa2 = pack_bf16(e[1][0], e[1][1]);
#pragma unroll
        for (int dt = 0; dt < 8; ++dt)
#pragma unroll
            for (int i = 0; i < 4; ++i) o[dt][i] *= keep;
#pragma unroll
        for (int dp = 0; dp < 4; ++dp) {
            // V's B fragments for dimension tiles 2 dp and 2 dp + 1: lane l addresses key k0 + 8 ((l / 8) & 1) + l % 8
            // at dims 16 dp + 8 (l / 16).
            unsigned vb[4];
            ldsm_x4_trans(vs + (size_t)(k0 + ((lane / 8) & 1) * 8 + lane % 8) * HD + dp * 16 + (lane / 16) * 8, vb);
            mma_bf16(o[2 * dp], pa0, 0u, pa2, 0u, vb[0], vb[1]);
            mma_bf16(o[2 * dp + 1], pa0, 0u, pa2, 0u, vb[2], vb[3]);
        }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    float* wm = red + WARPS * GROUP * HD;
    float* wl = wm + WARPS * GROUP;
    if (g < GROUP) {
#pragma unroll
        for (int dt = 0; dt < 8; ++dt) {
            red[(warp * GROUP + g) * HD + dt * 8 + 2 * c] = o[dt][0];
            red[(warp * GROUP + g) * HD + dt * 8 + 2 * c + 1] = o[dt][1];
        }
        if (c == 0) wm[warp * GROUP + g] = mx, wl[warp * GROUP + g] = sum;
    }
    merge_warps(red, attn);
}

// (b, g)'s attention over keys [0, pos] into attn[GROUP][HD] (bf16): q, k and v polled from the tagged QKV
// words, rope, the cache append (part 0 only), scores 8 lanes a key, softmax, then P.V 8 lanes a key too:
// each lane its key's 8 channels for the GROUP rows, summed across the warp's keys by shuffles and across
// warps in shared memory (red, [WARPS][GROUP][HD] floats).
__device__ void attention_fused(const Params& p, int layer, int b, int g, int part, AttnSmem& s, __nv_bfloat16* ks,
                                __nv_bfloat16* vs, bool staged, unsigned kv_parity, unsigned tag16, float cs, float sn,
                                float* red, __nv_bfloat16* attn, unsigned long long* arrived, unsigned long long* notes,
                                int attn_pass, bool ablated = false) {
    const int t = threadIdx.x, n = p.pos + 1;
    const size_t head = (((size_t)layer * p.batch + b) * NKV + g) * p.cap;
    const __nv_bfloat16* kc = staged ? ks : p.kc + head * HD;
    const __nv_bfloat16* vc = staged ? vs : p.vc + head * HD;
    take_qkv(p, b, g, tag16, cs, sn, s, arrived);
    if (staged) mbar_wait(&s.kv_bar, kv_parity);
    sync_block();
    if (notes && t == 0) stamp_at(p, &notes[0]);
    if (part == 0) append_kv(p, s, head);
    if (ablated) {
        if (t < GROUP * HD) attn[t] = __float2bfloat16(s.q[t / HD][t % HD]);
        sync_block();
        return;
    }
    if (attn_pass) {
        // Record mode 2 runs it twice through the same instructions (a loop the compiler must not unroll: two
        // inlined copies would both be cold), so the second time shows it with its code and data warm.
        const bool mma = attn_pass == 2 && (staged || p.pos == 0) && ((n + 15) & ~15) <= p.stage_keys;
        auto timed = [&](auto run) {
            const int times = notes && p.record == 2 ? 2 : 1;
#pragma unroll 1
            for (int i = 0; i < times; ++i) {
                run();
                if (notes && t == 0 && i == 0) stamp_at(p, &notes[1]), stamp_at(p, &notes[2]);
            }
        };
        if (mma) timed([&] { attention_mma(p, s, ks, vs, n, red, attn); });
        else timed([&] { attention_one_pass(p, s, kc, vc, n, red, attn); });
        if (notes && t == 0) stamp_at(p, &notes[3]);
        return;
    }
    attention_scores(p, s, kc, 0, n);
    if (notes && t == 0) stamp_at(p, &notes[1]);
    attention_softmax(s, n);
    if (notes && t == 0) stamp_at(p, &notes[2]);
    const int kq = t / 8, oct = t % 8, warp = t / 32, lane = t % 32;
    float pv[GROUP][8];
#pragma unroll
    for (int r = 0; r < GROUP; ++r)
#pragma unroll
        for (int i = 0; i < 8; ++i) pv[r][i] = 0.f;
    for (int j = kq; j < n; j += THREADS / 8) {
        float vf[8];
        row8(p, vc, s.vn, j, oct, vf);
#pragma unroll
        for (int r = 0; r < GROUP; ++r) {
            const float e = s.sc[r][j];
#pragma unroll
            for (int i = 0; i < 8; ++i) pv[r][i] = fmaf(e, vf[i], pv[r][i]);
        }
    }
    // Lanes oct, oct + 8, oct + 16, oct + 24 hold the same channels: their sums, then the warps'.
#pragma unroll
    for (int r = 0; r < GROUP; ++r)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            pv[r][i] += __shfl_xor_sync(0xffffffffu, pv[r][i], 8);
            pv[r][i] += __shfl_xor_sync(0xffffffffu, pv[r][i], 16);
        }
    if (lane < 8)
#pragma unroll
        for (int r = 0; r < GROUP; ++r)
#pragma unroll
            for (int i = 0; i < 8; ++i) red[(warp * GROUP + r) * HD + 8 * lane + i] = pv[r][i];
    sync_block();
    if (notes && t == 0) stamp_at(p, &notes[3]);
    if (t < GROUP * HD) {
        const int r = t / HD, d = t % HD;
        float a = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) a += red[(w * GROUP + r) * HD + d];
        attn[r * HD + d] = __float2bfloat16(a / s.l[r]);
    }
    sync_block();
}

// LEAN: the tensor-core attention only and no clock notes, compiled out rather than skipped, for a smaller
// loop body (the instruction-cache experiment; p.attn_pass and p.record are ignored).
template <int NB, bool LEAN = false>
__global__ void __launch_bounds__(THREADS + 32, 1) decode_step_fused(const Params p) {
    const bool record = !LEAN && p.record;
    const int attn_pass = LEAN ? 2 : p.attn_pass;
    const int ablate = LEAN ? 0 : p.ablate;
    extern __shared__ __align__(128) unsigned char smem[];
    const StepSmem<NB> m(smem, p);
    m.start(p);
    if (threadIdx.x >= THREADS) {  // the producer warp (p.producer): the ring's refills, off the compute's path
        if (threadIdx.x == THREADS) m.ring.produce(p);
        return;
    }
    float* hs = reinterpret_cast<float*>(m.as + 1);  // [NB][16]: the block's h values
    __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(hs + NB * 16);  // [stage_keys][HD]
    __nv_bfloat16* vs = ks + (size_t)p.stage_keys * HD;
    float* red = reinterpret_cast<float*>(&m.as->k[0][0]);  // P.V's warp sums (fused stages in ks, vs)

    const int blk = blockIdx.x;
    const unsigned step = __ldcg(p.step), first_tag = (step + 1u) * (unsigned)p.layers, set = step & 1u;
    const int groups = max(p.sum_groups, 1);
    const size_t sums_copy = (size_t)p.layers * p.batch * HID;  // one copy of a set's sums
    long long* acc = p.acc + (size_t)set * groups * sums_copy;
    // The other set, for the next step (the step before used it, and has ended).
    {
        long long* other = p.acc + (size_t)(set ^ 1u) * groups * sums_copy;
        const size_t n = groups * sums_copy;
        for (size_t e = (size_t)blk * THREADS + threadIdx.x; e < n; e += (size_t)p.grid * THREADS) other[e] = 0;
    }
    const int units = p.batch * NKV * p.fused_c;
    const bool has_unit = blk < units;
    const int ub = blk / (NKV * p.fused_c), ug = (blk / p.fused_c) % NKV, uc = blk % p.fused_c;
    __shared__ int staged;
    if (threadIdx.x == 0) staged = has_unit && stage_kv_fused(p, 0, ub, ug, ks, vs, &m.as->kv_bar);
    sync_block();
    auto note = [&](int index) {
        if (record && blk == 0 && threadIdx.x == 0) p.times[index] = global_ns();
    };
    // Every block's clock at point k of layer l (phases mode; the barrier makes it the whole block's).
    auto trace_at = [&](int l, int k) { return p.trace + ((size_t)blk * p.layers + l) * TRACE + k; };
    auto mark = [&](int l, int k) {
        if (record) {
            sync_block();
            if (threadIdx.x == 0) stamp_at(p, trace_at(l, k));
        }
    };
    // The down projection's sums of `layer` into the residual stream, each once every block's add is in
    // (polled two sums a vector).
    const unsigned all_in = (unsigned)p.grid & 0xffu;
    auto take_sums = [&](int layer) {
        const long long* sums = acc + (size_t)layer * p.batch * HID;
        if (groups == 1) {
            poll_vectors<4, true>(
                p.batch * HID / 2, p.poll_ns, [&](int i) { return sums + 2 * i; },
                [&](const uint4& v) { return fixed_count(v.x) == all_in && fixed_count(v.z) == all_in; },
                [&](int i, const uint4& v) {
                    const float dn[2] = {bf(fixed_value(v.x, v.y)), bf(fixed_value(v.z, v.w))};
#pragma unroll
                    for (int j = 0; j < 2; ++j)
                        add_residual(m.xs[2 * i + j], dn[j]);
                });
        } else {
            // A pair's G copies at once (grid % G == 0: grid / G adds each); the copies' raw words add up to the
            // one sum's (counts and all: grid < 256). G a constant: v stays in registers.
            auto take_copies = [&](auto copies) {
                constexpr int G = decltype(copies)::value;
                const unsigned in_each = (unsigned)(p.grid / G);
                for (int i = threadIdx.x; i < p.batch * HID / 2; i += THREADS) {
                    uint4 v[G];
                    poll_set<G, true>(
                        v, G, p.poll_ns, [&](int j) { return sums + j * sums_copy + 2 * i; },
                        [&](const uint4& x) { return fixed_count(x.x) == in_each && fixed_count(x.z) == in_each; });
                    unsigned long long lo = 0, hi = 0;
#pragma unroll
                    for (int g = 0; g < G; ++g) {
                        lo += ((unsigned long long)v[g].y << 32) | v[g].x;
                        hi += ((unsigned long long)v[g].w << 32) | v[g].z;
                    }
                    add_residual(m.xs[2 * i], bf(fixed_value((unsigned)lo, (unsigned)(lo >> 32))));
                    add_residual(m.xs[2 * i + 1], bf(fixed_value((unsigned)hi, (unsigned)(hi >> 32))));
                }
            };
            if (groups == 2) take_copies(std::integral_constant<int, 2>{});
            else take_copies(std::integral_constant<int, 4>{});
        }
        sync_block();
    };

    unsigned kv_phases = 0;
    float nv[PER_THREAD];
    norm_weights(p.norm1, nv);
    const float2 rot = rotation(p);
    // rms_norm of the residual stream into act (ABL_NORM: a copy).
    auto norm = [&] {
        if (ablate & ABL_NORM) {
            for (int e = threadIdx.x; e < p.batch * HID; e += THREADS) m.act[e] = m.xs[e];
            sync_block();
        } else {
            add_and_norm<NB>(p, nullptr, nv, m.xs, m.act, m.scale);
        }
    };
    // An ablated GEMV: chunk c's weights waited for, then each (b, row) stored as a constant by some thread.
    auto trivial_rows = [&](int c, auto store) {
        const Chunk ch = chunk_of(p, blk, c);
        m.ring.wait(c);
        for (int i = threadIdx.x; i < p.batch * ch.rows; i += THREADS) store(i / ch.rows, i % ch.rows, ch);
        sync_block();
        return ch;
    };
    for (int l = 0; l < p.layers; ++l) {
        const int c = l * KINDS;
        const unsigned tag = first_tag + l, tag16 = tag & 0xffffu;
        prefetch_head(p, l);
        // 1. The previous layer's down projection into the residual stream, rms_norm, QKV.
        if (l > 0) {
            take_sums(l - 1);
            note((l - 1) * KINDS + 3), note((l - 1) * KINDS + 4);
        }
        mark(l, 0);
        norm();
        mark(l, 16);
        if (ablate & ABL_QKV) {
            trivial_rows(c, [&](int b, int r, const Chunk& ch) { st_relaxed(p.fqkv + (size_t)b * QKV + ch.row0 + r, tag_word(0.01f, tag16)); });
            m.ring.release(p, c);
        } else {
            projection<NB>(p, m.ring, c, HID, m.act, [&](int b, int row, float a) { st_relaxed(p.fqkv + (size_t)b * QKV + row, tag_word(a, tag16)); },
                           record ? trace_at(l, 17) : nullptr);
        }
        mark(l, 1);
        // 2. Attention of (b, g) and the output projection's part: rows of this unit against g's columns.
        {
            const Chunk ch = chunk_of(p, blk, c + 1);
            if (has_unit) {
                __nv_bfloat16* attn = m.act;  // [GROUP * HD], the unit's row of attention outputs
                attention_fused(p, l, ub, ug, uc, *m.as, ks, vs, staged, kv_phases & 1u, tag16, rot.x, rot.y, red, attn,
                                record ? trace_at(l, 2) : nullptr, record ? trace_at(l, 12) : nullptr, attn_pass, ablate & ABL_ATTN);
                if (record && blk == 0 && threadIdx.x == 0) p.times[l * KINDS] = *trace_at(l, 2);
                mark(l, 3);
                const __nv_bfloat16* w = m.ring.wait(c + 1);
                unsigned long long* out = p.fop + ((size_t)ug * p.batch + ub) * HID;
                if (ablate & ABL_OPROJ) {
                    for (int r = threadIdx.x; r < ch.rows; r += THREADS) st_relaxed64(out + ch.row0 + r, tag_pair(0.01f, tag));
                } else {
                    gemv<1, false>(w, nullptr, ch.rows, GROUP * HD, attn, 1, [&](int r, int, float a, float) {
                        st_relaxed64(out + ch.row0 + r, tag_pair(a, tag));
                    });
                }
                mark(l, 4);
            } else {
                m.ring.wait(c + 1);  // an empty chunk: the ring's sequence is every block's
            }
            sync_block();
            m.ring.release(p, c + 1);
            kv_phases += staged;
            sync_block();  // every thread has read `staged`
            if (threadIdx.x == 0 && l + 1 < p.layers) staged = has_unit && stage_kv_fused(p, l + 1, ub, ug, ks, vs, &m.as->kv_bar);
        }
        // 3. The kv heads' partials summed into the residual stream, rms_norm, gate/up, down's share.
        norm_weights(p.norm2 + (size_t)l * HID, nv);
        {
            const unsigned long long* part = p.fop;
            for (int u = threadIdx.x; u < p.batch * HID / 4; u += THREADS) {
                const int b = u / (HID / 4), n4 = 4 * (u % (HID / 4));
                uint4 v[2 * NKV];
                poll_set<2 * NKV, true>(
                    v, 2 * NKV, p.poll_ns, [&](int i) { return part + ((size_t)(i / 2) * p.batch + b) * HID + n4 + 2 * (i % 2); },
                    [&](const uint4& x) { return pairs_tagged(x, tag); });
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    float o = 0.f;
#pragma unroll
                    for (int g = 0; g < NKV; ++g) {
                        const uint4& w = v[2 * g + q / 2];
                        o += __uint_as_float(q % 2 ? w.z : w.x);
                    }
                    const int e = b * HID + n4 + q;
                    add_residual(m.xs[e], bf(o));
                }
            }
            sync_block();
            note(l * KINDS + 1), note(l * KINDS + 2);
            mark(l, 5);
        }
        norm();
        mark(l, 6);
        Chunk gate;
        if (ablate & ABL_GATEUP) {
            m.ring.wait(c + 3);
            gate = trivial_rows(c + 2, [&](int b, int r, const Chunk&) { hs[b * 16 + r] = 0.01f; });
            m.ring.release(p, c + 2);
            m.ring.release(p, c + 3);
        } else {
            gate = gate_up<NB>(p, m.ring, c + 2, m.act, [&](int b, int r, int, float h) { hs[b * 16 + r] = h; },
                               record ? trace_at(l, 10) : nullptr);
        }
        mark(l, 7);
        {
            const __nv_bfloat16* wt = m.ring.wait(c + 4);  // [gate.rows][HID]
            mark(l, 8);
            long long* sums = acc + (blk % groups) * sums_copy + (size_t)l * p.batch * HID;
            for (int n = threadIdx.x; n < HID; n += THREADS) {
                float s[NB];
#pragma unroll
                for (int b = 0; b < NB; ++b) s[b] = 0.f;
                for (int r = 0; r < (ablate & ABL_DOWN ? 0 : gate.rows); ++r) {
                    const float w = __bfloat162float(wt[(size_t)r * HID + n]);
#pragma unroll
                    for (int b = 0; b < NB; ++b)
                        if (b < p.batch) s[b] = fmaf(w, hs[b * 16 + r], s[b]);
                }
#pragma unroll
                for (int b = 0; b < NB; ++b)
                    if (b < p.batch && !(ablate & ABL_ADDS)) add_fixed(sums + (size_t)b * HID + n, s[b]);
                    else if (b < p.batch && blk == 0) add_fixed(sums + (size_t)b * HID + n, s[b], p.grid);  // as if all
            }
            sync_block();
            mark(l, 9);
            m.ring.release(p, c + 4);
        }
        norm_weights(l + 1 < p.layers ? p.norm1 + (size_t)(l + 1) * HID : p.norm_out, nv);
    }
    take_sums(p.layers - 1);
    note((p.layers - 1) * KINDS + 3), note((p.layers - 1) * KINDS + 4);
    add_and_norm<NB>(p, nullptr, nv, m.xs, m.act, m.scale);
    keep_residual(p, m.xs);
    lm_head_argmax<NB>(p, m.ring, m.act);
}

// ---- the step's parts alone, for the breakdown -------------------------------------------------------
// `n` grid barriers and nothing else.
__global__ void __launch_bounds__(THREADS, 1) barriers_only(const Params p, int n) {
    __shared__ int last;
    for (int i = 0; i < n; ++i) {
        if (p.mono) grid_sync_mono(p.barrier + 2, p.grid, i);
        else grid_sync(p.barrier, p.grid);
    }
    if (p.mono && threadIdx.x == 0) {  // the last block out resets the monotonic counter
        unsigned* c = p.counters + p.batch * NKV;
        last = atomicAdd(c, 1u) == (unsigned)p.grid - 1;
        if (last) *c = 0, p.barrier[2] = 0;
    }
}

// The weight stream alone: every chunk of the step through the ring, no arithmetic.
__global__ void __launch_bounds__(THREADS, 1) stream_only(const Params p) {
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem + NSLOT * SLOT_BYTES);
    Ring ring{smem, bars, total_chunks(p, blockIdx.x)};
    if (threadIdx.x == 0) {
        for (int i = 0; i < NSLOT; ++i) mbar_init(bars + i, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int c = 0; c < NSLOT; ++c) ring.issue(p, c);
    }
    sync_block();
    float sink = 0.f;
    for (int c = 0; c < ring.total; ++c) {
        const __nv_bfloat16* w = ring.wait(c);
        sink += __bfloat162float(w[threadIdx.x]);
        sync_block();
        ring.release(p, c);
    }
    if (sink == 12345.f) p.tokens[0] = 1;  // keeps the reads
}

// ---- host -------------------------------------------------------------------------------------------
static float bfr(float v) { return __bfloat162float(__float2bfloat16(v)); }

struct Lcg {
    uint64_t s;
    float next() {  // uniform in [-1, 1)
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return (float)((s >> 40) & 0xffffff) / 8388608.f - 1.f;
    }
};

static std::vector<__nv_bfloat16> random_bf16(size_t n, float scale, float offset, uint64_t seed) {
    Lcg r{seed};
    std::vector<__nv_bfloat16> v(n);
    for (auto& e : v) e = __float2bfloat16(offset + scale * r.next());
    return v;
}

static std::vector<float> to_f32(const std::vector<__nv_bfloat16>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = __bfloat162float(v[i]);
    return f;
}

template <typename T>
static T* upload(const std::vector<T>& v) {
    T* d;
    CK(cudaMalloc(&d, v.size() * sizeof(T)));
    CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T>
static std::vector<T> download(const T* d, size_t n) {
    std::vector<T> v(n);
    CK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

// The model's weights, shared by every case (the largest cache, so a case picks its layers and batch).
struct Weights {
    int layers;
    std::vector<__nv_bfloat16> wqkv, wo, wg, wu, wd, norm1, norm2, norm_out, lm, cos, sin;
    __nv_bfloat16 *d_wqkv, *d_wo, *d_wg, *d_wu, *d_wd, *d_norm1, *d_norm2, *d_norm_out, *d_lm, *d_cos, *d_sin;
    __nv_bfloat16* d_wdT;  // the down projection transposed, [layers][FFN][HID] (decode_step_fused's)
    __nv_bfloat16* d_wo_heads;  // the output projection by kv head, [layers][NKV][HID][GROUP * HD] (fused's)
    int cap;
};

static void upload_weights(Weights& w);

static Weights make_weights_host(int layers, int cap) {
    Weights w;
    w.layers = layers;
    w.cap = cap;
    const float sh = 1.7f / std::sqrt((float)HID), sf = 1.7f / std::sqrt((float)FFN);
    w.wqkv = random_bf16((size_t)layers * QKV * HID, sh, 0, 11);
    w.wo = random_bf16((size_t)layers * HID * HID, sh, 0, 12);
    w.wg = random_bf16((size_t)layers * FFN * HID, sh, 0, 13);
    w.wu = random_bf16((size_t)layers * FFN * HID, sh, 0, 14);
    w.wd = random_bf16((size_t)layers * HID * FFN, sf, 0, 15);
    w.norm1 = random_bf16((size_t)layers * HID, 0.2f, 1.f, 16);
    w.norm2 = random_bf16((size_t)layers * HID, 0.2f, 1.f, 17);
    w.norm_out = random_bf16(HID, 0.2f, 1.f, 18);
    w.lm = random_bf16((size_t)VOCAB * HID, 0.1f, 0, 19);  // logits of a few units: bf16 keeps them apart
    w.cos.resize((size_t)cap * HD / 2);
    w.sin.resize(w.cos.size());
    for (int pos = 0; pos < cap; ++pos)
        for (int i = 0; i < HD / 2; ++i) {
            const double f = pos / std::pow(100000.0, 2.0 * i / HD);
            w.cos[(size_t)pos * HD / 2 + i] = __float2bfloat16((float)std::cos(f));
            w.sin[(size_t)pos * HD / 2 + i] = __float2bfloat16((float)std::sin(f));
        }
    return w;
}

static void upload_weights(Weights& w) {
    w.d_wqkv = upload(w.wqkv), w.d_wo = upload(w.wo), w.d_wg = upload(w.wg), w.d_wu = upload(w.wu), w.d_wd = upload(w.wd);
    w.d_norm1 = upload(w.norm1), w.d_norm2 = upload(w.norm2), w.d_norm_out = upload(w.norm_out), w.d_lm = upload(w.lm);
    w.d_cos = upload(w.cos), w.d_sin = upload(w.sin);
    std::vector<__nv_bfloat16> wdT(w.wd.size());
    for (int l = 0; l < w.layers; ++l)
        for (int n = 0; n < HID; ++n)
            for (int i = 0; i < FFN; ++i) wdT[((size_t)l * FFN + i) * HID + n] = w.wd[((size_t)l * HID + n) * FFN + i];
    w.d_wdT = upload(wdT);
    std::vector<__nv_bfloat16> wo_heads(w.wo.size());
    for (int l = 0; l < w.layers; ++l)
        for (int g = 0; g < NKV; ++g)
            for (int n = 0; n < HID; ++n)
                for (int c = 0; c < GROUP * HD; ++c)
                    wo_heads[(((size_t)l * NKV + g) * HID + n) * (GROUP * HD) + c] = w.wo[((size_t)l * HID + n) * HID + g * GROUP * HD + c];
    w.d_wo_heads = upload(wo_heads);
}

static Weights make_weights(int layers, int cap) {
    Weights w = make_weights_host(layers, cap);
    upload_weights(w);
    return w;
}

struct Case {
    int batch, layers, pos, splits, grid;
    std::vector<__nv_bfloat16> x0, kc0, vc0;
    Params p;
    size_t smem;
};

static int pick_splits(int batch, int keys, int grid) {
    const int need = (keys + SPLIT_KEYS - 1) / SPLIT_KEYS;
    const int want = std::min((keys + 31) / 32, std::max(1, grid / (batch * NKV)));
    return std::max(need, want);
}

static int nb_for(int batch) { return batch <= 1 ? 1 : batch <= 4 ? 4 : 16; }

// decode_step_fused's staging buffer: cached rows of a (sequence, kv head) it holds (k and v, 128 B each).
static int fused_stage_keys(int nb) { return nb == 1 ? 256 : nb == 4 ? 128 : 0; }

static const char* design_name(int design) {
    static const char* const names[] = {"first", "lean", "flow", "fused"};
    return names[design];
}

static size_t smem_bytes(int nb, int design = LEAN) {
    const size_t fused = design == FUSED ? (size_t)nb * 16 * 4 + (size_t)fused_stage_keys(nb) * HD * 2 * 2 : 0;
    return (size_t)NSLOT * SLOT_BYTES + 2 * NSLOT * 8 + (size_t)nb * FFN * 2 + (design != FIRST ? (size_t)nb * HID * 2 : 0) + 16 * 4 +
           sizeof(AttnSmem) + fused + 128;
}

// Whether decode_step_fused takes this case: a part's output-projection rows fit a slot (batch <= 3 on 132
// multiprocessors), the keys fit the scores' buffer, h's rows a block fit its 16, and the blocks an 8-bit count.
static bool fused_fits(int batch, int pos, int grid) {
    const int c = grid / (batch * NKV);
    return c >= 1 && (HID + c - 1) / c * GROUP * HD * 2 <= SLOT_BYTES && pos + 1 <= SPLIT_KEYS && (FFN + grid - 1) / grid <= 16 &&
           grid < 256;  // the sums count their adds in 8 bits
}

// Bytes of decode_step_fused's down-projection sums: two sets (by step parity) of up to 4 copies.
static size_t sums_bytes(int layers, int batch) { return 2 * 4 * (size_t)layers * batch * HID * 8; }

static Case make_case(const Weights& w, int batch, int layers, int pos, int grid) {
    Case c;
    c.batch = batch, c.layers = layers, c.pos = pos, c.grid = grid;
    c.splits = pick_splits(batch, pos + 1, grid);
    const size_t cache = (size_t)layers * batch * NKV * w.cap * HD;
    c.x0 = random_bf16((size_t)batch * HID, 1.f, 0, 21 + batch);
    c.kc0 = random_bf16(cache, 1.f, 0, 22 + batch);
    c.vc0 = random_bf16(cache, 1.f, 0, 23 + batch);
    Params& p = c.p;
    memset(&p, 0, sizeof p);
    p.batch = batch, p.layers = layers, p.pos = pos, p.cap = w.cap, p.splits = c.splits, p.grid = grid;
    p.wqkv = w.d_wqkv, p.wo = w.d_wo, p.wg = w.d_wg, p.wu = w.d_wu, p.wd = w.d_wd;
    p.norm1 = w.d_norm1, p.norm2 = w.d_norm2, p.norm_out = w.d_norm_out, p.lm = w.d_lm, p.cos = w.d_cos, p.sin = w.d_sin;
    p.kc = upload(c.kc0), p.vc = upload(c.vc0), p.x = upload(c.x0);
    CK(cudaMalloc(&p.qkv, (size_t)batch * QKV * 2));
    CK(cudaMalloc(&p.attn, (size_t)batch * HID * 2));
    CK(cudaMalloc(&p.dn, (size_t)batch * HID * 2));
    const size_t flow_words = (size_t)batch * (QKV + 2 * HID + FFN);
    CK(cudaMalloc(&p.fqkv, flow_words * 4));
    CK(cudaMemset(p.fqkv, 0, flow_words * 4));
    p.fo = p.fqkv + (size_t)batch * QKV, p.fh = p.fo + (size_t)batch * HID, p.fdn = p.fh + (size_t)batch * FFN;
    const size_t part_words = (size_t)batch * NKV * c.splits * GROUP * (HD + 2);
    CK(cudaMalloc(&p.fpart, part_words * 8));
    CK(cudaMemset(p.fpart, 0, part_words * 8));
    CK(cudaMalloc(&p.step, 4));
    CK(cudaMemset(p.step, 0, 4));
    // decode_step_fused: a (sequence, kv head)'s parts, the staging buffer's rows, the sums' two sets.
    p.fused_c = grid / (batch * NKV);
    p.stage_keys = fused_stage_keys(nb_for(batch));
    p.wdT = w.d_wdT;
    p.wo_heads = w.d_wo_heads;
    CK(cudaMalloc(&p.acc, sums_bytes(layers, batch)));
    CK(cudaMemset(p.acc, 0, sums_bytes(layers, batch)));
    CK(cudaMalloc(&p.fop, (size_t)NKV * batch * HID * 8));
    CK(cudaMemset(p.fop, 0, (size_t)NKV * batch * HID * 8));
    CK(cudaMalloc(&p.h, (size_t)batch * FFN * 2));
    CK(cudaMalloc(&p.logits, (size_t)batch * VOCAB * 2));
    CK(cudaMalloc(&p.partials, (size_t)batch * NKV * c.splits * GROUP * (HD + 2) * 4));
    CK(cudaMalloc(&p.counters, (batch * NKV + 1) * 4));
    CK(cudaMemset(p.counters, 0, (batch * NKV + 1) * 4));
    CK(cudaMalloc(&p.best_v, (size_t)grid * batch * 4));
    CK(cudaMalloc(&p.best_i, (size_t)grid * batch * 4));
    CK(cudaMalloc(&p.tokens, batch * 4));
    CK(cudaMalloc(&p.barrier, 12));
    CK(cudaMemset(p.barrier, 0, 12));
    CK(cudaMalloc(&p.times, (layers * KINDS + 2 + FLOW_CLOCKS * layers) * 8));
    p.trace_n = (size_t)grid * layers * TRACE;
    CK(cudaMalloc(&p.trace, 2 * p.trace_n * 8));
    return c;
}

static void reset_state(Case& c) {
    CK(cudaMemcpy(c.p.x, c.x0.data(), c.x0.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c.p.kc, c.kc0.data(), c.kc0.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c.p.vc, c.vc0.data(), c.vc0.size() * 2, cudaMemcpyHostToDevice));
}

// Cooperative (every block resident, or the launch fails) unless a graph would not take it.
static bool g_cooperative = true;

template <int NB>
static cudaError_t launch_nb(const Params& p, cudaStream_t s) {
    void (*kernel)(const Params) =
        p.design == FUSED ? (p.lean_code ? decode_step_fused<(NB <= 4 ? NB : 4), true> : decode_step_fused<(NB <= 4 ? NB : 4)>) : p.design == FLOW ? decode_step_flow<NB> : p.design == LEAN ? decode_step_lean<NB> : decode_step<NB>;
    const size_t smem = smem_bytes(NB, p.design);
    static bool set[5] = {false, false, false, false, false};  // the designs, then fused's LEAN build
    const int which = p.design == FUSED && p.lean_code ? 4 : p.design;
    if (!set[which]) {
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        int blocks = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, p.design == FUSED ? THREADS + 32 : THREADS, smem));
        if (blocks < 1) {
            fprintf(stderr, "decode_step (%s) <%d> cannot be resident (%zu B shared memory)\n", design_name(p.design), NB, smem);
            exit(1);
        }
        set[which] = true;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(p.grid);
    cfg.blockDim = dim3(p.producer ? THREADS + 32 : THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = g_cooperative ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, p);
}


static cudaError_t try_launch(const Params& p, cudaStream_t s) {
    switch (nb_for(p.batch)) {
        case 1: return launch_nb<1>(p, s);
        case 4: return launch_nb<4>(p, s);
        default: return launch_nb<16>(p, s);
    }
}

static void launch(const Params& p, cudaStream_t s) { CK(try_launch(p, s)); }

// A graph of `n` launches; without the cooperative attribute if capture refuses it (said once).
static cudaGraphExec_t capture(const Params& p, cudaStream_t s, int n) {
    for (;;) {
        cudaGraph_t g = nullptr;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        cudaError_t e = cudaSuccess;
        for (int i = 0; i < n && e == cudaSuccess; ++i) e = try_launch(p, s);
        const cudaError_t end = cudaStreamEndCapture(s, &g);
        if (e == cudaSuccess && end == cudaSuccess) {
            cudaGraphExec_t ge;
            CK(cudaGraphInstantiate(&ge, g, 0));
            CK(cudaGraphDestroy(g));
            return ge;
        }
        if (g) cudaGraphDestroy(g);
        cudaGetLastError();
        if (!g_cooperative) {
            fprintf(stderr, "capture failed: %s / %s\n", cudaGetErrorString(e), cudaGetErrorString(end));
            exit(1);
        }
        printf("(a cooperative launch was refused in capture (%s): graphs use plain launches of %d blocks)\n", cudaGetErrorString(e != cudaSuccess ? e : end), p.grid);
        g_cooperative = false;
    }
}

// The reference: the same step in f32 on the host, bf16 where the kernel stores bf16.
struct Reference {
    std::vector<float> x, logits, kc, vc;
    std::vector<int> tokens;
};

static float dot(const float* a, const float* b, int n) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += (double)a[i] * b[i];
    return (float)s;
}

static Reference reference(const Weights& w, const Case& c) {
    const int B = c.batch, cap = w.cap, pos = c.pos;
    Reference r;
    r.x = to_f32(c.x0);
    r.kc = to_f32(c.kc0);
    r.vc = to_f32(c.vc0);
    const std::vector<float> wqkv = to_f32(w.wqkv), wo = to_f32(w.wo), wg = to_f32(w.wg), wu = to_f32(w.wu), wd = to_f32(w.wd);
    const std::vector<float> n1 = to_f32(w.norm1), n2 = to_f32(w.norm2), no = to_f32(w.norm_out), lm = to_f32(w.lm);
    const std::vector<float> cs = to_f32(w.cos), sn = to_f32(w.sin);
    auto norm = [&](const float* nw, std::vector<float>& out) {
        out.assign((size_t)B * HID, 0);
        for (int b = 0; b < B; ++b) {
            double ss = 0;
            for (int i = 0; i < HID; ++i) ss += (double)r.x[b * HID + i] * r.x[b * HID + i];
            const float s = 1.f / std::sqrt((float)(ss / HID) + EPS);
            for (int i = 0; i < HID; ++i) out[b * HID + i] = bfr(nw[i] * bfr(r.x[b * HID + i] * s));
        }
    };
    auto rope = [&](const float* row, float* out) {
        const int half = HD / 2;
        for (int i = 0; i < half; ++i) {
            const float co = cs[(size_t)pos * half + i], si = sn[(size_t)pos * half + i];
            out[i] = bfr(row[i] * co - row[i + half] * si);
            out[i + half] = bfr(row[i + half] * co + row[i] * si);
        }
    };
    std::vector<float> act, qkv((size_t)B * QKV), attn((size_t)B * HID), h((size_t)B * FFN);
    for (int l = 0; l < c.layers; ++l) {
        norm(&n1[(size_t)l * HID], act);
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; ++b)
            for (int n = 0; n < QKV; ++n) qkv[b * QKV + n] = bfr(dot(&wqkv[((size_t)l * QKV + n) * HID], &act[b * HID], HID));
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; ++b)
            for (int g = 0; g < NKV; ++g) {
                const size_t head = (((size_t)l * B + b) * NKV + g) * cap;
                float kn[HD];
                rope(&qkv[b * QKV + (NH + g) * HD], kn);
                for (int d = 0; d < HD; ++d) {
                    r.kc[(head + pos) * HD + d] = kn[d];
                    r.vc[(head + pos) * HD + d] = qkv[b * QKV + (NH + NKV + g) * HD + d];
                }
                for (int u = 0; u < GROUP; ++u) {
                    float q[HD];
                    rope(&qkv[b * QKV + (g * GROUP + u) * HD], q);
                    std::vector<float> sc(pos + 1);
                    float m = -INFINITY;
                    for (int k = 0; k <= pos; ++k) {
                        sc[k] = dot(q, &r.kc[(head + k) * HD], HD) * 0.125f;
                        m = std::max(m, sc[k]);
                    }
                    double l_ = 0;
                    for (int k = 0; k <= pos; ++k) l_ += (sc[k] = std::exp(sc[k] - m));
                    for (int d = 0; d < HD; ++d) {
                        double a = 0;
                        for (int k = 0; k <= pos; ++k) a += sc[k] * r.vc[(head + k) * HD + d];
                        attn[b * HID + (g * GROUP + u) * HD + d] = bfr((float)(a / l_));
                    }
                }
            }
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; ++b)
            for (int n = 0; n < HID; ++n)
                r.x[b * HID + n] = bfr(r.x[b * HID + n] + bfr(dot(&wo[((size_t)l * HID + n) * HID], &attn[b * HID], HID)));
        norm(&n2[(size_t)l * HID], act);
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; ++b)
            for (int n = 0; n < FFN; ++n) {
                const float g = bfr(dot(&wg[((size_t)l * FFN + n) * HID], &act[b * HID], HID));
                const float u = bfr(dot(&wu[((size_t)l * FFN + n) * HID], &act[b * HID], HID));
                h[b * FFN + n] = bfr(bfr(g / (1.f + std::exp(-g))) * u);
            }
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; ++b)
            for (int n = 0; n < HID; ++n)
                r.x[b * HID + n] = bfr(r.x[b * HID + n] + bfr(dot(&wd[((size_t)l * HID + n) * FFN], &h[b * FFN], FFN)));
    }
    norm(no.data(), act);
    r.logits.resize((size_t)B * VOCAB);
    r.tokens.resize(B);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; ++b)
        for (int v = 0; v < VOCAB; ++v) r.logits[(size_t)b * VOCAB + v] = bfr(dot(&lm[(size_t)v * HID], &act[b * HID], HID));
    for (int b = 0; b < B; ++b) {
        int best = 0;
        for (int v = 1; v < VOCAB; ++v)
            if (r.logits[(size_t)b * VOCAB + v] > r.logits[(size_t)b * VOCAB + best]) best = v;
        r.tokens[b] = best;
    }
    return r;
}

static double rel_l2(const std::vector<float>& want, const std::vector<float>& got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

// The cache rows the step appends (position pos of every layer, sequence and kv head).
static std::vector<float> appended(const std::vector<float>& cache, const Case& c, int cap) {
    std::vector<float> out;
    for (int l = 0; l < c.layers; ++l)
        for (int b = 0; b < c.batch; ++b)
            for (int g = 0; g < NKV; ++g) {
                const size_t row = ((((size_t)l * c.batch + b) * NKV + g) * cap + c.pos) * HD;
                out.insert(out.end(), cache.begin() + row, cache.begin() + row + HD);
            }
    return out;
}

// decode_step_fused's options: FUSED_PRODUCER with FUSED_ONE_PASS or FUSED_MMA (attention), or none; the sums'
// copies (Params::sum_groups: 1, 2 or 4) as sums(n) in bits 4-6.
enum { FUSED_PRODUCER = 1, FUSED_ONE_PASS = 2, FUSED_MMA = 4, FUSED_ALL = FUSED_PRODUCER | FUSED_MMA, FUSED_LEAN = 8 };
constexpr int sums(int groups) { return groups << 4; }
static int g_fused = FUSED_ALL;

static void set_fused(Params& p, int options) {
    p.producer = options & FUSED_PRODUCER ? 1 : 0;
    p.attn_pass = options & FUSED_MMA ? 2 : options & FUSED_ONE_PASS ? 1 : 0;
    p.lean_code = options & FUSED_LEAN ? 1 : 0;
    p.sum_groups = std::max(1, options >> 4 & 7);
    if (p.grid % p.sum_groups || p.sum_groups == 3 || p.sum_groups > 4) {
        fprintf(stderr, "%d sum groups do not divide the grid of %d\n", p.sum_groups, p.grid);
        exit(1);
    }
}

static std::string fused_options(const Params& p) {
    if (p.design != FUSED) return "";
    std::string s;
    if (p.producer) s += "+producer";
    if (p.attn_pass) s += p.attn_pass == 2 ? "+mma" : "+one-pass";
    if (p.lean_code) s += "+lean-code";
    if (p.sum_groups > 1) s += "+sums/" + std::to_string(p.sum_groups);
    return s;
}

static bool check_case(const Weights& w, int batch, int layers, int pos, int grid, int stage_kv = 1, int mono = 1, int design = FLOW) {
    if (design == FUSED && !fused_fits(batch, pos, grid)) {
        printf("check fused batch %2d pos %4d: not a case decode_step_fused takes  FAIL\n", batch, pos);
        return false;
    }
    Case c = make_case(w, batch, layers, pos, grid);
    c.p.stage_kv = stage_kv;
    c.p.mono = mono;
    c.p.design = design;
    c.p.poll_ns = 32;
    if (design == FUSED) set_fused(c.p, g_fused);
    const Reference ref = reference(w, c);
    std::vector<std::vector<__nv_bfloat16>> runs;
    std::vector<int> tokens;
    for (int run = 0; run < 2; ++run) {
        reset_state(c);
        CK(cudaMemset(c.p.logits, 0xff, (size_t)batch * VOCAB * 2));  // NaN: every logit must be written
        launch(c.p, 0);
        CK(cudaDeviceSynchronize());
        runs.push_back(download(c.p.logits, (size_t)batch * VOCAB));
        if (run == 0) {
            auto x = download(c.p.x, (size_t)batch * HID);
            runs.push_back(x);
            runs.push_back(download(c.p.kc, c.kc0.size()));
            runs.push_back(download(c.p.vc, c.vc0.size()));
            tokens = download(c.p.tokens, batch);
        }
    }
    const double e_logits = rel_l2(ref.logits, to_f32(runs[0]));
    const double e_x = rel_l2(ref.x, to_f32(runs[1]));
    const double e_k = rel_l2(appended(ref.kc, c, w.cap), appended(to_f32(runs[2]), c, w.cap));
    const double e_v = rel_l2(appended(ref.vc, c, w.cap), appended(to_f32(runs[3]), c, w.cap));
    const bool same = memcmp(runs[0].data(), runs[4].data(), runs[0].size() * 2) == 0;
    // A token may differ only where the reference's top two logits are within the logits' error.
    int token_bad = 0;
    const std::vector<float> got = to_f32(runs[0]);
    for (int b = 0; b < batch; ++b) {
        if (tokens[b] == ref.tokens[b]) continue;
        const float gap = ref.logits[(size_t)b * VOCAB + ref.tokens[b]] -
                          (tokens[b] >= 0 && tokens[b] < VOCAB ? ref.logits[(size_t)b * VOCAB + tokens[b]] : -1e30f);
        const float top = std::fabs(ref.logits[(size_t)b * VOCAB + ref.tokens[b]]);
        if (gap > std::max(0.05f, top / 32.f)) ++token_bad;
    }
    // The argmax of the kernel's own logits must be its token exactly.
    int argmax_bad = 0;
    for (int b = 0; b < batch; ++b) {
        int best = 0;
        for (int v = 1; v < VOCAB; ++v)
            if (got[(size_t)b * VOCAB + v] > got[(size_t)b * VOCAB + best]) best = v;
        argmax_bad += best != tokens[b];
    }
    const double tol = layers <= 2 ? 1e-2 : 5e-2;  // bf16 rounding flips compound over the layers
    const bool ok = e_logits < tol && e_x < tol && e_k < tol && e_v < tol && same && token_bad == 0 && argmax_bad == 0;
    printf("check %s%s batch %2d layers %2d pos %4d splits %2d kv %s barrier %s: rel L2 logits %.2e x %.2e k %.2e v %.2e, repeat %s, tokens off %d, argmax off %d  %s\n",
           design_name(design), fused_options(c.p).c_str(), batch, layers, pos, c.splits, stage_kv ? "staged" : "global", mono ? "monotonic" : "generation", e_logits, e_x, e_k, e_v, same ? "identical" : "DIFFERENT", token_bad, argmax_bad, ok ? "ok" : "FAIL");
    return ok;
}

static double copy_bandwidth() {
    const size_t n = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 10; ++i) CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * n * 10 / (ms * 1e-3) / 1e9;  // read + write
}

static double weight_bytes(int layers) {
    return 2.0 * ((double)layers * ((double)QKV * HID + HID * HID + 2.0 * FFN * HID + HID * FFN) + (double)VOCAB * HID);
}

// Average us of `n` back-to-back launches of `k` (one block a multiprocessor).
template <typename F>
static double time_launches(F k, cudaStream_t s, int n) {
    k();
    CK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < n; ++i) k();
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1e3 / n;
}

// `fused`: decode_step_fused's rows only (where it fits), else flow's and the first design's.
// decode_step_fused's per-block clocks (Params::trace) summed up: for each layer but the first and last,
// the median over blocks of each stage (notes k0 -> k1, by the SM's cycle counter at block 0's clock rate),
// the mean over blocks of each hand-off (a consumer's data in, from the last producer's store) and each
// straggler gap (the last producer's store from the mean one's), by the global timer (coarse steps: means
// of many); units (blocks < units) alone for the attention phase. Printed as means over layers and runs,
// with the blocks that were last most often.
struct FusedTrace {
    std::vector<std::pair<const char*, double>> sums;
    std::vector<int> last_qkv, last_down;
    int n = 0, runs = 0;
    double clock_ghz = 0;
    static double median(std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.empty() ? 0 : v[v.size() / 2];
    }
    void put(int& k, const char* name, double v) {
        if ((int)sums.size() <= k) sums.push_back({name, 0});
        sums[k++].second += v;
    }
    void add(const std::vector<unsigned long long>& t, int grid, int layers, int units) {
        if ((int)last_qkv.size() < grid) last_qkv.assign(grid, 0), last_down.assign(grid, 0);
        ++runs;
        const size_t n_notes = (size_t)grid * layers * TRACE;
        auto at = [&](int b, int l, int k) { return (double)t[((size_t)b * layers + l) * TRACE + k]; };
        auto cycles = [&](int b, int l, int k) { return (double)t[n_notes + ((size_t)b * layers + l) * TRACE + k]; };
        const double ghz = (cycles(0, layers - 1, 0) - cycles(0, 1, 0)) / (at(0, layers - 1, 0) - at(0, 1, 0));
        clock_ghz += ghz;
        for (int l = 1; l + 1 < layers; ++l) {
            auto stage = [&](int k0, int k1, int blocks) {
                std::vector<double> v;
                for (int b = 0; b < blocks; ++b) v.push_back((cycles(b, l, k1) - cycles(b, l, k0)) / ghz);
                return median(v);
            };
            auto last = [&](int k, int blocks, int* who) {
                double most = 0;
                int arg = 0;
                for (int b = 0; b < blocks; ++b)
                    if (at(b, l, k) > most) most = at(b, l, k), arg = b;
                if (who) who[arg]++;
                return most;
            };
            // The mean over blocks of note k of `layer` (a hand-off: that mean less the last producer's store).
            auto mean = [&](int k, int blocks, int layer) {
                double sum = 0;
                for (int b = 0; b < blocks; ++b) sum += at(b, layer, k);
                return sum / blocks;
            };
            int k = 0;
            const double qkv_last = last(1, grid, last_qkv.data()), o_last = last(4, units, nullptr), down_last = last(9, grid, last_down.data());
            put(k, "norm+QKV", stage(0, 1, grid));
            put(k, "QKV straggler", qkv_last - mean(1, grid, l));
            put(k, "QKV hand-off", mean(2, units, l) - qkv_last);
            put(k, "attention", stage(2, 3, units));
            put(k, "o-proj", stage(3, 4, units));
            put(k, "o-proj straggler", o_last - mean(4, units, l));
            put(k, "partials hand-off", mean(5, grid, l) - o_last);
            put(k, "norm", stage(5, 6, grid));
            put(k, "gate/up", stage(6, 7, grid));
            put(k, "down weights wait", stage(7, 8, grid));
            put(k, "down + adds", stage(8, 9, grid));
            put(k, "down straggler", down_last - mean(9, grid, l));
            put(k, "sums hand-off", mean(0, grid, l + 1) - down_last);
            std::vector<double> layer;
            for (int b = 0; b < grid; ++b) layer.push_back(at(b, l + 1, 0) - at(b, l, 0));
            put(k, "layer", median(layer));
            // Inside the stages: QKV's, the attention's (units), gate/up's.
            put(k, "| QKV: norm", stage(0, 16, grid));
            put(k, "weights in", stage(16, 17, grid));
            put(k, "rows", stage(17, 18, grid));
            put(k, "next chunk issued", stage(18, 19, grid));
            put(k, "| attention: cached rows in", stage(2, 12, units));
            put(k, "append+scores", stage(12, 13, units));
            put(k, "softmax", stage(13, 14, units));
            put(k, "P.V", stage(14, 15, units));
            put(k, "rows out", stage(15, 3, units));
            put(k, "| gate/up: weights in", stage(6, 10, grid));
            put(k, "rows", stage(10, 11, grid));
            put(k, "next chunks issued", stage(11, 7, grid));
            ++n;
        }
    }
    void print() const {
        printf("    fused trace (ns, mean over layers; stages: median over blocks at %.2f GHz; hand-offs, stragglers: means):",
               clock_ghz / std::max(runs, 1));
        for (const auto& e : sums) printf(" %s %.0f;", e.first, e.second / std::max(n, 1));
        auto top = [](const std::vector<int>& who) {
            std::vector<int> order(who.size());
            for (size_t i = 0; i < order.size(); ++i) order[i] = (int)i;
            std::sort(order.begin(), order.end(), [&](int a, int b) { return who[a] > who[b]; });
            std::string out;
            for (int i = 0; i < 4 && i < (int)order.size(); ++i) out += " " + std::to_string(order[i]) + " (" + std::to_string(who[order[i]]) + ")";
            return out;
        };
        printf("\n    last block most often: QKV%s; down%s\n", top(last_qkv).c_str(), top(last_down).c_str());
    }
};

// us a step of p's kernel: in a graph of 20 launches (replayed 10 times), and launched 200 times back to back.
struct StepTimes {
    double graph_us, launch_us;
};
static StepTimes time_step(const Params& p, cudaStream_t s) {
    for (int i = 0; i < 5; ++i) launch(p, s);
    CK(cudaStreamSynchronize(s));
    cudaGraphExec_t ge = capture(p, s, 20);
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int reps = 10;
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < reps; ++i) CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms_graph;
    CK(cudaEventElapsedTime(&ms_graph, e0, e1));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < 200; ++i) launch(p, s);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms_launch;
    CK(cudaEventElapsedTime(&ms_launch, e0, e1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return {ms_graph * 1e3 / (reps * 20), ms_launch * 1e3 / 200};
}

// decode_step_fused (producer warp, tensor-core attention) at batch 1, 128 cached, two rounds: each ablation
// alone and all of them (what each stage costs the step: wrong results, timing only), then the grid's size
// (fewer blocks: more rows each, fewer producers a hand-off waits for), the LEAN build beside it.
static void ablations(const Weights& w, int sms) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const char* names[] = {"attention", "rms_norms", "QKV GEMV", "o-proj GEMV", "gate/up GEMV", "down FMAs"};
    const int batch = 1;
    for (int round = 1; round <= 2; ++round) {
        Case c = make_case(w, batch, w.layers, 128, sms);
        c.p.stage_kv = 1, c.p.mono = 1, c.p.design = FUSED, c.p.poll_ns = 32;
        set_fused(c.p, FUSED_ALL);
        const double base = time_step(c.p, s).graph_us;
        printf("ablation round %d, batch %d, 128 cached, %d blocks: none %.1f us", round, batch, sms, base);
        for (int bit = 0; bit <= 6; ++bit) {
            c.p.ablate = bit < 6 ? 1 << bit : ABL_ALL;
            const double us = time_step(c.p, s).graph_us;
            printf("; %s %.1f (%+.1f)", bit < 6 ? names[bit] : "all six", us, us - base);
        }
        printf("\n");
        // The polls' pause (32 ns above): does the polling's L2 traffic slow the hand-offs?
        printf("  pause between polls:");
        for (unsigned pause : {0u, 128u, 512u}) {
            Params p = c.p;
            p.poll_ns = pause, p.ablate = ABL_ALL;
            const double skeleton = time_step(p, s).graph_us;
            p.ablate = 0;
            printf(" %u ns: all six %.1f, none %.1f;", pause, skeleton, time_step(p, s).graph_us);
        }
        Params one = c.p;
        one.ablate = ABL_ALL | ABL_ADDS;
        printf(" all six and the sums added by one block: %.1f;", time_step(one, s).graph_us);
        // The sums in copies: fewer adds an address, more words a reader polls.
        for (int groups : {2, 4}) {
            Params p = c.p;
            // More copies than the last launch zeroed: zero them all (the kernel zeroes the next step's copies).
            CK(cudaMemset(p.acc, 0, sums_bytes(p.layers, p.batch)));
            set_fused(p, FUSED_ALL | sums(groups));
            p.ablate = ABL_ALL;
            const double skeleton = time_step(p, s).graph_us;
            p.ablate = 0;
            const double step = time_step(p, s).graph_us;
            set_fused(p, FUSED_ALL | FUSED_LEAN | sums(groups));
            printf(" %d sum copies: all six %.1f, none %.1f, lean-code %.1f;", groups, skeleton, step, time_step(p, s).graph_us);
        }
        printf("\n");
        if (round == 2)  // where the skeleton's time goes: the trace with every stage trivial, then with none
            for (int ablate : {(int)ABL_ALL, 0}) {
                Params p = c.p;
                // The copies' layout depends on their number (the last launches had 4): start from zero.
                CK(cudaMemset(p.acc, 0, sums_bytes(p.layers, p.batch)));
                p.ablate = ablate, p.record = 1;
                FusedTrace trace;
                for (int i = 0; i < 20; ++i) {
                    launch(p, s);
                    CK(cudaStreamSynchronize(s));
                    trace.add(download(p.trace, 2 * p.trace_n), p.grid, w.layers, p.batch * NKV * p.fused_c);
                }
                printf("  ablation %s (the notes inside an ablated stage are not taken: ignore them):\n", ablate ? "all six" : "none");
                trace.print();
            }
    }
    for (int grid : {sms, 126, 120, 114, 111}) {
        if (grid > sms || !fused_fits(1, 128, grid)) continue;
        Case c = make_case(w, 1, w.layers, 128, grid);
        c.p.stage_kv = 1, c.p.mono = 1, c.p.design = FUSED, c.p.poll_ns = 32;
        set_fused(c.p, FUSED_ALL);
        const double all = time_step(c.p, s).graph_us;
        set_fused(c.p, FUSED_ALL | FUSED_LEAN);
        const double lean = time_step(c.p, s).graph_us;
        printf("grid %d blocks (%d a kv head), batch 1, 128 cached: fused+producer+mma %.1f us, lean-code %.1f us\n", grid, c.p.fused_c, all, lean);
    }
}

static void bench(const Weights& w, int grid, bool phases, bool fused) {
    const double bw = copy_bandwidth();
    const double floor_us = weight_bytes(w.layers) / (bw * 1e9) * 1e6;
    printf("\ncopy bandwidth %.0f GB/s; weights %.1f MB: floor %.1f us a step\n", bw, weight_bytes(w.layers) / 1e6, floor_us);
    if (!fused) {
        cudaStream_t s0;
        CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
        Case c = make_case(w, 1, w.layers, 128, grid);
        const size_t smem = NSLOT * SLOT_BYTES + NSLOT * 8;
        CK(cudaFuncSetAttribute(stream_only, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        const int n = w.layers * KINDS;
        const double empty = time_launches([&] { barriers_only<<<grid, THREADS, 0, s0>>>(c.p, 0); }, s0, 50);
        const double bars = time_launches([&] { barriers_only<<<grid, THREADS, 0, s0>>>(c.p, n); }, s0, 50);
        Params mono = c.p;
        mono.mono = 1;
        const double bars_mono = time_launches([&] { barriers_only<<<grid, THREADS, 0, s0>>>(mono, n); }, s0, 50);
        const double stream = time_launches([&] { stream_only<<<grid, THREADS, smem, s0>>>(c.p); }, s0, 50);
        CK(cudaGetLastError());
        printf("parts: an empty launch %.1f us; %d grid barriers %.1f us (%.0f ns each), monotonic %.1f us (%.0f ns each); the weights through the ring %.1f us (%.0f GB/s)\n",
               empty, n, bars, (bars - empty) * 1e3 / n, bars_mono, (bars_mono - empty) * 1e3 / n, stream, weight_bytes(w.layers) / (stream * 1e-6) / 1e9);
    }
    printf("| batch | cached | splits | kernel | LM head to L2 | us/step (graph) | us/step (launches) | x floor |\n|---|---|---|---|---|---|---|---|\n");
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int batch : {1, 4, 16})
        for (int cached : {128, 1024})
        for (int variant = 0; variant < 9; ++variant) {
            // The monotonic barrier only: the generation word's was ~100 us a step slower in every row
            // (2026-12-01), and k/v read from memory slower than staged or level; flow's polls 32 ns apart
            // (none and 256 ns measured 517.0 and 528.0 us at batch 1 against 517.2, 2026-12-01).
            // Variants: flow, flow with the LM head prefetched, the first design; fused, fused prefetching,
            // fused with its options (the producer warp, then attention in one pass or on tensor cores, then
            // the LEAN build of the last: its other paths and clock notes compiled out).
            const int design = variant < 2 ? FLOW : variant == 2 ? FIRST : FUSED, stage = 1;
            const int options = variant < 5 ? 0 : variant == 5 ? FUSED_PRODUCER : variant == 6 ? FUSED_PRODUCER | FUSED_ONE_PASS
                              : variant == 7 ? FUSED_ALL : FUSED_ALL | FUSED_LEAN;
            // The prefetch: the first 16 chunks a block (35 of the head's 57 MB: L2 holds ~50 with the last
            // layers' weights passing through).
            if (variant == 4) continue;  // fused prefetching the LM head: no faster (489.1 against 487.0 us, 2026-12-01)
            const int prefetch = variant == 1 ? 16 : 0;
            const unsigned poll_ns = 32;
            if ((design == FUSED) != fused || (design == FUSED && !fused_fits(batch, cached, grid))) continue;
            Case c = make_case(w, batch, w.layers, cached, grid);
            c.p.stage_kv = stage;
            c.p.mono = 1;
            c.p.design = design;
            c.p.poll_ns = poll_ns;
            c.p.head_prefetch = prefetch;
            set_fused(c.p, options);
            const StepTimes st = time_step(c.p, s);
            printf("| %d | %d | %d | %s | %s | %.1f | %.1f | %.2f |\n", batch, cached, design == FUSED ? 1 : c.splits, (design_name(design) + fused_options(c.p)).c_str(),
                   prefetch ? "16 chunks" : "-", st.graph_us, st.launch_us, st.graph_us / floor_us);
            if (phases && !c.p.lean_code) {  // the LEAN build has no clock notes
                Params p = c.p;
                p.record = options == FUSED_ALL ? 2 : 1;  // 2: attention run twice (cold, then warm)
                // Layers after the first (the first phase of the first includes the kernel's start), the
                // first phase alone, and block 0's LM head (from the last layer's end to its logits).
                std::vector<double> sum(KINDS, 0);
                double first = 0, head = 0, item[FLOW_CLOCKS] = {};  // flow: block 0's notes (see the printf)
                const int runs = 20;
                FusedTrace trace;
                for (int i = 0; i < runs; ++i) {
                    launch(p, s);
                    CK(cudaStreamSynchronize(s));
                    if (design == FUSED) trace.add(download(p.trace, 2 * p.trace_n), p.grid, w.layers, p.batch * NKV * p.fused_c);
                    auto t = download(p.times, (size_t)w.layers * KINDS + 2 + FLOW_CLOCKS * w.layers);
                    first += (double)(t[0] - t[w.layers * KINDS]);
                    for (int l = 1; design == FLOW && l < w.layers; ++l) {  // flow: block 0's attention item
                        const unsigned long long* a = &t[w.layers * KINDS + 2 + FLOW_CLOCKS * l];
                        item[0] += (double)(a[0] - t[l * KINDS]);
                        for (int k = 1; k < 4; ++k) item[k] += (double)(a[k] - a[k - 1]);
                        item[4] += (double)(a[4] - t[l * KINDS + 3]);  // h in -> the down weights in
                        for (int k = 5; k < 7; ++k) item[k] += (double)(a[k] - a[k - 1]);
                    }
                    head += (double)(t[w.layers * KINDS + 1] - t[w.layers * KINDS - 1]);
                    for (int k = KINDS; k < w.layers * KINDS; ++k) sum[k % KINDS] += (double)(t[k] - t[k - 1]);
                }
                const char* names[KINDS] = {"norm+QKV", "attention", "o-proj", "norm+gate/up", "down"};
                const char* fused_names[KINDS] = {"norm+QKV", "attention+o-proj", "-", "norm+gate/up+down", "-"};
                printf("    phases (block 0, ns a layer after the first):");
                for (int k = 0; k < KINDS; ++k)
                    if (design != FUSED || k % 2 == 0 || k == 1)
                        printf(" %s %.0f", (design == FUSED ? fused_names : names)[k], sum[k] / (runs * (w.layers - 1)));
                printf("; the start and layer 0's QKV %.0f, the LM head %.0f\n", first / runs, head / runs);
                if (design == FUSED) trace.print();
                if (design == FLOW)
                {
                    const double n = runs * (w.layers - 1);
                    printf("    block 0's attention item: q, k, v in -> cached rows in %.0f ns -> scores %.0f -> softmax %.0f -> "
                           "partials written %.0f; its down projection: h in -> weights in %.0f -> rows written %.0f -> "
                           "next chunk issued %.0f\n",
                           item[0] / n, item[1] / n, item[2] / n, item[3] / n, item[4] / n, item[5] / n, item[6] / n);
                }
            }
        }
}


// ---- the step's stages alone, for their cost without the step around it ------------------------------
// One block, `reps` calls of one stage on data already in shared memory; cycles[i] = the i-th call's SM
// cycles (clock64 only). Kinds: 0 attention in three passes (scores and softmax only), 1 attention_one_pass,
// 2 attention_mma (129 keys each), 3 gate/up's GEMV (12 + 12 rows of 576), 4 QKV's GEMV (8 rows), 5
// add_and_norm (one row of 576); and the pieces every stage has: 6 a barrier alone, 7 a clock note (the
// global timer read and stored by thread 0), 8 an mbarrier wait that is already complete. Launched on one
// block, then on every multiprocessor at once (block 0's cycles), to see what the others do to it.
constexpr int ALONE_KINDS = 9;
__global__ void __launch_bounds__(THREADS, 1) stage_alone(const Params p, int kind, int reps, unsigned long long* cycles) {
    extern __shared__ __align__(128) unsigned char smem[];
    AttnSmem& s = *reinterpret_cast<AttnSmem*>(smem);
    __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem + sizeof(AttnSmem));
    __nv_bfloat16* vs = ks + 256 * HD;        // also the GEMVs' weights: 24 rows of HID (27.6 KB of its 32)
    __nv_bfloat16* act = vs + 256 * HD;       // [HID]: attention's output, the GEMVs' input, the norm's output
    __nv_bfloat16* xs = act + HID;            // [HID]: the norm's residual row
    float* scale = reinterpret_cast<float*>(xs + HID);
    float* sink = scale + 16;                 // [24]: the GEMVs' outputs
    unsigned long long* bar = reinterpret_cast<unsigned long long*>(sink + 24);  // kind 8's mbarrier
    float* red = reinterpret_cast<float*>(&s.k[0][0]);
    const int t = threadIdx.x, n = p.pos + 1;
    for (int e = t; e < 256 * HD; e += THREADS) {
        ks[e] = __float2bfloat16(0.01f * (float)((e * 37) % 101) - 0.5f);
        vs[e] = __float2bfloat16(0.01f * (float)((e * 53) % 97) - 0.5f);
    }
    for (int e = t; e < HID; e += THREADS) {
        act[e] = __float2bfloat16(0.01f * (float)((e * 41) % 83) - 0.4f);
        xs[e] = __float2bfloat16(0.02f * (float)((e * 43) % 79) - 0.8f);
    }
    for (int e = t; e < GROUP * HD; e += THREADS) s.q[e / HD][e % HD] = 0.125f * (0.02f * (float)((e * 29) % 89) - 0.9f);
    if (t < HD) s.kn[t] = 0.3f, s.vn[t] = -0.2f;
    float nv[PER_THREAD];
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) nv[j] = 1.f + 0.01f * (float)j;
    if (t == 0) {
        mbar_init(bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        mbar_arrive(bar);  // phase 0 complete
    }
    sync_block();
    for (int i = 0; i < reps; ++i) {
        const unsigned long long c0 = clock64();
        if (kind == 2) attention_mma(p, s, ks, vs, n, red, act);
        else if (kind == 1) attention_one_pass(p, s, ks, vs, n, red, act);
        else if (kind == 0) {
            attention_scores(p, s, ks, 0, n);
            attention_softmax(s, n);
        } else if (kind == 3) {
            gemv<1, true>(vs, vs + 12 * HID, 12, HID, act, 1, [&](int r, int, float g, float u) { sink[r] = g * u; });
        } else if (kind == 4) {
            gemv<1, false>(vs, nullptr, 8, HID, act, 1, [&](int r, int, float a, float) { sink[r] = a; });
        } else if (kind == 5) {
            add_and_norm<1>(p, nullptr, nv, xs, act, scale);
        } else if (kind == 7) {
            if (t == 0) cycles[reps + blockIdx.x] = global_ns();
        } else if (kind == 8) {
            mbar_wait(bar, 0);
        }
        sync_block();
        if (t == 0 && blockIdx.x == 0) cycles[i] = clock64() - c0;
    }
}

static void stages_alone() {
    Params p;
    memset(&p, 0, sizeof p);
    p.pos = 128, p.stage_keys = 256, p.batch = 1;
    const int reps = 50;
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    unsigned long long* cycles;
    CK(cudaMalloc(&cycles, (reps + sms) * 8));
    const size_t smem = sizeof(AttnSmem) + 2 * 256 * HD * 2 + 2 * HID * 2 + 16 * 4 + 24 * 4 + 8 + 128;
    CK(cudaFuncSetAttribute(stage_alone, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const char* names[ALONE_KINDS] = {"attention, three passes (scores and softmax only)", "attention, one pass", "attention, tensor cores",
                                      "gate/up GEMV, 12 + 12 rows", "QKV GEMV, 8 rows", "add_and_norm, 576", "a barrier",
                                      "a clock note", "a complete mbarrier's wait"};
    for (int blocks : {1, sms})
        for (int kind = 0; kind < ALONE_KINDS; ++kind) {
            stage_alone<<<blocks, THREADS, smem>>>(p, kind, reps, cycles);
            CK(cudaDeviceSynchronize());
            auto c = download(cycles, reps);
            std::sort(c.begin() + 1, c.end());
            printf("stage alone (%d blocks, 129 keys): %s: %llu cycles the first call, median %llu (%.0f ns at %.2f GHz)\n", blocks,
                   names[kind], c[0], c[reps / 2], c[reps / 2] / (khz * 1e-6), khz * 1e-6);
        }
}

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "all";
    int dev = 0, sms = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int optin = 0;
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    printf("SMs %d, shared memory a block up to %d B, the kernel's %zu (batch 16)\n", sms, optin, smem_bytes(16));
    if ((int)smem_bytes(16) > optin) {
        fprintf(stderr, "the kernel needs more shared memory than a block may have\n");
        return 1;
    }
    // Every chunk must fit a slot at this grid.
    const int most = std::max({(QKV + sms - 1) / sms * HID, (FFN + sms - 1) / sms * HID, (HID + sms - 1) / sms * FFN}) * 2;
    if (most > SLOT_BYTES) {
        fprintf(stderr, "a chunk of %d bytes exceeds a slot at %d blocks\n", most, sms);
        return 1;
    }
    bool ok = true;
    if (mode == "check" || mode == "all") {
        Weights w = make_weights(MAX_LAYERS, 1040);
        for (int batch : {1, 3, 4, 16})
            for (int pos : {100, 1024}) ok &= check_case(w, batch, MAX_LAYERS, pos, sms);
        ok &= check_case(w, 3, 2, 17, sms);
        ok &= check_case(w, 3, 2, 17, sms, 0);
        ok &= check_case(w, 3, 2, 17, sms, 1, 0);
        ok &= check_case(w, 2, 2, 0, sms);
        ok &= check_case(w, 1, 30, 1024, sms, 0);
        ok &= check_case(w, 16, 2, 300, sms, 0);
        ok &= check_case(w, 1, 30, 100, sms, 1, 1, LEAN);  // decode_step_lean
        ok &= check_case(w, 4, 30, 1024, sms, 1, 1, LEAN);
        ok &= check_case(w, 1, 30, 100, sms, 1, 1, FIRST);  // decode_step, the first design
        ok &= check_case(w, 3, 2, 17, sms, 0, 1, FIRST);
    }
    // decode_step_fused in processes of its own (a kernel that traps ends its process).
    if (mode == "check-fused") {
        Weights w = make_weights(MAX_LAYERS, 1040);
        ok &= check_case(w, 3, 2, 17, sms, 1, 1, FUSED);
        ok &= check_case(w, 2, 2, 0, sms, 1, 1, FUSED);
        ok &= check_case(w, 1, 30, 100, sms, 1, 1, FUSED);
        ok &= check_case(w, 3, 30, 100, sms, 1, 1, FUSED);
        ok &= check_case(w, 2, 30, 254, sms, 1, 1, FUSED);
        g_fused = 0;  // thread 0 refilling the ring, attention in three passes
        ok &= check_case(w, 3, 2, 17, sms, 1, 1, FUSED);
        ok &= check_case(w, 1, 30, 100, sms, 1, 1, FUSED);
        g_fused = FUSED_PRODUCER | FUSED_ONE_PASS;
        ok &= check_case(w, 3, 30, 100, sms, 1, 1, FUSED);
        g_fused = FUSED_MMA;  // tensor-core attention, thread 0 refilling
        ok &= check_case(w, 1, 2, 254, sms, 1, 1, FUSED);
        ok &= check_case(w, 2, 2, 111, sms, 1, 1, FUSED);
        g_fused = FUSED_ALL | FUSED_LEAN;
        ok &= check_case(w, 1, 30, 100, sms, 1, 1, FUSED);
        ok &= check_case(w, 3, 2, 17, sms, 1, 1, FUSED);
        g_fused = FUSED_ALL | sums(4);  // the down projection's sums in 4 copies
        ok &= check_case(w, 1, 30, 100, sms, 1, 1, FUSED);
        ok &= check_case(w, 3, 2, 17, sms, 1, 1, FUSED);
        g_fused = FUSED_ALL | FUSED_LEAN | sums(2);
        ok &= check_case(w, 2, 30, 254, sms, 1, 1, FUSED);
    }
    if (mode == "sanitize") {  // small, for compute-sanitizer: 2 layers, odd batch and position, split keys
        Weights w = make_weights(2, 520);
        ok &= check_case(w, 3, 2, 17, sms);
        ok &= check_case(w, 1, 2, 511, sms);
        ok &= check_case(w, 2, 2, 40, sms, 0, 0);
        ok &= check_case(w, 3, 2, 17, sms, 1, 1, LEAN);
        ok &= check_case(w, 3, 2, 17, sms, 1, 1, FIRST);
    }
    if (mode == "sanitize-fused") {
        // Thread 0 refilling the ring first: racecheck reports the producer warp's bulk copies into a slot
        // against the compute warps' reads of it (ordered by the slot's "empty" mbarrier, which it does not
        // follow) and the run ends at that case (2026-12-01).
        Weights w = make_weights(2, 520);
        g_fused = 0;
        ok &= check_case(w, 3, 2, 17, sms, 1, 1, FUSED);
        g_fused = FUSED_MMA;
        ok &= check_case(w, 1, 2, 200, sms, 1, 1, FUSED);
        g_fused = FUSED_MMA | FUSED_LEAN | sums(4);  // thread 0 refilling, the LEAN build, the sums in copies
        ok &= check_case(w, 3, 2, 17, sms, 1, 1, FUSED);
        g_fused = FUSED_ALL;
        ok &= check_case(w, 3, 2, 17, sms, 1, 1, FUSED);
        ok &= check_case(w, 1, 2, 200, sms, 1, 1, FUSED);
    }
    if (mode == "stages-alone") stages_alone();
    if (mode == "ablate") ablations(make_weights(MAX_LAYERS, 1040), sms);
    if (mode == "profile-fused") {  // for ncu: decode_step_fused (every option) at batch 1, 128 cached, 5 launches
        Weights w = make_weights(MAX_LAYERS, 1040);
        Case c = make_case(w, 1, MAX_LAYERS, 128, sms);
        c.p.stage_kv = 1, c.p.mono = 1, c.p.design = FUSED, c.p.poll_ns = 32;
        set_fused(c.p, FUSED_ALL);
        for (int i = 0; i < 5; ++i) launch(c.p, 0);
        CK(cudaDeviceSynchronize());
    }
    if (mode == "profile") {  // for ncu: decode_step_flow at batch 1, 128 cached, launched 5 times
        Weights w = make_weights(MAX_LAYERS, 1040);
        Case c = make_case(w, 1, MAX_LAYERS, 128, sms);
        c.p.stage_kv = 1, c.p.mono = 1, c.p.design = FLOW, c.p.poll_ns = 32;
        for (int i = 0; i < 5; ++i) launch(c.p, 0);
        CK(cudaDeviceSynchronize());
    }
    if (mode == "bench" || mode == "phases" || mode == "all" || mode == "phases-fused") {
        Weights w = make_weights(MAX_LAYERS, 1040);
        bench(w, sms, mode != "bench", mode == "phases-fused");
    }
    printf(ok ? "persistent_decode: all checks passed\n" : "persistent_decode: CHECK FAILED\n");
    return ok ? 0 : 1;
}
