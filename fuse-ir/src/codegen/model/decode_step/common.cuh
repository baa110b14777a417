// The decode step as one launch on thread-block clusters (docs/persistent-step.md): shapes, the shared-memory
// layout, the argument struct and the small helpers. Self-contained (includes nothing: NVRTC builds it as it
// is; scripts/kernels/cluster_step.cu includes the same files under nvcc with its host checks). The shapes are
// a Llama decoder's, SmolLM2-135M's unless defined otherwise; the weights are GGUF's Q4_1 (layers) and Q8_0
// (the token matrix, tied embedding and LM head), packed by the host (the layout below).
#ifndef FUSE_STEP_HID
#define FUSE_STEP_HID 576
#define FUSE_STEP_HEADS 9
#define FUSE_STEP_KV_HEADS 3
#define FUSE_STEP_FF 1536
#define FUSE_STEP_LAYERS 30
#define FUSE_STEP_VOCAB 49152
#endif
#ifndef FUSE_STEP_THREADS
#define FUSE_STEP_THREADS 256
#endif
#ifndef FUSE_STEP_MAX_POSITIONS  // positions a step can attend to (its scores in shared memory)
#define FUSE_STEP_MAX_POSITIONS 1024
#endif
#ifndef FUSE_STEP_LOAD_DELAY  // ns the clusters after the first wait before loading their first layers
#define FUSE_STEP_LOAD_DELAY 1500
#endif
#ifndef FUSE_STEP_MMA  // 1: the GEMVs on tensor cores (mma.sync, rows in tiles of 16); 0: f16 pairs on CUDA cores
#define FUSE_STEP_MMA 0
#endif

constexpr int HID = FUSE_STEP_HID, NQ = FUSE_STEP_HEADS, NKV = FUSE_STEP_KV_HEADS, HD = 64, FF = FUSE_STEP_FF;
constexpr int QKV_ROWS = HID + 2 * NKV * HD, LAYERS = FUSE_STEP_LAYERS, VOCAB = FUSE_STEP_VOCAB;
constexpr int CLUSTER = 16, CLUSTERS = 7, THREADS = FUSE_STEP_THREADS, WARPS = THREADS / 32, MAXPOS = FUSE_STEP_MAX_POSITIONS;
constexpr int KEY_GROUPS = THREADS / 8;  // attention's P.V: 8 threads a key
constexpr float EPS = 1e-5f;
// A block's rows of each stage (its 1/16): QKV, output projection, gate and up (96 + 96), down.
constexpr int R_QKV = QKV_ROWS / CLUSTER, R_O = HID / CLUSTER, R_GU = 2 * FF / CLUSTER, R_D = HID / CLUSTER;
constexpr int NOTES = 15;          // clock notes a layer (trace)
// The trace's words after the layers' notes: block 0's LM head wait and work (cycles), then globaltimer (ns) at
// block 0's start, its end, layer 0's weights in, layer 0's input ready, and the last layer's cluster's rank 0
// seeing the final residual stream and ending; block 0's LM head waiting for its ring's chunks (cycles); block 0
// past the prologue's cluster barrier and done with layer 0's embedding (ns).
enum TraceTail { T_HEAD_WAIT, T_HEAD_WORK, T_START, T_END, T_WEIGHTS0, T_INPUT0, T_LAST_RESIDUAL, T_LAST_END, T_HEAD_RING, T_SYNCED, T_EMBEDDED, TRACE_TAIL };
constexpr unsigned COPY = 32768;   // bytes a bulk copy
// Cached keys (and values) an attention block holds in shared memory (fewer with the tile-padded weights).
constexpr int PRE_KEYS = FUSE_STEP_MMA ? 128 : 192;
// A stage's rows as stored: in tiles of 16 on tensor cores (the padding rows zero).
__host__ __device__ constexpr int stored_rows(int rows) { return FUSE_STEP_MMA ? (rows + 15) / 16 * 16 : rows; }
constexpr int P_QKV = stored_rows(R_QKV), P_O = stored_rows(R_O), P_GU = stored_rows(R_GU), P_D = stored_rows(R_D);
static_assert(QKV_ROWS % CLUSTER == 0 && HID % CLUSTER == 0 && FF % (CLUSTER * 32) == 0 && HID % 32 == 0, "rows split evenly");
static_assert(NQ <= CLUSTER && NQ % NKV == 0 && VOCAB <= 65536 && VOCAB % 16 == 0, "a query head a block; tokens in 16 bits; head rows in 16s");

