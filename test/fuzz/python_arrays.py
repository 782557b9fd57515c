#!/usr/bin/env python3
"""Seeded random-input fuzzing of the `implicit` module's array entry points.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 python3 test/fuzz/python_arrays.py --seconds 60
    python3 test/fuzz/python_arrays.py --cases 5000 --seed 3 --keep-going
    python3 test/fuzz/python_arrays.py --seed 3 --replay 1234     # one case, verbosely
    valgrind --suppressions=/usr/lib/valgrind/python3.supp python3 \
        test/fuzz/python_arrays.py --in-process --trace --keep-going --cases 3000

It prints, per entry point, the calls, how many had only valid arguments, how
many returned and what they raised; then observations and violations (with
the case's description and the command that replays it). Exit status 1 on a
violation.

Every case (reproducible from (seed, index) alone) builds one call to one entry
point that takes arrays (the ENTRY_POINTS table: energy, map and layer
constructors, Energy / Map methods, solve, backward, entmax, HopfieldLayer,
EnergyTransformerMap.set_clamp, parameter views) from valid arguments, then
mutates some of them: wrong ndim or shape (0-D, 1-D, 3-D, empty, off by one),
dtype (float32 / float64 swapped, int, bool, complex, float16, longdouble,
object, str, big-endian), layout (C order, transposed, strided, reversed,
padded, unaligned, broadcast views), read-only arrays, NaN / inf / huge /
denormal values, Python objects instead of arrays, bad keyword options, and
Python callables (PythonMap f / jvp / vjp, solver callbacks) that raise, return
None, garbage, the wrong shape, NaN, or misbehave only from their k-th call.

The contract checked (a breach is a violation: printed with its reproducer,
exit status 1):
  * no crash, abort or hang (the supervisor runs the cases in a child process
    and reports a signal, or a case that runs longer than --case-timeout);
  * a call returns a well-formed result (type, shape, dtype; finite when every
    input was finite and moderate) or raises a clean exception: ValueError,
    TypeError, RuntimeError (implicit.ConvergenceError is one) or
    OverflowError, with a message; or exactly the exception one of the case's
    Python callables raised (with its `summary` when solve() re-raises it);
  * what python/src/arrays.h documents is rejected, with its type: an
    argument used in place that is not a numpy array of the object's dtype
    (TypeError), not 2-D, of the wrong shape, not Fortran-ordered, or
    read-only where it is written (ValueError); a callable's result that is
    not an array of numbers (TypeError) or has the wrong shape (ValueError);
  * a call whose arguments are all valid does not raise (except
    ConvergenceError) and its results pass simple exact checks (entmax columns
    are distributions, a Python map's f / J v / J^T u and solve's fixed
    points and backward's adjoint against the affine map's own A, <u, J v> =
    <J^T u, v>, symmetric Hessians, live parameter views);
  * arguments that are not written in place are left untouched; solve leaves
    z finite when it started finite, and untouched when it rejected it;
  * an error pending in a PythonMap does not outlive the call that raised it
    (a follow-up evaluate gives f(z)).
Lesser deviations are counted as observations and printed, without failing:
a non-finite result from finite but extreme inputs (|x| > 1e3), a clean
exception of another type than documented (e.g. RuntimeError for a
wrongly-typed backward option), an object accepted at construction that
fails at its first use.

Why not libFuzzer: the target is the Python surface (pybind11 argument
conversion, array checks, callbacks, error propagation), whose inputs are
structured (which argument is malformed, and how) rather than byte strings, so
a generator that draws them directly, with an oracle that knows which inputs
must be rejected, reaches the interesting paths without coverage feedback.
atheris (libFuzzer for Python) is not packaged in Debian, and an
ASan-instrumented libFuzzer harness would have to embed CPython and numpy.
The C++ parsers have libFuzzer harnesses of their own (test/fuzz/*.cc). The
module is not built with a sanitizer, so memory errors that do not crash go
unseen here; run a suspicious case under valgrind (--replay, --in-process).
"""

import argparse
import faulthandler
import gc
import json
import math
import os
import select
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter

import numpy as np

try:
    import implicit
except ImportError:  # run from a checkout without PYTHONPATH: the build tree's package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "build", "python"))
    import implicit

F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
CLEAN_ERRORS = (ValueError, TypeError, RuntimeError, OverflowError)
TAME, EXTREME, NONFINITE = 0, 1, 2          # the worst input of a case
TAME_BOUND = 1e3                            # |x| above this is "extreme"
DEFAULT_CASE_TIMEOUT = 30.0


class Violation(Exception):
    """The module broke its contract (the message says how)."""


class Observation(Exception):
    """A lesser deviation: counted and reported, not a failure."""

    def __init__(self, kind, text):
        super().__init__(f"{kind}: {text}")
        self.kind = kind


class CallbackError(Exception):
    """Raised by a fuzzed Python callable."""


class CallbackBaseError(BaseException):
    """Raised by a fuzzed Python callable: a BaseException that is no Exception."""


# ----------------------------------------------------------------------------
# A case: everything one call needs, drawn from its own seeded generator.

class Case:
    """One call, built from (seed, index) alone so that it can be replayed.

    Builders draw from `rng`, note what they built (the description), and
    record what the outcome must be: `must_raise` (exception types one of
    which the call must raise, from arguments documented to be rejected),
    `may_raise` (types a mutation may legitimately cause), `strict` (every
    argument valid: the call must not raise), `level` (TAME inputs give
    finite results), checks of the result and checks run after any outcome.
    """

    def __init__(self, seed, index, verbose=False):
        self.seed, self.index, self.verbose = seed, index, verbose
        self.rng = np.random.default_rng([seed, index])
        self.p_mutate = float(self.rng.choice([0.0, 0.0, 0.15, 0.3, 0.6]))
        self.entry = None
        self.notes = []
        self.must_raise = {}       # type -> (why, documented)
        self.may_raise = set()
        self.strict = True
        self.level = TAME
        self.callables = []        # Scripted callables handed to the module
        self.result_checks = []    # f(result); raise Violation / Observation
        self.post_checks = []      # f(error or None); run after any outcome
        self.python_maps = []      # (map, reference f, its callables): the stale-error probe
        self.questionable = None   # a valid-looking call that may fail: an observation then
        self.precondition = None   # a broken documented precondition: non-finite results are
                                   # then observations

    # drawing
    def chance(self, p):
        return self.rng.random() < p

    def integer(self, low, high):
        """An int in [low, high]."""
        return int(self.rng.integers(low, high + 1))

    def uniform(self, low, high):
        return float(self.rng.uniform(low, high))

    def choice(self, items):
        items = list(items)
        return items[int(self.rng.integers(len(items)))]

    def mutate(self):
        """Whether to malform the next argument or option."""
        return self.rng.random() < self.p_mutate

    # recording
    def note(self, text):
        self.notes.append(text)
        if self.verbose:
            print("  " + text, flush=True)

    def reject(self, types, why, documented=True):
        """The call must raise one of `types` (an argument the module must reject)."""
        self.strict = False
        for t in types if isinstance(types, tuple) else (types,):
            self.must_raise.setdefault(t, (why, documented))

    def lenient(self, *types):
        """A mutation that may or may not be rejected (and then with one of `types`)."""
        self.strict = False
        self.may_raise.update(types or (ValueError,))

    def question(self, kind):
        """A call that looks valid but is known to be rejected by design or by a
        quirk: raising then is an observation (`kind`), not a violation."""
        self.strict = False
        self.questionable = kind

    def worsen(self, level):
        self.level = max(self.level, level)

    def describe(self):
        return f"{self.entry}: " + "; ".join(self.notes)


# ----------------------------------------------------------------------------
# Arrays: valid ones, their mutations, and what the module must do with them.

def describe(obj):
    if isinstance(obj, np.ndarray):
        order = ("F" if obj.flags.f_contiguous else "C" if obj.flags.c_contiguous
                 else "strided")
        extra = "" if obj.flags.writeable else " read-only"
        extra += "" if obj.flags.aligned else " unaligned"
        kind = "" if type(obj) is np.ndarray else type(obj).__name__ + " "
        return f"{kind}{obj.dtype.str} {obj.shape} {order}{extra}"
    text = repr(obj)
    return type(obj).__name__ + " " + (text if len(text) <= 40 else text[:37] + "...")


