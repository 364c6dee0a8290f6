// flight_link.c: liveness links between the flight recorders of ranks on different hosts
// (flight_internal.h).
//
// A dead process cannot say it died, and another node cannot probe its pid; but the kernel
// closes every socket of a process that ends, however it ends (SIGKILL, a crash, an exit),
// and keeps the sockets of a stopped one open. So each rank listens on a TCP port, publishes
// the port, its IPv4 addresses and a random nonce in its ring header, and its watchdog keeps a
// connection to a few group peers on other hosts. The far end of a connection closing
// (end of file, or a reset) while that peer's ring says it runs is the peer's death, seen
// within a beat, with no help from the launcher (srun cancels a step with SIGKILL alone).
//
// Both ends of a link watch it, so each rank opens at most FLIGHT_LINKS_OUT of them and is
// still watched by every peer it connected to. A connection is a link once the far end has
// checked the nonce it quotes (a stale port of an earlier run, or another machine's process
// behind a shared address such as a container bridge's, refuses it) and answered one byte:
// a refusal before that answer is a failed attempt, never a death.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/flight_internal.h"

#define LINK_MAGIC "TLK1"
#define LINK_ACK 'K'
#define LINK_BYE 'B'       // the far end ends on its own: its link closing is no death
#define LINK_CONNECT_S 1.0 // per address: connect and the answer
#define LINK_HELLO_S 2.0   // an accepted connection's hello
#define LINK_MAX_IN 128    // accepted connections held (more are refused: never a death)

// The hello a connecting rank sends: who it is, and the nonce of the ring it read.
typedef struct {
    char magic[4];
    int32_t from;
    uint64_t nonce;
} link_hello;

typedef enum { L_FREE = 0, L_WANT, L_CONNECTING, L_HELLO, L_UP, L_DONE } link_state;

typedef struct {
    link_state st;
    int fd, rank;
    int addr_i;       // outgoing: the address being tried
    double t;         // when the state began
    size_t got;       // incoming: hello bytes read
    link_hello hello; // outgoing: the peer's nonce and addresses (read from its ring)
    uint16_t port;
    uint16_t n_addr;
    uint32_t addr[4];
    int bye;      // the far end said it ends on its own
    char err[96]; // outgoing: the last attempt's failure
} peer_link;

static struct {
    int listen_fd;
    int rank, world;
    uint64_t nonce;
    double t_open;
    const char *dir;
    peer_link out[FLIGHT_LINKS_OUT];
    int n_out;
    peer_link in[LINK_MAX_IN];
} L = {.listen_fd = -1};

static void link_drop(peer_link *k, link_state st) {
    if (k->fd >= 0) close(k->fd);
    k->fd = -1;
    k->st = st;
}

// Up to 4 IPv4 addresses of this host: the interfaces that are up, loopback last (two ranks
// of one machine that take each other for other hosts: TRIDENT_TEST_HOSTS).
static int host_addrs(uint32_t *out, int cap) {
    struct ifaddrs *ifs = NULL;
    int n = 0;
    if (getifaddrs(&ifs) == 0) {
        for (int loop = 0; loop < 2; loop++)
            for (struct ifaddrs *i = ifs; i && n < cap; i = i->ifa_next) {
                if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
                    continue;
                if (!!(i->ifa_flags & IFF_LOOPBACK) != loop) continue;
                const uint32_t a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
                int dup = 0;
                for (int k = 0; k < n; k++) dup |= out[k] == a;
                if (!dup) out[n++] = a;
            }
        freeifaddrs(ifs);
    }
    if (n == 0) out[n++] = htonl(INADDR_LOOPBACK);
    return n;
}

int flight_link_listen(const char *dir, flight_header *h) {
    memset(&L.out, 0, sizeof L.out);
    memset(&L.in, 0, sizeof L.in);
    for (int i = 0; i < FLIGHT_LINKS_OUT; i++) L.out[i].fd = -1;
    for (int i = 0; i < LINK_MAX_IN; i++) L.in[i].fd = -1;
    L.n_out = 0;
    L.dir = dir;
    L.rank = h->rank;
    L.world = h->world;
    L.t_open = h->t_open;
    if (getrandom(&L.nonce, sizeof L.nonce, GRND_NONBLOCK) != (ssize_t)sizeof L.nonce)
        L.nonce = (uint64_t)getpid() << 32 ^ (uint64_t)(h->t_open * 1e6);
    L.nonce |= 1; // never 0: a ring of 0 nonce has no listener
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    L.listen_fd = fd;
    h->n_link_addr = (uint16_t)host_addrs(h->link_addr, 4);
    h->link_nonce = L.nonce;
    h->link_port = ntohs(a.sin_port);
    return 0;
}

