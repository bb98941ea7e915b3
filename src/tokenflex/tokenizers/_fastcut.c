/* The ASCII cut of tokenflex.tokenizers.estimate in C: split(text) returns the very list
 * that re.findall(_ASCII_PATTERN, text) returns, for an ASCII str, by a hand-written
 * scanner that tries the pattern's branches in order at each position:
 *
 *   1. [^\r\nA-Za-z0-9]?+(?=[A-Za-z])[A-Z]*+[a-z]*+(?:'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL]))?+
 *   2. [0-9]{1,3}
 *   3.  ?[^\t\n\v\f\r A-Za-z0-9]++[\r\n/]*+
 *   4. (?:[\t\v\f ]*+[\r\n]++)++
 *   5. [\t\n\v\f\r ]+(?![^\t\n\v\f\r ])
 *   6. [\t\n\v\f\r ]+
 *
 * Every ASCII character starts a match of one branch, so the pieces join to the text.
 * tests/test_estimate.py checks the pieces against the regex on arbitrary ASCII text. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

#define C_UPPER 1
#define C_LOWER 2
#define C_DIGIT 4
#define C_SPACE 8 /* [\t\n\v\f\r ] */
#define C_BREAK 16 /* [\r\n] */
#define C_HSPACE 32 /* [\t\v\f ] */

static unsigned char kind[128];

static void init_kinds(void) {
    int c;
    for (c = 'A'; c <= 'Z'; c++) kind[c] = C_UPPER;
    for (c = 'a'; c <= 'z'; c++) kind[c] = C_LOWER;
    for (c = '0'; c <= '9'; c++) kind[c] = C_DIGIT;
    kind['\t'] = C_SPACE | C_HSPACE;
    kind['\v'] = C_SPACE | C_HSPACE;
    kind['\f'] = C_SPACE | C_HSPACE;
    kind[' '] = C_SPACE | C_HSPACE;
    kind['\r'] = C_SPACE | C_BREAK;
    kind['\n'] = C_SPACE | C_BREAK;
}

#define IS_LETTER(c) (kind[c] & (C_UPPER | C_LOWER))
/* neither letter nor digit nor space: branch 3's class */
#define IS_PUNCT(c) (!(kind[c] & (C_UPPER | C_LOWER | C_DIGIT | C_SPACE)))

/* The end of the piece that starts at i (i < n). */
static Py_ssize_t piece_end(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
    unsigned char c = s[i];
    Py_ssize_t j, k;
    /* 1: letters, with an optional leading char that is no line break, letter or digit */
    j = i;
    if (!(kind[c] & (C_UPPER | C_LOWER | C_DIGIT | C_BREAK))) j++;
    if (j < n && IS_LETTER(s[j])) {
        while (j < n && (kind[s[j]] & C_UPPER)) j++;
        while (j < n && (kind[s[j]] & C_LOWER)) j++;
        if (j + 1 < n && s[j] == '\'') {
            unsigned char a = s[j + 1] | 0x20; /* lower-cases letters only: others mismatch */
            if (a == 's' || a == 't' || a == 'm' || a == 'd') {
                j += 2;
            } else if (j + 2 < n) {
                unsigned char b = s[j + 2] | 0x20;
                if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                    j += 3;
            }
        }
        return j;
    }
    /* 2: one to three digits */
    if (kind[c] & C_DIGIT) {
        j = i + 1;
        while (j < n && j < i + 3 && (kind[s[j]] & C_DIGIT)) j++;
        return j;
    }
    /* 3: punctuation, with an optional leading space and trailing [\r\n/] */
    j = i;
    if (c == ' ') j++;
    if (j < n && IS_PUNCT(s[j])) {
        while (j < n && IS_PUNCT(s[j])) j++;
        while (j < n && ((kind[s[j]] & C_BREAK) || s[j] == '/')) j++;
        return j;
    }
    /* 4: stretches of spaces that end in line breaks */
    j = i;
    for (;;) {
        k = j;
        while (k < n && (kind[s[k]] & C_HSPACE)) k++;
        if (k < n && (kind[s[k]] & C_BREAK)) {
            while (k < n && (kind[s[k]] & C_BREAK)) k++;
            j = k;
        } else {
            break;
        }
    }
    if (j > i) return j;
    /* 5 and 6: here s[i] is a space or a tab and the run holds no line break (else 4 matched);
     * the run less its last char, where a non-space follows and that leaves something */
    j = i;
    while (j < n && (kind[s[j]] & C_SPACE)) j++;
    if (j < n && j - 1 > i) return j - 1;
    return j;
}

/* Append the piece s[0:n] to list as a str; -1 on error (an exception is set). */
static int append_piece(PyObject *list, const unsigned char *s, Py_ssize_t n) {
    PyObject *piece = PyUnicode_FromStringAndSize((const char *)s, n);
    if (piece == NULL) return -1;
    int bad = PyList_Append(list, piece);
    Py_DECREF(piece);
    return bad;
}

