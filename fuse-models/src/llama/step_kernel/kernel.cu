// The decode step's kernel (after the generated header, ptx.cuh, layout.cuh, stages.cuh, head.cuh): a Llama
// decoder's whole step at batch 1 in one launch of CLUSTERS clusters of CLUSTER blocks. Layer l runs on cluster
// l % CLUSTERS, each block holding its 1/CLUSTER of the layer's Q4_1 weights in shared memory, loaded by bulk
// copies while the other clusters run their layers (a cluster issues layer l + CLUSTERS's copies as it finishes
// layer l). Inside a layer the stages hand over by st.async onto the consumers' mbarriers (QKV -> attention ->
// output projection -> FFN -> down); the residual stream goes to the next layer's cluster as tagged 64-bit words
// through L2. Layer 0 starts from the embedding of the token the previous launch picked; after the last layer
// every block takes part in the LM head and the argmax, so that a graph of launches generates.

extern "C" __global__ void __launch_bounds__(THREADS, 1) fuse_decode_step(const FuseDecodeStepArgs args) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    FuseDecodeStepArgs a = args;
    if (a.control) {  // the position and step count from the device (every block reads them before any advances them)
        const unsigned long long steps = a.control[1];
        a.pos = (long long)a.control[0], a.step = steps & 0xFFFFu, a.tag0 = (steps * 32 + 1) & 0xFFFFFFFFu;
    }
    Smem s = Smem::at(smem_raw);
    const int rank = (int)fuse_cluster_rank(), me = blockIdx.x / CLUSTER, t = threadIdx.x;
    unsigned long long* const tail = a.trace ? a.trace + (unsigned long long)LAYERS * NOTES : nullptr;
    const bool first_block = tail && blockIdx.x == 0 && t == 0;
    if (first_block) tail[T_START] = global_ns();
    if (t == 0) {
        for (int k = 0; k < 1 + HANDOFFS + HEAD_SLOTS; ++k) fuse_mbar_init(fuse_smem_addr(s.bar + k), 1);
        fuse_mbar_init_fence();
        // Layer 0's weights first: the other clusters' first loads (needed a layer or more later) wait a little.
        if (me > 0)
            for (const unsigned long long from = global_ns(); global_ns() - from < LOAD_DELAY_NS;) __nanosleep(256);
        load_share(a, s, me, rank);
    }
    fuse_cluster_sync();  // every block of the cluster is running (and its mbarriers set) before any is written to
    if (first_block) tail[T_SYNCED] = global_ns();
    const uint4* W4 = reinterpret_cast<const uint4*>(s.W);
    const float* norm1 = reinterpret_cast<const float*>(s.W + Share::norm1);
    const float* norm2 = reinterpret_cast<const float*>(s.W + Share::norm2);
    unsigned turn = 0;
    for (int l = me; l < LAYERS; l += CLUSTERS, ++turn) {
        unsigned long long clocks[NOTES];
        int note = 0;
        auto mark = [&]() { if (a.trace && t == 0 && note < NOTES) clocks[note++] = clock64(); };
        mark();
        const bool trace_layer0 = l == 0 && first_block;
        if (l == 0) embed(a, s.x);  // while the weights come
        if (trace_layer0) tail[T_EMBEDDED] = global_ns();
        fuse_mbar_wait(fuse_smem_addr(s.bar), turn & 1u);
        if (trace_layer0) tail[T_WEIGHTS0] = global_ns();
        if (t == 0)
            for (int k = rank < NQ ? H_QKV : H_ATT; k < HANDOFFS; ++k) expect(s.handoff + k, handoff_bytes(k));
        mark();
        if (l != 0) take_words(a.words, (unsigned)a.tag0 + l, s.x);
        __syncthreads();
        if (trace_layer0) tail[T_INPUT0] = global_ns();
        mark();
        // QKV of rms_norm(x): this block's rows to the attention blocks.
        norm_to(s.x, norm1, rms_scale(s.x), s.xn);
        gemv_partials<HID / 32>(W4 + Share::qkv_q / 16, reinterpret_cast<const unsigned*>(s.W + Share::qkv_dm), R_QKV,
                                [&](int kb) { return input_summed(s.xn, kb); }, s.part);
        __syncthreads();
        if (t < R_QKV) s.out[t] = row_sum<HID / 32>(s.part, t);
        __syncthreads();
        mark();
        send(s.out, s.qkv + rank * R_QKV, R_QKV * 4, s.handoff + H_QKV, 0, NQ);
        if (rank < NQ) fuse_mbar_wait(fuse_smem_addr(s.handoff + H_QKV), turn & 1u);
        mark();
        if (rank < NQ) attention_head(a, s, l, rank, mark);
        mark();
        fuse_mbar_wait(fuse_smem_addr(s.handoff + H_ATT), turn & 1u);
        mark();
        // Output projection + residual: this block's rows of xm = x + o, and their sum of squares, to every block.
        gemv_partials<HID / 32>(W4 + Share::o_q / 16, reinterpret_cast<const unsigned*>(s.W + Share::o_dm), R_O,
                                [&](int kb) { return input_of(s.att, s.atts, kb); }, s.part);
        __syncthreads();
        if (t < R_O) s.out[t] = s.x[rank * R_O + t] + row_sum<HID / 32>(s.part, t);
        __syncthreads();
        mark();
        send(s.out, s.xm + rank * R_O, R_O * 4, s.handoff + H_XM, 0, CLUSTER);
        if (t < 32) {
            float v = 0.f;
            for (int i = t; i < R_O; i += 32) v += s.out[i] * s.out[i];
            v = fuse_warp_sum(v);
            if (t < CLUSTER) send_word(v, s.sq + rank, s.handoff + H_XM, t);
        }
        fuse_mbar_wait(fuse_smem_addr(s.handoff + H_XM), turn & 1u);
        mark();
        // Gate and up of rms_norm(xm) (its scale from the producers' sums of squares, added in rank order: the
        // same in every block): this block's rows of h = silu(gate) * up (f16) and their block sums.
        {
            float ss = 0.f;
            for (int i = 0; i < CLUSTER; ++i) ss += s.sq[i];
            norm_to(s.xm, norm2, rsqrtf(ss / HID + EPS), s.xn);
        }
        gemv_partials<HID / 32>(W4 + Share::gu_q / 16, reinterpret_cast<const unsigned*>(s.W + Share::gu_dm), R_GU,
                                [&](int kb) { return input_summed(s.xn, kb); }, s.part);
        __syncthreads();
        if (t < R_GU / 2) {
            const float gate = row_sum<HID / 32>(s.part, t), up = row_sum<HID / 32>(s.part, t + R_GU / 2);
            const unsigned short h = fuse_f32_to_f16(gate / (1.f + __expf(-gate)) * up);
            s.out[t] = fuse_f16_to_f32(h);
            s.stage[(t & ~31) + perm_slot(t & 31)] = h;
        }
        __syncthreads();
        mark();
        {
            const int lane = t & 31, warp = t >> 5, h0 = rank * (R_GU / 2);
            send(s.stage, s.h + h0, R_GU / 2 * 2, s.handoff + H_H, 0, CLUSTER);
            if (warp < R_GU / 64) {
                const float bs = fuse_warp_sum(s.out[warp * 32 + lane]);
                if (lane < CLUSTER) send_word(bs, s.hs + h0 / 32 + warp, s.handoff + H_H, lane);
            }
            fuse_mbar_wait(fuse_smem_addr(s.handoff + H_H), turn & 1u);
        }
        mark();
        // Down + residual: this block's rows of the next layer's input, as tagged words.
        gemv_partials<FF / 32>(W4 + Share::d_q / 16, reinterpret_cast<const unsigned*>(s.W + Share::d_dm), R_D,
                               [&](int kb) { return input_of(s.h, s.hs, kb); }, s.part);
        __syncthreads();  // also: every read of W is done
        if (t < 4 * ((R_D + 7) / 8 * 8)) {  // four threads a row, a quarter of the partials each (whole warps)
            const int row = t >> 2, q4 = t & 3;
            float v = 0.f;
            if (row < R_D)
#pragma unroll
                for (int kb = q4 * (FF / 128); kb < (q4 + 1) * (FF / 128); ++kb) v += s.part[row * (FF / 32) + kb];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            if (row < R_D && q4 == 0) put_word(a.words + rank * R_D + row, (unsigned)a.tag0 + l + 1, s.xm[rank * R_D + row] + v);
        }
        if (t == 0 && l + CLUSTERS < LAYERS) load_share(a, s, l + CLUSTERS, rank);
        mark();
        if (a.trace && t == 0 && rank == 0)
            for (int i = 1; i < note; ++i) a.trace[(unsigned long long)l * NOTES + i] = clocks[i] - clocks[i - 1];
    }
    if (t == 0) start_head(a, s, me, rank);
    lm_head(a, s, tail && (blockIdx.x == 0 || blockIdx.x == (LAYERS - 1) % CLUSTERS * CLUSTER) ? tail : nullptr);
    fuse_cluster_sync();  // no block leaves while another may still write its shared memory
}
