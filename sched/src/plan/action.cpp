#include "pipewright/sched/action.hpp"

#include <array>
#include <cctype>
#include <limits>
#include <ostream>
#include <tuple>
#include <utility>

#include "pipewright/graph/error.hpp"

namespace pipewright::sched {
namespace {

struct KindName {
  ActionKind kind;
  std::string_view name;
};
// Longest names first so that prefix matching picks "REDUCE_GRAD" before "R..." and "F".
constexpr std::array<KindName, 13> kKindNames = {{
    {ActionKind::kOverlapFB, "OVERLAP_F_B"},
    {ActionKind::kReduceGrad, "REDUCE_GRAD"},
    {ActionKind::kUnshard, "UNSHARD"},
    {ActionKind::kReshard, "RESHARD"},
    {ActionKind::kSendF, "SEND_F"},
    {ActionKind::kRecvF, "RECV_F"},
    {ActionKind::kSendB, "SEND_B"},
    {ActionKind::kRecvB, "RECV_B"},
    {ActionKind::kOptimizerStep, "OPTIM"},
    {ActionKind::kForward, "F"},
    {ActionKind::kFullBackward, "B"},
    {ActionKind::kBackwardInput, "I"},
    {ActionKind::kBackwardWeight, "W"},
}};

}  // namespace

std::string_view to_string(ActionKind kind) noexcept {
  for (const auto& kn : kKindNames) {
    if (kn.kind == kind) return kn.name;
  }
  return "?";
}

std::int32_t Action::default_peer(std::int32_t stage, ActionKind kind) noexcept {
  switch (kind) {
    case ActionKind::kSendF:
    case ActionKind::kRecvB:
      return stage + 1;
    case ActionKind::kRecvF:
    case ActionKind::kSendB:
      return stage - 1;
    default:
      return -1;
  }
}

Action Action::compute(std::int32_t stage, ActionKind kind, std::int32_t mb) {
  PW_ASSERT(is_compute(kind), "Action::compute with kind " << to_string(kind));
  return Action{stage, kind, mb, -1};
}
Action Action::comm(std::int32_t stage, ActionKind kind, std::int32_t mb, std::int32_t peer) {
  PW_ASSERT(is_comm(kind), "Action::comm with kind " << to_string(kind));
  return Action{stage, kind, mb, peer};
}
Action Action::stage_only(std::int32_t stage, ActionKind kind) {
  PW_ASSERT(!has_microbatch(kind), "Action::stage_only with kind " << to_string(kind));
  return Action{stage, kind, -1, -1};
}

Action Action::overlap(std::int32_t forward_stage) {
  return Action{forward_stage, ActionKind::kOverlapFB, -1, -1};
}

bool operator<(const Action& a, const Action& b) noexcept {
  return std::make_tuple(a.stage, static_cast<int>(a.kind), a.microbatch, a.peer_stage) <
         std::make_tuple(b.stage, static_cast<int>(b.kind), b.microbatch, b.peer_stage);
}

std::string to_string(const Action& a) {
  std::string s = std::to_string(a.stage);
  s += to_string(a.kind);
  if (has_microbatch(a.kind)) s += std::to_string(a.microbatch);
  if (is_comm(a.kind) && a.peer_stage != Action::default_peer(a.stage, a.kind)) {
    s += '@';
    s += std::to_string(a.peer_stage);
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, const Action& action) { return os << to_string(action); }

namespace {

// Reads a non-negative decimal at text[pos]; returns false on no digits or overflow.
bool read_int(std::string_view text, std::size_t& pos, std::int32_t& out) {
  std::size_t start = pos;
  std::int64_t v = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])) != 0) {
    v = v * 10 + (text[pos] - '0');
    if (v > std::numeric_limits<std::int32_t>::max()) return false;
    ++pos;
  }
  if (pos == start) return false;
  out = static_cast<std::int32_t>(v);
  return true;
}

}  // namespace

std::optional<Action> try_parse_action(std::string_view text, std::string* error) {
  return try_parse_action(text, error, nullptr);
}

