// Private: the expression tree behind MaskMod. Each node answers one element, a whole block in closed
// form where it can, a key range bound, and a tile fill (rows of key intervals for the built-ins, so a
// partial tile costs one pass of byte writes rather than a call per element).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "lmcore/attention/mask_mod.h"

namespace lmcore::attention::detail {

class MaskNode {
 public:
  virtual ~MaskNode() = default;
  virtual bool allowed(std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) const = 0;
  // Default: evaluate every element (callables, tensors).
  virtual BlockKind classify(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                             std::int64_t k1) const;
  // Default: no bound.
  virtual std::pair<std::int64_t, std::int64_t> kv_bound(std::int64_t b, std::int64_t h, std::int64_t q0,
                                                         std::int64_t q1, std::int64_t kv_len) const;
  // Default: allowed() per element.
  virtual void fill(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
                    std::uint8_t* out, std::int64_t ld) const;
  virtual bool independent_of_batch_and_head() const { return true; }
  virtual bool has_callable() const { return false; }
  virtual std::string describe() const = 0;
};

}  // namespace lmcore::attention::detail
