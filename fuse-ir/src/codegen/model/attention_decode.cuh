// attention / attention_len when the rows of one key/value head fit one block (queries * (hq / hkv) <=
// FUSE_DECODE_ROWS, which covers decode's one query): the same semantics as attention.cu (read its header
// for q, k, v, lens, causal and grouped heads), in ONE launch whatever the number of key splits.
//
// Work item = (batch b, kv head g, key split); blocks take items grid-stride. The rows of (b, g) are
// u = i * group + (h - g * group), all in one item, so that each key and value row is loaded once for every
// query head that shares it. The host picks the splits (fuse-ir's attention.rs) so that batch * hkv * splits
// is about one block a multiprocessor and each split has at least 64 keys.
//
// Inside a block the 4 warps cut the split's key range in 4 contiguous parts, one each, and load it at the
// same time. Loads go straight to registers, not through shared memory: a lane holds 8 channels of a key
// row (a 16-byte vector for bf16/f16, two for f32), so FUSE_ATTENTION_D / 8 lanes cover a row and a warp
// takes 32 / (D / 8) keys a step (4 at D = 64). A warp issues the key AND value loads of a chunk of
// FUSE_DECODE_UNROLL steps (16 keys at D = 64 in 16-bit types: the whole part of a 64-key split), and those
// of the next chunk before it computes one: a warp's part costs one DRAM round trip however many chunks it
// has, where staging key tiles through shared memory would cost one round trip a tile plus barriers. Each key
// group of lanes keeps its own online-softmax state (running max in log2 units, sum, unnormalised p * v in
// the lane's 8 channels) for the rows of the pass, so the loop needs no reduction across groups: the dot product of a key with a row is summed over the
// D / 8 lanes of its group by shuffles. After the loop the groups of a warp merge by butterfly shuffles, the
// warps merge through shared memory in the fixed order 0..3, and the block either writes the normalised
// rows (one split) or its f32 partials. Rows are processed 4 at a time (FUSE_DECODE_PASS_ROWS; a kv head with
// fewer gets a build for that many from the host): a pass keeps q, the state and 8 keys' values in registers
// whatever the head dimension; more rows re-read the split's keys in later passes (from L2). A kv head of 2
// to 4 rows (SmolLM2's 3 at decode) gets FUSE_DECODE_ROW_GROUPS sets of the 4 warps instead, each set its own
// rows of the pass over the same keys (from L1 after the first set's loads): the work is the same, but a
// warp's chain of dependent instructions (its rows' rope, dot products, softmax and merges) is one row's.
//
// The splits in use follow each sequence's key count on the device: the host sizes the grid for the
// capacity (lens is device data), and a sequence of `seen` keys uses ceil(seen / FUSE_DECODE_SPLIT_KEYS) of
// them (at most the grid's), evened out; the blocks of splits past those do nothing. One split in use writes
// its rows itself: no partials, no counters.
//
// Rotary embedding and the cache append fused in (built with -DFUSE_DECODE_ROPE=1, rope_x set; one new
// position, queries == 1: a decode step's rope, the two slice_sets of its new key and value rows and
// attention over the cache in one launch). q is then rope(rope_x) at the query heads, and the new key row of
// kv head g is rope(rope_x) at head k_head0 + g, the new value row v_new's; both belong at position *at of the
// caches k and v (at[b] and the tables' rows of sequence b where each sequence has its own position: at_stride
// and table_batch_strides). Every block of (b, g) computes its rows of q and the new rows into shared memory first (a
// thread an element; in registers, a lane its channels, where every row is vector-loadable:
// FUSE_DECODE_ROPE_VECTOR), uses the new rows where its keys reach *at instead of reading the cache there, and
// split 0's block writes them into the caches. So no block reads a row this launch writes. A position past
// `room` writes nothing, records the fault (as slice_set does) and is attended as the cache holds it.
//
// Early loads (-DFUSE_DECODE_EARLY=1, the host's choice where the kernel before this one cannot have written
// k, v or lens): before the grid wait, each block works out its first item's key range from lens and issues
// the loads of its warps' first chunk of keys and values, which the first pass then uses. The cache row a
// fused append writes is loaded stale there and replaced by the new row, as it is from the cache.
//
// In clusters (-DFUSE_DECODE_CLUSTER=1, the host's choice on sm_90 for at most 8 splits): the blocks of one
// (b, g) are one cluster, a block an item. Each keeps its rows' unnormalised sums, max and sum in its own
// shared memory; after a cluster barrier, block `split` merges the rows u with u % used == split, reading the
// others' shared memory (in the order 0, 1, ..: deterministic), and a second barrier keeps every block's shared
// memory alive until all have read it. Blocks of splits past the ones in use only take part in the barriers.
//
// Several splits, one kernel, without clusters: each split block writes its partials to `partials` ([rows][splits][dp]
// unnormalised sums, dp = d rounded up to 4, then [rows][splits][2] max and sum; a split that saw no key
// writes only max -inf and sum 0), then, after a __threadfence(), adds 1 to the (b, g) counter in
// `counters` (zero before the first launch: fuse-runtime's CudaDevice::zeroed_counters). The block that
// brings it to the splits in use merges them for every row in the order 0, 1, .. (deterministic: the same
// inputs give the same bits), writes the rows and sets the counter back to 0, so that the next launch (a
// CUDA graph replays this one) finds zeros. Every block of a split in use counts in, so that every launch
// leaves its counters at 0. Partials are read back through L2 (__ldcg), never L1.
//
// This file: the build parameters (the -D defines the host sets), the argument struct and the device helpers
// (vector loads and packing, a lane's rope, the cluster barrier and peer loads, key ranges); the kernel itself
// is attention_decode.cu, concatenated after it (fuse-ir's codegen/model/mod.rs).
// Warps that cut a split's keys (a contiguous part each), times groups of them that take different rows of
// a pass at the same time (FUSE_DECODE_ROW_GROUPS, the host's choice: one a row where a kv head has 2 to 4
// rows, with passes of one row, so that a warp's chain of dependent instructions is one row's).
#define FUSE_DECODE_KEY_WARPS 4
#ifndef FUSE_DECODE_ROW_GROUPS
#define FUSE_DECODE_ROW_GROUPS 1
#endif
// Row blocks (-DFUSE_DECODE_ROW_BLOCKS=n, the host's choice for a one-launch step's tasks): a kv head's rows
// are cut into n blocks of one pass each (FUSE_DECODE_PASS_ROWS * FUSE_DECODE_ROW_GROUPS rows), each an item of
// its own: item = ((b * kv_heads + g) * n + row block) * splits + split. They share the (b, g) counter (the last
// of used * n arrivals merges every row) and only row block 0 of split 0 appends the new rows. Not in clusters.
#ifndef FUSE_DECODE_ROW_BLOCKS
#define FUSE_DECODE_ROW_BLOCKS 1
#endif
#define FUSE_DECODE_THREADS (32 * FUSE_DECODE_KEY_WARPS * FUSE_DECODE_ROW_GROUPS)
#define FUSE_DECODE_WARPS (FUSE_DECODE_THREADS / 32)
#define FUSE_DECODE_ROWS 16
// 1: a build for k and v rows the host found vector-loadable (kv_vector = 1), without the element-by-element
// path; 0: kv_vector decides at run time.
#ifndef FUSE_DECODE_VECTOR
#define FUSE_DECODE_VECTOR 0
#endif
// Elements of q's rows and the new rows a thread makes per pass of the fused rope, all loads first.
#define FUSE_DECODE_ROPE_BATCH 4
#ifndef FUSE_DECODE_PASS_ROWS
#define FUSE_DECODE_PASS_ROWS 4
#endif
// The most key splits a build merges (its merge weights in shared memory, each lane's share of a row's
// splits in registers): the library's 128, or the launch's splits rounded up to 32 (the host's held_splits).
#ifndef FUSE_DECODE_MAX_SPLITS
#define FUSE_DECODE_MAX_SPLITS 128
#endif
// The fewest keys a split covers but the last (the host's split_floor; a build may ask for more).
#ifndef FUSE_DECODE_SPLIT_KEYS
#define FUSE_DECODE_SPLIT_KEYS 64
#endif
// A sequence that sees at most so many keys takes one split, whatever the grid (0: none; the host's
// one_split_keys): where merging splits costs more than the keys they share out.
#ifndef FUSE_DECODE_ONE_SPLIT_KEYS
#define FUSE_DECODE_ONE_SPLIT_KEYS 0
#endif
// 1: the variant with rope and the cache appends fused in (rope_x set); 0: plain attention (rope_x null).
#ifndef FUSE_DECODE_ROPE
#define FUSE_DECODE_ROPE 0
#endif
// 1: launched in clusters of `splits` blocks (sm_90; one block an item): the splits merge through the
// cluster's shared memory, with no partials, fence or counter (see the header).
#ifndef FUSE_DECODE_CLUSTER
#define FUSE_DECODE_CLUSTER 0
#endif
// Most blocks a cluster has (the host launches clusters only of at most that many splits).
#define FUSE_DECODE_CLUSTER_MAX 8
// 1: the host found that the kernel before this one writes none of k, v and lens (they are arguments of the
// function, and this call launched that kernel): each block issues its first item's first key and value loads
// before it waits for that kernel, so their DRAM latency overlaps its tail (see the header).
#ifndef FUSE_DECODE_EARLY
#define FUSE_DECODE_EARLY 0
#endif
#if FUSE_DECODE_EARLY && (!FUSE_DECODE_VECTOR || FUSE_DECODE_PASS_ROWS > 3)
#error "FUSE_DECODE_EARLY is built with FUSE_DECODE_VECTOR and passes of at most 3 rows only (other builds leave no registers for it)"
#endif
// 1: d is the build's FUSE_ATTENTION_D (the host checks it), so that divisions by d are shifts.
#ifndef FUSE_DECODE_EXACT_D
#define FUSE_DECODE_EXACT_D 0
#endif
// 1: rope's input rows, the tables' row and the new value rows are vector-loadable too and d is the build's
// (the host checks): the fused rope runs in registers, a lane on its own 8 channels of a row with the
// partner channels (c +- d / 2) taken from the lane FUSE_DECODE_LANES / 2 away by a shuffle. No shared
// memory, no barrier, and one round trip for all of a lane's loads.
#ifndef FUSE_DECODE_ROPE_VECTOR
#define FUSE_DECODE_ROPE_VECTOR 0
#endif
#if FUSE_DECODE_ROPE_VECTOR && (!FUSE_DECODE_ROPE || !FUSE_DECODE_VECTOR || !FUSE_DECODE_EXACT_D)
#error "FUSE_DECODE_ROPE_VECTOR is built with FUSE_DECODE_ROPE, FUSE_DECODE_VECTOR and FUSE_DECODE_EXACT_D only"
#endif
#define FUSE_DECODE_CHANNELS 8
#ifndef FUSE_ATTENTION_D
#define FUSE_ATTENTION_D 256
#endif
// Lanes that hold one key row, and keys a warp covers in one step.
#define FUSE_DECODE_LANES (FUSE_ATTENTION_D / FUSE_DECODE_CHANNELS)
#define FUSE_DECODE_STEP_KEYS (32 / FUSE_DECODE_LANES)
#if FUSE_MODEL_DTYPE == 0 || FUSE_MODEL_DTYPE == 3
#define FUSE_DECODE_ELEM_BYTES 4
#else
#define FUSE_DECODE_ELEM_BYTES 2
#endif
// 16-byte vectors a lane loads of a row (8 channels), and steps of a chunk (loaded together): with the next
// chunk in flight during a chunk's arithmetic, 256 bytes of keys and values in registers per lane in every type
// (half that with 3 row groups in f32, and before sm_90 in every type: 384-thread blocks leave 168 registers a
// thread, and ptxas spills there otherwise).
#define FUSE_DECODE_VECTORS (FUSE_DECODE_CHANNELS * FUSE_DECODE_ELEM_BYTES / 16)
#if FUSE_DECODE_ROW_GROUPS > 2 && (FUSE_DECODE_ELEM_BYTES == 4 || __CUDA_ARCH__ < 900)
#define FUSE_DECODE_UNROLL (FUSE_DECODE_ELEM_BYTES == 4 ? 1 : 2)
#else
#define FUSE_DECODE_UNROLL (FUSE_DECODE_ELEM_BYTES == 4 ? 2 : 4)
#endif

