// The main() of a benchmark binary whose result is checked before anything is
// timed: a failed check exits 1 (Google Benchmark's SkipWithError would exit 0).
//   int main(int argc, char** argv) { return zlm::bench::run_if(checks_pass(), argc, argv); }
#pragma once

#include <benchmark/benchmark.h>

namespace zlm::bench {

inline int run_if(bool checks_passed, int argc, char** argv) {
  if (!checks_passed) return 1;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace zlm::bench
