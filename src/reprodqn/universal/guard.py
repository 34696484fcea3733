"""The universal mode's watch over torch: while it is on, any aten op that computes a
floating-point value is refused, naming the op, so nothing runs silently on torch's own
kernels (whose bits change with the CPU, the GPU and torch's version). An op is judged by
its inputs and its outputs: a float made from integers (torch.randn, linspace, exp of an
integer tensor, an integer tensor's true division) is refused too. Ops that only store,
move, select or compare values (views, copies, indexing, fills, comparisons) and integer
arithmetic pass; the layers' arithmetic never reaches torch at all.
"""

from __future__ import annotations

import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from reprodqn.universal.errors import NumericsError

# ops whose floating-point outputs are copies, selections or constants of their inputs
MOVING = {
    "_to_copy",
    "alias",
    "as_strided",
    "cat",
    "clone",
    "copy",
    "copy_",
    "detach",
    "empty",
    "empty_like",
    "empty_strided",
    "expand",
    "fill",
    "fill_",
    "flatten",
    "full",
    "full_like",
    "new_full",
    "new_ones",
    "gather",
    "index",
    "index_select",
    "lift_fresh",
    "masked_fill",
    "masked_fill_",
    "new_empty",
    "new_empty_strided",
    "new_zeros",
    "ones",
    "ones_like",
    "permute",
    "reshape",
    "select",
    "set_",
    "slice",
    "split",
    "squeeze",
    "stack",
    "t",
    "transpose",
    "unbind",
    "unsqueeze",
    "view",
    "zero_",
    "zeros",
    "zeros_like",
    "_unsafe_view",
    "_reshape_alias",
    "contiguous",
    "scalar_tensor",
    "lift_fresh_copy",
    "_local_scalar_dense",
    "resize_",
    "unfold",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "argmax",
    "max",
    "logical_not",
    "bitwise_not",
    "isnan",
    "any",
    "all",
    "where",
    "_has_compatible_shallow_copy_type",
    "randint",
    "_make_dep_token",
    "item",
    "equal",
    "sort",
}
MOVING |= {
    "resolve_conj",
    "resolve_neg",
    "conj",
    "_conj",
    "is_same_size",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "is_nonzero",
    "result_type",
}
CONVERTING = {"to", "_to_copy"}  # a move unless it rounds to another float type
# floats drawn by torch's generators, whose algorithms differ by CPU and torch version
RANDOM = {"normal", "normal_", "rand", "randn", "rand_like", "randn_like", "uniform_",
          "bernoulli", "bernoulli_", "exponential_", "cauchy_", "log_normal_", "geometric_",
          "dropout", "native_dropout"}  # fmt: skip


def _floating(value) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _flat(values) -> list:
    return [v for value in values for v in (value if isinstance(value, list | tuple) else [value])]


def _exact_range(name: str, args) -> bool:
    """arange over integers: every value exact in a float, whatever computes it."""
    return name == "arange" and all(isinstance(a, int) for a in args if not isinstance(a, bool))


_WATCH_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)  # how a mode is reached


def unwatched(function):
    """For reprodqn.universal's own layers, losses, optimizers and kernel calls, whose every
    float op is a universal kernel's (each tested against the spec's reference): their moves
    run without the watch stopping at each one, which costs about 5 us an op (a greedy
    action made 320 of them)."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_WATCH_KEY):
            return function(*args, **kwargs)

    return run


class UniversalOnly(TorchDispatchMode):
    """Refuse every floating-point op that is not a move, a selection or a comparison."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # no compile runs inside the watch: skip torch's per-op wrapper for it

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in CONVERTING:
            result = func(*args, **kwargs)
            source = args[0]
            if _floating(result) and _floating(source) and result.dtype != source.dtype:
                raise NumericsError(
                    f"compute.numerics universal: torch would round {source.dtype} to "
                    f"{result.dtype} (aten.{name}), which the universal mode does not cover"
                )
            return result
        moving = name in MOVING or name.rstrip("_") in MOVING
        if name in RANDOM:
            raise NumericsError(
                f"compute.numerics universal: torch's aten.{name} draws floats by an "
                "algorithm that differs by CPU and torch version; draw integers from a "
                "named generator (torch.randint) and make floats of them in the universal "
                "arithmetic, as reprodqn.universal.init_uniform_ does"
            )
        if not moving and any(_floating(t) for t in _flat([*args, *kwargs.values()])):
            raise _refused(name)
        result = func(*args, **kwargs)
        made = _flat(result if isinstance(result, list | tuple) else [result])
        if not moving and not _exact_range(name, args) and any(_floating(t) for t in made):
            raise _refused(name)  # a float made from no float: linspace, exp of an integer
        return result


def _refused(name: str) -> NumericsError:
    return NumericsError(
        f"compute.numerics universal: torch's aten.{name} would compute floats the "
        "universal mode does not cover (write it with reprodqn.universal's layers, or use "
        "numerics standard)"
    )
