// Replaced by the simulator sources (sim issue).
namespace pipewright::sim {
int placeholder_symbol = 0;
}
