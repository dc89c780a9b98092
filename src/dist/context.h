// Private: the transport a generation talks over and the context one call runs in.
//
// Transport holds Gloo's device and full mesh of pairs and the buffers that calls are waiting on,
// so that abort(), a failure posted by another rank, or shrink() can release every wait at once.
// CallContext is what an algorithm sees: the call, its deadline, this rank's place, the group's
// algorithm options, reusable scratch memory, and the message slots, all numbered here (Slot).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "src/dist/call.h"
#include "src/dist/give_way.h"
#include "src/dist/group_config.h"

namespace lmcore::dist::detail {

// Message slots. Gloo matches a send with a receive by peer and slot, so every message of a call
// gets a slot from CallContext::slot, laid out as
//   bits 60..63  the kind (this enum)
//   header, split_table   nothing else: collectives run one at a time, and Gloo keeps the messages
//                         of one pair and one slot in order
//   data                  bits 12..59 the call's sequence number, bits 0..11 the step within it
//   p2p_header, p2p_data  bit 58 the direction (lower rank sends: 0), bits 40..57 the lower rank of
//                         the pair, bits 0..39 the pair's counter in that direction
// Append-only, like OpKind.
enum class Slot : std::uint8_t {
  header = 0,
  split_table = 1,
  data = 2,
  p2p_header = 3,
  p2p_data = 4,
};

// Thrown inside algorithms when a wait was released (abort, a failure posted by another rank,
// shrink), or the deadline had passed before a call started.
struct AbortedSignal {};
struct DeadlineSignal {};

class Transport {
 public:
  Transport(std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<gloo::rendezvous::Context> context)
      : device_(std::move(device)), context_(std::move(context)) {}
  int rank() const { return context_->rank; }
  int size() const { return context_->size; }
  gloo::rendezvous::Context* gloo_context() const { return context_.get(); }
  const std::shared_ptr<gloo::transport::Device>& device() const { return device_; }

  // Releases every wait on a registered buffer (they throw AbortedSignal), and every later one.
  void interrupt();
  bool interrupted() const { return interrupted_.load(); }
  // Closes every connection: the peers' calls fail at once instead of at their deadlines.
  void close();

 private:
  friend class CallContext;
  void add(gloo::transport::UnboundBuffer* b);
  void remove(gloo::transport::UnboundBuffer* b);

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::mutex mu_;
  std::vector<gloo::transport::UnboundBuffer*> active_;  // guarded by mu_
  std::atomic<bool> interrupted_{false};
};

// Memory the calls of a group reuse (they run one at a time; send and recv, which run beside them,
// bring their own): fresh pages would cost a fault each, every call.
struct CallScratch {
  std::vector<std::byte> ring;                  // the reduce-scatters' receive buffers
  std::vector<std::byte> first_out, first_in;   // the header round's messages, out and in
};

class CallContext {
 public:
  CallContext(Transport& transport, const OpDesc& op, const GroupConfig& config, int generation, CallScratch& scratch)
      : t_(transport), op_(op), config_(config), generation_(generation), scratch_(scratch) {}
  const OpDesc& op() const { return op_; }
  int rank() const { return t_.rank(); }
  int size() const { return t_.size(); }
  int generation() const { return generation_; }
  const GroupConfig& config() const { return config_; }
  CallScratch& scratch() { return scratch_; }
  // The groups this call gives way to (ProcessGroup::give_way_to); inactive when none.
  const GiveWay& give_way() const { return give_way_ != nullptr ? *give_way_ : kNoGiveWay; }
  void set_give_way(const GiveWay* g) { give_way_ = g; }

  // Slot `kind` of this call (see Slot); `step` numbers the data messages of one call (< 4096).
  std::uint64_t slot(Slot kind, std::uint32_t step = 0) const;
  std::chrono::milliseconds remaining() const;  // until the deadline, at least 1 ms
  void check_interrupt() const;                  // throws AbortedSignal

  // A Gloo buffer over [ptr, ptr+n) registered with the transport; unregistered on destruction.
  class Buffer {
   public:
    Buffer(CallContext& ctx, void* ptr, std::size_t n);
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    void send(int dst, std::uint64_t slot, std::size_t offset, std::size_t nbytes);
    void recv(int src, std::uint64_t slot, std::size_t offset, std::size_t nbytes);
    void wait_send();  // bounded by the call's deadline
    void wait_recv();
    std::byte* data() const { return static_cast<std::byte*>(buf_->ptr); }

   private:
    CallContext& ctx_;
    std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  };

  // Set by the header round when the payload travelled with the headers: peer p's share for this
  // rank (p == rank(): this rank's own contribution, as it sent it), valid until the next call.
  bool payload_arrived() const { return shares_in_ != nullptr; }
  const std::byte* share_from(int p) const {
    return p == rank() ? own_share_ : shares_in_ + static_cast<std::size_t>(p) * share_stride_ + share_offset_;
  }
  void set_shares(const std::byte* in, std::size_t stride, std::size_t offset, const std::byte* own) {
    shares_in_ = in;
    share_stride_ = stride;
    share_offset_ = offset;
    own_share_ = own;
  }

 private:
  Transport& t_;
  const OpDesc& op_;
  const GroupConfig& config_;
  const int generation_;
  CallScratch& scratch_;
  const GiveWay* give_way_ = nullptr;
  static inline const GiveWay kNoGiveWay{};
  const std::byte* shares_in_ = nullptr;  // message p at shares_in_ + p * share_stride_
  std::size_t share_stride_ = 0, share_offset_ = 0;
  const std::byte* own_share_ = nullptr;
};

}  // namespace lmcore::dist::detail
