#include "analysis/cache_lab.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "base/clock.h"
#include "base/errors.h"
#include "cache/kv_quant.h"
#include "run/options.h"

namespace kvscope {
namespace {

// Which positions a configuration keeps. An eviction policy is one more row: its name, whether it
// takes a budget, and the SessionOptions it sets.
struct LabPolicy {
    const char* name;
    bool takes_budget;
    void (*apply)(SessionOptions& o, int64_t budget);
};
const LabPolicy kPolicies[] = {
    {"full", false, [](SessionOptions&, int64_t) {}},
    {"window", true, [](SessionOptions& o, int64_t budget) { o.window = budget; }},
    // Eviction policies (eviction.h), deciding after each step what each layer and K/V head keeps. snapkv and
    // pyramid compress a prompt once it is complete; the lab's prompt is the text's first token, so they
    // would never act and are not offered.
    {"h2o", true, [](SessionOptions& o, int64_t budget) {
         o.eviction.kind = EvictionPolicyKind::H2O;
         o.eviction.budget = budget;
     }},
    {"window+sinks", true, [](SessionOptions& o, int64_t budget) {
         o.eviction.kind = EvictionPolicyKind::WindowSinks;
         o.eviction.budget = budget;
     }},
};

std::string policy_names() {
    std::string out;
    for (const LabPolicy& p : kPolicies) out += (out.empty() ? "" : ", ") + std::string(p.name);
    return out;
}

// A spec's whole number: the table's option for the key (options.h, its lab_key) checks it as the command
// line and the window do, and says what is wrong in the key as written.
int64_t lab_number(const std::string& spec, const std::string& key, const OptionSpec& option, const std::string& text) {
    RunOptions scratch;
    try {
        set_option(scratch, option, text, [&](const OptionSpec&) { return key; });
    } catch (const UsageError& e) {
        throw UsageError("{lab_config} '" + spec + "': " + e.what());
    }
    return std::strtoll(text.c_str(), nullptr, 10);
}

// The keys a spec takes: every option with a lab key, then name.
std::string lab_keys() {
    std::string out;
    for (const OptionSpec& o : option_table())
        if (*o.lab_key) out += std::string(o.lab_key) + ", ";
    return out + "name";
}

// log p (V) from logits (V): x − (max + ln Σ exp(x − max)), in double.
void log_softmax(const std::vector<float>& logits, std::vector<double>& out) {
    const double top = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float x : logits) sum += std::exp(double(x) - top);
    const double lse = top + std::log(sum);
    out.resize(logits.size());
    for (size_t v = 0; v < logits.size(); ++v) out[v] = double(logits[v]) - lse;
}

size_t argmax(const std::vector<double>& x) { return size_t(std::max_element(x.begin(), x.end()) - x.begin()); }

bool is_reference(const LabConfig& c) { return c.policy == "full" && !c.options.kv_quant.quantized(); }

}  // namespace

std::vector<std::string> split_lab_specs(const std::string& text) {
    std::vector<std::string> out;
    const char* const space = " \t\r\n";
    for (size_t at = 0; at <= text.size();) {
        const size_t end = std::min(text.find(';', at), text.size());
        const std::string part = text.substr(at, end - at);
        const size_t a = part.find_first_not_of(space), b = part.find_last_not_of(space);
        if (a != std::string::npos) out.push_back(part.substr(a, b - a + 1));
        at = end + 1;
    }
    return out;
}

