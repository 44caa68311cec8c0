// llama.cpp's side of tools/llama_cpp_check.sh: greedy decoding of one prompt with llama.cpp's own
// library, printing the ids and writing the logits each token was chosen from. The script compiles it
// against a llama.cpp build OUTSIDE kvscope (kvscope never links llama.cpp); it is not part of kvscope's build.
//
//   llama_logits MODEL.gguf (--prompt-ids 1,2,3 | --prompt TEXT) [--n N] [--follow 4,5,6] [--threads T]
//                [--kv f32|f16] [--logits OUT.npy]
//
// stdout: one JSON line {"prompt_ids": [...], "ids": [...], "n_vocab": V}; prompt text is tokenized as
// llama-cli does (the model's BOS when the file asks for one, special tokens as plain text).
// ids[j] is the greedy choice (the first index of the largest logit) of row j. OUT.npy: float32 [N, V], row j
// the logits token j was chosen from (row 0: the prompt's last position), what kvscope's generate
// --dump-logits writes. --follow feeds the given tokens (another program's greedy ids) after the prompt
// instead of llama.cpp's own choices, so every row sees the same context as the other program's row j;
// up to the first j where ids[j] differs from them, this is llama.cpp's own greedy run, computed alike.
// --kv sets the K and V cache type (default f32: kvscope's cache holds float32; llama.cpp's default is f16).
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static void quiet(ggml_log_level level, const char* text, void*) {
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static void write_npy(const char* path, const std::vector<float>& data, size_t rows, size_t cols) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                         std::to_string(cols) + "), }";
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    FILE* f = fopen(path, "wb");
    if (!f) { fprintf(stderr, "llama_logits: cannot write %s\n", path); exit(1); }
    const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    const unsigned short n = (unsigned short)header.size();
    fwrite(magic, 1, 8, f);
    fwrite(&n, 2, 1, f);  // little-endian on the x86-64 / arm64 machines this runs on
    fwrite(header.data(), 1, header.size(), f);
    fwrite(data.data(), sizeof(float), data.size(), f);
    fclose(f);
}

static int argmax(const float* v, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i) if (v[i] > v[best]) best = i;
    return best;
}

int main(int argc, char** argv) {
    const char* usage = "usage: llama_logits MODEL.gguf (--prompt-ids 1,2,3 | --prompt TEXT) [--n N] [--follow 4,5,6] "
                        "[--threads T] [--kv f32|f16] [--logits OUT.npy]\n";
    if (argc < 2) { fputs(usage, stderr); return 2; }
    std::string model_path = argv[1], prompt, logits_path, kv = "f32";
    std::vector<llama_token> ids, follow;
    bool have_ids = false, have_text = false;
    int n_new = 16, threads = 2;
    for (int i = 2; i < argc; ++i) {
        std::string a = argv[i];
        if (i + 1 >= argc) { fputs(usage, stderr); return 2; }
        std::string v = argv[++i];
        if (a == "--prompt-ids" || a == "--follow") {
            have_ids = have_ids || a == "--prompt-ids";
            std::vector<llama_token>& list = a == "--follow" ? follow : ids;
            for (char* p = v.data(); *p;) {
                char* end = nullptr;
                const long id = strtol(p, &end, 10);
                if (end == p) { fputs(usage, stderr); return 2; }
                list.push_back((llama_token)id);
                p = *end == ',' ? end + 1 : end;
            }
        } else if (a == "--prompt") { have_text = true; prompt = v; }
        else if (a == "--n") n_new = atoi(v.c_str());
        else if (a == "--threads") threads = atoi(v.c_str());
        else if (a == "--kv") kv = v;
        else if (a == "--logits") logits_path = v;
        else { fputs(usage, stderr); return 2; }
    }
    if (have_ids == have_text || n_new < 1 || (!follow.empty() && (int)follow.size() < n_new - 1) || (kv != "f32" && kv != "f16")) { fputs(usage, stderr); return 2; }

    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) { fprintf(stderr, "llama_logits: llama.cpp could not load %s\n", model_path.c_str()); return 1; }
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    if (have_text) {
        ids.resize(prompt.size() + 8);
        int n = llama_tokenize(vocab, prompt.data(), (int32_t)prompt.size(), ids.data(), (int32_t)ids.size(),
                               /*add_special*/ true, /*parse_special*/ false);
        if (n < 0) { fprintf(stderr, "llama_logits: tokenize failed\n"); return 1; }
        ids.resize(n);
    }
    if (ids.empty()) { fputs("llama_logits: empty prompt\n", stderr); return 2; }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)(ids.size() + n_new);
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = cp.type_v = kv == "f32" ? GGML_TYPE_F32 : GGML_TYPE_F16;
    cp.no_perf = true;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) { fputs("llama_logits: could not make a context\n", stderr); return 1; }

    // pass 1: the prompt in one batch (logits of its last position); then one token per decode
    std::vector<float> logits;
    std::vector<llama_token> out;
    std::vector<llama_token> next = ids;
    for (int step = 0; step < n_new; ++step) {
        if (llama_decode(ctx, llama_batch_get_one(next.data(), (int32_t)next.size())) != 0) {
            fprintf(stderr, "llama_logits: llama_decode failed at step %d\n", step);
            return 1;
        }
        const float* row = llama_get_logits_ith(ctx, -1);
        logits.insert(logits.end(), row, row + n_vocab);
        out.push_back(argmax(row, n_vocab));
        if (step + 1 < n_new) next.assign(1, follow.empty() ? out.back() : follow[step]);
    }
    if (!logits_path.empty()) write_npy(logits_path.c_str(), logits, out.size(), (size_t)n_vocab);

    printf("{\"prompt_ids\": [");
    for (size_t i = 0; i < ids.size(); ++i) printf("%s%d", i ? ", " : "", ids[i]);
    printf("], \"ids\": [");
    for (size_t i = 0; i < out.size(); ++i) printf("%s%d", i ? ", " : "", out[i]);
    printf("], \"n_vocab\": %d}\n", n_vocab);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
