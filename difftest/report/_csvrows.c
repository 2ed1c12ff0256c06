/* The CSV diff's compiled fast path: a block of rows written straight into one buffer.
 *
 * difftest/report/comparison.py hands over the table's columns, each one of:
 *   (TEXT, codes int64, cells tuple of bytes)   the cell is cells[code] (already quoted),
 *   (INT, values int64)                         the decimal integer,
 *   (INT_HAS, values int64, has bool)           the integer where has, else an empty cell,
 *   (FLOAT, values float64)                     format(x, ".9g"), an empty cell for a nan,
 *   (FLOAT_AS, values float64, j)               as FLOAT, but column j's cell of the same row
 *                                               where the two doubles have the same bits,
 * and gets the bytes of the rows in [start, stop): cells joined by ',', each row ended by '\n'.
 * The text is the Python path's (comparison._csv_blocks_py) byte for byte.
 *
 * Floats: Python's format(x, ".9g") is the exact decimal value of x rounded to 9 significant
 * digits, half to even, in %g's layout. Here x = m * 2**k is scaled to q = m * 2**k * 10**(8 - X)
 * (X the decimal exponent, 10**X <= |x| < 10**(X + 1)) as a quotient of exact 128-bit integers,
 * and q is rounded half to even from its remainder, which is exact too. Where the integers would
 * not fit (subnormals, |x| under about 1e-23 or over about 1e50) or the compiler has no 128-bit
 * integers, the value goes to CPython's own formatter, PyOS_double_to_string(x, 'g', 9), which
 * is what format() calls: the same text in every case, with no dependence on the C library's
 * printf.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { TEXT, INT, INT_HAS, FLOAT, FLOAT_AS, N_KINDS };

#define FLOAT_MAX 32 /* the longest ".9g" text is 16 bytes ("-1.23456789e-308") */
#define INT_MAX_LEN 20

/* ---- %.9g ----------------------------------------------------------------------------------- */

static int put_digits(char *p, uint64_t v) { /* v > 0, at most 20 digits */
    char tmp[24];
    int n = 0;
    while (v) {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    }
    for (int i = 0; i < n; i++) p[i] = tmp[n - 1 - i];
    return n;
}

#ifdef __SIZEOF_INT128__
typedef unsigned __int128 u128;
#define HAVE_U128 1
#define N_POW5 56 /* 5**55 < 2**128 */
static u128 POW5[N_POW5];
static int POW5_BITS[N_POW5];

static void init_pow5(void) {
    u128 p = 1;
    for (int i = 0; i < N_POW5; i++) {
        POW5[i] = p;
        int b = 0;
        for (u128 t = p; t; t >>= 1) b++;
        POW5_BITS[i] = b;
        p *= 5;
    }
}

static int bit_length64(uint64_t v) { return v ? 64 - __builtin_clzll(v) : 0; }

/* m * 2**k * 10**s = num / den with num = m * 5**s * 2**e (s >= 0) or m * 2**e (s < 0) and
 * den = 2**-e (s >= 0, e < 0) or 5**-s * 2**-e (s < 0), where e = k + s: both below 2**127 or
 * 0 is returned. Otherwise *cmp_out says whether floor(num / den) is under 10**8 (-1), over
 * 10**9 - 1 (1), or within, and then *q_out is num / den rounded half to even. */
static int scaled(uint64_t m, int k, int s, uint64_t *q_out, int *cmp_out) {
    int e = k + s;
    int up = e > 0 ? e : 0, down = e < 0 ? -e : 0;
    int s5 = s > 0 ? s : 0, d5 = s < 0 ? -s : 0;
    if (s5 >= N_POW5 || d5 >= N_POW5) return 0;
    if (bit_length64(m) + POW5_BITS[s5] + up > 127 || POW5_BITS[d5] + down > 127) return 0;
    u128 num = ((u128)m * POW5[s5]) << up;
    u128 q, r, rest, den;
    if (d5 == 0) { /* den is a power of two */
        den = (u128)1 << down;
        q = num >> down;
        r = num & (den - 1);
    } else {
        den = POW5[d5] << down;
        q = num / den;
        r = num - q * den;
    }
    if (q < 100000000u) { *cmp_out = -1; return 1; }
    if (q >= 1000000000u) { *cmp_out = 1; return 1; }
    *cmp_out = 0;
    rest = den - r; /* r > den - r: past the halfway point */
    if (r > rest || (r == rest && (q & 1))) q++;
    *q_out = (uint64_t)q;
    return 1;
}

