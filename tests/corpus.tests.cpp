// The training corpus's text repeats and chat segments (core/text/corpus.h), and fine-tuning's start weights
// (load_params). The chats are parsed back from decoded text here, with their own rules, not the generator's.
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "base/errors.h"
#include "text/corpus.h"
#include "text/tokenizer.h"
#include "train/train.h"
#include "scratch_dir.h"

using namespace kvscope;

namespace {

std::string asset(const std::string& name) { return std::string(KVSCOPE_ASSETS_DIR) + "/" + name; }

std::string test_dir(const std::string& name) {
    auto p = kvscope::test::scratch_root() / "corpus" / name;
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
    return p.string();
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, sep);) out.push_back(item);
    return out;
}

// "s s s" -> true when the line is 1-4 copies of s joined by spaces
bool copies_of(const std::string& line, const std::string& s) {
    std::string joined = s;
    for (int k = 1; k <= 4; ++k, joined += " " + s)
        if (line == joined) return true;
    return false;
}

}  // namespace

TEST_CASE("corpus: text_repeat brings back sentences said earlier in the same sequence") {
    const Tokenizer tok = Tokenizer::load(asset("default"));
    CorpusMix mix{.text = 1, .copy = 0};
    const std::vector<TokenId> plain = Corpus(tok, 5, mix).sequence(3, 0, 300);
    mix.text_repeat = 0;
    CHECK(Corpus(tok, 5, mix).sequence(3, 0, 300) == plain);  // off: no extra draws, the same bytes
    mix.text_repeat = 0.4;
    CHECK(Corpus(tok, 5, mix).sequence(3, 0, 300) != plain);

    // Always repeating: the first sentence is the only one, every paragraph is 1-4 copies of it.
    mix.text_repeat = 1;
    for (int i = 0; i < 5; ++i) {
        const std::vector<std::string> lines = split(tok.decode(Corpus(tok, 5, mix).sequence(3, i, 300)), '\n');
        REQUIRE(lines.size() >= 3);
        // the first sentence: the shortest prefix of line 1 that line 1 and line 2 are copies of
        std::string first;
        for (size_t end = 1; end <= lines[0].size() && first.empty(); ++end)
            if ((end == lines[0].size() || lines[0][end] == ' ') && copies_of(lines[0], lines[0].substr(0, end)) &&
                copies_of(lines[1], lines[0].substr(0, end)))
                first = lines[0].substr(0, end);
        REQUIRE_FALSE(first.empty());
        for (size_t l = 0; l + 1 < lines.size(); ++l) CHECK(copies_of(lines[l], first));  // the last line is cut
    }

    // Sometimes repeating: some sentence of a sequence comes back, which independent draws almost never do.
    auto has_repeat = [&](double p) {
        mix.text_repeat = p;
        int n = 0;
        for (int i = 0; i < 20; ++i) {
            const std::string text = tok.decode(Corpus(tok, 7, mix).sequence(0, i, 256));
            std::vector<std::string> sentences;
            for (const std::string& line : split(text, '\n'))
                for (const std::string& s : split(line, '.')) sentences.push_back(s.substr(s.find_first_not_of(' ') == std::string::npos ? 0 : s.find_first_not_of(' ')));
            sentences.pop_back();  // cut by the sequence's end
            bool twice = false;
            for (size_t a = 0; a < sentences.size() && !twice; ++a)
                for (size_t b = a + 1; b < sentences.size() && !twice; ++b)
                    twice = sentences[a].size() > 12 && sentences[a] == sentences[b];
            n += twice;
        }
        return n;
    };
    CHECK(has_repeat(0.3) >= 15);
    CHECK(has_repeat(0) <= 3);
}

