// kiln-kernels: inspect the CUDA kernel instances of a compiled artifact
// without MLIR and without a GPU.
//
//   kiln-kernels ARTIFACT list
//   kiln-kernels ARTIFACT show INSTANCE [--source | --ptx | --sass | --resources] [--arch sm_90a]
//   kiln-kernels kind KIND PARAMS_JSON [--source | --ptx | --sass | --resources] [--arch sm_90a]
//   kiln-kernels ARTIFACT tasks
//
// `list` shows every kernel instance among the plan's variants (chosen by
// the compiler for its target, runtime/artifact/kernel_variant.h): its
// role, the rows it runs at, the features it needs (the CUDA backend runs,
// per role, the first variant whose features are on), and how many steps
// use it; then the greedy argmax the runtime adds over the logits. The
// source is ARTIFACT/kernels/INSTANCE.cu when present, else generated
// (codegen/cuda). PTX, SASS and resources come from NVRTC, for the plan's
// target (sm_90a for Hopper's wgmma kernels) unless --arch names another.
// `kind` shows the instance of one kernel kind and its params, with no plan
// (kinds no plan uses yet, such as the state-space kernels; sm_90a unless
// --arch says otherwise).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "codegen/cuda/instance_source.h"
#include "codegen/cuda/kernel_selection.h"
#include "runtime/artifact/manifest.h"
#include "runtime/artifact/step_params_json.h"
#include "runtime/cuda/nvrtc_compiler.h"
#include "tools/kiln-kernels/task_list.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One kernel instance and the variants that name it.
struct Instance {
  std::string kind;
  json params;
  std::string role;
  std::string rows;   // "1", "2-8", "16+"
  std::string needs;  // "stream_gemv,fold_norms", "-" for none
  int uses = 0;
};

struct PlanKernels {
  std::string target;
  std::map<std::string, Instance> instances;
};

constexpr const char* kUsage =
    "usage: kiln-kernels ARTIFACT list\n"
    "       kiln-kernels ARTIFACT show INSTANCE [--source|--ptx|--sass|--resources] [--arch sm_90a]\n"
    "       kiln-kernels kind KIND PARAMS_JSON [--source|--ptx|--sass|--resources] [--arch sm_90a]\n"
    "       kiln-kernels ARTIFACT tasks\n"
    "  list   every kernel instance among the plan's variants (chosen for its --target), with its\n"
    "         kind, role, rows, the features it needs and how many steps use it\n"
    "  show   one instance: its generated source (--source, the default), PTX, SASS (nvdisasm),\n"
    "         or registers, shared memory, spills and launch shape (--resources)\n"
    "  kind   the same for one kernel kind and its params (a JSON object), without a plan\n"
    "  tasks  the megakernel's task list of each entry compiled with --megakernel: per task its kind,\n"
    "         step, tile, weight bytes, waits (counter>=value) and signals; then tasks and weight bytes\n"
    "         per kind, the counters and the critical path\n";

// A usage error: the usage on stderr, exit 2.
int usage() {
  std::fputs(kUsage, stderr);
  return 2;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "kiln-kernels: %s\n", message.c_str());
  return 1;
}

std::string rowsText(const kiln::RowRange& rows) {
  if (rows.max == kiln::RowRange::kUnbounded) return fmt::format("{}+", rows.min);
  return rows.min == rows.max ? fmt::format("{}", rows.min) : fmt::format("{}-{}", rows.min, rows.max);
}