LabConfig parse_lab_config(const std::string& spec) {
    LabConfig c;
    c.spec = c.name = spec;
    if (spec.empty()) throw UsageError("{lab_config} is empty (e.g. full, window=64,sinks=4, int8, int4,g=32,r=32)");
    std::optional<std::string> policy, quant;
    std::optional<int64_t> budget, sinks, group, residual;
    std::vector<std::string> seen;  // keys given, each once
    auto once = [&](const std::string& key) {
        if (std::find(seen.begin(), seen.end(), key) != seen.end())
            throw UsageError("{lab_config} '" + spec + "': " + key + " given twice");
        seen.push_back(key);
    };
    size_t pos = 0;
    while (pos <= spec.size()) {
        const size_t comma = std::min(spec.find(',', pos), spec.size());
        const std::string part = spec.substr(pos, comma - pos);
        pos = comma + 1;
        const size_t eq = part.find('=');
        const std::string key = part.substr(0, eq), value = eq == std::string::npos ? "" : part.substr(eq + 1);
        if (eq == std::string::npos) {  // a bare word: a policy or a row format
            const bool named_policy = std::any_of(std::begin(kPolicies), std::end(kPolicies),
                                                  [&](const LabPolicy& p) { return part == p.name; });
            if (named_policy) {
                once("policy");
                policy = part;
            } else if (part == "f32" || part == "int8" || part == "int4" || part == "fp8") {
                once("quant");
                quant = part;
            } else {
                throw UsageError("{lab_config} '" + spec + "': unknown part '" + part + "' (full, window=W, sinks=S, h2o, "
                                 "window+sinks, policy=, budget=, f32, int8, int4, fp8, g=G, r=R, name=)");
            }
            continue;
        }
        if (key == "name") {
            once(key);
            if (value.empty()) throw UsageError("{lab_config} '" + spec + "': name= is empty");
            c.name = value;
            continue;
        }
        // every other key is an option's lab_key (group and residual: g and r spelled out)
        const OptionSpec* o = option_by_lab_key(key == "group" ? "g" : key == "residual" ? "r" : key);
        if (!o) throw UsageError("{lab_config} '" + spec + "': unknown key '" + key + "' (" + lab_keys() + ")");
        const std::string_view name = o->name;
        if (name == "window") {
            once("policy");
            once("budget");
            policy = "window";
            budget = lab_number(spec, key, *o, value);
        } else if (name == "evict") {  // the lab's policies are its own list: full and window are policies here
            once("policy");
            policy = value;
        } else if (name == "kv_budget") {
            once("budget");
            budget = lab_number(spec, key, *o, value);
        } else if (name == "sinks") {
            once(key);
            sinks = lab_number(spec, key, *o, value);
        } else if (name == "kv_quant") {  // f32 is the lab's name for none
            once(key);
            quant = value;
        } else if (name == "kv_group") {
            once("g");
            group = lab_number(spec, key, *o, value);
        } else {
            once("r");
            residual = lab_number(spec, key, *o, value);
        }
    }

    c.policy = policy.value_or("full");
    const LabPolicy* p = nullptr;
    for (const LabPolicy& candidate : kPolicies)
        if (c.policy == candidate.name) p = &candidate;
    if (!p) throw UsageError("{lab_config} '" + spec + "': unknown policy '" + c.policy + "' (known: " + policy_names() + ")");
    if (p->takes_budget && !budget)
        throw UsageError("{lab_config} '" + spec + "': policy " + c.policy + " needs a budget (window=W or budget=N)");
    if (!p->takes_budget && budget)
        throw UsageError("{lab_config} '" + spec + "': policy " + c.policy + " keeps every position and takes no budget");
    if (budget && *budget <= 0)
        throw UsageError("{lab_config} '" + spec + "': the budget must be >= 1 position, got " + std::to_string(*budget));
    c.budget = budget.value_or(0);
    p->apply(c.options, c.budget);

    if (sinks) {
        if (c.policy != "window" && c.policy != "window+sinks")
            throw UsageError("{lab_config} '" + spec + "': sinks stay visible beside a window: give window=W (or "
                             "policy=window+sinks,budget=N) too");
        if (*sinks < 0) throw UsageError("{lab_config} '" + spec + "': sinks must be >= 0, got " + std::to_string(*sinks));
        if (c.policy == "window") c.options.sinks = *sinks;
        else c.options.eviction.sinks = *sinks;
    }
    if (c.policy == "window+sinks" && c.options.eviction.sinks >= c.budget)
        throw UsageError("{lab_config} '" + spec + "': window+sinks keeps the sinks and the newest budget - sinks "
                         "positions: the budget must exceed the sinks");
    if (quant && *quant != "f32" && *quant != "none") {
        if (*quant != "int8" && *quant != "int4" && *quant != "fp8")
            throw UsageError("{lab_config} '" + spec + "': unknown format '" + *quant + "' (f32, int8, int4, fp8)");
        c.options.kv_quant.format = parse_kv_quant(*quant);
    }
    const bool int4 = c.options.kv_quant.format == KvQuant::Int4;
    if ((group || residual) && !int4)
        throw UsageError("{lab_config} '" + spec + "': g= and r= are int4's group size and residual: add int4");
    if (group) c.options.kv_quant.group = *group;
    if (residual) c.options.kv_quant.residual = *residual;
    if (int4 && c.policy != "full")
        throw UsageError("{lab_config} '" + spec + "': int4 (KIVI) groups keys of consecutive positions and keeps them "
                         "all: only with policy full");
    if (c.options.kv_quant.group < 1)
        throw UsageError("{lab_config} '" + spec + "': g must be >= 1, got " + std::to_string(c.options.kv_quant.group));
    if (c.options.kv_quant.residual < 0)
        throw UsageError("{lab_config} '" + spec + "': r must be >= 0, got " + std::to_string(c.options.kv_quant.residual));
    return c;
}

