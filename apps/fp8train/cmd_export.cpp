// `fp8train export --run DIR --out FILE`: a run's FP32 master weights as a safetensors file,
// in fp8train's names or Hugging Face's (lib/model/hf_layout.h, with a config.json beside it).
#include <spdlog/spdlog.h>  // spdlog::info
#include <torch/torch.h>    // torch::NoGradGuard

#include <filesystem>  // std::filesystem
#include <map>         // std::map
#include <memory>      // std::shared_ptr
#include <string>      // std::string

#include "apps/fp8train/commands.h"  // add_export_command
#include "lib/config/loader.h"       // config::load
#include "lib/model/model.h"         // model::build
#include "lib/model/hf_layout.h"     // to_hf_names, hf_config_json
#include "lib/model/safetensors.h"   // write_safetensors
#include "lib/checkpoint/checkpoint.h"  // load_checkpoint
#include "lib/run/run_dir.h"         // run::RunDir, write_file_atomic, write_text_atomic, remove_stale_temporaries
#include "lib/train/train_checkpoint.h"  // train::checkpoint_model_tensors
#include "lib/util/error.h"          // FP8T_INPUT_CHECK

namespace fs = std::filesystem;

namespace fp8t {
namespace app {

namespace {

struct ExportArgs {
  std::string run_dir;
  std::string out;
  std::string names = "fp8train";
  std::string dtype = "fp32";
  std::string dump_logits;
  bool overwrite = false;
};

// Checks a file export will write (before anything is read or written): a file name (not a
// folder) in an existing folder, within NAME_MAX, none of the run folder's own files (not even
// with --overwrite), and no existing file unless --overwrite. Removes the temporary files that a
// killed export of the same path left.
void check_output(const std::string& flag, const fs::path& out, const run::RunDir& run, bool overwrite) {
  std::error_code ec;
  const std::string shown = out.string();
  FP8T_INPUT_CHECK(!fs::is_directory(out, ec) && out.has_filename(), flag, " ", shown,
                   " is a folder; name the file to write in it (e.g. ", (out / "model.safetensors").string(), ")");
  FP8T_INPUT_CHECK(fs::is_directory(out.parent_path(), ec), flag, " ", shown, ": the folder ",
                   out.parent_path().string(), " does not exist");
  FP8T_INPUT_CHECK(out.filename().string().size() <= 255, flag, " ", shown, ": the file name is ",
                   out.filename().string().size(), " bytes long; a file name has at most 255");
  const bool in_run = fs::equivalent(out.parent_path(), run.path(), ec);
  FP8T_INPUT_CHECK(!(in_run && run::RunDir::is_managed_name(out.filename().string())), flag, " ", shown,
                   " is a file of the run folder itself; export writes its copy elsewhere (even with --overwrite)");
  for (const fs::directory_entry& entry : fs::directory_iterator(run.path(), ec)) {
    const std::string name = entry.path().filename().string();
    FP8T_INPUT_CHECK(!(run::RunDir::is_managed_name(name) && fs::equivalent(out, entry.path(), ec)), flag, " ",
                     shown, " is the run folder's ", name, " under another name; export writes its copy elsewhere");
  }
  FP8T_INPUT_CHECK(overwrite || !fs::exists(fs::symlink_status(out, ec)), flag, " ", shown,
                   " exists; add --overwrite to replace it, or choose another name");
  for (const std::string& name : run::remove_stale_temporaries(out)) {
    spdlog::info("removed {}, left by an export that was stopped", (out.parent_path() / name).string());
  }
}

// Writes a safetensors file atomically (a temporary file renamed over `path`).
void write_safetensors_atomic(const fs::path& path, const model::NamedTensors& tensors,
                              const std::map<std::string, std::string>& meta = {}) {
  run::write_file_atomic(path, [&](const fs::path& tmp) { model::write_safetensors(tmp, tensors, meta); });
}

// --dump-logits: fp8train's FP32 logits for fixed tokens (t * 7 + 3) % vocab, t < seq_len, with
// the tokens, as a safetensors file, so tests can compare another framework's logits.
void dump_logits(const ModelSection& cfg, const model::NamedTensors& weights, const fs::path& path) {
  ModelSection plain = cfg;
  plain.init_from.clear();
  const std::shared_ptr<model::Model> net = model::build(plain);
  std::map<std::string, at::Tensor> by_name(weights.begin(), weights.end());
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : net->unique_named_parameters()) {
    const auto it = by_name.find(name);
    FP8T_INPUT_CHECK(it != by_name.end() && it->second.sizes() == p.sizes(), "the checkpoint has no parameter '",
                     name, "' of shape ", p.sizes());
    p.copy_(it->second);
  }
  net->eval();
  const at::Tensor tokens = (torch::arange(cfg.seq_len, at::kLong) * 7 + 3).remainder(cfg.vocab_size).view({1, -1});
  write_safetensors_atomic(path, {{"tokens", tokens}, {"logits", net->forward(tokens)}});
  spdlog::info("wrote {} (logits of {} tokens)", path.string(), cfg.seq_len);
}

void run_export(const ExportArgs& a) {
  FP8T_INPUT_CHECK(a.names == "fp8train" || a.names == "hf", "--names: expected fp8train or hf, got '", a.names, "'");
  FP8T_INPUT_CHECK(a.dtype == "fp32" || a.dtype == "bf16", "--dtype: expected fp32 or bf16, got '", a.dtype, "'");
  fs::path run = fs::absolute(a.run_dir).lexically_normal();
  if (!run.has_filename()) run = run.parent_path();  // "runs/x/"
  FP8T_INPUT_CHECK(fs::is_directory(run), "--run ", a.run_dir, " is not a folder");
  const run::RunDir dir = run::RunDir::locate(run.parent_path().string(), run.filename().string());
  FP8T_INPUT_CHECK(fs::is_regular_file(dir.config_path()), "--run ", a.run_dir, " is not a run folder (no config.yaml)");
  const ExperimentConfig cfg = config::load(dir.config_path().string()).config;
  if (a.names == "hf") model::hf_family(cfg.model);  // a model without HF counterpart fails before the checkpoint is read
  FP8T_INPUT_CHECK(!a.out.empty(), "--out must name the safetensors file to write");
  const fs::path out = fs::absolute(a.out);
  check_output("--out", out, dir, a.overwrite);
  if (a.names == "hf") check_output("--names hf (config.json beside --out):", out.parent_path() / "config.json", dir,
                                    a.overwrite);
  if (!a.dump_logits.empty()) check_output("--dump-logits", fs::absolute(a.dump_logits), dir, a.overwrite);

  const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(dir.checkpoint_path());
  // By fp8train name; a ZeRO-3 run's from its shard files.
  const model::NamedTensors params = train::checkpoint_model_tensors(ck, dir.checkpoint_path().parent_path());
  FP8T_INPUT_CHECK(!params.empty(), "the checkpoint ", dir.checkpoint_path().string(), " holds no model parameters");
  model::NamedTensors tensors = a.names == "hf" ? model::to_hf_names(cfg.model, params) : params;
  if (a.dtype == "bf16") {
    for (auto& [name, t] : tensors) t = t.to(at::kBFloat16);
  }
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"fp8train_names", a.names}, {"fp8train_step", ck.meta.value("step", nlohmann::json(0)).dump()}};
  write_safetensors_atomic(out, tensors, meta);
  spdlog::info("exported step {} of {} to {} ({} tensors, {} names, {})", ck.meta.value("step", nlohmann::json(0)).dump(),
               dir.path().string(), out.string(), tensors.size(), a.names, a.dtype);
  if (a.names == "hf") {
    const fs::path json = out.parent_path() / "config.json";
    const std::string dtype = a.dtype == "bf16" ? "bfloat16" : "float32";
    run::write_text_atomic(json, model::hf_config_json(cfg.model, dtype).dump(2) + "\n");
    spdlog::info("wrote {}", json.string());
  }
  if (!a.dump_logits.empty()) dump_logits(cfg.model, params, fs::absolute(a.dump_logits));
}

