--- glimpse.nn.embedding -- nn.Embedding, a lookup table of learned vectors.
local glimpse = require "glimpse"
local init = require "glimpse.nn.weight_init"
local base = require "glimpse.nn.module"

local Module = base.Module
local check_int, opts_of, param = base.check_int, base.opts_of, base.param

local M = {}

-- ---------------------------------------------------------------------------------------
-- Embedding: ids (...) of 1-based ids -> (..., d); weight (n, d) ~ N(0, 1)

local Embedding = Module:extend("Embedding")
M.Embedding = Embedding

--- nn.Embedding(n, d, {padding_idx=nil}) -> module; ids (...) 1-based (tensor or table)
--- -> (..., d).  padding_idx (1-based; negative counts from the end) names a row that starts
--- at zero and never gets a gradient.
function Embedding:init(n, d, opts)
  check_int(n, "num_embeddings", "Embedding", 1, 3)
  check_int(d, "embedding_dim", "Embedding", 1, 3)
  opts = opts_of(opts, "Embedding")
  self.num_embeddings, self.embedding_dim = n, d
  local pad = opts.padding_idx
  if pad ~= nil then
    if math.type(pad) ~= "integer" or pad == 0 or pad > n or pad < -n then
      error(string.format("Embedding: padding_idx must be an integer in 1..%d (or -%d..-1), " ..
                          "got %s", n, n, tostring(pad)), 2)
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
