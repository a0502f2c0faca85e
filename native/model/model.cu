// The whole model (model.h): every part built once from the weights.
#include "kokoro/model.h"

namespace kokoro {

Model::Model(const ModelConfig& cfg, const DeviceWeights& weights)
    : albert(cfg, weights),
      text_encoder(cfg, weights),
      bert_encoder(weights, "bert_encoder", cfg.bert_hidden, cfg.hidden_dim),
      predictor(cfg, weights),
      decoder(cfg, weights),
      generator(cfg, weights) {}

}  // namespace kokoro