// A block's share of a layer, as loaded into its shared memory (byte offsets): each stage's nibbles
// [rows][blocks of 32][16 bytes], then its (d, m) [rows][blocks] as f16 pairs; then both norms' weights (f32).
// On tensor cores (FUSE_STEP_MMA) a stage's rows are tiles of 16: nibbles [tile][block][lane][2 words] (lane
// 4g + t: the words of rows g and g + 8 holding bytes 2t, 2t + 8, 2t + 1, 2t + 9 of the block), scales
// [tile][block][g][rows g, g + 8].
struct Share {
    static constexpr unsigned long long qkv_q = 0, qkv_dm = qkv_q + (unsigned long long)P_QKV * (HID / 32) * 16;
    static constexpr unsigned long long o_q = qkv_dm + (unsigned long long)P_QKV * (HID / 32) * 4, o_dm = o_q + (unsigned long long)P_O * (HID / 32) * 16;
    static constexpr unsigned long long gu_q = o_dm + (unsigned long long)P_O * (HID / 32) * 4, gu_dm = gu_q + (unsigned long long)P_GU * (HID / 32) * 16;
    static constexpr unsigned long long d_q = gu_dm + (unsigned long long)P_GU * (HID / 32) * 4, d_dm = d_q + (unsigned long long)P_D * (FF / 32) * 16;
    static constexpr unsigned long long norm1 = d_dm + (unsigned long long)P_D * (FF / 32) * 4, norm2 = norm1 + HID * 4, bytes = norm2 + HID * 4;
};
static_assert(Share::o_q % 16 == 0 && Share::gu_q % 16 == 0 && Share::d_q % 16 == 0 && Share::bytes % 16 == 0, "16-byte loads");

// The LM head streams its rows through a ring of chunks in the shared memory the layers no longer need (the
// share and the preloaded keys and values): a chunk is HEAD_CHUNK rows' values [rows][HID] then their scales
// [rows][HID / 32] (f16), 4 rows for each of the THREADS / (HID / 32) row groups (1 past 16 groups).
constexpr int HEAD_KB = HID / 32, HEAD_GROUPS = THREADS / HEAD_KB;
constexpr int HEAD_CHUNK = HEAD_GROUPS * (HEAD_GROUPS > 16 ? 1 : 4);
constexpr unsigned HEAD_CHUNK_BYTES = HEAD_CHUNK * (HID + HEAD_KB * 2);
constexpr unsigned long long HEAD_AREA = Share::bytes + 2ull * 2 * PRE_KEYS * HD;
constexpr int HEAD_SLOTS = HEAD_AREA / HEAD_CHUNK_BYTES < 8 ? (int)(HEAD_AREA / HEAD_CHUNK_BYTES) : 8;
static_assert(HEAD_SLOTS >= 2 && HEAD_CHUNK * HEAD_KB * 2 % 16 == 0 && HEAD_CHUNK_BYTES % 16 == 0 && HID % 64 == 0,
              "a ring of 16-byte aligned chunks; rows in halves of whole Q8_0 blocks");

// The in-cluster hand-offs and the bytes each consumer receives in one: QKV's rows (the attention blocks
// only), attention's outputs (f16) and their block sums, the output projection's xm rows and their sums of
// squares, h (f16) and its block sums.
enum Handoff { H_QKV, H_ATT, H_XM, H_H, HANDOFFS };
__host__ __device__ constexpr unsigned handoff_bytes(int k) {
    return k == H_QKV ? QKV_ROWS * 4 : k == H_ATT ? NQ * (HD * 2 + 2 * 4) : k == H_XM ? HID * 4 + CLUSTER * 4 : CLUSTER * (R_GU / 2 * 2 + R_GU / 64 * 4);
}