void flight_link_want(int peer) {
    if (L.listen_fd < 0) return;
    for (int i = 0; i < L.n_out; i++)
        if (L.out[i].rank == peer) return;
    if (L.n_out == FLIGHT_LINKS_OUT) return;
    peer_link *k = &L.out[L.n_out++];
    *k = (peer_link){.st = L_WANT, .fd = -1, .rank = peer};
}

int flight_link_count(void) { return L.n_out; }

int flight_link_pending(void) {
    for (int i = 0; i < L.n_out; i++)
        if (L.out[i].st == L_WANT || L.out[i].st == L_CONNECTING || L.out[i].st == L_HELLO)
            return 1;
    for (int i = 0; i < LINK_MAX_IN; i++)
        if (L.in[i].st == L_HELLO) return 1;
    return 0;
}

// Starts a connection to the peer's address k->addr_i (L_CONNECTING), or ends the link
// (L_DONE, with a warning) when every address has been tried.
static void link_connect(peer_link *k, double now) {
    while (k->addr_i < k->n_addr) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons(k->port),
                                .sin_addr.s_addr = k->addr[k->addr_i]};
        k->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (k->fd < 0) break;
        k->t = now;
        if (connect(k->fd, (struct sockaddr *)&a, sizeof a) == 0 || errno == EINPROGRESS) {
            k->st = L_CONNECTING;
            return;
        }
        snprintf(k->err, sizeof k->err, "%s", strerror(errno));
        link_drop(k, L_WANT);
        k->addr_i++;
    }
    LOG_WARN("flight recorder: no liveness link to rank %d (%d address(es) tried; last: %s): "
             "its death would be noticed at the launcher's stop request or after "
             "system.comm_timeout_s",
             k->rank, k->n_addr, k->err[0] ? k->err : "no address");
    link_drop(k, L_DONE);
}

static void link_next_addr(peer_link *k, double now, const char *why) {
    LOG_DEBUG("flight recorder: liveness link to rank %d, address %d of %d: %s", k->rank,
              k->addr_i + 1, k->n_addr, why);
    snprintf(k->err, sizeof k->err, "%s", why);
    link_drop(k, L_WANT);
    k->addr_i++;
    link_connect(k, now);
}

// An outgoing link to a peer whose ring is readable and this run's: its listener's details.
static void link_start(peer_link *k, double now) {
    flight_header h;
    if (flight_read_header(L.dir, k->rank, &h) != 0 || h.heartbeat < L.t_open - 1.0) return;
    if (h.link_port == 0 || h.link_nonce == 0) {
        k->st = L_DONE; // the peer has no listener (its own warning says why)
        return;
    }
    memcpy(k->hello.magic, LINK_MAGIC, 4);
    k->hello.from = L.rank;
    k->hello.nonce = h.link_nonce;
    k->port = h.link_port;
    k->n_addr = h.n_link_addr < 4 ? h.n_link_addr : 4;
    memcpy(k->addr, h.link_addr, sizeof k->addr);
    k->addr_i = 0;
    link_connect(k, now);
}

