// `pipewright run`: train a model with a pipeline schedule on this process's rank of a pp x dp
// job. Thin: the flags (or the keys of a --config file, run_config.hpp) fill an
// exec::RunConfig and exec::run_training does the work (docs/executor.md). This file only logs
// (rank 0: one line per step, a progress bar when stderr is a terminal).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "exec_commands.hpp"
#include "job_flags.hpp"
#include "pipewright/exec/run.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/render.hpp"
#include "run_config.hpp"
#include "run_only_flags.hpp"

namespace pipewright::cli {
namespace {

// `run --dry-run`: what the --config file and the flags combined into (as a config file, every
// key), then the resolved job in one paragraph on stdout.
void print_dry_run(const RunFlags& flags, const exec::RunConfig& c, const exec::DryRun& d) {
  std::printf(
      "# the merged configuration: the --config file's keys, then the command line's "
      "flags\n%s\n",
      merged_config_toml(flags).c_str());
  const auto& sh = d.plan.shape;
  std::printf("dry run: %s, model '%s'\n", sh.schedule.c_str(), d.model_name.c_str());
  std::printf("ranks: pp %d x dp %d = %d, %d stages (%d per rank), %d microbatches, batch %lld\n",
              c.pp, c.dp, c.pp * c.dp, sh.stages, c.stages_per_rank, sh.microbatches,
              static_cast<long long>(c.batch_size));
  std::printf("plan: %lld actions per replica, validated, no deadlock; dp %s\n",
              static_cast<long long>(d.actions),
              std::string(sched::to_string(c.data_parallel.algorithm)).c_str());
  // The per-rank peak as `simulate --model` prints it for the same job (sched::peak_memory).
  for (const auto& m : d.memory) {
    std::printf("  rank %d: %d action(s), peak memory %s\n", m.rank,
                static_cast<int>(d.plan.per_rank[static_cast<std::size_t>(m.rank)].size()),
                graph::human_bytes(m.peak_bytes).c_str());
  }
  std::fflush(stdout);
}

// Every flag of `run` is a job flag (shared with simulate), a run-only flag (run_only_flags.hpp,
// which offline commands answer with "--dataset is a run flag; ...") or a flag offline commands
// have too (kSharedRunFlags); and every run-only flag is one of run's. Throws std::logic_error
// naming the flag otherwise: called when `run` is set up, so a new flag of run that is in no table
// fails every test of `run`, as check_config_covers does for the config file's keys.
void check_run_flags_classified(const CLI::App& run_cmd) {
  CLI::App job_flags;
  sched::JobSpec job;
  add_job_flags(&job_flags, job);
  const auto run_only = [](const std::string& name) {
    return std::any_of(std::begin(kRunOnlyFlags), std::end(kRunOnlyFlags),
                       [&name](const RunOnlyFlag& f) { return f.name == name; });
  };
  const auto shared = [](const std::string& name) {
    return std::find(std::begin(kSharedRunFlags), std::end(kSharedRunFlags), name) !=
           std::end(kSharedRunFlags);
  };
  for (const CLI::Option* opt : run_cmd.get_options()) {
    for (const std::string& lname : opt->get_lnames()) {
      const std::string name = "--" + lname;
      if (job_flags.get_option_no_throw(name) != nullptr || run_only(name) || shared(name)) {
        continue;
      }
      throw std::logic_error("run flag " + name +
                             " is in no table of tools/cli/run_only_flags.hpp: add it to "
                             "kRunOnlyFlags (offline commands then name it) or kSharedRunFlags");
    }
  }
  for (const RunOnlyFlag& flag : kRunOnlyFlags) {
    if (run_cmd.get_option_no_throw(std::string(flag.name)) == nullptr) {
      throw std::logic_error("kRunOnlyFlags (tools/cli/run_only_flags.hpp) names " +
                             std::string(flag.name) + ", which `run` does not have");
    }
  }
}

class Progress {
 public:
  Progress() : tty_(::isatty(STDERR_FILENO) == 1) {}
  void clear() const {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }
  void draw(std::int64_t done, std::int64_t total) const {
    if (!tty_ || total <= 0) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    std::fprintf(stderr, "\r[%s%s] %lld/%lld",
                 std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(kWidth - filled), '.').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total));
    std::fflush(stderr);
  }

 private:
  bool tty_;
};

