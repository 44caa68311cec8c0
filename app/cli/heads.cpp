// kvscope heads: the previous-token and induction score of every attention head (core/analysis/heads.h).
#include <cmath>
#include <cstdio>

#include "analysis/heads.h"
#include "base/errors.h"
#include "args.h"
#include "commands.h"
#include "common.h"
#include "io/json_write.h"

namespace kvscope {

int cli_heads(int argc, char** argv) {
    CliArgs args("heads", "Score every attention head: previous-token (attention to the position just before, "
                          "on grammar text) and induction (on a random letter/digit span repeated once, attention "
                          "from a token's second occurrence to the token after its first).");
    add_model_option(args);
    add_threads_option(args);
    add_option(args, "seed", "seed of the probe prompts (default 7)");
    args.option("--prompts", "N", "probe prompts of each kind, averaged (default 4)");
    add_prompt_options(args);
    args.flag("--json", "print {\"heads\": [{\"layer\", \"head\", \"previous_token\", \"induction\"}, ...]}");
    args.epilogue("With --prompt or --prompt-ids the probes are yours instead: previous-token on each prompt, "
                  "induction on it repeated once, averaged over the prompts given (token ids need no tokenizer files).");
    if (!args.parse(argc, argv)) return 0;
    apply_threads(args);
    const bool own_prompts = args.has("--prompt") || args.has("--prompt-ids");
    if (own_prompts && (args.has("--seed") || args.has("--prompts")))
        throw UsageError(std::string(args.has("--seed") ? "--seed" : "--prompts") +
                         " shapes the generated probe prompts; with --prompt or --prompt-ids leave it out");
    HeadProbeOptions o;
    o.seed = uint64_t(option_integer(args, "seed", 7));
    o.n_prompts = args.integer("--prompts", 4, 1, 1000);
    auto model = load_model_from(args);
    if (own_prompts) o.prompts = prompts_from(args, *model, /*allow_special=*/false);
    else if (!model->tokenizer())  // the model is fine; the probes are text: a refused request, like --prompt TEXT
        throw UsageError("heads: the probe prompts are text and " + model->dir() +
                         " has no tokenizer files (tokenizer.json, or vocab.json and merges.txt): give token ids "
                         "with --prompt-ids");
    const std::vector<HeadScore> scores = head_scores(model, o);
    if (args.has("--json")) {
        // Scores print to 4 decimals: they are averages over a few prompts, more digits would be noise.
        auto rounded = [](double x) { return std::round(x * 1e4) / 1e4; };
        JsonOut heads = JsonOut::array();
        for (const HeadScore& h : scores)
            heads.push_back({{"layer", h.layer},
                             {"head", h.head},
                             {"previous_token", rounded(h.previous_token)},
                             {"induction", rounded(h.induction)}});
        std::printf("%s\n", json_text({{"heads", heads}}, 2).c_str());
        return 0;
    }
    std::printf("layer  head  previous_token  induction\n");
    for (const HeadScore& s : scores)
        std::printf("%5lld  %4lld  %14.3f  %9.3f\n", (long long)s.layer, (long long)s.head, s.previous_token, s.induction);
    return 0;
}

}  // namespace kvscope
