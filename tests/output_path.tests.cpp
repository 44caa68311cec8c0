// The one rule for outputs (core/io/output_path.h): the output is created, its parent folder must exist;
// an existing file is replaced only when kvscope wrote it and it is the kind kvscope writes there; an
// existing folder is written into only when empty or kvscope's; one run's outputs never overlap. Every
// refusal is a UsageError naming the option and path.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "base/errors.h"
#include "io/npy.h"
#include "io/output_path.h"
#include "io/ownership.h"
#include "run/prompt_cache.h"
#include "scratch_dir.h"

using namespace kvscope;
using namespace kvscope::test;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

fs::path fresh_dir(const std::string& name) {
    const fs::path dir = test::fresh_dir("output_path", name);
    ::setenv("XDG_STATE_HOME", (dir / "state").c_str(), 1);  // this test's own ledger of written files
    return dir;
}

// The message of the UsageError f throws ("" when it throws none).
template <class F> std::string refusal(F f) {
    try {
        f();
    } catch (const UsageError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("a file output needs its folder, and replaces only its own kind of file", "[output_path]") {
    const fs::path dir = fresh_dir("files");
    const std::string missing = (dir / "no_such" / "x.npy").string();
    const std::string msg = refusal([&] { check_output_file("--dump-logits", missing, OutputKind::Npy); });
    CHECK_THAT(msg, Contains("--dump-logits"));
    CHECK_THAT(msg, Contains(missing));
    CHECK_FALSE(fs::exists(dir / "no_such"));  // nothing was created

    CHECK(refusal([&] { check_output_file("--x", (dir / "new.npy").string(), OutputKind::Npy); }).empty());
    CHECK_THAT(refusal([&] { check_output_file("--x", dir.string(), OutputKind::Npy); }), Contains("folder"));
    CHECK_THAT(refusal([&] { check_output_file("--x", "", OutputKind::Any); }), Contains("empty"));

    // An existing file kvscope did not write is left alone, whatever its kind; one kvscope wrote is replaced.
    std::ofstream(dir / "notes.txt") << "my notes";
    for (OutputKind kind : {OutputKind::Npy, OutputKind::Png, OutputKind::Json, OutputKind::Any})
        CHECK_THAT(refusal([&] { check_output_file("--x", (dir / "notes.txt").string(), kind); }),
                   Contains("notes.txt"));
    const float v = 1;
    write_npy_f32((dir / "old.npy").string(), {1}, &v);
    CHECK(refusal([&] { check_output_file("--x", (dir / "old.npy").string(), OutputKind::Npy); }).empty());
    CHECK_FALSE(refusal([&] { check_output_file("--x", (dir / "old.npy").string(), OutputKind::Png); }).empty());
    std::ofstream(dir / "dump.json") << "\n  {\"a\": 1}";  // a JSON document of the user's
    CHECK_THAT(refusal([&] { check_output_file("--x", (dir / "dump.json").string(), OutputKind::Json); }),
               Contains("did not write"));
    // A prompt cache proves itself by its magic, whoever copied it there.
    std::ofstream(dir / "p.kvprompt", std::ios::binary).write(prompt_cache_magic, 8);
    CHECK(refusal([&] { check_output_file("--x", (dir / "p.kvprompt").string(), OutputKind::PromptCache); }).empty());
}

TEST_CASE("a folder output is created in an existing folder, and used only when empty or kvscope's", "[output_path]") {
    const fs::path dir = fresh_dir("folders");
    const std::string deep = (dir / "a" / "b").string();
    CHECK_THAT(refusal([&] { make_output_folder("--trace", deep); }), Contains("--trace"));
    CHECK_FALSE(fs::exists(dir / "a"));  // the folders above are never created

    make_output_folder("--trace", (dir / "t").string());
    CHECK(fs::is_directory(dir / "t"));
    CHECK(has_manifest((dir / "t").string()));
    make_output_folder("--trace", (dir / "t").string());  // kvscope's and holding nothing else: usable again
    fs::create_directories(dir / "t" / "step_0000");      // an unfinished trace is kvscope's
    CHECK(refusal([&] { check_output_folder("--trace", (dir / "t").string()); }).empty());

    fs::create_directories(dir / "mine");
    std::ofstream(dir / "mine" / "thesis.tex") << "x";
    const std::string msg = refusal([&] { check_output_folder("--trace", (dir / "mine").string()); });
    CHECK_THAT(msg, Contains((dir / "mine").string()));
    CHECK_THAT(msg, Contains("thesis.tex"));
    std::ofstream(dir / "mine" / "trace.json") << "{}";  // a name kvscope writes proves nothing
    CHECK_THAT(refusal([&] { check_output_folder("--trace", (dir / "mine").string()); }), Contains("did not write"));
    fs::create_directories(dir / "f" / "figures");  // nor does a folder named like the window's
    std::ofstream(dir / "f" / "figures" / "a.png") << "x";
    CHECK_FALSE(refusal([&] { check_output_folder("--trace", (dir / "f").string()); }).empty());

    std::ofstream(dir / "file") << "x";
    CHECK_THAT(refusal([&] { check_output_folder("--out", (dir / "file").string()); }), Contains("a file is in the way"));
}

TEST_CASE("one run's outputs are checked against each other", "[output_path]") {
    const fs::path dir = fresh_dir("together");
    const std::string x = (dir / "x").string();
    {
        OutputSet o;
        o.add_file("--dump-logits", x, OutputKind::Npy);
        CHECK_THAT(refusal([&] { o.add_file("--prompt-cache", x, OutputKind::PromptCache); }),
                   Contains("--dump-logits and --prompt-cache"));
    }
    {
        OutputSet o;  // the same path spelled another way
        o.add_folder("--trace", (dir / "t").string());
        CHECK_FALSE(refusal([&] { o.add_file("--dump-logits", (dir / "." / "t").string(), OutputKind::Npy); }).empty());
        CHECK_THAT(refusal([&] { o.add_file("--dump-logits", (dir / "t" / "l.npy").string(), OutputKind::Npy); }),
                   Contains("inside --trace"));
        CHECK(refusal([&] { o.add_file("--dump-logits", (dir / "tt.npy").string(), OutputKind::Npy); }).empty());
    }
}
