// The one rule for outputs (core/output_path.h): the output is created, its parent folder must exist;
// an existing file is replaced only when it is the kind kvscope writes; an existing folder is written
// into only when empty or already kvscope's. Every refusal is a UsageError naming the option and path.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "errors.h"
#include "npy.h"
#include "output_path.h"

using namespace kvscope;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

fs::path fresh_dir(const std::string& name) {
    const fs::path dir = fs::path(KVSCOPE_TEST_WORK) / "output_path" / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
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

    // An existing file of another kind is left alone; one kvscope wrote is replaced.
    std::ofstream(dir / "notes.txt") << "my notes";
    for (OutputKind kind : {OutputKind::Npy, OutputKind::Png, OutputKind::Json})
        CHECK_THAT(refusal([&] { check_output_file("--x", (dir / "notes.txt").string(), kind); }),
                   Contains("notes.txt"));
    CHECK(refusal([&] { check_output_file("--x", (dir / "notes.txt").string(), OutputKind::Any); }).empty());
    const float v = 1;
    write_npy_f32((dir / "old.npy").string(), {1}, &v);
    CHECK(refusal([&] { check_output_file("--x", (dir / "old.npy").string(), OutputKind::Npy); }).empty());
    CHECK_FALSE(refusal([&] { check_output_file("--x", (dir / "old.npy").string(), OutputKind::Png); }).empty());
    std::ofstream(dir / "dump.json") << "\n  {\"a\": 1}";
    CHECK(refusal([&] { check_output_file("--x", (dir / "dump.json").string(), OutputKind::Json); }).empty());
}

TEST_CASE("a folder output is created in an existing folder, and used only when empty or kvscope's", "[output_path]") {
    const fs::path dir = fresh_dir("folders");
    const std::string deep = (dir / "a" / "b").string();
    CHECK_THAT(refusal([&] { make_output_folder("--trace", deep, "trace.json"); }), Contains("--trace"));
    CHECK_FALSE(fs::exists(dir / "a"));  // the folders above are never created

    make_output_folder("--trace", (dir / "t").string(), "trace.json");
    CHECK(fs::is_directory(dir / "t"));
    make_output_folder("--trace", (dir / "t").string(), "trace.json");  // empty: usable again
    fs::create_directories(dir / "t" / "step_0000");                     // an unfinished trace is ours
    CHECK(refusal([&] { check_output_folder("--trace", (dir / "t").string(), "trace.json"); }).empty());
    fs::create_directories(dir / "f" / "figures");  // the window's Save figure folder is ours too
    CHECK(refusal([&] { check_output_folder("--trace", (dir / "f").string(), "trace.json"); }).empty());
    std::ofstream(dir / "f" / "figures.txt") << "x";  // a file of a similar name is not
    CHECK_THAT(refusal([&] { check_output_folder("--trace", (dir / "f").string(), "trace.json"); }), Contains("figures.txt"));

    fs::create_directories(dir / "mine");
    std::ofstream(dir / "mine" / "thesis.tex") << "x";
    const std::string msg = refusal([&] { check_output_folder("--trace", (dir / "mine").string(), "trace.json"); });
    CHECK_THAT(msg, Contains((dir / "mine").string()));
    CHECK_THAT(msg, Contains("thesis.tex"));
    std::ofstream(dir / "mine" / "trace.json") << "{}";  // a trace with notes beside it is still a trace
    CHECK(refusal([&] { check_output_folder("--trace", (dir / "mine").string(), "trace.json"); }).empty());

    std::ofstream(dir / "file") << "x";
    CHECK_THAT(refusal([&] { check_output_folder("--out", (dir / "file").string(), "config.json"); }),
               Contains("a file is in the way"));
}
