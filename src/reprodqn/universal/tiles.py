"""The universal product's register tiles: LLVM IR with explicit vectors, linked into the
numba kernels that call them (numba's own LLVM, for the CPU numba compiles for).

A tile is R rows (1 to ROWS) by V vectors of W lanes of C, each lane one output: for k
ascending, acc = llvm.fma(splat(A[r, k]), B[k, lanes], acc), held in registers for the whole
k loop. A is a matrix, or gathered: A[r, k] = a[rows[r] + ks[k]], a convolution's windows
read in place from its input. B's rows are read a tile's width at a time, `ldb` apart. A
tile starts from +0, or from C as a previous call left it (`load`), so a long sum can be
cut into blocks of k, each a call that carries on where the last stopped, and the chain is
the same. A vector fma is W independent correctly rounded fmas, so a lane computes exactly
the reference's chain whatever W is: 16 with AVX-512, 8 with AVX, 4 elsewhere (SSE, NEON),
and where the CPU has no fma LLVM calls libm's fmaf per lane. Written as IR by hand because
numba's loops keep the accumulators in memory (one load and store per fma: a tenth of the
CPU's speed) and LLVM's vectorizer will not build this tile from scalar code.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

ROWS, VECTORS = 6, 2  # 12 accumulators: within AVX2's 16 registers and NEON's 32


@dataclass(frozen=True)
class Tile:
    # calls(False)[r - 1](a, lda, b, ldb, c, ldc, depth, load): r rows, depth >= 1
    # calls(True)[r - 1](a, rows, ks, b, ldb, c, ldc, depth, load): A[i, k] = a[rows[i] + ks[k]]
    rows: int
    columns: int
    lanes: int
    cpu: str


def _entry(rows: int, vectors: int, lanes: int, gathered: bool) -> list[str]:
    """The signature, the row bases (gathered), C's addresses, and C loaded or +0."""
    vt = f"<{lanes} x float>"
    acc = [(r, v) for r in range(rows) for v in range(vectors)]
    lines = [
        (
            f"define void @gathered_{rows}(float* noalias %a, i64* noalias %rows, i64* noalias %ks,"
            if gathered
            else f"define void @tile_{rows}(float* noalias %a, i64 %lda,"
        )
        + " float* noalias %b, i64 %ldb, float* noalias %c, i64 %ldc, i64 %depth, i64 %load) {",
        "entry:",
    ]
    for r in range(rows if gathered else 0):
        lines += [
            f"  %rp{r} = getelementptr i64, i64* %rows, i64 {r}",
            f"  %base{r} = load i64, i64* %rp{r}, align 8",
        ]
    for r, v in acc:
        lines += [
            f"  %cr{r}_{v} = mul i64 {r}, %ldc",
            f"  %co{r}_{v} = add i64 %cr{r}_{v}, {v * lanes}",
            f"  %cp{r}_{v} = getelementptr float, float* %c, i64 %co{r}_{v}",
            f"  %cvp{r}_{v} = bitcast float* %cp{r}_{v} to {vt}*",
        ]
    return [
        *lines,
        "  %from_c = icmp ne i64 %load, 0",
        "  br i1 %from_c, label %resume, label %loop",
        "resume:",
        *(f"  %c{r}_{v} = load {vt}, {vt}* %cvp{r}_{v}, align 4" for r, v in acc),
        "  br label %loop",
    ]


def _loop(rows: int, vectors: int, lanes: int, gathered: bool) -> list[str]:
    """One k: B's row of the panel, each row's A[r, k] splat, the fmas; then C stored."""
    vt = f"<{lanes} x float>"
    fma = f"@llvm.fma.v{lanes}f32"
    acc = [(r, v) for r in range(rows) for v in range(vectors)]
    lines = [
        "loop:",
        "  %k = phi i64 [0, %entry], [0, %resume], [%next, %loop]",
        *(
            f"  %acc{r}_{v} = phi {vt} [zeroinitializer, %entry], [%c{r}_{v}, %resume],"
            f" [%fma{r}_{v}, %loop]"
            for r, v in acc
        ),
        "  %brow = mul i64 %k, %ldb",
    ]
    for v in range(vectors):
        lines += [
            f"  %bo{v} = add i64 %brow, {v * lanes}",
            f"  %bp{v} = getelementptr float, float* %b, i64 %bo{v}",
            f"  %bvp{v} = bitcast float* %bp{v} to {vt}*",
            f"  %b{v} = load {vt}, {vt}* %bvp{v}, align 4",
        ]
    if gathered:
        lines += [
            "  %kp = getelementptr i64, i64* %ks, i64 %k",
            "  %koff = load i64, i64* %kp, align 8",
        ]
    for r in range(rows):
        lines += [
            *(
                [f"  %ao{r} = add i64 %base{r}, %koff"]
                if gathered
                else [f"  %ar{r} = mul i64 {r}, %lda", f"  %ao{r} = add i64 %ar{r}, %k"]
            ),
            f"  %ap{r} = getelementptr float, float* %a, i64 %ao{r}",
            f"  %as{r} = load float, float* %ap{r}, align 4",
            f"  %ai{r} = insertelement {vt} undef, float %as{r}, i32 0",
            f"  %a{r} = shufflevector {vt} %ai{r}, {vt} undef, <{lanes} x i32> zeroinitializer",
            *(
                f"  %fma{r}_{v} = call {vt} {fma}({vt} %a{r}, {vt} %b{v}, {vt} %acc{r}_{v})"
                for v in range(vectors)
            ),
        ]
    return [
        *lines,
        "  %next = add i64 %k, 1",
        "  %more = icmp ult i64 %next, %depth",
        "  br i1 %more, label %loop, label %store",
        "store:",
        *(f"  store {vt} %fma{r}_{v}, {vt}* %cvp{r}_{v}, align 4" for r, v in acc),
        "  ret void",
        "}",
    ]


