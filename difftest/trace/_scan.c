/* The trace parser's compiled fast path: one pass over complete lines of a chunk.
 *
 * It reads the canonical forms of the lines that make up the bulk of a trace ([spec-logits],
 * [SPECTRACE], [spec-propose], [spec-phase], [spec-phase-dev]) straight into the builder's
 * columns (bytearrays of native int32 / int64 / float64 / int8), counts and skips other program
 * output (handing over the lines that hold a known tag past their start or an engine-error or
 * notice prefix anywhere), and stops at the first line it does not accept cleanly (an unusual
 * spacing, a value out of range, a broken invariant, a notice, an engine error, a route or
 * header line): the Python reader takes that line, with the messages and findings it has
 * always given, and the scan resumes after it. So the compiled path only ever accepts a subset
 * of what the Python reader accepts, and reads it to the same values (floats exactly as
 * Python's float() reads them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <float.h>

/* Column order; difftest/trace/parser.py builds the tuple in this order. */
enum {
    V_REQ, V_POS, V_K, V_NS, V_ACC, V_LINE, V_DRAFT_LEN, V_DRAFT, V_EMIT_LEN, V_EMIT,
    P_ROWS, P_NQPR, P_K, P_NUM_REQS, P_FIRST_LEN, P_FIRST, P_LINE,
    PH_PRE, PH_BACKBONE, PH_SAMPLE, PH_LOGITS, PH_LINE,
    D_PRE, D_FWD, D_SELECT, D_WALK, D_LINE,
    L_REQ, L_POS, L_ROW, L_WIDTH, L_LINE, L_DIGITS, L_IDS, L_VALS,
    N_COLS
};

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

/* Request names already coded in this call (they point into the scanned buffer), in an
 * open-addressing table; past NAME_SLOTS / 2 names, the others are looked up in `reqs`. */
#define NAME_SLOTS 256
typedef struct {
    const char *p;
    Py_ssize_t n;
    uint32_t hash;
    int32_t code;
} Name;

/* Spellings CPython's reader converted in this call (subnormals, huge values, very long
 * mantissas...), by their exact text: the same text is the same double. */
#define SPELL_SLOTS 64
#define SPELL_MAX 32
typedef struct {
    size_t n;
    char text[SPELL_MAX];
    double v;
} Spelling;

typedef struct {
    Buf col[N_COLS];
    size_t mark[N_COLS];
    PyObject *reqs;      /* dict: name bytes -> code */
    PyObject *intern;    /* callable(bytes) -> int, for names not in reqs */
    const char *last_req;
    Py_ssize_t last_req_len;
    int32_t last_code;
    int failed;          /* a Python error is set */
    int ext;             /* the 64-bit significand path is usable (ext_precision) */
    int n_names;
    Name names[NAME_SLOTS];  /* the names met in this call: no Python object per line */
    Spelling spell[SPELL_SLOTS];
} Scan;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + extra) cap *= 2;
    char *p = (char *)realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

#define PUT(S, C, T, V) do { \
        Buf *b_ = &(S)->col[C]; \
        if (buf_reserve(b_, sizeof(T))) { PyErr_NoMemory(); (S)->failed = 1; return 0; } \
        T v_ = (T)(V); memcpy(b_->p + b_->n, &v_, sizeof(T)); b_->n += sizeof(T); \
    } while (0)

static void mark(Scan *s) {
    for (int i = 0; i < N_COLS; i++) s->mark[i] = s->col[i].n;
}

static void rollback(Scan *s) {
    for (int i = 0; i < N_COLS; i++) s->col[i].n = s->mark[i];
}

/* ---- numbers ------------------------------------------------------------------------------- */

