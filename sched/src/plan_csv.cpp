#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "plan_infer.hpp"

namespace pipewright::sched {
namespace {

std::size_t idx(std::int32_t i) { return static_cast<std::size_t>(i); }

template <typename Plan>
std::string csv_of(const Plan& plan) {
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

}  // namespace

const PlanShape& shape_of(const AnyPlan& plan) noexcept {
  return std::visit([](const auto& p) -> const PlanShape& { return p.shape; }, plan);
}

std::string to_csv(const ComputePlan& plan) { return csv_of(plan); }
std::string to_csv(const LoweredPlan& plan) { return csv_of(plan); }

AnyPlan parse_csv(std::string_view text, std::string_view source, const CsvOptions& options) {
  std::vector<std::vector<detail::ParsedCell>> rows;
  std::vector<std::size_t> line_of_row;
  std::size_t line_start = 0;
  std::size_t line_no = 0;
  std::size_t last_nonempty = 0;     // rows up to here are kept (trailing empty lines dropped)
  std::vector<Action> cell_actions;  // the actions of one cell (3 for an OVERLAP_F_B unit)
  while (line_start < text.size()) {
    std::size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    std::string_view line = text.substr(line_start, line_end - line_start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_no;
    std::vector<detail::ParsedCell> row;
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
        std::string error;
        std::size_t col = 0;
        cell_actions.clear();
        if (!try_parse_cell(cell, cell_actions, &error, &col)) {
          throw ParseError(std::string(source) + ":" + std::to_string(line_no) + ":" +
                           std::to_string(offset + col) + ": " + error);
        }
        for (const Action& a : cell_actions) row.push_back({a, offset + 1});
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
