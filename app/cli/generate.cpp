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

// Step 1: the command line. Session options come from the table (core/run/options.h), in its sections.
CliArgs generate_args() {
    CliArgs args("generate", "Prefill a prompt, then decode tokens one at a time with (or without) the KV cache.");
    add_model_option(args);
    add_prompt_options(args)
        .option("--source", "TEXT", "encoder-decoder models: the encoder's input text")
        .option("--source-ids", "1,2,3", "encoder-decoder models: the encoder's input as token ids");
    add_options(args, kCliGenerate, OptionSection::Run);
    args.option("--system", "TEXT", "text put before every prompt (a shared system prompt)");
    add_options(args, kCliGenerate, OptionSection::PromptCache);
    add_options(args, kCliGenerate, OptionSection::Sampling)
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
    add_options(args, kCliGenerate, OptionSection::KvFormat);
    add_options(args, kCliGenerate, OptionSection::Eviction);
    add_threads_option(args);
    return args;
}

// Step 2: everything the line asks for, checked before any work: the options and their combinations,
// the edits, and every output against the others (core/io/output_path.h); a batch's trace is one seqN
// folder per prompt.
struct Setup {
    RunOptions run;
    std::vector<PlannedEdit> edits;
    PlotOutput plots;
};

Setup read_setup(const CliArgs& args) {
    if (args.has("--prompt-cache") && args.has("--prompt-cache-ro"))
        throw UsageError("give --prompt-cache or --prompt-cache-ro, not both");
    Setup setup;
    SessionOptions& options = setup.run.session;
    const std::vector<const OptionSpec*> given = read_options(args, kCliGenerate, setup.run);
    if (options.share_prefix && !args.has("--block-size")) options.block_size = 16;
    options.record = args.has("--trace");
    // Every step's record (its logits among them: V floats) is kept only for what reads the trace: --trace,
    // --dump-logits, --edit and an eviction policy's count. Otherwise one record is reused in place and decode
    // allocates nothing: with a 128 256-token vocabulary the logits are 513 KB a step, 5 GB over 10 000 tokens, and
    // copying them into fresh pages cost 4-7 % of a 1B Q4_K_M decode step (EPYC Zen 5, perf).
    options.history = options.record || args.has("--dump-logits") || args.has("--edit") || options.eviction.active();
    check_options(setup.run, given);
    setup.edits = planned_edits(args.all("--edit"));
    OutputSet outputs;
    if (auto dir = args.text("--trace")) outputs.add_folder("--trace", *dir);
    if (auto path = args.text("--dump-logits")) outputs.add_file("--dump-logits", *path, OutputKind::Npy);
    if ((args.has("--format") || args.has("--scale")) && !args.has("--trace"))
        throw UsageError(std::string(args.has("--format") ? "--format" : "--scale") + " sets how --trace draws its heatmaps: give --trace DIR");
    setup.plots = plot_output_from(args);
    // A prompt cache file that will be written must be a prompt cache or new; its contents are checked when read.
    if (args.has("--prompt-cache")) outputs.add_file("--prompt-cache", *args.text("--prompt-cache"), OutputKind::PromptCache);
    return setup;
}

// Step 3: the model, the encoder's source and the prompts (with --system in front).
struct Inputs {
    std::shared_ptr<const Model> model;
    std::vector<TokenId> source;
    std::vector<std::vector<TokenId>> prompts;
};

Inputs read_inputs(const CliArgs& args) {
    Inputs in;
    in.model = load_model_from(args);
    const Model& model = *in.model;
    const bool encoder_decoder = model.config().encoder_decoder;
    if (args.has("--source") || args.has("--source-ids")) {
        if (!encoder_decoder) throw UsageError("--source is for encoder-decoder models; " + model.dir() + " is decoder-only");
        if (args.has("--source") && args.has("--source-ids")) throw UsageError("give --source or --source-ids, not both");
        in.source = args.has("--source") ? encode_text(model, *args.text("--source"), "--source", args.has("--allow-special"))
                                         : ids_from(*args.text("--source-ids"), "--source-ids", model);
    } else if (encoder_decoder) {
        throw UsageError(model.dir() + " is an encoder-decoder model: give its input with --source TEXT or --source-ids 1,2,3");
    }
    // An encoder-decoder's decoder prompt may be left out: the decoder then starts from its start token.
    const bool any_prompt = args.has("--prompt") || args.has("--prompt-ids");
    in.prompts = encoder_decoder && !any_prompt ? std::vector<std::vector<TokenId>>{{}}
                                                : prompts_from(args, model, args.has("--allow-special"),
                                                               /*starts_text=*/!args.has("--system"));
    if (auto system = args.text("--system")) {
        const std::vector<TokenId> prefix = encode_text(model, *system, "--system", args.has("--allow-special"));
        for (auto& p : in.prompts) p.insert(p.begin(), prefix.begin(), prefix.end());
    }
    return in;
}

