// lmcore/train/checkpoint.h — training checkpoints: everything a run needs to continue exactly.
//
// A checkpoint is a folder RUN/checkpoints/step_00000100/ with
//   model.safetensors, config.json     the Hugging Face Llama folder (lmcore/model/checkpoint.h)
//   train_state.safetensors            AdamW's moments per parameter ("exp_avg.<name>",
//                                      "exp_avg_sq.<name>"), and in its metadata: the step, the data
//                                      position, the seed, the optimizer and schedule settings and the
//                                      lmcore version that wrote it
//   tokenizer.json                     when the run was given one (for `lmcore generate`)
// The folder is written under a temporary name, fsynced and renamed into place, so a crash, a kill or
// a full disk leaves either the complete checkpoint or none (and every older checkpoint intact).
// Only the newest `keep` checkpoints are kept.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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

// Checkpoint folders under parent, oldest first (by step).
std::vector<std::string> list_checkpoints(const std::string& parent);
// `path` itself when it is a checkpoint folder, else the newest checkpoint under path or path/checkpoints.
// Throws Error when there is none.
std::string resolve_checkpoint(const std::string& path);
// Removes all but the newest `keep` checkpoints under parent (keep >= 1).
void prune_checkpoints(const std::string& parent, int keep);

}  // namespace lmcore::train
