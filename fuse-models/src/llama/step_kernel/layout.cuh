// The decode step's view of its layout (after the generated header and ptx.cuh): the block's shared memory
// as pointers at the generated offsets, the data orders the host shares (the GEMV inputs' permutation, the
// packed argmax, the LM head's rows a block), the trace's slots, and checks of the generated numbers. The
// numbers themselves come from fuse-models' StepLayout (layout.rs), never from here.

constexpr int NOTES = 15;  // clock notes a layer (trace)
// The trace's words after the layers' notes: block 0's LM head wait and work (cycles), then globaltimer (ns) at
// block 0's start, its end, layer 0's weights in, layer 0's input ready, and the last layer's cluster's rank 0
// seeing the final residual stream and ending; block 0's LM head waiting for its ring's chunks (cycles); block 0
// past the prologue's cluster barrier and done with layer 0's embedding (ns).
enum TraceTail { T_HEAD_WAIT, T_HEAD_WORK, T_START, T_END, T_WEIGHTS0, T_INPUT0, T_LAST_RESIDUAL, T_LAST_END, T_HEAD_RING, T_SYNCED, T_EMBEDDED, TRACE_TAIL };

static_assert(WARPS * 32 == THREADS && KEY_GROUPS * 8 == THREADS && QKV_ROWS == HID + 2 * NKV * HD, "the shapes agree");
static_assert(R_QKV * CLUSTER == QKV_ROWS && R_O * CLUSTER == HID && R_GU * CLUSTER == 2 * FF && R_D * CLUSTER == HID, "rows split evenly");
static_assert(NQ <= CLUSTER && NQ % NKV == 0 && NQ * HD == HID && VOCAB <= 65536 && VOCAB % 16 == 0, "a query head a block; tokens in 16 bits");
static_assert(Share::o_q % 16 == 0 && Share::gu_q % 16 == 0 && Share::d_q % 16 == 0 && Share::bytes % 16 == 0, "16-byte loads");
static_assert(HEAD_SLOTS >= 2 && HEAD_CHUNK_BYTES % 16 == 0 && HEAD_CHUNK * HEAD_KB * 2 % 16 == 0 && HEAD_CHUNK_BYTES * HEAD_SLOTS <= HEAD_AREA,
              "a ring of 16-byte aligned chunks in the memory the layers leave");
static_assert(R_D * (FF / 32) <= PART && R_GU * (HID / 32) <= PART && ATTENTION <= PART && 2 * HEAD_PARTIALS <= PART && THREADS >= 4 * HD && R_GU / 2 <= 128,
              "the partials (the LM head's two chunks' too), attention's scratch and last sum, the stage fit");
static_assert(SmemAt::x % 16 == 0 && SmemAt::part % 16 == 0 && SmemAt::xn % 16 == 0 && SmemAt::bar % 8 == 0 && ATT_PV % 4 == 0, "aligned parts");

// Where an input element j (0..31) of a Q4_1 block sits in f16 in shared memory: word i of the block's nibbles
// (bytes 4i..4i+3) meets 8 halves at 8i: (4i, 4i+2), (4i+16, 4i+18), (4i+1, 4i+3), (4i+17, 4i+19).
__host__ __device__ constexpr int perm_slot(int j) {
    return ((j & 15) >> 2) * 8 + ((((j & 15) & 1) * 2 + (j >> 4)) * 2) + (((j & 15) & 3) >> 1);
}

// The bytes a consumer receives in hand-off k.
__host__ __device__ constexpr unsigned handoff_bytes(int k) {
    return k == H_QKV ? HANDOFF_QKV_BYTES : k == H_ATT ? HANDOFF_ATT_BYTES : k == H_XM ? HANDOFF_XM_BYTES : HANDOFF_H_BYTES;
}

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

// The block's shared memory, at the generated offsets (SmemAt).
struct Smem {
    unsigned char* W;                // Share::bytes
    unsigned short *kpre, *vpre;     // [PRE_KEYS][HD]: the head's first cached keys and values (attention blocks)
    float* rope;                     // [HD]: the position's rope row
    float *x, *xm, *sq, *qkv, *atts, *hs, *part, *scratch, *out;  // sq: xm's sums of squares by producer
    unsigned short *xn, *att, *h, *stage;  // f16; stage: a producer's rows in the consumers' order, before they are sent
    unsigned long long *bar, *handoff, *ring;  // the layer's weights; the hand-offs' (HANDOFFS); the LM head's (HEAD_SLOTS)
    // part: the largest GEMV's partials, or attention's scratch (at the ATT_* offsets) where that is larger.
    static constexpr unsigned long long bytes() { return SmemAt::bytes; }
    __device__ static Smem at(unsigned char* p) {
        Smem s;
        s.W = p;
        s.kpre = reinterpret_cast<unsigned short*>(p + SmemAt::kpre);
        s.vpre = reinterpret_cast<unsigned short*>(p + SmemAt::vpre);
        s.rope = reinterpret_cast<float*>(p + SmemAt::rope);
        s.x = reinterpret_cast<float*>(p + SmemAt::x);
        s.xm = reinterpret_cast<float*>(p + SmemAt::xm);
        s.qkv = reinterpret_cast<float*>(p + SmemAt::qkv);
        s.sq = reinterpret_cast<float*>(p + SmemAt::sq);
        s.atts = reinterpret_cast<float*>(p + SmemAt::atts);
        s.hs = reinterpret_cast<float*>(p + SmemAt::hs);
        s.part = s.scratch = reinterpret_cast<float*>(p + SmemAt::part);
        s.out = reinterpret_cast<float*>(p + SmemAt::out);
        s.xn = reinterpret_cast<unsigned short*>(p + SmemAt::xn);
        s.att = reinterpret_cast<unsigned short*>(p + SmemAt::att);
        s.h = reinterpret_cast<unsigned short*>(p + SmemAt::h);
        s.stage = reinterpret_cast<unsigned short*>(p + SmemAt::stage);
        s.bar = reinterpret_cast<unsigned long long*>(p + SmemAt::bar);
        s.handoff = reinterpret_cast<unsigned long long*>(p + SmemAt::handoff);
        s.ring = reinterpret_cast<unsigned long long*>(p + SmemAt::ring);
        return s;
    }
};
