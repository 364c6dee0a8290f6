// flight_internal.h: what flight.c and flight_verdict.c share (flight.h's private half).
#pragma once
#include "comm/flight.h"

// exit_code of an EXITED ring: the process ended without trident's own exit path (atexit
// saw no code); it vanished (a peer on its host found its pid gone: killed by a signal); or
// it went silent (a peer on another host, which cannot probe its pid, found its heartbeat
// older than FLIGHT_REMOTE_DEAD_S when a stop request came: flight.c's watchdog); ...
#define FLIGHT_EXIT_UNKNOWN (-1000)
#define FLIGHT_EXIT_VANISHED (-1001)
#define FLIGHT_EXIT_SILENT (-1002)
// ... or its liveness link (flight_link.c) closed while its ring said it ran: a peer on
// another host saw its sockets closed by its end.
#define FLIGHT_EXIT_UNLINKED (-1003)
// Whether an EXITED ring's code is a death another rank judged (not an exit of its own).
#define FLIGHT_EXIT_JUDGED(c)                                                                      \
    ((c) == FLIGHT_EXIT_VANISHED || (c) == FLIGHT_EXIT_SILENT || (c) == FLIGHT_EXIT_UNLINKED)
// How long the lowest live rank waits for the other live ranks of a stall to dump.
#define FLIGHT_GRACE_S 3.0
// The watchdog's period while a death is judged (flight.c), and how long after the verdict
// the ranks of a job with a dead rank end: a beat (a rank that has not seen the death yet
// polls at beats) and a margin.
#define FLIGHT_POLL_S 0.05
// How long after its start the watchdog polls (FLIGHT_POLL_S) until every peer's ring is read
// and the liveness links are made.
#define FLIGHT_START_S 10.0
#define FLIGHT_END_DELAY_S (FLIGHT_BEAT_S + 0.15)

double flight_clock(void); // CLOCK_REALTIME seconds
void flight_path(char *out, size_t cap, const char *dir, int rank, const char *ext);
int flight_read_header(const char *dir, int rank, flight_header *h);
int flight_exists(const char *dir, const char *name);
void flight_touch(const char *dir, const char *name);
void flight_mark_exit(int code);
// Whether every live rank (fresh heartbeat at `now`, not exited) of `world` has timed out.
int flight_all_live_reported(const char *dir, int world, double now);

// Liveness links (flight_link.c): TCP connections to group peers on other hosts whose far
// end closing, while that peer's ring says it runs, is its death (the kernel closes a dead
// process's sockets; a stopped one's stay open). The watchdog thread alone calls these.
#define FLIGHT_LINKS_OUT 4 // connections a rank opens (both ends watch each)
// Opens this rank's listener and fills h's link fields (the ring's rank, world and t_open
// must be set); -1 when it cannot (no links: the stop-request scan stays).
int flight_link_listen(const char *dir, flight_header *h);
// Asks for a link to `peer` (up to FLIGHT_LINKS_OUT; made as its ring appears).
void flight_link_want(int peer);
int flight_link_count(void);   // links asked for
int flight_link_pending(void); // a link is being made (the watchdog polls faster meanwhile)
// Advances every link without blocking; returns a peer whose link its far end closed after
// it was made (once per link), or -1.
int flight_link_poll(double now);
int flight_link_up(int peer);   // whether a link to or from `peer` is made and open
int flight_link_up_count(void); // links made and open (the ring header's links_up)
// Tells the far end of every link that this rank ends on its own (an exit it will say, or
// the verdict's exit 5): their closing is then no death. Then flight_link_close.
void flight_link_bye(void);
void flight_link_close(void);
