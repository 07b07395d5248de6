// The Python module `kiln` over kiln.hpp:
//
//   llm = kiln.LLM("path/to/artifact", device="cpu", threads=2)
//   out = llm.generate(["prompt", ...], kiln.SamplingParams(max_tokens=32))
//   for piece in llm.stream("prompt", params): print(piece, end="")
//
// The GIL stays held while the engine steps: every call on an LLM is then
// serialized, as the engine needs, whichever Python thread makes it.
// Refused parameters raise ValueError with the library's message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.hpp"

namespace py = pybind11;

namespace {

const char* finishName(kiln_finish_reason finish) {
  switch (finish) {
    case KILN_FINISH_RUNNING: return "running";
    case KILN_FINISH_LENGTH: return "length";
    case KILN_FINISH_STOP: return "stop";
    case KILN_FINISH_EOS: return "eos";
    case KILN_FINISH_CANCELLED: return "cancelled";
    case KILN_FINISH_ERROR: return "error";
  }
  return "error";
}

// One prompt as Python gives it: a string, or a list of {"role", "content"}
// dicts (chat messages).
kiln::api::Prompt toPrompt(const py::handle& prompt, bool chat) {
  kiln::api::Prompt p;
  if (py::isinstance<py::str>(prompt)) {
    p.text = prompt.cast<std::string>();
    p.chat = chat;
    return p;
  }
  if (!py::isinstance<py::list>(prompt)) throw py::value_error("a prompt is a str or a list of chat message dicts");
  for (const py::handle& m : prompt.cast<py::list>()) {
    if (!py::isinstance<py::dict>(m)) throw py::value_error("a chat message is a dict with 'role' and 'content'");
    py::dict message = m.cast<py::dict>();
    if (!message.contains("role") || !message.contains("content"))
      throw py::value_error("a chat message is a dict with 'role' and 'content'");
    p.messages.push_back({message["role"].cast<std::string>(), message["content"].cast<std::string>()});
  }
  p.chat = true;
  return p;
}

bool isOnePrompt(const py::handle& prompts) {
  if (py::isinstance<py::str>(prompts)) return true;
  if (!py::isinstance<py::list>(prompts)) return false;
  py::list list = prompts.cast<py::list>();
  return list.size() > 0 && py::isinstance<py::dict>(list[0]);
}

struct Completion {
  std::string text;
  std::vector<int32_t> tokens;
  std::string finish_reason;
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  std::string error;
};

class LLM {
 public:
  LLM(const std::string& model, const kiln::api::EngineOptions& options) : engine_(model, options) {}

  kiln::api::Engine& engine() { return engine_; }

  py::object generate(const py::object& prompts, const std::optional<kiln::api::SamplingParams>& params, bool chat) {
    bool one = isOnePrompt(prompts);
    std::vector<kiln::api::Prompt> list;
    if (one) {
      list.push_back(toPrompt(prompts, chat));
    } else {
      for (const py::handle& p : prompts) list.push_back(toPrompt(p, chat));
    }
    std::vector<kiln::api::Completion> done = engine_.generate(list, params.value_or(kiln::api::SamplingParams{}));
    py::list out;
    for (kiln::api::Completion& c : done) {
      Completion r;
      r.text = std::move(c.text);
      r.tokens = std::move(c.tokens);
      r.finish_reason = finishName(c.finish);
      r.prompt_tokens = c.stats.prompt_tokens;
      r.cached_prompt_tokens = c.stats.cached_prompt_tokens;
      r.prefill_seconds = c.stats.prefill_seconds;
      r.decode_seconds = c.stats.decode_seconds;
      r.error = std::move(c.error);
      out.append(py::cast(std::move(r)));
    }
    return one ? out[0] : py::object(out);
  }

