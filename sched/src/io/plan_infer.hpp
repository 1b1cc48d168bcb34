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

using Declared = DeclaredShape;

// Throws ParseError naming the cell (or the source) for out-of-range stages and microbatches,
// SEND/RECV in a plan declared compute-only, a stage found on two rows, and peers on no row.
// Note [torch's runtime actions]: the actions of torch's compute_comms CSV that pipewright's plan
// does not keep (plan_io.hpp, to_torch_comms_csv): read, checked against the row, dropped.
// (UNSHARD / RESHARD are plan actions since issue 43: kept, Note [UNSHARD and RESHARD].)
enum class TorchRuntimeKind : std::uint8_t { kWaitSendF, kWaitSendB, kWaitReduceGrad };
struct TorchRuntimeAction {
  TorchRuntimeKind kind = TorchRuntimeKind::kWaitSendF;
  std::int32_t stage = 0;
  std::int32_t microbatch = -1;  // the waits for sends only
};
// The runtime action `cell` spells ("1WAIT_SEND_F3", "0WAIT_REDUCE_GRAD"), or nullopt for anything
// else.
[[nodiscard]] std::optional<TorchRuntimeAction> parse_torch_runtime(std::string_view cell);

// Checks the waits of one row of a compute_comms CSV as torch's loader does: every WAIT_SEND_x
// retires an earlier SEND_x of its stage and microbatch, every WAIT_REDUCE_GRAD an earlier
// REDUCE_GRAD of its stage. Feed it the row's cells in order; wait() returns "" or the error.
class TorchWaits {
 public:
  void action(const Action& a);
  [[nodiscard]] std::string wait(const TorchRuntimeAction& w);

 private:
  std::vector<Action> pending_;  // sends and REDUCE_GRADs not yet retired
};

AnyPlan build_plan(const std::vector<std::vector<ParsedCell>>& rows, const Declared& declared,
                   std::string_view source, const CellLocator& where);

}  // namespace pipewright::sched::detail
