//! Q4_K against one 8-bit activation term (`Strategy::Q8`, prefill's) on Intel AMX (`amx-tile` + `amx-int8`,
//! Sapphire Rapids and later): each `tdpbusd` multiplies a 16-row tile of weights (one 32-value group of each
//! row, nibbles widened to bytes) by the same group of 16 activation rows, 8192 products in one instruction
//! where `vpdpbusd` makes 64. llama.cpp's CPU backend uses AMX for prefill where the CPU has it.
//!
//! The group's 16 x 16 integer sums are stored and scaled on AVX-512: by the group's 6-bit scale of each weight
//! row (integer products, summed over the block's 8 groups: the exact integers of the other kernels), then by
//! the block's d and the activations' d in f32, and the min terms (`-dmin * m` of each row and group times the
//! activations' group sums `gs`) added. So results equal `x86_q8_512`'s up to f32 summation order.
//!
//! Layouts: the activations are packed once a call, 16 rows a tile, in the layout `tdpbusd` reads its second
//! operand in (4 consecutive values of each of the 16 rows per 64-byte row of the tile); each task widens the
//! nibbles of its 16 weight rows at a time into a panel (per block and group, 16 rows of 32 bytes), then runs
//! every activation tile against it. Rows past n or m are zeros, computed and not stored.
//!
//! Linux grants a process the AMX state on request (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`):
//! [`available`] asks once, and a refusal, a CPU without AMX or `FUSE_CPU_AMX=off` leaves the AVX-512 kernels.
//! The tile instructions are inline assembly (their intrinsics are not stable Rust); each task loads the tile
//! configuration on its own thread and releases the tiles when done.

use super::q8::Q8Acts;
use super::x86_f32::k_scale_bytes;
use super::x86_q8::f16;
use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Bytes of a Q4_K block, and where its nibbles start.
const BYTES: usize = 144;
const QS: usize = 16;
/// Rows of a tile (weights and activations alike).
const T: usize = 16;

/// Whether the AMX kernel runs here: the CPU has AMX-TILE and AMX-INT8, Linux granted the tile state, and
/// `FUSE_CPU_AMX` is not `off`. Decided once.
pub(super) fn available() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        if !crate::env::cpu_amx() || !super::Isa::Avx512.available() {
            return false;
        }
        // CPUID leaf 7, sub-leaf 0: EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
        let edx = __cpuid_count(7, 0).edx;
        if edx & (1 << 24) == 0 || edx & (1 << 25) == 0 {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
        const XFEATURE_XTILEDATA: usize = 18;
        request_tile_state(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    })
}

