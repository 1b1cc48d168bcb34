// The plan interpreter: executes one rank's actions of a LoweredPlan, step after step, with
// libtorch stages and a Communicator for the pipeline group. Private to exec/ (names torch types).
//
// What each action does (Note [Interpreter actions]):
//   F      runs the stage on its inputs (model input rows, tensors received by RECV_F, or
//          outputs of a producer stage on the same rank, handed over in memory) and keeps the
//          outputs with their autograd graph; the loss stage also computes loss / m.
//   B      backward of the stage's outputs with the gradients received by RECV_B (plus the loss);
//          parameter gradients accumulate, input gradients are kept for SEND_B.
//   I      input gradients only, keeping what W needs; W: weight gradients from it, which frees
//          the graph (split_backward.hpp, Note [Split backward]). Zero-bubble plans use I + W.
//   SEND_* non-blocking send to the peer stage's rank; the Work and the buffer are kept until the
//          end of the step. A peer stage on the same rank needs no message: the tensors were
//          handed over when they were produced.
//   RECV_* receive of the activation / gradient; with pre-posted receives the action only hands
//          the posted receive to its consumer (the F, or the B / I, of that stage and
//          microbatch), which waits for it (Note [Receives wait at their consumer]); otherwise
//          it blocks until the data arrives or the deadline passes.
//   REDUCE_GRAD -> DataParallelHooks::reduce_grad; OPTIM -> the stage's optimizer step.
// Tensors crossing a stage boundary are detached leaves (requires_grad when floating point), so
// every stage's backward is independent, whether its peer is local or remote.
//
// Plans without REDUCE_GRAD / OPTIM for a local stage get them appended at the end of the rank's
// list (REDUCE_GRAD of each stage, then OPTIM of each stage, in stage order).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "dp/dp_hooks.hpp"
#include "interpreter/nonfinite.hpp"
#include "interpreter/recipe.hpp"
#include "pipewright/exec/communicator.hpp"
#include "pipewright/sched/plan.hpp"

namespace pipewright::exec {

// A stage's computation: forward over its input slots, returning its output slots.
class StageBody {
 public:
  virtual ~StageBody() = default;
  [[nodiscard]] virtual std::vector<torch::Tensor> forward(
      const std::vector<torch::Tensor>& inputs) = 0;
  // Trainable parameters in registration order.
  [[nodiscard]] virtual std::vector<torch::Tensor> parameters() = 0;
  [[nodiscard]] virtual std::vector<torch::Tensor> buffers() { return {}; }
};

// Where one input slot of a stage comes from.
struct InputSource {
  int producer_stage = -1;  // -1: the model input (the microbatch's x)
  int producer_output = 0;  // output slot of the producer stage
};

// One local stage as the interpreter runs it.
struct StageSetup {
  int stage = 0;
  std::shared_ptr<StageBody> body;
  std::vector<InputSource> inputs;  // one per forward input slot
  int num_outputs = 1;
  // Output slot fed to the loss, or -1 if this stage does not compute the loss.
  int loss_output = -1;
  // Consumers of each output slot: (consumer stage, consumer input slot), for every consumer.
  std::vector<std::vector<std::pair<int, int>>> consumers;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  // Note [Activation recompute] (interpreter_compute.cpp): F keeps no autograd graph; B / I run
  // the forward again first.
  bool recompute = false;
};

// Mean loss of one microbatch: (output, target) -> scalar.
using LossFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;

// One executed action, with steady_clock times (ns since the clock's epoch, which is shared by
// every process of one machine).
struct ActionTiming {
  sched::Action action;
  std::int64_t step = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t bytes = 0;  // payload of SEND/RECV actions; for F, heap bytes the forward kept
  // Note [Send time] (report/run_report.hpp): SEND only. Time inside the transport's send calls
  // (within [start_ns, end_ns]), and time the end of the step then waited for its completion.
  std::int64_t send_ns = 0;
  std::int64_t drain_ns = 0;
  // Note [Compute CPU time] (report/run_report.hpp): compute actions on CPU devices only. The
  // calling thread's CPU time over [start_ns, end_ns]; 0 when not measured.
  std::int64_t cpu_ns = 0;
};

// Note [Data-parallel sync] (report/run_report.hpp): the data-parallel algorithm's work after the
// rank's last OPTIM (DataParallelHooks::after_optimizer_step: SGP's gossip, LocalSGD / SlowMo
// averaging, DiLoCo's outer step, ZeRO's all-gathers), timed apart from OPTIM.
struct SyncTiming {
  std::int64_t step = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

struct InterpreterOptions {
  std::chrono::milliseconds timeout{300'000};
  torch::Device device{torch::kCPU};
  bool record_timings = false;
  // Post every remote receive of a step when the step starts (Note [Pre-posted receives]).
  // Only for buffered transports (Gloo, MPI, fake): NCCL's receives occupy its stream in order.
  bool prepost_receives = false;
  // What a non-finite gradient norm does to the OPTIM action (Note [Non-finite steps]).
  sched::NanPolicy nan_policy = sched::NanPolicy::kError;
  // Note [Measured split backward] (run_report.hpp): in this step (a warm-up step of a profiled
  // run whose plan has no I/W), the full backward of every even microbatch runs as I then W and
  // is recorded as two actions. -1: never.
  std::int64_t split_backward_step = -1;
  int world_rank = 0;  // for messages
  // Note [Mixed precision] (interpreter_compute.cpp): bf16 / fp16 run each stage's forward under
  // autocast and send floating tensors between stages in that type.
  sched::Precision precision = sched::Precision::kFp32;
  // The learning rate, gradient clipping and fp16 loss scaling at the OPTIM actions (recipe.hpp);
  // nullptr: the optimizers' own learning rate, no clipping, no scaling. Must outlive the
  // interpreter.
  TrainingRecipe* recipe = nullptr;
};

struct StepResult {
  // Sum over local microbatches of the unscaled microbatch loss, divided by m (0 when no local
  // stage computes the loss).
  double loss = 0;
  bool has_loss = false;
  // The first local stage whose loss / gradient norm was not finite this step (Note
  // [Non-finite steps]); loss_stage -1 and grad_stage -1 when all were finite.
  NonFinite nonfinite;
  // The step's optimizer phase (learning rate, gradient norm, loss scale, fp16 skip) when a
  // TrainingRecipe is set and the step has OPTIM actions.
  OptimizerPhase optimizer;
};

// Shape and dtype of one tensor crossing a cut, agreed at start-up.
struct TensorMeta {
  torch::ScalarType dtype = torch::kFloat;
  std::vector<std::int64_t> shape;
};

class Interpreter {
 public:
  // `pipe` is the pipeline group (its ranks are plan ranks); `pipe_rank` is this rank's plan
  // rank. `stages` holds exactly the plan's stages placed on pipe_rank. `hooks` must outlive
  // this object. Throws InvalidPlanError when the plan and the stages disagree.
  Interpreter(const sched::LoweredPlan& plan, int pipe_rank, std::vector<StageSetup> stages,
              Communicator* pipe, DataParallelHooks* hooks, LossFn loss,
              InterpreterOptions options);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Collective over the pipeline group: every stage runs one forward without gradients on zero
  // inputs of the microbatch shape (x_example: one microbatch of model input) and tells its
  // consumers the shapes of what it sends, in stage order. Must be called before run_step.
  // A stage whose forward fails (data/model shape mismatch) throws ConfigError naming it.
  void agree_shapes(const torch::Tensor& x_example, std::int64_t step_for_messages = -1);

