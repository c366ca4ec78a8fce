/* The continuous-batching scheduler: which tokens of which sequences run in the next step.
 *
 * Pure logic over the KV cache's bookkeeping (core/kv/kv_cache.h): no model, no device, no
 * threads. The engine (core/engine/engine_step.c) drives it, one step at a time, making exactly
 * these calls:
 *
 *   weir_sched_add(...)                     each admitted request (the engine bounds its own
 *                                           backlog before submit)
 *   weir_sched_add_drafts(...)              speculative decoding only: draft tokens for the
 *                                           running sequences in decode (see below)
 *   weir_sched_step(s, &out)                plan the batch (may preempt; may fail sequences:
 *                                           the engine ends each of out.failed with an error)
 *   out.copies                              run by the KV pool (weir_kv_pool_copy) BEFORE the
 *                                           forward
 *   weir_sched_fill_batch(s, &out, &arrays) host arrays for weir_attn_batch + input ids
 *   forward; for each item with num_logits > 0: sample / verify, then
 *   weir_sched_commit(s, seq, accepted, sampled, n)
 *   a request that ends (stop condition, length, abort, timeout, error):
 *                                           weir_sched_seq_free, which finishes the sequence
 *                                           and frees its blocks in the same call
 *   on a failed forward: weir_sched_undo_step(s, &out), then the batch's requests end with an
 *   error (weir_sched_seq_free).
 *   weir_sched_stats_get                    for the engine's published counters.
 *
 * The rest of the interface is not on the engine's path today: weir_sched_finish (end a
 * sequence but keep it readable), weir_sched_abort and weir_sched_find (by id),
 * weir_sched_truncate (general rollback), weir_sched_num_waiting / _num_running, and
 * weir_sched_fork (parallel sampling sharing the prompt's KV copy-on-write: the engine asks the
 * HTTP layer's n > 1 as n requests sharing the prompt through the prefix cache instead). The
 * tests drive the scheduler through all of it.
 *
 * Policy (docs/scheduler.md). Each step honours max_num_seqs (running sequences) and
 * max_num_batched_tokens (new tokens in the batch):
 *   1. running sequences in decode (one known uncomputed token, plus drafts) get their token
 *      and as many of their drafts as the budget allows, best first;
 *   2. running sequences in the middle of a (chunked) prefill continue with what is left;
 *   3. waiting sequences are admitted, best first, each with a chunk of the remaining budget
 *      (a prefix-cache lookup first), while sequences and blocks remain. Nothing is admitted
 *      in a step that preempted.
 * "Best first" is FCFS by arrival, or (priority ascending, then arrival) under the priority
 * policy. When a running sequence cannot get its blocks, the worst running sequence (the
 * newest; lowest priority first under the priority policy) is preempted by recompute: its
 * blocks are freed, num_computed drops to 0, drafts are dropped, its output tokens are kept,
 * and it returns to the waiting queue in its arrival order (the front, under FCFS). A
 * sequence that could not fit even in the whole empty pool is failed (weir_sched_out.failed)
 * instead of looping.
 *
 * Paused sequences (weir_sched_pause: flow control for a client that stopped reading) leave
 * the queues but keep their KV blocks; they are never scheduled, and when blocks run out a
 * paused sequence's blocks are reclaimed (recompute later) before any running sequence is
 * preempted and before an admission gives up for lack of blocks. weir_sched_resume puts a
 * sequence back: into the running batch when it still holds blocks (ahead of admissions; at
 * the next step if the batch is full), into the waiting queue when it does not.
 *
 * Lifetime. weir_sched_add allocates a weir_sched_seq; the scheduler keeps it in its queues
 * until it is finished (weir_sched_finish, weir_sched_abort, or failed by a step); the memory
 * stays valid for the engine to read until weir_sched_seq_free.
 *
 * Threading. Not thread-safe: the engine thread makes every call.
 *
 * Errors: negative weir_status codes; a failing call changes nothing unless it says so. */
#ifndef WEIR_ENGINE_SCHEDULER_H
#define WEIR_ENGINE_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "kv/kv_cache.h"

typedef struct weir_sched weir_sched;