static PyObject *split(PyObject *self, PyObject *arg) {
    const unsigned char *s;
    Py_ssize_t n, i, j;
    PyObject *out;
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "split() takes a str, not %.100s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(arg)) {
        PyErr_SetString(PyExc_ValueError, "split() takes ASCII text only; cut other text with the regex");
        return NULL;
    }
    s = (const unsigned char *)PyUnicode_DATA(arg);
    n = PyUnicode_GET_LENGTH(arg);
    out = PyList_New(0);
    if (out == NULL) return NULL;
    for (i = 0; i < n; i = j) {
        j = piece_end(s, i, n);
        if (append_piece(out, s + i, j - i) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

/* The ASCII entries of the last table handed to count(), in an open-addressing hash set of
 * (pointer, length) into the table's own strings (kept alive by a reference to the table). */
static PyObject *set_of = NULL;
static const char **slot_text = NULL;
static Py_ssize_t *slot_len = NULL;
static size_t slot_mask = 0;

static size_t fnv(const unsigned char *s, Py_ssize_t n) {
    size_t h = 1469598103934665603ULL;
    Py_ssize_t i;
    for (i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static int build_set(PyObject *table) {
    Py_ssize_t count = PySet_GET_SIZE(table);
    PyObject *key, *it;
    size_t size = 16, h;
    while (size < (size_t)count * 2) size <<= 1;
    PyMem_Free(slot_text);
    PyMem_Free(slot_len);
    Py_CLEAR(set_of);
    slot_text = PyMem_Calloc(size, sizeof(char *));
    slot_len = PyMem_Calloc(size, sizeof(Py_ssize_t));
    if (slot_text == NULL || slot_len == NULL) {
        PyMem_Free(slot_text);
        PyMem_Free(slot_len);
        slot_text = NULL;
        slot_len = NULL;
        PyErr_NoMemory();
        return -1;
    }
    slot_mask = size - 1;
    it = PyObject_GetIter(table);
    if (it == NULL) return -1;
    /* the table (a frozenset) holds its keys: the borrowed text stays valid while it lives */
    while ((key = PyIter_Next(it)) != NULL) {
        const char *t;
        Py_ssize_t n;
        Py_DECREF(key);
        if (!PyUnicode_Check(key) || !PyUnicode_IS_ASCII(key)) continue;
        t = (const char *)PyUnicode_DATA(key);
        n = PyUnicode_GET_LENGTH(key);
        for (h = fnv((const unsigned char *)t, n) & slot_mask; slot_text[h] != NULL; h = (h + 1) & slot_mask) {
        }
        slot_text[h] = t;
        slot_len[h] = n;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return -1;
    Py_INCREF(table);
    set_of = table;
    return 0;
}

static int in_set(const unsigned char *s, Py_ssize_t n) {
    size_t h;
    for (h = fnv(s, n) & slot_mask; slot_text[h] != NULL; h = (h + 1) & slot_mask) {
        if (slot_len[h] == n && memcmp(slot_text[h], s, (size_t)n) == 0) return 1;
    }
    return 0;
}

static PyObject *count(PyObject *self, PyObject *args) {
    PyObject *text, *table, *rest;
    const unsigned char *s;
    Py_ssize_t n, i, j, exact = 0;
    if (!PyArg_ParseTuple(args, "UO!:count", &text, &PyFrozenSet_Type, &table)) return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "count() takes ASCII text only; cut other text with the regex");
        return NULL;
    }
    if (table != set_of && build_set(table) < 0) return NULL;
    s = (const unsigned char *)PyUnicode_DATA(text);
    n = PyUnicode_GET_LENGTH(text);
    rest = PyList_New(0);
    if (rest == NULL) return NULL;
    for (i = 0; i < n; i = j) {
        j = piece_end(s, i, n);
        if (in_set(s + i, j - i)) {
            exact++;
            continue;
        }
        if (append_piece(rest, s + i, j - i) < 0) {
            Py_DECREF(rest);
            return NULL;
        }
    }
    return Py_BuildValue("(nN)", exact, rest);
}

static PyObject *role_key = NULL, *content_key = NULL;

/* One message of a chat history, as plain_total and plain_run read it: PLAIN_COUNTED (a
 * {"role": str, "content": str} dict whose role is a key of ``envelopes`` and whose
 * content ``cache`` holds with its length: *envelope and *count set), PLAIN_MISSED (such
 * a dict whose content is not cached: *envelope set), PLAIN_OTHER (another shape, or a
 * role with no envelope), or -1 with an exception set. */
enum { PLAIN_OTHER = 0, PLAIN_COUNTED = 1, PLAIN_MISSED = 2 };

/* Whether ``m`` is a {"role": str, "content": str} dict (exactly: no subclass, no other
 * key) whose role is a key of ``roles``: 1 (*role_value set to the key's value, *content
 * set; borrowed), 0, or -1 with an exception set. */
static int plain_shape(PyObject *m, PyObject *roles, PyObject **role_value, PyObject **content) {
    if (role_key == NULL) {
        role_key = PyUnicode_InternFromString("role");
        content_key = PyUnicode_InternFromString("content");
        if (role_key == NULL || content_key == NULL) return -1;
    }
    if (!PyDict_CheckExact(m) || PyDict_GET_SIZE(m) != 2) return 0;
    PyObject *role = PyDict_GetItemWithError(m, role_key);
    if (role == NULL) return PyErr_Occurred() ? -1 : 0;
    *content = PyDict_GetItemWithError(m, content_key);
    if (*content == NULL) return PyErr_Occurred() ? -1 : 0;
    if (!PyUnicode_CheckExact(role) || !PyUnicode_CheckExact(*content)) return 0;
    *role_value = PyDict_GetItemWithError(roles, role);
    if (*role_value == NULL) return PyErr_Occurred() ? -1 : 0;
    return 1;
}

/* The count ``cache`` (hash(text) -> count | len(text) << shift) holds for the str ``text``:
 * 1 (*count set), 0 (not held with that length), or -1 with an exception set. */
static int cached_count(PyObject *text, PyObject *cache, int shift, long long *count) {
    Py_hash_t h = PyObject_Hash(text);
    if (h == -1) return -1;
    PyObject *key = PyLong_FromSsize_t(h);
    if (key == NULL) return -1;
    PyObject *v = PyDict_GetItemWithError(cache, key);
    Py_DECREF(key);
    if (v == NULL) return PyErr_Occurred() ? -1 : 0;
    long long value = PyLong_AsLongLong(v);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0 || (value >> shift) != (long long)PyUnicode_GET_LENGTH(text)) return 0;
    *count = value & ((1LL << shift) - 1);
    return 1;
}

static int plain_message(PyObject *m, PyObject *envelopes, PyObject *cache, int shift,
                         long long *envelope, long long *count) {
    PyObject *env = NULL, *content = NULL;
    int shape = plain_shape(m, envelopes, &env, &content);
    if (shape <= 0) return shape < 0 ? -1 : PLAIN_OTHER;
    *envelope = PyLong_AsLongLong(env);
    if (*envelope == -1 && PyErr_Occurred()) return -1;
    int held = cached_count(content, cache, shift, count);
    return held < 0 ? -1 : held ? PLAIN_COUNTED : PLAIN_MISSED;
}

static int read_shift(PyObject *arg);

static PyObject *tool_calls_key = NULL, *function_key = NULL, *name_key = NULL,
                *arguments_key = NULL, *id_key = NULL, *function_call_key = NULL,
                *assistant_value = NULL, *tool_value = NULL;

static int message_keys(void) {
    if (tool_calls_key != NULL) return 0;
    tool_calls_key = PyUnicode_InternFromString("tool_calls");
    function_key = PyUnicode_InternFromString("function");
    name_key = PyUnicode_InternFromString("name");
    arguments_key = PyUnicode_InternFromString("arguments");
    id_key = PyUnicode_InternFromString("id");
    function_call_key = PyUnicode_InternFromString("function_call");
    assistant_value = PyUnicode_InternFromString("assistant");
    tool_value = PyUnicode_InternFromString("tool");
    return (tool_calls_key && function_key && name_key && arguments_key && id_key &&
            function_call_key && assistant_value && tool_value) ? 0 : -1;
}

/* 1 when the str ``a`` equals the str ``b``, else 0 (both exact str). */
static int same(PyObject *a, PyObject *b) {
    return a == b || (PyUnicode_GET_LENGTH(a) == PyUnicode_GET_LENGTH(b) &&
                      PyUnicode_Compare(a, b) == 0);
}

/* The value of ``key`` in dict ``d`` when it is truthy: 1, 0 (absent or falsy), -1. */
static int truthy_item(PyObject *d, PyObject *key) {
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v == NULL) return PyErr_Occurred() ? -1 : 0;
    return PyObject_IsTrue(v);
}

/* Tokens of one assistant tool call as MessageCounter._call counts it with an id, from
 * the cache: 1 (*total increased, *hits counted), 0 (another shape, or a text not held:
 * the caller counts the message in Python), -1 with an exception set. */
static int call_total(PyObject *call, PyObject *cache, int shift, long long overhead,
                      long long *total, Py_ssize_t *hits) {
    if (!PyDict_CheckExact(call)) return 0;
    PyObject *fn = PyDict_GetItemWithError(call, function_key);
    if (fn == NULL) {
        if (PyErr_Occurred()) return -1;
        fn = call;
    }
    if (!PyDict_CheckExact(fn)) return 0;
    PyObject *name = PyDict_GetItemWithError(fn, name_key);
    if (name == NULL) return PyErr_Occurred() ? -1 : 0;
    PyObject *args = PyDict_GetItemWithError(fn, arguments_key);
    if (args == NULL && PyErr_Occurred()) return -1;
    PyObject *id = PyDict_GetItemWithError(call, id_key);
    if (id == NULL && PyErr_Occurred()) return -1;
    /* (no arguments: _call counts "" for them; left to it) */
    if (!PyUnicode_CheckExact(name) || args == NULL || !PyUnicode_CheckExact(args)) return 0;
    if (id != NULL && PyUnicode_Check(id) && !PyUnicode_CheckExact(id)) return 0;
    PyObject *texts[3] = {name, args, (id != NULL && PyUnicode_CheckExact(id)) ? id : NULL};
    long long sum = overhead;
    for (int k = 0; k < 3; k++) {
        if (texts[k] == NULL) continue; /* (no id) */
        long long n = 0;
        int held = cached_count(texts[k], cache, shift, &n);
        if (held <= 0) return held;
        sum += n;
        (*hits)++;
    }
    *total += sum;
    return 1;
}

/* Tokens of a list of text content parts as MessageCounter._parts counts it (the run of
 * texts each on its own, or joined, whichever is more; ``text_parts``: part type -> the
 * key of its text), from the cache: 1 (*total increased), 0 (another part, or a text not
 * held: the caller counts in Python), -1 with an exception set. */
static int parts_total(PyObject *parts, PyObject *text_parts, PyObject *cache, int shift,
                       long long *total, Py_ssize_t *hits) {
    static PyObject *type_key = NULL, *empty = NULL;
    if (type_key == NULL) {
        type_key = PyUnicode_InternFromString("type");
        empty = PyUnicode_FromString("");
        if (type_key == NULL || empty == NULL) return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(parts);
    PyObject *texts = PyList_New(n);
    if (texts == NULL) return -1;
    long long each = 0;
    int result = 1;
    for (Py_ssize_t i = 0; i < n && result == 1; i++) {
        PyObject *part = PyList_GET_ITEM(parts, i);
        if (!PyDict_CheckExact(part)) { result = 0; break; }
        PyObject *ptype = PyDict_GetItemWithError(part, type_key);
        if (ptype == NULL) { result = PyErr_Occurred() ? -1 : 0; break; }
        if (!PyUnicode_CheckExact(ptype)) { result = 0; break; }
        PyObject *field = PyDict_GetItemWithError(text_parts, ptype);
        if (field == NULL) { result = PyErr_Occurred() ? -1 : 0; break; }
        PyObject *value = PyDict_GetItemWithError(part, field);
        if (value == NULL) { result = PyErr_Occurred() ? -1 : 0; break; }
        if (!PyUnicode_CheckExact(value)) { result = 0; break; }
        long long count = 0;
        result = cached_count(value, cache, shift, &count);
        each += count;
        (*hits)++;
        Py_INCREF(value);
        PyList_SET_ITEM(texts, i, value);
    }
    if (result == 1 && n > 1) { /* a conversion joins them: the join may cost more */
        PyObject *joined = PyUnicode_Join(empty, texts);
        if (joined == NULL) {
            result = -1;
        } else {
            long long count = 0;
            result = cached_count(joined, cache, shift, &count);
            Py_DECREF(joined);
            if (count > each) each = count;
            (*hits)++;
        }
    }
    Py_DECREF(texts); /* (unset items of a list cut short are NULL: fine to free) */
    if (result == 1) *total += each;
    return result;
}

/* message_total(msg, roles, per_message, per_name, tool_result, tool_call, cache, shift)
 *     -> (int, int) | None: EnvelopeCounter._message's count of one chat message (a dict,
 * or a dict subclass such as a converted request's unit) and how many texts it looked up,
 * when every text it counts is in ``cache`` (as plain_total reads it) and the message is
 * of the shapes read here: a role of ``roles``, content a str or a list of text parts
 * (``text_parts``: part type -> the key of its text; or None on an assistant message
 * with tool calls), tool calls of exact dicts with str names and arguments, other fields
 * str, None or empty. None otherwise: the caller counts it in Python (which also raises
 * for a malformed message). */
static PyObject *fastcut_message_total(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "message_total(msg, roles, text_parts, per_message, "
                                         "per_name, tool_result, tool_call, cache, shift)");
        return NULL;
    }
    PyObject *m = args[0], *roles = args[1], *text_parts = args[2], *cache = args[7];
    if (!PyAnySet_Check(roles) || !PyDict_CheckExact(text_parts) || !PyDict_CheckExact(cache)) {
        PyErr_SetString(PyExc_TypeError, "message_total takes a set of roles and two dicts");
        return NULL;
    }
    long long per_message = PyLong_AsLongLong(args[3]);
    long long per_name = PyLong_AsLongLong(args[4]);
    long long tool_result = PyLong_AsLongLong(args[5]);
    long long tool_call = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    int shift = read_shift(args[8]);
    if (shift < 0) return NULL;
    if (!PyDict_Check(m)) Py_RETURN_NONE;
    if (role_key == NULL) {
        role_key = PyUnicode_InternFromString("role");
        content_key = PyUnicode_InternFromString("content");
        if (role_key == NULL || content_key == NULL) return NULL;
    }
    if (message_keys() < 0) return NULL;
    PyObject *role = PyDict_GetItemWithError(m, role_key);
    if (role == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (!PyUnicode_CheckExact(role)) Py_RETURN_NONE;
    int known = PySet_Contains(roles, role);
    if (known < 0) return NULL;
    if (!known) Py_RETURN_NONE;
    PyObject *content = PyDict_GetItemWithError(m, content_key);
    if (content == NULL && PyErr_Occurred()) return NULL;
    if (content == NULL || content == Py_None) { /* only an assistant's tool calls may go without */
        if (!same(role, assistant_value)) Py_RETURN_NONE;
        int calls = truthy_item(m, tool_calls_key);
        if (calls < 0) return NULL;
        int legacy = calls ? 0 : truthy_item(m, function_call_key);
        if (legacy < 0) return NULL;
        if (!calls && !legacy) Py_RETURN_NONE;
    } else if (!PyUnicode_CheckExact(content) && !PyList_Check(content)) {
        Py_RETURN_NONE; /* a str subclass, or what the check refuses: read in Python */
    }
    long long total = per_message;
    Py_ssize_t hits = 0, pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(m, &pos, &key, &value)) {
        if (value == Py_None) continue;
        if (!PyUnicode_CheckExact(key)) Py_RETURN_NONE;
        if (PyList_Check(value) && same(key, content_key)) {
            int done = parts_total(value, text_parts, cache, shift, &total, &hits);
            if (done < 0) return NULL;
            if (!done) Py_RETURN_NONE;
        } else if (same(key, tool_calls_key)) {
            if (!PyList_CheckExact(value)) Py_RETURN_NONE;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++) {
                int done = call_total(PyList_GET_ITEM(value, i), cache, shift, tool_call, &total, &hits);
                if (done < 0) return NULL;
                if (!done) Py_RETURN_NONE;
            }
        } else if (same(key, function_call_key)) {
            Py_RETURN_NONE;
        } else if (PyUnicode_CheckExact(value)) {
            long long n = 0;
            int held = cached_count(value, cache, shift, &n);
            if (held < 0) return NULL;
            if (!held) Py_RETURN_NONE;
            total += n + (same(key, name_key) ? per_name : 0);
            hits++;
        } else if ((PyList_Check(value) && PyList_GET_SIZE(value) == 0) ||
                   (PyTuple_Check(value) && PyTuple_GET_SIZE(value) == 0) ||
                   (PyDict_Check(value) && PyDict_GET_SIZE(value) == 0)) {
            continue;
        } else {
            Py_RETURN_NONE; /* a structured field (its JSON), a number, a str subclass */
        }
    }
    if (same(role, tool_value) || same(role, function_key)) total += tool_result;
    return Py_BuildValue("(Ln)", total, hits);
}

