#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "io/plan_infer.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/plan_io.hpp"

namespace pipewright::sched {
namespace {

std::size_t idx(std::int32_t i) { return static_cast<std::size_t>(i); }

// Note [What a CSV carries]
// torch's CSV is one line of action cells per rank: no header, so no shape. The reader infers the
// shape from the actions (detail::build_plan): ranks = rows, stages and microbatches = the largest
// named + 1, stage -> rank = the row holding the stage, stage edges = the chain unless SEND/RECV
// name other peers, lowered = any SEND/RECV, forward-only = nothing but forwards. A plan whose own
// shape differs from that inference cannot be written as a CSV and read back the same (issue 36:
// Chimera p=4 was written, then rejected by `validate` with 32 problems, its replicas read as
// separate stages). So the writer runs the reader's inference on the plan's actions and refuses
// the plan, naming the field, instead of writing a file that means another plan. Only the
// schedule name is not carried: it is a label, and a CSV reads back as "custom".

// The rows the reader would see (trailing empty rows are dropped by parse_csv too).
template <typename Plan>
std::vector<std::vector<detail::ParsedCell>> rows_of(const Plan& plan) {
  std::vector<std::vector<detail::ParsedCell>> rows(plan.per_rank.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    rows[r].reserve(plan.per_rank[r].size());
    for (std::size_t i = 0; i < plan.per_rank[r].size(); ++i) {
      rows[r].push_back({plan.per_rank[r][i], i});
    }
  }
  while (!rows.empty() && rows.back().empty()) rows.pop_back();
  return rows;
}

std::string ints(const std::vector<std::int32_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string edges_text(const std::vector<StageEdge>& edges) {
  if (edges.empty()) return "the chain";
  std::string out;
  for (std::size_t i = 0; i < edges.size(); ++i) {
    out += (i ? "," : "") + std::to_string(edges[i].from) + ":" + std::to_string(edges[i].to);
  }
  return out;
}

// Note [What a CSV carries]: "" or why parse_csv(csv_of(plan)) would differ from `plan`.
template <typename Plan>
std::string csv_loss(const Plan& plan, bool lowered) {
  const PlanShape& sh = plan.shape;
  if (sh.has_replicas()) {
    return "its " + std::to_string(sh.stages) + " plan stages replicate " +
           std::to_string(sh.model_stages()) + " model stages (stage_to_model_stage " +
           ints(sh.stage_to_model_stage) +
           "), each replica running part of the microbatches, and a CSV has no field for that";
  }
  AnyPlan back;
  try {
    back = detail::build_plan(rows_of(plan), detail::Declared{}, "the CSV",
                              [](std::size_t r, std::size_t i, std::size_t) {
                                return "the CSV: row " + std::to_string(r) + ", cell " +
                                       std::to_string(i + 1);
                              });
  } catch (const ParseError& e) {
    return std::string("read back, it would be rejected: ") + e.what();
  }
  const PlanShape& got = shape_of(back);
  if (is_lowered(back) != lowered) {
    return lowered ? "it is a lowered plan without SEND/RECV (" + std::to_string(sh.ranks) +
                         " rank), which a CSV reads back as compute-only"
                   : "it is compute-only but holds SEND/RECV actions";
  }
  if (got.ranks != sh.ranks) {
    return "it has " + std::to_string(sh.ranks) + " ranks, but only the first " +
           std::to_string(got.ranks) + " hold actions";
  }
  if (got.stages != sh.stages) {
    return "it has " + std::to_string(sh.stages) + " stages, but its actions name only " +
           std::to_string(got.stages);
  }
  if (got.microbatches != sh.microbatches) {
    return "it has " + std::to_string(sh.microbatches) + " microbatches, but its actions name " +
           "only " + std::to_string(got.microbatches);
  }
  if (got.stage_to_rank != sh.stage_to_rank) {
    return "its stage_to_rank " + ints(sh.stage_to_rank) + " is not where its actions run (" +
           ints(got.stage_to_rank) + ")";
  }
  if (got.stage_edges != sh.stage_edges) {
    return "its stage DAG (" + edges_text(sh.stage_edges) + ") would read back as " +
           edges_text(got.stage_edges) +
           (lowered ? ": a CSV recovers edges from the peers of SEND/RECV, sorted"
                    : ": a compute-only CSV has no SEND/RECV to name the edges (--lower "
                      "writes them)");
  }
  if (got.forward_only != sh.forward_only) {
    return sh.forward_only ? "it is forward-only but holds backward actions"
                           : "it holds only forwards but is not declared forward-only";
  }
  return {};
}

template <typename Plan>
std::string csv_of(const Plan& plan, bool lowered) {
  if (const std::string why = csv_loss(plan, lowered); !why.empty()) {
    throw ConfigError((plan.shape.schedule.empty() ? std::string("plan") : plan.shape.schedule) +
                      ": torch's CSV cannot carry this plan: " + why +
                      "; write it as JSON (--format json), which carries every field");
  }
  std::string out;
  for (const auto& ops : plan.per_rank) {
    const auto cells = to_cells(ops);
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (i > 0) out += ',';
      out += cells[i];
    }
    out += '\n';
  }
  return out;
}

// `schedule --format text|dot` write pictures of a plan, which no reader takes back: say so when
// one is read as a CSV.
std::string picture_hint(std::string_view text) {
  const auto starts = [&text](std::string_view p) { return text.substr(0, p.size()) == p; };
  if (starts("digraph")) {
    return " (this is a Graphviz picture of a plan, `schedule --format dot`; plans are read from "
           "--format csv or json)";
  }
  if (starts("rank ")) {
    return " (this is a text grid of a plan, `schedule --format text`; plans are read from "
           "--format csv or json)";
  }
  return {};
}

}  // namespace

const PlanShape& shape_of(const AnyPlan& plan) noexcept {
  return std::visit([](const auto& p) -> const PlanShape& { return p.shape; }, plan);
}

std::string csv_cannot_carry(const ComputePlan& plan) { return csv_loss(plan, false); }
std::string csv_cannot_carry(const LoweredPlan& plan) { return csv_loss(plan, true); }
std::string to_csv(const ComputePlan& plan) { return csv_of(plan, false); }
std::string to_csv(const LoweredPlan& plan) { return csv_of(plan, true); }

AnyPlan parse_csv(std::string_view text, std::string_view source, const CsvOptions& options) {
  std::vector<std::vector<detail::ParsedCell>> rows;
  std::vector<std::size_t> line_of_row;
  std::size_t line_start = 0;
  std::size_t line_no = 0;
  std::size_t last_nonempty = 0;     // rows up to here are kept (trailing empty lines dropped)
  std::vector<Action> cell_actions;  // the actions of one cell (3 for an OVERLAP_F_B unit)
  bool torch_runtime = false;        // a compute_comms CSV: a lowered plan

  while (line_start < text.size()) {
    std::size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    std::string_view line = text.substr(line_start, line_end - line_start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_no;
    std::vector<detail::ParsedCell> row;
    detail::TorchWaits waits;
    std::size_t cell_start = 0;
    while (cell_start <= line.size()) {
      std::size_t cell_end = line.find(',', cell_start);
      if (cell_end == std::string_view::npos) cell_end = line.size();
      std::string_view cell = line.substr(cell_start, cell_end - cell_start);
      std::size_t offset = cell_start;
      // Drop surrounding blanks and one level of CSV quotes.
      while (!cell.empty() && (cell.front() == ' ' || cell.front() == '\t')) {
        cell.remove_prefix(1);
        ++offset;
      }
      while (!cell.empty() && (cell.back() == ' ' || cell.back() == '\t')) cell.remove_suffix(1);
      if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') {
        cell = cell.substr(1, cell.size() - 2);
        ++offset;
      }
      if (!cell.empty()) {
        if (const auto runtime = detail::parse_torch_runtime(cell)) {
          // Note [torch's runtime actions]: checked, then dropped.
          if (const std::string error = waits.wait(*runtime); !error.empty()) {
            throw ParseError(std::string(source) + ":" + std::to_string(line_no) + ":" +
                             std::to_string(offset + 1) + ": " + std::string(cell) + ": " + error);
          }
          torch_runtime = true;
          cell_start = cell_end + 1;
          continue;
        }
        std::string error;
        std::size_t col = 0;
        cell_actions.clear();
        if (!try_parse_cell(cell, cell_actions, &error, &col)) {
          throw ParseError(std::string(source) + ":" + std::to_string(line_no) + ":" +
                           std::to_string(offset + col) + ": " + error + picture_hint(text));
        }
        for (const Action& a : cell_actions) {
          row.push_back({a, offset + 1});
          waits.action(a);
        }
      }
      cell_start = cell_end + 1;
    }
    rows.push_back(std::move(row));
    line_of_row.push_back(line_no);
    if (!line.empty()) last_nonempty = rows.size();
    line_start = line_end + 1;
  }
  rows.resize(last_nonempty);
  PW_CHECK(!rows.empty(), ParseError, source << ":1:1: empty plan (no rows of actions)");
  detail::Declared declared;
  if (options.stages >= 0) declared.stages = options.stages;
  if (options.microbatches >= 0) declared.microbatches = options.microbatches;
  if (torch_runtime) declared.lowered = true;
  return detail::build_plan(rows, declared, source,
                            [&](std::size_t r, std::size_t, std::size_t col) {
                              return std::string(source) + ":" + std::to_string(line_of_row[r]) +
                                     ":" + std::to_string(col);
                            });
}

PlanLimits plan_limits() {
  PlanLimits limits;
  auto from_env = [](const char* name, std::int64_t& value) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') return;
    std::int64_t v = 0;
    const char* end = text + std::strlen(text);
    auto [ptr, ec] = std::from_chars(text, end, v);
    PW_CHECK(ec == std::errc() && ptr == end && v > 0, ConfigError,
             "environment variable " << name << "='" << text << "' is not a positive integer");
    value = v;
  };
  from_env("PIPEWRIGHT_MAX_STAGES", limits.max_stages);
  from_env("PIPEWRIGHT_MAX_MICROBATCHES", limits.max_microbatches);
  from_env("PIPEWRIGHT_MAX_PLAN_CELLS", limits.max_cells);
  return limits;
}

