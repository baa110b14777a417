// ---------------------------------------------------------------------------------------------------------
// one_launch.cuh: the machinery of a one-launch step (fuse-ir's codegen/one_launch.rs puts the step's kernels
// between its two parts). A recorded step of kernel launches runs as one persistent kernel: each launch's
// blocks become tasks, each resident block runs its list of tasks in the step's order, and a task calls its
// kernel's entry (compiled with FUSE_TASK: a device function, see the prelude's FUSE_KERNEL) under the block
// index, grid and block size of the launch it came from.
//
// DEPENDENCIES (those of the stream the launches were recorded on, with programmatic dependent launch):
//   every launch j counts its finished tasks in counters[j] (64-bit, never reset: a launch of this kernel
//   waits for (epoch + 1) * grid, epoch = the steps run before it, counters[launch_count] / gridDim.x);
//   - before a task of launch j starts: launch j - 2 is done (what the code before a kernel's
//     fuse_grid_wait may rely on under programmatic launch: every kernel releases the next one only after
//     its own wait), and launch j - 1 too where launch j was not launched overlapping;
//   - fuse_grid_wait() in the task (the prelude's, under FUSE_TASK): launch j - 1 is done;
//   - a task signals only after launch j - 1 is done (waited for again after the body, whether or not the
//     body waited), so "launch j done" implies every launch before it is: the stream's order. So thread 0
//     keeps the last launch it has seen done and skips the polls that one answers (the block's barriers
//     order its acquire before the other threads' accesses, and its release after them).
// No deadlock: every block's list is in the step's order and every block is resident (the runtime checks),
// so the first unfinished task of the step always has its dependencies done and runs.
//
// MEMORY ORDER: a task's writes are released by its block's thread 0 (a release add) after a block barrier;
// waits are acquire loads. Loads through the read-only path (__ldg, ld.global.nc)
// would not see what an earlier task of the same launch wrote: under FUSE_TASK they are plain loads.
//
// BARRIERS: a task of fewer threads than the step's block runs on the first threads; its __syncthreads()
// are bar.sync 15 with its thread count (whole warps), the others wait at the step's barrier (bar 0).
// ---------------------------------------------------------------------------------------------------------

#ifndef FUSE_ONE_LAUNCH_HEAD
#define FUSE_ONE_LAUNCH_HEAD
#define FUSE_TASK 1

// The current task's view of the launch it came from, and the counter its fuse_grid_wait waits on.
__shared__ uint3 fuse_task_block_idx, fuse_task_grid_dim, fuse_task_block_dim;
__shared__ unsigned fuse_task_threads;
__shared__ const unsigned long long* fuse_task_wait_word;
__shared__ unsigned long long fuse_task_wait_target;
// Whether thread 0 waited in the task's fuse_grid_wait (only thread 0 writes and reads it).
__shared__ unsigned fuse_task_thread0_waited;

// -DFUSE_STEP_PREFETCH: as a block sets up a task, it fetches into L2 what its next task will read, where that
// task's kernel says (a fuse_task_prefetch(const Args&, unsigned block, unsigned blocks) of its own, found by
// argument-dependent lookup; this one otherwise, which fetches nothing). `blocks`: the task's launch's grid.
template <typename T>
__device__ __forceinline__ void fuse_task_prefetch(const T&, unsigned, unsigned) {}

// -DFUSE_STEP_PRELOAD: as a block sets up a task, it issues the first copies of its next task's weights into
// dynamic shared memory the current task leaves alone, where that task's kernel says how (a
// fuse_task_preload(const Args&, unsigned block, unsigned blocks, unsigned from, unsigned limit) of its own,
// found by argument-dependent lookup, placing them at or past `from` and below `limit`; this one otherwise,
// which issues nothing). It returns where they went ({0, 0}: nowhere); the next task's body finds the start
// in fuse_task_ring_at (0: nothing preloaded) and waits for them as for its own.
struct FuseStepPreload {
  unsigned at, end;  // the bytes [at, end) of dynamic shared memory the preloaded copies and their task use
};
template <typename T>
__device__ __forceinline__ FuseStepPreload fuse_task_preload(const T&, unsigned, unsigned, unsigned, unsigned) {
  return {0u, 0u};
}
#ifdef FUSE_STEP_PRELOAD
__shared__ unsigned fuse_task_ring_at;
#endif

