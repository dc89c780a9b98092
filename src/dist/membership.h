// Private: group construction shared by the constructor, shrink/reconfigure and join.
#pragma once

#include "src/dist/group_impl.h"

namespace lmcore::dist::detail {

// Connects generation `generation` (store keys "<name>/g<generation>/...") and starts the worker.
std::shared_ptr<GroupImpl> make_group(const GroupConfig& config, std::shared_ptr<Store> root,
                                      std::shared_ptr<gloo::transport::Device> device, int rank, int size,
                                      int generation, std::int64_t join_consumed);
// shrink (admit_joiners false) and reconfigure (true).
std::shared_ptr<GroupImpl> reform(GroupImpl& old, const ShrinkOptions& options, bool admit_joiners);

}  // namespace lmcore::dist::detail
