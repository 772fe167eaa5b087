#include "lib/checkpoint/checkpoint.h"

#include <fstream>  // std::ofstream, std::ifstream

#include <torch/torch.h>

#include "lib/run/run_dir.h"
#include "lib/util/error.h"
#include "tests/catch.h"
#include "tests/temp_dir.h"

using fp8t::test::TempDir;
using fp8t::checkpoint::Checkpoint;
using fp8t::checkpoint::load_checkpoint;
using fp8t::checkpoint::save_checkpoint;

namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

Checkpoint sample() {
  torch::manual_seed(5);
  Checkpoint ck;
  ck.tensors["model.w"] = torch::randn({16, 8});
  ck.tensors["model.b"] = torch::randn({8}).to(torch::kBFloat16);
  ck.tensors["optim.w.step"] = torch::full({}, 42.0);
  ck.tensors["data.cursor"] = torch::arange(5, torch::kInt64) * (int64_t{1} << 40);
  ck.tensors["rng"] = torch::tensor({int64_t{-1}, int64_t{9007199254740993}});  // 2^53 + 1
  ck.tensors["fp8.amax_history"] = torch::rand({4, 16}, torch::kFloat64);
  ck.meta = {{"step", 120},
             {"config", {{"lr", 3e-3}, {"name", "run-ü"}}},
             {"losses", {4.1, 3.9}},
             {"done", false}};
  return ck;
}

void require_equal(const Checkpoint& a, const Checkpoint& b) {
  REQUIRE(a.meta == b.meta);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (const auto& [k, t] : a.tensors) {
    INFO("tensor " << k);
    REQUIRE(b.tensors.count(k) == 1);
    const at::Tensor& u = b.tensors.at(k);
    REQUIRE(u.scalar_type() == t.scalar_type());
    REQUIRE(u.sizes() == t.sizes());
    REQUIRE(u.device().is_cpu());
    REQUIRE(torch::equal(u, t.cpu()));  // bit-exact values
  }
}

void require_error(const std::function<void()>& f, fp8t::ExitCode code, const std::string& text) {
  try {
    f();
    FAIL("no throw");
  } catch (const fp8t::Error& e) {
    REQUIRE(e.code() == code);
    REQUIRE_THAT(std::string(e.what()), FP8T_CONTAINS(text));
  }
}

}  // namespace

TEST_CASE("checkpoint round trip is bit-exact for tensors and metadata", "[checkpoint]") {
  TempDir dir("ckpt");
  const Checkpoint ck = sample();
  save_checkpoint(dir / "checkpoint.pt", ck);
  require_equal(ck, load_checkpoint(dir / "checkpoint.pt"));
  // Only the file itself remains: no temporary files.
  REQUIRE(TempDir::list(dir.path()) == std::vector<std::string>{"checkpoint.pt"});
}

TEST_CASE("checkpoint stores views compactly and detached", "[checkpoint]") {
  TempDir dir("ckpt_views");
  const at::Tensor big = torch::randn({1000, 64});
  Checkpoint ck;
  ck.tensors["row"] = big.slice(0, 10, 11);  // a view into a 256 kB storage
  ck.tensors["t"] = big.slice(0, 0, 4).t();   // non-contiguous
  ck.tensors["grad"] = torch::ones({3}, torch::requires_grad());
  save_checkpoint(dir / "c.pt", ck);
  REQUIRE(std::filesystem::file_size(dir / "c.pt") < 64 * 1024);
  const Checkpoint back = load_checkpoint(dir / "c.pt");
  REQUIRE(torch::equal(back.tensors.at("row"), big.slice(0, 10, 11)));
  REQUIRE(torch::equal(back.tensors.at("t"), big.slice(0, 0, 4).t()));
  REQUIRE_FALSE(back.tensors.at("grad").requires_grad());
}

TEST_CASE("a failed checkpoint write leaves the previous checkpoint intact", "[checkpoint]") {
  TempDir dir("ckpt_atomic");
  const auto path = dir / "checkpoint.pt";
  const Checkpoint first = sample();
  save_checkpoint(path, first);
  const std::string before = read_all(path);

  // A write that dies halfway (e.g. the process is killed or the disk fills): simulated by a
  // writer that writes part of a file and throws.
  REQUIRE_THROWS(fp8t::run::write_file_atomic(path, [](const std::filesystem::path& tmp) {
    std::ofstream(tmp, std::ios::binary) << "partial";
    throw std::runtime_error("disk full");
  }));
  REQUIRE(read_all(path) == before);
  REQUIRE(TempDir::list(dir.path()) == std::vector<std::string>{"checkpoint.pt"});

  // A target that cannot be replaced (a folder is in the way): the save fails, naming the
  // path, and leaves no temporary file behind.
  std::filesystem::create_directories(dir / "blocked.pt" / "inside");
  require_error([&] { save_checkpoint(dir / "blocked.pt", first); }, fp8t::ExitCode::kFailure,
                "blocked.pt");
  REQUIRE(TempDir::list(dir.path()) == std::vector<std::string>{"blocked.pt", "checkpoint.pt"});

  // A successful save replaces the file as a whole.
  Checkpoint second = sample();
  second.meta["step"] = 240;
  second.tensors["model.w"] = second.tensors["model.w"] * 2;
  save_checkpoint(path, second);
  require_equal(second, load_checkpoint(path));
  // Which older checkpoints are kept is the trainer's policy (train.keep_checkpoints), not the format's.
  REQUIRE(TempDir::list(dir.path()) == std::vector<std::string>{"blocked.pt", "checkpoint.pt"});
}

