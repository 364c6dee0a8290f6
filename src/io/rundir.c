// rundir.c: probing and locking the directories a run writes (rundir.h).
#include "io/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"

#define RD_PATH 4352 // a directory (at most 4000 bytes, checked by the config) and a name

// ---- who holds a lock ----

// The record a lock file holds: "pid: N\nhost: H\njob: J\nstarted: T\n".
static void holder_record(char *out, size_t n) {
    char host[256] = "?", started[64] = "?";
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(started, sizeof started, "%Y-%m-%d %H:%M:%S %Z", &tm);
    const char *job = env_get(ENV_SLURM_JOB_ID);
    if (!job) job = env_get(ENV_PMIX_NAMESPACE);
    snprintf(out, n, "pid: %d\nhost: %s\njob: %s\nstarted: %s\n", (int)getpid(), host,
             job && *job ? job : "none", started);
}

// The value of "key: value" in a lock record, or "?".
static void record_field(const char *rec, const char *key, char *out, size_t n) {
    snprintf(out, n, "?");
    size_t klen = strlen(key);
    for (const char *p = rec; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, klen) || p[klen] != ':') continue;
        const char *v = p + klen + 1 + (p[klen + 1] == ' ');
        size_t len = strcspn(v, "\n");
        snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), v);
        return;
    }
}

// "pid 1234 on host n07 (job 5678), started 2026-12-01 16:00:00 UTC" from a lock record.
static void describe_holder(const char *rec, char *out, size_t n) {
    if (!*rec) {
        snprintf(out, n, "another run (which has not written its lock file yet)");
        return;
    }
    char pid[32], host[256], job[256], started[64];
    record_field(rec, "pid", pid, sizeof pid);
    record_field(rec, "host", host, sizeof host);
    record_field(rec, "job", job, sizeof job);
    record_field(rec, "started", started, sizeof started);
    char jobs[300] = "";
    if (strcmp(job, "none")) snprintf(jobs, sizeof jobs, " (job %s)", job);
    snprintf(out, n, "pid %s on host %s%s, started %s", pid, host, jobs, started);
}

static void read_record(int fd, char *out, size_t n) {
    ssize_t got = pread(fd, out, n - 1, 0);
    out[got > 0 ? got : 0] = '\0';
}

// ---- creating, locking, probing ----

