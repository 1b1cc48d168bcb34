// Private: builds a plan from parsed rows of actions, inferring what the file did not declare
// (shared by the CSV and JSON readers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/sched/plan_io.hpp"

namespace pipewright::sched::detail {

struct ParsedCell {
  Action action;
  std::string where;  // "file:line:col" (+ " /actions/r/i" for JSON), used in error messages
};

struct Declared {
  std::optional<std::int32_t> ranks;
  std::optional<std::int32_t> stages;
  std::optional<std::int32_t> microbatches;
  std::optional<std::vector<std::int32_t>> stage_to_rank;
  std::optional<std::vector<StageEdge>> stage_edges;
  std::optional<bool> lowered;
  std::string schedule = "custom";
};

// Throws ParseError naming the cell (or the source) for out-of-range stages and microbatches,
// SEND/RECV in a plan declared compute-only, a stage found on two rows, and peers on no row.
AnyPlan build_plan(const std::vector<std::vector<ParsedCell>>& rows, const Declared& declared,
                   std::string_view source);

}  // namespace pipewright::sched::detail