// Where an input element j (0..31) of a Q4_1 block sits in f16 in shared memory: word i of the block's nibbles
// (bytes 4i..4i+3) meets 8 halves at 8i: (4i, 4i+2), (4i+16, 4i+18), (4i+1, 4i+3), (4i+17, 4i+19).
__host__ __device__ constexpr int perm_slot(int j) {
    return ((j & 15) >> 2) * 8 + ((((j & 15) & 1) * 2 + (j >> 4)) * 2) + (((j & 15) & 3) >> 1);
}
// Where a GEMV's input element j of a block of 32 is stored: perm_slot's order on CUDA cores, in order on
// tensor cores.
__host__ __device__ constexpr int input_slot(int j) { return FUSE_STEP_MMA ? j : perm_slot(j); }

// The packed argmax: the step's number above the logit (as an ordered 32-bit key) above the token, so that
// atomicMax across blocks picks the step's largest logit (the higher token on an exact tie) and a later step's
// result always replaces an earlier one's (no reset between launches).
__host__ __device__ inline unsigned long long pack_best(unsigned step, unsigned logit_bits, unsigned token) {
    const unsigned ordered = (logit_bits & 0x80000000u) ? ~logit_bits : (logit_bits | 0x80000000u);
    return ((unsigned long long)(step & 0xFFFFu) << 48) | ((unsigned long long)ordered << 16) | (token & 0xFFFFu);
}
__host__ __device__ inline unsigned best_token(unsigned long long best) { return (unsigned)(best & 0xFFFFu); }
// The rows of the LM head block `block` owns: [head_first(block), head_first(block + 1)), in whole 16s (so that
// each block's rows and their scales start 16-byte aligned for bulk copies).
__host__ __device__ inline int head_first(int block) { return (int)((long long)block * (VOCAB / 16) / (CLUSTER * CLUSTERS)) * 16; }

// The kernel's argument: 8-byte words only (the library packs it as u64 words in this order).
struct FuseDecodeStepArgs {
    const unsigned char* w;          // [LAYERS][CLUSTER][Share::bytes]
    const unsigned char* head_q;     // [VOCAB][HID]: the token matrix's Q8_0 values + 128 (embedding and LM head)
    const unsigned short* head_d;    // [VOCAB][HID / 32]: their scales (f16)
    const float* out_norm;           // [HID]: the final rms_norm's weights
    unsigned long long* best;        // the argmax (pack_best): the previous step's token in, this step's out
    float* logits;                   // [VOCAB], or null
    unsigned long long* words;       // [HID]: tag << 32 | f32 bits, the residual stream between layers
    const unsigned long long* k_layers;  // [LAYERS]: each layer's key cache, [NKV][capacity][HD] bf16
    const unsigned long long* v_layers;  // [LAYERS]: its value cache, the same
    const float* rope;               // [MAXPOS][HD]: cos of frequency i at i < 32, its sin at 32 + i
    unsigned long long* trace;       // [LAYERS][NOTES] + TRACE_TAIL, or null: cycles between clock notes (rank 0 of
                                     // each layer), then the ends' (TraceTail)
    long long pos;                   // the new token's position (cached: 0..pos-1), below capacity and MAXPOS
    long long capacity;              // positions a cache holds (its rows' stride)
    unsigned long long step;         // this launch's step number (16 bits), above the previous launch's
    unsigned long long tag0;         // layer l's input words carry tag0 + l; the last layer's output tag0 + LAYERS
    // Or, when `control` is given, the step reads pos and its step count there ([pos, steps, blocks done]) and
    // its last block advances them and writes the picked token to log[steps % log_len] (when `log` is given):
    // launches queued back to back (or captured in a graph) then generate without the host.
    unsigned long long* control;
    unsigned* log;
    unsigned long long log_len;
};