// mkdir -p of dir; *created gets the topmost directory it made (NULL if it made none).
static int create_dir(const char *dir, char **created) {
    char p[RD_PATH];
    snprintf(p, sizeof p, "%s", dir);
    *created = NULL;
    struct stat st;
    // The first missing component, from the top: everything below it is made here.
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        const char c = *s;
        *s = '\0';
        if (stat(p, &st) != 0 && errno == ENOENT) {
            *created = xstrdup(p);
            *s = c;
            break;
        }
        *s = c;
        if (!c) break;
    }
    if (make_dirs(dir) != 0) return -1;
    if (stat(dir, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

// rmdir of dir and its parents up to `created`, the topmost one this run made (nothing when
// NULL); stops at a directory that is not empty.
static void remove_created(const char *dir, const char *created) {
    if (!created) return;
    char p[RD_PATH];
    snprintf(p, sizeof p, "%s", dir);
    while (rmdir(p) == 0 && strcmp(p, created)) {
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) break;
        *slash = '\0';
    }
}

// Takes the lock of `dir` (key: the config key that names it, for messages) into rd->fd[i].
static tri_status lock_dir(rundir *rd, int i, const char *key, const char *dir) {
    char path[RD_PATH], rec[1024], holder[1024];
    snprintf(path, sizeof path, "%s/%s", dir, RUNDIR_LOCK_FILE);
    // A run that releases removes the file when it created the directory; the lock taken
    // must be on the file still at `path`, else it is taken again.
    for (int attempt = 0; attempt < 10; attempt++) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            LOG_ERROR("%s %s: cannot create the lock file %s: %s", key, dir, path, strerror(errno));
            LOG_HINT("%s must be a directory this run can write", key);
            return TRI_ERR_CKPT;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int e = errno;
            if (e == EWOULDBLOCK) {
                // The holder writes its record just after it takes the lock: wait for it.
                read_record(fd, rec, sizeof rec);
                for (int i = 0; i < 50 && !*rec; i++) {
                    usleep(10000);
                    read_record(fd, rec, sizeof rec);
                }
                describe_holder(rec, holder, sizeof holder);
                close(fd);
                LOG_ERROR("%s %s is in use by %s; two runs must not write one directory", key, dir,
                          holder);
                LOG_HINT("wait for that run to end or stop it, or give this run another %s; "
                         "the lock (%s) is released when that process exits",
                         key, path);
                return TRI_ERR_CONFIG;
            }
            // A file system without flock (some network mounts): run unlocked, say so.
            LOG_WARN("%s %s: cannot lock %s (%s): a second run on this directory would not be "
                     "detected",
                     key, dir, path, strerror(e));
            close(fd);
            return TRI_OK;
        }
        struct stat held, now;
        if (fstat(fd, &held) != 0 || stat(path, &now) != 0 || held.st_ino != now.st_ino ||
            held.st_dev != now.st_dev) {
            close(fd);
            continue;
        }
        // A record left in the file: its run ended without releasing (killed, or its node
        // died); flock released the lock with the process.
        read_record(fd, rec, sizeof rec);
        if (*rec) {
            describe_holder(rec, holder, sizeof holder);
            LOG_WARN("%s %s: taking over the lock of %s, which ended without releasing it "
                     "(killed?)",
                     key, dir, holder);
        }
        holder_record(rec, sizeof rec);
        if (ftruncate(fd, 0) != 0 || pwrite(fd, rec, strlen(rec), 0) != (ssize_t)strlen(rec) ||
            fsync(fd) != 0) {
            LOG_ERROR("%s %s: cannot write the lock file %s: %s", key, dir, path, strerror(errno));
            LOG_HINT("check free space and permissions of %s", key);
            close(fd);
            return TRI_ERR_CKPT;
        }
        rd->fd[i] = fd;
        return TRI_OK;
    }
    LOG_ERROR("%s %s: the lock file %s keeps being replaced by other runs", key, dir, path);
    return TRI_ERR_CONFIG;
}

// Creates, writes, fsyncs, renames and removes a file in `dir`, and fsyncs the directory:
// what a checkpoint and the final model do. `where` says which process probes.
static tri_status probe_dir(const char *key, const char *dir, const char *where) {
    char host[64] = "?", path[RD_PATH], moved[RD_PATH + 16];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    snprintf(path, sizeof path, "%s/.trident.probe.%s.%d", dir, host, (int)getpid());
    snprintf(moved, sizeof moved, "%s.renamed", path);
    static const char block[4096];
    const char *op = "create", *file = path;
    int e = 0, fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) goto fail;
    op = "write";
    ssize_t w = write(fd, block, sizeof block);
    if (w != (ssize_t)sizeof block && w >= 0) errno = ENOSPC;
    if (w != (ssize_t)sizeof block || (op = "fsync", fsync(fd) != 0)) {
        e = errno;
        close(fd);
        unlink(path);
        errno = e;
        goto fail;
    }
    op = "close";
    if (close(fd) != 0 || (op = "rename", rename(path, moved) != 0)) {
        e = errno;
        unlink(path);
        errno = e;
        goto fail;
    }
    op = "remove", file = moved;
    if (unlink(moved) != 0) goto fail;
    op = "fsync the directory", file = dir;
    fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        e = errno;
        if (fd >= 0) close(fd);
        errno = e;
        goto fail;
    }
    close(fd);
    return TRI_OK;
fail:
    LOG_ERROR("%s %s: cannot %s %s%s: %s", key, dir, op, file, where, strerror(errno));
    LOG_HINT("%s must be a directory this run can create, write, sync and rename files in%s; "
             "found now rather than at the first checkpoint or the end of training",
             key, !strcmp(key, "checkpoint.dir") ? ", on a file system every node shares" : "");
    return TRI_ERR_CKPT;
}

// ---- free space ----