kiln::Result<PlanKernels> readPlan(const fs::path& artifact) {
  auto manifest = kiln::Manifest::load(artifact.string());
  if (!manifest.ok()) return manifest.error();
  if (manifest->target == "cpu")
    return kiln::makeError("{}: the plan was compiled for target cpu and has no CUDA kernels (kiln-compile "
                           "--target sm_90a, or the device's sm_XY, chooses them)",
                           manifest->path);
  PlanKernels plan;
  plan.target = manifest->target;
  for (const auto& [entry_name, entry] : manifest->entries)
    for (const kiln::Step& s : entry.steps)
      for (const kiln::KernelVariant& v : s.variants) {
        if (v.instance.empty()) continue;  // cuBLASLt, or a neighbour's work
        Instance& inst = plan.instances[v.instance];
        inst.kind = v.kind;
        inst.params = v.params;
        inst.role = kiln::variantRoleName(v.role);
        inst.rows = rowsText(v.rows);
        inst.needs.clear();
        for (kiln::KernelFeature f : v.needs) inst.needs += (inst.needs.empty() ? "" : ",") + std::string(kiln::kernelFeatureName(f));
        if (inst.needs.empty()) inst.needs = "-";
        ++inst.uses;
      }
  // The runtime's greedy argmax over the forward entry's logits.
  const kiln::Entry& forward = *manifest->findEntry("forward");
  if (!forward.outputs.empty())
    if (const kiln::EntryValue* v = forward.findValue(forward.outputs[0].value)) {
      const int64_t elem = v->type == "f32" ? 4 : v->type == "bf16" ? 2 : 0;
      if (elem > 0 && v->row_bytes > 0) {  // else no CUDA argmax for this type
        const auto greedy = kiln::cuda_codegen::greedyInstance(v->row_bytes / elem, v->type);
        plan.instances[greedy.name] = {greedy.kind, greedy.params, "greedy", "1+", "-", 1};
      }
    }
  return plan;
}