static const double POW10[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* ---- exact decimal to double, without CPython's reader for the common spellings ----------
 *
 * A mantissa m of up to 19 digits and a decimal exponent e10 within 54 are first multiplied
 * or divided through the x87's 64-bit significand: m and 10**k (k <= 27, as 5**27 < 2**64)
 * are exact there, so r = m * 10**e10 is rounded once (|e10| <= 27) or twice, to 64 bits. The
 * halfway points between normal doubles are exact in 64 bits, so when r is farther from one
 * than its error, rounding r to a double gives the correctly rounded double. The error: half
 * a 64-bit unit per rounding (the window is 0 units for one rounding, where only landing on a
 * halfway point is ambiguous, and 2 for two); for more than 19 digits m is the first 19
 * (m >= 10**18) and the digits left out add less than 1 / m <= 10**-18 of it, under 18.5 units, so
 * the window is 24 more. Otherwise the digits are compared exactly, as integers, with the halfway
 * points next to that double (bigcomp). Anything else goes to CPython's reader. Used only
 * where long double is the x87 format and the FPU rounds to 64 bits (checked at run time:
 * some systems set it to 53). */
#if LDBL_MANT_DIG == 64 && (defined(__x86_64__) || defined(__i386__))
#define HAVE_EXT 1
#define EXT_POW 27
static const long double POW10L[EXT_POW + 1] = {
    1e0L, 1e1L, 1e2L, 1e3L, 1e4L, 1e5L, 1e6L, 1e7L, 1e8L, 1e9L, 1e10L, 1e11L, 1e12L, 1e13L,
    1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L, 1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L,
    1e26L, 1e27L};

static int ext_precision(void) {
    volatile long double a = 9223372036854775808.0L, b = 1.0L;  /* 2**63 + 1: 64 bits */
    volatile long double c = a + b;
    return c - a == 1.0L;
}
#else
#define HAVE_EXT 0
static int ext_precision(void) { return 0; }
#endif

#if HAVE_EXT
/* Unsigned integers of up to BN_LIMBS 32-bit limbs, least significant first. */
#define BN_LIMBS 48
typedef struct {
    uint32_t w[BN_LIMBS];
    int n;
} Big;

static void bn_set(Big *a, uint64_t v) {
    a->w[0] = (uint32_t)v;
    a->w[1] = (uint32_t)(v >> 32);
    a->n = a->w[1] ? 2 : (a->w[0] ? 1 : 0);
}

/* a = a * k + add; 0 when it does not fit */
static int bn_muladd(Big *a, uint32_t k, uint32_t add) {
    uint64_t carry = add;
    for (int i = 0; i < a->n; i++) {
        uint64_t t = (uint64_t)a->w[i] * k + carry;
        a->w[i] = (uint32_t)t;
        carry = t >> 32;
    }
    if (carry) {
        if (a->n == BN_LIMBS) return 0;
        a->w[a->n++] = (uint32_t)carry;
    }
    return 1;
}

static int bn_mul_pow5(Big *a, int e) {
    for (; e >= 13; e -= 13)
        if (!bn_muladd(a, 1220703125u, 0)) return 0;  /* 5**13 */
    static const uint32_t P5[13] = {1, 5, 25, 125, 625, 3125, 15625, 78125, 390625, 1953125,
                                    9765625, 48828125, 244140625};
    return bn_muladd(a, P5[e], 0);
}

static int bn_shl(Big *a, int s) {
    if (!a->n) return 1;
    int limbs = s / 32, bits = s % 32;
    if (a->n + limbs + 1 > BN_LIMBS) return 0;
    uint32_t top = bits ? a->w[a->n - 1] >> (32 - bits) : 0;
    for (int i = a->n - 1; i >= 0; i--) {
        uint32_t lo = (bits && i) ? a->w[i - 1] >> (32 - bits) : 0;
        a->w[i + limbs] = (a->w[i] << bits) | lo;
    }
    for (int i = 0; i < limbs; i++) a->w[i] = 0;
    a->n += limbs;
    if (top) a->w[a->n++] = top;
    return 1;
}

static int bn_cmp(const Big *a, const Big *b) {
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    for (int i = a->n - 1; i >= 0; i--)
        if (a->w[i] != b->w[i]) return a->w[i] < b->w[i] ? -1 : 1;
    return 0;
}

/* The sign of D * 10**E - h, h the halfway point between the positive normal double with
 * bits `c` and the next one up: h = (2M + 1) * 2**(Q - 1). 2 when the numbers do not fit. */
static int cmp_half(const Big *digits, int E, uint64_t c) {
    uint64_t mant = (c & ((UINT64_C(1) << 52) - 1)) | (UINT64_C(1) << 52);
    int q = (int)((c >> 52) & 0x7FF) - 1075;
    Big L = *digits, R;
    bn_set(&R, 2 * mant + 1);
    if (!(E >= 0 ? bn_mul_pow5(&L, E) : bn_mul_pow5(&R, -E))) return 2;
    int shift = E - (q - 1);
    if (!(shift >= 0 ? bn_shl(&L, shift) : bn_shl(&R, -shift))) return 2;
    return bn_cmp(&L, &R);
}

/* The correctly rounded double of D * 10**E, D the `n1` digits at d then the `n2` at f (at
 * most 40 in all), given a double *v (positive, normal, not its smallest or largest) within
 * one unit of it; 0 when it cannot tell. */
static int bigcomp(const char *d, int n1, const char *f, int n2, int E, double *v) {
    if (n1 + n2 > 40) return 0;
    Big D;
    bn_set(&D, 0);
    for (int i = 0; i < n1 + n2; i++) {
        char c = i < n1 ? d[i] : f[i - n1];
        if (!bn_muladd(&D, 10, (uint32_t)(c - '0'))) return 0;
    }
    uint64_t bits;
    memcpy(&bits, v, sizeof bits);
    int up = cmp_half(&D, E, bits);
    if (up == 2) return 0;
    if (up > 0 || (up == 0 && (bits & 1))) {  /* past the halfway point up, or on it, odd */
        bits += 1;
    } else if (up < 0) {
        int down = cmp_half(&D, E, bits - 1);
        if (down == 2) return 0;
        if (down < 0 || (down == 0 && ((bits - 1) & 1) == 0)) bits -= 1;
    }
    memcpy(v, &bits, sizeof bits);
    return 1;
}
#endif

static inline uint32_t name_hash(const char *p, Py_ssize_t n) {
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 16777619u;
    return h;
}

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

/* m * 10**n + the value of the n digits at p (all digits: the caller checked), eight at a time
 * where bytes are little-endian (fast_float's conversion of eight digits). */
static inline uint64_t digits_value(uint64_t m, const char *p, int n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v -= UINT64_C(0x3030303030303030);
        v = (v * 10) + (v >> 8);
        v = (((v & UINT64_C(0x000000FF000000FF)) * UINT64_C(0x000F424000000064))
             + (((v >> 16) & UINT64_C(0x000000FF000000FF)) * UINT64_C(0x0000271000000001))) >> 32;
        m = m * 100000000u + v;
        p += 8;
        n -= 8;
    }
#endif
    while (n-- > 0) m = m * 10 + (uint64_t)(*p++ - '0');
    return m;
}