static void human_bytes(char *out, size_t n, double b) {
    if (b >= 1073741824.0) snprintf(out, n, "%.1f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(out, n, "%.1f MiB", b / 1048576.0);
    else snprintf(out, n, "%.0f KiB", b / 1024.0);
}

// Complete checkpoints already in checkpoint.dir (they hold space that counts towards
// checkpoint.keep).
static int count_checkpoints(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) n += !strncmp(de->d_name, "step_", 5) && strlen(de->d_name) == 13;
    closedir(d);
    return n;
}

// Warns when the file system of a directory has less free space than the run will write
// there: checkpoints (checkpoint.keep of them and the one being written, less those that
// exist) and the final model, added up when both directories share a file system.
static void check_space(const run_config *cfg, uint64_t ckpt_bytes, uint64_t model_bytes) {
    const char *out = cfg->run.out_dir, *ck = cfg->checkpoint.dir;
    struct statvfs so, sc;
    struct stat dev_out, dev_ck;
    int have_out = statvfs(out, &so) == 0 && stat(out, &dev_out) == 0;
    int have_ck = ck && statvfs(ck, &sc) == 0 && stat(ck, &dev_ck) == 0;
    double need_ck = 0.0;
    int copies = 0;
    if (have_ck) {
        const int every = cfg->checkpoint.every, steps = cfg->train.steps;
        const int writes = every > 0 ? steps / every + 1 : 1;
        copies = cfg->checkpoint.keep + 1 - count_checkpoints(ck);
        if (copies > writes) copies = writes;
        if (copies < 1) copies = 1;
        need_ck = (double)copies * (double)ckpt_bytes;
    }
    const int shared = have_out && have_ck && dev_out.st_dev == dev_ck.st_dev;
    for (int which = 0; which < 2; which++) {
        if (which == 0 ? !have_out || shared : !have_ck) continue;
        const struct statvfs *vs = which == 0 ? &so : &sc;
        const double free_b = (double)vs->f_bavail * (double)vs->f_frsize;
        const double need = which == 0 ? (double)model_bytes
                                       : need_ck + (shared ? (double)model_bytes : 0.0);
        if (free_b >= need) continue;
        char f[32], nb[32], each[32], mb[32], what[256] = "";
        human_bytes(f, sizeof f, free_b);
        human_bytes(nb, sizeof nb, need);
        human_bytes(each, sizeof each, (double)ckpt_bytes);
        human_bytes(mb, sizeof mb, (double)model_bytes);
        if (which == 1)
            snprintf(what, sizeof what,
                     "%d checkpoint%s of %s (checkpoint.keep %d and the one "
                     "being written)%s%s",
                     copies, copies == 1 ? "" : "s", each, cfg->checkpoint.keep,
                     shared ? " and model.bin, " : "", shared ? mb : "");
        else snprintf(what, sizeof what, "model.bin");
        LOG_WARN("%s %s: its file system has %s free, and this run writes %s there: %s",
                 which ? "checkpoint.dir" : "run.out_dir", which ? ck : out, f, nb, what);
        LOG_HINT("free space%s; a disk that fills up ends the run with exit 4 at a checkpoint, "
                 "the previous one kept",
                 which ? ", lower checkpoint.keep or move checkpoint.dir" : " or move run.out_dir");
    }
}

// ---- the run's directories ----

static tri_status agree(comm *cm, tri_status rc) {
    double v = (double)rc;
    tri_status crc = comm_all_reduce(cm, COMM_GROUP_WORLD, &v, 1, DTYPE_FP64, COMM_REDUCE_MAX);
    return crc != TRI_OK ? crc : (tri_status)(int)v;
}

