/* Streams one answer from a compiled model through kiln's C API.
 *
 *   generate ARTIFACT PROMPT [MAX_TOKENS] [--chat]
 *
 * Greedy, on the CPU; the text goes to stdout as it is generated (from the
 * token callback), the request's statistics to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kiln/kiln.h>

static void on_token(int64_t request_id, int32_t token, const char* text, size_t text_len, void* user_data) {
  (void)request_id;
  (void)token;
  (void)user_data;
  fwrite(text, 1, text_len, stdout);
  fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s ARTIFACT PROMPT [MAX_TOKENS] [--chat]\n", argv[0]);
    return 2;
  }
  int max_tokens = argc > 3 && strcmp(argv[3], "--chat") != 0 ? atoi(argv[3]) : 64;
  int chat = strcmp(argv[argc - 1], "--chat") == 0;

  kiln_engine_options options;
  kiln_engine_options_init(&options);
  options.device = "cpu";
  kiln_engine* engine = kiln_engine_create(argv[1], &options);
  if (engine == NULL) {
    fprintf(stderr, "error: %s\n", kiln_last_error());
    return 1;
  }

  kiln_prompt prompt;
  kiln_prompt_init(&prompt);
  prompt.text = argv[2];
  prompt.chat = chat;
  kiln_sampling_params params;
  kiln_sampling_params_init(&params);
  params.max_tokens = max_tokens;

  int64_t id = 0;
  if (kiln_submit(engine, &prompt, &params, on_token, NULL, &id) != KILN_OK ||
      kiln_run_until_idle(engine) != KILN_OK) {
    fprintf(stderr, "error: %s\n", kiln_last_error());
    kiln_engine_destroy(engine);
    return 1;
  }

  kiln_request_stats stats;
  stats.struct_size = sizeof(stats);
  if (kiln_request_stats_get(engine, id, &stats) == KILN_OK) {
    fprintf(stderr, "\n%lld prompt tokens, %lld generated, %.3f s decoding%s%s\n", (long long)stats.prompt_tokens,
            (long long)stats.generated_tokens, stats.decode_seconds, stats.finish == KILN_FINISH_ERROR ? ": " : "",
            stats.error);
  }
  int failed = stats.finish == KILN_FINISH_ERROR;
  kiln_release(engine, id);
  kiln_engine_destroy(engine);
  return failed ? 1 : 0;
}
