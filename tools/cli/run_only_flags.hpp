// The flags only `pipewright run` takes, and what each says that an offline command has no use
// for (issue 36, item 3). Every offline subcommand of the front end (schedule, validate, simulate,
// report, compare, search, partition, render, model, transfer-profile) answers one of them with
// "--dataset is a run flag; simulate needs no data" (exit 2) instead of a parse error about
// something else ("plan: File does not exist: sonnets", when --dataset's value was taken for the
// plan). One table, checked by every offline command (add_run_only_guards, main.cpp), and kept
// complete by `run` itself: check_run_flags_classified (cmd_run.cpp) fails every test of `run`
// when one of its flags is in no table.
#pragma once

#include <string_view>

namespace CLI {
class App;
}

namespace pipewright::cli {

struct RunOnlyFlag {
  std::string_view name;
  std::string_view why;  // "<command> <why>": what the offline command does not do
};

inline constexpr std::string_view kNeedsNoData = "needs no data";
inline constexpr std::string_view kStartsNoProcesses = "starts no processes";
inline constexpr std::string_view kTrainsNothing = "trains nothing";

inline constexpr RunOnlyFlag kRunOnlyFlags[] = {
    {"--config", "reads no --config file"},
    {"--loss", kTrainsNothing},
    {"--data-x", kNeedsNoData},
    {"--data-y", kNeedsNoData},
    {"--dataset", kNeedsNoData},
    {"--no-shuffle", kNeedsNoData},
    {"--prefetch", kNeedsNoData},
    {"--seed", kTrainsNothing},
    {"--init", kTrainsNothing},
    {"--save", kTrainsNothing},
    {"--outputs", kTrainsNothing},
    {"--backend", kStartsNoProcesses},
    {"--device-map", kStartsNoProcesses},
    {"--no-prepost-receives", kStartsNoProcesses},
    {"--no-shm-collectives", kStartsNoProcesses},
    {"--no-shm-p2p", kStartsNoProcesses},
    {"--timeout", kStartsNoProcesses},
    {"--log-every", kTrainsNothing},
    {"--rank", kStartsNoProcesses},
    {"--world-size", kStartsNoProcesses},
    {"--local-rank", kStartsNoProcesses},
    {"--local-world-size", kStartsNoProcesses},
    {"--master-addr", kStartsNoProcesses},
    {"--master-port", kStartsNoProcesses},
    {"--job-id", kStartsNoProcesses},
    {"--check-replicas", kTrainsNothing},
    {"--checkpoint-dir", kTrainsNothing},
    {"--checkpoint-every", kTrainsNothing},
    {"--resume", kTrainsNothing},
    {"--save-replicas", kTrainsNothing},
    {"--dry-run", kTrainsNothing},
    {"--initial-loss-scale", kTrainsNothing},
    {"--min-loss-scale", kTrainsNothing},
    {"--loss-scale-window", kTrainsNothing},
    {"--eval-every", kTrainsNothing},
    {"--eval-batches", kTrainsNothing},
    {"--eval-data-x", kNeedsNoData},
    {"--eval-data-y", kNeedsNoData},
    {"--eval-dataset", kNeedsNoData},
    {"--metrics", kTrainsNothing},
};

// Flags of `run` that offline commands have too, under the same name (job flags aside: those are
// add_job_flags', shared by run, simulate, report and compare): not run-only.
inline constexpr std::string_view kSharedRunFlags[] = {
    "--help", "--output", "--trace", "--profile", "--warmup-steps", "--plan-out",
};

// Adds to `cmd` and to each of its subcommands, for every run-only flag it does not define
// itself, a hidden option (with or without a value) whose use is a ConfigError naming the flag,
// `run` and what the command does not do. Call after the command's own options are added.
void add_run_only_guards(CLI::App& cmd);

}  // namespace pipewright::cli