void setup_run(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  auto& c = flags->config;
  auto* sub = app.add_subcommand("run", std::string(exec_command_description("run")));
  // Defined first, so its callback runs before the other options' (CLI11 runs them in the order
  // they were added, after the whole command line is parsed): the file fills what the command
  // line did not give (run_config.hpp).
  sub->add_option_function<std::string>(
      "--config", [sub](const std::string& path) { apply_config_file(*sub, path); },
      "TOML (or JSON) file setting any of these flags, in sections (docs/executor.md, \"Config "
      "files\"); flags on the command line win");
  add_job_flags(sub, c);
  sub->add_option("--loss", c.loss, "mse|cross-entropy (default: the model's loss node)");
  sub->add_option("--data-x", c.data_x, "inputs, .npy (float32 or int64 rows)");
  sub->add_option("--data-y", c.data_y, "targets, .npy");
  sub->add_option("--dataset", c.dataset, "bundled dataset (e.g. sonnets)");
  sub->add_flag("--no-shuffle", flags->no_shuffle, "read samples in file order");
  sub->add_option("--prefetch", c.prefetch,
                  "steps of batches read ahead on a background thread (0: read each batch when "
                  "its step starts)")
      ->capture_default_str();
  sub->add_option("--seed", c.seed, "seed of initialisation and shuffling")->capture_default_str();
  sub->add_option("--init", c.init_path, "initial weights (safetensors)");
  sub->add_option("-o,--output,--save", c.save_path,
                  "write the final weights (safetensors, rank 0)");
  sub->add_option("--outputs", c.outputs_path,
                  "with --forward-only: write the last stage's outputs in sample order (.npy, "
                  "rank 0)");
  sub->add_option_function<std::string>(
         "--backend", [&c](const std::string& b) { c.backend = exec::parse_backend(b); },
         "gloo|mpi|nccl")
      ->default_str(exec::to_string(c.backend));
  sub->add_option("--device-map", c.device_map,
                  "nccl: CUDA device of each local rank, '2,3,0,1' or '0:2,1:3' (default: the "
                  "local rank; docs/gpu.md)");
  sub->add_option("--trace", c.trace_path, "write a Chrome trace of every rank (rank 0)");
  sub->add_option("--profile", c.profile_path,
                  "write measured per-stage costs for `pipewright simulate --profile`");
  sub->add_option("--warmup-steps", c.warmup_steps, "steps left out of --profile statistics")
      ->capture_default_str();
  sub->add_flag_function(
      "--no-prepost-receives", [&c](std::int64_t) { c.prepost_receives = false; },
      "post each receive at its RECV action instead of when the step starts (ablation)");
  sub->add_flag_function(
      "--no-shm-collectives", [&c](std::int64_t) { c.shm_collectives = false; },
      "gloo: all-reduce DDP buckets through Gloo (TCP) even when the replicas share a host");
  sub->add_flag_function(
      "--no-shm-p2p", [&c](std::int64_t) { c.shm_p2p = false; },
      "gloo: send pipeline activations and gradients through Gloo (TCP) even between ranks of "
      "one host");
  sub->add_option("--timeout", c.timeout_s, "deadline of every wait, seconds")
      ->capture_default_str();
  sub->add_option("--log-every", flags->log_every, "log every N-th step (and the last)")
      ->capture_default_str();
  sub->add_option("--rank", flags->rank, "this process's rank (else from the environment)");
  sub->add_option("--world-size", flags->world_size, "number of processes");
  sub->add_option("--local-rank", flags->local_rank, "rank on this node");
  sub->add_option("--local-world-size", flags->local_world_size, "processes on this node");
  sub->add_option("--master-addr", flags->master_addr, "rendezvous host (rank 0)");
  sub->add_option("--master-port", flags->master_port, "rendezvous port");
  sub->add_option("--job-id", flags->job_id,
                  "this job's identity at the rendezvous: the store refuses processes of other "
                  "jobs (default: PIPEWRIGHT_JOB_ID, which `pipewright launch` sets)");
  sub->add_option("--check-replicas", c.check_replicas,
                  "every N steps verify that replicas hold identical parameters (0: never)")
      ->capture_default_str();
  sub->add_option("--checkpoint-dir", c.checkpoint_dir,
                  "write checkpoints of the whole training state here (one file per rank)");
  sub->add_option("--checkpoint-every", c.checkpoint_every,
                  "also checkpoint every N steps (0: after the last step only)")
      ->capture_default_str();
  sub->add_flag("--resume", c.resume,
                "resume from the last complete checkpoint in --checkpoint-dir");
  sub->add_flag("--save-replicas", c.save_replicas,
                "with --save, also write every replica's weights as <FILE>.replica<R>.safetensors");
  sub->add_option("--initial-loss-scale", c.initial_loss_scale,
                  "fp16: the loss scale to start from (torch GradScaler's init_scale)")
      ->capture_default_str();
  sub->add_option("--min-loss-scale", c.min_loss_scale,
                  "fp16: a loss scale that would halve below this stops the run (exit 1)")
      ->capture_default_str();
  sub->add_option("--loss-scale-window", c.loss_scale_window,
                  "fp16: overflow-free steps after which the loss scale doubles")
      ->capture_default_str();
  sub->add_option("--eval-every", c.eval_every,
                  "evaluate every N steps and after the last (0: never): a forward-only pass of "
                  "the plan over --eval-batches batches")
      ->capture_default_str();
  sub->add_option("--eval-batches", c.eval_batches, "batches per evaluation")
      ->capture_default_str();
  sub->add_option("--eval-data-x", c.eval_data_x, "evaluation inputs, .npy");
  sub->add_option("--eval-data-y", c.eval_data_y, "evaluation targets, .npy");
  sub->add_option("--eval-dataset", c.eval_dataset,
                  "evaluate on the held-out last 10% of a bundled dataset (training on the same "
                  "--dataset then skips them)");
  sub->add_option("--metrics", c.metrics_path,
                  "write one JSON line per step: loss, eval loss, lr, grad norm, loss scale, "
                  "step time, samples/s, tokens/s, peak memory per rank (world rank 0)");
  sub->add_flag("--dry-run", flags->dry_run,
                "resolve the job, build, validate and dry-run its plan, print a summary and exit "
                "(no rendezvous, no training)");
  sub->add_option("--plan-out", flags->plan_out,
                  "write the resolved job (every default filled) and its lowered plan as JSON "
                  "(the same file as `simulate --plan-out` for the same job flags)");

  check_config_covers(*sub);
  check_run_flags_classified(*sub);

  sub->callback([flags] {
    resolve_job_flags(flags->config);  // before merged_config_toml prints it
    // Issue 46: tensor parallelism is modelled by the simulator, not executed.
    PW_CHECK(flags->config.tp == 1 && !flags->config.sequence_parallel, ConfigError,
             "--tp " << flags->config.tp
                     << (flags->config.sequence_parallel ? " --sequence-parallel" : "")
                     << ": tensor parallelism is simulation only (pipewright simulate / search / "
                        "report / export-chakra --tp); run executes --tp 1");
    PW_CHECK(!flags->config.recompute.selective(), ConfigError,
             "--recompute selective: selective recompute (of each transformer block's attention "
             "core) is simulation only (pipewright simulate / search / partition); run "
             "recomputes whole stages: --recompute full or a stage list");
    auto cfg = flags->config;
    cfg.shuffle = !flags->no_shuffle;
    if (flags->rank >= 0) cfg.world.rank = flags->rank;
    if (flags->world_size >= 0) cfg.world.world_size = flags->world_size;
    if (flags->local_rank >= 0) cfg.world.local_rank = flags->local_rank;
    if (flags->local_world_size >= 0) cfg.world.local_world_size = flags->local_world_size;
    if (!flags->master_addr.empty()) cfg.world.master_addr = flags->master_addr;
    if (flags->master_port >= 0) cfg.world.master_port = flags->master_port;
    if (!flags->job_id.empty()) cfg.world.job_id = flags->job_id;
    if (flags->dry_run || !flags->plan_out.empty()) {
      const exec::DryRun dry = exec::dry_run_job(cfg);
      if (!flags->plan_out.empty()) write_plan_out(flags->plan_out, cfg, dry.plan);
      if (flags->dry_run) {
        print_dry_run(*flags, cfg, dry);
        return;
      }
    }
    spdlog::debug("configuration (--config file, then flags):\n{}", merged_config_toml(*flags));
    Progress progress;
    PW_CHECK(flags->log_every >= 1, ConfigError, "--log-every must be >= 1");
    const auto every = flags->log_every;
    const auto policy = std::string(sched::to_string(cfg.nan_policy));
    const bool scheduled_lr = cfg.lr_schedule.warmup_steps > 0 ||
                              cfg.lr_schedule.decay_style != sched::LrDecayStyle::kConstant;
    auto banner = [&cfg](const exec::RunStart& s) {
      const std::string plan = cfg.plan_path.empty() ? std::string(sched::to_string(cfg.schedule))
                                                     : "plan " + cfg.plan_path;
      spdlog::info(
          "run: model '{}' ({}), {}, pp {} x dp {} = {} ranks over {}, {} stages ({} per rank), "
          "{} microbatches x {} samples, {} steps, {} lr {}, dp algorithm {}",
          s.model_name, cfg.model_path, plan, cfg.pp, cfg.dp, s.world_size, s.backend, s.stages,
          s.stages / std::max(1, cfg.pp), cfg.microbatches, cfg.micro_batch_size(), cfg.steps,
          std::string(sched::to_string(cfg.optimizer)), cfg.lr,
          std::string(sched::to_string(cfg.data_parallel.algorithm)));
      if (s.first_step > 0) {
        spdlog::info("resumed from the checkpoint in {} after step {}: training steps {}..{}",
                     cfg.checkpoint_dir, s.first_step, s.first_step + 1, cfg.steps);
      } else if (s.resume_found_none) {
        spdlog::info("--resume: no checkpoint in {} yet, starting at step 1", cfg.checkpoint_dir);
      }
    };
    const auto result = exec::run_training(
        cfg,
        [&, every](const exec::StepLog& s) {
          if (!s.nonfinite.empty()) {
            progress.clear();
            spdlog::warn("{} (--nan-policy {}: {})", s.nonfinite, policy,
                         policy == "warn" ? "trained on" : "optimizer step skipped");
          }
          if ((s.step + 1) % every != 0 && s.step + 1 != s.steps) {
            progress.draw(s.step + 1, s.steps);
            return;
          }
          progress.clear();
          // The recipe's figures only where they carry information (Megatron's log line).
          std::string extra;
          if (scheduled_lr) extra += fmt::format(" lr {:.6g}", s.lr);
          if (s.has_grad_norm) extra += fmt::format(" grad norm {:.6g}", s.grad_norm);
          if (cfg.precision == sched::Precision::kFp16) {
            extra += fmt::format(" loss scale {:g}", s.loss_scale);
          }
          if (s.skipped) extra += " (fp16 overflow: step skipped on every rank)";
          if (s.has_eval_loss) extra += fmt::format(" eval loss {:.6f}", s.eval_loss);
          spdlog::info("step {}/{} loss {:.6f} step {:.1f} ms {:.1f} samples/s{}", s.step + 1,
                       s.steps, s.loss, s.step_ms, s.samples_per_s, extra);
          progress.draw(s.step + 1, s.steps);
        },
        banner);
    progress.clear();
    // Issue 44: no silent fallback; every rank says how it reached each pipeline peer.
    for (const auto& t : result.p2p_transports) {
      spdlog::info("rank {}: point-to-point with {}", result.world_rank, t);
    }
    for (const auto& f : result.written_files) spdlog::info("wrote {}", f);
    if (cfg.dp > 1 && result.world_rank == 0) {
      const auto& d = result.data_parallel;
      const double steps = static_cast<double>(std::max<std::int64_t>(1, d.steps));
      // Human units, and the exact wire bytes (scripts such as bench/dp_algorithms.sh read them).
      spdlog::info(
          "data-parallel ({}): {}/step on the wire ({:.0f} B/step), {}/step payload, {} "
          "collectives, buckets started in backward {} / at reduce {}, comm wait {:.3f} ms/step",
          cfg.effective_zero_stage() > 0
              ? fmt::format("zero-stage {}", cfg.effective_zero_stage())
              : std::string(sched::to_string(cfg.data_parallel.algorithm)),
          graph::human_bytes(static_cast<std::int64_t>(d.wire_bytes / steps)), d.wire_bytes / steps,
          graph::human_bytes(
              static_cast<std::int64_t>(static_cast<double>(d.payload_bytes) / steps)),
          d.collectives, d.buckets_in_backward, d.buckets_at_reduce,
          static_cast<double>(d.exposed_wait_ns) / 1e6 / steps);
    }
  });
}

}  // namespace

PW_REGISTER_COMMAND(setup_run);

}  // namespace pipewright::cli
