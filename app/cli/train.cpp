// kvscope train: train a small GPT-2 or Llama-family model on the generated corpus (core/text/corpus.h) and
// write a model folder.
#include <cmath>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>
#include <filesystem>
#include <unistd.h>

#include "base/errors.h"
#include "args.h"
#include "commands.h"
#include "common.h"
#include "io/atomic_file.h"
#include "io/output_path.h"
#include "io/ownership.h"
#include "report/plot.h"
#include "train/train.h"

namespace kvscope {
namespace {

// "A-B" as two decimal integers, nothing else (no signs, spaces or trailing characters).
std::optional<std::pair<long, long>> parse_range(std::string_view text) {
    const size_t dash = text.find('-');
    if (dash == std::string_view::npos) return std::nullopt;
    auto whole_number = [](std::string_view t) -> std::optional<long> {
        long v = 0;
        if (t.empty() || t.front() < '0' || t.front() > '9') return std::nullopt;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
        return v;
    };
    const auto a = whole_number(text.substr(0, dash)), b = whole_number(text.substr(dash + 1));
    if (!a || !b) return std::nullopt;
    return std::pair{*a, *b};
}

std::string duration(double s) {
    char buf[32];
    const long t = long(std::lround(std::max(0.0, s)));
    if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
    return buf;
}

// --help lists the options in the order they are added: the run and the model's shape first, then the
// training data and initial weights, then what is written besides --out.
void add_run_options(CliArgs& args) {
    args.option("--out", "DIR", "model folder to write (default: trained-model)");
    args.option("--tokenizer", "DIR", "folder with vocab.json and merges.txt, copied into --out "
                                      "(default: the embedded model's)");
    args.option("--steps", "N", "optimizer steps (default 1500)");
    args.option("--seed", "S", "seed of the corpus and the initial weights (default 1)");
    add_threads_option(args);
    args.option("--batch", "B", "sequences per step (default 8)");
    args.option("--seq", "T", "tokens per sequence (default 256)");
    args.option("--lr", "X", "peak learning rate (default 0.002)");
    args.option("--warmup", "N", "linear warm-up steps (default 100, at most --steps)");
    args.option("--weight-decay", "X", "AdamW decoupled weight decay on matrices (default 0.1)");
    args.option("--n-layer", "N", "layers (default 2)");
    args.option("--n-head", "N", "heads per layer (default 4)");
    args.option("--n-embd", "N", "model width C (default 128)");
    args.option("--n-positions", "N", "context length of the model (default 256, >= --seq)");
}

// The family and the shape only a Llama-family model has (core/train/llama_model.h trains them).
void add_family_options(CliArgs& args) {
    args.option("--family", "NAME", "gpt2, llama, qwen3 (QK-norm, sliding layers) or mistral (one window on every "
                                    "layer) (default gpt2)");
    args.option("--n-kv-head", "K", "llama family: K/V heads, each shared by --n-head / K query heads "
                                     "(default --n-head)");
    args.option("--head-dim", "D", "llama family: width of each head, free of --n-embd (default --n-embd / --n-head)");
    args.option("--intermediate", "F", "llama family: SwiGLU width (default 4 x --n-embd)");
    args.option("--rope-theta", "X", "llama family: rotary base frequency (default 10000)");
    args.option("--sliding-window", "W", "qwen3, mistral: a query attends to the W latest positions on sliding layers");
    args.option("--sliding-layers", "N[,N...]", "qwen3: the layers that slide --sliding-window (default: every layer; "
                                                "mistral slides every layer)");
    args.flag("--tied", "the output layer is the token embedding (the default)");
    args.flag("--untied", "llama family: a separate lm_head.weight");
}

void add_data_and_init_options(CliArgs& args) {
    args.option("--mix-text", "P", "probability of a grammar-text segment (default 0.35)");
    args.option("--mix-copy", "P", "probability of a segment copied from earlier in the sequence (default 0.15); "
                                   "the rest are repeated random letter/digit spans");
    args.option("--span-min", "N", "shortest random or copied span (default 8)");
    args.option("--span-max", "N", "longest random or copied span (default 32)");
    args.option("--min-repeat", "N", "repeat each random span until its segment has N tokens (default 0: 2-3 copies)");
    args.option("--attn-init", "X", "std of the initial query/key/value weights (default 0.02)");
    args.option("--pos-init", "X", "RMS of the initial (sinusoidal) position table (default 0.02)");
    args.option("--prev-head-init", "G", "start layer 0 head 0 as a previous-token head with query/key gain G "
                                         "(default 0: off)");
    args.option("--tok-init", "X", "std of the initial token embeddings (default 0.02)");
    args.option("--prev-value-init", "G", "with --prev-head-init: gain of that head's output (default 0)");
    args.option("--circuit-init", "G", "start head 0 of layers 0 and 1 as a previous-token + induction head pair "
                                       "with query/key gain G (default 0: off)");
    args.flag("--split-init", "positions in the first head-width dims, tokens from the third on, the second empty "
                              "(the --circuit-init layout without its heads)");
    args.option("--copy-phase", "N", "curriculum: the first N steps train on repeated random spans only (default 0)");
    args.option("--copy-seq", "T", "tokens per sequence during --copy-phase (default 32; the batch grows to keep "
                                   "tokens per step)");
    args.option("--copy-span", "A-B", "random span lengths during --copy-phase (default 6-12)");
    args.flag("--distinct", "random spans drawn without replacement: no token twice in a span");
    args.flag("--no-span-newline", "no newline after a random span's last copy (not during --copy-phase)");
    args.flag("--copy-distinct", "the same during --copy-phase");
    args.option("--attn-only", "N", "the first N steps skip the MLPs: an attention-only warm-up (default 0)");
    args.option("--tok-lr", "X", "learning-rate factor of the token embeddings, 0 freezes them (default 1)");
    args.option("--pos-lr", "X", "learning-rate factor of the position table, 0 freezes it (default 1)");
    args.flag("--no-emb-decay", "no weight decay on the token and position tables");
    args.option("--mix-vocab", "P", "probability of a whole-vocabulary segment: a span of random ids from the whole "
                                    "vocabulary, 0..--vocab-gap more random ids, the span again (default 0)");
    args.option("--vocab-span", "A-B", "span lengths of whole-vocabulary segments (default 4-40)");
    args.option("--vocab-gap", "N", "at most N random ids between a whole-vocabulary span and its copy (default 24)");
    args.option("--vocab-repeats", "N", "occurrences of a whole-vocabulary span, each after its own gap (default 2)");
    args.flag("--vocab-partial", "copies of a whole-vocabulary span after the first start at a random id of it "
                                 "(needs --vocab-span A-B with A >= 2)");
    args.option("--vocab-prefix", "N", "each sequence starts with 0..N random whole-vocabulary ids (not scored with "
                                       "--score-copies-only), so segments start at any position (default 0)");
    args.option("--vocab-pool", "P,A-B", "with probability P a whole-vocabulary span draws from a random pool of "
                                         "A..B ids, so ids repeat inside it and only two ids of context find the "
                                         "copy (default 0: off)");
    args.flag("--score-copies-only", "the loss skips what no model can predict in whole-vocabulary segments (the "
                                     "first span, the gaps, the first id of each copy)");
    args.option("--copy-vocab", "P", "the same probability during --copy-phase (default 0: letter/digit spans)");
    args.option("--text-repeat", "P", "each sentence of a text segment is, with probability P, one said earlier in the "
                                      "sequence, so copying pays off inside prose (default 0)");
    args.option("--mix-chat", "P", "probability of a chat segment in the ChatML template: facts, questions, answers "
                                   "from the earlier turn (needs <|im_start|> and <|im_end|> in the tokenizer; "
                                   "default 0)");
    args.option("--init-from", "DIR", "start from the weights of the F32 model folder DIR (a fine-tune) instead of "
                                      "random ones; the shape comes from DIR/config.json, the tokenizer from DIR "
                                      "unless --tokenizer");
}

void add_output_options(CliArgs& args) {
    args.option("--save-at", "N[,N...]", "also save the model as it is after step N into OUT-stepN (a folder beside "
                                         "--out), e.g. before and after the induction head forms");
    args.option("--save-prefix", "PATH", "the --save-at folders are PATH-stepN (default: --out)");
    args.option("--log-every", "N", "when stderr is not a terminal, one progress line every N steps (default 50)");
    args.option("--checkpoint-every", "N", "also write --out every N steps (default 0: at the end only)");
    args.flag("--force", "--out (and the --save-at folders) may be existing folders kvscope did not write, such as "
                         "assets/default when reproducing it: their files become kvscope's, and those training writes are replaced");
    args.option("--loss-png", "FILE", "draw the per-step loss curve into FILE (PNG; SVG if FILE ends in .svg)");
    add_plot_options(args, false);
}

// The options are read in the order their errors are reported: schedule and initial weights, the corpus,
// --save-at, then the model's shape.
void read_schedule_and_init(const CliArgs& args, TrainOptions& o) {
    o.steps = args.integer("--steps", 1500, 1, 10'000'000);
    o.seed = uint64_t(args.integer("--seed", 1, 0, INT64_MAX));
    o.batch = args.integer("--batch", 8, 1, 4096);
    o.seq_len = args.integer("--seq", 256, 2, 8192);
    o.lr = args.real("--lr", 2e-3);
    o.warmup = std::min(o.steps, args.integer("--warmup", 100, 0, 10'000'000));
    o.adamw.weight_decay = args.real("--weight-decay", 0.1);
    if (!(o.lr > 0 && o.lr < 1)) throw UsageError("train: --lr must be in (0, 1)");
    if (!(o.adamw.weight_decay >= 0 && o.adamw.weight_decay < 1)) throw UsageError("train: --weight-decay must be in [0, 1)");
    o.mix.text = args.real("--mix-text", o.mix.text);
    o.mix.copy = args.real("--mix-copy", o.mix.copy);
    o.mix.vocab = args.real("--mix-vocab", 0);
    o.mix.chat = args.real("--mix-chat", 0);
    if (!(o.mix.text >= 0 && o.mix.copy >= 0 && o.mix.vocab >= 0 && o.mix.chat >= 0 &&
          o.mix.text + o.mix.copy + o.mix.vocab + o.mix.chat <= 1))
        throw UsageError("train: --mix-text, --mix-copy, --mix-vocab and --mix-chat must be >= 0 with a sum <= 1");
    o.mix.text_repeat = args.real("--text-repeat", 0);
    if (!(o.mix.text_repeat >= 0 && o.mix.text_repeat <= 1)) throw UsageError("train: --text-repeat must be in [0, 1]");
    o.mix.min_span = args.integer("--span-min", o.mix.min_span, 1, 4096);
    o.mix.max_span = args.integer("--span-max", o.mix.max_span, o.mix.min_span, 4096);
    o.mix.min_repeat = args.integer("--min-repeat", 0, 0, 1 << 20);
    o.init.attn_std = args.real("--attn-init", 0.02);
    if (!(o.init.attn_std >= 0 && o.init.attn_std < 10)) throw UsageError("train: --attn-init must be in [0, 10)");
    o.init.pos_rms = args.real("--pos-init", 0.02);
    if (!(o.init.pos_rms >= 0 && o.init.pos_rms < 10)) throw UsageError("train: --pos-init must be in [0, 10)");
    o.init.prev_head_gain = args.real("--prev-head-init", 0);
    if (!(o.init.prev_head_gain >= 0 && o.init.prev_head_gain < 100)) throw UsageError("train: --prev-head-init must be in [0, 100)");
    o.init.tok_std = args.real("--tok-init", 0.02);
    if (!(o.init.tok_std > 0 && o.init.tok_std < 10)) throw UsageError("train: --tok-init must be in (0, 10)");
    o.init.prev_value_gain = args.real("--prev-value-init", 0);
    if (!(o.init.prev_value_gain >= 0 && o.init.prev_value_gain < 100)) throw UsageError("train: --prev-value-init must be in [0, 100)");
    o.init.circuit_gain = args.real("--circuit-init", 0);
    if (!(o.init.circuit_gain >= 0 && o.init.circuit_gain < 100)) throw UsageError("train: --circuit-init must be in [0, 100)");
    o.init.split_stream = args.has("--split-init");
}

// --vocab-pool P,A-B into both mixes.
void read_vocab_pool(const std::string_view text, TrainOptions& o) {
    const size_t comma = text.find(',');
    double p = 0;
    std::optional<std::pair<long, long>> r;
    if (comma != std::string_view::npos) {  // from_chars takes no '+' or space; a '-' fails P > 0
        const auto [end, ec] = std::from_chars(text.data(), text.data() + comma, p);
        if (ec == std::errc() && end == text.data() + comma) r = parse_range(text.substr(comma + 1));
    }
    if (!r || !(p > 0 && p <= 1) || r->first < 2 || r->second < r->first || r->second > 4096)
        throw UsageError("train: --vocab-pool wants P,A-B with 0 < P <= 1 and 2 <= A <= B <= 4096, e.g. 0.5,6-32");
    o.mix.vocab_pool_share = o.copy_mix.vocab_pool_share = p;
    o.mix.vocab_pool_min = o.copy_mix.vocab_pool_min = r->first;
    o.mix.vocab_pool_max = o.copy_mix.vocab_pool_max = r->second;
}

// The copy phase and the whole-vocabulary segments.
void read_curriculum(const CliArgs& args, TrainOptions& o) {
    o.copy_phase = args.integer("--copy-phase", 0, 0, 10'000'000);
    o.copy_seq = args.integer("--copy-seq", 32, 2, 8192);
    if (auto span = args.text("--copy-span")) {
        const auto r = parse_range(*span);
        if (!r || r->first < 1 || r->second < r->first)
            throw UsageError("train: --copy-span wants A-B with 1 <= A <= B, e.g. 6-12");
        o.copy_mix.min_span = r->first, o.copy_mix.max_span = r->second;
    }
    if (auto span = args.text("--vocab-span")) {
        const auto r = parse_range(*span);
        if (!r || r->first < 1 || r->second < r->first || r->second > 4096)
            throw UsageError("train: --vocab-span wants A-B with 1 <= A <= B <= 4096, e.g. 4-40");
        o.mix.vocab_min_span = o.copy_mix.vocab_min_span = r->first;
        o.mix.vocab_max_span = o.copy_mix.vocab_max_span = r->second;
    }
    o.mix.vocab_gap = o.copy_mix.vocab_gap = args.integer("--vocab-gap", o.mix.vocab_gap, 0, 4096);
    o.mix.vocab_repeats = o.copy_mix.vocab_repeats = args.integer("--vocab-repeats", 2, 2, 64);
    o.mix.vocab_prefix = o.copy_mix.vocab_prefix = args.integer("--vocab-prefix", 0, 0, 4096);
    if (auto pool = args.text("--vocab-pool")) read_vocab_pool(*pool, o);
    o.copy_mix.vocab = args.real("--copy-vocab", 0);
    o.score_predictable_only = args.has("--score-copies-only");
    o.mix.vocab_partial = o.copy_mix.vocab_partial = args.has("--vocab-partial");
    if (o.mix.vocab_partial && o.mix.vocab_min_span < 2)
        throw UsageError("train: --vocab-partial needs spans of at least 2 ids (--vocab-span 2-B or longer)");
    if (!(o.copy_mix.vocab >= 0 && o.copy_mix.vocab <= 1)) throw UsageError("train: --copy-vocab must be in [0, 1]");
}

// --save-at N[,N...]: steps between 1 and steps - 1.
std::vector<int64_t> read_save_at(const CliArgs& args, int64_t steps) {
    std::vector<int64_t> save_at;
    if (auto list = args.text("--save-at")) {
        std::string item;
        for (size_t i = 0; i <= list->size(); ++i) {
            if (i < list->size() && (*list)[i] != ',') {
                item += (*list)[i];
                continue;
            }
            char* end = nullptr;
            const long long n = std::strtoll(item.c_str(), &end, 10);
            if (item.empty() || *end != '\0' || n < 1 || n >= steps)
                throw UsageError("train: --save-at wants step numbers between 1 and --steps - 1, comma-separated "
                                 "(got \"" + item + "\")");
            save_at.push_back(n);
            item.clear();
        }
    }
    return save_at;
}

const char* const k_llama_only[] = {"--n-kv-head", "--head-dim", "--intermediate", "--rope-theta",
                                    "--sliding-window", "--sliding-layers"};

// --sliding-layers N[,N...]: the layer indices that slide, each below n_layer.
std::vector<int64_t> read_sliding_layers(const std::string& list, int64_t n_layer) {
    std::vector<int64_t> layers;
    size_t start = 0;
    while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        const std::string item = list.substr(start, comma - start);
        long il = -1;
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), il);
        if (item.empty() || ec != std::errc() || end != item.data() + item.size() || il < 0 || il >= n_layer)
            throw UsageError("train: --sliding-layers wants layer numbers between 0 and --n-layer - 1, comma-separated "
                             "(got \"" + item + "\")");
        layers.push_back(il);
        start = comma + 1;
    }
    return layers;
}

