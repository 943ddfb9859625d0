--- glimpse.nn -- the Module system and the standard layers, one file per family under
-- glimpse/nn/:
--
--   module.lua      nn.Module (the class system), nn.is_module
--   containers.lua  nn.Sequential, nn.ModuleList
--   linear.lua      nn.Linear            embedding.lua  nn.Embedding
--   conv.lua        nn.Conv2d            pool.lua       nn.MaxPool2d, nn.AvgPool2d,
--   activation.lua  nn.ReLU, nn.Tanh,                   nn.AdaptiveAvgPool2d
--                   nn.Sigmoid, nn.Identity, nn.Flatten
--   dropout.lua     nn.Dropout           norm.lua       nn.LayerNorm, nn.BatchNorm1d/2d
--   rnn.lua         nn.RNNCell, nn.LSTMCell, nn.GRUCell, nn.RNN, nn.LSTM, nn.GRU
--   attention.lua   nn.Attention         multihead.lua  nn.MultiheadAttention
--   pointer.lua     nn.Pointer
--   transformer.lua nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.PositionalEncoding
--   transformer_cache.lua  the decoder layer's cached step (TransformerDecoderLayer:step)
--
-- Each file requires only glimpse.nn.module, glimpse.check, glimpse.options (and the
-- engine, glimpse.attention or glimpse.nn.weight_init), so any of them may be required on its
-- own (require "glimpse.nn.rnn") and gives the same classes as this table.  A layer with an
-- options table declares it once as Class.options.  A new family is one file plus one line.
local base = require "glimpse.nn.module"

local M = {Module = base.Module, is_module = base.is_module}

local FAMILIES = {
  "glimpse.nn.containers",
  "glimpse.nn.linear",
  "glimpse.nn.embedding",
  "glimpse.nn.conv",
  "glimpse.nn.pool",
  "glimpse.nn.activation",
  "glimpse.nn.dropout",
  "glimpse.nn.norm",
  "glimpse.nn.rnn",
  "glimpse.nn.attention",
  "glimpse.nn.multihead",
  "glimpse.nn.pointer",
  "glimpse.nn.transformer",
  "glimpse.nn.transformer_cache",
}

for _, name in ipairs(FAMILIES) do
  for k, v in pairs(require(name)) do
    if M[k] ~= nil then error("glimpse.nn: " .. name .. " redefines nn." .. k) end
    M[k] = v
  end
end

return M
