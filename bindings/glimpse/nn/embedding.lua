--- glimpse.nn.embedding -- nn.Embedding, a lookup table of learned vectors.
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local init = require "glimpse.nn.weight_init"
local base = require "glimpse.nn.module"

local Module, param = base.Module, base.param

local M = {}

-- ---------------------------------------------------------------------------------------
-- Embedding: ids (...) of 1-based ids -> (..., d); weight (n, d) ~ N(0, 1)

local Embedding = Module:extend("Embedding")
M.Embedding = Embedding

Embedding.options = options.declare("nn.Embedding", {
  {"padding_idx", "int", nil, help = "a row (1-based; negative counts from the end) that " ..
                                     "starts at zero and gets no gradient"},
})

--- nn.Embedding(n, d, {padding_idx=nil}) -> module; ids (...) 1-based (tensor or table)
--- -> (..., d).  padding_idx (1-based; negative counts from the end) names a row that starts
--- at zero and never gets a gradient.
function Embedding:init(n, d, opts)
  check.int("nn.Embedding", "num_embeddings", n, 1, nil, 3)
  check.int("nn.Embedding", "embedding_dim", d, 1, nil, 3)
  local o = Embedding.options:check(opts, 3)
  self.num_embeddings, self.embedding_dim = n, d
  local pad = o.padding_idx
  if pad ~= nil then
    if pad == 0 or pad > n or pad < -n then
      check.fail(3, "nn.Embedding: padding_idx must be an integer in 1..%d (or -%d..-1), got %s",
                 n, n, tostring(pad))
    end
    if pad < 0 then pad = n + pad + 1 end
  end
  self.padding_idx = pad
  self.weight = init.normal_(param(n, d), 0, 1)
  if pad then glimpse.no_grad(function() self.weight[pad] = 0 end) end
end

function Embedding:forward(ids)
  return glimpse.embedding(self.weight, ids, self.padding_idx)
end

function Embedding:extra_repr()
  local s = string.format("%d, %d", self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ", padding_idx=" .. self.padding_idx end
  return s
end

return M
