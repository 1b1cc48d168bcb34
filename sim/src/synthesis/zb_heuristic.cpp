#include "synthesis/zb_heuristic.hpp"

#include <algorithm>
#include <array>

namespace pipewright::sim::synthesis {
namespace {

using sched::Action;
using sched::ActionKind;

constexpr int kF = 0;
constexpr int kI = 1;
constexpr int kW = 2;
constexpr std::int64_t kNotYet = -1;

// The heuristic's state: passes placed per rank (= stage) and their end times on its clock.
class Placer {
 public:
  explicit Placer(const ListProblem& pr)
      : pr_(pr),
        stages_(static_cast<std::size_t>(pr.stages)),
        micro_(static_cast<std::size_t>(pr.microbatches)),
        free_at_(stages_, 0),
        held_(stages_, 0),
        bubble_(stages_, 0),
        orders_(stages_) {
    for (auto& c : count_) c.assign(stages_, 0);
    for (auto& e : end_) e.assign(stages_ * micro_, kNotYet);
  }

  [[nodiscard]] std::int32_t count(int kind, std::int32_t j) const { return count_[kind][at(j)]; }
  [[nodiscard]] std::int64_t free_at(std::int32_t j) const { return free_at_[at(j)]; }
  [[nodiscard]] std::int64_t held(std::int32_t j) const { return held_[at(j)]; }
  [[nodiscard]] std::int64_t bubble(std::int32_t j) const { return bubble_[at(j)]; }
  [[nodiscard]] std::int64_t end(int kind, std::int32_t j, std::int32_t i) const {
    return i < pr_.microbatches ? end_[kind][at(j) * micro_ + static_cast<std::size_t>(i)]
                                : kNotYet;
  }
  [[nodiscard]] std::int64_t largest_bubble() const {
    return *std::max_element(bubble_.begin(), bubble_.end());
  }
  [[nodiscard]] std::int64_t cost(int kind, std::int32_t j) const {
    const auto s = at(j);
    return kind == kF ? pr_.forward_ns[s]
                      : (kind == kI ? pr_.input_grad_ns[s] : pr_.weight_grad_ns[s]);
  }
  // The message time into stage j's F from j - 1 (kind kF) or into its I from j + 1 (kind kI).
  [[nodiscard]] std::int64_t message(int kind, std::int32_t j) const {
    return kind == kF ? pr_.message_ns[at(j - 1)] : pr_.message_ns[at(j)];
  }
  [[nodiscard]] bool fits_forward(std::int32_t j) const {
    return held_[at(j)] + pr_.activation[at(j)] <= pr_.cap[at(j)];
  }
  [[nodiscard]] bool has_w(std::int32_t j) const { return count(kW, j) < count(kI, j); }

  // Places stage j's next pass of `kind`; false when its input is not placed yet or, for an F,
  // it does not fit under the cap.
  bool put(int kind, std::int32_t j) {
    const std::int32_t i = count(kind, j);
    if (i >= pr_.microbatches) return false;
    std::int64_t ready = 0;
    if (kind == kF) {
      if (!fits_forward(j)) return false;
      if (j > 0) {
        const std::int64_t x = end(kF, j - 1, i);
        if (x == kNotYet) return false;
        ready = x + message(kF, j);
      }
    } else if (kind == kI) {
      if (end(kF, j, i) == kNotYet) return false;
      if (j + 1 < pr_.stages) {
        const std::int64_t x = end(kI, j + 1, i);
        if (x == kNotYet) return false;
        ready = x + message(kI, j);
      }
    } else if (end(kI, j, i) == kNotYet) {
      return false;
    }
    const auto s = at(j);
    const std::int64_t start = std::max(free_at_[s], ready);
    // A rank's bubble counts from its first forward on (the wait for the first input is not
    // the schedule's).
    if (count(kF, j) > 0) bubble_[s] += start - free_at_[s];
    free_at_[s] = start + cost(kind, j);
    end_[kind][s * micro_ + static_cast<std::size_t>(i)] = free_at_[s];
    if (kind == kF) held_[s] += pr_.activation[s];
    if (kind == kI) held_[s] -= input_grad_frees(pr_, j);
    if (kind == kW) held_[s] -= weight_grad_frees(pr_, j);
    ++count_[kind][s];
    const ActionKind k =
        kind == kF ? ActionKind::kForward
                   : (kind == kI ? ActionKind::kBackwardInput : ActionKind::kBackwardWeight);
    orders_[s].push_back(Action::compute(j, k, i));
    return true;
  }

