// lmcore convert IN OUT [--to safetensors|torch] — converts any checkpoint lmcore reads into
// safetensors or PyTorch's zip format (chosen by OUT's extension or --to), then reads OUT back and
// checks every tensor (name, dtype, shape, bytes) against IN.
// lmcore convert --consolidate DIR OUT — merges a training checkpoint (sharded at any world size, or
// not) into one Hugging Face-style folder OUT (model.safetensors + config.json).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstring>
#include <filesystem>

#include "lmcore/io/checkpoint.h"
#include "lmcore/io/safetensors.h"
#include "lmcore/io/torch_format.h"
#include "lmcore/train/checkpoint.h"
#include "tools/command.h"

namespace lmcore::cli {

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() && (ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0);
}

}  // namespace

int run_convert(int argc, char** argv) {
  CLI::App app{"Convert a checkpoint to safetensors or PyTorch (.pt), then verify the result.", "lmcore convert"};
  std::string in, out, to;
  bool consolidate = false;
  app.add_option("in", in, "input checkpoint (any format lmcore reads); with --consolidate a training checkpoint folder or run folder")->required();
  app.add_option("out", out, "output file; with --consolidate the output folder")->required();
  app.add_option("--to", to, "output format (default: from OUT's extension)")
      ->check(CLI::IsMember({"safetensors", "torch"}));
  app.add_flag("--consolidate", consolidate,
               "merge a (sharded) training checkpoint into OUT/model.safetensors + OUT/config.json (default: off)");
  CLI11_PARSE(app, argc, argv);

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

  if (to.empty()) {
    const std::string ext = std::filesystem::path(out).extension().string();
    if (ext == ".safetensors") to = "safetensors";
    else if (ext == ".pt" || ext == ".pth" || ext == ".bin" || ext == ".ckpt") to = "torch";
    else {
      fmt::print(stderr, "lmcore convert: cannot tell the output format from '{}'; use --to safetensors|torch\n", out);
      return 2;
    }
  }
  try {
    // convert reads every byte anyway, so the CRC-32s of the input's zip entries are checked too.
    io::LoadOptions verify;
    verify.verify_crc = true;
    const io::LoadResult src = io::load(in, verify);
    if (to == "safetensors") io::save_safetensors(out, src.tensors, src.metadata);
    else io::save_torch(out, src.tensors);

    // Verify: read the result back and compare every tensor.
    const io::LoadResult back = io::load(out, verify);
    const io::Format expected = to == "safetensors" ? io::Format::safetensors : io::Format::torch_zip;
    LMCORE_CHECK(back.format == expected, "convert: {} reads back as {}, expected {}", out, io::format_name(back.format),
                 io::format_name(expected));
    LMCORE_CHECK(back.tensors.size() == src.tensors.size(), "convert: {} holds {} tensors, expected {}", out,
                 back.tensors.size(), src.tensors.size());
    std::uint64_t bytes = 0;
    for (const auto& e : src.tensors) {
      const io::Entry* b = back.tensors.find(e.name);
      LMCORE_CHECK(b != nullptr, "convert: tensor '{}' is missing from {}", e.name, out);
      LMCORE_CHECK(b->tensor.dtype() == e.tensor.dtype() && b->tensor.shape() == e.tensor.shape(),
                   "convert: tensor '{}' reads back as {}, expected {}", e.name, b->tensor.describe(), e.tensor.describe());
      LMCORE_CHECK(same_bytes(b->tensor, e.tensor), "convert: tensor '{}' differs after the round trip", e.name);
      bytes += e.tensor.nbytes();
    }
    fmt::print("{} ({}) -> {} ({}): {} tensors, {} bytes, verified\n", in, io::format_name(src.format), out,
               io::format_name(back.format), src.tensors.size(), bytes);
  } catch (const Error& e) {
    fmt::print(stderr, "lmcore convert: {}\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace lmcore::cli