struct FuseAttentionDecodeArgs {
  const fuse_elem* q;
  const fuse_elem* k;
  const fuse_elem* v;
  fuse_elem* out;
  float* partials;          // splits > 1 only
  unsigned int* counters;   // splits > 1 only: [batch * kv_heads], zero between launches
  const unsigned int* lens;  // attention_len: the key count of each batch; null: skv for all
  long long lens_stride;
  long long batch;
  long long q_heads;
  long long queries;
  long long kv_heads;
  long long keys;
  long long d;
  long long causal;  // 0 or 1
  double scale;
  long long splits;      // key splits, at most FUSE_DECODE_MAX_SPLITS
  long long split_keys;  // keys a split covers at the capacity (the kernel evens out its own, see the header)
  long long kv_vector;   // 1: k and v rows are unit-stride, 16-byte aligned and d % 8 == 0 (vector loads)
  long long q_strides[4];
  long long k_strides[4];
  long long v_strides[4];
  // The fused rotary embedding and cache append (see the header); rope_x null: none.
  const fuse_elem* rope_x;  // rope's input [b, heads, 1, d]
  long long rope_x_strides[4];
  long long q_head0;  // the query heads' first head in rope_x
  long long k_head0;  // the new key heads' first head in rope_x
  const fuse_elem* cos;  // the tables' row of the new position, through their column strides
  const fuse_elem* sin;
  long long cos_stride;
  long long sin_stride;
  long long table_batch_strides[2];  // cos's and sin's from one sequence's row to the next's; 0: one row for all
  const fuse_elem* v_new;  // the new value rows [b, kv_heads, 1, d]
  long long v_new_strides[4];
  const unsigned int* at;  // the caches' position of the new rows
  long long at_stride;     // 1: one position a sequence (a batch at positions of their own); 0: one for all
  long long room;          // the last position the caches have
  // The device's fault record: where an append past `room` and a key count of lens that does not fit are
  // recorded.
  unsigned long long* fault;
};

