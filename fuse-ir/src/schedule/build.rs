//! From a step's stages to a [`Schedule`] and the memory it runs in, from one description (issue 33, point
//! 2, first slice): each stage's output cut into equal tiles, a task a tile, placed round the blocks; a
//! task waits for exactly the producer tiles its reads overlap (one L2 counter a producer tile, or one for a
//! whole stage when it reads all of it); the values live in one arena, a value's bytes reused once its
//! last reader is done, and the first writes into reused bytes wait for every reader of what was there.
//! The accesses in the schedule are the arena's offsets, so the checker sees the layout the kernel would.
//! [`Placement::LayerPerCluster`] puts each layer on one cluster, its hand-offs through the consumers'
//! shared memory; each task carries its share of its stage's weights, which `residency.rs` places.

use super::{Access, HandoffKind, Schedule, Task};

/// How a stage reads one of its inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// All of it, whichever tile (a GEMV's input vector, a norm's row).
    Whole,
    /// The tile of the same index, the input cut as the output is (pointwise work, a residual).
    SameTile,
}

/// A group's work in the step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    pub name: String,
    /// The value it writes (an index into [`Step::values`]).
    pub output: usize,
    pub inputs: Vec<(usize, Reads)>,
    /// Equal tiles its output is cut into (each a task).
    pub tiles: usize,
    /// Bytes of weights it reads (a matmul's right operands), each tile an equal share.
    pub weight_bytes: usize,
}

/// A step: its values (name, bytes), those given before it starts (the step's inputs), and the stages in an
/// order where each reads only what is given or written before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    pub values: Vec<(String, usize)>,
    pub given: Vec<usize>,
    pub stages: Vec<Stage>,
}

/// Where each value lies in the one arena of the step's activations, in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub offsets: Vec<usize>,
    pub arena_bytes: usize,
}

/// The first stage that writes each value, and the last that reads it (`None`: given, or never read).
fn lifetimes(step: &Step) -> Vec<(Option<usize>, Option<usize>)> {
    let mut life = vec![(None, None); step.values.len()];
    for (s, stage) in step.stages.iter().enumerate() {
        life[stage.output].0.get_or_insert(s);
        for &(v, _) in &stage.inputs {
            life[v].1 = Some(s);
        }
    }
    life
}

/// Offsets in the arena of the values the step computes (a value given to it lies in a buffer of its own, at
/// 0): each takes the lowest bytes free from its first writer to its last reader (first fit, in stage
/// order).
pub fn layout(step: &Step) -> Layout {
    layout_for(step, &lifetimes(step))
}

/// [`layout`] given the values' [`lifetimes`].
fn layout_for(step: &Step, life: &[(Option<usize>, Option<usize>)]) -> Layout {
    let span = |v: usize| -> (usize, usize) {
        let first = life[v].0.unwrap_or(0);
        (first, life[v].1.unwrap_or(first).max(first))
    };
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new(); // offset, end, first, last
    let mut offsets = vec![0; step.values.len()];
    let mut order: Vec<usize> = (0..step.values.len()).filter(|v| !step.given.contains(v)).collect();
    order.sort_by_key(|&v| (span(v).0, v));
    for v in order {
        let (first, last) = span(v);
        let bytes = step.values[v].1;
        let mut busy: Vec<(usize, usize)> =
            placed.iter().filter(|p| p.2 <= last && first <= p.3).map(|p| (p.0, p.1)).collect();
        busy.sort_unstable();
        let mut offset = 0;
        for (start, end) in busy {
            if offset + bytes <= start {
                break;
            }
            offset = offset.max(end);
        }
        offsets[v] = offset;
        placed.push((offset, offset + bytes, first, last));
    }
    let arena_bytes = placed.iter().map(|p| p.1).max().unwrap_or(0);
    Layout { offsets, arena_bytes }
}

/// Tile `t` of `tiles` of a value at `offset` of `bytes`: its byte range in the arena.
fn tile_range(offset: usize, bytes: usize, tiles: usize, t: usize) -> (usize, usize) {
    (offset + bytes * t / tiles, offset + bytes * (t + 1) / tiles)
}

/// Where a stage's tiles run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Stage s's tile t on block (first_s + t) % blocks, first_s where stage s - 1's tiles ended: the tiles
    /// of consecutive stages spread over every block; hand-offs through L2.
    RoundRobin,
    /// Each run of `stages_per_layer` stages (a layer) on one cluster, layer l on cluster l % clusters, tile
    /// t on its block t % cluster (the hand-written step's shape): a hand-off whose producer tiles all ran in
    /// the consumer's cluster goes through the consumer block's shared memory (an mbarrier counting the
    /// bytes), the others through L2.
    LayerPerCluster { stages_per_layer: usize },
}

/// [`build_placed`] with [`Placement::RoundRobin`].
pub fn build(step: &Step, blocks: usize, cluster: usize, shared_bytes: usize) -> (Schedule, Layout) {
    build_placed(step, blocks, cluster, shared_bytes, Placement::RoundRobin)
}