TEST_CASE("a checkpoint with any byte changed is a corrupt-checkpoint error", "[checkpoint]") {
  TempDir dir("ckpt_crc");
  const auto path = dir / "checkpoint.pt";
  save_checkpoint(path, sample());
  const std::string good = read_all(path);
  // Bytes at the start (zip header), inside the tensor data, in the middle and in the trailer.
  for (size_t pos : {size_t{0}, good.size() / 3, good.size() / 2, good.size() - 30, good.size() - 8}) {
    INFO("flipped byte at " << pos << " of " << good.size());
    std::string bad = good;
    bad[pos] = static_cast<char>(bad[pos] ^ 0x01);
    write_all(dir / "bad.pt", bad);
    require_error([&] { load_checkpoint(dir / "bad.pt"); }, fp8t::ExitCode::kBadInput, "corrupt checkpoint");
  }
  // Bit rot in the tensor payload itself: flip one bit of a float of model.w.
  const at::Tensor w = sample().tensors.at("model.w");
  const std::string w_bytes(static_cast<const char*>(w.data_ptr()), 16);
  const size_t at_w = good.find(w_bytes);
  REQUIRE(at_w != std::string::npos);
  std::string rot = good;
  rot[at_w + 5] = static_cast<char>(rot[at_w + 5] ^ 0x40);
  write_all(dir / "rot.pt", rot);
  require_error([&] { load_checkpoint(dir / "rot.pt"); }, fp8t::ExitCode::kBadInput, "checksum mismatch");
  // Without its trailer (or with bytes appended) the file is corrupt too.
  write_all(dir / "cut.pt", good.substr(0, good.size() - 24));
  require_error([&] { load_checkpoint(dir / "cut.pt"); }, fp8t::ExitCode::kBadInput, "trailer is missing");
  write_all(dir / "long.pt", good + "x");
  require_error([&] { load_checkpoint(dir / "long.pt"); }, fp8t::ExitCode::kBadInput, "corrupt checkpoint");

  // The message names the newest earlier checkpoint the folder keeps and how to continue from it.
  write_all(path, rot);
  require_error([&] { load_checkpoint(path); }, fp8t::ExitCode::kBadInput, "corrupt checkpoint");
  save_checkpoint(dir / "checkpoint.step-3.pt", sample());
  save_checkpoint(dir / "checkpoint.step-7.pt", sample());
  require_error([&] { load_checkpoint(path); }, fp8t::ExitCode::kBadInput, "--resume-from 7");
  require_error([&] { load_checkpoint(path); }, fp8t::ExitCode::kBadInput, "steps 3, 7");
  // A damaged kept checkpoint points to the others, not to itself.
  write_all(dir / "checkpoint.step-7.pt", rot);
  require_error([&] { load_checkpoint(dir / "checkpoint.step-7.pt"); }, fp8t::ExitCode::kBadInput, "--resume-from 3");
}

TEST_CASE("loading a missing, corrupt or foreign checkpoint is a bad-input error", "[checkpoint]") {
  TempDir dir("ckpt_bad");
  require_error([&] { load_checkpoint(dir / "nope.pt"); }, fp8t::ExitCode::kBadInput, "nope.pt");

  write_all(dir / "garbage.pt", "this is not a checkpoint at all");
  require_error([&] { load_checkpoint(dir / "garbage.pt"); }, fp8t::ExitCode::kBadInput,
                "garbage.pt");

  save_checkpoint(dir / "good.pt", sample());
  const std::string good = read_all(dir / "good.pt");
  write_all(dir / "truncated.pt", good.substr(0, good.size() / 2));
  require_error([&] { load_checkpoint(dir / "truncated.pt"); }, fp8t::ExitCode::kBadInput,
                "truncated.pt");

  // A valid torch.save-style file that is not an fp8train checkpoint.
  const std::vector<char> foreign = torch::pickle_save(torch::ones({2}));
  write_all(dir / "foreign.pt", std::string(foreign.begin(), foreign.end()));
  require_error([&] { load_checkpoint(dir / "foreign.pt"); }, fp8t::ExitCode::kBadInput,
                "not an fp8train checkpoint");

  require_error([&] { load_checkpoint(dir.path()); }, fp8t::ExitCode::kBadInput,
                "not a regular file");
}
