"""`kiln run MODEL` and its compiled-artifact cache under faults, on a tiny
GGUF: a cached artifact whose file or seal is damaged is reported, removed
and compiled again; a compile SIGKILLed midway, or its temporary directory
left behind, is never used and is cleaned up; an unwritable cache is a clear error; a model replaced under
the same size and mtime is compiled again through the cache, and refused
by an artifact compiled before, naming the file and both hashes. Runs on
SmolLM2's GGUF (copied into a temporary KILN_HOME), ~30 s.

    compile_cache_test.py --kiln build/bin/kiln --model smollm2   (a GGUF path or a cached name)
"""
import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None


class CompileCacheTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="kiln_compile_cache_")
        self.home = os.path.join(self.work, "home")
        self.model = os.path.join(self.work, "tiny.gguf")
        shutil.copy2(ARGS.model, self.model)

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def run_kiln(self, model=None, home=None):
        env = dict(os.environ, KILN_HOME=home or self.home)
        return subprocess.run([ARGS.kiln, "run", model or self.model, "Hello", "--max-tokens", "2", "--device", "cpu"],
                              env=env, capture_output=True, text=True, timeout=300)

    def artifact(self):
        found = [d for d in glob.glob(os.path.join(self.home, "artifacts", "tiny-*")) if ".tmp-" not in d]
        self.assertEqual(len(found), 1, found)
        return found[0]

    def assertRuns(self, result, compiles):
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual("kiln: compiling" in result.stderr, compiles, result.stderr)

    def test_damaged_artifacts_are_compiled_again(self):
        self.assertRuns(self.run_kiln(), compiles=True)
        artifact = self.artifact()
        self.assertTrue(os.path.exists(os.path.join(artifact, "artifact.kcache")))
        self.assertRuns(self.run_kiln(), compiles=False)

        with open(os.path.join(artifact, "manifest.json"), "a") as f:
            f.write(" ")
        result = self.run_kiln()
        self.assertRuns(result, compiles=True)
        self.assertIn(f"kiln: cache entry {artifact}: manifest.json has", result.stderr)
        self.assertIn("deleted, rebuilding it", result.stderr)

        seal = os.path.join(artifact, "artifact.kcache")
        os.truncate(seal, os.path.getsize(seal) - 3)
        result = self.run_kiln()
        self.assertRuns(result, compiles=True)
        self.assertIn(f"kiln: cache entry {artifact}: artifact.kcache: truncated", result.stderr)

        os.remove(seal)  # as a kiln before seals left it
        result = self.run_kiln()
        self.assertRuns(result, compiles=True)
        self.assertIn("it has no artifact.kcache", result.stderr)
        self.assertRuns(self.run_kiln(), compiles=False)

    def test_a_dead_compiles_directory_is_never_used_and_removed(self):
        self.assertRuns(self.run_kiln(), compiles=True)
        artifact = self.artifact()
        dead = subprocess.Popen(["true"])
        dead.wait()
        staging = f"{artifact}.tmp-{dead.pid}-0"
        shutil.copytree(artifact, staging)
        shutil.rmtree(artifact)
        with open(os.path.join(staging, "manifest.json"), "w") as f:
            f.write("{\"half\": ")  # what a SIGKILLed kiln-compile leaves
        result = self.run_kiln()
        self.assertRuns(result, compiles=True)
        self.assertFalse(os.path.exists(staging))
        self.assertRuns(self.run_kiln(), compiles=False)

    def test_kiln_killed_mid_compile_leaves_nothing_loadable(self):
        env = dict(os.environ, KILN_HOME=self.home)
        process = subprocess.Popen([ARGS.kiln, "run", self.model, "Hello", "--max-tokens", "2", "--device", "cpu"],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        staging = []
        deadline = time.time() + 120
        while not staging and time.time() < deadline and process.poll() is None:
            staging = glob.glob(os.path.join(self.home, "artifacts", "tiny-*.tmp-*"))
            time.sleep(0.005)
        os.killpg(process.pid, signal.SIGKILL)  # kiln and the kiln-compile it runs
        process.wait()
        self.assertTrue(staging, "kiln finished compiling before it could be killed")
        self.assertEqual([d for d in glob.glob(os.path.join(self.home, "artifacts", "tiny-*")) if ".tmp-" not in d],
                         [])
        result = self.run_kiln()
        self.assertRuns(result, compiles=True)
        self.assertEqual(glob.glob(os.path.join(self.home, "artifacts", "tiny-*.tmp-*")), [])

    def test_an_unwritable_cache_is_a_clear_error(self):
        result = self.run_kiln(home="/dev/null/kiln-home")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("cannot write the compiled-artifact cache /dev/null/kiln-home/artifacts", result.stderr)
        self.assertIn("set KILN_HOME to a writable folder", result.stderr)

    def test_a_model_changed_under_the_same_size_and_mtime(self):
        self.assertRuns(self.run_kiln(), compiles=True)
        old_artifact = self.artifact()
        stat = os.stat(self.model)
        with open(self.model, "r+b") as f:
            f.seek(stat.st_size - 1)
            last = f.read(1)
            f.seek(stat.st_size - 1)
            f.write(bytes([last[0] ^ 0x5A]))
        os.utime(self.model, ns=(stat.st_atime_ns, stat.st_mtime_ns))

        # The artifact compiled before refuses the model...
        refused = self.run_kiln(model=old_artifact)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn(f"model.source file {self.model} changed since the artifact was compiled: its sampled "
                      "content hash is ", refused.stderr)
        self.assertIn("the manifest records ", refused.stderr)
        # ...and `kiln run MODEL` compiles it again under a new key.
        self.assertRuns(self.run_kiln(), compiles=True)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--model", required=True, help="a GGUF file, or a model name in $KILN_HOME/models")
    ARGS, rest = parser.parse_known_args()
    if not os.path.isfile(ARGS.model):
        home = os.environ.get("KILN_HOME") or os.path.expanduser("~/.cache/kiln")
        found = glob.glob(os.path.join(home, "models", ARGS.model, "*.gguf"))
        if len(found) != 1:
            sys.exit(f"compile_cache_test.py: --model {ARGS.model}: not a file, and {home}/models/{ARGS.model}/ "
                     f"holds {len(found)} .gguf files (expected one)")
        ARGS.model = found[0]
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
