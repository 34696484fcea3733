"""numba as the universal kernels use it: one set of compile options, and builds that a second
process loads from numba's disk cache instead of compiling them again.

numba keys a cached build by its function's bytecode and its closure, pickled. A closure
over a dispatcher or an intrinsic pickled with the random uuid numba gives each one in each
process, so such a kernel never matched its cache (and each process added an entry to it);
and a function's serial and parallel builds, equal in bytecode and closure, loaded each
other's code. Here each build has a name of its own, and each numba object a kernel closes
over a name that is the same in every process. A change in a function a kernel calls
changes the closure's pickle (nested functions are pickled by value), so a stale build is
never loaded. Imported only where numba is wanted (importing numba takes a second).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, Literal

import numba


def named(numba_object: Any, name: str) -> Any:
    """`numba_object` (a dispatcher or an intrinsic) pickled the same in every process."""
    numba_object._set_uuid(f"reprodqn.universal:{name}")  # numba's memo key, else uuid1()
    return numba_object


def kernel(
    func: Callable | None = None,
    *,
    parallel: bool = False,
    inline: Literal["never", "always"] = "never",
) -> Any:
    """numba.njit(func) with the universal options, cached on disk: the serial and the
    parallel build of one function kept apart, and named for the kernels that call it."""

    def build(py_func: Callable) -> Any:
        variant = f"{py_func.__qualname__}.{'parallel' if parallel else 'serial'}"
        renamed = types.FunctionType(
            py_func.__code__,
            py_func.__globals__,
            py_func.__name__,
            py_func.__defaults__,
            py_func.__closure__,
        )
        renamed.__qualname__ = variant  # numba's cache file is named by it
        compiled = numba.njit(  # fastmath off: no contraction or reassociation
            renamed,
            parallel=parallel,
            cache=True,
            inline=inline,
            fastmath=False,
            error_model="numpy",  # no division check
            nogil=True,
        )
        return named(compiled, f"{py_func.__module__}.{variant}")

    return build if func is None else build(func)