typedef enum weir_sched_policy {
  WEIR_SCHED_FCFS = 0,
  WEIR_SCHED_PRIORITY = 1, /* lower priority value runs first, then arrival */
} weir_sched_policy;

/* Parses "fcfs" / "priority" (NULL or "" = fcfs). WEIR_E_INVAL otherwise. */
int weir_sched_policy_parse(const char *s, weir_sched_policy *out);

typedef struct weir_sched_config {
  int32_t max_num_seqs;           /* > 0: running sequences at most */
  int32_t max_num_batched_tokens; /* >= max_num_seqs: new tokens per step at most */
  weir_sched_policy policy;
  /* Blocks kept free when ADMITTING a waiting sequence, so running decodes do not get
   * preempted right after an admission. -1: 1% of the pool (the default); 0: none. */
  int32_t watermark_blocks;
  /* Logits rows per step for sequences that score their prompt (seq params prompt_logits):
   * such a sequence's prefill chunks are cut to what is left of them. 0: none may ask. */
  int32_t max_prompt_logits;
} weir_sched_config;

typedef enum weir_sched_state {
  WEIR_SEQ_WAITING = 0,
  WEIR_SEQ_RUNNING = 1,
  WEIR_SEQ_FINISHED = 2,
  WEIR_SEQ_PAUSED = 3,     /* out of both queues, blocks kept (weir_sched_pause) */
} weir_sched_state;

/* One request's sequence. The engine READS these fields; it writes only `user`. */
typedef struct weir_sched_seq {
  uint64_t id;             /* the engine's request id (unique among live sequences) */
  void *user;              /* the engine's pointer (its request), never touched here */
  int32_t *tokens;         /* prompt then output (then drafts): [num_tokens] */
  int32_t num_tokens;
  int32_t num_prompt;
  int32_t num_drafts;      /* trailing tokens that are unverified drafts (0 normally) */
  int32_t num_computed;    /* leading tokens whose KV is in cache (or being computed by the
                              step just planned) */
  int32_t num_cached_prompt; /* prompt tokens the first admission found in the prefix cache */
  int32_t priority;
  uint64_t arrival;        /* admission order key: a counter assigned by weir_sched_add */
  weir_sched_state state;
  int32_t num_preemptions;
  int prompt_logits;       /* scoring its prompt: every prompt row gets logits, no prefix-cache
                              lookup, until the first commit (which clears it) */
  int status;              /* WEIR_OK, or why a step failed it (WEIR_E_NOSPACE) */
  weir_kv_seq *kv;         /* its KV sequence while it holds blocks, else NULL */
  /* Private to the scheduler. */
  int32_t cap_tokens;
  int32_t sched_index;     /* index into the current step's items, -1 when not scheduled */
  int ever_admitted;
  int resume_pending;      /* paused, resumed, waiting for a place in the running batch */
} weir_sched_seq;

typedef struct weir_sched_seq_params {
  uint64_t id;
  const int32_t *prompt;   /* copied; num_prompt >= 1 */
  int32_t num_prompt;
  int32_t priority;        /* used by the priority policy */
  int32_t max_tokens;      /* expected output tokens, only to size the token array (>= 0) */
  /* Prompt logprobs: logits for every prompt row (see weir_sched_item.num_prompt_logits).
   * Needs max_prompt_logits > 0 (else WEIR_E_INVAL). */
  int prompt_logits;
  void *user;
} weir_sched_seq_params;

/* One scheduled sequence of a step: new tokens are the sequence's positions
 * [start, start + num_new_tokens), whose ids are seq->tokens[start ...]. */
typedef struct weir_sched_item {
  weir_sched_seq *seq;
  int32_t start;           /* == seq->num_computed before this step */
  int32_t num_new_tokens;  /* >= 1 */
  int32_t num_drafts;      /* trailing new tokens that are drafts to verify */
  /* Rows needing logits: 0 when the chunk stops short of the sequence's known tokens
   * (a prefill chunk), else 1 + num_drafts: the LAST num_logits rows of this item. For a
   * sequence scoring its prompt, every row of a prompt chunk (num_logits == num_new_tokens). */
  int32_t num_logits;
  /* The first num_prompt_logits of those rows score prompt tokens: row j holds the
   * distribution of seq->tokens[start + j + 1], a prompt token. The rows after them (none, or
   * the final chunk's last) sample as usual. */
  int32_t num_prompt_logits;
} weir_sched_item;

