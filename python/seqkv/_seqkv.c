/* seqkv._seqkv: the CPython extension over libseqkv (include/seqkv.h). The Python
 * package (seqkv/__init__.py) re-exports it and adds the pure-Python conveniences.
 *
 * READ ME FIRST
 * - Handles: Model, Context, Store own one library handle each; a Context or Store keeps
 *   its Model alive (a reference), and Model.close() refuses while one is open.
 * - The GIL is released around every call that can take long (prefill, decode, encoder
 *   append/finish, restores, every store call). A Context may be used by one thread at a
 *   time (the library's rule): a second thread's call while one runs raises seqkv.Error
 *   instead of racing. A Store may be shared by threads (the library keeps its messages per
 *   thread); close() waits for no one and refuses while a call is in flight.
 * - Arrays in: any buffer/array of the right dtype and C order is used in place
 *   (PyArray_FROMANY with NPY_ARRAY_IN_ARRAY copies only when it must). Arrays out are
 *   numpy arrays the library writes into directly.
 * - Errors: seqkv.Error and one subclass per status (status, status_name, message), the
 *   message being the library's per-handle text.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"

/* ---- errors ------------------------------------------------------------------------- */

static PyObject *Error;           /* seqkv.Error */
static PyObject *StatusError[9];  /* indexed by -status; [0] unused */

static const struct {
    const char *name, *doc;
    PyObject **base;
} error_rows[9] = {
    [1] = {"InvalidArgumentError", "SKV_ERR_INVALID_ARG: the caller passed something invalid", &PyExc_ValueError},
    [2] = {"NoMemoryError", "SKV_ERR_NOMEM: an allocation failed", &PyExc_MemoryError},
    [3] = {"IOError", "SKV_ERR_IO: open/read/write failed", &PyExc_OSError},
    [4] = {"FormatError", "SKV_ERR_FORMAT: malformed, truncated or corrupt input", &PyExc_ValueError},
    [5] = {"UnsupportedError", "SKV_ERR_UNSUPPORTED: well-formed but not supported", NULL},
    [6] = {"MismatchError", "SKV_ERR_MISMATCH: wrong model, digest or checksum mismatch", NULL},
    [7] = {"RangeError", "SKV_ERR_RANGE: a limit was exceeded", &PyExc_ValueError},
    [8] = {"InternalError", "SKV_ERR_INTERNAL: a bug in seqkv, please report it", NULL},
};

/* Raises the exception of status rc with msg (the library's message; "" -> its status text). */
static PyObject *raise_status(int rc, const char *msg)
{
    PyObject *cls = (rc < 0 && rc >= -8) ? StatusError[-rc] : Error;
    const char *text = msg && *msg ? msg : skv_status_str(rc);
    PyObject *exc = PyObject_CallFunction(cls, "s", text);
    if (!exc) return NULL;
    PyObject *st = PyLong_FromLong(rc), *nm = PyUnicode_FromString(skv_status_name(rc));
    PyObject *m = PyUnicode_FromString(text);
    if (st && nm && m && !PyObject_SetAttrString(exc, "status", st) && !PyObject_SetAttrString(exc, "status_name", nm) &&
        !PyObject_SetAttrString(exc, "message", m))
        PyErr_SetObject(cls, exc);
    Py_XDECREF(st);
    Py_XDECREF(nm);
    Py_XDECREF(m);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_plain(const char *msg) { return raise_status(SKV_ERR_INVALID_ARG, msg); }

/* ---- arrays --------------------------------------------------------------------------- */

/* obj as a 1-D C-contiguous int32 array (no copy when it already is one). */
static PyArrayObject *as_tokens(PyObject *obj)
{
    return (PyArrayObject *)PyArray_FROMANY(obj, NPY_INT32, 1, 1, NPY_ARRAY_IN_ARRAY);
}

static PyObject *hex16(const uint8_t *b, int n)
{
    char s[65];
    for (int i = 0; i < n && i < 32; i++) snprintf(s + 2 * i, 3, "%02x", b[i]);
    s[2 * (n < 32 ? n : 32)] = 0;
    return PyUnicode_FromString(s);
}

/* Adds key: value (stealing value) to d; returns -1 on failure. Not PyDict_SetItemString:
 * on CPython 3.11 its interning of the key grew a table on every call (found by
 * tests/test_python.py's leak case: ~24 bytes per call). */
static int put(PyObject *d, const char *key, PyObject *value)
{
    PyObject *k = PyUnicode_FromString(key);
    int rc = k && value ? PyDict_SetItem(d, k, value) : -1;
    Py_XDECREF(k);
    Py_XDECREF(value);
    return rc;
}

/* ---- Model ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    skv_model *m;
    int users; /* open Contexts and Stores made with it */
} ModelObject;

static PyTypeObject ModelType;

static int model_live(ModelObject *self)
{
    if (self->m) return 1;
    raise_plain("the model is closed");
    return 0;
}

static int Model_init(ModelObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"path", "tokenizer", NULL};
    PyObject *path = NULL, *tok = NULL, *pb = NULL, *tb = NULL;
    char err[512] = "";
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O&:Model", kws, PyUnicode_FSConverter, &path,
                                     PyUnicode_FSConverter, &tok))
        return -1;
    if (self->m) {
        Py_XDECREF(path);
        Py_XDECREF(tok);
        raise_plain("Model.__init__ called twice");
        return -1;
    }
    pb = path;
    tb = tok;
    Py_BEGIN_ALLOW_THREADS
    rc = skv_model_load(PyBytes_AS_STRING(pb), tb ? PyBytes_AS_STRING(tb) : NULL, &self->m, err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_DECREF(pb);
    Py_XDECREF(tb);
    if (rc) {
        raise_status(rc, err);
        return -1;
    }
    return 0;
}

