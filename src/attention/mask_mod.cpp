// The built-in masks in closed form, and their compositions. See lmcore/attention/mask_mod.h.
#include "lmcore/attention/mask_mod.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "src/attention/mask_node.h"

namespace lmcore::attention {
namespace detail {

BlockKind MaskNode::classify(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                             std::int64_t k1) const {
  bool any = false, all = true;
  for (std::int64_t q = q0; q < q1; ++q) {
    for (std::int64_t kv = k0; kv < k1; ++kv) {
      if (allowed(b, h, q, kv)) any = true; else all = false;
    }
  }
  return all ? BlockKind::full : any ? BlockKind::partial : BlockKind::empty;
}

std::pair<std::int64_t, std::int64_t> MaskNode::kv_bound(std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                                         std::int64_t kv_len) const {
  return {0, kv_len};
}

void MaskNode::fill(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0,
                    std::int64_t nk, std::uint8_t* out, std::int64_t ld) const {
  for (std::int64_t i = 0; i < nq; ++i)
    for (std::int64_t j = 0; j < nk; ++j) out[i * ld + j] = allowed(b, h, q0 + i, k0 + j) ? 1 : 0;
}

namespace {

// Masks whose allowed keys for query q form one interval [lo(q), hi(q)] (inclusive): a row of a tile
// is then two memsets and a fill.
class IntervalNode : public MaskNode {
 public:
  virtual std::pair<std::int64_t, std::int64_t> row_interval(std::int64_t q) const = 0;
  bool allowed(std::int64_t, std::int64_t, std::int64_t q, std::int64_t kv) const override {
    const auto [lo, hi] = row_interval(q);
    return kv >= lo && kv <= hi;
  }
  void fill(std::int64_t, std::int64_t, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
            std::uint8_t* out, std::int64_t ld) const override {
    for (std::int64_t i = 0; i < nq; ++i) {
      auto [lo, hi] = row_interval(q0 + i);
      const std::int64_t a = std::clamp<std::int64_t>(lo - k0, 0, nk);
      const std::int64_t e = std::clamp<std::int64_t>(hi + 1 - k0, a, nk);
      std::uint8_t* row = out + i * ld;
      std::memset(row, 0, static_cast<std::size_t>(a));
      std::memset(row + a, 1, static_cast<std::size_t>(e - a));
      std::memset(row + e, 0, static_cast<std::size_t>(nk - e));
    }
  }
};

constexpr std::int64_t kFar = INT64_MAX / 4;

class AllNode final : public IntervalNode {
 public:
  std::pair<std::int64_t, std::int64_t> row_interval(std::int64_t) const override { return {0, kFar}; }
  BlockKind classify(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t) const override {
    return BlockKind::full;
  }
  std::pair<std::int64_t, std::int64_t> kv_bound(std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                                 std::int64_t kv_len) const override {
    return {0, kv_len};
  }
  std::string describe() const override { return "all"; }
};

class CausalNode final : public IntervalNode {
 public:
  std::pair<std::int64_t, std::int64_t> row_interval(std::int64_t q) const override { return {0, q}; }
  BlockKind classify(std::int64_t, std::int64_t, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                     std::int64_t k1) const override {
    if (k0 > q1 - 1) return BlockKind::empty;
    if (k1 - 1 <= q0) return BlockKind::full;
    return BlockKind::partial;
  }
  std::pair<std::int64_t, std::int64_t> kv_bound(std::int64_t, std::int64_t, std::int64_t, std::int64_t q1,
                                                 std::int64_t kv_len) const override {
    return {0, std::min(q1, kv_len)};
  }
  std::string describe() const override { return "causal"; }
};

class SlidingWindowNode final : public IntervalNode {
 public:
  explicit SlidingWindowNode(std::int64_t w) : w_(w) {}
  std::pair<std::int64_t, std::int64_t> row_interval(std::int64_t q) const override { return {q - w_, q}; }
  BlockKind classify(std::int64_t, std::int64_t, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                     std::int64_t k1) const override {
    if (k0 > q1 - 1 || q0 - (k1 - 1) > w_) return BlockKind::empty;
    if (k1 - 1 <= q0 && (q1 - 1) - k0 <= w_) return BlockKind::full;
    return BlockKind::partial;
  }
  std::pair<std::int64_t, std::int64_t> kv_bound(std::int64_t, std::int64_t, std::int64_t q0, std::int64_t q1,
                                                 std::int64_t kv_len) const override {
    return {std::clamp<std::int64_t>(q0 - w_, 0, kv_len), std::min(q1, kv_len)};
  }
  std::string describe() const override { return fmt::format("sliding_window({})", w_); }