/// `arch_prctl(code, feature) == 0`, by the raw system call (no libc dependency for one call).
fn request_tile_state(code: usize, feature: usize) -> bool {
    const SYS_ARCH_PRCTL: usize = 158;
    let ret: isize;
    // Safety: a system call that reads two integers; rcx and r11 are clobbered by `syscall`.
    unsafe {
        asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL as isize => ret, in("rdi") code, in("rsi") feature,
             lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    ret == 0
}

/// The activations of one call, 16 rows a tile: `b` in `tdpbusd`'s second-operand layout ([tile][k / 4][16
/// rows][4 values]), `dx` the rows' block scales ([tile][block][16]), `gs` their group sums ([tile][group][16]).
struct Packed {
    b: Vec<i8>,
    dx: Vec<f32>,
    gs: Vec<f32>,
}

fn pack(acts: &Q8Acts, m: usize, k: usize) -> Packed {
    let (tiles, blocks, groups) = (m.div_ceil(T), k / 256, k / 32);
    let mut p =
        Packed { b: vec![0; tiles * k * T], dx: vec![0.0; tiles * blocks * T], gs: vec![0.0; tiles * groups * T] };
    for r in 0..m {
        let (tile, lane) = (r / T, r % T);
        let row = acts.row(r);
        let b = &mut p.b[tile * k * T..][..k * T];
        for (q, four) in row.qs.chunks_exact(4).enumerate() {
            b[q * 4 * T + 4 * lane..][..4].copy_from_slice(four);
        }
        for (i, &d) in row.d.iter().enumerate() {
            p.dx[(tile * blocks + i) * T + lane] = d;
        }
        for (g, &s) in row.gs.iter().enumerate() {
            p.gs[(tile * groups + g) * T + lane] = s;
        }
    }
    p
}

/// One task's 16 weight rows, widened: per block and group, 16 rows of 32 nibble values as bytes (`a`); per
/// block and row, its 8 group scales (`sc`, i32), its d (`d`) and its 8 min factors `-dmin * m` (`mins`).
struct Panel {
    a: Vec<u8>,
    sc: Vec<i32>,
    d: Vec<f32>,
    mins: Vec<f32>,
}

impl Panel {
    fn new(blocks: usize) -> Panel {
        Panel {
            a: vec![0; blocks * 8 * T * 32],
            sc: vec![0; blocks * 8 * T],
            d: vec![0.0; blocks * T],
            mins: vec![0.0; blocks * 8 * T],
        }
    }

    /// Rows `rows` of `w` (at most 16; the rest of the panel zeros).
    fn fill(&mut self, w: &[u8], row_bytes: usize, rows: std::ops::Range<usize>) {
        let blocks = row_bytes / BYTES;
        let live = rows.len();
        for lane in 0..T {
            for blk in 0..blocks {
                let at = |g: usize| ((blk * 8 + g) * T + lane) * 32;
                let scales = (blk * T + lane) * 8;
                if lane >= live {
                    for g in 0..8 {
                        self.a[at(g)..at(g) + 32].fill(0);
                    }
                    self.sc[scales..scales + 8].fill(0);
                    self.mins[scales..scales + 8].fill(0.0);
                    self.d[blk * T + lane] = 0.0;
                    continue;
                }
                let b = &w[(rows.start + lane) * row_bytes + blk * BYTES..][..BYTES];
                // Safety: `b` holds a whole block (the slice above), the panel this row's 8 scales and mins;
                // AVX2 and F16C are available (the caller's AVX-512 check).
                unsafe {
                    let (sc, mn) = k_scale_bytes(b.as_ptr().add(4));
                    self.d[blk * T + lane] = f16(b.as_ptr());
                    let bytes = |v: u64| _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64));
                    _mm256_storeu_si256(self.sc.as_mut_ptr().add(scales) as *mut __m256i, bytes(sc));
                    let mins = _mm256_mul_ps(_mm256_cvtepi32_ps(bytes(mn)), _mm256_set1_ps(-f16(b.as_ptr().add(2))));
                    _mm256_storeu_ps(self.mins.as_mut_ptr().add(scales), mins);
                }
                // Chunk c's 32 bytes: low nibbles are group 2c, high nibbles group 2c + 1.
                // Safety: AVX2 is available (the caller's AVX-512 check); `b` holds the block, `a` both groups.
                unsafe { widen(b.as_ptr().add(QS), self.a.as_mut_ptr(), at) };
            }
        }
    }
}

/// A block's 4 chunks of 32 bytes of nibbles into bytes: chunk c's low nibbles to `a + at(2c)`, its high ones
/// to `a + at(2c + 1)`.
#[target_feature(enable = "avx2")]
unsafe fn widen(qs: *const u8, a: *mut u8, at: impl Fn(usize) -> usize) {
    let m4 = _mm256_set1_epi8(0x0f);
    for c in 0..4 {
        let q = _mm256_loadu_si256(qs.add(32 * c) as *const __m256i);
        _mm256_storeu_si256(a.add(at(2 * c)) as *mut __m256i, _mm256_and_si256(q, m4));
        _mm256_storeu_si256(a.add(at(2 * c + 1)) as *mut __m256i, _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4));
    }
}

/// The tile configuration: tmm0 the 16 x 16 i32 sums, tmm1 the weights (16 rows of 32 bytes), tmm2 the
/// activations (8 rows of 64 bytes: 32 values of 16 rows); tmm3-5 the same again.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

const CONFIG: TileConfig = {
    let mut c = TileConfig { palette: 1, start_row: 0, reserved: [0; 14], colsb: [0; 16], rows: [0; 16] };
    c.colsb[0] = 64;
    c.rows[0] = 16;
    c.colsb[1] = 32;
    c.rows[1] = 16;
    c.colsb[2] = 64;
    c.rows[2] = 8;
    // tmm3-5: a second set, for the next group.
    c.colsb[3] = 64;
    c.rows[3] = 16;
    c.colsb[4] = 32;
    c.rows[4] = 16;
    c.colsb[5] = 64;
    c.rows[5] = 8;
    c
};

