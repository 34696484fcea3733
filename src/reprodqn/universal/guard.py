"""The universal mode's watch over torch: while it is on, any aten op that computes a
floating-point value is refused, naming the op, so nothing runs silently on torch's own
kernels (whose bits change with the CPU, the GPU and torch's version). An op is judged by
its inputs and its outputs: a float made from integers (torch.randn, linspace, exp of an
integer tensor, an integer tensor's true division) is refused too. Ops that only store,
move, select or compare values (views, copies, indexing, fills, comparisons) and integer
arithmetic pass; the layers' arithmetic never reaches torch at all.

`strict()` watches a stretch of code; exact.setup(numerics="universal") watches the whole
process from there on (`watch_process`), so a chain it labels universal had every float
op on universal's kernels. Two things pass that watch besides: a module's construction
(torch's own initial draw into a parameter, under no_grad), each such parameter refused
at a checkpoint until universal.init_ or a loaded state replaces it; and the parts the
script declares with `outside("what")`, which compute on torch's kernels but never with
gradients, named in the run's conditions (the script's word that their floats reach
neither acting nor learning).
"""

from __future__ import annotations

import contextlib
import functools
import weakref

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

    def __init__(self, process: bool = False):
        super().__init__()
        self.process = process  # the whole process's watch: modules may be built under it

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # no compile runs inside the watch: skip torch's per-op wrapper for it

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if _OUTSIDE:
            return _declared(func, name, args, kwargs)
        if self.process and name in RANDOM and _building(args):
            result = func(*args, **kwargs)
            _drawn(args[0])  # refused at a checkpoint until replaced
            return result
        if name == "copy_" and args and _TORCH_DRAWN:
            _TORCH_DRAWN.pop(id(args[0]), None)  # universal.init_ or a loaded state
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
    declare = ', declare a part that neither acts nor learns with universal.outside("what")'
    return NumericsError(
        f"compute.numerics universal: torch's aten.{name} would compute floats the "
        "universal mode does not cover (write it with reprodqn.universal's layers"
        f"{declare if _PROCESS else ''}, or use numerics standard)"
    )


# ---------------------------------------------------------------------------------------------
# The whole process's watch, from exact.setup(numerics="universal") on

_PROCESS: list[UniversalOnly] = []  # the watch over the whole process, while it is on
_OUTSIDE: list[str] = []  # the declared parts running now, innermost last
DECLARED: list[str] = []  # every part this process declared, in first-declared order
_TORCH_DRAWN: dict[int, weakref.ref] = {}  # parameters torch's init drew, by id


def watch_process() -> None:
    """Watch every op from here to the process's end (exact.setup(numerics="universal"))."""
    if not _PROCESS:
        mode = UniversalOnly(process=True)
        mode.__enter__()
        _PROCESS.append(mode)


def stop_watching_process() -> None:
    """The process's watch off (tests that set a process up in the universal numerics)."""
    while _PROCESS:
        _PROCESS.pop().__exit__(None, None, None)
    DECLARED.clear()


def watching_process() -> bool:
    return bool(_PROCESS)


def strict() -> contextlib.AbstractContextManager:
    """Watch the code in the `with` block (already watched where the process is)."""
    return contextlib.nullcontext() if _PROCESS else UniversalOnly()


@contextlib.contextmanager
def outside(part: str):
    """Declare a part that is neither acting nor learning (an evaluation on a standard
    twin, logging statistics): torch's kernels run there, never with gradients, and the
    part is named in the run's conditions."""
    if not isinstance(part, str) or not part.strip():
        raise NumericsError(f"universal.outside: {part!r}; expected the part's name, in words")
    if _PROCESS and part not in DECLARED:  # recorded where the process is watched
        DECLARED.append(part)
    _OUTSIDE.append(part)
    try:
        yield
    finally:
        _OUTSIDE.pop()


def _building(args) -> bool:
    """torch's initial draw into a module's parameter, as its constructor makes it."""
    return bool(args) and isinstance(args[0], torch.nn.Parameter) and not torch.is_grad_enabled()


def _declared(func, name: str, args, kwargs):
    """An op in a declared part: torch's kernels, unless it would learn (gradients)."""
    if torch.is_grad_enabled() and name not in MOVING:
        tensors = [t for t in _flat([*args, *kwargs.values()]) if _floating(t)]
        if any(t.requires_grad for t in tensors):
            raise NumericsError(
                f"compute.numerics universal: torch's aten.{name} would compute gradients "
                f"in the declared part {_OUTSIDE[-1]!r}: a declared part neither acts nor "
                "learns (learn with reprodqn.universal's layers, or under torch.no_grad())"
            )
    return func(*args, **kwargs)


def _drawn(parameter: torch.Tensor) -> None:
    key = id(parameter)
    _TORCH_DRAWN[key] = weakref.ref(parameter, lambda _: _TORCH_DRAWN.pop(key, None))


def torch_drawn(tensors) -> list[str]:
    """The names of the tensors (name, tensor pairs) still holding torch's initial draw."""
    return [
        name
        for name, tensor in tensors
        if (kept := _TORCH_DRAWN.get(id(tensor))) is not None and kept() is tensor
    ]