// Step 4: step the group to the end, applying each --edit after its step.
struct RunTimes {
    double t0 = 0, t_first = 0, t1 = 0;
    int64_t n_steps = 0;
    std::vector<CacheEditRecord> edits_done;  // every --edit, in order, as applied
};

RunTimes run_group(const CliArgs& args, SessionGroup& group, const std::shared_ptr<const Model>& model,
                   const std::vector<PlannedEdit>& edits) {
    const std::vector<const Session*> all = group.sessions();
    const int64_t chunk = group.options().prefill_chunk;
    RunTimes r;
    r.t0 = seconds_now();
    Progress progress("generate", group.options().max_new_tokens);
    auto apply_edits = [&] {
        for (const PlannedEdit& e : edits) {
            if (e.after_step != r.n_steps - 1) continue;
            CacheEdit edit = e.edit;
            try {
                if (edit.kind == CacheEditKind::Patch) {
                    edit.rows = kv_rows_of_run(model, all[0]->options(),
                                               encode_text(*model, e.patch_text, "--edit", args.has("--allow-special")),
                                               edit.position);
                    edit.source = e.patch_text;
                }
                r.edits_done.push_back(group.apply_edit(std::move(edit)));
            } catch (const UsageError& x) {
                throw UsageError("--edit " + e.spec + ": " + x.what());
            }
        }
    };
    while (group.next() != Session::Next::Done) {
        const Session& s0 = *all[0];
        const int64_t left = int64_t(s0.parts().prompt.size()) - s0.parts().n_prompt_done;
        progress.update(int64_t(s0.parts().generated.size()),
                        group.next() == Session::Next::Prefill
                            ? "prefill " + std::to_string(std::min(left, chunk > 0 ? chunk : left)) +
                                  " of " + std::to_string(left) + " prompt tokens left"
                            : "decode");
        group.step();
        ++r.n_steps;
        if (r.t_first == 0 && !all[0]->parts().generated.empty()) r.t_first = seconds_now();
        apply_edits();
    }
    for (const PlannedEdit& e : edits)
        if (e.after_step >= r.n_steps)
            throw UsageError("--edit " + e.spec + ": the run has " + std::to_string(r.n_steps) + " steps (0.." +
                             std::to_string(r.n_steps - 1) + ")");
    progress.update(int64_t(all[0]->parts().generated.size()));
    progress.finish();
    r.t1 = seconds_now();
    return r;
}

// Step 5: the files asked for: --dump-logits and --trace.
void write_files(const CliArgs& args, const Model& model, const std::vector<const Session*>& all, const PlotOutput& plots) {
    const int64_t V = model.config().n_vocab, N = all[0]->options().max_new_tokens;
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
            scope.logit_lens = &model;
            scope.plots = plots;
            const int64_t stale = export_trace(all[b]->trace(), model.tokenizer(), sub, scope,
                                               [&](size_t i) { export_progress.update(int64_t(i) + 1); });
            export_progress.finish();
            std::fprintf(stderr, "trace: %s and trace.json in %s%s\n",
                         count_of(int64_t(all[b]->trace().size()), "step folder", "step folders").c_str(), sub.c_str(),
                         stale ? ("; removed " + count_of(stale, "step folder", "step folders") + " of an earlier, longer trace").c_str()
                               : "");
        }
    }
}

