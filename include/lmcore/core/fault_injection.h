// lmcore/core/fault_injection.h — named points where a test or a benchmark can make this process die
// exactly as `kill -9` would, at a chosen moment of its work.
//
// The fault-tolerance tests need a rank to die *during* a forward pass, *while* a reduce-scatter is in
// flight, or *in the middle of* a checkpoint write. A kill from outside cannot hit such a moment
// reliably; a fault point can. Code marks the moments:
//
//   fault_point("fsdp.reduce_scatter");   // after the unit's reduce-scatter was issued
//
// and the environment arms one of them:
//
//   LMCORE_FAULT=SITE:N[@RANK]   on the N-th pass (1-based) through SITE in this process, raise SIGKILL;
//                                @RANK: only in the process whose LMCORE_RANK is RANK
//   LMCORE_FAULT_AFTER=SITE2:M   count passes through SITE only after the M-th pass through SITE2 (for
//                                example the 2nd reduce-scatter of step 6: fsdp.reduce_scatter:2 after
//                                train.step:6)
//   LMCORE_FAULT_STAMP=FILE      just before dying, write the wall-clock time (Unix seconds, to the
//                                microsecond) to FILE, for benchmarks that time the recovery
//
// A process restarted by `lmcore launch --restart-failed` (LMCORE_RESTART_COUNT > 0) never fires, so a
// restarted rank does not die again at the same point. Unarmed, a fault point costs one getenv().
//
// Sites in lmcore: "fsdp.forward" (a unit's parameters requested in a forward pass),
// "fsdp.reduce_scatter" (a unit's gradient reduce-scatter issued), "checkpoint.shard" (this rank's
// shard file of a sharded checkpoint written, the others possibly not), "elastic.snapshot" (an
// in-memory checkpoint's replicas exchanged, not yet committed), "train.step" (a training step begins),
// "dist.roll_call" (this rank is about to answer a process group's roll call after a failure).
#pragma once

#include <string>

namespace lmcore {

// Counts a pass through `site`; raises SIGKILL when LMCORE_FAULT arms this pass (see above).
void fault_point(const char* site);

// The parsed LMCORE_FAULT value: whether it is well-formed, for error messages at start-up. Returns ""
// when unset or valid, else a message naming the value and the expected form.
std::string fault_spec_error();

}  // namespace lmcore