/* The ".9g" text of a finite nonzero |x| from its 9 digits q (10**8 <= q < 10**9) and its
 * decimal exponent X, as CPython lays it out (pystrtod.c, format_float_short): trailing zeros
 * dropped, exponent form where X < -4 or X >= 9, the exponent signed and of 2 digits or more. */
static int layout(char *p, int neg, uint64_t q, int X) {
    char d[9];
    int n = 9;
    for (int i = 8; i >= 0; i--) {
        d[i] = (char)('0' + q % 10);
        q /= 10;
    }
    while (n > 1 && d[n - 1] == '0') n--;
    int o = 0;
    if (neg) p[o++] = '-';
    if (X < -4 || X >= 9) {
        p[o++] = d[0];
        if (n > 1) {
            p[o++] = '.';
            memcpy(p + o, d + 1, (size_t)(n - 1));
            o += n - 1;
        }
        p[o++] = 'e';
        p[o++] = X < 0 ? '-' : '+';
        int e = X < 0 ? -X : X;
        if (e < 10) p[o++] = '0';
        o += put_digits(p + o, (uint64_t)e);
        return o;
    }
    int decpt = X + 1;
    if (decpt <= 0) {
        p[o++] = '0';
        p[o++] = '.';
        for (int i = 0; i < -decpt; i++) p[o++] = '0';
        memcpy(p + o, d, (size_t)n);
        return o + n;
    }
    if (decpt < n) {
        memcpy(p + o, d, (size_t)decpt);
        o += decpt;
        p[o++] = '.';
        memcpy(p + o, d + decpt, (size_t)(n - decpt));
        return o + n - decpt;
    }
    memcpy(p + o, d, (size_t)n);
    o += n;
    for (int i = n; i < decpt; i++) p[o++] = '0';
    return o;
}
#endif

/* format(x, ".9g") into p (FLOAT_MAX bytes); the length, or -1 with a Python error set.
 * *fast: whether the integer path made it (for the tests). */
static int format_g9(char *p, double x, int *fast) {
    uint64_t bits;
    memcpy(&bits, &x, 8);
    int neg = (int)(bits >> 63);
    int biased = (int)((bits >> 52) & 0x7ff);
    uint64_t frac = bits & ((1ull << 52) - 1);
    *fast = 1;
    if (biased == 0 && frac == 0) {
        int o = 0;
        if (neg) p[o++] = '-';
        p[o++] = '0';
        return o;
    }
#ifdef HAVE_U128
    if (biased != 0 && biased != 0x7ff) {
        uint64_t m = frac | (1ull << 52);
        int k = biased - 1075;
        int tz = __builtin_ctzll(m);
        m >>= tz;
        k += tz;
        /* |x| in [2**(b-1), 2**b) with b = bit_length(m) + k: X is floor((b - 1) * log10(2))
         * or one more; the check below corrects it */
        int b = bit_length64(m) + k;
        int X = (int)(((int64_t)(b - 1) * 78913) >> 18); /* floor((b-1)*log10(2)), |b| < 2**11 */
        for (int tries = 0; tries < 3; tries++) {
            uint64_t q;
            int cmp;
            if (!scaled(m, k, 8 - X, &q, &cmp)) break;
            if (cmp < 0) { X--; continue; }
            if (cmp > 0) { X++; continue; }
            if (q == 1000000000u) { /* rounded up to the next power of ten */
                q = 100000000u;
                X++;
            }
            return layout(p, neg, q, X);
        }
    }
#endif
    *fast = 0;
    char *s = PyOS_double_to_string(x, 'g', 9, 0, NULL);
    if (!s) return -1;
    size_t n = strlen(s);
    if (n > FLOAT_MAX) {
        PyMem_Free(s);
        PyErr_SetString(PyExc_SystemError, "a float's text is longer than expected");
        return -1;
    }
    memcpy(p, s, n);
    PyMem_Free(s);
    return (int)n;
}

static int format_int(char *p, int64_t v) {
    if (v == 0) {
        p[0] = '0';
        return 1;
    }
    int o = 0;
    uint64_t u = (uint64_t)v;
    if (v < 0) {
        p[o++] = '-';
        u = 0 - u;
    }
    return o + put_digits(p + o, u);
}

/* ---- the rows ------------------------------------------------------------------------------ */

typedef struct {
    int kind;
    Py_buffer values, extra; /* extra: INT_HAS's mask */
    int have_values, have_extra;
    PyObject *cells;         /* TEXT: tuple of bytes */
    int same_as;             /* FLOAT_AS: the column whose cell it may take */
} Column;