// The lane's 8 channels of a row as f32 (element order: the low half of a 32-bit word first).
__device__ __forceinline__ void fuse_decode_unpack(const uint4 (&raw)[FUSE_DECODE_VECTORS], float (&f)[FUSE_DECODE_CHANNELS]) {
#pragma unroll
  for (int vec = 0; vec < FUSE_DECODE_VECTORS; ++vec) {
    const unsigned int w[4] = {raw[vec].x, raw[vec].y, raw[vec].z, raw[vec].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#if FUSE_DECODE_ELEM_BYTES == 4
      f[4 * vec + j] = __uint_as_float(w[j]);
#else
      f[2 * j] = fuse_model_widen(w[j] & 0xffffu);
      f[2 * j + 1] = fuse_model_widen(w[j] >> 16);
#endif
    }
  }
}

// 8 elements' bits as the lane's vectors (element order: the low half of a 32-bit word first).
__device__ __forceinline__ void fuse_decode_pack(const unsigned int (&bits)[FUSE_DECODE_CHANNELS], uint4 (&raw)[FUSE_DECODE_VECTORS]) {
#pragma unroll
  for (int vec = 0; vec < FUSE_DECODE_VECTORS; ++vec) {
#if FUSE_DECODE_ELEM_BYTES == 4
    raw[vec] = make_uint4(bits[4 * vec], bits[4 * vec + 1], bits[4 * vec + 2], bits[4 * vec + 3]);
#else
    raw[vec] = make_uint4(bits[0] | bits[1] << 16, bits[2] | bits[3] << 16, bits[4] | bits[5] << 16, bits[6] | bits[7] << 16);
#endif
  }
}