static inline int lower(char c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* A number ends at the end of its field or at one of (up to) two stop bytes; a NUL never
 * stops one (0: no stop byte). */
static inline int is_stop(char a, char b, char c) { return c && (c == a || c == b); }

/* A float as the grammar's FLOAT spells it ([-+]?(digits[.digits]|.digits)([eE][-+]?digits)?,
 * nan, inf; case-insensitive), ending at `end` or at `stop1` or `stop2`. Returns the
 * position after it, or NULL when the text is not such a float. The value is exactly what
 * float() returns: short decimals through Clinger's fast path (a mantissa up to 2**53 times or
 * over an exact power of ten, one rounding), up to 19 significant digits with exponents within
 * 54 through the x87's 64-bit significand and, near a halfway point, bigcomp (see above);
 * everything else through CPython's own reader. */
static const char *read_float(Scan *s, const char *p, const char *end, char stop1, char stop2,
                              double *out, int *digits) {
    const char *start = p;
    int neg = 0;
    if (p < end && (*p == '-' || *p == '+')) { neg = *p == '-'; p++; }
    if (p + 3 <= end && ((lower(p[0]) == 'n' && lower(p[1]) == 'a' && lower(p[2]) == 'n')
                         || (lower(p[0]) == 'i' && lower(p[1]) == 'n' && lower(p[2]) == 'f'))) {
        p += 3;
        if (p < end && !is_stop(stop1, stop2, *p)) return NULL;
        char tmp[8];
        memcpy(tmp, start, (size_t)(p - start));
        tmp[p - start] = 0;
        char *e = NULL;
        *out = PyOS_string_to_double(tmp, &e, NULL);
        if (*out == -1.0 && PyErr_Occurred()) { s->failed = 1; return NULL; }
        *digits = 0;
        return p;
    }
    /* the digits before and after the point, then the significant ones: from the first
     * non-zero digit; the first 19 of them go into m (exact in 64 bits) */
    const char *ip = p;
    while (p < end && is_digit(*p)) p++;
    const char *ie = p, *fp = p, *fe = p;
    if (p < end && *p == '.') {
        fp = ++p;
        while (p < end && is_digit(*p)) p++;
        fe = p;
    }
    if (ie == ip && fe == fp) return NULL;  /* no digit at all */
    const char *d = ip;
    while (d < ie && *d == '0') d++;
    const char *f = fp;
    if (d == ie) while (f < fe && *f == '0') f++;  /* no significant digit before the point */
    int64_t nint = ie - d, sig64 = nint + (fe - f);
    int take = sig64 < 19 ? (int)sig64 : 19;
    int64_t dropped = sig64 - take;   /* significant digits beyond what m holds exactly */
    int t1 = nint < take ? (int)nint : take;
    uint64_t m = digits_value(digits_value(0, d, t1), f, take - t1);
    int sig = sig64 > 127 ? 127 : (int)sig64;
    /* the value is m * 10**(exp - digits after the point + dropped digits) */
    int64_t scale64 = dropped - (fe - fp);
    int exp = 0, big_exp = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0;
        if (p < end && (*p == '-' || *p == '+')) { eneg = *p == '-'; p++; }
        if (!(p < end && is_digit(*p))) return NULL;
        while (p < end && is_digit(*p)) {
            if (exp < 100000) exp = exp * 10 + (*p - '0'); else big_exp = 1;
            p++;
        }
        if (eneg) exp = -exp;
    }
    if (p < end && !is_stop(stop1, stop2, *p)) return NULL;
    *digits = sig ? sig : 1;
    int64_t e10_64 = (int64_t)exp + scale64;
    if (e10_64 < -100000 || e10_64 > 100000) big_exp = 1;  /* the exact reader decides */
    int e10 = big_exp ? 0 : (int)e10_64;
    /* Clinger's fast path (with digits dropped m has 19 digits: above 2**53). Exact only where
     * the one operation rounds once, to a double: not where double arithmetic runs on the x87
     * (FLT_EVAL_METHOD 2: i386, -mfpmath=387), which rounds to 64 bits and then to 53 again;
     * there these spellings take the paths below. */
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    if (!big_exp && m <= (UINT64_C(1) << 53) && e10 >= -22 && e10 <= 22) {
        double v = (double)m;
        v = e10 < 0 ? v / POW10[-e10] : v * POW10[e10];
        *out = neg ? -v : v;
        return p;
    }
#endif
#if HAVE_EXT
    if (s->ext && !big_exp && e10 >= -2 * EXT_POW && e10 <= 2 * EXT_POW && m) {
        long double r = (long double)m;
        int e = e10, window = dropped ? 24 : 0;
        if (e > EXT_POW) { r *= POW10L[EXT_POW]; e -= EXT_POW; window += 2; }
        if (e < -EXT_POW) { r /= POW10L[EXT_POW]; e += EXT_POW; window += 2; }
        r = e < 0 ? r / POW10L[-e] : r * POW10L[e];
        /* m < 2**64 and |e10| <= 54 keep r within 2**-180 .. 2**245: far from subnormal
         * doubles and from overflow, so r's halfway points are those of normal doubles */
        uint64_t sig;
        memcpy(&sig, &r, sizeof sig);  /* the x87 format: the explicit 64-bit significand */
        double v = (double)r;
        int off = (int)(sig & 0x7FF) - 0x400;  /* from the halfway point in these bits */
        if (off > window || off < -window
            || bigcomp(d, (int)nint, f, (int)(sig64 - nint), (int)(exp - (fe - fp)), &v)) {
            *out = neg ? -v : v;
            return p;
        }
    }
#endif
    /* exact fallback: CPython's correctly rounded reader, on a NUL-terminated copy */
    size_t len = (size_t)(p - start);
    Spelling *seen = NULL;
    if (len <= SPELL_MAX) {
        seen = &s->spell[name_hash(start, (Py_ssize_t)len) % SPELL_SLOTS];
        if (seen->n == len && memcmp(seen->text, start, len) == 0) {
            *out = seen->v;
            return p;
        }
    }
    char small[128];
    char *tmp = len < sizeof small ? small : (char *)malloc(len + 1);
    if (!tmp) { PyErr_NoMemory(); s->failed = 1; return NULL; }
    memcpy(tmp, start, len);
    tmp[len] = 0;
    char *e = NULL;
    double v = PyOS_string_to_double(tmp, &e, NULL);
    int bad = (v == -1.0 && PyErr_Occurred()) || e != tmp + len;
    if (tmp != small) free(tmp);
    if (bad) {
        if (PyErr_Occurred()) PyErr_Clear();
        return NULL;
    }
    if (seen) {
        seen->n = len;
        memcpy(seen->text, start, len);
        seen->v = v;
    }
    *out = v;
    return p;
}

