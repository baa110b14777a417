//! Running a row program: rows (or, for few long rows, column ranges) are split between threads; each
//! thread walks its rows in cache-sized column tiles, evaluating the program into its own row buffers.

use super::kernels::{self, Lane, Sink};
use super::rowprog::{Instr, Operand, RowProgram, Source};
use crate::element::round_to;
use crate::host::{CpuRead, CpuSlice};
use crate::layout::row_offset;
use std::ops::Range;

/// Columns per tile when a row need not be seen whole: a few live buffers of this many f32 stay in L1/L2.
const TILE: usize = 1024;
/// Below this many elements a group runs on the calling thread: spawning would cost more than it saves.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// Dense f32 buffers standing for the program's `Source::Block`s, holding rows from `first_row` on.
pub(crate) struct BlockInputs<'a> {
    pub first_row: usize,
    pub buffers: &'a [&'a [f32]],
}

struct Task {
    rows: Range<usize>,
    cols: Range<usize>,
}

/// Per-thread state: row buffers and where each source's current row starts.
struct Scratch {
    regs: Vec<Vec<f32>>,
    base: Vec<usize>,
}

impl RowProgram {
    /// Runs `rows` of the domain. `sinks[i]` holds exactly those rows of output `i`
    /// (`rows.len() * sink_width(i)` elements). With `parallel`, work is spread over the rayon pool.
    pub(crate) fn run(&self, rows: Range<usize>, mut sinks: Vec<Sink<'_>>, blocks: &BlockInputs<'_>, parallel: bool) {
        if rows.is_empty() {
            return;
        }
        let tasks = self.split(rows.clone(), parallel);
        // Every tensor source read-locked for the run (an in-place write waits for it to end).
        let guards: Vec<Option<CpuRead<'_>>> = self
            .sources
            .iter()
            .map(|s| match s {
                Source::Tensor { tensor, .. } => Some(tensor.cpu_storage().read()),
                Source::Block(_) => None,
            })
            .collect();
        let data: Vec<CpuSlice<'_>> = self
            .sources
            .iter()
            .zip(&guards)
            .map(|(s, guard)| match (s, guard) {
                (_, Some(guard)) => guard.slice(),
                (Source::Block(k), None) => CpuSlice::F32(blocks.buffers[*k]),
                (Source::Tensor { .. }, None) => unreachable!("every tensor source has its guard"),
            })
            .collect();
        debug_assert!(sinks.iter().enumerate().all(|(i, s)| s.len() == rows.len() * self.sink_width(i)));
        if let [task] = tasks.as_slice() {
            // One task (every decode-sized group): the sinks are its own.
            return self.run_task(task, &mut sinks, &data, blocks);
        }
        let mut work: Vec<(Task, Vec<Sink<'_>>)> = Vec::with_capacity(tasks.len());
        for task in tasks {
            let mine = sinks
                .iter_mut()
                .enumerate()
                .map(|(i, s)| {
                    let per_row = if self.sink_wide[i] { task.cols.len() } else { 1 };
                    s.take_front(task.rows.len() * per_row)
                })
                .collect();
            work.push((task, mine));
        }
        super::spin_pool::for_each_item(work, &|_, (task, mut sinks)| self.run_task(&task, &mut sinks, &data, blocks));
    }

    /// Cuts the rows into tasks: chunks of rows, or column ranges of each row when rows are too few to
    /// keep every thread busy and the program allows it.
    fn split(&self, rows: Range<usize>, parallel: bool) -> Vec<Task> {
        let threads = rayon::current_num_threads();
        let elements = rows.len().saturating_mul(self.n.max(1));
        let whole = |rows: Range<usize>| Task { rows, cols: 0..self.n };
        if !parallel || threads <= 1 || elements < PARALLEL_MIN_ELEMENTS {
            return vec![whole(rows)];
        }
        let wanted = threads * 4;
        if rows.len() < wanted && self.columns_split() && self.n >= 2 * TILE {
            let pieces = wanted.div_ceil(rows.len());
            let chunk = self.n.div_ceil(pieces).next_multiple_of(64);
            let mut tasks = Vec::new();
            for r in rows {
                let mut c = 0;
                while c < self.n {
                    let end = (c + chunk).min(self.n);
                    tasks.push(Task { rows: r..r + 1, cols: c..end });
                    c = end;
                }
            }
            return tasks;
        }
        let chunk = rows.len().div_ceil(wanted).max(1);
        let mut tasks = Vec::new();
        let mut r = rows.start;
        while r < rows.end {
            let end = (r + chunk).min(rows.end);
            tasks.push(whole(r..end));
            r = end;
        }
        tasks
    }

    fn run_task(&self, task: &Task, sinks: &mut [Sink<'_>], data: &[CpuSlice<'_>], blocks: &BlockInputs<'_>) {
        let width = task.cols.len();
        // A reduction needs the whole row in one buffer; otherwise tile the row.
        let tile = if self.has_reduce { width } else { width.min(TILE) }.max(1);
        let mut scratch = Scratch { regs: vec![vec![0.0; tile]; self.slots], base: vec![0; self.sources.len()] };
        for r in task.rows.clone() {
            for (base, source) in scratch.base.iter_mut().zip(&self.sources) {
                *base = match source {
                    Source::Tensor { tensor, prefix_strides, .. } => {
                        tensor.offset() + row_offset(r, &self.prefix_dims, prefix_strides)
                    }
                    Source::Block(_) => (r - blocks.first_row) * self.n,
                };
            }
            let local_row = r - task.rows.start;
            let mut c = task.cols.start;
            loop {
                let len = tile.min(task.cols.end - c);
                let at = Position { row: local_row, col: c, col_in_task: c - task.cols.start, width, len };
                self.run_tile(&at, &mut scratch, sinks, data);
                c += len;
                if c >= task.cols.end {
                    break;
                }
            }
        }
    }

    fn run_tile(&self, at: &Position, scratch: &mut Scratch, sinks: &mut [Sink<'_>], data: &[CpuSlice<'_>]) {
        let regs = &mut scratch.regs;
        let span = |wide: bool| if wide { at.len } else { 1 };
        for instr in &self.instrs {
            match *instr {
                Instr::Load { source, dst } => {
                    let stride = match &self.sources[source] {
                        Source::Tensor { last_stride, .. } => *last_stride,
                        Source::Block(_) => 1,
                    };
                    let (start, stride) = if dst.wide {
                        (scratch.base[source] + at.col * stride, stride)
                    } else {
                        (scratch.base[source], 0)
                    };
                    data[source].read_f32(start, stride, &mut regs[dst.slot][..span(dst.wide)]);
                }
                Instr::Unary { op, src, dst } => {
                    let mut out = std::mem::take(&mut regs[dst.slot]);
                    let n = span(src.wide);
                    kernels::unary(op, &regs[src.slot][..n], &mut out[..n]);
                    regs[dst.slot] = out;
                }
                Instr::Binary { op, lhs, rhs, dst } => {
                    let mut out = std::mem::take(&mut regs[dst.slot]);
                    let n = span(dst.wide);
                    kernels::binary(op, lane(regs, lhs, n), lane(regs, rhs, n), &mut out[..n]);
                    regs[dst.slot] = out;
                }
                Instr::Select { cond, on_true, on_false, dst } => {
                    let mut out = std::mem::take(&mut regs[dst.slot]);
                    let n = span(dst.wide);
                    let lanes = [cond, on_true, on_false].map(|o| lane(regs, o, n));
                    kernels::select(lanes, &mut out[..n]);
                    regs[dst.slot] = out;
                }
                Instr::Reduce { op, src, dst } => {
                    let v = kernels::reduce(op, &regs[src.slot][..at.len]);
                    regs[dst.slot][0] = v;
                }
                Instr::Round { dtype, src, dst } => {
                    let mut out = std::mem::take(&mut regs[dst.slot]);
                    let n = span(src.wide);
                    for (o, &x) in out[..n].iter_mut().zip(&regs[src.slot][..n]) {
                        *o = round_to(dtype, x);
                    }
                    regs[dst.slot] = out;
                }
                Instr::Store { sink, src } => {
                    let sink_ref = &mut sinks[sink];
                    if self.sink_wide[sink] {
                        let offset = at.row * at.width + at.col_in_task;
                        match src {
                            Operand::Reg(r) if r.wide => sink_ref.write(offset, &regs[r.slot][..at.len]),
                            Operand::Reg(r) => sink_ref.fill(offset, at.len, regs[r.slot][0]),
                            Operand::Lit(v) => sink_ref.fill(offset, at.len, v),
                        }
                    } else if at.col_in_task == 0 {
                        // One value per row: written with the row's first tile only.
                        let v = match src {
                            Operand::Reg(r) => regs[r.slot][0],
                            Operand::Lit(v) => v,
                        };
                        sink_ref.fill(at.row, 1, v);
                    }
                }
            }
        }
    }
}

/// Where a tile lies: its row within the task, its first column in the domain and within the task's
/// columns, the task's row width and the tile's length.
struct Position {
    row: usize,
    col: usize,
    col_in_task: usize,
    width: usize,
    len: usize,
}

#[inline]
fn lane(regs: &[Vec<f32>], operand: Operand, n: usize) -> Lane<'_> {
    match operand {
        Operand::Reg(r) if r.wide => Lane::Row(&regs[r.slot][..n]),
        Operand::Reg(r) => Lane::Splat(regs[r.slot][0]),
        Operand::Lit(v) => Lane::Splat(v),
    }
}
