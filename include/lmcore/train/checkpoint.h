// lmcore/train/checkpoint.h — training checkpoints: everything a run needs to continue exactly.
//
// A checkpoint is a folder RUN/checkpoints/step_00000100/ with
//   model.safetensors, config.json     the Hugging Face Llama folder (lmcore/model/checkpoint.h)
//   train_state.safetensors            AdamW's moments per parameter ("exp_avg.<name>",
//                                      "exp_avg_sq.<name>"), and in its metadata: the step, the data
//                                      position, the seed, the optimizer and schedule settings and the
//                                      lmcore version that wrote it
//   tokenizer.json                     when the run was given one (for `lmcore generate`)
// or, written by sharded training (every rank its own file, no rank ever holding the whole model):
//   config.json, manifest.json         the world size, each unit's offset, size and padding, the state
//   shard_00002_of_00004.safetensors   rank 2's flat shards: "params", "exp_avg", "exp_avg_sq"
// Either kind loads into either kind of run, at any world size (CheckpointReader re-shards).
// The folder is written under a temporary name, fsynced and renamed into place, so a crash, a kill or
// a full disk leaves either the complete checkpoint or none (and every older checkpoint intact).
// Only the newest `keep` checkpoints are kept.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lmcore/fsdp/sharded_model.h"
#include "lmcore/model/llama.h"
#include "lmcore/train/adamw.h"
#include "lmcore/train/data_loader.h"

namespace lmcore::train {

struct TrainState {
  std::int64_t step = 0;  // optimizer steps completed
  DataPosition data;
  std::uint64_t seed = 0;
  std::map<std::string, std::string> extra;  // written to and read from the metadata as is
};

// Writes the checkpoint of `step` into parent/step_<8 digits> atomically; returns its path. An existing
// folder of that step is replaced only once the new one is complete.
std::string save_checkpoint(const std::string& parent, const model::Llama& model, const AdamW& optimizer,
                            const TrainState& state, const std::string& tokenizer_file = "");

// Reads a checkpoint folder into the model (parameters; params_updated() is called) and optimizer.
// The folder's config must equal the model's (shape fields), else an error names the first field that
// differs. Returns the state.
TrainState load_checkpoint(const std::string& dir, model::Llama& model, AdamW& optimizer);

// Sharded training: every rank calls this (it is collective); each writes its shard file, rank 0 the
// manifest, config and tokenizer, and renames the folder into place once all are complete.
std::string save_sharded_checkpoint(const std::string& parent, fsdp::ShardedLlama& model, const AdamW& optimizer,
                                    const TrainState& state, const std::string& tokenizer_file = "");
// Reads any checkpoint (single-process or sharded at any world size) into this rank's shards.
TrainState load_checkpoint(const std::string& dir, fsdp::ShardedLlama& model, AdamW& optimizer);

// Reads the flat parameters and optimizer moments of a checkpoint folder of either kind by global
// ranges, whatever world size wrote it.
class CheckpointReader {
 public:
  enum class Kind : std::uint8_t { params = 0, exp_avg = 1, exp_avg_sq = 2 };
  explicit CheckpointReader(const std::string& dir);
  ~CheckpointReader();
  CheckpointReader(CheckpointReader&&) noexcept;
  const model::ModelConfig& config() const;
  const TrainState& state() const;
  std::int64_t adamw_steps() const;
  int world_size() const;  // 0 for a single-process checkpoint
  // out[0, count) = flat elements [begin, begin + count) of `kind` (alignment padding reads 0).
  void read(Kind kind, std::int64_t begin, std::int64_t count, float* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes a sharded checkpoint's model as one Hugging Face folder (config.json + model.safetensors).
void consolidate_checkpoint(const std::string& dir, const std::string& out_dir);

// Checkpoint folders under parent, oldest first (by step).
std::vector<std::string> list_checkpoints(const std::string& parent);
// `path` itself when it is a checkpoint folder, else the newest checkpoint under path or path/checkpoints.
// Throws Error when there is none.
std::string resolve_checkpoint(const std::string& path);
// The run folder a checkpoint folder belongs to ("RUN" for "RUN/checkpoints/step_XXXXXXXX"), or empty
// for a checkpoint folder elsewhere.
std::string run_folder_of(const std::string& checkpoint_dir);
// Removes all but the newest `keep` checkpoints under parent (keep >= 1).
void prune_checkpoints(const std::string& parent, int keep);

}  // namespace lmcore::train
