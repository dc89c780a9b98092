// lmcore convert IN OUT [--to safetensors|torch] — converts any checkpoint lmcore reads into
// safetensors or PyTorch's zip format (chosen by OUT's extension or --to), then reads OUT back and
// checks every tensor (name, dtype, shape, bytes) against IN (io::convert, lmcore/io/convert.h).
// lmcore convert --consolidate DIR OUT — merges a training checkpoint (sharded at any world size, or
// not) into one Hugging Face-style folder OUT (model.safetensors + config.json).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstring>
#include <filesystem>

#include "lmcore/io/checkpoint.h"
#include "lmcore/io/convert.h"
#include "lmcore/io/safetensors.h"
#include "lmcore/io/torch_format.h"
#include "lmcore/train/checkpoint.h"
#include "tools/cli_parse.h"
#include "tools/command.h"

namespace lmcore::cli {

int run_convert(int argc, char** argv) {
  CLI::App app{"Convert a checkpoint to safetensors or PyTorch (.pt), then verify the result.", "lmcore convert"};
  std::string in, out, to;
  bool consolidate = false;
  app.add_option("in", in, "input checkpoint (any format lmcore reads); with --consolidate a training checkpoint folder or run folder")->required();
  app.add_option("out", out,
                 "output file; with --consolidate the output folder. OUT must be missing or a regular file: a FIFO, "
                 "device, directory or symbolic link at OUT is refused (a link is not written through: pass its "
                 "target). OUT is replaced atomically; an interrupted convert leaves it as it was")
      ->required();
  app.add_option("--to", to, "output format (default: from OUT's extension)")
      ->check(CLI::IsMember({"safetensors", "torch"}));
  app.add_flag("--consolidate", consolidate,
               "merge a (sharded) training checkpoint into OUT/model.safetensors + OUT/config.json (default: off)");
  LMCORE_PARSE_ARGS(app, argc, argv);

  if (consolidate) {
    if (!to.empty() && to != "safetensors") {
      fmt::print(stderr, "lmcore convert: --consolidate writes safetensors, found --to {}\n", to);
      return 2;
    }
    try {
      const std::string dir = train::resolve_checkpoint(in);
      const train::CheckpointReader reader(dir);
      train::consolidate_checkpoint(dir, out);
      const io::LoadResult back = io::load((std::filesystem::path(out) / "model.safetensors").string());
      std::uint64_t bytes = 0;
      for (const auto& e : back.tensors) bytes += e.tensor.nbytes();
      fmt::print("{} ({}) -> {}/model.safetensors: {} tensors, {} bytes\n", dir,
                 reader.world_size() > 0 ? fmt::format("{} shards", reader.world_size()) : std::string("single process"),
                 out, back.tensors.size(), bytes);
    } catch (const Error& e) {
      fmt::print(stderr, "lmcore convert: {}\n", e.what());
      return 1;
    }
    return 0;
  }

  io::ConvertOptions o;
  o.to = to.empty() ? io::output_format_for(out) : to == "safetensors" ? io::Format::safetensors : io::Format::torch_zip;
  if (o.to == io::Format::unknown) {
    fmt::print(stderr, "lmcore convert: cannot tell the output format from '{}'; use --to safetensors|torch\n", out);
    return kUsageError;
  }
  try {
    const io::ConvertResult r = io::convert(in, out, o);
    fmt::print("{} ({}) -> {} ({}): {} tensors, {} bytes, verified\n", in, io::format_name(r.from), out,
               io::format_name(r.to), r.tensors, r.bytes);
  } catch (const Error& e) {
    fmt::print(stderr, "lmcore convert: {}\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace lmcore::cli
