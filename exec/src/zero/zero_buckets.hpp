// ZeRO's buckets with tied parameters (issue 43; Note [ZeRO tied parameters]).
//
// Note [ZeRO tied parameters]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A parameter tied across pipeline stages (GPT-2's wte / lm_head; Chimera's replicated stages,
// whose every parameter is a tied group) has one copy per stage, and the tied exchange (Note
// [Tied gradient exchange] in dp/tied_sync.hpp) sums the copies' gradients before OPTIM. Under
// ZeRO each copy's reduced gradient is sharded by then, so every stage holding a copy must shard
// it the same way: each tied parameter gets a bucket of its own (n = its elements, padded to
// ceil(n/d) d: the same in every stage, as d is the same), and replica r's piece of that bucket
// is the same elements in every stage. The exchange then sums those pieces over the replica's
// pipeline group (the sum commutes with the reduce-scatter), each stage's optimizer steps its
// piece with the summed gradient, and the all-gathers give every stage the same whole copy. The
// other parameters keep DDP's buckets (sched::assign_buckets over them, the caps unchanged); a
// dedicated bucket sits in launch order before the first regular bucket whose parameters were
// all registered before it (where it becomes ready). The simulator's buckets (DDP's over every
// parameter) differ only there: the tied parameters' bytes are in their own buckets.
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/sched/buckets.hpp"

namespace pipewright::exec {

// sched::assign_buckets over the parameters of `bytes` (registration order) that are not
// `dedicated`, plus one bucket per dedicated parameter, placed as Note [ZeRO tied parameters]
// says. Indices in the result are into `bytes`.
[[nodiscard]] sched::BucketAssignment assign_zero_buckets(const std::vector<std::int64_t>& bytes,
                                                          const std::vector<bool>& dedicated,
                                                          std::int64_t cap_bytes,
                                                          std::int64_t first_cap_bytes);

}  // namespace pipewright::exec