/* An optionally signed integer of at most `maxd` digits in [lo, hi]. */
static const char *read_int(const char *p, const char *end, int allow_sign, int maxd,
                            int64_t lo, int64_t hi, int64_t *out) {
    int neg = 0;
    if (allow_sign && p < end && (*p == '-' || *p == '+')) { neg = *p == '-'; p++; }
    const char *d = p;
    int64_t v = 0;
    while (p < end && is_digit(*p)) {
        if (p - d >= maxd) return NULL;
        v = v * 10 + (*p - '0');
        p++;
    }
    if (p == d) return NULL;
    if (neg) v = -v;
    if (v < lo || v > hi) return NULL;
    *out = v;
    return p;
}

static inline const char *lit(const char *p, const char *end, const char *text, size_t n) {
    if ((size_t)(end - p) < n || memcmp(p, text, n) != 0) return NULL;
    return p + n;
}

#define LIT(P, E, T) lit((P), (E), (T), sizeof(T) - 1)

static inline int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static int only_ws(const char *p, const char *end) {
    while (p < end) if (!is_ws(*p++)) return 0;
    return 1;
}

#define INT32_LO (-2147483647LL - 1)
#define INT32_HI 2147483647LL
#define POS_HI ((1LL << 40) - 1)

/* A request name: no whitespace, no control character, not starting with '['. Its code comes
 * from this call's table, else from `reqs` (bytes -> code), else from `intern` (a new name). */
