/* SPDX-License-Identifier: MIT */
/*
 * kv_tier_disk: the L2 tier, one file per blob in one directory (kv_tier.h has the contract).
 *
 * Files: "<16 hex digits of key>.kvb". A put writes "<hex>.kvb.tmp" and rename()s it over the
 * real name, so a crash leaves at most a temp file (deleted at the next open), never a
 * half-written blob under a real name. There is no fsync: after a power loss a file may hold
 * garbage, which the block codec's checksum catches (the engine then drops it), and blobs are a
 * cache that can always be recomputed, so paying a flush per block buys nothing.
 *
 * Reads: one read() per file into a page-aligned buffer from the caller's free list (kv_blobs.h),
 * no staging copy. A batch (get_many) opens every file and hints the kernel to read them all
 * ahead (POSIX_FADV_WILLNEED) before reading the first, so the device streams while the first
 * blobs are copied out. With flag kv-disk-direct the files are read with O_DIRECT instead (the
 * buffers' alignment and capacity allow it), bypassing the page cache; a file system without
 * O_DIRECT falls back to buffered reads. Writes stay buffered: blobs are written once and often
 * read back soon, from the page cache, which is the point of a warm L2.
 *
 * MANIFEST holds "verity-kv-disk\nversion 1\nidentity <16 hex>\n". Blobs of another model or
 * settings must never be served, so a directory whose MANIFEST does not match exactly loses its
 * *.kvb and *.kvb.tmp files (no others: the directory may hold files that are not ours).
 *
 * Index: a kv_tmap from key to entry plus a doubly linked LRU list (oldest first), so put, get,
 * drop and eviction are O(1). At open the list is ordered by mtime; a get refreshes the file's
 * mtime, so the order survives a restart. bytes is the sum of the indexed files' sizes, kept at
 * or below max_bytes after every operation.
 *
 * Threading: none of its own; one thread at a time (kv_tier.h).
 */
#include "base/err.h"
#include "base/file.h"
#include "base/flags.h"
#include "base/list.h"
#include "base/log.h"
#include "base/mem.h"
#include "kv/kv_tier.h"
#include "kv/kv_tier_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DISK_MAGIC    "verity-kv-disk\n"
#define DISK_VERSION  1u
#define DISK_PATH_MAX 4096

typedef struct disk_ent {
    kv_tmap_node node; /* key */
    int64_t size;
    int64_t mtime_ns; /* open only: the LRU order */
    list_link lru;
} disk_ent;

typedef struct disk_tier {
    char *dir;
    int64_t max_bytes;
    uint64_t identity;
    kv_tmap idx;
    list lru; /* of disk_ent, least recently used first: evicted first */
    int64_t bytes, blocks, evictions;
    bool direct; /* reads with O_DIRECT (flag kv-disk-direct) */
} disk_tier;

static void disk_path(const disk_tier *d, uint64_t key, bool tmp, char *buf) {
    snprintf(buf, DISK_PATH_MAX, "%s/%016" PRIx64 ".kvb%s", d->dir, key, tmp ? ".tmp" : "");
}

/* The least recently used file, or NULL. */
static disk_ent *lru_oldest(const disk_tier *d) {
    return LIST_ENTRY(d->lru.first, disk_ent, lru);
}

/* Forgets e (the file is the caller's business). */
static void disk_forget(disk_tier *d, disk_ent *e) {
    list_unlink(&d->lru, &e->lru);
    kv_tmap_remove(&d->idx, &e->node);
    d->bytes -= e->size;
    d->blocks--;
    free(e);
}

/* Evicts the oldest files until bytes <= max_bytes, never keep itself. */
static void disk_evict(disk_tier *d, const disk_ent *keep) {
    char path[DISK_PATH_MAX];
    disk_ent *e;
    while (d->bytes > d->max_bytes && (e = lru_oldest(d)) && e != keep) {
        disk_path(d, e->node.key, false, path);
        if (unlink(path) != 0 && errno != ENOENT)
            log_debug("kv disk tier: cannot remove %s: %s", path, strerror(errno));
        disk_forget(d, e);
        d->evictions++;
    }
}

/* ---- operations ---- */