 private:
  std::int64_t w_;
};

class ChunkedNode final : public IntervalNode {
 public:
  explicit ChunkedNode(std::int64_t c) : c_(c) {}
  std::pair<std::int64_t, std::int64_t> row_interval(std::int64_t q) const override {
    const std::int64_t start = q / c_ * c_;
    return {start, start + c_ - 1};
  }
  BlockKind classify(std::int64_t, std::int64_t, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                     std::int64_t k1) const override {
    const std::int64_t a0 = q0 / c_, a1 = (q1 - 1) / c_, b0 = k0 / c_, b1 = (k1 - 1) / c_;
    if (a1 < b0 || b1 < a0) return BlockKind::empty;
    if (a0 == a1 && b0 == b1 && a0 == b0) return BlockKind::full;
    return BlockKind::partial;
  }
  std::pair<std::int64_t, std::int64_t> kv_bound(std::int64_t, std::int64_t, std::int64_t q0, std::int64_t q1,
                                                 std::int64_t kv_len) const override {
    return {std::min(q0 / c_ * c_, kv_len), std::min(((q1 - 1) / c_ + 1) * c_, kv_len)};
  }
  std::string describe() const override { return fmt::format("chunked({})", c_); }

 private:
  std::int64_t c_;
};

// kv < P or kv <= q: two intervals, [0, P) and [0, q], i.e. the single interval [0, max(P - 1, q)].
class PrefixLmNode final : public IntervalNode {
 public:
  explicit PrefixLmNode(std::int64_t p) : p_(p) {}
  std::pair<std::int64_t, std::int64_t> row_interval(std::int64_t q) const override {
    return {0, std::max(p_ - 1, q)};
  }
  BlockKind classify(std::int64_t, std::int64_t, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                     std::int64_t k1) const override {
    if (k1 - 1 <= std::max(p_ - 1, q0)) return BlockKind::full;
    if (k0 > std::max(p_ - 1, q1 - 1)) return BlockKind::empty;
    return BlockKind::partial;
  }
  std::pair<std::int64_t, std::int64_t> kv_bound(std::int64_t, std::int64_t, std::int64_t, std::int64_t q1,
                                                 std::int64_t kv_len) const override {
    return {0, std::min(std::max(p_, q1), kv_len)};
  }
  std::string describe() const override { return fmt::format("prefix_lm({})", p_); }

 private:
  std::int64_t p_;
};

// doc[q] == doc[kv]. With sorted ids (documents packed one after another, the usual case) every
// document is an interval and blocks classify from the ids at their corners; unsorted ids fall back
// to per-element classification.
class DocumentNode final : public MaskNode {
 public:
  explicit DocumentNode(std::vector<std::int64_t> ids) : ids_(std::move(ids)) {
    sorted_ = std::is_sorted(ids_.begin(), ids_.end());
    if (sorted_) {
      // start_[i] / end_[i]: the first and one-past-last position of the document holding position i.
      start_.resize(ids_.size());
      end_.resize(ids_.size());
      const std::int64_t n = static_cast<std::int64_t>(ids_.size());
      for (std::int64_t i = 0; i < n; ++i) start_[i] = (i > 0 && ids_[i] == ids_[i - 1]) ? start_[i - 1] : i;
      for (std::int64_t i = n - 1; i >= 0; --i) end_[i] = (i + 1 < n && ids_[i] == ids_[i + 1]) ? end_[i + 1] : i + 1;
    }
  }
  std::int64_t id(std::int64_t pos) const {
    LMCORE_CHECK(pos >= 0 && pos < static_cast<std::int64_t>(ids_.size()),
                 "MaskMod::document: position {} is outside the {} document ids given", pos, ids_.size());
    return ids_[static_cast<std::size_t>(pos)];
  }
  bool allowed(std::int64_t, std::int64_t, std::int64_t q, std::int64_t kv) const override { return id(q) == id(kv); }
  BlockKind classify(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                     std::int64_t k1) const override {
    if (!sorted_) return MaskNode::classify(b, h, q0, q1, k0, k1);
    const std::int64_t a0 = id(q0), a1 = id(q1 - 1), b0 = id(k0), b1 = id(k1 - 1);
    if (a1 < b0 || b1 < a0) return BlockKind::empty;
    if (a0 == a1 && b0 == b1 && a0 == b0) return BlockKind::full;
    return BlockKind::partial;
  }
  std::pair<std::int64_t, std::int64_t> kv_bound(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1,
                                                 std::int64_t kv_len) const override {
    if (!sorted_) return MaskNode::kv_bound(b, h, q0, q1, kv_len);
    (void)id(q1 - 1);
    return {std::min(start_[q0], kv_len), std::min(end_[q1 - 1], kv_len)};
  }
  void fill(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
            std::uint8_t* out, std::int64_t ld) const override {
    (void)id(q0 + nq - 1);
    (void)id(k0 + nk - 1);
    if (!sorted_) return MaskNode::fill(b, h, q0, nq, k0, nk, out, ld);
    for (std::int64_t i = 0; i < nq; ++i) {
      const std::int64_t lo = start_[q0 + i], hi = end_[q0 + i];
      const std::int64_t a = std::clamp<std::int64_t>(lo - k0, 0, nk);
      const std::int64_t e = std::clamp<std::int64_t>(hi - k0, a, nk);
      std::uint8_t* row = out + i * ld;
      std::memset(row, 0, static_cast<std::size_t>(a));
      std::memset(row + a, 1, static_cast<std::size_t>(e - a));
      std::memset(row + e, 0, static_cast<std::size_t>(nk - e));
    }
  }
  std::string describe() const override { return fmt::format("document({} positions)", ids_.size()); }