static void release(Column *cols, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (cols[i].have_values) PyBuffer_Release(&cols[i].values);
        if (cols[i].have_extra) PyBuffer_Release(&cols[i].extra);
    }
}

static int get_array(PyObject *obj, Py_buffer *view, int *have, char format, Py_ssize_t itemsize,
                     Py_ssize_t stop, Py_ssize_t col) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    *have = 1;
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    int ok = view->itemsize == itemsize && f[1] == '\0' &&
             (f[0] == format || (format == 'q' && f[0] == 'l' && sizeof(long) == 8));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "column %zd: an array of '%c' (%zd bytes) is needed, "
                     "not '%s' (%zd bytes)", col, format, itemsize, view->format, view->itemsize);
        return -1;
    }
    if (view->len / itemsize < stop) {
        PyErr_Format(PyExc_ValueError, "column %zd holds %zd values, not %zd", col,
                     view->len / itemsize, stop);
        return -1;
    }
    return 0;
}

static int parse_column(PyObject *spec, Column *c, Py_ssize_t index, Py_ssize_t stop) {
    memset(c, 0, sizeof(*c));
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 2) {
        PyErr_Format(PyExc_TypeError, "column %zd: a tuple (kind, values, ...) is needed", index);
        return -1;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if (kind == -1 && PyErr_Occurred()) return -1;
    Py_ssize_t want = (kind == TEXT || kind == INT_HAS || kind == FLOAT_AS) ? 3 : 2;
    if (kind < 0 || kind >= N_KINDS || PyTuple_GET_SIZE(spec) != want) {
        PyErr_Format(PyExc_ValueError, "column %zd: bad kind %ld or item count", index, kind);
        return -1;
    }
    c->kind = (int)kind;
    PyObject *values = PyTuple_GET_ITEM(spec, 1), *third = want == 3 ? PyTuple_GET_ITEM(spec, 2) : NULL;
    int is_float = kind == FLOAT || kind == FLOAT_AS;
    if (get_array(values, &c->values, &c->have_values, is_float ? 'd' : 'q', 8, stop, index) < 0)
        return -1;
    if (kind == INT_HAS &&
        get_array(third, &c->extra, &c->have_extra, '?', 1, stop, index) < 0)
        return -1;
    if (kind == TEXT) {
        if (!PyTuple_Check(third)) {
            PyErr_Format(PyExc_TypeError, "column %zd: the cells must be a tuple of bytes", index);
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(third); i++) {
            PyObject *cell = PyTuple_GET_ITEM(third, i);
            if (!PyBytes_Check(cell)) {
                PyErr_Format(PyExc_TypeError, "column %zd: cell %zd is not bytes", index, i);
                return -1;
            }
        }
        c->cells = third;
    }
    if (kind == FLOAT_AS) {
        long j = PyLong_AsLong(third);
        if (j == -1 && PyErr_Occurred()) return -1;
        if (j < 0 || j >= index) {
            PyErr_Format(PyExc_ValueError, "column %zd: column %ld is not an earlier one",
                         index, j);
            return -1;
        }
        c->same_as = (int)j;
    }
    return 0;
}

