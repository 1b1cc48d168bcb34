// Measurements of a run, gathered on world rank 0 and turned into the simulator's formats:
// the Chrome trace (sched/trace.hpp) and the profile (sched/costs.hpp). Torch-free.
//
// Note [Measured p2p time]: the ranks of one machine share CLOCK_MONOTONIC (steady_clock), so a
// transfer's time is measured across processes as recv_end - max(send_start, recv_start), i.e.
// from the moment both sides were ready until the data arrived. The profile's p2p cost is the
// median after warm-up (per_message_ms) over the transfers whose receiver was already waiting
// when the send started (over all when there are none): a receive posted after the data arrived
// measures the batch overhead instead (Note [Comm overhead]). On several hosts the clocks differ;
// use `pipewright calibrate` there.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/plan.hpp"

namespace pipewright::exec {

struct TimedAction {
  sched::Action action;
  std::int64_t step = 0;
  std::int64_t start_ns = 0;  // steady_clock
  std::int64_t end_ns = 0;
  std::int64_t bytes = 0;     // SEND/RECV: payload; F: heap bytes it left allocated
  std::int64_t send_ns = 0;   // SEND: inside the transport's send calls (Note [Send time])
  std::int64_t drain_ns = 0;  // SEND: waiting for its completion at the end of the step
  std::int64_t cpu_ns = 0;  // CPU compute actions: the thread's CPU time (Note [Compute CPU time])
};

// Note [Data-parallel sync]: the data-parallel algorithm's work after a step's last OPTIM.
struct DataParallelSync {
  std::int64_t step = 0;
  std::int64_t start_ns = 0;  // steady_clock
  std::int64_t end_ns = 0;
};

// How long the training thread waited for a step's batch (Note [Prefetching loader] in
// prefetch.hpp); traced as a "data" slice on the rank's compute stream.
struct DataWait {
  std::int64_t step = 0;
  std::int64_t start_ns = 0;  // steady_clock
  std::int64_t end_ns = 0;
};

// One step's data-parallel communication on a rank: the change of the algorithm's
// DataParallelStats across the step (run.cpp), for the profile's data_parallel entries.
struct DataParallelStep {
  std::int64_t step = 0;
  std::int64_t collectives = 0;
  std::int64_t payload_bytes = 0;
  std::int64_t wire_bytes = 0;  // rounded
  std::int64_t exposed_wait_ns = 0;
};

struct LocalStageSizes {
  int stage = 0;
  std::vector<std::int64_t> param_bytes;  // per parameter, registration order
};

// What a rank holds just before its first step (Note [Runtime memory]).
struct MemoryBaseline {
  std::int64_t rss_bytes = 0;     // resident set (VmRSS after the peak reset, else VmHWM)
  std::int64_t state_bytes = -1;  // RankRecord::baseline_state_bytes
  std::int64_t file_bytes = 0;    // RssFile
};

// Everything one rank reports.
struct RankRecord {
  int world_rank = 0;
  std::int64_t peak_rss_bytes = 0;  // VmHWM of /proc/self/status
  // VmHWM before the first step (libtorch loaded and initialised, stages built, one no-grad
  // forward for the shape agreement, data loaded): Note [Runtime memory].
  std::int64_t baseline_rss_bytes = 0;
  // The bytes of the model's training state the rank held at the baseline, where that is not
  // its parameters (ZeRO-3: the parameter and gradient shards); -1: the parameters (the sum of
  // stages' param_bytes). Note [Runtime memory].
  std::int64_t baseline_state_bytes = -1;
  // The file-backed resident set (RssFile: mapped libraries' pages) at the baseline and when the
  // record is made, after the last step: the code first run by training (Note [Runtime memory]).
  std::int64_t baseline_file_bytes = 0;
  std::int64_t file_bytes = 0;
  // The rank's machine (a hash of the kernel's boot_id) and the CPUs its compute may use (its
  // affinity mask); cpus = 0 when it computes on a GPU. Note [Shared cores in profiles].
  std::int64_t host_id = 0;
  std::int64_t cpus = 0;
  // The rank's node in the launch (GROUP_RANK, SLURM_NODEID; 0 where the launcher gives none).
  // Network-namespace nodes share a machine (one host_id) but not a network stack; the profile
  // counts the distinct (host_id, node_rank) pairs as its nodes (CostTable::nodes).
  std::int64_t node_rank = 0;
  std::vector<LocalStageSizes> stages;
  std::vector<TimedAction> actions;
  std::vector<DataWait> data_waits;
  std::vector<DataParallelStep> dp_steps;  // dp > 1 only
  std::vector<DataParallelSync> dp_syncs;  // dp > 1 only
};

// Note [Send time]: a SEND's measured interval is its p2p batch's (Note [p2p batches]), and on a
// slow link most of it can be the transport's send call itself: Gloo writes a message into the
// socket from the calling thread when the receiver's receive is already posted, and on a
// 100 Mbit/s link that call returned only once most of the bytes had left (2-8 ms for 256 KiB,
// 0.2-0.6 ms for the batch's other work). The interpreter therefore times each SEND's send calls
// (send_ns, inside the action's interval) and the wait for its completion at the end of the step
// (drain_ns, after every action of the step): the wire time of the network the run had, which
// the simulator prices from the cluster's links or the profile's p2p cost. make_profile takes
// them out of the batch overhead (Note [Comm overhead] in run_profile.cpp) so that a profile
// measured on one network predicts another; the trace shows them as args send_us / drain_us.

// Note [Compute CPU time]: on CPU devices the interpreter also reads the computing thread's CPU
// time (CLOCK_THREAD_CPUTIME_ID) around each compute action and OPTIM (cpu_ns; the trace's arg
// cpu_us). With OMP_NUM_THREADS=1 libtorch computes a CPU stage's forward and backward on that
// thread, so cpu_ns is the action's own work, without the time other ranks or communication
// threads held the core: wall - cpu is what the host's sharing cost it. The profile does not use
// it (Note [Shared cores in profiles] recovers dedicated times from the wall times); it is there
// to tell the host's speed from the sharing. Measured with it (bench/fidelity.sh, 2026-11-29):
// two runs of the same pp 2 GPipe cell, 2 ranks on 2 cores (no sharing: cpu = wall within 1%),
// a minute apart: stage 1's F took 2.81 ms of CPU in one and 2.20 ms in the other, i.e. the
// host itself runs identical work up to ~30% slower from one minute to the next (docs/simulator.md,
// Note [Host drift]); and with DDP at 4 ranks on 2 cores, stage 0's B took 7.43 ms of wall time,
// 5.81 ms after the profile's sharing correction, 4.23 ms of CPU (Gloo's all-reduce threads, not
// counted as computing ranks, held the rest).

// Note [Data-parallel sync]: SGP's gossip, LocalSGD's and SlowMo's averaging, DiLoCo's outer step
// and ZeRO's parameter all-gathers run in DataParallelHooks::after_optimizer_step, after the
// rank's last OPTIM. They used to be timed inside that OPTIM, so the profile's optimizer_ms held
// the algorithm's communication (SGP's OPTIM: 4.1 ms against DDP's 0.12 ms) and the simulator,
// which prices that communication itself, charged it twice. The interpreter now times them
// apart (SyncTiming), the trace shows them as a "dp sync" slice on the compute stream, and the
// profile's optimizer_ms is the optimizer alone. make_profile keeps the sync's own work apart
// from its waits as dp_sync_compute_ms (Note [Data-parallel sync work] in run_profile.cpp).

// Note [Shared cores in profiles]: when more ranks of one host compute at once than it has
// cores (p = 4 on this 2-core machine), each measured compute time is stretched by the others.
// make_profile recovers each action's dedicated-core time: with n(t) the number of the host's
// ranks inside a compute action (F, B, I, W, OPTIM) at time t (the ranks of one host share
// steady_clock), an action measured over [s, e] did  integral_s^e min(1, C / n(t)) dt  of work,
// C the cores of the host (exactly e - s while n(t) <= C). Transfers are scaled likewise by the
// share left to their progress thread, min(1, C / (n(t) + 1)). The profile stores those times
// and cores_per_node = C (CPU runs only), and the simulator shares C cores between a node's
// computing ranks (Note [Shared cores] in sim/src/network/core_sharing.hpp), so one profile
// predicts runs with fewer or more ranks per host than it was measured with.

// This machine's identity (FNV-1a of the kernel's boot_id, else of the hostname; >= 0) and the
// CPUs this process may run on.
[[nodiscard]] std::int64_t this_host_id();
[[nodiscard]] std::int64_t usable_cpus();

// Note [Runtime memory]: a CPU rank's peak RSS is mostly not the model: libtorch's code and
// thread pools, allocator caches and the dataset are ~180 MB here against a few MB of weights.
// The profile's runtime_memory_bytes is the median over ranks of (baseline_rss_bytes - the
// rank's parameter bytes), i.e. what a rank holds before training besides its weights; the
// simulator adds it to its own parameter + gradient + optimizer-state + activation estimate, so
// the predicted peak is comparable with the measured peak RSS, also for configurations that
// were not run (the runtime does not depend on the partition). Under ZeRO-3 the rank does not
// hold its whole parameters at the baseline but their shard and the gradient shard (Note
// [ZeRO-3 sharded parameters]; RankRecord::baseline_state_bytes): those are subtracted instead
// (subtracting P, which is not resident there, made the runtime P/2 too small at dp 4, below
// the ZeRO-0 runtime by exactly that, and the prediction 13% low).
// The baseline is the resident set just before the first step, and the peak (VmHWM, what
// --metrics reports as peak_memory_bytes) is reset to it there (reset_peak_rss; issue 43's memory
// target): building the stages leaves a start-up transient (initialising a 136 MiB MLP raised
// VmHWM by ~100 MiB above what the rank then held) that is no training state and that a
// high-water baseline would have counted as runtime memory, which grows with the model. Where
// the kernel refuses the reset, both stay high-water marks (the old behaviour).
// The resident set also holds the pages of libtorch's (and Gloo's) code that have run, and the
// baseline has run only the forward: the backward's, the optimizer's and the collectives' code
// becomes resident during the first steps. So each rank's runtime adds the growth of its
// file-backed resident set (RssFile) from the baseline to the end of training (code pages stay
// resident; they are the same for any partition of the model). Measured on the fidelity GPT
// (bench/fidelity.sh, GPipe, dp 1): +2.5 and +3.1 MiB on its two ranks, about half of what the
// model's peak was under the measured one (5.7 and 7.6 MiB); the rest is anonymous memory the
// model does not list (malloc's fragmentation and per-thread arenas: tensors' transient peaks
// within an action, measured with a counting CPU allocator, were 0.03-0.2 MiB).

// Note [Measured activation memory]: the model file's activation_bytes is an analytic estimate
// (for the small GPT of bench/fidelity.sh it is ~9x below what libtorch's autograd actually
// saves: attention scores and probabilities, GELU and LayerNorm inputs, ...). A profile
// therefore carries the measured value: the change of malloc's bytes in use across each F
// action (what the forward left allocated for its backward, output included) plus the size of
// the activation the stage received for that microbatch (allocated by RECV_F, held until the
// backward); the median over the measured steps. Allocator statistics, not RSS: RSS moves in
// pages and lags frees. Stages without a measured F keep the model's estimate.

// Note [Measured split backward]: zero-bubble plans split B into I (input gradients) and W
// (weight gradients), and with libtorch's autograd I + W costs much more than B (each walks the
// stage's whole backward graph: measured ~1.6-2x B on the fidelity GPT), so a profile without
// them predicts zero-bubble plans far too fast (halving B, the old default, was off by 25-50%).
// A profiled run (`run --profile`) whose plan has B and no I/W therefore runs the full backward
// of every even microbatch as I then W in its last warm-up step (same gradients; warm-up steps
// are not in the profile's statistics) and records them as I and W actions. make_profile turns
// them into I and W costs: the ratio of their medians to the median B of the odd microbatches in
// that step (to F's when every backward ran split, m = 1), times the measured B (F)
// distribution, so host drift between the warm-up and the measured steps cancels. The ratio
// takes each action's CPU time where measured (Note [Compute CPU time]): with 4 ranks on 2
// cores a single wall time there held up to 3x its work. And a rank's first I and first W of a
// stage are left out when it ran more: the split path's first use in the process paid for
// itself (bench/fidelity.sh, 2026-11-29: stage 1's I took 8.0 ms for microbatch 0 and 2.4 ms for
// microbatch 2, against B's 3.3 ms), which made the 1F1B profile's I 1.6x B and the
// InterleavedZeroBubble transfer from it +39%; without it +2%.

// Flat int64 encoding for the communicator, and back. decode throws InternalError on garbage.
[[nodiscard]] std::vector<std::int64_t> encode_record(const RankRecord& record);
[[nodiscard]] RankRecord decode_record(const std::vector<std::int64_t>& data);

// This process's peak resident set size (VmHWM) in bytes, or 0 when /proc is unavailable.
[[nodiscard]] std::int64_t peak_rss_bytes();
// This process's resident set size now (VmRSS) in bytes, or 0 when /proc is unavailable.
[[nodiscard]] std::int64_t resident_bytes();
// Its file-backed part (RssFile: pages of mapped files, i.e. libraries' code), 0 when
// unavailable.
[[nodiscard]] std::int64_t resident_file_bytes();
// Resets the peak (VmHWM) to the resident set now (Linux >= 4.0: "5" to /proc/self/clear_refs);
// false when the kernel refuses it. Note [Runtime memory].
[[nodiscard]] bool reset_peak_rss();
// Bytes currently allocated through malloc (glibc mallinfo2: arena + mmapped chunks), which is
// where libtorch's CPU allocator gets its memory. The interpreter records its change across each
// F action: what the forward left allocated for the backward (Note [Measured activation memory]).
[[nodiscard]] std::int64_t heap_bytes_in_use();

struct ReportContext {
  std::string plan_description;  // "1F1B pp=2 m=4" or the plan file
  std::string schedule;
  int world_size = 1;
  int pp = 0;  // pipeline ranks per replica (world rank = replica * pp + rank); 0: world_size
  std::int64_t warmup_steps = 1;
  // Per stage, from the partition (model cost annotations): kept activation bytes.
  std::vector<std::int64_t> activation_bytes;
  // Whether the backend moves point-to-point bytes on a progress thread of its own (Gloo) rather
  // than in the ranks' polls (MPI): the profile's p2p_uses_core.
  bool p2p_uses_core = true;
  // The run's --precision (RunConfig's JobSpec::precision): the profile records it, so that
  // `simulate --profile` refuses to reuse it for another precision
  // (sched::check_profile_precision).
  sched::Precision precision = sched::Precision::kFp32;
};

// (producer stage, consumer stage, microbatch, backward?, step, replica) of a transfer: the same
// key for a SEND and its matching RECV (run_trace.cpp draws flows, run_profile.cpp times them).
using TransferKey = std::tuple<int, int, int, bool, std::int64_t, int>;
[[nodiscard]] TransferKey transfer_key(const sched::Action& action, std::int64_t step, int replica);

// The trace of every rank (pid = world rank, tid = stream), times relative to the earliest
// action of the run: p2p flows per replica, "dp" flows between the replicas' REDUCE_GRAD slices of
// a stage and step, and a memory counter per rank (its baseline RSS plus the heap bytes each
// forward left allocated, held until the microbatch's B or W ends).
[[nodiscard]] std::string make_trace_json(const std::vector<RankRecord>& records,
                                          const ReportContext& context);

// Per-stage per-kind medians (and p10/p90) over the steps >= warmup_steps of every replica,
// measured p2p time (Note [Measured p2p time]), activation sizes and peak RSS per rank.
[[nodiscard]] sched::CostTable make_profile(const std::vector<RankRecord>& records,
                                            const sched::PlanShape& shape,
                                            const ReportContext& context);

}  // namespace pipewright::exec
