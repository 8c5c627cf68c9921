/* SPDX-License-Identifier: MIT */
/*
 * Kernel tests: every SIMD kernel against its scalar reference on ragged shapes, compared with
 * memcmp (the kernels are designed to perform identical IEEE operations, kn.h); F16 conversion
 * against the F16C hardware instructions; kn_expf accuracy against double exp; attention against
 * a float64 softmax; and thread splits of the matmul (any slicing gives the same bytes).
 */
#include "test.h"
#include "base/err.h"
#include "gguf/gguf.h"
#include "kernels/kn.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rndf(void) { /* roughly N(0,1)-ish: sum of uniforms */
    double s = 0;
    for (int i = 0; i < 4; i++)
        s += (double)(rnd64() >> 11) / 9007199254740992.0;
    return (float)((s - 2.0) * 1.7);
}

static kn_isa simd_isas[2];
static int n_simd;

static void setup_isas(void) {
    n_simd = 0;
    if (kn_isa_available(KN_ISA_AVX2))
        simd_isas[n_simd++] = KN_ISA_AVX2;
    if (kn_isa_available(KN_ISA_AVX512))
        simd_isas[n_simd++] = KN_ISA_AVX512;
}

__attribute__((target("f16c"))) static float hw_h2f(uint16_t h) {
    return _cvtsh_ss(h);
}

__attribute__((target("f16c"))) static uint16_t hw_f2h(float f) {
    return (uint16_t)_cvtss_sh(f, 0);
}

static void t_f16_conv(void) {
    if (!kn_isa_available(KN_ISA_AVX2))
        test_skip("no F16C on this CPU");
    for (uint32_t h = 0; h < 65536; h++) {
        float a = kn_f16_to_f32((uint16_t)h), b = hw_h2f((uint16_t)h);
        uint32_t ua = kn_f32_bits(a), ub = kn_f32_bits(b);
        T_CHECKF(ua == ub, "half 0x%04x: scalar %08x hardware %08x", h, ua, ub);
    }
    /* every exponent, edge mantissas, and random bit patterns */
    int iters = (int)(4000000 * test_scale());
    for (int i = 0; i < iters; i++) {
        uint32_t u;
        if (i < 256 * 64) {
            uint32_t e = (uint32_t)i / 64, mpat = (uint32_t)i % 64;
            uint32_t man = mpat < 32 ? (mpat * 0x3FFFFu) & 0x7FFFFF : (uint32_t)rnd64() & 0x7FFFFF;
            if (mpat == 0)
                man = 0;
            if (mpat == 1)
                man = 0x7FFFFF;
            if (mpat == 2)
                man = 0x1000; /* exact tie for normal halves */
            if (mpat == 3)
                man = 0x3000;
            u = (e << 23) | man | ((uint32_t)(i & 1) << 31);
        } else {
            u = (uint32_t)rnd64();
        }
        float f = kn_bits_f32(u);
        uint16_t a = kn_f32_to_f16(f), b = hw_f2h(f);
        T_CHECKF(a == b, "float 0x%08x: scalar %04x hardware %04x", u, a, b);
    }
}

static void t_expf(void) {
    double max_rel = 0;
    for (int i = 0; i <= 200000; i++) {
        float x = -87.0f + (float)i * (175.5f / 200000.0f);
        double want = exp((double)x);
        double got = kn_expf(x);
        double rel = fabs(got - want) / want;
        if (rel > max_rel)
            max_rel = rel;
    }
    T_CHECKF(max_rel < 4e-7, "kn_expf max relative error %g", max_rel);
    T_CHECK(kn_expf(-100.0f) == 0.0f);
    T_CHECK(kn_expf(-INFINITY) == 0.0f);
    T_CHECK(isinf(kn_expf(100.0f)));
    T_CHECK(isnan(kn_expf(NAN)));
    T_CHECK(kn_expf(0.0f) == 1.0f);
}