 private:
  std::vector<std::int64_t> ids_, start_, end_;
  bool sorted_ = false;
};

class FunctionNode final : public MaskNode {
 public:
  FunctionNode(MaskFunction fn, std::string name) : fn_(std::move(fn)), name_(std::move(name)) {}
  bool allowed(std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) const override {
    return fn_(b, h, q, kv);
  }
  bool independent_of_batch_and_head() const override { return false; }
  bool has_callable() const override { return true; }
  std::string describe() const override { return name_; }

 private:
  MaskFunction fn_;
  std::string name_;
};

// A bool tensor broadcast to [B, H, L, S] (leading dims may be missing or 1).
class TensorNode final : public MaskNode {
 public:
  explicit TensorNode(const Tensor& mask) {
    LMCORE_CHECK(mask.defined(), "MaskMod::from_tensor: mask is undefined");
    LMCORE_CHECK(mask.dtype() == DType::boolean, "MaskMod::from_tensor: expected a bool mask, found {}",
                 mask.dtype());
    LMCORE_CHECK(mask.dim() >= 2 && mask.dim() <= 4,
                 "MaskMod::from_tensor: expected a mask of 2 to 4 dims ([B, H, L, S]), found {}",
                 shape_str(mask.shape()));
    Tensor m = mask;
    while (m.dim() < 4) m = m.unsqueeze(0);
    mask_ = m;
    for (int d = 0; d < 4; ++d) {
      sizes_[d] = m.size(d);
      strides_[d] = m.size(d) == 1 ? 0 : m.stride(d);
    }
    data_ = static_cast<const std::uint8_t*>(m.data_ptr());
  }
  const std::uint8_t* at(std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) const {
    LMCORE_CHECK((sizes_[0] == 1 || b < sizes_[0]) && (sizes_[1] == 1 || h < sizes_[1]) && q < sizes_[2] &&
                     kv < sizes_[3],
                 "attention mask of shape {} does not cover (b={}, h={}, q={}, kv={})", shape_str(mask_.shape()), b,
                 h, q, kv);
    return data_ + b * strides_[0] + h * strides_[1] + q * strides_[2] + kv * strides_[3];
  }
  bool allowed(std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) const override {
    return *at(b, h, q, kv) != 0;
  }
  void fill(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
            std::uint8_t* out, std::int64_t ld) const override {
    (void)at(b, h, q0 + nq - 1, k0 + nk - 1);
    for (std::int64_t i = 0; i < nq; ++i) {
      const std::uint8_t* src = data_ + b * strides_[0] + h * strides_[1] + (q0 + i) * strides_[2] + k0 * strides_[3];
      std::uint8_t* row = out + i * ld;
      if (strides_[3] == 1) {
        for (std::int64_t j = 0; j < nk; ++j) row[j] = src[j] != 0;
      } else {
        for (std::int64_t j = 0; j < nk; ++j) row[j] = src[j * strides_[3]] != 0;
      }
    }
  }
  bool independent_of_batch_and_head() const override { return sizes_[0] == 1 && sizes_[1] == 1; }
  std::string describe() const override { return fmt::format("tensor{}", shape_str(mask_.shape())); }

