// lmcore/attention/mask_mod.h — which (query, key) pairs may attend, as a composable expression.
//
// A MaskMod answers allowed(b, h, q_idx, kv_idx). The built-in masks also answer, in closed form, whether
// a whole block of the score matrix is empty, fully allowed or partially allowed; create_block_mask
// uses that to build a BlockMask without ever forming the dense B x H x L x S mask, and the attention
// kernels evaluate the mask element by element only inside partial blocks.
//
//   MaskMod m = MaskMod::sliding_window(256);                    // causal and q - kv <= 256
//   MaskMod d = MaskMod::document(doc_ids) & MaskMod::causal();  // causal within each document
//   MaskMod u = MaskMod::from_function([](int64_t, int64_t, int64_t q, int64_t kv) { return (q + kv) % 3 != 0; });
//
// Built-ins (q = query position, kv = key position, both from 0, top-left aligned when L != S):
//   all()                  every pair
//   causal()               kv <= q
//   sliding_window(W)      kv <= q && q - kv <= W          (attention-gym's definition: W + 1 keys)
//   prefix_lm(P)           kv < P || kv <= q
//   document(doc_ids)      doc_ids[q] == doc_ids[kv]        (one id per position, covering max(L, S))
//   chunked(C)             q / C == kv / C                  (local attention in chunks of C)
//   from_function(f)       f(b, h, q, kv), any C++ callable; classified by evaluating every element once
//   from_tensor(mask)      a bool tensor broadcastable to [B, H, L, S] (the dense `sdpa` mask)
// and a & b, a | b, !a. Compositions classify conservatively: a block is reported partial when the
// parts cannot decide it, and partial blocks are always evaluated element by element, so the result
// is exact either way.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lmcore/core/tensor.h"

namespace lmcore::attention {

// How a rectangular block of the (q, kv) grid relates to a mask.
enum class BlockKind : std::uint8_t { empty = 0, partial = 1, full = 2 };

using MaskFunction = std::function<bool(std::int64_t b, std::int64_t h, std::int64_t q_idx, std::int64_t kv_idx)>;

namespace detail {
class MaskNode;
}

class MaskMod {
 public:
  MaskMod();  // all()

  static MaskMod all();
  static MaskMod causal();
  static MaskMod sliding_window(std::int64_t window);
  static MaskMod prefix_lm(std::int64_t prefix_length);
  static MaskMod document(std::vector<std::int64_t> doc_ids);
  static MaskMod chunked(std::int64_t chunk_size);
  static MaskMod from_function(MaskFunction fn, std::string name = "user");
  static MaskMod from_tensor(const Tensor& mask);

  friend MaskMod operator&(const MaskMod& a, const MaskMod& b);
  friend MaskMod operator|(const MaskMod& a, const MaskMod& b);
  friend MaskMod operator!(const MaskMod& a);

  // One element.
  bool allowed(std::int64_t b, std::int64_t h, std::int64_t q_idx, std::int64_t kv_idx) const;
  // The block [q0, q1) x [k0, k1) (non-empty ranges).
  BlockKind classify(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                     std::int64_t k1) const;
  // A range [lo, hi) of key positions outside which no key is allowed for any query in [q0, q1);
  // create_block_mask visits only the key blocks inside it. Clamped to [0, kv_len).
  std::pair<std::int64_t, std::int64_t> kv_bound(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1,
                                                 std::int64_t kv_len) const;
  // out[i * ld + j] = allowed(b, h, q0 + i, k0 + j) for i < nq, j < nk (1 or 0).
  void fill(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
            std::uint8_t* out, std::int64_t ld) const;
  // False when the mask may differ between batches or heads (callables, tensors).
  bool independent_of_batch_and_head() const;
  // True when the mask contains a callable (whose cost per element the caller cannot know).
  bool has_callable() const;
  // "sliding_window(256) & document"
  std::string describe() const;

  const std::shared_ptr<const detail::MaskNode>& node() const { return node_; }

 private:
  explicit MaskMod(std::shared_ptr<const detail::MaskNode> node) : node_(std::move(node)) {}
  std::shared_ptr<const detail::MaskNode> node_;
};

}  // namespace lmcore::attention
