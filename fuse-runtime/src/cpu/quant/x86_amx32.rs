//! The AMX product for the 32-value block types (Q4_0, Q4_1, Q8_0; `x86_amx` drives it): a block is one group,
//! its weights held signed in the panel (Q4_0's less 8), so `tdpbssd` (signed by signed) multiplies them by the
//! activations' two 8-bit terms (`Strategy::Q8Residual`: x = d1 q1 + d2 q2, about 1e-5 of exact), one term
//! after the other on the same weight tiles. Each block's 16 x 16 sums are scaled in f32 by the weight row's
//! d and the term's block scale, and Q4_1's min (`m * sum(x)`, the terms' `gs`) added: the arithmetic of the
//! other kernels up to f32 summation order.

use super::x86_amx_panel::{Format, Packed, Panel, T};
use std::arch::asm;
use std::arch::x86_64::*;

/// The two panels' weight rows against activation tiles `mts` of both terms (`packed[0]`, `packed[1]`):
/// `sums[2 * panel + tile][row * 16 + lane]`. The tile configuration is `x86_amx`'s for groups of 32.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn quad_product(
    panels: &[Panel; 2],
    packed: &[Packed],
    mts: [usize; 2],
    k: usize,
    sums: &mut [[f32; T * T]; 4],
) {
    let blocks = k / 32;
    #[repr(C, align(64))]
    struct Sums([i32; 8 * T * T]);
    let mut c = Sums([0; 8 * T * T]);
    let mut acc = [[_mm512_setzero_ps(); T]; 4];
    let with_min = panels[0].format == Format::Q4_1;
    for blk in 0..blocks {
        let a = |h: usize| panels[h].a.as_ptr().add(blk * T * 32);
        let b = |t: usize, h: usize| packed[t].b.as_ptr().add(mts[h] * k * T + blk * 8 * 64);
        asm!(
            "tileloadd tmm4, [{a0} + {sa}]",
            "tileloadd tmm5, [{a1} + {sa}]",
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm6, [{b0} + {sb}]",
            "tileloadd tmm7, [{b1} + {sb}]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tilestored [{c} + {sc}], tmm0",
            "tilestored [{c} + {sc} + 1024], tmm1",
            "tilestored [{c} + {sc} + 2048], tmm2",
            "tilestored [{c} + {sc} + 3072], tmm3",
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tileloadd tmm6, [{r0} + {sb}]",
            "tileloadd tmm7, [{r1} + {sb}]",
            "tdpbssd tmm0, tmm4, tmm6",
            "tdpbssd tmm1, tmm4, tmm7",
            "tdpbssd tmm2, tmm5, tmm6",
            "tdpbssd tmm3, tmm5, tmm7",
            "tilestored [{c} + {sc} + 4096], tmm0",
            "tilestored [{c} + {sc} + 5120], tmm1",
            "tilestored [{c} + {sc} + 6144], tmm2",
            "tilestored [{c} + {sc} + 7168], tmm3",
            a0 = in(reg) a(0), a1 = in(reg) a(1), sa = in(reg) 32usize,
            b0 = in(reg) b(0, 0), b1 = in(reg) b(0, 1), r0 = in(reg) b(1, 0), r1 = in(reg) b(1, 1),
            sb = in(reg) 64usize, c = in(reg) c.0.as_mut_ptr(), sc = in(reg) 64usize,
            options(nostack)
        );
        for (q, acc) in acc.iter_mut().enumerate() {
            let (panel, mt) = (&panels[q / 2], mts[q % 2]);
            let at = (mt * blocks + blk) * T;
            let dx = [_mm512_loadu_ps(packed[0].dx.as_ptr().add(at)), _mm512_loadu_ps(packed[1].dx.as_ptr().add(at))];
            let gs = if with_min {
                _mm512_add_ps(
                    _mm512_loadu_ps(packed[0].gs.as_ptr().add(at)),
                    _mm512_loadu_ps(packed[1].gs.as_ptr().add(at)),
                )
            } else {
                _mm512_setzero_ps()
            };
            for (row, a) in acc.iter_mut().enumerate() {
                let d = _mm512_set1_ps(*panel.d.get_unchecked(blk * T + row));
                for (t, dx) in dx.iter().enumerate() {
                    let s = _mm512_loadu_si512(c.0.as_ptr().add(((4 * t + q) * T + row) * T) as *const _);
                    *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(*dx, d), *a);
                }
                if with_min {
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(*panel.mins.get_unchecked(blk * T + row)), gs, *a);
                }
            }
        }
    }
    for (q, acc) in acc.iter().enumerate() {
        for (row, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(sums[q].as_mut_ptr().add(row * T), *a);
        }
    }
}
