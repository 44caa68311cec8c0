#include "run/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "base/errors.h"

namespace kvscope {
namespace {

constexpr int64_t kLots = int64_t(1) << 24;

std::string num(int64_t v) { return std::to_string(v); }
std::string real_text(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
}
int64_t to_int(std::string_view s) {
    int64_t v = 0;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
}
double to_real(std::string_view s) { return std::strtod(std::string(s).c_str(), nullptr); }
bool to_switch(std::string_view s) { return s == "1" || s == "on"; }

bool evicting(const RunOptions& v) { return v.session.eviction.active(); }
bool evicting_with(const RunOptions& v, EvictionPolicyKind a, EvictionPolicyKind b) {
    return v.session.eviction.kind == a || v.session.eviction.kind == b;
}
// What an eviction parameter needs: a policy, and one that reads it.
std::string needs_policy(const RunOptions& v, const char* which) {
    if (!evicting(v)) return "is a parameter of an eviction policy: give {evict} POLICY too";
    return std::string("is a parameter of ") + which + ": {evict} " + eviction_policy_name(v.session.eviction.kind) +
           " does not use it";
}

#define GET(expr) [](const RunOptions& v) -> std::string { return expr; }
#define SET(stmt) [](RunOptions& v, std::string_view t) { stmt; }

const OptionSpec kOptions[] = {
    {.name = "max_new_tokens", .section = OptionSection::Run, .kind = OptionKind::Int, .min = 1, .max = kLots,
     .help = "tokens to generate (default 16)", .flag = "--max-new-tokens", .metavar = "N", .label = "max new tokens",
     .script_key = "max-new", .commands = kCliGenerate | kCliChat,
     .get = GET(num(v.session.max_new_tokens)), .set = SET(v.session.max_new_tokens = to_int(t)),
     .tip = "tokens to generate after the prompt"},
    {.name = "no_cache", .section = OptionSection::Run, .kind = OptionKind::Switch, .help = "recompute every position at every step (the baseline)",
     .flag = "--no-cache", .label = "KV cache off", .commands = kCliGenerate | kCliChat,
     .get = GET(v.session.use_cache ? "0" : "1"), .set = SET(v.session.use_cache = !to_switch(t))},
    {.name = "window", .section = OptionSection::Run, .kind = OptionKind::Int, .min = 1, .max = kLots,
     .help = "sliding window: each query sees the last W positions (default: off)", .flag = "--window", .metavar = "W",
     .label = "window", .script_key = "window", .lab_key = "window", .commands = kCliGenerate | kCliChat,
     .get = GET(num(v.session.window)), .set = SET(v.session.window = to_int(t)),
     .tip = "sliding window W: a query sees the last W positions; 0 = off"},
    {.name = "prefill_chunk", .section = OptionSection::Run, .kind = OptionKind::Int, .min = 1, .max = kLots,
     .help = "prefill the prompt C tokens per step (default: all at once)", .flag = "--prefill-chunk", .metavar = "C",
     .label = "prefill chunk", .script_key = "chunk", .commands = kCliGenerate | kCliChat,
     .get = GET(num(v.session.prefill_chunk)), .set = SET(v.session.prefill_chunk = to_int(t)),
     .tip = "tokens per prefill step; 0 = the whole prompt at once"},
    {.name = "sinks", .section = OptionSection::Run, .kind = OptionKind::Int, .min = 0, .max = kLots,
     .help = "with --window: the first S positions stay visible too (attention sinks)", .flag = "--sinks", .metavar = "S",
     .label = "sinks", .script_key = "sinks", .lab_key = "sinks", .commands = kCliGenerate | kCliChat,
     .get = GET(num(v.session.sinks)), .set = SET(v.session.sinks = to_int(t)),
     .tip = "attention sinks S (needs a window): the first S positions stay visible beside the window, as StreamingLLM keeps them; 0 = off"},
    {.name = "sink_positions", .section = OptionSection::Run, .kind = OptionKind::Choice, .choices = "text|cache",
     .help = "rotary models, with --sinks: where the sinks count as sitting — at their own positions (text, default) "
             "or right before the window, positions numbered inside the cache as StreamingLLM does (cache)",
     .flag = "--sink-positions", .metavar = "text|cache", .label = "sinks at cache positions", .script_key = "sink-cache",
     .commands = kCliGenerate, .get = GET(sink_positions_name(v.session.sink_positions)),
     .set = SET(v.session.sink_positions = t == "cache" ? SinkPositions::Cache : SinkPositions::Text),
     .applies = [](const RunOptions& v) { return v.session.sinks > 0; },
     .needs = [](const RunOptions&) -> std::string { return "places attention sinks: give {window} and {sinks} too"; },
     .tip = "rotary models, with sinks: number positions inside the cache as StreamingLLM does, so the sinks count as sitting right before the window. Off: every key keeps its own (text) position."},
    {.name = "block_size", .section = OptionSection::Run, .kind = OptionKind::Int, .min = 1, .max = int64_t(1) << 20,
     .help = "paged KV cache of B-position blocks in one pool for all prompts", .flag = "--block-size", .metavar = "B",
     .label = "block size", .script_key = "block", .commands = kCliGenerate | kCliChat,
     .get = GET(num(v.session.block_size)), .set = SET(v.session.block_size = to_int(t))},
    {.name = "share_prefix", .section = OptionSection::Run, .kind = OptionKind::Switch,
     .help = "prompts starting alike map those positions to the same blocks (paged, B = 16 unless given)",
     .flag = "--share-prefix", .label = "share prompt prefixes", .script_key = "share", .commands = kCliGenerate,
     .get = GET(v.session.share_prefix ? "1" : "0"), .set = SET(v.session.share_prefix = to_switch(t))},
    {.name = "sequences", .section = OptionSection::Batch, .kind = OptionKind::Int, .min = 1, .max = 16, .help = "sequences stepped together", .metavar = "N",
     .label = "sequences", .script_key = "seqs", .get = GET(num(v.group.n_seq)), .set = SET(v.group.n_seq = to_int(t))},
    {.name = "prompt_cache", .section = OptionSection::PromptCache, .kind = OptionKind::Text,
     .help = "load the prompt's leading K/V rows from FILE; (re)write it after the prefill unless it already holds "
             "the whole prompt",
     .flag = "--prompt-cache", .metavar = "FILE", .label = "prompt cache", .commands = kCliGenerate,
     .get = GET(v.group.prompt_cache), .set = SET(v.group.prompt_cache = std::string(t))},
    {.name = "prompt_cache_ro", .section = OptionSection::PromptCache, .kind = OptionKind::Text,
     .help = "load the prompt's leading K/V rows from FILE, never write it", .flag = "--prompt-cache-ro",
     .metavar = "FILE", .commands = kCliGenerate,
     .get = GET(v.group.prompt_cache_read_only ? v.group.prompt_cache : ""),
     .set = SET((v.group.prompt_cache = std::string(t), v.group.prompt_cache_read_only = true))},
    {.name = "temperature", .section = OptionSection::Sampling, .kind = OptionKind::Real, .help = "sample with temperature T > 0 (default: greedy)",
     .flag = "--temperature", .metavar = "T", .label = "temperature", .script_key = "temperature",
     .commands = kCliGenerate | kCliChat, .get = GET(real_text(v.session.sampling.temperature)),
     .set = SET(v.session.sampling.temperature = to_real(t)),
     .tip = "0 = greedy (always the most likely token)"},
    {.name = "top_k", .section = OptionSection::Sampling, .kind = OptionKind::Int, .min = 1, .max = int64_t(1) << 31,
     .help = "sample among the K most likely tokens", .flag = "--top-k", .metavar = "K", .label = "top-k",
     .script_key = "top-k", .commands = kCliGenerate | kCliChat, .get = GET(num(v.session.sampling.top_k)),
     .set = SET(v.session.sampling.top_k = to_int(t)),
     .tip = "sample among the k most likely tokens; 0 = off"},
    {.name = "top_p", .section = OptionSection::Sampling, .kind = OptionKind::Real, .help = "sample from the smallest set with probability >= P, 0 < P <= 1",
     .flag = "--top-p", .metavar = "P", .label = "top-p", .script_key = "top-p", .commands = kCliGenerate | kCliChat,
     .get = GET(real_text(v.session.sampling.top_p)), .set = SET(v.session.sampling.top_p = to_real(t))},
    {.name = "seed", .section = OptionSection::Sampling, .kind = OptionKind::Int, .min = 0, .max = INT64_MAX,
     .help = "random seed for sampling (default 0); with several prompts, prompt i uses S + i", .flag = "--seed",
     .metavar = "S", .label = "seed", .script_key = "seed", .commands = kCliGenerate | kCliChat,
     .get = GET(num(int64_t(v.session.sampling.seed))), .set = SET(v.session.sampling.seed = uint64_t(to_int(t)))},
    {.name = "kv_quant", .section = OptionSection::KvFormat, .kind = OptionKind::Choice, .choices = "none|int8|int4|fp8",
     .help = "store K/V rows quantized (docs/engine.md \"Quantized K/V\"): int8 or fp8 e4m3 per token with a float32 "
             "scale, or int4 KIVI (keys per channel over G positions, values per token; no --window) (default none)",
     .flag = "--kv-quant", .metavar = "none|int8|int4|fp8", .label = "K/V format", .script_key = "kv-quant",
     .lab_key = "quant", .commands = kCliGenerate | kCliChat, .get = GET(to_string(v.session.kv_quant.format)),
     .set = SET(v.session.kv_quant.format = parse_kv_quant(t)),
     .tip = "what the cache stores: float32 rows, int8 or fp8 rows with a float32 scale each, or int4 KIVI (keys per channel over G positions, values per token over G channels, the latest R positions in float32). Attention reads the dequantized rows. The K/V quant tab shows what a format changes (on an f32 session)."},
    {.name = "kv_group", .section = OptionSection::KvFormat, .kind = OptionKind::Int, .min = INT64_MIN, .max = INT64_MAX,
     .help = "int4: positions per key group and channels per value group; must divide head_dim (default 32)",
     .flag = "--kv-group", .metavar = "G", .label = "int4 group G", .script_key = "kv-group", .lab_key = "g",
     .commands = kCliGenerate | kCliChat, .get = GET(num(v.session.kv_quant.group)),
     .set = SET(v.session.kv_quant.group = to_int(t)),
     .applies = [](const RunOptions& v) { return v.session.kv_quant.format == KvQuant::Int4; },
     .needs = [](const RunOptions&) -> std::string { return "is a parameter of int4 K/V: give {kv_quant} int4 too"; },
     .tip = "positions per key group and channels per value group; must divide the head dimension"},
    {.name = "kv_residual", .section = OptionSection::KvFormat, .kind = OptionKind::Int, .min = INT64_MIN, .max = INT64_MAX,
     .help = "int4: the most recent R positions stay float32 (default 0)", .flag = "--kv-residual", .metavar = "R",
     .label = "int4 residual R", .script_key = "kv-residual", .lab_key = "r", .commands = kCliGenerate | kCliChat,
     .get = GET(num(v.session.kv_quant.residual)), .set = SET(v.session.kv_quant.residual = to_int(t)),
     .applies = [](const RunOptions& v) { return v.session.kv_quant.format == KvQuant::Int4; },
     .needs = [](const RunOptions&) -> std::string { return "is a parameter of int4 K/V: give {kv_quant} int4 too"; },
     .tip = "the most recent R positions stay float32"},
    {.name = "evict", .section = OptionSection::Eviction, .kind = OptionKind::Choice, .choices = "oracle-off|window+sinks|h2o|snapkv|pyramid",
     .help = "evict K/V per layer and K/V head under --kv-budget (docs/engine.md \"Eviction under a budget\"): "
             "oracle-off (keep all), window+sinks, h2o, snapkv, pyramid",
     .flag = "--evict", .metavar = "POLICY", .label = "eviction", .script_key = "evict", .lab_key = "policy",
     .commands = kCliGenerate | kCliChat, .get = GET(eviction_policy_name(v.session.eviction.kind)),
     .set = SET(v.session.eviction.kind = parse_eviction_policy(std::string(t))),
     .tip = "which positions each layer and K/V head keeps once it holds more than the budget (docs/engine.md \"Eviction under a budget\"); evicted rows are veiled red in the KV cache panel"},
    {.name = "kv_budget", .section = OptionSection::Eviction, .kind = OptionKind::Int, .min = INT64_MIN, .max = INT64_MAX,
     .help = "with --evict: positions each layer and K/V head keeps between steps (pyramid: the mean)",
     .flag = "--kv-budget", .metavar = "N", .label = "KV budget", .script_key = "kv-budget", .lab_key = "budget",
     .commands = kCliGenerate | kCliChat, .get = GET(num(v.session.eviction.budget)),
     .set = SET(v.session.eviction.budget = to_int(t)), .applies = evicting,
     .needs = [](const RunOptions& v) { return needs_policy(v, "an eviction policy"); },
     .tip = "positions each layer and K/V head keeps between steps (pyramid: the mean)"},
    {.name = "evict_sinks", .section = OptionSection::Eviction, .kind = OptionKind::Int, .min = INT64_MIN, .max = INT64_MAX,
     .help = "window+sinks: the first S positions always stay (default 0)", .flag = "--evict-sinks", .metavar = "S",
     .label = "evict sinks", .script_key = "evict-sinks", .commands = kCliGenerate | kCliChat,
     .get = GET(num(v.session.eviction.sinks)), .set = SET(v.session.eviction.sinks = to_int(t)),
     .applies = [](const RunOptions& v) { return v.session.eviction.kind == EvictionPolicyKind::WindowSinks; },
     .needs = [](const RunOptions& v) { return needs_policy(v, "window+sinks"); },
     .tip = "window+sinks: the first positions always kept"},
    {.name = "evict_recent", .section = OptionSection::Eviction, .kind = OptionKind::Int, .min = INT64_MIN, .max = INT64_MAX,
     .help = "h2o: the R most recent positions always stay (default N/2)", .flag = "--evict-recent", .metavar = "R",
     .label = "evict recent", .script_key = "evict-recent", .commands = kCliGenerate | kCliChat,
     .get = GET(num(v.session.eviction.recent)), .set = SET(v.session.eviction.recent = to_int(t)),
     .applies = [](const RunOptions& v) { return v.session.eviction.kind == EvictionPolicyKind::H2O; },
     .needs = [](const RunOptions& v) { return needs_policy(v, "h2o"); },
     .tip = "h2o: the R most recent positions always stay; -1 = half the budget"},
    {.name = "evict_obs", .section = OptionSection::Eviction, .kind = OptionKind::Int, .min = INT64_MIN, .max = INT64_MAX,
     .help = "snapkv, pyramid: the last W prompt queries score the keys (default 8)", .flag = "--evict-obs", .metavar = "W",
     .label = "evict observation window", .script_key = "evict-obs", .commands = kCliGenerate | kCliChat,
     .get = GET(num(v.session.eviction.obs)), .set = SET(v.session.eviction.obs = to_int(t)),
     .applies = [](const RunOptions& v) { return evicting_with(v, EvictionPolicyKind::SnapKV, EvictionPolicyKind::Pyramid); },
     .needs = [](const RunOptions& v) { return needs_policy(v, "snapkv and pyramid"); }},
    {.name = "evict_pool", .section = OptionSection::Eviction, .kind = OptionKind::Int, .min = INT64_MIN, .max = INT64_MAX,
     .help = "snapkv, pyramid: pool the scores over K neighbours, K odd (default 7)", .flag = "--evict-pool", .metavar = "K",
     .label = "evict pool", .script_key = "evict-pool", .commands = kCliGenerate | kCliChat,
     .get = GET(num(v.session.eviction.pool)), .set = SET(v.session.eviction.pool = to_int(t)),
     .applies = [](const RunOptions& v) { return evicting_with(v, EvictionPolicyKind::SnapKV, EvictionPolicyKind::Pyramid); },
     .needs = [](const RunOptions& v) { return needs_policy(v, "snapkv and pyramid"); }},
    {.name = "evict_pool_kind", .section = OptionSection::Eviction, .kind = OptionKind::Choice, .choices = "max|avg",
     .help = "snapkv, pyramid: how the pool combines them (default avg)", .flag = "--evict-pool-kind", .metavar = "max|avg",
     .label = "evict pool kind", .script_key = "evict-pool-kind", .commands = kCliGenerate | kCliChat,
     .get = GET(pool_kind_name(v.session.eviction.pool_kind)),
     .set = SET(v.session.eviction.pool_kind = t == "max" ? PoolKind::Max : PoolKind::Avg),
     .applies = [](const RunOptions& v) { return evicting_with(v, EvictionPolicyKind::SnapKV, EvictionPolicyKind::Pyramid); },
     .needs = [](const RunOptions& v) { return needs_policy(v, "snapkv and pyramid"); }},
};

#undef GET
#undef SET

// Inputs that are not session options but that messages name: what a run is made from. Each front end
// has its own words for them as for an option; the window gives the model folder and the source in boxes
// and takes the weight format only when it starts. The CLI's words for a source are both of its flags.
const OptionSpec kInputs[] = {
    {.name = "model", .kind = OptionKind::Text, .flag = "--model", .label = "the model path box"},
    {.name = "source", .kind = OptionKind::Text, .flag = "--source or --source-ids", .label = "the Source box"},
    {.name = "encoder_source", .kind = OptionKind::Text, .flag = "--source", .label = "a source"},
    {.name = "dtype", .kind = OptionKind::Text, .flag = "--dtype", .label = "kvscope gui --dtype"},
    {.name = "lab_config", .kind = OptionKind::Text, .flag = "--config", .label = "configuration"},
};

std::string value_error(const OptionSpec& s, const std::string& what) {
    return "{" + std::string(s.name) + "} " + what;
}

}  // namespace

std::span<const OptionSpec> option_table() { return kOptions; }

const OptionSpec* option_named(std::string_view name) {
    for (const OptionSpec& s : kOptions)
        if (name == s.name) return &s;
    return nullptr;
}

const OptionSpec* input_named(std::string_view name) {
    for (const OptionSpec& s : kInputs)
        if (name == s.name) return &s;
    return option_named(name);
}

const OptionSpec* option_by_lab_key(std::string_view key) {
    for (const OptionSpec& s : kOptions)
        if (*s.lab_key && key == s.lab_key) return &s;
    return nullptr;
}

const OptionSpec* option_by_script_key(std::string_view key) {
    for (const OptionSpec& s : kOptions)
        if (*s.script_key && key == s.script_key) return &s;
    return nullptr;
}

const OptionSpec* option_by_flag(std::string_view flag) {
    for (const OptionSpec& s : kOptions)
        if (*s.flag && flag == s.flag) return &s;
    return nullptr;
}

std::vector<const OptionSpec*> cli_options(unsigned command, OptionSection section) {
    std::vector<const OptionSpec*> out;
    for (const OptionSpec& s : kOptions)
        if ((s.commands & command) && s.section == section) out.push_back(&s);
    return out;
}

std::vector<std::string> choices_of(const OptionSpec& spec) {
    std::vector<std::string> out;
    std::string_view c = spec.choices;
    while (!c.empty()) {
        const size_t bar = c.find('|');
        out.emplace_back(c.substr(0, bar));
        c = bar == std::string_view::npos ? std::string_view() : c.substr(bar + 1);
    }
    return out;
}

std::string default_text(const OptionSpec& spec) { return spec.get(RunOptions{}); }

void set_option(RunOptions& values, const OptionSpec& s, std::string_view text, const OptionWords& words) {
    const std::string t(text);
    auto refuse = [&](const std::string& what) { throw UsageError(render(value_error(s, what), words)); };
    switch (s.kind) {
    case OptionKind::Int: {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || ec != std::errc() || end != t.data() + t.size()) refuse("wants a whole number, got '" + t + "'");
        if ((v < s.min || v > s.max) && t != default_text(s))
            refuse("must be between " + num(s.min) + " and " + num(s.max) + ", got " + t);
        break;
    }
    case OptionKind::Real: {
        char* end = nullptr;
        const double v = std::strtod(t.c_str(), &end);
        if (t.empty() || *end != '\0' || !std::isfinite(v)) refuse("wants a number, got '" + t + "'");
        break;
    }
    case OptionKind::Switch:
        if (t != "0" && t != "1" && t != "on" && t != "off") refuse("takes 0 or 1, got '" + t + "'");
        break;
    case OptionKind::Choice: {
        const std::vector<std::string> names = choices_of(s);
        std::string name = t;
        if (!t.empty() && t.find_first_not_of("0123456789") == std::string::npos) {
            const size_t i = size_t(std::strtoull(t.c_str(), nullptr, 10));
            if (i >= names.size()) refuse("takes 0.." + num(int64_t(names.size()) - 1) + " or a name, got " + t);
            name = names[i];
        }
        bool known = false;
        for (const std::string& n : names) known |= n == name;
        if (!known) {
            std::string list;
            for (size_t i = 0; i < names.size(); ++i) list += (i ? i + 1 == names.size() ? " or " : ", " : "") + names[i];
            refuse("takes " + list + ", got '" + t + "'");
        }
        s.set(values, name);
        return;
    }
    case OptionKind::Text:
        break;
    }
    s.set(values, t);
}