static void Model_dealloc(ModelObject *self)
{
    skv_model_free(self->m); /* users hold references: none left when this runs */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Model_close(ModelObject *self, PyObject *unused)
{
    (void)unused;
    if (self->users) {
        char msg[128];
        snprintf(msg, sizeof msg, "the model is used by %d open Context/Store object(s): close them first", self->users);
        return raise_plain(msg);
    }
    skv_model_free(self->m);
    self->m = NULL;
    Py_RETURN_NONE;
}

static PyObject *enter_self(PyObject *self, PyObject *unused)
{
    (void)unused;
    Py_INCREF(self);
    return self;
}

static PyObject *Model_exit(ModelObject *self, PyObject *args)
{
    (void)args;
    return Model_close(self, NULL);
}

static PyObject *Model_info(ModelObject *self, void *closure)
{
    (void)closure;
    skv_model_info i;
    if (!model_live(self)) return NULL;
    skv_model_get_info(self->m, &i);
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    if (put(d, "arch", PyUnicode_FromString(i.arch)) || put(d, "name", PyUnicode_FromString(i.name)) ||
        put(d, "format", PyUnicode_FromString(i.format)) || put(d, "n_layer", PyLong_FromLong(i.n_layer)) ||
        put(d, "n_embd", PyLong_FromLong(i.n_embd)) || put(d, "n_head", PyLong_FromLong(i.n_head)) ||
        put(d, "n_head_kv", PyLong_FromLong(i.n_head_kv)) || put(d, "head_dim", PyLong_FromLong(i.head_dim)) ||
        put(d, "n_ff", PyLong_FromLong(i.n_ff)) || put(d, "n_vocab", PyLong_FromLong(i.n_vocab)) ||
        put(d, "n_ctx_train", PyLong_FromLong(i.n_ctx_train)) || put(d, "rope_dim", PyLong_FromLong(i.rope_dim)) ||
        put(d, "rope_base", PyFloat_FromDouble(i.rope_base)) || put(d, "norm_eps", PyFloat_FromDouble(i.norm_eps)) ||
        put(d, "weight_type", PyUnicode_FromString(skv_weight_type_name(i.weight_type))) ||
        put(d, "n_params", PyLong_FromLongLong(i.n_params)) ||
        put(d, "file_bytes", PyLong_FromUnsignedLongLong(i.file_bytes)) || put(d, "bos_id", PyLong_FromLong(i.bos_id)) ||
        put(d, "eos_id", PyLong_FromLong(i.eos_id)) || put(d, "add_bos", PyBool_FromLong(i.add_bos))) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *Model_fingerprint(ModelObject *self, PyObject *unused)
{
    (void)unused;
    uint8_t fp[16];
    int rc;
    if (!model_live(self)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = skv_model_fingerprint(self->m, fp);
    Py_END_ALLOW_THREADS
    if (rc) return raise_status(rc, "");
    return hex16(fp, 16);
}

static PyObject *Model_tokenize(ModelObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"text", "add_special", NULL};
    const char *text;
    Py_ssize_t len;
    int add = 1, rc;
    size_t n = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s#|p:tokenize", kws, &text, &len, &add) || !model_live(self))
        return NULL;
    size_t cap = (size_t)len + 8; /* a token covers at least one byte, plus BOS/EOS */
    int32_t *ids = PyMem_Malloc(cap * sizeof *ids);
    if (!ids) return PyErr_NoMemory();
    rc = skv_tokenize(self->m, text, (size_t)len, add, ids, cap, &n);
    if (rc) {
        PyMem_Free(ids);
        return raise_status(rc, "tokenize failed");
    }
    npy_intp dim = (npy_intp)n;
    PyObject *out = PyArray_SimpleNew(1, &dim, NPY_INT32);
    if (out) memcpy(PyArray_DATA((PyArrayObject *)out), ids, n * sizeof *ids);
    PyMem_Free(ids);
    return out;
}

static PyObject *Model_detokenize(ModelObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"tokens", "after_bos", NULL};
    PyObject *obj;
    int after = 0, rc;
    size_t len = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:detokenize", kws, &obj, &after) || !model_live(self)) return NULL;
    PyArrayObject *t = as_tokens(obj);
    if (!t) return NULL;
    const int32_t *ids = PyArray_DATA(t);
    size_t n = (size_t)PyArray_SIZE(t);
    int flags = after ? SKV_DETOK_AFTER_BOS : 0;
    rc = skv_detokenize(self->m, ids, n, flags, NULL, 0, &len);
    if (rc && rc != SKV_ERR_RANGE) {
        Py_DECREF(t);
        return raise_status(rc, "detokenize: a token id outside the vocabulary");
    }
    char *buf = PyMem_Malloc(len + 1);
    if (!buf) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    rc = skv_detokenize(self->m, ids, n, flags, buf, len + 1, &len);
    Py_DECREF(t);
    PyObject *s = rc ? raise_status(rc, "detokenize failed") : PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "replace");
    PyMem_Free(buf);
    return s;
}

static PyMethodDef Model_methods[] = {
    {"close", (PyCFunction)Model_close, METH_NOARGS, "Frees the model (refused while a Context or Store uses it)."},
    {"__enter__", enter_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Model_exit, METH_VARARGS, NULL},
    {"fingerprint", (PyCFunction)Model_fingerprint, METH_NOARGS,
     "The model's 128-bit fingerprint (hex): what .skv files and stores record."},
    {"tokenize", (PyCFunction)(void (*)(void))Model_tokenize, METH_VARARGS | METH_KEYWORDS,
     "tokenize(text, add_special=True) -> int32 array of token ids (BOS as the model says)."},
    {"detokenize", (PyCFunction)(void (*)(void))Model_detokenize, METH_VARARGS | METH_KEYWORDS,
     "detokenize(tokens, after_bos=False) -> str, as the seqkv CLI writes it."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Model_getset[] = {
    {"info", (getter)Model_info, NULL, "dict: architecture, geometry, vocabulary, ...", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ModelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "seqkv.Model",
    .tp_basicsize = sizeof(ModelObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Model(path, tokenizer=None): a loaded GGUF or llama2.c model (immutable, shareable by threads).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Model_init,
    .tp_dealloc = (destructor)Model_dealloc,
    .tp_methods = Model_methods,
    .tp_getset = Model_getset,
};

static ModelObject *as_model(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &ModelType)) {
        PyErr_SetString(PyExc_TypeError, "expected a seqkv.Model");
        return NULL;
    }
    return model_live((ModelObject *)o) ? (ModelObject *)o : NULL;
}

/* ---- Context -------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ModelObject *model;
    skv_ctx *c;
    int32_t *tok; /* the tokens of the cache's positions (-1 where unknown) */
    size_t cap;
    int busy;
} ContextObject;

static PyTypeObject ContextType;

/* Marks the context in use by this call (under the GIL): 0 and an exception if it cannot be. */
static int ctx_acquire(ContextObject *self)
{
    if (!self->c) {
        raise_plain("the context is closed");
        return 0;
    }
    if (self->busy) {
        raise_plain("the context is in use by another thread (a Context is used by one thread at a time)");
        return 0;
    }
    self->busy = 1;
    return 1;
}

static int ctx_alloc(ContextObject *self, ModelObject *m, skv_ctx *c)
{
    self->cap = (size_t)skv_ctx_n_ctx(c);
    self->tok = PyMem_Malloc(self->cap * sizeof *self->tok + 1);
    if (!self->tok) {
        skv_ctx_free(c);
        PyErr_NoMemory();
        return -1;
    }
    self->c = c;
    Py_INCREF(m);
    self->model = m;
    m->users++;
    return 0;
}

static int ctx_create(ModelObject *m, int n_ctx, int n_threads, const char *kv_quant, int kv_cache, skv_ctx **out)
{
    skv_ctx_params p = skv_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_threads = n_threads;
    p.kv_quant = kv_quant;
    p.kv_cache_type = kv_cache;
    int rc = skv_ctx_create(m->m, &p, out);
    if (rc) raise_status(rc, skv_model_last_error(m->m));
    return rc;
}

static int kv_cache_parse(const char *s, int *out)
{
    if (!s || !strcmp(s, "f32")) *out = SKV_KV_CACHE_F32;
    else if (!strcmp(s, "f16")) *out = SKV_KV_CACHE_F16;
    else {
        raise_plain("kv_cache must be 'f32' or 'f16'");
        return -1;
    }
    return 0;
}

static int Context_init(ContextObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"model", "n_ctx", "n_threads", "kv_quant", "kv_cache", NULL};
    PyObject *mo;
    int n_ctx = 0, n_threads = 1, kvc;
    const char *kvq = NULL, *cache = NULL;
    skv_ctx *c = NULL;
    ModelObject *m;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|iizz:Context", kws, &mo, &n_ctx, &n_threads, &kvq, &cache)) return -1;
    if (self->c) return raise_plain("Context.__init__ called twice"), -1;
    if (!(m = as_model(mo)) || kv_cache_parse(cache, &kvc) || ctx_create(m, n_ctx, n_threads, kvq, kvc, &c)) return -1;
    return ctx_alloc(self, m, c);
}