// The block's shared memory.
struct Smem {
    unsigned char* W;                // Share::bytes
    unsigned short *kpre, *vpre;     // [PRE_KEYS][HD]: the head's first cached keys and values (attention blocks)
    float* rope;                     // [HD]: the position's rope row
    float *x, *xm, *sq, *qkv, *atts, *hs, *part, *scratch, *out;  // sq: xm's sums of squares by producer
    unsigned short *xn, *att, *h, *stage;  // f16; stage: a producer's rows in the consumers' order, before they are sent
    unsigned long long *bar, *handoff, *ring;  // the layer's weights; the hand-offs' (HANDOFFS); the LM head's (HEAD_SLOTS)
    // The largest GEMV's partials, or attention's scratch (q, k, scores, P.V partials, output, sums) if larger.
    // Each part 16-byte aligned: the compiler may widen a load to an aligned 8 or 16 bytes, and a widened read
    // reaching into a neighbour that another thread writes in the same phase is a hazard to racecheck.
    static constexpr int SCORES = (MAXPOS + 1 + 3) / 4 * 4;
    static constexpr int ATTENTION = 2 * HD + SCORES + KEY_GROUPS * HD + HD + KEY_GROUPS + WARPS;
    static constexpr int PART = ((R_GU * (HID / 32) > ATTENTION ? R_GU * (HID / 32) : ATTENTION) + 3) / 4 * 4;
    static constexpr unsigned long long bytes() {
        return Share::bytes + 2 * 2 * PRE_KEYS * HD + 4 * HD + 4 * (HID + HID + QKV_ROWS + 32 + 32 + 64 + PART + 256) + 2 * (HID + HID + FF + 128) +
               8 * (1 + HANDOFFS + HEAD_SLOTS);
    }
    __device__ static Smem at(unsigned char* p) {
        Smem s;
        s.W = p;
        s.kpre = reinterpret_cast<unsigned short*>(p + Share::bytes);
        s.vpre = s.kpre + PRE_KEYS * HD;
        s.rope = reinterpret_cast<float*>(s.vpre + PRE_KEYS * HD);
        float* f = s.rope + HD;
        s.x = f, f += HID;
        s.xm = f, f += HID;
        s.qkv = f, f += QKV_ROWS;
        s.sq = f, f += 32;
        s.atts = f, f += 32;
        s.hs = f, f += 64;
        s.part = s.scratch = f, f += PART;
        s.out = f, f += 256;
        unsigned short* hf = reinterpret_cast<unsigned short*>(f);
        s.xn = hf, hf += HID;
        s.att = hf, hf += HID;
        s.h = hf, hf += FF;
        s.stage = hf, hf += 128;
        s.bar = reinterpret_cast<unsigned long long*>(hf);
        s.handoff = s.bar + 1;
        s.ring = s.handoff + HANDOFFS;
        return s;
    }
};
static_assert(R_D * (FF / 32) <= Smem::PART && THREADS >= 4 * HD && R_GU / 2 <= 128 && 2 * HEAD_CHUNK * HEAD_KB <= Smem::PART,
              "partials (the LM head's two chunks' too), attention's last sum, the stage fit");
static_assert((HID + HID + QKV_ROWS + 32 + 32 + 64 + Smem::PART + 256) % 4 == 0 && HID % 8 == 0 && FF % 8 == 0, "16-byte aligned parts");

// ---- f16 and bf16 as bits (no headers): a half2 is an unsigned of two f16 -----------------------------------

__device__ __forceinline__ unsigned h2_sub(unsigned a, unsigned b) {
    unsigned d;
    asm("sub.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ unsigned h2_mul(unsigned a, unsigned b) {
    unsigned d;
    asm("mul.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ unsigned h2_fma(unsigned a, unsigned b, unsigned c) {
    unsigned d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ float h_to_f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short f_to_h(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
// The sum of a half2's two values, in f32.
__device__ __forceinline__ float h2_sum(unsigned h2) { return h_to_f((unsigned short)(h2 & 0xFFFFu)) + h_to_f((unsigned short)(h2 >> 16)); }
__device__ __forceinline__ unsigned short f_to_bf(float f) {
    unsigned short b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
}
// Two bf16 in a word as f32 (low, high).
__device__ __forceinline__ float bf2_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf2_hi(unsigned w) { return __uint_as_float(w & 0xFFFF0000u); }

// ---- small pieces --------------------------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Every block of the cluster here, its earlier memory operations visible to the others after it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
}
__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }
