/* SPDX-License-Identifier: MIT */
/*
 * gguf_read: the validating GGUF reader. See gguf.h for the contract.
 *
 * gguf_open walks the whole header once with a bounds-checked cursor (gcur): every read first
 * checks that the bytes exist, so a truncated or lying file produces an error naming the field and
 * its offset instead of an out-of-bounds read. The walk records where each key/value and tensor
 * info lives; arrays of variable-size elements (strings, nested arrays) get an index of element
 * offsets so accessors are O(1) and never re-parse. After open, accessors trust the recorded
 * offsets: they were all validated.
 *
 * Allocation sizes are bounded by the file: an array of n strings needs at least 8n bytes of file,
 * which is checked before the index of n offsets is allocated.
 */
#include "gguf/gguf.h"
#include "base/err.h"
#include "base/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC    0x46554747u /* "GGUF" little-endian */
#define GGUF_MAX_NEST 16

typedef struct gguf_kv {
    gguf_str key;
    int type;
    uint64_t val_off; /* file offset of the value (after the type) */
} gguf_kv;

typedef struct gguf_arr_index {
    uint64_t off;        /* file offset of the array header (element type) */
    uint64_t *elem_offs; /* file offset of each element's start */
} gguf_arr_index;

struct gguf {
    const unsigned char *base;
    uint64_t size;
    bool mapped;
    char *path;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_off;
    int64_t n_kv;
    gguf_kv *kvs;
    int64_t n_tensors;
    gguf_tensor *tensors;
    gguf_arr_index *arrs; /* sorted by off (the walk visits arrays in file order) */
    size_t n_arrs, cap_arrs;
};

const char *gguf_vtype_name(int vtype) {
    static const char *names[GGUF_VT_COUNT] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                               "int32",  "float32", "bool",   "string", "array",
                                               "uint64", "int64",   "float64"};
    return vtype >= 0 && vtype < GGUF_VT_COUNT ? names[vtype] : "?";
}

int gguf_vtype_size(int vt) {
    switch (vt) {
    case GGUF_VT_UINT8:
    case GGUF_VT_INT8:
    case GGUF_VT_BOOL:
        return 1;
    case GGUF_VT_UINT16:
    case GGUF_VT_INT16:
        return 2;
    case GGUF_VT_UINT32:
    case GGUF_VT_INT32:
    case GGUF_VT_FLOAT32:
        return 4;
    case GGUF_VT_UINT64:
    case GGUF_VT_INT64:
    case GGUF_VT_FLOAT64:
        return 8;
    default:
        return 0; /* variable size */
    }
}

/* ---- bounds-checked cursor ---- */

typedef struct gcur {
    gguf *g;
    uint64_t off;
} gcur;

static int gc_fail(gcur *c, uint64_t at, const char *field, const char *problem) {
    return err_set(ERR_FORMAT, "%s: %s at byte %llu: %s", c->g->path, field, (unsigned long long)at,
                   problem);
}

static int gc_need(gcur *c, uint64_t n, const char *field) {
    if (n > c->g->size || c->off > c->g->size - n)
        return gc_fail(c, c->off, field, "truncated (file ends first)");
    return 0;
}

static uint64_t gc_rd_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Reads an n-byte little-endian unsigned integer. */
static int gc_le(gcur *c, int n, const char *field, uint64_t *out) {
    int rc = gc_need(c, (uint64_t)n, field);
    if (rc)
        return rc;
    *out = gc_rd_le(c->g->base + c->off, n);
    c->off += (uint64_t)n;
    return 0;
}

static int gc_u32(gcur *c, const char *field, uint32_t *out) {
    uint64_t v = 0;
    int rc = gc_le(c, 4, field, &v);
    *out = (uint32_t)v;
    return rc;
}

static int gc_u64(gcur *c, const char *field, uint64_t *out) {
    return gc_le(c, 8, field, out);
}

