// kvscope generate: run prefill + decode for one prompt or a batch, print the result, optionally dump
// logits and export every step.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "base/clock.h"
#include "base/errors.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "common.h"
#include "kv.h"
#include "io/json_write.h"
#include "io/npy.h"
#include "io/output_path.h"
#include "report/export.h"
#include "run/session_group.h"

namespace kvscope {
namespace {

// The bytes the tokens stand for (the real text: a newline is a newline); empty without a tokenizer.
// One --edit S:KIND:POS[:LAYER[:HEAD]] (patch: S:patch:POS:LAYER|all:TEXT), checked before anything runs.
struct PlannedEdit {
    std::string spec;                    // as given, for messages
    int64_t after_step = 0;
    CacheEdit edit;                      // rows come later (a patch's side run)
    std::string patch_text;
};

std::vector<PlannedEdit> planned_edits(const std::vector<std::string>& specs) {
    std::vector<PlannedEdit> out;
    for (const std::string& spec : specs) {
        const std::string usage =
            "--edit wants S:evict|restore:POS[:LAYER|all[:HEAD|all]] or S:patch:POS:LAYER|all:TEXT, got '" + spec + "'";
        std::vector<std::string> parts;  // split at every colon
        for (size_t at = 0;;) {
            const size_t colon = spec.find(':', at);
            parts.push_back(spec.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
            if (colon == std::string::npos) break;
            at = colon + 1;
        }
        auto number = [&](const std::string& s, bool all_ok) {
            if (all_ok && s == "all") return int64_t(-1);
            int64_t v = 0;
            size_t used = 0;
            try {
                v = std::stoll(s, &used);
            } catch (...) {
                used = 0;
            }
            if (used == 0 || used != s.size() || v < 0) throw UsageError(usage);
            return v;
        };
        if (parts.size() < 3) throw UsageError(usage);
        PlannedEdit e;
        e.spec = spec;
        e.after_step = number(parts[0], false);
        if (parts[1] == "evict") e.edit.kind = CacheEditKind::Evict;
        else if (parts[1] == "restore") e.edit.kind = CacheEditKind::Restore;
        else if (parts[1] == "patch") e.edit.kind = CacheEditKind::Patch;
        else throw UsageError(usage);
        e.edit.position = number(parts[2], false);
        if (e.edit.kind == CacheEditKind::Patch) {
            if (parts.size() < 5) throw UsageError(usage);
            e.edit.layer = number(parts[3], true);
            for (size_t i = 4; i < parts.size(); ++i) e.patch_text += (i > 4 ? ":" : "") + parts[i];  // TEXT keeps its colons
            if (e.patch_text.empty()) throw UsageError(usage);
        } else {
            if (parts.size() > 5) throw UsageError(usage);
            if (parts.size() > 3) e.edit.layer = number(parts[3], true);
            if (parts.size() > 4) e.edit.kv_head = number(parts[4], true);
        }
        out.push_back(std::move(e));
    }
    return out;
}

std::string bytes_of(const Model& model, const std::vector<TokenId>& ids) {
    return model.tokenizer() ? model.tokenizer()->decode(ids) : "";
}

// Per prompt: what the policy left in the cache after the last step.
JsonOut eviction_json(const std::vector<const Session*>& all, const EvictionSpec& spec) {
    JsonOut per_prompt = JsonOut::array();
    for (const Session* s : all) {
        const KvCacheView v = s->cache().view();
        int64_t evicted = 0;
        for (size_t i = 0; i < s->trace().size(); ++i) evicted += int64_t(s->trace()[i].eviction.events.size());
        per_prompt.push_back({{"positions", v.next_position},
                              {"kept", v.kept.empty() ? JsonOut() : JsonOut(v.kept)},
                              {"kept_rows", v.kept.empty() ? JsonOut() : JsonOut(std::accumulate(v.kept.begin(), v.kept.end(), int64_t(0)))},
                              {"evicted_now", v.n_evicted},
                              {"evictions", evicted},
                              {"bytes_kept", v.bytes_kept}});
    }
    return {{"policy", eviction_policy_name(spec.kind)},
            {"budget", spec.budget},
            {"shape", {{"layers", all[0]->model().config().n_layer}, {"kv_heads", all[0]->model().config().kv_heads()}}},
            {"sequences", per_prompt}};
}

void print_eviction_report(const std::vector<const Session*>& all, const EvictionSpec& spec) {
    for (const Session* s : all) {
        const KvCacheView v = s->cache().view();
        const int64_t rows = std::accumulate(v.kept.begin(), v.kept.end(), int64_t(0));
        const int64_t n = int64_t(v.kept.size());
        if (n == 0) {  // nothing evicted
            std::fprintf(stderr, "eviction %s, budget %lld: nothing evicted, all %lld positions kept\n",
                         eviction_policy_name(spec.kind), (long long)spec.budget, (long long)v.next_position);
            continue;
        }
        std::fprintf(stderr, "eviction %s, budget %lld: %.1f of %lld positions kept per layer and K/V head on average "
                             "(%lld rows), %lld bytes of K/V kept\n",
                     eviction_policy_name(spec.kind), (long long)spec.budget, double(rows) / double(n),
                     (long long)v.next_position, (long long)rows, (long long)v.bytes_kept);
    }
}

}  // namespace

int cli_generate(int argc, char** argv) {
    CliArgs args("generate", "Prefill a prompt, then decode tokens one at a time with (or without) the KV cache.");
    add_model_option(args);
    args.option("--prompt", "TEXT", "prompt text (needs the model's tokenizer files)", true)
        .option("--prompt-ids", "1,2,3", "prompt as token ids", true)
        .option("--source", "TEXT", "encoder-decoder models: the encoder's input text")
        .option("--source-ids", "1,2,3", "encoder-decoder models: the encoder's input as token ids")
        .option("--max-new-tokens", "N", "tokens to generate (default " + std::to_string(SessionOptions{}.max_new_tokens) + ")")
        .flag("--no-cache", "recompute every position at every step (the baseline)")
        .option("--window", "W", "sliding window: each query sees the last W positions (default: off)")
        .option("--prefill-chunk", "C", "prefill the prompt C tokens per step (default: all at once)")
        .option("--sinks", "S", "with --window: the first S positions stay visible too (attention sinks)")
        .option("--sink-positions", "text|cache", "rotary models, with --sinks: where the sinks count as sitting — at "
                                                  "their own positions (text, default) or right before the window, "
                                                  "positions numbered inside the cache as StreamingLLM does (cache)")
        .option("--block-size", "B", "paged KV cache of B-position blocks in one pool for all prompts")
        .flag("--share-prefix", "prompts starting alike map those positions to the same blocks (paged, B = 16 unless given)")
        .option("--system", "TEXT", "text put before every prompt (a shared system prompt)")
        .option("--prompt-cache", "FILE", "load the prompt's leading K/V rows from FILE; (re)write it after the prefill "
                                          "unless it already holds the whole prompt")
        .option("--prompt-cache-ro", "FILE", "load the prompt's leading K/V rows from FILE, never write it");
    add_sampling_options(args, "random seed for sampling (default 0); with several prompts, prompt i uses S + i")
        .flag("--allow-special", "treat <|endoftext|> in prompt text as the special token")
        .option("--edit", "S:KIND:POS[:LAYER[:HEAD]]", "after step S (0-based), edit the cache: KIND evict or restore "
                                                       "position POS in every layer and K/V head, or the one given; "
                                                       "S:patch:POS:LAYER|all:TEXT writes the K/V a run of TEXT "
                                                       "computed at POS; repeatable, one prompt", true)
        .option("--dump-logits", "OUT.npy", "write float32 logits [N, V] ([B, N, V] for several prompts)")
        .flag("--json", "print one JSON object instead of text")
        .option("--trace", "DIR", "export every step: heatmaps (PNG or SVG), arrays (.npy), meta (JSON); DIR is "
                                  "created, its parent must exist");
    add_plot_options(args, true);
    add_kv_quant_options(args);
    add_eviction_options(args);
    add_threads_option(args);
    if (!args.parse(argc, argv)) return 0;

    SessionOptions options;
    options.max_new_tokens = args.integer("--max-new-tokens", options.max_new_tokens, 1, 1 << 24);
    options.use_cache = !args.has("--no-cache");
    options.window = args.integer("--window", 0, 1, 1 << 24);
    options.prefill_chunk = args.integer("--prefill-chunk", 0, 1, 1 << 24);
    options.sinks = args.integer("--sinks", 0, 0, 1 << 24);
    if (const auto sp = args.text("--sink-positions")) {
        if (*sp == "cache") options.sink_positions = SinkPositions::Cache;
        else if (*sp != "text") throw UsageError("--sink-positions must be text or cache, got '" + *sp + "'");
        if (options.sinks == 0) throw UsageError("--sink-positions places attention sinks: give --window and --sinks too");
    }
    options.share_prefix = args.has("--share-prefix");
    options.block_size = args.integer("--block-size", options.share_prefix ? 16 : 0, 1, 1 << 20);
    if (args.has("--prompt-cache") && args.has("--prompt-cache-ro"))
        throw UsageError("give --prompt-cache or --prompt-cache-ro, not both");
    const std::optional<std::string> prompt_cache =
        args.has("--prompt-cache-ro") ? args.text("--prompt-cache-ro") : args.text("--prompt-cache");
    const char* pc_flag = args.has("--prompt-cache-ro") ? "--prompt-cache-ro" : "--prompt-cache";
    if (prompt_cache && options.window > 0)
        throw UsageError(std::string(pc_flag) + " keeps rows computed with every position visible: leave out --window");
    if (prompt_cache && !options.use_cache)
        throw UsageError(std::string(pc_flag) + " loads and saves the KV cache's rows: leave out --no-cache");
    options.kv_quant = kv_quant_from(args);
    options.eviction = eviction_from(args);
    if (prompt_cache && options.eviction.active())
        throw UsageError(std::string(pc_flag) + " adopts rows no query has scored: leave out --evict");
    if (prompt_cache && options.kv_quant.quantized())
        throw UsageError(std::string(pc_flag) + " keeps float32 rows: leave out --kv-quant");
    options.record = args.has("--trace");
    const std::vector<PlannedEdit> edits = planned_edits(args.all("--edit"));
    options.sampling = sampling_from(args);
    validate(options);
    // Every output is checked before any work, each against the others (core/io/output_path.h); a batch's
    // trace is one seqN folder per prompt.
    OutputSet outputs;
    if (auto dir = args.text("--trace")) outputs.add_folder("--trace", *dir);
    if (auto path = args.text("--dump-logits")) outputs.add_file("--dump-logits", *path, OutputKind::Npy);
    if ((args.has("--format") || args.has("--scale")) && !args.has("--trace"))
        throw UsageError(std::string(args.has("--format") ? "--format" : "--scale") + " sets how --trace draws its heatmaps: give --trace DIR");
    const PlotOutput plots = plot_output_from(args);
    // A prompt cache file that will be written must be a prompt cache or new; its contents are checked when read.
    if (prompt_cache && !args.has("--prompt-cache-ro")) outputs.add_file(pc_flag, *prompt_cache, OutputKind::PromptCache);
    apply_threads(args);

    auto model = load_model_from(args);
    const bool encoder_decoder = model->config().encoder_decoder;
    std::vector<TokenId> source;
    if (args.has("--source") || args.has("--source-ids")) {
        if (!encoder_decoder) throw UsageError("--source is for encoder-decoder models; " + model->dir() + " is decoder-only");
        if (args.has("--source") && args.has("--source-ids")) throw UsageError("give --source or --source-ids, not both");
        source = args.has("--source") ? encode_text(*model, *args.text("--source"), "--source", args.has("--allow-special"))
                                      : ids_from(*args.text("--source-ids"), "--source-ids", *model);
    } else if (encoder_decoder) {
        throw UsageError(model->dir() + " is an encoder-decoder model: give its input with --source TEXT or --source-ids 1,2,3");
    }
    // An encoder-decoder's decoder prompt may be left out: the decoder then starts from its start token.
    const bool any_prompt = args.has("--prompt") || args.has("--prompt-ids");
    auto prompts = encoder_decoder && !any_prompt ? std::vector<std::vector<TokenId>>{{}}
                                                  : prompts_from(args, *model, args.has("--allow-special"),
                                                                 /*starts_text=*/!args.has("--system"));
    if (auto system = args.text("--system")) {
        const std::vector<TokenId> prefix = encode_text(*model, *system, "--system", args.has("--allow-special"));
        for (auto& p : prompts) p.insert(p.begin(), prefix.begin(), prefix.end());
    }
    if (prompt_cache && prompts.size() > 1) throw UsageError(std::string(pc_flag) + " works with one prompt");
    GroupOptions group_options;
    group_options.n_seq = int64_t(prompts.size());
    group_options.prompt_cache = prompt_cache.value_or("");
    group_options.prompt_cache_read_only = args.has("--prompt-cache-ro");
    SessionGroup group(model, options, group_options);
    group.set_prompts(std::move(prompts), source);
    const std::vector<const Session*> all = group.sessions();

    const double t0 = seconds_now();
    double t_first = 0;
    Progress progress("generate", options.max_new_tokens);
    int64_t n_steps = 0;
    std::vector<CacheEditRecord> edits_done;  // every --edit, in order, as applied
    auto apply_edits = [&] {
        for (const PlannedEdit& e : edits) {
            if (e.after_step != n_steps - 1) continue;
            CacheEdit edit = e.edit;
            try {
                if (edit.kind == CacheEditKind::Patch) {
                    edit.rows = kv_rows_of_run(model, all[0]->options(),
                                               encode_text(*model, e.patch_text, "--edit", args.has("--allow-special")),
                                               edit.position);
                    edit.source = e.patch_text;
                }
                edits_done.push_back(group.apply_edit(std::move(edit)));
            } catch (const UsageError& x) {
                throw UsageError("--edit " + e.spec + ": " + x.what());
            }
        }
    };
    while (group.next() != Session::Next::Done) {
        const Session& s0 = *all[0];
        const int64_t left = int64_t(s0.prompt().size()) - s0.n_prompt_done();
        progress.update(int64_t(s0.generated().size()),
                        group.next() == Session::Next::Prefill
                            ? "prefill " + std::to_string(std::min(left, options.prefill_chunk > 0 ? options.prefill_chunk : left)) +
                                  " of " + std::to_string(left) + " prompt tokens left"
                            : "decode");
        group.step();
        ++n_steps;
        if (t_first == 0 && !all[0]->generated().empty()) t_first = seconds_now();
        apply_edits();
    }
    for (const PlannedEdit& e : edits)
        if (e.after_step >= n_steps)
            throw UsageError("--edit " + e.spec + ": the run has " + std::to_string(n_steps) + " steps (0.." +
                             std::to_string(n_steps - 1) + ")");
    progress.update(int64_t(all[0]->generated().size()));
    progress.finish();
    const double t1 = seconds_now();

    const int64_t V = model->config().n_vocab, N = options.max_new_tokens;
    if (auto path = args.text("--dump-logits")) {
        std::vector<float> logits;  // (B, N, V)
        logits.reserve(size_t(int64_t(all.size()) * N * V));
        for (const Session* s : all)
            for (size_t i = 0; i < s->trace().size(); ++i)
                if (s->trace()[i].prediction.chosen) logits.insert(logits.end(), s->trace()[i].prediction.logits.begin(), s->trace()[i].prediction.logits.end());
        std::vector<int64_t> shape = {N, V};
        if (all.size() > 1) shape.insert(shape.begin(), int64_t(all.size()));
        write_npy_f32(*path, shape, logits.data());
    }
    if (auto dir = args.text("--trace")) {
        if (all.size() > 1) make_output_folder("--trace", *dir);
        for (size_t b = 0; b < all.size(); ++b) {
            const std::string sub = all.size() > 1 ? *dir + "/seq" + std::to_string(b) : *dir;
            Progress export_progress("export", int64_t(all[b]->trace().size()));
            ExportScope scope;
            scope.logit_lens = model.get();
            scope.plots = plots;
            const int64_t stale = export_trace(all[b]->trace(), model->tokenizer(), sub, scope,
                                               [&](size_t i) { export_progress.update(int64_t(i) + 1); });
            export_progress.finish();
            std::fprintf(stderr, "trace: %s and trace.json in %s%s\n",
                         count_of(int64_t(all[b]->trace().size()), "step folder", "step folders").c_str(), sub.c_str(),
                         stale ? ("; removed " + count_of(stale, "step folder", "step folders") + " of an earlier, longer trace").c_str()
                               : "");
        }
    }

    const double prefill_s = t_first > 0 ? t_first - t0 : 0, decode_s = t1 - (t_first > 0 ? t_first : t0);
    const double decode_tps = N > 1 && decode_s > 0 ? double(int64_t(all.size()) * (N - 1)) / decode_s : 0;
    if (args.has("--json")) {
        // One prompt: the fields are that prompt's; several: arrays, one element per prompt.
        // "text" is the generated text (put_text: "text_hex" too when its bytes are not valid UTF-8).
        // "prompt_text" is the prompt as the model read it (with --system in front). Both are null without a
        // tokenizer: "" would say the text was empty.
        JsonOut prompt_ids = JsonOut::array(), generated_ids = JsonOut::array();
        std::vector<std::string> texts, prompt_texts;
        for (const Session* s : all) {
            prompt_ids.push_back(s->prompt());
            generated_ids.push_back(s->generated());
            texts.push_back(bytes_of(*model, s->generated()));
            prompt_texts.push_back(bytes_of(*model, s->prompt()));
        }
        const bool batch = all.size() > 1;
        JsonOut out;
        out["prompt_ids"] = batch ? prompt_ids : prompt_ids[0];
        if (!model->tokenizer()) out["prompt_text"] = nullptr;
        else if (batch) put_texts(out, "prompt_text", prompt_texts);
        else put_text(out, "prompt_text", prompt_texts[0]);
        out["generated_ids"] = batch ? generated_ids : generated_ids[0];
        if (!model->tokenizer()) out["text"] = nullptr;
        else if (batch) put_texts(out, "text", texts);
        else put_text(out, "text", texts[0]);
        if (encoder_decoder) out["source_ids"] = source;
        out["cache"] = options.use_cache;
        out["window"] = options.window;
        // Every setting that shaped the run, defaults included, so the JSON alone reproduces it.
        auto or_null = [](const std::optional<std::string>& v) { return v ? JsonOut(*v) : JsonOut(); };
        out["settings"] = {
            {"model", model->dir()},
            {"dtype", model->weights().bf16 ? "bf16" : "f32"},
            {"max_new_tokens", options.max_new_tokens},
            {"cache", options.use_cache},
            {"window", options.window},
            {"sinks", options.sinks},
            {"sink_positions", sink_positions_name(options.sink_positions)},
            {"prefill_chunk", options.prefill_chunk},
            {"block_size", options.block_size},
            {"kv_quant", to_string(options.kv_quant.format)},
            {"kv_group", options.kv_quant.group},
            {"kv_residual", options.kv_quant.residual},
            {"share_prefix", options.share_prefix},
            {"evict", eviction_policy_name(options.eviction.kind)},
            {"kv_budget", options.eviction.budget},
            {"evict_sinks", options.eviction.sinks},
            {"evict_recent", options.eviction.recent_or_default()},
            {"evict_obs", options.eviction.obs},
            {"evict_pool", options.eviction.pool},
            {"evict_pool_kind", pool_kind_name(options.eviction.pool_kind)},
            {"system", or_null(args.text("--system"))},
            {"prompt_cache", or_null(prompt_cache)},
            {"prompt_cache_read_only", args.has("--prompt-cache-ro")},
            {"allow_special", args.has("--allow-special")},
            {"sampling", {{"mode", options.sampling.temperature > 0 ? "sample" : "greedy"},
                          {"temperature", options.sampling.temperature},
                          {"top_k", options.sampling.top_k},
                          {"top_p", options.sampling.top_p},
                          {"seed", options.sampling.seed}}},
            {"threads", ThreadPool::global().n_threads()},
            {"trace", or_null(args.text("--trace"))},
            {"dump_logits", or_null(args.text("--dump-logits"))}};
        out["timing"] = {{"total_s", t1 - t0}, {"prefill_s", prefill_s}, {"decode_s", decode_s},
                         {"decode_tokens_per_s", decode_tps}};
        out["kv"] = kv_report_json(group);
        out["eviction"] = eviction_json(all, options.eviction);
        if (!edits.empty()) {  // each --edit as applied, with the step that ran after it (null: none did)
            JsonOut list = edits_json(model->tokenizer(), edits_done);
            for (size_t i = 0; i < edits.size(); ++i) {
                const int64_t next = edits[i].after_step + 1;
                list[i]["after_step"] = edits[i].after_step;
                list[i]["before_step"] = next < n_steps ? JsonOut(next) : JsonOut();
            }
            out["edits"] = list;
        }
        std::printf("%s\n", json_text(out).c_str());
    } else {
        for (const Session* s : all) {
            if (model->tokenizer()) {  // the real text, byte for byte (as detokenize writes it)
                const std::string text = bytes_of(*model, s->prompt()) + bytes_of(*model, s->generated()) + "\n";
                std::fwrite(text.data(), 1, text.size(), stdout);
            } else
                std::printf("%s\n", json_text(JsonOut(s->generated())).c_str());
        }
        std::fprintf(stderr, "%lld tokens in %.3f s (prefill %.3f s, decode %.1f tokens/s, cache %s)\n",
                     (long long)(int64_t(all.size()) * N), t1 - t0, prefill_s, decode_tps,
                     options.use_cache ? "on" : "off");
        print_kv_report(group);
        if (options.eviction.active()) print_eviction_report(all, options.eviction);
    }
    return 0;
}

}  // namespace kvscope