/* Builds a random weight matrix of `type` (n x k) in GGUF layout. */
static void *make_weights(int type, int64_t n, int64_t k, float *f32_out) {
    float *f = malloc((size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < n * k; i++)
        f[i] = rndf() * 0.1f;
    if (f32_out)
        memcpy(f32_out, f, (size_t)(n * k) * sizeof(float));
    int64_t rb = gguf_type_row_bytes(type, k);
    void *d = malloc((size_t)(rb * n));
    kn_quantize_rows(type, f, n, k, d);
    free(f);
    return d;
}

typedef struct {
    float *x;
    int8_t *q;
    float *qd;
    int32_t *qs;
    kn_act a;
} act_buf;

static void act_make(act_buf *b, int64_t m, int64_t k, int64_t ldx, bool special) {
    b->x = malloc((size_t)(m * ldx) * sizeof(float));
    for (int64_t i = 0; i < m * ldx; i++)
        b->x[i] = rndf();
    if (special && m * ldx > 40) {
        b->x[0] = 0.0f;
        for (int j = 0; j < 32 && j < k; j++)
            b->x[ldx * (m - 1) + j] = 0.0f; /* an all-zero block: d = 0 */
        b->x[3] = 1e-30f;
        b->x[5] = -3.5f;
    }
    int64_t kq = k - k % 32;
    b->q = calloc((size_t)(m * (kq ? kq : 1)), 1);
    b->qd = calloc((size_t)(m * (kq / 32 + 1)), sizeof(float));
    b->qs = calloc((size_t)(m * (kq / 32 + 1)), sizeof(int32_t));
    b->a = (kn_act){.x = b->x, .ldx = ldx, .q = b->q, .qd = b->qd, .qs = b->qs};
}

static void act_free(act_buf *b) {
    free(b->x);
    free(b->q);
    free(b->qd);
    free(b->qs);
}

static void t_act_quantize(void) {
    setup_isas();
    int64_t ks[] = {32, 64, 96, 896};
    for (size_t ki = 0; ki < 4; ki++) {
        int64_t k = ks[ki], m = 7;
        act_buf r, s;
        act_make(&r, m, k, k + 3, true);
        kn_act_quantize(&r.a, k, 0, m, KN_ISA_SCALAR);
        for (int ii = 0; ii < n_simd; ii++) {
            act_make(&s, m, k, k + 3, false);
            memcpy(s.x, r.x, (size_t)(m * (k + 3)) * sizeof(float));
            kn_act_quantize(&s.a, k, 0, m, simd_isas[ii]);
            T_CHECKF(memcmp(r.q, s.q, (size_t)(m * k)) == 0, "q differ k=%lld isa=%s", (long long)k,
                     kn_isa_name(simd_isas[ii]));
            T_CHECK(memcmp(r.qd, s.qd, (size_t)(m * k / 32) * sizeof(float)) == 0);
            T_CHECK(memcmp(r.qs, s.qs, (size_t)(m * k / 32) * sizeof(int32_t)) == 0);
            act_free(&s);
        }
        act_free(&r);
    }
}

/* SIMD matmul against the reference for every supported type over ragged shapes, and thread
 * splits. */
static void t_matmul(void) {
    setup_isas();
    const int types[] = {GGUF_TYPE_F32, GGUF_TYPE_F16, GGUF_TYPE_BF16, GGUF_TYPE_Q8_0,
                         GGUF_TYPE_Q4_0};
    const int64_t ms[] = {1, 2, 5, 6, 7, 13, 33};
    const int64_t ns[] = {1, 15, 33, 64, 65, 130};
    const int64_t kf[] = {1, 7, 33, 130, 300};
    const int64_t kq[] = {32, 96, 160, 288};
    int cases = 0;
    for (size_t ti = 0; ti < 5; ti++) {
        int type = types[ti];
        bool q = type == GGUF_TYPE_Q8_0 || type == GGUF_TYPE_Q4_0;
        for (size_t ki = 0; ki < 4; ki++) {
            int64_t k = q ? kq[ki] : kf[ki + (rnd64() & 1)];
            for (size_t ni = 0; ni < 6; ni++) {
                int64_t n = ns[ni];
                void *w = make_weights(type, n, k, NULL);
                for (size_t mi = 0; mi < 7; mi++) {
                    int64_t m = ms[mi];
                    act_buf ab;
                    act_make(&ab, m, k, k + 1, mi == 6);
                    if (q)
                        kn_act_quantize(&ab.a, k, 0, m, KN_ISA_SCALAR);
                    int64_t ldy = n + 3;
                    float *yr = calloc((size_t)(m * ldy), sizeof(float));
                    float *ys = calloc((size_t)(m * ldy), sizeof(float));
                    kn_matmul_ref(type, w, k, &ab.a, m, 0, n, yr, ldy);
                    for (int ii = 0; ii < n_simd; ii++) {
                        kn_mat *mat;
                        T_OK(kn_mat_create(type, w, n, k, simd_isas[ii], &mat));
                        void *scratch = aligned_alloc(64, kn_matmul_scratch_bytes());
                        for (int nth = 1; nth <= 3; nth++) {
                            memset(ys, 0, (size_t)(m * ldy) * sizeof(float));
                            for (int ith = nth - 1; ith >= 0; ith--)
                                kn_matmul(mat, &ab.a, m, ys, ldy, ith, nth, scratch);
                            for (int64_t i = 0; i < m; i++)
                                T_CHECKF(memcmp(yr + i * ldy, ys + i * ldy,
                                                (size_t)n * sizeof(float)) == 0,
                                         "type %s isa %s m=%lld n=%lld k=%lld nth=%d row %lld: "
                                         "%.9g vs %.9g",
                                         gguf_type_name(type), kn_isa_name(simd_isas[ii]),
                                         (long long)m, (long long)n, (long long)k, nth,
                                         (long long)i, yr[i * ldy], ys[i * ldy]);
                            /* columns past n untouched */
                            for (int64_t i = 0; i < m; i++)
                                for (int64_t c = n; c < ldy; c++)
                                    T_CHECK(ys[i * ldy + c] == 0.0f);
                        }
                        free(scratch);
                        kn_mat_destroy(mat);
                        cases++;
                    }
                    /* the scalar ISA through the kn_mat interface equals the reference too */
                    kn_mat *ms_;
                    T_OK(kn_mat_create(type, w, n, k, KN_ISA_SCALAR, &ms_));
                    memset(ys, 0, (size_t)(m * ldy) * sizeof(float));
                    kn_matmul(ms_, &ab.a, m, ys, ldy, 0, 2, NULL);
                    kn_matmul(ms_, &ab.a, m, ys, ldy, 1, 2, NULL);
                    T_CHECK(memcmp(yr, ys, (size_t)(m * ldy) * sizeof(float)) == 0);
                    kn_mat_destroy(ms_);
                    free(yr);
                    free(ys);
                    act_free(&ab);
                }
                free(w);
            }
        }
    }
    if (!n_simd)
        test_skip("no SIMD ISA on this CPU (scalar checked only)");
}

/* The matmul computes what it should: float types against a float64 product of the dequantized
 * weights, quantized types with the activation quantization error bound. */
static void t_matmul_accuracy(void) {
    const int types[] = {GGUF_TYPE_F32, GGUF_TYPE_F16, GGUF_TYPE_Q8_0, GGUF_TYPE_Q4_0};
    int64_t m = 3, n = 40, k = 256;
    for (int ti = 0; ti < 4; ti++) {
        int type = types[ti];
        void *w = make_weights(type, n, k, NULL);
        float *wd = malloc((size_t)(n * k) * sizeof(float));
        for (int64_t r = 0; r < n; r++)
            T_OK(kn_dequantize_row(type, w, r, k, wd + r * k));
        act_buf ab;
        act_make(&ab, m, k, k, false);
        kn_act_quantize(&ab.a, k, 0, m, KN_ISA_SCALAR);
        float y[3 * 40];
        kn_matmul_ref(type, w, k, &ab.a, m, 0, n, y, n);
        for (int64_t i = 0; i < m; i++) {
            for (int64_t j = 0; j < n; j++) {
                double ref = 0, mag = 0;
                for (int64_t t = 0; t < k; t++) {
                    ref += (double)ab.x[i * k + t] * wd[j * k + t];
                    mag += fabs((double)ab.x[i * k + t] * wd[j * k + t]);
                }
                /* f32 accumulation: ~k * eps * magnitude; Q8 activations: 1/254 relative per
                 * element at worst, so 0.5% of the magnitude bounds the quantized types */
                double tol = (type == GGUF_TYPE_F32 || type == GGUF_TYPE_F16) ? 1e-5 * mag + 1e-7
                                                                              : 5e-3 * mag;
                T_CHECKF(fabs(y[i * n + j] - ref) <= tol, "%s: %g vs %g (tol %g)",
                         gguf_type_name(type), y[i * n + j], ref, tol);
            }
        }
        act_free(&ab);
        free(wd);
        free(w);
    }
}

static void t_row_ops(void) {
    setup_isas();
    const int64_t lens[] = {1, 7, 16, 17, 64, 100, 896, 4864};
    for (size_t li = 0; li < 8; li++) {
        int64_t n = lens[li];
        float *x = malloc((size_t)n * sizeof(float)), *w = malloc((size_t)n * sizeof(float));
        float *u = malloc((size_t)n * sizeof(float));
        float *yr = malloc((size_t)n * sizeof(float)), *ys = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) {
            x[i] = rndf() * 3;
            w[i] = rndf();
            u[i] = rndf();
        }
        if (n > 5) {
            x[1] = 95.0f; /* exp overflow side of silu(-x) */
            x[2] = -95.0f;
            x[3] = 0.0f;
        }
        uint16_t *hr = malloc((size_t)n * 2), *hs = malloc((size_t)n * 2);
        for (int ii = 0; ii < n_simd; ii++) {
            kn_isa isa = simd_isas[ii];
            kn_rmsnorm(x, w, 1e-5f, n, yr, KN_ISA_SCALAR);
            kn_rmsnorm(x, w, 1e-5f, n, ys, isa);
            T_CHECKF(memcmp(yr, ys, (size_t)n * 4) == 0, "rmsnorm n=%lld %s", (long long)n,
                     kn_isa_name(isa));
            kn_rmsnorm(x, NULL, 1e-6f, n, yr, KN_ISA_SCALAR);
            kn_rmsnorm(x, NULL, 1e-6f, n, ys, isa);
            T_CHECK(memcmp(yr, ys, (size_t)n * 4) == 0);
            kn_swiglu(x, u, n, yr, KN_ISA_SCALAR);
            kn_swiglu(x, u, n, ys, isa);
            T_CHECKF(memcmp(yr, ys, (size_t)n * 4) == 0, "swiglu n=%lld %s", (long long)n,
                     kn_isa_name(isa));
            kn_store_kv(hr, x, n, true, KN_ISA_SCALAR);
            kn_store_kv(hs, x, n, true, isa);
            T_CHECK(memcmp(hr, hs, (size_t)n * 2) == 0);
        }
        free(x);
        free(w);
        free(u);
        free(yr);
        free(ys);
        free(hr);
        free(hs);
    }
    if (!n_simd)
        test_skip("no SIMD ISA on this CPU");
}

