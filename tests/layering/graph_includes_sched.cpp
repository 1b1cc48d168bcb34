// Must NOT compile: graph is below sched. See tests/layering/CMakeLists.txt.
#include "pipewright/sched/plan.hpp"
int main() { return 0; }