// -DFUSE_STEP_TRACE: thread 0 writes FUSE_STEP_TRACE_STAMPS global-timer times a task (see the entry).
#define FUSE_STEP_TRACE_STAMPS 8
#ifdef FUSE_STEP_TRACE
__shared__ unsigned long long* fuse_task_trace;
__device__ __forceinline__ unsigned long long fuse_step_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
#define FUSE_STEP_STAMP(slot, k) \
  if (threadIdx.x == 0) (slot)[k] = fuse_step_now()
// A kernel's own marks (the prelude's FUSE_TASK_MARK), stamps 5 .. 7.
__device__ __forceinline__ void fuse_task_mark(int n) { FUSE_STEP_STAMP(fuse_task_trace, 5 + n); }
#else
#define FUSE_STEP_STAMP(slot, k)  // nothing (its arguments need not exist)
#endif

__device__ __forceinline__ unsigned long long fuse_step_load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// Counts one more finished task (or block): a release add at GPU scope, after the block's barrier, so every
// write of the block's threads is visible to whoever acquires the count (cumulativity: thread 0 observed them
// through the barrier). No full fence: the release orders only what it must.
__device__ __forceinline__ void fuse_step_signal(unsigned long long* counter) {
  asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(counter) : "memory");
}
// Polls a counter until it reaches `target`, backing off after the first rounds.
__device__ __forceinline__ void fuse_step_wait(const unsigned long long* word, unsigned long long target) {
  unsigned rounds = 0;
  while (fuse_step_load_acquire(word) < target) {
    if (++rounds > 8) __nanosleep(64);
  }
}
// fuse_grid_wait() of a task: one thread of each warp polls (an acquire), the warp's barrier orders the
// others' later accesses after it; the 32-fold fewer polls leave L2 to the producers' signals. (Thread 0 alone
// polling, the other warps waiting for its ticket in shared memory, was slower: docs/persistent-step.md.)
__device__ __forceinline__ void fuse_task_wait() {
  const unsigned long long* word = fuse_task_wait_word;
  if (word == nullptr) return;
  const unsigned mask = __activemask();
  if ((threadIdx.x & 31) == (unsigned)(__ffs(mask) - 1)) fuse_step_wait(word, fuse_task_wait_target);
  if (threadIdx.x == 0) fuse_task_thread0_waited = 1;  // lane 0 is its warp's poller whenever it is here
  __syncwarp(mask);
  FUSE_STEP_STAMP(fuse_task_trace, 2);
}
__device__ __forceinline__ void fuse_task_sync() { asm volatile("bar.sync 15, %0;" ::"r"(fuse_task_threads) : "memory"); }
__device__ __forceinline__ int fuse_task_sync_and(int pred) {
  int r;
  asm volatile("{\n .reg .pred p, q;\n setp.ne.s32 p, %1, 0;\n bar.red.and.pred q, 15, %2, p;\n selp.s32 %0, 1, 0, q;\n}"
               : "=r"(r) : "r"(pred), "r"(fuse_task_threads) : "memory");
  return r;
}
__device__ __forceinline__ int fuse_task_sync_or(int pred) {
  int r;
  asm volatile("{\n .reg .pred p, q;\n setp.ne.s32 p, %1, 0;\n bar.red.or.pred q, 15, %2, p;\n selp.s32 %0, 1, 0, q;\n}"
               : "=r"(r) : "r"(pred), "r"(fuse_task_threads) : "memory");
  return r;
}
__device__ __forceinline__ int fuse_task_sync_count(int pred) {
  unsigned r;
  asm volatile("{\n .reg .pred p;\n setp.ne.s32 p, %1, 0;\n bar.red.popc.u32 %0, 15, %2, p;\n}"
               : "=r"(r) : "r"(pred), "r"(fuse_task_threads) : "memory");
  return (int)r;
}

