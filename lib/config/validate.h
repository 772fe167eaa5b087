// Validation of a resolved ExperimentConfig: the range of every numeric key (from the field
// table) and the rules that tie keys together (heads divide the width, warmup fits in the run,
// a text source needs a file, ...). Throws one fp8t::Error(kBadInput) for the first problem,
// naming the key and where its value came from (`sources`).
#pragma once

#include "lib/config/experiment.h"  // ExperimentConfig
#include "lib/config/loader.h"      // ConfigSources

namespace fp8t {
namespace config {

void validate(const ExperimentConfig& config, const ConfigSources& sources = ConfigSources());

}  // namespace config
}  // namespace fp8t
