// llamacpp-peer: llama.cpp's prompt and decode rates on a GGUF file, measured through its C API
// against the prebuilt CPU libraries of the npm package the peer benchmark installs
// (../shared/bench/peer_llamacpp.sh), without Node.js: built by build_llamacpp_peer.sh into a
// folder that holds the binary and those libraries, so it runs wherever that folder is copied.
// It measures what ../shared/bench/peer_llamacpp.mjs measures:
//   pp<N>: one llama_decode of an N-token prompt (one batch) from an empty cache;
//   tg<M>: M greedy batch-1 decode steps (decode one token, argmax of its logits), the clock
//          started after the first generated token.
// Each --reps times after one untimed run; the median is reported. Unlike the Node.js harness it
// does not retry repetitions during which other processes were busy: run it on a quiet machine.
// With --sequences=S (> 1) it measures batched decode instead, as
// ../shared/bench/peer_llamacpp_parallel.mjs does: S sequences in one context, each with its own
// pseudo-random --pp-token prompt (prefilled together), then --tg greedy steps that decode one
// token of every sequence in one batch; the rate counts the tokens after every sequence's first
// one, over the time from that first token on.
//
//   llamacpp-peer --model=M.gguf [--threads=2] [--pp=512] [--tg=128] [--reps=3] [--sequences=S]
// Last line (stdout): llamacpp pp<N>_tok_s=X tg<M>_tok_s=Y model=PATH threads=T, or with S > 1
// llamacpp_parallel sequences=S decode_tok_s=X per_seq_tok_s=Y
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"

namespace {

struct Options {
  std::string model;
  int threads = 2;
  int pp = 512;
  int tg = 128;
  int reps = 3;
  int sequences = 1;
};

bool Flag(const char* arg, const char* name, std::string* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *value = arg + n + 1;
  return true;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (Flag(argv[i], "--model", &v)) {
      o.model = v;
    } else if (Flag(argv[i], "--threads", &v)) {
      o.threads = std::atoi(v.c_str());
    } else if (Flag(argv[i], "--pp", &v)) {
      o.pp = std::atoi(v.c_str());
    } else if (Flag(argv[i], "--tg", &v)) {
      o.tg = std::atoi(v.c_str());
    } else if (Flag(argv[i], "--reps", &v)) {
      o.reps = std::atoi(v.c_str());
    } else if (Flag(argv[i], "--sequences", &v)) {
      o.sequences = std::atoi(v.c_str());
    } else {
      std::fprintf(stderr, "llamacpp-peer: unknown argument %s\n", argv[i]);
      std::exit(2);
    }
  }
  if (o.model.empty() || o.threads < 1 || o.pp < 1 || o.tg < 2 || o.reps < 1 ||
      o.sequences < 1) {
    std::fprintf(stderr,
                 "usage: llamacpp-peer --model=M.gguf [--threads=2] [--pp=512] [--tg=128] "
                 "[--reps=3] [--sequences=1] (counts >= 1, --tg >= 2)\n");
    std::exit(2);
  }
  return o;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 != 0 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Prompt of `len` tokens: bos, then pseudo-random ids below bos (the regular vocabulary), drawn
// from `state` as the Node.js harnesses draw them.
std::vector<llama_token> Prompt(llama_token bos, int64_t regular, int len, int64_t& state) {
  std::vector<llama_token> prompt = {bos};
  while (static_cast<int>(prompt.size()) < len) {
    state = (state * 1103515245 + 12345) % 2147483648;
    prompt.push_back(static_cast<llama_token>(state % regular));
  }
  return prompt;
}

void Decode(llama_context* ctx, std::vector<llama_token>& tokens) {
  if (llama_decode(ctx, llama_batch_get_one(tokens.data(), static_cast<int32_t>(tokens.size()))) !=
      0) {
    std::fprintf(stderr, "llamacpp-peer: llama_decode of %zu tokens failed\n", tokens.size());
    std::exit(1);
  }
}

// The greedy token of output row `row` of the last decode (-1: its last row).
llama_token Argmax(llama_context* ctx, int32_t vocab, int32_t row = -1) {
  const float* logits = llama_get_logits_ith(ctx, row);
  return static_cast<llama_token>(std::max_element(logits, logits + vocab) - logits);
}

// Batched decode of o.sequences sequences; returns the aggregate rate after the first token.
double Parallel(const Options& o, llama_model* model, llama_token bos, int64_t regular,
                int32_t n_vocab) {
  const int s_count = o.sequences;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(s_count * (o.pp + o.tg + 16));
  cp.n_batch = static_cast<uint32_t>(std::max(s_count * o.pp, 512));
  cp.n_ubatch = 512;
  cp.n_seq_max = static_cast<uint32_t>(s_count);
  cp.n_threads = cp.n_threads_batch = o.threads;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
  cp.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "llamacpp-peer: cannot create a context of %d sequences\n", s_count);
    std::exit(1);
  }
  llama_batch batch = llama_batch_init(s_count * o.pp, 0, 1);
  auto add = [&](llama_token token, llama_pos pos, llama_seq_id seq, bool output) {
    const int32_t i = batch.n_tokens++;
    batch.token[i] = token;
    batch.pos[i] = pos;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = seq;
    batch.logits[i] = output;
  };
  auto decode = [&] {
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llamacpp-peer: llama_decode of %d tokens failed\n", batch.n_tokens);
      std::exit(1);
    }
  };
  int64_t state = 4242;
  std::vector<int32_t> out_row(s_count);
  for (int s = 0; s < s_count; ++s) {
    const std::vector<llama_token> prompt = Prompt(bos, regular, o.pp, state);
    for (int p = 0; p < o.pp; ++p) {
      if (p == o.pp - 1) out_row[s] = batch.n_tokens;
      add(prompt[p], p, s, p == o.pp - 1);
    }
  }
  decode();
  std::vector<llama_token> next(s_count);
  for (int s = 0; s < s_count; ++s) next[s] = Argmax(ctx, n_vocab, out_row[s]);
  const double t0 = Now();
  for (int step = 1; step < o.tg; ++step) {
    batch.n_tokens = 0;
    for (int s = 0; s < s_count; ++s) add(next[s], o.pp + step - 1, s, true);
    decode();
    for (int s = 0; s < s_count; ++s) next[s] = Argmax(ctx, n_vocab, s);
  }
  const double rate = static_cast<double>(s_count) * (o.tg - 1) / (Now() - t0);
  llama_batch_free(batch);
  llama_free(ctx);
  return rate;
}

