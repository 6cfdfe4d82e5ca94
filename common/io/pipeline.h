// Order-preserving parallel pipelines on oneTBB.
//
//   zlm::run_ordered_pipeline<Batch, Result>(
//       threads, /*max_in_flight=*/4 * threads,
//       [&](Batch& b) { return reader.next_batch(b); },   // serial, in order
//       [&](Batch& b, Result& r) { encode(b, r); },        // parallel
//       [&](Result& r) { writer.append(r); });             // serial, in order
//
// The read stage runs on one thread at a time and produces batches in input
// order; the work stage runs on up to `threads` threads; the write stage sees
// results in exactly the read order, so output is identical for any thread
// count. At most `max_in_flight` batches exist at once, which bounds memory
// (streaming). An exception thrown by any stage stops the pipeline and is
// rethrown to the caller (oneTBB propagates it). Batches and results are
// recycled through the tokens, not reallocated per batch.
#pragma once

#include <tbb/global_control.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace zlm {

template <typename Batch, typename Result, typename ReadFn, typename WorkFn, typename WriteFn>
void run_ordered_pipeline(int threads, size_t max_in_flight, ReadFn&& read, WorkFn&& work, WriteFn&& write) {
  struct Token {
    Batch batch;
    Result result;
  };
  threads = std::max(threads, 1);
  max_in_flight = std::max<size_t>(max_in_flight, 1);
  // A pool of reusable tokens: the read stage takes one, the write stage returns it.
  std::vector<std::unique_ptr<Token>> pool;
  std::vector<Token*> free_tokens;
  for (size_t i = 0; i < max_in_flight; ++i) {
    pool.push_back(std::make_unique<Token>());
    free_tokens.push_back(pool.back().get());
  }
  // serial_in_order stages never run concurrently with themselves, but the
  // first and last stage can run concurrently with each other: guard the pool.
  std::mutex pool_mutex;
  // Honour the requested thread count even above the core count (as --workers 8
  // does on a 2-core machine): raise oneTBB's global worker limit for this run.
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_pipeline(
        max_in_flight,
        tbb::make_filter<void, Token*>(tbb::filter_mode::serial_in_order,
                                       [&](tbb::flow_control& fc) -> Token* {
                                         Token* t;
                                         {
                                           std::lock_guard<std::mutex> lock(pool_mutex);
                                           t = free_tokens.back();
                                           free_tokens.pop_back();
                                         }
                                         if (!read(t->batch)) {
                                           std::lock_guard<std::mutex> lock(pool_mutex);
                                           free_tokens.push_back(t);
                                           fc.stop();
                                           return nullptr;
                                         }
                                         return t;
                                       }) &
            tbb::make_filter<Token*, Token*>(tbb::filter_mode::parallel,
                                             [&](Token* t) -> Token* {
                                               work(t->batch, t->result);
                                               return t;
                                             }) &
            tbb::make_filter<Token*, void>(tbb::filter_mode::serial_in_order, [&](Token* t) {
              write(t->result);
              std::lock_guard<std::mutex> lock(pool_mutex);
              free_tokens.push_back(t);
            }));
  });
}

}  // namespace zlm
