// A project that uses an installed pipewright (docs/library.md): generates torch's 1F1B plan,
// validates it, simulates it with what-if costs and prints the CSV and the step time, the same
// as `pipewright schedule 1F1B -p P -m M` and `pipewright simulate --schedule 1F1B -p P -m M
// --forward-ms F --backward-ms B`.   Usage: step_time [P M F B]   (default 4 8 1 2)
#include <cstdio>
#include <cstdlib>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/validate.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/simulator.hpp"

int main(int argc, char** argv) {
  namespace pw = pipewright;
  pw::sched::JobSpec job;  // the job `pipewright simulate` resolves its flags into
  job.schedule = pw::sched::ScheduleKind::k1F1B;
  job.pp = argc > 2 ? std::atoi(argv[1]) : 4;
  job.microbatches = argc > 2 ? std::atoi(argv[2]) : 8;
  pw::sim::WhatIfCosts what_if;
  what_if.forward_ms = {argc > 4 ? std::atof(argv[3]) : 1.0};
  what_if.backward_ms = {argc > 4 ? std::atof(argv[4]) : 2.0};
  try {
    const auto plan = pw::sched::generate({job.schedule, job.pp, job.microbatches, 1, {}});
    pw::sched::check_valid(plan, "1F1B");  // throws InvalidPlanError with every problem
    std::fputs(pw::sched::to_csv(plan).c_str(), stdout);      // torch's compute-only CSV
    const auto lowered = pw::sched::make_plan(job, nullptr);  // + SEND/RECV, REDUCE_GRAD, OPTIM
    const auto costs = pw::sim::what_if_costs(what_if, lowered.shape.stages);
    const auto result = pw::sim::simulate(lowered, costs, {}, pw::sim::sim_options(job));
    std::printf("step time %.3f ms, bubble %.2f%%\n", static_cast<double>(result.makespan_ns) / 1e6,
                100 * result.bubble_fraction());
  } catch (const pw::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