// --family and its shape into the config; what the trainer cannot train is check_trainable's to refuse.
void read_family(const CliArgs& args, ModelConfig& c) {
    const std::string family = args.text("--family").value_or("gpt2");
    if (family != "gpt2" && family != "llama" && family != "qwen3" && family != "mistral")
        throw UsageError("train: --family wants gpt2, llama, qwen3 or mistral (got \"" + family + "\")");
    if (args.has("--tied") && args.has("--untied")) throw UsageError("train: give --tied or --untied, not both");
    c.tie_word_embeddings = !args.has("--untied");
    if (family == "gpt2") {
        std::string given;
        for (const char* flag : k_llama_only)
            if (args.has(flag)) given += (given.empty() ? "" : ", ") + std::string(flag);
        if (!given.empty()) throw UsageError("train: " + given + " need --family llama, qwen3 or mistral");
        return;
    }
    c.family = Family::Llama;
    c.model_type = family;
    c.activation = Activation::Silu;
    c.layer_norm_epsilon = 1e-6;  // rms_norm_eps of LlamaConfig, Qwen3Config and MistralConfig
    c.qkv_bias = false;
    c.qk_norm = family == "qwen3";
    c.n_kv_head = args.integer("--n-kv-head", c.n_head, 1, 4096);
    c.explicit_head_dim = args.integer("--head-dim", c.n_embd / c.n_head, 1, 4096);
    c.n_inner = args.integer("--intermediate", 4 * c.n_embd, 1, 1 << 20);
    c.rope.theta = args.real("--rope-theta", 10000.0);
    if (!(c.rope.theta > 1)) throw UsageError("train: --rope-theta must be > 1");
    if (args.has("--sliding-layers") && !args.has("--sliding-window"))
        throw UsageError("train: --sliding-layers needs --sliding-window");
    if (!args.has("--sliding-window")) return;
    const int64_t window = args.integer("--sliding-window", 0, 1, 1 << 20);
    c.layer_window.assign(size_t(c.n_layer), args.has("--sliding-layers") ? 0 : window);
    if (auto list = args.text("--sliding-layers"))
        for (int64_t il : read_sliding_layers(*list, c.n_layer)) c.layer_window[size_t(il)] = window;
}

