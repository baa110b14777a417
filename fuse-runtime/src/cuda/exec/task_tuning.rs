//! The template a matmul group takes as the tasks of a one-launch step (`one_launch/`), and how that is
//! measured. A step runs a launch's blocks as tasks on its persistent blocks, one a multiprocessor, in
//! rounds where the grid is larger: a config tuned as a launch (several blocks a multiprocessor, each hiding
//! another's latency) can be twice as slow so (the down projection's 256 blocks of 8 columns on 132
//! multiprocessors: two rounds at ~0.8 TB/s, H100, 2026-12-07). So while the graph path tunes a group at
//! decode rows, the templates that can be tasks are timed again as they would run there: in their task forms
//! (X's own ring, the streaming body's one block a multiprocessor), with enough dynamic shared memory that
//! no second block fits beside one, charged [`TASK_ROUND_US`] for each round past the first (a task's set-up
//! and arguments), and left out past the rounds a step takes as tasks. Those that sum every output as the
//! graph path's kernel does (`QuantSkinnyConfig::sums_like`: the step then computes the graph's bits) win
//! where any fits, the others only where none does. The winner is kept under the group's task key
//! (`TuneKey::for_tasks`), which a recording reads before the graph path's. Only with
//! `FUSE_TUNE_TASKS=on` (`env::tune_tasks`: off by default, see there).

use super::gemm_path::GemmPath;
use super::kernels::PreparedKernel;
use super::Executor;
use crate::cuda::driver::lock;
use crate::cuda::gemm::skinny::CONFIGS;
use crate::tune::{self, AutotuneMode, TuneKey};
use crate::Result;
use fuse_ir::codegen::{MMA_CONFIGS, QUANT_SKINNY_CONFIGS as QUANT_CONFIGS};
use fuse_ir::GroupKind;

/// Rows up to which a group is also timed as tasks: the decode batches a one-launch step serves.
const TASK_TUNE_MAX_ROWS: usize = 16;
/// Rows past which the mma template is a task candidate (its tiles are 64 rows; below that the skinny
/// templates' columns a block are the better split, as the graph path's fast mode has it).
const TASK_MMA_MIN_ROWS: usize = 9;
/// Microseconds charged for each round of tasks a step block runs past its first: each task's set-up, its
/// arguments copied into shared memory and its counter's signal, which a launch's blocks do not pay.
const TASK_ROUND_US: f64 = 1.0;

/// The index of the candidate with the least time plus [`TASK_ROUND_US`] for each round past the first,
/// among those of at most `most_rounds`: of those that sum `alike` the first candidate (the graph path's
/// kernel, so that the step computes the graph's bits) where any fits, else of all (`None` where none ran
/// or all take more rounds).
fn fastest_as_tasks(
    timed: &[(GemmPath, Option<f64>)],
    rounds: &[usize],
    alike: &[bool],
    most_rounds: usize,
) -> Option<usize> {
    let cost = |i: usize| {
        let t = timed[i].1.filter(|_| (1..=most_rounds).contains(&rounds[i]))?;
        Some(t + TASK_ROUND_US * (rounds[i] - 1) as f64)
    };
    let best = |among: &dyn Fn(usize) -> bool| {
        let costs = (0..timed.len()).filter(|&i| among(i)).filter_map(|i| cost(i).map(|c| (i, c)));
        costs.min_by(|a, b| a.1.total_cmp(&b.1)).map(|(i, _)| i)
    };
    best(&|i| alike[i]).or_else(|| best(&|_| true))
}

/// Whether `path` sums every output as `baseline` does (the same bits): the same template, or quantized
/// configs that `sums_like` each other.
fn sums_alike(path: &GemmPath, baseline: &GemmPath) -> bool {
    match (path, baseline) {
        (GemmPath::QuantSkinny(a), GemmPath::QuantSkinny(b)) => a.sums_like(b),
        _ => path == baseline,
    }
}