static const char *read_req(Scan *s, const char *p, const char *end, int32_t *code) {
    const char *q = p;
    while (q < end && (unsigned char)*q > 0x20 && *q != 0x7f) q++;
    if (q == p || *p == '[') return NULL;
    Py_ssize_t n = q - p;
    if (s->last_req && n == s->last_req_len && memcmp(p, s->last_req, (size_t)n) == 0) {
        *code = s->last_code;
        return q;
    }
    uint32_t h = name_hash(p, n);
    Name *slot = NULL;
    for (uint32_t i = h;; i++) {
        Name *e = &s->names[i % NAME_SLOTS];
        if (!e->p) { slot = e; break; }
        if (e->hash == h && e->n == n && memcmp(e->p, p, (size_t)n) == 0) {
            s->last_req = p;
            s->last_req_len = n;
            s->last_code = e->code;
            *code = e->code;
            return q;
        }
    }
    PyObject *name = PyBytes_FromStringAndSize(p, n);
    if (!name) { s->failed = 1; return NULL; }
    PyObject *got = PyDict_GetItemWithError(s->reqs, name);
    long c;
    if (got) {
        c = PyLong_AsLong(got);
    } else if (PyErr_Occurred()) {
        Py_DECREF(name); s->failed = 1; return NULL;
    } else {
        PyObject *r = PyObject_CallOneArg(s->intern, name);
        if (!r) { Py_DECREF(name); s->failed = 1; return NULL; }
        c = PyLong_AsLong(r);
        Py_DECREF(r);
    }
    Py_DECREF(name);
    if (c == -1 && PyErr_Occurred()) { s->failed = 1; return NULL; }
    if (s->n_names < NAME_SLOTS / 2) {
        slot->p = p;
        slot->n = n;
        slot->hash = h;
        slot->code = (int32_t)c;
        s->n_names++;
    }
    s->last_req = p;
    s->last_req_len = n;
    s->last_code = (int32_t)c;
    *code = (int32_t)c;
    return q;
}

/* `[ id id ... ]` (spaces only) into column `ids`; returns the count through *n. */
static const char *read_ids(Scan *s, const char *p, const char *end, int ids, int64_t *n) {
    if (!(p < end && *p == '[')) return NULL;
    p++;
    int64_t count = 0;
    for (;;) {
        while (p < end && *p == ' ') p++;
        if (p < end && *p == ']') break;
        int64_t v;
        const char *q = read_int(p, end, 1, 10, INT32_LO, INT32_HI, &v);
        if (!q || !(q < end && (*q == ' ' || *q == ']'))) return NULL;
        PUT(s, ids, int32_t, v);
        count++;
        p = q;
    }
    *n = count;
    return p + 1;
}

static const char *field_int(const char *p, const char *end, const char *name, size_t n,
                             int maxd, int64_t hi, int64_t *out) {
    p = lit(p, end, name, n);
    if (!p) return NULL;
    return read_int(p, end, 0, maxd, 0, hi, out);
}

#define FIELD_INT(P, E, NAME, MAXD, HI, OUT) field_int((P), (E), (NAME), sizeof(NAME) - 1, (MAXD), (HI), (OUT))

/* ---- lines --------------------------------------------------------------------------------- */

static int line_logits(Scan *s, const char *p, const char *end, int64_t lineno) {
    int32_t req;
    int64_t pos, row;
    if (!(p = LIT(p, end, " req="))) return 0;
    if (!(p = read_req(s, p, end, &req))) return 0;
    if (!(p = FIELD_INT(p, end, " pos=", 13, POS_HI, &pos))) return 0;
    if (!(p = FIELD_INT(p, end, " row=", 10, INT32_HI, &row))) return 0;
    if (!(p = LIT(p, end, " top=["))) return 0;
    int32_t width = 0, best = 0;
    for (;;) {
        while (p < end && *p == ' ') p++;
        if (p < end && *p == ']') break;
        int64_t id;
        const char *q = read_int(p, end, 1, 10, INT32_LO, INT32_HI, &id);
        if (!q || !(q < end && *q == ':')) return 0;
        double v;
        int digits;
        q = read_float(s, q + 1, end, ' ', ']', &v, &digits);
        if (!q || q == end) return 0;
        if (v - v != 0) digits = 0;  /* nan, inf and overflowed spellings count no digits */
        if (digits > best) best = digits;
        PUT(s, L_IDS, int32_t, id);
        PUT(s, L_VALS, double, v);
        width++;
        p = q;
    }
    if (!only_ws(p + 1, end)) return 0;
    PUT(s, L_REQ, int32_t, req);
    PUT(s, L_POS, int64_t, pos);
    PUT(s, L_ROW, int32_t, row);
    PUT(s, L_WIDTH, int32_t, width);
    PUT(s, L_LINE, int64_t, lineno);
    PUT(s, L_DIGITS, int8_t, best);
    return 1;
}

