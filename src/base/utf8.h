/* SPDX-License-Identifier: MIT */
/*
 * utf8: strict UTF-8 decoding and encoding (RFC 3629: no overlongs, no surrogates, max U+10FFFF),
 * and the value of an ASCII hex digit, which every escape decoder needs (\xNN, \uNNNN, <0xNN>).
 */
#ifndef VERITY_BASE_UTF8_H
#define VERITY_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one code point from s[0..n). Returns its length in bytes (1..4) and sets *cp, or -1 if
 * the bytes are not a complete valid sequence (invalid lead, bad continuation, overlong, surrogate,
 * above U+10FFFF, or truncated). n == 0 returns -1. */
int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Encodes cp (<= 0x10FFFF, not a surrogate) into out[0..4). Returns the length, or 0 if cp is not
 * encodable. */
int utf8_encode(uint32_t cp, char out[4]);

/* Returns the expected length of a sequence from its lead byte (1..4), or 0 for a continuation or
 * invalid lead byte. */
int utf8_seq_len(unsigned char lead);

/* Returns 1 if s[0..n) is entirely valid UTF-8, else 0 and, if bad_off is not NULL, the offset of
 * the first invalid byte. */
int utf8_valid(const char *s, size_t n, size_t *bad_off);

/* Returns how many bytes at the end of s[0..n) form an incomplete (but so far valid) multi-byte
 * sequence that more bytes could complete: 0..3. The incremental detokenizer holds these back. */
size_t utf8_incomplete_tail(const char *s, size_t n);

/* Returns the value 0..15 of the hex digit c ('0'-'9', 'a'-'f', 'A'-'F'), or -1 for any other
 * byte. */
int utf8_hex_digit(int c);

#endif
