/* kiln's C API: load a compiled model, submit requests, stream their text.
 *
 * One kiln_engine serves many requests at once with continuous batching.
 * The caller drives it: kiln_step() runs one scheduler iteration (one
 * forward call) and delivers the tokens it produced, through each request's
 * callback (called inside kiln_step, on the caller's thread) and into the
 * request's buffer that kiln_poll() reads. A program without threads loops
 * `while (!done) { kiln_step(e); kiln_poll(e, id, &out); ... }`; a program
 * with threads runs that loop on one thread of its own.
 *
 * Threads: a kiln_engine is not thread-safe. Calls on one engine must not
 * overlap (the caller serializes them); different engines may be used from
 * different threads. A token callback may call kiln_cancel() on its engine;
 * kiln_submit, kiln_step, kiln_run_until_idle, kiln_poll and kiln_release
 * fail there (KILN_ERROR_INVALID_ARGUMENT), and kiln_engine_destroy must not
 * be called. kiln_last_error() is per thread.
 *
 * ABI: every struct passed in or out starts with `struct_size`, which the
 * caller sets to sizeof(the struct it was compiled with) (the *_init
 * functions do). The library reads and writes only the fields inside
 * struct_size, so a program built against an older header keeps working
 * with a newer library; new fields are only ever appended, and the enums
 * only grow. docs/design/embedding.md has the rules and the threading.
 */
#ifndef KILN_KILN_H_
#define KILN_KILN_H_

#include <stddef.h>
#include <stdint.h>

/* The library exports these names only (built with hidden visibility). */
#define KILN_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_API_VERSION 1

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad struct_size or option */
  KILN_ERROR_INVALID_PARAMS = 2,   /* a sampling value out of range */
  KILN_ERROR_LOAD_FAILED = 3,      /* the model path is not a loadable artifact */
  KILN_ERROR_REJECTED = 4,         /* the engine refused the request (too long a prompt, ...) */
  KILN_ERROR_NOT_FOUND = 5,        /* no request with that id */
  KILN_ERROR_RUNTIME = 6,          /* a forward step failed */
  KILN_ERROR_INTERNAL = 7          /* anything else (out of memory, ...) */
} kiln_status;

/* The message of this thread's last failed call ("" if none): one line
 * naming the field or file and what was expected. Valid until this thread's
 * next kiln call. */
KILN_API const char* kiln_last_error(void);
/* The status of this thread's last failed call (for kiln_engine_create,
 * which returns NULL rather than a status). */
KILN_API kiln_status kiln_last_status(void);
KILN_API const char* kiln_status_name(kiln_status status);
/* KILN_API_VERSION of the library (may be newer than the header's). */
KILN_API int kiln_api_version(void);

typedef struct kiln_engine kiln_engine;

typedef struct kiln_engine_options {
  uint32_t struct_size;
  const char* device;          /* "cpu", "cuda" or "auto" (NULL: auto) */
  int32_t threads;             /* CPU kernel threads; 0 = every core */
  int32_t max_sequences;       /* sequences decoding at once (default 16) */
  int64_t max_batch_tokens;    /* tokens in one forward call (default 512) */
  int64_t kv_cache_tokens;     /* KV pool capacity; 0 = 8192 */
  int64_t max_context;         /* tokens per sequence; 0 = the model's limit */
  int32_t prefix_cache;        /* reuse cached prompt prefixes (default 1) */
  int32_t progress;            /* loading progress on stderr (default 0) */
} kiln_engine_options;

KILN_API void kiln_engine_options_init(kiln_engine_options* options);

/* Loads a compiled model: `model_path` is an artifact directory (holding
 * manifest.json) written by kiln-compile, or that manifest.json itself.
 * `options` may be NULL (the defaults). NULL on failure, with
 * kiln_last_error() saying why. */
KILN_API kiln_engine* kiln_engine_create(const char* model_path, const kiln_engine_options* options);
/* Cancels every request still running, frees them and the engine. NULL is
 * a no-op. */
KILN_API void kiln_engine_destroy(kiln_engine* engine);

typedef struct kiln_sampling_params {
  uint32_t struct_size;
  float temperature;           /* 0 = greedy (default) */
  int32_t top_k;               /* 0 = off */
  float top_p;                 /* 1 = off */
  float min_p;                 /* 0 = off */
  float repetition_penalty;    /* 1 = off */
  float frequency_penalty;
  float presence_penalty;
  uint64_t seed;
  int32_t max_tokens;          /* default 256 */
  int32_t ignore_eos;          /* keep generating past EOS */
  const char* const* stop;     /* stop strings, num_stop of them */
  size_t num_stop;
  /* -1 (default): none; 0 to 20: kiln_poll_result carries each generated
   * token's log probability and this many most likely alternatives:
   * log-softmax of the model's raw logits (before penalties, temperature,
   * top-k/p, min-p). Not with speculative decoding. */
  int32_t logprobs;
} kiln_sampling_params;

KILN_API void kiln_sampling_params_init(kiln_sampling_params* params);

typedef struct kiln_message {
  const char* role;    /* "system", "user", "assistant" */
  const char* content;
} kiln_message;

/* A prompt: plain text used as is, or chat messages the model's chat
 * template turns into one (with the assistant turn opened). */