// Span switches, the embeddings' learning rates and the model's shape.
void read_model_shape(const CliArgs& args, TrainOptions& o) {
    o.mix.distinct = args.has("--distinct");
    o.copy_mix.distinct = args.has("--copy-distinct");
    o.mix.span_newline = !args.has("--no-span-newline");
    o.attn_only = args.integer("--attn-only", 0, 0, 10'000'000);
    o.tok_lr = args.real("--tok-lr", 1);
    o.pos_lr = args.real("--pos-lr", 1);
    if (!(o.tok_lr >= 0 && o.tok_lr <= 100 && o.pos_lr >= 0 && o.pos_lr <= 100))
        throw UsageError("train: --tok-lr and --pos-lr must be in [0, 100]");
    o.emb_decay = !args.has("--no-emb-decay");
    if (auto dir = args.text("--init-from")) {
        for (const char* shape : {"--n-layer", "--n-head", "--n-embd", "--n-positions", "--family", "--n-kv-head",
                                  "--head-dim", "--intermediate", "--rope-theta", "--sliding-window",
                                  "--sliding-layers", "--tied", "--untied"})
            if (args.has(shape))
                throw UsageError(std::string("train: ") + shape + " with --init-from: the shape comes from " + *dir +
                                 "/config.json");
        o.config = load_config((std::filesystem::path(*dir) / "config.json").string());
        if (o.seq_len > o.config.n_ctx) throw UsageError("train: --seq must be <= the model's context length");
        check_trainable(o.config);
        check_init(o.config, o.init);
        return;
    }
    o.config.n_layer = args.integer("--n-layer", 2, 1, 64);
    o.config.n_head = args.integer("--n-head", 4, 1, 64);
    o.config.n_embd = args.integer("--n-embd", 128, 1, 4096);
    o.config.n_ctx = args.integer("--n-positions", 256, 2, 8192);
    o.config.n_inner = 4 * o.config.n_embd;
    if (o.config.n_embd % o.config.n_head && !args.has("--head-dim"))
        throw UsageError("train: --n-embd must be a multiple of --n-head");
    read_family(args, o.config);
    if (o.seq_len > o.config.n_ctx) throw UsageError("train: --seq must be <= --n-positions");
    ModelConfig probe = o.config;  // n_vocab comes with the tokenizer; refused shapes before any folder is made
    probe.n_vocab = 2;
    check_trainable(probe);
    check_init(probe, o.init);
}

