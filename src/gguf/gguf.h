/* SPDX-License-Identifier: MIT */
/*
 * gguf: reader and writer of GGUF files (versions 2 and 3, little-endian), the model format of the
 * llama.cpp ecosystem. It knows the container and the tensor element types, nothing about models.
 *
 * Reader: the file is mmapped read-only and fully validated by gguf_open before anything is
 * returned: every count, string length, array length, tensor dimension, offset and size is
 * checked against the file size with overflow-safe arithmetic, so later accessors cannot read out
 * of bounds. A malformed file gives ERR_FORMAT (or ERR_UNSUPPORTED for a valid file we cannot
 * use, e.g. big-endian or version 1) with a detail naming the field and its byte offset; it never
 * aborts. Metadata values and tensor data point into the mapping and live until gguf_close.
 *
 * Writer: collects metadata and tensors in memory and writes the file to a temporary name in the
 * same directory, then renames it into place, so a failure never leaves a partial output file.
 *
 * Threading: a gguf reader is immutable after open; any thread may read it concurrently.
 */
#ifndef VERITY_GGUF_GGUF_H
#define VERITY_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kn_type_table.h"

/* Metadata value types, as numbered in the file. */
enum gguf_vtype {
    GGUF_VT_UINT8 = 0,
    GGUF_VT_INT8 = 1,
    GGUF_VT_UINT16 = 2,
    GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4,
    GGUF_VT_INT32 = 5,
    GGUF_VT_FLOAT32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_UINT64 = 10,
    GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
    GGUF_VT_COUNT
};

#define GGUF_MAX_DIMS          4
#define GGUF_DEFAULT_ALIGNMENT 32

/* Name of a metadata value type ("uint32", "array"...) or "?". */
const char *gguf_vtype_name(int vtype);

/* Bytes of one value of a fixed-size metadata type (1, 2, 4 or 8); 0 for string, array and
 * unknown types, whose size the type alone does not give. */
int gguf_vtype_size(int vtype);

/* ---- reader ---- */

typedef struct gguf gguf;

/* A string inside the file: not NUL-terminated. */
typedef struct gguf_str {
    const char *s;
    uint64_t len;
} gguf_str;

typedef struct gguf_tensor {
    gguf_str name;
    int type;                  /* enum gguf_type */
    uint32_t n_dims;           /* 1..GGUF_MAX_DIMS */
    int64_t ne[GGUF_MAX_DIMS]; /* dims, ne[0] is the contiguous (row) dimension; unused are 1 */
    uint64_t offset;           /* relative to the data section */
    uint64_t size_bytes;
    const void *data; /* into the mapping */
} gguf_tensor;

/* Opens and validates path (mmap). Returns 0 and *out, or ERR_IO (cannot open/map; detail has the
 * OS error), ERR_FORMAT / ERR_UNSUPPORTED (detail: "<path>: <field> at byte <offset>: <problem>"),
 * ERR_NOMEM. */
int gguf_open(const char *path, gguf **out);

/* Like gguf_open over a caller-owned buffer that must outlive the reader (fuzzing, tests). name is
 * used in messages. */
int gguf_open_memory(const void *data, size_t size, const char *name, gguf **out);

/* Unmaps and frees. NULL is a no-op. */
void gguf_close(gguf *g);

uint32_t gguf_version(const gguf *g);
uint32_t gguf_alignment(const gguf *g);
uint64_t gguf_data_offset(const gguf *g); /* file offset of the tensor data section */
uint64_t gguf_file_size(const gguf *g);
/* The file's bytes (gguf_file_size of them), mapped read-only for the handle's lifetime. */
const void *gguf_bytes(const gguf *g);
const char *gguf_path(const gguf *g);

/* Metadata, by index 0..gguf_n_kv-1 or looked up by key (-1 if absent). */
int64_t gguf_n_kv(const gguf *g);
int64_t gguf_find_key(const gguf *g, const char *key);
gguf_str gguf_kv_key(const gguf *g, int64_t i);
int gguf_kv_type(const gguf *g, int64_t i);

