/* nn_ref.h: double-precision reference forward passes for the gradient checks, written from the
 * definitions (direct convolution, not im2col), plus central finite differences. Test-only. */
#ifndef GV_NN_REF_H
#define GV_NN_REF_H

#include "check.h"
#include "nn_internal.h"

#include <math.h>

/* Deterministic test values, exactly representable in float. */
static inline double ref_rand(uint64_t *st, double lo, double hi)
{
    float u = (float)(gv_nn_splitmix64(st) >> 40) * (1.0f / 16777216.0f);
    return (double)(float)(lo + (hi - lo) * (double)u);
}

static inline void ref_fill(double *v, size_t n, uint64_t *st, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        v[i] = ref_rand(st, lo, hi);
}

/* Values with |v| >= gap, so a ReLU kink is never within a finite-difference step. */
static inline void ref_fill_away(double *v, size_t n, uint64_t *st, double gap)
{
    for (size_t i = 0; i < n; i++) {
        double x = ref_rand(st, -1.0, 1.0);
        v[i] = x >= 0 ? x + gap : x - gap;
    }
}

static inline void ref_to_float(float *f, const double *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        f[i] = (float)d[i];
}

typedef double (*ref_loss_fn)(const double *v, void *ctx);

/* g[i] = (f(v + h e_i) - f(v - h e_i)) / 2h for i in [0, n). v is restored. */
static inline void ref_numeric_grad(ref_loss_fn f, void *ctx, double *v, size_t n, double *g)
{
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double save = v[i];
        v[i] = save + h;
        double lp = f(v, ctx);
        v[i] = save - h;
        double lm = f(v, ctx);
        v[i] = save;
        g[i] = (lp - lm) / (2 * h);
    }
}

/* Float analytic gradient against the double numeric one: |a - n| <= 1e-4 + 2e-3 |n|, and the
 * worst relative error is printed so regressions in accuracy are visible. */
static inline void ref_compare(const char *what, const float *ana, const double *num, size_t n)
{
    double worst = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)ana[i] - num[i]);
        double rel = err / (1e-4 + fabs(num[i]));
        if (rel > worst)
            worst = rel;
        if (err > 1e-4 + 2e-3 * fabs(num[i])) {
            if (bad++ < 5)
                fprintf(stderr, "  %s[%zu]: analytic %.8g numeric %.8g\n", what, i, ana[i], num[i]);
        }
    }
    GV_CHECK_MSG(bad == 0, "%s: %zu of %zu gradient entries off", what, bad, n);
    printf("  %-22s %5zu entries, worst rel err %.2e\n", what, n, worst);
}

static inline double ref_sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* Mean softmax cross-entropy over rows. */
static inline double ref_xent(const double *z, const int32_t *lab, int rows, int cols)
{
    double sum = 0.0;
    for (int r = 0; r < rows; r++) {
        const double *row = z + (size_t)r * (size_t)cols;
        double mx = row[0], s = 0.0;
        for (int c = 1; c < cols; c++)
            mx = row[c] > mx ? row[c] : mx;
        for (int c = 0; c < cols; c++)
            s += exp(row[c] - mx);
        sum += log(s) + mx - row[lab[r]];
    }
    return sum / rows;
}

/* y[n][out] = x W^T + b */
static inline void ref_dense(const double *x, const double *w, const double *b, double *y, int n,
                             int in, int out)
{
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b[o];
            for (int k = 0; k < in; k++)
                s += x[i * in + k] * w[o * in + k];
            y[i * out + o] = s;
        }
}

static inline void ref_relu(double *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = y[i] > 0 ? y[i] : 0;
}

/* Direct NHWC convolution, W [oc][ky][kx][c]. */
static inline void ref_conv(const double *x, const double *w, const double *b, double *y,
                            const struct gv_nn_conv_shape *s, int n)
{
    for (int bi = 0; bi < n; bi++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++)
                for (int o = 0; o < s->oc; o++) {
                    double acc = b[o];
                    for (int ky = 0; ky < s->k; ky++)
                        for (int kx = 0; kx < s->k; kx++) {
                            int iy = oy * s->stride - s->pad + ky;
                            int ix = ox * s->stride - s->pad + kx;
                            if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w)
                                continue;
                            for (int c = 0; c < s->c; c++)
                                acc += x[((bi * s->h + iy) * s->w + ix) * s->c + c] *
                                       w[((o * s->k + ky) * s->k + kx) * s->c + c];
                        }
                    y[((bi * s->oh + oy) * s->ow + ox) * s->oc + o] = acc;
                }
}

static inline void ref_pool(const double *x, double *y, int n, int h, int w, int c)
{
    for (int bi = 0; bi < n; bi++)
        for (int oy = 0; oy < h / 2; oy++)
            for (int ox = 0; ox < w / 2; ox++)
                for (int ch = 0; ch < c; ch++) {
                    double m = -INFINITY;
                    for (int dy = 0; dy < 2; dy++)
                        for (int dx = 0; dx < 2; dx++) {
                            double v = x[((bi * h + 2 * oy + dy) * w + 2 * ox + dx) * c + ch];
                            m = v > m ? v : m;
                        }
                    y[((bi * (h / 2) + oy) * (w / 2) + ox) * c + ch] = m;
                }
}

/* One LSTM cell on pre-activations g [n][4H] (i, f, g, o). */
static inline void ref_lstm_cell(const double *g, const double *c_prev, double *c, double *h, int n,
                                 int hid)
{
    for (int r = 0; r < n; r++)
        for (int j = 0; j < hid; j++) {
            const double *q = g + r * 4 * hid;
            double i = ref_sigmoid(q[j]), f = ref_sigmoid(q[hid + j]);
            double gg = tanh(q[2 * hid + j]), o = ref_sigmoid(q[3 * hid + j]);
            double cv = f * c_prev[r * hid + j] + i * gg;
            c[r * hid + j] = cv;
            h[r * hid + j] = o * tanh(cv);
        }
}

#endif /* GV_NN_REF_H */