static int read_shift(PyObject *arg) {
    int shift = (int)PyLong_AsLong(arg);
    if (shift == -1 && PyErr_Occurred()) return -1;
    if (shift <= 0 || shift >= 62) {
        PyErr_SetString(PyExc_ValueError, "shift must be in 1..61");
        return -1;
    }
    return shift;
}

/* plain_total(messages, envelopes, cache, shift) -> (int, list[int]) | None: for a list of
 * {"role": str, "content": str} dicts whose roles are keys of ``envelopes`` (role ->
 * tokens), the envelopes plus the cached counts of the contents (``cache``: hash(text) ->
 * count | len << shift, CountCache's newer half), and the indices whose content is not cached
 * with its length (the caller counts those); None where a message has another shape. */
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
    int shift = read_shift(args[3]);
    if (shift < 0) return NULL;
    long long total = 0;
    PyObject *misses = PyList_New(0);
    if (misses == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(messages);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long envelope = 0, count = 0;
        int kind = plain_message(PyList_GET_ITEM(messages, i), envelopes, cache, shift, &envelope, &count);
        if (kind < 0) goto fail;
        if (kind == PLAIN_OTHER) {
            Py_DECREF(misses);
            Py_RETURN_NONE;
        }
        total += envelope + count;
        if (kind == PLAIN_MISSED) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL) goto fail;
            int bad = PyList_Append(misses, index);
            Py_DECREF(index);
            if (bad < 0) goto fail;
        }
    }
    return Py_BuildValue("(LN)", total, misses);
