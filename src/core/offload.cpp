#include "core/offload.h"

#include <chrono>
#include <deque>
#include <utility>

#include "core/allocator.h"
#include "core/error.h"
#include "core/profile.h"

#if defined(SEQPAR_WITH_CUDA)
#include "core/cuda/stream.h"
#include "core/cuda_check.h"
#endif

namespace seqpar {

struct HostOffload::Handle {
  Tensor host;  // the host copy (until taken)
  Tensor back;  // the device tensor, once the copy back has started
  bool prefetched = false, taken = false;
#if defined(SEQPAR_WITH_CUDA)
  std::shared_ptr<Event> to_device;  // the copy back's completion, on the copy stream
#endif
};

struct HostOffload::Impl {
#if defined(SEQPAR_WITH_CUDA)
  // Memory a copy in flight reads or writes, kept until its event has completed: a tensor a
  // caller drops meanwhile must not go back to its pool (the pools are not stream-aware).
  struct Held {
    Tensor a, b;
    std::shared_ptr<Event> done;
  };
  std::unique_ptr<Stream> copy;
  std::deque<Held> puts;   // copies to the host (bounded by kMaxInFlight)
  std::deque<Held> backs;  // copies back to the device
#endif
};

HostOffload::HostOffload(Device device) : device_(device), impl_(std::make_unique<Impl>()) {
#if defined(SEQPAR_WITH_CUDA)
  if (device.is_cuda()) impl_->copy = std::make_unique<Stream>(device.index);
#else
  SEQPAR_CHECK(device.is_cpu(), "HostOffload on {} in a build without CUDA", device.str());
#endif
}

HostOffload::~HostOffload() {
#if defined(SEQPAR_WITH_CUDA)
  if (impl_->copy) {
    try {
      release_finished(/*wait_all=*/true);
    } catch (...) {  // a destructor does not throw; the device error resurfaces at the next call
    }
  }
#endif
}

void HostOffload::release_finished(bool wait_all) {
#if defined(SEQPAR_WITH_CUDA)
  for (std::deque<Impl::Held>* q : {&impl_->puts, &impl_->backs}) {
    while (!q->empty() && (wait_all || q->front().done->query())) {
      if (wait_all) q->front().done->synchronize();
      q->pop_front();
    }
  }
#else
  (void)wait_all;
#endif
}

std::shared_ptr<HostOffload::Handle> HostOffload::put(Tensor t) {
  SEQPAR_CHECK(t.defined() && t.device() == device_, "HostOffload::put: {} is not a tensor on {}",
               t.defined() ? t.str() : std::string("an undefined tensor"), device_.str());
  auto h = std::make_shared<Handle>();
#if defined(SEQPAR_WITH_CUDA)
  if (device_.is_cuda()) {
    h->host = Tensor::empty(t.shape(), t.dtype(), pinned_host_allocator());
    Event ready;  // t is complete once the work queued so far is
    ready.record(current_stream());
    impl_->copy->wait(ready);
    SEQPAR_CUDA_CHECK(cudaMemcpyAsync(h->host.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, impl_->copy->get()));
    auto done = std::make_shared<Event>();
    done->record(impl_->copy->get());
    impl_->puts.push_back({std::move(t), h->host, std::move(done)});
    release_finished(false);
    while (impl_->puts.size() > static_cast<size_t>(kMaxInFlight)) {
      impl_->puts.front().done->synchronize();
      impl_->puts.pop_front();
    }
    return h;
  }
#endif
  h->host = Tensor::empty(t.shape(), t.dtype(), offload_host_allocator());
  h->host.copy_from(t);
  return h;
}

void HostOffload::prefetch(Handle& h) {
  SEQPAR_CHECK(!h.taken, "HostOffload::prefetch: the tensor was already taken back");
  if (h.prefetched) return;
  h.prefetched = true;
#if defined(SEQPAR_WITH_CUDA)
  if (device_.is_cuda()) {
    // The copy out not finished yet (the host runs ahead of the device; the top layers' backward
    // follows their forward closely): its source is still on the device, unchanged (the copy only
    // reads it), so it is the tensor back, with no copy. The queue gives up its reference; once the
    // caller drops the tensor its block may be reused while the copy still reads it, which can only
    // spoil the host copy, which nobody reads any more. The host buffer stays held until the copy
    // is done.
    release_finished(false);
    for (Impl::Held& held : impl_->puts) {
      if (held.a.defined() && held.b.raw() == h.host.raw()) {
        h.back = std::move(held.a);
        held.a = Tensor();
        return;
      }
    }
  }
#endif
  h.back = Tensor::empty(h.host.shape(), h.host.dtype(), device_);
#if defined(SEQPAR_WITH_CUDA)
  if (device_.is_cuda()) {
    Event ready;  // the pool's block may still be in use by the work queued so far
    ready.record(current_stream());
    impl_->copy->wait(ready);
    SEQPAR_CUDA_CHECK(
        cudaMemcpyAsync(h.back.raw(), h.host.raw(), h.host.nbytes(), cudaMemcpyHostToDevice, impl_->copy->get()));
    h.to_device = std::make_shared<Event>();
    h.to_device->record(impl_->copy->get());
    impl_->backs.push_back({h.back, h.host, h.to_device});
    release_finished(false);
    return;
  }
#endif
  h.back.copy_from(h.host);
}

Tensor HostOffload::take(Handle& h) {
  SEQPAR_CHECK(!h.taken, "HostOffload::take: the tensor was already taken back");
  prefetch(h);
#if defined(SEQPAR_WITH_CUDA)
  if (device_.is_cuda() && h.to_device) {
    SEQPAR_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), h.to_device->get(), 0));
    // From here the current stream orders every use of the device buffer after the copy, so the
    // queue no longer holds it: it goes back to the pool when the caller drops it, not when a later
    // collect() finds the copy finished (the host runs layers ahead of the device, and the held
    // buffers of the layers below used to stay allocated through the backward's peak).
    for (Impl::Held& held : impl_->backs)
      if (held.done == h.to_device) held.a = Tensor();
  }
