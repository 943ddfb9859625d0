--- glimpse.models -- the model zoo: the CNN encoders (models/encoders.lua: SmallCNN, VGG,
-- ResNet, vgg16, resnet18, ..., encoder, preprocess, fill_deterministic_) and the models
-- built on them, each in its own file under glimpse/models/ and published here by name:
--
--   models.Captioner   models/captioner.lua   Show, Attend and Tell (also glimpse.captioner)
--   models.Seq2Seq     models/seq2seq.lua     encoder-decoder with any nn.Attention score/mode
--   models.PointerNet  models/pointer.lua     Ptr-Net for any pointing problem (sort, convex hull, TSP are presets)
--   models.NTM         models/ntm.lua         Neural Turing Machine (and its LSTM baseline)
--   models.Transformer models/transformer.lua Transformer encoder-decoder (Vaswani et al.)
--   models.eval        models/eval.lua        evaluators over a model's :decode
--   models.caption_eval  models/caption_eval.lua  a captioner's test measures (BLEU, in box)
--
-- A new model is one file returning a table with its class, and one line in MODELS below.
local M = {}

for k, v in pairs(require "glimpse.models.encoders") do M[k] = v end

local MODELS = {
  Captioner = "glimpse.models.captioner",
  Seq2Seq = "glimpse.models.seq2seq",
  PointerNet = "glimpse.models.pointer",
  NTM = "glimpse.models.ntm",
  Transformer = "glimpse.models.transformer",
}

for name, file in pairs(MODELS) do
  if M[name] ~= nil then error("glimpse.models: " .. file .. " redefines models." .. name) end
  M[name] = require(file)[name]
end

M.eval = require "glimpse.models.eval"
M.caption_eval = require "glimpse.models.captioner.eval"

return M
