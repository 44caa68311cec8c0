// Ownership (core/io/ownership.h): kvscope replaces or removes a file only when its ledger proves kvscope
// wrote those very bytes. Names prove nothing; a changed byte, a grown file or a symlink is not kvscope's.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <unistd.h>

#include "base/errors.h"
#include "io/atomic_file.h"
#include "io/npy.h"
#include "io/output_path.h"
#include "io/ownership.h"
#include "scratch_dir.h"

using namespace kvscope;
using namespace kvscope::test;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

fs::path fresh_dir(const std::string& name) { return test::fresh_dir("ownership", name); }

// Every test keeps its user ledger in its own folder, never in the home of whoever runs the tests.
struct UserLedger {
    fs::path dir;
    explicit UserLedger(const std::string& name) : dir(fresh_dir(name + "_state")) {
        ::setenv("XDG_STATE_HOME", dir.c_str(), 1);
    }
    fs::path file() const { return dir / "kvscope" / "written-files.tsv"; }
};

}  // namespace

TEST_CASE("a file's proof is its size and the hash of its bytes, read in pieces or from memory alike", "[ownership]") {
    const fs::path dir = fresh_dir("proof");
    // Sizes around the 32-byte stripe and the 1 MiB chunk the hash reads a file in.
    for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(1) << 20, (size_t(1) << 20) + 5,
                     (size_t(3) << 20) - 1}) {
        std::string bytes(n, '\0');
        for (size_t i = 0; i < n; ++i) bytes[i] = char((i * 131 + 7) % 251);
        write_bytes(dir / "f", bytes);
        const auto on_disk = file_proof((dir / "f").string());
        REQUIRE(on_disk);
        CHECK(on_disk->size == n);
        CHECK(*on_disk == proof_of_bytes(bytes.data(), n));
        if (n == 0) continue;
        for (size_t at : {size_t(0), n / 2, n - 1}) {  // any one changed byte changes the proof
            std::string changed = bytes;
            changed[at] = char(changed[at] ^ 0x01);
            CHECK_FALSE(proof_of_bytes(changed.data(), n) == *on_disk);
        }
    }
    CHECK_FALSE(file_proof((dir / "missing").string()));
    CHECK_FALSE(file_proof(dir.string()));  // a folder has no proof
    fs::create_symlink(dir / "f", dir / "link");
    CHECK_FALSE(file_proof((dir / "link").string()));  // nor a symlink: it is not what kvscope writes
}

TEST_CASE("kvscope replaces a file it wrote, and never one it did not", "[ownership]") {
    const UserLedger ledger("replace");
    const fs::path dir = fresh_dir("replace");
    const std::string mine = (dir / "logits.npy").string(), theirs = (dir / "data.npy").string();
    const float v[2] = {1, 2};
    write_npy_f32(mine, {2}, v);
    CHECK(kvscope_wrote(mine));
    CHECK(fs::exists(ledger.file()));  // outside a kvscope folder the proof goes to the user's ledger
    CHECK_NOTHROW(check_output_file("--dump-logits", mine, OutputKind::Npy));
    write_npy_f32(mine, {1}, v);  // replaced: its new bytes are proven in turn
    CHECK(kvscope_wrote(mine));

    // A .npy of the user's, with exactly the bytes kvscope would write, was not written by kvscope.
    const std::string npy = read_bytes(mine);
    write_bytes(theirs, npy);
    CHECK_FALSE(kvscope_wrote(theirs));
    CHECK_THAT([&] { try { check_output_file("--dump-logits", theirs, OutputKind::Npy); } catch (const UsageError& e) { return std::string(e.what()); } return std::string(); }(),
               Contains("did not write"));
    // Even a writer that skipped the check leaves it as it was.
    CHECK_THROWS_AS(write_npy_f32(theirs, {2}, v), LoadError);
    CHECK(read_bytes(theirs) == npy);

    // The user edits kvscope's file: one byte, or one byte more. It is theirs now.
    std::string edited = npy;
    edited.back() = char(edited.back() ^ 0x40);
    write_bytes(mine, edited);
    CHECK_FALSE(kvscope_wrote(mine));
    CHECK_THROWS_AS(write_npy_f32(mine, {2}, v), LoadError);
    CHECK(read_bytes(mine) == edited);
    write_bytes(mine, npy + "x");
    CHECK_FALSE(kvscope_wrote(mine));

    // A symlink in kvscope's place is never replaced, nor followed.
    write_npy_f32(mine + "2", {2}, v);
    fs::remove(mine + "2");
    fs::create_symlink(theirs, mine + "2");
    CHECK_FALSE(kvscope_wrote(mine + "2"));
    CHECK_THROWS_AS(write_npy_f32(mine + "2", {2}, v), LoadError);
    CHECK(fs::is_symlink(mine + "2"));
    CHECK(read_bytes(theirs) == npy);
}