def level_of(obj):
    """TAME, EXTREME or NONFINITE: the worst value of an array-like of numbers."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = np.array(obj, dtype=np.complex128 if np.iscomplexobj(obj) else np.float64)
    except (TypeError, ValueError, OverflowError):
        return TAME   # not numbers: rejected, or not read as values
    if a.size == 0:
        return TAME
    if not np.all(np.isfinite(a)):
        return NONFINITE
    return EXTREME if np.max(np.abs(a)) > TAME_BOUND else TAME


def view_error(obj, dtype, rows, cols, writable):
    """What CheckedArray (python/src/module.cc) must raise for `obj`, or None."""
    if not isinstance(obj, np.ndarray):
        return TypeError, "not a numpy array"
    d = obj.dtype
    if d.kind != "f" or d.itemsize != dtype.itemsize or not d.isnative:
        return TypeError, f"dtype {d.str}, not {dtype.name}"
    if obj.ndim != 2:
        return ValueError, f"{obj.ndim}-D"
    if (rows >= 0 and obj.shape[0] != rows) or (cols >= 0 and obj.shape[1] != cols):
        return ValueError, f"shape {obj.shape}, not ({rows}, {cols if cols >= 0 else 'any'})"
    if not obj.flags.f_contiguous:
        return ValueError, "not Fortran-ordered"
    if writable and not obj.flags.writeable:
        return ValueError, "read-only, written in place"
    return None


def data_dtype(obj):
    """DtypeOfData: the dtype the module infers from data (float32 stays float32)."""
    if isinstance(obj, np.ndarray) and obj.dtype.kind == "f" and obj.dtype.itemsize == 4:
        return F32
    return F64


def data_error(obj):
    """What CopyMatrix (constructor data, copied with conversion) must raise, or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = np.array(obj, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return (TypeError, ValueError), "not an array of numbers"
    if a.ndim != 2:
        return (ValueError, TypeError), f"{a.ndim}-D"
    if a.size == 0:
        return (ValueError,), f"empty {a.shape}"
    return None


def _fill(case, a, value):
    """a with `value` at one entry, one column or everywhere (a copy)."""
    a = a.copy(order="F")
    if a.size == 0:
        return a
    where = case.choice(["entry", "column", "all"])
    if where == "entry":
        a[case.integer(0, a.shape[0] - 1), case.integer(0, a.shape[1] - 1)] = value
    elif where == "column":
        a[:, case.integer(0, a.shape[1] - 1)] = value
    else:
        a[...] = value
    return a


def _padded(case, a):
    big = np.zeros((a.shape[0] + 2, a.shape[1]), dtype=a.dtype, order="F")
    big[1:-1] = a
    return big[1:-1]


def _unaligned(case, a):
    buf = bytearray(a.nbytes + 1)
    b = np.frombuffer(buf, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape, order="F")
    b[...] = a
    return b


def _read_only(case, a):
    b = a.copy(order="F")
    b.flags.writeable = False
    return b


def _astype(dtype):
    def convert(case, a):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asfortranarray(a.astype(dtype))
    return convert


def _other_float(case, a):
    return np.asfortranarray(a.astype(F32 if a.dtype == F64 else F64))


def _fresh(shape):
    def make(case, a):   # values inside every state domain (the box (-1, 1)^n too)
        return np.asfortranarray(case.rng.uniform(-0.8, 0.8, shape(a.shape)).astype(a.dtype))
    return make


def _huge(case, a):
    return _fill(case, a, np.finfo(a.dtype).max / 4 * case.choice([1, -1]))


# name -> f(case, valid array) -> the malformed argument
ARRAY_MUTATIONS = {
    "0-D": lambda case, a: np.asarray(a.flat[0] if a.size else 1.0, dtype=a.dtype),
    "1-D": lambda case, a: a.ravel(order="F"),
    "3-D": lambda case, a: np.asfortranarray(a[:, :, None]),
    "one more row": _fresh(lambda s: (s[0] + 1, s[1])),
    "one row fewer": _fresh(lambda s: (max(s[0] - 1, 0), s[1])),
    "no rows": _fresh(lambda s: (0, s[1])),
    "no columns": _fresh(lambda s: (s[0], 0)),
    "two more columns": _fresh(lambda s: (s[0], s[1] + 2)),
    "transposed view": lambda case, a: a.T,
    "C order": lambda case, a: np.ascontiguousarray(a),
    "every 2nd row": lambda case, a: np.asfortranarray(np.repeat(a, 2, axis=0))[::2],
    "every 2nd column": lambda case, a: np.asfortranarray(np.repeat(a, 2, axis=1))[:, ::2],
    "reversed rows": lambda case, a: a[::-1],
    "reversed columns": lambda case, a: a[:, ::-1],
    "padded view": _padded,
    "unaligned": _unaligned,
    "read-only": _read_only,
    "broadcast column": lambda case, a: np.broadcast_to(a[:, :1], a.shape),
    "np.matrix": lambda case, a: a.view(np.matrix),
    "other float": _other_float,
    "int64": _astype(np.int64),
    "int32": _astype(np.int32),
    "bool": _astype(np.bool_),
    "complex128": _astype(np.complex128),
    "float16": _astype(np.float16),
    "longdouble": _astype(np.longdouble),
    "object": _astype(object),
    "str": _astype(str),
    "big-endian": lambda case, a: np.asfortranarray(a.astype(a.dtype.newbyteorder(">"))),
    "list": lambda case, a: a.tolist(),
    "tuple of tuples": lambda case, a: tuple(tuple(r) for r in a.tolist()),
    "scalar": lambda case, a: 1.5,
    "None": lambda case, a: None,
    "string": lambda case, a: "abc",
    "bytes": lambda case, a: a.tobytes(order="F"),
    "memoryview": lambda case, a: memoryview(np.asfortranarray(a)),
    "dict": lambda case, a: {"data": a},
    "NaN": lambda case, a: _fill(case, a, np.nan),
    "+inf": lambda case, a: _fill(case, a, np.inf),
    "-inf": lambda case, a: _fill(case, a, -np.inf),
    "huge": _huge,
    "large": lambda case, a: _fill(case, a, 1e6 * case.choice([1, -1])),
    "denormal": lambda case, a: _fill(case, a, np.finfo(a.dtype).tiny / 8),
    "zeros": lambda case, a: _fill(case, a, 0.0),
}


def untouched(case, name, obj):
    """Registers the check that the call did not write `obj` (not an in-place argument)."""
    if not isinstance(obj, np.ndarray):
        return
    before = obj.copy()

    def check(error):
        try:
            same = np.array_equal(before, obj, equal_nan=True)
        except TypeError:
            same = np.array_equal(before, obj)
        if not same:
            raise Violation(f"{name} was modified, but it is not an in-place argument")
    case.post_checks.append(check)


def array_arg(case, name, rows, cols, dtype, *, kind="view", writable=False, check_rows=True,
              check_cols=True, values=None, none_ok=False):
    """The argument `name`: a valid rows x cols Fortran-ordered array of `dtype`
    (values(case, shape) or N(0, 0.7^2) draws), or, when the case mutates it, a
    malformed one. kind "view": checked and used in place (CheckedArray);
    "scores": a view whose dtype is the data's (entmax); "data": copied with
    conversion (CopyMatrix). check_rows / check_cols: whether the module
    requires that many rows / columns (else any); none_ok: None is valid (an
    optional argument). Records what the call must do with it."""
    a = values(case, (rows, cols)) if values else 0.7 * case.rng.standard_normal((rows, cols))
    a = np.asfortranarray(np.asarray(a, dtype=np.float64).astype(dtype))
    obj, label = a, ""
    if case.mutate():
        label = case.choice(ARRAY_MUTATIONS)
        obj = ARRAY_MUTATIONS[label](case, a)
    case.note(f"{name}={describe(obj)}" + (f" [{label}]" if label else ""))
    case.worsen(level_of(obj))
    if obj is None and none_ok:
        case.lenient(ValueError)
    elif kind in ("view", "scores"):
        want = dtype if kind == "view" else data_dtype(obj)
        error = view_error(obj, want, rows if check_rows else -1, cols if check_cols else -1,
                           writable)
        if error:
            case.reject(error[0], f"{name}: {error[1]}")
        elif label:
            case.lenient(ValueError)     # values, empty batches: the C++ side may object
    elif kind == "data":
        error = data_error(obj)
        if error:
            case.reject(error[0], f"{name}: {error[1]}")
        elif label:
            case.lenient(ValueError, TypeError)
    if not writable:
        untouched(case, name, obj)
    return obj


def state_values(info):
    """values(case, shape) for the states of an energy (inside its domain)."""
    if info.get("box"):
        return lambda case, shape: case.rng.uniform(-0.8, 0.8, shape)
    return None


# ----------------------------------------------------------------------------
# Python callables handed to the module, with scripted misbehaviour.

class _Unconvertible:
    def __array__(self, *args, **kwargs):
        raise CallbackError("__array__ refuses")


# mode -> (what the call must raise once the callable misbehaved: "same" for the
# callable's own exception, a tuple of types, or None for a valid result)
CALLABLE_MODES = {
    "raise": "same",
    "raise BaseException": "same",
    "raise ValueError": "same",
    "wrong arity": "same",
    "return None": (ValueError, TypeError),
    "return string": (TypeError,),
    "return unconvertible": (TypeError,),
    "one more row": (ValueError,),
    "one column fewer": (ValueError,),
    "1-D": (ValueError,),
    "3-D": (ValueError,),
    "scalar": (ValueError,),
    "empty": (ValueError,),
    "list": None,
    "C order": None,
    "read-only": None,
    "other float": None,
    "int64": None,
    "complex": None,
    "NaN": None,
    "+inf": None,
    "huge": None,
    "return input": None,
    "re-entrant evaluate": None,
    "re-entrant solve": None,
    # solver iteration callbacks only
    "stop": None,
    "non-bool": None,
    "ambiguous": (ValueError,),
    "bad bool": "same",
}
MAP_MODES = [m for m in CALLABLE_MODES if m not in ("stop", "non-bool", "ambiguous", "bad bool")]
CALLBACK_MODES = ["raise", "raise BaseException", "wrong arity", "stop", "non-bool", "ambiguous",
                  "bad bool"]
# modes whose values are those of the good result (exact checks still hold)
EXACT_MODES = {"good", "list", "C order", "read-only", "re-entrant evaluate", "re-entrant solve"}


class Scripted:
    """A Python callable: good(*args) until its `bad_from`-th call, then `mode`."""

    def __init__(self, name, good, mode="good", bad_from=1):
        self.name, self.good, self.mode, self.bad_from = name, good, mode, bad_from
        self.calls = 0
        self.misbehaved = 0
        self.raised = []       # the exceptions it raised
        self.disarmed = False  # behaves from now on (the stale-error probe)
        self.owner = None      # the map it belongs to (re-entrant modes call into it)
        self.siblings = [self] # the map's callables, which behave in the nested call
        self.nested_errors = []

    def expectation(self):
        return CALLABLE_MODES.get(self.mode)

    def __call__(self, *args):
        self.calls += 1
        if self.mode == "good" or self.disarmed or self.calls < self.bad_from:
            return self.good(*args)
        self.misbehaved += 1
        try:
            return self._misbehave(args)
        except BaseException as e:
            self.raised.append(e)
            raise

    def _misbehave(self, args):
        mode, z = self.mode, args[0]
        if mode == "raise":
            raise CallbackError(f"{self.name} raises (call {self.calls})")
        if mode == "raise BaseException":
            raise CallbackBaseError(f"{self.name} raises a BaseException")
        if mode == "raise ValueError":
            raise ValueError(f"{self.name} raises ValueError")
        if mode == "wrong arity":
            return (lambda only: only)(*args, None)
        if mode == "return None":
            return None
        if mode == "return string":
            return "not an array"
        if mode == "return unconvertible":
            return _Unconvertible()
        if mode == "scalar":
            return 1.0
        if mode in ("re-entrant evaluate", "re-entrant solve") and self.owner is not None:
            # Calls back into the module (on its own map) while the module calls it.
            before = [c.disarmed for c in self.siblings]
            for c in self.siblings:    # the nested call sees good callables
                c.disarmed = True
            try:
                w = np.asfortranarray(np.array(z, copy=True))
                if mode == "re-entrant evaluate":
                    self.owner.evaluate(w)
                else:
                    implicit.solve(self.owner, w, "picard", max_iterations=3)
            except Exception as error:      # a failure here is the module's
                self.nested_errors.append(error)
            finally:
                for c, state in zip(self.siblings, before):
                    c.disarmed = state
            return self.good(*args)
        if mode == "stop":
            return True
        if mode == "non-bool":
            return "yes"
        if mode == "ambiguous":
            return np.ones(2)
        if mode == "bad bool":
            raised = self.raised

            class RefusesBool:
                def __bool__(self):
                    error = CallbackError("__bool__ raises")
                    raised.append(error)
                    raise error
            return RefusesBool()
        good = np.asarray(self.good(*args))
        if mode == "one more row":
            return np.zeros((good.shape[0] + 1, good.shape[1]), order="F")
        if mode == "one column fewer":
            return np.asfortranarray(good[:, 1:]) if good.shape[1] > 1 else np.zeros((good.shape[0], 2))
        if mode == "1-D":
            return good.ravel()
        if mode == "3-D":
            return good[:, :, None]
        if mode == "empty":
            return np.zeros((0, 0))
        if mode == "list":
            return good.tolist()
        if mode == "C order":
            return np.ascontiguousarray(good)
        if mode == "read-only":
            good = good.copy()
            good.flags.writeable = False
            return good
        if mode == "other float":
            return good.astype(F32 if good.dtype == F64 else F64)
        if mode == "int64":
            return np.round(good).astype(np.int64)
        if mode == "complex":
            return good.astype(np.complex128) + 1j
        if mode == "NaN":
            good = good.astype(float, copy=True)
            good[:, -1:] = np.nan     # the last column (none of an empty batch)
            return good
        if mode == "+inf":
            return np.full_like(good, np.inf)
        if mode == "huge":
            return np.full_like(good, np.finfo(good.dtype).max / 4)
        if mode == "return input":
            return z
        return self.good(*args)   # a re-entrant mode without a map to call


def scripted(case, name, good, modes=MAP_MODES):
    """A Scripted callable; misbehaving when the case mutates it."""
    mode, bad_from = "good", 1
    if case.mutate():
        mode, bad_from = case.choice(modes), case.choice([1, 1, 2, 3])
        case.strict = False
        expected = CALLABLE_MODES.get(mode, "same")
        if expected is None and mode in ("NaN", "+inf"):
            case.worsen(NONFINITE)
        elif expected is None and mode == "huge":
            case.worsen(EXTREME)
        case.note(f"{name}: {mode} from call {bad_from}")
    c = Scripted(name, good, mode, bad_from)
    case.callables.append(c)

    def nested(error):
        if c.nested_errors:
            e = c.nested_errors[0]
            raise Violation(f"{name} ({mode}): the nested call into the module raised "
                            f"{type(e).__name__}: {e}")
    case.post_checks.append(nested)
    return c


# ----------------------------------------------------------------------------
# Valid objects to call methods on.

def own(m, *callables):
    """Ties a PythonMap's Scripted callables to it (for the re-entrant modes)."""
    callables = [c for c in callables if c is not None]
    for c in callables:
        c.owner, c.siblings = m, callables


def pick_dtype(case):
    return case.choice([F64, F32])


def build_energy(case, dtype, kinds=("hopfield", "dam", "sparse", "rbm", "et"), learn=None):
    """A valid energy of a random kind: (energy, info)."""
    kind = case.choice(kinds)
    learn = case.chance(0.5) if learn is None else learn
    info = {"kind": kind, "dtype": dtype}
    if kind == "et":
        tokens, width = case.integer(1, 3), case.integer(2, 4)
        exclude_self = tokens > 1 and case.chance(0.7)   # needs 2 tokens
        heads = case.integer(0, 2)
        head_dim = case.integer(1, 3) if heads else 0
        memories = case.integer(0, 4)
        e = implicit.EnergyTransformer(
            num_tokens=tokens, token_dim=width, num_heads=heads, head_dim=head_dim,
            num_memories=memories, memory=case.choice(["relu", "softmax"]),
            exclude_self=exclude_self, learnable_layer_norm=learn, seed=case.integer(0, 99),
            init_stddev=case.choice([None, 0.3, 0.8]), dtype=dtype.name)
        info.update(n=tokens * width, tokens=tokens, width=width)
        case.note(f"energy=EnergyTransformer({tokens} tokens x {width}, {heads} heads, "
                  f"{memories} memories) {dtype.name}")
        return e, info
    n, N = case.integer(1, 8), case.integer(1, 8)
    X = np.asfortranarray(0.5 * case.rng.standard_normal((n, N))).astype(dtype)
    info.update(n=n, N=N)
    if kind == "hopfield":
        e = implicit.ModernHopfieldEnergy(X, beta=case.uniform(0.5, 4), learn_patterns=learn,
                                          learn_beta=case.chance(0.7))
    elif kind == "dam":
        interaction = case.choice(["quadratic", "polynomial", "rectified_polynomial",
                                   "exponential"])
        domain = case.choice(["euclidean", "box"])
        e = implicit.DenseAssociativeMemoryEnergy(
            X, interaction=interaction, degree=case.integer(2, 4), beta=case.uniform(0.5, 2),
            domain=domain, box_gain=case.uniform(0.5, 2), learn_patterns=learn)
        info.update(box=domain == "box", interaction=interaction)
        kind = f"dam {interaction} {domain}"
    elif kind == "sparse":
        alpha = case.choice([1.0, 1.5, 2.0, case.uniform(1.1, 3)])
        e = implicit.SparseHopfieldEnergy(X, alpha=alpha, beta=case.uniform(0.5, 2),
                                          learn_alpha=alpha > 1 and case.chance(0.5))
    else:
        visible = case.choice(["gaussian", "binary"])
        e = implicit.RbmEnergy(X, valid_prior(case, N), visible=visible, learn_weights=learn,
                               learn_bias=case.chance(0.5))
        info.update(binary=visible == "binary")
        kind = f"rbm {visible}"
    case.note(f"energy={type(e).__name__} ({kind}) n={n} N={N} {dtype.name}")
    return e, info


def valid_prior(case, units):
    kind = case.choice(["gaussian", "poisson", "bernoulli", "constant"])
    per_unit = case.chance(0.5)

    def value(low, high):
        return case.rng.uniform(low, high, units) if per_unit else case.uniform(low, high)
    if kind == "gaussian":
        return implicit.HiddenPrior.gaussian(value(-0.5, 0.5), value(0.5, 1.5))
    if kind == "poisson":
        return implicit.HiddenPrior.poisson(value(0.1, 2))
    if kind == "bernoulli":
        return implicit.HiddenPrior.bernoulli(value(0.1, 0.9))
    return implicit.HiddenPrior.constant(value(-1, 1))


def contraction(case, n, dtype):
    """A (n x n) matrix of spectral norm 0.5 (symmetric half the time) and a (n x 1) offset."""
    A = case.rng.standard_normal((n, n))
    if case.chance(0.5):
        A = A + A.T
    A *= 0.5 / max(np.linalg.norm(A, 2), 1e-12)
    c = case.rng.standard_normal((n, 1))
    return A.astype(dtype), c.astype(dtype)


def build_map(case, dtype, batch, kinds=("cccp", "gradient_step", "root", "et", "python",
                                         "python"),
              python_jvp=None, python_vjp=None):
    """A valid map: (map, info). info: n, kind, energy, A / c / callables for a PythonMap,
    parameters (its num_parameters), input (whether it has an input: a clamped ET map)."""
    kind = case.choice(kinds)
    info = {"kind": kind, "dtype": dtype, "parameters": 0, "input": False}
    if kind == "python":
        n = case.integer(1, 8)
        A, c = contraction(case, n, dtype)
        f = scripted(case, "f", lambda z: (A @ z + c).astype(z.dtype))
        jvp = vjp = None
        if python_jvp if python_jvp is not None else case.chance(0.6):
            jvp = scripted(case, "jvp", lambda z, v: (A @ v).astype(v.dtype))
        if python_vjp if python_vjp is not None else case.chance(0.7):
            vjp = scripted(case, "vjp", lambda z, u: (A.T @ u).astype(u.dtype))
        m = implicit.PythonMap(n, f, jvp=jvp, vjp=vjp, dtype=dtype.name)
        own(m, f, jvp, vjp)
        info.update(n=n, A=A, c=c, f=f, jvp=jvp, vjp=vjp,
                    symmetric=bool(np.array_equal(A, A.T)))
        case.python_maps.append((m, lambda z: A @ z + c, [x for x in (f, jvp, vjp) if x]))
        case.note(f"map=PythonMap(n={n}, jvp={jvp is not None}, vjp={vjp is not None}) "
                  f"{dtype.name}")
        return m, info
    if kind == "et":
        e, einfo = build_energy(case, dtype, kinds=("et",))
        m = implicit.EnergyTransformerMap(e, step=case.uniform(0.05, 0.5))
        info.update(n=einfo["n"], energy_info=einfo, parameters=e.num_parameters)
        if case.chance(0.3):
            mask = np.asfortranarray(case.rng.integers(0, 2, (einfo["n"], batch))).astype(dtype)
            values = np.asfortranarray(case.rng.standard_normal((einfo["n"], batch))).astype(dtype)
            m.set_clamp(mask, values)
            info["input"] = True
            info["clamp_batch"] = batch
            case.note(f"map=EnergyTransformerMap with a clamp of batch {batch}")
        else:
            case.note("map=EnergyTransformerMap")
        return m, info
    kinds = ("hopfield", "dam", "sparse", "rbm") if kind == "cccp" else (
        "hopfield", "dam", "sparse", "rbm", "et")
    e, einfo = build_energy(case, dtype, kinds=kinds)
    if kind == "cccp":
        m = implicit.CccpMap(e)
        if einfo.get("binary"):
            case.lenient(RuntimeError)      # binary RBMs have no CCCP step
    elif kind == "gradient_step":
        m = implicit.GradientStepMap(e, step=case.uniform(0.05, 0.5))
    else:
        m = implicit.EnergyRootMap(e)
    info.update(n=einfo["n"], energy_info=einfo, parameters=e.num_parameters,
                box=einfo.get("box", False))
    case.note(f"map={type(m).__name__}")
    return m, info


# ----------------------------------------------------------------------------
# Result checks.

def tolerance(dtype):
    return 1e-9 if dtype == F64 else 2e-4


def check_array(case, name, result, shape, dtype, finite=True):
    """result is an ndarray of `shape` and `dtype`; finite when the inputs were (finite)."""
    if not isinstance(result, np.ndarray):
        raise Violation(f"{name}: returned a {type(result).__name__}, not an array")
    if result.shape != tuple(shape):
        raise Violation(f"{name}: returned shape {result.shape}, expected {tuple(shape)}")
    if result.dtype != dtype:
        raise Violation(f"{name}: returned dtype {result.dtype}, expected {dtype}")
    if finite and result.size and not np.all(np.isfinite(result)):
        if case.level == TAME and case.precondition:
            raise Observation(f"non-finite result when {case.precondition}", name)
        if case.level == TAME:
            raise Violation(f"{name}: non-finite result from finite, moderate inputs")
        if case.level == EXTREME:
            raise Observation("non-finite result from finite extreme inputs", name)


def close(a, b, dtype, scale=1.0):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    tol = (1e-9 if dtype == F64 else 1e-3) * (1 + scale + np.max(np.abs(b), initial=0))
    return np.all(np.abs(a - b) <= tol)


def batch_of(obj, default):
    """The batch (columns) of `obj` when it is a 2-D array, else `default`."""
    return obj.shape[1] if isinstance(obj, np.ndarray) and obj.ndim == 2 else default


def valid_view(obj, dtype, rows, cols=-1):
    return view_error(obj, dtype, rows, cols, False) is None


# ----------------------------------------------------------------------------
# Entry points: each builds one call for a case and registers its checks.

ENTRY_POINTS = {}


def entry(name):
    def register(builder):
        ENTRY_POINTS[name] = builder
        return builder
    return register


def energy_method(case, method, with_second=None, kinds=("hopfield", "dam", "sparse", "rbm", "et")):
    dtype = pick_dtype(case)
    e, info = build_energy(case, dtype, kinds=kinds)
    n = info["n"]
    x = array_arg(case, "x", n, case.integer(1, 6), dtype, check_cols=False,
                  values=state_values(info))
    B = batch_of(x, 0)
    args = [x]
    if with_second:
        if case.chance(0.1):
            args.append(x)
            case.note(f"{with_second}=x (the same array)")
        else:
            args.append(array_arg(case, with_second, n, B, dtype, values=state_values(info)))
    return e, info, dtype, n, B, args


@entry("Energy.value")
def ep_value(case):
    e, info, dtype, n, B, (x,) = energy_method(case, "value")
    case.result_checks.append(lambda r: check_array(case, "value", r, (B,), dtype))
    return lambda: e.value(x)


@entry("Energy.gradient")
def ep_gradient(case):
    e, info, dtype, n, B, (x,) = energy_method(case, "gradient")
    case.result_checks.append(lambda r: check_array(case, "gradient", r, (n, B), dtype))
    return lambda: e.gradient(x)


@entry("Energy.descent_direction")
def ep_descent(case):
    e, info, dtype, n, B, (x,) = energy_method(case, "descent_direction")
    case.result_checks.append(lambda r: check_array(case, "descent_direction", r, (n, B), dtype))
    return lambda: e.descent_direction(x)


@entry("Energy.hessian_vector_product")
def ep_hvp(case):
    e, info, dtype, n, B, (x, v) = energy_method(case, "hvp", with_second="v")

    def check(r):
        check_array(case, "hessian_vector_product", r, (n, B), dtype)
        if case.strict and case.level == TAME and dtype == F64 and info["kind"] != "et":
            # The Hessian is symmetric: <u, H v> = <H u, v> per column.
            u = np.asfortranarray(case.rng.standard_normal((n, B)))
            lhs = np.sum(u * r, axis=0)
            rhs = np.sum(e.hessian_vector_product(x, u) * v, axis=0)
            scale = np.abs(lhs) + np.abs(rhs) + 1
            if np.any(np.abs(lhs - rhs) > 1e-6 * scale):
                raise Violation(f"hessian_vector_product is not symmetric: <u, Hv> {lhs} != "
                                f"<Hu, v> {rhs}")
    case.result_checks.append(check)
    return lambda: e.hessian_vector_product(x, v)


@entry("Energy.parameter_vector_jacobian_product")
def ep_pvjp(case):
    e, info, dtype, n, B, (x, u) = energy_method(case, "pvjp", with_second="u")
    P = e.num_parameters
    case.result_checks.append(
        lambda r: check_array(case, "parameter_vector_jacobian_product", r, (P,), dtype))
    return lambda: e.parameter_vector_jacobian_product(x, u)


@entry("Energy.attention")
def ep_attention(case):
    e, info, dtype, n, B, (x,) = energy_method(case, "attention", kinds=("hopfield", "sparse"))
    N = info["N"]

    def check(r):
        check_array(case, "attention", r, (N, B), dtype)
        if case.level == TAME and (np.any(r < 0) or not close(r.sum(axis=0), np.ones(B), dtype)):
            raise Violation("attention: a column is not a probability distribution")
    case.result_checks.append(check)
    return lambda: e.attention(x)


@entry("EnergyTransformer.layer_norm")
def ep_layer_norm(case):
    e, info, dtype, n, B, (x,) = energy_method(case, "layer_norm", kinds=("et",))

    def check(r):
        check_array(case, "layer_norm", r, (n, B), dtype)
        if case.level == TAME and "delta" not in e.parameters:
            # gamma 1, delta 0: every token (rows [A*D, (A+1)*D) of a column) has mean 0
            means = np.asarray(r).reshape(info["tokens"], info["width"], B).mean(axis=1)
            if np.any(np.abs(means) > (1e-8 if dtype == F64 else 1e-3)):
                raise Violation(f"layer_norm: token means {means.ravel()[:4]} are not 0")
    case.result_checks.append(check)
    return lambda: e.layer_norm(x)


def map_method(case, second=None):
    dtype = pick_dtype(case)
    B = case.integer(1, 5)
    m, info = build_map(case, dtype, B)
    n = info["n"]
    z = array_arg(case, "z", n, B, dtype, check_cols=False, values=state_values(info))
    Bz = batch_of(z, B)
    if info.get("clamp_batch") is not None and isinstance(z, np.ndarray) and z.ndim == 2 \
            and Bz != info["clamp_batch"]:
        case.reject(ValueError, "z: not the batch of the clamp")
    args = [z]
    if second:
        if case.chance(0.1):
            args.append(z)
            case.note(f"{second}=z (the same array)")
        else:
            args.append(array_arg(case, second, n, Bz, dtype))
    return m, info, dtype, n, Bz, args


def python_map_exact(info):
    """Whether a PythonMap's callables all give the exact good values."""
    return info["kind"] == "python" and all(
        c is None or c.mode in EXACT_MODES or c.calls < c.bad_from
        for c in (info["f"], info["jvp"], info["vjp"]))


@entry("Map.evaluate")
def ep_evaluate(case):
    m, info, dtype, n, B, (z,) = map_method(case)

    def check(r):
        check_array(case, "evaluate", r, (n, B), dtype)
        if python_map_exact(info) and case.level == TAME and valid_view(z, dtype, n):
            if not close(r, info["A"].astype(np.float64) @ z + info["c"], dtype):
                raise Violation("PythonMap.evaluate(z) != f(z)")
    case.result_checks.append(check)
    return lambda: m.evaluate(z)


def _needs_product(case, info, which):
    if info["kind"] == "python" and info[which] is None:
        case.reject((RuntimeError, ValueError), f"the PythonMap has no {which}")


@entry("Map.jacobian_vector_product")
def ep_jvp(case):
    m, info, dtype, n, B, (z, v) = map_method(case, second="v")
    _needs_product(case, info, "jvp")

    def check(r):
        check_array(case, "jacobian_vector_product", r, (n, B), dtype)
        if python_map_exact(info) and case.level == TAME and valid_view(v, dtype, n):
            if not close(r, info["A"].astype(np.float64) @ v, dtype):
                raise Violation("PythonMap.jacobian_vector_product(z, v) != A v")
    case.result_checks.append(check)
    return lambda: m.jacobian_vector_product(z, v)


@entry("Map.vector_jacobian_product")
def ep_vjp(case):
    m, info, dtype, n, B, (z, u) = map_method(case, second="u")
    _needs_product(case, info, "vjp")

    def check(r):
        check_array(case, "vector_jacobian_product", r, (n, B), dtype)
        if not (case.strict and case.level == TAME and dtype == F64):
            return
        if info["kind"] == "python" and info["jvp"] is None:
            return
        if info.get("box") or info.get("energy_info", {}).get("binary"):
            return
        # J^T is the adjoint of J: <u, J v> = <J^T u, v> per column.
        v = np.asfortranarray(case.rng.standard_normal((n, B)))
        lhs = np.sum(u * m.jacobian_vector_product(z, v), axis=0)
        rhs = np.sum(r * v, axis=0)
        if np.any(np.abs(lhs - rhs) > 1e-6 * (np.abs(lhs) + np.abs(rhs) + 1)):
            raise Violation(f"<u, J v> {lhs} != <J^T u, v> {rhs}")
    case.result_checks.append(check)
    return lambda: m.vector_jacobian_product(z, u)


@entry("EnergyTransformerMap.set_clamp")
def ep_set_clamp(case):
    dtype = pick_dtype(case)
    e, info = build_energy(case, dtype, kinds=("et",))
    m = implicit.EnergyTransformerMap(e, step=case.uniform(0.05, 0.5))
    n, B = info["n"], case.integer(1, 4)

    def mask_values(case, shape):
        return case.rng.integers(0, 2, shape)
    mask = array_arg(case, "free_mask", n, B, dtype, check_cols=False, values=mask_values)
    Bm = batch_of(mask, B)
    values = array_arg(case, "values", n, Bm, dtype)
    if isinstance(mask, np.ndarray) and mask.dtype.kind in "fiub" and mask.size:
        with np.errstate(invalid="ignore"):
            entries = np.asarray(mask, dtype=np.float64)
        if not np.all((entries == 0) | (entries == 1)):
            case.reject(ValueError, "free_mask: entries other than 0 and 1")
    follow = case.choice(["evaluate", "jacobian_vector_product", "vector_jacobian_product",
                          "solve", "backward", "clear_clamp"])
    Bz = Bm if not case.mutate() else case.integer(1, 5)
    z = np.asfortranarray(case.rng.standard_normal((n, Bz))).astype(dtype)
    if Bz != Bm and follow != "clear_clamp":
        case.reject(ValueError, f"{follow}: batch {Bz} is not the clamp's {Bm}")
    case.note(f"then {follow} on a batch of {Bz}")
    if follow != "solve":
        untouched(case, "z", z)

    def call():
        m.set_clamp(mask, values)
        if follow == "evaluate":
            return m.evaluate(z)
        if follow == "jacobian_vector_product":
            return m.jacobian_vector_product(z, z)
        if follow == "vector_jacobian_product":
            return m.vector_jacobian_product(z, z)
        if follow == "solve":
            return implicit.solve(m, z, "anderson", max_iterations=30)
        if follow == "backward":
            return implicit.backward(m, z, z, max_iterations=50)
        m.clear_clamp()
        return m.evaluate(z)

    def check(r):
        if follow == "solve":
            if not isinstance(r, implicit.Summary) or r.num_samples != Bz:
                raise Violation(f"solve with a clamp returned {r!r}")
        elif follow == "backward":
            check_array(case, "backward adjoint", r.adjoint, (n, Bz), dtype, finite=False)
            check_array(case, "backward input_gradient", r.input_gradient, (n, Bz), dtype,
                        finite=False)
        else:
            check_array(case, follow, r, (n, Bz), dtype)
        if follow == "evaluate" and case.level == TAME:
            # clamped coordinates stay at their values
            clamped = np.asarray(mask) == 0
            if not np.allclose(r[clamped], np.asarray(values)[clamped]):
                raise Violation("evaluate with a clamp moved clamped coordinates")
    case.result_checks.append(check)
    return call


def solver_for(case, info):
    """A solver name (valid for the map, or else marked) and its valid options."""
    names = implicit.solver_names()
    valid = [s for s in names
             if (not implicit.solver_needs_energy(s) or info["kind"] != "python")
             and (not implicit.solver_needs_jacobian_products(s) or info["kind"] != "python"
                  or info["jvp"] is not None)]
    name = case.choice(valid)
    if case.mutate():
        name = case.choice(names + ["nope", "", "Anderson"])
        if name not in names:
            case.reject(ValueError, f"unknown solver {name!r}")
        elif name not in valid:
            case.lenient(ValueError, RuntimeError)
    options = {}
    keys = implicit.solver_option_names(name) if name in names else []
    library = name in names and implicit.solver_library(name) == "libimplicit"
    draws = {
        "max_iterations": lambda: case.integer(1, 100),
        "absolute_tolerance": lambda: 10.0 ** -case.integer(5, 12),
        "relative_tolerance": lambda: 10.0 ** -case.integer(5, 12),
        "memory": lambda: case.integer(1, 6),
        "mixing": lambda: case.uniform(0.3, 1.2),
        "damping": lambda: case.uniform(0.2, 1.0),
        "step_size": lambda: case.uniform(0.05, 0.5),
        "record_trace": lambda: case.chance(0.5) and library,
    }
    for key in keys:
        if key in draws and case.chance(0.25):
            options[key] = draws[key]()
    options.setdefault("max_iterations", case.integer(1, 200))
    if case.mutate():
        bad = case.choice([
            ("memroy", 3, ValueError), ("absolute_tolerance", -1.0, ValueError),
            ("absolute_tolerance", float("nan"), ValueError), ("max_iterations", -1, ValueError),
            ("max_iterations", 1.5, ValueError), ("max_iterations", 2 ** 40, ValueError),
            ("max_iterations", "many", ValueError), ("max_iterations", None, TypeError),
            ("max_iterations", [3], TypeError), ("divergence_threshold", 0.5, ValueError),
            ("record_trace", "maybe", ValueError), ("max_iterations", 0, None),
            ("absolute_tolerance", 0.0, None), ("max_iterations", np.int64(7), None),
            ("relative_tolerance", np.float32(1e-3), None), ("max_iterations", "12", None),
            ("max_iterations", True, None)])
        key, value, error = bad
        options[key] = value
        case.note(f"option {key}={value!r}")
        if error:
            case.reject(error, f"option {key}={value!r}")
        else:
            case.lenient(ValueError)
    if options.get("record_trace") and not library:
        case.lenient(ValueError)
    if info["kind"] == "python" and info["jvp"] is None and info["vjp"] is not None and \
            name in ("kinsol-newton-gmres", "petsc-newtonls"):
        # has_jacobian_products is true with vjp alone, so these call J v
        case.question("a PythonMap with vjp but no jvp fails in a solver that would use "
                      "finite differences without vjp")
    return name, options


def iteration_callback(case):
    """A solver callback; it keeps the IterationSummary it gets and reads it later."""
    kept = []

    def good(it):
        kept.append(it)
        return it.iteration < 0 and it.num_converged < 0   # False, reading the fields

    def after(error):
        for it in kept[-3:]:    # copies, still valid after the solve
            if it.iteration < 0 or it.num_active < 0 or it.function_evaluations < 0:
                raise Violation(f"an IterationSummary kept past its solve reads {it!r}")
    case.post_checks.append(after)
    return scripted(case, "callback", good, modes=CALLBACK_MODES)


@entry("solve")
def ep_solve(case):
    dtype = pick_dtype(case)
    B = case.integer(1, 6)
    m, info = build_map(case, dtype, B)
    n = info["n"]
    name, options = solver_for(case, info)
    callback = iteration_callback(case) if case.chance(0.3) else None
    z = array_arg(case, "z", n, B, dtype, writable=True, check_cols=False,
                  values=state_values(info))
    Bz = batch_of(z, B)
    if info.get("clamp_batch") is not None and Bz != info["clamp_batch"] \
            and valid_view(z, dtype, n):
        case.reject(ValueError, "z: not the batch of the clamp")
    sharded = case.chance(0.1)
    if sharded and (info["input"] or info["kind"] == "python"):
        case.reject(ValueError, "sharded solve of a map with per-sample data (or a PythonMap)")
    style = case.choice(["implicit.solve", "Solver.solve"])
    case.note(f"{style}({name!r}, {options}, sharded={sharded}, callback="
              f"{callback.mode if callback else None})")
    z0 = z.copy() if isinstance(z, np.ndarray) else None

    def call():
        if style == "implicit.solve":
            kwargs = dict(options)
            if callback:
                kwargs["callback"] = callback
            return implicit.solve(m, z, name, sharded=sharded, **kwargs)
        solver = implicit.Solver(name, options, **({"callback": callback} if callback else {}))
        return solver.solve(m, z, sharded=sharded)

    def check(summary):
        if not isinstance(summary, implicit.Summary):
            raise Violation(f"solve returned a {type(summary).__name__}, not a Summary")
        if summary.num_samples != Bz or len(summary.sample_status) != Bz:
            raise Violation(f"solve: Summary of {summary.num_samples} samples for a batch of {Bz}")
        if summary.sample_residual.shape != (Bz,):
            raise Violation(f"solve: sample_residual of shape {summary.sample_residual.shape}")
        if not all(isinstance(s, str) and s for s in summary.sample_status):
            raise Violation(f"solve: sample_status {summary.sample_status}")
        summary.brief_report(), summary.full_report(), summary.trace
        if case.level != TAME or set(options) - {"max_iterations", "memory", "mixing",
                                                  "damping", "record_trace", "step_size"}:
            return
        converged = [b for b, s in enumerate(summary.sample_status) if s == "converged"]
        if not converged or not isinstance(z, np.ndarray):
            return
        # A converged sample is a fixed point (loosely: any tolerance the solver used).
        if info["kind"] == "python":
            if not python_map_exact(info):
                return
            fz = info["A"].astype(np.float64) @ z + info["c"]
        elif info["kind"] == "et" or info.get("box"):
            return
        else:
            fz = m.evaluate(z)
        residual = np.linalg.norm((fz - z)[:, converged], axis=0)
        bound = (1e-4 if dtype == F64 else 1e-2) * (1 + np.linalg.norm(z[:, converged], axis=0))
        if np.any(residual > bound):
            raise Violation(f"solve: samples {converged} reported converged with residuals "
                            f"{residual} (> {bound})")
    case.result_checks.append(check)

    def after(error):
        if z0 is None or not isinstance(z, np.ndarray):
            return
        if error is not None and type(error) in case.must_raise and not any(
                c.misbehaved for c in case.callables):
            same = np.array_equal(z0, z, equal_nan=True) if z.dtype.kind in "fc" else \
                np.array_equal(z0, z)
            if not same:
                raise Violation("solve rejected its arguments but wrote z")
        if valid_view(z, dtype, n) and np.all(np.isfinite(z0)) and not np.all(np.isfinite(z)):
            text = ("solve left non-finite values in z, which started finite (documented: "
                    "every sample ends at its best state)")
            if case.level == TAME:
                raise Violation(text)
            raise Observation("solve left non-finite values in z", text)
        if error is not None and any(error is e for c in case.callables for e in c.raised):
            if not isinstance(getattr(error, "summary", None), implicit.Summary):
                raise Violation("solve re-raised a callable's exception without its summary")
    case.post_checks.append(after)
    return call


def backward_options(case, info):
    kw = {}
    if case.chance(0.5):
        kw["linear_solver"] = case.choice(["auto", "minres", "gmres", "cg", "fixed_point",
                                           "anderson", "broyden", "direct"])
    if case.chance(0.3):
        kw["method"] = case.choice(["implicit", "jacobian_free", "phantom"])
    if case.chance(0.4):
        kw["failed_samples"] = case.choice(["nan", "skip", "throw"])
    if case.chance(0.3):
        kw["max_iterations"] = case.integer(1, 300)
    if case.chance(0.2):
        kw["tolerance"] = 10.0 ** -case.integer(4, 12)
    if case.chance(0.1):
        kw["restart"] = case.integer(1, 30)
    if case.chance(0.1):
        kw["memory"] = case.integer(1, 6)
    if case.chance(0.1):
        kw["phantom_steps"] = case.integer(1, 8)
    if case.chance(0.1):
        kw["require_converged_forward"] = case.chance(0.5)
    case.note(f"backward options {kw}")
    if case.mutate():
        key, value, error, documented = case.choice([
            ("method", "nope", ValueError, True), ("linear_solver", "qr", ValueError, True),
            ("tolerance", -1.0, ValueError, True), ("tolerance", float("nan"), ValueError, True),
            ("restart", 0, ValueError, True), ("failed_samples", "drop", ValueError, True),
            ("tol", 1e-3, ValueError, True), ("memory", -2, ValueError, True),
            ("tolerance", "abc", ValueError, False), ("max_iterations", 2 ** 40, ValueError,
                                                      False),
            ("method", 3, ValueError, False), ("regularization", None, ValueError, False),
            ("max_iterations", 0, None, False), ("drop_failed_samples", True, None, False),
            ("phantom_damping", 0.0, None, False), ("divergence_threshold", 0.5, None, False)])
        kw[key] = value
        case.note(f"backward option {key}={value!r}")
        if error:
            # Documented: "Bad options raise ValueError"; a wrongly typed value's
            # RuntimeError is an observation, not a violation.
            case.reject(error, f"backward option {key}={value!r}", documented=documented)
        else:
            case.lenient(ValueError)
    return kw


@entry("backward")
def ep_backward(case):
    dtype = pick_dtype(case)
    B = case.integer(1, 5)
    m, info = build_map(case, dtype, B, python_vjp=case.chance(0.85))
    n = info["n"]
    kw = backward_options(case, info)
    forward = None
    z = np.asfortranarray(0.7 * case.rng.standard_normal((n, B))).astype(dtype)
    if info.get("box"):
        z = np.asfortranarray(case.rng.uniform(-0.8, 0.8, (n, B))).astype(dtype)
    if case.chance(0.4) and all(c.mode == "good" for c in case.callables):
        # z_star from a solve (not the call under test)
        try:
            forward = implicit.solve(m, z, "anderson", max_iterations=60)
            case.note(f"z_star from a solve: {forward.termination_type}, "
                      f"{forward.num_converged}/{forward.num_samples} converged")
        except CLEAN_ERRORS as error:
            case.note(f"the solve for z_star raised {type(error).__name__}")
        if case.mutate():
            forward = case.choice(["no", implicit.Solver("picard"), 3])
            case.note(f"forward_summary={forward!r}")
            case.reject(TypeError, "forward_summary: not a Summary")
    label = ""
    if case.mutate():
        label = case.choice(ARRAY_MUTATIONS)
        z = ARRAY_MUTATIONS[label](case, z)
    case.note(f"z_star={describe(z)}" + (f" [{label}]" if label else ""))
    case.worsen(level_of(z))
    error = view_error(z, dtype, n, -1, False)
    if error:
        case.reject(error[0], f"z_star: {error[1]}")
    elif label:
        case.lenient(ValueError)
    untouched(case, "z_star", z)
    Bz = batch_of(z, B)
    g = array_arg(case, "grad_z", n, Bz, dtype)
    if info["kind"] == "python" and info["vjp"] is None:
        case.lenient(ValueError, RuntimeError)     # documented: backward needs vjp
    if info.get("clamp_batch") is not None and Bz != info["clamp_batch"] \
            and valid_view(z, dtype, n):
        case.reject(ValueError, "z_star: not the batch of the clamp")
    if isinstance(forward, implicit.Summary) and (Bz != B or not valid_view(z, dtype, n)):
        case.lenient(ValueError)
    if kw.get("failed_samples") == "throw" or info["kind"] == "python":
        case.may_raise.add(implicit.ConvergenceError)
    if info.get("energy_info", {}).get("binary") or info.get("box"):
        case.lenient(RuntimeError, ValueError)

    def call():
        return implicit.backward(m, z, g, forward_summary=forward, **kw)

    def check(r):
        if not isinstance(r, implicit.BackwardResult):
            raise Violation(f"backward returned a {type(r).__name__}")
        s = r.summary
        if s.num_samples != Bz or len(s.sample_status) != Bz:
            raise Violation(f"backward: summary of {s.num_samples} samples for a batch of {Bz}")
        check_array(case, "adjoint", r.adjoint, (n, Bz), dtype, finite=False)
        check_array(case, "parameter_gradient", r.parameter_gradient, (info["parameters"],),
                    dtype, finite=False)
        if info["input"]:
            check_array(case, "input_gradient", r.input_gradient, (n, Bz), dtype, finite=False)
        elif r.input_gradient.size != 0:
            raise Violation(f"backward: input_gradient {r.input_gradient.shape} for a map "
                            "without an input")
        converged = [b for b, st in enumerate(s.sample_status) if st == "converged"]
        failed = [b for b in range(Bz) if b not in converged]
        if kw.get("failed_samples") == "throw" and failed and not kw.get("drop_failed_samples"):
            raise Violation(f"backward: failed_samples='throw' returned with failed samples "
                            f"{failed}")
        if case.level == TAME and converged and not np.all(np.isfinite(r.adjoint[:, converged])):
            raise Violation("backward: a converged sample's adjoint is not finite")
        if kw.get("failed_samples") == "skip" and failed and np.any(r.adjoint[:, failed] != 0):
            raise Violation("backward: failed_samples='skip' left a non-zero adjoint")
        if kw.get("failed_samples", "nan") == "nan" and failed and not kw.get(
                "drop_failed_samples") and np.all(np.isfinite(r.adjoint[:, failed])):
            raise Violation(f"backward: failed samples {failed} have finite adjoints "
                            "(documented: NaN, never zero)")
        if case.level == TAME and r.ok and not np.all(np.isfinite(r.parameter_gradient)):
            raise Violation("backward: ok, but the parameter gradient is not finite")
        # The adjoint solves (I - A)^T u = g for the affine PythonMap.
        if (info["kind"] == "python" and python_map_exact(info) and dtype == F64
                and case.level == TAME and converged and kw.get("method", "implicit") == "implicit"
                and "tolerance" not in kw and "max_iterations" not in kw
                and (info["symmetric"] or kw.get("linear_solver") not in ("cg", "minres"))):
            A = info["A"].astype(np.float64)
            u = r.adjoint[:, converged]
            residual = np.linalg.norm((np.eye(n) - A).T @ u - g[:, converged], axis=0)
            bound = 1e-6 * (1 + np.linalg.norm(g[:, converged], axis=0))
            if np.any(residual > bound):
                raise Violation(f"backward: adjoint of converged samples {converged} does not "
                                f"solve (I - A)^T u = g: residual {residual}")
    case.result_checks.append(check)
    return call


def score_values(case, shape):
    return 2.0 * case.rng.standard_normal(shape)


def entmax_reference_check(case, name, s, alpha, p):
    """Columns of finite (or -inf) scores give distributions with zeros at -inf."""
    if not isinstance(s, np.ndarray) or s.dtype.kind != "f" or s.ndim != 2:
        return
    s = np.asarray(s, dtype=np.float64)
    dtype = p.dtype
    for b in range(s.shape[1]):
        col = s[:, b]
        if np.any(np.isnan(col)) or np.any(col == np.inf) or not np.any(np.isfinite(col)):
            continue
        finite = col[np.isfinite(col)]
        spread = finite.max() - finite.min() if finite.size else 0
        if not np.all(np.isfinite(p[:, b])):
            if spread <= TAME_BOUND and np.max(np.abs(finite)) <= TAME_BOUND:
                raise Violation(f"{name}: non-finite weights for finite scores (column {b})")
            raise Observation("non-finite result from finite extreme inputs", f"{name} column {b}")
        if np.any(p[:, b] < 0) or abs(p[:, b].sum() - 1) > (1e-9 if dtype == F64 else 1e-4) * len(col):
            if spread <= TAME_BOUND and np.max(np.abs(finite)) <= TAME_BOUND:
                raise Violation(f"{name}: column {b} is not a distribution: {p[:, b]}")
            raise Observation("entmax of extreme scores is not a distribution", f"{name} column {b}")
        if np.any(p[col == -np.inf, b] != 0):
            raise Violation(f"{name}: a -inf score got a non-zero weight (column {b})")
        if alpha == 2.0 and np.max(np.abs(finite)) <= TAME_BOUND:
            # sparsemax: the Euclidean projection onto the simplex
            z = np.sort(finite)[::-1]
            k = np.arange(1, z.size + 1)
            support = z - (np.cumsum(z) - 1) / k > 0
            tau = (np.cumsum(z)[support][-1] - 1) / k[support][-1]
            ref = np.where(np.isfinite(col), np.maximum(col - tau, 0), 0)
            if not np.allclose(p[:, b], ref, atol=1e-9 if dtype == F64 else 1e-4):
                raise Violation(f"{name}: sparsemax column {b} is {p[:, b]}, expected {ref}")


def entmax_alpha(case):
    alpha = case.choice([1.0, 1.5, 2.0, case.uniform(1.01, 4.0)])
    if case.mutate():
        alpha = case.choice([0.5, 0.0, -1.0, float("nan"), float("inf"), 1e300, 1 + 1e-12,
                             "1.5", None, np.float32(1.5), 2])
        case.note(f"alpha={alpha!r}")
        if isinstance(alpha, str) or alpha is None:
            case.reject(TypeError, f"alpha={alpha!r}")
        elif not (math.isfinite(alpha) and alpha >= 1):
            case.reject(ValueError, f"alpha={alpha!r}")
        else:
            case.lenient(ValueError)
            case.worsen(level_of(alpha))
    return alpha


@entry("entmax")
def ep_entmax(case):
    dtype = pick_dtype(case)
    N, B = case.integer(1, 8), case.integer(1, 6)
    s = array_arg(case, "scores", N, B, dtype, kind="scores", check_rows=False,
                  check_cols=False, values=score_values)
    alpha = entmax_alpha(case)
    if isinstance(s, np.ndarray) and s.ndim == 2 and s.size == 0:
        case.lenient(ValueError)

    def check(p):
        check_array(case, "entmax", p, s.shape, data_dtype(s), finite=False)
        entmax_reference_check(case, "entmax", s, float(alpha), p)
    case.result_checks.append(check)
    return lambda: implicit.entmax(s, alpha)


@entry("sparsemax")
def ep_sparsemax(case):
    dtype = pick_dtype(case)
    N, B = case.integer(1, 8), case.integer(1, 6)
    s = array_arg(case, "scores", N, B, dtype, kind="scores", check_rows=False,
                  check_cols=False, values=score_values)
    if isinstance(s, np.ndarray) and s.ndim == 2 and s.size == 0:
        case.lenient(ValueError)

    def check(p):
        check_array(case, "sparsemax", p, s.shape, data_dtype(s), finite=False)
        entmax_reference_check(case, "sparsemax", s, 2.0, p)
    case.result_checks.append(check)
    return lambda: implicit.sparsemax(s)


@entry("entmax_jacobian_vector_product")
def ep_entmax_jvp(case):
    dtype = pick_dtype(case)
    N, B = case.integer(1, 8), case.integer(1, 6)
    alpha = case.choice([1.0, 1.5, 2.0, case.uniform(1.01, 4.0)])
    weights = implicit.entmax(np.asfortranarray(2 * case.rng.standard_normal((N, B))).astype(dtype),
                              alpha)

    def p_values(case, shape):
        return weights
    p = array_arg(case, "p", N, B, dtype, kind="scores", check_rows=False, check_cols=False,
                  values=p_values)
    pd = data_dtype(p)
    rows, cols = (p.shape if isinstance(p, np.ndarray) and p.ndim == 2 else (N, B))
    if not (isinstance(p, np.ndarray) and p.shape == weights.shape
            and np.array_equal(np.asarray(p, dtype=np.float64), weights)):
        case.precondition = "p is not an entmax output"
    v = array_arg(case, "v", rows, cols, pd)
    if case.chance(0.3):
        alpha = entmax_alpha(case)      # another alpha than the weights were computed with
        case.precondition = "p is not the entmax output for alpha"
    case.note(f"alpha={alpha!r}")

    def check(r):
        check_array(case, "entmax_jacobian_vector_product", r, (rows, cols), pd)
        if case.strict and case.level == TAME and pd == F64:
            # symmetric: <u, J v> = <J u, v>; and J 1 = 0 (the weights sum to 1)
            u = np.asfortranarray(case.rng.standard_normal((rows, cols)))
            lhs = np.sum(u * r, axis=0)
            rhs = np.sum(implicit.entmax_jacobian_vector_product(p, alpha, u) * v, axis=0)
            if np.any(np.abs(lhs - rhs) > 1e-6 * (np.abs(lhs) + np.abs(rhs) + 1)):
                raise Violation(f"entmax_jacobian_vector_product is not symmetric: {lhs} vs {rhs}")
            ones = implicit.entmax_jacobian_vector_product(p, alpha, np.ones((rows, cols), order="F"))
            if np.any(np.abs(ones) > 1e-6 * (1 + np.abs(r).max(initial=0))):
                raise Violation("entmax_jacobian_vector_product(p, alpha, 1) is not 0")
    case.result_checks.append(check)
    return lambda: implicit.entmax_jacobian_vector_product(p, alpha, v)


def constructor_dtype(case):
    """The dtype keyword (absent, valid or bad) and whether it overrides the data's."""
    if case.chance(0.5):
        return {}, None
    value = case.choice(["float64", "float32", np.float32, np.dtype("float64"), None])
    if case.mutate():
        value = case.choice(["int32", "complex64", "nope", 3, np.int64, "float16"])
        case.reject(TypeError, f"dtype={value!r}")
        case.note(f"dtype={value!r}")
        return {"dtype": value}, None
    case.note(f"dtype={value!r}")
    return {"dtype": value}, (None if value is None else np.dtype(value))


def float_option(case, name, value, bad, must=True, documented=True):
    """value, or when the case mutates it one of `bad` (which must be rejected if `must`)."""
    if case.mutate():
        value = case.choice(bad)
        case.note(f"{name}={value!r}")
        if must:
            case.reject(ValueError, f"{name}={value!r}", documented)
        else:
            case.lenient(ValueError)
            if not (isinstance(value, float) and math.isfinite(value)):
                case.worsen(NONFINITE)
    return value


def energy_constructor(case, kind):
    dtype_kw, forced = constructor_dtype(case)
    data = pick_dtype(case) if forced is None else forced
    n, N = case.integer(1, 8), case.integer(1, 8)
    name = "weights" if kind == "rbm" else "patterns"
    X = array_arg(case, name, n, N, data, kind="data", values=lambda case, s: 0.5 *
                  case.rng.standard_normal(s))
    kw = dict(dtype_kw)
    if kind == "hopfield":
        cls = implicit.ModernHopfieldEnergy
        kw["beta"] = float_option(case, "beta", case.uniform(0.5, 4),
                                  [0.0, -1.0, float("nan"), float("inf")])
        kw["learn_patterns"], kw["learn_beta"] = case.chance(0.5), case.chance(0.5)
    elif kind == "dam":
        cls = implicit.DenseAssociativeMemoryEnergy
        kw["interaction"] = case.choice(["quadratic", "polynomial", "rectified_polynomial",
                                         "exponential"])
        kw["degree"] = case.integer(2, 4)
        if case.mutate():
            kw["interaction"] = case.choice(["cubic", ""])
            case.reject(ValueError, f"interaction={kw['interaction']!r}")
        if kw["interaction"] in ("polynomial", "rectified_polynomial") and case.mutate():
            kw["degree"] = case.choice([1, 0, -3])
            case.reject(ValueError, f"degree={kw['degree']}")
        kw["domain"] = case.choice(["euclidean", "box"])
        if case.mutate():
            kw["domain"] = "torus"
            case.reject(ValueError, "domain='torus'")
        kw["beta"] = float_option(case, "beta", case.uniform(0.5, 2),
                                  [0.0, -1.0, float("nan")], must=False)
        kw["box_gain"] = float_option(case, "box_gain", case.uniform(0.5, 2),
                                      [0.0, -1.0, float("nan")], must=False)
        kw["learn_patterns"] = case.chance(0.5)
    elif kind == "sparse":
        cls = implicit.SparseHopfieldEnergy
        kw["alpha"] = float_option(case, "alpha", case.choice([1.0, 1.5, 2.0]),
                                   [0.5, float("nan"), float("inf"), -2.0])
        kw["beta"] = float_option(case, "beta", case.uniform(0.5, 2),
                                  [0.0, -1.0, float("nan")], must=False)
        kw["learn_alpha"] = case.chance(0.5)
        if kw["learn_alpha"] and kw["alpha"] == 1.0:
            case.reject(ValueError, "learn_alpha with alpha 1")
    else:
        cls = implicit.RbmEnergy
        kw["prior"] = valid_prior(case, N)
        if case.mutate():
            kw["prior"] = case.choice(["gaussian", None, 1.0])
            case.reject(TypeError, f"prior={kw['prior']!r}")
        kw["visible"] = case.choice(["gaussian", "binary"])
        if case.mutate():
            kw["visible"] = "ternary"
            case.reject(ValueError, "visible='ternary'")
        kw["learn_weights"], kw["learn_bias"] = case.chance(0.5), case.chance(0.5)
    case.note(f"{cls.__name__}({name}, {', '.join(f'{k}={v!r}' for k, v in kw.items())})")

    def check(e):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = np.array(X, dtype=np.float64)
        except (TypeError, ValueError):
            ref = None
        want = np.dtype(kw["dtype"]) if kw.get("dtype") is not None else data_dtype(X)
        if e.dtype != want.name:
            raise Violation(f"{cls.__name__}: dtype {e.dtype}, expected {want.name}")
        if ref is not None and ref.ndim == 2 and e.dimension != ref.shape[0]:
            raise Violation(f"{cls.__name__}: dimension {e.dimension} for {ref.shape} data")
        if kind == "hopfield" and ref is not None and case.level == TAME:
            if not close(e.patterns, ref.astype(want), want):
                raise Violation("ModernHopfieldEnergy.patterns differ from the patterns given")
        check_parameters(e)
        # First use with a moderate state.
        x = np.asfortranarray(case.rng.uniform(-0.8, 0.8, (e.dimension, 2))).astype(want)
        try:
            values = e.value(x)
        except CLEAN_ERRORS as error:
            raise Observation("accepted at construction, failed at first use",
                              f"{cls.__name__}.value: {type(error).__name__}: {error}")
        if case.level == TAME and not np.all(np.isfinite(values)):
            if case.strict:
                raise Violation(f"{cls.__name__}: valid construction, non-finite value at a "
                                "moderate state")
            raise Observation("accepted at construction, non-finite at first use",
                              f"{cls.__name__} {case.notes[-1]}")
    case.result_checks.append(check)
    return lambda: cls(X, **kw)


def check_parameters(obj):
    """The parameter views are consistent: their sizes add up, they alias the vector."""
    blocks = obj.parameters
    total = sum(v.size for v in blocks.values())
    if hasattr(obj, "num_parameters"):
        vector = obj.parameter_vector
        if total != obj.num_parameters or vector.shape != (total,):
            raise Violation(f"parameters: blocks of {total} values, num_parameters "
                            f"{obj.num_parameters}, parameter_vector {vector.shape}")
        joined = np.concatenate([v.ravel(order="F") for v in blocks.values()]) if blocks \
            else np.zeros(0, vector.dtype)
        if not np.array_equal(joined, vector, equal_nan=True):
            raise Violation("parameters: the blocks are not the parameter_vector's layout")
    for name, v in blocks.items():
        if not (v.flags.f_contiguous and v.flags.writeable and v.ndim == 2):
            raise Violation(f"parameters[{name!r}] is not a writable 2-D Fortran view")


@entry("ModernHopfieldEnergy(patterns)")
def ep_hopfield_ctor(case):
    return energy_constructor(case, "hopfield")


@entry("DenseAssociativeMemoryEnergy(patterns)")
def ep_dam_ctor(case):
    return energy_constructor(case, "dam")


@entry("SparseHopfieldEnergy(patterns)")
def ep_sparse_ctor(case):
    return energy_constructor(case, "sparse")


@entry("RbmEnergy(weights, prior)")
def ep_rbm_ctor(case):
    return energy_constructor(case, "rbm")


@entry("HiddenPrior(values)")
def ep_prior(case):
    kind = case.choice(["gaussian", "poisson", "bernoulli", "constant"])
    M = case.integer(1, 5)
    ranges = {"gaussian": [(-0.5, 0.5), (0.5, 1.5)], "poisson": [(0.1, 2)],
              "bernoulli": [(0.1, 0.9)], "constant": [(-1, 1)]}[kind]
    args = []
    for low, high in ranges:
        form = case.choice(["float", "array", "list", "numpy scalar", "0-D"])
        v = case.rng.uniform(low, high, M)
        value = {"float": float(v[0]), "array": v, "list": v.tolist(),
                 "numpy scalar": np.float64(v[0]), "0-D": np.asarray(v[0])}[form]
        if case.mutate():
            bad = case.choice(["2-D", "empty", "NaN", "inf", "negative", "zero", "one", "string",
                               "None", "complex", "bool", "int", "object", "huge"])
            value = {"2-D": v.reshape(1, -1), "empty": np.zeros(0), "NaN": np.full(M, np.nan),
                     "inf": np.inf, "negative": -v, "zero": 0.0, "one": 1.0, "string": "abc",
                     "None": None, "complex": v + 1j, "bool": np.ones(M, bool),
                     "int": np.arange(M), "object": v.astype(object), "huge": 1e300}[bad]
            case.note(f"value {len(args)}: {bad}")
            a = None
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    a = np.array(value, dtype=np.float64)
            except (TypeError, ValueError):
                pass
            if a is None or a.ndim > 1 or a.size == 0:
                case.reject((ValueError, TypeError), f"{bad}: not a number or a 1-D array")
            elif kind == "bernoulli" and np.any((a <= 0) | (a >= 1)):
                case.reject(ValueError, "bernoulli p outside (0, 1)")
            elif kind == "poisson" and np.any(a < 0):
                case.reject(ValueError, "negative poisson rate")
            else:
                case.lenient(ValueError)
                case.worsen(level_of(a))
        args.append(value)
    case.note(f"HiddenPrior.{kind}({', '.join(describe(a) for a in args)})")

    def check(prior):
        if not isinstance(prior, implicit.HiddenPrior) or prior.kind != kind:
            raise Violation(f"HiddenPrior.{kind} returned {prior!r}")
        W = np.asfortranarray(0.3 * case.rng.standard_normal((3, M)))
        x = np.asfortranarray(case.rng.uniform(-0.8, 0.8, (3, 2)))
        try:
            values = implicit.RbmEnergy(W, prior).value(x)
        except CLEAN_ERRORS as error:
            raise Observation("accepted at construction, failed at first use",
                              f"HiddenPrior.{kind}: {type(error).__name__}: {error}")
        if not np.all(np.isfinite(values)):
            if case.level == TAME and case.strict:
                raise Violation(f"RbmEnergy with a valid HiddenPrior.{kind}: non-finite value")
            raise Observation("accepted at construction, non-finite at first use",
                              f"HiddenPrior.{kind}({', '.join(describe(a) for a in args)})")
    case.result_checks.append(check)
    return lambda: getattr(implicit.HiddenPrior, kind)(*args)


def int_option(case, name, value, bad_values=(0, -1), wrong_types=(1.5, "2", None, 2 ** 64)):
    if case.mutate():
        value = case.choice(list(bad_values) + list(wrong_types))
        case.note(f"{name}={value!r}")
        if value in wrong_types and not isinstance(value, bool):
            case.reject((TypeError, OverflowError), f"{name}={value!r}")
        else:
            case.reject(ValueError, f"{name}={value!r}")
    return value


@entry("EnergyTransformer(...)")
def ep_et_ctor(case):
    kw = {"num_tokens": int_option(case, "num_tokens", case.integer(1, 3)),
          "token_dim": int_option(case, "token_dim", case.integer(2, 4), bad_values=(1, 0, -1)),
          "num_heads": case.integer(0, 2)}
    kw["head_dim"] = case.integer(1, 3) if kw["num_heads"] else 0
    if kw["num_heads"] and case.mutate():
        kw["head_dim"] = 0
        case.reject(ValueError, "head_dim 0 with heads")
    kw["num_memories"] = int_option(case, "num_memories", case.integer(0, 4), bad_values=(-1,))
    kw["memory"] = case.choice(["relu", "softmax"])
    if case.mutate():
        kw["memory"] = "gelu"
        case.reject(ValueError, "memory='gelu'")
    kw["beta"] = float_option(case, "beta", case.choice([0.0, case.uniform(0.2, 2)]),
                              [-1.0, float("nan"), float("inf")], must=False)
    kw["eps"] = float_option(case, "eps", 1e-5, [0.0, -1.0, float("nan")], must=False)
    kw["exclude_self"] = case.chance(0.5)
    if kw["exclude_self"] and kw["num_tokens"] == 1 and kw["num_heads"]:
        case.reject(ValueError, "exclude_self with 1 token")
    kw["learnable_layer_norm"] = case.chance(0.3)
    kw["seed"] = case.integer(0, 99)
    kw["init_stddev"] = float_option(case, "init_stddev", case.choice([None, 0.5]),
                                     [-1.0, float("nan"), 0.0], must=False)
    kw["dtype"] = case.choice(["float64", "float32"])
    if case.mutate():
        kw["dtype"] = case.choice(["int32", "nope"])
        case.reject(TypeError, f"dtype={kw['dtype']!r}")
    case.note("EnergyTransformer(" + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ")")

    def check(et):
        if et.dimension != kw["num_tokens"] * kw["token_dim"]:
            raise Violation(f"EnergyTransformer: dimension {et.dimension} for {kw}")
        check_parameters(et)
        x = np.asfortranarray(case.rng.standard_normal((et.dimension, 2))).astype(kw["dtype"])
        try:
            values, g = et.value(x), et.descent_direction(x)
        except CLEAN_ERRORS as error:
            raise Observation("accepted at construction, failed at first use",
                              f"EnergyTransformer: {type(error).__name__}: {error}")
        check_array(case, "EnergyTransformer.value", values, (2,), np.dtype(kw["dtype"]))
        check_array(case, "EnergyTransformer.descent_direction", g, x.shape,
                    np.dtype(kw["dtype"]))
    case.result_checks.append(check)
    return lambda: implicit.EnergyTransformer(**kw)


@entry("PythonMap(...)")
def ep_python_map_ctor(case):
    dtype = pick_dtype(case)
    n = case.integer(1, 8)
    A, c = contraction(case, n, dtype)
    dimension = int_option(case, "dimension", n, bad_values=(0, -1),
                           wrong_types=(1.5, "3", None, 2 ** 70))
    f = scripted(case, "f", lambda z: (A @ z + c).astype(z.dtype))
    jvp = scripted(case, "jvp", lambda z, v: (A @ v).astype(v.dtype)) if case.chance(0.5) else None
    vjp = scripted(case, "vjp", lambda z, u: (A.T @ u).astype(u.dtype)) if case.chance(0.5) else None
    args = {"f": f, "jvp": jvp, "vjp": vjp}
    if case.mutate():
        which = case.choice(["f", "jvp", "vjp"])
        args[which] = case.choice([3, "f", np.zeros(2)] + ([None] if which == "f" else []))
        case.note(f"{which}={args[which]!r}")
        case.reject(TypeError, f"{which}: not callable")
    dtype_arg = case.choice([dtype.name, dtype.type, dtype])
    if case.mutate():
        dtype_arg = case.choice(["int16", "complex128", "bogus", 7])
        case.reject(TypeError, f"dtype={dtype_arg!r}")
    case.note(f"PythonMap({dimension!r}, jvp={jvp is not None}, vjp={vjp is not None}, "
              f"dtype={dtype_arg!r})")
    z = np.asfortranarray(case.rng.standard_normal((n, case.integer(1, 4)))).astype(dtype)

    def call():
        m = implicit.PythonMap(dimension, args["f"], jvp=args["jvp"], vjp=args["vjp"],
                               dtype=dtype_arg)
        own(m, f, jvp, vjp)
        case.python_maps.append((m, lambda z: A @ z + c, [x for x in (f, jvp, vjp) if x]))
        return m

    def check(m):
        if m.dimension != n or m.dtype != dtype.name:
            raise Violation(f"PythonMap: dimension {m.dimension} dtype {m.dtype}")
        if m.has_jacobian_products != (args["jvp"] is not None or args["vjp"] is not None):
            raise Violation("PythonMap.has_jacobian_products is wrong")
        f.disarmed = True
        if not close(m.evaluate(z), A.astype(np.float64) @ z + c, dtype):
            raise Violation("PythonMap.evaluate(z) != f(z)")
    case.result_checks.append(check)
    return call


def layer_kwargs(case, dtype, mutate=True):
    maybe = case.mutate if mutate else (lambda: False)
    heads = case.integer(1, 2)
    kw = {"query_dim": case.integer(1, 6), "pattern_dim": case.integer(1, 6),
          "num_heads": heads, "head_dim": case.integer(0 if heads == 1 else 1, 3),
          "value_dim": case.integer(0 if heads == 1 else 1, 3), "output_dim": case.integer(0, 4),
          "project_queries": True, "project_keys": True, "project_values": True,
          "project_output": True, "beta": case.choice([0.0, case.uniform(0.5, 3)]),
          "learn_beta": case.chance(0.5), "query_weight": case.choice([0.0, case.uniform(0.1, 0.9)]),
          "one_step": case.chance(0.4), "seed": case.integer(1, 99), "dtype": dtype.name}
    if case.chance(0.5):
        kw["solver"] = implicit.Solver(case.choice(["picard", "anderson", "broyden"]),
                                       max_iterations=case.integer(5, 100))
    if case.chance(0.3):
        kw["backward"] = {"linear_solver": case.choice(["gmres", "minres", "direct", "auto"])}
    if maybe():
        key, value, error = case.choice([
            ("query_dim", 0, ValueError), ("pattern_dim", -1, ValueError),
            ("num_heads", 0, ValueError), ("query_weight", 1.0, ValueError),
            ("query_weight", float("nan"), ValueError), ("beta", -1.0, ValueError),
            ("beta", float("nan"), ValueError), ("head_dim", -2, ValueError),
            ("solver", "anderson", TypeError), ("backward", {"tol": 1e-8}, ValueError),
            ("backward", [1], TypeError), ("dtype", "int8", TypeError),
            ("query_dim", 1.5, TypeError), ("seed", -1, TypeError)])
        kw[key] = value
        case.note(f"{key}={value!r}")
        if error:
            case.reject(error, f"HopfieldLayer {key}={value!r}")
        else:
            case.lenient(ValueError)
            case.worsen(NONFINITE)
    return kw


def layer_inputs(case, layer_kw, dtype, mutate=True):
    S, N = case.integer(1, 5), case.integer(1, 6)
    if mutate:
        R = array_arg(case, "queries", layer_kw["query_dim"], S, dtype, check_cols=False)
        Y = array_arg(case, "patterns", layer_kw["pattern_dim"], N, dtype, check_cols=False)
    else:
        R = np.asfortranarray(case.rng.standard_normal((layer_kw["query_dim"], S))).astype(dtype)
        Y = np.asfortranarray(case.rng.standard_normal((layer_kw["pattern_dim"], N))).astype(dtype)
    S, N = batch_of(R, S), batch_of(Y, N)
    mask = None
    if case.chance(0.3):
        def mask_values(case, shape):
            m = np.where(case.rng.random(shape) < 0.3, -np.inf, 0.0)
            if shape[0]:
                m[case.integer(0, shape[0] - 1), :] = 0.0   # a visible pattern per query
            return m
        cols = case.choice([1, S])
        if mutate:
            level = case.level
            mask = array_arg(case, "mask", N, cols, dtype, check_cols=False, values=mask_values,
                             none_ok=True)
            case.level = max(level, mask_level(mask))   # -inf entries are valid mask values
            # N x 1 or N x S; an empty mask is no mask
            if valid_view(mask, dtype, N) and mask.shape[1] not in (0, 1, S):
                case.reject(ValueError, f"mask: {mask.shape[1]} columns for {S} queries")
        else:
            mask = np.asfortranarray(mask_values(case, (N, cols))).astype(dtype)
    return R, Y, mask, S, N


def mask_level(mask):
    """The level of a score mask, whose -inf entries are valid (a column of them is not)."""
    if not (isinstance(mask, np.ndarray) and mask.dtype.kind == "f" and mask.ndim == 2):
        return level_of(mask)
    a = np.asarray(mask, dtype=np.float64)
    if np.any(np.isnan(a)) or np.any(a == np.inf) or (a.size and np.any(np.all(a == -np.inf,
                                                                              axis=0))):
        return NONFINITE
    return level_of(np.where(a == -np.inf, 0.0, a))


@entry("HopfieldLayer(...)")
def ep_layer_ctor(case):
    dtype = pick_dtype(case)
    kw = layer_kwargs(case, dtype)
    case.note("HopfieldLayer(" + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ")")

    def check(layer):
        check_parameters(layer)
        R, Y, mask, S, N = layer_inputs(case, kw, dtype, mutate=False)
        try:
            Z = layer.forward(R, Y, mask)
        except CLEAN_ERRORS as error:
            raise Observation("accepted at construction, failed at first use",
                              f"HopfieldLayer.forward: {type(error).__name__}: {error}")
        check_array(case, "HopfieldLayer.forward", Z, (layer.output_dim, S), dtype)
    case.result_checks.append(check)
    return lambda: implicit.HopfieldLayer(**kw)


@entry("HopfieldLayer.forward")
def ep_layer_forward(case):
    dtype = pick_dtype(case)
    kw = layer_kwargs(case, dtype, mutate=False)
    layer = implicit.HopfieldLayer(**kw)
    case.note(f"HopfieldLayer({kw['query_dim']} -> {layer.output_dim}, heads "
              f"{kw['num_heads']}, one_step {kw['one_step']}) {dtype.name}")
    R, Y, mask, S, N = layer_inputs(case, kw, dtype)
    if isinstance(R, np.ndarray) and R.ndim == 2 and R.shape[1] == 0:
        case.lenient(ValueError)

    def check(Z):
        check_array(case, "HopfieldLayer.forward", Z, (layer.output_dim, S), dtype)
        s = layer.summary
        if s.num_samples != S:
            raise Violation(f"HopfieldLayer.summary has {s.num_samples} samples for {S} queries")
    case.result_checks.append(check)
    return lambda: layer.forward(R, Y, mask)


@entry("HopfieldLayer.backward")
def ep_layer_backward(case):
    dtype = pick_dtype(case)
    kw = layer_kwargs(case, dtype, mutate=False)
    layer = implicit.HopfieldLayer(**kw)
    R, Y, mask, S, N = layer_inputs(case, kw, dtype, mutate=False)
    forward = case.choice(["forward", "forward"] + (["none", "failed forward"]
                                                    if case.mutate() else []))
    case.note(f"HopfieldLayer({kw['query_dim']} -> {layer.output_dim}, heads "
              f"{kw['num_heads']}, one_step {kw['one_step']}) {dtype.name}; {forward}")
    if forward == "forward":
        layer.forward(R, Y, mask)
    elif forward == "failed forward":
        layer.forward(R, Y, mask)
        try:   # a mask of S + 1 columns passes the binding's checks, fails in Forward
            layer.forward(R, Y, np.zeros((N, S + 1), order="F", dtype=dtype))
        except ValueError:
            pass
        else:
            raise Violation(f"HopfieldLayer.forward accepted a mask of {S + 1} columns for "
                            f"{S} queries")
    if forward != "forward":
        case.reject(RuntimeError, "backward without a (successful) forward")
    grad = array_arg(case, "grad", layer.output_dim, S, dtype)

    def check(g):
        if not isinstance(g, implicit.HopfieldGradients):
            raise Violation(f"HopfieldLayer.backward returned a {type(g).__name__}")
        P = sum(v.size for v in layer.parameters.values())
        finite = g.ok
        check_array(case, "gradients.parameters", g.parameters, (P,), dtype, finite)
        check_array(case, "gradients.queries", g.queries, (kw["query_dim"], S), dtype, finite)
        check_array(case, "gradients.stored_patterns", g.stored_patterns,
                    (kw["pattern_dim"], N), dtype, finite)
    case.result_checks.append(check)
    return lambda: layer.backward(grad)


@entry("parameter views (write, then use)")
def ep_parameters(case):
    dtype = pick_dtype(case)
    e, info = build_energy(case, dtype, learn=True)
    if e.num_parameters == 0:
        e, info = build_energy(case, dtype, kinds=("hopfield",), learn=True)
    check_parameters(e)
    blocks = e.parameters
    name = case.choice(sorted(blocks))
    view = blocks[name]
    i, j = case.integer(0, view.shape[0] - 1), case.integer(0, view.shape[1] - 1)
    value = float(view[i, j]) * case.uniform(1.0, 1.1)
    if case.mutate():
        value = case.choice([np.nan, np.inf, -np.inf, 0.0, -1.0, 0.5, 1e30, -1e30, 1e-300])
        case.lenient(ValueError, RuntimeError)
        case.worsen(NONFINITE)   # beta 0, alpha 0.5, ...: anything may follow
    through = case.choice(["block", "vector"])
    case.note(f"write {value!r} to parameters[{name!r}][{i}, {j}] through the {through}")
    vector = e.parameter_vector
    offset = 0
    for key, v in blocks.items():
        if key == name:
            break
        offset += v.size
    k = offset + i + j * view.shape[0]
    m = case.choice([implicit.CccpMap, implicit.EnergyRootMap]) (e) \
        if info["kind"] != "et" else implicit.EnergyTransformerMap(e)
    if info.get("binary") and isinstance(m, implicit.CccpMap):
        case.lenient(RuntimeError)
    del e     # the views and the map keep the energy alive
    if case.chance(0.1):
        gc.collect()
    use = case.choice(["value", "gradient", "hessian_vector_product", "evaluate", "solve",
                       "backward", "parameter_vector_jacobian_product"])
    n = info["n"]
    if use in ("solve", "evaluate", "gradient") and "X" in blocks and blocks["X"].shape[0] == n \
            and case.chance(0.3):
        x = blocks["X"]       # the energy's own patterns as the state: aliased
        case.note("x=parameters['X'] (the energy's own patterns, written in place by solve)")
        case.lenient(ValueError, RuntimeError)
        case.worsen(NONFINITE)
    else:
        x = array_arg(case, "x", n, case.integer(1, 4), dtype, check_cols=False,
                      values=state_values(info), writable=use == "solve")
    B = batch_of(x, 1)
    case.note(f"then {use}")

    def call():
        if through == "block":
            view[i, j] = value
        else:
            vector[k] = value
        if vector[k] != dtype.type(value) and not (np.isnan(value) and np.isnan(vector[k])):
            raise Violation(f"a write through parameters[{name!r}] is not seen by "
                            "parameter_vector (or the reverse)")
        energy = m.energy
        if use == "evaluate":
            return m.evaluate(x)
        if use == "solve":
            return implicit.solve(m, x, "anderson", max_iterations=20)
        if use == "backward":
            return implicit.backward(m, x, x, max_iterations=20)
        if use in ("hessian_vector_product", "parameter_vector_jacobian_product"):
            return getattr(energy, use)(x, x)
        return getattr(energy, use)(x)

    def check(r):
        if use == "value":
            check_array(case, use, r, (B,), dtype)
        elif use == "parameter_vector_jacobian_product":
            check_array(case, use, r, (vector.size,), dtype)
        elif use == "solve":
            if r.num_samples != B:
                raise Violation("solve: wrong number of samples")
        elif use == "backward":
            check_array(case, "adjoint", r.adjoint, (n, B), dtype, finite=False)
        else:
            check_array(case, use, r, (n, B), dtype)
    case.result_checks.append(check)
    return call


# ----------------------------------------------------------------------------
# Running cases and judging their outcomes.

def judge(case, result, error):
    """Raises Violation / Observation when the outcome breaks the contract."""
    misbehaving = [c for c in case.callables if c.misbehaved and c.expectation() is not None]
    own = error is not None and any(error is e for c in case.callables for e in c.raised)
    if error is None:
        if case.must_raise:
            documented = any(d for _, d in case.must_raise.values())
            why = "; ".join(w for w, _ in case.must_raise.values())
            if documented:
                raise Violation(f"accepted an invalid call ({why})")
            raise Observation("accepted an invalid option", why)
        if misbehaving:
            raise Violation("returned although " + ", ".join(
                f"{c.name} misbehaved ({c.mode})" for c in misbehaving))
        for check in case.result_checks:
            check(result)
        return
    if isinstance(error, (Violation, Observation)):
        raise error
    if own:
        return
    if misbehaving:
        allowed = tuple(t for c in misbehaving if c.expectation() != "same"
                        for t in c.expectation())
        if allowed and isinstance(error, allowed):
            return
        raise Violation(f"{', '.join(f'{c.name} ({c.mode})' for c in misbehaving)} misbehaved, "
                        f"but the call raised {type(error).__name__}: {error}")
    if not isinstance(error, CLEAN_ERRORS):
        raise Violation(f"raised {type(error).__name__}, not a clean exception: {error}")
    if not str(error).strip():
        raise Violation(f"raised {type(error).__name__} without a message")
    if isinstance(error, implicit.ConvergenceError) and not hasattr(error, "summary"):
        raise Violation("ConvergenceError without its summary")
    if case.must_raise:
        why = "; ".join(w for w, _ in case.must_raise.values())
        text = (f"raised {type(error).__name__} ({error}), expected "
                f"{'/'.join(t.__name__ for t in case.must_raise)} for: {why}")
        if isinstance(error, tuple(case.must_raise)):
            return
        if all(not d for _, d in case.must_raise.values()):
            raise Observation("another exception type than documented", text)
        # An undocumented rejection (checked first, e.g. options) may raise any clean type.
        if isinstance(error, tuple(case.may_raise)) or any(
                not d for _, d in case.must_raise.values()):
            return
        raise Violation(text)
    if case.strict and not isinstance(error, implicit.ConvergenceError):
        raise Violation(f"rejected a valid call: {type(error).__name__}: {error}")
    if case.questionable and not case.must_raise:
        raise Observation(case.questionable, f"{type(error).__name__}: {error}")
    if case.may_raise and not isinstance(error, tuple(case.may_raise) + CLEAN_ERRORS):
        raise Violation(f"raised {type(error).__name__}: {error}")


def probe_python_maps(case):
    """After the call, with every callable behaving: evaluate gives f(z), no stale error."""
    for m, reference, callables in case.python_maps:
        for c in callables:
            c.disarmed = True
        dtype = np.dtype(m.dtype)
        z = np.asfortranarray(case.rng.standard_normal((m.dimension, 2))).astype(dtype)
        try:
            out = m.evaluate(z)
        except BaseException as error:
            raise Violation(f"after the call, evaluate on the same PythonMap with a behaving f "
                            f"raised {type(error).__name__}: {error} (a pending error outlived "
                            "its call)")
        if not close(out, reference(z.astype(np.float64)), dtype):
            raise Violation("after the call, evaluate on the same PythonMap does not give f(z)")


def run_case(seed, index, verbose=False, build_only=False):
    """Builds and runs case (seed, index): a dict with its entry, outcome and findings."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")   # ComplexWarning from conversions, numpy's own
        return _run_case(seed, index, verbose, build_only)


def _run_case(seed, index, verbose, build_only):
    case = Case(seed, index, verbose)
    names = list(ENTRY_POINTS)
    case.entry = names[int(case.rng.integers(len(names)))]
    record = {"index": index, "entry": case.entry, "outcome": None, "valid": False,
              "violation": None, "observations": []}
    if verbose:
        print(f"case {seed}:{index}: {case.entry}", flush=True)
    try:
        call = ENTRY_POINTS[case.entry](case)
    except Violation as v:
        record.update(outcome="build failed", violation=str(v), description=case.describe())
        return record
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            raise
        record.update(outcome="build failed", description=case.describe(),
                      violation=f"building the case's valid objects raised "
                                f"{type(error).__name__}: {error}\n{traceback.format_exc()}")
        return record
    if build_only:
        record["description"] = case.describe()
        return record
    record["valid"] = case.strict
    result = error = None
    start = time.perf_counter()
    try:
        result = call()
    except BaseException as e:  # CallbackBaseError included; a real Ctrl-C still stops
        if isinstance(e, KeyboardInterrupt):
            raise
        error = e
    record["seconds"] = time.perf_counter() - start
    record["outcome"] = "returned" if error is None else type(error).__name__
    if verbose:
        print(f"  -> {record['outcome']}" + (f": {error}" if error is not None else ""), flush=True)
    findings = []
    for step in [lambda: judge(case, result, error)] + [
            (lambda c=c: c(error)) for c in case.post_checks] + [lambda: probe_python_maps(case)]:
        try:
            step()
        except (Violation, Observation) as finding:
            findings.append(finding)
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            findings.append(Violation(f"checking the outcome raised {type(e).__name__}: {e}\n"
                                      f"{traceback.format_exc()}"))
    description = case.describe()
    violations = [f for f in findings if isinstance(f, Violation)]
    if violations:
        record["violation"] = "; ".join(str(v) for v in violations)
        if error is not None:
            record["violation"] += "\n" + "".join(traceback.format_exception(
                type(error), error, error.__traceback__))
    record["observations"] = [(f.kind, str(f)) for f in findings if isinstance(f, Observation)]
    if record["violation"] or record["observations"]:
        record["description"] = description
    return record


class Stats:
    """Per entry point: calls, returned, raised by type; violations; observations."""

    def __init__(self, seed):
        self.seed = seed
        self.entries = {name: {"calls": 0, "returned": 0, "raised": Counter(), "valid": 0}
                        for name in ENTRY_POINTS}
        self.cases = 0
        self.seconds = 0.0
        self.violations = []                    # (index, entry, message, description)
        self.observations = {}                  # kind -> [count, first example]
        self.slowest = (0.0, None)

    def add(self, record):
        self.cases += 1
        e = self.entries.setdefault(record["entry"], {"calls": 0, "returned": 0,
                                                      "raised": Counter(), "valid": 0})
        e["calls"] += 1
        e["valid"] += bool(record.get("valid"))
        if record["outcome"] == "returned":
            e["returned"] += 1
        elif record["outcome"]:
            e["raised"][record["outcome"]] += 1
        if record.get("seconds", 0) > self.slowest[0]:
            self.slowest = (record["seconds"], f"{self.seed}:{record['index']} {record['entry']}")
        if record.get("violation"):
            self.violations.append((record["index"], record["entry"], record["violation"],
                                    record.get("description", "")))
        for kind, text in record.get("observations", []):
            slot = self.observations.setdefault(kind, [0, None])
            slot[0] += 1
            if slot[1] is None:
                slot[1] = f"case {self.seed}:{record['index']}: {text}; " \
                          f"{record.get('description', '')}"

    def report(self, out=sys.stdout):
        width = max(len(n) for n in self.entries) + 2
        print(f"{'entry point':<{width}}{'calls':>7}{'valid':>7}{'returned':>10}  raised",
              file=out)
        total = {"calls": 0, "returned": 0, "valid": 0, "raised": Counter()}
        for name in sorted(self.entries):
            e = self.entries[name]
            raised = ", ".join(f"{t} {k}" for t, k in e["raised"].most_common())
            print(f"{name:<{width}}{e['calls']:>7}{e['valid']:>7}{e['returned']:>10}  {raised}",
                  file=out)
            for key in ("calls", "returned", "valid"):
                total[key] += e[key]
            total["raised"].update(e["raised"])
        raised = ", ".join(f"{t} {k}" for t, k in total["raised"].most_common())
        print(f"{'total':<{width}}{total['calls']:>7}{total['valid']:>7}{total['returned']:>10}  "
              f"{raised}", file=out)
        print(f"{self.cases} cases in {self.seconds:.1f} s (seed {self.seed}); slowest case "
              f"{self.slowest[0]:.2f} s ({self.slowest[1]})", file=out)
        for kind, (count, example) in sorted(self.observations.items()):
            print(f"observation: {kind}: {count} cases; first: {example}", file=out)
        for index, entry_name, message, description in self.violations:
            print(f"\nVIOLATION in case {self.seed}:{index} ({entry_name}): {message}\n"
                  f"  case: {description}\n  reproduce: python3 {sys.argv[0] or 'python_arrays.py'}"
                  f" --seed {self.seed} --replay {index}", file=out)


def run(seed=0, cases=None, seconds=None, start=0, keep_going=False, case_timeout=None,
        progress=None, trace=False):
    """Runs cases start, start+1, ... in this process until `cases` ran or `seconds`
    passed (or the first violation, unless keep_going): the Stats. progress(line)
    receives "B index" before and "E json" after each case (the supervisor);
    trace prints "case seed:index" to stderr before each (to place valgrind's
    reports)."""
    stats = Stats(seed)
    began = time.monotonic()
    index = start
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            while True:
                if cases is not None and index - start >= cases:
                    break
                if seconds is not None and time.monotonic() - began >= seconds:
                    break
                if case_timeout:
                    faulthandler.dump_traceback_later(case_timeout, exit=True)
                if progress:
                    progress(f"B {index}")
                if trace:
                    print(f"case {seed}:{index}", file=sys.stderr, flush=True)
                record = run_case(seed, index)
                if progress:
                    progress("E " + json.dumps(record, default=str))
                stats.add(record)
                index += 1
                if record.get("violation") and not keep_going:
                    break
        finally:
            if case_timeout:
                faulthandler.cancel_dump_traceback_later()
    stats.seconds = time.monotonic() - began
    return stats


# ----------------------------------------------------------------------------
# Command line: a supervisor runs the cases in a worker process, so that a
# crash or a hang is reported with its case instead of ending the run.

def _worker(args):
    fd = args.worker

    def progress(line):
        os.write(fd, (line + "\n").encode())
    run(seed=args.seed, cases=args.cases, seconds=args.seconds, start=args.start,
        keep_going=args.keep_going, case_timeout=args.case_timeout + 5, progress=progress)
    return 0


def _describe(seed, index):
    """The description of case (seed, index), built in a fresh process (it may crash too)."""
    try:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--seed", str(seed),
                              "--describe", str(index)], capture_output=True, text=True,
                             timeout=60)
        return (out.stdout.strip() or out.stderr.strip()[-2000:])
    except subprocess.TimeoutExpired:
        return "(describing the case timed out)"


def supervise(args):
    stats = Stats(args.seed)
    began = time.monotonic()
    start = 0
    while True:
        left_cases = None if args.cases is None else args.cases - (start)
        left_seconds = None if args.seconds is None else args.seconds - (time.monotonic() - began)
        if (left_cases is not None and left_cases <= 0) or (left_seconds is not None
                                                            and left_seconds <= 0):
            break
        read_fd, write_fd = os.pipe()
        command = [sys.executable, os.path.abspath(__file__), "--worker", str(write_fd),
                   "--seed", str(args.seed), "--start", str(start),
                   "--case-timeout", str(args.case_timeout)]
        command += ["--cases", str(left_cases)] if left_cases is not None else \
            ["--seconds", str(left_seconds)]
        if args.keep_going:
            command.append("--keep-going")
        worker = subprocess.Popen(command, pass_fds=(write_fd,))
        os.close(write_fd)
        current, last_seen, buffer, hung = None, time.monotonic(), b"", False
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            while True:
                ready, _, _ = select.select([pipe], [], [], 1.0)
                if ready:
                    data = pipe.read(1 << 16)
                    if not data:
                        break
                    buffer += data
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        kind, _, rest = line.decode().partition(" ")
                        last_seen = time.monotonic()
                        if kind == "B":
                            current = int(rest)
                        elif kind == "E":
                            record = json.loads(rest)
                            current = None
                            stats.add(record)
                            start = record["index"] + 1
                if time.monotonic() - last_seen > args.case_timeout:
                    hung = True
                    worker.kill()
                    break
        code = worker.wait()
        if current is None and not hung and code == 0:
            break          # the worker ran its share
        if current is None:
            # Between cases: e.g. a destructor run by the garbage collector.
            how = ("hung" if hung else f"died of {signal.Signals(-code).name}" if code < 0
                   else f"exited with {code}")
            stats.violations.append((start - 1, "?", f"the worker {how} between cases, after "
                                     f"case {args.seed}:{start - 1}", ""))
            if not args.keep_going:
                break
            continue
        # A crash or a hang inside case `current`.
        description = _describe(args.seed, current)
        if hung:
            what = f"hang: case still running after {args.case_timeout:.0f} s"
        elif code < 0:
            what = f"crash: the process died of {signal.Signals(-code).name}"
        else:
            what = f"crash: the process exited with status {code} during the case"
        entry_name = description.split(":", 1)[0] if description else "?"
        stats.add({"index": current, "entry": entry_name if entry_name in ENTRY_POINTS else "?",
                   "outcome": "CRASH" if not hung else "HANG", "violation": what,
                   "description": description})
        start = current + 1
        if not args.keep_going:
            break
        if stats.violations and len(stats.violations) >= 20:
            break
    stats.seconds = time.monotonic() - began
    stats.report()
    return 1 if stats.violations else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, help="run cases for this long (default 60)")
    budget.add_argument("--cases", type=int, help="run this many cases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-going", action="store_true",
                        help="continue after a violation (a crash restarts the worker)")
    parser.add_argument("--case-timeout", type=float, default=DEFAULT_CASE_TIMEOUT,
                        help="a case running longer is a hang (seconds)")
    parser.add_argument("--in-process", action="store_true",
                        help="no supervisor: run the cases in this process")
    parser.add_argument("--trace", action="store_true",
                        help="with --in-process: print each case's id to stderr first "
                             "(under valgrind: which case an error report belongs to)")
    parser.add_argument("--replay", type=int, metavar="INDEX",
                        help="run case INDEX of --seed verbosely")
    parser.add_argument("--describe", type=int, metavar="INDEX", help=argparse.SUPPRESS)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.describe is not None:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            record = run_case(args.seed, args.describe, build_only=True)
        print(record.get("description", record["entry"]))
        return 0
    if args.replay is not None:
        faulthandler.enable()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            record = run_case(args.seed, args.replay, verbose=True)
        for kind, text in record["observations"]:
            print(f"observation: {text}")
        if record.get("violation"):
            print(f"VIOLATION: {record['violation']}")
            return 1
        print("the contract held")
        return 0
    if args.seconds is None and args.cases is None:
        args.seconds = 60.0
    if args.worker is not None:
        return _worker(args)
    if args.in_process:
        faulthandler.enable()
        stats = run(seed=args.seed, cases=args.cases, seconds=args.seconds,
                    keep_going=args.keep_going, case_timeout=args.case_timeout, trace=args.trace)
        stats.report()
        return 1 if stats.violations else 0
    return supervise(args)


if __name__ == "__main__":
    sys.exit(main())