 private:
  Tensor mask_;
  std::int64_t sizes_[4], strides_[4];
  const std::uint8_t* data_;
};

// Tile scratch for the composite fills (one per thread; composites may nest).
std::vector<std::uint8_t>& scratch(int depth) {
  thread_local std::vector<std::vector<std::uint8_t>> buffers;
  if (static_cast<int>(buffers.size()) <= depth) buffers.resize(static_cast<std::size_t>(depth) + 1);
  return buffers[static_cast<std::size_t>(depth)];
}
thread_local int t_fill_depth = 0;

// What the & and | of two masks share: both operands, and a tile fill that fills b into scratch and
// combines it into a's tile element by element.
class PairNode : public MaskNode {
 public:
  PairNode(std::shared_ptr<const MaskNode> a, std::shared_ptr<const MaskNode> b) : a_(std::move(a)), b_(std::move(b)) {}
  bool independent_of_batch_and_head() const override {
    return a_->independent_of_batch_and_head() && b_->independent_of_batch_and_head();
  }
  bool has_callable() const override { return a_->has_callable() || b_->has_callable(); }

 protected:
  template <typename Combine>
  void fill_pair(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
                 std::uint8_t* out, std::int64_t ld, Combine combine) const {
    a_->fill(b, h, q0, nq, k0, nk, out, ld);
    auto& tmp = scratch(t_fill_depth);
    tmp.resize(static_cast<std::size_t>(nq * nk));
    ++t_fill_depth;
    b_->fill(b, h, q0, nq, k0, nk, tmp.data(), nk);
    --t_fill_depth;
    for (std::int64_t i = 0; i < nq; ++i)
      for (std::int64_t j = 0; j < nk; ++j)
        out[i * ld + j] = combine(out[i * ld + j], tmp[static_cast<std::size_t>(i * nk + j)]);
  }

  std::shared_ptr<const MaskNode> a_, b_;
};

class AndNode final : public PairNode {
 public:
  using PairNode::PairNode;
  bool allowed(std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) const override {
    return a_->allowed(b, h, q, kv) && b_->allowed(b, h, q, kv);
  }
  BlockKind classify(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                     std::int64_t k1) const override {
    const BlockKind x = a_->classify(b, h, q0, q1, k0, k1);
    if (x == BlockKind::empty) return x;
    const BlockKind y = b_->classify(b, h, q0, q1, k0, k1);
    if (y == BlockKind::empty) return y;
    return x == BlockKind::full && y == BlockKind::full ? BlockKind::full : BlockKind::partial;
  }
  std::pair<std::int64_t, std::int64_t> kv_bound(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1,
                                                 std::int64_t kv_len) const override {
    const auto x = a_->kv_bound(b, h, q0, q1, kv_len), y = b_->kv_bound(b, h, q0, q1, kv_len);
    const std::int64_t lo = std::max(x.first, y.first);
    return {lo, std::max(lo, std::min(x.second, y.second))};
  }
  void fill(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
            std::uint8_t* out, std::int64_t ld) const override {
    fill_pair(b, h, q0, nq, k0, nk, out, ld, [](std::uint8_t x, std::uint8_t y) { return std::uint8_t(x & y); });
  }
  std::string describe() const override { return fmt::format("({} & {})", a_->describe(), b_->describe()); }
};

class OrNode final : public PairNode {
 public:
  using PairNode::PairNode;
  bool allowed(std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) const override {
    return a_->allowed(b, h, q, kv) || b_->allowed(b, h, q, kv);
  }
  BlockKind classify(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                     std::int64_t k1) const override {
    const BlockKind x = a_->classify(b, h, q0, q1, k0, k1);
    if (x == BlockKind::full) return x;
    const BlockKind y = b_->classify(b, h, q0, q1, k0, k1);
    if (y == BlockKind::full) return y;
    return x == BlockKind::empty && y == BlockKind::empty ? BlockKind::empty : BlockKind::partial;
  }
  std::pair<std::int64_t, std::int64_t> kv_bound(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1,
                                                 std::int64_t kv_len) const override {
    const auto x = a_->kv_bound(b, h, q0, q1, kv_len), y = b_->kv_bound(b, h, q0, q1, kv_len);
    if (x.first >= x.second) return y;
    if (y.first >= y.second) return x;
    return {std::min(x.first, y.first), std::max(x.second, y.second)};
  }
  void fill(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
            std::uint8_t* out, std::int64_t ld) const override {
    fill_pair(b, h, q0, nq, k0, nk, out, ld, [](std::uint8_t x, std::uint8_t y) { return std::uint8_t(x | y); });
  }
  std::string describe() const override { return fmt::format("({} | {})", a_->describe(), b_->describe()); }
};

class NotNode final : public MaskNode {
 public:
  explicit NotNode(std::shared_ptr<const MaskNode> a) : a_(std::move(a)) {}
  bool allowed(std::int64_t b, std::int64_t h, std::int64_t q, std::int64_t kv) const override {
    return !a_->allowed(b, h, q, kv);
  }
  BlockKind classify(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                     std::int64_t k1) const override {
    const BlockKind x = a_->classify(b, h, q0, q1, k0, k1);
    return x == BlockKind::full ? BlockKind::empty : x == BlockKind::empty ? BlockKind::full : BlockKind::partial;
  }
  void fill(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
            std::uint8_t* out, std::int64_t ld) const override {
    a_->fill(b, h, q0, nq, k0, nk, out, ld);
    for (std::int64_t i = 0; i < nq; ++i)
      for (std::int64_t j = 0; j < nk; ++j) out[i * ld + j] ^= 1;
  }
  bool independent_of_batch_and_head() const override { return a_->independent_of_batch_and_head(); }
  bool has_callable() const override { return a_->has_callable(); }
  std::string describe() const override { return fmt::format("!{}", a_->describe()); }