static void ctx_release(ContextObject *self)
{
    skv_ctx_free(self->c);
    self->c = NULL;
    PyMem_Free(self->tok);
    self->tok = NULL;
    if (self->model) self->model->users--;
    Py_CLEAR(self->model);
}

static void Context_dealloc(ContextObject *self)
{
    ctx_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Context_close(ContextObject *self, PyObject *unused)
{
    (void)unused;
    if (self->busy) return raise_plain("the context is in use by another thread");
    ctx_release(self);
    Py_RETURN_NONE;
}

static PyObject *Context_exit(ContextObject *self, PyObject *args)
{
    (void)args;
    return Context_close(self, NULL);
}

static int logits_mode(const char *s, int *mode)
{
    if (!s || !strcmp(s, "last")) *mode = SKV_LOGITS_LAST;
    else if (!strcmp(s, "none")) *mode = SKV_LOGITS_NONE;
    else if (!strcmp(s, "all")) *mode = SKV_LOGITS_ALL;
    else return raise_plain("logits must be 'last', 'all' or 'none'"), -1;
    return 0;
}

static PyObject *Context_prefill(ContextObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"tokens", "logits", NULL};
    PyObject *obj, *out = Py_None;
    const char *lg = NULL;
    int mode, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s:prefill", kws, &obj, &lg) || logits_mode(lg, &mode)) return NULL;
    PyArrayObject *t = as_tokens(obj);
    if (!t) return NULL;
    if (!ctx_acquire(self)) return Py_DECREF(t), NULL;
    size_t n = (size_t)PyArray_SIZE(t), pos = (size_t)skv_ctx_n_pos(self->c);
    skv_model_info mi;
    skv_model_get_info(self->model->m, &mi);
    npy_intp dims[2] = {(npy_intp)n, mi.n_vocab};
    float *lp = NULL;
    if (mode == SKV_LOGITS_ALL) out = PyArray_SimpleNew(2, dims, NPY_FLOAT32);
    else if (mode == SKV_LOGITS_LAST) out = PyArray_SimpleNew(1, dims + 1, NPY_FLOAT32);
    else Py_INCREF(out);
    if (!out) return self->busy = 0, Py_DECREF(t), NULL;
    if (out != Py_None) lp = PyArray_DATA((PyArrayObject *)out);
    const int32_t *ids = PyArray_DATA(t);
    Py_BEGIN_ALLOW_THREADS
    rc = skv_prefill(self->c, ids, n, n ? mode : SKV_LOGITS_NONE, lp);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (!rc && pos + n <= self->cap) memcpy(self->tok + pos, ids, n * sizeof *ids);
    Py_DECREF(t);
    if (rc) return Py_DECREF(out), raise_status(rc, skv_ctx_last_error(self->c));
    return out;
}

static PyObject *Context_decode(ContextObject *self, PyObject *args)
{
    int token, rc;
    if (!PyArg_ParseTuple(args, "i:decode", &token) || !ctx_acquire(self)) return NULL;
    skv_model_info mi;
    skv_model_get_info(self->model->m, &mi);
    npy_intp dim = mi.n_vocab;
    PyObject *out = PyArray_SimpleNew(1, &dim, NPY_FLOAT32);
    if (!out) return self->busy = 0, NULL;
    float *lp = PyArray_DATA((PyArrayObject *)out);
    int pos = skv_ctx_n_pos(self->c);
    Py_BEGIN_ALLOW_THREADS
    rc = skv_decode(self->c, token, lp);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc) return Py_DECREF(out), raise_status(rc, skv_ctx_last_error(self->c));
    self->tok[pos] = token;
    return out;
}

/* The KV geometry of the context's model as dims[0..5) for n positions. */
static void kv_dims(const ContextObject *self, int n, npy_intp dims[5])
{
    skv_model_info mi;
    skv_model_get_info(self->model->m, &mi);
    dims[0] = mi.n_layer;
    dims[1] = 2;
    dims[2] = mi.n_head_kv;
    dims[3] = n;
    dims[4] = mi.head_dim;
}

static PyObject *Context_kv(ContextObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"pos0", "n", NULL};
    int pos0 = 0, n = -1, rc;
    npy_intp dims[5];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ii:kv", kws, &pos0, &n) || !ctx_acquire(self)) return NULL;
    if (n < 0) n = skv_ctx_n_pos(self->c) - pos0;
    if (pos0 < 0 || n < 0 || (long long)pos0 + n > skv_ctx_n_pos(self->c)) {
        self->busy = 0;
        return raise_status(SKV_ERR_RANGE, "kv: positions outside the cache");
    }
    kv_dims(self, n, dims);
    PyObject *out = PyArray_SimpleNew(5, dims, NPY_FLOAT32);
    if (!out) return self->busy = 0, NULL;
    rc = n ? skv_ctx_kv_read(self->c, pos0, n, PyArray_DATA((PyArrayObject *)out)) : SKV_OK;
    self->busy = 0;
    if (rc) return Py_DECREF(out), raise_status(rc, "kv: cannot read the cache");
    return out;
}

static PyObject *Context_kv_write(ContextObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"kv", "pos0", "tokens", NULL};
    PyObject *obj, *tobj = Py_None;
    int pos0 = 0, rc;
    npy_intp dims[5];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|iO:kv_write", kws, &obj, &pos0, &tobj)) return NULL;
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(obj, NPY_FLOAT32, 0, 0, NPY_ARRAY_IN_ARRAY), *t = NULL;
    if (!a) return NULL;
    if (PyArray_NDIM(a) != 5) {
        Py_DECREF(a);
        return raise_status(SKV_ERR_INVALID_ARG, "kv_write: the array must be [n_layer, 2, n_head_kv, n, head_dim]");
    }
    if (tobj != Py_None && !(t = as_tokens(tobj))) return Py_DECREF(a), NULL;
    if (!ctx_acquire(self)) return Py_DECREF(a), Py_XDECREF(t), NULL;
    npy_intp *sh = PyArray_DIMS(a);
    kv_dims(self, (int)sh[3], dims);
    int n = (int)sh[3];
    if (memcmp(sh, dims, sizeof dims) || (t && PyArray_SIZE(t) != sh[3]) || pos0 < 0 ||
        (size_t)pos0 + (size_t)n > self->cap) {
        self->busy = 0;
        Py_DECREF(a);
        Py_XDECREF(t);
        return raise_status(SKV_ERR_INVALID_ARG, "kv_write: the array must be [n_layer, 2, n_head_kv, n, head_dim] "
                                                 "of this model, tokens (if given) n ids, pos0 + n within the context");
    }
    const float *src = PyArray_DATA(a);
    Py_BEGIN_ALLOW_THREADS
    rc = skv_ctx_kv_write(self->c, pos0, n, src);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (!rc)
        for (int i = 0; i < n; i++) self->tok[pos0 + i] = t ? ((const int32_t *)PyArray_DATA(t))[i] : -1;
    Py_DECREF(a);
    Py_XDECREF(t);
    if (rc) return raise_status(rc, skv_ctx_last_error(self->c));
    Py_RETURN_NONE;
}