static int gc_str(gcur *c, const char *field, gguf_str *out) {
    uint64_t at = c->off;
    uint64_t len;
    int rc = gc_u64(c, field, &len);
    if (rc)
        return rc;
    if (len > c->g->size - c->off)
        return gc_fail(c, at, field, "string length runs past end of file");
    out->s = (const char *)c->g->base + c->off;
    out->len = len;
    c->off += len;
    return 0;
}

static int gguf_arrs_push(gguf *g, uint64_t off, uint64_t *elem_offs) {
    if (mem_grow((void **)&g->arrs, &g->cap_arrs, g->n_arrs + 1, sizeof *g->arrs))
        return err_set(ERR_NOMEM, "%s: out of memory indexing arrays", g->path);
    g->arrs[g->n_arrs].off = off;
    g->arrs[g->n_arrs].elem_offs = elem_offs;
    g->n_arrs++;
    return 0;
}

/* Validates a value of type vt at the cursor and advances past it. */
static int gc_value(gcur *c, int vt, const char *field, int depth);

static int gc_array(gcur *c, const char *field, int depth) {
    uint64_t at = c->off;
    if (depth > GGUF_MAX_NEST)
        return gc_fail(c, at, field, "arrays nested too deeply");
    uint32_t et;
    uint64_t n;
    int rc = gc_u32(c, field, &et);
    if (rc)
        return rc;
    if (et >= GGUF_VT_COUNT)
        return gc_fail(c, at, field, "unknown array element type");
    if ((rc = gc_u64(c, field, &n)))
        return rc;
    int64_t es = gguf_vtype_size((int)et);
    uint64_t remaining = c->g->size - c->off;
    if (es) {
        if (n > remaining / (uint64_t)es)
            return gc_fail(c, at, field, "array length runs past end of file");
        if (et == GGUF_VT_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (c->g->base[c->off + i] > 1)
                    return gc_fail(c, c->off + i, field, "bool array element is not 0 or 1");
        }
        c->off += n * (uint64_t)es;
        return 0;
    }
    /* strings need >= 8 bytes each, arrays >= 12 */
    uint64_t min = et == GGUF_VT_STRING ? 8 : 12;
    if (n > remaining / min)
        return gc_fail(c, at, field, "array length runs past end of file");
    uint64_t *offs = malloc((n ? n : 1) * sizeof *offs);
    if (!offs)
        return err_set(ERR_NOMEM, "%s: out of memory indexing array %s", c->g->path, field);
    if ((rc = gguf_arrs_push(c->g, at, offs))) {
        free(offs);
        return rc;
    }
    for (uint64_t i = 0; i < n; i++) {
        offs[i] = c->off;
        if ((rc = gc_value(c, (int)et, field, depth + 1)))
            return rc;
    }
    return 0;
}

static int gc_value(gcur *c, int vt, const char *field, int depth) {
    int64_t es = gguf_vtype_size(vt);
    if (es) {
        int rc = gc_need(c, (uint64_t)es, field);
        if (rc)
            return rc;
        if (vt == GGUF_VT_BOOL && c->g->base[c->off] > 1)
            return gc_fail(c, c->off, field, "bool value is not 0 or 1");
        c->off += (uint64_t)es;
        return 0;
    }
    if (vt == GGUF_VT_STRING) {
        gguf_str s;
        return gc_str(c, field, &s);
    }
    if (vt == GGUF_VT_ARRAY)
        return gc_array(c, field, depth);
    return gc_fail(c, c->off, field, "unknown value type");
}

static const uint64_t *gguf_arr_offsets(const gguf *g, uint64_t off) {
    size_t lo = 0, hi = g->n_arrs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g->arrs[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < g->n_arrs && g->arrs[lo].off == off)
        return g->arrs[lo].elem_offs;
    return NULL;
}

/* Field names for messages: "metadata key 'x'" in a small static-per-call buffer. */
static const char *gguf_field(char *buf, size_t n, const char *what, gguf_str name) {
    int l = name.len > 200 ? 200 : (int)name.len;
    snprintf(buf, n, "%s '%.*s'", what, l, name.s);
    return buf;
}

