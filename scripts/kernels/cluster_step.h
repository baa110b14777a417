// Shapes, the shared-memory layout and the arguments of cluster_step.cu's kernel (host and device).
#pragma once
#include <cstddef>

constexpr int HID = 576, NQ = 9, NKV = 3, HD = 64, FF = 1536, QKV_ROWS = HID + 2 * NKV * HD, LAYERS = 30, VOCAB = 49152;
#ifndef STEP_THREADS
#define STEP_THREADS 256
#endif
constexpr int CLUSTER = 16, CLUSTERS = 7, THREADS = STEP_THREADS, WARPS = THREADS / 32, MAXPOS = 1024;
constexpr int KEY_GROUPS = THREADS / 8;  // attention's P.V: 8 threads a key
#ifndef STEP_HANDOFF_ASYNC
#define STEP_HANDOFF_ASYNC 1  // in-cluster hand-offs by st.async onto the consumers' mbarriers; 0: a cluster barrier each
#endif
constexpr float EPS = 1e-5f;
// A block's rows of each stage (its 1/16): QKV, output projection, gate and up (96 + 96), down.
constexpr int R_QKV = QKV_ROWS / CLUSTER, R_O = HID / CLUSTER, R_GU = 2 * FF / CLUSTER, R_D = HID / CLUSTER;
constexpr int NOTES = 15;          // clock notes a layer (trace)
constexpr unsigned COPY = 32768;   // bytes a bulk copy
constexpr int PRE_KEYS = 192;      // cached keys (and values) an attention block holds in shared memory

// A block's share of a layer, as loaded into its shared memory (byte offsets): each stage's nibbles
// [rows][blocks of 32][16 bytes], then its (d, m) [rows][blocks] as half2; then the two norms' weights (f32).
struct Share {
    static constexpr size_t qkv_q = 0, qkv_dm = qkv_q + (size_t)R_QKV * (HID / 32) * 16;
    static constexpr size_t o_q = qkv_dm + (size_t)R_QKV * (HID / 32) * 4, o_dm = o_q + (size_t)R_O * (HID / 32) * 16;
    static constexpr size_t gu_q = o_dm + (size_t)R_O * (HID / 32) * 4, gu_dm = gu_q + (size_t)R_GU * (HID / 32) * 16;
    static constexpr size_t d_q = gu_dm + (size_t)R_GU * (HID / 32) * 4, d_dm = d_q + (size_t)R_D * (FF / 32) * 16;
    static constexpr size_t norm1 = d_dm + (size_t)R_D * (FF / 32) * 4, norm2 = norm1 + HID * 4, bytes = norm2 + HID * 4;
};
static_assert(Share::o_q % 16 == 0 && Share::gu_q % 16 == 0 && Share::d_q % 16 == 0 && Share::bytes % 16 == 0, "16-byte loads");

// The in-cluster hand-offs and the bytes each consumer receives in one: QKV's rows (the attention blocks
// only), attention's outputs (f16) and their block sums, the output projection's xm rows and their sums of
// squares, h (f16) and its sums.
enum Handoff { H_QKV, H_ATT, H_XM, H_H, HANDOFFS };
__host__ __device__ constexpr unsigned handoff_bytes(int k) {
    return k == H_QKV ? QKV_ROWS * 4 : k == H_ATT ? NQ * (HD * 2 + 2 * 4) : k == H_XM ? HID * 4 + CLUSTER * 4 : CLUSTER * (R_GU / 2 * 2 + R_GU / 64 * 4);
}

// Where an input element j (0..31) of a Q4_1 block sits in f16 in shared memory: word i of the block's nibbles
// (bytes 4i..4i+3) meets 8 halves at 8i: (4i, 4i+2), (4i+16, 4i+18), (4i+1, 4i+3), (4i+17, 4i+19).
__host__ __device__ constexpr int perm_slot(int j) {
    return ((j & 15) >> 2) * 8 + ((((j & 15) & 1) * 2 + (j >> 4)) * 2) + (((j & 15) & 3) >> 1);
}

struct StepArgs {
    const unsigned char* w;          // [LAYERS][CLUSTER][Share::bytes]
    const unsigned char* head_q;     // [VOCAB][HID]: the token matrix's Q8_0 values + 128 (embedding and LM head)
    const __half* head_d;            // [VOCAB][HID / 32]: their scales
    const float* out_norm;           // [HID]: the final rms_norm's weights
    unsigned long long* best;        // the argmax (pack_best): the previous step's token in, this step's out
    float* logits;                   // [VOCAB], or null
    unsigned step;                   // this launch's step number (16 bits), above the previous launch's
    unsigned long long* words;       // [HID]: tag << 32 | f32 bits, the residual stream between layers
    __nv_bfloat16 *kc, *vc;          // [LAYERS][NKV][MAXPOS][HD]
    const float* rope;               // [MAXPOS][HD]: cos of frequency i at i < 32, its sin at 32 + i
    int pos;                         // the new token's position (cached: 0..pos-1)
    unsigned tag0;                   // layer l's input words carry tag0 + l; the last layer's output tag0 + LAYERS
    unsigned long long* trace;       // [LAYERS][NOTES] cycles between clock notes (block 0 of each), or null
};

// The block's shared memory.
struct Smem {
    unsigned char* W;                // Share::bytes
    __nv_bfloat16 *kpre, *vpre;      // [PRE_KEYS][HD]: the head's first cached keys and values (attention blocks)
    float* rope;                     // [HD]: the position's rope row
    float *x, *xm, *sq, *qkv, *atts, *hs, *part, *scratch, *out;  // sq: xm's sums of squares by producer
    __half *xn, *att, *h, *stage;    // stage: a producer's f16 rows in the consumers' order, before they are sent
    unsigned long long *bar, *handoff;  // the layer's weights; the hand-offs' (HANDOFFS)
    // The largest GEMV's partials, or attention's scratch (q, k, scores, P.V partials, output) if larger.
    static constexpr int ATTENTION = 2 * HD + MAXPOS + 1 + KEY_GROUPS * HD + HD + KEY_GROUPS + WARPS;
    static constexpr int PART = ((R_GU * (HID / 32) > ATTENTION ? R_GU * (HID / 32) : ATTENTION) + 3) / 4 * 4;
    static constexpr size_t bytes() {
        return Share::bytes + 2 * 2 * PRE_KEYS * HD + 4 * HD + 4 * (HID + HID + QKV_ROWS + 32 + 32 + 64 + PART + 256) + 2 * (HID + HID + FF + 128) + 8 * (1 + HANDOFFS);
    }
    __device__ static Smem at(unsigned char* p) {
        Smem s;
        s.W = p;
        s.kpre = reinterpret_cast<__nv_bfloat16*>(p + Share::bytes);
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
        __half* hf = reinterpret_cast<__half*>(f);
        s.xn = hf, hf += HID;
        s.att = hf, hf += HID;
        s.h = hf, hf += FF;
        s.stage = hf, hf += 128;
        s.bar = reinterpret_cast<unsigned long long*>(hf);
        s.handoff = s.bar + 1;
        return s;
    }
};
static_assert(R_D * (FF / 32) <= Smem::PART && THREADS >= 4 * HD, "the down partials fit; attention's last sum has its threads");
static_assert((HID + HID + QKV_ROWS + 32 + 32 + 64 + Smem::PART + 256) % 4 == 0 && HID % 8 == 0 && FF % 8 == 0, "16-byte aligned parts");