// Recorded memsets and device copies run as tasks too (kernel ids FUSE_STEP_FILL and FUSE_STEP_COPY of the
// dispatch): their bytes spread over the launch's blocks. Words: address, bytes, value; from, to, bytes.
#define FUSE_STEP_FILL 0xfffffff0u
#define FUSE_STEP_COPY 0xfffffff1u
// `n` bytes at `to` from `from`, or every one `value` where `from` is null, spread over the launch's blocks.
__device__ __forceinline__ void fuse_step_bytes(unsigned char* to, const unsigned char* from, unsigned long long n,
                                                unsigned char value) {
  fuse_task_wait();
  const unsigned long long step = (unsigned long long)fuse_task_grid_dim.x * fuse_task_block_dim.x;
  for (unsigned long long i = (unsigned long long)fuse_task_block_idx.x * fuse_task_block_dim.x + threadIdx.x; i < n; i += step)
    to[i] = from ? from[i] : value;
}
__device__ __forceinline__ void fuse_step_fill(const unsigned long long* w) {
  fuse_step_bytes((unsigned char*)w[0], nullptr, w[1], (unsigned char)w[2]);
}
__device__ __forceinline__ void fuse_step_copy(const unsigned long long* w) {
  fuse_step_bytes((unsigned char*)w[1], (const unsigned char*)w[0], w[2], 0);
}

// Inside the kernels: the launch's geometry, the task's barriers, plain loads.
#define blockIdx fuse_task_block_idx
#define gridDim fuse_task_grid_dim
#define blockDim fuse_task_block_dim
#define __syncthreads() fuse_task_sync()
#define __syncthreads_and(p) fuse_task_sync_and(p)
#define __syncthreads_or(p) fuse_task_sync_or(p)
#define __syncthreads_count(p) fuse_task_sync_count(p)
#define __ldg(p) (*(p))

#else  // the second part, after the kernels

#undef blockIdx
#undef gridDim
#undef blockDim
#undef __syncthreads
#undef __syncthreads_and
#undef __syncthreads_or
#undef __syncthreads_count
#undef __ldg

// One recorded launch.
struct FuseStepLaunch {
  unsigned long long params;  // the address of its argument words
  unsigned kernel;            // its kernel (fuse_step_run's case)
  unsigned grid;              // its blocks
  unsigned threads;           // threads a block (whole warps, at most the step's)
  unsigned overlap;           // 1: it waits for the launch before in its fuse_grid_wait; 0: before it starts
  unsigned param_words;       // its argument words (at most FUSE_STEP_PARAM_WORDS where that is set)
  unsigned shared;            // its bytes of dynamic shared memory
};
struct FuseStepArgs {
  const FuseStepLaunch* launches;
  const unsigned long long* tasks;  // launch << 32 | block, each block's list after the one before
  const unsigned* first;            // block b's tasks: first[b] .. first[b + 1]
  unsigned long long* counters;     // [launch_count + 1]: finished tasks of each launch, then finished blocks
  unsigned long long launch_count;
  unsigned long long* trace;        // -DFUSE_STEP_TRACE: FUSE_STEP_TRACE_STAMPS a task, at its list index
};

// A kernel entry's argument type (FUSE_KERNEL_PARAM(T): const T&).
template <typename F>
struct fuse_task_param;
template <typename T>
struct fuse_task_param<void(const T&)> {
  typedef T type;
};
#define FUSE_TASK_CALL(ns, fn, params) ns::fn(*reinterpret_cast<const fuse_task_param<decltype(ns::fn)>::type*>(params))
#define FUSE_TASK_PREFETCH(ns, fn, params, block, blocks) \
  fuse_task_prefetch(*reinterpret_cast<const fuse_task_param<decltype(ns::fn)>::type*>(params), block, blocks)
