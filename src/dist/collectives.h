// Private: one function per collective, run by the group's worker once the call's header round
// succeeded (all_gather runs its own, overlapped with its data). Each picks its algorithms by size:
// see collectives.cpp.
#pragma once

#include "src/dist/context.h"
#include "src/dist/header_round.h"

namespace lmcore::dist::detail {

void run_all_reduce(CallContext& ctx);
void run_broadcast(CallContext& ctx);
void run_all_gather(CallContext& ctx, const Header& header);
void run_reduce_scatter(CallContext& ctx);
void run_all_to_all(CallContext& ctx);
void run_send(CallContext& ctx);
void run_recv(CallContext& ctx);

}  // namespace lmcore::dist::detail
