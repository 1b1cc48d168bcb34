// Must NOT compile: sched is below sim. See tests/layering/CMakeLists.txt.
#include "pipewright/sim/simulator.hpp"
int main() { return 0; }