void Quiet(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  llama_log_set(Quiet, nullptr);
  ggml_backend_load_all();  // the CPU variant that suits this processor, from beside libggml
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(o.model.c_str(), mp);
  if (model == nullptr) {
    std::fprintf(stderr, "llamacpp-peer: cannot load %s\n", o.model.c_str());
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  const llama_token bos = llama_vocab_bos(vocab);
  const int64_t regular = bos > 0 ? std::min<int64_t>(bos, n_vocab) : n_vocab;
  if (o.sequences > 1) {
    const double rate = Parallel(o, model, bos, regular, n_vocab);
    std::printf("llamacpp_parallel sequences=%d decode_tok_s=%.2f per_seq_tok_s=%.2f\n",
                o.sequences, rate, rate / o.sequences);
    llama_model_free(model);
    llama_backend_free();
    return 0;
  }

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(std::max({o.pp, o.tg + 64, 256}) + 64);
  cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(o.pp);
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = o.threads;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
  cp.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "llamacpp-peer: cannot create a context\n");
    return 1;
  }

  int64_t state = 12345;
  const std::vector<llama_token> prompt = Prompt(bos, regular, o.pp, state);

  auto prefill = [&] {
    llama_memory_clear(llama_get_memory(ctx), true);
    std::vector<llama_token> tokens = prompt;
    const double t0 = Now();
    Decode(ctx, tokens);
    llama_synchronize(ctx);
    return o.pp / (Now() - t0);
  };
  auto generate = [&] {
    llama_memory_clear(llama_get_memory(ctx), true);
    std::vector<llama_token> next = {bos};
    Decode(ctx, next);
    next = {Argmax(ctx, n_vocab)};
    const double t0 = Now();
    for (int i = 0; i < o.tg; ++i) {
      Decode(ctx, next);
      next = {Argmax(ctx, n_vocab)};
    }
    return o.tg / (Now() - t0);
  };
  std::vector<double> pp, tg;
  prefill();
  for (int r = 0; r < o.reps; ++r) pp.push_back(prefill());
  generate();
  for (int r = 0; r < o.reps; ++r) tg.push_back(generate());

  std::fprintf(stderr, "pp%d runs:", o.pp);
  for (double v : pp) std::fprintf(stderr, " %.2f", v);
  std::fprintf(stderr, "   tg%d runs:", o.tg);
  for (double v : tg) std::fprintf(stderr, " %.2f", v);
  std::fprintf(stderr, "\n");
  std::printf("llamacpp pp%d_tok_s=%.2f tg%d_tok_s=%.2f model=%s threads=%d\n", o.pp, Median(pp),
              o.tg, Median(tg), o.model.c_str(), o.threads);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
