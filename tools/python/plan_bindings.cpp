// Plans: generation (`pipewright schedule`), lowering, the file formats, equality with torch's
// CSV, and validation with the deadlock dry run (`pipewright validate`).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "bindings.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"
#include "plan.hpp"

namespace py = pybind11;

namespace pipewright::python {
namespace {

const sched::PlanShape& shape(const Plan& p) { return sched::shape_of(p.plan); }

const std::vector<std::vector<sched::Action>>& per_rank(const Plan& p) {
  return std::visit(
      [](const auto& plan) -> const std::vector<std::vector<sched::Action>>& {
        return plan.per_rank;
      },
      p.plan);
}

// Plans are equal when they are of the same kind and every rank runs the same actions on the
// same placement and stage DAG. The schedule's name is a label, not part of the plan, so a
// generated plan equals the plan read from torch's CSV of it (which carries no name).
bool same_plan(const Plan& a, const Plan& b) {
  if (a.plan.index() != b.plan.index()) return false;
  const auto& sa = shape(a);
  const auto& sb = shape(b);
  return sa.ranks == sb.ranks && sa.stages == sb.stages && sa.microbatches == sb.microbatches &&
         sa.stage_to_rank == sb.stage_to_rank && sa.edges() == sb.edges() &&
         per_rank(a) == per_rank(b);
}

template <typename F>
std::string visit_text(const Plan& p, F&& f) {
  return std::visit([&](const auto& plan) { return f(plan); }, p.plan);
}

Plan schedule(const std::string& name, int ranks, int microbatches, int stages_per_rank,
              const std::vector<std::pair<int, int>>& edges) {
  sched::ScheduleSpec spec;
  spec.kind = sched::parse_schedule_kind(name);
  spec.ranks = ranks;
  spec.microbatches = microbatches;
  spec.stages_per_rank = stages_per_rank;
  for (const auto& [from, to] : edges) spec.stage_edges.push_back({from, to});
  sched::ComputePlan plan = sched::generate(spec);
  sched::check_valid(plan, std::string(sched::to_string(spec.kind)));  // as the CLI does
  return Plan{std::move(plan)};
}

Plan lower(const Plan& p, bool merge_iw, bool reduce_grad, bool optimizer_step) {
  PW_CHECK(!sched::is_lowered(p.plan), ConfigError, "the plan is lowered already");
  sched::LowerOptions options;
  options.merge_iw = merge_iw;
  options.reduce_grad = reduce_grad;
  options.optimizer_step = optimizer_step;
  return Plan{sched::lower(std::get<sched::ComputePlan>(p.plan), options)};
}

// Every problem `pipewright validate` reports, one string each; empty: valid and deadlock-free
// under `transport` (compute-only plans are lowered first, as the CLI does).
std::vector<std::string> validate(const Plan& p, const std::string& transport_name) {
  const sched::Transport transport = sched::parse_transport(transport_name);
  const std::vector<sched::Diagnostic> diags =
      std::visit([](const auto& plan) { return sched::validate(plan); }, p.plan);
  std::vector<std::string> problems;
  for (const auto& d : diags) problems.push_back(sched::to_string(d));
  if (!problems.empty()) return problems;
  try {
    const sched::LoweredPlan lowered = sched::is_lowered(p.plan)
                                           ? std::get<sched::LoweredPlan>(p.plan)
                                           : sched::lower(std::get<sched::ComputePlan>(p.plan));
    const sched::DeadlockReport report = sched::dry_run(lowered, transport);
    if (!report.ok) problems.push_back(report.message());
  } catch (const InvalidPlanError& e) {  // lowering found ranks waiting for each other
    problems.emplace_back(e.what());
  }
  return problems;
}

}  // namespace

void bind_plan(py::module_& m) {
  py::class_<Plan>(m, "Plan",
                   "A pipeline plan: per-rank action lists (compute-only, or lowered with "
                   "SEND/RECV) and the shape they were made for")
      .def_property_readonly("lowered", [](const Plan& p) { return sched::is_lowered(p.plan); })
      .def_property_readonly("ranks", [](const Plan& p) { return shape(p).ranks; })
      .def_property_readonly("stages", [](const Plan& p) { return shape(p).stages; })
      .def_property_readonly("microbatches", [](const Plan& p) { return shape(p).microbatches; })
      .def_property_readonly("schedule", [](const Plan& p) { return shape(p).schedule; })
      .def_property_readonly("stage_to_rank", [](const Plan& p) { return shape(p).stage_to_rank; })
      .def_property_readonly("stage_edges",
                             [](const Plan& p) {
                               std::vector<std::tuple<int, int>> out;
                               for (const auto& e : shape(p).edges())
                                 out.emplace_back(e.from, e.to);
                               return out;
                             })
      .def_property_readonly(
          "actions",
          [](const Plan& p) {
            std::vector<std::vector<std::string>> out;
            for (const auto& rank : per_rank(p)) {
              auto& row = out.emplace_back();
              for (const auto& a : rank) row.push_back(sched::to_string(a));
            }
            return out;
          },
          "each rank's actions in torch's text form (\"0F0\", \"1SEND_F3\")")
      .def("to_csv",
           [](const Plan& p) { return visit_text(p, [](auto& x) { return sched::to_csv(x); }); })
      .def("to_json",
           [](const Plan& p) { return visit_text(p, [](auto& x) { return sched::to_json(x); }); })
      .def("to_text",
           [](const Plan& p) {
             return visit_text(p, [](auto& x) { return sched::to_text_grid(x); });
           })
      .def("to_dot",
           [](const Plan& p) { return visit_text(p, [](auto& x) { return sched::to_dot(x); }); })
      .def("lower", &lower, py::kw_only(), py::arg("merge_iw") = false,
           py::arg("reduce_grad") = false, py::arg("optimizer_step") = false,
           "Inserts SEND/RECV between ranks (`pipewright schedule --lower`)")
      .def_static(
          "from_csv",
          [](const std::string& text, int stages, int microbatches, const std::string& source) {
            sched::CsvOptions options;
            options.stages = stages;
            options.microbatches = microbatches;
            return Plan{sched::parse_csv(text, source, options)};
          },
          py::arg("text"), py::kw_only(), py::arg("stages") = -1, py::arg("microbatches") = -1,
          py::arg("source") = "<csv>", "Parses torch's CSV (one row per rank)")
      .def_static(
          "from_json",
          [](const std::string& text, const std::string& source) {
            return Plan{sched::parse_json(text, source)};
          },
          py::arg("text"), py::kw_only(), py::arg("source") = "<json>")
      .def_static(
          "load",
          [](const std::string& path, int stages, int microbatches) {
            sched::CsvOptions options;
            options.stages = stages;
            options.microbatches = microbatches;
            return Plan{sched::load_plan(path, options)};
          },
          py::arg("path"), py::kw_only(), py::arg("stages") = -1, py::arg("microbatches") = -1,
          "Reads a plan file: .json, anything else as torch's CSV")
      .def("__eq__", &same_plan, py::is_operator())
      .def("__repr__", [](const Plan& p) {
        const auto& s = shape(p);
        return std::string("<pipewright.Plan ") +
               (sched::is_lowered(p.plan) ? "lowered" : "compute") + " " + s.schedule + ": " +
               std::to_string(s.ranks) + " ranks, " + std::to_string(s.stages) + " stages, " +
               std::to_string(s.microbatches) + " microbatches>";
      });

  m.def("schedule", &schedule, py::arg("name"), py::kw_only(), py::arg("ranks"),
        py::arg("microbatches"), py::arg("stages_per_rank") = 1,
        py::arg("edges") = std::vector<std::pair<int, int>>{},
        "torch.distributed.pipelining's schedule as a compute-only Plan (`pipewright schedule`)");
  m.def("schedule_names", [] {
    std::vector<std::string> names;
    for (const auto kind : sched::all_schedule_kinds()) names.emplace_back(sched::to_string(kind));
    return names;
  });
  m.def("validate", &validate, py::arg("plan"), py::kw_only(), py::arg("transport") = "buffered",
        "Every problem `pipewright validate` finds, one string each; [] when the plan is valid "
        "and deadlock-free");
}

}  // namespace pipewright::python
