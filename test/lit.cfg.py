# -*- Python -*-
# lit configuration for moe-mlir: FileCheck tests of moe-opt on .mlir files,
# plus the GoogleTest unit tests (run through lit's googletest format).
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "MOE"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.moe_obj_root, "test")
config.excludes = ["CMakeLists.txt", "README.md", "lit.cfg.py",
                   "lit.site.cfg.py", "Inputs"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%moe_src_root", config.moe_src_root))
config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%moe_obj_root", config.moe_obj_root))
config.substitutions.append(("%mlir_include", config.mlir_include_dir))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

tool_dirs = [config.moe_tools_dir, config.llvm_tools_dir]
# `not`, `count`, FileCheck and split-file live beside the LLVM tools.
for d in tool_dirs:
    llvm_config.with_environment("PATH", d, append_path=True)
tools = ["moe-opt", "mlir-tblgen"]
llvm_config.add_tool_substitutions(tools, tool_dirs)

if config.moe_have_cuda:
    config.available_features.add("cuda")
if config.moe_have_mpi:
    config.available_features.add("mpi")
# OpenMPI refuses root without the flag; CI runs as root on 2 cores.
config.substitutions.append(
    ("%mpirun", "mpirun --allow-run-as-root --oversubscribe"))

# Debian's python3-matplotlib (installed by scripts/setup.sh) renders traces.
import subprocess
if subprocess.call(["/usr/bin/python3", "-c", "import matplotlib"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
    config.available_features.add("matplotlib")
if subprocess.call(["/usr/bin/python3", "-c", "import torch"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
    config.available_features.add("torch")
if subprocess.call(["/usr/bin/python3", "-c", "import onnx"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
    config.available_features.add("onnx")
config.substitutions.append(("%system_python", "/usr/bin/python3"))
# scripts/setup.sh installs onnxruntime and transformers (pinned) into the
# source tree's .pydeps/ for /usr/bin/python3: the ONNX import validation
# and the Hugging Face models need them.
pydeps = os.path.join(config.moe_src_root, ".pydeps")
for feature, module in [("onnxruntime", "onnxruntime"),
                        ("transformers", "transformers")]:
    if subprocess.call(["/usr/bin/python3", "-c", "import " + module],
                       env=dict(os.environ, PYTHONPATH=pydeps),
                       stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL) == 0:
        config.available_features.add(feature)
config.environment["PYTHONPATH"] = pydeps