// Where training writes: --out, the --save-at folders beside it, the loss chart.
struct TrainOutputs {
    std::string out, out_base, tok_dir;
    std::vector<int64_t> save_at;
    int64_t log_every = 50, checkpoint_every = 0;
    PlotOutput loss_out;
};

// Refuse unusable outputs before minutes of training, not after (core/io/output_path.h).
// --loss-png may go inside --out: the folder is made first, and removed again if the PNG is refused.
TrainOutputs prepare_outputs(const CliArgs& args, std::vector<int64_t> save_at) {
    TrainOutputs w;
    w.save_at = std::move(save_at);
    w.log_every = args.integer("--log-every", 50, 1, 10'000'000);
    w.checkpoint_every = args.integer("--checkpoint-every", 0, 0, 10'000'000);
    w.out = args.text("--out").value_or("trained-model");
    w.tok_dir = args.text("--tokenizer").value_or(args.text("--init-from").value_or(default_model_dir()));
    const bool out_existed = std::filesystem::exists(w.out);
    if (args.has("--save-prefix") && w.save_at.empty())
        throw UsageError("--save-prefix names the --save-at folders: give --save-at too");
    w.out_base = args.text("--save-prefix").value_or(w.out);  // "runs/x/" saves "runs/x-step300", not "runs/x/-step300"
    while (w.out_base.size() > 1 && w.out_base.back() == '/') w.out_base.pop_back();
    const bool force = args.has("--force");
    for (int64_t step : w.save_at) {
        const std::string dir = w.out_base + "-step" + std::to_string(step);
        force ? force_output_folder("--save-at", dir) : check_output_folder("--save-at", dir);
    }
    force ? force_output_folder("--out", w.out) : make_output_folder("--out", w.out);
    if (args.has("--scale") && !args.has("--loss-png"))
        throw UsageError("--scale sets the size of the --loss-png chart: give --loss-png FILE");
    if (auto png = args.text("--loss-png")) {
        try {
            w.loss_out = check_chart_output(args, "--loss-png", *png);
        } catch (const UsageError&) {
            if (!out_existed) remove_written_tree(w.out);
            throw;
        }
    }
    return w;
}

