# lit configuration for kiln's FileCheck tests.
import os
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_binary_dir, "test", "lit")
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py.in"]

# kiln's tools first, then LLVM's FileCheck, not and count.
config.environment["PATH"] = os.pathsep.join(
    [config.kiln_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
config.substitutions.append(("%kiln_src", config.kiln_source_dir))
config.substitutions.append(("%models", os.path.join(config.kiln_source_dir, "test", "models")))
