// Chakra traces in a build without protobuf (PIPEWRIGHT_WITH_CHAKRA=OFF, the portable executor):
// both directions say what is missing (exit 2 from the CLI).
#include "pipewright/graph/error.hpp"
#include "pipewright/sim/chakra.hpp"

namespace pipewright::sim {
namespace {

[[noreturn]] void absent() {
  throw ConfigError(
      "this pipewright was built without Chakra traces (PIPEWRIGHT_WITH_CHAKRA=OFF, as the "
      "portable executor is: it bundles no libprotobuf); export-chakra and import-chakra need a "
      "build with protobuf (tools/install-deps, docs/interop.md)");
}

}  // namespace

std::vector<std::string> to_chakra(const sched::LoweredPlan&, const sched::CostTable&,
                                   const Cluster&, const SimOptions&, const ChakraTensorParallel&) {
  absent();
}

std::string chakra_comm_groups(std::int32_t, std::int32_t, std::int32_t) { absent(); }

sched::LoweredPlan from_chakra(const std::vector<ChakraFile>&, ChakraTpSummary*) { absent(); }

}  // namespace pipewright::sim
