//! The schedule checker (issue 33) on a small persistent layer: two stages over four blocks in clusters of
//! two (each block a tile of the first stage's output, then each a tile of the second's from all of it), a
//! shared-memory hand-off inside a cluster, and a buffer reused by a third stage. The schedule as written
//! passes; each way of breaking it is refused with the edge named.

use fuse_ir::schedule::{Access, DeviceLimits, HandoffKind, Schedule, ScheduleError, Task};

const LIMITS: DeviceLimits = DeviceLimits { resident_blocks: 132, shared_bytes: 227 * 1024, max_cluster: 16 };
const TILE: usize = 256;

fn range(buffer: usize, tile: usize) -> Access {
    Access { buffer, start: tile * TILE, end: (tile + 1) * TILE }
}

/// Stage 1: block b writes tile b of y from x and signals `y ready`; stage 2: block b waits for all four,
/// reads y, writes tile b of z. With `reuse`, stage 3 writes y again (tile b on block b), after `y read`,
/// which each stage-2 task signals.
fn layer(reuse: bool) -> Schedule {
    let mut s = Schedule { blocks: 4, cluster: 2, shared_bytes: 64 * 1024, ..Schedule::default() };
    let (x, y, z) = (s.buffer("x", 4 * TILE), s.buffer("y", 4 * TILE), s.buffer("z", 4 * TILE));
    let ready = s.handoff("y ready", HandoffKind::Global);
    let read = s.handoff("y read", HandoffKind::Global);
    for b in 0..4 {
        s.task(Task {
            name: format!("stage1[{b}]"),
            block: b,
            signals: vec![(ready, 1)],
            reads: vec![Access { buffer: x, start: 0, end: 4 * TILE }],
            writes: vec![range(y, b)],
            ..Task::default()
        });
    }
    for b in 0..4 {
        s.task(Task {
            name: format!("stage2[{b}]"),
            block: b,
            waits: vec![(ready, 4)],
            signals: vec![(read, 1)],
            reads: vec![Access { buffer: y, start: 0, end: 4 * TILE }],
            writes: vec![range(z, b)],
            ..Task::default()
        });
    }
    if reuse {
        for b in 0..4 {
            s.task(Task {
                name: format!("stage3[{b}]"),
                block: b,
                waits: vec![(read, 4)],
                reads: vec![range(z, b)],
                writes: vec![range(y, b)],
                ..Task::default()
            });
        }
    }
    s
}

fn task_named<'a>(s: &'a mut Schedule, name: &str) -> &'a mut Task {
    s.tasks.iter_mut().find(|t| t.name == name).expect("a task of that name")
}

#[test]
fn a_sound_schedule_passes() {
    assert_eq!(layer(false).check(&LIMITS), Ok(()));
    assert_eq!(layer(true).check(&LIMITS), Ok(()), "y overwritten only once every reader is done");
}

#[test]
fn a_wait_nobody_can_meet_is_named() {
    let mut s = layer(false);
    task_named(&mut s, "stage2[1]").waits = vec![(0, 5)];
    let err = s.check(&LIMITS).unwrap_err();
    assert_eq!(err, ScheduleError::Unmet { task: "stage2[1]".into(), handoff: "y ready".into(), waits: 5, given: 4 });
    assert!(err
        .to_string()
        .contains("task `stage2[1]` waits for 5 of hand-off `y ready`, but all its signallers give 4"));
}

#[test]
fn a_block_waiting_for_its_own_later_signal_deadlocks() {
    let mut s = layer(false);
    // Block 2 runs its stage-2 task first: it waits for stage1[2], which comes after it on the same block.
    let i = s.tasks.iter().position(|t| t.name == "stage2[2]").unwrap();
    let t = s.tasks.remove(i);
    s.tasks.insert(0, t);
    let err = s.check(&LIMITS).unwrap_err();
    assert_eq!(
        err,
        ScheduleError::Deadlock { task: "stage2[2]".into(), handoff: "y ready".into(), waits: 4, given: 3 }
    );
}

#[test]
fn a_read_that_does_not_wait_for_its_writer_is_a_race() {
    let mut s = layer(false);
    // Waiting for 3 of the 4 tiles: no particular producer is waited for.
    task_named(&mut s, "stage2[0]").waits = vec![(0, 3)];
    let err = s.check(&LIMITS).unwrap_err();
    let ScheduleError::Race { first, second, buffer, second_writes, .. } = &err else { panic!("{err}") };
    assert!(first.starts_with("stage1[") && first != "stage1[0]", "{err}");
    assert_eq!((second.as_str(), buffer.as_str(), *second_writes), ("stage2[0]", "y", false));
}