  // Before stage j's pass whose input arrives at `arrive`: W passes that end by then, and one
  // more if the rank would otherwise wait (when the policy fills a wait the other ranks' bubbles
  // already cover, or when they do not).
  void fill_wait(std::int32_t j, std::int64_t arrive, bool fill_small_waits) {
    while (has_w(j) && free_at(j) + cost(kW, j) <= arrive) put(kW, j);
    if (has_w(j) && free_at(j) < arrive) {
      const bool covered = arrive - free_at(j) <= largest_bubble() - bubble(j);
      if (!covered || fill_small_waits) put(kW, j);
    }
  }

  [[nodiscard]] std::vector<std::vector<Action>> take() { return std::move(orders_); }

 private:
  [[nodiscard]] static std::size_t at(std::int32_t j) { return static_cast<std::size_t>(j); }
  const ListProblem& pr_;
  std::size_t stages_, micro_;
  std::array<std::vector<std::int32_t>, 3> count_;
  std::array<std::vector<std::int64_t>, 3> end_;
  std::vector<std::int64_t> free_at_, held_, bubble_;
  std::vector<std::vector<Action>> orders_;
};

// Microbatch 0 (Note [Zero Bubble heuristic]): the first forwards, the warm-up forwards, the I.
bool warm_up(Placer& pl, const ListProblem& pr, const ZbPolicy& policy) {
  const std::int32_t S = pr.stages;
  for (std::int32_t j = 0; j < S; ++j) {
    if (!pl.put(kF, j)) return false;
  }
  std::vector<std::int32_t> extra(static_cast<std::size_t>(S), 0);
  // When microbatch 0's gradient reaches rank j + 1, estimated from the last rank back.
  std::int64_t back = pl.end(kF, S - 1, 0) + pl.cost(kI, S - 1);
  for (std::int32_t j = S - 2; j >= 0; --j) {
    const auto uj = static_cast<std::size_t>(j);
    std::int64_t mem = pl.held(j);
    std::int64_t t = pl.free_at(j);
    const std::int64_t arrive = back + pl.message(kI, j);
    while (pl.count(kF, j) + extra[uj] < pr.microbatches && mem + pr.activation[uj] <= pr.cap[uj]) {
      const bool stop = policy.bubble_before_first_b ? t + pl.cost(kF, j) > arrive : t >= arrive;
      if (stop) break;
      mem += pr.activation[uj];
      t += pl.cost(kF, j);
      ++extra[uj];
    }
    back = std::max(t, arrive) + pl.cost(kI, j);
  }
  // Each rank warms up strictly fewer forwards than the one before it.
  for (std::int32_t j = 1; j < S; ++j) {
    const auto uj = static_cast<std::size_t>(j);
    while (extra[uj] > 0 && extra[uj] >= extra[uj - 1] &&
           pl.count(kF, j) + extra[uj] < pr.microbatches)
      --extra[uj];
  }
  for (std::int32_t j = 0; j < S; ++j) {
    for (std::int32_t k = 0; k < extra[static_cast<std::size_t>(j)]; ++k) {
      if (!pl.put(kF, j)) return false;
    }
  }
  for (std::int32_t j = S - 1; j >= 0; --j) {
    if (!pl.put(kI, j)) return false;
  }
  return true;
}

// Whether rank j takes a forward in this round (prioritize_b may skip it).
bool wants_forward(const Placer& pl, const ListProblem& pr, const ZbPolicy& policy,
                   std::int32_t j) {
  if (pl.count(kF, j) >= pr.microbatches) return false;
  if (!policy.prioritize_b || j + 1 >= pr.stages || pl.count(kF, j) < pl.count(kF, j + 1) + 2)
    return true;
  // The next rank's forward and I, and the gradient's way back: a rank already busy past then
  // takes no forward (its I is due); one whose forward (after any W the cap needs) ends by then
  // takes it; otherwise it takes it only when the wait it saves is more than the other ranks'
  // bubbles already cover.
  const std::int64_t back =
      pl.free_at(j + 1) + pl.cost(kF, j + 1) + pl.cost(kI, j + 1) + pl.message(kI, j);
  if (pl.free_at(j) >= back) return false;
  std::int64_t w_time = 0;
  std::int64_t mem = pl.held(j) + pr.activation[static_cast<std::size_t>(j)];
  for (std::int32_t w = pl.count(kW, j);
       mem > pr.cap[static_cast<std::size_t>(j)] && w < pl.count(kI, j); ++w) {
    w_time += pl.cost(kW, j);
    mem -= weight_grad_frees(pr, j);
  }
  if (pl.free_at(j) + pl.cost(kF, j) + w_time <= back) return true;
  return back - pl.free_at(j) > pl.largest_bubble() - pl.bubble(j);
}

}  // namespace

std::optional<std::vector<std::vector<Action>>> zb_heuristic(const ListProblem& pr,
                                                             const ZbPolicy& policy) {
  const std::int32_t S = pr.stages;
  if (S != pr.ranks) return std::nullopt;  // one stage per rank, stage j on rank j
  for (std::int32_t j = 0; j < S; ++j) {
    if (pr.stage_to_rank[static_cast<std::size_t>(j)] != j) return std::nullopt;
  }
  Placer pl(pr);
  if (!warm_up(pl, pr, policy)) return std::nullopt;
  std::vector<char> takes(static_cast<std::size_t>(S), 0);
  for (std::int32_t i = 1; i < pr.microbatches; ++i) {
    for (std::int32_t j = 0; j < S; ++j)
      takes[static_cast<std::size_t>(j)] = wants_forward(pl, pr, policy, j) ? 1 : 0;
    for (std::int32_t j = S - 2; j >= 0; --j) {
      const auto uj = static_cast<std::size_t>(j);
      takes[uj] = std::min(takes[uj], takes[uj + 1]);
    }
    for (std::int32_t j = 0; j < S; ++j) {
      if (!takes[static_cast<std::size_t>(j)]) continue;
      while (!pl.fits_forward(j)) {
        if (!pl.has_w(j) || !pl.put(kW, j)) return std::nullopt;
      }
      if (j > 0) {
        const std::int64_t x = pl.end(kF, j - 1, pl.count(kF, j));
        if (x == kNotYet) return std::nullopt;
        pl.fill_wait(j, x + pl.message(kF, j), policy.fill_small_waits);
      }
      if (!pl.put(kF, j)) return std::nullopt;
    }
    for (std::int32_t j = S - 1; j >= 0; --j) {
      if (pl.count(kI, j) != i) return std::nullopt;
      if (j + 1 < S) {
        const std::int64_t x = pl.end(kI, j + 1, i);
        if (x == kNotYet) return std::nullopt;
        pl.fill_wait(j, x + pl.message(kI, j), policy.fill_small_waits);
      }
      // The first rank has nothing left to wait for once its last forward is placed.
      if (j == 0 && pl.count(kF, 0) == pr.microbatches) {
        while (pl.has_w(0)) pl.put(kW, 0);
      }
      if (!pl.put(kI, j)) return std::nullopt;
    }
  }
  for (std::int32_t j = 0; j < S; ++j) {
    while (pl.has_w(j)) pl.put(kW, j);
    if (pl.count(kF, j) != pr.microbatches || pl.count(kW, j) != pr.microbatches)
      return std::nullopt;
  }
  return pl.take();
}

}  // namespace pipewright::sim::synthesis