static PyObject *Context_truncate(ContextObject *self, PyObject *args)
{
    int n, rc;
    if (!PyArg_ParseTuple(args, "i:truncate", &n) || !ctx_acquire(self)) return NULL;
    rc = skv_ctx_truncate(self->c, n);
    self->busy = 0;
    if (rc) return raise_status(rc, skv_ctx_last_error(self->c));
    Py_RETURN_NONE;
}

static PyObject *Context_digest(ContextObject *self, PyObject *args)
{
    int n = -1, rc;
    uint8_t d[16];
    if (!PyArg_ParseTuple(args, "|i:digest", &n) || !ctx_acquire(self)) return NULL;
    if (n < 0) n = skv_ctx_n_pos(self->c);
    rc = skv_ctx_kv_digest(self->c, n, d);
    self->busy = 0;
    if (rc) return raise_status(rc, "digest: n beyond the cache");
    return hex16(d, 16);
}

static PyObject *Context_kv_dump(ContextObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"path", "f16", NULL};
    PyObject *path;
    int f16 = 0, rc;
    char err[512] = "";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|p:kv_dump", kws, PyUnicode_FSConverter, &path, &f16)) return NULL;
    if (!ctx_acquire(self)) return Py_DECREF(path), NULL;
    size_t n = (size_t)skv_ctx_n_pos(self->c);
    Py_BEGIN_ALLOW_THREADS
    rc = skv_kvdump_write(self->c, self->tok, n, f16 ? SKV_KVDUMP_F16 : SKV_KVDUMP_F32, PyBytes_AS_STRING(path), err,
                          sizeof err);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    Py_DECREF(path);
    if (rc) return raise_status(rc, err);
    Py_RETURN_NONE;
}

static PyObject *Context_n_pos(ContextObject *self, void *closure)
{
    (void)closure;
    return self->c ? PyLong_FromLong(skv_ctx_n_pos(self->c)) : raise_plain("the context is closed");
}

static PyObject *Context_n_ctx(ContextObject *self, void *closure)
{
    (void)closure;
    return self->c ? PyLong_FromLong(skv_ctx_n_ctx(self->c)) : raise_plain("the context is closed");
}

static PyObject *Context_tokens(ContextObject *self, void *closure)
{
    (void)closure;
    if (!self->c) return raise_plain("the context is closed");
    npy_intp n = skv_ctx_n_pos(self->c);
    PyObject *out = PyArray_SimpleNew(1, &n, NPY_INT32);
    if (out) memcpy(PyArray_DATA((PyArrayObject *)out), self->tok, (size_t)n * sizeof(int32_t));
    return out;
}

static PyObject *Context_model(ContextObject *self, void *closure)
{
    (void)closure;
    if (!self->model) return raise_plain("the context is closed");
    Py_INCREF(self->model);
    return (PyObject *)self->model;
}

static PyMethodDef Context_methods[] = {
    {"close", (PyCFunction)Context_close, METH_NOARGS, "Frees the KV cache."},
    {"__enter__", enter_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Context_exit, METH_VARARGS, NULL},
    {"prefill", (PyCFunction)(void (*)(void))Context_prefill, METH_VARARGS | METH_KEYWORDS,
     "prefill(tokens, logits='last') -> logits: runs the tokens as one batch, appending them to the cache. "
     "logits 'last' -> float32 [n_vocab], 'all' -> [n, n_vocab], 'none' -> None. Releases the GIL."},
    {"decode", (PyCFunction)Context_decode, METH_VARARGS,
     "decode(token) -> float32 [n_vocab]: appends one token, returns the next-token logits. Releases the GIL."},
    {"kv", (PyCFunction)(void (*)(void))Context_kv, METH_VARARGS | METH_KEYWORDS,
     "kv(pos0=0, n=None) -> float32 [n_layer, 2, n_head_kv, n, head_dim]: the cache (K after RoPE, V)."},
    {"kv_write", (PyCFunction)(void (*)(void))Context_kv_write, METH_VARARGS | METH_KEYWORDS,
     "kv_write(kv, pos0=0, tokens=None): loads positions [pos0, pos0+n) from a [n_layer, 2, n_head_kv, n, "
     "head_dim] array; later positions are dropped."},
    {"truncate", (PyCFunction)Context_truncate, METH_VARARGS, "truncate(n): drops positions >= n."},
    {"digest", (PyCFunction)Context_digest, METH_VARARGS, "digest(n=None) -> hex XXH3-128 of the first n positions."},
    {"kv_dump", (PyCFunction)(void (*)(void))Context_kv_dump, METH_VARARGS | METH_KEYWORDS,
     "kv_dump(path, f16=False): writes the cache as a raw KV dump (docs/kvdump.md), like `seqkv kv-dump`."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Context_getset[] = {
    {"n_pos", (getter)Context_n_pos, NULL, "positions in the cache", NULL},
    {"n_ctx", (getter)Context_n_ctx, NULL, "capacity in positions", NULL},
    {"tokens", (getter)Context_tokens, NULL, "int32 array: the token of each cached position (-1: unknown)", NULL},
    {"model", (getter)Context_model, NULL, "the Model", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ContextType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "seqkv.Context",
    .tp_basicsize = sizeof(ContextObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Context(model, n_ctx=0, n_threads=1, kv_quant=None, kv_cache='f32'): one KV cache, used by one "
              "thread at a time.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Context_init,
    .tp_dealloc = (destructor)Context_dealloc,
    .tp_methods = Context_methods,
    .tp_getset = Context_getset,
};

/* A new Context object around c (made for m); NULL with an exception (c freed). */
static ContextObject *ctx_wrap(ModelObject *m, skv_ctx *c)
{
    ContextObject *o = PyObject_New(ContextObject, &ContextType);
    if (!o) return skv_ctx_free(c), NULL;
    o->model = NULL;
    o->c = NULL;
    o->tok = NULL;
    o->busy = 0;
    if (ctx_alloc(o, m, c)) return Py_DECREF(o), NULL;
    return o;
}

/* ---- sessions: compress / restore / inspect -------------------------------------------- */

static PyObject *py_compress(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"model", "tokens", "codec", "n_ctx", "n_threads", "segment", "kv_quant", "dictionary",
                          "kv_cache", NULL};
    PyObject *mo, *tobj, *dobj = Py_None;
    const char *codec = "model", *kvq = NULL, *cache = NULL;
    int n_ctx = 0, n_threads = 1, seg = 0, rc, kvc;
    char err[512] = "";
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|siipzOz:compress", kws, &mo, &tobj, &codec, &n_ctx, &n_threads,
                                     &seg, &kvq, &dobj, &cache))
        return NULL;
    ModelObject *m = as_model(mo);
    if (!m || kv_cache_parse(cache, &kvc)) return NULL;
    int id = skv_codec_parse(codec);
    if (id < 0) return raise_status(SKV_ERR_INVALID_ARG, "unknown codec (seqkv.codecs() lists them)");
    PyArrayObject *t = as_tokens(tobj), *d = NULL;
    if (!t) return NULL;
    if (dobj != Py_None && !(d = as_tokens(dobj))) return Py_DECREF(t), NULL;
    skv_encoder_params p = skv_encoder_default_params();
    p.codec = id;
    p.n_ctx = n_ctx;
    p.n_threads = n_threads;
    p.segment = seg;
    p.kv_quant = kvq;
    p.kv_cache_type = kvc;
    p.cm_dict = d ? PyArray_DATA(d) : NULL;
    p.n_cm_dict = d ? (size_t)PyArray_SIZE(d) : 0;
    skv_encoder *e = NULL;
    uint8_t *data = NULL;
    size_t size = 0;
    const int32_t *ids = PyArray_DATA(t);
    size_t n = (size_t)PyArray_SIZE(t);
    Py_BEGIN_ALLOW_THREADS
    rc = skv_encoder_create(m->m, &p, &e, err, sizeof err);
    if (!rc && (rc = skv_encoder_append(e, ids, n, NULL)) == SKV_OK) rc = skv_encoder_finish(e, &data, &size);
    if (rc && e) snprintf(err, sizeof err, "%s", skv_encoder_last_error(e));
    skv_encoder_free(e);
    Py_END_ALLOW_THREADS
    Py_DECREF(t);
    Py_XDECREF(d);
    if (rc) return raise_status(rc, err);
    PyObject *out = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)size);
    free(data);
    return out;
}