#endif
  h.taken = true;
  h.host = Tensor();  // (on CUDA the copy's Held keeps it until the copy is done)
  return std::move(h.back);
}

// ---- HostCopy ---------------------------------------------------------------------------

HostCopy::HostCopy(const Tensor& src) {
  if (!src.device().is_cuda()) {
    host_ = src;
    return;
  }
#if defined(SEQPAR_WITH_CUDA)
  host_ = Tensor::empty(src.shape(), src.dtype(), pinned_host_allocator());
  if (src.nbytes() > 0)
    SEQPAR_CUDA_CHECK(
        cudaMemcpyAsync(host_.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, current_stream()));
  auto event = std::make_shared<Event>();
  event->record();
  done_ = event;
#endif
}

const Tensor& HostCopy::get() {
#if defined(SEQPAR_WITH_CUDA)
  if (done_) {
    auto* event = static_cast<Event*>(done_.get());
    if (!event->query()) {
      const auto t0 = std::chrono::steady_clock::now();
      event->synchronize();
      note_host_wait("result to host",
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    done_.reset();
  }
#endif
  return host_;
}

Allocator& host_allocator_for(Device device, bool pinned) {
#if defined(SEQPAR_WITH_CUDA)
  if (device.is_cuda()) return pinned ? pinned_host_allocator() : cpu_allocator();
#endif
  (void)pinned;
  SEQPAR_CHECK(device.is_cpu(), "host_allocator_for({}) in a build without CUDA", device.str());
  return offload_host_allocator();
}

struct CopyStream::Impl {
  int64_t next = 0;  // the next copy's ticket
#if defined(SEQPAR_WITH_CUDA)
  struct Pending {
    int64_t ticket;
    Tensor dst, src;  // held until the copy has finished (the pools are not stream-aware)
    std::shared_ptr<Event> done;
  };
  std::unique_ptr<Stream> stream;
  std::deque<Pending> pending;  // oldest first
  Pending* find(int64_t ticket) {
    for (Pending& p : pending)
      if (p.ticket == ticket) return &p;
    return nullptr;
  }
  // Drops the copies that have finished, oldest first (a stream runs them in order).
  void reap() {
    while (!pending.empty() && pending.front().done->query()) pending.pop_front();
  }
#endif
};

CopyStream::CopyStream(Device device) : device_(device), impl_(std::make_unique<Impl>()) {
#if defined(SEQPAR_WITH_CUDA)
  if (device.is_cuda()) impl_->stream = std::make_unique<Stream>(device.index);
#else
  SEQPAR_CHECK(device.is_cpu(), "CopyStream on {} in a build without CUDA", device.str());
#endif
}

CopyStream::~CopyStream() {
#if defined(SEQPAR_WITH_CUDA)
  if (impl_->stream) {
    try {
      impl_->stream->synchronize();
    } catch (...) {  // a destructor does not throw; the device error resurfaces at the next call
    }
  }
#endif
}

int64_t CopyStream::copy(const Tensor& dst, const Tensor& src, bool after_current) {
  SEQPAR_CHECK(dst.defined() && src.defined() && dst.dtype() == src.dtype() && dst.numel() == src.numel(),
               "CopyStream::copy: {} <- {}", dst.defined() ? dst.str() : "undefined",
               src.defined() ? src.str() : "undefined");
  const int64_t ticket = impl_->next++;
#if defined(SEQPAR_WITH_CUDA)
  if (impl_->stream) {
    if (after_current) {
      Event ready;  // the source is complete, and the destination free, once the work queued so far is done
      ready.record(current_stream());
      impl_->stream->wait(ready);
    }
    SEQPAR_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault, impl_->stream->get()));
    auto done = std::make_shared<Event>();
    done->record(impl_->stream->get());
    impl_->reap();
    impl_->pending.push_back({ticket, dst, src, std::move(done)});
    return ticket;
  }
#endif
  Tensor d = dst;
  d.copy_from(src);
  return ticket;
}

void CopyStream::host_wait(int64_t ticket) {
  SEQPAR_CHECK(ticket >= 0 && ticket < impl_->next, "CopyStream::host_wait: no copy {}", ticket);
#if defined(SEQPAR_WITH_CUDA)
  if (impl_->stream) {
    while (!impl_->pending.empty() && impl_->pending.front().ticket <= ticket) {
      impl_->pending.front().done->synchronize();
      impl_->pending.pop_front();
    }
  }
#endif
}

void CopyStream::stream_wait(int64_t ticket) {
  SEQPAR_CHECK(ticket >= 0 && ticket < impl_->next, "CopyStream::stream_wait: no copy {}", ticket);
#if defined(SEQPAR_WITH_CUDA)
  if (impl_->stream) {
    if (Impl::Pending* p = impl_->find(ticket))
      SEQPAR_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), p->done->get(), 0));
  }
#endif
}

}  // namespace seqpar