#define FUSE_TASK_PRELOAD(ns, fn, params, block, blocks, from, limit)                                           \
  fuse_task_preload(*reinterpret_cast<const fuse_task_param<decltype(ns::fn)>::type*>(params), block, blocks, from, \
                    limit)

__device__ __forceinline__ void fuse_step_run(unsigned kernel, const void* params);
__device__ __forceinline__ void fuse_step_prefetch(unsigned kernel, const void* params, unsigned block, unsigned blocks);
__device__ __forceinline__ FuseStepPreload fuse_step_preload(unsigned kernel, const void* params, unsigned block,
                                                             unsigned blocks, unsigned from, unsigned limit);

// -DFUSE_STEP_LAUNCHES=n (the runtime's, at most FUSE_STEP_SHARED_LAUNCHES): the launch records are copied into
// shared memory first, so that a task's set-up reads them there rather than from L2.
#ifndef FUSE_STEP_LAUNCHES
#define FUSE_STEP_LAUNCHES 0
#endif

// -DFUSE_STEP_MIN_BLOCKS=n (the runtime's): n step blocks a multiprocessor, each running its own task list
// (the registers capped to fit them): while one waits for memory, another computes.
#ifndef FUSE_STEP_MIN_BLOCKS
#define FUSE_STEP_MIN_BLOCKS 1
#endif

// -DFUSE_STEP_PARAM_WORDS=n (the runtime's: the step's largest launch's argument words): each task's arguments
// are copied into shared memory as the block sets it up, so that its body reads them there (its index
// arithmetic is a chain of such reads) rather than from global memory, as a launch reads its parameters from
// the constant bank.
#ifndef FUSE_STEP_PARAM_WORDS
#define FUSE_STEP_PARAM_WORDS 0
#endif

extern "C" __global__ void __launch_bounds__(FUSE_STEP_THREADS, FUSE_STEP_MIN_BLOCKS) FUSE_STEP_NAME(const FuseStepArgs a) {
  __shared__ unsigned long long fuse_step_epoch;
#if FUSE_STEP_PARAM_WORDS > 0
  __shared__ __align__(16) unsigned long long fuse_task_params[FUSE_STEP_PARAM_WORDS];
#endif
#if FUSE_STEP_LAUNCHES > 0
  __shared__ FuseStepLaunch fuse_step_table[FUSE_STEP_LAUNCHES];
  for (unsigned i = threadIdx.x; i < FUSE_STEP_LAUNCHES; i += blockDim.x) fuse_step_table[i] = a.launches[i];
  const FuseStepLaunch* const table = fuse_step_table;
#else
  const FuseStepLaunch* const table = a.launches;
#endif
  if (threadIdx.x == 0) fuse_step_epoch = fuse_step_load_acquire(a.counters + a.launch_count) / gridDim.x;
  __syncthreads();
  const unsigned long long epoch = fuse_step_epoch;
  // Thread 0's alone: the last launch it has seen done (this launch of the step). In shared memory, not a
  // register live across every task body.
  __shared__ long long seen;
  if (threadIdx.x == 0) seen = -1;
  // Thread 0: launch k done, polled unless already seen ("k done" means every launch before k is, so one
  // index says it all).
  const auto await_launch = [&](unsigned k) {
    if ((long long)k > seen) {
      fuse_step_wait(a.counters + k, (epoch + 1) * table[k].grid);
      seen = (long long)k;
    }
  };
#ifdef FUSE_STEP_PRELOAD
  // Thread 0's: where the task about to run was preloaded (during the one before); the dynamic shared memory
  // the running task uses (every thread's, after the set-up's barrier).
  __shared__ FuseStepPreload preloaded;
  __shared__ unsigned busy;
  if (threadIdx.x == 0) preloaded = {0u, 0u};
  unsigned limit;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(limit));
