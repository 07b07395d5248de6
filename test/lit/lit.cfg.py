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
config.substitutions.append(("%kiln_build", config.kiln_binary_dir))
config.substitutions.append(("%kiln_tools", config.kiln_tools_dir))
config.substitutions.append(("%models", os.path.join(config.kiln_source_dir, "test", "models")))

# The real SmolLM2 model, fetched by scripts/setup.sh. Tests that need it say
# `REQUIRES: smollm2`; with KILN_REQUIRE_MODELS=1 (scripts/test.sh, CI) a
# missing model is an error, never a silent skip.
kiln_home = os.environ.get("KILN_HOME", os.path.join(os.path.expanduser("~"), ".cache", "kiln"))
smollm2 = os.path.join(kiln_home, "models", "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
if os.path.exists(smollm2):
    config.available_features.add("smollm2")
    config.substitutions.append(("%smollm2", smollm2))
elif os.environ.get("KILN_REQUIRE_MODELS") == "1":
    lit_config.fatal(f"KILN_REQUIRE_MODELS=1 but the SmolLM2 model is missing at {smollm2} (run scripts/setup.sh)")
else:
    lit_config.note(f"SmolLM2 model not found at {smollm2}: tests that need it are UNSUPPORTED (run scripts/setup.sh)")
for name in ("HOME", "KILN_HOME"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