// What a readable link says: 1 the far end closed it (end of file or an error), 0 not. A bye
// byte before it (flight_link_bye) marks an end of the peer's own.
static int link_closed(peer_link *k) {
    char buf[64];
    ssize_t n = recv(k->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) k->bye |= memchr(buf, LINK_BYE, (size_t)n) != NULL;
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

// An accepted connection's hello, as far as it has come: checked when whole.
static void link_read_hello(peer_link *k) {
    ssize_t n = recv(k->fd, (char *)&k->hello + k->got, sizeof k->hello - k->got, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        link_drop(k, L_FREE);
        return;
    }
    if (n > 0) k->got += (size_t)n;
    if (k->got < sizeof k->hello) return;
    const char ack = LINK_ACK;
    if (memcmp(k->hello.magic, LINK_MAGIC, 4) != 0 || k->hello.nonce != L.nonce ||
        k->hello.from < 0 || k->hello.from >= L.world || k->hello.from == L.rank ||
        send(k->fd, &ack, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
        link_drop(k, L_FREE);
        return;
    }
    k->rank = k->hello.from;
    k->st = L_UP;
}

static void link_accept(double now) {
    for (;;) {
        int fd = accept4(L.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        peer_link *k = NULL;
        for (int i = 0; i < LINK_MAX_IN && !k; i++)
            if (L.in[i].st == L_FREE) k = &L.in[i];
        if (!k) {
            close(fd); // before the answer: the connecting rank counts a failed attempt
            continue;
        }
        *k = (peer_link){.st = L_HELLO, .fd = fd, .rank = -1, .t = now};
    }
}

int flight_link_poll(double now) {
    if (L.listen_fd < 0) return -1;
    for (int i = 0; i < L.n_out; i++)
        if (L.out[i].st == L_WANT) link_start(&L.out[i], now);
    struct pollfd fds[1 + FLIGHT_LINKS_OUT + LINK_MAX_IN];
    peer_link *of[1 + FLIGHT_LINKS_OUT + LINK_MAX_IN];
    int n = 0;
    fds[n] = (struct pollfd){.fd = L.listen_fd, .events = POLLIN};
    of[n++] = NULL;
    for (int i = 0; i < L.n_out; i++) {
        peer_link *k = &L.out[i];
        if (k->st != L_CONNECTING && k->st != L_HELLO && k->st != L_UP) continue;
        fds[n] = (struct pollfd){.fd = k->fd, .events = k->st == L_CONNECTING ? POLLOUT : POLLIN};
        of[n++] = k;
    }
    for (int i = 0; i < LINK_MAX_IN; i++) {
        peer_link *k = &L.in[i];
        if (k->st != L_HELLO && k->st != L_UP) continue;
        fds[n] = (struct pollfd){.fd = k->fd, .events = POLLIN};
        of[n++] = k;
    }
    if (poll(fds, (nfds_t)n, 0) < 0) return -1;
    int closed = -1;
    for (int i = 0; i < n; i++) {
        peer_link *k = of[i];
        const short ev = fds[i].revents;
        if (!k) {
            if (ev & POLLIN) link_accept(now);
            continue;
        }
        const int outgoing = k >= L.out && k < L.out + FLIGHT_LINKS_OUT;
        if (k->st == L_UP) {
            if (ev && closed < 0 && link_closed(k)) {
                if (!k->bye) closed = k->rank;
                link_drop(k, outgoing ? L_DONE : L_FREE);
            }
        } else if (!outgoing) { // an accepted connection's hello
            if (ev) link_read_hello(k);
            else if (now - k->t > LINK_HELLO_S) link_drop(k, L_FREE);
        } else if (k->st == L_CONNECTING) {
            int err = 0;
            socklen_t len = sizeof err;
            if (!ev) {
                if (now - k->t > LINK_CONNECT_S) link_next_addr(k, now, "connect timed out");
            } else if (getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err) {
                link_next_addr(k, now, strerror(err ? err : errno));
            } else if (send(k->fd, &k->hello, sizeof k->hello, MSG_DONTWAIT | MSG_NOSIGNAL) !=
                       (ssize_t)sizeof k->hello) {
                link_next_addr(k, now, "the hello could not be sent");
            } else {
                k->st = L_HELLO;
                k->t = now;
            }
        } else { // L_HELLO: the answer
            char c = 0;
            ssize_t got = ev ? recv(k->fd, &c, 1, MSG_DONTWAIT) : -1;
            if (got == 1 && c == LINK_ACK) {
                k->st = L_UP;
                LOG_DEBUG("flight recorder: liveness link to rank %d made (address %d of %d)",
                          k->rank, k->addr_i + 1, k->n_addr);
            } else if (ev || now - k->t > LINK_CONNECT_S)
                link_next_addr(k, now, "refused by the process at that address");
        }
    }
    return closed;
}

int flight_link_up(int peer) {
    for (int i = 0; i < L.n_out; i++)
        if (L.out[i].rank == peer && L.out[i].st == L_UP) return 1;
    for (int i = 0; i < LINK_MAX_IN; i++)
        if (L.in[i].rank == peer && L.in[i].st == L_UP) return 1;
    return 0;
}

int flight_link_up_count(void) {
    int n = 0;
    for (int i = 0; i < L.n_out; i++) n += L.out[i].st == L_UP;
    for (int i = 0; i < LINK_MAX_IN; i++) n += L.in[i].st == L_UP;
    return n;
}

void flight_link_bye(void) {
    const char bye = LINK_BYE;
    for (int i = 0; i < FLIGHT_LINKS_OUT + LINK_MAX_IN; i++) {
        peer_link *k = i < FLIGHT_LINKS_OUT ? &L.out[i] : &L.in[i - FLIGHT_LINKS_OUT];
        if (k->st == L_UP) (void)send(k->fd, &bye, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
}

void flight_link_close(void) {
    if (L.listen_fd < 0) return;
    for (int i = 0; i < FLIGHT_LINKS_OUT; i++) link_drop(&L.out[i], L_FREE);
    for (int i = 0; i < LINK_MAX_IN; i++) link_drop(&L.in[i], L_FREE);
    L.n_out = 0;
    if (L.listen_fd >= 0) close(L.listen_fd);
    L.listen_fd = -1;
}