namespace detail {

AnyPlan build_plan(const std::vector<std::vector<ParsedCell>>& rows, const Declared& declared,
                   std::string_view source, const CellLocator& where) {
  const auto ranks = static_cast<std::int32_t>(rows.size());
  if (declared.ranks) {
    PW_CHECK(*declared.ranks == ranks, ParseError,
             source << ": \"ranks\" is " << *declared.ranks << " but there are " << ranks
                    << " rows of actions");
  }
  bool any_comm = false;
  bool non_chain_peer = false;
  std::int32_t max_stage = -1;
  std::int32_t max_mb = -1;
  const PlanLimits limits = plan_limits();
  auto over = [&](const std::string& at, const char* what, std::int64_t value, std::int64_t limit,
                  const char* var) {
    throw ParseError(at + ": " + what + " " + std::to_string(value) + " is beyond the limit of " +
                     std::to_string(limit) + " " + what + (what[0] == 's' ? "s" : "es") + " (set " +
                     var + " to raise it; docs/reliability.md)");
  };
  if (declared.stages && *declared.stages > limits.max_stages)
    over(std::string(source), "stage", *declared.stages, limits.max_stages,
         "PIPEWRIGHT_MAX_STAGES");
  if (declared.microbatches && *declared.microbatches > limits.max_microbatches)
    over(std::string(source), "microbatch", *declared.microbatches, limits.max_microbatches,
         "PIPEWRIGHT_MAX_MICROBATCHES");
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t i = 0; i < rows[r].size(); ++i) {
      const ParsedCell& c = rows[r][i];
      const Action& a = c.action;
      for (std::int32_t s : {a.stage, is_comm(a.kind) ? a.peer_stage : -1}) {
        if (s >= limits.max_stages)
          over(where(r, i, c.pos), "stage", s, limits.max_stages, "PIPEWRIGHT_MAX_STAGES");
      }
      if (a.microbatch >= limits.max_microbatches)
        over(where(r, i, c.pos), "microbatch", a.microbatch, limits.max_microbatches,
             "PIPEWRIGHT_MAX_MICROBATCHES");
      max_stage = std::max(max_stage, a.stage);
      max_mb = std::max(max_mb, a.microbatch);
      if (is_comm(a.kind)) {
        any_comm = true;
        max_stage = std::max(max_stage, a.peer_stage);
        if (a.peer_stage != Action::default_peer(a.stage, a.kind)) non_chain_peer = true;
        if (declared.lowered && !*declared.lowered) {
          throw ParseError(where(r, i, c.pos) + ": " + to_string(a) +
                           " is a communication action in a plan declared \"compute\"");
        }
      }
      if (is_comm(a.kind) && a.peer_stage < 0) {
        throw ParseError(where(r, i, c.pos) + ": " + to_string(a) + ": stage " +
                         std::to_string(a.stage) +
                         " has no neighbour on that side; name the peer with '@<stage>'");
      }
      if (declared.stages) {
        const std::int32_t n = *declared.stages;
        const std::int32_t bad = a.stage >= n                           ? a.stage
                                 : is_comm(a.kind) && a.peer_stage >= n ? a.peer_stage
                                                                        : -1;
        if (bad >= 0) {
          throw ParseError(where(r, i, c.pos) + ": " + to_string(a) + ": stage " +
                           std::to_string(bad) + " is out of range [0, " + std::to_string(n) + ")");
        }
      }
      if (declared.microbatches && has_microbatch(a.kind) &&
          a.microbatch >= *declared.microbatches) {
        throw ParseError(where(r, i, c.pos) + ": " + to_string(a) + ": microbatch " +
                         std::to_string(a.microbatch) + " is out of range [0, " +
                         std::to_string(*declared.microbatches) + ")");
      }
    }
  }
  PW_CHECK(max_stage >= 0, ParseError, source << ": the plan has no actions");
  PlanShape shape;
  shape.ranks = ranks;
  shape.stages = declared.stages ? *declared.stages : max_stage + 1;
  shape.microbatches = declared.microbatches ? *declared.microbatches : std::max(max_mb + 1, 1);
  PW_CHECK(static_cast<std::int64_t>(shape.stages) * shape.microbatches <= limits.max_cells,
           ParseError,
           source << ": " << shape.stages << " stages x " << shape.microbatches
                  << " microbatches is beyond the limit of " << limits.max_cells
                  << " (stage, microbatch) pairs (set PIPEWRIGHT_MAX_PLAN_CELLS to raise it; "
                     "docs/reliability.md)");
  shape.schedule = declared.schedule;
  if (declared.stage_to_rank) {
    shape.stage_to_rank = *declared.stage_to_rank;
  } else {
    shape.stage_to_rank.assign(idx(shape.stages), -1);
    for (std::int32_t r = 0; r < ranks; ++r) {
      for (std::size_t i = 0; i < rows[idx(r)].size(); ++i) {
        const ParsedCell& c = rows[idx(r)][i];
        auto& owner = shape.stage_to_rank[idx(c.action.stage)];
        if (owner >= 0 && owner != r) {
          throw ParseError(where(idx(r), i, c.pos) + ": stage " + std::to_string(c.action.stage) +
                           " appears on rows " + std::to_string(owner) + " and " +
                           std::to_string(r) + " (a stage lives on exactly one rank)");
        }
        owner = r;
      }
    }
    for (std::size_t r = 0; r < rows.size(); ++r) {
      for (std::size_t i = 0; i < rows[r].size(); ++i) {
        const ParsedCell& c = rows[r][i];
        if (is_comm(c.action.kind) && shape.stage_to_rank[idx(c.action.peer_stage)] < 0) {
          throw ParseError(where(r, i, c.pos) + ": " + to_string(c.action) + ": peer stage " +
                           std::to_string(c.action.peer_stage) + " appears in no row");
        }
      }
    }
    for (std::int32_t s = 0; s < shape.stages; ++s) {
      PW_CHECK(shape.stage_to_rank[idx(s)] >= 0, ParseError,
               source << ": stage " << s << " appears in no row (stages are 0.." << shape.stages - 1
                      << ")");
    }
  }
  if (declared.stage_edges) {
    shape.stage_edges = *declared.stage_edges;
  } else if (non_chain_peer) {
    std::set<std::pair<std::int32_t, std::int32_t>> edges;
    for (const auto& row : rows) {
      for (const auto& c : row) {
        const Action& a = c.action;
        if (a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvB) {
          edges.insert({a.stage, a.peer_stage});
        } else if (a.kind == ActionKind::kRecvF || a.kind == ActionKind::kSendB) {
          edges.insert({a.peer_stage, a.stage});
        }
      }
    }
    for (const auto& [from, to] : edges) shape.stage_edges.push_back({from, to});
  }
  if (declared.stage_to_model_stage) shape.stage_to_model_stage = *declared.stage_to_model_stage;
  if (declared.forward_only) {
    shape.forward_only = *declared.forward_only;
  } else {
    // A plan with forwards and nothing that computes or moves a gradient is an inference plan.
    shape.forward_only = std::all_of(rows.begin(), rows.end(), [](const auto& row) {
      return std::all_of(row.begin(), row.end(), [](const ParsedCell& c) {
        const ActionKind k = c.action.kind;
        return k == ActionKind::kForward || k == ActionKind::kSendF || k == ActionKind::kRecvF;
      });
    });
  }
  const bool lowered = declared.lowered ? *declared.lowered : any_comm;
  std::vector<std::vector<Action>> per_rank(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    per_rank[r].reserve(rows[r].size());
    for (const auto& c : rows[r]) per_rank[r].push_back(c.action);
  }
  if (lowered) return LoweredPlan{std::move(shape), std::move(per_rank)};
  return ComputePlan{std::move(shape), std::move(per_rank)};
}

}  // namespace detail
}  // namespace pipewright::sched