/// The schedule of `step` on `blocks` blocks (clusters of `cluster`, `shared_bytes` each), its tiles placed
/// by `placement`, and its layout; a block runs its tasks in stage order.
pub fn build_placed(
    step: &Step,
    blocks: usize,
    cluster: usize,
    shared_bytes: usize,
    placement: Placement,
) -> (Schedule, Layout) {
    let life = lifetimes(step);
    let layout = layout_for(step, &life);
    let mut s = Schedule { blocks, cluster, shared_bytes, ..Schedule::default() };
    let arena = s.buffer("arena", layout.arena_bytes);
    // The buffer of each value: its own for one given to the step, else the arena.
    let buffer_of: Vec<usize> = (0..step.values.len())
        .map(|v| if step.given.contains(&v) { s.buffer(&step.values[v].0, step.values[v].1) } else { arena })
        .collect();
    // A value's tile `t` of `tiles`: its byte range in its buffer.
    let range = |v: usize, tiles: usize, t: usize| tile_range(layout.offsets[v], step.values[v].1, tiles, t);
    // Per value: its writer's tile hand-offs, and the hand-off its readers signal when done.
    let mut tile_ready: Vec<Vec<usize>> = vec![Vec::new(); step.values.len()];
    // Per value: the task that wrote each of its tiles.
    let mut tile_task: Vec<Vec<usize>> = vec![Vec::new(); step.values.len()];
    let cluster_of = |block: usize| block / cluster.max(1);
    let mut readers_done: Vec<Option<(usize, u64)>> = vec![None; step.values.len()];
    let mut first_block = 0;
    for (index, stage) in step.stages.iter().enumerate() {
        let out = stage.output;
        tile_ready[out] = (0..stage.tiles)
            .map(|t| s.handoff(&format!("{} tile {t} ready", stage.name), HandoffKind::Global))
            .collect();
        // The values whose bytes this output reuses (their last use before this stage): every reader of each
        // must be done first, or its writers where nothing read it.
        let (out_start, out_end) = range(out, 1, 0);
        let mut reused: Vec<(usize, u64)> = Vec::new();
        for (v, &(first, last)) in life.iter().enumerate() {
            let (v_start, v_end) = range(v, 1, 0);
            let dead = first.is_some_and(|f| last.unwrap_or(f) < index);
            if v != out && dead && buffer_of[v] == arena && v_start < out_end && out_start < v_end {
                match readers_done[v] {
                    Some(done) => reused.push(done),
                    None => reused.extend(tile_ready[v].iter().map(|&h| (h, 1))),
                }
            }
        }
        let first_task = s.tasks.len();
        for t in 0..stage.tiles {
            let block = match placement {
                Placement::RoundRobin => (first_block + t) % blocks,
                Placement::LayerPerCluster { stages_per_layer } => {
                    let clusters = (blocks / cluster.max(1)).max(1);
                    (index / stages_per_layer.max(1)) % clusters * cluster + t % cluster.max(1)
                }
            };
            let name = format!("{}[{t}]", stage.name);
            let weight_bytes = stage.weight_bytes / stage.tiles.max(1);
            let mut task = Task { name: name.clone(), block, weight_bytes, ..Task::default() };
            for &(v, reads) in &stage.inputs {
                let (start, end) = match reads {
                    Reads::Whole => range(v, 1, 0),
                    Reads::SameTile => range(v, stage.tiles, t),
                };
                task.reads.push(Access { buffer: buffer_of[v], start, end });
                // The producer tiles these bytes overlap (none for a value given to the step), and how many
                // of their bytes.
                let tiles = tile_ready[v].len();
                let overlap: Vec<(usize, u64)> = (0..tiles)
                    .filter_map(|p| {
                        let (p_start, p_end) = range(v, tiles, p);
                        (p_start < end && start < p_end).then(|| (p, (p_end.min(end) - p_start.max(start)) as u64))
                    })
                    .collect();
                let near = |&(p, _): &(usize, u64)| cluster_of(s.tasks[tile_task[v][p]].block) == cluster_of(block);
                let through_shared =
                    placement != Placement::RoundRobin && !overlap.is_empty() && overlap.iter().all(near);
                if through_shared {
                    // The producers store into this block's shared memory; its mbarrier counts their bytes.
                    let kind = HandoffKind::Shared { owner: block };
                    let handoff = s.handoff(&format!("{} to {name}", step.values[v].0), kind);
                    for &(p, bytes) in &overlap {
                        let producer = tile_task[v][p];
                        s.tasks[producer].signals.push((handoff, bytes));
                    }
                    task.waits.push((handoff, overlap.iter().map(|&(_, bytes)| bytes).sum()));
                } else {
                    task.waits.extend(overlap.iter().map(|&(p, _)| (tile_ready[v][p], 1)));
                }
            }
            let (start, end) = range(out, stage.tiles, t);
            task.writes.push(Access { buffer: buffer_of[out], start, end });
            task.waits.extend(reused.iter().copied());
            task.signals.push((tile_ready[out][t], 1));
            s.task(task);
        }
        tile_task[out] = (first_task..s.tasks.len()).collect();
        first_block = (first_block + stage.tiles) % blocks;
        // Each task of this stage signals, for each value it reads, that it is done with it.
        let readers = stage.tiles as u64;
        for &(v, _) in &stage.inputs {
            let handoff = match readers_done[v] {
                Some((h, count)) => {
                    readers_done[v] = Some((h, count + readers));
                    h
                }
                None => {
                    let h = s.handoff(&format!("{} read", step.values[v].0), HandoffKind::Global);
                    readers_done[v] = Some((h, readers));
                    h
                }
            };
            let tasks = s.tasks.len();
            for task in &mut s.tasks[tasks - stage.tiles..] {
                task.signals.push((handoff, 1));
            }
        }
    }
    (s, layout)
}
