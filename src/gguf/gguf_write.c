/* SPDX-License-Identifier: MIT */
/*
 * gguf_write: the GGUF writer. See gguf.h for the contract.
 *
 * Metadata values are serialised into their on-disk bytes as soon as they are set (each entry owns
 * a small byte buffer holding type + value), so writing the file is concatenation. Tensors are laid
 * out in the order they were added, each at the next offset that is a multiple of the alignment.
 * The file is written to "<path>.tmp.<pid>" and renamed over path only after every byte was written
 * and flushed, so no partial output file is ever visible under the final name.
 */
#include "base/err.h"
#include "base/mem.h"
#include "base/strbuf.h"
#include "gguf/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct gw_kv {
    char *key;
    strbuf val; /* value type (u32) + value bytes */
} gw_kv;

typedef struct gw_tensor {
    char *name;
    int type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t size_bytes;
    const void *data;
    void *owned;
} gw_tensor;

struct gguf_writer {
    gw_kv *kvs;
    size_t n_kv, cap_kv;
    gw_tensor *tensors;
    size_t n_t, cap_t;
    uint32_t alignment;
};

gguf_writer *gguf_writer_create(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w)
        w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_destroy(gguf_writer *w) {
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        strbuf_deinit(&w->kvs[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].owned);
    }
    free(w->kvs);
    free(w->tensors);
    free(w);
}

static void gw_put_le(strbuf *sb, uint64_t v, int n) {
    unsigned char b[8];
    for (int i = 0; i < n; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    strbuf_append(sb, b, (size_t)n);
}

static void gw_put_str(strbuf *sb, const char *s, size_t len) {
    gw_put_le(sb, len, 8);
    strbuf_append(sb, s, len);
}

/* Returns the entry for key, creating it at the end (value emptied either way). */
static gw_kv *gw_entry(gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            strbuf_reset(&w->kvs[i].val);
            return &w->kvs[i];
        }
    }
    if (mem_grow((void **)&w->kvs, &w->cap_kv, w->n_kv + 1, sizeof *w->kvs))
        return NULL;
    gw_kv *kv = &w->kvs[w->n_kv];
    kv->key = strdup(key);
    if (!kv->key)
        return NULL;
    strbuf_init(&kv->val);
    w->n_kv++;
    return kv;
}

static int gw_finish(gw_kv *kv, const char *key) {
    if (!kv || strbuf_failed(&kv->val))
        return err_set(ERR_NOMEM, "gguf writer: out of memory setting '%s'", key);
    return 0;
}

static int gw_set_scalar(gguf_writer *w, const char *key, int vt, uint64_t raw, int n) {
    gw_kv *kv = gw_entry(w, key);
    if (kv) {
        gw_put_le(&kv->val, (uint64_t)vt, 4);
        gw_put_le(&kv->val, raw, n);
    }
    return gw_finish(kv, key);
}

int gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v) {
    return gw_set_scalar(w, key, GGUF_VT_UINT8, v, 1);
}
int gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v) {
    return gw_set_scalar(w, key, GGUF_VT_INT8, (uint8_t)v, 1);
}
int gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v) {
    return gw_set_scalar(w, key, GGUF_VT_UINT16, v, 2);
}
int gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v) {
    return gw_set_scalar(w, key, GGUF_VT_INT16, (uint16_t)v, 2);
}
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    if (strcmp(key, "general.alignment") == 0) {
        if (v == 0 || (v & (v - 1)))
            return err_set(ERR_INVAL, "gguf writer: general.alignment %u is not a power of two", v);
        w->alignment = v;
    }
    return gw_set_scalar(w, key, GGUF_VT_UINT32, v, 4);
}
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    return gw_set_scalar(w, key, GGUF_VT_INT32, (uint32_t)v, 4);
}
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    return gw_set_scalar(w, key, GGUF_VT_UINT64, v, 8);
}
int gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v) {
    return gw_set_scalar(w, key, GGUF_VT_INT64, (uint64_t)v, 8);
}
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    uint32_t r;
    memcpy(&r, &v, 4);
    return gw_set_scalar(w, key, GGUF_VT_FLOAT32, r, 4);
}
int gguf_writer_set_f64(gguf_writer *w, const char *key, double v) {
    uint64_t r;
    memcpy(&r, &v, 8);
    return gw_set_scalar(w, key, GGUF_VT_FLOAT64, r, 8);
}
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    return gw_set_scalar(w, key, GGUF_VT_BOOL, v ? 1 : 0, 1);
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s, size_t len) {
    gw_kv *kv = gw_entry(w, key);
    if (kv) {
        gw_put_le(&kv->val, GGUF_VT_STRING, 4);
        gw_put_str(&kv->val, s, len);
    }
    return gw_finish(kv, key);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, int elem_type, const void *data,
                        uint64_t n) {
    int es = gguf_vtype_size(elem_type);
    if (!es)
        return err_set(ERR_INVAL, "gguf writer: '%s': array element type %s is not fixed-size", key,
                       gguf_vtype_name(elem_type));
    gw_kv *kv = gw_entry(w, key);
    if (kv) {
        gw_put_le(&kv->val, GGUF_VT_ARRAY, 4);
        gw_put_le(&kv->val, (uint64_t)elem_type, 4);
        gw_put_le(&kv->val, n, 8);
        /* host is little-endian (x86-64): values are already in file order */
        strbuf_append(&kv->val, data, (size_t)(n * (uint64_t)es));
    }
    return gw_finish(kv, key);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                            const size_t *lens, uint64_t n) {
    gw_kv *kv = gw_entry(w, key);
    if (kv) {
        gw_put_le(&kv->val, GGUF_VT_ARRAY, 4);
        gw_put_le(&kv->val, GGUF_VT_STRING, 4);
        gw_put_le(&kv->val, n, 8);
        for (uint64_t i = 0; i < n; i++)
            gw_put_str(&kv->val, strs[i], lens ? lens[i] : strlen(strs[i]));
    }
    return gw_finish(kv, key);
}

