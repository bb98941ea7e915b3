/* The estimator's cut of ASCII text, and the count cache's look-up of a chat history, in C.

   The pieces are exactly those of re.findall(_ASCII_PATTERN, text): a hand-written scanner
   that tries the pattern's branches in order at each position. tests/test_fastcut.py checks
   it against the regex on arbitrary ASCII text, and estimate.py falls back to the regex
   where this module was not built.

   split(text)        -> list[str]: the pieces.
   count(text, table) -> (int, list[str]): how many pieces are in the set ``table``, and
                         the others, in text order.
   Both take an ASCII str only (ValueError otherwise).

   plain_total(messages, envelopes, cache, shift) -> (int, list[int]) | None: for a list of
                         {"role": str, "content": str} dicts whose roles are keys of
                         ``envelopes`` (role -> tokens), the envelopes plus the cached
                         counts of the contents (``cache``: hash(text) -> count | len << shift),
                         and the indices whose content is not cached with its length (the
                         caller counts those); None where a message has another shape. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { LOWER = 1, UPPER = 2, DIGIT = 4, SPACE = 8, NEWLINE = 16, HSPACE = 32 };

static unsigned char cls[128];

static void init_classes(void) {
    for (int c = 'a'; c <= 'z'; c++) cls[c] = LOWER;
    for (int c = 'A'; c <= 'Z'; c++) cls[c] = UPPER;
    for (int c = '0'; c <= '9'; c++) cls[c] = DIGIT;
    /* regex's \s on ASCII: \t \n \v \f \r and space */
    cls['\t'] = SPACE | HSPACE;
    cls['\v'] = SPACE | HSPACE;
    cls['\f'] = SPACE | HSPACE;
    cls[' '] = SPACE | HSPACE;
    cls['\n'] = SPACE | NEWLINE;
    cls['\r'] = SPACE | NEWLINE;
}

#define IS_LETTER(c) (cls[(unsigned char)(c)] & (LOWER | UPPER))
#define IS_ALNUM(c) (cls[(unsigned char)(c)] & (LOWER | UPPER | DIGIT))
#define IS_SPACE(c) (cls[(unsigned char)(c)] & SPACE)
#define IS_NEWLINE(c) (cls[(unsigned char)(c)] & NEWLINE)
#define IS_HSPACE(c) (cls[(unsigned char)(c)] & HSPACE)
/* punctuation: neither \s nor a letter or digit */
#define IS_PUNCT(c) (!(cls[(unsigned char)(c)] & (LOWER | UPPER | DIGIT | SPACE)))

/* The end of the piece that starts at i (i < n). */
static Py_ssize_t piece_end(const char *s, Py_ssize_t i, Py_ssize_t n) {
    char c = s[i];
    Py_ssize_t j;

    /* 1. [^\r\nA-Za-z0-9]?+(?=[A-Za-z])[A-Z]*+[a-z]*+(?:'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL]))?+ */
    j = i;
    if (!IS_ALNUM(c) && !IS_NEWLINE(c)) j++;
    if (j < n && IS_LETTER(s[j])) {
        while (j < n && (cls[(unsigned char)s[j]] & UPPER)) j++;
        while (j < n && (cls[(unsigned char)s[j]] & LOWER)) j++;
        if (j + 1 < n && s[j] == '\'') {
            char a = s[j + 1];
            if (a == 's' || a == 'S' || a == 't' || a == 'T' || a == 'm' || a == 'M' ||
                a == 'd' || a == 'D') {
                return j + 2;
            }
            if (j + 2 < n) {
                char b = s[j + 2];
                if (((a == 'r' || a == 'R') && (b == 'e' || b == 'E')) ||
                    ((a == 'v' || a == 'V') && (b == 'e' || b == 'E')) ||
                    ((a == 'l' || a == 'L') && (b == 'l' || b == 'L'))) {
                    return j + 3;
                }
            }
        }
        return j;
    }

    /* 2. [0-9]{1,3} */
    if (cls[(unsigned char)c] & DIGIT) {
        j = i + 1;
        while (j < n && j < i + 3 && (cls[(unsigned char)s[j]] & DIGIT)) j++;
        return j;
    }

    /* 3.  ?[^\t\n\v\f\r A-Za-z0-9]++[\r\n/]*+ */
    j = i;
    if (c == ' ' && i + 1 < n && IS_PUNCT(s[i + 1])) j = i + 1;
    if (IS_PUNCT(s[j])) {
        while (j < n && IS_PUNCT(s[j])) j++;
        while (j < n && (s[j] == '\r' || s[j] == '\n' || s[j] == '/')) j++;
        return j;
    }

    /* Only whitespace is left at i. */
    /* 4. (?:[\t\v\f ]*+[\r\n]++)++ */
    {
        Py_ssize_t end = -1;
        j = i;
        for (;;) {
            Py_ssize_t k = j;
            while (k < n && IS_HSPACE(s[k])) k++;
            if (k < n && IS_NEWLINE(s[k])) {
                while (k < n && IS_NEWLINE(s[k])) k++;
                end = k;
                j = k;
            } else {
                break;
            }
        }
        if (end >= 0) return end;
    }

    /* 5. [\t\n\v\f\r ]+(?![^\t\n\v\f\r ]) and 6. [\t\n\v\f\r ]+ */
    j = i;
    while (j < n && IS_SPACE(s[j])) j++;
    if (j == n) return j;
    if (j - 1 > i) return j - 1;
    return j;
}

static const char *ascii_data(PyObject *text, Py_ssize_t *n) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "text must be a str");
        return NULL;
    }
    if (PyUnicode_READY(text) < 0) return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "text must be ASCII");
        return NULL;
    }
    *n = PyUnicode_GET_LENGTH(text);
    return (const char *)PyUnicode_1BYTE_DATA(text);
}

