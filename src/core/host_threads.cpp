#include "core/host_threads.h"

#include <algorithm>

#include "core/error.h"

namespace seqpar {

HostThreads::HostThreads(int threads) {
  SEQPAR_CHECK(threads >= 1, "HostThreads: threads={} must be >= 1", threads);
  errors_.resize(static_cast<size_t>(threads));
  workers_.reserve(static_cast<size_t>(threads - 1));
  try {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
  } catch (...) {  // a thread that could not start: stop the started ones, then report
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& w : workers_) w.join();
    throw;
  }
}

HostThreads::~HostThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void HostThreads::work(int part) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr error;
    try {
      (*job)(part);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      errors_[static_cast<size_t>(part)] = error;
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void HostThreads::run(const std::function<void(int)>& fn) {
  if (!workers_.empty()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &fn;
      pending_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    start_.notify_all();
  }
  std::exception_ptr first;
  try {
    fn(0);
  } catch (...) {
    first = std::current_exception();
  }
  if (!workers_.empty()) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    for (size_t t = 1; t < errors_.size() && !first; ++t) first = errors_[t];
    std::fill(errors_.begin(), errors_.end(), nullptr);
  }
  if (first) std::rethrow_exception(first);
}

void HostThreads::ranges(int64_t n, int64_t align, const std::function<void(int64_t, int64_t)>& fn) {
  SEQPAR_CHECK(n >= 0 && align >= 1, "HostThreads::ranges: n={} align={}", n, align);
  const int64_t parts = size();
  const int64_t per = (n + parts - 1) / parts;
  const int64_t len = (per + align - 1) / align * align;
  run([&](int part) {
    const int64_t lo = std::min(n, part * len), hi = std::min(n, lo + len);
    if (lo < hi) fn(lo, hi);
  });
}

}  // namespace seqpar
