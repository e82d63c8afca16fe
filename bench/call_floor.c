/* The Python-call floor of the launch benchmarks: a CPython extension whose
 * one function takes any positional and keyword arguments and does nothing.
 * `call_floor.noop(GRID, BLOCK, *args, stream=s)` costs what CPython itself
 * spends on a call of that shape (building the argument tuple and keyword
 * dict, the vectorcall conversion): the least any Python launch API of that
 * form can cost, before it looks at a single argument. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *noop(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)self; (void)args; (void)nargs; (void)kwnames;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"noop", (PyCFunction)(void (*)(void))noop, METH_FASTCALL | METH_KEYWORDS,
     "noop(*args, **kwargs) -> None: accepts anything, does nothing."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "call_floor", NULL, -1, methods};

PyMODINIT_FUNC PyInit_call_floor(void) { return PyModule_Create(&module); }
