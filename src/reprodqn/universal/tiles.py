"""The universal product's register tiles: LLVM IR with explicit vectors, compiled by llvmlite
(numba's own LLVM) for this CPU at first use.

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

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass

ROWS, VECTORS = 6, 2  # 12 accumulators: within AVX2's 16 registers and NEON's 32


@dataclass(frozen=True)
class Tile:
    # functions[r - 1](a, lda, b, ldb, c, ldc, depth, load): r rows, depth >= 1
    functions: tuple[Callable[..., None], ...]
    # gathered[r - 1](a, rows, ks, b, ldb, c, ldc, depth, load): A[i, k] = a[rows[i] + ks[k]]
    gathered: tuple[Callable[..., None], ...]
    rows: int
    columns: int
    lanes: int
    cpu: str
    engine: object  # the compiled code lives as long as the tiles


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
    """The tiles compiled for this CPU (its name and features as LLVM reads them)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    name, features, lanes = _target()
    module = llvm.parse_assembly(_module(ROWS, VECTORS, lanes))
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=name, features=features, opt=3
    )
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    pointer, count = ctypes.c_void_p, ctypes.c_int64
    plain = ctypes.CFUNCTYPE(None, *[pointer, count] * 3, count, count)
    gathered = ctypes.CFUNCTYPE(None, *[pointer] * 4, count, pointer, count, count, count)
    functions = tuple(
        plain(engine.get_function_address(f"tile_{rows}")) for rows in range(1, ROWS + 1)
    )
    gathered_functions = tuple(
        gathered(engine.get_function_address(f"gathered_{rows}")) for rows in range(1, ROWS + 1)
    )
    return Tile(functions, gathered_functions, ROWS, VECTORS * lanes, lanes, name, engine)