 private:
  std::shared_ptr<const MaskNode> a_;
};

}  // namespace
}  // namespace detail

MaskMod::MaskMod() : node_(std::make_shared<detail::AllNode>()) {}
MaskMod MaskMod::all() { return MaskMod(); }
MaskMod MaskMod::causal() { return MaskMod(std::make_shared<detail::CausalNode>()); }
MaskMod MaskMod::sliding_window(std::int64_t window) {
  LMCORE_CHECK(window >= 0, "MaskMod::sliding_window: expected window >= 0, found {}", window);
  return MaskMod(std::make_shared<detail::SlidingWindowNode>(window));
}
MaskMod MaskMod::prefix_lm(std::int64_t prefix_length) {
  LMCORE_CHECK(prefix_length >= 0, "MaskMod::prefix_lm: expected prefix_length >= 0, found {}", prefix_length);
  return MaskMod(std::make_shared<detail::PrefixLmNode>(prefix_length));
}
MaskMod MaskMod::document(std::vector<std::int64_t> doc_ids) {
  return MaskMod(std::make_shared<detail::DocumentNode>(std::move(doc_ids)));
}
MaskMod MaskMod::chunked(std::int64_t chunk_size) {
  LMCORE_CHECK(chunk_size >= 1, "MaskMod::chunked: expected chunk_size >= 1, found {}", chunk_size);
  return MaskMod(std::make_shared<detail::ChunkedNode>(chunk_size));
}
MaskMod MaskMod::from_function(MaskFunction fn, std::string name) {
  LMCORE_CHECK(static_cast<bool>(fn), "MaskMod::from_function: the function is empty");
  return MaskMod(std::make_shared<detail::FunctionNode>(std::move(fn), std::move(name)));
}
MaskMod MaskMod::from_tensor(const Tensor& mask) { return MaskMod(std::make_shared<detail::TensorNode>(mask)); }

MaskMod operator&(const MaskMod& a, const MaskMod& b) { return MaskMod(std::make_shared<detail::AndNode>(a.node_, b.node_)); }
MaskMod operator|(const MaskMod& a, const MaskMod& b) { return MaskMod(std::make_shared<detail::OrNode>(a.node_, b.node_)); }
MaskMod operator!(const MaskMod& a) { return MaskMod(std::make_shared<detail::NotNode>(a.node_)); }

bool MaskMod::allowed(std::int64_t b, std::int64_t h, std::int64_t q_idx, std::int64_t kv_idx) const {
  return node_->allowed(b, h, q_idx, kv_idx);
}
BlockKind MaskMod::classify(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t q1, std::int64_t k0,
                            std::int64_t k1) const {
  return node_->classify(b, h, q0, q1, k0, k1);
}
std::pair<std::int64_t, std::int64_t> MaskMod::kv_bound(std::int64_t b, std::int64_t h, std::int64_t q0,
                                                        std::int64_t q1, std::int64_t kv_len) const {
  auto [lo, hi] = node_->kv_bound(b, h, q0, q1, kv_len);
  lo = std::clamp<std::int64_t>(lo, 0, kv_len);
  hi = std::clamp<std::int64_t>(hi, lo, kv_len);
  return {lo, hi};
}
void MaskMod::fill(std::int64_t b, std::int64_t h, std::int64_t q0, std::int64_t nq, std::int64_t k0, std::int64_t nk,
                   std::uint8_t* out, std::int64_t ld) const {
  node_->fill(b, h, q0, nq, k0, nk, out, ld);
}
bool MaskMod::independent_of_batch_and_head() const { return node_->independent_of_batch_and_head(); }
bool MaskMod::has_callable() const { return node_->has_callable(); }
std::string MaskMod::describe() const { return node_->describe(); }

}  // namespace lmcore::attention
