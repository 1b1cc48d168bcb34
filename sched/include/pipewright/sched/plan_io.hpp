// Reading and writing plans: torch's CSV, pipewright's JSON, a text grid and Graphviz dot.
//
// CSV (torch.distributed.pipelining's `_dump_csv` / `_load_csv`): one line per rank, each cell an
// action string ("0F0", "1SEND_F3", "2REDUCE_GRAD"), comma-separated, no header. Empty cells
// (torch writes them for bubbles) are skipped; "\r\n" line ends are accepted; trailing empty lines
// are ignored. A CSV carries no shape, so it is inferred: ranks = rows, stages = max stage + 1,
// microbatches = max microbatch + 1, stage -> rank from the row holding the stage (a stage on two
// rows is an error). Stage edges: the chain, unless communication actions name a non-chain peer
// ("@peer"), then the edges those actions name. A CSV with any SEND/RECV is a lowered plan.
//
// JSON ("pipewright-plan" version 1; docs/plan-format.md is the full schema):
//   {"format": "pipewright-plan", "version": 1, "kind": "compute" | "lowered",
//    "schedule": "1F1B", "ranks": 2, "stages": 2, "microbatches": 4,
//    "stage_to_rank": [0, 1], "stage_edges": [[0, 1]],
//    "actions": [["0F0", "0F1", ...], ["1F0", ...]]}
// Only "format", "version" and "actions" are required; missing fields are inferred as for CSV.
//
// Every reader throws ParseError whose message starts with "<source>:<line>:<column>:" (and names
// the JSON pointer for JSON) when the text is malformed, an action does not parse, or a stage /
// microbatch is out of the declared range. Whether the plan is *valid* is validate()'s business.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {

using AnyPlan = std::variant<ComputePlan, LoweredPlan>;

[[nodiscard]] inline bool is_lowered(const AnyPlan& plan) noexcept {
  return std::holds_alternative<LoweredPlan>(plan);
}
[[nodiscard]] const PlanShape& shape_of(const AnyPlan& plan) noexcept;

// Sizes a plan file may imply (issue 20, item 7): a stage or microbatch index makes the loader,
// the validator and the simulator allocate per stage and per (stage, microbatch), so an 18-byte
// CSV "0F0,0F10000000" once took 5.5 GB. Checked while parsing, before any such allocation, and
// reported with the file, line and column, the limit and how to raise it. The defaults are far
// above any real pipeline; each can be raised with an environment variable
// (docs/reliability.md, "Input limits").
struct PlanLimits {
  std::int64_t max_stages = std::int64_t{1} << 16;        // PIPEWRIGHT_MAX_STAGES
  std::int64_t max_microbatches = std::int64_t{1} << 20;  // PIPEWRIGHT_MAX_MICROBATCHES
  std::int64_t max_cells = std::int64_t{1}
                           << 22;  // stages x microbatches, PIPEWRIGHT_MAX_PLAN_CELLS
};
// The defaults above, each replaced by its environment variable when set (a positive integer;
// anything else is a ConfigError naming the variable).
[[nodiscard]] PlanLimits plan_limits();

// Declared sizes for a CSV (which has none); -1 = infer. Stages / microbatches beyond a declared
// size are parse errors with line and column.
struct CsvOptions {
  int stages = -1;
  int microbatches = -1;
};

// Why torch's CSV cannot carry `plan`, or "" when it can: parse_csv(to_csv(plan)) would not be
// the same plan (Note [What a CSV carries]). A CSV has no shape, so the reader infers one; this
// runs that inference on the plan's actions and names the first field it would get wrong:
// Chimera's replicas (stage_to_model_stage), the stage DAG of a compute-only plan, a lowered plan
// with no SEND/RECV (one rank), declared sizes beyond what the actions name. The schedule name is
// a label, not part of the plan: a CSV reads back as "custom".
[[nodiscard]] std::string csv_cannot_carry(const ComputePlan& plan);
[[nodiscard]] std::string csv_cannot_carry(const LoweredPlan& plan);

