// Serialized TensorBoard Event messages (event.proto). This is the only code that uses
// protobuf; it is built as its own library (fp8t_tensorboard) so that the rest of fp8train
// compiles without protobuf. Without protobuf at build time the library holds
// event_encoder_none.cpp instead, where encoder_available() is false.
#pragma once

#include <cstdint>  // int64_t
#include <string>   // std::string
#include <utility>  // std::pair
#include <vector>   // std::vector

namespace fp8t::run::tensorboard {

// Whether this build can encode events (it was built with protobuf).
bool encoder_available();

// The first record of an event file: Event{wall_time, file_version: "brain.Event:2"}.
std::string encode_file_version(double wall_time);

// Event{wall_time, step, summary: one simple_value per (tag, value)}.
std::string encode_scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values);

// Event{wall_time, step, session_log: START}: TensorBoard then drops what earlier files logged
// for later steps (a resumed run continues from its checkpoint's step).
std::string encode_session_start(double wall_time, int64_t step);

}  // namespace fp8t::run::tensorboard
