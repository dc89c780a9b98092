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
      {"comm", "collectives: bus bandwidth of lmcore vs raw Gloo, 2 and 4 ranks, 4 KiB-256 MiB (--quick: 2 ranks)", run_comm_suite,
       {{"--ranks=N[,N...]", "world sizes, 2-64 (default 2,4; --quick 2)"},
        {"--sizes=BYTES[,BYTES...]", "buffer sizes such as 4K,64M (default 4K to 256M in steps of 4x; --quick 64K,4M)"}}},
      {"upgrade", "upgrade-check vs grep -rnE over the torch 1.13 tree and a 10x copy, interleaved, best of N (--quick: torch tree)", run_upgrade_suite,
       {{"TREE", "the Python tree to scan (default /usr/lib/python3/dist-packages/torch)"}}},
      {"lce", "fused linear cross-entropy vs unfused: extra peak memory, peak RSS, fwd+bwd time", run_lce_suite,
       {{"--n=N", "tokens (default 4096; --quick 2048)"},
        {"--h=H", "one hidden size (default 1024 and 2048; --quick 64)"},
        {"--v=V", "one vocabulary size (default 32000 and 128256; --quick 4000 and 16000)"},
        {"--dtype=DTYPE[,DTYPE]", "f32, bf16 (default both)"},
        {"--budget-mib=MIB", "memory budget of the fused logits (default 128; --quick 16)"},
        {"--repeats=N", "timed runs per variant, the median is shown (default 1)"},
        {"--lce-child=SPEC", ""}}},
      {"io", "checkpoint load: safetensors and .pt vs cat and torch.load (1 GiB; --quick 64 MiB)", run_io_suite},
      {"attention", "flex attention vs dense sdpa: sliding window, causal, document; forward and backward; bf16 "
                    "vs f32 flex (args: flex bf16 mask)",
       run_attention_suite,
       {{"flex", "the f32 flex vs dense sdpa tables (default: every section)"},
        {"bf16", "the flex bf16 (matrix units) vs flex f32 table"},
        {"mask", "the create_block_mask table at L = 1M"}}},
      {"train", "Llama training step vs torch 1.13 eager: tokens/s, MFU, peak RSS, f32 and bf16 (--quick: default model)",
       run_train_suite,
       {{"--models=NAME[,NAME...]", "models: default, gpt2 (default both; --quick default)"},
        {"--dtypes=DTYPE[,DTYPE...]", "f32, bf16 (default both)"},
        {"--steps=N", "timed optimizer steps per row (default 3; --quick 2)"},
        {"--keep-gate-up=auto|on|off", "ModelOptions::keep_gate_up (default auto: kept below ~67M parameters)"},
        {"--train-child=SPEC", ""}}},
      {"fsdp", "sharded training: step time and exposed communication, 2 and 4 ranks, prefetch and a separate "
               "reduce-scatter group, loopback and shaped links (--quick: loopback, 2 ranks)",
       run_fsdp_suite,
       {{"--ranks=N[,N...]", "rank counts, 2-64 (default 2,4; --quick 2)"},
        {"--net=NET[,NET...]", "loopback, shaped (default both; --quick loopback)"},
        {"--rate=RATE", "link rate of the shaped network, a number and a tc unit: 1gbit, 100mbit, 125mbps (default 1gbit)"},
        {"--steps=N", "training steps per row, at least 3 (default 14; --quick 4)"},
        {"--batch=N|auto", "sequences of 128 tokens per rank and step, 1-4096 (default auto: on the shaped link, 8 scaled so "
                           "that the step computes about as long as its collectives take; loopback 8)"}}},
      {"elastic", "elastic training: kill -9 of one of 3 ranks to the first step after, in-memory and disk "
                  "checkpoints, default and GPT-2-small-sized models (--quick: default, in-memory)",
       run_elastic_suite,
       {{"--models=NAME[,NAME...]", "default, gpt2 (default both; --quick default)"},
        {"--checkpoints=KIND[,KIND...]", "memory, disk (default both; --quick memory)"},
        {"--seq=N", "sequence length, at least 8 (default 128)"}}},
      {"tokenizer", "byte-level BPE vs sentencepiece (BPE): training time at vocab 8192 and 32000, encode MB/s at 1 "
                    "and all threads, 64 MB of man pages and sources (--quick: 8 MB, vocab 8192)",
       run_tokenizer_suite,
       {{"--mb=N", "megabytes of text (default 64; --quick 8)"},
        {"--vocab=N", "one vocabulary size, at least 257 (default 8192 and 32000; --quick 8192)"},
        {"--no-spm-train", "skip training sentencepiece (default: train it)"}}},
      {"codegen", "generated kernels: RMSNorm GB/s vs memcpy and torch 1.13, fused vs unfused GEMM epilogues, compile "
                  "and load times, default-model step with and without (args: rmsnorm gemm compile train)",
       run_codegen_suite,
       {{"rmsnorm", "the RMSNorm table (default: every section)"},
        {"gemm", "the fused vs unfused GEMM epilogue table"},
        {"compile", "the compile and load times table"},
        {"train", "the default-model step with and without generated kernels"}}},
  };
  return suites;
}

}  // namespace lmcore::bench