fail:
    Py_DECREF(misses);
    return NULL;
}

/* plain_run(messages, hi, lo, envelopes, cache, shift, total, bound, limit)
 *     -> (list[int], int): messages[hi-1], messages[hi-2], ... down to messages[lo],
 * counted while each is a plain message whose content is cached (as plain_total reads
 * them): their counts, newest first, and ``total`` plus their sum. Stops before the first
 * message that is not (the caller counts it), and after the one that takes the sum past
 * ``bound`` or makes ``limit`` counts. */
static PyObject *fastcut_plain_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "plain_run(messages, hi, lo, envelopes, cache, shift, total, bound, limit)");
        return NULL;
    }
    PyObject *messages = args[0], *envelopes = args[3], *cache = args[4];
    if (!PyList_CheckExact(messages) || !PyDict_CheckExact(envelopes) || !PyDict_CheckExact(cache)) {
        PyErr_SetString(PyExc_TypeError, "plain_run takes a list and two dicts");
        return NULL;
    }
    Py_ssize_t hi = PyLong_AsSsize_t(args[1]);
    if (hi == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t lo = PyLong_AsSsize_t(args[2]);
    if (lo == -1 && PyErr_Occurred()) return NULL;
    int shift = read_shift(args[5]);
    if (shift < 0) return NULL;
    long long total = PyLong_AsLongLong(args[6]);
    if (total == -1 && PyErr_Occurred()) return NULL;
    long long bound = PyLong_AsLongLong(args[7]);
    if (bound == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t limit = PyLong_AsSsize_t(args[8]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (hi > PyList_GET_SIZE(messages)) hi = PyList_GET_SIZE(messages);
    if (lo < 0) lo = 0;
    PyObject *counts = PyList_New(0);
    if (counts == NULL) return NULL;
    for (Py_ssize_t i = hi - 1; i >= lo && PyList_GET_SIZE(counts) < limit; i--) {
        long long envelope = 0, count = 0;
        int kind = plain_message(PyList_GET_ITEM(messages, i), envelopes, cache, shift, &envelope, &count);
        if (kind < 0) goto fail;
        if (kind != PLAIN_COUNTED) break;
        PyObject *item = PyLong_FromLongLong(envelope + count);
        if (item == NULL) goto fail;
        int bad = PyList_Append(counts, item);
        Py_DECREF(item);
        if (bad < 0) goto fail;
        total += envelope + count;
        if (total > bound) break;
    }
    return Py_BuildValue("(NL)", counts, total);
fail:
    Py_DECREF(counts);
    return NULL;
}

/* plain_until(messages, lo, hi, roles) -> int: the index of the first message of
 * messages[lo:hi] that is not a {"role": str, "content": str} dict (exactly) whose role is
 * a key of ``roles``; hi when every one is. */
static PyObject *fastcut_plain_until(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "plain_until(messages, lo, hi, roles)");
        return NULL;
    }
    PyObject *messages = args[0], *roles = args[3];
    if (!PyList_CheckExact(messages) || !PyDict_CheckExact(roles)) {
        PyErr_SetString(PyExc_TypeError, "plain_until takes a list and a dict");
        return NULL;
    }
    Py_ssize_t lo = PyLong_AsSsize_t(args[1]);
    if (lo == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t hi = PyLong_AsSsize_t(args[2]);
    if (hi == -1 && PyErr_Occurred()) return NULL;
    if (lo < 0) lo = 0;
    Py_ssize_t i = lo;
    /* the list's length is read on every step: nothing here runs Python code, but the
     * list is the caller's */
    for (; i < hi && i < PyList_GET_SIZE(messages); i++) {
        PyObject *value = NULL, *content = NULL;
        int shape = plain_shape(PyList_GET_ITEM(messages, i), roles, &value, &content);
        if (shape < 0) return NULL;
        if (shape == 0) break;
    }
    return PyLong_FromSsize_t(i < hi ? i : hi);
}

/* is_json(value) -> bool: whether value is plain JSON data as it stands (exact dicts with
 * str keys, exact lists, and exact str, int, float, bool or None; at most 64 levels below
 * the value), read as tokenflex.message.objects.is_json reads it, without running any
 * Python code. */
static int json_atom(PyObject *v) {
    return PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
           PyBool_Check(v) || v == Py_None;
}

static int json_walk(PyObject *v, int depth) {
    if (json_atom(v)) return 1;
    if (depth > 64) return 0;
    if (PyDict_CheckExact(v)) {
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(v, &pos, &key, &item)) {
            if (!PyUnicode_CheckExact(key)) return 0;
        }
        pos = 0;
        while (PyDict_Next(v, &pos, &key, &item)) {
            if (!json_atom(item) && !json_walk(item, depth + 1)) return 0;
        }
        return 1;
    }
    if (PyList_CheckExact(v)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
            PyObject *item = PyList_GET_ITEM(v, i);
            if (!json_atom(item) && !json_walk(item, depth + 1)) return 0;
        }
        return 1;
    }
    return 0;
}