std::optional<Action> try_parse_action(std::string_view text, std::string* error,
                                       std::size_t* error_column) {
  auto fail = [&](std::size_t col, const std::string& why) -> std::optional<Action> {
    if (error_column != nullptr) *error_column = col + 1;
    if (error != nullptr) {
      *error = "cannot parse action '" + std::string(text) + "' at column " +
               std::to_string(col + 1) + ": " + why;
    }
    return std::nullopt;
  };
  std::size_t b = 0;
  std::size_t e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b])) != 0) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1])) != 0) --e;
  std::string_view t = text.substr(b, e - b);
  std::size_t pos = 0;
  Action a;
  if (!read_int(t, pos, a.stage)) return fail(b + pos, "expected a stage index");
  const KindName* found = nullptr;
  for (const auto& kn : kKindNames) {
    if (t.substr(pos, kn.name.size()) == kn.name) {
      found = &kn;
      break;
    }
  }
  if (found == nullptr || found->kind == ActionKind::kOverlapFB) {
    return fail(b + pos,
                found != nullptr
                    ? "OVERLAP_F_B is a container: write it as (<forward>;<backward>)OVERLAP_F_B"
                    : "unknown action kind (expected F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, "
                      "REDUCE_GRAD, OPTIM, UNSHARD or RESHARD)");
  }
  a.kind = found->kind;
  pos += found->name.size();
  if (has_microbatch(a.kind)) {
    if (!read_int(t, pos, a.microbatch)) return fail(b + pos, "expected a microbatch index");
  }
  if (is_comm(a.kind)) {
    a.peer_stage = Action::default_peer(a.stage, a.kind);
    if (pos < t.size() && t[pos] == '@') {
      ++pos;
      if (!read_int(t, pos, a.peer_stage)) return fail(b + pos, "expected a peer stage after '@'");
    }
  }
  if (pos != t.size()) return fail(b + pos, "unexpected trailing characters");
  return a;
}

Action parse_action(std::string_view text) {
  std::string error;
  auto a = try_parse_action(text, &error);
  if (!a) throw ParseError(error);
  return *a;
}

std::vector<std::string> to_cells(const std::vector<Action>& ops) {
  std::vector<std::string> cells;
  cells.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (!is_overlap(ops[i].kind)) {
      cells.push_back(to_string(ops[i]));
      continue;
    }
    std::string cell = "(";
    std::size_t k = 0;
    for (; k < static_cast<std::size_t>(kOverlapSubActions) && i + 1 < ops.size(); ++k) {
      if (k > 0) cell += ';';
      cell += to_string(ops[++i]);
    }
    cell += ")";
    cell += to_string(ActionKind::kOverlapFB);
    cells.push_back(std::move(cell));
  }
  return cells;
}

bool try_parse_cell(std::string_view text, std::vector<Action>& out, std::string* error,
                    std::size_t* error_column) {
  std::size_t b = 0;
  while (b < text.size() && std::isspace(static_cast<unsigned char>(text[b])) != 0) ++b;
  if (b == text.size() || text[b] != '(') {
    auto a = try_parse_action(text, error, error_column);
    if (!a) return false;
    out.push_back(*a);
    return true;
  }
  auto fail = [&](std::size_t col, const std::string& why) {
    if (error_column != nullptr) *error_column = col + 1;
    if (error != nullptr) {
      *error = "cannot parse action '" + std::string(text) + "' at column " +
               std::to_string(col + 1) + ": " + why;
    }
    return false;
  };
  const std::size_t close = text.find(')', b);
  if (close == std::string_view::npos) return fail(b, "'(' without a closing ')'");
  std::size_t e = text.size();
  while (e > close + 1 && std::isspace(static_cast<unsigned char>(text[e - 1])) != 0) --e;
  const std::string_view kind = text.substr(close + 1, e - close - 1);
  if (kind != to_string(ActionKind::kOverlapFB)) {
    return fail(close + 1, "a container cell must end in ')OVERLAP_F_B'");
  }
  std::vector<Action> subs;
  std::size_t start = b + 1;
  while (start <= close) {
    std::size_t end = text.find(';', start);
    if (end == std::string_view::npos || end > close) end = close;
    std::size_t col = 0;
    auto a = try_parse_action(text.substr(start, end - start), nullptr, &col);
    if (!a) {
      std::string inner;
      (void)try_parse_action(text.substr(start, end - start), &inner, nullptr);
      return fail(start + (col > 0 ? col - 1 : 0), "sub-action: " + inner);
    }
    subs.push_back(*a);
    start = end + 1;
  }
  if (subs.size() != static_cast<std::size_t>(kOverlapSubActions)) {
    return fail(b, "OVERLAP_F_B needs exactly 2 sub-actions (a forward, then a backward), got " +
                       std::to_string(subs.size()));
  }
  out.push_back(Action::overlap(subs.front().stage));
  out.insert(out.end(), subs.begin(), subs.end());
  return true;
}

}  // namespace pipewright::sched
