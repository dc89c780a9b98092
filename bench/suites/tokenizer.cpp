// lmcore bench tokenizer — byte-level BPE against Debian's SentencePiece (libsentencepiece, BPE mode), on
// the same corpus, in the same process, in the same run.
//
// Corpus: real text found on every machine with lmcore's dependencies, in a fixed order until the size
// is reached (64 MB; --quick 8 MB; --mb=N): man pages of every language (decompressed troff: English,
// Japanese, Chinese, Russian, ...; at most a third of the corpus), then the Python sources under
// /usr/lib/python3* (standard library and dist-packages), then C headers under /usr/include. Each file
// is a document; for the trainers they are also written one after another into corpus.txt.
// Tables:
//   * training: time to train vocab 8192 and 32000 (--quick: 8192) on all threads, lmcore (and at one
//     thread) vs SentencePiece's BPE trainer with num_threads = all threads;
//   * encode: MB/s of each trained tokenizer over every document (median of 3), lmcore's encode_batch
//     and SentencePiece's EncodeAsIds per document (with the documents spread over std::threads for
//     the all-threads row), at 1 thread and all threads; tokens per byte shows both do comparable work.
// Arguments: --mb=N (corpus MB), --vocab=N (one vocabulary size), --no-spm-train (skip SentencePiece's
// trainer: its encode rows then use no model and are left out).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "bench/suites/bench_suite.h"
#include "lmcore/core/error.h"
#include "lmcore/core/parallel.h"
#include "lmcore/text/tokenizer.h"
#include "lmcore/text/train.h"

