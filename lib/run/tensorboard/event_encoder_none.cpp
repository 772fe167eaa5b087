// event_encoder.h for a build without protobuf: no events can be encoded. TensorBoardWriter
// checks encoder_available() first and reports a bad-input error, so these are never reached.
#include "lib/run/tensorboard/event_encoder.h"

#include <stdexcept>  // std::logic_error

namespace fp8t::run::tensorboard {

bool encoder_available() { return false; }

std::string encode_file_version(double) { throw std::logic_error("built without protobuf"); }

std::string encode_scalars(double, int64_t, const std::vector<std::pair<std::string, float>>&) {
  throw std::logic_error("built without protobuf");
}

std::string encode_session_start(double, int64_t) { throw std::logic_error("built without protobuf"); }

}  // namespace fp8t::run::tensorboard