static PyObject *fastcut_is_json(PyObject *self, PyObject *value) {
    return PyBool_FromLong(json_walk(value, 0));
}

/* json_scan(value, limit, wide) -> int: what the proxy's depth walk of a parsed body finds
 * (tokenflex.server._validate.read_walk, level by level): 2 when a float of abs() >= wide
 * sits within limit + 1 levels (the value itself is level 1), else 1 when containers nest
 * more than limit levels, else 0. Exact dicts, lists and floats only, as orjson makes
 * them; no Python code runs. */
typedef struct {
    Py_ssize_t limit;
    double wide;
    Py_ssize_t wide_level; /* the shallowest wide float's level (limit + 2: none) */
    int too_deep;
} json_scan_state;

static void json_scan_walk(PyObject *v, Py_ssize_t level, json_scan_state *st) {
    if (PyFloat_CheckExact(v)) {
        if (fabs(PyFloat_AS_DOUBLE(v)) >= st->wide && level < st->wide_level)
            st->wide_level = level;
        return;
    }
    int is_dict = PyDict_CheckExact(v);
    if (!is_dict && !PyList_CheckExact(v)) return;
    if (level > st->limit) {
        st->too_deep = 1; /* (floats below it are past limit + 1: they do not count) */
        return;
    }
    if (is_dict) {
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(v, &pos, &key, &item)) json_scan_walk(item, level + 1, st);
    } else {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++)
            json_scan_walk(PyList_GET_ITEM(v, i), level + 1, st);
    }
}