static int session_open(Py_buffer *b, skv_session **s)
{
    char err[512] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = skv_session_open(b->buf, (size_t)b->len, s, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) raise_status(rc, err);
    return rc;
}

/* The segment index asked for (negative from the end) checked against n. */
static int pick_segment(int seg, uint32_t n, uint32_t *out)
{
    long i = seg < 0 ? (long)n + seg : seg;
    if (i < 0 || i >= (long)n) return raise_status(SKV_ERR_RANGE, "no such segment"), -1;
    *out = (uint32_t)i;
    return 0;
}

static PyObject *py_restore(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"model", "data", "verify", "segment", "n_threads", "dictionary", NULL};
    PyObject *mo, *dobj = Py_None;
    Py_buffer b;
    int verify = 1, seg = -1, n_threads = 1, rc;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oy*|piiO:restore", kws, &mo, &b, &verify, &seg, &n_threads, &dobj))
        return NULL;
    ModelObject *m = as_model(mo);
    PyArrayObject *d = NULL;
    skv_session *s = NULL;
    skv_session_info si;
    skv_ctx *c = NULL;
    ContextObject *o = NULL;
    uint32_t i;
    if (!m || (dobj != Py_None && !(d = as_tokens(dobj))) || session_open(&b, &s)) goto done;
    skv_session_get_info(s, &si);
    if (pick_segment(seg, si.n_segments, &i) || ctx_create(m, (int)si.n_ctx, n_threads, NULL, si.kv_cache_type, &c))
        goto done;
    if (!(o = ctx_wrap(m, c))) goto done;
    skv_restore_params rp = {.verify = verify};
    rp.cm_dict = d ? PyArray_DATA(d) : NULL;
    rp.n_cm_dict = d ? (size_t)PyArray_SIZE(d) : 0;
    o->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = skv_session_restore_segment(s, m->m, i, o->c, &rp, o->tok, o->cap);
    Py_END_ALLOW_THREADS
    o->busy = 0;
    if (rc) {
        raise_status(rc, skv_ctx_last_error(o->c));
        Py_CLEAR(o);
    }
done:
    skv_session_free(s);
    Py_XDECREF(d);
    PyBuffer_Release(&b);
    return (PyObject *)o;
}

static PyObject *py_restore_kv(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"data", "segment", "verify", NULL};
    Py_buffer b;
    int seg = -1, verify = 1, rc;
    skv_session *s = NULL;
    skv_session_info si;
    skv_session_kv_info ki;
    uint32_t i, nt = 0;
    PyObject *kv = NULL, *tok = NULL, *res = NULL;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|ip:restore_kv", kws, &b, &seg, &verify)) return NULL;
    if (session_open(&b, &s)) goto done;
    skv_session_get_info(s, &si);
    if (pick_segment(seg, si.n_segments, &i)) goto done;
    if ((rc = skv_session_segment_kv_info(s, i, &ki)) ||
        (rc = skv_session_segment_info(s, i, &nt, NULL, NULL))) {
        raise_status(rc, skv_session_last_error(s));
        goto done;
    }
    npy_intp dims[5] = {ki.n_layer, 2, ki.n_head_kv, nt, ki.head_dim}, nd = nt;
    if (!(kv = PyArray_SimpleNew(5, dims, NPY_FLOAT32)) || !(tok = PyArray_SimpleNew(1, &nd, NPY_INT32))) goto done;
    float *kp = PyArray_DATA((PyArrayObject *)kv);
    int32_t *tp = PyArray_DATA((PyArrayObject *)tok);
    size_t cap = (size_t)PyArray_SIZE((PyArrayObject *)kv);
    Py_BEGIN_ALLOW_THREADS
    rc = skv_session_restore_kv(s, i, kp, cap, tp, nt, verify);
    Py_END_ALLOW_THREADS
    if (rc) raise_status(rc, skv_session_last_error(s));
    else res = PyTuple_Pack(2, kv, tok);
done:
    Py_XDECREF(kv);
    Py_XDECREF(tok);
    skv_session_free(s);
    PyBuffer_Release(&b);
    return res;
}

static PyObject *segment_dict(const skv_session *s, uint32_t i, int codec)
{
    uint32_t nt = 0, nids = 0;
    uint64_t pb = 0, did = 0;
    uint8_t dg[16];
    skv_session_kv_info ki;
    if (skv_session_segment_info(s, i, &nt, &pb, dg)) return raise_plain("bad segment");
    PyObject *d = Py_BuildValue("{s:I,s:K,s:N}", "n_tokens", nt, "payload_bytes", (unsigned long long)pb, "kv_digest",
                                hex16(dg, 16));
    if (!d) return NULL;
    const skv_codec_desc *cd = skv_codec_desc_of(codec);
    if (cd && (cd->flags & SKV_CODEC_F_KV) && !skv_session_segment_kv_info(s, i, &ki)) {
        PyObject *k = Py_BuildValue("{s:s,s:s,s:K,s:i,s:i,s:i,s:K,s:K,s:K,s:(dd),s:i}", "k_scheme", ki.scheme[0],
                                    "v_scheme", ki.scheme[1], "seed", (unsigned long long)ki.seed, "n_layer", ki.n_layer,
                                    "n_head_kv", ki.n_head_kv, "head_dim", ki.head_dim, "position_bytes",
                                    (unsigned long long)ki.position_bytes, "tokens_bytes",
                                    (unsigned long long)ki.tokens_bytes, "kv_bytes", (unsigned long long)ki.kv_bytes,
                                    "rel_mse", (double)ki.rel_mse[0], (double)ki.rel_mse[1], "model_layers",
                                    ki.model_layers);
        if (put(d, "kv", k)) return Py_DECREF(d), NULL;
    }
    if (cd && (cd->flags & SKV_CODEC_F_DICT) && !skv_session_segment_dict(s, i, &did, &nids) &&
        put(d, "dictionary", Py_BuildValue("{s:K,s:I}", "id", (unsigned long long)did, "n_ids", nids)))
        return Py_DECREF(d), NULL;
    return d;
}