  // Runs one training step. x_mbs / y_mbs: the m microbatches of input and target (only the
  // stages that read the model input / compute the loss look at them).
  StepResult run_step(std::int64_t step, const std::vector<torch::Tensor>& x_mbs,
                      const std::vector<torch::Tensor>& y_mbs);

  // Parameters of each local stage, for DataParallelHooks::on_start and saving.
  [[nodiscard]] std::vector<StageParams> stage_params() const;
  [[nodiscard]] const std::vector<ActionTiming>& timings() const noexcept { return timings_; }
  [[nodiscard]] const std::vector<SyncTiming>& sync_timings() const noexcept {
    return sync_timings_;
  }
  // The local stages (the evaluation shares their bodies and edges).
  [[nodiscard]] const std::vector<StageSetup>& setups() const noexcept { return stages_; }
  void clear_timings() {
    timings_.clear();
    sync_timings_.clear();
  }
  // Replaces a local stage's optimizer (ZeRO: one over the replica's shard); returns it.
  torch::optim::Optimizer* replace_optimizer(int stage,
                                             std::unique_ptr<torch::optim::Optimizer> optimizer);
  [[nodiscard]] const std::vector<sched::Action>& actions() const noexcept { return actions_; }
  // Forward-only plans (PlanShape::forward_only): the prediction of each microbatch of the last
  // run_step, for the microbatches whose loss stage is local (undefined for the others).
  [[nodiscard]] const std::vector<torch::Tensor>& predictions() const noexcept {
    return predictions_;
  }
  // Shapes received from (producer, consumer) for remote edges, after agree_shapes.
  [[nodiscard]] const std::vector<TensorMeta>& edge_meta(int producer, int consumer) const;

 private:
  struct MbState;
  struct Pending {
    WorkPtr work;
    torch::Tensor keep_alive;
    OpContext ctx;
    sched::Action action;  // the SEND that posted it (Note [Send time])
  };