  py::dict metrics() {
    kiln_engine_metrics m = engine_.metrics();
    py::dict d;
    d["waiting"] = m.waiting;
    d["running"] = m.running;
    d["kv_blocks_total"] = m.kv_blocks_total;
    d["kv_blocks_free"] = m.kv_blocks_free;
    d["kv_blocks_cached"] = m.kv_blocks_cached;
    d["prefix_hit_tokens"] = m.prefix_hit_tokens;
    d["preemptions"] = m.preemptions;
    d["steps"] = m.steps;
    d["requests"] = m.requests;
    return d;
  }

 private:
  kiln::api::Engine engine_;
};

// The text of one request as it is generated: each next() steps the engine
// (and so every other request in it) until this one has new text. A stream
// dropped before its end cancels its request.
class Stream {
 public:
  Stream(LLM& llm, int64_t id) : llm_(llm), id_(id) {}
  ~Stream() {
    if (!released_) kiln_release(llm_.engine().handle(), id_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  std::string next() {
    if (released_) throw py::stop_iteration();
    for (;;) {
      kiln::api::Chunk chunk = llm_.engine().poll(id_);
      if (!chunk.text.empty() && !chunk.finished()) return chunk.text;
      if (chunk.finished()) {
        finish_ = finishName(chunk.finish);
        std::string error;
        llm_.engine().stats(id_, &error);
        llm_.engine().release(id_);
        released_ = true;
        if (chunk.finish == KILN_FINISH_ERROR) throw std::runtime_error(error);
        if (!chunk.text.empty()) return chunk.text;
        throw py::stop_iteration();
      }
      llm_.engine().step();
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }
  void cancel() {
    if (!released_) llm_.engine().cancel(id_);
  }
  int64_t id() const { return id_; }
  const std::string& finishReason() const { return finish_; }

 private:
  LLM& llm_;
  int64_t id_;
  bool released_ = false;
  std::string finish_ = "running";
};

}  // namespace

PYBIND11_MODULE(kiln, m) {
  m.doc() = "kiln: run a model compiled by kiln-compile (docs/design/embedding.md)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kiln::api::Error& e) {
      switch (e.status()) {
        case KILN_ERROR_INVALID_ARGUMENT:
        case KILN_ERROR_INVALID_PARAMS:
        case KILN_ERROR_REJECTED: PyErr_SetString(PyExc_ValueError, e.what()); return;
        case KILN_ERROR_NOT_FOUND: PyErr_SetString(PyExc_KeyError, e.what()); return;
        default: PyErr_SetString(PyExc_RuntimeError, e.what()); return;
      }
    }
  });

  py::class_<kiln::api::SamplingParams>(m, "SamplingParams")
      .def(py::init([](float temperature, int top_k, float top_p, float min_p, float repetition_penalty,
                       float frequency_penalty, float presence_penalty, uint64_t seed, int max_tokens,
                       bool ignore_eos, std::vector<std::string> stop) {
             kiln::api::SamplingParams p;
             p.temperature = temperature;
             p.top_k = top_k;
             p.top_p = top_p;
             p.min_p = min_p;
             p.repetition_penalty = repetition_penalty;
             p.frequency_penalty = frequency_penalty;
             p.presence_penalty = presence_penalty;
             p.seed = seed;
             p.max_tokens = max_tokens;
             p.ignore_eos = ignore_eos;
             p.stop = std::move(stop);
             return p;
           }),
           py::kw_only(), py::arg("temperature") = 0.0f, py::arg("top_k") = 0, py::arg("top_p") = 1.0f,
           py::arg("min_p") = 0.0f, py::arg("repetition_penalty") = 1.0f, py::arg("frequency_penalty") = 0.0f,
           py::arg("presence_penalty") = 0.0f, py::arg("seed") = 0, py::arg("max_tokens") = 256,
           py::arg("ignore_eos") = false, py::arg("stop") = std::vector<std::string>{})
      .def_readwrite("temperature", &kiln::api::SamplingParams::temperature)
      .def_readwrite("top_k", &kiln::api::SamplingParams::top_k)
      .def_readwrite("top_p", &kiln::api::SamplingParams::top_p)
      .def_readwrite("min_p", &kiln::api::SamplingParams::min_p)
      .def_readwrite("repetition_penalty", &kiln::api::SamplingParams::repetition_penalty)
      .def_readwrite("frequency_penalty", &kiln::api::SamplingParams::frequency_penalty)
      .def_readwrite("presence_penalty", &kiln::api::SamplingParams::presence_penalty)
      .def_readwrite("seed", &kiln::api::SamplingParams::seed)
      .def_readwrite("max_tokens", &kiln::api::SamplingParams::max_tokens)
      .def_readwrite("ignore_eos", &kiln::api::SamplingParams::ignore_eos)
      .def_readwrite("stop", &kiln::api::SamplingParams::stop);