static PyObject *session_dict(const skv_session *s)
{
    skv_session_info si;
    skv_session_get_info(s, &si);
    const skv_codec_desc *cd = skv_codec_desc_of(si.codec);
    PyObject *segs = PyList_New(si.n_segments);
    if (!segs) return NULL;

    for (uint32_t i = 0; i < si.n_segments; i++) {
        PyObject *g = segment_dict(s, i, si.codec);
        if (!g) return Py_DECREF(segs), NULL;
        PyList_SET_ITEM(segs, i, g);
    }
    return Py_BuildValue("{s:s,s:i,s:s,s:s,s:O,s:I,s:I,s:I,s:I,s:i,s:K,s:N,s:s,s:K,s:s,s:N}", "kind", "session",
                         "version", si.version, "codec", skv_codec_name(si.codec), "codec_help", cd ? cd->help : "",
                         "segmented", si.segmented ? Py_True : Py_False, "n_segments", si.n_segments, "n_ctx", si.n_ctx,
                         "n_vocab", si.n_vocab, "total_bits", si.total_bits, "bos_id", si.bos_id, "n_tokens",
                         (unsigned long long)si.n_tokens, "fingerprint", hex16(si.fingerprint, 16), "model_name",
                         si.model_name, "file_bytes", (unsigned long long)si.file_bytes, "kv_cache",
                         si.kv_cache_type == SKV_KV_CACHE_F16 ? "f16" : "f32", "segments", segs);
}

static PyObject *blob_dict(const skv_kv_blob_info *in, size_t size)
{
    return Py_BuildValue("{s:s,s:(iii),s:I,s:s,s:s,s:s,s:K,s:(dd),s:n}", "kind", "kv", "geometry", in->geometry.n_layer,
                         in->geometry.n_head_kv, in->geometry.head_dim, "n_pos", in->n_pos, "k_scheme", in->scheme[0],
                         "v_scheme", in->scheme[1], "predictor", in->predictor, "seed", (unsigned long long)in->seed,
                         "rel_mse", (double)in->rel_mse[0], (double)in->rel_mse[1], "bytes", (Py_ssize_t)size);
}

static PyObject *py_inspect(PyObject *mod, PyObject *args)
{
    Py_buffer b;
    skv_session *s = NULL;
    skv_kv_blob_info in;
    char err[512] = "";
    PyObject *r = NULL;
    (void)mod;
    if (!PyArg_ParseTuple(args, "y*:inspect", &b)) return NULL;
    if (b.len >= 4 && !memcmp(b.buf, "SKVB", 4)) {
        int rc = skv_kv_blob_inspect(b.buf, (size_t)b.len, &in, err, sizeof err);
        r = rc ? raise_status(rc, err) : blob_dict(&in, (size_t)b.len);
    } else if (!session_open(&b, &s)) {
        r = session_dict(s);
    }
    skv_session_free(s);
    PyBuffer_Release(&b);
    return r;
}

static PyObject *py_codecs(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    PyObject *l = PyList_New(0);
    const skv_codec_desc *d;
    for (size_t i = 0; l && (d = skv_codec_at(i)) != NULL; i++) {
        PyObject *row = Py_BuildValue("{s:i,s:s,s:s,s:s,s:O,s:O,s:O,s:O}", "id", d->id, "name", d->name, "help", d->help,
                                      "payload", d->payload, "lossless", (d->flags & SKV_CODEC_F_KV) ? Py_False : Py_True,
                                      "needs_dictionary", (d->flags & SKV_CODEC_F_DICT) ? Py_True : Py_False,
                                      "takes_spec", (d->flags & SKV_CODEC_F_SPEC) ? Py_True : Py_False, "runs_model",
                                      (d->flags & SKV_CODEC_F_MODEL) ? Py_True : Py_False);
        if (!row || PyList_Append(l, row)) Py_CLEAR(l);
        Py_XDECREF(row);
    }
    return l;
}

/* ---- engine-free KV blobs ---------------------------------------------------------------- */

static PyObject *py_encode_kv(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"kv", "scheme", NULL};
    PyObject *obj, *out = NULL;
    const char *scheme = "pred";
    char err[512] = "";
    uint8_t *data = NULL;
    size_t size = 0;
    int rc;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s:encode_kv", kws, &obj, &scheme)) return NULL;
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(obj, NPY_FLOAT32, 0, 0, NPY_ARRAY_IN_ARRAY);
    if (!a) return NULL;
    npy_intp *sh = PyArray_DIMS(a);
    if (PyArray_NDIM(a) != 5 || sh[1] != 2 || sh[0] > 1 << 30 || sh[2] > 1 << 30 || sh[4] > 1 << 30) {
        Py_DECREF(a);
        return raise_status(SKV_ERR_INVALID_ARG, "encode_kv: the array must be [n_layer, 2, n_head_kv, n_pos, head_dim]");
    }
    skv_kv_geometry g = {(int)sh[0], (int)sh[2], (int)sh[4]};
    const float *kv = PyArray_DATA(a);
    size_t n_pos = (size_t)sh[3];
    Py_BEGIN_ALLOW_THREADS
    rc = skv_kv_encode(scheme, &g, kv, n_pos, &data, &size, err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_DECREF(a);
    if (rc) return raise_status(rc, err);
    out = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)size);
    free(data);
    return out;
}

static PyObject *py_decode_kv(PyObject *mod, PyObject *args)
{
    Py_buffer b;
    skv_kv_blob_info in;
    char err[512] = "";
    PyObject *out = NULL;
    int rc;
    (void)mod;
    if (!PyArg_ParseTuple(args, "y*:decode_kv", &b)) return NULL;
    if ((rc = skv_kv_blob_inspect(b.buf, (size_t)b.len, &in, err, sizeof err))) {
        raise_status(rc, err);
        goto done;
    }
    npy_intp dims[5] = {in.geometry.n_layer, 2, in.geometry.n_head_kv, in.n_pos, in.geometry.head_dim};
    if (!(out = PyArray_SimpleNew(5, dims, NPY_FLOAT32))) goto done;
    float *kv = PyArray_DATA((PyArrayObject *)out);
    size_t cap = (size_t)PyArray_SIZE((PyArrayObject *)out);
    Py_BEGIN_ALLOW_THREADS
    rc = skv_kv_decode(b.buf, (size_t)b.len, kv, cap, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) {
        Py_CLEAR(out);
        raise_status(rc, err);
    }
done:
    PyBuffer_Release(&b);
    return out;
}