std::vector<std::string> problems(const RunOptions& v, const std::vector<const OptionSpec*>& given) {
    std::vector<std::string> out;
    const SessionOptions& o = v.session;
    const GroupOptions& g = v.group;
    // pass 1: options given that the rest of the setup leaves without effect
    for (const OptionSpec* s : given)
        if (s->applies && !s->applies(v)) {
            std::string m = "{";
            m.append(s->name).append("} ").append(s->needs(v));
            out.push_back(std::move(m));
        }
    // pass 1b: oracle-off asked for by name is the full cache, every row kept: a window hides rows and no
    // cache keeps none, so either would make it something else. A prompt cache stays allowed: nothing is
    // evicted, so the rows adopted from the file are the ones a run without a policy keeps.
    const bool oracle_off = std::find(given.begin(), given.end(), option_named("evict")) != given.end() &&
                            v.session.eviction.kind == EvictionPolicyKind::Off;
    if (oracle_off && v.session.window > 0)
        out.push_back("{evict} oracle-off keeps every position, a window hides all but the last ones: {-window}");
    if (oracle_off && !v.session.use_cache)
        out.push_back("{evict} oracle-off keeps every row of the KV cache, and there is no cache: {-no_cache}");
    // pass 2: a prompt cache file holds float32 rows every later query may see
    if (!g.prompt_cache.empty()) {
        if (o.window > 0) out.push_back("{prompt_cache} keeps rows computed with every position visible: {-window}");
        if (!o.use_cache) out.push_back("{prompt_cache} loads and saves the KV cache's rows: {-no_cache}");
        if (o.eviction.active()) out.push_back("{prompt_cache} adopts rows no query has scored: {-evict}");
        if (o.kv_quant.quantized()) out.push_back("{prompt_cache} keeps float32 rows: {-kv_quant}");
        if (g.n_seq > 1)
            out.push_back("a prompt cache file works with one sequence (the batch has " + num(g.n_seq) + ")");
    }
    if (g.n_seq < 1) out.push_back("a group needs at least one sequence, got " + num(g.n_seq));
    // pass 3: each option alone, then the session's combinations
    if (o.prefill_chunk < 0) out.push_back("prefill chunk must be >= 1 (or 0 for the whole prompt)");
    if (o.window < 0) out.push_back("window must be >= 1 (or 0 for no window)");
    if (o.sinks < 0) out.push_back("sinks must be >= 0");
    if (o.sinks > 0 && o.window == 0) out.push_back("attention sinks keep the first positions beside a window: set a window too");
    if (o.sink_positions == SinkPositions::Cache && o.sinks == 0)
        out.push_back("sink positions \"cache\" re-number the attention sinks inside the cache: set a window and sinks too");
    if (o.block_size < 0) out.push_back("block size must be >= 1 (or 0 for the contiguous cache)");
    if (o.share_prefix && o.block_size == 0) out.push_back("prefix sharing needs the paged cache: set a block size");
    if (o.kv_quant.quantized() && o.block_size > 0)
        out.push_back(std::string("{kv_quant} ") + to_string(o.kv_quant.format) +
                      " stores packed rows in the contiguous cache only: {-block_size}");
    if (o.max_new_tokens < 1) out.push_back("max new tokens must be >= 1, got " + num(o.max_new_tokens));
    if (o.n_top < 0) out.push_back("n_top must be >= 0");
    auto part = [&](auto&& check) {
        try {
            check();
        } catch (const UsageError& e) {
            out.push_back(e.what());
        }
    };
    part([&] { validate(o.sampling); });
    part([&] { validate(o.eviction); });
    if (o.eviction.active()) {
        const std::string name = eviction_policy_name(o.eviction.kind);
        if (o.window > 0 || o.sinks > 0)
            out.push_back("eviction policy " + name + " decides which positions stay: leave out {window}/{sinks} "
                          "({evict} window+sinks {evict_sinks} S is the window as a policy)");
        if (!o.use_cache) out.push_back("eviction policy " + name + " evicts from the KV cache: keep the cache on");
    }
    return out;
}

