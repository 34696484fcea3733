"""A probe that the emulated CPUs are real and that an FMA chain is one everywhere.

Prints the CPU numba compiles for, then the SHA-256 of a 64x64x64 fp32 product made three
ways with numba (fastmath off): one fused multiply-add chain per output over k from +0,
scalar (k innermost) and vectorised across j (the same chain per output), and mul-then-add
(two roundings a step). Every one is a sequence of correctly rounded IEEE-754 operations,
so their hashes must be the same natively, on an emulated Nehalem and on emulated aarch64.
torch.mm of the same inputs is printed too: it is expected to differ between the CPUs,
which shows the emulation changes the kernels that run. Standalone: needs numpy, numba
and (optionally) torch, not reprodqn. Run by tools/emulated/run.sh.
"""

from __future__ import annotations

import hashlib
import platform
import re
import time

import numpy as np
from numba import njit, types
from numba.core.extending import intrinsic
from numba.core.registry import cpu_target

SIZE = 64
LONG_K = 1024
# The chains' bits, the same on every CPU (tools/emulated/README.md): the probe exits 1
# when a numba chain gives other bits. torch's are printed, never checked.
RECORDED = {
    "fma_scalar": "8bd1b924b2327c19caf6459061fc59c59367bfd49d2d2e75b09d425a1fc6a260",
    "fma_vector": "8bd1b924b2327c19caf6459061fc59c59367bfd49d2d2e75b09d425a1fc6a260",
    "mul_add": "7f17b0b68bb2a60c80e306a19f607d102e87a8a684eaee7b035435402fc7d68c",
    f"fma_vector_k{LONG_K}": "f09325db01f3b20ce6e64b6ff4b1f8f20b20dc35a47a75e572e6b8b0395b5a33",
}
# Host CPU features worth naming; the rest of LLVM's list is noise here.
FEATURES = ("sse4.2", "avx", "avx2", "fma", "avx512f", "neon", "sve", "lse", "dotprod")


@intrinsic
def fma32(typingctx, a, b, c):
    """LLVM's fma: one rounding (numba exposes no fma), as dqn/fused_step.py does."""
    signature = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, sig, args):
        return builder.fma(*args)

    return signature, codegen


@njit(fastmath=False)
def fma_chain_scalar(a, b, c):
    """c[i, j] = fma(a[i, k], b[k, j], acc) for k ascending, acc from +0: k innermost."""
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            acc = np.float32(0.0)
            for k in range(a.shape[1]):
                acc = fma32(a[i, k], b[k, j], acc)
            c[i, j] = acc


@njit(fastmath=False)
def fma_chain_vector(a, b, c):
    """The same chain per output with j innermost, so LLVM vectorises it across j."""
    c[:, :] = np.float32(0.0)
    for i in range(a.shape[0]):
        for k in range(a.shape[1]):
            a_ik = a[i, k]
            for j in range(b.shape[1]):
                c[i, j] = fma32(a_ik, b[k, j], c[i, j])


@njit(fastmath=False)
def mul_add_chain(a, b, c):
    """acc + a * b, two roundings a step: fastmath off must not contract them."""
    c[:, :] = np.float32(0.0)
    for i in range(a.shape[0]):
        for k in range(a.shape[1]):
            a_ik = a[i, k]
            for j in range(b.shape[1]):
                c[i, j] = c[i, j] + a_ik * b[k, j]


def sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def vector_fma_instructions(kernel) -> str:
    """Which FMA instructions the compiled kernel holds: packed (vectorised), scalar, or a
    libm call (a CPU without FMA)."""
    asm = kernel.inspect_asm(kernel.signatures[0])
    found = {
        **{  # by the destination register: zmm 16 lanes, ymm 8, xmm 4
            f"packed x86 {width}mm": len(re.findall(rf"\bvfmadd\w*ps\s.*%{width}mm\d+$", asm, re.M))
            for width in "xyz"
        },
        "scalar x86": len(re.findall(r"\bvfmadd\w*s[sd]\b", asm)),
        "neon fmla .4s": len(re.findall(r"\bfmla\s+v\d+\.4s", asm)),
        "sve fmla .s": len(re.findall(r"\bfmla\s+z\d+\.s", asm)),
        "scalar fmadd": len(re.findall(r"\bfmadd\s+s\d+", asm)),
        "fmaf call": len(re.findall(r"\bfmaf\b", asm)),
    }
    return ", ".join(f"{name} {count}" for name, count in found.items() if count) or "none"


def chain_hashes(a, b, a_long, b_long) -> dict[str, str]:
    """Each numba chain's hash (compiling included in the first call of each)."""
    hashes = {}
    for name, kernel in (
        ("fma_scalar", fma_chain_scalar),
        ("fma_vector", fma_chain_vector),
        ("mul_add", mul_add_chain),
    ):
        c = np.empty((SIZE, SIZE), dtype=np.float32)
        kernel(a, b, c)
        hashes[name] = sha256(c)
    c_long = np.empty((SIZE, SIZE), dtype=np.float32)
    fma_chain_vector(a_long, b_long, c_long)
    hashes[f"fma_vector_k{LONG_K}"] = sha256(c_long)
    return hashes


def torch_hashes(a, b, a_long, b_long) -> dict[str, str]:
    """torch.mm's hashes, one thread: these depend on the CPU's kernels."""
    try:
        import torch
    except ImportError:
        return {"torch": "(not installed)"}
    torch.set_num_threads(1)
    return {
        "torch": f"{torch.__version__} capability {torch.backends.cpu.get_cpu_capability()}",
        "torch_mm": sha256(torch.mm(torch.from_numpy(a), torch.from_numpy(b)).numpy()),
        f"torch_mm_k{LONG_K}": sha256(
            torch.mm(torch.from_numpy(a_long), torch.from_numpy(b_long)).numpy()
        ),
    }


def main() -> int:
    codegen = cpu_target.target_context.codegen()
    features = codegen._get_host_cpu_features().split(",")
    named = " ".join(f for f in FEATURES if f"+{f}" in features)
    print(f"machine {platform.machine()}")
    print(f"numba_cpu {codegen._get_host_cpu_name()}")
    # With NUMBA_CPU_NAME set, numba passes no feature list: LLVM takes the CPU's own.
    print(f"numba_features {named or '(those of numba_cpu)'}")

    rng = np.random.default_rng(0)
    a = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    b = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    a_long = rng.standard_normal((SIZE, LONG_K), dtype=np.float32)
    b_long = rng.standard_normal((LONG_K, SIZE), dtype=np.float32)
    print(f"inputs {sha256(np.concatenate([a, b, a_long.T, b_long]))}")

    start = time.perf_counter()
    chains = chain_hashes(a, b, a_long, b_long)
    seconds = time.perf_counter() - start
    differing = [name for name, digest in chains.items() if digest != RECORDED[name]]
    for name, digest in chains.items():
        print(f"{name} {digest} {'DIFFERS' if name in differing else 'as recorded'}")
    print(f"numba_seconds {seconds:.1f} (compiling included)")
    print(f"fma_vector_asm {vector_fma_instructions(fma_chain_vector)}")
    for name, value in torch_hashes(a, b, a_long, b_long).items():
        print(f"{name} {value}")
    print("chains " + ("DIFFER: " + ", ".join(differing) if differing else "all as recorded"))
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