impl Executor<'_> {
    /// While a step is recorded for one launch (its kernels become tasks, which a library call cannot be): a
    /// template for the group where one runs: the one timed as tasks (with task tuning on), else the graph path's tuned template
    /// where it can be a task, else the fixed rule's. `None`: the library, and the step stays a graph (its
    /// report says why).
    pub(super) fn task_path(&self, index: usize, specs: &[PreparedKernel]) -> Option<GemmPath> {
        let key = self.tune_key(index, specs).ok().map(|(_, key)| key);
        // (A results file may hold task keys from a run with task tuning on: read only while it is on.)
        let as_tasks = key
            .as_ref()
            .filter(|_| crate::env::tune_tasks())
            .and_then(|k| lock(tune::table()).lookup(&k.for_tasks()).and_then(GemmPath::parse));
        if let Some(path) = as_tasks.filter(|p| can_be_task(p) && self.path_runs(index, specs, p).is_ok()) {
            return Some(path);
        }
        // The graph path's tuned template: its own kernel, so the step computes what it does.
        let tuned = key.and_then(|k| lock(tune::table()).lookup(&k).and_then(GemmPath::parse));
        if let Some(path) = tuned.filter(|p| can_be_task(p) && self.path_runs(index, specs, p).is_ok()) {
            return Some(path);
        }
        self.task_rule(index, specs)
    }

    /// The fixed rule's template for a task: the quantized rules, a skinny config meant for the group's rows
    /// (no split K), else an mma config.
    fn task_rule(&self, index: usize, specs: &[PreparedKernel]) -> Option<GemmPath> {
        if self.quantized_weights(index) {
            let quant = self.quantized_rule(index, specs).map(GemmPath::QuantSkinny);
            return quant.or_else(|| self.quantized_mma_rule(index, specs));
        }
        let rows = self.rows(index);
        let meant = |c: &&crate::cuda::gemm::skinny::SkinnyConfig| {
            c.fast_rows.0 <= rows && rows <= c.fast_rows.1 && c.splits == 1
        };
        let skinny = CONFIGS.iter().filter(meant).map(GemmPath::Skinny);
        skinny.chain(MMA_CONFIGS.iter().map(GemmPath::Mma)).find(|p| self.path_runs(index, specs, p).is_ok())
    }

    /// Times the group as tasks (`tune_as_tasks`) where that is due (`task_tuning_due`) and its left operand
    /// has a value (timing runs the group); `Ok(false)` where it is due but the operand has none yet (a
    /// deferred prologue's output).
    pub(super) fn tune_tasks_where_due(
        &mut self,
        index: usize,
        specs: &[PreparedKernel],
        rows: usize,
        key: &TuneKey,
    ) -> Result<bool> {
        if !self.task_tuning_due(rows, key) {
            return Ok(true);
        }
        if self.values[self.left_operand(index).index()].is_none() {
            return Ok(false);
        }
        self.tune_as_tasks(index, specs, key)?;
        Ok(true)
    }

    /// Whether the group is still to be timed as tasks under `key` (its graph path's key): decode rows, tuning
    /// on and nothing captured or recorded meanwhile, no path forced, and no result under its task key yet.
    fn task_tuning_due(&self, rows: usize, key: &TuneKey) -> bool {
        let device = self.device;
        crate::env::tune_tasks()
            && rows <= TASK_TUNE_MAX_ROWS
            && tune::mode() != AutotuneMode::Off
            && !device.is_capturing()
            && !device.recorder().is_on()
            && tune::forced_choice().is_none()
            && lock(tune::table()).lookup(&key.for_tasks()).is_none()
    }

    /// Times the group's templates that can be tasks as a step would run them and keeps the fastest under
    /// the task key (see the module doc). Needs the left operand's value (timing runs the group).
    fn tune_as_tasks(&mut self, index: usize, specs: &[PreparedKernel], key: &TuneKey) -> Result<()> {
        let candidates = self.task_candidates(index, specs);
        if candidates.is_empty() {
            return Ok(());
        }
        let shared = self.device.queueing_threads() > 1;
        self.as_tasks = true;
        let timed = self.measure(index, specs, &candidates, key, AutotuneMode::Fast);
        let resident = self.device.sm_count().max(1);
        let rounds: Vec<usize> =
            candidates.iter().map(|p| self.task_grid(index, specs, p).map_or(0, |g| g.div_ceil(resident))).collect();
        self.as_tasks = false;
        let timed = timed?;
        let shared = shared || self.device.queueing_threads() > 1;
        let most = super::super::one_launch::ONE_LAUNCH_MAX_WAVES;
        let alike: Vec<bool> = candidates.iter().map(|p| sums_alike(p, &candidates[0])).collect();
        let Some(best) = fastest_as_tasks(&timed, &rounds, &alike, most) else { return Ok(()) };
        let (path, micros) = (timed[best].0.name(), timed[best].1.unwrap_or(f64::NAN));
        let mut table = lock(tune::table());
        match shared {
            true => table.record_unsaved(key.for_tasks(), &path, micros),
            false => table.record(key.for_tasks(), &path, micros),
        }
        drop(table);
        if crate::env::debug_level() >= 3 {
            let list: Vec<String> = timed
                .iter()
                .zip(&rounds)
                .map(|((p, t), r)| match t {
                    Some(t) => format!("{} {t:.1} us in {r} rounds", p.name()),
                    None => format!("{} failed", p.name()),
                })
                .collect();
            eprintln!("fuse: {}: as tasks, path {path} (tuned: {})", self.function, list.join(", "));
        }
        Ok(())
    }

    /// The templates worth timing as tasks: first the one a recording would take without this timing (the
    /// reference the others must agree with), then each config that can be a task and is meant for at most
    /// the group's rows (more row blocks of a config for fewer rows are more tasks, which the rounds charge).
    fn task_candidates(&self, index: usize, specs: &[PreparedKernel]) -> Vec<GemmPath> {
        let rows = self.rows(index);
        let mut out: Vec<GemmPath> = self.task_path(index, specs).into_iter().collect();
        let mma = (rows >= TASK_MMA_MIN_ROWS && self.mma_keeps_precision(index))
            .then(|| MMA_CONFIGS.iter().map(GemmPath::Mma))
            .into_iter()
            .flatten();
        let templates: Vec<GemmPath> = match self.quantized_weights(index) {
            true => QUANT_CONFIGS.iter().filter(|c| c.fast_rows.0 <= rows).map(GemmPath::QuantSkinny).collect(),
            false => CONFIGS.iter().filter(|c| c.fast_rows.0 <= rows).map(GemmPath::Skinny).collect(),
        };
        for path in templates.into_iter().chain(mma) {
            if can_be_task(&path) && !out.contains(&path) && self.path_runs(index, specs, &path).is_ok() {
                out.push(path);
            }
        }
        out
    }

    /// The blocks `path` launches for the group as tasks (a MultiGemm group's largest launch: each launch is
    /// a launch of tasks of its own); `None` where it cannot run.
    fn task_grid(&self, index: usize, specs: &[PreparedKernel], path: &GemmPath) -> Option<usize> {
        let group = &self.plan.groups[index];
        let (gemms, _) = self.template_operands(index, specs, path).ok()?;
        let (dtype, dual) = (self.dtype(group.matmuls[0]), group.kind == GroupKind::DualGemm);
        let weight_types = self.weight_types(group);
        let runs = match group.kind {
            GroupKind::MultiGemm => super::products::launches(&weight_types),
            _ => vec![vec![0]],
        };
        let mut most = 0;
        for run in runs {
            let mut blocks = 0;
            for &j in &run {
                blocks += self.template_launch(path, &gemms[j], dtype, weight_types[j], dual).ok()?.grid as usize;
            }
            most = most.max(blocks);
        }
        Some(most)
    }

    /// Dynamic shared memory of at least `bytes` and more than half a multiprocessor's, so that a launch runs
    /// one block a multiprocessor as a step's tasks do (its other blocks wait for a block to finish, as a
    /// step's later tasks wait for a step block's earlier ones). Unchanged where step blocks share one.
    pub(super) fn one_block_an_sm(&self, bytes: usize) -> Result<usize> {
        match crate::env::step_blocks_per_sm() {
            1 => Ok(bytes.max(self.device.max_shared_bytes_per_block()? / 2 + 1)),
            _ => Ok(bytes),
        }
    }
}

