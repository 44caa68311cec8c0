// kvscope chat: a multi-turn conversation in one KV cache. Each user message is rendered with the model's
// own chat template, only the text the new turn adds is encoded and appended to the session
// (Session::append_turn) — or, when the template re-rendered earlier turns, the cache is rolled back to the
// longest common token prefix and the rest prefilled (Session::append_turn with keep) — and the reply is decoded
// until a stop token. What each turn does is core's ChatConversation (chat_conversation.h), which the
// window's chat uses too.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include "base/errors.h"
#include "commands.h"
#include "common.h"
#include "io/json_write.h"
#include "io/read_file.h"
#include "run/chat_conversation.h"
#include "run/session.h"

namespace kvscope {
namespace {

constexpr const char* k_chat_model_hint =
    "tools/make_llama_model.py --shape smollm2-135m DIR writes a larger one with random weights and a ChatML template";

// Where the user messages come from: a file read and checked whole before the first turn runs (a bad line
// 2 is refused before turn 1 prints), or stdin line by line (a person can type).
class TurnSource {
public:
    explicit TurnSource(const std::string& path)
        : name_(path == "-" ? "stdin" : path), parser_(name_, is_jsonl(path)), from_stdin_(path == "-") {
        if (from_stdin_) return;
        const std::string text = read_file_bounded(path, k_text_file, "give a text file, one user message per line, or - for stdin");
        messages_ = parse_chat_turns(text, name_, is_jsonl(path));
        if (std::none_of(messages_.begin(), messages_.end(), [](const ChatMessage& m) { return m.role == "user"; }))
            no_user_message();
    }
    [[noreturn]] void no_user_message() const { throw UsageError(name_ + " holds no user message: give one per line"); }
    const std::string& name() const { return name_; }

