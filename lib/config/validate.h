// Validation of a resolved ExperimentConfig: the range of every numeric key (from the field
// table) and the rules that tie keys together (heads divide the width, warmup fits in the run,
// a text source needs a file, ...). Throws one fp8t::Error(kBadInput) for the first problem,
// naming the key and where its value came from (`sources`).
#pragma once

#include "lib/config/experiment.h"  // ExperimentConfig
#include "lib/config/loader.h"      // ConfigSources, ConfigUse

namespace fp8t {
namespace config {

// `use` kPlan: a memory plan, which reads no data (data.train_path may be empty).
void validate(const ExperimentConfig& config, const ConfigSources& sources = ConfigSources(),
              ConfigUse use = ConfigUse::kTrain);

}  // namespace config
}  // namespace fp8t
