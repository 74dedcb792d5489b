/* The two objects on the path of every jitted call that jaxlib's C++ dispatcher makes,
 * written in C because in Python each would cost a frame per call (about a fifth of a
 * small call's time). s2s_runtime/fastcall.py has the same in Python, used where this
 * extension was not built, and says what each is for.
 *
 * Caller: a callable whose call is its `_target`'s, with jax's x64 setting swapped for
 *   s2s's around it (set_jax_x64, callers_jax_x64). When the target raises one of the
 *   instance's `_refused` exception types (and not one of its `_clean` ones), the call is
 *   `self._on_refused(error, args, kwargs)`'s instead; an exception of a `_clean` type
 *   leaves without the frames it came through. Those three are read only on failure.
 *
 * ResultBase: the storage of `s2s.Array`. `_from_dispatch(device, buffers)` (a class
 *   method) is what the dispatcher calls to build each result, and `_to_dispatch()` what it
 *   calls to flatten an Array argument (a donated one raises through `_live_buffer`). It
 *   exports its memory to NumPy (the buffer protocol, which Python classes cannot give),
 *   and waits for its computation (`block_until_ready`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#if defined(_MSC_VER)
#define THREAD_LOCAL __declspec(thread)
#else
#define THREAD_LOCAL _Thread_local
#endif

/* ------------------------------------------------------------------------------------ */
/* jax's x64 setting, swapped for s2s's around each call (see set_jax_x64) */

static PyObject *jax_x64 = NULL;        /* jax's x64 Config once jax is loaded, else NULL */
static PyObject *s2s_x64 = NULL;        /* s2s's x64, a bool */
static THREAD_LOCAL PyObject *callers_x64 = NULL;   /* the caller's, while a swapping call runs
                                                       (borrowed from that call's frame) */
static PyObject *str_value, *str_swap_local, *str_set_local, *str_block_until_ready;

static PyObject *set_jax_x64(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_jax_x64 takes (jax's setting or None, s2s's value)");
        return NULL;
    }
    Py_XSETREF(jax_x64, args[0] == Py_None ? NULL : Py_NewRef(args[0]));
    Py_XSETREF(s2s_x64, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyObject *callers_jax_x64(PyObject *module, PyObject *unused) {
    return Py_NewRef(callers_x64 != NULL ? callers_x64 : Py_None);
}

/* target(*args, **kwargs) with jax's x64 set to s2s's for this thread, unless it is s2s's
 * already outside any other swapping call. */
static PyObject *swapping_call(PyObject *target, PyObject *args, PyObject *kwargs) {
    if (jax_x64 == NULL) {
        return PyObject_Call(target, args, kwargs);
    }
    PyObject *outer = callers_x64;
    if (outer == NULL) {
        PyObject *current = PyObject_GetAttr(jax_x64, str_value);
        if (current == NULL) {
            return NULL;
        }
        int same = PyObject_RichCompareBool(current, s2s_x64, Py_EQ);
        Py_DECREF(current);
        if (same != 0) {
            return same < 0 ? NULL : PyObject_Call(target, args, kwargs);
        }
    }
    PyObject *setting = Py_NewRef(jax_x64);   /* set_jax_x64 may replace them meanwhile */
    PyObject *ours = Py_NewRef(s2s_x64);
    PyObject *previous = PyObject_CallMethodOneArg(setting, str_swap_local, ours);
    Py_DECREF(ours);
    if (previous == NULL) {
        Py_DECREF(setting);
        return NULL;
    }
    callers_x64 = previous;
    PyObject *result = PyObject_Call(target, args, kwargs);
    callers_x64 = outer;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *restored = PyObject_CallMethodOneArg(setting, str_set_local, previous);
    if (restored == NULL) {
        if (type != NULL) {
            PyErr_Clear();   /* the call's own failure is the one to tell */
        } else {
            Py_CLEAR(result);
        }
    }
    Py_XDECREF(restored);
    if (type != NULL) {
        PyErr_Restore(type, value, traceback);
    }
    Py_DECREF(previous);
    Py_DECREF(setting);
    return result;
}

/* ------------------------------------------------------------------------------------ */
/* Caller */

typedef struct {
    PyObject_HEAD
    PyObject *target;
} CallerObject;

static int caller_traverse(CallerObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->target);
    return 0;
}

static int caller_clear(CallerObject *self) {
    Py_CLEAR(self->target);
    return 0;
}

static void caller_dealloc(CallerObject *self) {
    PyObject_GC_UnTrack(self);
    caller_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Whether `error` is an instance of the classes in `self.<name>` (none if it has none). */
static int is_instance_of(PyObject *self, PyObject *error, const char *name) {
    PyObject *classes = PyObject_GetAttrString(self, name);
    if (classes == NULL) {
        PyErr_Clear();
        return 0;
    }
    int matches = PyErr_GivenExceptionMatches(error, classes);
    Py_DECREF(classes);
    return matches;
}

/* The pending exception as one object (never NULL after a failed call), its traceback
 * attached. */
static PyObject *fetch_pending(void) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value != NULL && traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
}