static PyObject *new_piece(const char *s, Py_ssize_t len) {
    PyObject *piece = PyUnicode_New(len, 127);
    if (piece == NULL) return NULL;
    memcpy(PyUnicode_1BYTE_DATA(piece), s, (size_t)len);
    return piece;
}

static PyObject *fastcut_split(PyObject *self, PyObject *text) {
    Py_ssize_t n, i = 0;
    const char *s = ascii_data(text, &n);
    if (s == NULL) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    while (i < n) {
        Py_ssize_t j = piece_end(s, i, n);
        PyObject *piece = new_piece(s + i, j - i);
        if (piece == NULL || PyList_Append(out, piece) < 0) {
            Py_XDECREF(piece);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(piece);
        i = j;
    }
    return out;
}

static PyObject *fastcut_count(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "count(text, table) takes 2 arguments");
        return NULL;
    }
    PyObject *table = args[1];
    if (!PyAnySet_Check(table)) {
        PyErr_SetString(PyExc_TypeError, "table must be a set or frozenset");
        return NULL;
    }
    Py_ssize_t n, i = 0, exact = 0;
    const char *s = ascii_data(args[0], &n);
    if (s == NULL) return NULL;
    PyObject *rest = PyList_New(0);
    if (rest == NULL) return NULL;
    while (i < n) {
        Py_ssize_t j = piece_end(s, i, n);
        PyObject *piece = new_piece(s + i, j - i);
        if (piece == NULL) goto fail;
        int hit = PySet_Contains(table, piece);
        if (hit < 0) {
            Py_DECREF(piece);
            goto fail;
        }
        if (hit) {
            exact++;
        } else if (PyList_Append(rest, piece) < 0) {
            Py_DECREF(piece);
            goto fail;
        }
        Py_DECREF(piece);
        i = j;
    }
    return Py_BuildValue("(nN)", exact, rest);
fail:
    Py_DECREF(rest);
    return NULL;
}

static PyObject *fastcut_plain_total(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "plain_total(messages, envelopes, cache, shift)");
        return NULL;
    }
    PyObject *messages = args[0], *envelopes = args[1], *cache = args[2];
    if (!PyList_CheckExact(messages) || !PyDict_CheckExact(envelopes) || !PyDict_CheckExact(cache)) {
        PyErr_SetString(PyExc_TypeError, "plain_total takes a list and two dicts");
        return NULL;
    }
    int shift = (int)PyLong_AsLong(args[3]);
    if (shift == -1 && PyErr_Occurred()) return NULL;
    if (shift <= 0 || shift >= 62) {
        PyErr_SetString(PyExc_ValueError, "shift must be in 1..61");
        return NULL;
    }
    static PyObject *role_key = NULL, *content_key = NULL;
    if (role_key == NULL) {
        role_key = PyUnicode_InternFromString("role");
        content_key = PyUnicode_InternFromString("content");
        if (role_key == NULL || content_key == NULL) return NULL;
    }
    long long mask = (1LL << shift) - 1, total = 0;
    PyObject *misses = PyList_New(0);
    if (misses == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(messages);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(messages, i);
        if (!PyDict_CheckExact(m) || PyDict_GET_SIZE(m) != 2) goto other;
        PyObject *role = PyDict_GetItemWithError(m, role_key);
        if (role == NULL) goto other_or_error;
        PyObject *content = PyDict_GetItemWithError(m, content_key);
        if (content == NULL) goto other_or_error;
        if (!PyUnicode_CheckExact(role) || !PyUnicode_CheckExact(content)) goto other;
        PyObject *env = PyDict_GetItemWithError(envelopes, role);
        if (env == NULL) goto other_or_error;
        long long e = PyLong_AsLongLong(env);
        if (e == -1 && PyErr_Occurred()) goto fail;
        total += e;
        Py_hash_t h = PyObject_Hash(content);
        if (h == -1) goto fail;
        PyObject *key = PyLong_FromSsize_t(h);
        if (key == NULL) goto fail;
        PyObject *v = PyDict_GetItemWithError(cache, key);
        Py_DECREF(key);
        long long value = -1;
        if (v != NULL) {
            value = PyLong_AsLongLong(v);
            if (value == -1 && PyErr_Occurred()) goto fail;
        } else if (PyErr_Occurred()) {
            goto fail;
        }
        if (value >= 0 && (value >> shift) == (long long)PyUnicode_GET_LENGTH(content)) {
            total += value & mask;
        } else {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL) goto fail;
            int bad = PyList_Append(misses, index);
            Py_DECREF(index);
            if (bad < 0) goto fail;
        }
    }
    return Py_BuildValue("(LN)", total, misses);
other_or_error:
    if (PyErr_Occurred()) goto fail;
other:
    Py_DECREF(misses);
    Py_RETURN_NONE;
fail:
    Py_DECREF(misses);
    return NULL;
}

static PyMethodDef methods[] = {
    {"split", (PyCFunction)fastcut_split, METH_O, "The pieces of an ASCII text."},
    {"count", (PyCFunction)(void (*)(void))fastcut_count, METH_FASTCALL,
     "(pieces in table, the other pieces) of an ASCII text."},
    {"plain_total", (PyCFunction)(void (*)(void))fastcut_plain_total, METH_FASTCALL,
     "(envelopes + cached counts, indices not cached) of a plain chat history, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastcut", "The estimator's cut of ASCII text and the count cache's bulk look-up, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastcut(void) {
    init_classes();
    return PyModule_Create(&module);
}