// Throw ConfigError (exit 2) when csv_cannot_carry(plan) is not empty, naming the plan's schedule,
// the reason and JSON, the format that carries every field: a plan written is a plan read back.
[[nodiscard]] std::string to_csv(const ComputePlan& plan);
[[nodiscard]] std::string to_csv(const LoweredPlan& plan);
[[nodiscard]] AnyPlan parse_csv(std::string_view text, std::string_view source_name,
                                const CsvOptions& options = {});

// torch's compute_comms CSV (`_PipelineScheduleRuntime._dump_csv(f, format="compute_comms")` and
// `_load_csv(f, format="compute_comms")`, docs/interop.md): the lowered CSV above plus torch's
// runtime actions, of which pipewright's plan keeps some:
//   sWAIT_SEND_Fm / sWAIT_SEND_Bm  retire a send (pipewright's sends complete on their own):
//                    checked, dropped;
//   sREDUCE_GRAD, sWAIT_REDUCE_GRAD  the reduction and its wait (REDUCE_GRAD is kept);
//   sUNSHARD / sRESHARD  FSDP parameter residency: kept as plan actions where they stand (Note
//                    [UNSHARD and RESHARD] in action.hpp; ZeRO-3 runs them as written).
// parse_csv reads them (any CSV reader then takes torch's file): each wait must follow the send
// or REDUCE_GRAD it retires on its row (else ParseError at its line and column), and a file with
// any of them is a lowered plan. to_torch_comms_csv writes what torch's loader requires: each
// REDUCE_GRAD followed by its WAIT_REDUCE_GRAD, and one WAIT_SEND per send where torch's own
// lowering (_add_wait_send) puts it: a SEND_F's wait after the local backward of the same stage
// and microbatch, the other waits at the end of the row in send order; UNSHARD / RESHARD where
// the plan has them.
// "" or why torch's compute_comms CSV cannot carry `plan` (csv_cannot_carry's reasons, OPTIM,
// which torch has no action for, and "@peer" stage edges, which torch's actions cannot name).
[[nodiscard]] std::string torch_comms_cannot_carry(const LoweredPlan& plan);
// Throws ConfigError (exit 2) naming the reason when torch_comms_cannot_carry(plan) is not empty.
[[nodiscard]] std::string to_torch_comms_csv(const LoweredPlan& plan);

// What a plan file declares about its shape; unset fields are inferred from the actions as for a
// CSV (the JSON reader fills every field its file has).
struct DeclaredShape {
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

// A plan from per-rank action lists read from another format (Chakra traces): the shape as
// declared, the rest inferred as for a CSV. Throws ParseError for out-of-range stages and
// microbatches, a stage on two ranks and the like, naming the action by where(rank, index).
[[nodiscard]] AnyPlan assemble_plan(
    const std::vector<std::vector<Action>>& per_rank, const DeclaredShape& declared,
    std::string_view source,
    const std::function<std::string(std::size_t rank, std::size_t index)>& where);

// Deterministic: fixed key order, one rank's actions per line, trailing newline.
[[nodiscard]] std::string to_json(const ComputePlan& plan);
[[nodiscard]] std::string to_json(const LoweredPlan& plan);
[[nodiscard]] AnyPlan parse_json(std::string_view text, std::string_view source_name);

// Reads a plan file: ".json" as JSON, anything else as CSV. Throws InputError if the file cannot
// be read, ParseError as above.
[[nodiscard]] AnyPlan load_plan(const std::string& path, const CsvOptions& options = {});

// Rank x step grid for terminals: every action takes one step; a rank idles ('.') while its next
// action waits for an input (compute plans: the producing forward / consuming backward of another
// rank in an earlier step; lowered plans: the SEND of a RECV in an earlier step). A plan that
// cannot finish ends with a line naming the stuck ranks.
[[nodiscard]] std::string to_text_grid(const ComputePlan& plan);
[[nodiscard]] std::string to_text_grid(const LoweredPlan& plan);

// Graphviz dot of the action dependency DAG: one node per action, one cluster per rank, program
// order edges (dotted), data edges between stages (compute plans) and p2p edges SEND -> RECV
// (lowered plans, bold blue).
[[nodiscard]] std::string to_dot(const ComputePlan& plan);
[[nodiscard]] std::string to_dot(const LoweredPlan& plan);

}  // namespace pipewright::sched