/* ---- Store ------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ModelObject *model;
    skv_store *st;
    int inflight;
} StoreObject;

static int store_live(StoreObject *self)
{
    if (self->st) return 1;
    raise_plain("the store is closed");
    return 0;
}

static int Store_init(StoreObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"path", "model", "create", "readonly", "budget", "n_threads", NULL};
    PyObject *path, *mo;
    int create = 1, ro = 0, n_threads = 1, rc;
    long long budget = -1;
    char err[512] = "";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O|ppLi:Store", kws, PyUnicode_FSConverter, &path, &mo, &create, &ro,
                                     &budget, &n_threads))
        return -1;
    ModelObject *m = as_model(mo);
    if (!m || self->st) {
        Py_DECREF(path);
        if (m) raise_plain("Store.__init__ called twice");
        return -1;
    }
    skv_store_params p = skv_store_default_params();
    p.budget = budget;
    p.n_threads = n_threads;
    int flags = (create && !ro ? SKV_STORE_CREATE : 0) | (ro ? SKV_STORE_READONLY : 0);
    Py_BEGIN_ALLOW_THREADS
    rc = skv_store_open(PyBytes_AS_STRING(path), m->m, flags, &p, &self->st, err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (rc) return raise_status(rc, err), -1;
    Py_INCREF(m);
    self->model = m;
    m->users++;
    return 0;
}

static void store_release(StoreObject *self)
{
    skv_store_close(self->st);
    self->st = NULL;
    if (self->model) self->model->users--;
    Py_CLEAR(self->model);
}

static void Store_dealloc(StoreObject *self)
{
    store_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Store_close(StoreObject *self, PyObject *unused)
{
    (void)unused;
    if (self->inflight) return raise_plain("the store has calls in flight on other threads");
    store_release(self);
    Py_RETURN_NONE;
}

static PyObject *Store_exit(StoreObject *self, PyObject *args)
{
    (void)args;
    return Store_close(self, NULL);
}

static PyObject *store_error(StoreObject *self, int rc) { return raise_status(rc, skv_store_last_error(self->st)); }

static PyObject *Store_put(StoreObject *self, PyObject *args)
{
    const char *name;
    PyObject *obj;
    skv_store_put_report r;
    int rc;
    if (!PyArg_ParseTuple(args, "sO:put", &name, &obj) || !store_live(self)) return NULL;
    PyArrayObject *t = as_tokens(obj);
    if (!t) return NULL;
    const int32_t *ids = PyArray_DATA(t);
    size_t n = (size_t)PyArray_SIZE(t);
    self->inflight++;
    Py_BEGIN_ALLOW_THREADS
    rc = skv_store_put(self->st, name, ids, n, &r);
    Py_END_ALLOW_THREADS
    self->inflight--;
    Py_DECREF(t);
    if (rc) return store_error(self, rc);
    return Py_BuildValue("{s:I,s:I,s:I,s:I,s:d,s:d}", "n_tokens", r.n_tokens, "n_shared", r.n_shared, "n_loaded",
                         r.n_loaded, "n_computed", r.n_computed, "bits", r.bits, "seconds", r.seconds);
}

static PyObject *Store_get(StoreObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"name", "verify", "n_ctx", "n_threads", NULL};
    const char *name;
    int verify = 1, n_ctx = 0, n_threads = 1, rc;
    skv_ctx *c = NULL;
    skv_store_get_report r;
    size_t nt = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|pii:get", kws, &name, &verify, &n_ctx, &n_threads) ||
        !store_live(self) || ctx_create(self->model, n_ctx, n_threads, NULL, SKV_KV_CACHE_F32, &c))
        return NULL;
    ContextObject *o = ctx_wrap(self->model, c);
    if (!o) return NULL;
    self->inflight++;
    o->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = skv_store_get(self->st, name, o->c, verify ? SKV_STORE_VERIFY : 0, o->tok, o->cap, &nt, &r);
    Py_END_ALLOW_THREADS
    o->busy = 0;
    self->inflight--;
    if (rc) return Py_DECREF(o), store_error(self, rc);
    return (PyObject *)o;
}

static PyObject *Store_match(StoreObject *self, PyObject *args)
{
    PyObject *obj;
    skv_store_match_result r;
    int rc;
    if (!PyArg_ParseTuple(args, "O:match", &obj) || !store_live(self)) return NULL;
    PyArrayObject *t = as_tokens(obj);
    if (!t) return NULL;
    const int32_t *ids = PyArray_DATA(t);
    size_t n = (size_t)PyArray_SIZE(t);
    self->inflight++;
    Py_BEGIN_ALLOW_THREADS
    rc = skv_store_match(self->st, ids, n, &r);
    Py_END_ALLOW_THREADS
    self->inflight--;
    Py_DECREF(t);
    if (rc) return store_error(self, rc);
    return Py_BuildValue("{s:I,s:d,s:I,s:I}", "n_matched", r.n_matched, "bits", r.bits, "n_load", r.n_load, "n_compute",
                         r.n_compute);
}

static PyObject *Store_near(StoreObject *self, PyObject *args, PyObject *kw)
{
    static char *kws[] = {"tokens", "recompute", "n_ctx", NULL};
    PyObject *obj;
    double recompute = -1;
    int n_ctx = 0, rc;
    skv_ctx *c = NULL;
    skv_store_near_report r;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|di:near", kws, &obj, &recompute, &n_ctx) || !store_live(self))
        return NULL;
    PyArrayObject *t = as_tokens(obj);
    if (!t) return NULL;
    if (ctx_create(self->model, n_ctx, 1, NULL, SKV_KV_CACHE_F32, &c)) return Py_DECREF(t), NULL;
    ContextObject *o = ctx_wrap(self->model, c);
    if (!o) return Py_DECREF(t), NULL;
    skv_store_near_params p = skv_store_near_default_params();
    p.recompute = recompute;
    const int32_t *ids = PyArray_DATA(t);
    size_t n = (size_t)PyArray_SIZE(t);
    self->inflight++;
    o->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = skv_store_get_near(self->st, ids, n, o->c, &p, NULL, &r);
    Py_END_ALLOW_THREADS
    o->busy = 0;
    self->inflight--;
    if (!rc && n <= o->cap) memcpy(o->tok, ids, n * sizeof *ids);
    Py_DECREF(t);
    if (rc) return Py_DECREF(o), store_error(self, rc);
    return Py_BuildValue("(N{s:O,s:s,s:I,s:I,s:I,s:I,s:I,s:d})", (PyObject *)o, "approximate",
                         r.approximate ? Py_True : Py_False, "donor", r.donor, "n_tokens", r.n_tokens, "n_exact",
                         r.n_exact, "n_approx", r.n_approx, "n_recomputed", r.n_recomputed, "n_spans", r.n_spans,
                         "shared_bits", r.shared_bits);
}

static PyObject *Store_remove(StoreObject *self, PyObject *args)
{
    const char *name;
    int rc;
    if (!PyArg_ParseTuple(args, "s:remove", &name) || !store_live(self)) return NULL;
    self->inflight++;
    Py_BEGIN_ALLOW_THREADS
    rc = skv_store_remove(self->st, name);
    Py_END_ALLOW_THREADS
    self->inflight--;
    if (rc) return store_error(self, rc);
    Py_RETURN_NONE;
}

static int list_cb(void *user, const skv_store_session_info *s)
{
    PyObject *row = Py_BuildValue("{s:s,s:I,s:N,s:K}", "name", s->name, "n_tokens", s->n_tokens, "digest",
                                  hex16(s->digest, 16), "put_time", (unsigned long long)s->put_time);
    int bad = !row || PyList_Append((PyObject *)user, row);
    Py_XDECREF(row);
    return bad;
}

static PyObject *Store_list(StoreObject *self, PyObject *unused)
{
    (void)unused;
    if (!store_live(self)) return NULL;
    PyObject *l = PyList_New(0);
    if (!l) return NULL;
    int rc = skv_store_list(self->st, list_cb, l); /* the callback builds Python objects: GIL held */
    if (PyErr_Occurred()) return Py_DECREF(l), NULL;
    if (rc) return Py_DECREF(l), store_error(self, rc);
    return l;
}

