// tensorboard.c: TensorBoard event files (tensorboard.h), protobuf encoded by hand.
//
// The messages and field numbers written (tensorboard/compat/proto/event.proto, summary.proto):
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
//                Summary summary = 5; SessionLog session_log = 7; }
//   Summary    { repeated Value value = 1; }
//   Value      { string tag = 1; float simple_value = 2; }
//   SessionLog { SessionStatus status = 1; }   START = 1
// Wire types: 0 varint, 1 fixed 64-bit, 2 length-delimited, 5 fixed 32-bit.
#include "io/tensorboard.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/crc32c.h"

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

// A growing byte buffer that one message is encoded into.
typedef struct {
    uint8_t *b;
    size_t n, cap;
} pb_buf;

static void pb_put(pb_buf *p, const void *src, size_t n) {
    if (p->n + n > p->cap) {
        p->cap = 2 * (p->n + n) + 64;
        uint8_t *grown = realloc(p->b, p->cap);
        TRI_ASSERT(grown);
        p->b = grown;
    }
    memcpy(p->b + p->n, src, n);
    p->n += n;
}

static void pb_varint(pb_buf *p, uint64_t v) {
    uint8_t out[10];
    size_t n = 0;
    for (; v >= 0x80; v >>= 7) out[n++] = (uint8_t)(v | 0x80);
    out[n++] = (uint8_t)v;
    pb_put(p, out, n);
}

static void pb_key(pb_buf *p, int field, int wire) { pb_varint(p, (uint64_t)field << 3 | wire); }

static void pb_le(pb_buf *p, uint64_t v, int bytes) {
    uint8_t out[8];
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
    pb_put(p, out, (size_t)bytes);
}

static void pb_double(pb_buf *p, int field, double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    pb_key(p, field, WIRE_FIXED64);
    pb_le(p, bits, 8);
}

static void pb_float(pb_buf *p, int field, float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    pb_key(p, field, WIRE_FIXED32);
    pb_le(p, bits, 4);
}

static void pb_bytes(pb_buf *p, int field, const void *data, size_t n) {
    pb_key(p, field, WIRE_LEN);
    pb_varint(p, n);
    pb_put(p, data, n);
}

static uint32_t masked_crc(const void *data, size_t n) {
    uint32_t crc = crc32c_update(0, data, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// The first failed write warns once and closes the file; nothing more is written.
static void write_failed(tb_log *tb, int err) {
    LOG_WARN("log.tensorboard: cannot write %s: %s; TensorBoard output stops here for the rest "
             "of this run (metrics.jsonl keeps every value; scripts/plot.py draws it)",
             tb->path, strerror(err));
    fclose(tb->f);
    tb->f = NULL;
}

// Frames one serialized Event as a TFRecord and writes it through to the file, so that a
// TensorBoard watching the directory sees each step as it is logged.
static void write_record(tb_log *tb, const pb_buf *event) {
    if (!tb->f) return;
    pb_buf rec = {0};
    pb_le(&rec, event->n, 8);
    pb_le(&rec, masked_crc(rec.b, 8), 4);
    pb_put(&rec, event->b, event->n);
    pb_le(&rec, masked_crc(event->b, event->n), 4);
    errno = 0;
    if (fwrite(rec.b, 1, rec.n, tb->f) != rec.n || fflush(tb->f) != 0)
        write_failed(tb, errno ? errno : EIO);
    free(rec.b);
}

static double wall_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Event{wall_time, step} with the oneof `what` already encoded in `what` (or empty).
static void write_event(tb_log *tb, int64_t step, const pb_buf *what) {
    pb_buf ev = {0};
    pb_double(&ev, 1, wall_time_now());
    pb_key(&ev, 2, WIRE_VARINT);
    pb_varint(&ev, (uint64_t)step);
    if (what->n) pb_put(&ev, what->b, what->n);
    write_record(tb, &ev);
    free(ev.b);
}

// Appends Value{tag, simple_value} to a Summary's body.
static void summary_add(pb_buf *summary, const char *tag, double value) {
    if (!isfinite(value)) return; // metrics.jsonl writes null: no point to draw
    pb_buf v = {0};
    pb_bytes(&v, 1, tag, strlen(tag));
    pb_float(&v, 2, (float)value);
    pb_bytes(summary, 1, v.b, v.n);
    free(v.b);
}

static void summary_write(tb_log *tb, int64_t step, pb_buf *summary) {
    pb_buf what = {0};
    pb_bytes(&what, 5, summary->b, summary->n);
    write_event(tb, step, &what);
    free(what.b);
    free(summary->b);
}

void tb_write_step(tb_log *tb, const metrics_step *s) {
    if (!tb->f) return;
    pb_buf sum = {0};
    summary_add(&sum, "loss", s->loss);
    summary_add(&sum, "lr", s->lr);
    summary_add(&sum, "grad_norm", s->grad_norm);
    summary_add(&sum, "tokens", (double)s->tokens);
    summary_add(&sum, "step_ms", s->step_ms);
    summary_add(&sum, "tokens_per_s", s->tokens_per_s);
    summary_add(&sum, "mfu", s->mfu);
    if (s->plan_ratio > 0) summary_add(&sum, "plan_ratio", s->plan_ratio);
    summary_add(&sum, "mem_peak_bytes", (double)s->mem_peak_bytes);
    summary_add(&sum, "comm_bytes/tp", (double)s->comm_tp);
    summary_add(&sum, "comm_bytes/pp", (double)s->comm_pp);
    summary_add(&sum, "comm_bytes/dp", (double)s->comm_dp);
    if (s->pipelined) {
        summary_add(&sum, "bubble", s->bubble);
        summary_add(&sum, "bubble_formula", s->bubble_formula);
        summary_add(&sum, "pass_ms/F", s->pass_ms[0]);
        summary_add(&sum, "pass_ms/B", s->pass_ms[1]);
        summary_add(&sum, "pass_ms/W", s->pass_ms[2]);
    }
    summary_write(tb, s->step, &sum);
}

void tb_write_eval(tb_log *tb, int step, const char *name, double val_loss) {
    if (!tb->f) return;
    char tag[256];
    if (name) snprintf(tag, sizeof tag, "val_loss/%s", name);
    else snprintf(tag, sizeof tag, "val_loss");
    pb_buf sum = {0};
    summary_add(&sum, tag, val_loss);
    summary_write(tb, step, &sum);
}

// The newest "events.out.tfevents.<time>..." time in dir, or 0.
static long long newest_event_time(const char *dir) {
    static const char prefix[] = "events.out.tfevents.";
    long long newest = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, sizeof prefix - 1)) continue;
        long long t = strtoll(e->d_name + sizeof prefix - 1, NULL, 10);
        if (t > newest) newest = t;
    }
    closedir(d);
    return newest;
}

