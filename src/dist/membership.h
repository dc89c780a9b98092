// Private: group construction shared by the constructor, shrink/reconfigure and join.
#pragma once

#include "src/dist/group_impl.h"

namespace lmcore::dist::detail {

// Fills unset options from the LMCORE_* environment; need_rank: rank and world size are required.
GroupOptions resolve_options(GroupOptions o, bool need_rank);
// Connects generation `generation` (store keys "<name>/g<generation>/...") and starts the worker.
std::shared_ptr<GroupImpl> make_group(const GroupOptions& o, std::shared_ptr<Store> root,
                                      std::shared_ptr<gloo::transport::Device> device, int rank, int size,
                                      int generation, std::int64_t join_consumed);
// shrink (admit_joiners false) and reconfigure (true).
std::shared_ptr<GroupImpl> reform(GroupImpl& old, const ShrinkOptions& options, bool admit_joiners);

}  // namespace lmcore::dist::detail
