#include "tools/command.h"

namespace lmcore::cli {

const std::vector<Command>& all_commands() {
  static const std::vector<Command> commands = {
      {"info", "version, compiler, SIMD target, BLAS and thread counts, parts built", run_info},
      {"bench", "benchmark tables: lmcore bench [--quick] [--json] [SUITE...]", run_bench},
      {"launch", "run N ranks of a command: lmcore launch --nproc N [--store URL] -- CMD ARGS", run_launch},
      {"trace", "compare flight-recorder dumps: lmcore trace DUMP...", run_trace},
      {"upgrade-check", "PyTorch 2.13 removals/renames and CUDA < 13 in Python code: lmcore upgrade-check [--fix] PATH",
       run_upgrade_check},
      {"inspect", "checkpoint format, tensors and metadata: lmcore inspect FILE [--json]", run_inspect},
      {"convert", "checkpoint conversion, verified: lmcore convert IN OUT [--to safetensors|torch]", run_convert},
      {"train", "train a Llama-style model (no arguments: the built-in default run)", run_train},
      {"generate", "sample from a checkpoint: lmcore generate --checkpoint DIR --prompt TEXT", run_generate},
      {"tokenizer", "byte-level BPE: lmcore tokenizer train|encode|decode (train on files; encode/decode stdin)",
       run_tokenizer},
      {"tokenize", "text files -> token shards: lmcore tokenize --tokenizer FILE --out-dir DIR FILES...", run_tokenize},
      {"codegen", "generated CPU kernels: lmcore codegen list|warm|clear", run_codegen},
  };
  return commands;
}

}  // namespace lmcore::cli