std::string render(const std::string& message, const OptionWords& words, const OptionWords& drop) {
    std::string out;
    for (size_t at = 0; at < message.size();) {
        const size_t open = message.find('{', at);
        const size_t close = open == std::string::npos ? open : message.find('}', open);
        std::string_view name = close == std::string::npos ? std::string_view()
                                                           : std::string_view(message).substr(open + 1, close - open - 1);
        const bool leave_out = name.starts_with('-');
        const OptionSpec* s = name.empty() ? nullptr : input_named(leave_out ? name.substr(1) : name);
        if (!s) {  // no placeholder left (or braces of the text itself)
            const size_t upto = close == std::string::npos ? message.size() : close + 1;
            out += message.substr(at, upto - at);
            at = upto;
            continue;
        }
        out += message.substr(at, open - at) +
               (!leave_out ? words(*s) : drop ? drop(*s) : "leave out " + words(*s));
        at = close + 1;
    }
    return out;
}

std::string cli_words(const OptionSpec& s) { return *s.flag ? s.flag : neutral_words(s); }
std::string label_words(const OptionSpec& s) { return *s.label ? s.label : neutral_words(s); }
std::string neutral_words(const OptionSpec& s) { return s.name; }

std::string label_leave_out(const OptionSpec& s) {
    switch (s.kind) {
    case OptionKind::Switch: return "untick " + label_words(s);
    case OptionKind::Text: return "empty the " + label_words(s) + " box";
    default: return "set " + label_words(s) + " to " + default_text(s);
    }
}

std::string render_labels(const std::string& message) { return render(message, label_words, label_leave_out); }

void check(const RunOptions& values, const std::vector<const OptionSpec*>& given, const OptionWords& words) {
    const std::vector<std::string> found = problems(values, given);
    if (!found.empty()) throw UsageError(render(found.front(), words));
}

}  // namespace kvscope