static PyObject *fastcut_json_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "json_scan(value, limit, wide)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    double wide = PyFloat_AsDouble(args[2]);
    if (wide == -1.0 && PyErr_Occurred()) return NULL;
    if (limit < 0 || limit > 4096) { /* (the walk recurses once a level) */
        PyErr_SetString(PyExc_ValueError, "json_scan: limit out of range");
        return NULL;
    }
    json_scan_state st = {limit, wide, limit + 2, 0};
    json_scan_walk(args[0], 1, &st);
    return PyLong_FromLong(st.wide_level <= limit + 1 ? 2 : st.too_deep ? 1 : 0);
}

/* A JSON body's outline, read by its structure only (strings by their quotes and
 * escapes, arrays and objects by their brackets, scalars up to the next delimiter): what
 * lets the proxy parse only the part of a request body that a previous body did not
 * have. The outline is exact for valid JSON; whatever it reads in a body that is not
 * valid is parsed by orjson afterwards (tokenflex.server._validate.ParsedBodies), which
 * refuses it. */
static inline int js_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static Py_ssize_t js_skip_ws(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
    while (i < n && js_ws(s[i])) i++;
    return i;
}

/* s[i] == '"': the offset past the string's closing quote; -1 when it has none. */
static Py_ssize_t js_string_end(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
    Py_ssize_t from = i + 1;
    while (from < n) {
        const unsigned char *q = memchr(s + from, '"', (size_t)(n - from));
        if (q == NULL) return -1;
        Py_ssize_t k = q - s, b = k;
        while (b > from && s[b - 1] == '\\') b--; /* (a quote ends the run: it is no '\\') */
        if (((k - b) & 1) == 0) return k + 1;
        from = k + 1;
    }
    return -1;
}

