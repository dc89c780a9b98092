#include "lmcore/model/generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "lmcore/core/error.h"
#include "lmcore/core/matmul.h"
#include "lmcore/core/runtime_info.h"

namespace lmcore::model {

namespace {
// y (rows) = W (rows, cols) @ x (cols): one GEMM with a single column.
void matvec(const float* w, const float* x, float* y, std::int64_t rows, std::int64_t cols) {
  gemm_f32(false, true, 1, rows, cols, 1.0f, x, cols, w, cols, 0.0f, y, rows);
}

double splitmix_unit(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}
}  // namespace

Generator::Generator(const ModelConfig& config, const Tensor& params, std::int64_t max_len)
    : config_(config), layout_(config), params_(params), max_len_(max_len > 0 ? max_len : config.max_seq_len) {
  LMCORE_CHECK(params.dtype() == DType::f32 && params.dim() == 1 && params.numel() == layout_.size() &&
                   params.is_contiguous(),
               "Generator: expected flat f32 parameters of {} elements, found {}", layout_.size(), params.describe());
  LMCORE_CHECK(max_len_ >= 1 && max_len_ <= config.max_seq_len,
               "Generator: max_len must be in [1, max_position_embeddings = {}], found {}", config.max_seq_len, max_len_);
  // The KV cache and the RoPE table grow with max_len: refuse, with the sizes, what cannot fit here
  // (a config.json may claim any max_position_embeddings) rather than die in the allocator.
  const double cache_bytes = 2.0 * static_cast<double>(config.n_layers) * static_cast<double>(max_len_) *
                             static_cast<double>(config.kv_dim()) * 4.0;
  const double rope_bytes = static_cast<double>(max_len_) * static_cast<double>(config.head_dim()) * 4.0;
  const std::uint64_t memory = physical_memory_bytes();
  LMCORE_CHECK(memory == 0 || cache_bytes + rope_bytes <= static_cast<double>(memory),
               "Generator: a KV cache of {} positions needs {:.1f} GiB (and the RoPE table {:.1f} GiB), more than this "
               "machine's {:.1f} GiB of memory; generate a shorter sequence",
               max_len_, cache_bytes / (1 << 30), rope_bytes / (1 << 30), static_cast<double>(memory) / (1 << 30));
  rope_ = RopeTable::make(max_len_, config.head_dim(), config.rope_theta);
  const std::size_t cache = static_cast<std::size_t>(config.n_layers * max_len_ * config.kv_dim());
  k_cache_.resize(cache);
  v_cache_.resize(cache);
  const std::int64_t C = config.dim, QKV = config.q_dim() + 2 * config.kv_dim();
  x_.resize(C), h_.resize(C), qkv_.resize(QKV), y_.resize(config.q_dim()), gu_.resize(2 * config.ffn_dim);
  a_.resize(config.ffn_dim), logits_.resize(config.vocab_size), rstd_.resize(1), scores_.resize(max_len_);
  att_.resize(C);
}

void Generator::reset() {
  pos_ = 0;
  doc_start_.clear();
}

const std::vector<float>& Generator::feed(std::int32_t token) {
  const ModelConfig& c = config_;
  LMCORE_CHECK(token >= 0 && token < c.vocab_size, "generate: token {} is outside [0, vocab_size = {})", token,
               c.vocab_size);
  LMCORE_CHECK(pos_ < max_len_, "generate: the sequence is full ({} positions)", max_len_);
  const std::int64_t C = c.dim, hd = c.head_dim(), Hq = c.n_heads, Hkv = c.n_kv_heads, KV = c.kv_dim();
  const std::int64_t Q = c.q_dim(), QKV = Q + 2 * KV, F = c.ffn_dim;
  const float eps = static_cast<float>(c.norm_eps);
  const float* P = params_.data<float>();
  const std::int64_t p = pos_;
  // Which earlier positions this one may attend to: [lo, p].
  if (c.mask == AttentionMask::document && token == c.eos_token_id) doc_start_.push_back(p);
  else doc_start_.push_back(p == 0 ? 0 : doc_start_.back());
  std::int64_t lo = 0;
  if (c.mask == AttentionMask::sliding_window) lo = std::max<std::int64_t>(0, p - c.sliding_window);
  if (c.mask == AttentionMask::document) lo = doc_start_.back();

  std::memcpy(x_.data(), P + layout_.root().embed + static_cast<std::int64_t>(token) * C, C * 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    const float* w = P + layout_.units()[l + 1].offset;
    const BlockOffsets& o = layout_.block();
    rmsnorm_forward(h_.data(), rstd_.data(), x_.data(), w + o.input_norm, 1, C, eps);
    matvec(w + o.wqkv, h_.data(), qkv_.data(), QKV, C);
    // RoPE at position p: the one-row table slice, with T = 1 (row 0 is then position p).
    for (std::int64_t h = 0; h < Hq + Hkv; ++h) {
      float* v = qkv_.data() + h * hd;
      const std::int64_t half = hd / 2;
      for (std::int64_t i = 0; i < half; ++i) {
        const float cs = rope_.cos[p * half + i], sn = rope_.sin[p * half + i];
        const float a = v[i], b = v[i + half];
        v[i] = a * cs - b * sn;
        v[i + half] = b * cs + a * sn;
      }
    }
    float* kc = k_cache_.data() + (l * max_len_) * KV;
    float* vc = v_cache_.data() + (l * max_len_) * KV;
    std::memcpy(kc + p * KV, qkv_.data() + Q, KV * 4);
    std::memcpy(vc + p * KV, qkv_.data() + Q + KV, KV * 4);
    for (std::int64_t h = 0; h < Hq; ++h) {
      const std::int64_t kvh = h / (Hq / Hkv);
      const float* q = qkv_.data() + h * hd;
      float m = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = lo; j <= p; ++j) {
        float s = 0;
        const float* k = kc + j * KV + kvh * hd;
        for (std::int64_t i = 0; i < hd; ++i) s += q[i] * k[i];
        scores_[j] = s * scale;
        m = std::max(m, scores_[j]);
      }
      float sum = 0;
      for (std::int64_t j = lo; j <= p; ++j) sum += (scores_[j] = std::exp(scores_[j] - m));
      float* y = y_.data() + h * hd;
      std::fill(y, y + hd, 0.0f);
      for (std::int64_t j = lo; j <= p; ++j) {
        const float pj = scores_[j] / sum;
        const float* v = vc + j * KV + kvh * hd;
        for (std::int64_t i = 0; i < hd; ++i) y[i] += pj * v[i];
      }
    }
    matvec(w + o.wo, y_.data(), att_.data(), C, Q);
    for (std::int64_t i = 0; i < C; ++i) x_[i] += att_[i];
    rmsnorm_forward(h_.data(), rstd_.data(), x_.data(), w + o.post_norm, 1, C, eps);
    matvec(w + o.wgu, h_.data(), gu_.data(), 2 * F, C);
    swiglu_forward(a_.data(), gu_.data(), 1, F);
    matvec(w + o.wdown, a_.data(), att_.data(), C, F);
    for (std::int64_t i = 0; i < C; ++i) x_[i] += att_[i];
  }
  rmsnorm_forward(h_.data(), rstd_.data(), x_.data(), P + layout_.root().norm, 1, C, eps);
  matvec(P + layout_.root().head, h_.data(), logits_.data(), c.vocab_size, C);
  if (c.logit_softcap > 0) {
    const float cap = static_cast<float>(c.logit_softcap);
    for (float& z : logits_) z = cap * std::tanh(z / cap);
  }
  ++pos_;
  return logits_;
}