TEST_CASE("corpus: chat segments answer each question with the first turn's fact, and score only the assistant") {
    const Tokenizer tok = Tokenizer::load(asset("chat"));
    const TokenId im_start = tok.encode_continuation("<|im_start|>", true).at(0);
    const TokenId im_end = tok.encode_continuation("<|im_end|>", true).at(0);
    CorpusMix mix{.text = 0, .copy = 0};
    mix.chat = 1;
    const Corpus corpus(tok, 11, mix);
    const std::regex chat_re("<\\|im_start\\|>user\\n([^<]*)<\\|im_end\\|>\\n<\\|im_start\\|>assistant\\n"
                             "(OK\\.|I see\\.|Got it\\.|Nice\\.)<\\|im_end\\|>\\n"
                             "((?:<\\|im_start\\|>user\\n[^<]*<\\|im_end\\|>\\n<\\|im_start\\|>assistant\\n[^<]*<\\|im_end\\|>\\n)+)");
    const std::regex turn_re("<\\|im_start\\|>user\\n([^<]*)<\\|im_end\\|>\\n<\\|im_start\\|>assistant\\n([^<]*)<\\|im_end\\|>\\n");
    const std::regex has_re("([A-Z][a-z]+) has a ([a-z]+) ([a-z]+)\\."), where_re("([A-Z][a-z]+) is ([a-z ]+)\\.");
    const std::vector<std::string>&names = ChatWorld::names(), &things = ChatWorld::things(), &places = ChatWorld::places();
    auto index = [](const std::vector<std::string>& v, const std::string& s) {
        return size_t(std::find(v.begin(), v.end(), s) - v.begin());
    };
    int chats = 0, answers = 0, facts = 0;
    for (int i = 0; i < 30; ++i) {
        std::vector<uint8_t> flags;
        const std::vector<TokenId> seq = corpus.sequence(2, i, 256, &flags);
        const std::string text = tok.decode(seq);
        for (std::sregex_iterator m(text.begin(), text.end(), chat_re), e; m != e; ++m, ++chats) {
            std::vector<std::string> stated;
            const std::string first = (*m)[1];
            for (std::sregex_iterator f(first.begin(), first.end(), has_re); f != e; ++f, ++facts) {
                stated.push_back((*f)[0]);
                CHECK_FALSE(ChatWorld::held_out_thing(index(names, (*f)[1]), index(things, (*f)[3])));
            }
            for (std::sregex_iterator f(first.begin(), first.end(), where_re); f != e; ++f, ++facts) {
                stated.push_back((*f)[0]);
                CHECK_FALSE(ChatWorld::held_out_place(index(names, (*f)[1]), index(places, (*f)[2])));
            }
            const std::string rest = (*m)[3];
            for (std::sregex_iterator t(rest.begin(), rest.end(), turn_re); t != e; ++t) {
                const std::string q = (*t)[1], a = (*t)[2];
                std::smatch who;
                if (std::regex_match(q, who, std::regex("What does ([A-Z][a-z]+) have\\?")) ||
                    std::regex_match(q, who, std::regex("Where is ([A-Z][a-z]+)\\?"))) {
                    ++answers;
                    std::string expected;  // the first turn's sentence about that name, of the asked kind
                    for (const std::string& s : stated)
                        if (s.rfind(who[1].str() + (q[0] == 'W' && q[1] == 'h' && q[2] == 'a' ? " has " : " is "), 0) == 0)
                            expected = s;
                    CHECK(a == expected);
                } else {
                    CHECK((a == "OK." || a == "I see." || a == "Got it." || a == "Nice."));  // small talk
                }
            }
        }
        // flags: 0 exactly on the text of user messages (not their markers, role or newline)
        enum { Outside, Role, UserText } state = Outside;
        std::string role;
        for (size_t k = 0; k < seq.size(); ++k) {
            CHECK(int(flags[k]) == (state == UserText && seq[k] != im_end ? 0 : 1));
            const std::string piece = tok.decode({seq[k]});
            if (seq[k] == im_start) state = Role, role.clear();
            else if (seq[k] == im_end) state = Outside;
            else if (state == Role && piece == "\n") state = role == "user" ? UserText : Outside;
            else if (state == Role) role += piece;
        }
    }
    CHECK(chats >= 20);
    CHECK(answers >= 20);
    CHECK(facts >= 2 * chats);

    const Tokenizer plain = Tokenizer::load(asset("default"));
    CHECK_THROWS_AS(Corpus(plain, 1, mix), UsageError);  // no <|im_start|>: refused by name
}

TEST_CASE("load_params: a saved model's weights come back; a missing or reshaped tensor is refused") {
    ModelConfig c;
    c.n_vocab = 768, c.n_ctx = 32, c.n_embd = 16, c.n_head = 2, c.n_layer = 1, c.n_inner = 64;
    const std::vector<float> params = init_params(c, 3);
    const std::string dir = test_dir("saved");
    save_model(dir, c, params, "");
    CHECK(load_params(dir, c) == params);
    ModelConfig wider = c;
    wider.n_inner = 32;
    CHECK_THROWS_AS(load_params(dir, wider), LoadError);
    ModelConfig deeper = c;
    deeper.n_layer = 2;
    CHECK_THROWS_AS(load_params(dir, deeper), LoadError);
}