/// `out[i * n + j] = sum_k x[i, k] w[j, k]` for the m rows of `acts` (Q4_K's activations: blocks of 256) and
/// the n rows of `w` (Q4_K, `k / 256` blocks a row). Only called where [`available`]; k a multiple of 256.
pub(super) fn matmul_q4k(acts: &Q8Acts, m: usize, k: usize, w: &[u8], n: usize, out: &mut [f32]) {
    let row_bytes = k / 256 * BYTES;
    debug_assert!(available() && k % 256 == 0 && w.len() == n * row_bytes && out.len() == m * n);
    let packed = pack(acts, m, k);
    let tiles = n.div_ceil(T);
    let threads = rayon::current_num_threads().max(1);
    let span = tiles.div_ceil(threads * 2).max(1);
    let out = super::Out(out.as_mut_ptr());
    let (out, packed) = (&out, &packed);
    crate::cpu::spin_pool::for_each_task(tiles.div_ceil(span), &|t| {
        let mut panel = Panel::new(k / 256);
        // Safety: AMX is available (the caller checked); the configuration is this thread's, released below.
        unsafe { asm!("ldtilecfg [{0}]", in(reg) &CONFIG as *const TileConfig, options(nostack)) };
        for tile in t * span..((t + 1) * span).min(tiles) {
            let rows = tile * T..(tile * T + T).min(n);
            panel.fill(w, row_bytes, rows.clone());
            for mt in 0..m.div_ceil(T) {
                let mut sums = [0.0f32; T * T];
                // Safety: AMX and AVX-512 are available; the panel and the packed tile hold k values.
                unsafe { tile_product(&panel, packed, mt, k, &mut sums) };
                // Row by row of the output (its 16 columns of this tile side by side in memory).
                for i in mt * T..(mt * T + T).min(m) {
                    for (lane, r) in rows.clone().enumerate() {
                        // Safety: (i, r) < (m, n), written by this task alone (its tiles of rows).
                        unsafe { out.set(i * n + r, sums[lane * T + i - mt * T]) };
                    }
                }
            }
        }
        // Safety: the tiles were configured above.
        unsafe { asm!("tilerelease", options(nostack)) };
    });
}

/// The panel's 16 weight rows against activation tile `mt`: `sums[row * 16 + lane]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn tile_product(panel: &Panel, packed: &Packed, mt: usize, k: usize, sums: &mut [f32; T * T]) {
    let (blocks, groups) = (k / 256, k / 32);
    let b = packed.b.as_ptr().add(mt * k * T);
    #[repr(C, align(64))]
    struct Sums([i32; 2 * T * T]);
    let mut c = Sums([0; 2 * T * T]);
    let mut acc = [_mm512_setzero_ps(); T];
    for blk in 0..blocks {
        let mut iacc = [_mm512_setzero_si512(); T];
        // Two groups at a time in two sets of tiles (tmm0-2, tmm3-5): the second product runs while the
        // first one's sums are scaled.
        for pair in 0..4 {
            let g = 2 * pair;
            let a = panel.a.as_ptr().add((blk * 8 + g) * T * 32);
            let bg = b.add((blk * 64 + g * 8) * 64);
            asm!(
                "tilezero tmm0",
                "tilezero tmm3",
                "tileloadd tmm1, [{a} + {sa}]",
                "tileloadd tmm2, [{b} + {sb}]",
                "tdpbusd tmm0, tmm1, tmm2",
                "tileloadd tmm4, [{a2} + {sa}]",
                "tileloadd tmm5, [{b2} + {sb}]",
                "tdpbusd tmm3, tmm4, tmm5",
                "tilestored [{c} + {sc}], tmm0",
                "tilestored [{c2} + {sc}], tmm3",
                a = in(reg) a, a2 = in(reg) a.add(T * 32), sa = in(reg) 32usize,
                b = in(reg) bg, b2 = in(reg) bg.add(8 * 64), sb = in(reg) 64usize,
                c = in(reg) c.0.as_mut_ptr(), c2 = in(reg) c.0.as_mut_ptr().add(T * T), sc = in(reg) 64usize,
                options(nostack)
            );
            for h in 0..2 {
                let sc = panel.sc.as_ptr().add(blk * T * 8 + g + h);
                for (row, v) in iacc.iter_mut().enumerate() {
                    let s = _mm512_loadu_si512(c.0.as_ptr().add((h * T + row) * T) as *const _);
                    *v = _mm512_add_epi32(*v, _mm512_mullo_epi32(s, _mm512_set1_epi32(*sc.add(row * 8))));
                }
            }
        }
        let dx = _mm512_loadu_ps(packed.dx.as_ptr().add((mt * blocks + blk) * T));
        let gs: [__m512; 8] =
            std::array::from_fn(|g| _mm512_loadu_ps(packed.gs.as_ptr().add((mt * groups + blk * 8 + g) * T)));
        for (row, a) in acc.iter_mut().enumerate() {
            let scale = _mm512_mul_ps(dx, _mm512_set1_ps(*panel.d.get_unchecked(blk * T + row)));
            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[row]), scale, *a);
            for (g, gs) in gs.iter().enumerate() {
                *a = _mm512_fmadd_ps(_mm512_set1_ps(*panel.mins.get_unchecked((blk * T + row) * 8 + g)), *gs, *a);
            }
        }
    }
    for (row, a) in acc.iter().enumerate() {
        _mm512_storeu_ps(sums.as_mut_ptr().add(row * T), *a);
    }
}