// Trains with a progress line on stderr (redrawn on a terminal, one every --log-every steps otherwise),
// writing --out every --checkpoint-every steps and the --save-at folders as their steps pass.
TrainResult train_with_progress(const TrainOptions& o, const Tokenizer& tokenizer, const ModelConfig& config,
                                const TrainOutputs& w) {
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    std::fprintf(stderr, "train: %lld parameters, %lld steps x %lld x %lld tokens, seed %llu -> %s\n",
                 (long long)n_params(config), (long long)o.steps, (long long)o.batch, (long long)o.seq_len,
                 (unsigned long long)o.seed, w.out.c_str());
    double last_draw = -1;
    TrainResult result = train(o, tokenizer, [&](const TrainProgress& p) {
        const double tps = double(p.tokens) / std::max(1e-9, p.seconds);
        const double eta = p.seconds / double(p.step) * double(p.n_steps - p.step);
        const bool line = !tty && (p.step % w.log_every == 0 || p.step == p.n_steps || p.step == 1);
        if (line || (tty && (p.seconds - last_draw >= 0.2 || p.step == p.n_steps))) {
            last_draw = p.seconds;
            std::fprintf(stderr, "%sstep %lld/%lld  loss %.4f  lr %.2e  |g| %.3f  %.0f tok/s  elapsed %s  ETA %s%s",
                         tty ? "\r\033[K" : "", (long long)p.step, (long long)p.n_steps, p.loss, p.lr, p.grad_norm,
                         tps, duration(p.seconds).c_str(), duration(eta).c_str(), tty ? "" : "\n");
            std::fflush(stderr);
        }
        if (w.checkpoint_every > 0 && p.step % w.checkpoint_every == 0 && p.step < p.n_steps)
            save_model(w.out, config, *p.params, w.tok_dir);
        if (std::find(w.save_at.begin(), w.save_at.end(), p.step) != w.save_at.end())
            save_model(w.out_base + "-step" + std::to_string(p.step), config, *p.params, w.tok_dir);
    });
    if (tty) std::fputc('\n', stderr);
    return result;
}

