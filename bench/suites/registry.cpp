// The list of `lmcore bench` suites. Each suite's run function lives in bench/suites/<name>.cpp.
#include "bench/suites/bench_suite.h"

namespace lmcore::bench {

std::vector<BenchTable> run_core_suite(const BenchOptions& options);
std::vector<BenchTable> run_comm_suite(const BenchOptions& options);
std::vector<BenchTable> run_upgrade_suite(const BenchOptions& options);
std::vector<BenchTable> run_lce_suite(const BenchOptions& options);
std::vector<BenchTable> run_io_suite(const BenchOptions& options);
std::vector<BenchTable> run_attention_suite(const BenchOptions& options);
std::vector<BenchTable> run_train_suite(const BenchOptions& options);
std::vector<BenchTable> run_fsdp_suite(const BenchOptions& options);
std::vector<BenchTable> run_elastic_suite(const BenchOptions& options);
std::vector<BenchTable> run_tokenizer_suite(const BenchOptions& options);
std::vector<BenchTable> run_codegen_suite(const BenchOptions& options);

const std::vector<BenchSuite>& all_suites() {
  static const std::vector<BenchSuite> suites = {
      {"core", "tensor core: sgemm GFLOPS, cast, sum, sort, embedding backward", run_core_suite},
      {"comm", "collectives: bus bandwidth of lmcore vs raw Gloo, 2 and 4 ranks, 4 KiB-256 MiB (--quick: 2 ranks)", run_comm_suite},
      {"upgrade", "upgrade-check vs grep -rnE over the torch 1.13 tree and a 10x copy, interleaved, best of N (--quick: torch tree)", run_upgrade_suite},
      {"lce", "fused linear cross-entropy vs unfused: extra peak memory, peak RSS, fwd+bwd time", run_lce_suite},
      {"io", "checkpoint load: safetensors and .pt vs cat and torch.load (1 GiB; --quick 64 MiB)", run_io_suite},
      {"attention", "flex attention vs dense sdpa: sliding window, causal, document; forward and backward", run_attention_suite},
      {"train", "Llama training step vs torch 1.13 eager: tokens/s, MFU, peak RSS, f32 and bf16 (--quick: default model)",
       run_train_suite},
      {"fsdp", "sharded training: step time and exposed communication, 2 and 4 ranks, prefetch and a separate "
               "reduce-scatter group, loopback and shaped links (--quick: loopback, 2 ranks)",
       run_fsdp_suite},
      {"elastic", "elastic training: kill -9 of one of 3 ranks to the first step after, in-memory and disk "
                  "checkpoints, default and GPT-2-small-sized models (--quick: default, in-memory)",
       run_elastic_suite},
      {"tokenizer", "byte-level BPE vs sentencepiece (BPE): training time at vocab 8192 and 32000, encode MB/s at 1 "
                    "and all threads, 64 MB of man pages and sources (--quick: 8 MB, vocab 8192)",
       run_tokenizer_suite},
      {"codegen", "generated kernels: RMSNorm GB/s vs memcpy and torch 1.13, fused vs unfused GEMM epilogues, compile "
                  "and load times, default-model step with and without (args: rmsnorm gemm compile train)",
       run_codegen_suite},
  };
  return suites;
}

}  // namespace lmcore::bench