TEST_CASE("a folder is kvscope's by its manifest, file by file, and not by the names in it", "[ownership]") {
    const UserLedger ledger("folders");
    const fs::path dir = fresh_dir("folders");
    // Names kvscope writes, made by someone else: refused, and every byte stays.
    const fs::path prof = dir / "prof";
    fs::create_directories(prof / "step_0007");
    write_bytes(prof / "trace.json", "{}");
    write_bytes(prof / "step_0007" / "mine.txt", "precious");
    CHECK_THROWS_WITH(check_output_folder("--trace", prof.string()), Contains("did not write"));
    CHECK_THROWS_AS(make_output_folder("--trace", prof.string()), UsageError);
    CHECK_FALSE(has_manifest(prof.string()));
    CHECK(read_bytes(prof / "step_0007" / "mine.txt") == "precious");
    // Only empty sub-folders: nothing to lose, but still not kvscope's.
    fs::create_directories(dir / "empties" / "step_0001");
    CHECK_THROWS_AS(check_output_folder("--trace", (dir / "empties").string()), UsageError);

    // A folder kvscope makes carries a manifest; what kvscope writes in it (sub-folders too) is proven there.
    const fs::path t = dir / "t";
    make_output_folder("--trace", t.string());
    REQUIRE(has_manifest(t.string()));
    fs::create_directories(t / "step_0000");
    write_file_atomic((t / "trace.json").string(), std::string("{}\n"));
    write_file_atomic((t / "step_0000" / "meta.json").string(), std::string("{\"a\": 1}\n"));
    CHECK(kvscope_wrote((t / "step_0000" / "meta.json").string()));
    CHECK(read_bytes(ledger.file()).find("meta.json") == std::string::npos);  // the folder's manifest has it
    CHECK(foreign_entries(t.string()).empty());
    CHECK_NOTHROW(make_output_folder("--trace", t.string()));  // used again

    // A file the user adds to kvscope's folder makes the folder refused until it is moved out.
    write_bytes(t / "step_0000" / "notes.txt", "mine");
    CHECK(foreign_entries(t.string()) == std::vector<std::string>{"step_0000/notes.txt"});
    CHECK_THROWS_WITH(check_output_folder("--trace", t.string()), Contains("step_0000/notes.txt"));
    // remove_written_tree removes what kvscope wrote and leaves the rest, with the folders that hold it.
    const std::vector<std::string> left = remove_written_tree((t / "step_0000").string());
    CHECK(left == std::vector<std::string>{(t / "step_0000" / "notes.txt").string()});
    CHECK_FALSE(fs::exists(t / "step_0000" / "meta.json"));
    CHECK(read_bytes(t / "step_0000" / "notes.txt") == "mine");
    fs::remove(t / "step_0000" / "notes.txt");
    CHECK(remove_written_tree((t / "step_0000").string()).empty());
    CHECK_FALSE(fs::exists(t / "step_0000"));

    // A manifest file's name alone is no manifest.
    const fs::path fake = dir / "fake";
    fs::create_directories(fake);
    write_bytes(fake / manifest_name, "hello\n");
    write_bytes(fake / "config.json", "{}");
    CHECK_FALSE(has_manifest(fake.string()));
    CHECK_THROWS_AS(check_output_folder("--out", fake.string()), UsageError);
}

TEST_CASE("train --force: an adopted folder is kvscope's as it is", "[ownership]") {
    const UserLedger ledger("adopt");
    const fs::path dir = fresh_dir("adopt") / "model";
    fs::create_directories(dir);
    write_bytes(dir / "config.json", "{\"n_layer\": 1}");
    CHECK_THROWS_AS(make_output_folder("--out", dir.string()), UsageError);
    force_output_folder("--out", dir.string());
    CHECK(has_manifest(dir.string()));
    CHECK(kvscope_wrote((dir / "config.json").string()));
    CHECK_NOTHROW(write_file_atomic((dir / "config.json").string(), std::string("{}")));
}

TEST_CASE("the user's ledger stays bounded and keeps the newest proofs", "[ownership]") {
    const UserLedger ledger("bounded");
    const fs::path dir = fresh_dir("bounded");
    const std::string first = (dir / "first.bin").string();
    write_file_atomic(first, std::string("first"));
    CHECK(kvscope_wrote(first));
    // 4 MiB of proofs at ~120 bytes a line: ~35,000 lines. Recorded directly (no file needed).
    const std::string pad(80, 'p');
    for (int i = 0; i < 40'000; ++i) record_written((dir / (pad + std::to_string(i))).string(), FileProof{1, uint64_t(i)});
    CHECK(fs::file_size(ledger.file()) <= (4u << 20));
    CHECK_FALSE(kvscope_wrote(first));  // the oldest proof was dropped: its file is refused, never lost
    const std::string last = (dir / "last.bin").string();
    write_file_atomic(last, std::string("last"));
    CHECK(kvscope_wrote(last));
}