/// Whether a path's kernel can be a task of a one-launch step: a template without a split K (whose blocks
/// would wait for each other within a launch) or a cluster.
pub(super) fn can_be_task(path: &GemmPath) -> bool {
    match path {
        GemmPath::Skinny(c) => c.splits == 1,
        GemmPath::QuantSkinny(_) | GemmPath::Mma(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_past_the_first_are_charged_and_too_many_left_out() {
        let q = |n: &str| GemmPath::QuantSkinny(fuse_ir::codegen::QuantSkinnyConfig::by_name(n).unwrap());
        let timed = vec![(q("r1c8"), Some(10.0)), (q("x32r1"), Some(9.5)), (q("x16r1"), Some(5.0))];
        let all = [true; 3];
        assert_eq!(fastest_as_tasks(&timed, &[1, 2, 5], &all, 4), Some(0), "x32r1 pays a round, x16r1 takes 5");
        assert_eq!(fastest_as_tasks(&timed, &[1, 1, 4], &all, 4), Some(2), "4 rounds: 8 us charged");
        assert_eq!(fastest_as_tasks(&timed, &[5, 6, 0], &all, 4), None, "none within the rounds, or unknown");
        let failed = vec![(q("r1c8"), None), (q("x32r1"), Some(30.0))];
        assert_eq!(fastest_as_tasks(&failed, &[1, 1], &[true, true], 4), Some(1), "a failed one is never chosen");
        // Those that sum like the graph's kernel first; the others only where none of those fits.
        let alike = [true, false, false];
        assert_eq!(fastest_as_tasks(&timed, &[1, 1, 1], &alike, 4), Some(0), "the graph's bits, though slower");
        assert_eq!(fastest_as_tasks(&timed, &[5, 1, 1], &alike, 4), Some(2), "none alike fits: the fastest");
        assert!(sums_alike(&q("r4c16"), &q("r1c8")) && !sums_alike(&q("x16r1"), &q("r1c8")));
        assert!(sums_alike(&GemmPath::Cublas, &GemmPath::Cublas) && !sums_alike(&q("r1c8"), &GemmPath::Cublas));
    }

    #[test]
    fn task_keys_are_their_own_and_tasks_have_no_split_k() {
        let key = TuneKey { env: "gpu".into(), group: "f#3:bf16".into(), bucket: 1 };
        assert_eq!(key.for_tasks().group, "f#3:bf16@task");
        assert_ne!(key.for_tasks(), key);
        assert_eq!(key.for_tasks().bucket, key.bucket);
        let split = CONFIGS.iter().find(|c| c.splits > 1).unwrap();
        assert!(!can_be_task(&GemmPath::Skinny(split)) && can_be_task(&GemmPath::Skinny(&CONFIGS[0])));
        assert!(!can_be_task(&GemmPath::Cublas));
    }
}