/* Appends the on-disk bytes of an array value (element type onwards) read from r. */
static void gw_copy_arr(strbuf *sb, const gguf_arr *a) {
    gw_put_le(sb, (uint64_t)a->type, 4);
    gw_put_le(sb, a->n, 8);
    if (a->type == GGUF_VT_STRING) {
        for (uint64_t i = 0; i < a->n; i++) {
            gguf_str s = gguf_arr_str(a, i);
            gw_put_str(sb, s.s, s.len);
        }
    } else if (a->type == GGUF_VT_ARRAY) {
        for (uint64_t i = 0; i < a->n; i++) {
            gguf_arr sub;
            if (gguf_arr_get_arr(a, i, &sub) == 0)
                gw_copy_arr(sb, &sub);
        }
    } else {
        strbuf_append(sb, a->data, (size_t)(a->n * (uint64_t)gguf_vtype_size(a->type)));
    }
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf *r, int64_t i) {
    gguf_str k = gguf_kv_key(r, i);
    char *key = strndup(k.s, k.len);
    if (!key)
        return err_set(ERR_NOMEM, "gguf writer: out of memory");
    int vt = gguf_kv_type(r, i);
    int rc;
    if (vt == GGUF_VT_ARRAY) {
        gguf_arr a;
        gguf_kv_arr(r, i, &a);
        gw_kv *kv = gw_entry(w, key);
        if (kv) {
            gw_put_le(&kv->val, GGUF_VT_ARRAY, 4);
            gw_copy_arr(&kv->val, &a);
        }
        rc = gw_finish(kv, key);
    } else if (vt == GGUF_VT_STRING) {
        gguf_str s = gguf_kv_scalar(r, i).s;
        rc = gguf_writer_set_str(w, key, s.s, s.len);
    } else {
        gguf_scalar s = gguf_kv_scalar(r, i);
        uint64_t raw;
        int n = gguf_vtype_size(vt);
        if (vt == GGUF_VT_FLOAT32) {
            float f = (float)s.f;
            uint32_t r32;
            memcpy(&r32, &f, 4);
            raw = r32;
        } else if (vt == GGUF_VT_FLOAT64) {
            memcpy(&raw, &s.f, 8);
        } else if (vt == GGUF_VT_BOOL) {
            raw = s.b;
        } else {
            raw = s.u; /* union: the low bytes are the same for signed values */
        }
        if (vt == GGUF_VT_UINT32 && strcmp(key, "general.alignment") == 0)
            rc = gguf_writer_set_u32(w, key, (uint32_t)raw);
        else
            rc = gw_set_scalar(w, key, vt, raw, n);
    }
    free(key);
    return rc;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims,
                           const int64_t *ne, const void *data, bool borrow) {
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return err_set(ERR_INVAL, "gguf writer: tensor '%s': %u dimensions", name, n_dims);
    int64_t rowb = kn_type_row_bytes(type, ne[0]);
    if (rowb < 0)
        return err_set(ERR_INVAL, "gguf writer: tensor '%s': row of %lld is not valid for type %s",
                       name, (long long)ne[0], kn_type_name(type) ? kn_type_name(type) : "?");
    uint64_t size = (uint64_t)rowb;
    for (uint32_t d = 1; d < n_dims; d++) {
        if (ne[d] < 0 || (ne[d] && size > UINT64_MAX / (uint64_t)ne[d]))
            return err_set(ERR_INVAL, "gguf writer: tensor '%s': bad dimension", name);
        size *= (uint64_t)ne[d];
    }
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return err_set(ERR_INVAL, "gguf writer: duplicate tensor '%s'", name);
    if (mem_grow((void **)&w->tensors, &w->cap_t, w->n_t + 1, sizeof *w->tensors))
        return err_set(ERR_NOMEM, "gguf writer: out of memory");
    gw_tensor *t = &w->tensors[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name)
        return err_set(ERR_NOMEM, "gguf writer: out of memory");
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = d < (int)n_dims ? ne[d] : 1;
    t->size_bytes = size;
    if (borrow) {
        t->data = data;
    } else {
        t->owned = malloc(size ? size : 1);
        if (!t->owned) {
            free(t->name);
            return err_set(ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
        }
        memcpy(t->owned, data, size);
        t->data = t->owned;
    }
    w->n_t++;
    return 0;
}

static int gw_write_all(FILE *f, const void *p, size_t n) {
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

int gguf_writer_write(gguf_writer *w, const char *path) {
    strbuf hdr;
    strbuf_init(&hdr);
    gw_put_le(&hdr, 0x46554747u, 4);
    gw_put_le(&hdr, 3, 4);
    gw_put_le(&hdr, w->n_t, 8);
    gw_put_le(&hdr, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        gw_put_str(&hdr, w->kvs[i].key, strlen(w->kvs[i].key));
        strbuf_append(&hdr, w->kvs[i].val.data, w->kvs[i].val.len);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        gw_tensor *t = &w->tensors[i];
        gw_put_str(&hdr, t->name, strlen(t->name));
        gw_put_le(&hdr, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++)
            gw_put_le(&hdr, (uint64_t)t->ne[d], 8);
        gw_put_le(&hdr, (uint64_t)t->type, 4);
        gw_put_le(&hdr, off, 8);
        off += t->size_bytes;
        off += (w->alignment - off % w->alignment) % w->alignment;
    }
    size_t pad = (w->alignment - hdr.len % w->alignment) % w->alignment;
    for (size_t i = 0; i < pad; i++)
        strbuf_putc(&hdr, 0);
    if (strbuf_failed(&hdr)) {
        strbuf_deinit(&hdr);
        return err_set(ERR_NOMEM, "gguf writer: out of memory building header of %s", path);
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        strbuf_deinit(&hdr);
        return err_set(ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    int bad = gw_write_all(f, hdr.data, hdr.len);
    strbuf_deinit(&hdr);
    static const char zeros[256];
    for (size_t i = 0; i < w->n_t && !bad; i++) {
        gw_tensor *t = &w->tensors[i];
        bad = gw_write_all(f, t->data, t->size_bytes);
        size_t tp = (w->alignment - t->size_bytes % w->alignment) % w->alignment;
        while (!bad && tp) {
            size_t n = tp < sizeof zeros ? tp : sizeof zeros;
            bad = gw_write_all(f, zeros, n);
            tp -= n;
        }
    }
    if (fflush(f) != 0)
        bad = -1;
    int e = errno;
    if (fclose(f) != 0)
        bad = -1;
    if (bad) {
        unlink(tmp);
        return err_set(ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return err_set(ERR_IO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    return 0;
}
