// flight_internal.h: what flight.c and flight_verdict.c share (flight.h's private half).
#pragma once
#include "comm/flight.h"

// exit_code of an EXITED ring: the process ended without trident's own exit path (atexit
// saw no code); it vanished (a peer on its host found its pid gone: killed by a signal); or
// it went silent (a peer on another host, which cannot probe its pid, found its heartbeat
// older than FLIGHT_REMOTE_DEAD_S when a stop request came: flight.c's watchdog).
#define FLIGHT_EXIT_UNKNOWN (-1000)
#define FLIGHT_EXIT_VANISHED (-1001)
#define FLIGHT_EXIT_SILENT (-1002)
// How long the lowest live rank waits for the other live ranks of a stall to dump.
#define FLIGHT_GRACE_S 3.0
// The watchdog's period while a death is judged (flight.c), and how long after the verdict
// the ranks of a job with a dead rank end: a beat (a rank that has not seen the death yet
// polls at beats) and a margin.
#define FLIGHT_POLL_S 0.05
#define FLIGHT_END_DELAY_S (FLIGHT_BEAT_S + 0.15)

double flight_clock(void); // CLOCK_REALTIME seconds
void flight_path(char *out, size_t cap, const char *dir, int rank, const char *ext);
int flight_read_header(const char *dir, int rank, flight_header *h);
int flight_exists(const char *dir, const char *name);
void flight_touch(const char *dir, const char *name);
void flight_mark_exit(int code);
// Whether every live rank (fresh heartbeat at `now`, not exited) of `world` has timed out.
int flight_all_live_reported(const char *dir, int world, double now);
