// Seeded mutation corpus: generated plans are mutated (swap two actions on a rank, drop or
// duplicate an action, swap a SEND and a RECV, wrong peer, move an action across a rank so that
// ranks wait for each other). Each mutant is judged by a reference interpreter written
// independently of validate() / dry_run(): it executes the plan with data tokens the way the
// executor does (blocking RECV, buffered or rendezvous SEND) and checks every input is present
// when used. validate() + dry_run() must flag exactly the mutants the interpreter rejects.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <set>
#include <tuple>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::sched {
namespace {

// splitmix64: the same sequence on every platform (std distributions are not portable).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t s_;
};

// ---- reference interpreter ----------------------------------------------------------------

using Token = std::tuple<int, int, int, int>;  // (what, stage, other stage, microbatch)
enum What { kAct = 0, kGrad = 1, kRecvAct = 2, kRecvGrad = 3 };

// True when `per_rank` (lowered if `lowered`) runs to completion with every input present and
// every (stage, microbatch) forwarded and backwarded exactly once.
bool reference_ok(const PlanShape& sh, const std::vector<std::vector<Action>>& per_rank,
                  bool lowered, Transport transport) {
  const int p = sh.ranks;
  if (static_cast<int>(per_rank.size()) != p) return false;
  std::set<std::pair<int, int>> edges;
  for (const auto& e : sh.edges()) edges.insert({e.from, e.to});
  auto rank_of = [&](int s) { return sh.stage_to_rank[static_cast<std::size_t>(s)]; };
  std::vector<std::set<Token>> have(static_cast<std::size_t>(p));    // per-rank local values
  std::map<std::tuple<int, int, int, int>, int> fwd, bwd, inp, wgt;  // counts per (s, mb)
  std::map<int, int> backward_done, reduce, optim;                   // per stage
  std::map<std::tuple<int, int, int, int>, int> mailbox;             // (dir, from, to, mb) -> count
  std::vector<std::size_t> pc(static_cast<std::size_t>(p), 0);
  auto key = [](const Action& a) {
    const bool f = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvF;
    const bool send = is_send(a.kind);
    return std::make_tuple(f ? 1 : 0, send ? a.stage : a.peer_stage, send ? a.peer_stage : a.stage,
                           a.microbatch);
  };
  // Executes a non-blocking action; false if it is illegal.
  auto exec = [&](int r, const Action& a) -> bool {
    auto& mine = have[static_cast<std::size_t>(r)];
    const int s = a.stage, k = a.microbatch;
    if (s < 0 || s >= sh.stages || rank_of(s) != r) return false;
    if (has_microbatch(a.kind) && (k < 0 || k >= sh.microbatches)) return false;
    auto input = [&](int other, bool forward) {
      if (rank_of(other) == r) return mine.count({forward ? kAct : kGrad, other, -1, k}) > 0;
      if (!lowered) return true;  // compute-only: checked by the blocking rule below
      return mine.count({forward ? kRecvAct : kRecvGrad, s, other, k}) > 0;
    };
    switch (a.kind) {
      case ActionKind::kForward:
        for (const auto& [from, to] : edges) {
          if (to == s && !input(from, true)) return false;
        }
        mine.insert({kAct, s, -1, k});
        ++fwd[{s, k, 0, 0}];
        return true;
      case ActionKind::kFullBackward:
      case ActionKind::kBackwardInput:
        if (mine.count({kAct, s, -1, k}) == 0) return false;
        for (const auto& [from, to] : edges) {
          if (from == s && !input(to, false)) return false;
        }
        mine.insert({kGrad, s, -1, k});
        if (a.kind == ActionKind::kFullBackward) {
          ++bwd[{s, k, 0, 0}];
          ++backward_done[s];
        } else {
          ++inp[{s, k, 0, 0}];
          mine.insert({kAct + 10, s, -1, k});
        }
        return true;
      case ActionKind::kBackwardWeight:
        if (mine.count({kAct + 10, s, -1, k}) == 0) return false;
        ++wgt[{s, k, 0, 0}];
        ++backward_done[s];
        return true;
      case ActionKind::kReduceGrad:
        if (backward_done[s] != sh.microbatches) return false;
        return ++reduce[s] == 1;
      case ActionKind::kOptimizerStep:
        if (backward_done[s] != sh.microbatches) return false;
        return ++optim[s] == 1;
      default:
        return false;
    }
  };
  // Compute-only plans: an action blocks until its cross-rank inputs were computed anywhere.
  auto compute_ready = [&](int r, const Action& a) {
    if (a.stage < 0 || a.stage >= sh.stages || !has_microbatch(a.kind)) return true;
    const int k = a.microbatch;
    for (const auto& [from, to] : edges) {
      if (a.kind == ActionKind::kForward && to == a.stage && rank_of(from) != r &&
          fwd[{from, k, 0, 0}] == 0) {
        return false;
      }
      if ((a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardInput) &&
          from == a.stage && rank_of(to) != r && bwd[{to, k, 0, 0}] + inp[{to, k, 0, 0}] == 0) {
        return false;
      }
    }
    return true;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      auto& i = pc[static_cast<std::size_t>(r)];
      const auto& ops = per_rank[static_cast<std::size_t>(r)];
      while (i < ops.size()) {
        const Action& a = ops[i];
        if (!is_comm(a.kind)) {
          if (!lowered && !compute_ready(r, a)) break;
          if (!exec(r, a)) return false;
          ++i;
          progress = true;
          continue;
        }
        if (!lowered) return false;
        const int s = a.stage, peer = a.peer_stage, k = a.microbatch;
        if (s < 0 || s >= sh.stages || peer < 0 || peer >= sh.stages || rank_of(s) != r)
          return false;
        if (k < 0 || k >= sh.microbatches) return false;
        const bool to_consumer = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvB;
        if (edges.count(to_consumer ? std::make_pair(s, peer) : std::make_pair(peer, s)) == 0) {
          return false;
        }
        if (rank_of(peer) == r) return false;
        auto& mine = have[static_cast<std::size_t>(r)];
        if (is_send(a.kind)) {
          if (mine.count({a.kind == ActionKind::kSendF ? kAct : kGrad, s, -1, k}) == 0)
            return false;
          if (transport == Transport::kRendezvous) {
            // Completes only together with the peer's matching RECV at the peer's head.
            const auto& peer_ops = per_rank[static_cast<std::size_t>(rank_of(peer))];
            const std::size_t j = pc[static_cast<std::size_t>(rank_of(peer))];
            const ActionKind want =
                a.kind == ActionKind::kSendF ? ActionKind::kRecvF : ActionKind::kRecvB;
            if (j >= peer_ops.size() || peer_ops[j] != Action::comm(peer, want, k, s)) break;
            have[static_cast<std::size_t>(rank_of(peer))].insert(
                {want == ActionKind::kRecvF ? kRecvAct : kRecvGrad, peer, s, k});
            ++pc[static_cast<std::size_t>(rank_of(peer))];
          } else {
            ++mailbox[key(a)];
          }
          ++i;
          progress = true;
          continue;
        }
        // RECV: buffered: take from the mailbox; rendezvous: the sender completes it.
        if (transport == Transport::kRendezvous) break;
        auto it = mailbox.find(key(a));
        if (it == mailbox.end() || it->second == 0) break;
        --it->second;
        mine.insert({a.kind == ActionKind::kRecvF ? kRecvAct : kRecvGrad, s, peer, k});
        ++i;
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    if (pc[static_cast<std::size_t>(r)] != per_rank[static_cast<std::size_t>(r)].size()) {
      return false;  // deadlock
    }
  }
  for (const auto& [k, n] : mailbox) {
    if (n != 0) return false;  // a message nobody received
  }
  for (int s = 0; s < sh.stages; ++s) {
    for (int k = 0; k < sh.microbatches; ++k) {
      const int f = fwd[{s, k, 0, 0}], b = bwd[{s, k, 0, 0}], in = inp[{s, k, 0, 0}],
                w = wgt[{s, k, 0, 0}];
      if (f != 1) return false;
      if (!((b == 1 && in == 0 && w == 0) || (b == 0 && in == 1 && w == 1))) return false;
    }
    // OPTIM after REDUCE_GRAD when both exist on the stage.
  }
  for (const auto& ops : per_rank) {
    std::set<int> reduced;
    for (const Action& a : ops) {
      if (a.kind == ActionKind::kReduceGrad) reduced.insert(a.stage);
      if (a.kind == ActionKind::kOptimizerStep && reduce[a.stage] > 0 &&
          reduced.count(a.stage) == 0) {
        return false;
      }
    }
  }
  return true;
}

// ---- mutations ----------------------------------------------------------------------------

using Lists = std::vector<std::vector<Action>>;

std::string mutate(Lists& lists, const PlanShape& sh, Rng& rng, bool lowered) {
  std::size_t r = rng.below(lists.size());
  for (int tries = 0; lists[r].size() < 2 && tries < 8; ++tries) r = rng.below(lists.size());
  auto& ops = lists[r];
  if (ops.size() < 2) return "none";
  const int kinds = lowered ? 6 : 4;
  switch (rng.below(static_cast<std::size_t>(kinds))) {
    case 0: {  // swap two actions on a rank (often neighbours: the subtle case)
      const std::size_t i = rng.below(ops.size() - 1);
      const std::size_t j = rng.below(2) == 0 ? i + 1 : rng.below(ops.size());
      std::swap(ops[i], ops[j]);
      return "swap";
    }
    case 1:
      ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(rng.below(ops.size())));
      return "drop";
    case 2: {
      const std::size_t i = rng.below(ops.size());
      ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(rng.below(ops.size() + 1)), ops[i]);
      return "duplicate";
    }
    case 3: {  // move an action earlier across its rank: cross-rank waiting cycles
      const std::size_t i = rng.below(ops.size());
      const std::size_t j = rng.below(i + 1);
      std::rotate(ops.begin() + static_cast<std::ptrdiff_t>(j),
                  ops.begin() + static_cast<std::ptrdiff_t>(i),
                  ops.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return "move";
    }
    case 4: {  // swap a SEND and a RECV on the rank
      std::vector<std::size_t> sends, recvs;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        if (is_send(ops[i].kind)) sends.push_back(i);
        if (is_recv(ops[i].kind)) recvs.push_back(i);
      }
      if (sends.empty() || recvs.empty()) return "none";
      std::swap(ops[sends[rng.below(sends.size())]], ops[recvs[rng.below(recvs.size())]]);
      return "swap-send-recv";
    }
    default: {  // wrong peer
      std::vector<std::size_t> comm;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        if (is_comm(ops[i].kind)) comm.push_back(i);
      }
      if (comm.empty() || sh.stages < 2) return "none";
      Action& a = ops[comm[rng.below(comm.size())]];
      const auto old = a.peer_stage;
      a.peer_stage = static_cast<std::int32_t>(rng.below(static_cast<std::size_t>(sh.stages)));
      if (a.peer_stage == old) a.peer_stage = (old + 1) % sh.stages;
      return "wrong-peer";
    }
  }
}