// Step 6a: --json. One prompt: the fields are that prompt's; several: arrays, one element per prompt.
// "text" is the generated text (put_text: "text_hex" too when its bytes are not valid UTF-8).
// "prompt_text" is the prompt as the model read it (with --system in front). Both are null without a
// tokenizer: "" would say the text was empty.
void print_json(const CliArgs& args, const Model& model, const SessionGroup& group, const Inputs& in,
                const std::vector<PlannedEdit>& edits, const RunTimes& r) {
    const std::vector<const Session*> all = group.sessions();
    const SessionOptions& options = group.options();
    JsonOut prompt_ids = JsonOut::array(), generated_ids = JsonOut::array();
    std::vector<std::string> texts, prompt_texts;
    for (const Session* s : all) {
        prompt_ids.push_back(s->parts().prompt);
        generated_ids.push_back(s->parts().generated);
        texts.push_back(bytes_of(model, s->parts().generated));
        prompt_texts.push_back(bytes_of(model, s->parts().prompt));
    }
    const bool batch = all.size() > 1;
    JsonOut out;
    out["prompt_ids"] = batch ? prompt_ids : prompt_ids[0];
    if (!model.tokenizer()) out["prompt_text"] = nullptr;
    else if (batch) put_texts(out, "prompt_text", prompt_texts);
    else put_text(out, "prompt_text", prompt_texts[0]);
    out["generated_ids"] = batch ? generated_ids : generated_ids[0];
    if (!model.tokenizer()) out["text"] = nullptr;
    else if (batch) put_texts(out, "text", texts);
    else put_text(out, "text", texts[0]);
    if (model.config().encoder_decoder) out["source_ids"] = in.source;
    out["cache"] = options.use_cache;
    out["window"] = options.window;
    // Every setting that shaped the run, defaults included, so the JSON alone reproduces it.
    auto or_null = [](const std::optional<std::string>& v) { return v ? JsonOut(*v) : JsonOut(); };
    const std::optional<std::string> prompt_cache =
        args.has("--prompt-cache-ro") ? args.text("--prompt-cache-ro") : args.text("--prompt-cache");
    out["settings"] = {
        {"model", model.dir()},
        {"dtype", model.weights().bf16 ? "bf16" : "f32"},
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
    const int64_t N = options.max_new_tokens;
    const double prefill_s = r.t_first > 0 ? r.t_first - r.t0 : 0, decode_s = r.t1 - (r.t_first > 0 ? r.t_first : r.t0);
    const double decode_tps = N > 1 && decode_s > 0 ? double(int64_t(all.size()) * (N - 1)) / decode_s : 0;
    out["timing"] = {{"total_s", r.t1 - r.t0}, {"prefill_s", prefill_s}, {"decode_s", decode_s},
                     {"decode_tokens_per_s", decode_tps}};
    out["kv"] = kv_report_json(group);
    out["eviction"] = eviction_json(all, options.eviction);
    if (!edits.empty()) {  // each --edit as applied, with the step that ran after it (null: none did)
        JsonOut list = edits_json(model.tokenizer(), r.edits_done);
        for (size_t i = 0; i < edits.size(); ++i) {
            const int64_t next = edits[i].after_step + 1;
            list[i]["after_step"] = edits[i].after_step;
            list[i]["before_step"] = next < r.n_steps ? JsonOut(next) : JsonOut();
        }
        out["edits"] = list;
    }
    std::printf("%s\n", json_text(out).c_str());
}

// Step 6b: text: each prompt and its continuation on stdout, the figures on stderr.
void print_text(const Model& model, const SessionGroup& group, const RunTimes& r) {
    const std::vector<const Session*> all = group.sessions();
    const SessionOptions& options = group.options();
    for (const Session* s : all) {
        if (model.tokenizer()) {  // the real text, byte for byte (as detokenize writes it)
            const std::string text = bytes_of(model, s->parts().prompt) + bytes_of(model, s->parts().generated) + "\n";
            std::fwrite(text.data(), 1, text.size(), stdout);
        } else
            std::printf("%s\n", json_text(JsonOut(s->parts().generated)).c_str());
    }
    const int64_t N = options.max_new_tokens;
    const double prefill_s = r.t_first > 0 ? r.t_first - r.t0 : 0, decode_s = r.t1 - (r.t_first > 0 ? r.t_first : r.t0);
    const double decode_tps = N > 1 && decode_s > 0 ? double(int64_t(all.size()) * (N - 1)) / decode_s : 0;
    std::fprintf(stderr, "%lld tokens in %.3f s (prefill %.3f s, decode %.1f tokens/s, cache %s)\n",
                 (long long)(int64_t(all.size()) * N), r.t1 - r.t0, prefill_s, decode_tps,
                 options.use_cache ? "on" : "off");
    print_kv_report(group);
    if (options.eviction.active()) print_eviction_report(all, options.eviction);
}

}  // namespace

int cli_generate(int argc, char** argv) {
    CliArgs args = generate_args();
    if (!args.parse(argc, argv)) return 0;
    Setup setup = read_setup(args);
    apply_threads(args);
    Inputs in = read_inputs(args);
    if (!setup.run.group.prompt_cache.empty() && in.prompts.size() > 1)
        throw UsageError(std::string(args.has("--prompt-cache-ro") ? "--prompt-cache-ro" : "--prompt-cache") +
                         " works with one prompt");
    setup.run.group.n_seq = int64_t(in.prompts.size());
    SessionGroup group(in.model, setup.run.session, setup.run.group);
    group.set_prompts(std::move(in.prompts), in.source);
    const RunTimes r = run_group(args, group, in.model, setup.edits);
    write_files(args, *in.model, group.sessions(), setup.plots);
    if (args.has("--json")) print_json(args, *in.model, group, in, setup.edits, r);
    else print_text(*in.model, group, r);
    return 0;
}

}  // namespace kvscope