#[test]
fn an_overwrite_before_every_reader_is_done_is_a_race() {
    let mut s = layer(true);
    // stage3[3] rewrites tile 3 of y once stage2[3] (its own block) has read it, not the other readers.
    task_named(&mut s, "stage3[3]").waits = vec![];
    let err = s.check(&LIMITS).unwrap_err();
    let ScheduleError::Race { first, second, buffer, start, end, .. } = &err else { panic!("{err}") };
    assert_eq!((first.as_str(), buffer.as_str(), *start, *end), ("stage3[3]", "y", 3 * TILE, 4 * TILE));
    assert!(second.starts_with("stage2[") && second != "stage2[3]", "{err}");
    assert!(err.to_string().contains("neither waits for the other"));
}

#[test]
fn what_does_not_fit_the_device_is_refused() {
    let mut s = layer(false);
    s.blocks = 200;
    assert!(matches!(s.check(&LIMITS), Err(ScheduleError::Fit(m)) if m.contains("holds 132 at once")));
    let mut s = layer(false);
    s.shared_bytes = 300 * 1024;
    assert!(matches!(s.check(&LIMITS), Err(ScheduleError::Fit(m)) if m.contains("shared memory")));
    let mut s = layer(false);
    s.cluster = 3;
    assert!(matches!(s.check(&LIMITS), Err(ScheduleError::Fit(m)) if m.contains("divide")));
    let mut s = layer(false);
    task_named(&mut s, "stage1[0]").writes = vec![Access { buffer: 1, start: 0, end: 5 * TILE }];
    assert!(matches!(s.check(&LIMITS), Err(ScheduleError::Malformed(m)) if m.contains("which holds 1024")));
}

#[test]
fn shared_memory_handoffs_stay_in_their_cluster() {
    // Block 1 hands its tile to block 0 through block 0's shared memory (an mbarrier of 256 bytes): both in
    // cluster 0. From block 2 (cluster 1) the same hand-off is refused.
    let mut s = layer(false);
    let handoff = s.handoff("tile to block 0", HandoffKind::Shared { owner: 0 });
    task_named(&mut s, "stage1[1]").signals.push((handoff, TILE as u64));
    task_named(&mut s, "stage2[0]").waits.push((handoff, TILE as u64));
    assert_eq!(s.check(&LIMITS), Ok(()));
    let mut far = s.clone();
    task_named(&mut far, "stage1[2]").signals.push((handoff, TILE as u64));
    let err = far.check(&LIMITS).unwrap_err();
    assert!(matches!(&err, ScheduleError::Placement(m) if m.contains("`stage1[2]` (block 2, cluster 1)")), "{err}");
    let mut waiter = s.clone();
    task_named(&mut waiter, "stage2[1]").waits.push((handoff, TILE as u64));
    assert!(matches!(waiter.check(&LIMITS), Err(ScheduleError::Placement(m)) if m.contains("only its owner")));
}

mod built {
    use super::LIMITS;
    use fuse_ir::schedule::{build, build_placed, HandoffKind, Placement, Reads, Stage, Step};

    /// Two Llama-shaped layers: norm + QKV (reads all of x), attention (a tile a head, all of qkv), the output
    /// projection + residual (all of attention's output, x's same tile), norm + gate/up, down + residual.
    fn two_layers(hidden: usize) -> Step {
        let mut step = Step::default();
        let value = |step: &mut Step, name: String, bytes: usize| {
            step.values.push((name, bytes));
            step.values.len() - 1
        };
        let mut x = value(&mut step, "x0".into(), hidden);
        step.given.push(x);
        for l in 0..2 {
            let qkv = value(&mut step, format!("qkv{l}"), 3 * hidden);
            let attn = value(&mut step, format!("attn{l}"), hidden);
            let h = value(&mut step, format!("h{l}"), hidden);
            let gu = value(&mut step, format!("gu{l}"), 4 * hidden);
            let next = value(&mut step, format!("x{}", l + 1), hidden);
            let stage = |name: &str, output, inputs: Vec<(usize, Reads)>, tiles| Stage {
                name: format!("{name}{l}"),
                output,
                inputs,
                tiles,
                weight_bytes: 0,
            };
            step.stages.extend([
                stage("qkv", qkv, vec![(x, Reads::Whole)], 6),
                stage("attention", attn, vec![(qkv, Reads::Whole)], 4),
                stage("o_proj", h, vec![(attn, Reads::Whole), (x, Reads::SameTile)], 4),
                stage("gate_up", gu, vec![(h, Reads::Whole)], 8),
                stage("down", next, vec![(gu, Reads::Whole), (h, Reads::SameTile)], 4),
            ]);
            x = next;
        }
        step
    }

