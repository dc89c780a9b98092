// lmcore/train/elastic.h — elastic, fault-tolerant sharded training: a job that loses a rank goes on
// with the survivors, and takes a restarted rank back.
//
//   lmcore launch --nproc 3 --keep-going --restart-failed 2 -- \
//       lmcore train --fsdp --elastic --global-batch 12 --checkpoint-every 100 --memory-checkpoint-every 10 ...
//
// or, from C++, TrainOptions{.fsdp = true, .elastic = true, .memory_checkpoint_every = 10, ...} on every
// rank (LMCORE_RANK / LMCORE_WORLD_SIZE / LMCORE_STORE as `lmcore launch` sets them).
//
// What happens (the implementation is src/train/elastic.cpp; its top comment has the protocol):
//  * A rank dies or its link is cut: a collective of every survivor fails with a DistError (within the
//    group's timeout + 2 s; at once when the connection breaks). Each survivor abandons the step,
//    shrinks the group to the survivors (ProcessGroup::shrink), builds its sharded engine again on the
//    new group (the separate reduce-scatter group, if any, gets a name of the new generation), restores
//    the newest state the survivors hold, re-sharded for the new world size, and continues from that
//    state's step and data position. A second failure during recovery shrinks again.
//  * Which state: the newest of
//      - the in-memory checkpoint (--memory-checkpoint-every N): every N steps each rank copies its
//        shards of the parameters and AdamW moments, and also receives its right neighbour's (rank
//        r keeps r + 1's), so that one lost rank, or several that are not neighbours, lose nothing that
//        was checkpointed; the shards move to their new owners with one all_to_all_single. It is taken
//        in two phases (exchange, barrier, commit), so a failure in the middle never leaves it torn;
//      - the newest complete disk checkpoint (--checkpoint-every N): a sharded checkpoint is installed
//        by an atomic rename only after every rank wrote its shard, so one interrupted by a failure is
//        ignored (its temporary folder is removed by the next write), never half-read;
//      - the run's starting point (--resume, or the seed's initial weights).
//    The steps after it are trained again: the loss of work is bounded by the checkpoint interval.
//  * The global batch stays: grad_accum = global batch / (batch size x world size), so with fewer ranks
//    each does more micro-batches and the loss curve does not jump; the data position is the
//    checkpoint's, so within an epoch no sample is skipped or seen twice. At start-up every world size
//    from --min-ranks to the initial one must divide the global batch (else a clear error names a
//    --global-batch that works).
//  * A restarted rank (by `lmcore launch --restart-failed K` or by hand, with the same arguments and
//    store) finds that the job's group already formed and asks to join; the members admit it at their
//    next checkpoint boundary (a step with a disk or memory checkpoint) with ProcessGroup::reconfigure,
//    re-shard the live state to the larger world and go on. A rank left out of a shrink (it answered
//    too late) rejoins the same way.
//  * Every change is one line in metrics.jsonl and one mark on report.html's loss curve:
//      {"event":"membership","cause":"failure"|"join","step":S (the step training continues from),
//       "at_step":steps completed when it failed,"old_world":3,"new_world":2,"lost_ranks":[1],
//       "joined":0,"op":"all_gather_single","kind":"peer_failure","detection":"a connection to a peer
//       broke; roll call: rank(s) 1 did not answer","source":"memory snapshot of step 4",
//       "detect_s":..., "recover_s":..., "downtime_s":..., "unix_time":...,"label":"3→2 ranks"}
//    detect_s: from the start of the failed step to the error; recover_s: from the error to training
//    again (shrink, rebuild, re-shard, reload); downtime_s: from the end of the last completed step to
//    training again (an upper bound of the time from the failure itself).
//  * Fewer ranks than --min-ranks (or a world size that cannot keep the global batch): the survivors
//    write the restored state as a disk checkpoint for their world size and stop with an error naming
//    it (resume it with --resume at any world size).
//
// The job's store must be its own (`lmcore launch` makes a fresh one; a Redis store shared by
// successive jobs must be flushed between them): a rank that finds the key "train-elastic/formed"
// there believes it was restarted into a running job and waits to be admitted.
//
// Testing hooks: lmcore/core/fault_injection.h kills a rank at a chosen point (during a forward, with a
// reduce-scatter in flight, in a checkpoint write).
#pragma once

#include "lmcore/train/trainer.h"
