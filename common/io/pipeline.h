// Order-preserving parallel pipelines on oneTBB, and the arena of exactly N
// threads they (and a tool's other parallel loops) run in.
//
//   zlm::run_ordered_pipeline<Batch, Result>(
//       threads,
//       [&](Batch& b) { return reader.next_batch(b); },   // serial, in order
//       [&](Batch& b, Result& r) { encode(b, r); },        // parallel
//       [&](Result& r) { writer.append(r); });             // serial, in order
//
//   zlm::ThreadArena arena(threads);                      // a tool with more parallel work than the pipeline:
//   zlm::run_ordered_pipeline<Batch, Result>(arena, zlm::pipeline_in_flight(threads), read, work, write);
//   arena.execute([&] { tbb::parallel_for(...); });        // the same threads
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
#include <utility>
#include <vector>

namespace zlm {

// Exactly `threads` worker threads for what runs through execute(), also above
// the core count (--workers 8 on a machine with fewer cores): oneTBB's global
// worker limit is raised for the arena's life. One per run; not copyable.
class ThreadArena {
 public:
  explicit ThreadArena(int threads)
      : threads_(std::max(threads, 1)), limit_(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads_)), arena_(threads_) {}
  int threads() const { return threads_; }
  template <typename F>
  void execute(F&& f) {
    arena_.execute(std::forward<F>(f));
  }

 private:
  int threads_;
  tbb::global_control limit_;
  tbb::task_arena arena_;
};

// The batches in flight that keep `threads` workers busy: two per worker, and
// one each for the reading and the writing stage.
inline size_t pipeline_in_flight(int threads) { return static_cast<size_t>(std::max(threads, 1)) * 2 + 2; }

template <typename Batch, typename Result, typename ReadFn, typename WorkFn, typename WriteFn>
void run_ordered_pipeline(ThreadArena& arena, size_t max_in_flight, ReadFn&& read, WorkFn&& work, WriteFn&& write) {
  struct Token {
    Batch batch;
    Result result;
  };
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

// The pipeline on an arena of its own of `threads` threads.
template <typename Batch, typename Result, typename ReadFn, typename WorkFn, typename WriteFn>
void run_ordered_pipeline(int threads, size_t max_in_flight, ReadFn&& read, WorkFn&& work, WriteFn&& write) {
  ThreadArena arena(threads);
  run_ordered_pipeline<Batch, Result>(arena, max_in_flight, std::forward<ReadFn>(read), std::forward<WorkFn>(work), std::forward<WriteFn>(write));
}

// ... with pipeline_in_flight(threads) batches in flight.
template <typename Batch, typename Result, typename ReadFn, typename WorkFn, typename WriteFn>
void run_ordered_pipeline(int threads, ReadFn&& read, WorkFn&& work, WriteFn&& write) {
  run_ordered_pipeline<Batch, Result>(threads, pipeline_in_flight(threads), std::forward<ReadFn>(read), std::forward<WorkFn>(work),
                                      std::forward<WriteFn>(write));
}

}  // namespace zlm
