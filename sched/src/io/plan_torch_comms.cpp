// torch's compute_comms CSV: its runtime actions read (parse_csv) and written
// (to_torch_comms_csv), Note [torch's runtime actions] in plan_infer.hpp; and assemble_plan, the
// shape inference of the CSV reader for plans read from other formats (Chakra traces).
#include <algorithm>
#include <charconv>
#include <string>
#include <utility>
#include <vector>

#include "io/plan_infer.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/plan_io.hpp"

namespace pipewright::sched {
namespace detail {
namespace {

struct RuntimeName {
  std::string_view text;
  TorchRuntimeKind kind;
  bool microbatch;
};
// Longest first where one name is a prefix of another (none here, but keep torch's regex order).
constexpr RuntimeName kRuntimeNames[] = {
    {"WAIT_REDUCE_GRAD", TorchRuntimeKind::kWaitReduceGrad, false},
    {"WAIT_SEND_F", TorchRuntimeKind::kWaitSendF, true},
    {"WAIT_SEND_B", TorchRuntimeKind::kWaitSendB, true},
};

bool parse_int(std::string_view text, std::int32_t& out) {
  if (text.empty()) return false;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size() && out >= 0;
}

// The send a wait retires, as the Action the row holds (the peer is not in torch's wait).
bool retires(const TorchRuntimeAction& w, const Action& a) {
  switch (w.kind) {
    case TorchRuntimeKind::kWaitSendF:
      return a.kind == ActionKind::kSendF && a.stage == w.stage && a.microbatch == w.microbatch;
    case TorchRuntimeKind::kWaitSendB:
      return a.kind == ActionKind::kSendB && a.stage == w.stage && a.microbatch == w.microbatch;
    case TorchRuntimeKind::kWaitReduceGrad:
      return a.kind == ActionKind::kReduceGrad && a.stage == w.stage;
    default:
      return false;
  }
}

}  // namespace

std::optional<TorchRuntimeAction> parse_torch_runtime(std::string_view cell) {
  std::size_t digits = 0;
  while (digits < cell.size() && cell[digits] >= '0' && cell[digits] <= '9') ++digits;
  TorchRuntimeAction out;
  if (!parse_int(cell.substr(0, digits), out.stage)) return std::nullopt;
  const std::string_view rest = cell.substr(digits);
  for (const RuntimeName& n : kRuntimeNames) {
    if (rest.substr(0, n.text.size()) != n.text) continue;
    const std::string_view tail = rest.substr(n.text.size());
    out.kind = n.kind;
    if (!n.microbatch) return tail.empty() ? std::optional(out) : std::nullopt;
    if (!parse_int(tail, out.microbatch)) return std::nullopt;
    return out;
  }
  return std::nullopt;
}

void TorchWaits::action(const Action& a) {
  if (is_send(a.kind) || a.kind == ActionKind::kReduceGrad) pending_.push_back(a);
}

std::string TorchWaits::wait(const TorchRuntimeAction& w) {
  const auto it = std::find_if(pending_.begin(), pending_.end(),
                               [&](const Action& a) { return retires(w, a); });
  if (it != pending_.end()) {
    pending_.erase(it);
    return {};
  }
  if (w.kind == TorchRuntimeKind::kWaitReduceGrad) {
    return "no REDUCE_GRAD of stage " + std::to_string(w.stage) +
           " before it on this row for it to wait for";
  }
  return std::string("no ") + (w.kind == TorchRuntimeKind::kWaitSendF ? "SEND_F" : "SEND_B") +
         " of stage " + std::to_string(w.stage) + ", microbatch " + std::to_string(w.microbatch) +
         " before it on this row for it to wait for";
}

}  // namespace detail

AnyPlan assemble_plan(const std::vector<std::vector<Action>>& per_rank,
                      const DeclaredShape& declared, std::string_view source,
                      const std::function<std::string(std::size_t, std::size_t)>& where) {
  std::vector<std::vector<detail::ParsedCell>> rows(per_rank.size());
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    for (std::size_t i = 0; i < per_rank[r].size(); ++i) rows[r].push_back({per_rank[r][i], i});
  }
  return detail::build_plan(rows, declared, source,
                            [&](std::size_t r, std::size_t i, std::size_t) { return where(r, i); });
}

std::string torch_comms_cannot_carry(const LoweredPlan& plan) {
  if (std::string why = csv_cannot_carry(plan); !why.empty()) return why;
  for (const auto& ops : plan.per_rank) {
    for (const Action& a : ops) {
      if (a.kind == ActionKind::kOptimizerStep) {
        return "it holds " + to_string(a) +
               ", and torch's runtime has no optimizer action (the training loop steps the "
               "optimizer; leave out --optimizer-step)";
      }
      if (is_comm(a.kind) && a.peer_stage != Action::default_peer(a.stage, a.kind)) {
        return "it holds " + to_string(a) +
               ", a message to a stage that is not a chain neighbour, which torch's actions "
               "cannot name";
      }
    }
  }
  return {};
}

std::string to_torch_comms_csv(const LoweredPlan& plan) {
  if (const std::string why = torch_comms_cannot_carry(plan); !why.empty()) {
    throw ConfigError((plan.shape.schedule.empty() ? std::string("plan") : plan.shape.schedule) +
                      ": torch's compute_comms CSV cannot carry this plan: " + why +
                      "; write it as JSON (--format json), which carries every field");
  }
  std::string out;
  for (const auto& ops : plan.per_rank) {
    std::vector<std::string> cells;
    // torch's _add_wait_send: the sends not yet waited for, in send order.
    std::vector<Action> pending;
    const auto wait_cell = [](const Action& send) {
      return std::to_string(send.stage) +
             (send.kind == ActionKind::kSendF ? "WAIT_SEND_F" : "WAIT_SEND_B") +
             std::to_string(send.microbatch);
    };
    std::size_t i = 0;
    while (i < ops.size()) {
      // One cell: an action, or an OVERLAP_F_B marker with its two sub-actions.
      const std::size_t n = is_overlap(ops[i].kind)
                                ? std::min<std::size_t>(1 + kOverlapSubActions, ops.size() - i)
                                : 1;
      const std::vector<Action> unit(ops.begin() + static_cast<std::ptrdiff_t>(i),
                                     ops.begin() + static_cast<std::ptrdiff_t>(i + n));
      cells.push_back(to_cells(unit).front());
      const Action& a = unit.front();
      if (is_send(a.kind)) pending.push_back(a);
      if (a.kind == ActionKind::kReduceGrad) {
        cells.push_back(std::to_string(a.stage) + "WAIT_REDUCE_GRAD");
      }
      for (const Action& part : unit) {
        if (part.kind != ActionKind::kFullBackward && part.kind != ActionKind::kBackwardInput) {
          continue;
        }
        const auto it = std::find_if(pending.begin(), pending.end(), [&](const Action& s) {
          return s.kind == ActionKind::kSendF && s.stage == part.stage &&
                 s.microbatch == part.microbatch;
        });
        if (it != pending.end()) {
          cells.push_back(wait_cell(*it));
          pending.erase(it);
        }
      }
      i += n;
    }
    for (const Action& s : pending) cells.push_back(wait_cell(s));
    for (std::size_t c = 0; c < cells.size(); ++c) out += (c ? "," : "") + cells[c];
    out += '\n';
  }
  return out;
}

}  // namespace pipewright::sched
