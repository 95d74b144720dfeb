#!/usr/bin/python3
"""scripts/check-layers refuses each way round the layering: it is run on a
scratch copy of the tree with one planted include at a time."""
import os
import shutil
import subprocess
import sys
import tempfile

root = sys.argv[1]
lint = os.path.join(root, "scripts", "check-layers")
folders = ["common", "graph", "loop", "llvm", "cpu", "link", "compiler",
           "cache", "worker", "api", "server", "clients"]
cases = [
    ("graph/ir.c", "#include <llvm-c/Core.h>", "LLVM in graph/ (system include)"),
    ("graph/ir.c", "#include <llvm-c-19/llvm-c/Core.h>", "LLVM in graph/ (versioned path)"),
    ("graph/ir.c", '#include "../llvm/llvm.h"', "LLVM layer in graph/ (relative)"),
    ("loop/print.c", "#include <llvm-c/Core.h>", "LLVM in loop/ (system include)"),
    ("loop/print.c", '#include "../cpu/cpu.h"', "the CPU backend in loop/ (relative)"),
    ("loop/print.c", '#include "../../../usr/include/llvm-c-19/llvm-c/Core.h"',
     "LLVM in loop/ (relative path out of the tree)"),
    ("link/link.c", '#include "../compiler/compiler.h"', "compiler.h in link/ (relative)"),
    ("link/link.c", "#include <compiler.h>", "compiler.h in link/ (system include)"),
    ("link/link.c", '#include "loop.h"', "loop.h in link/ (include path)"),
    ("api/handlers.c", '#include "../graph/graph.h"', "compiler internals in api/"),
]
passed = failed = 0
with tempfile.TemporaryDirectory() as tmp:
    for f in folders:
        if os.path.isdir(os.path.join(root, f)):
            shutil.copytree(os.path.join(root, f), os.path.join(tmp, f))
    shutil.copytree(os.path.join(root, "scripts"), os.path.join(tmp, "scripts"))
    clean = subprocess.run([lint, tmp], capture_output=True, text=True)
    if clean.returncode != 0:
        print("not ok - the unmodified copy passes\n" + clean.stdout)
        failed += 1
    else:
        print("ok - the unmodified copy passes")
        passed += 1
    for path, line, what in cases:
        p = os.path.join(tmp, path)
        orig = open(p).read()
        with open(p, "a") as fh:
            fh.write("\n" + line + "\n")
        r = subprocess.run([lint, tmp], capture_output=True, text=True)
        with open(p, "w") as fh:
            fh.write(orig)
        if r.returncode != 0 and path in r.stdout:
            print(f"ok - refused: {what}: {r.stdout.splitlines()[0]}")
            passed += 1
        else:
            print(f"not ok - accepted: {what}\n{r.stdout}")
            failed += 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