/* Scalar getters by key with numeric widening: an integer getter accepts any integer type whose
 * value fits; gguf_get_f32/f64 accept floats and integers. Return 0 and *out; ERR_NOTFOUND if
 * absent; ERR_FORMAT (detail names the key, its type and the expected type) otherwise. */
int gguf_get_u32(const gguf *g, const char *key, uint32_t *out);
int gguf_get_i64(const gguf *g, const char *key, int64_t *out);
int gguf_get_u64(const gguf *g, const char *key, uint64_t *out);
int gguf_get_f32(const gguf *g, const char *key, float *out);
int gguf_get_f64(const gguf *g, const char *key, double *out);
int gguf_get_bool(const gguf *g, const char *key, bool *out);
int gguf_get_str(const gguf *g, const char *key, gguf_str *out);

/* Arrays: element type and length, and element access. Elements of nested arrays are visited with
 * gguf_arr_get_arr. gguf_get_arr returns 0 and fills *arr for an array-valued key. */
typedef struct gguf_arr {
    int type;         /* element type */
    uint64_t n;       /* element count */
    const void *data; /* first element (fixed-size types: packed little-endian values) */
    const gguf *g;
    uint64_t file_off; /* offset of the first element, for messages */
} gguf_arr;
int gguf_get_arr(const gguf *g, const char *key, gguf_arr *arr);
int gguf_kv_arr(const gguf *g, int64_t i, gguf_arr *arr);

/* Element i of a string array (O(1): string offsets are indexed at open). */
gguf_str gguf_arr_str(const gguf_arr *arr, uint64_t i);
/* Element i of a fixed-size numeric array, converted. */
int64_t gguf_arr_i64(const gguf_arr *arr, uint64_t i);
double gguf_arr_f64(const gguf_arr *arr, uint64_t i);
/* Element i of an array of arrays. */
int gguf_arr_get_arr(const gguf_arr *arr, uint64_t i, gguf_arr *out);

/* Scalar value of kv i, for printing; the returned union member matches gguf_kv_type. */
typedef union gguf_scalar {
    uint64_t u;
    int64_t i;
    double f;
    bool b;
    gguf_str s;
} gguf_scalar;
gguf_scalar gguf_kv_scalar(const gguf *g, int64_t i);

/* Tensors. */
int64_t gguf_n_tensors(const gguf *g);
const gguf_tensor *gguf_tensor_at(const gguf *g, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name);

/* Returns 1 if the NUL-terminated s equals the gguf_str. */
int gguf_str_eq(gguf_str a, const char *s);

/* ---- writer ---- */

typedef struct gguf_writer gguf_writer;

/* Creates an empty writer (version 3, alignment 32). Returns NULL on allocation failure. */
gguf_writer *gguf_writer_create(void);
void gguf_writer_destroy(gguf_writer *w);

/* Metadata setters; a key set twice keeps the last value at its first position. Strings and
 * arrays are copied. Return 0 or ERR_NOMEM / ERR_INVAL. Setting general.alignment (u32, power of
 * two) also changes the data alignment. */
int gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v);
int gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v);
int gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v);
int gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v);
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_f64(gguf_writer *w, const char *key, double v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s, size_t len);
/* An array of fixed-size elements (elem_type not STRING/ARRAY), n packed little-endian values. */
int gguf_writer_set_arr(gguf_writer *w, const char *key, int elem_type, const void *data,
                        uint64_t n);
/* An array of strings. */
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                            const size_t *lens, uint64_t n);
/* Copies metadata entry i of r (any type, nested arrays included). */
int gguf_writer_copy_kv(gguf_writer *w, const gguf *r, int64_t i);

/* Adds a tensor; data (size kn_type_row_bytes(type, ne[0]) * ne[1] * ...) is copied unless
 * borrow is true, in which case it must stay valid until gguf_writer_write returns. Returns 0,
 * ERR_INVAL (bad dims for the type, duplicate name), ERR_NOMEM. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims,
                           const int64_t *ne, const void *data, bool borrow);

/* Writes the file atomically (temporary file + rename). Returns 0 or ERR_IO with the path. */
int gguf_writer_write(gguf_writer *w, const char *path);

#endif