def _ir(rows: int, vectors: int, lanes: int, gathered: bool = False) -> str:
    """One tile function: @tile_<rows>, A's rows `lda` apart; or @gathered_<rows>, A[r, k]
    at a[rows[r] + ks[k]] (a convolution's windows read in place from its input)."""
    shape = (rows, vectors, lanes, gathered)
    return "\n".join([*_entry(*shape), *_loop(*shape)])


def _module(rows: int, vectors: int, lanes: int) -> str:
    vt = f"<{lanes} x float>"
    declare = f"declare {vt} @llvm.fma.v{lanes}f32({vt}, {vt}, {vt})"
    shapes = [(r, gathered) for gathered in (False, True) for r in range(1, rows + 1)]
    return "\n\n".join([declare, *(_ir(r, vectors, lanes, g) for r, g in shapes)])


def _target() -> tuple[str, str, int]:
    """The CPU to compile for, its features and the tile's lanes: this machine's, or the
    one numba is told to compile for (NUMBA_CPU_NAME, NUMBA_CPU_FEATURES), so both compile
    for the same CPU and a test can ask for narrower or wider vectors than the host's."""
    import llvmlite.binding as llvm
    from numba.core import config

    chosen = getattr(config, "CPU_NAME", None)  # numba sets its config at run time
    if chosen:
        name, features = chosen, getattr(config, "CPU_FEATURES", None) or ""
        wide = "avx512" in name or "+avx512f" in features
        avx = wide or "+avx" in features or name in AVX_CPUS or name.startswith("znver")
    else:
        found = llvm.get_host_cpu_features()
        name, features = llvm.get_host_cpu_name(), found.flatten()
        wide, avx = bool(found.get("avx512f")), bool(found.get("avx"))
    return name, features, 16 if wide else 8 if avx else 4


AVX_CPUS = {"sandybridge", "ivybridge", "haswell", "broadwell", "skylake", "alderlake"}


@functools.cache
def tile() -> Tile:
    """The tiles' shape for the CPU numba compiles for (its name and features as LLVM reads
    them)."""
    name, _, lanes = _target()
    return Tile(ROWS, VECTORS * lanes, lanes, name)


# each tile's arguments: which are addresses (the rest are i64 counts)
_POINTERS = {False: (0, 2, 4), True: (0, 1, 2, 3, 5)}


@functools.cache
def calls(gathered: bool) -> tuple:
    """The tiles of 1..ROWS rows as numba intrinsics (plain or gathered): a call, each
    argument an integer address or count, compiled into the numba kernel that makes it, with
    the tiles' IR linked in, so the kernel is cached on disk whole (a call through a ctypes
    address, known only in this process, was not)."""
    return tuple(_call(rows, gathered) for rows in range(1, ROWS + 1))


def _call(rows: int, gathered: bool):
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.core.extending import intrinsic

    from reprodqn.universal.jit import named

    shape = tile()
    source = _module(shape.rows, VECTORS, shape.lanes)  # in the closure: a new IR, a new key
    symbol = f"{'gathered' if gathered else 'tile'}_{rows}"
    pointers, count = _POINTERS[gathered], 9 if gathered else 8

    def codegen(context, builder, signature, args):
        context.active_code_library.add_linking_library(_library(context.codegen(), source))
        i64 = ir.IntType(64)
        kinds = [
            (ir.PointerType(i64) if gathered and i in (1, 2) else ir.PointerType(ir.FloatType()))
            if i in pointers
            else i64
            for i in range(count)
        ]
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), kinds), symbol
        )
        values = [
            context.cast(builder, v, t, types.int64)
            for v, t in zip(args, signature.args, strict=True)
        ]
        builder.call(
            function,
            [builder.inttoptr(v, k) if k != i64 else v for v, k in zip(values, kinds, strict=True)],
        )
        return context.get_dummy_value()

    def typed(args):
        if all(isinstance(a, types.Integer) for a in args):
            return types.none(*args), codegen
        return None

    def gathered_typer(typingctx, a, a_rows, ks, b, ldb, c, ldc, depth, load):
        return typed((a, a_rows, ks, b, ldb, c, ldc, depth, load))

    def plain_typer(typingctx, a, lda, b, ldb, c, ldc, depth, load):
        return typed((a, lda, b, ldb, c, ldc, depth, load))

    typer = gathered_typer if gathered else plain_typer
    typer.__name__ = symbol
    return named(intrinsic(typer), f"tiles.{symbol}.{shape.lanes}")


_LIBRARIES: dict = {}


def _library(codegen, source: str):
    """The tiles' IR as a numba code library (one per codegen), linked into the kernels."""
    import llvmlite.binding as llvm

    key = (id(codegen), source)
    if key not in _LIBRARIES:
        module = llvm.parse_assembly(source)
        module.triple = llvm.get_process_triple()
        module.data_layout = str(codegen.target_data)
        module.verify()
        library = codegen.create_library("reprodqn_universal_tiles")
        library.add_llvm_module(module)
        library.finalize()
        _LIBRARIES[key] = library
    return _LIBRARIES[key]