/* The offset past the value that starts at s[i] (not whitespace); -1 when it does not
 * end within n. */
static Py_ssize_t js_value_end(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
    unsigned char c = s[i];
    if (c == '"') return js_string_end(s, i, n);
    if (c == '{' || c == '[') {
        Py_ssize_t depth = 0;
        while (i < n) {
            c = s[i];
            if (c == '"') {
                i = js_string_end(s, i, n);
                if (i < 0) return -1;
                continue;
            }
            if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (--depth == 0) return i + 1;
            }
            i++;
        }
        return -1;
    }
    while (i < n && !js_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']') i++;
    return i;
}

/* json_outline(raw, key, at, resume, count) -> (members, open, close, ends) | None: the
 * top-level object of raw: its number of members, where the array of the member whose
 * key is written as key (bytes, without quotes) opens and closes, and where each of its
 * elements ends. at >= 0: the array must open there; resume > 0 (with at): raw[at:resume]
 * is known to hold count elements and their commas (a body read before had the same
 * bytes), and the elements are read from resume on (ends lists those). None when raw is
 * not an object holding such an array once, or ends before its close. */
static PyObject *fastcut_json_outline(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "json_outline(raw: bytes, key: bytes, at, resume, count)");
        return NULL;
    }
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    const char *key = PyBytes_AS_STRING(args[1]);
    Py_ssize_t klen = PyBytes_GET_SIZE(args[1]);
    Py_ssize_t at = PyLong_AsSsize_t(args[2]);
    if (at == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t resume = PyLong_AsSsize_t(args[3]);
    if (resume == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[4]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    if (resume > 0 && (at < 0 || resume <= at || resume > n || count < 0)) Py_RETURN_NONE;
    Py_ssize_t i = js_skip_ws(s, 0, n), members = 0, open = -1, close = -1;
    PyObject *ends = NULL;
    if (i >= n || s[i] != '{') Py_RETURN_NONE;
    i = js_skip_ws(s, i + 1, n);
    if (i < n && s[i] == '}') {
        i++;
        goto trailer;
    }
    for (;;) {
        if (i >= n || s[i] != '"') goto none;
        Py_ssize_t kend = js_string_end(s, i, n);
        if (kend < 0) goto none;
        int is_key = kend - i - 2 == klen && memcmp(s + i + 1, key, (size_t)klen) == 0;
        i = js_skip_ws(s, kend, n);
        if (i >= n || s[i] != ':') goto none;
        i = js_skip_ws(s, i + 1, n);
        if (i >= n) goto none;
        members++;
        if (is_key) {
            if (open >= 0 || s[i] != '[' || (at >= 0 && i != at)) goto none;
            open = i;
            ends = PyList_New(0);
            if (ends == NULL) return NULL;
            Py_ssize_t p = i + 1;
            int first = 1;
            if (resume > 0) {
                p = resume;
                first = count == 0;
            }
            for (;;) {
                p = js_skip_ws(s, p, n);
                if (p >= n) goto none;
                if (s[p] == ']') {
                    close = p;
                    i = p + 1;
                    break;
                }
                if (!first) {
                    if (s[p] != ',') goto none;
                    p = js_skip_ws(s, p + 1, n);
                    if (p >= n) goto none;
                }
                Py_ssize_t e = js_value_end(s, p, n);
                if (e < 0) goto none;
                PyObject *end = PyLong_FromSsize_t(e);
                if (end == NULL || PyList_Append(ends, end) < 0) {
                    Py_XDECREF(end);
                    Py_DECREF(ends);
                    return NULL;
                }
                Py_DECREF(end);
                p = e;
                first = 0;
            }
        } else {
            i = js_value_end(s, i, n);
            if (i < 0) goto none;
        }
        i = js_skip_ws(s, i, n);
        if (i < n && s[i] == ',') {
            i = js_skip_ws(s, i + 1, n);
            continue;
        }
        if (i < n && s[i] == '}') {
            i++;
            break;
        }
        goto none;
    }
trailer:
    if (js_skip_ws(s, i, n) != n || open < 0) goto none;
    return Py_BuildValue("(nnnN)", members, open, close, ends);
none:
    Py_XDECREF(ends);
    Py_RETURN_NONE;
}

/* common_prefix(a, b) -> int: how many bytes a and b share from their start. */
static PyObject *fastcut_common_prefix(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "common_prefix(a: bytes, b: bytes)");
        return NULL;
    }
    const char *a = PyBytes_AS_STRING(args[0]), *b = PyBytes_AS_STRING(args[1]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]), m = PyBytes_GET_SIZE(args[1]), i = 0;
    if (m < n) n = m;
    while (i + 4096 <= n && memcmp(a + i, b + i, 4096) == 0) i += 4096;
    while (i < n && a[i] == b[i]) i++;
    return PyLong_FromSsize_t(i);
}