tri_status tb_open(tb_log *tb, const char *dir, int first_step) {
    memset(tb, 0, sizeof *tb);
    if (make_dirs(dir) != 0) {
        LOG_ERROR("log.tensorboard: cannot create directory %s: %s", dir, strerror(errno));
        LOG_HINT("set log.tensorboard to a directory this user can write, or null for none");
        return TRI_ERR_CKPT;
    }
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    // A time past every file already there: names sort in the order runs wrote them, also
    // when a resumed run starts within the second of the previous one's file.
    long long t = (long long)time(NULL), newest = newest_event_time(dir);
    if (t <= newest) t = newest + 1;
    char path[4600];
    for (int attempt = 0; attempt < 100 && !tb->f; attempt++, t++) {
        snprintf(path, sizeof path, "%s/events.out.tfevents.%010lld.%s", dir, t, host);
        tb->f = fopen(path, "wbx"); // never over an existing file
        if (!tb->f && errno != EEXIST) break;
    }
    if (!tb->f) {
        LOG_ERROR("log.tensorboard: cannot create an event file in %s: %s", dir, strerror(errno));
        LOG_HINT("set log.tensorboard to a directory this user can write, or null for none");
        return TRI_ERR_CKPT;
    }
    tb->path = xstrdup(path);
    static const char version[] = "brain.Event:2";
    pb_buf what = {0};
    pb_bytes(&what, 3, version, sizeof version - 1);
    write_event(tb, 0, &what);
    what.n = 0;
    pb_buf start = {0}; // SessionLog{status: START}
    pb_key(&start, 1, WIRE_VARINT);
    pb_varint(&start, 1);
    pb_bytes(&what, 7, start.b, start.n);
    write_event(tb, first_step, &what);
    free(start.b);
    free(what.b);
    if (!tb->f) return TRI_ERR_CKPT; // write_failed has said why
    LOG_INFO("TensorBoard events: %s (tensorboard --logdir %s)", tb->path, dir);
    return TRI_OK;
}

void tb_close(tb_log *tb) {
    if (tb->f && fclose(tb->f) != 0)
        LOG_WARN("log.tensorboard: cannot close %s: %s", tb->path, strerror(errno));
    free(tb->path);
    tb->f = NULL;
    tb->path = NULL;
}