static tri_status open_rank0(rundir *rd, const run_config *cfg, uint64_t ckpt_bytes,
                             uint64_t model_bytes) {
    const char *keys[2] = {"run.out_dir", "checkpoint.dir"};
    const char *dirs[2] = {cfg->run.out_dir, cfg->checkpoint.dir};
    const int n = dirs[1] ? 2 : 1;
    struct stat st[2];
    char *created[2] = {NULL, NULL};
    for (int i = 0; i < n; i++) {
        if (create_dir(dirs[i], &created[i]) == 0 && stat(dirs[i], &st[i]) == 0) continue;
        LOG_ERROR("%s %s: cannot create the directory: %s", keys[i], dirs[i], strerror(errno));
        LOG_HINT("%s must be a directory this run can create and write", keys[i]);
        if (i == 1) remove_created(dirs[0], created[0]);
        free(created[0]);
        free(created[1]);
        return TRI_ERR_CKPT;
    }
    // One directory named twice is locked and probed once.
    const int same = n == 2 && st[0].st_dev == st[1].st_dev && st[0].st_ino == st[1].st_ino;
    if (same) free(created[1]);
    tri_status rc = TRI_OK;
    for (int i = 0; i < (same ? 1 : n); i++) {
        const char *key = same ? "run.out_dir (also checkpoint.dir)" : keys[i];
        rd->dir[i] = xstrdup(dirs[i]);
        rd->created[i] = created[i];
        rd->fd[i] = -1;
        rd->n = i + 1;
        if (rc == TRI_OK) rc = lock_dir(rd, i, key, dirs[i]);
        if (rc == TRI_OK) rc = probe_dir(keys[i], dirs[i], "");
    }
    if (rc == TRI_OK) check_space(cfg, ckpt_bytes, model_bytes);
    return rc;
}

tri_status rundir_open(rundir *rd, const run_config *cfg, comm *cm, int rank, int local_rank,
                       const rundir_plan *plan) {
    memset(rd, 0, sizeof *rd);
    double ckpt_bytes = (double)plan->checkpoint_rank_bytes; // exact below 2^53 bytes
    TRI_CHECK(comm_all_reduce(cm, COMM_GROUP_WORLD, &ckpt_bytes, 1, DTYPE_FP64, COMM_REDUCE_SUM));
    tri_status rc = TRI_OK;
    if (rank == 0) rc = open_rank0(rd, cfg, (uint64_t)ckpt_bytes, plan->model_bytes);
    rc = agree(cm, rc);
    // Every rank writes its own file of each checkpoint: the first process of every other
    // node checks that checkpoint.dir is there and writable (a node-local path is not).
    if (rc == TRI_OK && cfg->checkpoint.dir) {
        tri_status mine = TRI_OK;
        if (rank != 0 && local_rank == 0) {
            char host[64] = "?", where[128];
            gethostname(host, sizeof host);
            host[sizeof host - 1] = '\0';
            snprintf(where, sizeof where, " on host %s (rank %d)", host, rank);
            mine = probe_dir("checkpoint.dir", cfg->checkpoint.dir, where);
        }
        rc = agree(cm, mine);
    }
    // The launcher ends the job at the first failing exit: the other ranks give rank 0 (or
    // the rank that found the problem) time to report it first.
    if (rc != TRI_OK && rank != 0) sleep(2);
    return rc;
}

void rundir_close(rundir *rd) {
    // The inner directory first (checkpoint.dir may lie inside run.out_dir).
    for (int i = rd->n - 1; i >= 0; i--) {
        char path[RD_PATH];
        snprintf(path, sizeof path, "%s/%s", rd->dir[i], RUNDIR_LOCK_FILE);
        if (rd->fd[i] >= 0) {
            // Still holding the lock: a directory this run created and left empty goes (a
            // run that failed at start leaves nothing); else the record is cleared, the
            // mark of a clean release.
            int only_lock = 1;
            DIR *d = rd->created[i] ? opendir(rd->dir[i]) : NULL;
            struct dirent *de;
            while (d && (de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
                    strcmp(de->d_name, RUNDIR_LOCK_FILE))
                    only_lock = 0;
            if (d) closedir(d);
            if (rd->created[i] && only_lock && unlink(path) == 0)
                remove_created(rd->dir[i], rd->created[i]);
            else if (ftruncate(rd->fd[i], 0) == 0) {
                fsync(rd->fd[i]);
            }
            close(rd->fd[i]);
        }
        free(rd->dir[i]);
        free(rd->created[i]);
    }
    memset(rd, 0, sizeof *rd);
}