static PyObject *Store_stats(StoreObject *self, PyObject *unused)
{
    (void)unused;
    skv_store_stats s;
    int rc;
    if (!store_live(self)) return NULL;
    self->inflight++;
    Py_BEGIN_ALLOW_THREADS
    rc = skv_store_get_stats(self->st, &s);
    Py_END_ALLOW_THREADS
    self->inflight--;
    if (rc) return store_error(self, rc);
    return Py_BuildValue("{s:s,s:K,s:K,s:K,s:K,s:d,s:K,s:K,s:K,s:K,s:d,s:d,s:K,s:K,s:K}", "model_name", s.model_name,
                         "n_sessions", (unsigned long long)s.n_sessions, "session_tokens",
                         (unsigned long long)s.session_tokens, "n_nodes", (unsigned long long)s.n_nodes,
                         "unique_positions", (unsigned long long)s.unique_positions, "dedup_ratio", s.dedup_ratio,
                         "disk_bytes", (unsigned long long)s.disk_bytes, "mat_nodes", (unsigned long long)s.mat_nodes,
                         "mat_positions", (unsigned long long)s.mat_positions, "mat_bytes",
                         (unsigned long long)s.mat_bytes, "bits_per_position", s.bits_per_position, "token_floor_bits",
                         s.token_floor_bits, "budget", (unsigned long long)s.budget, "kv_misses",
                         (unsigned long long)s.kv_misses, "node_misses", (unsigned long long)s.node_misses);
}

static PyMethodDef Store_methods[] = {
    {"close", (PyCFunction)Store_close, METH_NOARGS, "Closes the store."},
    {"__enter__", enter_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Store_exit, METH_VARARGS, NULL},
    {"put", (PyCFunction)Store_put, METH_VARARGS, "put(name, tokens) -> report dict: stores a session (one transaction)."},
    {"get", (PyCFunction)(void (*)(void))Store_get, METH_VARARGS | METH_KEYWORDS,
     "get(name, verify=True, n_ctx=0, n_threads=1) -> Context holding the session's exact KV."},
    {"match", (PyCFunction)Store_match, METH_VARARGS, "match(tokens) -> dict: the longest stored prefix."},
    {"near", (PyCFunction)(void (*)(void))Store_near, METH_VARARGS | METH_KEYWORDS,
     "near(tokens, recompute=-1, n_ctx=0) -> (Context, report): an APPROXIMATE KV reusing a near-duplicate "
     "session (docs/near.md); report['approximate'] says whether it is."},
    {"remove", (PyCFunction)Store_remove, METH_VARARGS, "remove(name): removes a session."},
    {"list", (PyCFunction)Store_list, METH_NOARGS, "list() -> [dict]: the sessions in name order."},
    {"stats", (PyCFunction)Store_stats, METH_NOARGS, "stats() -> dict of the store's figures."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "seqkv.Store",
    .tp_basicsize = sizeof(StoreObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Store(path_or_redis_url, model, create=True, readonly=False, budget=-1, n_threads=1): a session store "
              "(LMDB directory or redis://HOST:PORT/PREFIX); shareable by threads.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Store_init,
    .tp_dealloc = (destructor)Store_dealloc,
    .tp_methods = Store_methods,
};

/* ---- module ------------------------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"compress", (PyCFunction)(void (*)(void))py_compress, METH_VARARGS | METH_KEYWORDS, "see seqkv.compress"},
    {"restore", (PyCFunction)(void (*)(void))py_restore, METH_VARARGS | METH_KEYWORDS, "see seqkv.restore"},
    {"restore_kv", (PyCFunction)(void (*)(void))py_restore_kv, METH_VARARGS | METH_KEYWORDS, "see seqkv.restore_kv"},
    {"inspect", (PyCFunction)py_inspect, METH_VARARGS, "see seqkv.inspect"},
    {"codecs", (PyCFunction)py_codecs, METH_NOARGS, "see seqkv.codecs"},
    {"encode_kv", (PyCFunction)(void (*)(void))py_encode_kv, METH_VARARGS | METH_KEYWORDS, "see seqkv.encode_kv"},
    {"decode_kv", (PyCFunction)py_decode_kv, METH_VARARGS, "see seqkv.decode_kv"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_seqkv", "The C core of seqkv (see the seqkv package).",
                                        -1, module_methods, NULL, NULL, NULL, NULL};

static int add_errors(PyObject *m)
{
    Error = PyErr_NewExceptionWithDoc("seqkv.Error", "A libseqkv failure: .status (int), .status_name "
                                      "('SKV_ERR_FORMAT'), .message (the library's text).", NULL, NULL);
    if (!Error || PyModule_AddObjectRef(m, "Error", Error)) return -1;
    for (int i = 1; i <= 8; i++) {
        char full[64];
        snprintf(full, sizeof full, "seqkv.%s", error_rows[i].name);
        PyObject *bases = error_rows[i].base ? PyTuple_Pack(2, Error, *error_rows[i].base) : PyTuple_Pack(1, Error);
        if (!bases) return -1;
        StatusError[i] = PyErr_NewExceptionWithDoc(full, error_rows[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!StatusError[i] || PyModule_AddObjectRef(m, error_rows[i].name, StatusError[i])) return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__seqkv(void);
PyMODINIT_FUNC PyInit__seqkv(void)
{
    import_array();
    if (PyType_Ready(&ModelType) || PyType_Ready(&ContextType) || PyType_Ready(&StoreType)) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (add_errors(m) || PyModule_AddObjectRef(m, "Model", (PyObject *)&ModelType) ||
        PyModule_AddObjectRef(m, "Context", (PyObject *)&ContextType) ||
        PyModule_AddObjectRef(m, "Store", (PyObject *)&StoreType) ||
        PyModule_AddStringConstant(m, "library_version", skv_version())) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