static int line_verify(Scan *s, const char *p, const char *end, int64_t lineno) {
    int32_t req;
    int64_t pos, k, ns, acc, nd, ne;
    if (!(p = LIT(p, end, " req="))) return 0;
    if (!(p = read_req(s, p, end, &req))) return 0;
    if (!(p = FIELD_INT(p, end, " pos=", 13, POS_HI, &pos))) return 0;
    if (!(p = FIELD_INT(p, end, " k=", 10, INT32_HI, &k))) return 0;
    if (!(p = FIELD_INT(p, end, " ns=", 10, INT32_HI, &ns))) return 0;
    if (!(p = FIELD_INT(p, end, " acc=", 10, INT32_HI, &acc))) return 0;
    if (!(p = LIT(p, end, " draft="))) return 0;
    size_t d0 = s->col[V_DRAFT].n / sizeof(int32_t);
    if (!(p = read_ids(s, p, end, V_DRAFT, &nd))) return 0;
    if (!(p = LIT(p, end, " emit="))) return 0;
    size_t e0 = s->col[V_EMIT].n / sizeof(int32_t);
    if (!(p = read_ids(s, p, end, V_EMIT, &ne))) return 0;
    if (!only_ws(p, end)) return 0;
    /* the invariants: a line that breaks one goes to the Python reader, which reports it */
    int64_t want_acc = ns > 0 ? ns - 1 : 0;
    if (nd != k || ne != ns || acc != want_acc || acc > k) return 0;
    if (acc && memcmp(s->col[V_DRAFT].p + d0 * 4, s->col[V_EMIT].p + e0 * 4, (size_t)acc * 4))
        return 0;
    PUT(s, V_REQ, int32_t, req);
    PUT(s, V_POS, int64_t, pos);
    PUT(s, V_K, int32_t, k);
    PUT(s, V_NS, int32_t, ns);
    PUT(s, V_ACC, int32_t, acc);
    PUT(s, V_LINE, int64_t, lineno);
    PUT(s, V_DRAFT_LEN, int64_t, nd);
    PUT(s, V_EMIT_LEN, int64_t, ne);
    return 1;
}

static int line_propose(Scan *s, const char *p, const char *end, int64_t lineno) {
    int64_t rows, nqpr, k, n;
    const char *q = LIT(p, end, " NO proposing rows this step (num_reqs=");
    if (q) {
        if (!(q = read_int(q, end, 0, 10, 0, INT32_HI, &n))) return 0;
        if (!(q < end && *q == ')') || !only_ws(q + 1, end)) return 0;
        PUT(s, P_ROWS, int32_t, 0);
        PUT(s, P_NQPR, int32_t, -1);
        PUT(s, P_K, int32_t, -1);
        PUT(s, P_NUM_REQS, int32_t, n);
        PUT(s, P_FIRST_LEN, int64_t, 0);
        PUT(s, P_LINE, int64_t, lineno);
        return 1;
    }
    if (!(p = FIELD_INT(p, end, " rows=", 10, INT32_HI, &rows))) return 0;
    if (!(p = FIELD_INT(p, end, " nqpr=", 10, INT32_HI, &nqpr))) return 0;
    if (!(p = FIELD_INT(p, end, " drafts/row=", 10, INT32_HI, &k))) return 0;
    if (!(p = LIT(p, end, " first="))) return 0;
    if (!(p = read_ids(s, p, end, P_FIRST, &n))) return 0;
    if (!only_ws(p, end) || n != k) return 0;
    /* rows=0 is the NO-proposing marker in the arrays; the Python reader keeps the line as is */
    if (rows == 0) return 0;
    PUT(s, P_ROWS, int32_t, rows);
    PUT(s, P_NQPR, int32_t, nqpr);
    PUT(s, P_K, int32_t, k);
    PUT(s, P_NUM_REQS, int32_t, -1);
    PUT(s, P_FIRST_LEN, int64_t, n);
    PUT(s, P_LINE, int64_t, lineno);
    return 1;
}

static const char *field_ms(Scan *s, const char *p, const char *end, const char *name, size_t n,
                            double *out) {
    p = lit(p, end, name, n);
    if (!p) return NULL;
    int digits;
    p = read_float(s, p, end, 'm', 'm', out, &digits);
    if (!p) return NULL;
    return LIT(p, end, "ms");
}

#define FIELD_MS(P, E, NAME, OUT) field_ms(s, (P), (E), (NAME), sizeof(NAME) - 1, (OUT))

