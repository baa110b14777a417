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
// caches k and v. Every block of (b, g) computes its rows of q and the new rows into shared memory first (a
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
// Warps that cut a split's keys (a contiguous part each), times groups of them that take different rows of
// a pass at the same time (FUSE_DECODE_ROW_GROUPS, the host's choice: one a row where a kv head has 2 to 4
// rows, with passes of one row, so that a warp's chain of dependent instructions is one row's).
#define FUSE_DECODE_KEY_WARPS 4
#ifndef FUSE_DECODE_ROW_GROUPS
#define FUSE_DECODE_ROW_GROUPS 1
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
#define FUSE_DECODE_MAX_SPLITS 128
#define FUSE_DECODE_SPLIT_KEYS 64
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
  const fuse_elem* v_new;  // the new value rows [b, kv_heads, 1, d]
  long long v_new_strides[4];
  const unsigned int* at;  // the caches' position of the new rows
  long long room;          // the last position the caches have
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

// Thread-block clusters (sm_90): a barrier over the cluster's blocks (release / acquire: shared-memory writes
// before it are visible to the other blocks after it), and a load from the shared memory of block `rank` of the
// cluster at the place `p` has in this block's.
__device__ __forceinline__ void fuse_decode_cluster_sync() {
#if FUSE_DECODE_CLUSTER && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ float fuse_decode_peer_load(const float* p, unsigned int rank) {
  float v = 0.0f;
#if FUSE_DECODE_CLUSTER && __CUDA_ARCH__ >= 900
  unsigned int local, remote;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(local) : "l"(p));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
#endif
  return v;
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

