// Slurm hostlist expressions ("node[01-04,07]", "gpu[1-2]-ib,login1", "rack[1-2]-n[1-3]")
// expanded to host names, and Slurm's compressed task counts ("2(x3),1").
//
// It lives in graph/ (the lowest module) because both the launcher (tools/, without the
// executor) and the executor's world resolution (exec/) read Slurm's variables.
#pragma once

#include <string>
#include <vector>

namespace pipewright::graph {

// Expands a hostlist expression in Slurm's order: comma-separated items (commas inside brackets
// belong to the bracket); each item is text with zero or more bracket groups of comma-separated
// numbers and ranges ("01-04": zero-padded to the width of the lower bound, as Slurm does);
// several groups give every combination, the first group varying slowest. `what` names the
// source in errors ("SLURM_JOB_NODELIST"). Throws ConfigError for an empty expression or item,
// unbalanced or nested brackets, a range whose bounds are not numbers or decrease, or more than
// 1048576 hosts.
[[nodiscard]] std::vector<std::string> expand_hostlist(const std::string& expr,
                                                       const std::string& what);

// Expands Slurm's task counts per node ("2(x3),1" -> {2, 2, 2, 1}); ConfigError naming `what`
// for malformed text.
[[nodiscard]] std::vector<int> expand_task_counts(const std::string& text, const std::string& what);

}  // namespace pipewright::graph
