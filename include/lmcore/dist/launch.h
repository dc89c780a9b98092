// lmcore/dist/launch.h — starts the local ranks of a job: what `lmcore launch` and
// lmcore.dist.launch() run.
//
//   lmcore::dist::LaunchOptions o;
//   o.nproc = 4;
//   o.command = {"python3", "train.py", "--steps", "100"};
//   int status = lmcore::dist::launch(o);  // 0 when every rank succeeded
//
// Each rank runs `command` (PATH is searched) with LMCORE_RANK, LMCORE_LOCAL_RANK, LMCORE_WORLD_SIZE,
// LMCORE_LOCAL_WORLD_SIZE, LMCORE_NODE_RANK and LMCORE_STORE in its environment (a ProcessGroup
// built from_env() finds its peers through them) and PYTHONUNBUFFERED=1 unless set. Every line a
// rank prints goes to stdout_fd / stderr_fd with the prefix "[rank R] ".
//
// When a rank exits with a non-zero status, the others are stopped (SIGTERM, then SIGKILL after
// kill_grace) and launch() returns that status. keep_going lets the others run on (fault-tolerant
// jobs); the status is then the first non-zero one, or 0. restart_failed = K starts a failed rank
// again, up to K times per rank, with LMCORE_RESTART_COUNT = 1, 2, ... set; the others run on
// meanwhile (an elastic job admits the restarted rank back). A rank's status is that of its last run.
// launch() returns when every rank has exited and its output is relayed; a process that a rank
// started and left running is not waited for beyond kill_grace.
//
// One machine: the store defaults to a fresh file:// directory, removed at the end. Several machines:
// one launcher per machine with the same redis://host:port store, nnodes and its own node_rank.
//
// While launch() runs, SIGINT and SIGTERM sent to this process are passed on to the ranks, which are
// then stopped as above, and launch() returns 128 + the signal; the previous handlers are restored
// when it returns. The ranks never outlive the thread that called launch() (PR_SET_PDEATHSIG).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <unistd.h>

namespace lmcore::dist {

struct LaunchOptions {
  std::vector<std::string> command;  // the program and its arguments
  int nproc = 1;                     // ranks on this machine, in [1, 4096]
  int nnodes = 1;                    // machines, in [1, 4096]
  int node_rank = 0;                 // this machine's index in [0, nnodes)
  std::string store;                 // file:///dir or redis://host:port; empty: a fresh file store
  bool keep_going = false;           // do not stop the other ranks when one fails
  int restart_failed = 0;            // start a failed rank again, up to this many times per rank
  std::chrono::milliseconds kill_grace{3000};  // between SIGTERM and SIGKILL when stopping ranks
  int stdout_fd = STDOUT_FILENO;     // where the ranks' prefixed lines go
  int stderr_fd = STDERR_FILENO;
};

// Checks the options (an Error naming the option and the value when one is invalid: nothing has
// started then), runs the ranks to their end and returns the job's exit status: 0, a failed rank's
// exit code (128 + the signal when a signal ended it), or 128 + the signal that stopped the launcher.
// Throws Error when the system refuses a pipe or a process.
int launch(const LaunchOptions& options);

}  // namespace lmcore::dist