const char* lab_config_grammar() {
    return "SPEC = PART[,PART...], each key at most once:\n"
           "  full | window=W          every position (default), or the last W (= policy=window,budget=W)\n"
           "  policy=NAME,budget=N     the same as policy and budget (budget: positions kept, >= 1)\n"
           "  sinks=S                  with a window: the first S positions stay visible too\n"
           "  f32 | int8 | int4 | fp8  K/V rows as stored (= quant=NAME; default f32)\n"
           "  g=G,r=R                  int4 KIVI: group size (divides head_dim), residual positions kept float32\n"
           "  name=LABEL               the label in the table and chart (default: SPEC)\n";
}

const std::string& lab_builtin_text() {
    // Sentences of the default model's grammar (core/text/corpus.cpp) in paragraphs joined by "\n" as its
    // training sequences are; the first paragraph comes back later, word for word.
    static const std::string text =
        "Tom saw the little cat in the garden. Yesterday, Anna found 7 ducks. Where is the red ball? It's under "
        "the tree. The old dog likes a green kite.\n"
        "I'm tired, and she is happy. Sam said: \"We'll go by the river at 3 o'clock.\"\n"
        "Don't open the box; Lily can't find her blue hat! There are 12 apples and 4 cats on the hill.\n"
        "Tom saw the little cat in the garden. Yesterday, Anna found 7 ducks. Where is the red ball? It's under "
        "the tree. The old dog likes a green kite.\n"
        "Max and Nora painted the big boat, then they went home. Why did the fox go across the bridge? Because "
        "it was hungry. Ben helped my young horse near the house.\n"
        "Don't open the box; Lily can't find her blue hat! There are 12 apples and 4 cats on the hill.\n"
        "I'm tired, and she is happy. Sam said: \"We'll go by the river at 3 o'clock.\"\n"
        "Today, Grace watched 5 owls. The quiet bear finds our shiny cup.";
    return text;
}

std::vector<std::string> lab_default_specs(const ModelConfig& cfg) {
    const std::string w = "32";
    // A model with its own sliding layers keeps its windows; a lab window on top is refused (as --window
    // is), so its defaults try H2O's budget instead.
    std::vector<std::string> specs = cfg.has_sliding_layers()
                                         ? std::vector<std::string>{"full", "policy=h2o,budget=" + w, "int8", "fp8"}
                                         : std::vector<std::string>{"full", "window=" + w, "window=" + w + ",sinks=4", "int8", "fp8"};
    for (int64_t g : {32, 16, 8, 4, 2})
        if (cfg.head_dim() % g == 0) {
            specs.push_back("int4,g=" + std::to_string(g));
            break;
        }
    return specs;
}