// `fp8train export --help`.
constexpr const char* kExportHelp =
    "write a run's FP32 master weights (its checkpoint.pt) as a safetensors file.\n"
    "--names hf: Hugging Face's names and layouts (GPT-2 or LLaMA, from the run's config) and a config.json\n"
    "beside the file, so transformers' from_pretrained(folder) loads it. model.init_from reads either kind back.\n"
    "An existing file is replaced only with --overwrite; the run folder's own files never are.\n"
    "Exit codes: 0 ok, 2 bad input (no run folder or checkpoint, a model with no HF counterpart, an --out that is a\n"
    "folder, exists without --overwrite or is one of the run folder's files).";

}  // namespace

void add_export_command(CLI::App& app) {
  auto [cmd, args] = add_args_command<ExportArgs>(app, "export", kExportHelp, run_export);
  cmd->add_option("--run", args->run_dir, "the run folder (<out_dir>/<run_name>)")->required();
  cmd->add_option("--out", args->out, "the safetensors file to write, e.g. export/model.safetensors")->required();
  cmd->add_option("--names", args->names, "fp8train (default) | hf");
  cmd->add_option("--dtype", args->dtype, "fp32 (default) | bf16");
  cmd->add_flag("--overwrite", args->overwrite, "replace --out (and config.json, --dump-logits) if they exist");
  cmd->add_option("--dump-logits", args->dump_logits,
                  "also write the FP32 logits of fixed tokens ((7t + 3) % vocab, t < seq_len) and the tokens to this\n"
                  "safetensors file (to compare with another framework; tests/cli/test_export.sh)");
}

}  // namespace app
}  // namespace fp8t
