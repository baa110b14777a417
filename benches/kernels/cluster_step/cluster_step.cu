// The harness of the one-launch decode step on thread-block clusters (docs/persistent-step.md): the kernel is
// the library's (fuse-models/src/llama/step_kernel/), included here under nvcc after the preamble fuse-models
// generates (step_layout.h: the layout header and the PTX helpers; run.sh writes it). This file adds a random
// SmolLM2-shaped model in GGUF's blocks, a double-precision reference (cluster_step_model.h), the checks and the
// bench. SmolLM2-135M's 30 layers at batch 1, layer l on cluster l % 7 of 16 blocks.
//   cargo run -p fuse-models --example step_header -- DIR/step_layout.h
//   nvcc -O3 -std=c++17 -IDIR -gencode=arch=compute_90a,code=sm_90a -Xptxas -v cluster_step.cu -o cluster_step
//   ./cluster_step check | check-small | bench | all   (check: against the reference at five positions)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check_cuda.h"

#include "step_layout.h"  // generated: fuse-models' StepLayout::preamble (run.sh), the layout and PTX helpers
#include "../../../fuse-models/src/llama/step_kernel/layout.cuh"
#include "../../../fuse-models/src/llama/step_kernel/stages.cuh"
#include "../../../fuse-models/src/llama/step_kernel/head.cuh"
#include "../../../fuse-models/src/llama/step_kernel/kernel.cu"

#include "cluster_step_model.h"

// ---- host: device state, check, bench ------------------------------------------------------------------------