    #[test]
    fn a_built_step_passes_the_checker_and_reuses_its_memory() {
        let step = two_layers(1024);
        for (blocks, cluster) in [(8, 2), (3, 1), (132, 4)] {
            let (schedule, layout) = build(&step, blocks, cluster, 64 * 1024);
            assert_eq!(schedule.check(&LIMITS), Ok(()), "{blocks} blocks");
            assert_eq!(schedule.tasks.len(), 2 * (6 + 4 + 4 + 8 + 4));
            let total: usize = step.values.iter().map(|v| v.1).sum();
            assert!(layout.arena_bytes < total, "layer 1 reuses layer 0's bytes: {} of {total}", layout.arena_bytes);
        }
    }

    #[test]
    fn the_built_waits_are_the_ones_that_keep_it_sound() {
        let step = two_layers(1024);
        let (schedule, _) = build(&step, 8, 2, 64 * 1024);
        // Without its waits, the first tile of layer 0's down projection reads gate/up values before they
        // are written.
        let mut broken = schedule.clone();
        let down = broken.tasks.iter_mut().find(|t| t.name == "down0[0]").unwrap();
        down.waits.clear();
        let err = broken.check(&LIMITS).unwrap_err().to_string();
        assert!(err.contains("race") && err.contains("down0[0]"), "{err}");
    }

    #[test]
    fn a_layer_a_cluster_hands_off_through_shared_memory_inside_it() {
        let step = two_layers(1024);
        let placement = Placement::LayerPerCluster { stages_per_layer: 5 };
        let (schedule, _) = build_placed(&step, 8, 4, 64 * 1024, placement);
        assert_eq!(schedule.check(&LIMITS), Ok(()));
        // Layer 0 on blocks 0..4, layer 1 on 4..8.
        for t in &schedule.tasks {
            let layer = if t.name.contains("1[") { 1 } else { 0 };
            assert_eq!(t.block / 4, layer, "{} on block {}", t.name, t.block);
        }
        // Inside a layer the waits are on the consumer's own mbarrier (bytes); layer 1 reads layer 0's output
        // (its input x1, and x1 again for the residual) through L2.
        let kind_of = |h: usize| schedule.handoffs[h].kind;
        let down1 = schedule.tasks.iter().find(|t| t.name == "down1[0]").unwrap();
        assert!(down1
            .waits
            .iter()
            .any(|&(h, bytes)| kind_of(h) == HandoffKind::Shared { owner: 4 } && bytes == 4 * 1024));
        let qkv1 = schedule.tasks.iter().find(|t| t.name == "qkv1[2]").unwrap();
        assert!(qkv1.waits.iter().all(|&(h, _)| kind_of(h) == HandoffKind::Global), "x1 comes from the other cluster");
        let shared = schedule.handoffs.iter().filter(|h| matches!(h.kind, HandoffKind::Shared { .. })).count();
        // A layer: attention's 4 tiles (qkv), o_proj's 4 (attention's output; x is given or from the other
        // cluster), gate/up's 8 (h), down's 4 twice (gate/up's output, and h for the residual).
        assert_eq!(shared, 2 * (4 + 4 + 8 + 2 * 4));
        // Waiting for one tile's bytes (512) fewer than the 8 producers store: no producer is needed for the
        // wait to be met, so each read of their bytes is unordered.
        let mut broken = schedule.clone();
        let down = broken.tasks.iter_mut().find(|t| t.name == "down1[0]").unwrap();
        for wait in down.waits.iter_mut().filter(|w| w.1 == 4 * 1024) {
            wait.1 -= 512;
        }
        let err = broken.check(&LIMITS).unwrap_err().to_string();
        assert!(err.contains("race") && err.contains("down1[0]") && err.contains("gate_up1["), "{err}");
    }