// Channels c0 .. c0 + 8 of a key or value row as raw element bits; zeros past d or when !valid (a key past
// the split: never read, so NaN past an attention_len count cannot reach the sums). Vector loads when the
// host found them aligned (then d % 8 == 0: a lane's 8 channels are all in range or all out), else one
// element at a time through the channel stride.
__device__ __forceinline__ void fuse_decode_load(const fuse_elem* row, long long stride, unsigned int c0, unsigned int d, bool vector,
                                                 bool valid, uint4 (&raw)[FUSE_DECODE_VECTORS]) {
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  if (vector) {
    const uint4* p = reinterpret_cast<const uint4*>(row + c0);
#pragma unroll
    for (int vec = 0; vec < FUSE_DECODE_VECTORS; ++vec) raw[vec] = valid && c0 < d ? __ldg(p + vec) : zero;
  } else {
    unsigned int bits[FUSE_DECODE_CHANNELS];
#pragma unroll
    for (int j = 0; j < FUSE_DECODE_CHANNELS; ++j) {
      const unsigned int c = c0 + j;
      bits[j] = valid && c < d ? (unsigned int)__ldg(row + c * stride) : 0u;
    }
    fuse_decode_pack(bits, raw);
  }
}

#if FUSE_DECODE_ROPE_VECTOR
// Rope of this lane's 8 channels of one row (`own`, raw vectors): the partner channels come from the lane
// FUSE_DECODE_LANES / 2 away (every lane of the warp takes part); cs and sn are the tables' values at the
// lane's channels mod d / 2, sn negated for channels below d / 2. rope.cu's arithmetic (x * cos -+ partner *
// sin), rounded to the element type as rope's output is: the result's element bits.
__device__ __forceinline__ void fuse_decode_rope_lane(const uint4 (&own)[FUSE_DECODE_VECTORS], const float (&cs)[FUSE_DECODE_CHANNELS],
                                                      const float (&sn)[FUSE_DECODE_CHANNELS], unsigned int (&bits)[FUSE_DECODE_CHANNELS]) {
  uint4 other[FUSE_DECODE_VECTORS];
#pragma unroll
  for (int vec = 0; vec < FUSE_DECODE_VECTORS; ++vec) {
    other[vec].x = __shfl_xor_sync(0xffffffffu, own[vec].x, FUSE_DECODE_LANES / 2);
    other[vec].y = __shfl_xor_sync(0xffffffffu, own[vec].y, FUSE_DECODE_LANES / 2);
    other[vec].z = __shfl_xor_sync(0xffffffffu, own[vec].z, FUSE_DECODE_LANES / 2);
    other[vec].w = __shfl_xor_sync(0xffffffffu, own[vec].w, FUSE_DECODE_LANES / 2);
  }
  float mine[FUSE_DECODE_CHANNELS], partner[FUSE_DECODE_CHANNELS];
  fuse_decode_unpack(own, mine);
  fuse_decode_unpack(other, partner);
#pragma unroll
  for (int j = 0; j < FUSE_DECODE_CHANNELS; ++j)
    bits[j] = fuse_model_narrow(mine[j] * cs[j] + partner[j] * sn[j]);
}
#endif

