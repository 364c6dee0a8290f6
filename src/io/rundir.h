// rundir.h: the directories a training run writes, run.out_dir and checkpoint.dir. They are
// probed at start, so that an unusable one ends the run before its first step rather than at
// its first checkpoint or after its last step, and locked for the run's life, so that two
// runs never write one directory (they would delete each other's temporary files, resume
// each other's checkpoints and interleave their metrics).
//
// The lock is flock(2) on <dir>/.trident.lock, held by rank 0: it dies with the process, so
// a run that was killed leaves no lock, only the file naming it (pid, host, job, start
// time), which the next run reports as it takes the lock over. `trident sample` and
// `export` only read and take no lock.
#pragma once
#include "comm/comm.h"
#include "config/config.h"

#define RUNDIR_LOCK_FILE ".trident.lock"

// What the run will write, for the free-space check.
typedef struct {
    uint64_t checkpoint_rank_bytes; // this rank's file of one checkpoint (ckpt_rank_bytes)
    uint64_t model_bytes;           // the final model in run.out_dir
} rundir_plan;

typedef struct {
    int n;            // directories locked (0 on ranks other than 0)
    int fd[2];        // their lock files, open and flock'ed
    char *dir[2];     // the directories
    char *created[2]; // the topmost directory this run created for each, or NULL
} rundir;

// Collective over the world of cm. Rank 0 creates run.out_dir and checkpoint.dir (when set),
// takes the lock of each (once when both are one directory), probes each (creates, writes,
// fsyncs, renames and removes a file) and warns when a file system has less free space than
// the run's checkpoints and final model take; then the first rank of every other node
// probes checkpoint.dir, which every rank writes. Every rank returns the same status:
// TRI_ERR_CONFIG when another run holds a directory (named with its holder), TRI_ERR_CKPT
// when a directory is unusable (named with what failed).
tri_status rundir_open(rundir *rd, const run_config *cfg, comm *cm, int rank, int local_rank,
                       const rundir_plan *plan);

// Releases the locks (rank 0; a no-op elsewhere): empties each lock file, so that the next
// run sees a clean release, and removes a directory this run created when nothing but the
// lock file is in it (a run that failed at start leaves no trace).
void rundir_close(rundir *rd);
