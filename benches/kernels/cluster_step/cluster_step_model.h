// Host side of cluster_step.cu: a random SmolLM2-shaped model in GGUF's Q4_1 blocks (its token matrix in
// Q8_0), its packing into the blocks' shares, and a double-precision reference of the same step.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

struct Q41 {  // GGUF's Q4_1 block: value j = d * q_j + m, q_j the low nibble of qs[j] (j < 16) or the high of qs[j - 16]
    uint16_t d, m;
    uint8_t qs[16];
};
static_assert(sizeof(Q41) == 20, "GGUF's block");

static float f16_value(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

struct Matrix {
    int rows = 0, cols = 0;
    std::vector<Q41> blocks;  // [rows][cols / 32]
    double at(int r, int c) const {
        const Q41& b = blocks[(size_t)r * (cols / 32) + c / 32];
        const int j = c % 32, q = j < 16 ? b.qs[j] & 15 : b.qs[j - 16] >> 4;
        return (double)f16_value(b.d) * q + (double)f16_value(b.m);
    }
    // y = W x in double
    std::vector<double> times(const std::vector<double>& x) const {
        std::vector<double> y(rows, 0.0);
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c) y[r] += at(r, c) * x[c];
        return y;
    }
};

static Matrix random_matrix(int rows, int cols, std::mt19937& rng) {
    std::uniform_real_distribution<float> scale(0.004f, 0.012f), shift(-0.5f, 0.5f);
    std::uniform_int_distribution<int> byte(0, 255);
    Matrix m;
    m.rows = rows, m.cols = cols;
    m.blocks.resize((size_t)rows * cols / 32);
    for (Q41& b : m.blocks) {
        const float d = scale(rng);
        b.d = __half_as_ushort(__float2half(d));
        b.m = __half_as_ushort(__float2half(-7.5f * d + shift(rng) * d));
        for (uint8_t& q : b.qs) q = (uint8_t)byte(rng);
    }
    return m;
}

struct Layer {
    Matrix qkv, o, gate, up, down;  // qkv: q's 576 rows, then k's 192 and v's 192
    std::vector<float> norm1, norm2;
};

