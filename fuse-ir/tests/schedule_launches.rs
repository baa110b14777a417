//! The schedule of a recorded chain of launches run as one persistent kernel (`schedule::launch_chain`, issue
//! 33): every launch's block is one task, dealt round the resident blocks in the chain's order, and the
//! checker passes it; fewer resident blocks than the schedule uses is refused, and so is a block list out of
//! the chain's order (a deadlock).

use fuse_ir::schedule::{launch_chain, ChainLaunch, DeviceLimits, ScheduleError};

fn chain(grids: &[u32]) -> Vec<ChainLaunch> {
    grids.iter().enumerate().map(|(j, &grid)| ChainLaunch { name: format!("k{j}"), grid }).collect()
}

#[test]
fn a_chain_of_odd_grids_is_dealt_in_order_and_passes_the_checker() {
    let grids = [3, 200, 1, 7, 132, 2];
    let blocks = 5;
    let (lists, schedule) = launch_chain(&chain(&grids), blocks, 1024);
    assert_eq!(lists.len(), blocks);
    // Every block of every launch exactly once; each list in the chain's order.
    let mut seen: Vec<Vec<u32>> = grids.iter().map(|&g| vec![0; g as usize]).collect();
    for list in &lists {
        assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        for &(j, b) in list {
            seen[j as usize][b as usize] += 1;
        }
    }
    assert!(seen.iter().flatten().all(|&n| n == 1));
    // Dealt round the blocks from where the launch before ended: launch 1 starts on block 3.
    assert_eq!(lists[3][0], (1, 0));
    assert_eq!(lists[0].iter().filter(|t| t.0 == 1).count(), 40);
    let limits = DeviceLimits { resident_blocks: blocks, shared_bytes: 2048, max_cluster: 1 };
    schedule.check(&limits).expect("a chain in order cannot deadlock");
    let fewer = DeviceLimits { resident_blocks: blocks - 1, ..limits };
    assert!(matches!(schedule.check(&fewer), Err(ScheduleError::Fit(_))));
}

#[test]
fn a_block_that_runs_a_later_launch_first_deadlocks() {
    let (_, mut schedule) = launch_chain(&chain(&[2, 2]), 2, 0);
    // Move launch 1's first task ahead of launch 0's on its block: it waits for launch 0, which that block
    // would only run after it.
    let later = schedule.tasks.iter().position(|t| t.name == "k1 block 0").unwrap();
    let block = schedule.tasks[later].block;
    let first_here = schedule.tasks.iter().position(|t| t.block == block).unwrap();
    let task = schedule.tasks.remove(later);
    schedule.tasks.insert(first_here, task);
    let limits = DeviceLimits { resident_blocks: 2, shared_bytes: 0, max_cluster: 1 };
    let err = schedule.check(&limits).unwrap_err();
    assert!(matches!(&err, ScheduleError::Deadlock { task, .. } if task == "k1 block 0"), "{err:?}");
}