// Up to 2 blocks a multiprocessor of 4 warps (the grid is about one a multiprocessor): a register cap of 255;
// larger blocks one.
#define FUSE_DECODE_MIN_BLOCKS (FUSE_DECODE_ROW_GROUPS == 1 ? 2 : 1)
extern "C" __global__ void __launch_bounds__(FUSE_DECODE_THREADS, FUSE_DECODE_MIN_BLOCKS) fuse_model_attention_decode(const FuseAttentionDecodeArgs a) {
#if FUSE_DECODE_EARLY
  // The first item's first chunk of keys and values, loaded before the grid wait (see the header).
  uint4 early_key[FUSE_DECODE_UNROLL][FUSE_DECODE_VECTORS], early_value[FUSE_DECODE_UNROLL][FUSE_DECODE_VECTORS];
  unsigned int early_chunk = 0xffffffffu;
  {
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, d = FUSE_DECODE_EXACT_D ? FUSE_ATTENTION_D : (unsigned int)a.d;
    const unsigned int kv_heads = (unsigned int)a.kv_heads, splits = (unsigned int)a.splits;
    const unsigned int item = blockIdx.x, split = item % splits, tile = item / splits;
    const unsigned int g = tile % kv_heads, b = tile / kv_heads;
    if (item < (unsigned int)a.batch * kv_heads * splits) {
      const unsigned int lens_b = a.lens ? __ldg(a.lens + b * a.lens_stride) : (unsigned int)a.keys;
      const FuseDecodeRange range =
          fuse_decode_range(lens_b, (unsigned int)a.keys, (unsigned int)a.queries, a.causal != 0, split, splits, warp % FUSE_DECODE_KEY_WARPS);
      if (range.active && range.warp_begin < range.warp_end) {
        const fuse_elem* k_base = a.k + b * a.k_strides[0] + g * a.k_strides[1];
        const fuse_elem* v_base = a.v + b * a.v_strides[0] + g * a.v_strides[1];
        fuse_decode_load_chunk(k_base, v_base, a, range.warp_begin, range.warp_end, lane / FUSE_DECODE_LANES,
                               (lane % FUSE_DECODE_LANES) * FUSE_DECODE_CHANNELS, d, FUSE_DECODE_VECTOR || a.kv_vector != 0, early_key, early_value);
        early_chunk = range.warp_begin;
      }
    }
  }
#endif
  fuse_model_grid_sync();
  // Each warp's merged state of the pass's rows, then the merge weights of the last split block.
  __shared__ __align__(16) float warp_acc[FUSE_DECODE_WARPS][FUSE_DECODE_PASS_ROWS][FUSE_ATTENTION_D];
  __shared__ float warp_max[FUSE_DECODE_WARPS][FUSE_DECODE_PASS_ROWS];
  __shared__ float warp_sum[FUSE_DECODE_WARPS][FUSE_DECODE_PASS_ROWS];
  __shared__ float weights[FUSE_DECODE_ROWS * FUSE_DECODE_MAX_SPLITS];
  __shared__ float inverse[FUSE_DECODE_ROWS];
  __shared__ unsigned int last_block;
#define FUSE_DECODE_ROPE_SHARED (FUSE_DECODE_ROPE && !FUSE_DECODE_ROPE_VECTOR)
#if FUSE_DECODE_ROPE_SHARED || FUSE_DECODE_CLUSTER
  // With rope (not in registers): the item's query rows after rope; in clusters: the split's unnormalised
  // sums of each row. A pass writes the sums of its rows only after it has read their queries, so one array
  // holds both.
  __shared__ __align__(16) float row_buf[FUSE_DECODE_ROWS][FUSE_ATTENTION_D];
#endif
#if FUSE_DECODE_ROPE_SHARED
  float (*const roped_q)[FUSE_ATTENTION_D] = row_buf;
  // The new key and value rows (element bits).
  __shared__ unsigned int new_rows[2][FUSE_ATTENTION_D];
#endif
#if FUSE_DECODE_CLUSTER
  // The split's max and sum of each row.
  __shared__ float row_stats[FUSE_DECODE_ROWS][2];
#endif
  // 32-bit index arithmetic (the host checks that rows, keys and items fit); element offsets stay 64-bit.
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned int key_group = lane / FUSE_DECODE_LANES, c0 = (lane % FUSE_DECODE_LANES) * FUSE_DECODE_CHANNELS;
  const unsigned int d = FUSE_DECODE_EXACT_D ? FUSE_ATTENTION_D : (unsigned int)a.d, dp = (d + 3u) & ~3u;
  const unsigned int q_heads = (unsigned int)a.q_heads, kv_heads = (unsigned int)a.kv_heads;
  const unsigned int queries = (unsigned int)a.queries, keys = (unsigned int)a.keys;
  const unsigned int group = q_heads / kv_heads, rows = queries * group;
  const unsigned int splits = (unsigned int)a.splits;
  const unsigned int items = (unsigned int)a.batch * kv_heads * splits;
  const unsigned long long all_rows = (unsigned long long)a.batch * q_heads * queries;
  float* const stats = a.partials + all_rows * splits * dp;
  const bool vector = FUSE_DECODE_VECTOR || a.kv_vector != 0;
  const float q_scale = (float)(a.scale * 1.4426950408889634);  // log2(e): probabilities are exp2 of scores
  const float minus_infinity = __int_as_float(0xff800000);
  const unsigned int no_key = 0xffffffffu;
  for (unsigned int item = blockIdx.x; item < items; item += gridDim.x) {
    const unsigned int split = item % splits, tile = item / splits;
    const unsigned int g = tile % kv_heads, b = tile / kv_heads;
    // The batch's key count is loaded first and used last: the loads that do not depend on it (rope's)
    // are in flight with it.
    const unsigned int lens_b = a.lens ? __ldg(a.lens + b * a.lens_stride) : keys;
    const fuse_elem* k_base = a.k + b * a.k_strides[0] + g * a.k_strides[1];
    const fuse_elem* v_base = a.v + b * a.v_strides[0] + g * a.v_strides[1];
    // With rope fused: q's rows and the new key and value rows into shared memory (split 0's block also
    // appends the new rows to the caches), then this lane's channels of the new rows, and their position
    // (no_key when it is past the caches).
    constexpr bool fused = FUSE_DECODE_ROPE != 0;
    uint4 new_key[FUSE_DECODE_VECTORS], new_value[FUSE_DECODE_VECTORS];
    unsigned int at_key = no_key;
#if FUSE_DECODE_ROPE_VECTOR
    // The tables' values at this lane's channels mod d / 2 (sin negated below d / 2; kept for the passes'
    // query rows), the new key row roped and the new value row, a lane its 8 channels; split 0's first key
    // group appends them.
    float rope_cs[FUSE_DECODE_CHANNELS], rope_sn[FUSE_DECODE_CHANNELS];
    const bool rope_low = c0 < d / 2;
    const fuse_elem* const rope_row0 = a.rope_x + b * a.rope_x_strides[0];
    {
      const unsigned int at = __ldg(a.at), i0 = rope_low ? c0 : c0 - d / 2;
      uint4 cs_raw[FUSE_DECODE_VECTORS], sn_raw[FUSE_DECODE_VECTORS], key_raw[FUSE_DECODE_VECTORS];
      fuse_decode_load(a.cos, 1, i0, d, true, true, cs_raw);
      fuse_decode_load(a.sin, 1, i0, d, true, true, sn_raw);
      fuse_decode_load(rope_row0 + (a.k_head0 + g) * a.rope_x_strides[1], 1, c0, d, true, true, key_raw);
      fuse_decode_load(a.v_new + b * a.v_new_strides[0] + g * a.v_new_strides[1], 1, c0, d, true, true, new_value);
      fuse_decode_unpack(cs_raw, rope_cs);
      fuse_decode_unpack(sn_raw, rope_sn);
#pragma unroll
      for (int j = 0; j < FUSE_DECODE_CHANNELS; ++j) rope_sn[j] = rope_low ? -rope_sn[j] : rope_sn[j];
      unsigned int key_bits[FUSE_DECODE_CHANNELS];
      fuse_decode_rope_lane(key_raw, rope_cs, rope_sn, key_bits);
      fuse_decode_pack(key_bits, new_key);
      const bool appends = (long long)at <= a.room;
      if (appends) {
        at_key = at;
        if (split == 0 && threadIdx.x < FUSE_DECODE_LANES) {
          // The lane's 8 channels of the new rows at position `at` (vector rows: unit stride, aligned).
#pragma unroll
          for (int vec = 0; vec < FUSE_DECODE_VECTORS; ++vec) {
            reinterpret_cast<uint4*>(const_cast<fuse_elem*>(k_base) + at * a.k_strides[2] + c0)[vec] = new_key[vec];
            reinterpret_cast<uint4*>(const_cast<fuse_elem*>(v_base) + at * a.v_strides[2] + c0)[vec] = new_value[vec];
          }
        }
      } else if (split == 0 && threadIdx.x == 0) {
        fuse_model_fault(a.fault, 2, at, a.room);
      }
    }
#elif FUSE_DECODE_ROPE
    {
      const unsigned int half = d / 2, at = __ldg(a.at);
      const bool appends = (long long)at <= a.room;
      if (appends) {
        at_key = at;
      } else if (split == 0 && threadIdx.x == 0) {
        fuse_model_fault(a.fault, 2, at, a.room);
      }
      const fuse_elem* x = a.rope_x + b * a.rope_x_strides[0];
      __syncthreads();  // the previous item is done with the shared rows
      // Element e < rows * d is q's row e / d, channel e % d; the next d are the new key and value rows'
      // channels. A thread takes FUSE_DECODE_ROPE_BATCH elements a pass and issues all their loads before any
      // arithmetic: one round trip to memory for SmolLM2's 256 elements, not one for each element a thread has.
      const unsigned int q_elements = rows * d, elements = q_elements + d;
      for (unsigned int base = 0; base < elements; base += FUSE_DECODE_ROPE_BATCH * FUSE_DECODE_THREADS) {
        float own[FUSE_DECODE_ROPE_BATCH], partner[FUSE_DECODE_ROPE_BATCH], cs[FUSE_DECODE_ROPE_BATCH], sn[FUSE_DECODE_ROPE_BATCH];
        unsigned int value[FUSE_DECODE_ROPE_BATCH];
#pragma unroll
        for (int j = 0; j < FUSE_DECODE_ROPE_BATCH; ++j) {
          const unsigned int e = base + j * FUSE_DECODE_THREADS + threadIdx.x;
          const bool is_q = e < q_elements, here = e < elements;
          const unsigned int u = is_q ? e / d : 0, c = is_q ? e - u * d : e - q_elements;
          const long long head = is_q ? a.q_head0 + g * group + u % group : a.k_head0 + g;
          const fuse_elem* row = x + head * a.rope_x_strides[1];
          const unsigned int i = c < half ? c : c - half, other = c < half ? c + half : i;
          own[j] = here ? fuse_model_load(row, c * a.rope_x_strides[3]) : 0.0f;
          partner[j] = here ? fuse_model_load(row, other * a.rope_x_strides[3]) : 0.0f;
          cs[j] = here ? fuse_model_load(a.cos, i * a.cos_stride) : 0.0f;
          sn[j] = here ? fuse_model_load(a.sin, i * a.sin_stride) : 0.0f;
          value[j] = here && !is_q ? (unsigned int)a.v_new[b * a.v_new_strides[0] + g * a.v_new_strides[1] + c * a.v_new_strides[3]] : 0u;
        }
#pragma unroll
        for (int j = 0; j < FUSE_DECODE_ROPE_BATCH; ++j) {
          const unsigned int e = base + j * FUSE_DECODE_THREADS + threadIdx.x;
          if (e >= elements) continue;
          const unsigned int u = e < q_elements ? e / d : 0, c = e < q_elements ? e - u * d : e - q_elements;
          // rope.cu's arithmetic, rounded to the element type as rope's output is.
          const unsigned int bits = fuse_model_narrow(c < half ? own[j] * cs[j] - partner[j] * sn[j] : own[j] * cs[j] + partner[j] * sn[j]);
          if (e < q_elements) {
            roped_q[u][c] = fuse_model_float(bits);
          } else {
            new_rows[0][c] = bits;
            new_rows[1][c] = value[j];
            if (split == 0 && appends) {
              const_cast<fuse_elem*>(k_base)[at * a.k_strides[2] + c * a.k_strides[3]] = (fuse_elem)bits;
              const_cast<fuse_elem*>(v_base)[at * a.v_strides[2] + c * a.v_strides[3]] = (fuse_elem)value[j];
            }
          }
        }
      }
      __syncthreads();
      unsigned int key_bits[FUSE_DECODE_CHANNELS], value_bits[FUSE_DECODE_CHANNELS];
#pragma unroll
      for (int j = 0; j < FUSE_DECODE_CHANNELS; ++j) {
        const unsigned int c = c0 + j;
        key_bits[j] = c < d ? new_rows[0][c] : 0u;
        value_bits[j] = c < d ? new_rows[1][c] : 0u;
      }
      fuse_decode_pack(key_bits, new_key);
      fuse_decode_pack(value_bits, new_value);
    }
#endif
    const FuseDecodeRange range = fuse_decode_range(lens_b, keys, queries, a.causal != 0, split, splits, warp % FUSE_DECODE_KEY_WARPS);
    const int causal_keys = range.causal_keys;
    const unsigned int used = range.used, warp_begin = range.warp_begin, warp_end = range.warp_end;
    // In clusters every block reaches the cluster barriers below; otherwise a split not in use stops here.
    const bool active = range.active;
    if (!FUSE_DECODE_CLUSTER && !active) continue;
    // A pass: each row group its FUSE_DECODE_PASS_ROWS rows from `base` on (none past the rows: its warps
    // only meet the barriers).
    for (unsigned int base = 0; active && base < rows; base += FUSE_DECODE_PASS_ROWS * FUSE_DECODE_ROW_GROUPS) {
      const unsigned int first = base + warp / FUSE_DECODE_KEY_WARPS * FUSE_DECODE_PASS_ROWS;
      const unsigned int pass_rows = first < rows ? min(FUSE_DECODE_PASS_ROWS, rows - first) : 0u;
      // The pass's query rows (the lane's 8 channels, scaled), the last key each sees, and the key group's
      // online-softmax state.
      float query[FUSE_DECODE_PASS_ROWS][FUSE_DECODE_CHANNELS];
      int visible[FUSE_DECODE_PASS_ROWS];
      float running_max[FUSE_DECODE_PASS_ROWS], running_sum[FUSE_DECODE_PASS_ROWS];
      float acc[FUSE_DECODE_PASS_ROWS][FUSE_DECODE_CHANNELS];
#pragma unroll
      for (int r = 0; r < FUSE_DECODE_PASS_ROWS; ++r) {
        const unsigned int u = first + r, i = u / group, h = g * group + u % group;
        const bool here = (unsigned int)r < pass_rows;
        visible[r] = here ? causal_keys + (int)i : 0;
        running_max[r] = minus_infinity;
        running_sum[r] = 0.0f;
#if FUSE_DECODE_ROPE_VECTOR
        // q's row roped here: rope's input row of head q_head0 + h (every lane shuffles, rows past the pass too).
        uint4 x_raw[FUSE_DECODE_VECTORS];
        fuse_decode_load(rope_row0 + (a.q_head0 + h) * a.rope_x_strides[1], 1, c0, d, true, here, x_raw);
        unsigned int q_bits[FUSE_DECODE_CHANNELS];
        fuse_decode_rope_lane(x_raw, rope_cs, rope_sn, q_bits);
#pragma unroll
        for (int j = 0; j < FUSE_DECODE_CHANNELS; ++j) {
          query[r][j] = (here ? fuse_model_float(q_bits[j]) : 0.0f) * q_scale;
          acc[r][j] = 0.0f;
        }
#else
        const fuse_elem* q = a.q + b * a.q_strides[0] + h * a.q_strides[1] + i * a.q_strides[2];
#pragma unroll
        for (int j = 0; j < FUSE_DECODE_CHANNELS; ++j) {
          const unsigned int c = c0 + j;
#if FUSE_DECODE_ROPE
          const float value = here && c < d ? roped_q[u][c] : 0.0f;
#else
          const float value = here && c < d ? fuse_model_load(q, c * a.q_strides[3]) : 0.0f;
#endif
          query[r][j] = value * q_scale;
          acc[r][j] = 0.0f;
        }
#endif
      }
      // The current chunk's raw keys and values. The first is loaded here (before the grid wait with
      // FUSE_DECODE_EARLY, for the first item's first pass); each iteration issues the next chunk's loads
      // before its own arithmetic, so that a part of several chunks costs one memory round trip, not one a
      // chunk (software pipelining: two chunks' registers, so chunks are half as long as they could be).
      uint4 key_raw[FUSE_DECODE_UNROLL][FUSE_DECODE_VECTORS], value_raw[FUSE_DECODE_UNROLL][FUSE_DECODE_VECTORS];
      if (warp_begin < warp_end && pass_rows > 0) {
#if FUSE_DECODE_EARLY
        if (warp_begin == early_chunk) {
#pragma unroll
          for (int s = 0; s < FUSE_DECODE_UNROLL; ++s)
#pragma unroll
            for (int vec = 0; vec < FUSE_DECODE_VECTORS; ++vec) {
              key_raw[s][vec] = early_key[s][vec];
              value_raw[s][vec] = early_value[s][vec];
            }
          early_chunk = 0xffffffffu;
        } else
#endif
        fuse_decode_load_chunk(k_base, v_base, a, warp_begin, warp_end, key_group, c0, d, vector, key_raw, value_raw);
      }
#pragma unroll 1
      for (unsigned int chunk = warp_begin; pass_rows > 0 && chunk < warp_end; chunk += FUSE_DECODE_UNROLL * FUSE_DECODE_STEP_KEYS) {
        const unsigned int next = chunk + FUSE_DECODE_UNROLL * FUSE_DECODE_STEP_KEYS;
        uint4 key_next[FUSE_DECODE_UNROLL][FUSE_DECODE_VECTORS], value_next[FUSE_DECODE_UNROLL][FUSE_DECODE_VECTORS];
        if (next < warp_end) fuse_decode_load_chunk(k_base, v_base, a, next, warp_end, key_group, c0, d, vector, key_next, value_next);
        if (fused) {
          // The new rows replace what the caches held at their position (stale there until split 0 writes it).
#pragma unroll
          for (int s = 0; s < FUSE_DECODE_UNROLL; ++s) {
            const unsigned int key = chunk + s * FUSE_DECODE_STEP_KEYS + key_group;
            const bool appended = key < warp_end && key == at_key;
#pragma unroll
            for (int vec = 0; vec < FUSE_DECODE_VECTORS; ++vec) {
              key_raw[s][vec] = appended ? new_key[vec] : key_raw[s][vec];
              value_raw[s][vec] = appended ? new_value[vec] : value_raw[s][vec];
            }
          }
        }
        // The chunk's arithmetic, built twice: for a chunk inside the warp's part, and for its last chunk
        // (partial), whose steps past the part (the same for the whole warp: decode's parts are often shorter
        // than a chunk) skip their dot products, exponentials and p * v: the kernel's time is its instruction
        // chain, not its bytes. A full chunk has no per-step branch.
        auto compute = [&](auto partial_chunk) {
          constexpr bool partial = decltype(partial_chunk)::value;
          // Scores (log2 units; -inf where the row does not see the key), summed over the group's lanes.
          float score[FUSE_DECODE_UNROLL][FUSE_DECODE_PASS_ROWS];
#pragma unroll
          for (int s = 0; s < FUSE_DECODE_UNROLL; ++s) {
            const int key = (int)(chunk + s * FUSE_DECODE_STEP_KEYS + key_group);
            if (partial && chunk + s * FUSE_DECODE_STEP_KEYS >= warp_end) {
#pragma unroll
              for (int r = 0; r < FUSE_DECODE_PASS_ROWS; ++r) score[s][r] = minus_infinity;
              continue;
            }
            float kf[FUSE_DECODE_CHANNELS];
            fuse_decode_unpack(key_raw[s], kf);
#pragma unroll
            for (int r = 0; r < FUSE_DECODE_PASS_ROWS; ++r) {
              float dot = 0.0f;
#pragma unroll
              for (int j = 0; j < FUSE_DECODE_CHANNELS; ++j) dot += query[r][j] * kf[j];
#pragma unroll
              for (int offset = FUSE_DECODE_LANES / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
              score[s][r] = key < (int)warp_end && key < visible[r] ? dot : minus_infinity;
            }
          }
          // Online softmax, once for the chunk: the new maximum, the old state rescaled, then p * v.
#pragma unroll
          for (int r = 0; r < FUSE_DECODE_PASS_ROWS; ++r) {
            float most = running_max[r];
#pragma unroll
            for (int s = 0; s < FUSE_DECODE_UNROLL; ++s) most = fmaxf(most, score[s][r]);
            // A row that has seen no key yet keeps max -inf and sum 0 (exp2(-inf - -inf) is NaN).
            const bool any = most != minus_infinity;
            const float correction = any ? exp2f(running_max[r] - most) : 1.0f;
            running_max[r] = most;
            running_sum[r] *= correction;
#pragma unroll
            for (int j = 0; j < FUSE_DECODE_CHANNELS; ++j) acc[r][j] *= correction;
#pragma unroll
            for (int s = 0; s < FUSE_DECODE_UNROLL; ++s) {
              const bool live = !partial || chunk + s * FUSE_DECODE_STEP_KEYS < warp_end;
              score[s][r] = any && live ? exp2f(score[s][r] - most) : 0.0f;
            }
          }
#pragma unroll
          for (int s = 0; s < FUSE_DECODE_UNROLL; ++s) {
            if (partial && chunk + s * FUSE_DECODE_STEP_KEYS >= warp_end) continue;
            float vf[FUSE_DECODE_CHANNELS];
            fuse_decode_unpack(value_raw[s], vf);
#pragma unroll
            for (int r = 0; r < FUSE_DECODE_PASS_ROWS; ++r) {
              running_sum[r] += score[s][r];
#pragma unroll
              for (int j = 0; j < FUSE_DECODE_CHANNELS; ++j) acc[r][j] += score[s][r] * vf[j];
            }
          }
        };
        if (chunk + FUSE_DECODE_UNROLL * FUSE_DECODE_STEP_KEYS <= warp_end) {
          compute(FuseDecodeFlag<false>{});
        } else {
          compute(FuseDecodeFlag<true>{});
        }
        if (next < warp_end) {
#pragma unroll
          for (int s = 0; s < FUSE_DECODE_UNROLL; ++s)
#pragma unroll
            for (int vec = 0; vec < FUSE_DECODE_VECTORS; ++vec) {
              key_raw[s][vec] = key_next[s][vec];
              value_raw[s][vec] = value_next[s][vec];
            }
        }
      }
      // The warp's key groups merge (butterfly: every group ends with the warp's state).
#pragma unroll
      for (int offset = FUSE_DECODE_LANES; offset < 32; offset <<= 1) {
#pragma unroll
        for (int r = 0; r < FUSE_DECODE_PASS_ROWS; ++r) {
          const float other_max = __shfl_xor_sync(0xffffffffu, running_max[r], offset);
          const float other_sum = __shfl_xor_sync(0xffffffffu, running_sum[r], offset);
          const float most = fmaxf(running_max[r], other_max);
          const bool any = most != minus_infinity;
          const float mine = any ? exp2f(running_max[r] - most) : 0.0f, theirs = any ? exp2f(other_max - most) : 0.0f;
          running_max[r] = most;
          running_sum[r] = running_sum[r] * mine + other_sum * theirs;
#pragma unroll
          for (int j = 0; j < FUSE_DECODE_CHANNELS; ++j) {
            const float other = __shfl_xor_sync(0xffffffffu, acc[r][j], offset);
            acc[r][j] = acc[r][j] * mine + other * theirs;
          }
        }
      }
      if (lane < FUSE_DECODE_LANES) {
#pragma unroll
        for (int r = 0; r < FUSE_DECODE_PASS_ROWS; ++r) {
          float4* to = reinterpret_cast<float4*>(&warp_acc[warp][r][c0]);
          to[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
          to[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
          if (lane == 0) {
            warp_max[warp][r] = running_max[r];
            warp_sum[warp][r] = running_sum[r];
          }
        }
      }
      __syncthreads();
      // Each row's key warps merge in the order 0..3, a thread a (row, channel): the pass's row `base + rr`
      // is row r of row group rr / FUSE_DECODE_PASS_ROWS, whose warps are w0 ...
      const unsigned int pass_rows_all = min(FUSE_DECODE_PASS_ROWS * FUSE_DECODE_ROW_GROUPS, rows - base);
      for (unsigned int at = threadIdx.x; at < pass_rows_all * d; at += FUSE_DECODE_THREADS) {
        const unsigned int rr = at / d, c = at - rr * d, u = base + rr;
        const unsigned int r = rr % FUSE_DECODE_PASS_ROWS, w0 = rr / FUSE_DECODE_PASS_ROWS * FUSE_DECODE_KEY_WARPS;
        float most = minus_infinity;
#pragma unroll
        for (int w = 0; w < FUSE_DECODE_KEY_WARPS; ++w) most = fmaxf(most, warp_max[w0 + w][r]);
        float total = 0.0f, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < FUSE_DECODE_KEY_WARPS; ++w) {
          const float weight = most == minus_infinity ? 0.0f : exp2f(warp_max[w0 + w][r] - most);
          total += weight * warp_sum[w0 + w][r];
          sum += weight * warp_acc[w0 + w][r][c];
        }
        const unsigned int row = fuse_decode_row(b, g, u, group, q_heads, queries);
        if (used == 1) {
          // A row that saw no key (lens[b] = 0, or < sq under causal) has sum 0: it writes zeros.
          fuse_model_store(a.out, (unsigned long long)row * d + c, total > 0.0f ? sum * (1.0f / total) : 0.0f);
        } else {
#if FUSE_DECODE_CLUSTER
          row_buf[u][c] = sum;
          if (c == 0) {
            row_stats[u][0] = most;
            row_stats[u][1] = total;
          }
#else
          const unsigned long long at_split = (unsigned long long)row * splits + split;
          if (most != minus_infinity) a.partials[at_split * dp + c] = sum;
          if (c == 0) {
            stats[2 * at_split] = most;
            stats[2 * at_split + 1] = total;
          }
#endif
        }
      }
      __syncthreads();  // the next pass rewrites warp_acc
    }
#if FUSE_DECODE_CLUSTER
    fuse_decode_cluster_sync();  // every split's rows are in its shared memory
    if (active && used > 1) {
      // This block's rows (u % used == split), a thread a (row, channel), the splits in the order 0, 1, ..
      for (unsigned int at = threadIdx.x; at < rows * d; at += FUSE_DECODE_THREADS) {
        const unsigned int u = at / d, c = at - u * d;
        if (u % used != split) continue;
        // Every split's max, sum and this channel's sum are loaded first (one round trip), then merged.
        float split_max[FUSE_DECODE_CLUSTER_MAX], split_sum[FUSE_DECODE_CLUSTER_MAX], split_acc[FUSE_DECODE_CLUSTER_MAX];
#pragma unroll
        for (int s = 0; s < FUSE_DECODE_CLUSTER_MAX; ++s) {
          const bool here = (unsigned int)s < used;
          split_max[s] = here ? fuse_decode_peer_load(&row_stats[u][0], s) : minus_infinity;
          split_sum[s] = here ? fuse_decode_peer_load(&row_stats[u][1], s) : 0.0f;
          split_acc[s] = here ? fuse_decode_peer_load(&row_buf[u][c], s) : 0.0f;
        }
        float most = minus_infinity;
#pragma unroll
        for (int s = 0; s < FUSE_DECODE_CLUSTER_MAX; ++s) most = fmaxf(most, split_max[s]);
        float total = 0.0f, sum = 0.0f;
#pragma unroll
        for (int s = 0; s < FUSE_DECODE_CLUSTER_MAX; ++s) {
          // A split that saw no key (max -inf), or is not in use, weighs 0 (its sums were not written).
          if (most == minus_infinity || split_max[s] == minus_infinity) continue;
          const float weight = exp2f(split_max[s] - most);
          total += weight * split_sum[s];
          sum += weight * split_acc[s];
        }
        const unsigned int row = fuse_decode_row(b, g, u, group, q_heads, queries);
        fuse_model_store(a.out, (unsigned long long)row * d + c, total > 0.0f ? sum * (1.0f / total) : 0.0f);
      }
    }
    fuse_decode_cluster_sync();  // every block has read the others' shared memory: it may be left or reused
    continue;
#endif
    if (used == 1) continue;
    // Count this split in; the last of the tile's splits to arrive merges them all.
    if (threadIdx.x == 0) {
      __threadfence();  // this block's partials (ordered before by the barrier above) before the count
      const unsigned int arrived = atomicAdd(a.counters + tile, 1u) + 1u;
      last_block = arrived == used;
      if (arrived == used) atomicExch(a.counters + tile, 0u);  // zero for the next launch
    }
    __syncthreads();
    if (!last_block) continue;
    __threadfence();  // every other split's partials are visible before they are read (through L2)
    // Each row's maximum over the splits, the splits' weights exp2(max_s - max) and 1 / sum of the weighted
    // sums: a warp a row, lanes over the splits (fixed shuffle trees: deterministic).
    for (unsigned int u = warp; u < rows; u += FUSE_DECODE_WARPS) {
      const unsigned int row = fuse_decode_row(b, g, u, group, q_heads, queries);
      const float2* row_stats = reinterpret_cast<const float2*>(stats) + (unsigned long long)row * splits;
      float split_max[FUSE_DECODE_MAX_SPLITS / 32], split_sum[FUSE_DECODE_MAX_SPLITS / 32];
      float most = minus_infinity;
#pragma unroll
      for (int j = 0; j < FUSE_DECODE_MAX_SPLITS / 32; ++j) {
        const unsigned int s = lane + 32 * j;
        const float2 st = s < used ? __ldcg(row_stats + s) : make_float2(minus_infinity, 0.0f);
        split_max[j] = st.x;
        split_sum[j] = st.y;
        most = fmaxf(most, st.x);
      }
      most = fuse_model_warp_max(most);
      float total = 0.0f;
#pragma unroll
      for (int j = 0; j < FUSE_DECODE_MAX_SPLITS / 32; ++j) {
        const unsigned int s = lane + 32 * j;
        // A split without keys (max -inf) weighs 0, and no row's max is -inf unless every split's is.
        const float weight = most == minus_infinity ? 0.0f : exp2f(split_max[j] - most);
        total += weight * split_sum[j];
        if (s < used) weights[u * used + s] = weight;
      }
      total = fuse_model_warp_sum(total);
      if (lane == 0) inverse[u] = total > 0.0f ? 1.0f / total : 0.0f;
    }
    __syncthreads();
    // A thread a (row, 4 channels): the weighted sums in split order. A split of weight 0 is not read (an
    // empty split wrote no sums).
    const unsigned int quads = dp / 4;
    for (unsigned int at = threadIdx.x; at < rows * quads; at += FUSE_DECODE_THREADS) {
      const unsigned int u = at / quads, quad = at - u * quads;
      const unsigned int row = fuse_decode_row(b, g, u, group, q_heads, queries);
      const float4* sums = reinterpret_cast<const float4*>(a.partials + (unsigned long long)row * splits * dp) + quad;
      const float* row_weights = weights + u * used;
      float4 total = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
      for (unsigned int s = 0; s < used; ++s) {
        const float weight = row_weights[s];
        const float4 x = weight != 0.0f ? __ldcg(sums + (unsigned long long)s * quads) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        total.x += weight * x.x;
        total.y += weight * x.y;
        total.z += weight * x.z;
        total.w += weight * x.w;
      }
      const float scale = inverse[u];
      const float parts[4] = {total.x, total.y, total.z, total.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const unsigned int c = 4 * quad + j;
        if (c < d) fuse_model_store(a.out, (unsigned long long)row * d + c, parts[j] * scale);
      }
    }
    __syncthreads();  // the next item rewrites weights and last_block
  }
}
