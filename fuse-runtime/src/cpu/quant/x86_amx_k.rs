//! The AMX product for the K types (`x86_amx` drives it) on full-depth tiles: the panel holds each weight times
//! its group's scale, split into two byte planes, so a block's 256 products sum in the tile accumulators, 64
//! values a `tdpbusd`, with no scaling between groups. Q4_K and Q5_K: `sc * q` (0..1953) = `256 h + l`, both
//! unsigned; Q6_K: `sc * (q - 32)` (-4064..4096) = `128 h + l`, l 0..127 and h -32..32, both signed (`tdpbssd`).
//! `S = L + 256 H` (`128 H`) is the block's exact integer sum of the other kernels (`sum_g sc_g sum_k q a`, Q6_K's
//! offset in it). One store of the accumulators a block, where the kernel of groups stored and scaled them on
//! AVX-512 8 (16) times a block; then each block's d and the activations' d in f32 and Q4_K's min terms (`-dmin
//! * m` by the activations' group sums), in the same order: results equal the grouped kernel's bit for bit.
//! The 1b's prefill (Q4_K_M, 2 threads) 182 -> 211 tokens/s with the Q4_K planes and aligned panels.

use super::x86_amx_panel::{plane_at, Packed, Panel, T};
use std::arch::asm;
use std::arch::x86_64::*;

/// Four products of a chunk: the low and high planes' tiles (at `l`, `h`) by two activation tiles (`b0`, `b1`)
/// into tmm0-3 (low by b0, b1; high by b0, b1), with `tdpbusd` (unsigned planes) or `tdpbssd` (signed).
macro_rules! chunk {
    ($op:literal, $l:expr, $h:expr, $b0:expr, $b1:expr) => {
        asm!(
            "tileloadd tmm4, [{l} + {s}]",
            "tileloadd tmm6, [{b0} + {s}]",
            concat!($op, " tmm0, tmm4, tmm6"),
            "tileloadd tmm7, [{b1} + {s}]",
            concat!($op, " tmm1, tmm4, tmm7"),
            "tileloadd tmm5, [{h} + {s}]",
            concat!($op, " tmm2, tmm5, tmm6"),
            concat!($op, " tmm3, tmm5, tmm7"),
            l = in(reg) $l, h = in(reg) $h, b0 = in(reg) $b0, b1 = in(reg) $b1, s = in(reg) 64usize,
            options(nostack)
        )
    };
}

/// The panel's 16 weight rows against activation tiles `mts`: `sums[first + tile][row * 16 + lane]`; `Q6`: the
/// signed planes of Q6_K (no min terms). The tile configuration is `x86_amx`'s full-depth one (every tile 16
/// rows of 64 bytes).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn split_product<const Q6: bool>(
    panel: &Panel,
    packed: &Packed,
    mts: [usize; 2],
    k: usize,
    sums: &mut [[f32; T * T]; 4],
    first: usize,
) {
    let blocks = k / 256;
    #[repr(C, align(64))]
    struct Sums([i32; 4 * T * T]);
    let mut c = Sums([0; 4 * T * T]);
    let mut acc = [[_mm512_setzero_ps(); T]; 2];
    for blk in 0..blocks {
        asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack));
        for ch in 0..4 {
            let w = |plane: usize| panel.a.as_ptr().add(plane_at(blk, plane, ch, 0));
            let b = |t: usize| packed.b.as_ptr().add(mts[t] * k * T + (blk * 256 + ch * 64) / 4 * 64);
            if Q6 {
                chunk!("tdpbssd", w(0), w(1), b(0), b(1));
            } else {
                chunk!("tdpbusd", w(0), w(1), b(0), b(1));
            }
        }
        asm!(
            "tilestored [{c} + {s}], tmm0",
            "tilestored [{c} + {s} + 1024], tmm1",
            "tilestored [{c} + {s} + 2048], tmm2",
            "tilestored [{c} + {s} + 3072], tmm3",
            c = in(reg) c.0.as_mut_ptr(), s = in(reg) 64usize,
            options(nostack)
        );
        for (t, acc) in acc.iter_mut().enumerate() {
            let mt = mts[t];
            let dx = _mm512_loadu_ps(packed.dx.as_ptr().add((mt * blocks + blk) * T));
            let gs: [__m512; 8] = match Q6 {
                true => [_mm512_setzero_ps(); 8],
                false => {
                    std::array::from_fn(|g| _mm512_loadu_ps(packed.gs.as_ptr().add((mt * (k / 32) + blk * 8 + g) * T)))
                }
            };
            for (row, a) in acc.iter_mut().enumerate() {
                let low = _mm512_loadu_si512(c.0.as_ptr().add((t * T + row) * T) as *const _);
                let high = _mm512_loadu_si512(c.0.as_ptr().add(((2 + t) * T + row) * T) as *const _);
                let high = if Q6 { _mm512_slli_epi32::<7>(high) } else { _mm512_slli_epi32::<8>(high) };
                let s = _mm512_add_epi32(low, high);
                let scale = _mm512_mul_ps(dx, _mm512_set1_ps(*panel.d.get_unchecked(blk * T + row)));
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, *a);
                for (g, gs) in gs.iter().enumerate().take(if Q6 { 0 } else { 8 }) {
                    let min = _mm512_set1_ps(*panel.mins.get_unchecked((blk * T + row) * 8 + g));
                    *a = _mm512_fmadd_ps(min, *gs, *a);
                }
            }
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        for (row, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(sums[first + t].as_mut_ptr().add(row * T), *a);
        }
    }
}