typedef struct kiln_prompt {
  uint32_t struct_size;
  const char* text;               /* plain text; used when num_messages == 0 */
  const kiln_message* messages;   /* chat */
  size_t num_messages;
  int32_t chat;                   /* wrap `text` as one user message in the chat template */
} kiln_prompt;

KILN_API void kiln_prompt_init(kiln_prompt* prompt);

typedef enum kiln_finish_reason {
  KILN_FINISH_RUNNING = 0,
  KILN_FINISH_LENGTH = 1,     /* max_tokens or the context */
  KILN_FINISH_STOP = 2,       /* a stop string */
  KILN_FINISH_EOS = 3,
  KILN_FINISH_CANCELLED = 4,
  KILN_FINISH_ERROR = 5
} kiln_finish_reason;

/* Called inside kiln_step for each generated token with the text it
 * releases (`text` is not NUL-terminated; it may be empty while a partial
 * UTF-8 character or a possible stop string is held back), and once more
 * with token -1 at a normal end if held-back text remains. */
typedef void (*kiln_token_callback)(int64_t request_id, int32_t token, const char* text, size_t text_len,
                                    void* user_data);

/* Queues a request; bad sampling values (KILN_ERROR_INVALID_PARAMS) or a
 * prompt the engine cannot take (KILN_ERROR_REJECTED) fail here and touch
 * nothing else. `params` may be NULL (the defaults), `callback` too (then
 * only kiln_poll sees the output). `*request_id` gets the request's id. */
KILN_API kiln_status kiln_submit(kiln_engine* engine, const kiln_prompt* prompt, const kiln_sampling_params* params,
                                 kiln_token_callback callback, void* user_data, int64_t* request_id);

/* One scheduler iteration if there is work; *idle (if not NULL) gets 1 when
 * no request is waiting or running afterwards. */
KILN_API kiln_status kiln_step(kiln_engine* engine, int* idle);
/* Steps until no request is waiting or running. */
KILN_API kiln_status kiln_run_until_idle(kiln_engine* engine);

typedef struct kiln_poll_result {
  uint32_t struct_size;
  const char* text;            /* text released since the last poll (not NUL-terminated) */
  size_t text_len;
  const int32_t* tokens;       /* tokens generated since the last poll */
  size_t num_tokens;
  kiln_finish_reason finish;   /* KILN_FINISH_RUNNING until the request ended */
  /* With kiln_sampling_params.logprobs >= 0 (else NULL and 0): per token of
   * `tokens`, its log probability [num_tokens], and the top_n most likely
   * tokens' ids and log probabilities, most likely first, [num_tokens *
   * top_n] row by row. Valid as long as `tokens`. */
  const float* token_logprobs;
  const int32_t* top_ids;
  const float* top_logprobs;
  size_t top_n;
} kiln_poll_result;

/* The output of a request since its last poll. The pointers stay valid
 * until the next kiln_poll, kiln_step or kiln_release on this engine. A
 * request's failure shows as KILN_FINISH_ERROR, its message in
 * kiln_request_stats' error. */
KILN_API kiln_status kiln_poll(kiln_engine* engine, int64_t request_id, kiln_poll_result* result);

/* Ends a running request (its KV blocks return to the pool at once, or at
 * the next step when called from a callback); one that has ended already is
 * left as it is. KILN_ERROR_NOT_FOUND for an id never submitted or
 * released. */
KILN_API kiln_status kiln_cancel(kiln_engine* engine, int64_t request_id);
/* Forgets a request: cancels it if it runs and frees its buffered output
 * and stats. Every submitted request should be released once read (or the
 * engine keeps them until destroyed). */
KILN_API kiln_status kiln_release(kiln_engine* engine, int64_t request_id);

typedef struct kiln_request_stats {
  uint32_t struct_size;
  int64_t prompt_tokens;
  int64_t generated_tokens;
  int64_t cached_prompt_tokens;   /* prompt tokens whose KV came from the prefix cache */
  int64_t preemptions;
  double queue_seconds;           /* submit -> first forward call */
  double prefill_seconds;         /* first forward call -> first token */
  double decode_seconds;          /* first token -> finish */
  kiln_finish_reason finish;
  const char* error;              /* KILN_FINISH_ERROR's message, else ""; valid until the next
                                     kiln_request_stats_get of this request or its kiln_release */
} kiln_request_stats;

KILN_API kiln_status kiln_request_stats_get(kiln_engine* engine, int64_t request_id, kiln_request_stats* stats);

typedef struct kiln_engine_metrics {
  uint32_t struct_size;
  int64_t waiting;            /* requests queued */
  int64_t running;            /* sequences holding KV */
  int64_t kv_blocks_total;
  int64_t kv_blocks_free;
  int64_t kv_blocks_cached;   /* held only by the prefix cache (evictable) */
  int64_t prefix_hit_tokens;
  int64_t preemptions;
  int64_t steps;              /* forward calls so far */
  int64_t requests;           /* requests submitted and not yet released */
} kiln_engine_metrics;

KILN_API kiln_status kiln_engine_metrics_get(kiln_engine* engine, kiln_engine_metrics* metrics);

/* The model's context length in tokens. */
KILN_API int64_t kiln_context_length(const kiln_engine* engine);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // KILN_KILN_H_
