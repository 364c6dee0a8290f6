// stop.h: stop requests (DESIGN.md "CLI": SIGTERM, SIGUSR1 and a first SIGINT are honoured
// within 10 s anywhere in a run) and the start-up deadline (system.init_timeout_s).
//
// Stop requests. stop_install_handlers(), the first thing `trident train` does, makes
// SIGTERM, SIGUSR1 and a first SIGINT set a flag; a second SIGINT ends the process at once
// (exit 130, no checkpoint). The run polls the flag where it can stop cleanly: at every step
// boundary (then it checkpoints the step just done), every evaluation batch, every start-up
// phase after the communicators exist, and every tensor a resume reads. Spreading the flag to
// the other ranks is the caller's business (an all-reduce at a point every rank reaches):
// a rank never leaves a collective that the others are in.
//
// The start-up watchdog, a thread that runs from stop_startup_begin() until
// stop_startup_end() (the first training step) and checks every 100 ms:
//  - the deadline: a start-up phase that makes no progress for init_timeout_s seconds
//    (progress: stop_phase() entering the next phase, stop_progress() inside one) ends the
//    process with exit 5, after printing the phase and, where the comm layer can tell
//    (stop_set_peer_hooks), the ranks that never reached it. Nothing else can end a process
//    blocked inside MPI_Init or a PMIx fence; the launcher (mpirun) then ends the other
//    ranks, or their own watchdogs fire.
//  - the stop bound: a stop requested during start-up and not honoured within
//    STOP_STARTUP_GRACE_S (the main thread is blocked where it cannot poll: inside MPI or
//    PMIx initialisation, or waiting for a rank that is not stopping) ends the process
//    with exit 0 and the reason: before the first step there is nothing to checkpoint.
// After a stop or an error during start-up the watchdog stays on through the teardown
// (MPI_Finalize waits for the other ranks); it ends when training starts or at exit.
// The watchdog writes with write(2), never through stdio, so that it cannot wait on a lock
// that the blocked main thread holds.
#pragma once
#include "base/common.h"

#ifdef __cplusplus
extern "C" {
#endif

// A stop requested during start-up ends the process this long after the request at the
// latest (DESIGN.md allows 10 s; the rest is left to the launcher's teardown).
#define STOP_STARTUP_GRACE_S 4.0
// system.init_timeout_s's default, and the deadline until the config is read.
#define STOP_INIT_TIMEOUT_DEFAULT_S 300.0

// SIGTERM, SIGUSR1, SIGINT (the second SIGINT: _exit(130) at once).
void stop_install_handlers(void);
// The signal that asked this process to stop (SIGTERM, SIGUSR1, SIGINT), 0 when none.
int stop_signal(void);
// Records a stop request as if signal `sig` had arrived (a stop agreed with other ranks).
void stop_request(int sig);
// "SIGTERM", "SIGUSR1", "SIGINT" or "a signal".
const char *stop_signal_name(int sig);
// TRI_STOPPED when a stop was requested, else TRI_OK; counts as start-up progress.
tri_status stop_poll(void);
// stop_poll for each tensor a resume reads; first pauses TRIDENT_TEST_RESUME_DELAY_MS (a
// test hook, so that a signal lands inside a resume).
tri_status stop_poll_resume(void);

// Starts the watchdog with the deadline `timeout_s` (<= 0: no deadline; the stop bound
// holds anyway). Once per process.
void stop_startup_begin(double timeout_s);
// The deadline once the config is read (system.init_timeout_s), from the last progress.
void stop_startup_set_timeout(double timeout_s);
// The phase now running (a string that lives as long as the process: a literal), which the
// messages name; entering it counts as progress.
void stop_phase(const char *phase);
const char *stop_phase_name(void);
// Progress inside a phase: the deadline starts again.
void stop_progress(void);
// Training starts: the watchdog ends (the comm timeout and the step boundaries take over).
void stop_startup_end(void);
// Whether the watchdog is on (start-up has not ended).
int stop_in_startup(void);

// The comm layer's view of the other ranks: announce(phase) on the main thread when this
// rank enters a phase; report(phase, out, n) on the watchdog thread when the deadline has
// passed, writing into `out` the ranks that never announced `phase` ("" if it cannot tell).
// report must return within a few seconds.
typedef struct {
    void (*announce)(const char *phase);
    void (*report)(const char *phase, char *out, size_t n);
} stop_peer_hooks;
void stop_set_peer_hooks(const stop_peer_hooks *hooks);

// Called with the exit code just before each _exit of this module (a second SIGINT, the
// start-up deadline, the stop bound): the flight recorder marks its ring EXITED there, so that
// the other ranks do not take the missing process for a killed one. Must be async-signal-safe.
void stop_set_exit_hook(void (*hook)(int code));

#ifdef __cplusplus
}
#endif
