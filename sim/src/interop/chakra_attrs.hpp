// Private: the names of the GlobalMetadata attrs that carry a plan's shape in pipewright's
// Chakra traces (Note [Chakra metadata] in chakra_write.cpp), shared by the writer and reader.
#pragma once

namespace pipewright::sim::chakra {

inline constexpr const char* kFormat = "pw_format";  // "pipewright-plan"
inline constexpr const char* kFormatValue = "pipewright-plan";
inline constexpr const char* kSchedule = "pw_schedule";
inline constexpr const char* kRank = "pw_rank";  // global rank of this trace
inline constexpr const char* kPp = "pw_pp";
inline constexpr const char* kDp = "pw_dp";
inline constexpr const char* kTp = "pw_tp";  // absent: 1 (Note [Chakra tensor parallelism])
inline constexpr const char* kStages = "pw_stages";
inline constexpr const char* kMicrobatches = "pw_microbatches";
inline constexpr const char* kStageToRank = "pw_stage_to_rank";
inline constexpr const char* kStageEdges = "pw_stage_edges";  // from, to, from, to, ...
inline constexpr const char* kStageToModelStage = "pw_stage_to_model_stage";
inline constexpr const char* kForwardOnly = "pw_forward_only";
inline constexpr const char* kDurationNs = "pw_duration_ns";      // node attr: exact duration
inline constexpr const char* kTpCollective = "pw_tp_collective";  // node attr: a TP collective

}  // namespace pipewright::sim::chakra