static int line_phase(Scan *s, const char *p, const char *end, int64_t lineno) {
    double pre, backbone, sample;
    int64_t logits;
    if (!(p = FIELD_MS(p, end, " pre=", &pre))) return 0;
    if (!(p = FIELD_MS(p, end, " backbone=", &backbone))) return 0;
    if (!(p = FIELD_MS(p, end, " sample=", &sample))) return 0;
    if (!(p = FIELD_INT(p, end, " logits=", 18, INT64_MAX, &logits))) return 0;
    if (!only_ws(p, end)) return 0;
    PUT(s, PH_PRE, double, pre);
    PUT(s, PH_BACKBONE, double, backbone);
    PUT(s, PH_SAMPLE, double, sample);
    PUT(s, PH_LOGITS, int64_t, logits);
    PUT(s, PH_LINE, int64_t, lineno);
    return 1;
}

static int line_phase_dev(Scan *s, const char *p, const char *end, int64_t lineno) {
    double pre, fwd, sel, walk;
    if (!(p = FIELD_MS(p, end, " pre=", &pre))) return 0;
    if (!(p = FIELD_MS(p, end, " fwd=", &fwd))) return 0;
    if (!(p = FIELD_MS(p, end, " select=", &sel))) return 0;
    if (!(p = FIELD_MS(p, end, " walk=", &walk))) return 0;
    if (!only_ws(p, end)) return 0;
    PUT(s, D_PRE, double, pre);
    PUT(s, D_FWD, double, fwd);
    PUT(s, D_SELECT, double, sel);
    PUT(s, D_WALK, double, walk);
    PUT(s, D_LINE, int64_t, lineno);
    return 1;
}


static const char *KNOWN[] = {"[spec-phase]", "[spec-phase-dev]", "[spec-propose]", "[SPECTRACE]",
                              "[spec-logits]", "[dflash-route]", "[spec-drafting]",
                              "[spec-config]", "[spec-coverage]", NULL};

/* Tags of lines that are other output to the parser but noted: whether a skipped line holds
 * one (`[spec-forced]`, a teacher-forced arm's commit, read by difftest.core.force). */
static const char *NOTED[] = {"[spec-forced]", NULL};

/* An engine-error or notice prefix anywhere in the line (grammar.holds_marker): behind a
 * launcher's or logger's prefix, or an unknown one; the Python reader tells them apart. */
static int holds_marker(const char *p, const char *end) {
    const char *q = p;
    while ((q = memchr(q, 'v', (size_t)(end - q))) != NULL) {
        size_t left = (size_t)(end - q);
        if (left < 4) return 0;
        if (q[1] == 't' && q[2] == ':' && q[3] == ' ') return 1;
        if (left >= 18 && q[1] == 'l' && memcmp(q, "vllm.cpp: request ", 18) == 0) return 1;
        q++;
    }
    return 0;
}

/* Whether a tag of `tags` (KNOWN, NOTED) starts anywhere in [from, end). */
static int holds_tag(const char *from, const char *end, const char **tags) {
    const char *q = from;
    while (q < end && (q = memchr(q, '[', (size_t)(end - q))) != NULL) {
        size_t left = (size_t)(end - q);
        for (const char **k = tags; *k; k++) {
            size_t n = strlen(*k);
            if (n <= left && q[1] == (*k)[1] && memcmp(q, *k, n) == 0) return 1;
        }
        q++;
    }
    return 0;
}

/* A line that does not start with a known tag. The Python reader reads it only when it holds
 * a known tag past its first byte (a misplaced tag, or one behind a launcher's or logger's
 * prefix) or an engine-error or notice prefix anywhere (grammar.misplaced and the prefix
 * stripping find nothing else); every other such line is program output it skips and counts,
 * so the scan skips it here, whatever its first byte (indentation, a digit, a `[`). */
static int other_output(const char *p, const char *end) {
    if (p < end && holds_tag(p + 1, end, KNOWN)) return 0;
    return holds_marker(p, end) ? 0 : 2;
}

/* 1: read; 0: hand to the Python reader; 2: other output, skipped. */
static int line(Scan *s, const char *p, const char *end, int64_t lineno) {
    if (p == end || *p != '[') return other_output(p, end);
    const char *close = memchr(p, ']', (size_t)(end - p));
    if (!close) return other_output(p, end);  /* every tag ends with `]` */
    size_t tlen = (size_t)(close + 1 - p);
    const char *body = close + 1;
    switch (tlen) {
    case 13:
        if (!memcmp(p, "[spec-logits]", 13)) return line_logits(s, body, end, lineno);
        break;
    case 11:
        if (!memcmp(p, "[SPECTRACE]", 11)) return line_verify(s, body, end, lineno);
        break;
    case 14:
        if (!memcmp(p, "[spec-propose]", 14)) return line_propose(s, body, end, lineno);
        break;
    case 12:
        if (!memcmp(p, "[spec-phase]", 12)) return line_phase(s, body, end, lineno);
        break;
    case 16:
        if (!memcmp(p, "[spec-phase-dev]", 16)) return line_phase_dev(s, body, end, lineno);
        break;
    }
    for (const char **k = KNOWN; *k; k++)
        if (strlen(*k) == tlen && !memcmp(p, *k, tlen)) return 0;
    return other_output(p, end);
}