LabReport run_cache_lab(std::shared_ptr<const Model> model, std::span<const TokenId> tokens,
                        std::vector<LabConfig> configs, const LabProgress& progress) {
    const ModelConfig& cfg = model->config();
    const int64_t n_tokens = int64_t(tokens.size()), N = n_tokens - 1;  // N predictions
    if (n_tokens < 2) throw UsageError("the lab's text has " + std::to_string(n_tokens) + " token(s): it needs at least 2");
    if (n_tokens > cfg.n_ctx)
        throw UsageError("the lab's text has " + std::to_string(n_tokens) + " tokens, more than the model's " +
                         cfg.positions_key() + " (" + std::to_string(cfg.n_ctx) + ")");
    if (cfg.encoder_decoder) throw UsageError("the lab runs decoder-only models; this one is an encoder-decoder");
    if (configs.empty()) throw UsageError("the lab needs at least one configuration");

    LabReport report;
    report.tokens.assign(tokens.begin(), tokens.end());
    const auto ref = std::find_if(configs.begin(), configs.end(), is_reference);
    if (ref == configs.end()) {
        configs.insert(configs.begin(), parse_lab_config("full"));
        report.added_reference = true;
    } else {
        report.reference = size_t(ref - configs.begin());
    }

    // Names label the table's rows, the chart's lines and the JSON's entries: two alike could not be told apart.
    for (size_t b = 1; b < configs.size(); ++b)
        for (size_t a = 0; a < b; ++a)
            if (configs[a].name == configs[b].name)
                throw UsageError(configs[a].spec == configs[b].spec
                                     ? "{lab_config} '" + configs[b].spec + "' is given twice"
                                     : "{lab_config} '" + configs[b].spec + "': the name '" + configs[b].name +
                                           "' is taken by '" + configs[a].spec + "' (give another name=LABEL)");

    // pass 1: every session made and its prompt set before any step, so a refusal costs nothing
    std::vector<std::unique_ptr<Session>> sessions;
    for (LabConfig& c : configs) {
        SessionOptions& o = c.options;
        o.max_new_tokens = N;
        o.forced_tokens.assign(tokens.begin() + 1, tokens.end());
        o.history = false;   // one record, reused: a decode step allocates nothing
        o.record = false;
        o.n_top = 0;
        o.sampling = SamplerOptions{};
        try {
            const int64_t D = cfg.head_dim(), G = o.kv_quant.group;
            if (o.kv_quant.format == KvQuant::Int4 && D % G != 0)  // said in the lab's words before the engine does
                throw UsageError("g=" + std::to_string(G) + " does not divide head_dim " + std::to_string(D));
            sessions.push_back(std::make_unique<Session>(model, o));
            sessions.back()->set_prompt({tokens[0]});
        } catch (const UsageError& e) {
            throw UsageError("{lab_config} '" + c.spec + "': " + e.what());
        }
        LabRun run;
        run.config = c;
        run.config.options.forced_tokens.clear();  // the report holds the text once
        for (auto* v : {&run.loss, &run.kl}) v->reserve(size_t(N));
        report.runs.push_back(std::move(run));
    }

    // pass 2: all configurations step together, position by position, so the reference's distribution
    // at a position is needed only while that position is scored
    std::vector<double> ref_logp, logp;  // (V) each
    for (int64_t i = 0; i < N; ++i) {
        for (size_t r = 0; r < sessions.size(); ++r) {
            const double t0 = seconds_now();
            sessions[r]->step();
            report.runs[r].step_seconds.push_back(seconds_now() - t0);
        }
        log_softmax(sessions[report.reference]->parts().logits, ref_logp);
        const size_t ref_top = argmax(ref_logp);
        const TokenId next = tokens[size_t(i + 1)];
        for (size_t r = 0; r < sessions.size(); ++r) {
            LabRun& run = report.runs[r];
            const Session& s = *sessions[r];
            log_softmax(s.parts().logits, logp);
            double kl = 0;
            for (size_t v = 0; v < logp.size(); ++v) kl += std::exp(ref_logp[v]) * (ref_logp[v] - logp[v]);
            run.loss.push_back(-logp[size_t(next)]);
            run.kl.push_back(kl);
            run.top1.push_back(argmax(logp) == ref_top ? 1 : 0);
            if (s.options().eviction.active()) {
                // Evicted rows stay in the ring: count what the policy keeps (mean over layers and K/V heads).
                const KvCacheView v = s.cache().view();
                int64_t kept = 0;
                for (int32_t k : v.kept) kept += k;
                run.cache_bytes.push_back(v.bytes_kept);
                run.positions_held.push_back(v.kept.empty() ? s.cache().used() : kept / int64_t(v.kept.size()));
            } else {
                run.cache_bytes.push_back(s.cache().view().bytes_used);
                run.positions_held.push_back(s.cache().used());
            }
        }
        if (progress) progress(i + 1, N);
    }

    for (size_t r = 0; r < report.runs.size(); ++r) {
        LabRun& run = report.runs[r];
        LabTotals& t = run.totals;
        auto mean = [](const auto& v) {
            double sum = 0;
            for (auto x : v) sum += double(x);
            return v.empty() ? 0.0 : sum / double(v.size());
        };
        t.loss_mean = mean(run.loss);
        t.kl_mean = mean(run.kl);
        t.top1_rate = mean(run.top1);
        t.seconds_per_step = mean(run.step_seconds);
        t.bytes_total = run.cache_bytes.back();
        t.bytes_peak = *std::max_element(run.cache_bytes.begin(), run.cache_bytes.end());
        t.positions_held = run.positions_held.back();
        t.bytes_per_token = t.positions_held > 0 ? double(t.bytes_total) / double(t.positions_held) : 0;
        const SessionOptions& o = run.config.options;
        if (o.kv_quant.format == KvQuant::Int4 && !o.eviction.active()) {
            const int64_t n = sessions[r]->cache().next_position();
            t.residual_positions = n - int4_residual_boundary(n, o.kv_quant);
            t.bytes_residual = t.residual_positions * 2 * cfg.n_layer * cfg.kv_width() * int64_t(sizeof(float));
        }
    }
    for (LabRun& run : report.runs) run.totals.loss_delta = run.totals.loss_mean - report.runs[report.reference].totals.loss_mean;
    return report;
}

std::string residual_split(const LabTotals& t) {
    if (t.bytes_residual <= 0) return "";
    return std::to_string(t.bytes_total) + " cache bytes = " + std::to_string(t.bytes_total - t.bytes_residual) + " packed int4 + " +
           std::to_string(t.bytes_residual) + " float32 residual (the newest " + std::to_string(t.residual_positions) +
           (t.residual_positions == 1 ? " position)" : " positions)");
}

}  // namespace kvscope