    #[test]
    fn an_output_in_reused_bytes_waits_for_every_reader_of_what_was_there() {
        // x -> a (stage A), a -> b (stage B), x -> c (stage C): c may take a's bytes once B has read them, and
        // nothing but that wait orders C after B.
        let values = ["x", "a", "b", "c"].iter().map(|n| (n.to_string(), 4096)).collect();
        let stage = |name: &str, output, input| Stage {
            name: name.into(),
            output,
            inputs: vec![(input, Reads::Whole)],
            tiles: 4,
            weight_bytes: 0,
        };
        let step = Step { values, given: vec![0], stages: vec![stage("A", 1, 0), stage("B", 2, 1), stage("C", 3, 0)] };
        let (schedule, layout) = build(&step, 4, 1, 0);
        assert_eq!(layout.offsets[3], layout.offsets[1], "c takes a's bytes");
        assert_eq!(schedule.check(&LIMITS), Ok(()));
        let mut broken = schedule.clone();
        for t in broken.tasks.iter_mut().filter(|t| t.name.starts_with("C[")) {
            t.waits.retain(|&(h, _)| schedule.handoffs[h].name != "a read");
        }
        let err = broken.check(&LIMITS).unwrap_err().to_string();
        assert!(err.contains("race") && err.contains("`C[") && err.contains("`B["), "{err}");
    }
}

mod from_a_plan {
    use super::LIMITS;
    use fuse_ir::graph::InputKind;
    use fuse_ir::infer::{infer_dtypes, infer_shapes};
    use fuse_ir::plan::Plan;
    use fuse_ir::schedule::{build, step_from_plan, Reads};
    use fuse_ir::{BinaryOp, DType, Graph, UnaryOp};

    /// `layers` Llama MLP blocks in a row, each `x + down(silu(gate(h)) * up(h))` with `h = rms_norm(x)`
    /// (checkpoint [out, in] weights read through `.t()`), at batch 1: x [1, hidden].
    fn mlp_stack(layers: usize, hidden: usize, inter: usize) -> (Graph, Vec<Vec<usize>>, Vec<Option<DType>>) {
        let mut g = Graph::new("mlp_stack");
        let mut x = g.input("x", InputKind::Tensor);
        let (mut shapes, mut dtypes) = (vec![vec![1, hidden]], vec![Some(DType::BF16)]);
        let eps = g.constant(1e-5);
        for l in 0..layers {
            let weight = |g: &mut Graph, name: &str| g.input(&format!("{name}{l}"), InputKind::Tensor);
            let (norm, gate, up, down) =
                (weight(&mut g, "norm"), weight(&mut g, "gate"), weight(&mut g, "up"), weight(&mut g, "down"));
            shapes.extend([vec![hidden], vec![inter, hidden], vec![inter, hidden], vec![hidden, inter]]);
            dtypes.extend([Some(DType::BF16); 4]);
            let h = g.rms_norm(x, norm, eps, "h");
            let (wg, wu, wd) =
                (g.transpose(gate, "gate.t()"), g.transpose(up, "up.t()"), g.transpose(down, "down.t()"));
            let (a, b) = (g.matmul(h, wg, "gate"), g.matmul(h, wu, "up"));
            let act = g.unary(UnaryOp::Silu, a, "silu");
            let m = g.binary(BinaryOp::Mul, act, b, "silu * up");
            let d = g.matmul(m, wd, "down");
            x = g.binary(BinaryOp::Add, x, d, "residual");
        }
        g.outputs = vec![x];
        let shapes = infer_shapes(&g, &shapes).expect("shapes");
        let dtypes = infer_dtypes(&g, &dtypes).expect("dtypes");
        (g, shapes, dtypes)
    }

    #[test]
    fn a_plans_groups_become_a_sound_schedule() {
        let (hidden, inter) = (576, 1536);
        let (g, shapes, dtypes) = mlp_stack(3, hidden, inter);
        let plan = Plan::fused(&g);
        // Each group cut into 16 tiles (one a block of a cluster of 16, say).
        let step = step_from_plan(&g, &plan, &shapes, &dtypes, |_, _| 16);
        assert_eq!(step.stages.len(), plan.groups.len());
        // The weights and x are given (13 arguments); each stage reads all of its input vector.
        assert_eq!(step.given.len(), 13);
        // The weights each stage reads: gate and up for the dual GEMMs, down for the others.
        let weights: usize = step.stages.iter().map(|s| s.weight_bytes).sum();
        assert_eq!(weights, 3 * 3 * hidden * inter * 2);
        assert!(step.stages.iter().all(|s| s.weight_bytes > 0), "every group here is a GEMM");
        assert!(step.stages.iter().all(|s| s.inputs.iter().all(|&(_, reads)| reads == Reads::Whole)));
        let (schedule, layout) = build(&step, 32, 16, 0);
        assert_eq!(schedule.check(&LIMITS), Ok(()));
        // The activations of three layers in about half their bytes: layers 1 and 2 reuse layer 0's (each
        // layer's residual input lives until its down projection, beside the next one's).
        let computed: usize =
            (0..step.values.len()).filter(|v| !step.given.contains(v)).map(|v| step.values[v].1).sum();
        assert!(layout.arena_bytes * 3 < computed * 2, "{} of {computed}", layout.arena_bytes);
    }
}