/* Raises `error` again (taking the reference): without its traceback if `clean`. */
static PyObject *raise_again(PyObject *error, int clean) {
    PyObject *traceback = NULL;
    if (clean) {
        PyException_SetTraceback(error, Py_None);
    } else {
        traceback = PyException_GetTraceback(error);
    }
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(error)), error, traceback);
    return NULL;
}

static PyObject *caller_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    PyObject *target = ((CallerObject *)self)->target;
    if (target == NULL) {
        PyErr_Format(PyExc_TypeError, "%s has nothing to call yet", Py_TYPE(self)->tp_name);
        return NULL;
    }
    Py_INCREF(target);   /* a call may set another target */
    PyObject *result = swapping_call(target, args, kwargs);
    Py_DECREF(target);
    if (result != NULL) {
        return result;
    }
    PyObject *error = fetch_pending();
    if (error == NULL) {
        return NULL;
    }
    int clean = is_instance_of(self, error, "_clean");
    if (!clean && is_instance_of(self, error, "_refused")) {
        PyObject *keywords = kwargs != NULL ? Py_NewRef(kwargs) : PyDict_New();
        if (keywords != NULL) {
            result = PyObject_CallMethod(self, "_on_refused", "OOO", error, args, keywords);
            Py_DECREF(keywords);
        }
        Py_DECREF(error);
        if (result != NULL) {
            return result;
        }
        error = fetch_pending();
        if (error == NULL) {
            return NULL;
        }
        clean = is_instance_of(self, error, "_clean");
    }
    return raise_again(error, clean);
}

static PyMemberDef caller_members[] = {
    {"_target", T_OBJECT, offsetof(CallerObject, target), 0,
     "What a call calls: jaxlib's dispatcher, or a function that checks before calling it."},
    {NULL},
};

static PyTypeObject CallerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "s2s_runtime._fastcall.Caller",
    .tp_doc = "A callable whose call is its _target's; see s2s_runtime.fastcall.",
    .tp_basicsize = sizeof(CallerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)caller_dealloc,
    .tp_traverse = (traverseproc)caller_traverse,
    .tp_clear = (inquiry)caller_clear,
    .tp_call = caller_call,
    .tp_members = caller_members,
};

/* ------------------------------------------------------------------------------------ */
/* ResultBase */

typedef struct {
    PyObject_HEAD
    PyObject *buffer;
    PyObject *device;
    PyObject *value;
    PyObject *donated_as;
    PyObject *shape;
    PyObject *dtype;
    PyObject *weakrefs;
} ResultObject;

static int result_traverse(ResultObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->buffer);
    Py_VISIT(self->device);
    Py_VISIT(self->value);
    Py_VISIT(self->donated_as);
    Py_VISIT(self->shape);
    Py_VISIT(self->dtype);
    return 0;
}

static int result_clear(ResultObject *self) {
    Py_CLEAR(self->buffer);
    Py_CLEAR(self->device);
    Py_CLEAR(self->value);
    Py_CLEAR(self->donated_as);
    Py_CLEAR(self->shape);
    Py_CLEAR(self->dtype);
    return 0;
}