// Thread-block clusters (sm_90, the sm_90 header's): a barrier over the cluster's blocks (release / acquire:
// shared-memory writes before it are visible to the other blocks after it), and a load from the shared memory of
// block `rank` of the cluster at the place `p` has in this block's. Nothing where the build has no clusters.
__device__ __forceinline__ void fuse_decode_cluster_sync() {
#if FUSE_DECODE_CLUSTER && __CUDA_ARCH__ >= 900
  fuse_cluster_sync();
#endif
}

__device__ __forceinline__ float fuse_decode_peer_load(const float* p, unsigned int rank) {
#if FUSE_DECODE_CLUSTER && __CUDA_ARCH__ >= 900
  return fuse_cluster_load_f32(fuse_cluster_map(fuse_smem_addr(p), rank));
#else
  return 0.0f;
#endif
}

// The dense output row (b, h, i) of row u of kv head g.
__device__ __forceinline__ unsigned int fuse_decode_row(unsigned int b, unsigned int g, unsigned int u, unsigned int group,
                                                        unsigned int q_heads, unsigned int queries) {
  return (b * q_heads + g * group + u % group) * queries + u / group;
}

// A compile-time flag passed to a generic lambda (the kernel builds one body twice).
template <bool B>
struct FuseDecodeFlag {
  static constexpr bool value = B;
};

