// Private: builds a plan from parsed rows of actions, inferring what the file did not declare
// (shared by the CSV and JSON readers).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/sched/plan_io.hpp"

namespace pipewright::sched::detail {

// A parsed action and where it stood in its file, in the reader's own terms (CSV: the column;
// JSON: the byte offset). The position is turned into text only when an error names the cell
// (CellLocator), so reading stays linear in the file's size (Note [Lazy error positions]).
struct ParsedCell {
  Action action;
  std::size_t pos = 0;
};

// "file:line:col" (+ ": /actions/r/i" for JSON) of cell `index` of row `row`, for error messages.
using CellLocator = std::function<std::string(std::size_t row, std::size_t index, std::size_t pos)>;

struct Declared {
  std::optional<std::int32_t> ranks;
  std::optional<std::int32_t> stages;
  std::optional<std::int32_t> microbatches;
  std::optional<std::vector<std::int32_t>> stage_to_rank;
  std::optional<std::vector<StageEdge>> stage_edges;
  std::optional<bool> lowered;
  std::optional<std::vector<std::int32_t>> stage_to_model_stage;
  std::optional<bool> forward_only;  // unset: inferred (no B / I / W / SEND_B / RECV_B / ...)
  std::string schedule = "custom";
};

// Throws ParseError naming the cell (or the source) for out-of-range stages and microbatches,
// SEND/RECV in a plan declared compute-only, a stage found on two rows, and peers on no row.
AnyPlan build_plan(const std::vector<std::vector<ParsedCell>>& rows, const Declared& declared,
                   std::string_view source, const CellLocator& where);

}  // namespace pipewright::sched::detail