struct Counts {
  int mutants = 0;
  int rejected = 0;  // by the reference interpreter (invalid or deadlocking)
  int flagged = 0;   // by validate() + dry_run()
  int valid_unflagged = 0;
};

TEST(MutationCorpus, FlagsExactlyTheBrokenMutants) {
  std::vector<ComputePlan> bases;
  for (ScheduleKind kind : all_schedule_kinds()) {
    // The reference interpreter below knows neither OVERLAP_F_B units nor stage replicas; the
    // V-shaped schedules have their own checks (schedule_v_test.cpp).
    if (is_v_shaped(kind)) continue;
    for (auto [p, m, v] : {std::tuple{2, 4, 1}, std::tuple{3, 3, 1}, std::tuple{3, 6, 2},
                           std::tuple{4, 8, 2}, std::tuple{2, 3, 2}}) {
      try {
        bases.push_back(generate({kind, p, m, v, {}}));
      } catch (const ConfigError&) {
      }
    }
  }
  bases.push_back(generate({ScheduleKind::k1F1B, 4, 4, 1, {{0, 1}, {0, 2}, {1, 3}, {2, 3}}}));
  Rng rng(20261122);
  constexpr int kMutantsPerBase = 60;
  std::map<std::string, Counts> by_kind;
  Counts total;
  for (const auto& base : bases) {
    for (int lowered_i = 0; lowered_i < 2; ++lowered_i) {
      const bool lowered = lowered_i == 1;
      LoweredPlan lp;
      if (lowered) lp = lower(base, {false, rng.below(2) == 0, rng.below(2) == 0});
      const Lists original = lowered ? lp.per_rank : base.per_rank;
      // The unmutated plan is accepted by both.
      for (Transport t : {Transport::kBuffered, Transport::kRendezvous}) {
        ASSERT_TRUE(reference_ok(base.shape, original, lowered, t));
      }
      for (int i = 0; i < kMutantsPerBase; ++i) {
        Lists lists = original;
        const int n_mut = 1 + static_cast<int>(rng.below(2));
        std::string what;
        for (int j = 0; j < n_mut; ++j)
          what += (j ? "+" : "") + mutate(lists, base.shape, rng, lowered);
        const Transport t = rng.below(2) == 0 ? Transport::kBuffered : Transport::kRendezvous;
        const bool ok_ref = reference_ok(base.shape, lists, lowered, t);
        bool flagged = false;
        std::string why;
        if (lowered) {
          const LoweredPlan mp{base.shape, lists};
          auto d = validate(mp);
          flagged = !d.empty();
          if (flagged) why = to_string(d.front());
          if (!flagged) {
            const auto rep = dry_run(mp, t);
            flagged = !rep.ok;
            why = rep.cycle;
          }
        } else {
          const ComputePlan mp{base.shape, lists};
          auto d = validate(mp);
          flagged = !d.empty();
          if (flagged) why = to_string(d.front());
        }
        Counts& c = by_kind[std::string(lowered ? "lowered " : "compute ") + what];
        for (Counts* x : {&c, &total}) {
          ++x->mutants;
          x->rejected += ok_ref ? 0 : 1;
          x->flagged += flagged ? 1 : 0;
          x->valid_unflagged += (ok_ref && !flagged) ? 1 : 0;
        }
        ASSERT_EQ(flagged, !ok_ref)
            << base.shape.schedule << " p=" << base.shape.ranks << " m=" << base.shape.microbatches
            << " stages=" << base.shape.stages << (lowered ? " lowered" : " compute") << " " << what
            << " transport " << to_string(t) << (flagged ? " flagged: " + why : " not flagged");
      }
    }
  }
  std::cout << "mutation corpus: " << total.mutants << " mutants, " << total.rejected
            << " invalid or deadlocking (all flagged), " << total.valid_unflagged
            << " still valid (none flagged)\n";
  for (const auto& [k, c] : by_kind) {
    if (c.mutants >= 20) {
      std::cout << "  " << k << ": " << c.mutants << " mutants, " << c.flagged << " flagged\n";
    }
  }
  RecordProperty("mutants", total.mutants);
  RecordProperty("flagged", total.flagged);
  RecordProperty("valid_unflagged", total.valid_unflagged);
  EXPECT_GT(total.rejected, total.mutants / 2);
  EXPECT_GT(total.valid_unflagged, 0);
}

}  // namespace
}  // namespace pipewright::sched