mod weights {
    use super::LIMITS;
    use fuse_ir::schedule::{build_placed, residency, Placement, Reads, Residency, Stage, Step};

    /// `layers` decoder layers of four GEMM stages (QKV, output projection, gate/up, down), each cut into 16
    /// tiles and reading the weights given (bytes a stage).
    fn layers(layers: usize, hidden: usize, weights: [usize; 4]) -> Step {
        let mut step = Step { values: vec![("x0".into(), hidden)], given: vec![0], ..Step::default() };
        let mut x = 0;
        for l in 0..layers {
            for (k, &weight_bytes) in weights.iter().enumerate() {
                step.values.push((format!("v{l}.{k}"), hidden));
                let output = step.values.len() - 1;
                let inputs = vec![(x, Reads::Whole)];
                step.stages.push(Stage { name: format!("s{l}.{k}"), output, inputs, tiles: 16, weight_bytes });
                x = output;
            }
        }
        step
    }

    /// Bytes of a [rows, cols] weight at `per_weight` bytes a weight (Q4_1: 0.5625; bf16: 2).
    fn bytes(rows: usize, cols: usize, per_weight: f64) -> usize {
        (rows as f64 * cols as f64 * per_weight) as usize
    }

    fn decide(step: &Step, clusters: usize, other: usize) -> Option<(Residency, usize)> {
        let placement = Placement::LayerPerCluster { stages_per_layer: 4 };
        let (schedule, _) = build_placed(step, clusters * 16, 16, other, placement);
        assert_eq!(schedule.check(&LIMITS), Ok(()));
        residency(&schedule, &LIMITS, other, |task| task / (4 * 16))
    }

    #[test]
    fn the_weights_live_where_the_shapes_and_the_device_allow() {
        // SmolLM2-135M's layers in Q4_1 (~2 MB each) on 7 clusters of 16: a block's share of a layer (~122
        // KB) fits beside 40 KB of activations, its 5 layers do not: one layer at a time, as the hand-written
        // step holds them.
        let (h, i) = (576, 1536);
        let q4 = [bytes(960, h, 0.5625), bytes(h, h, 0.5625), bytes(2 * i, h, 0.5625), bytes(h, i, 0.5625)];
        let (decision, shared) = decide(&layers(30, h, q4), 7, 40 * 1024).expect("fits");
        let share: usize = q4.iter().map(|w| w / 16).sum();
        assert_eq!(decision, Residency::OnePhase { bytes: share });
        assert_eq!(shared, 40 * 1024 + share);
        // Two layers of a tiny model: all resident.
        let tiny = [bytes(96, 64, 2.0), bytes(64, 64, 2.0), bytes(256, 64, 2.0), bytes(64, 128, 2.0)];
        assert_eq!(decide(&layers(2, 64, tiny), 2, 40 * 1024).map(|d| d.0), Some(Residency::AllResident));
        // Llama-3-8B's layers in bf16 (~436 MB each): streamed through a ring filling what is left.
        let (h, i) = (4096, 14336);
        let bf16 = [bytes(6144, h, 2.0), bytes(h, h, 2.0), bytes(2 * i, h, 2.0), bytes(h, i, 2.0)];
        let (decision, shared) = decide(&layers(2, h, bf16), 2, 40 * 1024).expect("a ring fits");
        assert_eq!(decision, Residency::Streamed { chunk_bytes: (227 - 40) * 1024 / 4 / 16 * 16 });
        assert!(shared <= LIMITS.shared_bytes);
        // No room at all beside the rest: refused.
        assert_eq!(decide(&layers(2, h, bf16), 2, 226 * 1024), None);
    }
}