struct Device {
    unsigned char *w, *head_q;
    __half* head_d;
    float *rope, *out_norm, *logits;
    unsigned long long *words, *trace, *best, *k_layers, *v_layers, *control;
    unsigned* log;
    __nv_bfloat16 *kc, *vc;
    size_t cache_elems = (size_t)LAYERS * NKV * MAXPOS * HD;
    Device(const Model& m, const std::vector<unsigned char>& packed) {
        CK(cudaMalloc(&w, packed.size()));
        CK(cudaMemcpy(w, packed.data(), packed.size(), cudaMemcpyHostToDevice));
        CK(cudaMalloc(&head_q, m.head_q.size()));
        CK(cudaMemcpy(head_q, m.head_q.data(), m.head_q.size(), cudaMemcpyHostToDevice));
        CK(cudaMalloc(&head_d, m.head_d.size() * 2));
        CK(cudaMemcpy(head_d, m.head_d.data(), m.head_d.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&out_norm, HID * 4));
        CK(cudaMemcpy(out_norm, m.out_norm.data(), HID * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&logits, VOCAB * 4));
        CK(cudaMalloc(&rope, m.rope.size() * 4));
        CK(cudaMemcpy(rope, m.rope.data(), m.rope.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&words, HID * 8));
        CK(cudaMalloc(&best, 8));
        CK(cudaMalloc(&control, 3 * 8));
        CK(cudaMalloc(&log, 16 * 4));
        CK(cudaMalloc(&trace, ((size_t)LAYERS * NOTES + TRACE_TAIL) * 8));
        CK(cudaMalloc(&kc, cache_elems * 2));
        CK(cudaMalloc(&vc, cache_elems * 2));
        // Each layer's caches ([NKV][MAXPOS][HD] in the one buffer), as the kernel takes them.
        std::vector<unsigned long long> kl(LAYERS), vl(LAYERS);
        for (int l = 0; l < LAYERS; ++l)
            kl[l] = (unsigned long long)(kc + (size_t)l * NKV * MAXPOS * HD), vl[l] = (unsigned long long)(vc + (size_t)l * NKV * MAXPOS * HD);
        CK(cudaMalloc(&k_layers, LAYERS * 8));
        CK(cudaMalloc(&v_layers, LAYERS * 8));
        CK(cudaMemcpy(k_layers, kl.data(), LAYERS * 8, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(v_layers, vl.data(), LAYERS * 8, cudaMemcpyHostToDevice));
        CK(cudaFuncSetAttribute(fuse_decode_step, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)Smem::bytes()));
        CK(cudaFuncSetAttribute(fuse_decode_step, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
    ~Device() {
        for (void* p : {(void*)w, (void*)head_q, (void*)head_d, (void*)out_norm, (void*)logits, (void*)rope, (void*)words, (void*)best,
                        (void*)trace, (void*)kc, (void*)vc, (void*)k_layers, (void*)v_layers, (void*)control, (void*)log})
            cudaFree(p);
    }
    FuseDecodeStepArgs args(int pos, unsigned step, unsigned tag0, bool traced, bool with_logits) const {
        return FuseDecodeStepArgs{w, head_q, reinterpret_cast<const unsigned short*>(head_d), out_norm, best, with_logits ? logits : nullptr, words,
                                  k_layers, v_layers, rope, traced ? trace : nullptr, pos, MAXPOS, step, tag0};
    }
    void launch(const FuseDecodeStepArgs& a, cudaStream_t stream = 0) const {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = CLUSTER, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr, cfg.numAttrs = 1;
        cfg.gridDim = dim3(CLUSTER * CLUSTERS), cfg.blockDim = dim3(THREADS), cfg.dynamicSmemBytes = Smem::bytes(), cfg.stream = stream;
        CK(cudaLaunchKernelEx(&cfg, fuse_decode_step, a));
    }
};

static std::vector<__nv_bfloat16> random_cache(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<__nv_bfloat16> c(n);
    for (auto& e : c) e = __float2bfloat16(u(rng));
    return c;
}

static double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    return std::sqrt(num / den);
}

// Every position in `positions`: one step from a fresh random cache and token against the reference (the last
// layer's residual stream, the appended rows, the logits and the token picked); returns the failures.
// Three steps from position `pos`: queued with the host's positions (reading the token after each) and as a run
// that reads and advances the device's control words and logs its tokens; both must pick the same tokens and
// write the same cache rows, and the run must leave the control words advanced. Returns the failures.
static int check_run(Device& dev, int pos) {
    const unsigned token0 = 123;
    const std::vector<__nv_bfloat16> kc = random_cache(dev.cache_elems, 21), vc = random_cache(dev.cache_elems, 22);
    std::vector<unsigned> tokens[2];
    std::vector<__nv_bfloat16> caches[2];
    for (int run = 0; run < 2; ++run) {
        CK(cudaMemcpy(dev.kc, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dev.vc, vc.data(), vc.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemset(dev.words, 0, HID * 8));
        const unsigned long long first = token0;  // step 0, the lowest logit key
        CK(cudaMemcpy(dev.best, &first, 8, cudaMemcpyHostToDevice));
        const unsigned long long control[3] = {(unsigned long long)pos, 1, 0};
        CK(cudaMemcpy(dev.control, control, sizeof control, cudaMemcpyHostToDevice));
        for (int i = 0; i < 3; ++i) {
            FuseDecodeStepArgs a = dev.args(pos + i, 1 + i, 32u * (1 + i) + 1, false, false);
            if (run) a.control = dev.control, a.log = dev.log, a.log_len = 16;
            dev.launch(a);
            if (!run) {
                unsigned long long best = 0;
                CK(cudaMemcpy(&best, dev.best, 8, cudaMemcpyDeviceToHost));
                tokens[0].push_back(best_token(best));
            }
        }
        CK(cudaDeviceSynchronize());
        if (run) {
            unsigned log[16];
            CK(cudaMemcpy(log, dev.log, sizeof log, cudaMemcpyDeviceToHost));
            tokens[1] = {log[1], log[2], log[3]};
        }
        caches[run].resize(2 * kc.size());
        CK(cudaMemcpy(caches[run].data(), dev.kc, kc.size() * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(caches[run].data() + kc.size(), dev.vc, vc.size() * 2, cudaMemcpyDeviceToHost));
    }
    unsigned long long control[3];
    CK(cudaMemcpy(control, dev.control, sizeof control, cudaMemcpyDeviceToHost));
    const bool same_caches = std::memcmp(caches[0].data(), caches[1].data(), caches[0].size() * 2) == 0;
    const bool ok = tokens[0] == tokens[1] && same_caches && control[0] == (unsigned long long)pos + 3 && control[1] == 4 && control[2] == 0;
    printf("check run from pos %d: tokens %u %u %u (host positions) / %u %u %u (device run), caches %s, control %llu %llu %llu: %s\n", pos,
           tokens[0][0], tokens[0][1], tokens[0][2], tokens[1][0], tokens[1][1], tokens[1][2], same_caches ? "equal" : "DIFFER", control[0], control[1],
           control[2], ok ? "ok" : "FAILED");
    return !ok;
}

static int check(const Model& m, Device& dev, const std::vector<int>& positions) {
    int failures = 0;
    std::mt19937 rng(7);
    for (int pos : positions) {
        const int token = (int)(rng() % VOCAB);
        std::vector<__nv_bfloat16> kc = random_cache(dev.cache_elems, 11 + pos), vc = random_cache(dev.cache_elems, 13 + pos);
        CK(cudaMemcpy(dev.kc, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dev.vc, vc.data(), vc.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemset(dev.words, 0, HID * 8));
        const unsigned long long first = pack_best(0, 0u, (unsigned)token);
        CK(cudaMemcpy(dev.best, &first, 8, cudaMemcpyHostToDevice));
        const unsigned tag0 = 1;
        dev.launch(dev.args(pos, 1, tag0, false, true));
        CK(cudaDeviceSynchronize());
        std::vector<unsigned long long> words(HID);
        CK(cudaMemcpy(words.data(), dev.words, HID * 8, cudaMemcpyDeviceToHost));
        std::vector<__nv_bfloat16> gk(kc.size()), gv(vc.size());
        CK(cudaMemcpy(gk.data(), dev.kc, gk.size() * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gv.data(), dev.vc, gv.size() * 2, cudaMemcpyDeviceToHost));
        std::vector<float> glog(VOCAB);
        CK(cudaMemcpy(glog.data(), dev.logits, VOCAB * 4, cudaMemcpyDeviceToHost));
        unsigned long long best = 0;
        CK(cudaMemcpy(&best, dev.best, 8, cudaMemcpyDeviceToHost));
        const std::vector<double> want = m.step(token, pos, kc, vc), want_logits = m.logits(want);
        std::vector<double> got(HID), got_logits(glog.begin(), glog.end());
        int bad_tags = 0;
        for (int i = 0; i < HID; ++i) {
            bad_tags += (unsigned)(words[i] >> 32) != tag0 + LAYERS;
            uint32_t bits = (uint32_t)words[i];
            float f;
            std::memcpy(&f, &bits, 4);
            got[i] = f;
        }
        // The appended rows (and that nothing else in the caches moved).
        std::vector<double> ak, wk, av, wv;
        size_t moved = 0;
        for (size_t i = 0; i < kc.size(); ++i) {
            const bool appended = (i / HD) % MAXPOS == (size_t)pos;
            const float a = __bfloat162float(gk[i]), b = __bfloat162float(kc[i]), c = __bfloat162float(gv[i]), d = __bfloat162float(vc[i]);
            if (appended) ak.push_back(a), wk.push_back(b), av.push_back(c), wv.push_back(d);
            else moved += (a != b) + (c != d);
        }
        // The token: the reference's best, or one whose reference logit is within 0.02 of it (a near tie).
        const int want_token = (int)(std::max_element(want_logits.begin(), want_logits.end()) - want_logits.begin());
        const unsigned picked = best_token(best);
        const bool token_ok = (best >> 48) == 1 && picked < (unsigned)VOCAB && want_logits[picked] >= want_logits[want_token] - 0.02;
        const double ex = rel_l2(got, want), ek = rel_l2(ak, wk), ev = rel_l2(av, wv), el = rel_l2(got_logits, want_logits);
        const bool ok = bad_tags == 0 && moved == 0 && ex < 1e-2 && ek < 1e-2 && ev < 1e-2 && el < 1e-2 && token_ok;
        failures += !ok;
        printf("check pos %4d, token %5d: residual rel. L2 %.2e, appended k %.2e v %.2e, logits %.2e, picked %5u (reference %5d, "
               "%+.4f), words not tagged %d, cache entries moved %zu: %s\n",
               pos, token, ex, ek, ev, el, picked, want_token, picked < (unsigned)VOCAB ? want_logits[picked] - want_logits[want_token] : 0.0,
               bad_tags, moved, ok ? "ok" : "FAILED");
    }
    return failures;
}

static void bench(Device& dev, int pos) {
    const std::vector<__nv_bfloat16> kc = random_cache(dev.cache_elems, 3);
    CK(cudaMemcpy(dev.kc, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dev.vc, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    // A graph of 20 steps, each from the token the one before picked (the words and the argmax cleared first:
    // the tags and the step numbers restart at every replay; the first step's token is 0).
    constexpr int STEPS = 20;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(dev.words, 0, HID * 8, stream));
    CK(cudaMemsetAsync(dev.best, 0, 8, stream));
    for (int i = 0; i < STEPS; ++i) dev.launch(dev.args(pos, 1 + i, 1 + 32u * i, false, false), stream);
    CK(cudaStreamEndCapture(stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> us;
    for (int rep = 0; rep < 6; ++rep) {
        CK(cudaEventRecord(e0, stream));
        CK(cudaGraphLaunch(exec, stream));
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (rep) us.push_back(ms * 1e3f / STEPS);
    }
    std::sort(us.begin(), us.end());
    printf("bench pos %4d: %.1f us a step (median of 5 replays of %d; min %.1f, max %.1f), %.2f a layer\n", pos, us[us.size() / 2], STEPS, us[0],
           us.back(), us[us.size() / 2] / LAYERS);
    // Traced: block 0's cycles between its clock notes, mean over layers 1..29 and 10 steps.
    std::vector<double> sum(NOTES, 0.0);
    std::vector<unsigned long long> tr((size_t)LAYERS * NOTES + TRACE_TAIL);
    double head_wait = 0, head_work = 0, ring_wait = 0, in_kernel = 0, synced = 0, embedded = 0, weights0 = 0, input0 = 0, last_end = 0, last_head = 0;
    for (int i = 0; i < 10; ++i) {
        CK(cudaMemsetAsync(dev.words, 0, HID * 8, stream));
        CK(cudaMemsetAsync(dev.best, 0, 8, stream));
        dev.launch(dev.args(pos, 1, 1, true, false), stream);
        CK(cudaStreamSynchronize(stream));
        CK(cudaMemcpy(tr.data(), dev.trace, tr.size() * 8, cudaMemcpyDeviceToHost));
        for (int l = 1; l < LAYERS; ++l)
            for (int k = 1; k < NOTES; ++k) sum[k] += (double)tr[(size_t)l * NOTES + k] / (10.0 * (LAYERS - 1));
        const unsigned long long* tail = tr.data() + (size_t)LAYERS * NOTES;
        head_wait += tail[T_HEAD_WAIT] / 10.0, head_work += tail[T_HEAD_WORK] / 10.0, ring_wait += tail[T_HEAD_RING] / 10.0;
        in_kernel += (double)(tail[T_END] - tail[T_START]) / 10.0, weights0 += (double)(tail[T_WEIGHTS0] - tail[T_START]) / 10.0;
        input0 += (double)(tail[T_INPUT0] - tail[T_START]) / 10.0, last_end += (double)(tail[T_LAST_END] - tail[T_START]) / 10.0;
        last_head += (double)(tail[T_LAST_END] - tail[T_LAST_RESIDUAL]) / 10.0;
        synced += (double)(tail[T_SYNCED] - tail[T_START]) / 10.0, embedded += (double)(tail[T_EMBEDDED] - tail[T_START]) / 10.0;
    }
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const char* names[NOTES] = {"", "weights wait", "x in (poll)", "norm + QKV GEMV", "QKV hand-off", "attention: rope", "attention: scores", "attention: P.V", "attention: sum, send", "attention wait",
                                "o-proj GEMV", "o-proj hand-off", "norm + gate/up GEMV", "h hand-off", "down GEMV + store"};
    double own = 0;
    printf("  traced (block 0 of the layer's cluster, ns at %.2f GHz, mean of layers 1-29 x 10 steps):\n", khz * 1e-6);
    for (int k = 1; k < NOTES; ++k) {
        printf("    %-22s %7.0f\n", names[k], sum[k] / (khz * 1e-6));
        if (k > 2) own += sum[k] / (khz * 1e-6);
    }
    printf("    %-22s %7.0f (after its input arrived)\n", "layer", own);
    printf("    LM head, block 0 (ns): from its last layer to the final residual stream %.0f, norm + rows + argmax %.0f (waiting for its ring %.0f)\n",
           head_wait / (khz * 1e-6), head_work / (khz * 1e-6), ring_wait / (khz * 1e-6));
    printf("    launched alone (globaltimer ns from block 0's start): past the cluster barrier %.0f, embedded %.0f, layer 0's weights in %.0f, its "
           "input %.0f; block 0 done %.0f, the last layer's cluster's rank 0 done %.0f (its LM head %.0f)\n",
           synced, embedded, weights0, input0, in_kernel, last_end, last_head);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(stream));
}

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "all";
    printf("fuse_decode_step: %d clusters of %d blocks x %d threads, %llu bytes of shared memory a block (%llu of weights)\n", CLUSTERS,
           CLUSTER, THREADS, Smem::bytes(), Share::bytes);
    const Model model(2026);
    Device dev(model, model.pack());
    {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = CLUSTER, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr, cfg.numAttrs = 1, cfg.gridDim = dim3(CLUSTER * CLUSTERS), cfg.blockDim = dim3(THREADS), cfg.dynamicSmemBytes = Smem::bytes();
        int clusters = 0;
        CK(cudaOccupancyMaxActiveClusters(&clusters, fuse_decode_step, &cfg));
        if (clusters < CLUSTERS) {
            printf("only %d clusters of %d can be resident; the step needs %d\n", clusters, CLUSTER, CLUSTERS);
            return 1;
        }
    }
    int failures = 0;
    if (mode == "all" || mode == "check") failures += check(model, dev, {0, 1, 37, 128, 1023}) + check_run(dev, 40) + check_run(dev, 300);
    if (mode == "check-small") failures += check(model, dev, {5});
    if (mode == "all" || mode == "bench")
        for (int pos : {128, 1000}) bench(dev, pos);
    printf("%s\n", failures ? "FAILED" : "done");
    return failures ? 1 : 0;
}
