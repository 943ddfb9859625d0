--- glimpse.nn.pointer -- nn.Pointer, the pointer network's output layer (Vinyals et al. 2015).
local glimpse = require "glimpse"
local check = require "glimpse.check"
local options = require "glimpse.options"
local att = require "glimpse.attention"
local capture = require "glimpse.attention.capture"
local base = require "glimpse.nn.module"
local Linear = require("glimpse.nn.linear").Linear

local Module, uniform = base.Module, base.uniform

local M = {}

-- ---------------------------------------------------------------------------------------
-- nn.Pointer

local Pointer = Module:extend("Pointer")
M.Pointer = Pointer

Pointer.options = options.declare("nn.Pointer", {
  {"query", "int", nil, range = {1}, required = true, help = "query width Dq"},
  {"key", "int", nil, range = {1}, help = "key width Dk (default: query)"},
  {"hidden", "int", nil, range = {1}, help = "hidden width H of the score (default: key)"},
  {"logit_clip", "number", 0, range = {0}, help = "C > 0: u <- C tanh(u) (Bello et al. use " ..
                                              "10); 0: off"},
})

--- nn.Pointer{query=Dq, key=Dk, hidden=H, logit_clip=0} -> module
-- u_j = v^T tanh(W1 k_j + W2 q) over input positions j (Vinyals et al. 2015, eq. 3); the
-- output distribution is softmax(u) over the positions that are neither padding nor already
-- chosen.  Forward: logits (B,L) (invalid positions at -1e9: feed them to cross_entropy),
-- probs (B,L) (exactly 0 at invalid positions), state =
--   ptr(query (B,Dq), keys (B,L,Dk), mask (B,L) or nil, chosen (B,L) or nil, state or nil)
-- logit_clip = C > 0: u_j <- C tanh(u_j) (Bello et al. 2016 use C = 10), which bounds how
-- sure the pointer can be; 0: off (the paper's).
function Pointer:init(opts)
  local cls = "nn.Pointer"
  if type(opts) ~= "table" then
    check.fail(3, "%s: expected an options table {query=, key=, hidden=}", cls)
  end
  local o = Pointer.options:check(opts, 3)
  local dq = o.query
  local dk = o.key or dq
  local dh = o.hidden or dk
  self.query_size, self.key_size, self.hidden_size = dq, dk, dh
  self.key_proj = Linear(dk, dh, {bias = false})     -- W1
  self.query_proj = Linear(dq, dh, {bias = false})   -- W2
  self.v = uniform({dh}, 1 / math.sqrt(dh))
  local c = o.logit_clip
  if c == math.huge then
    check.fail(3, "%s: option 'logit_clip' must be a finite number >= 0 (0: off), got %s", cls,
               tostring(c))
  end
  self.logit_clip = c
end

--- ptr:precompute(keys (B,L,Dk), mask) -> state (W1 k projected once per sequence)
function Pointer:precompute(keys, mask)
  if not glimpse.is_tensor(keys) or keys:dim() ~= 3 or keys.shape[3] ~= self.key_size then
    check.fail(2, "nn.Pointer: keys must be a (B,L,%d) tensor (key=%d), got %s", self.key_size,
               self.key_size, glimpse.is_tensor(keys) and "shape " .. check.shape(keys)
               or type(keys))
  end
  if mask ~= nil and not glimpse.is_tensor(mask) then mask = glimpse.tensor(mask) end
  if capture.active then capture.new_sequence(self) end
  return {keys = keys, mask = mask, uk = glimpse.linear(keys, self.key_proj.weight)}
end

function Pointer:forward(q, keys, mask, chosen, state)
  if keys == nil and state then keys, mask = state.keys, mask or state.mask end
  if not glimpse.is_tensor(q) or q:dim() ~= 2 or q.shape[2] ~= self.query_size then
    check.fail(2, "nn.Pointer: query must be a (B,%d) tensor (query=%d), got %s",
               self.query_size, self.query_size, glimpse.is_tensor(q) and
               "shape " .. check.shape(q) or type(q))
  end
  if not state or state.keys ~= keys then state = self:precompute(keys, mask) end
  local e = att.additive_scores(glimpse.linear(q, self.query_proj.weight), state.uk, self.v)
  if self.logit_clip > 0 then e = e:tanh() * self.logit_clip end
  local logits = att.pointer_logits(e, mask or state.mask, chosen)
  local probs = glimpse.softmax(logits, 2)
  if capture.active then capture.record_step(self, probs) end
  return logits, probs, state
end

--- Pointer.mark(chosen (B,L) or nil, idx (B,1) 1-based, B, L) -> chosen with idx set to 1
function Pointer.mark(chosen, idx, B, L)
  return glimpse.no_grad(function()
    chosen = chosen and chosen:detach() or glimpse.zeros(B, L)
    return chosen:scatter_add(2, idx, glimpse.ones(idx.shape[1], 1)):clamp(0, 1)
  end)
end

function Pointer:extra_repr()
  return string.format("query=%d, key=%d, hidden=%d%s", self.query_size, self.key_size,
                       self.hidden_size, self.logit_clip > 0 and (", logit_clip=" .. self.logit_clip) or "")
end

return M