// A block's keys of item (b, g, split): the batch's keys and the causal limit, the splits the sequence uses
// (the same in every block of it), whether this split is one of them, and this warp's contiguous part.
struct FuseDecodeRange {
  int causal_keys;
  unsigned int used;
  bool active;
  unsigned int warp_begin, warp_end;
};

__device__ __forceinline__ FuseDecodeRange fuse_decode_range(unsigned int lens_b, unsigned int keys, unsigned int queries, bool causal,
                                                             unsigned int split, unsigned int splits, unsigned int key_warp) {
  FuseDecodeRange r;
  // The batch's keys (lens clamped to skv) and the causal limit in signed arithmetic (lens[b] < sq makes
  // it negative); the split's keys end where the last query's sight does (it sees the most).
  const unsigned int batch_keys = min(lens_b, keys);
  r.causal_keys = causal ? (int)batch_keys - (int)queries + 1 : (int)batch_keys;
  const unsigned int seen = (unsigned int)max(0, min(r.causal_keys + (int)queries - 1, (int)batch_keys));
  // The splits this sequence uses, evened out; the others do nothing.
  r.used = min(splits, max(1u, (seen + FUSE_DECODE_SPLIT_KEYS - 1) / FUSE_DECODE_SPLIT_KEYS));
  if (FUSE_DECODE_ONE_SPLIT_KEYS > 0 && seen <= FUSE_DECODE_ONE_SPLIT_KEYS) r.used = 1;
  r.active = split < r.used;
  const unsigned int split_keys = (seen + r.used - 1) / r.used;
  const unsigned int begin = split * split_keys;
  const unsigned int end = max(begin, min(begin + split_keys, seen));  // == begin: no key, empty partials
  const unsigned int part = (end - begin + FUSE_DECODE_KEY_WARPS - 1) / FUSE_DECODE_KEY_WARPS;
  r.warp_begin = min(begin + key_warp * part, end);
  r.warp_end = min(r.warp_begin + part, end);
  return r;
}

// The raw key and value vectors of a chunk's FUSE_DECODE_UNROLL steps (zeros past the warp's part).
__device__ __forceinline__ void fuse_decode_load_chunk(const fuse_elem* k_base, const fuse_elem* v_base, const FuseAttentionDecodeArgs& a,
                                                       unsigned int chunk, unsigned int warp_end, unsigned int key_group, unsigned int c0,
                                                       unsigned int d, bool vector, uint4 (&key_raw)[FUSE_DECODE_UNROLL][FUSE_DECODE_VECTORS],
                                                       uint4 (&value_raw)[FUSE_DECODE_UNROLL][FUSE_DECODE_VECTORS]) {
#pragma unroll
  for (int s = 0; s < FUSE_DECODE_UNROLL; ++s) {
    const unsigned int key = chunk + s * FUSE_DECODE_STEP_KEYS + key_group;
    const bool valid = key < warp_end;
    fuse_decode_load(k_base + key * a.k_strides[2], a.k_strides[3], c0, d, vector, valid, key_raw[s]);
    fuse_decode_load(v_base + key * a.v_strides[2], a.v_strides[3], c0, d, vector, valid, value_raw[s]);
  }
}
