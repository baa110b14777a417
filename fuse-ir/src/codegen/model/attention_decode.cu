// The decode attention kernel's entry, fuse_model_attention_decode (attention_decode.cuh, included before
// it, describes the kernel and holds its build parameters, argument struct and helpers).

// Up to 2 blocks a multiprocessor of 4 warps (the grid is about one a multiprocessor): a register cap of 255;
// larger blocks one.
#define FUSE_DECODE_MIN_BLOCKS (FUSE_DECODE_ROW_GROUPS == 1 ? 2 : 1)
FUSE_KERNEL(FUSE_DECODE_THREADS, FUSE_DECODE_MIN_BLOCKS) fuse_model_attention_decode(FUSE_KERNEL_PARAM(FuseAttentionDecodeArgs) a) {
#if FUSE_DECODE_EARLY
  // The first item's first chunk of keys and values, loaded before the grid wait (see the header).
  uint4 early_key[FUSE_DECODE_UNROLL][FUSE_DECODE_VECTORS], early_value[FUSE_DECODE_UNROLL][FUSE_DECODE_VECTORS];
  unsigned int early_chunk = 0xffffffffu;
  {
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, d = FUSE_DECODE_EXACT_D ? FUSE_ATTENTION_D : (unsigned int)a.d;
    const unsigned int kv_heads = (unsigned int)a.kv_heads, splits = (unsigned int)a.splits;
    const unsigned int item = blockIdx.x, split = item % splits, tile = item / splits / FUSE_DECODE_ROW_BLOCKS;
    const unsigned int g = tile % kv_heads, b = tile / kv_heads;
    if (item < (unsigned int)a.batch * kv_heads * splits * FUSE_DECODE_ROW_BLOCKS) {
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
  if (a.lens && blockIdx.x == 0) {
    fuse_model_check_lens(a.lens, a.lens_stride, a.batch, (unsigned int)a.keys, (unsigned int)a.queries, a.causal != 0, a.fault);
  }
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
  static_assert(FUSE_DECODE_ROW_BLOCKS == 1 || !FUSE_DECODE_CLUSTER, "row blocks merge through the counters");
  const unsigned int items = (unsigned int)a.batch * kv_heads * splits * FUSE_DECODE_ROW_BLOCKS;
  const unsigned long long all_rows = (unsigned long long)a.batch * q_heads * queries;
  float* const stats = a.partials + all_rows * splits * dp;
  const bool vector = FUSE_DECODE_VECTOR || a.kv_vector != 0;
  const float q_scale = (float)(a.scale * 1.4426950408889634);  // log2(e): probabilities are exp2 of scores
  const float minus_infinity = __int_as_float(0xff800000);
  const unsigned int no_key = 0xffffffffu;
  for (unsigned int item = blockIdx.x; item < items; item += gridDim.x) {
    const unsigned int split = item % splits, row_block = item / splits % FUSE_DECODE_ROW_BLOCKS;
    const unsigned int tile = item / splits / FUSE_DECODE_ROW_BLOCKS, g = tile % kv_heads, b = tile / kv_heads;
    // The rows this block takes: all, or its row block's one pass.
    constexpr unsigned int pass_all = FUSE_DECODE_PASS_ROWS * FUSE_DECODE_ROW_GROUPS;
    const unsigned int row_begin = FUSE_DECODE_ROW_BLOCKS > 1 ? row_block * pass_all : 0u;
    const unsigned int row_end = FUSE_DECODE_ROW_BLOCKS > 1 ? min(rows, row_begin + pass_all) : rows;
    // The block that appends the new rows (and records a position past the caches).
    const bool appender = split == 0 && row_block == 0;
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
      // Sequence b's position and table rows (strides 0: one for the batch).
      const unsigned int at = __ldg(a.at + b * a.at_stride), i0 = rope_low ? c0 : c0 - d / 2;
      uint4 cs_raw[FUSE_DECODE_VECTORS], sn_raw[FUSE_DECODE_VECTORS], key_raw[FUSE_DECODE_VECTORS];
      fuse_decode_load(a.cos + b * a.table_batch_strides[0], 1, i0, d, true, true, cs_raw);
      fuse_decode_load(a.sin + b * a.table_batch_strides[1], 1, i0, d, true, true, sn_raw);
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
        if (appender && threadIdx.x < FUSE_DECODE_LANES) {
          // The lane's 8 channels of the new rows at position `at` (vector rows: unit stride, aligned).
#pragma unroll
          for (int vec = 0; vec < FUSE_DECODE_VECTORS; ++vec) {
            reinterpret_cast<uint4*>(const_cast<fuse_elem*>(k_base) + at * a.k_strides[2] + c0)[vec] = new_key[vec];
            reinterpret_cast<uint4*>(const_cast<fuse_elem*>(v_base) + at * a.v_strides[2] + c0)[vec] = new_value[vec];
          }
        }
      } else if (appender && threadIdx.x == 0) {
        fuse_model_fault(a.fault, 2, at, a.room);
      }
    }
#elif FUSE_DECODE_ROPE
    {
      const unsigned int half = d / 2, at = __ldg(a.at + b * a.at_stride);
      const fuse_elem* const cos_row = a.cos + b * a.table_batch_strides[0];
      const fuse_elem* const sin_row = a.sin + b * a.table_batch_strides[1];
      const bool appends = (long long)at <= a.room;
      if (appends) {
        at_key = at;
      } else if (appender && threadIdx.x == 0) {
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
          cs[j] = here ? fuse_model_load(cos_row, i * a.cos_stride) : 0.0f;
          sn[j] = here ? fuse_model_load(sin_row, i * a.sin_stride) : 0.0f;
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
            if (appender && appends) {
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
    FUSE_TASK_MARK(0);  // rope and the appends are done
    const FuseDecodeRange range = fuse_decode_range(lens_b, keys, queries, a.causal != 0, split, splits, warp % FUSE_DECODE_KEY_WARPS);
    const int causal_keys = range.causal_keys;
    const unsigned int used = range.used, warp_begin = range.warp_begin, warp_end = range.warp_end;
    // In clusters every block reaches the cluster barriers below; otherwise a split not in use stops here.
    const bool active = range.active;
    if (!FUSE_DECODE_CLUSTER && !active) continue;
    // A pass: each row group its FUSE_DECODE_PASS_ROWS rows from `base` on (none past the rows: its warps
    // only meet the barriers).
    for (unsigned int base = row_begin; active && base < row_end; base += pass_all) {
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
    FUSE_TASK_MARK(1);  // the passes are done
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
      last_block = arrived == used * FUSE_DECODE_ROW_BLOCKS;
      if (last_block) atomicExch(a.counters + tile, 0u);  // zero for the next launch
    }
    __syncthreads();
    FUSE_TASK_MARK(2);  // the split is counted in
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
      most = fuse_warp_max(most);
      float total = 0.0f;
#pragma unroll
      for (int j = 0; j < FUSE_DECODE_MAX_SPLITS / 32; ++j) {
        const unsigned int s = lane + 32 * j;
        // A split without keys (max -inf) weighs 0, and no row's max is -inf unless every split's is.
        const float weight = most == minus_infinity ? 0.0f : exp2f(split_max[j] - most);
        total += weight * split_sum[j];
        if (s < used) weights[u * used + s] = weight;
      }
      total = fuse_warp_sum(total);
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
