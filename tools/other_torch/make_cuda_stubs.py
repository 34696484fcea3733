"""Stub the CUDA libraries a CUDA build of torch links at import but this venv lacks, so
`import torch` works for CPU use without the nvidia wheels. Each stub defines the symbols
torch's libraries take from it (with their symbol versions) as functions that abort: a
CPU run never calls them. The driver (libcuda) is never stubbed. Stubs go in torch/lib.

    python tools/other_torch/make_cuda_stubs.py   (needs gcc, readelf and ldd)
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import tempfile
from pathlib import Path

DRIVER = "libcuda.so.1"


def run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True).stdout


def needed(library: str) -> list[str]:
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", run("readelf", "-d", library))


def dynamic_symbols(library: str) -> list[list[str]]:
    return [line.split() for line in run("readelf", "--dyn-syms", "-W", library).splitlines()]


def loaded_and_missing(torch_lib: Path) -> tuple[list[str], set[str]]:
    """The libraries `import torch` loads (torch._C's and the global deps' closure), and the
    ones among their needs that nothing provides."""
    roots = [str(p) for p in torch_lib.parent.glob("_C*.so")]
    roots += [str(p) for p in torch_lib.glob("libtorch_global_deps.so")]
    resolved, unresolved = {}, set()
    for line in run("ldd", *roots).splitlines():
        found = re.match(r"\s*(\S+) => (\S+)", line)
        if found and found.group(2) == "not":
            unresolved.add(found.group(1))
        elif found:
            resolved[found.group(1)] = found.group(2)
    seen: set[str] = set()
    pending, loaded, missing = list(roots), [], set()
    while pending:
        library = pending.pop()
        if library in seen:
            continue
        seen.add(library)
        loaded.append(library)
        for name in needed(library):
            local = torch_lib / name
            if local.exists():
                pending.append(str(local))
            elif name in resolved:
                pending.append(resolved[name])
            elif name in unresolved:
                missing.add(name)
    missing.discard(DRIVER)
    return loaded, missing


def wanted_symbols(loaded: list[str], missing: set[str]):
    """Per missing library, its symbols by version; and unversioned symbols defined nowhere."""
    defined = {
        f[7].split("@")[0]
        for lib in loaded
        for f in dynamic_symbols(lib)
        if len(f) >= 8 and f[6] != "UND"
    }
    version_file: dict[str, str] = {}
    per_library: dict[str, dict[str, set[str]]] = {name: {} for name in missing}
    loose: set[str] = set()
    for library in loaded:
        current = None
        for line in run("readelf", "-V", "-W", library).splitlines():
            if found := re.search(r"File: (\S+)", line):
                current = found.group(1)
            elif (found := re.search(r"Name: (\S+)\s+Flags", line)) and current:
                version_file[found.group(1)] = current
        for fields in dynamic_symbols(library):
            if len(fields) < 8 or fields[6] != "UND" or fields[4] == "WEAK":
                continue
            name, _, version = fields[7].partition("@")
            version = version.split()[0].lstrip("@") if version else ""
            if version and version_file.get(version) in per_library:
                per_library[version_file[version]].setdefault(version, set()).add(name)
            elif not version and name not in defined:
                loose.add(name)
    return per_library, loose


def main() -> None:
    spec = importlib.util.find_spec("torch")
    assert spec and spec.origin, "torch is not installed in this venv"
    torch_lib = Path(spec.origin).parent / "lib"
    loaded, missing = loaded_and_missing(torch_lib)
    per_library, loose = wanted_symbols(loaded, missing)
    with tempfile.TemporaryDirectory() as scratch:
        for index, library in enumerate(sorted(missing)):
            extra = loose if index == 0 else set()  # unversioned ones go in the first stub
            symbols = set().union(*per_library[library].values(), extra)
            source = Path(scratch, library + ".c")
            source.write_text(
                "#include <stdlib.h>\n"
                + "".join(f"void {name}(void) {{ abort(); }}\n" for name in sorted(symbols))
            )
            argv = [
                "gcc",
                "-shared",
                "-fPIC",
                "-o",
                str(torch_lib / library),
                f"-Wl,-soname,{library}",
                str(source),
            ]
            versions = dict(per_library[library])
            if extra:
                versions["STUB_LOOSE"] = extra
            if per_library[library]:
                version_map = Path(scratch, library + ".map")
                version_map.write_text(
                    "".join(
                        f"{v} {{ global: {'; '.join(sorted(s))}; }};\n" for v, s in versions.items()
                    )
                )
                argv.append(f"-Wl,--version-script={version_map}")
            subprocess.run(argv, check=True)
            print(f"stub {library}: {len(symbols)} symbols")


if __name__ == "__main__":
    main()
