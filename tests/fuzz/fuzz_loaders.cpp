#include "fuzz_loaders.hpp"

#include <string>
#include <string_view>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/trace.hpp"
#include "pipewright/sched/validate.hpp"
#include "pipewright/sim/cluster.hpp"

namespace pipewright::fuzz {

namespace {

// Note [Fuzz input layout]: byte 0 names the loader by a letter, so corpus files stay readable
// text ("m{...model JSON...}"); any other byte picks one by its value modulo the count, so the
// fuzzer reaches every loader from random bytes too.
enum class Loader { kModel, kPartition, kPlanCsv, kPlanJson, kCosts, kJob, kTrace, kCluster };
constexpr char kLetters[] = {'m', 'p', 'c', 'j', 'k', 'b', 't', 'u'};
constexpr int kLoaders = sizeof kLetters;

Loader pick(std::uint8_t first) {
  for (int i = 0; i < kLoaders; ++i) {
    if (static_cast<char>(first) == kLetters[i]) return static_cast<Loader>(i);
  }
  return static_cast<Loader>(first % kLoaders);
}

void load(Loader loader, std::string_view text) {
  switch (loader) {
    case Loader::kModel: {
      const graph::Model m = graph::parse_model(text, "fuzz.json");
      (void)m.topological_order();
      (void)graph::to_json(m);
      break;
    }
    case Loader::kPartition:
      (void)graph::parse_partition(text, "fuzz.json");
      break;
    case Loader::kPlanCsv:
    case Loader::kPlanJson: {
      const sched::AnyPlan plan = loader == Loader::kPlanCsv ? sched::parse_csv(text, "fuzz.csv")
                                                             : sched::parse_json(text, "fuzz.json");
      if (const auto* c = std::get_if<sched::ComputePlan>(&plan)) {
        (void)sched::validate(*c);
      } else {
        (void)sched::validate(std::get<sched::LoweredPlan>(plan));
      }
      break;
    }
    case Loader::kCosts:
      (void)sched::parse_costs(text, "fuzz.json");
      break;
    case Loader::kJob:
      (void)sched::parse_job(text, "fuzz.json");
      break;
    case Loader::kTrace:
      (void)sched::parse_trace(text, "fuzz.json");
      break;
    case Loader::kCluster:
      (void)sim::parse_cluster(text, "fuzz.json");
      break;
  }
}

}  // namespace

void run_one(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    load(pick(data[0]), text);
  } catch (const pipewright::Error&) {
    // Rejected with a message naming the file and field: what the loaders promise.
  }
}

}  // namespace pipewright::fuzz