std::int32_t Generator::sample(const std::vector<float>& logits, double temperature, std::int64_t top_k, double u) {
  LMCORE_CHECK(!logits.empty(), "sample: no logits");
  LMCORE_CHECK(temperature >= 0 && std::isfinite(temperature),
               "sample: temperature must be a finite number >= 0, found {}", temperature);
  LMCORE_CHECK(top_k >= 0, "sample: top_k must be >= 0 (0: all), found {}", top_k);
  const auto n = static_cast<std::int64_t>(logits.size());
  if (temperature == 0) return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  const std::int64_t k = top_k > 0 ? std::min(top_k, n) : n;
  // Highest logits first; ties by id, so the draw is deterministic.
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](std::int32_t a, std::int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  std::vector<double> p(static_cast<std::size_t>(k));
  const double top = logits[idx[0]];
  double sum = 0;
  for (std::int64_t i = 0; i < k; ++i) sum += (p[i] = std::exp((logits[idx[i]] - top) / temperature));
  double acc = 0;
  for (std::int64_t i = 0; i < k; ++i) {
    acc += p[i] / sum;
    if (u < acc) return idx[i];
  }
  return idx[k - 1];
}

std::vector<std::int32_t> Generator::generate(const std::vector<std::int32_t>& prompt, const SampleOptions& o,
                                              const std::function<void(std::int32_t)>& on_token) {
  LMCORE_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token, e.g. the bos token)");
  LMCORE_CHECK(o.max_tokens >= 0, "generate: max_tokens must be >= 0, found {}", o.max_tokens);
  LMCORE_CHECK(static_cast<std::int64_t>(prompt.size()) <= max_len_,
               "generate: the prompt has {} tokens, more than the {} positions of the cache", prompt.size(), max_len_);
  reset();
  const std::vector<float>* logits = nullptr;
  for (std::int32_t t : prompt) logits = &feed(t);
  std::uint64_t rng = o.seed * 0xD1B54A32D192ED03ull + 1;
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < o.max_tokens; ++i) {
    const std::int32_t t = sample(*logits, o.temperature, o.top_k, splitmix_unit(rng));
    out.push_back(t);
    if (on_token) on_token(t);
    if ((o.stop_at_eos && t == config_.eos_token_id) || pos_ >= max_len_) break;
    logits = &feed(t);
  }
  return out;
}

}  // namespace lmcore::model