#endif
  const unsigned begin = a.first[blockIdx.x], end = a.first[blockIdx.x + 1];
  unsigned long long task = begin < end ? a.tasks[begin] : 0ull;
  for (unsigned i = begin; i < end; ++i) {
    // The next task's entry, loaded while this one runs.
    const unsigned long long next = i + 1 < end ? a.tasks[i + 1] : 0ull;
    const unsigned j = (unsigned)(task >> 32);
    const FuseStepLaunch& l = table[j];
#ifdef FUSE_STEP_PREFETCH
    if (i + 1 < end) {
      const FuseStepLaunch& n = table[(unsigned)(next >> 32)];
      fuse_step_prefetch(n.kernel, (const void*)n.params, (unsigned)next, n.grid);
    }
#endif
#ifdef FUSE_STEP_TRACE
    unsigned long long* const slot = a.trace + (unsigned long long)FUSE_STEP_TRACE_STAMPS * i;
    FUSE_STEP_STAMP(slot, 0);
    if (threadIdx.x == 0) fuse_task_trace = slot;
#endif
#if FUSE_STEP_PARAM_WORDS > 0
    // The task's arguments (the host's, never written by the step) into shared memory, before the waits below
    // so that their latency overlaps them; every thread is past the previous task's body (the barrier that
    // ended it), the barrier below orders them before this one.
    {
      const unsigned long long* from = (const unsigned long long*)l.params;
      for (unsigned w = threadIdx.x; w < l.param_words; w += blockDim.x) fuse_task_params[w] = from[w];
    }
    const void* const params = fuse_task_params;
#else
    const void* const params = (const void*)l.params;
#endif
    if (threadIdx.x == 0) {
      if (j >= 2) await_launch(j - 2);
      if (j >= 1 && !l.overlap) await_launch(j - 1);
      fuse_task_block_idx = make_uint3((unsigned)task, 0u, 0u);
      fuse_task_grid_dim = make_uint3(l.grid, 1u, 1u);
      fuse_task_block_dim = make_uint3(l.threads, 1u, 1u);
      fuse_task_threads = l.threads;
      fuse_task_wait_word = j >= 1 && (long long)j - 1 > seen ? a.counters + (j - 1) : nullptr;
      fuse_task_wait_target = j >= 1 ? (epoch + 1) * table[j - 1].grid : 0ull;
      fuse_task_thread0_waited = 0;
#ifdef FUSE_STEP_PRELOAD
      fuse_task_ring_at = preloaded.at;
      busy = preloaded.at ? preloaded.end : l.shared;
#endif
      __threadfence_block();
    }
    __syncthreads();
    FUSE_STEP_STAMP(slot, 1);
#ifdef FUSE_STEP_PRELOAD
    // The next task's first copies, past what this one uses (not for a task of the same kernel: its
    // barriers are this one's).
    {
      const FuseStepLaunch& n = table[(unsigned)(next >> 32)];
      const FuseStepPreload r = i + 1 < end && n.kernel != l.kernel
                                    ? fuse_step_preload(n.kernel, (const void*)n.params, (unsigned)next, n.grid, busy, limit)
                                    : FuseStepPreload{0u, 0u};
      if (threadIdx.x == 0) preloaded = r;
    }
#endif
    if (threadIdx.x < l.threads) {
      fuse_step_run(l.kernel, params);
#if __CUDA_ARCH__ >= 800
      // A kernel's exit drains its copies in flight; a task's return does not, and the next task of the
      // same kernel on this block reuses its shared memory.
      asm volatile("cp.async.wait_all;" ::: "memory");
#endif
    }
    __syncthreads();
    FUSE_STEP_STAMP(slot, 3);
    if (threadIdx.x == 0) {
      if (fuse_task_thread0_waited && (long long)j - 1 > seen) seen = (long long)j - 1;  // in the body
      if (j >= 1) await_launch(j - 1);
      fuse_step_signal(a.counters + j);
    }
    FUSE_STEP_STAMP(slot, 4);
    task = next;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    fuse_step_signal(a.counters + a.launch_count);
  }
}

#endif