static int gguf_parse(gguf *g) {
    gcur c = {.g = g, .off = 0};
    uint32_t magic;
    int rc = gc_u32(&c, "magic", &magic);
    if (rc)
        return rc;
    if (magic != GGUF_MAGIC)
        return gc_fail(&c, 0, "magic", "not a GGUF file (expected \"GGUF\")");
    if ((rc = gc_u32(&c, "version", &g->version)))
        return rc;
    if (g->version == 1)
        return err_set(ERR_UNSUPPORTED, "%s: version at byte 4: GGUF version 1 is not supported",
                       g->path);
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xFFFF) == 0 && (g->version >> 16) != 0)
            return err_set(ERR_UNSUPPORTED,
                           "%s: version at byte 4: big-endian GGUF files are not supported",
                           g->path);
        return err_set(ERR_UNSUPPORTED, "%s: version at byte 4: unsupported GGUF version %u",
                       g->path, g->version);
    }
    uint64_t n_tensors, n_kv;
    if ((rc = gc_u64(&c, "tensor count", &n_tensors)) || (rc = gc_u64(&c, "metadata count", &n_kv)))
        return rc;
    /* each kv needs >= 8+4+1 bytes, each tensor info >= 8+4+8+4+8 */
    if (n_kv > (g->size - c.off) / 13)
        return gc_fail(&c, 16, "metadata count", "more entries than the file can hold");
    if (n_tensors > (g->size - c.off) / 32)
        return gc_fail(&c, 8, "tensor count", "more tensors than the file can hold");
    g->n_kv = (int64_t)n_kv;
    g->kvs = calloc(n_kv ? n_kv : 1, sizeof *g->kvs);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kvs || !g->tensors)
        return err_set(ERR_NOMEM, "%s: out of memory", g->path);
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    char fb[256];
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &g->kvs[i];
        uint64_t at = c.off;
        snprintf(fb, sizeof fb, "metadata entry %llu key", (unsigned long long)i);
        if ((rc = gc_str(&c, fb, &kv->key)))
            return rc;
        for (uint64_t j = 0; j < i; j++)
            if (g->kvs[j].key.len == kv->key.len &&
                memcmp(g->kvs[j].key.s, kv->key.s, kv->key.len) == 0)
                return gc_fail(&c, at, gguf_field(fb, sizeof fb, "metadata key", kv->key),
                               "duplicate key");
        uint32_t vt;
        gguf_field(fb, sizeof fb, "metadata key", kv->key);
        uint64_t tat = c.off;
        if ((rc = gc_u32(&c, fb, &vt)))
            return rc;
        if (vt >= GGUF_VT_COUNT)
            return gc_fail(&c, tat, fb, "unknown value type");
        kv->type = (int)vt;
        kv->val_off = c.off;
        if ((rc = gc_value(&c, (int)vt, fb, 0)))
            return rc;
        if (gguf_str_eq(kv->key, "general.alignment")) {
            if (vt != GGUF_VT_UINT32)
                return gc_fail(&c, tat, fb, "must be uint32");
            uint32_t a = (uint32_t)gc_rd_le(g->base + kv->val_off, 4);
            if (a == 0 || (a & (a - 1)) != 0)
                return gc_fail(&c, kv->val_off, fb, "alignment must be a nonzero power of two");
            g->alignment = a;
        }
    }
    g->n_tensors = (int64_t)n_tensors;
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        snprintf(fb, sizeof fb, "tensor %llu name", (unsigned long long)i);
        uint64_t at = c.off;
        if ((rc = gc_str(&c, fb, &t->name)))
            return rc;
        gguf_field(fb, sizeof fb, "tensor", t->name);
        for (uint64_t j = 0; j < i; j++)
            if (g->tensors[j].name.len == t->name.len &&
                memcmp(g->tensors[j].name.s, t->name.s, t->name.len) == 0)
                return gc_fail(&c, at, fb, "duplicate tensor name");
        uint64_t dat = c.off;
        if ((rc = gc_u32(&c, fb, &t->n_dims)))
            return rc;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
            return gc_fail(&c, dat, fb, "number of dimensions must be 1 to 4");
        int64_t nel = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t v, vat = c.off;
            if ((rc = gc_u64(&c, fb, &v)))
                return rc;
            if (v > (uint64_t)INT64_MAX || (v && (uint64_t)nel > (uint64_t)INT64_MAX / v))
                return gc_fail(&c, vat, fb, "dimension too large (element count overflows)");
            t->ne[d] = (int64_t)v;
            nel *= (int64_t)v;
        }
        uint32_t type;
        uint64_t tat = c.off;
        if ((rc = gc_u32(&c, fb, &type)))
            return rc;
        if (type >= GGUF_TYPE_MAX || !kn_type_name(type))
            return gc_fail(&c, tat, fb, "unknown tensor type");
        t->type = (int)type;
        int64_t rowb = kn_type_row_bytes(t->type, t->ne[0]);
        if (rowb < 0)
            return gc_fail(&c, dat, fb, "row length is not a multiple of the type's block size");
        uint64_t size = (uint64_t)rowb;
        for (uint32_t d = 1; d < t->n_dims; d++) {
            if (t->ne[d] && size > UINT64_MAX / (uint64_t)t->ne[d])
                return gc_fail(&c, dat, fb, "tensor size overflows");
            size *= (uint64_t)t->ne[d];
        }
        t->size_bytes = size;
        uint64_t oat = c.off;
        if ((rc = gc_u64(&c, fb, &t->offset)))
            return rc;
        if (t->offset % g->alignment)
            return gc_fail(&c, oat, fb, "data offset is not a multiple of the alignment");
        t->data = (const void *)(uintptr_t)oat; /* fixed up below */
    }
    uint64_t pad = (g->alignment - c.off % g->alignment) % g->alignment;
    g->data_off = c.off + pad;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t oat = (uint64_t)(uintptr_t)t->data;
        if (g->data_off > g->size || t->offset > g->size - g->data_off ||
            t->size_bytes > g->size - g->data_off - t->offset)
            return gc_fail(&c, oat, gguf_field(fb, sizeof fb, "tensor", t->name),
                           "data runs past end of file");
        t->data = g->base + g->data_off + t->offset;
    }
    return 0;
}