namespace lmcore::bench {

namespace {

namespace fs = std::filesystem;

std::string gunzip(const fs::path& p) {
  std::string out;
  gzFile f = gzopen(p.c_str(), "rb");
  if (!f) return out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<fs::path> files_under(const fs::path& root, const std::string& ext) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string n = it->path().filename().string();
    if (it->is_regular_file(ec) && n.size() > ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0)
      out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Corpus {
  std::vector<std::string> docs;
  std::uint64_t bytes = 0, man_bytes = 0, py_bytes = 0, h_bytes = 0;
};

Corpus build_corpus(std::uint64_t target) {
  Corpus c;
  auto add = [&](std::string s, std::uint64_t& kind) {
    if (s.empty() || c.bytes >= target) return;
    c.bytes += s.size();
    kind += s.size();
    c.docs.push_back(std::move(s));
  };
  // Man pages: one language after another would fill the budget with English; take them round-robin.
  std::vector<std::vector<fs::path>> langs;
  for (const auto& e : fs::directory_iterator("/usr/share/man")) {
    if (!e.is_directory()) continue;
    auto f = files_under(e.path(), ".gz");
    if (!f.empty()) langs.push_back(std::move(f));
  }
  std::sort(langs.begin(), langs.end());
  for (std::size_t i = 0; c.man_bytes < target / 3; ++i) {
    bool any = false;
    for (const auto& l : langs)
      if (i < l.size() && c.man_bytes < target / 3) any = true, add(gunzip(l[i]), c.man_bytes);
    if (!any) break;
  }
  std::vector<fs::path> py;
  for (const auto& e : fs::directory_iterator("/usr/lib"))
    if (e.is_directory() && e.path().filename().string().rfind("python3", 0) == 0)
      for (auto& f : files_under(e.path(), ".py")) py.push_back(std::move(f));
  for (const auto& f : py)
    if (c.bytes < target) add(slurp(f), c.py_bytes);
  for (const auto& f : files_under("/usr/include", ".h"))
    if (c.bytes < target) add(slurp(f), c.h_bytes);
  LMCORE_CHECK(c.bytes >= target * 9 / 10, "bench tokenizer: found only {:.1f} MB of text (man pages, Python sources, "
               "C headers); {:.1f} MB wanted", c.bytes / 1e6, target / 1e6);
  return c;
}

// Seconds to encode every document with lmcore at the current thread count (median of 3).
double time_lmcore_encode(const text::Tokenizer& t, const std::vector<std::string_view>& docs, std::uint64_t& tokens) {
  return time_median(
      [&] {
        const auto ids = t.encode_batch(std::span<const std::string_view>(docs));
        tokens = 0;
        for (const auto& v : ids) tokens += v.size();
      },
      3, 120);
}

// SentencePiece: documents split into `threads` contiguous groups of about equal bytes, one std::thread
// each (its processor's Encode is const and thread-safe).
double time_spm_encode(const sentencepiece::SentencePieceProcessor& sp, const std::vector<std::string_view>& docs,
                       int threads, std::uint64_t& tokens) {
  std::vector<std::size_t> cut{0};
  std::uint64_t total = 0, acc = 0;
  for (auto d : docs) total += d.size();
  for (std::size_t i = 0; i < docs.size(); ++i) {
    acc += docs[i].size();
    if (acc * threads >= total * cut.size() && static_cast<int>(cut.size()) < threads) cut.push_back(i + 1);
  }
  cut.push_back(docs.size());
  return time_median(
      [&] {
        std::vector<std::uint64_t> counts(cut.size(), 0);
        std::vector<std::thread> pool;
        for (std::size_t g = 0; g + 1 < cut.size(); ++g)
          pool.emplace_back([&, g] {
            std::vector<int> ids;
            for (std::size_t i = cut[g]; i < cut[g + 1]; ++i) {
              ids.clear();
              const auto st = sp.Encode(docs[i], &ids);
              LMCORE_CHECK(st.ok(), "sentencepiece encode: {}", st.ToString());
              counts[g] += ids.size();
            }
          });
        for (auto& th : pool) th.join();
        tokens = 0;
        for (auto n : counts) tokens += n;
      },
      3, 300);
}

}  // namespace

std::vector<BenchTable> run_tokenizer_suite(const BenchOptions& options) {
  std::uint64_t mb = options.quick ? 8 : 64;
  std::vector<std::int64_t> vocabs = options.quick ? std::vector<std::int64_t>{8192} : std::vector<std::int64_t>{8192, 32000};
  bool spm_train = true;
  for (const std::string& a : options.args) {
    if (a.rfind("--mb=", 0) == 0) mb = static_cast<std::uint64_t>(int_arg("tokenizer", a, "--mb=", 1, 100000));
    else if (a.rfind("--vocab=", 0) == 0) vocabs = {int_arg("tokenizer", a, "--vocab=", 257, 1 << 24)};
    else if (a == "--no-spm-train") spm_train = false;
    else fail("bench tokenizer: unknown argument '{}' (expected --mb=N, --vocab=N, --no-spm-train)", a);
  }
  const int all = num_threads();
  const Corpus corpus = build_corpus(mb * 1000000);
  const fs::path dir = fs::temp_directory_path() / fmt::format("lmcore_bench_tokenizer_{}", ::getpid());
  fs::create_directories(dir);
  const std::string corpus_file = (dir / "corpus.txt").string();
  {
    std::ofstream out(corpus_file, std::ios::binary);
    for (const auto& d : corpus.docs) out << d << '\n';
  }
  std::vector<std::string_view> docs(corpus.docs.begin(), corpus.docs.end());
  const double mbytes = static_cast<double>(corpus.bytes) / 1e6;

  BenchTable train{fmt::format("tokenizer training, {:.1f} MB corpus", mbytes),
                   {"trainer", "vocab", "threads", "seconds", "MB/s", "speedup vs sentencepiece"}, {}, {}};
  BenchTable enc{fmt::format("encode throughput, {} documents, {:.1f} MB", docs.size(), mbytes),
                 {"tokenizer", "vocab", "threads", "MB/s", "tokens/byte", "vs sentencepiece", "scaling"}, {}, {}};
  for (const std::int64_t v : vocabs) {
    // ---- training ----
    text::BpeTrainOptions o;
    o.vocab_size = v;
    o.special_tokens = {"<|endoftext|>"};
    set_num_threads(all);
    text::BpeTrainStats st;
    double t0 = now_s();
    const text::Tokenizer tok = text::train_bpe({corpus_file}, o, &st);
    const double lm_all = now_s() - t0;
    set_num_threads(1);
    t0 = now_s();
    (void)text::train_bpe({corpus_file}, o);
    const double lm_one = now_s() - t0;
    set_num_threads(all);
    double spm_s = -1;
    sentencepiece::SentencePieceProcessor sp;
    if (spm_train) {
      const std::string prefix = (dir / fmt::format("spm{}", v)).string();
      t0 = now_s();
      const auto status = sentencepiece::SentencePieceTrainer::Train(fmt::format(
          "--input={} --model_prefix={} --vocab_size={} --model_type=bpe --num_threads={} --minloglevel=2 "
          "--bos_id=-1 --eos_id=-1",
          corpus_file, prefix, v, all));
      spm_s = now_s() - t0;
      LMCORE_CHECK(status.ok(), "sentencepiece training failed: {}", status.ToString());
      LMCORE_CHECK(sp.Load(prefix + ".model").ok(), "sentencepiece: cannot load {}.model", prefix);
    }
    auto ratio = [](double a, double b) -> nlohmann::json { return a > 0 && b > 0 ? nlohmann::json(a / b) : nlohmann::json(); };
    train.rows.push_back({"lmcore", v, all, lm_all, mbytes / lm_all, ratio(spm_s, lm_all)});
    train.rows.push_back({"lmcore", v, 1, lm_one, mbytes / lm_one, nlohmann::json()});
    if (spm_s > 0) train.rows.push_back({"sentencepiece bpe", v, all, spm_s, mbytes / spm_s, nlohmann::json()});
    train.notes.push_back(fmt::format("vocab {}: lmcore counted {} pieces ({} distinct) in {:.2f} s, {} merges in {:.2f} s",
                                      v, st.pieces, st.distinct_pieces, st.count_seconds, st.merges, st.merge_seconds));
    // ---- encode ----
    std::uint64_t tokens = 0;
    std::vector<double> lm_mbs, sp_mbs;
    for (int th : {1, all}) {
      set_num_threads(th);
      const double s = time_lmcore_encode(tok, docs, tokens);
      lm_mbs.push_back(mbytes / s);
      const double lm_tpb = static_cast<double>(tokens) / static_cast<double>(corpus.bytes);
      double sp_rate = -1, sp_tpb = 0;
      if (spm_train) {
        const double ss = time_spm_encode(sp, docs, th, tokens);
        sp_rate = mbytes / ss;
        sp_tpb = static_cast<double>(tokens) / static_cast<double>(corpus.bytes);
      }
      sp_mbs.push_back(sp_rate);
      enc.rows.push_back({"lmcore", v, th, mbytes / s, lm_tpb, ratio(mbytes / s, sp_rate),
                          ratio(lm_mbs.back(), lm_mbs.front())});
      if (spm_train) enc.rows.push_back({"sentencepiece bpe", v, th, sp_rate, sp_tpb, nlohmann::json(),
                                         ratio(sp_mbs.back(), sp_mbs.front())});
      if (all == 1) break;
    }
    set_num_threads(all);
  }
  train.notes.push_back(fmt::format("corpus: {:.1f} MB man pages (all languages), {:.1f} MB Python sources, {:.1f} MB C "
                                    "headers; {} threads", corpus.man_bytes / 1e6, corpus.py_bytes / 1e6,
                                    corpus.h_bytes / 1e6, all));
  train.notes.push_back("sentencepiece: SentencePieceTrainer --model_type=bpe --num_threads=<all> (its other options at "
                        "their defaults: character_coverage 0.9995, lines over 4192 bytes skipped)");
  enc.notes.push_back("each tokenizer is the one trained above on this corpus; lmcore: encode_batch; sentencepiece: "
                      "Encode per document, documents split over std::threads; scaling: MB/s vs 1 thread");
  fs::remove_all(dir);
  return {train, enc};
}

}  // namespace lmcore::bench