// The per-step loss and its 50-step moving average.
void write_loss_chart(const std::string& path, const std::vector<double>& losses, const PlotOutput& out) {
    LineSeries raw{"loss per step", {158, 202, 225}, {}, {}}, smooth{"50-step average", {33, 102, 172}, {}, {}};
    double window_sum = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
        raw.xs.push_back(double(i + 1));
        raw.ys.push_back(losses[i]);
        window_sum += losses[i] - (i >= 50 ? losses[i - 50] : 0.0);
        smooth.xs.push_back(double(i + 1));
        smooth.ys.push_back(window_sum / double(std::min<size_t>(i + 1, 50)));
    }
    write_line_charts(path, {LineChart{"kvscope train: cross-entropy loss", "step", "loss (nats)", {raw, smooth}}},
                      out, 900, 520);
}

}  // namespace

int cli_train(int argc, char** argv) {
    CliArgs args("train", "Train a small GPT-2 (or Llama, Qwen3, Mistral: --family) on kvscope's generated corpus "
                          "(grammar sentences, copied spans, repeated random letter/digit spans) and write a model "
                          "folder.");
    add_run_options(args);
    add_family_options(args);
    add_data_and_init_options(args);
    add_output_options(args);
    if (!args.parse(argc, argv)) return 0;

    apply_threads(args);
    TrainOptions o;
    read_schedule_and_init(args, o);
    read_curriculum(args, o);
    std::vector<int64_t> save_at = read_save_at(args, o.steps);
    read_model_shape(args, o);
    const TrainOutputs w = prepare_outputs(args, std::move(save_at));

    const Tokenizer tokenizer = Tokenizer::load(w.tok_dir);
    ModelConfig config = o.config;
    if (auto dir = args.text("--init-from")) {
        if (config.n_vocab != tokenizer.n_vocab())
            throw UsageError("train: " + *dir + " has " + std::to_string(config.n_vocab) + " token rows, the tokenizer " +
                             std::to_string(tokenizer.n_vocab()) + " ids");
        o.start_params = load_params(*dir, config);
    }
    config.n_vocab = tokenizer.n_vocab();
    const TrainResult result = train_with_progress(o, tokenizer, config, w);
    save_model(w.out, config, result.params, w.tok_dir);
    double tail = 0;
    const size_t n_tail = std::min<size_t>(50, result.losses.size());
    for (size_t i = result.losses.size() - n_tail; i < result.losses.size(); ++i) tail += result.losses[i];
    std::fprintf(stderr, "train: done in %s; mean loss of the last %zu steps %.4f; wrote %s\n",
                 duration(result.seconds).c_str(), n_tail, tail / double(n_tail), w.out.c_str());
    if (auto png = args.text("--loss-png")) write_loss_chart(*png, result.losses, w.loss_out);
    return 0;
}

}  // namespace kvscope