static int flush(Scan *s, PyObject *cols) {
    for (int i = 0; i < N_COLS; i++) {
        Buf *b = &s->col[i];
        if (!b->n) continue;
        PyObject *ba = PyTuple_GET_ITEM(cols, i);
        Py_ssize_t old = PyByteArray_GET_SIZE(ba);
        if (PyByteArray_Resize(ba, old + (Py_ssize_t)b->n) < 0) return -1;
        memcpy(PyByteArray_AS_STRING(ba) + old, b->p, b->n);
    }
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t at, stop;
    long long lineno;
    PyObject *reqs, *intern, *cols;
    if (!PyArg_ParseTuple(args, "y*nnLO!OO!", &view, &at, &stop, &lineno, &PyDict_Type, &reqs,
                          &intern, &PyTuple_Type, &cols))
        return NULL;
    if (PyTuple_GET_SIZE(cols) != N_COLS) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "expected %d columns", N_COLS);
    }
    for (int i = 0; i < N_COLS; i++) {
        if (!PyByteArray_Check(PyTuple_GET_ITEM(cols, i))) {
            PyBuffer_Release(&view);
            return PyErr_Format(PyExc_TypeError, "column %d is not a bytearray", i);
        }
    }
    if (at < 0 || stop > view.len || at > stop) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "bad range");
    }
    Scan s;
    memset(&s, 0, sizeof s);
    s.ext = ext_precision();
    s.reqs = reqs;
    s.intern = intern;
    const char *base = (const char *)view.buf;
    const char *p = base + at, *end = base + stop;
    long long skipped = 0, noted = 0;
    int handed = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;  /* only complete lines are scanned */
        mark(&s);
        int r = line(&s, p, nl, lineno);
        if (s.failed) break;
        if (r == 0) {
            rollback(&s);
            handed = 1;
            break;
        }
        if (r == 2) {
            skipped++;
            noted += holds_tag(p, nl, NOTED);
        }
        p = nl + 1;
        lineno++;
    }
    PyObject *result = NULL;
    if (!s.failed && flush(&s, cols) == 0)
        result = Py_BuildValue("nLLiL", (Py_ssize_t)(p - base), lineno, skipped, handed,
                               noted);
    for (int i = 0; i < N_COLS; i++) free(s.col[i].p);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *read_float_py(PyObject *self, PyObject *arg) {
    /* The scanner's float reader on one text: (value, digits), or None when it hands over. */
    char *text;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(arg, &text, &n) < 0) return NULL;
    Scan s;
    memset(&s, 0, sizeof s);
    s.ext = ext_precision();
    double v;
    int digits;
    const char *q = read_float(&s, text, text + n, 0, 0, &v, &digits);
    if (s.failed) return NULL;
    if (!q || q != text + n) Py_RETURN_NONE;
    if (v - v != 0) digits = 0;
    return Py_BuildValue("di", v, digits);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buf, at, stop, lineno, reqs, intern, columns) -> (offset, lineno, skipped, handed, "
     "noted): noted, how many skipped lines hold a NOTED_TAGS tag"},
    {"read_float", read_float_py, METH_O, "read_float(text) -> (value, digits) or None"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan",
                                    "Compiled fast path of the trace parser.", -1, methods};

/* A NULL-ended list of tags as a tuple of bytes (NULL with an error set). */
static PyObject *tag_tuple(const char **list) {
    Py_ssize_t n = 0;
    while (list[n]) n++;
    PyObject *tags = PyTuple_New(n);
    for (Py_ssize_t i = 0; tags && i < n; i++) {
        PyObject *t = PyBytes_FromString(list[i]);
        if (!t) {
            Py_CLEAR(tags);
            break;
        }
        PyTuple_SET_ITEM(tags, i, t);
    }
    return tags;
}

static int add_tags(PyObject *m, const char *name, const char **list) {
    PyObject *tags = tag_tuple(list);
    if (!tags || PyModule_AddObject(m, name, tags) < 0) {
        Py_XDECREF(tags);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *m = PyModule_Create(&module);
    /* the tags this build hands to the field reader (a build older than the grammar would
     * skip a newer tag's lines as program output), and those it notes on skipped lines: the
     * parser checks both lists */
    if (m && (PyModule_AddIntConstant(m, "N_COLS", N_COLS) < 0
              || add_tags(m, "KNOWN_TAGS", KNOWN) < 0 || add_tags(m, "NOTED_TAGS", NOTED) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