static int gguf_init(gguf *g, const char *name) {
    g->path = strdup(name ? name : "(memory)");
    if (!g->path)
        return err_set(ERR_NOMEM, "out of memory");
    int rc = gguf_parse(g);
    return rc;
}

int gguf_open_memory(const void *data, size_t size, const char *name, gguf **out) {
    *out = NULL;
    gguf *g = calloc(1, sizeof *g);
    if (!g)
        return err_set(ERR_NOMEM, "out of memory");
    g->base = data;
    g->size = size;
    int rc = gguf_init(g, name);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int gguf_open(const char *path, gguf **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_set(ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(ERR_IO, "%s: not a regular file", path);
    }
    gguf *g = calloc(1, sizeof *g);
    if (!g) {
        close(fd);
        return err_set(ERR_NOMEM, "out of memory");
    }
    g->size = (uint64_t)st.st_size;
    if (g->size > 0) {
        void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(g);
            return err_set(ERR_IO, "%s: cannot map: %s", path, strerror(e));
        }
        g->base = m;
        g->mapped = true;
    } else {
        g->base = (const unsigned char *)"";
    }
    close(fd);
    int rc = gguf_init(g, path);
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

void gguf_close(gguf *g) {
    if (!g)
        return;
    if (g->mapped)
        munmap((void *)g->base, g->size);
    for (size_t i = 0; i < g->n_arrs; i++)
        free(g->arrs[i].elem_offs);
    free(g->arrs);
    free(g->kvs);
    free(g->tensors);
    free(g->path);
    free(g);
}

uint32_t gguf_version(const gguf *g) {
    return g->version;
}
uint32_t gguf_alignment(const gguf *g) {
    return g->alignment;
}
uint64_t gguf_data_offset(const gguf *g) {
    return g->data_off;
}
const void *gguf_bytes(const gguf *g) {
    return g->base;
}
uint64_t gguf_file_size(const gguf *g) {
    return g->size;
}
const char *gguf_path(const gguf *g) {
    return g->path;
}

int64_t gguf_n_kv(const gguf *g) {
    return g->n_kv;
}

int gguf_str_eq(gguf_str a, const char *s) {
    size_t l = strlen(s);
    return a.len == l && memcmp(a.s, s, l) == 0;
}

int64_t gguf_find_key(const gguf *g, const char *key) {
    for (int64_t i = 0; i < g->n_kv; i++)
        if (gguf_str_eq(g->kvs[i].key, key))
            return i;
    return -1;
}

gguf_str gguf_kv_key(const gguf *g, int64_t i) {
    return g->kvs[i].key;
}

int gguf_kv_type(const gguf *g, int64_t i) {
    return g->kvs[i].type;
}

/* Reads a fixed-size scalar of type vt at p into the widest matching representation. */
static void gguf_read_scalar(int vt, const unsigned char *p, gguf_scalar *s) {
    uint64_t raw = gc_rd_le(p, (int)gguf_vtype_size(vt));
    switch (vt) {
    case GGUF_VT_UINT8:
    case GGUF_VT_UINT16:
    case GGUF_VT_UINT32:
    case GGUF_VT_UINT64:
        s->u = raw;
        break;
    case GGUF_VT_INT8:
    case GGUF_VT_INT16:
    case GGUF_VT_INT32:
    case GGUF_VT_INT64: { /* two's complement: sign-extend the value's top bit */
        uint64_t sign = (uint64_t)1 << (8 * gguf_vtype_size(vt) - 1);
        s->i = (int64_t)((raw ^ sign) - sign);
        break;
    }
    case GGUF_VT_FLOAT32: {
        uint32_t r32 = (uint32_t)raw;
        float f;
        memcpy(&f, &r32, 4);
        s->f = f;
        break;
    }
    case GGUF_VT_FLOAT64:
        memcpy(&s->f, &raw, 8);
        break;
    case GGUF_VT_BOOL:
        s->b = raw != 0;
        break;
    default:
        break;
    }
}

gguf_scalar gguf_kv_scalar(const gguf *g, int64_t i) {
    gguf_scalar s;
    memset(&s, 0, sizeof s);
    const gguf_kv *kv = &g->kvs[i];
    if (kv->type == GGUF_VT_STRING) {
        s.s.len = gc_rd_le(g->base + kv->val_off, 8);
        s.s.s = (const char *)g->base + kv->val_off + 8;
    } else if (kv->type != GGUF_VT_ARRAY) {
        gguf_read_scalar(kv->type, g->base + kv->val_off, &s);
    }
    return s;
}

static bool gguf_vt_is_uint(int vt) {
    return vt == GGUF_VT_UINT8 || vt == GGUF_VT_UINT16 || vt == GGUF_VT_UINT32 ||
           vt == GGUF_VT_UINT64;
}

static bool gguf_vt_is_sint(int vt) {
    return vt == GGUF_VT_INT8 || vt == GGUF_VT_INT16 || vt == GGUF_VT_INT32 || vt == GGUF_VT_INT64;
}

static int gguf_lookup(const gguf *g, const char *key, int64_t *idx) {
    *idx = gguf_find_key(g, key);
    if (*idx < 0)
        return err_set(ERR_NOTFOUND, "%s: metadata key '%s' not found", g->path, key);
    return 0;
}

static int gguf_type_error(const gguf *g, const char *key, int64_t i, const char *want) {
    return err_set(ERR_FORMAT, "%s: metadata key '%s' at byte %llu has type %s, expected %s",
                   g->path, key, (unsigned long long)g->kvs[i].val_off,
                   gguf_vtype_name(g->kvs[i].type), want);
}

/* Looks up key and reads its value: *i its index, *s its scalar (zero for an array), its type
 * the return value; or a negative error (ERR_NOTFOUND). */
static int gguf_lookup_scalar(const gguf *g, const char *key, int64_t *i, gguf_scalar *s) {
    int rc = gguf_lookup(g, key, i);
    if (rc)
        return rc;
    *s = gguf_kv_scalar(g, *i);
    return g->kvs[*i].type;
}

/* The integer-valued key `key` in [lo, hi] (a type of either signedness; else ERR_FORMAT saying
 * it is not `want`), stored into *out as a uint32_t (width 32), uint64_t (64) or int64_t (-64). */
static int gguf_get_int(const gguf *g, const char *key, int64_t lo, uint64_t hi, const char *want,
                        int width, void *out) {
    int64_t i;
    gguf_scalar s;
    int vt = gguf_lookup_scalar(g, key, &i, &s);
    if (vt < 0)
        return vt;
    bool neg;
    uint64_t mag;
    if (gguf_vt_is_uint(vt) && s.u <= hi) {
        neg = false;
        mag = s.u;
    } else if (gguf_vt_is_sint(vt) && s.i >= lo && (s.i <= 0 || (uint64_t)s.i <= hi)) {
        neg = s.i < 0;
        mag = s.i < 0 ? (uint64_t)(-(s.i + 1)) + 1 : (uint64_t)s.i;
    } else {
        return gguf_type_error(g, key, i, want);
    }
    if (width == 32)
        *(uint32_t *)out = (uint32_t)mag;
    else if (width == 64)
        *(uint64_t *)out = mag;
    else
        *(int64_t *)out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return 0;
}

int gguf_get_u32(const gguf *g, const char *key, uint32_t *out) {
    return gguf_get_int(g, key, 0, UINT32_MAX, "an unsigned 32-bit integer", 32, out);
}

int gguf_get_u64(const gguf *g, const char *key, uint64_t *out) {
    return gguf_get_int(g, key, 0, UINT64_MAX, "an unsigned integer", 64, out);
}

int gguf_get_i64(const gguf *g, const char *key, int64_t *out) {
    return gguf_get_int(g, key, INT64_MIN, INT64_MAX, "a 64-bit integer", -64, out);
}

/* A scalar of type vt as a double (integers converted, bools 0 or 1). */
static double gguf_scalar_f64(int vt, const gguf_scalar *s) {
    if (vt == GGUF_VT_FLOAT32 || vt == GGUF_VT_FLOAT64)
        return s->f;
    if (gguf_vt_is_uint(vt))
        return (double)s->u;
    if (vt == GGUF_VT_BOOL)
        return s->b;
    return (double)s->i;
}

int gguf_get_f64(const gguf *g, const char *key, double *out) {
    int64_t i;
    gguf_scalar s;
    int vt = gguf_lookup_scalar(g, key, &i, &s);
    if (vt < 0)
        return vt;
    if (vt != GGUF_VT_FLOAT32 && vt != GGUF_VT_FLOAT64 && !gguf_vt_is_uint(vt) &&
        !gguf_vt_is_sint(vt))
        return gguf_type_error(g, key, i, "a number");
    *out = gguf_scalar_f64(vt, &s);
    return 0;
}

int gguf_get_f32(const gguf *g, const char *key, float *out) {
    double d;
    int rc = gguf_get_f64(g, key, &d);
    if (!rc)
        *out = (float)d;
    return rc;
}

/* Fills arr from an array value starting at file offset off (the element type field). */
static void gguf_arr_at(const gguf *g, uint64_t off, gguf_arr *arr) {
    arr->g = g;
    arr->file_off = off;
    arr->type = (int)gc_rd_le(g->base + off, 4);
    arr->n = gc_rd_le(g->base + off + 4, 8);
    arr->data = g->base + off + 12;
}

int gguf_kv_arr(const gguf *g, int64_t i, gguf_arr *arr) {
    if (i < 0 || i >= g->n_kv || g->kvs[i].type != GGUF_VT_ARRAY)
        return ERR_INVAL;
    gguf_arr_at(g, g->kvs[i].val_off, arr);
    return 0;
}

/* The value of key, which must have type vt (bool, string or array; else ERR_FORMAT saying it is
 * not `want`), into *out: a bool, a gguf_str or a gguf_arr. */
static int gguf_get_typed(const gguf *g, const char *key, int vt, const char *want, void *out) {
    int64_t i;
    gguf_scalar s;
    int t = gguf_lookup_scalar(g, key, &i, &s);
    if (t < 0)
        return t;
    if (t != vt)
        return gguf_type_error(g, key, i, want);
    if (vt == GGUF_VT_BOOL)
        *(bool *)out = s.b;
    else if (vt == GGUF_VT_STRING)
        *(gguf_str *)out = s.s;
    else
        gguf_arr_at(g, g->kvs[i].val_off, out);
    return 0;
}

int gguf_get_bool(const gguf *g, const char *key, bool *out) {
    return gguf_get_typed(g, key, GGUF_VT_BOOL, "bool", out);
}

int gguf_get_str(const gguf *g, const char *key, gguf_str *out) {
    return gguf_get_typed(g, key, GGUF_VT_STRING, "string", out);
}

int gguf_get_arr(const gguf *g, const char *key, gguf_arr *arr) {
    return gguf_get_typed(g, key, GGUF_VT_ARRAY, "array", arr);
}

gguf_str gguf_arr_str(const gguf_arr *arr, uint64_t i) {
    gguf_str s = {"", 0};
    if (arr->type != GGUF_VT_STRING || i >= arr->n)
        return s;
    const uint64_t *offs = gguf_arr_offsets(arr->g, arr->file_off);
    if (!offs)
        return s;
    const unsigned char *p = arr->g->base + offs[i];
    s.len = gc_rd_le(p, 8);
    s.s = (const char *)p + 8;
    return s;
}

/* Element i of a fixed-size array into *s; false when out of range or not fixed-size. */
static bool gguf_arr_scalar(const gguf_arr *arr, uint64_t i, gguf_scalar *s) {
    int64_t es = gguf_vtype_size(arr->type);
    if (!es || i >= arr->n)
        return false;
    gguf_read_scalar(arr->type, (const unsigned char *)arr->data + i * (uint64_t)es, s);
    return true;
}

int64_t gguf_arr_i64(const gguf_arr *arr, uint64_t i) {
    gguf_scalar s;
    if (!gguf_arr_scalar(arr, i, &s))
        return 0;
    if (gguf_vt_is_uint(arr->type))
        return (int64_t)s.u;
    if (arr->type == GGUF_VT_FLOAT32 || arr->type == GGUF_VT_FLOAT64)
        return (int64_t)s.f;
    if (arr->type == GGUF_VT_BOOL)
        return s.b;
    return s.i;
}

double gguf_arr_f64(const gguf_arr *arr, uint64_t i) {
    gguf_scalar s;
    return gguf_arr_scalar(arr, i, &s) ? gguf_scalar_f64(arr->type, &s) : 0;
}

int gguf_arr_get_arr(const gguf_arr *arr, uint64_t i, gguf_arr *out) {
    if (arr->type != GGUF_VT_ARRAY || i >= arr->n)
        return ERR_INVAL;
    const uint64_t *offs = gguf_arr_offsets(arr->g, arr->file_off);
    if (!offs)
        return ERR_INTERNAL;
    gguf_arr_at(arr->g, offs[i], out);
    return 0;
}

int64_t gguf_n_tensors(const gguf *g) {
    return g->n_tensors;
}

const gguf_tensor *gguf_tensor_at(const gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name) {
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (gguf_str_eq(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}
