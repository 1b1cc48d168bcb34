// `pipewright run --config FILE`: a run's flags from a file (docs/executor.md, "Config files").
//
// The file is TOML (toml++), or JSON when its name ends in .json or its text starts with '{' (read
// through the one strict reader, pipewright/graph/json_reader.hpp). Keys sit in torchtitan-style
// sections ([job] model = "m.json", [parallelism] pp = 2, ...); for compatibility, top-level keys
// may also be the long flag names ("batch-size" or batch_size). One table (run_config.cpp,
// kKeys) maps every key to its flag; the file's values are then parsed by the same CLI11 options
// as the command line, so they are checked by the same code, and flags given on the command line
// win over the file.
#pragma once

#include <cstdint>
#include <string>

#include "pipewright/exec/run.hpp"

namespace CLI {
class App;
}

namespace pipewright::cli {

// Everything `run`'s flags fill: the RunConfig plus the flags that are not part of it.
struct RunFlags {
  exec::RunConfig config;
  bool no_shuffle = false;
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;
  int local_world_size = -1;
  std::string master_addr;
  int master_port = -1;
  std::string job_id;
  std::int64_t log_every = 1;
  bool dry_run = false;
  std::string plan_out;
};

// Sets every option of `run` (the subcommand `cmd`) that the command line did not give from the
// config file at `path`. Call it after the command line is parsed and before the other options'
// callbacks run (from --config's own callback). Throws InputError when the file cannot be read
// and ConfigError "FILE:LINE:COLUMN: section.key: what is wrong" for invalid TOML, unknown
// sections and keys, values of the wrong type, keys set twice and values the flag rejects (JSON:
// "FILE:LINE:COLUMN: at /section/key: ...").
void apply_config_file(CLI::App& cmd, const std::string& path);

// Throws std::logic_error naming the flag if an option of `cmd` (other than --help and --config)
// has no key in the file format: called when `run` is set up, so a new flag without a key fails
// every test of `run`.
void check_config_covers(const CLI::App& cmd);

// `flags` as a config file (TOML, every section and key, defaults filled; keys that are not set,
// such as a rank taken from the environment, as comments): what the file and the command line
// combined into, printed by `run --dry-run`.
[[nodiscard]] std::string merged_config_toml(const RunFlags& flags);

}  // namespace pipewright::cli