  py::class_<Completion>(m, "Completion")
      .def_readonly("text", &Completion::text)
      .def_readonly("tokens", &Completion::tokens)
      .def_readonly("finish_reason", &Completion::finish_reason)
      .def_readonly("prompt_tokens", &Completion::prompt_tokens)
      .def_readonly("cached_prompt_tokens", &Completion::cached_prompt_tokens)
      .def_readonly("prefill_seconds", &Completion::prefill_seconds)
      .def_readonly("decode_seconds", &Completion::decode_seconds)
      .def_readonly("error", &Completion::error)
      .def("__repr__", [](const Completion& c) {
        return "Completion(text=" + py::repr(py::str(c.text)).cast<std::string>() + ", finish_reason='" +
               c.finish_reason + "')";
      });

  py::class_<Stream>(m, "Stream")
      .def("__iter__", [](Stream& s) -> Stream& { return s; })
      .def("__next__", &Stream::next)
      .def("cancel", &Stream::cancel)
      .def_property_readonly("id", &Stream::id)
      .def_property_readonly("finish_reason", &Stream::finishReason);

  py::class_<LLM>(m, "LLM")
      .def(py::init([](const std::string& model, const std::string& device, int threads, int max_sequences,
                       int64_t max_batch_tokens, int64_t kv_cache_tokens, int64_t max_context, bool prefix_cache,
                       bool progress) {
             kiln::api::EngineOptions o;
             o.device = device;
             o.threads = threads;
             o.max_sequences = max_sequences;
             o.max_batch_tokens = max_batch_tokens;
             o.kv_cache_tokens = kv_cache_tokens;
             o.max_context = max_context;
             o.prefix_cache = prefix_cache;
             o.progress = progress;
             return std::make_unique<LLM>(model, o);
           }),
           py::arg("model"), py::kw_only(), py::arg("device") = "auto", py::arg("threads") = 0,
           py::arg("max_sequences") = 16, py::arg("max_batch_tokens") = 512, py::arg("kv_cache_tokens") = 0,
           py::arg("max_context") = 0, py::arg("prefix_cache") = true, py::arg("progress") = false,
           "Loads an artifact directory written by kiln-compile.")
      .def("generate", &LLM::generate, py::arg("prompts"), py::arg("params") = py::none(), py::kw_only(),
           py::arg("chat") = false,
           "Runs the prompts (a str, a list of chat messages, or a list of either) to their ends, batched; "
           "one Completion for one prompt, else a list in the prompts' order.")
      .def(
          "stream",
          [](LLM& llm, const py::object& prompt, const std::optional<kiln::api::SamplingParams>& params, bool chat) {
            int64_t id = llm.engine().submit(toPrompt(prompt, chat), params.value_or(kiln::api::SamplingParams{}));
            return std::make_unique<Stream>(llm, id);
          },
          py::arg("prompt"), py::arg("params") = py::none(), py::kw_only(), py::arg("chat") = false,
          py::keep_alive<0, 1>(), "An iterator over the text of one request as it is generated.")
      .def("metrics", &LLM::metrics)
      .def_property_readonly("context_length", [](LLM& llm) { return llm.engine().contextLength(); });
}