  void exec_action(const sched::Action& a, std::int64_t step,
                   const std::vector<torch::Tensor>& x_mbs, const std::vector<torch::Tensor>& y_mbs,
                   ActionTiming* timing);
  void do_forward(const sched::Action& a, std::int64_t step, const std::vector<torch::Tensor>& x,
                  const std::vector<torch::Tensor>& y);
  void do_backward(const sched::Action& a, std::int64_t step, bool input, bool weight);
  void do_send(const sched::Action& a, std::int64_t step, ActionTiming* timing);
  void do_recv(const sched::Action& a, std::int64_t step, ActionTiming* timing);
  // Note [p2p batches]: runs actions_[first, last), all remote SEND/RECV, as one p2p batch.
  void run_p2p_batch(std::size_t first, std::size_t last, std::int64_t step,
                     const std::vector<torch::Tensor>& x_mbs,
                     const std::vector<torch::Tensor>& y_mbs);
  [[nodiscard]] bool is_remote_p2p(const sched::Action& a) const;
  void deliver_input_grads(int stage, int mb, MbState& st);
  // Note [Receives wait at their consumer]: waits for the pre-posted receives that `consumer`
  // (F, B or I) reads, recording each wait as its RECV action; all of them when `consumer` is
  // null (end of step).
  void await_receives(const sched::Action* consumer, std::int64_t step);
  // The stage's forward on ms.inputs into ms.outputs, and on the loss stage ms.loss (scaled);
  // returns the unscaled loss (undefined for other stages).
  torch::Tensor forward_stage(const StageSetup& st, MbState& ms);
  // The stage's body on `inputs` under the run's precision (Note [Mixed precision]).
  std::vector<torch::Tensor> run_body(const StageSetup& st,
                                      const std::vector<torch::Tensor>& inputs);
  void do_optimizer_step(const sched::Action& a, std::int64_t step);
  [[nodiscard]] bool is_last_optimizer_step(const sched::Action& a) const;
  void recompute_forward(const StageSetup& st, MbState& ms);
  void wait_pending(std::int64_t step);
  [[nodiscard]] StageSetup& local(int stage);
  [[nodiscard]] MbState& state(int stage, int mb);
  [[nodiscard]] OpContext context(const sched::Action& a, std::int64_t step) const;
  [[nodiscard]] std::int64_t tag(int producer, int consumer, bool backward, int mb, int k) const;
  [[nodiscard]] int rank_of(int stage) const;

  sched::LoweredPlan plan_;
  int pipe_rank_;
  std::vector<StageSetup> stages_;
  std::map<int, std::size_t> stage_index_;
  Communicator* pipe_;
  DataParallelHooks* hooks_;
  LossFn loss_;
  InterpreterOptions options_;
  std::vector<sched::Action> actions_;
  std::map<int, int> last_backward_mb_;  // stage -> microbatch whose backward runs last
  std::map<std::pair<int, int>, std::vector<TensorMeta>> edge_meta_;
  std::map<std::pair<int, int>, std::int64_t> edge_id_;
  bool shapes_agreed_ = false;
  std::map<std::pair<int, int>, std::unique_ptr<MbState>> states_;
  std::vector<Pending> pending_;
  // Inside run_p2p_batch: do_recv posts its receives and leaves the wait here.
  std::vector<std::function<void()>>* deferred_recvs_ = nullptr;
  // Note [Pre-posted receives]: per action index, the buffers and Works of a receive posted at
  // the start of the step (empty when not pre-posted).
  struct Posted {
    std::vector<torch::Tensor> bufs;
    std::vector<WorkPtr> works;
  };
  std::vector<Posted> posted_;
  // Note [Receives wait at their consumer]: pre-posted receives whose RECV action ran, by
  // (stage, microbatch, backward), with how to finish each (wait, then hand the buffers over).
  struct Awaiting {
    sched::Action action;
    std::function<void(ActionTiming*)> finish;
  };
  std::map<std::tuple<int, int, bool>, std::vector<Awaiting>> awaiting_;
  [[nodiscard]] bool waits_at_consumer(std::size_t index) const;
  void prepost_receives(std::int64_t step);
  void connect_peers();  // after the shape agreement: Communicator::connect_p2p
  [[nodiscard]] Posted post_receive(const sched::Action& a, std::int64_t step);
  std::vector<ActionTiming> timings_;
  // Thread CPU time at the start of the compute action being timed (Note [Compute CPU time]);
  // 0 when it is not measured.
  std::int64_t cpu_start_ns_ = 0;
  std::vector<SyncTiming> sync_timings_;
  std::vector<torch::Tensor> predictions_;  // forward-only plans, per microbatch
  double loss_sum_ = 0;
  int loss_count_ = 0;
  int loss_stage_ = -1;
  NonFinite nonfinite_;
  OptimizerPhase phase_;
};

}  // namespace pipewright::exec