/* A step's plan. Memory owned by the scheduler, valid until the next weir_sched_step,
 * weir_sched_undo_step or weir_sched_destroy. */
typedef struct weir_sched_out {
  weir_sched_item *items;  /* [num_items], in batch order */
  int32_t num_items;
  int32_t num_tokens;      /* sum of num_new_tokens */
  int32_t num_logits;      /* sum of num_logits */
  int32_t num_prefill_tokens;  /* tokens of items that are prefill chunks */
  int32_t max_query_len;
  int32_t max_context_len; /* max of start + num_new_tokens */
  int32_t max_blocks_per_seq; /* longest block table among the items */
  const weir_kv_copy *copies; /* [num_copies] copy-on-write orders: run them first */
  int32_t num_copies;
  weir_sched_seq **preempted; /* [num_preempted] sequences preempted by this step (now
                                 waiting; informational) */
  int32_t num_preempted;
  weir_sched_seq **failed; /* [num_failed] sequences this step finished with status
                              WEIR_E_NOSPACE: too long for the whole pool. The engine ends
                              them with an error and frees them. */
  int32_t num_failed;
} weir_sched_out;

/* Caller-provided host arrays for one step (sizes from weir_sched_out). Any pointer may be
 * NULL to skip that array. */
typedef struct weir_sched_batch_arrays {
  int32_t *input_ids;       /* [num_tokens]: token ids of the new tokens */
  int32_t *positions;       /* [num_tokens] */
  int32_t *slot_mapping;    /* [num_tokens] */
  int32_t *query_start_loc; /* [num_items + 1] */
  int32_t *context_lens;    /* [num_items]: start + num_new_tokens */
  int32_t *block_tables;    /* [num_items][block_table_stride], rows padded with 0 */
  int32_t block_table_stride; /* >= out->max_blocks_per_seq when block_tables is set */
  int32_t *logits_rows;     /* [num_logits]: flattened row index of each row needing
                               logits, in item order */
} weir_sched_batch_arrays;

typedef struct weir_sched_stats {
  int32_t num_running;
  int32_t num_waiting;
  uint64_t num_preemptions;
  uint64_t num_steps;
  uint64_t num_failed;
  int32_t num_paused;
} weir_sched_stats;

/* Creates a scheduler over kv (borrowed: it must outlive the scheduler). WEIR_E_INVAL on a
 * bad config, WEIR_E_NOMEM. */
int weir_sched_create(const weir_sched_config *cfg, weir_kv_cache *kv, weir_sched **out);
/* Frees the scheduler and every sequence it still holds (finishing them first). Sequences
 * already finished but not yet freed by weir_sched_seq_free are the caller's to free. */
void weir_sched_destroy(weir_sched *s);

/* Queues a new sequence (WAITING). WEIR_E_INVAL for a bad parameter, WEIR_E_NOSPACE when
 * num_prompt + 1 tokens would not fit even the whole empty pool, WEIR_E_EXISTS when id is
 * live, WEIR_E_NOMEM. The bounded queue is the engine's (it counts its backlog at submit). */
int weir_sched_add(weir_sched *s, const weir_sched_seq_params *p, weir_sched_seq **out);

int32_t weir_sched_num_waiting(const weir_sched *s);
int32_t weir_sched_num_running(const weir_sched *s);
/* Live (waiting, running or paused) sequence by id, or NULL. */
weir_sched_seq *weir_sched_find(const weir_sched *s, uint64_t id);
void weir_sched_stats_get(const weir_sched *s, weir_sched_stats *out);

/* Parallel sampling (n > 1): creates a RUNNING copy of parent, which must be running, have
 * no drafts and have every known token computed (typically right after its prompt's last
 * chunk, before the first commit). The child shares the parent's KV blocks copy-on-write
 * (the first write into the shared last block yields a copy order in a later step), has the
 * parent's tokens and priority, and its own id and user. Forks may take the running count
 * past max_num_seqs; admissions wait until it drops. WEIR_E_INVAL, WEIR_E_EXISTS (id live),
 * WEIR_E_NOMEM. */
