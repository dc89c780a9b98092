// Private: what the training loop asks of a model, whether it lives whole in this process (LocalEngine)
// or sharded over ranks (FsdpEngine). Collective calls are made by every rank in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lmcore/dist/process_group.h"
#include "lmcore/fsdp/sharded_model.h"
#include "lmcore/model/llama.h"
#include "lmcore/train/adamw.h"
#include "lmcore/train/checkpoint.h"

namespace lmcore::train::detail {

class Engine {
 public:
  virtual ~Engine() = default;
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
  virtual const model::ModelConfig& config() const = 0;
  // Forward + backward flops of one micro-batch of this rank.
  virtual double flops_per_micro_batch() const = 0;
  virtual void init(std::uint64_t seed) = 0;
  virtual TrainState load(const std::string& dir) = 0;
  virtual std::string save(const std::string& parent, const TrainState& state, const std::string& tokenizer) = 0;
  virtual void zero_grad() = 0;
  // x, y: this rank's (batch, seq_len) rows. `last`: the last micro-batch of the step (gradients sync).
  // Returns the loss averaged over all ranks.
  virtual double micro_step(const std::int32_t* x, const std::int32_t* y, float grad_scale, bool last) = 0;
  virtual double eval_loss(const std::int32_t* x, const std::int32_t* y) = 0;
  virtual double grad_norm() = 0;
  virtual std::string first_nonfinite_gradient() = 0;
  virtual void clip(double norm, double max_norm) = 0;
  virtual void optimizer_step(double lr) = 0;
  // Agreement across ranks: the largest value any rank passed (a stop signal, a step time).
  virtual double max_over_ranks(double v) { return v; }
  // Bytes of parameters, gradients and optimizer state this rank keeps (its shards when sharded).
  virtual std::size_t state_bytes() const = 0;
  // Sharded: the most bytes of gathered parameters and unsharded gradients held at once.
  virtual std::size_t peak_unsharded_bytes() const { return 0; }
  virtual fsdp::CommStats comm_stats() const { return {}; }
  // Sharded: seconds one step's collectives take back to back with nothing to hide them (0 otherwise).
  virtual double time_step_communication() { return 0; }
};

class LocalEngine final : public Engine {
 public:
  LocalEngine(const model::ModelConfig& config, const model::ModelOptions& mo, const AdamWOptions& ao)
      : model_(config, mo), opt_(model_.layout(), ao) {}
  const model::ModelConfig& config() const override { return model_.config(); }
  double flops_per_micro_batch() const override { return model_.flops_per_step(); }
  void init(std::uint64_t seed) override { model_.init_weights(seed); }
  TrainState load(const std::string& dir) override { return load_checkpoint(dir, model_, opt_); }
  std::string save(const std::string& parent, const TrainState& state, const std::string& tokenizer) override {
    return save_checkpoint(parent, model_, opt_, state, tokenizer);
  }
  void zero_grad() override { model_.zero_grad(); }
  double micro_step(const std::int32_t* x, const std::int32_t* y, float grad_scale, bool) override {
    return model_.forward_backward(x, y, grad_scale).loss;
  }
  double eval_loss(const std::int32_t* x, const std::int32_t* y) override { return model_.forward_loss(x, y).loss; }
  double grad_norm() override {
    return std::sqrt(grad_norm_squared(model_.grads().data<float>(), model_.layout().size()));
  }
  std::string first_nonfinite_gradient() override;
  void clip(double norm, double max_norm) override {
    clip_grad_norm(model_.grads().data<float>(), model_.layout().size(), norm, max_norm);
  }
  void optimizer_step(double lr) override {
    opt_.step(model_.params().data<float>(), model_.grads().data<float>(), lr);
    model_.params_updated();
  }
  std::size_t state_bytes() const override {
    return model_.params().nbytes() + model_.grads().nbytes() + opt_.exp_avg().nbytes() + opt_.exp_avg_sq().nbytes();
  }

 private:
  model::Llama model_;
  AdamW opt_;
};

class FsdpEngine final : public Engine {
 public:
  FsdpEngine(const model::ModelConfig& config, const model::ModelOptions& mo, const AdamWOptions& ao,
             dist::ProcessGroup& pg, const fsdp::FsdpOptions& fo)
      : pg_(pg), model_(config, mo, pg, fo), opt_(model_.layout(), ao, model_.pieces()) {}
  int rank() const override { return pg_.rank(); }
  int world_size() const override { return pg_.world_size(); }
  const model::ModelConfig& config() const override { return model_.config(); }
  double flops_per_micro_batch() const override { return model_.model().flops_per_step(); }
  void init(std::uint64_t seed) override { model_.init_weights(seed); }
  TrainState load(const std::string& dir) override { return load_checkpoint(dir, model_, opt_); }
  std::string save(const std::string& parent, const TrainState& state, const std::string& tokenizer) override {
    return save_sharded_checkpoint(parent, model_, opt_, state, tokenizer);
  }
  void zero_grad() override { model_.zero_grad(); }
  double micro_step(const std::int32_t* x, const std::int32_t* y, float grad_scale, bool last) override {
    model_.set_requires_gradient_sync(last);
    return average(model_.forward_backward(x, y, grad_scale).loss);
  }
  double eval_loss(const std::int32_t* x, const std::int32_t* y) override {
    return average(model_.forward_loss(x, y).loss);
  }
  double grad_norm() override { return model_.grad_norm(); }
  std::string first_nonfinite_gradient() override { return model_.first_nonfinite_gradient(); }
  void clip(double norm, double max_norm) override {
    clip_grad_norm(model_.grads().data<float>(), model_.grads().numel(), norm, max_norm);
  }
  void optimizer_step(double lr) override {
    opt_.step(model_.params().data<float>(), model_.grads().data<float>(), lr);
    model_.params_updated();
  }
  double max_over_ranks(double v) override {
    Tensor t = Tensor::full({1}, v, DType::f64);
    pg_.all_reduce(t, {.op = dist::ReduceOp::max});
    return t.data<double>()[0];
  }
  std::size_t state_bytes() const override {
    return model_.shard_bytes() + opt_.exp_avg().nbytes() + opt_.exp_avg_sq().nbytes();
  }
  std::size_t peak_unsharded_bytes() const override { return model_.peak_unsharded_bytes(); }
  fsdp::CommStats comm_stats() const override { return model_.comm_stats(); }
  double time_step_communication() override { return model_.time_step_communication(); }
  fsdp::ShardedLlama& sharded() { return model_; }
  AdamW& optimizer() { return opt_; }

 private:
  double average(double v) {
    Tensor t = Tensor::full({1}, v, DType::f64);
    pg_.all_reduce(t, {.op = dist::ReduceOp::avg});
    return t.data<double>()[0];
  }
  dist::ProcessGroup& pg_;
  fsdp::ShardedLlama model_;
  AdamW opt_;
};

}  // namespace lmcore::train::detail
