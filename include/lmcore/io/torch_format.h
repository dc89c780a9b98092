// lmcore/io/torch_format.h — writes PyTorch checkpoints that torch.load reads, weights_only or not.
//
// save_torch writes torch.save's zip format (archive/data.pkl, archive/data/<key>, archive/byteorder,
// archive/version): the state dict is pickled (protocol 2) as an OrderedDict of name ->
// _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()). Tensors that share an lmcore
// storage with the same dtype share one torch storage (only the byte range they use is written), so
// views and tied weights stay views after torch.load. Storages are stored uncompressed and 64-byte
// aligned, so lmcore's load maps them back zero-copy. The file is written atomically.
// torch 1.13 has no float8 or uint16/32/64 storage types: those tensors are written with the storage
// class names of newer torch (torch.Float8_e4m3fnStorage, torch.UInt16Storage, ...), which torch 1.13
// cannot read; every other dtype round-trips through torch 1.13.
//
//   lmcore::io::save_torch("model.pt", {{"wte", wte}, {"lm_head", wte}});  // tied: one storage
#pragma once

#include <string>

#include "lmcore/io/safetensors.h"

namespace lmcore::io {

struct SaveTorchOptions {
  bool force_zip64 = false;  // write ZIP64 records even when not needed (for tests of readers)
};

void save_torch(const std::string& path, const NamedTensors& tensors, const SaveTorchOptions& options = {});
void save_torch(const std::string& path, const StateDict& tensors, const SaveTorchOptions& options = {});

}  // namespace lmcore::io