int weir_sched_fork(weir_sched *s, weir_sched_seq *parent, uint64_t id, void *user,
                    weir_sched_seq **out);

/* Speculative decoding: appends n >= 1 draft tokens to a RUNNING sequence in decode (all its
 * tokens computed except the last sampled one, and no drafts yet). The next step schedules
 * them with it (fewer when the budget or blocks are short: the unscheduled drafts are
 * dropped) and asks for logits on every row. WEIR_E_INVAL otherwise, WEIR_E_NOMEM. */
int weir_sched_add_drafts(weir_sched *s, weir_sched_seq *seq, const int32_t *drafts,
                          int32_t n);

/* Plans one step into *out (see the policy above). Also registers in the prefix cache the
 * full blocks the previous step computed, and releases the previous step's copy sources.
 * An empty plan (num_items == 0) means there is nothing to run. WEIR_E_NOMEM (host memory)
 * leaves the queues consistent. */
int weir_sched_step(weir_sched *s, weir_sched_out *out);

/* Fills the host arrays for the planned step. WEIR_E_INVAL when block_table_stride is too
 * small. */
int weir_sched_fill_batch(const weir_sched *s, const weir_sched_out *out,
                          const weir_sched_batch_arrays *a);

/* After the forward of a step that gave seq logits: keeps the first num_accepted of its
 * scheduled drafts (dropping the rest from its tokens and its KV), clears its drafts, then
 * appends the n >= 0 sampled tokens (usually 1; none when the engine is about to finish it).
 * Also registers its newly computed full blocks in the prefix cache.
 * WEIR_E_INVAL when seq is not running, when not all its known tokens are computed (it got no
 * logits this step, or the step was undone) or num_accepted is out of range; WEIR_E_NOMEM
 * (then nothing changed). */
int weir_sched_commit(weir_sched *s, weir_sched_seq *seq, int32_t num_accepted,
                      const int32_t *sampled, int32_t n);

/* General rollback: cuts seq's tokens to num_tokens (>= num_prompt), and num_computed and its
 * KV length with them; drafts past the cut are dropped. WEIR_E_INVAL when out of range. */
int weir_sched_truncate(weir_sched *s, weir_sched_seq *seq, int32_t num_tokens);

/* Flow control, between steps only (never between weir_sched_step and its commits). Pause:
 * a waiting or running sequence leaves the queues, keeping its blocks and tokens (drafts are
 * dropped); pausing a paused sequence does nothing. Resume: see the policy above; resuming
 * a sequence that is not paused does nothing. WEIR_E_INVAL for a finished sequence,
 * WEIR_E_NOMEM (then nothing changed). */
int weir_sched_pause(weir_sched *s, weir_sched_seq *seq);
int weir_sched_resume(weir_sched *s, weir_sched_seq *seq);

/* Sequences of a plan must stay live from weir_sched_step until that step's forward has run
 * (take aborts before the step or after the forward): finishing one frees its blocks.
 *
 * Ends seq (waiting, running or paused): registers its computed full blocks in the prefix cache,
 * frees its KV blocks now, removes it from the queues and marks it FINISHED. The memory stays
 * valid until weir_sched_seq_free. Finishing a finished sequence does nothing. */
void weir_sched_finish(weir_sched *s, weir_sched_seq *seq);

/* Finishes the live sequence with this id. *out (may be NULL) receives it (still to be freed
 * by weir_sched_seq_free), or NULL. WEIR_E_NOTFOUND when no live sequence has the id. */
int weir_sched_abort(weir_sched *s, uint64_t id, weir_sched_seq **out);

/* Frees a sequence's memory, finishing it first when it is still live. NULL is ignored. */
void weir_sched_seq_free(weir_sched *s, weir_sched_seq *seq);

/* After a FAILED forward: rolls every item of out back (num_computed and KV length to the
 * item's start, drafts dropped) so nothing unwritten is ever registered in the prefix cache.
 * The sequences stay running; the engine normally finishes them with an error, and out stays
 * readable for that (out->items still names them) until the next weir_sched_step. Call
 * before any weir_sched_commit of that step. */
void weir_sched_undo_step(weir_sched *s, weir_sched_out *out);

#endif