std::string findTool(const char* name) {
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':'))
      if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  }
  for (const char* root : std::initializer_list<const char*>{std::getenv("CUDA_HOME"), std::getenv("CUDA_PATH"), "/usr/local/cuda"})
    if (root && *root && ::access((std::string(root) + "/bin/" + name).c_str(), X_OK) == 0)
      return std::string(root) + "/bin/" + name;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  if (argc < 3) return usage();
  // `kind KIND PARAMS`: a plan of that one instance.
  const bool by_kind = std::string_view(argv[1]) == "kind";
  if (by_kind && argc < 4) return usage();
  const fs::path artifact = by_kind ? fs::path() : fs::path(argv[1]);
  const std::string command = by_kind ? "show" : argv[2];
  if (command == "tasks") return argc == 3 ? kiln::printTaskList(artifact.string()) : usage();
  std::string what = "--source", arch;  // arch: --arch, else the plan's target
  for (int i = command == "show" ? 4 : 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--arch" && i + 1 < argc && command == "show") arch = argv[++i];
    else if (command == "show" && (a == "--source" || a == "--ptx" || a == "--sass" || a == "--resources")) what = a;
    else return usage();
  }
  kiln::Result<PlanKernels> plan = PlanKernels{};
  std::string by_kind_instance;
  if (by_kind) {
    json params = json::parse(argv[3], nullptr, /*allow_exceptions=*/false);
    if (!params.is_object()) return fail(fmt::format("kind {}: params '{}' are not a JSON object", argv[2], argv[3]));
    by_kind_instance = kiln::cuda_codegen::instanceName(argv[2], params);
    plan->target = "sm_90a";
    plan->instances[by_kind_instance] = {argv[2], params, "-", "-", "-", 0};
  } else {
    plan = readPlan(artifact);
  }
  if (!plan) return fail(plan.error().message);

  if (command == "list") {
    size_t width = 8;
    for (auto& [name, inst] : plan->instances) width = std::max(width, name.size());
    std::printf("%-*s  %-21s  %-16s  %-5s  %-28s  %5s  %s\n", int(width), "instance", "kind", "role", "rows", "needs",
                "steps", "params");
    for (auto& [name, inst] : plan->instances)
      std::printf("%-*s  %-21s  %-16s  %-5s  %-28s  %5d  %s\n", int(width), name.c_str(), inst.kind.c_str(),
                  inst.role.c_str(), inst.rows.c_str(), inst.needs.c_str(), inst.uses, inst.params.dump().c_str());
    return 0;
  }
  if (command != "show" || argc < 4) return usage();
  const std::string instance = by_kind ? by_kind_instance : argv[3];
  auto it = plan->instances.find(instance);
  if (it == plan->instances.end())
    return fail(fmt::format("{}: the plan has no instance '{}' (kiln-kernels {} list shows them)",
                            (artifact / "manifest.json").string(), instance, artifact.string()));
  const Instance& step = it->second;
  auto generated = kiln::cuda_codegen::instanceSource(step.kind, step.params, instance);
  std::string source;
  const fs::path file = artifact / "kernels" / (instance + ".cu");
  if (std::ifstream in(file); !by_kind && in) {
    std::stringstream ss;
    ss << in.rdbuf();
    source = ss.str();
  } else if (generated) {
    source = generated->source;
  } else {
    return fail(fmt::format("{}: {} (and {} does not exist)", instance, generated.error().message, file.string()));
  }
  if (what == "--source") {
    std::fputs(source.c_str(), stdout);
    return 0;
  }

  if (arch.empty()) arch = generated && !generated->arch.empty() ? generated->arch : plan->target;
  kiln::cuda::CompileOptions options;
  options.arch = arch;
  options.include_dirs = kiln::cuda::defaultKernelIncludeDirs();
  options.ptx = what == "--ptx";
  options.cubin = what != "--ptx";
  auto compiled = kiln::cuda::compileKernel(instance, source, options);
  if (!compiled) return fail(compiled.error().message);
  if (what == "--ptx") {
    std::fputs(compiled->ptx.c_str(), stdout);
    return 0;
  }
  if (what == "--sass") {
    std::string tool = findTool("nvdisasm");
    std::string args = " -c -g ";
    if (tool.empty()) {
      tool = findTool("cuobjdump");
      args = " -sass ";
    }
    if (tool.empty())
      return fail("SASS needs nvdisasm or cuobjdump (the CUDA toolkit's bin/): neither is on PATH, in "
                  "$CUDA_HOME/bin or in /usr/local/cuda/bin. --ptx and --resources work without them.");
    const fs::path cubin = fs::temp_directory_path() / fmt::format("kiln-kernels-{}-{}.cubin", instance, ::getpid());
    {
      std::ofstream out(cubin, std::ios::binary);
      out << compiled->cubin;
    }
    const int rc = std::system((tool + args + "'" + cubin.string() + "'").c_str());
    fs::remove(cubin);
    return rc == 0 ? 0 : 1;
  }
  // --resources
  const kiln::cuda::ResourceUsage& u = compiled->resources;
  std::printf("instance   %s\nkind       %s\narch       %s\n", instance.c_str(), step.kind.c_str(), arch.c_str());
  if (!u.found) {
    std::printf("resources  ptxas printed no report; its log:\n%s\n", compiled->log.c_str());
  } else {
    std::printf("registers  %d per thread\nshared     %d bytes static\nstack      %d bytes\n"
                "spills     %d bytes stored, %d bytes loaded\nbarriers   %d\nconstant   %d bytes (cmem[0])\n",
                u.registers, u.shared_bytes, u.stack_bytes, u.spill_stores, u.spill_loads, u.barriers,
                u.constant_bytes);
  }
  if (generated) {
    const auto& l = generated->launch;
    std::printf("launch     grid %s, block [%d], argument kiln::kernels::%s\n", l.grid.c_str(), l.block_threads,
                l.params_struct.c_str());
    if (u.found && u.registers > 0) {
      // Register-file bound of resident blocks on one SM (64K registers, allocation rounded to 8 per thread).
      const int regs = (u.registers + 7) / 8 * 8;
      const int by_regs = 65536 / (regs * l.block_threads);
      // Shared memory: the static report plus the dynamic bytes the Config names (kSmemBytes).
      const int smem = u.shared_bytes + kiln::cuda_codegen::configConstant(generated->source, "kSmemBytes", 0);
      const int by_smem = smem ? (227 * 1024) / smem : 32;
      const int blocks = std::min({by_regs, by_smem, 2048 / l.block_threads, 32});
      std::printf("occupancy  %d blocks/SM (%d warps of 64) by registers and shared memory on sm_90\n", blocks,
                  blocks * l.block_threads / 32);
    }
  }
  return 0;
}
