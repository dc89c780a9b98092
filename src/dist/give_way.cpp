// Activity and GiveWay (see give_way.h).
#include "src/dist/give_way.h"

#include <algorithm>

#include "src/dist/context.h"

namespace lmcore::dist::detail {

void Activity::begin() {
  std::lock_guard<std::mutex> lock(mu_);
  ++busy_;
}

void Activity::end() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --busy_;
    if (busy_ > 0) return;
  }
  cv_.notify_all();
}

bool Activity::wait_idle_until(Clock::time_point until) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, until, [&] { return busy_ == 0; });
}

int GiveWay::pieces(std::size_t max_len, int n) const {
  if (!active() || n <= 1 || max_len == 0) return 1;
  const std::size_t per_peer = std::max<std::size_t>(piece_bytes / static_cast<std::size_t>(n - 1), 1);
  return static_cast<int>(std::min<std::size_t>((max_len + per_peer - 1) / per_peer, 1 << 20));
}

void GiveWay::wait_clear(const CallContext& ctx) const {
  for (const auto& a : to) {
    while (true) {
      ctx.check_interrupt();
      const auto now = Clock::now();
      if (now >= ctx.op().deadline) throw DeadlineSignal{};
      // abort() does not reach this wait: look at it every 20 ms.
      if (a->wait_idle_until(std::min(ctx.op().deadline, now + std::chrono::milliseconds(20)))) break;
    }
  }
}

}  // namespace lmcore::dist::detail