/* find_same(items, obj, lo) -> int: the first index from lo of the very object obj in the
 * list items (compared by identity, as `is`); -1 when it is not there. */
static PyObject *fastcut_find_same(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "find_same(items: list, obj, lo)");
        return NULL;
    }
    Py_ssize_t lo = PyLong_AsSsize_t(args[2]);
    if (lo == -1 && PyErr_Occurred()) return NULL;
    PyObject *items = args[0], *obj = args[1];
    for (Py_ssize_t i = lo < 0 ? 0 : lo; i < PyList_GET_SIZE(items); i++) {
        if (PyList_GET_ITEM(items, i) == obj) return PyLong_FromSsize_t(i);
    }
    return PyLong_FromLong(-1);
}

/* same_run(a, i, b, j) -> int: how many items from a[i] on are b[j] on, the very same
 * objects (lists; compared by identity). */
static PyObject *fastcut_same_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "same_run(a: list, i, b: list, j)");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t j = PyLong_AsSsize_t(args[3]);
    if (j == -1 && PyErr_Occurred()) return NULL;
    PyObject *a = args[0], *b = args[2];
    Py_ssize_t k = 0;
    if (i < 0 || j < 0) return PyLong_FromLong(0);
    while (i + k < PyList_GET_SIZE(a) && j + k < PyList_GET_SIZE(b) &&
           PyList_GET_ITEM(a, i + k) == PyList_GET_ITEM(b, j + k))
        k++;
    return PyLong_FromSsize_t(k);
}

static PyMethodDef methods[] = {
    {"find_same", (PyCFunction)(void (*)(void))fastcut_find_same, METH_FASTCALL,
     "find_same(items, obj, lo) -> int: the first index from lo of obj itself in the list\n"
     "(by identity); -1 when it is not there."},
    {"same_run", (PyCFunction)(void (*)(void))fastcut_same_run, METH_FASTCALL,
     "same_run(a, i, b, j) -> int: how many items from a[i] on are b[j] on (by identity)."},
    {"json_outline", (PyCFunction)(void (*)(void))fastcut_json_outline, METH_FASTCALL,
     "json_outline(raw, key, at, resume, count) -> (members, open, close, ends) | None: the\n"
     "top-level object's member count, and where the array under key opens, closes and\n"
     "ends each element, read by structure only (from resume on, when given)."},
    {"common_prefix", (PyCFunction)(void (*)(void))fastcut_common_prefix, METH_FASTCALL,
     "common_prefix(a, b) -> int: how many bytes a and b share from their start."},
    {"json_scan", (PyCFunction)(void (*)(void))fastcut_json_scan, METH_FASTCALL,
     "json_scan(value, limit, wide) -> int: 2 when a float of abs() >= wide sits within\n"
     "limit + 1 levels, else 1 when containers nest more than limit levels, else 0."},
    {"is_json", fastcut_is_json, METH_O,
     "is_json(value) -> bool: whether value is plain JSON data as it stands (exact dicts\n"
     "with str keys, lists and JSON scalars; at most 64 levels deep)."},
    {"count", count, METH_VARARGS,
     "count(text, table) -> (int, list[str]): how many pieces of the ASCII text are in the\n"
     "table, and the others in text order."},
    {"plain_total", (PyCFunction)(void (*)(void))fastcut_plain_total, METH_FASTCALL,
     "plain_total(messages, envelopes, cache, shift) -> (int, list[int]) | None: a plain\n"
     "chat history's envelopes and cached counts, and the indices not cached."},
    {"plain_run", (PyCFunction)(void (*)(void))fastcut_plain_run, METH_FASTCALL,
     "plain_run(messages, hi, lo, envelopes, cache, shift, total, bound, limit)\n"
     "-> (list[int], int): the plain messages' counts newest first from hi, while cached,\n"
     "and the running total; stops past bound or at limit counts."},
    {"message_total", (PyCFunction)(void (*)(void))fastcut_message_total, METH_FASTCALL,
     "message_total(msg, roles, text_parts, per_message, per_name, tool_result, tool_call,\n"
     "cache, shift)\n"
     "-> (int, int) | None: one chat message's envelope count from the cache, and the texts\n"
     "looked up; None for a shape or a text it does not read (count it in Python)."},
    {"plain_until", (PyCFunction)(void (*)(void))fastcut_plain_until, METH_FASTCALL,
     "plain_until(messages, lo, hi, roles) -> int: the first index from lo below hi whose\n"
     "message is not a plain {\"role\", \"content\"} dict with a role in roles (hi: none)."},
    {"split", split, METH_O,
     "split(text) -> list[str]: ASCII text cut as re.findall(_ASCII_PATTERN, text) cuts it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastcut", "The estimator's ASCII cut and the count cache's bulk look-up, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastcut(void) {
    init_kinds();
    return PyModule_Create(&module);
}
