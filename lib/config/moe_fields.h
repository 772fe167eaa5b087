// The `moe` section's keys (a mixture-of-experts MLP, lib/model/moe_model.h) and their rules. The
// entries join the field table of fields.cpp after the model's keys; kept here so that the table
// file stays readable and the MoE schema reads in one place.
#pragma once

#include <vector>  // std::vector

#include "lib/config/experiment.h"  // ExperimentConfig, RouterScore, LoadBalance
#include "lib/config/fields.h"      // Field
#include "lib/config/loader.h"      // ConfigSources

namespace fp8t {
namespace config {

// Appends the moe.* entries to the field table, in print order.
void add_moe_fields(std::vector<Field>& table);

// The rules between the moe keys and the rest of the config (validate.cpp calls it): the expert
// widths and counts the grouped FP8 GEMMs and the router need, with the key that breaks them.
void check_moe_rules(const ExperimentConfig& c, const ConfigSources& s);

const char* to_string(RouterScore v);
const char* to_string(LoadBalance v);

}  // namespace config
}  // namespace fp8t
