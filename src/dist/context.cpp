// Transport and CallContext: registered buffers, bounded waits, interruption and the slot layout.
#include "src/dist/context.h"

#include <algorithm>

#include "lmcore/core/error.h"

namespace lmcore::dist::detail {

void Transport::add(gloo::transport::UnboundBuffer* b) {
  std::lock_guard<std::mutex> lock(mu_);
  active_.push_back(b);
}

void Transport::remove(gloo::transport::UnboundBuffer* b) {
  std::lock_guard<std::mutex> lock(mu_);
  active_.erase(std::remove(active_.begin(), active_.end(), b), active_.end());
}

void Transport::interrupt() {
  interrupted_ = true;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* b : active_) {
    b->abortWaitRecv();
    b->abortWaitSend();
  }
}

void Transport::close() {
  if (size() <= 1) return;
  try {
    context_->closeConnections();
  } catch (const std::exception&) {
    // already closed, or a pair that never connected: nothing left to tell the peers
  }
}

std::uint64_t CallContext::slot(Slot kind, std::uint32_t step) const {
  const std::uint64_t top = static_cast<std::uint64_t>(kind) << 60;
  switch (kind) {
    case Slot::header:
    case Slot::split_table:
      return top;
    case Slot::data:
      LMCORE_CHECK(step < 4096, "CallContext::slot: step {} of {} seq {} needs more than 12 bits", step,
                   op_kind_name(op_.kind), op_.seq);
      return top | (static_cast<std::uint64_t>(op_.seq) << 12) | step;
    case Slot::p2p_header:
    case Slot::p2p_data: {
      const bool sending = op_.kind == OpKind::send;
      const int sender = sending ? rank() : op_.peer, receiver = sending ? op_.peer : rank();
      const std::uint64_t dir = sender < receiver ? 0 : 1;
      return top | (dir << 58) | (static_cast<std::uint64_t>(std::min(sender, receiver)) << 40) |
             static_cast<std::uint64_t>(op_.seq);
    }
  }
  return top;
}

std::chrono::milliseconds CallContext::remaining() const {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(op_.deadline - Clock::now());
  // Gloo treats -1 as "use the context default": never pass it; 1 ms still times out promptly.
  return std::max(left, std::chrono::milliseconds(1));
}

void CallContext::check_interrupt() const {
  if (t_.interrupted()) throw AbortedSignal{};
}

CallContext::Buffer::Buffer(CallContext& ctx, void* ptr, std::size_t n) : ctx_(ctx) {
  buf_ = ctx.t_.context_->createUnboundBuffer(ptr, n);
  ctx.t_.add(buf_.get());
}

CallContext::Buffer::~Buffer() { ctx_.t_.remove(buf_.get()); }

void CallContext::Buffer::send(int dst, std::uint64_t slot, std::size_t offset, std::size_t nbytes) {
  ctx_.check_interrupt();
  buf_->send(dst, slot, offset, nbytes);
}

void CallContext::Buffer::recv(int src, std::uint64_t slot, std::size_t offset, std::size_t nbytes) {
  ctx_.check_interrupt();
  buf_->recv(src, slot, offset, nbytes);
}

void CallContext::Buffer::wait_send() {
  ctx_.check_interrupt();
  if (!buf_->waitSend(nullptr, ctx_.remaining())) throw AbortedSignal{};
}

void CallContext::Buffer::wait_recv() {
  ctx_.check_interrupt();
  if (!buf_->waitRecv(nullptr, ctx_.remaining())) throw AbortedSignal{};
}

}  // namespace lmcore::dist::detail