/* A paged KV with shuffled block order, head_dim 8/64/80/128, F16 and F32. */
static void t_attention(void) {
    setup_isas();
    const int64_t hds[] = {8, 32, 64, 80, 128};
    for (int hi = 0; hi < 5; hi++) {
        for (int f16 = 0; f16 < 2; f16++) {
            int64_t hd = hds[hi], n_kv = 2, bs = 16, n_pos = 150;
            int64_t stride = n_kv * hd, nb = (n_pos + bs - 1) / bs;
            size_t esz = f16 ? 2 : 4;
            size_t block_bytes = (size_t)(bs * stride) * esz;
            unsigned char *kpool = malloc((size_t)nb * block_bytes);
            unsigned char *vpool = malloc((size_t)nb * block_bytes);
            int32_t table[16];
            float *kf = malloc((size_t)(n_pos * stride) * 4), *vf = malloc((size_t)(n_pos * stride) * 4);
            for (int64_t b = 0; b < nb; b++)
                table[b] = (int32_t)(nb - 1 - b); /* blocks deliberately out of order */
            for (int64_t p = 0; p < n_pos; p++) {
                for (int64_t e = 0; e < stride; e++) {
                    kf[p * stride + e] = rndf();
                    vf[p * stride + e] = rndf();
                }
                size_t off = (size_t)table[p / bs] * block_bytes + (size_t)((p % bs) * stride) * esz;
                kn_store_kv(kpool + off, kf + p * stride, stride, f16, KN_ISA_SCALAR);
                kn_store_kv(vpool + off, vf + p * stride, stride, f16, KN_ISA_SCALAR);
                if (f16)
                    for (int64_t e = 0; e < stride; e++) {
                        kf[p * stride + e] = kn_f16_to_f32(kn_f32_to_f16(kf[p * stride + e]));
                        vf[p * stride + e] = kn_f16_to_f32(kn_f32_to_f16(vf[p * stride + e]));
                    }
            }
            kn_attn_kv kv = {.k_base = kpool, .v_base = vpool, .block_bytes = block_bytes,
                             .table = table, .block_size = bs, .kv_stride = stride, .f16 = f16};
            float q[128], outr[128], outs[128], scratch[64];
            for (int64_t d = 0; d < hd; d++)
                q[d] = rndf();
            float scale = 1.0f / sqrtf((float)hd);
            for (int64_t np = 1; np <= n_pos; np += 37) {
                kn_attn_row(q, &kv, 1, hd, np, scale, 64, scratch, outr, KN_ISA_SCALAR);
                /* float64 reference */
                double mx = -1e300, den = 0, num[128] = {0};
                double sc[200];
                for (int64_t p = 0; p < np; p++) {
                    double s = 0;
                    for (int64_t d = 0; d < hd; d++)
                        s += (double)q[d] * kf[p * stride + hd + d];
                    sc[p] = s * scale;
                    if (sc[p] > mx)
                        mx = sc[p];
                }
                for (int64_t p = 0; p < np; p++) {
                    double e = exp(sc[p] - mx);
                    den += e;
                    for (int64_t d = 0; d < hd; d++)
                        num[d] += e * vf[p * stride + hd + d];
                }
                for (int64_t d = 0; d < hd; d++)
                    T_CHECKF(fabs(outr[d] - num[d] / den) < 2e-5, "attn hd=%lld np=%lld d=%lld",
                             (long long)hd, (long long)np, (long long)d);
                for (int ii = 0; ii < n_simd; ii++) {
                    kn_attn_row(q, &kv, 1, hd, np, scale, 64, scratch, outs, simd_isas[ii]);
                    T_CHECKF(memcmp(outr, outs, (size_t)hd * 4) == 0,
                             "attention hd=%lld f16=%d n_pos=%lld isa %s", (long long)hd, f16,
                             (long long)np, kn_isa_name(simd_isas[ii]));
                }
            }
            free(kpool);
            free(vpool);
            free(kf);
            free(vf);
        }
    }
}

int main(void) {
    test_run("kernels.f16_conversion_matches_f16c", t_f16_conv);
    test_run("kernels.expf", t_expf);
    test_run("kernels.act_quantize_simd_eq_ref", t_act_quantize);
    test_run("kernels.matmul_simd_eq_ref", t_matmul);
    test_run("kernels.matmul_accuracy", t_matmul_accuracy);
    test_run("kernels.row_ops_simd_eq_ref", t_row_ops);
    test_run("kernels.attention", t_attention);
    return test_summary();
}
