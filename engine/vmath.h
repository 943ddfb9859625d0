/* vmath.h -- private to the engine (not installed, not part of the API): float exp, sigmoid
 * and tanh written so that a loop calling them vectorises, and reductions (dot product, sum)
 * with several independent accumulators.
 *
 * Why: libm's expf/tanhf are scalar calls, so a loop over them runs one element at a time,
 * and right after OpenBLAS's AVX-512 kernels their SSE code also pays a transition penalty;
 * at the sizes of an attention step or an LSTM gate loop they cost more than the sgemm.  And
 * a plain `acc += a[i] * b[i]` loop is a chain of dependent adds that the compiler may not
 * reorder (no -ffast-math), so it runs at one add per FMA latency; VM_LANES partial sums let
 * it run at full vector width.  The partial sums change the rounding order, not the accuracy.
 *
 * Accuracy (checked against libm in tests/test_autograd.lua and tests/test_rnn.lua):
 *   vm_exp      relative error about 1 ulp over the whole float range; overflows to +inf
 *               above 88.72, underflows through the subnormals to 0 below -103.97; NaN stays NaN
 *   vm_sigmoid  from vm_exp(-|x|): relative error a few ulp everywhere, subnormal results too
 *   vm_tanh     a rational function of x (no exp); relative error below 4e-7
 */
#ifndef GLIMPSE_VMATH_H
#define GLIMPSE_VMATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 2^n for integer-valued float n in [-126, 127], built from the exponent bits */
static inline float vm_pow2i(float n) {
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float s;
  memcpy(&s, &bits, sizeof s);
  return s;
}

/* e^x by range reduction x = n ln2 + r, |r| <= ln2/2, and a degree-7 polynomial for e^r
 * (Cephes' expf coefficients).  2^n is applied in two halves so that n may run from -150
 * (subnormal results) to 128 (overflow to +inf) without leaving the normal exponent range. */
static inline float vm_exp(float x) {
  x = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  /* round x / ln2 to nearest by the 1.5 * 2^23 trick, which (unlike floorf) vectorises */
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;   /* ln2 split in two for accuracy */
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  float n1 = (n * 0.5f + 12582912.0f) - 12582912.0f;      /* about n/2, an integer again */
  /* a NaN x makes n NaN, whose conversion to int is undefined: convert 0 instead (p is NaN,
   * so the NaN still reaches the result) */
  float m = n == n ? n : 0.0f, m1 = n1 == n1 ? n1 : 0.0f;
  return p * vm_pow2i(m1) * vm_pow2i(m - m1);
}

/* with e = e^-|x| <= 1: 1/(1+e) for x >= 0, e/(1+e) below, so tiny results (x < -87, down
 * into the subnormals) keep their relative precision instead of flushing to 0 */
static inline float vm_sigmoid(float x) {
  float e = vm_exp(-fabsf(x)), r = 1.0f / (1.0f + e);
  return x >= 0 ? r : e * r;
}

/* tanh(x) = x P(x^2) / Q(x^2) on [-8.7, 8.7], +-1 beyond (where tanh rounds to 1): one
 * division and nine multiply-adds, no exp.  The coefficients are a rational fit of
 * tanh(x)/x in s = x^2 on (0, 9], made for this file by linearised least squares on
 * Chebyshev points, reweighted towards the worst relative errors (Lawson) until the error
 * was level: 5.9e-8 in exact arithmetic, below 4e-7 evaluated in float. */
static inline float vm_tanh(float x) {
  x = x < -9.0f ? -9.0f : (x > 9.0f ? 9.0f : x);
  float s = x * x;
  float p = 1.825696870804e-11f;
  p = p * s - 1.278122429004e-08f;
  p = p * s + 9.267720991819e-06f;
  p = p * s + 2.920798223998e-03f;
  p = p * s + 1.291926389049e-01f;
  p = p * s + 9.999999419267e-01f;
  float q = 2.281050105556e-04f;
  q = q * s + 2.376332219349e-02f;
  q = q * s + 4.625254794719e-01f;
  q = q * s + 1.0f;
  float r = x * p / q;
  return s > 75.69f ? copysignf(1.0f, x) : r;   /* |x| > 8.7: tanh rounds to +-1 in float */
}

/* independent partial sums in the reductions below: four AVX2 registers' worth */
#define VM_LANES 32

/* sum_i a[i] b[i] */
static inline float vm_dot(const float *restrict a, const float *restrict b, size_t n) {
  float acc[VM_LANES] = {0};
  size_t i = 0;
  for (; i + VM_LANES <= n; i += VM_LANES)
    for (int k = 0; k < VM_LANES; k++) acc[k] += a[i + k] * b[i + k];
  float s = 0;
  for (int k = 0; k < VM_LANES; k++) s += acc[k];
  for (size_t j = i; j < n; j++) s += a[j] * b[j];
  return s;
}

/* sum_i a[i], accumulated in double (bias gradients sum thousands of terms) */
static inline double vm_sum_d(const float *restrict a, size_t n) {
  double acc[VM_LANES / 2] = {0};
  size_t i = 0;
  for (; i + VM_LANES / 2 <= n; i += VM_LANES / 2)
    for (int k = 0; k < VM_LANES / 2; k++) acc[k] += (double)a[i + k];
  double s = 0;
  for (int k = 0; k < VM_LANES / 2; k++) s += acc[k];
  for (size_t j = i; j < n; j++) s += a[j];
  return s;
}

#endif