static int disk_write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int disk_put(void *impl, uint64_t key, const void *data, size_t n) {
    disk_tier *d = impl;
    if (n > (uint64_t)d->max_bytes)
        return err_set(ERR_TOOLARGE,
                       "kv disk tier %s: blob %016" PRIx64 " of %zu bytes exceeds "
                       "the tier's bound of %lld",
                       d->dir, key, n, (long long)d->max_bytes);
    char tmp[DISK_PATH_MAX], path[DISK_PATH_MAX];
    disk_path(d, key, true, tmp);
    disk_path(d, key, false, path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return err_set(ERR_IO, "kv disk tier: cannot create %s: %s", tmp, strerror(errno));
    int bad = disk_write_all(fd, data, n);
    int saved = errno;
    if (close(fd) != 0 && !bad) {
        bad = -1;
        saved = errno;
    }
    if (bad || rename(tmp, path) != 0) {
        if (!bad)
            saved = errno;
        unlink(tmp);
        return err_set(ERR_IO, "kv disk tier: cannot write %s: %s", path, strerror(saved));
    }
    kv_tmap_node *nd = kv_tmap_find(&d->idx, key);
    disk_ent *e = nd ? KV_TMAP_ENTRY(nd, disk_ent, node) : calloc(1, sizeof *e);
    if (!e) { /* the file is there but cannot be indexed: remove it, so the bound holds */
        unlink(path);
        return err_set(ERR_NOMEM, "kv disk tier: out of memory indexing %s", path);
    }
    if (nd) {
        list_unlink(&d->lru, &e->lru);
        d->bytes -= e->size;
    } else {
        e->node.key = key;
        kv_tmap_insert(&d->idx, &e->node);
        d->blocks++;
    }
    e->size = (int64_t)n;
    d->bytes += e->size;
    list_push_last(&d->lru, &e->lru);
    disk_evict(d, e);
    return 0;
}

/* Opens key's file for reading: 0 with *fd and *ent, ERR_NOTFOUND (not indexed, or removed
 * behind our back: then forgotten), ERR_IO. With direct set, O_DIRECT where the file system
 * allows it (*direct says whether it was). */
static int disk_open_blob(disk_tier *d, uint64_t key, int *fd, disk_ent **ent, bool *direct) {
    kv_tmap_node *nd = kv_tmap_find(&d->idx, key);
    if (!nd)
        return ERR_NOTFOUND;
    *ent = KV_TMAP_ENTRY(nd, disk_ent, node);
    char path[DISK_PATH_MAX];
    disk_path(d, key, false, path);
    *direct = d->direct;
    *fd = open(path, O_RDONLY | O_CLOEXEC | (d->direct ? O_DIRECT : 0));
    if (*fd < 0 && d->direct && errno == EINVAL) { /* a file system without O_DIRECT (tmpfs) */
        *direct = false;
        *fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (*fd < 0 && errno == ENOENT) { /* removed behind our back */
        disk_forget(d, *ent);
        return ERR_NOTFOUND;
    }
    if (*fd < 0)
        return err_set(ERR_IO, "kv disk tier: cannot open %s: %s", path, strerror(errno));
    return 0;
}

/* Reads the whole file open on fd (entry e, opened by disk_open_blob) into a buffer of pool, with
 * one read() for the whole file (a loop only on a short read), and closes fd. O_DIRECT reads ask
 * for the size rounded up to the alignment (the buffer's capacity covers it) and get the file's
 * bytes. */
static int disk_read_blob(disk_tier *d, disk_ent *e, int fd, bool direct, kv_blobs *pool,
                          void **data, size_t *n) {
    struct stat sb;
    int rc = 0;
    char *buf = NULL;
    size_t got = 0, size = 0;
    if (fstat(fd, &sb) != 0 || sb.st_size > d->max_bytes) {
        char path[DISK_PATH_MAX];
        disk_path(d, e->node.key, false, path);
        rc = err_set(ERR_IO, "kv disk tier: %s: cannot stat, or larger than the tier", path);
        goto done;
    }
    size = (size_t)sb.st_size;
    buf = kv_blobs_alloc(pool, size);
    if (!buf) {
        rc = err_set(ERR_NOMEM, "kv disk tier: key %016" PRIx64 ": out of memory (%zu bytes)",
                     e->node.key, size);
        goto done;
    }
    while (got < size) {
        size_t want = size - got;
        if (direct) /* got stays aligned: a direct read returns whole blocks until the end */
            want = (want + KV_BLOBS_ALIGN - 1) / KV_BLOBS_ALIGN * KV_BLOBS_ALIGN;
        ssize_t r = read(fd, buf + got, want);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || (direct && got + (size_t)r < size && (size_t)r % KV_BLOBS_ALIGN != 0)) {
            char path[DISK_PATH_MAX];
            disk_path(d, e->node.key, false, path);
            rc = err_set(ERR_IO, "kv disk tier: short read of %s at byte %zu of %zu%s%s", path, got,
                         size, r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
            goto done;
        }
        got += (size_t)r;
    }
    (void)futimens(fd, NULL); /* the LRU order survives a restart */
    d->bytes += (int64_t)size - e->size;
    e->size = (int64_t)size;
    list_unlink(&d->lru, &e->lru);
    list_push_last(&d->lru, &e->lru);
    *data = buf;
    *n = size;
    buf = NULL;
done:
    kv_blobs_free(pool, buf, size);
    close(fd);
    return rc;
}

static int disk_get(void *impl, uint64_t key, kv_blobs *pool, void **data, size_t *n) {
    disk_tier *d = impl;
    *data = NULL;
    *n = 0;
    int fd;
    disk_ent *e;
    bool direct;
    int rc = disk_open_blob(d, key, &fd, &e, &direct);
    return rc ? rc : disk_read_blob(d, e, fd, direct, pool, data, n);
}

/* Opens every file first and, for buffered reads, tells the kernel to read them all ahead
 * (POSIX_FADV_WILLNEED starts the reads without waiting), then reads them in order: the device
 * works on the later files while the first ones are copied out. */
static void disk_get_many(void *impl, kv_blobs *pool, const uint64_t *keys, int n,
                          kv_tier_got *got) {
    disk_tier *d = impl;
    enum { DISK_BATCH = 64 };
    for (int base = 0; base < n; base += DISK_BATCH) {
        int m = n - base < DISK_BATCH ? n - base : DISK_BATCH;
        int fd[DISK_BATCH];
        disk_ent *e[DISK_BATCH];
        bool direct[DISK_BATCH];
        for (int i = 0; i < m; i++) {
            kv_tier_got *g = &got[base + i];
            *g = (kv_tier_got){.data = NULL, .n = 0, .rc = 0};
            g->rc = disk_open_blob(d, keys[base + i], &fd[i], &e[i], &direct[i]);
            if (!g->rc && !direct[i])
                (void)posix_fadvise(fd[i], 0, 0, POSIX_FADV_WILLNEED);
        }
        for (int i = 0; i < m; i++) {
            kv_tier_got *g = &got[base + i];
            if (!g->rc)
                g->rc = disk_read_blob(d, e[i], fd[i], direct[i], pool, &g->data, &g->n);
        }
    }
}

static int disk_drop(void *impl, uint64_t key) {
    disk_tier *d = impl;
    kv_tmap_node *nd = kv_tmap_find(&d->idx, key);
    if (!nd)
        return 0;
    char path[DISK_PATH_MAX];
    disk_path(d, key, false, path);
    disk_forget(d, KV_TMAP_ENTRY(nd, disk_ent, node));
    if (unlink(path) != 0 && errno != ENOENT)
        return err_set(ERR_IO, "kv disk tier: cannot remove %s: %s", path, strerror(errno));
    return 0;
}

static void disk_usage(void *impl, kv_tier_usage *u) {
    disk_tier *d = impl;
    u->blocks = d->blocks;
    u->bytes = d->bytes;
    u->evictions = d->evictions;
}

static void disk_destroy(void *impl) {
    disk_tier *d = impl;
    if (!d)
        return;
    disk_ent *e;
    while ((e = lru_oldest(d)))
        disk_forget(d, e);
    kv_tmap_deinit(&d->idx);
    free(d->dir);
    free(d);
}

static const kv_tier_ops disk_ops = {
    .name = "disk",
    .put = disk_put,
    .get = disk_get,
    .get_many = disk_get_many,
    .drop = disk_drop,
    .usage = disk_usage,
    .destroy = disk_destroy,
};

/* ---- open: directory, manifest, index ---- */

static bool name_ends(const char *name, const char *suffix) {
    size_t n = strlen(name), s = strlen(suffix);
    return n >= s && memcmp(name + n - s, suffix, s) == 0;
}

/* A blob's name "<16 lowercase hex>.kvb"; its key in *key. */
static bool name_parse(const char *name, uint64_t *key) {
    if (strlen(name) != 20 || strcmp(name + 16, ".kvb") != 0)
        return false;
    uint64_t k = 0;
    for (int i = 0; i < 16; i++) {
        char c = name[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return false;
        k = k << 4 | (uint64_t)v;
    }
    *key = k;
    return true;
}

/* Creates dir and its missing parents. 0 or ERR_IO. */
static int disk_mkdirs(const char *dir) {
    char p[DISK_PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return err_set(ERR_IO, "kv disk tier: cannot create directory %s: %s", p,
                           strerror(errno));
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return err_set(ERR_IO, "kv disk tier: cannot create directory %s: %s", p, strerror(errno));
    return 0;
}

/* Checks MANIFEST; 0 if it names this identity, else 1 with the reason in why. */
static int disk_manifest_check(const disk_tier *d, char *why, size_t why_n) {
    char path[DISK_PATH_MAX];
    snprintf(path, sizeof path, "%s/MANIFEST", d->dir);
    char *s = NULL;
    size_t len = 0;
    int rc = file_read_all(path, 4096, &s, &len);
    if (rc == ERR_NOTFOUND) {
        snprintf(why, why_n, "no MANIFEST");
        return 1;
    }
    if (rc) {
        snprintf(why, why_n, "MANIFEST unreadable (%s)", err_detail());
        return 1;
    }
    unsigned version = 0;
    uint64_t id = 0;
    int used = -1;
    size_t ml = strlen(DISK_MAGIC);
    if (len < ml || memcmp(s, DISK_MAGIC, ml) != 0 ||
        sscanf(s + ml, "version %u\nidentity %16" SCNx64 "\n%n", &version, &id, &used) != 2 ||
        used < 0 || ml + (size_t)used != len)
        snprintf(why, why_n, "MANIFEST corrupt");
    else if (version != DISK_VERSION)
        snprintf(why, why_n, "MANIFEST has format version %u, this server writes %u", version,
                 DISK_VERSION);
    else if (id != d->identity)
        snprintf(why, why_n, "MANIFEST names identity %016" PRIx64 ", this server %016" PRIx64, id,
                 d->identity);
    else
        why[0] = 0;
    free(s);
    return why[0] ? 1 : 0;
}

/* Writes a fresh MANIFEST (temp + rename). 0 or ERR_IO. */
static int disk_manifest_write(const disk_tier *d) {
    char tmp[DISK_PATH_MAX], path[DISK_PATH_MAX], body[128];
    snprintf(tmp, sizeof tmp, "%s/MANIFEST.tmp", d->dir);
    snprintf(path, sizeof path, "%s/MANIFEST", d->dir);
    int n = snprintf(body, sizeof body, DISK_MAGIC "version %u\nidentity %016" PRIx64 "\n",
                     DISK_VERSION, d->identity);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return err_set(ERR_IO, "kv disk tier: cannot create %s: %s", tmp, strerror(errno));
    int bad = disk_write_all(fd, body, (size_t)n);
    if (close(fd) != 0 || bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return err_set(ERR_IO, "kv disk tier: cannot write %s: %s", path, strerror(e));
    }
    return 0;
}

/* Deletes every *.kvb and *.kvb.tmp file in the directory; their number in *removed. */
static int disk_clear(const disk_tier *d, int *removed) {
    *removed = 0;
    DIR *dh = opendir(d->dir);
    if (!dh)
        return err_set(ERR_IO, "kv disk tier: cannot list %s: %s", d->dir, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(dh))) {
        if (!name_ends(de->d_name, ".kvb") && !name_ends(de->d_name, ".kvb.tmp"))
            continue;
        if (unlinkat(dirfd(dh), de->d_name, 0) == 0)
            (*removed)++;
        else if (errno != ENOENT && !rc)
            rc = err_set(ERR_IO, "kv disk tier: cannot remove %s/%s: %s", d->dir, de->d_name,
                         strerror(errno));
    }
    closedir(dh);
    return rc;
}

static int ent_cmp_mtime(const void *a, const void *b) {
    const disk_ent *x = *(disk_ent *const *)a, *y = *(disk_ent *const *)b;
    if (x->mtime_ns != y->mtime_ns)
        return x->mtime_ns < y->mtime_ns ? -1 : 1;
    return x->node.key < y->node.key ? -1 : x->node.key > y->node.key;
}

/* Indexes a trusted directory's blobs, oldest mtime first, and removes leftover temp files. */
static int disk_index(disk_tier *d) {
    DIR *dh = opendir(d->dir);
    if (!dh)
        return err_set(ERR_IO, "kv disk tier: cannot list %s: %s", d->dir, strerror(errno));
    disk_ent **v = NULL;
    size_t nv = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(dh))) {
        uint64_t key;
        struct stat sb;
        if (name_ends(de->d_name, ".kvb.tmp")) {
            unlinkat(dirfd(dh), de->d_name, 0);
            continue;
        }
        if (!name_parse(de->d_name, &key) || fstatat(dirfd(dh), de->d_name, &sb, 0) != 0 ||
            !S_ISREG(sb.st_mode))
            continue;
        if (mem_grow((void **)&v, &cap, nv + 1, sizeof *v)) {
            rc = err_set(ERR_NOMEM, "kv disk tier %s: out of memory indexing", d->dir);
            break;
        }
        disk_ent *e = calloc(1, sizeof *e);
        if (!e) {
            rc = err_set(ERR_NOMEM, "kv disk tier %s: out of memory indexing", d->dir);
            break;
        }
        e->node.key = key;
        e->size = (int64_t)sb.st_size;
        e->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
        v[nv++] = e;
    }
    closedir(dh);
    if (nv)
        qsort(v, nv, sizeof *v, ent_cmp_mtime);
    for (size_t i = 0; i < nv; i++) {
        kv_tmap_insert(&d->idx, &v[i]->node);
        list_push_last(&d->lru, &v[i]->lru);
        d->bytes += v[i]->size;
        d->blocks++;
    }
    free(v);
    disk_evict(d, NULL);
    d->evictions = 0; /* trimming to a new bound at open is not an eviction under load */
    return rc;
}

int kv_tier_disk_open(const char *dir, int64_t max_bytes, uint64_t identity,
                      const kv_tier_ops **ops, void **impl) {
    *ops = NULL;
    *impl = NULL;
    if (!dir || !dir[0] || max_bytes <= 0 || strlen(dir) > DISK_PATH_MAX - 64)
        return err_set(ERR_INVAL, "kv disk tier: bad directory '%s' or bound %lld",
                       dir ? dir : "(null)", (long long)max_bytes);
    int rc = disk_mkdirs(dir);
    if (rc)
        return rc;
    disk_tier *d = calloc(1, sizeof *d);
    if (!d || kv_tmap_init(&d->idx) || !(d->dir = strdup(dir))) {
        if (d)
            kv_tmap_deinit(&d->idx);
        free(d);
        return err_set(ERR_NOMEM, "kv disk tier %s: out of memory", dir);
    }
    d->max_bytes = max_bytes;
    d->identity = identity;
    d->direct = flags_int(FLAG_KV_DISK_DIRECT) != 0;
    char why[1200];
    if (disk_manifest_check(d, why, sizeof why) == 0) {
        rc = disk_index(d);
    } else {
        int removed = 0;
        rc = disk_clear(d, &removed);
        if (!rc)
            rc = disk_manifest_write(d);
        if (!rc && (removed > 0 || strcmp(why, "no MANIFEST") != 0))
            log_warn("kv disk tier %s: not trusted (%s): cleared %d blob files", dir, why, removed);
        else if (!rc)
            log_info("kv disk tier %s: initialised (%s)", dir, why);
    }
    if (rc) {
        disk_destroy(d);
        return rc;
    }
    *ops = &disk_ops;
    *impl = d;
    return 0;
}
