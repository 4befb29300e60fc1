/* A STREAM-style triad, a[i] = b[i] + s*c[i] over 64M f32 on every core (OpenMP), with
 * streaming (non-temporal) stores where the CPU has them: the machine's memory bandwidth
 * bound for W1, measured by peers.py in the same run as kiln and its peers.
 * Then W1 itself, o[i] = (a[i]*b[i] + c[i])*d[i] - a[i], written the same way: what the
 * same expression reaches by hand in C (four input streams instead of two).
 * Written for kiln (not the STREAM benchmark's code); counts 12 bytes per element for the
 * triad (read b and c, write a), as STREAM does, and 20 for W1. Prints one JSON object: the
 * best and the median of the repetitions in GB/s, the thread count and whether the stores
 * were streaming.
 * Build: gcc -O3 -march=native -fopenmp stream.c -o stream */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#define N (64L << 20)
#define REPS 11

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(void) {
    float *a = aligned_alloc(64, N * sizeof(float));
    float *b = aligned_alloc(64, N * sizeof(float));
    float *c = aligned_alloc(64, N * sizeof(float));
    if (!a || !b || !c) return 1;
    const float s = 3.0f;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) { a[i] = 0.0f; b[i] = 1.0f + (float)(i % 7); c[i] = 0.5f; }
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = omp_get_wtime();
#if defined(__AVX__)
        __m256 vs = _mm256_set1_ps(s);
#pragma omp parallel for schedule(static)
        for (long i = 0; i < N; i += 8) {
            __m256 v = _mm256_add_ps(_mm256_load_ps(b + i), _mm256_mul_ps(vs, _mm256_load_ps(c + i)));
            _mm256_stream_ps(a + i, v);
        }
        _mm_sfence();
#else
#pragma omp parallel for schedule(static)
        for (long i = 0; i < N; i++) a[i] = b[i] + s * c[i];
#endif
        t[r] = omp_get_wtime() - t0;
    }
    double check = 0;
    for (long i = 0; i < N; i += 4099) check += a[i];
    qsort(t, REPS, sizeof(double), cmp);
    double bytes = 12.0 * N;

    /* W1 by hand: a, b, c as above plus d, into o. */
    float *d = aligned_alloc(64, N * sizeof(float));
    float *o = aligned_alloc(64, N * sizeof(float));
    if (!d || !o) return 1;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) { d[i] = 0.25f; o[i] = 0.0f; }
    double w[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = omp_get_wtime();
#if defined(__AVX__)
#pragma omp parallel for schedule(static)
        for (long i = 0; i < N; i += 8) {
            __m256 x = _mm256_load_ps(a + i);
            __m256 v = _mm256_add_ps(_mm256_mul_ps(x, _mm256_load_ps(b + i)), _mm256_load_ps(c + i));
            _mm256_stream_ps(o + i, _mm256_sub_ps(_mm256_mul_ps(v, _mm256_load_ps(d + i)), x));
        }
        _mm_sfence();
#else
#pragma omp parallel for schedule(static)
        for (long i = 0; i < N; i++) o[i] = (a[i] * b[i] + c[i]) * d[i] - a[i];
#endif
        w[r] = omp_get_wtime() - t0;
    }
    for (long i = 0; i < N; i += 4099) check += o[i];
    qsort(w, REPS, sizeof(double), cmp);
    double w1_bytes = 20.0 * N;
#if defined(__AVX__)
    const char *stores = "streaming";
#else
    const char *stores = "plain";
#endif
    printf("{\"triad_best_gbs\": %.2f, \"triad_median_gbs\": %.2f, \"w1_best_gbs\": %.2f, \"w1_median_gbs\": %.2f, "
           "\"threads\": %d, \"stores\": \"%s\", \"check\": %.1f}\n",
           bytes / t[0] / 1e9, bytes / t[REPS / 2] / 1e9, w1_bytes / w[0] / 1e9, w1_bytes / w[REPS / 2] / 1e9,
           omp_get_max_threads(), stores, check);
    free(a); free(b); free(c); free(d); free(o);
    return 0;
}