struct Model {
    std::vector<Layer> layers;
    std::vector<float> rope;  // [MAXPOS][HD] as StepArgs::rope
    // The token matrix (embedding and LM head), Q8_0: values + 128 as StepArgs::head_q, scales as head_d.
    std::vector<unsigned char> head_q;
    std::vector<__half> head_d;
    std::vector<float> out_norm;
    double head_at(int token, int i) const {
        return (double)__half2float(head_d[(size_t)token * (HID / 32) + i / 32]) * ((int)head_q[(size_t)token * HID + i] - 128);
    }
    explicit Model(unsigned seed) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> nw(0.8f, 1.2f);
        for (int l = 0; l < LAYERS; ++l) {
            Layer L;
            L.qkv = random_matrix(QKV_ROWS, HID, rng);
            L.o = random_matrix(HID, HID, rng);
            L.gate = random_matrix(FF, HID, rng);
            L.up = random_matrix(FF, HID, rng);
            L.down = random_matrix(HID, FF, rng);
            for (int i = 0; i < HID; ++i) L.norm1.push_back(nw(rng)), L.norm2.push_back(nw(rng));
            layers.push_back(std::move(L));
        }
        std::uniform_real_distribution<float> scale(0.005f, 0.015f);
        std::uniform_int_distribution<int> byte(1, 255);  // Q8_0's values -127..127, + 128
        head_q.resize((size_t)VOCAB * HID);
        for (unsigned char& q : head_q) q = (unsigned char)byte(rng);
        head_d.resize((size_t)VOCAB * (HID / 32));
        for (__half& d : head_d) d = __float2half(scale(rng));
        for (int i = 0; i < HID; ++i) out_norm.push_back(nw(rng));
        rope.resize((size_t)MAXPOS * HD);
        for (int p = 0; p < MAXPOS; ++p)
            for (int i = 0; i < 32; ++i) {
                const double f = std::pow(100000.0, -i / 32.0);
                rope[p * HD + i] = (float)std::cos(p * f), rope[p * HD + 32 + i] = (float)std::sin(p * f);
            }
    }

    // The kernel's weights: [layer][rank][Share::bytes].
    std::vector<unsigned char> pack() const {
        std::vector<unsigned char> out((size_t)LAYERS * CLUSTER * Share::bytes, 0);
        for (int l = 0; l < LAYERS; ++l)
            for (int rank = 0; rank < CLUSTER; ++rank) {
                unsigned char* share = out.data() + ((size_t)l * CLUSTER + rank) * Share::bytes;
                const Layer& L = layers[l];
                auto stage = [&](size_t q_at, size_t dm_at, int rows, auto row_of) {
                    for (int r = 0; r < rows; ++r) {
                        const auto [m, row] = row_of(r);
                        const int kbs = m->cols / 32;
                        for (int kb = 0; kb < kbs; ++kb) {
                            const Q41& b = m->blocks[(size_t)row * kbs + kb];
                            std::memcpy(share + q_at + ((size_t)r * kbs + kb) * 16, b.qs, 16);
                            std::memcpy(share + dm_at + ((size_t)r * kbs + kb) * 4, &b.d, 4);
                        }
                    }
                };
                stage(Share::qkv_q, Share::qkv_dm, R_QKV, [&](int r) { return std::make_pair(&L.qkv, rank * R_QKV + r); });
                stage(Share::o_q, Share::o_dm, R_O, [&](int r) { return std::make_pair(&L.o, rank * R_O + r); });
                stage(Share::gu_q, Share::gu_dm, R_GU, [&](int r) {
                    const int half = R_GU / 2;
                    return std::make_pair(r < half ? &L.gate : &L.up, rank * half + r % half);
                });
                stage(Share::d_q, Share::d_dm, R_D, [&](int r) { return std::make_pair(&L.down, rank * R_D + r); });
                std::memcpy(share + Share::norm1, L.norm1.data(), HID * 4);
                std::memcpy(share + Share::norm2, L.norm2.data(), HID * 4);
            }
        return out;
    }

    // One step in double: the token's embedding in, the last layer's residual stream out; appends to kc / vc
    // (bf16, as the kernel).
    std::vector<double> step(int token, int pos, std::vector<__nv_bfloat16>& kc, std::vector<__nv_bfloat16>& vc) const {
        std::vector<double> x(HID);
        for (int i = 0; i < HID; ++i) x[i] = head_at(token, i);
        auto norm = [](const std::vector<double>& v, const std::vector<float>& w) {
            double ss = 0;
            for (double e : v) ss += e * e;
            const double r = 1.0 / std::sqrt(ss / HID + EPS);
            std::vector<double> o(v.size());
            for (size_t i = 0; i < v.size(); ++i) o[i] = v[i] * r * w[i];
            return o;
        };
        auto roped = [&](const double* v) {
            std::vector<double> o(HD);
            for (int d = 0; d < HD; ++d) {
                const int i = d & 31;
                const double c = rope[pos * HD + i], s = rope[pos * HD + 32 + i];
                o[d] = d < 32 ? v[d] * c - v[d + 32] * s : v[d] * c + v[d - 32] * s;
            }
            return o;
        };
        for (int l = 0; l < LAYERS; ++l) {
            const Layer& L = layers[l];
            const std::vector<double> qkv = L.qkv.times(norm(x, L.norm1));
            std::vector<double> att(HID);
            for (int g = 0; g < NKV; ++g) {
                const std::vector<double> k = roped(&qkv[HID + g * HD]);
                const double* v = &qkv[HID + NKV * HD + g * HD];
                const size_t at = ((size_t)l * NKV + g) * MAXPOS * HD;
                for (int h = g * (NQ / NKV); h < (g + 1) * (NQ / NKV); ++h) {
                    const std::vector<double> q = roped(&qkv[h * HD]);
                    std::vector<double> sc(pos + 1);
                    for (int j = 0; j <= pos; ++j) {
                        double d = 0;
                        for (int e = 0; e < HD; ++e) d += q[e] * (j < pos ? (double)__bfloat162float(kc[at + (size_t)j * HD + e]) : k[e]);
                        sc[j] = d / 8.0;
                    }
                    const double mx = *std::max_element(sc.begin(), sc.end());
                    double sum = 0;
                    for (double& e : sc) sum += (e = std::exp(e - mx));
                    for (int e = 0; e < HD; ++e) {
                        double o = 0;
                        for (int j = 0; j <= pos; ++j) o += sc[j] * (j < pos ? (double)__bfloat162float(vc[at + (size_t)j * HD + e]) : v[e]);
                        att[h * HD + e] = o / sum;
                    }
                }
                for (int e = 0; e < HD; ++e)
                    kc[at + (size_t)pos * HD + e] = __float2bfloat16((float)k[e]), vc[at + (size_t)pos * HD + e] = __float2bfloat16((float)v[e]);
            }
            const std::vector<double> o = L.o.times(att);
            std::vector<double> xm(HID);
            for (int i = 0; i < HID; ++i) xm[i] = x[i] + o[i];
            const std::vector<double> xn = norm(xm, L.norm2), g = L.gate.times(xn), u = L.up.times(xn);
            std::vector<double> h(FF);
            for (int i = 0; i < FF; ++i) h[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
            const std::vector<double> dn = L.down.times(h);
            for (int i = 0; i < HID; ++i) x[i] = xm[i] + dn[i];
        }
        return x;
    }
    // The LM head's logits of the last layer's residual stream, in double.
    std::vector<double> logits(const std::vector<double>& x) const {
        double ss = 0;
        for (double e : x) ss += e * e;
        const double r = 1.0 / std::sqrt(ss / HID + EPS);
        std::vector<double> out(VOCAB, 0.0);
        for (int v = 0; v < VOCAB; ++v)
            for (int i = 0; i < HID; ++i) out[v] += head_at(v, i) * x[i] * r * out_norm[i];
        return out;
    }
};
