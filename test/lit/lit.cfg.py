# lit configuration for dmuonc / dmuon-plan FileCheck tests.
#
# One behaviour per test file, in the folder of the part it tests
# (frontend, compiler, passes, plan, simulate, models), named in lowercase
# words joined by '-': the topic first, then the case (`group-replicate-2x4`,
# `mesh-errors`); error tests say `err` or `errors` in their name. Files
# the tests read but that are not tests live in Inputs/.
import os
import lit.formats

config.name = "dmuon"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".test", ".toml"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dmuon_obj_root, "test", "lit")

config.environment["PATH"] = os.pathsep.join(
    [config.dmuon_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
# Keep diagnostics free of terminal colour codes.
config.environment["TERM"] = "dumb"

config.substitutions.append(("%python", config.python_executable))

# "sanitizer": dmuonc is built with ASan/UBSan (scripts/sanitize.sh), whose
# shadow memory makes peak-RSS bounds meaningless: such tests are
# UNSUPPORTED there and run in the normal build.
try:
    with open(os.path.join(config.dmuon_tools_dir, "dmuonc"), "rb") as f:
        if b"__asan_init" in f.read():
            config.available_features.add("sanitizer")
except OSError:
    pass

# project()'s VERSION in CMakeLists.txt, e.g. 0.2.0.
config.substitutions.append(("%dmuon_version", config.dmuon_version))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
config.substitutions.append(("%models", os.path.join(config.dmuon_src_root, "examples", "models")))
config.substitutions.append(("%clusters", os.path.join(config.dmuon_src_root, "examples", "clusters")))