static void result_dealloc(ResultObject *self) {
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    result_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *result_from_dispatch(PyObject *cls, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != 1) {
        PyErr_SetString(PyExc_TypeError, "_from_dispatch takes (device, (buffer,))");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    ResultObject *self = (ResultObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->device = Py_NewRef(args[0]);
    self->buffer = Py_NewRef(PyTuple_GET_ITEM(args[1], 0));
    return (PyObject *)self;
}

/* The device buffer (a new reference), or what `_live_buffer` says (a donated one raises). */
static PyObject *live_buffer(ResultObject *self) {
    PyObject *buffer = self->buffer;
    if ((self->donated_as != NULL && self->donated_as != Py_None) || buffer == NULL || buffer == Py_None) {
        return PyObject_CallMethod((PyObject *)self, "_live_buffer", NULL);
    }
    return Py_NewRef(buffer);
}

static PyObject *result_to_dispatch(ResultObject *self, PyObject *unused) {
    PyObject *buffer = live_buffer(self);
    if (buffer == NULL) {
        return NULL;
    }
    PyObject *device = self->device != NULL ? self->device : Py_None;
    return Py_BuildValue("((N)O)", buffer, device);
}

static PyObject *result_block_until_ready(ResultObject *self, PyObject *unused) {
    PyObject *buffer = live_buffer(self);
    if (buffer == NULL) {
        return NULL;
    }
    PyObject *done = PyObject_CallMethodNoArgs(buffer, str_block_until_ready);
    Py_DECREF(buffer);
    if (done == NULL) {
        return NULL;
    }
    Py_DECREF(done);
    return Py_NewRef((PyObject *)self);
}

/* NumPy reads an Array through this before anything else (np.asarray, np.array, ufuncs):
 * the NumPy copy once made, else the device buffer's own memory (jaxlib exports it
 * read-only), without a Python frame. A donated Array raises DonatedBufferError; where
 * there is no single buffer (a pmap's result) NumPy goes on to `__array__`. */
static int result_getbuffer(ResultObject *self, Py_buffer *view, int flags) {
    PyObject *source = self->value;
    if (source == NULL || source == Py_None) {
        source = self->buffer;
        if ((self->donated_as != NULL && self->donated_as != Py_None) || source == NULL || source == Py_None) {
            PyObject *live = PyObject_CallMethod((PyObject *)self, "_live_buffer", NULL);
            if (live == NULL) {
                return -1;
            }
            Py_DECREF(live);
            PyErr_SetString(PyExc_BufferError, "this Array has no single device buffer; read it with np.asarray");
            return -1;
        }
    }
    return PyObject_GetBuffer(source, view, flags);
}

static PyBufferProcs result_as_buffer = {
    .bf_getbuffer = (getbufferproc)result_getbuffer,
};

static PyMethodDef result_methods[] = {
    {"_from_dispatch", (PyCFunction)(void (*)(void))result_from_dispatch, METH_FASTCALL | METH_CLASS,
     "The Array around a result buffer the dispatcher made: cls._from_dispatch(device, (buffer,))."},
    {"_to_dispatch", (PyCFunction)result_to_dispatch, METH_NOARGS,
     "((buffer,), device): what the dispatcher passes for this Array; a donated one raises."},
    {"block_until_ready", (PyCFunction)result_block_until_ready, METH_NOARGS,
     "Waits until the computation that makes this Array has finished; returns the Array."},
    {NULL},
};

static PyMemberDef result_members[] = {
    {"_buffer", T_OBJECT, offsetof(ResultObject, buffer), 0, NULL},
    {"_device", T_OBJECT, offsetof(ResultObject, device), 0, NULL},
    {"_value", T_OBJECT, offsetof(ResultObject, value), 0, NULL},
    {"_donated_as", T_OBJECT, offsetof(ResultObject, donated_as), 0, NULL},
    {"_shape", T_OBJECT, offsetof(ResultObject, shape), 0, NULL},
    {"_dtype", T_OBJECT, offsetof(ResultObject, dtype), 0, NULL},
    {NULL},
};

static PyTypeObject ResultType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "s2s_runtime._fastcall.ResultBase",
    .tp_doc = "The storage of s2s.Array; see s2s_runtime.fastcall.",
    .tp_basicsize = sizeof(ResultObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)result_dealloc,
    .tp_traverse = (traverseproc)result_traverse,
    .tp_clear = (inquiry)result_clear,
    .tp_weaklistoffset = offsetof(ResultObject, weakrefs),
    .tp_as_buffer = &result_as_buffer,
    .tp_methods = result_methods,
    .tp_members = result_members,
};

/* ------------------------------------------------------------------------------------ */

static PyMethodDef module_functions[] = {
    {"set_jax_x64", (PyCFunction)(void (*)(void))set_jax_x64, METH_FASTCALL,
     "set_jax_x64(jax's x64 setting or None, s2s's x64): what each call swaps."},
    {"callers_jax_x64", callers_jax_x64, METH_NOARGS,
     "jax's x64 as the caller had it (its thread-local value), inside a call that swapped it; else None."},
    {NULL},
};

static struct PyModuleDef fastcall_module = {
    PyModuleDef_HEAD_INIT,
    .m_methods = module_functions,
    .m_name = "s2s_runtime._fastcall",
    .m_doc = "Caller and ResultBase in C; see s2s_runtime.fastcall.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__fastcall(void) {
    if (PyType_Ready(&CallerType) < 0 || PyType_Ready(&ResultType) < 0) {
        return NULL;
    }
    str_value = PyUnicode_InternFromString("value");
    str_swap_local = PyUnicode_InternFromString("swap_local");
    str_set_local = PyUnicode_InternFromString("set_local");
    str_block_until_ready = PyUnicode_InternFromString("block_until_ready");
    s2s_x64 = Py_NewRef(Py_True);
    if (str_value == NULL || str_swap_local == NULL || str_set_local == NULL || str_block_until_ready == NULL) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&fastcall_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "Caller", (PyObject *)&CallerType) < 0 ||
        PyModule_AddObjectRef(module, "ResultBase", (PyObject *)&ResultType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