    // The next message, or nullopt at the end. Empty lines are skipped.
    std::optional<ChatMessage> next() {
        if (!from_stdin_) return next_ < messages_.size() ? std::optional<ChatMessage>(messages_[next_++]) : std::nullopt;
        std::string line;
        while (read_line_bounded(std::cin, name_, k_text_file, stdin_bytes_, line))
            if (std::optional<ChatMessage> m = parser_.line(std::move(line))) return m;
        if (std::cin.bad()) throw LoadError(name_, "reading failed");
        return std::nullopt;
    }

private:
    static bool is_jsonl(const std::string& path) {
        return path.size() > 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
    }
    std::string name_;
    ChatTurnParser parser_;
    bool from_stdin_;
    std::vector<ChatMessage> messages_;  // a file's, all checked
    size_t next_ = 0;
    uint64_t stdin_bytes_ = 0;
};

struct TurnReport {
    int64_t turn = 0;
    std::string message;               // the user's text, as given
    int64_t first_position = 0, n_appended = 0;
    std::vector<TokenId> appended;     // the rendered turn's tokens the cache took (after any rollback)
    int64_t rows_reused = 0;           // earlier positions the turn's first prefill step read from the cache
    int64_t rolled_back_from = -1;     // a rollback: the conversation's length before it (-1: none)
    int64_t rows_computed = 0;         // rows its prefill steps ran (cache off: every position, each step)
    double prefill_seconds = 0, decode_seconds = 0;
    int64_t decode_tokens = 0;
    std::vector<TokenId> reply;        // as sampled, the end-of-turn token included
    std::string reply_text;            // without the end-of-turn token
    const char* stop = "";             // "end_of_turn" | "end_of_text" | "max_new_tokens" | "context"
    int64_t positions = 0;             // the conversation's tokens so far, the reply's last included
    bool cache = true;
    double decode_tokens_per_s() const { return decode_seconds > 0 ? double(decode_tokens) / decode_seconds : 0.0; }
};

// Prefill the appended turn, decode the reply until the session says Done, and count what it cost.
// --max-new-tokens is a cap (Session::append_turn): a reply shorter than it that no token ended ran into
// the model's context.
TurnReport run_turn(Session& session, const Tokenizer& tok, TokenId end_of_turn_id, int64_t max_new) {
    TurnReport r;
    r.first_position = session.parts().turns.back().first_position;
    r.n_appended = session.parts().turns.back().n_appended();
    r.cache = session.options().use_cache;
    bool first_step = true;
    while (session.next() != Session::Next::Done) {
        const bool prefill = session.next() == Session::Next::Prefill;
        const StepRecord& step = session.step();
        if (prefill) {
            if (first_step) r.rows_reused = step.cost.n_rows_reused;
            r.rows_computed += step.cost.n_rows_computed;
            r.prefill_seconds += step.cost.seconds;
        } else {
            r.decode_seconds += step.cost.seconds;
            ++r.decode_tokens;
        }
        first_step = false;
    }
    r.reply = session.parts().generated;
    std::vector<TokenId> shown = r.reply;
    r.stop = !stopped_by_token(session)          ? (int64_t(r.reply.size()) < max_new ? "context" : "max_new_tokens")
             : r.reply.back() == end_of_turn_id ? "end_of_turn"
                                                : "end_of_text";
    if (stopped_by_token(session)) shown.pop_back();
    r.reply_text = tok.decode(shown);
    r.positions = int64_t(session.parts().prompt.size() + session.parts().generated.size());
    return r;
}

void print_json(const TurnReport& r) {
    JsonOut out;
    out["turn"] = r.turn;
    out["role"] = "user";
    put_text(out, "message", r.message);
    out["first_position"] = r.first_position;
    out["tokens_appended"] = r.n_appended;
    out["appended_ids"] = r.appended;
    out["rows_reused"] = r.rows_reused;
    out["rows_computed"] = r.rows_computed;
    if (r.rolled_back_from >= 0) out["rolled_back_from"] = r.rolled_back_from;
    out["cache"] = r.cache;
    out["prefill_s"] = r.prefill_seconds;
    out["decode_tokens"] = r.decode_tokens;
    out["decode_tokens_per_s"] = r.decode_tokens_per_s();
    out["reply_ids"] = r.reply;
    put_text(out, "reply", r.reply_text);
    out["stop"] = r.stop;
    out["positions"] = r.positions;
    std::printf("%s\n", json_text(out).c_str());
}

// The reply on stdout (its real bytes), what the turn cost on stderr.
void print_text(const TurnReport& r) {
    const std::string line = r.reply_text + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    const std::string why = std::string(r.stop) == "max_new_tokens" ? "stopped at --max-new-tokens"
                            : std::string(r.stop) == "end_of_turn"  ? "stopped at the end of turn"
                            : std::string(r.stop) == "end_of_text"  ? "stopped at the end of text"
                                                                    : "stopped at the model's context (" +
                                                                          std::to_string(r.positions) + " positions)";
    if (r.rolled_back_from >= 0)
        std::fprintf(stderr, "turn %lld: the template re-rendered earlier turns: cache rolled back from %lld to %lld positions (the common token prefix)\n",
                     (long long)r.turn, (long long)r.rolled_back_from, (long long)r.first_position);
    std::fprintf(stderr, "turn %lld: %s appended, %lld rows reused, %lld computed, prefill %.3f s, decode %.1f tokens/s, %s\n",
                 (long long)r.turn, count_of(r.n_appended, "token", "tokens").c_str(), (long long)r.rows_reused,
                 (long long)r.rows_computed, r.prefill_seconds, r.decode_tokens_per_s(), why.c_str());
}

}  // namespace

int cli_chat(int argc, char** argv) {
    CliArgs args("chat", "A multi-turn chat in one KV cache: each user message is rendered with the model's chat "
                         "template and appended to the cache; only its tokens are computed, then the reply is "
                         "decoded until the end of the turn.");
    add_model_option(args, std::string("model folder (or GGUF file) with tokenizer files and a chat template (default: "
                                       "assets/chat, a small model trained to answer from earlier turns); ") +
                               k_chat_model_hint);
    args.option("--turns", "FILE|-", "user messages, one per line (- = stdin, the default); a FILE ending in .jsonl "
                                     "holds one {\"role\": \"user\", \"content\": \"...\"} per line (a \"system\" "
                                     "message may come first)")
        .option("--system", "TEXT", "a system message before the first user message");
    add_options(args, kCliChat, OptionSection::Run,
                {{"max_new_tokens", "most tokens per reply (default 128): a cap, a reply also stops where the model's context ends"},
                 {"no_cache", "recompute the whole conversation at every step (the cost of not reusing the cache)"},
                 {"prefill_chunk", "prefill each turn C tokens per step (default: the whole turn at once)"},
                 {"block_size", "paged KV cache of B-position blocks"}});
    add_options(args, kCliChat, OptionSection::Sampling, {{"seed", "random seed for sampling (default 0)"}})
        .flag("--json", "print one JSON object per turn instead of the replies' text");
    add_options(args, kCliChat, OptionSection::KvFormat);
    add_options(args, kCliChat, OptionSection::Eviction);
    add_threads_option(args);
    args.option("--date", "YYYY-MM-DD", "the date the template's strftime_now() formats (default: today)");
    args.epilogue("The model folder needs tokenizer files and a chat template (chat_template.jinja, or tokenizer_config.json's "
                  "chat_template) that kvscope's Jinja engine renders (check one with `kvscope chat-template`). Replies "
                  "end at the template's end-of-turn token, generation_config.json's eos_token_id, the tokenizer's end of "
                  "text, or --max-new-tokens.");
    if (!args.parse(argc, argv)) return 0;

    RunOptions run;
    SessionOptions& options = run.session;
    options.history = false;  // nothing is stepped back; keep one record, not the whole trace
    options.record = false;
    options.max_new_tokens = 128;
    check_options(run, read_options(args, kCliChat, run));
    const int64_t max_new = options.max_new_tokens;
    TurnSource source(args.text("--turns").value_or("-"));
    apply_threads(args);

    // The default model (assets/default) has no chat template: chat opens the trained chat model instead.
    auto model = Model::load(args.text("--model").value_or(chat_model_dir()), weight_format_from(args),
                             weight_placement_from(args));
    ChatConversation chat = ChatConversation::open(model);
    const jinja::RenderOptions date = parse_template_date(args.text("--date"), "chat");
    chat.chat_template_mut().set_date(date.year, date.month, date.day);
    options.stop_tokens = chat.stop_tokens();
    Session session(model, options);

    if (auto system = args.text("--system")) chat.add_system(*system);
    int64_t turn = 0;
    while (std::optional<ChatMessage> message = source.next()) {
        if (message->role == "system") {  // the first line of a .jsonl (TurnSource checks)
            if (args.has("--system")) throw UsageError(source.name() + " starts with a system message and --system is given too: keep one");
            chat.add_system(message->content);
            continue;
        }
        std::vector<TokenId> conversation = session.parts().prompt;
        conversation.insert(conversation.end(), session.parts().generated.begin(), session.parts().generated.end());
        const std::vector<TokenId> reply = turn > 0 ? session.parts().generated : std::vector<TokenId>{};
        const ChatTurn next = chat.next_turn(*message, conversation, reply);
        chat.add(*message, reply);
        session.append_turn(next.ids, max_new, "user", next.keep);

        TurnReport r = run_turn(session, *model->tokenizer(), chat.end_of_turn(), max_new);
        r.turn = turn + 1;  // numbered from 1, as the window's timeline and conversation
        r.message = message->content;
        r.appended = next.ids;
        if (next.rolled_back) r.rolled_back_from = int64_t(conversation.size());
        if (args.has("--json")) print_json(r);
        else print_text(r);
        std::fflush(stdout);
        ++turn;
    }
    if (turn == 0) source.no_user_message();
    return 0;
}

}  // namespace kvscope
