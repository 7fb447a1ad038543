// A fixed set of CPU threads that run one job at a time, each thread its own part: the host loops
// of a training step (the offloaded AdamW runs one such job per staged chunk, hundreds a step), so
// the threads are started once, not once per chunk.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace seqpar {

class HostThreads {
 public:
  // `threads` >= 1 parts per job: the calling thread runs part 0, threads - 1 workers the rest.
  explicit HostThreads(int threads);
  ~HostThreads();
  HostThreads(const HostThreads&) = delete;
  HostThreads& operator=(const HostThreads&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(part) for every part in [0, size()), part 0 on the calling thread; returns when all have
  // returned, rethrowing the first part's error (by part order). One job at a time: not for
  // concurrent callers.
  void run(const std::function<void(int)>& fn);
  // fn(begin, end) over [0, n) cut into size() ranges whose length is a multiple of `align`
  // (the last may be shorter; parts past n get none): element-wise work, whose result does not
  // depend on the cut.
  void ranges(int64_t n, int64_t align, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void work(int part);

  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;  // incremented per job: a worker runs each generation once
  int pending_ = 0;          // workers still running the current job
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> workers_;
};

}  // namespace seqpar