static PyObject *rows(PyObject *self, PyObject *args) {
    PyObject *specs;
    Py_ssize_t start, stop;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!nn", &PyTuple_Type, &specs, &start, &stop)) return NULL;
    Py_ssize_t ncols = PyTuple_GET_SIZE(specs);
    if (ncols < 1 || ncols > 64 || start < 0 || stop < start) {
        PyErr_SetString(PyExc_ValueError, "1 to 64 columns and 0 <= start <= stop are needed");
        return NULL;
    }
    Column cols[64];
    Py_ssize_t parsed = 0;
    size_t row_max = 0;
    PyObject *out = NULL;
    char *buf = NULL;
    for (; parsed < ncols; parsed++) {
        if (parse_column(PyTuple_GET_ITEM(specs, parsed), &cols[parsed], parsed, stop) < 0) {
            parsed++;
            goto done;
        }
        Column *c = &cols[parsed];
        if (c->kind == FLOAT_AS && cols[c->same_as].kind != FLOAT && cols[c->same_as].kind != FLOAT_AS) {
            PyErr_Format(PyExc_ValueError, "column %zd: column %d holds no floats", parsed,
                         c->same_as);
            parsed++;
            goto done;
        }
        /* a text cell is counted at its own length below: one long name among many short
         * ones must not size every row */
        row_max += 1 + (size_t)(c->kind == TEXT ? 0
                                : c->kind == INT || c->kind == INT_HAS ? INT_MAX_LEN : FLOAT_MAX);
    }
    size_t nrows = (size_t)(stop - start);
    if (nrows && row_max > ((size_t)PY_SSIZE_T_MAX - 1) / nrows) {
        PyErr_NoMemory();
        goto done;
    }
    size_t size = nrows * row_max;
    for (Py_ssize_t j = 0; j < ncols; j++) {
        Column *c = &cols[j];
        if (c->kind != TEXT) continue;
        for (Py_ssize_t i = start; i < stop; i++) {
            int64_t code = ((const int64_t *)c->values.buf)[i];
            if (code < 0 || code >= PyTuple_GET_SIZE(c->cells)) {
                PyErr_Format(PyExc_IndexError, "column %zd, row %zd: no cell %lld", j, i,
                             (long long)code);
                goto done;
            }
            size_t len = (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(c->cells, (Py_ssize_t)code));
            if (len > (size_t)PY_SSIZE_T_MAX - 1 - size) {
                PyErr_NoMemory();
                goto done;
            }
            size += len;
        }
    }
    buf = (char *)PyMem_Malloc(size + 1);
    if (!buf) {
        PyErr_NoMemory();
        goto done;
    }
    char *p = buf;
    size_t cell_at[64], cell_len[64];
    for (Py_ssize_t i = start; i < stop; i++) {
        for (Py_ssize_t j = 0; j < ncols; j++) {
            Column *c = &cols[j];
            char *at = p;
            switch (c->kind) {
            case TEXT: {
                int64_t code = ((const int64_t *)c->values.buf)[i];
                if (code < 0 || code >= PyTuple_GET_SIZE(c->cells)) {
                    PyErr_Format(PyExc_IndexError, "column %zd, row %zd: no cell %lld", j, i,
                                 (long long)code);
                    goto done;
                }
                PyObject *cell = PyTuple_GET_ITEM(c->cells, (Py_ssize_t)code);
                memcpy(p, PyBytes_AS_STRING(cell), (size_t)PyBytes_GET_SIZE(cell));
                p += PyBytes_GET_SIZE(cell);
                break;
            }
            case INT:
                p += format_int(p, ((const int64_t *)c->values.buf)[i]);
                break;
            case INT_HAS:
                if (((const unsigned char *)c->extra.buf)[i])
                    p += format_int(p, ((const int64_t *)c->values.buf)[i]);
                break;
            case FLOAT:
            case FLOAT_AS: {
                double x = ((const double *)c->values.buf)[i];
                if (c->kind == FLOAT_AS) {
                    uint64_t a, b;
                    memcpy(&a, &x, 8);
                    memcpy(&b, (const double *)cols[c->same_as].values.buf + i, 8);
                    if (a == b) {
                        memmove(p, buf + cell_at[c->same_as], cell_len[c->same_as]);
                        p += cell_len[c->same_as];
                        break;
                    }
                }
                if (x != x) break;
                int fast, n = format_g9(p, x, &fast);
                if (n < 0) goto done;
                p += n;
                break;
            }
            }
            cell_at[j] = (size_t)(at - buf);
            cell_len[j] = (size_t)(p - at);
            *p++ = j + 1 < ncols ? ',' : '\n';
        }
    }
    out = PyBytes_FromStringAndSize(buf, p - buf);
done:
    PyMem_Free(buf);
    release(cols, parsed);
    return out;
}

static PyObject *format_float(PyObject *self, PyObject *arg) {
    (void)self;
    double x = PyFloat_AsDouble(arg);
    if (x == -1.0 && PyErr_Occurred()) return NULL;
    if (x != x) return Py_BuildValue("(y#O)", "", (Py_ssize_t)0, Py_True);
    char text[FLOAT_MAX];
    int fast, n = format_g9(text, x, &fast);
    if (n < 0) return NULL;
    return Py_BuildValue("(y#O)", text, (Py_ssize_t)n, fast ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS, "rows(columns, start, stop) -> bytes of those CSV rows"},
    {"format_float", format_float, METH_O,
     "format_float(x) -> (format(x, '.9g') as bytes, empty for a nan; whether the "
     "integer path made it)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csvrows",
                                    "Compiled fast path of the CSV diff's rows.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__csvrows(void) {
#ifdef HAVE_U128
    init_pow5();
#endif
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "TEXT", TEXT) < 0 || PyModule_AddIntConstant(m, "INT", INT) < 0 ||
        PyModule_AddIntConstant(m, "INT_HAS", INT_HAS) < 0 ||
        PyModule_AddIntConstant(m, "FLOAT", FLOAT) < 0 ||
        PyModule_AddIntConstant(m, "FLOAT_AS", FLOAT_AS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
